//! Sentences about what the lab's tests and tools find, tied to their source.
//!
//! A figure typed in prose is refused by the number check, but a sentence such as "the baseline
//! accepts two failures" or "the client waits Retry-After seconds" goes stale without a digit
//! changing. Such sentences come from here in one of two ways:
//!
//! - a directive reads the source when the book builds: `{{#lab-schemathesis-baseline}}` lists the
//!   failures `lab/tests/clients/schemathesis-baseline.json` accepts (or says there are none), and
//!   `{{#lab-conformance-bugs}}` counts the mistakes the conformance tests switch on;
//! - [`FACTS`] pairs a sentence of a chapter with the text of the code it describes, and
//!   [`problems`] fails the build when either is gone, so the sentence cannot outlive the code,
//!   nor the entry its sentence.
//!
//! The same check reads the command line's help: every chapter it names as the book's "TITLE"
//! must be a chapter of `src/SUMMARY.md`.

use std::path::Path;

use anyhow::{Context, Result, bail};

/// The Schemathesis baseline, relative to the repository root.
const BASELINE: &str = "lab/tests/clients/schemathesis-baseline.json";
/// The conformance tests that switch each bug on.
const CONFORMANCE_TESTS: &str = "lab/tests/it/conformance/mod.rs";
/// The files whose help text may name chapters.
const HELP_FILES: &[&str] = &["lab/src/cli/mod.rs", "lab/src/main.rs"];

/// One sentence of the book and the code that makes it true.
#[derive(Debug, Clone, Copy)]
pub struct Fact {
    /// The chapter, relative to the repository root.
    pub chapter: &'static str,
    /// Text the chapter must contain (joined across line breaks).
    pub sentence: &'static str,
    /// The source file that backs it.
    pub source: &'static str,
    /// Text that file must contain for the sentence to be true.
    pub code: &'static str,
}

/// The book's sentences about the code that no run prints, each with the code that backs it.
pub const FACTS: &[Fact] = &[
    Fact {
        chapter: "src/performance-details.md",
        sentence: "a lone caller begins with a plain `BEGIN` (`create_read_first`",
        source: "lab/src/sqlite/writer.rs",
        code: "match transaction(db, \"BEGIN\", &[*call])",
    },
    Fact {
        chapter: "src/performance-details.md",
        sentence: "A caller that queued behind another begins with `BEGIN IMMEDIATE` (`commit_together`)",
        source: "lab/src/sqlite/writer.rs",
        code: "transaction(db, \"BEGIN IMMEDIATE\", batch)",
    },
    Fact {
        chapter: "src/http-boundary.md",
        sentence: "It waits as long as the answer's `Retry-After` asks, in seconds or as an HTTP date, cut to `MAX_RETRY_AFTER`",
        source: "lab/src/http/blocking.rs",
        code: "Some(wait.min(MAX_RETRY_AFTER))",
    },
    Fact {
        chapter: "src/http-boundary.md",
        sentence: "`Idempotent-Replayed`, is the name Stripe's API uses for it",
        source: "lab/src/http/wire.rs",
        code: "marks a replayed response (the name Stripe uses)",
    },
    Fact {
        chapter: "src/limits.md",
        sentence: "`lab mcp` has no retention option",
        source: "lab/src/cli/mcp.rs",
        code: "pub struct McpArgs",
    },
    Fact {
        chapter: "src/check-details.md",
        sentence: "`Remote` waits a fifth of a second",
        source: "lab/src/remote.rs",
        code: "Duration::from_millis(200)",
    },
    Fact {
        chapter: "src/check-details.md",
        // "at most ten times" was tied to this code and still wrong: SENDS counts every send.
        sentence: "sends again, ten sends in all",
        source: "lab/src/remote.rs",
        code: "pub const SENDS: u32 = 10;",
    },
];

/// Every fact whose sentence or code is missing under `root`, and every chapter the help names
/// that the book does not have.
///
/// # Errors
/// A chapter, source or SUMMARY.md cannot be read.
pub fn problems(root: &Path) -> Result<Vec<String>> {
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path)).with_context(|| format!("reading {path}"))
    };
    let mut problems = Vec::new();
    for fact in FACTS {
        problems.extend(check(fact, &read(fact.chapter)?, &read(fact.source)?));
    }
    // `lab mcp` growing a retention option makes the sentence about it false.
    let mcp = read("lab/src/cli/mcp.rs")?;
    if mcp.contains("retention") {
        problems.push(
            "src/limits.md says `lab mcp` has no retention option, but lab/src/cli/mcp.rs \
             mentions retention: rewrite the sentence and this check"
                .to_owned(),
        );
    }
    let summary = read("src/SUMMARY.md")?;
    for file in HELP_FILES {
        problems.extend(help_chapters(file, &read(file)?, &summary));
    }
    Ok(problems)
}

