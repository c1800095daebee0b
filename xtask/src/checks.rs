//! Checks over the book's sources that no compiler makes: fence labels, includes and their anchors,
//! prose carried over word for word from the seed documents, and figures typed into the prose
//! (`numbers.rs`), and functions too long to hold (`lengths.rs`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::markdown::{self, Chapter};

/// How many consecutive words shared with a seed document count as copied.
pub const COPIED_RUN: usize = 12;

/// Runs every check and reports all problems at once.
pub fn all(root: &Path) -> Result<()> {
    let chapters = markdown::chapters(root)?;
    let mut problems = Vec::new();
    for chapter in &chapters {
        problems.extend(fence_problems(chapter));
        problems.extend(include_problems(root, chapter));
    }
    problems.extend(fence_label_list_problems(&chapters));
    problems.extend(source_anchor_problems(&root.join("lab/src"))?);
    problems.extend(copied_prose(root, &seeds_folder(root), &chapters)?);
    problems.extend(crate::numbers::problems(
        &chapters,
        book_complete_required(),
    ));
    problems.extend(crate::claims::problems(root)?);
    problems.extend(crate::sentences::problems(root, &chapters));
    let glossary = root.join("src/glossary.md");
    let glossary = std::fs::read_to_string(&glossary)
        .with_context(|| format!("reading {}", glossary.display()))?;
    problems.extend(glossary_problems(&glossary));
    problems.extend(crate::facts::problems(root)?);
    problems.extend(crate::lengths::problems(&crate::lengths::measure(root)?));
    problems.extend(crate::bench::stale(root)?);
    problems.extend(crate::layers::problems(root)?);
    if problems.is_empty() {
        Ok(())
    } else {
        bail!(
            "{} problem(s) in the book's sources:\n  {}",
            problems.len(),
            problems.join("\n  ")
        )
    }
}

/// `LAB_REQUIRE_BOOK_COMPLETE=1` (CI sets it): a chapter on a PENDING list (`numbers::PENDING`,
/// `copyable::PENDING`) is a failure, not a loud skip, so the book cannot land half-converted.
pub fn book_complete_required() -> bool {
    std::env::var("LAB_REQUIRE_BOOK_COMPLETE").is_ok_and(|v| v == "1")
}

/// The chapter that lists the fence labels, and the words its sentence starts with.
const FENCE_LIST_CHAPTER: &str = "src/testing.md";
const FENCE_LIST_SENTENCE: &str = "Fences for other languages carry their own label:";

/// The book's list of fence labels (the sentence in `src/testing.md`) against the labels its
/// chapters use: every label other than Rust's (`rust`, `rs`, explained on their own) is listed,
/// and the list names none that no chapter uses, so the list cannot drift from the book.
pub fn fence_label_list_problems(chapters: &[Chapter]) -> Vec<String> {
    let Some(testing) = chapters
        .iter()
        .find(|c| c.path == Path::new(FENCE_LIST_CHAPTER))
    else {
        return vec![format!(
            "{FENCE_LIST_CHAPTER}: not among the book's chapters"
        )];
    };
    let Some((line, sentence)) = testing.text.lines().enumerate().find_map(|(index, line)| {
        line.split_once(FENCE_LIST_SENTENCE)
            .map(|(_, rest)| (index + 1, rest))
    }) else {
        return vec![format!(
            "{FENCE_LIST_CHAPTER}: no line holds {FENCE_LIST_SENTENCE:?}, the list of fence labels"
        )];
    };
    let listed: std::collections::BTreeSet<&str> = sentence.split('`').skip(1).step_by(2).collect();
    let mut used: std::collections::BTreeMap<&str, String> = std::collections::BTreeMap::new();
    for chapter in chapters {
        for fence in &chapter.fences {
            let label = fence.language();
            if !["", "rust", "rs"].contains(&label) {
                used.entry(label)
                    .or_insert_with(|| format!("{}:{}", chapter.path.display(), fence.line));
            }
        }
    }
    let mut problems = Vec::new();
    for (label, at) in &used {
        if !listed.contains(label) {
            problems.push(format!(
                "{FENCE_LIST_CHAPTER}:{line}: the list of fence labels leaves out `{label}`, \
                 which {at} uses: add it to the list"
            ));
        }
    }
    for label in &listed {
        if !used.contains_key(label) {
            problems.push(format!(
                "{FENCE_LIST_CHAPTER}:{line}: the list of fence labels names `{label}`, which \
                 no chapter uses: take it out of the list"
            ));
        }
    }
    problems
}

