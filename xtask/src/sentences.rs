//! Sentences of the kinds that went stale in the book without a digit changing: a count of
//! repeats ("sends again, at most ten times"), a superlative ("the largest burst"), and a claim
//! that no test does something ("no test stops `lab serve` in the middle of a write"). The
//! number check cannot see them, and a reader has no way to tell them from the rest.
//!
//! Every such sentence in a chapter's prose must be backed: by an entry of
//! [`crate::facts::FACTS`] (a fragment of the sentence and the code that makes it true), or by
//! an entry of [`REVIEWED`] that says why it holds and, for a claim about the tests, what
//! would falsify it (a text that no test file may contain). An entry that no longer matches
//! a sentence of its kind is a problem too, so the list cannot outlive the prose.

use std::path::Path;

use regex::Regex;

use crate::markdown::{self, Chapter};

/// A sentence checked by a reader, and why it is true.
#[derive(Debug, Clone, Copy)]
pub struct Reviewed {
    /// The chapter, relative to the repository root.
    pub chapter: &'static str,
    /// Text of the sentence (joined across line breaks).
    pub fragment: &'static str,
    /// Why it holds.
    pub why: &'static str,
    /// For a claim that no test does something: a text no file under `lab/tests/` may
    /// contain while the claim stands.
    pub no_test_contains: Option<&'static str>,
}

/// The risky sentences a reader has checked.
pub const REVIEWED: &[Reviewed] = &[
    Reviewed {
        chapter: "src/limits.md",
        fragment: "no test runs over a network other than loopback",
        why: "every server and client in the tests binds or dials 127.0.0.1 or ::1 (the machine allows nothing else)",
        no_test_contains: Some("0.0.0.0"),
    },
    Reviewed {
        chapter: "src/limits.md",
        fragment: "No test aims a kill between the ticket insert and the commit",
        why: "the crash tests kill `lab serve` at seeded random moments and the runner at its own pause points; the store has no pause point inside its transaction",
        no_test_contains: Some("LAB_SERVE_PAUSE_AT"),
    },
    Reviewed {
        chapter: "src/limits.md",
        fragment: "no test checks what survives a power loss",
        why: "no test can cut the power of the machine it runs on; the kills are of processes",
        no_test_contains: None,
    },
    Reviewed {
        chapter: "src/limits.md",
        fragment: "no test calls a provider's service",
        why: "the machine reaches registries only, and every service the tests call is started by them on loopback",
        no_test_contains: Some("https://api."),
    },
    Reviewed {
        chapter: "src/performance.md",
        fragment: "No test asserts on these numbers",
        why: "the figures come from `cargo xtask bench` into bench.json, which no test reads; the benchmarks print ratios measured side by side",
        no_test_contains: Some("read_to_string(\"bench.json"),
    },
    Reviewed {
        chapter: "src/limits.md",
        fragment: "not necessarily the smallest",
        why: "a caveat: the shrinker stops at a local minimum, and the chapter says no more",
        no_test_contains: None,
    },
    Reviewed {
        chapter: "src/performance.md",
        fragment: "one more level of the tree each time the table grows several hundred times",
        why: "a B-tree page of SQLite's default size holds hundreds of keys of this size; the figure is SQLite's file format, not a run of the lab",
        no_test_contains: None,
    },
    Reviewed {
        chapter: "src/testing.md",
        fragment: "a count of repeats (\"sends again, ten sends in all\"), a superlative",
        why: "it names the kinds of sentence this check looks for, quoting examples",
        no_test_contains: None,
    },
    Reviewed {
        chapter: "src/team-exercise.md",
        fragment: "then send two attempts at once",
        why: "an instruction to the team, not a count the lab reports",
        no_test_contains: None,
    },
    Reviewed {
        chapter: "src/decisions.md",
        fragment: "longer than the longest time a retry can take to arrive",
        why: "advice about the reader's own system, not a figure of the lab's",
        no_test_contains: None,
    },
    Reviewed {
        chapter: "src/limits.md",
        fragment: "longer than the longest time a retry can take to arrive",
        why: "advice about the reader's own system, not a figure of the lab's",
        no_test_contains: None,
    },
    Reviewed {
        chapter: "src/performance-details.md",
        fragment: "A sync to disk is the slowest thing either program does",
        why: "the strace counts and the durable rate in the same chapter come from the run that the sentence sums up",
        no_test_contains: None,
    },
];

