//! The number check: every figure in the book's prose comes from a run or carries its source.
//!
//! The check reads each chapter as the reader meets its prose: code blocks, inline code, link and
//! image addresses, HTML tags, list numbering and every `{{#...}}` directive (whose output the
//! preprocessor produces from a run) are left out. Whatever digits remain were typed by a person,
//! and each must match one entry of [`ALLOWED`], every entry with its reason. A token that mixes
//! letters and digits (`k7`, `v1`, `E0277`, `SHA-256`, `UTF-8`) is a name, not a figure, and passes.
//!
//! An outside figure goes through `{{#lab-outside TEXT | SOURCE}}` (see `figures.rs`), which prints
//! TEXT with a link to its SOURCE beside it, so it cannot appear without one.

use std::sync::LazyLock;

use regex::Regex;

use crate::markdown::{self, Chapter};

/// Typed digits the book may keep, each with why it is not a figure that needs a run or a source.
/// Keep it short: a new entry needs a reason a reviewer accepts.
pub const ALLOWED: &[(&str, &str)] = &[
    (r"\bRFC \d+", "the name of a standard, not a quantity"),
    (
        r"\b[Ss]ections? \d+(\.\d+)*",
        "a place in a cited document, beside its link",
    ),
    (
        r"\bHTTP/\d(\.\d)?",
        "the name of a protocol version, not a quantity",
    ),
    (
        r"\b[1-5]\d\d (Continue|OK|Created|Accepted|No Content|Bad Request|Unauthorized|Forbidden|Not Found|Conflict|Gone|Content Too Large|Payload Too Large|Unprocessable Content|Unprocessable Entity|Too Many Requests|Internal Server Error|Service Unavailable|Gateway Timeout|Request Timeout|Precondition Failed|Unsupported Media Type)\b",
        "an HTTP status code with its reason phrase: part of the contract the lab implements",
    ),
    (
        r"\b(exit )?status(es)? \d+((, \d+)*,? (and|or) \d+)?",
        "an exit or HTTP status the lab's contract defines, named by its number",
    ),
];

/// Chapters still being rewritten on another branch: their typed digits are printed, loudly, and
/// do not fail the check; a chapter on this list with none left fails it, so the list only shrinks.
pub const PENDING: &[&str] = &[];

static ALLOWED_RES: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    ALLOWED
        .iter()
        .map(|(pattern, _)| Regex::new(pattern).expect("the allow-list patterns are valid"))
        .collect()
});

static STRIP: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // Directives: the preprocessor fills them from runs (or, for lab-outside, with a source).
        r"\\?\{\{#[^}]*\}\}",
        // Inline code (a double-backtick span first, then single).
        r"``[^`]+``",
        r"`[^`]+`",
        // HTML comments and tags.
        r"<!--.*?-->",
        r"</?[A-Za-z][^>]*>",
        // Link and image addresses; the link text stays, it is prose.
        r"\]\([^)]*\)",
        r"\]\[[^\]]*\]",
        r"https?://\S+",
        // Ordered-list numbering is the list's, not a figure.
        r"^\s*\d+[.)]\s",
    ]
    .iter()
    .map(|p| Regex::new(p).expect("the strip patterns are valid"))
    .collect()
});

static REFERENCE_DEFINITION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*\[[^\]]+\]:\s*\S+").expect("the pattern is valid"));

/// The prose of one line, with everything that is not typed prose removed.
fn prose(line: &str) -> String {
    if REFERENCE_DEFINITION.is_match(line) {
        return String::new();
    }
    let mut text = line.to_owned();
    for re in STRIP.iter() {
        text = re.replace_all(&text, " ").into_owned();
    }
    for re in ALLOWED_RES.iter() {
        text = re.replace_all(&text, " ").into_owned();
    }
    text
}

/// Typed figures in a chapter: `path:line: `token``, one problem per token.
pub fn typed_figures(chapter: &Chapter) -> Vec<String> {
    // Code blocks and multi-line HTML comments are not prose (a one-line comment is stripped
    // with the other HTML below).
    let mut not_prose = vec![false; chapter.text.lines().count() + 1];
    let blocks = chapter.fences.iter().map(|f| (f.line, f.end_line));
    let comments = markdown::comment_lines(&chapter.text)
        .into_iter()
        .filter(|(first, last)| first < last);
    for (first, last) in blocks.chain(comments) {
        let last = last.min(not_prose.len() - 1);
        for flag in &mut not_prose[first - 1..=last - 1] {
            *flag = true;
        }
    }
    let mut problems = Vec::new();
    for (index, line) in chapter.text.lines().enumerate() {
        if not_prose[index] {
            continue;
        }
        for token in prose(line).split_whitespace() {
            let token = token.trim_matches(|c: char| !c.is_alphanumeric());
            let has_digit = token.chars().any(|c| c.is_ascii_digit());
            let has_letter = token.chars().any(char::is_alphabetic);
            if has_digit && !has_letter {
                problems.push(format!(
                    "{}:{}: `{token}` is typed in the prose: fill it with a `{{{{#lab-...}}}}` \
                     directive from a run, give an outside figure its source with \
                     `{{{{#lab-outside TEXT | SOURCE}}}}`, or add a reasoned entry to numbers::ALLOWED",
                    chapter.path.display(),
                    index + 1
                ));
            }
        }
    }
    problems
}