/// Fences: every one labelled; Rust blocks run (no `ignore`, no `no_run`) and start with the
/// `extern crate` line `mdbook test` needs; `rs` blocks hold nothing but includes from the lab.
pub fn fence_problems(chapter: &Chapter) -> Vec<String> {
    let mut problems = Vec::new();
    let at = |line: usize| format!("{}:{line}", chapter.path.display());
    for fence in &chapter.fences {
        match fence.language() {
            "" if fence.indented => problems.push(format!(
                "{}: an indented code block (rustdoc compiles it as Rust): make it a labelled fence",
                at(fence.line)
            )),
            "" => problems.push(format!(
                "{}: unlabelled fence (label it `text`, `sh`, `json`, ...; an unlabelled fence is compiled as Rust)",
                at(fence.line)
            )),
            "rust" => {
                if let Some(attr) = fence.attributes().find(|a| ["ignore", "no_run"].contains(a)) {
                    problems.push(format!("{}: a Rust block marked `{attr}`: book code must run", at(fence.line)));
                }
                if fence.body.iter().any(|l| l.contains("{{#")) {
                    problems.push(format!(
                        "{}: a Rust block holds a `{{{{#...}}}}` directive: blocks must compile as written",
                        at(fence.line)
                    ));
                }
                let first = fence.body.iter().find(|l| !l.trim().is_empty());
                if first.map(|l| l.trim()) != Some("# extern crate lab;") {
                    problems.push(format!(
                        "{}: a Rust block must begin with the hidden line `# extern crate lab;`",
                        at(fence.line)
                    ));
                }
            }
            "rs" => {
                let is_include = |line: &str| {
                    let line = line.trim();
                    line.starts_with("{{#include ../lab/") && line.ends_with("}}")
                };
                let stray = fence.body.iter().any(|l| !l.trim().is_empty() && !is_include(l));
                if stray || fence.body.iter().all(|l| l.trim().is_empty()) {
                    problems.push(format!(
                        "{}: an `rs` block may only hold `{{{{#include ../lab/...}}}}` lines (code shown from the lab is included, never copied)",
                        at(fence.line)
                    ));
                }
            }
            _ => {}
        }
    }
    problems
}

/// An `{{#include path:anchor}}` (or `rustdoc_include`) directive.
struct Include {
    line: usize,
    path: String,
    anchor: Option<String>,
}

fn includes(text: &str) -> Vec<Include> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(start) = rest.find("{{#") {
            let escaped = rest[..start].ends_with('\\');
            let after = &rest[start + 3..];
            let Some(end) = after.find("}}") else { break };
            let directive = &after[..end];
            rest = &after[end + 2..];
            let Some(target) = directive
                .strip_prefix("include ")
                .or_else(|| directive.strip_prefix("rustdoc_include "))
            else {
                continue;
            };
            if escaped {
                continue;
            }
            let target = target.trim();
            let (path, anchor) = match target.split_once(':') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target, None),
            };
            // Line ranges (`file:3:9`) are not anchors.
            let anchor = anchor.filter(|a| !a.chars().next().is_some_and(|c| c.is_ascii_digit()));
            found.push(Include {
                line: index + 1,
                path: path.to_owned(),
                anchor: anchor.map(str::to_owned),
            });
        }
    }
    found
}

/// Includes must name an existing file and, when they name an anchor, one that opens, closes and
/// holds something. mdBook itself silently includes nothing for a misspelled anchor.
pub fn include_problems(root: &Path, chapter: &Chapter) -> Vec<String> {
    let folder = root.join(chapter.path.parent().unwrap_or(Path::new("")));
    includes(&chapter.text)
        .into_iter()
        .filter_map(|include| {
            let at = format!("{}:{}", chapter.path.display(), include.line);
            let file = folder.join(&include.path);
            let Ok(source) = std::fs::read_to_string(&file) else {
                return Some(format!(
                    "{at}: includes {}, which does not exist",
                    include.path
                ));
            };
            let anchor = include.anchor?;
            anchor_body(&source, &anchor)
                .err()
                .map(|why| format!("{at}: anchor `{anchor}` in {}: {why}", include.path))
        })
        .collect()
}