/// The kinds of risky sentence, each with its pattern.
fn kinds() -> [(&'static str, Regex); 3] {
    let regex =
        |pattern: &str| Regex::new(pattern).unwrap_or_else(|err| panic!("{pattern}: {err}"));
    [
        (
            "a count of repeats",
            regex(
                r"(?i)\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|fifty|hundred|thousand|`\d+`) (?:more )?(?:times|sends|retries|attempts|tries|resends)\b",
            ),
        ),
        (
            "a superlative",
            regex(
                r"(?i)\bthe (?:largest|smallest|fastest|slowest|longest|shortest|biggest|highest|lowest)\b",
            ),
        ),
        (
            "a claim about what no test does",
            regex(r"(?i)\bno tests? [a-z]+s\b"),
        ),
    ]
}

/// The prose sentences of a chapter (code blocks and comments left out), each with the line
/// it begins on, its line breaks joined.
pub fn sentences(chapter: &Chapter) -> Vec<(usize, String)> {
    let mut not_prose = vec![false; chapter.text.lines().count() + 1];
    let blocks = chapter.fences.iter().map(|f| (f.line, f.end_line));
    for (first, last) in blocks.chain(markdown::comment_lines(&chapter.text)) {
        let last = last.min(not_prose.len() - 1);
        for flag in &mut not_prose[first - 1..=last - 1] {
            *flag = true;
        }
    }
    let mut found = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    let mut flush = |current: &mut String, start: usize| {
        if !current.trim().is_empty() {
            found.push((start, std::mem::take(current).trim().to_owned()));
        }
        current.clear();
    };
    for (index, line) in chapter.text.lines().enumerate() {
        let line = line.trim();
        if not_prose[index] || line.is_empty() || line.starts_with('|') || line.starts_with('#') {
            flush(&mut current, start);
            continue;
        }
        for word in line.split_whitespace() {
            if current.is_empty() {
                start = index + 1;
            }
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(word);
            if word.ends_with(['.', '?', '!']) || word.ends_with(".)") {
                flush(&mut current, start);
            }
        }
    }
    flush(&mut current, start);
    found
}

/// The risky sentences of `chapters` that nothing backs, and the entries that back nothing.
pub fn problems(root: &Path, chapters: &[Chapter]) -> Vec<String> {
    let kinds = kinds();
    let mut used = vec![false; REVIEWED.len()];
    let mut problems = Vec::new();
    for chapter in chapters {
        let name = chapter.path.to_string_lossy().into_owned();
        for (line, sentence) in sentences(chapter) {
            let Some((kind, _)) = kinds
                .iter()
                .find(|(_, pattern)| pattern.is_match(&sentence))
            else {
                continue;
            };
            let fact = crate::facts::FACTS
                .iter()
                .any(|fact| fact.chapter == name && sentence.contains(fact.sentence));
            let reviewed = REVIEWED
                .iter()
                .position(|entry| entry.chapter == name && sentence.contains(entry.fragment));
            if let Some(index) = reviewed {
                used[index] = true;
            }
            if !fact && reviewed.is_none() {
                problems.push(format!(
                    "{name}:{line}: {kind} that nothing backs: \"{sentence}\"; tie it to its code \
                     in xtask/src/facts.rs, or check it and add it to sentences::REVIEWED with why \
                     it holds"
                ));
            }
        }
    }
    for (entry, used) in REVIEWED.iter().zip(used) {
        if !used {
            problems.push(format!(
                "xtask/src/sentences.rs: REVIEWED names \"{}\" in {}, which no risky sentence \
                 there says any more: remove the entry",
                entry.fragment, entry.chapter
            ));
        }
    }
    problems.extend(falsified(root));
    problems
}

/// The reviewed claims about the tests that a test file now contradicts.
fn falsified(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    collect(&root.join("lab/tests"), &mut files);
    let mut problems = Vec::new();
    for entry in REVIEWED {
        let Some(text) = entry.no_test_contains else {
            continue;
        };
        if let Some(file) = files.iter().find(|(_, source)| source.contains(text)) {
            problems.push(format!(
                "{} says \"{}\", but {} contains `{text}`: the claim may no longer hold (it \
                 was reviewed as true because {})",
                entry.chapter,
                entry.fragment,
                file.0.display(),
                entry.why
            ));
        }
    }
    problems
}

/// Every test source under `folder` (Rust, Python, JavaScript, shell), outside installed
/// packages, with its text.
fn collect(folder: &Path, files: &mut Vec<(std::path::PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "node_modules" && name != ".venv" {
                collect(&path, files);
            }
        } else if path
            .extension()
            .is_some_and(|ext| ["rs", "py", "mjs", "js", "sh"].iter().any(|e| ext == *e))
            && let Ok(text) = std::fs::read_to_string(&path)
        {
            files.push((path, text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chapter(path: &str, text: &str) -> Chapter {
        Chapter {
            path: path.into(),
            text: text.to_owned(),
            fences: markdown::fences(text),
        }
    }

    #[test]
    fn the_sentences_that_slipped_before_are_each_caught() {
        // The three from issue 38, as the chapters said them.
        let slipped = chapter(
            "src/x.md",
            "A `409` means another request is in progress; `Remote` waits a fifth of a\n\
             second and sends again, at most ten times.\n\n\
             In this run, the largest one-key burst took long.\n\n\
             - The runner is killed, the service is not: no test stops `lab serve` in the middle of a write.\n",
        );
        let found = problems(Path::new("/nonexistent"), &[slipped]);
        let found: Vec<&String> = found.iter().filter(|p| p.starts_with("src/x.md")).collect();
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(
            found[0].starts_with("src/x.md:1: a count of repeats"),
            "{}",
            found[0]
        );
        assert!(
            found[1].starts_with("src/x.md:4: a superlative"),
            "{}",
            found[1]
        );
        assert!(found[2].contains("no test does"), "{}", found[2]);
    }

    #[test]
    fn code_tables_headings_and_other_words_are_not_sentences_of_a_kind() {
        let text = "```text\nsent ten times\n```\n\n| the largest | x |\n\n## Two retries\n\n\
                    It retries twice, has no test function of that name, and most of all once.\n";
        let found = problems(Path::new("/nonexistent"), &[chapter("src/y.md", text)]);
        assert!(
            found.iter().all(|p| !p.starts_with("src/y.md")),
            "{found:#?}"
        );
    }

    #[test]
    fn the_books_risky_sentences_are_all_backed_and_the_list_has_no_stale_entry() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let chapters = markdown::chapters(&root).unwrap();
        let found = problems(&root, &chapters);
        assert!(found.is_empty(), "{}", found.join("\n"));
    }
}
