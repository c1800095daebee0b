//! Terms before their explanation (issue 38). Read in the order of `src/SUMMARY.md`, the book
//! uses each glossary term first where it is explained: its first use links to the term's glossary entry, or falls
//! in a chapter that explains it (one the entry itself links to, or one [`EXPLAINED`] lists with
//! why). A word the glossary defines but a chapter uses in its everyday sense ("the point of
//! the scenario") is listed in [`OTHER_SENSE`] with the phrase, so it is not taken for the term.
//!
//! Read from the rendered book, as `words.rs` reads it: each page's `<main>`, without diagrams,
//! code (blocks and inline), tables (the timelines and figures), headings (a heading announces
//! what the text under it explains), the text of links to other chapters (a chapter's title, or
//! a pointer to where a thing is explained) and tags. A term matches case-insensitively as whole words, plurals included.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{Context, Result};
use regex::Regex;

/// A chapter that explains a term where it first uses it, though the term is not linked there:
/// `(term, chapter, how)`.
pub const EXPLAINED: &[(&str, &str, &str)] = &[
    (
        "Lost reply",
        "introduction.md",
        "its opening story is one: the server saves the ticket, the reply is lost on its way back",
    ),
    (
        "Operation key",
        "introduction.md",
        "the sentence that first uses it says what it is: it names the one action the caller intends",
    ),
    (
        "Busy timeout",
        "performance-details.md",
        "the sentence that first uses it says what it sets: how long a connection waits for the \
         write lock, then what happens when the time runs out",
    ),
    (
        "Retention",
        "idempotency.md",
        "the retention promise says it: a record replays while it is retained, and only after the \
         published retention may its key create again",
    ),
];

/// An everyday use of a word the glossary defines: `(term, chapter, phrase)`. The phrase is
/// left out of the chapter's text before the term is looked for; a phrase not found is an error.
pub const OTHER_SENSE: &[(&str, &str, &str)] = &[
    (
        "Replay",
        "experiment.md",
        "The operation the scenarios replay is",
    ),
    (
        "Promise",
        "operation-key.md",
        "only if the service promises this",
    ),
];

/// One glossary entry: its term, its anchor, and the chapters its text links to.
#[derive(Debug)]
pub struct Entry {
    pub term: String,
    pub anchor: String,
    pub explained_in: Vec<String>,
}

/// The entries of `src/glossary.md`'s text, in order.
pub fn entries(glossary: &str) -> Vec<Entry> {
    let link = Regex::new(r"\]\(([a-z0-9-]+\.md)").unwrap();
    let mut entries: Vec<Entry> = Vec::new();
    for line in glossary.lines() {
        if let Some(term) = crate::checks::glossary_term(line) {
            entries.push(Entry {
                term: term.to_owned(),
                anchor: crate::checks::glossary_anchor(term),
                explained_in: Vec::new(),
            });
        }
        if let Some(entry) = entries.last_mut() {
            for chapter in link.captures_iter(line) {
                entry.explained_in.push(chapter[1].to_owned());
            }
        }
    }
    entries
}