/// The lines between `ANCHOR: name` and `ANCHOR_END: name`, or why there are none.
fn anchor_body(source: &str, anchor: &str) -> Result<Vec<String>, String> {
    let marks = |kind: &str| -> Vec<usize> {
        source
            .lines()
            .enumerate()
            .filter(|(_, line)| anchor_name(line, kind) == Some(anchor))
            .map(|(i, _)| i)
            .collect()
    };
    let (starts, ends) = (marks("ANCHOR"), marks("ANCHOR_END"));
    match (starts.as_slice(), ends.as_slice()) {
        ([], _) => Err("missing".to_owned()),
        (_, []) => Err("opened but never closed".to_owned()),
        ([start], [end]) if start < end => {
            let body: Vec<String> = source
                .lines()
                .skip(start + 1)
                .take(end - start - 1)
                .filter(|line| !line.contains("ANCHOR"))
                .map(str::to_owned)
                .collect();
            if body.iter().all(|line| line.trim().is_empty()) {
                Err("empty".to_owned())
            } else {
                Ok(body)
            }
        }
        ([start], [end]) => Err(format!(
            "closed on line {} before it opens on line {}",
            end + 1,
            start + 1
        )),
        _ => Err("opened or closed more than once".to_owned()),
    }
}

/// `name` when `line` holds `KIND: name` as mdBook writes anchors (in a comment).
fn anchor_name<'l>(line: &'l str, kind: &str) -> Option<&'l str> {
    let marker = format!("{kind}:");
    let position = line.find(&marker)?;
    // "ANCHOR:" also occurs inside "ANCHOR_END:"; only accept the exact marker.
    if kind == "ANCHOR" && line[..position].ends_with('_') {
        return None;
    }
    line[position + marker.len()..].split_whitespace().next()
}

/// Every anchor opened in the lab's sources is closed once, and every close has an opening.
pub fn source_anchor_problems(folder: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for file in crate::lengths::rust_files(folder)? {
        let source = std::fs::read_to_string(&file)?;
        let mut names: Vec<&str> = source
            .lines()
            .filter_map(|line| {
                anchor_name(line, "ANCHOR").or_else(|| anchor_name(line, "ANCHOR_END"))
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            if let Err(why) = anchor_body(&source, name) {
                problems.push(format!("{}: anchor `{name}`: {why}", file.display()));
            }
        }
    }
    Ok(problems)
}

/// Lower-cased words: letters and digits, everything else a separator. Web addresses are left out:
/// citing the same page as a seed is not copying its prose.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .flat_map(|token| {
            match token.find("http") {
                Some(at)
                    if token[at..].starts_with("http://")
                        || token[at..].starts_with("https://") =>
                {
                    &token[..at]
                }
                _ => token,
            }
            .split(|c: char| !c.is_alphanumeric())
        })
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Where the seed documents are: `LAB_SEEDS_DIR`, or `../shared/seeds` beside the repository.
fn seeds_folder(root: &Path) -> PathBuf {
    std::env::var_os("LAB_SEEDS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared/seeds"))
}

/// Runs of [`COPIED_RUN`] words that a book file shares with a seed document. Without the seeds the
/// check is skipped loudly, and fails when `LAB_REQUIRE_SEEDS=1` (CI sets it).
pub fn copied_prose(root: &Path, folder: &Path, chapters: &[Chapter]) -> Result<Vec<String>> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        if std::env::var("LAB_REQUIRE_SEEDS").is_ok_and(|v| v == "1") {
            bail!(
                "LAB_REQUIRE_SEEDS=1 but the seed documents are not at {}",
                folder.display()
            );
        }
        eprintln!(
            "\n*** SKIPPED: the copied-prose check: no seed documents at {} (set LAB_SEEDS_DIR) ***\n",
            folder.display()
        );
        return Ok(Vec::new());
    };
    let mut seen = HashSet::new();
    for entry in entries {
        let text = std::fs::read_to_string(entry?.path())?;
        for run in words(&text).windows(COPIED_RUN) {
            seen.insert(run.join(" "));
        }
    }
    let mut texts: Vec<(String, String)> = chapters
        .iter()
        .map(|c| (c.path.display().to_string(), c.text.clone()))
        .collect();
    for name in ["SOURCES.md", "README.md", "ARCHITECTURE.md"] {
        if let Ok(text) = std::fs::read_to_string(root.join(name)) {
            texts.push((name.to_owned(), text));
        }
    }
    Ok(texts
        .iter()
        .filter_map(|(name, text)| {
            words(text)
                .windows(COPIED_RUN)
                .map(|run| run.join(" "))
                .find(|run| seen.contains(run))
                .map(|run| {
                    format!("{name}: copies {COPIED_RUN} words from a seed document: \"{run}\"")
                })
        })
        .collect())
}

