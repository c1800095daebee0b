//! `cargo xtask words`: how long each chapter of the book is as a reader sees it, counted from
//! the rendered book in `book/` (so every include is in and every generated figure filled), with
//! the diagrams' labels and the page chrome left out. The main path is Part I of
//! `src/SUMMARY.md`, with the introduction before it.
//!
//! Counted: the words of each page's `<main>` element, after removing `<svg>`, `<script>` and
//! `<style>` elements and every tag; a word is a run of characters between white space that
//! holds a letter or a digit. Code and the outputs shown count, as a reader reads them too; the
//! count of prose alone (without `<pre>` blocks) is printed beside it.

use std::path::Path;

use anyhow::{Context, Result, bail};
use regex::Regex;

/// The longest the main path may be, as rendered, in words (issue 38).
pub const MAIN_PATH_MOST: usize = 9_000;
/// The longest a chapter of the main path may be, as rendered, in words.
pub const CHAPTER_MOST: usize = 2_000;

/// One page of the book and its rendered length.
#[derive(Debug, PartialEq, Eq)]
pub struct Counted {
    /// Its part in SUMMARY.md (`Introduction` before the first part).
    pub part: String,
    /// The chapter's source, such as `lost-reply.md`.
    pub source: String,
    /// Words as rendered.
    pub words: usize,
    /// Words as rendered outside code blocks.
    pub prose: usize,
}

/// The chapters of `summary` in order, each with its part: `(part, source file)`.
pub fn chapters_of(summary: &str) -> Vec<(String, String)> {
    let mut part = "Introduction".to_owned();
    let mut found = Vec::new();
    for line in summary.lines() {
        if let Some(title) = line.strip_prefix("# ") {
            if title != "Summary" {
                part = title.trim().to_owned();
            }
            continue;
        }
        if line.trim() == "---" {
            part = "Appendices".to_owned();
            continue;
        }
        let Some((_, rest)) = line.split_once("](") else {
            continue;
        };
        let Some((file, _)) = rest.split_once(')') else {
            continue;
        };
        found.push((part.clone(), file.to_owned()));
    }
    found
}

/// The words of a rendered page, counted as the module says: `(all, prose without code
/// blocks)`.
pub fn rendered_words(html: &str) -> (usize, usize) {
    let all = words_without(html, &["svg", "script", "style"]);
    let prose = words_without(html, &["svg", "script", "style", "pre"]);
    (all, prose)
}

/// A rendered page's `<main>` element (the whole page when it has none), without the
/// `elements` named, each with all it holds; its other tags stay.
pub fn main_without(html: &str, elements: &[&str]) -> String {
    let main = match (html.find("<main>"), html.rfind("</main>")) {
        (Some(start), Some(end)) if start < end => &html[start..end],
        _ => html,
    };
    let mut text = main.to_owned();
    for element in elements {
        let pattern = Regex::new(&format!(r"(?s)<{element}\b.*?</{element}>")).unwrap();
        text = pattern.replace_all(&text, " ").into_owned();
    }
    text
}

fn words_without(html: &str, elements: &[&str]) -> usize {
    let text = main_without(html, elements);
    let tags = Regex::new(r"(?s)<[^>]*>").unwrap();
    let text = tags.replace_all(&text, " ");
    text.split_whitespace()
        .filter(|word| word.chars().any(char::is_alphanumeric))
        .count()
}

/// Every chapter of the rendered book under `root/book`, in SUMMARY.md's order.
///
/// # Errors
/// SUMMARY.md or a rendered page cannot be read (the book is not built).
pub fn count(root: &Path) -> Result<Vec<Counted>> {
    let summary =
        std::fs::read_to_string(root.join("src/SUMMARY.md")).context("reading src/SUMMARY.md")?;
    let mut counted = Vec::new();
    for (part, source) in chapters_of(&summary) {
        let page = root.join("book").join(source.replace(".md", ".html"));
        let html = std::fs::read_to_string(&page).with_context(|| {
            format!(
                "reading {} (build the book first: cargo xtask book)",
                page.display()
            )
        })?;
        let (words, prose) = rendered_words(&html);
        counted.push(Counted {
            part,
            words,
            prose,
            source,
        });
    }
    Ok(counted)
}

/// Whether a part is on the main path: the introduction and Part I.
pub fn on_main_path(part: &str) -> bool {
    part == "Introduction" || part.starts_with("Part I:")
}

/// Prints every chapter's length, the main path's total, and whether the targets are met.
///
/// # Errors
/// As [`count`].
pub fn run(root: &Path, terms: &[String]) -> Result<()> {
    report(
        root,
        std::env::var("LAB_REQUIRE_SHORT_MAIN_PATH").as_deref() == Ok("1"),
        terms,
    )
}