/// The text of a rendered page as this check reads it, each link to a glossary entry replaced by
/// a marker that names the entry's anchor (`\u{1}anchor\u{1}`).
pub fn page_text(html: &str) -> String {
    let mut text = crate::words::main_without(
        html,
        &[
            "svg", "script", "style", "pre", "code", "table", "h1", "h2", "h3", "h4", "h5", "h6",
        ],
    );
    let glossary_link =
        Regex::new(r#"(?s)<a\b[^>]*href="(?:\.\./)*glossary\.html#([^"]+)"[^>]*>.*?</a>"#).unwrap();
    text = glossary_link
        .replace_all(&text, " \u{1}$1\u{1} ")
        .into_owned();
    // A link to another chapter names that chapter (or points into it): its text is not a use.
    let chapter_link =
        Regex::new(r#"(?s)<a\b[^>]*href="[a-z0-9./-]*\.html(?:#[^"]*)?"[^>]*>.*?</a>"#).unwrap();
    text = chapter_link.replace_all(&text, " ").into_owned();
    let tags = Regex::new(r"(?s)<[^>]*>").unwrap();
    let text = tags.replace_all(&text, " ");
    text.replace("&amp;", "&")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace('\u{2019}', "'")
        .replace(['\u{201c}', '\u{201d}'], "\"")
}

/// The pattern of a term's uses: its words, case-insensitive, as whole words, plural included.
fn term_pattern(term: &str) -> Regex {
    let words: Vec<String> = term.split_whitespace().map(regex::escape).collect();
    Regex::new(&format!(r"(?i)\b{}(?:s|es)?\b", words.join(r"\s+"))).unwrap()
}

/// The problems of the book's `pages` (`(chapter, text as [`page_text`] reads it)`, in
/// order) against the glossary's `entries`, with the given lists of exceptions.
pub fn problems_in(
    entries: &[Entry],
    pages: &[(String, String)],
    explained: &[(&str, &str, &str)],
    other_sense: &[(&str, &str, &str)],
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut pages: Vec<(String, String)> = pages.to_vec();
    for (term, chapter, phrase) in other_sense {
        match pages.iter_mut().find(|(name, _)| name == chapter) {
            Some((_, text)) if text.contains(phrase) => {
                *text = text.replacen(phrase, " ", 1);
            }
            _ => problems.push(format!(
                "terms.rs OTHER_SENSE: {chapter} has no {phrase:?} (for {term:?}): remove the entry"
            )),
        }
    }
    let mut used_explained = HashSet::new();
    for entry in entries {
        let pattern = term_pattern(&entry.term);
        let marker = format!("\u{1}{}\u{1}", entry.anchor);
        for (chapter, text) in &pages {
            let used = pattern.find(text).map(|m| m.start());
            let linked = text.find(&marker);
            let Some(used) = used else {
                if linked.is_some() {
                    break;
                }
                continue;
            };
            if linked.is_some_and(|linked| linked < used) {
                break;
            }
            let listed = explained
                .iter()
                .position(|(term, at, _)| *term == entry.term && at == chapter);
            if let Some(index) = listed {
                used_explained.insert(index);
            } else if !entry.explained_in.contains(chapter) {
                // Sixty characters either side of the use, cut on character boundaries.
                let start = text[..used]
                    .char_indices()
                    .rev()
                    .nth(59)
                    .map_or(0, |(i, _)| i);
                let end = text[used..]
                    .char_indices()
                    .nth(60)
                    .map_or(text.len(), |(i, _)| used + i);
                let around = &text[start..end];
                problems.push(format!(
                    "{chapter}: {:?} is used before it is explained (\"...{}...\"): link this \
                     first use to glossary.md#{}, explain it here and list it in terms.rs \
                     EXPLAINED, or list an everyday use in OTHER_SENSE",
                    entry.term,
                    around.split_whitespace().collect::<Vec<_>>().join(" "),
                    entry.anchor
                ));
            }
            break;
        }
    }
    for (index, (term, chapter, _)) in explained.iter().enumerate() {
        if !used_explained.contains(&index) {
            problems.push(format!(
                "terms.rs EXPLAINED: {term:?} is not first used in {chapter}: remove the entry"
            ));
        }
    }
    problems
}

/// The problems of the rendered book under `root/book`: every chapter of `src/SUMMARY.md` in its
/// order, the glossary itself left out.
///
/// # Errors
/// The glossary, SUMMARY.md or a rendered page cannot be read.
pub fn problems(root: &Path) -> Result<Vec<String>> {
    let glossary =
        std::fs::read_to_string(root.join("src/glossary.md")).context("reading src/glossary.md")?;
    let summary =
        std::fs::read_to_string(root.join("src/SUMMARY.md")).context("reading src/SUMMARY.md")?;
    let mut pages = Vec::new();
    for (_, source) in crate::words::chapters_of(&summary) {
        if source == "glossary.md" {
            continue;
        }
        let page = root.join("book").join(source.replace(".md", ".html"));
        let html = std::fs::read_to_string(&page)
            .with_context(|| format!("reading {} (build the book first)", page.display()))?;
        pages.push((source, page_text(&html)));
    }
    Ok(problems_in(
        &entries(&glossary),
        &pages,
        EXPLAINED,
        OTHER_SENSE,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GLOSSARY: &str = "# Glossary\n\n<a id=\"replay\"></a>\n**Replay.**\nA saved answer.\n\
                            See [one key](operation-key.md#x).\n\n<a id=\"point\"></a>\n\
                            **Point.**\nOne contract point.\n";

    /// Asserts that `problems` is one, about `term` in `chapter`.
    fn one_problem(problems: &[String], chapter: &str, term: &str) {
        assert_eq!(problems.len(), 1, "{problems:?}");
        let start = format!("{chapter}: \"{term}\"");
        assert!(problems[0].starts_with(&start), "{problems:?}");
    }

    fn page(chapter: &str, html: &str) -> (String, String) {
        (
            chapter.to_owned(),
            page_text(&format!("<main>{html}</main>")),
        )
    }

    #[test]
    fn the_entries_know_their_anchors_and_the_chapters_they_link_to() {
        let entries = entries(GLOSSARY);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].anchor, "replay");
        assert_eq!(entries[0].explained_in, ["operation-key.md"]);
        assert!(entries[1].explained_in.is_empty());
    }

    #[test]
    fn a_term_used_before_its_explanation_is_named_and_a_linked_or_explained_one_is_not() {
        let entries = entries(GLOSSARY);
        // Used unlinked in the first chapter, before the chapter that explains it.
        let early = [
            page("intro.md", "<p>A retry replays the ticket.</p>"),
            page("operation-key.md", "<p>A replay is ...</p>"),
        ];
        let problems = problems_in(&entries, &early, &[], &[]);
        one_problem(&problems, "intro.md", "Replay");
        assert!(problems[0].contains("glossary.md#replay"), "{problems:?}");
        // Linked at its first use: fine, and later uses need nothing.
        let linked = [
            page(
                "intro.md",
                "<p>A retry <a href=\"glossary.html#replay\">replays</a> it; replays again.</p>",
            ),
            page("lost.md", "<p>One point.</p>"),
        ];
        one_problem(
            &problems_in(&entries, &linked, &[], &[]),
            "lost.md",
            "Point",
        );
        // Listed as explained there, or as an everyday sense: fine.
        let explained = [("Point", "lost.md", "the page says what a point is")];
        assert!(problems_in(&entries, &linked, &explained, &[]).is_empty());
        let other = [("Point", "lost.md", "One point.")];
        assert!(problems_in(&entries, &linked, &[], &other).is_empty());
        // Code, headings and diagrams are not prose.
        let code = [page(
            "intro.md",
            "<h2>Replay</h2><p><code>replay</code></p><pre>replay</pre><svg>replay</svg>",
        )];
        assert!(problems_in(&entries, &code, &[], &[]).is_empty());
    }

    #[test]
    fn an_exception_that_no_longer_applies_is_an_error() {
        let entries = entries(GLOSSARY);
        let pages = [page("intro.md", "<p>Nothing here.</p>")];
        let stale_explained = [("Point", "intro.md", "why")];
        let problems = problems_in(&entries, &pages, &stale_explained, &[]);
        assert!(problems[0].contains("EXPLAINED"), "{problems:?}");
        let stale_sense = [("Point", "intro.md", "the point of")];
        let problems = problems_in(&entries, &pages, &[], &stale_sense);
        assert!(problems[0].contains("OTHER_SENSE"), "{problems:?}");
    }
}