/// The terms the glossary must define: the book leans on them before it explains them.
pub const GLOSSARY_TERMS: &[&str] = &[
    "Calibration",
    "Group commit",
    "Intention",
    "Point",
    "Promise",
    "Savepoint",
    "Sub-check",
    "Target file",
];

/// The anchor of a glossary term: lower case, every run of other characters a dash.
pub fn glossary_anchor(term: &str) -> String {
    let mut anchor = String::new();
    for c in term.chars() {
        if c.is_ascii_alphanumeric() {
            anchor.push(c.to_ascii_lowercase());
        } else if !anchor.ends_with('-') {
            anchor.push('-');
        }
    }
    anchor.trim_matches('-').to_owned()
}

/// The term a glossary line opens, when it opens an entry (`**Term.**` at its start).
pub fn glossary_term(line: &str) -> Option<&str> {
    line.strip_prefix("**")?
        .split_once(".**")
        .map(|(term, _)| term)
}

/// The glossary's entries (`**Term.**` at the start of a line) out of alphabetical order, without
/// their anchor line, and the
/// [`GLOSSARY_TERMS`] it lacks.
pub fn glossary_problems(text: &str) -> Vec<String> {
    let terms: Vec<&str> = text.lines().filter_map(glossary_term).collect();
    let mut problems = Vec::new();
    for pair in terms.windows(2) {
        if pair[0].to_lowercase() > pair[1].to_lowercase() {
            problems.push(format!(
                "src/glossary.md: \"{}\" comes before \"{}\"; keep the entries alphabetical",
                pair[0], pair[1]
            ));
        }
    }
    // Each entry has an anchor of its own, its term in lower case with dashes, so a chapter can
    // link a term's first use to its entry.
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let Some(term) = glossary_term(line) else {
            continue;
        };
        let anchor = format!("<a id=\"{}\"></a>", glossary_anchor(term));
        if i == 0 || lines[i - 1].trim() != anchor {
            problems.push(format!(
                "src/glossary.md: \"{term}\" lacks the line {anchor} just before it"
            ));
        }
    }
    for wanted in GLOSSARY_TERMS {
        if !terms.contains(wanted) {
            problems.push(format!("src/glossary.md: no entry for \"{wanted}\""));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markdown::fences;

    #[test]
    fn the_glossary_is_alphabetical_and_complete() {
        let text = std::fs::read_to_string(crate::root().join("src/glossary.md")).unwrap();
        let problems = glossary_problems(&text);
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn a_glossary_out_of_order_or_missing_a_term_is_refused() {
        // The negative control: two entries swapped, and the required terms absent.
        let text = "# Glossary\n\n<a id=\"scope\"></a>\n**Scope.**\nA.\n\n\
                    <a id=\"adapter\"></a>\n**Adapter.**\nB.\n";
        let problems = glossary_problems(text);
        assert!(
            problems[0].contains("\"Scope\" comes before \"Adapter\""),
            "{problems:?}"
        );
        assert_eq!(problems.len(), 1 + GLOSSARY_TERMS.len(), "{problems:?}");
        // An entry without its anchor line, or with another's, is refused too.
        let text = "<a id=\"adapter\"></a>\n**Adapter.**\nA.\n\n<a id=\"scope\"></a>\n\
                    **Busy timeout.**\nB.\n\n**Scope.**\nC.\n";
        let problems = glossary_problems(text);
        assert!(
            problems
                .iter()
                .any(|p| p.contains("\"Busy timeout\" lacks the line <a id=\"busy-timeout\"></a>"))
                && problems.iter().any(|p| p.contains("\"Scope\" lacks")),
            "{problems:?}"
        );
        assert_eq!(glossary_anchor("BEGIN IMMEDIATE"), "begin-immediate");
        assert_eq!(glossary_anchor("sf-string"), "sf-string");
    }

    fn chapter(text: &str) -> Chapter {
        Chapter {
            path: PathBuf::from("src/test.md"),
            text: text.to_owned(),
            fences: fences(text),
        }
    }

    #[test]
    fn the_books_list_of_fence_labels_is_the_labels_its_chapters_use() {
        let chapters = markdown::chapters(&crate::root()).unwrap();
        let problems = fence_label_list_problems(&chapters);
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn a_fence_label_missing_from_the_list_or_listed_unused_is_reported() {
        let testing = Chapter {
            path: PathBuf::from(FENCE_LIST_CHAPTER),
            ..chapter(&format!(
                "{FENCE_LIST_SENTENCE} `text` or `sql`.\n\n```text\nx\n```\n"
            ))
        };
        let other = chapter("```yaml\na: b\n```\n\n```rust\nfn main() {}\n```\n");
        let problems = fence_label_list_problems(&[testing, other]);
        assert_eq!(
            problems,
            [
                "src/testing.md:1: the list of fence labels leaves out `yaml`, which \
                 src/test.md:1 uses: add it to the list",
                "src/testing.md:1: the list of fence labels names `sql`, which no chapter \
                 uses: take it out of the list",
            ]
        );
    }

    #[test]
    fn an_unlabelled_fence_is_reported_with_its_line() {
        let problems = fence_problems(&chapter("# T\n\n```\nplain\n```\n"));
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with("src/test.md:3: unlabelled fence"),
            "{problems:?}"
        );
    }

    #[test]
    fn an_ignored_rust_block_and_a_missing_extern_line_are_reported() {
        let problems = fence_problems(&chapter(
            "```rust,ignore\n# extern crate lab;\n```\n\n```rust\nfn main() {}\n```\n",
        ));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("marked `ignore`"));
        assert!(problems[1].starts_with("src/test.md:5:"));
    }

    #[test]
    fn an_rs_block_with_copied_code_is_reported() {
        let ok = fence_problems(&chapter(
            "```rs\n{{#include ../lab/src/sqlite.rs:create}}\n```\n",
        ));
        assert!(ok.is_empty(), "{ok:?}");
        let copied = fence_problems(&chapter("```rs\nfn create() {}\n```\n"));
        assert_eq!(copied.len(), 1);
    }

    #[test]
    fn anchors_that_are_missing_empty_unclosed_or_reversed_are_reported() {
        let source = "// ANCHOR: good\nfn a() {}\n// ANCHOR_END: good\n// ANCHOR: empty\n\n// ANCHOR_END: empty\n// ANCHOR: open\nfn b() {}\n// ANCHOR_END: back\n// ANCHOR: back\n";
        assert_eq!(anchor_body(source, "good").unwrap(), ["fn a() {}"]);
        assert_eq!(anchor_body(source, "empty").unwrap_err(), "empty");
        assert_eq!(
            anchor_body(source, "open").unwrap_err(),
            "opened but never closed"
        );
        assert!(
            anchor_body(source, "back")
                .unwrap_err()
                .starts_with("closed on line 9")
        );
        assert_eq!(anchor_body(source, "nowhere").unwrap_err(), "missing");
    }

    #[test]
    fn includes_of_missing_files_and_anchors_are_reported() {
        let scratch = tempfile_root();
        let root = scratch.path();
        std::fs::write(
            root.join("lab/src/a.rs"),
            "// ANCHOR: here\nfn x() {}\n// ANCHOR_END: here\n",
        )
        .unwrap();
        let text = "```rs\n{{#include ../lab/src/a.rs:here}}\n{{#include ../lab/src/a.rs:hree}}\n{{#include ../lab/src/b.rs}}\n```\n\\{{#include ../lab/src/zzz.rs}}\n";
        let problems = include_problems(root, &chapter(text));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("src/test.md:3: anchor `hree`"));
        assert!(problems[1].contains("b.rs, which does not exist"));
    }

    fn tempfile_root() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("lab/src")).unwrap();
        std::fs::create_dir_all(root.path().join("src")).unwrap();
        root
    }

    #[test]
    fn twelve_shared_words_count_as_copied_and_eleven_do_not() {
        let scratch = tempfile_root();
        let root = scratch.path();
        let seeds = root.join("seeds");
        std::fs::create_dir_all(&seeds).unwrap();
        std::fs::write(
            seeds.join("seed.txt"),
            "one two three four five six seven eight nine ten eleven twelve thirteen",
        )
        .unwrap();
        let copied = copied_prose(
            root,
            &seeds,
            &[chapter(
                "One, two: three four five six seven eight nine ten eleven TWELVE.",
            )],
        )
        .unwrap();
        let fine = copied_prose(
            root,
            &seeds,
            &[chapter(
                "one two three four five six seven eight nine ten eleven zwölf",
            )],
        )
        .unwrap();
        assert_eq!(copied.len(), 1);
        assert!(fine.is_empty(), "{fine:?}");
    }

    #[test]
    fn the_repository_passes_every_check() {
        all(&crate::root()).unwrap();
    }
}