/// Joins a chapter's lines, so a sentence is found wherever its line breaks fall.
fn joined(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn check(fact: &Fact, chapter: &str, source: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !joined(chapter).contains(fact.sentence) {
        problems.push(format!(
            "{}: no longer says \"{}\"; update its entry in xtask/src/facts.rs",
            fact.chapter, fact.sentence
        ));
    }
    if !source.contains(fact.code) {
        problems.push(format!(
            "{} says \"{}\", but {} no longer contains `{}`: the sentence is stale",
            fact.chapter, fact.sentence, fact.source, fact.code
        ));
    }
    problems
}

/// The chapter titles `source`'s help names as `the book's "TITLE"` that SUMMARY.md lacks.
fn help_chapters(file: &str, source: &str, summary: &str) -> Vec<String> {
    let titles: Vec<&str> = summary
        .lines()
        .filter_map(|line| line.split_once('[')?.1.split_once(']'))
        .map(|(title, _)| title)
        .collect();
    let mut problems = Vec::new();
    for (index, line) in source.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("the book's \"") {
            let after = &rest[at + "the book's \"".len()..];
            let Some((named, tail)) = after.split_once('"') else {
                break;
            };
            if !titles.iter().any(|title| title.starts_with(named)) {
                problems.push(format!(
                    "{file}:{}: the help names the book's \"{named}\", which SUMMARY.md does not have",
                    index + 1
                ));
            }
            rest = tail;
        }
    }
    problems
}

/// `{{#lab-schemathesis-baseline}}`: the failures the baseline accepts, or that it accepts none.
///
/// # Errors
/// The baseline cannot be read or is not the JSON Schemathesis writes.
pub fn schemathesis_baseline(root: &Path) -> Result<String> {
    let text = std::fs::read_to_string(root.join(BASELINE))
        .with_context(|| format!("reading {BASELINE}"))?;
    baseline_sentence(&text)
}

fn baseline_sentence(text: &str) -> Result<String> {
    let json: serde_json::Value =
        serde_json::from_str(text).with_context(|| format!("{BASELINE} is not JSON"))?;
    let Some(entries) = json["entries"].as_array() else {
        bail!("{BASELINE} has no `entries` list");
    };
    if entries.is_empty() {
        return Ok(
            "it accepts no failure, so any failure Schemathesis finds fails the test".to_owned(),
        );
    }
    let listed: Vec<String> = entries
        .iter()
        .map(|entry| {
            let label = ["check", "reason", "operation"]
                .iter()
                .filter_map(|field| entry[*field].as_str())
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "`{}`",
                if label.is_empty() {
                    entry.to_string()
                } else {
                    label
                }
            )
        })
        .collect();
    Ok(format!(
        "it accepts {} failure{}: {}",
        listed.len(),
        if listed.len() == 1 { "" } else { "s" },
        listed.join("; ")
    ))
}

/// `{{#lab-conformance-bugs}}`: how many realistic mistakes the conformance tests switch on.
///
/// # Errors
/// The tests cannot be read or switch none on.
pub fn conformance_bugs(root: &Path) -> Result<String> {
    let text = std::fs::read_to_string(root.join(CONFORMANCE_TESTS))
        .with_context(|| format!("reading {CONFORMANCE_TESTS}"))?;
    let count = bug_names(&text).len();
    if count == 0 {
        bail!("{CONFORMANCE_TESTS} switches no bug on; the chapter's count would be empty");
    }
    Ok(count.to_string())
}

/// The distinct `Bug::Name`s other than `Bug::None` in `text`.
fn bug_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split("Bug::")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect::<String>()
        })
        .filter(|name| !name.is_empty() && name != "None")
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    const FACT: Fact = Fact {
        chapter: "src/x.md",
        sentence: "waits a fixed second",
        source: "lab/src/x.rs",
        code: "sleep(ONE_SECOND)",
    };

    #[test]
    fn a_fact_holds_when_both_its_sentence_and_its_code_are_there() {
        let chapter = "The client\nwaits a fixed\nsecond and retries.";
        assert!(check(&FACT, chapter, "fn f() { sleep(ONE_SECOND) }").is_empty());
    }

    #[test]
    fn changed_code_makes_the_sentence_stale() {
        // The negative control: the code now reads the header, the sentence stayed.
        let problems = check(&FACT, "waits a fixed second", "sleep(retry_after)");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("stale"), "{problems:?}");
    }

    #[test]
    fn a_rewritten_sentence_retires_its_entry() {
        let problems = check(
            &FACT,
            "waits as long as Retry-After says",
            "sleep(ONE_SECOND)",
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("no longer says"), "{problems:?}");
    }

    #[test]
    fn every_fact_of_the_book_holds() {
        let problems = problems(&crate::root()).unwrap();
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn help_that_names_a_missing_chapter_is_caught() {
        let summary = "- [The HTTP contract](http-boundary.md)\n- [Over MCP: the key](mcp.md)\n";
        let good =
            r#"/// Serve (see the book's "The HTTP contract"); also the book's "Over MCP" chapter"#;
        assert!(help_chapters("mod.rs", good, summary).is_empty());
        let stale = r#"/// Serve (see the book's "Across a real boundary")"#;
        let problems = help_chapters("mod.rs", stale, summary);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("Across a real boundary"));
    }

    #[test]
    fn the_baseline_sentence_follows_the_file() {
        let empty = r#"{"format_version": 1, "entries": []}"#;
        assert!(
            baseline_sentence(empty)
                .unwrap()
                .contains("accepts no failure")
        );
        let two = r#"{"entries": [{"check": "a", "operation": "GET /x"}, {"check": "b"}]}"#;
        let sentence = baseline_sentence(two).unwrap();
        assert!(sentence.starts_with("it accepts 2 failures"), "{sentence}");
        assert!(baseline_sentence("{}").is_err());
    }

    #[test]
    fn bugs_are_counted_once_each_and_the_correct_adapter_not_at_all() {
        let text = "Bug::None, Bug::GlobalKeys, Bug::IgnoresKey, Bug::GlobalKeys)";
        assert_eq!(bug_names(text), ["GlobalKeys", "IgnoresKey"]);
    }
}