/// Every chapter's typed figures, split into failures and the pending chapters' (printed). With
/// `required` (`LAB_REQUIRE_BOOK_COMPLETE=1`, as CI sets it) the pending chapters' figures fail too.
pub fn problems(chapters: &[Chapter], required: bool) -> Vec<String> {
    problems_with(chapters, PENDING, required)
}

fn problems_with(chapters: &[Chapter], pending: &[&str], required: bool) -> Vec<String> {
    let (mut failing, waiting) = split(chapters, pending);
    if !waiting.is_empty() {
        println!(
            "\n!!!!!!!! PENDING: {} typed figure(s) in chapters still being rewritten (numbers::PENDING); {} !!!!!!!!",
            waiting.len(),
            if required {
                "LAB_REQUIRE_BOOK_COMPLETE=1, so they fail this run"
            } else {
                "they do not fail this run (CI sets LAB_REQUIRE_BOOK_COMPLETE=1, and there they fail)"
            }
        );
        for problem in &waiting {
            let short = problem.split(" is typed").next().unwrap_or(problem);
            println!("pending: {short}");
        }
        if required {
            failing.extend(waiting.into_iter().map(|p| {
                format!("{p} (its chapter is on numbers::PENDING, and LAB_REQUIRE_BOOK_COMPLETE=1)")
            }));
        }
    }
    failing
}

fn split(chapters: &[Chapter], pending: &[&str]) -> (Vec<String>, Vec<String>) {
    let mut failing = Vec::new();
    let mut waiting = Vec::new();
    for chapter in chapters {
        let name = chapter.path.display().to_string();
        let found = typed_figures(chapter);
        if pending.contains(&name.as_str()) {
            if found.is_empty() {
                failing.push(format!(
                    "{name}: has no typed figures now: remove it from numbers::PENDING"
                ));
            }
            waiting.extend(found);
        } else {
            failing.extend(found);
        }
    }
    (failing, waiting)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markdown::fences;
    use std::path::PathBuf;

    fn chapter(path: &str, text: &str) -> Chapter {
        Chapter {
            path: PathBuf::from(path),
            text: text.to_owned(),
            fences: fences(text),
        }
    }

    #[test]
    fn a_typed_figure_is_named_by_chapter_and_line() {
        let text = "# T\n\nThe runs took 10 to 20 percent longer.\n";
        let problems = typed_figures(&chapter("src/a.md", text));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with("src/a.md:3: `10` is typed"),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("src/a.md:3: `20` is typed"),
            "{problems:?}"
        );
    }

    #[test]
    fn figures_from_directives_code_links_and_names_pass() {
        let text = "# T\n\n\
            It made {{#lab-value scenarios.naive_retry.tickets}} tickets; `count == 2`.\n\
            Stripe keeps keys {{#lab-outside for 24 hours | https://docs.stripe.com/api/idempotent_requests}}.\n\
            See [the docs](https://example.org/v2/page?id=42) and <https://example.org/3>.\n\
            Key `k7` for release v1 is refused with 409 Conflict, per RFC 9110 section 15.5.10.\n\
            Exits with status 2; SHA-256 and UTF-8 are names; HTTP/1.1 is a protocol.\n\
            1. A numbered list item\n\
            <!-- a comment with 99 -->\n\n\
            ```text\nran 1000 times\n```\n\n\
            [ref]: https://example.org/7\n";
        let problems = typed_figures(&chapter("src/b.md", text));
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn on_two_cores_and_a_typed_float_fail() {
        let text = "Measured on 2 cores: 0.73 ms per call.\n";
        let problems = typed_figures(&chapter("src/c.md", text));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[1].contains("`0.73`"), "{problems:?}");
    }

    #[test]
    fn pending_chapters_wait_only_while_they_have_typed_figures() {
        let dirty = chapter("src/theirs.md", "It took 5 days.\n");
        let clean = chapter("src/theirs.md", "It took a while.\n");
        let (failing, waiting) = split(&[dirty], &["src/theirs.md"]);
        assert!(failing.is_empty() && waiting.len() == 1);
        let (failing, _) = split(&[clean], &["src/theirs.md"]);
        assert!(
            failing[0].contains("remove it from numbers::PENDING"),
            "{failing:?}"
        );
        let (failing, _) = split(&[chapter("src/mine.md", "It took 5 days.\n")], &[]);
        assert_eq!(failing.len(), 1);
    }

    #[test]
    fn a_pending_chapter_fails_when_the_book_must_be_complete() {
        let dirty = chapter("src/theirs.md", "It took 5 days.\n");
        let pending = ["src/theirs.md"];
        assert!(problems_with(std::slice::from_ref(&dirty), &pending, false).is_empty());
        let failing = problems_with(&[dirty], &pending, true);
        assert_eq!(failing.len(), 1, "{failing:?}");
        assert!(
            failing[0].contains("LAB_REQUIRE_BOOK_COMPLETE=1"),
            "{failing:?}"
        );
    }

    #[test]
    fn every_allow_list_entry_has_a_reason_and_compiles() {
        for (pattern, reason) in ALLOWED {
            assert!(Regex::new(pattern).is_ok(), "{pattern}");
            assert!(
                reason.split_whitespace().count() >= 5,
                "{pattern}: {reason}"
            );
        }
        assert!(ALLOWED.len() <= 8, "the allow-list is meant to stay short");
    }
}
