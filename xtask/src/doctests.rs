//! `cargo test --workspace --all-features`, watched: its output is passed through, and afterwards
//! every Rust block of the book must appear among the doctests that passed.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, Result, bail};

use crate::markdown;

/// Totals over every `test result:` line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub ignored: usize,
}

/// Runs `cargo test --workspace --all-features` (so the PostgreSQL backend's tests run too),
/// echoing its output, then checks the book's blocks all ran.
///
/// It runs in two parts. The unit and integration tests come first, with no `LAB_POSTGRES_URL`
/// set, so the PostgreSQL tests start and remove their own throwaway cluster. The doctests,
/// which include every Rust block of the book, run second, with `LAB_POSTGRES_URL` pointing at
/// the server `postgres_url` names, so the PostgreSQL chapter's example runs against a real
/// server.
pub fn cargo_test(root: &Path, postgres_url: Option<&str>) -> Result<Counts> {
    let mut lines = run_and_echo(root, &["--lib", "--bins", "--tests"], None)?;
    lines.extend(run_and_echo(root, &["--doc"], postgres_url)?);
    let ran = passed_book_doctests(&lines);
    let mut missing = Vec::new();
    for chapter in markdown::chapters(root)? {
        let name = chapter
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for block in chapter.rust_blocks() {
            if !ran.contains(&(name.clone(), block.line)) {
                missing.push(format!("{}:{}", chapter.path.display(), block.line));
            }
        }
    }
    if !missing.is_empty() {
        bail!(
            "these Rust blocks of the book did not pass as doctests under cargo test (is the chapter listed in lab/src/book.rs?):\n  {}",
            missing.join("\n  ")
        );
    }
    Ok(counts(&lines))
}

/// `cargo test --workspace --all-features` with `targets`, its output echoed and returned.
fn run_and_echo(root: &Path, targets: &[&str], postgres_url: Option<&str>) -> Result<Vec<String>> {
    let mut command = crate::cargo();
    command
        .args(["test", "--workspace", "--all-features", "--color", "never"])
        .args(targets)
        .current_dir(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    match postgres_url {
        Some(url) => command.env(crate::postgres::URL_VARIABLE, url),
        None => command.env_remove(crate::postgres::URL_VARIABLE),
    };
    let mut child = command.spawn().context("starting cargo test")?;
    let stdout = child.stdout.take().context("cargo test's output")?;
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        lines.push(line);
    }
    let status = child.wait()?;
    if !status.success() {
        bail!(
            "cargo test --workspace --all-features {} failed ({status})",
            targets.join(" ")
        );
    }
    Ok(lines)
}

/// (chapter file name, line) for every passed doctest that comes from a book chapter. rustdoc names
/// them `lab/src/../../src/NAME.md - book::Item (line N) ... ok`.
fn passed_book_doctests(lines: &[String]) -> HashSet<(String, usize)> {
    lines
        .iter()
        .filter_map(|line| {
            let rest = line.strip_prefix("test ")?.strip_suffix(" ... ok")?;
            let (path, rest) = rest.split_once(".md - ")?;
            let name = format!("{}.md", path.rsplit('/').next()?);
            let number = rest.rsplit_once("(line ")?.1.strip_suffix(')')?;
            Some((name, number.parse().ok()?))
        })
        .collect()
}

fn counts(lines: &[String]) -> Counts {
    let mut total = Counts::default();
    for line in lines {
        let Some(rest) = line.strip_prefix("test result: ") else {
            continue;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(kind), Some(number)) = (words.next(), words.next()) else {
                continue;
            };
            let number: usize = number.parse().unwrap_or(0);
            match kind {
                "passed" => total.passed += number,
                "failed" => total.failed += number,
                "ignored" => total.ignored += number,
                _ => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn book_doctests_are_recognised_by_file_and_line() {
        let lines: Vec<String> = [
            "test lab/src/../../src/lost-reply.md - book::LostReply (line 5) ... ok",
            "test lab/src/../../src/limits.md - book::Limits (line 9) ... FAILED",
            "test lab/src/key.rs - key::OperationKey (line 50) ... ok",
        ]
        .map(String::from)
        .to_vec();
        let ran = passed_book_doctests(&lines);
        assert_eq!(ran, HashSet::from([("lost-reply.md".to_owned(), 5)]));
    }

    #[test]
    fn result_lines_are_added_up() {
        let lines: Vec<String> = [
            "test result: ok. 17 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s",
            "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            counts(&lines),
            Counts {
                passed: 20,
                failed: 2,
                ignored: 1
            }
        );
    }
}