/// As [`run`], with `terms` the glossary's problems (`cargo xtask words` passes those the terms
/// check found); `required` makes a main path over its targets, or a term problem, an error
/// rather than a loud line.
fn report(root: &Path, required: bool, terms: &[String]) -> Result<()> {
    let counted = count(root)?;
    let (mut main_path, mut main_prose) = (0, 0);
    let mut over = Vec::new();
    println!("{:>6}  {:>6}  {:<32} part", "words", "prose", "chapter");
    for chapter in &counted {
        let main = on_main_path(&chapter.part);
        if main {
            main_path += chapter.words;
            main_prose += chapter.prose;
            if chapter.words > CHAPTER_MOST {
                over.push(format!("{} ({})", chapter.source, chapter.words));
            }
        }
        println!(
            "{:>6}  {:>6}  {:<32} {}{}",
            chapter.words,
            chapter.prose,
            chapter.source,
            chapter.part,
            if main { " (main path)" } else { "" }
        );
    }
    println!(
        "main path: {main_path} words as rendered, {main_prose} outside code blocks (target at most {MAIN_PATH_MOST}, and at most {CHAPTER_MOST} a chapter)"
    );
    for problem in terms {
        println!("!!!!!!!! {problem}");
    }
    if terms.is_empty() {
        println!("the book: every glossary term is explained or linked where it is first used");
    }
    if over.is_empty() && main_path <= MAIN_PATH_MOST && terms.is_empty() {
        println!("main path: within its targets");
        return Ok(());
    }
    let mut missed = Vec::new();
    if main_path > MAIN_PATH_MOST {
        missed.push(format!("the main path is {main_path} words"));
    }
    if !over.is_empty() {
        missed.push(format!("chapters over {CHAPTER_MOST}: {}", over.join(", ")));
    }
    if !terms.is_empty() {
        missed.push(format!(
            "terms used before they are explained: {}",
            terms.len()
        ));
    }
    let missed = missed.join("; ");
    if required {
        bail!("{missed}");
    }
    println!("!!!!!!!! the book misses its targets (issue 38): {missed} !!!!!!!!");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagrams_code_blocks_and_tags_are_left_out_and_inline_code_counts() {
        let html = "<nav>menu words here</nav><main><h1>The lost reply</h1>\
                    <p>A <code>key</code> names one action.</p>\
                    <svg><text>label one</text></svg><pre><code>let x = 1;</code></pre>\
                    <p>Two - words.</p></main><footer>x</footer>";
        // The, lost, reply, A, key, names, one, action., Two, words.; and let, x, =, 1; in code.
        assert_eq!(rendered_words(html), (13, 10));
    }

    #[test]
    fn a_main_path_over_its_targets_fails_when_required_and_names_the_chapter() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("src")).unwrap();
        std::fs::create_dir_all(root.path().join("book")).unwrap();
        std::fs::write(
            root.path().join("src/SUMMARY.md"),
            "# Summary\n\n[Introduction](introduction.md)\n\n# Part I: One\n\n- [Long](long.md)\n",
        )
        .unwrap();
        let page = |words: usize| format!("<main>{}</main>", "word ".repeat(words));
        std::fs::write(root.path().join("book/introduction.html"), page(10)).unwrap();
        std::fs::write(root.path().join("book/long.html"), page(CHAPTER_MOST + 1)).unwrap();
        let counted = count(root.path()).unwrap();
        assert_eq!(counted[1].words, CHAPTER_MOST + 1);
        let err = report(root.path(), true, &[]).unwrap_err().to_string();
        assert!(err.contains("long.md"), "{err}");
        // Not required: a loud line, not a failure.
        assert!(report(root.path(), false, &[]).is_ok());
        std::fs::write(root.path().join("book/long.html"), page(CHAPTER_MOST)).unwrap();
        assert!(report(root.path(), true, &[]).is_ok());
        // A term used before its explanation fails it too, when required.
        let terms = ["long.md: \"Replay\" is used before it is explained".to_owned()];
        let err = report(root.path(), true, &terms).unwrap_err().to_string();
        assert!(
            err.contains("terms used before they are explained: 1"),
            "{err}"
        );
        assert!(report(root.path(), false, &terms).is_ok());
    }

    #[test]
    fn the_summary_gives_each_chapter_its_part() {
        let summary = "# Summary\n\n[Introduction](introduction.md)\n\n# Part I: The failure\n\n\
                       - [The lost reply](lost-reply.md)\n\n# Part II: Contracts\n\n\
                       - [HTTP](http-boundary.md)\n\n---\n\n[Glossary](glossary.md)\n";
        let chapters = chapters_of(summary);
        assert_eq!(
            chapters,
            [
                ("Introduction".to_owned(), "introduction.md".to_owned()),
                ("Part I: The failure".to_owned(), "lost-reply.md".to_owned()),
                (
                    "Part II: Contracts".to_owned(),
                    "http-boundary.md".to_owned()
                ),
                ("Appendices".to_owned(), "glossary.md".to_owned()),
            ]
        );
        assert!(on_main_path(&chapters[1].0));
        assert!(!on_main_path(&chapters[2].0));
    }
}
