//! `lab simulate`: what the command line asks for, run, and reported as text.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::evidence::AtomicFile;

use super::agent::agent_table;
use super::explore::{explore, find_counterexample};
use super::sweep::{sweep, sweep_table};
use super::variant::Variant;

/// The seed the book's counterexamples are found from.
pub const BOOK_SEED: u64 = 1;

/// How many histories the book's search may run per anti-pattern.
pub const BOOK_HISTORIES: u64 = 1000;

/// How many histories the book's run of the correct store shows.
pub const BOOK_CORRECT_HISTORIES: u64 = 300;

/// What `lab simulate` was asked to do.
#[derive(Clone, Debug)]
pub struct SimulateArgs {
    /// The first history's seed.
    pub seed: u64,
    /// How many histories to run.
    pub histories: u64,
    /// The tool to run against.
    pub variant: Variant,
    /// Run the fail-at-step-N sweep instead.
    pub sweep: bool,
    /// Write the book's counterexamples and sweep table into this folder instead.
    pub examples: Option<PathBuf>,
}

/// What the command prints, and whether it met its expectation.
#[derive(Debug)]
pub struct CommandReport {
    /// The report.
    pub text: String,
    /// Why the run failed, if it did: the correct store broke an invariant, or the checker missed
    /// an anti-pattern.
    pub failure: Option<Error>,
}

// ANCHOR: command
/// Runs what `args` asks for. The correct store passes when no history breaks an invariant; an
/// anti-pattern passes when the checker catches it.
///
/// # Errors
/// [`Error::InputInvalid`] for `--histories 0`; any error of the tool; an unwritable example file.
pub fn run_command(args: &SimulateArgs) -> Result<CommandReport> {
    if args.histories == 0 {
        return Err(Error::InputInvalid {
            subject: "command line".to_owned(),
            problem: "--histories must be at least 1".to_owned(),
        });
    }
    if let Some(folder) = &args.examples {
        return write_examples(folder);
    }
    if args.sweep {
        let rows = sweep(args.variant)?;
        let broken = rows
            .iter()
            .filter(|r| !r.findings.violations.is_empty())
            .count();
        let text = format!(
            "fail-at-step-N sweep, variant {}: {} faults x 2 paths, {broken} with violations\n{}",
            args.variant,
            rows.len() / 2,
            sweep_table(&rows)
        );
        let failure = (broken > 0).then(|| failed("simulate --sweep", "no violation", broken));
        return Ok(CommandReport { text, failure });
    }
    let exploration = explore(args.variant, args.seed, args.histories)?;
    let found = exploration.failures.len();
    let failure = match args.variant {
        Variant::Correct if found > 0 => Some(failed("simulate", "no violation", found)),
        Variant::Correct => None,
        _ if found == 0 => Some(Error::ScenarioFailed {
            scenario: "simulate --variant",
            expected: format!("a violation within {} histories", args.histories),
            observed: "none found: the checker missed this anti-pattern".to_owned(),
        }),
        _ => None,
    };
    let mut text = format!(
        "{exploration}time taken: {:.1} s\n",
        exploration.elapsed.as_secs_f64()
    );
    if let Some(counterexample) = &exploration.counterexample {
        text.push_str(&format!("\n{counterexample}"));
    }
    Ok(CommandReport { text, failure })
}
// ANCHOR_END: command

fn failed(scenario: &'static str, expected: &str, histories: usize) -> Error {
    Error::ScenarioFailed {
        scenario,
        expected: expected.to_owned(),
        observed: format!("{histories} with violations"),
    }
}

/// The text of every file [`run_command`] writes for the book, by file name: one shrunk
/// counterexample per anti-pattern and the sweep table.
///
/// # Errors
/// Any error of a tool; [`Error::ScenarioFailed`] when an anti-pattern is not caught.
pub fn book_examples() -> Result<Vec<(String, String)>> {
    let correct = explore(Variant::Correct, BOOK_SEED, BOOK_CORRECT_HISTORIES)?;
    let mut files = vec![("correct.txt".to_owned(), correct.to_string())];
    for variant in Variant::ANTI_PATTERNS {
        let Some(found) = find_counterexample(variant, BOOK_SEED, BOOK_HISTORIES)? else {
            return Err(Error::ScenarioFailed {
                scenario: "simulate --examples",
                expected: format!("a violation of {variant} within {BOOK_HISTORIES} histories"),
                observed: "none found".to_owned(),
            });
        };
        files.push((format!("{variant}.txt"), found.to_string()));
    }
    files.push(("prompt.txt".to_owned(), agent_table()?));
    files.push((
        "sweep.txt".to_owned(),
        sweep_table(&sweep(Variant::Correct)?),
    ));
    Ok(files)
}

fn write_examples(folder: &Path) -> Result<CommandReport> {
    let files = book_examples()?;
    let mut text = String::new();
    for (name, content) in files {
        let path = folder.join(&name);
        AtomicFile::create(&path)?.commit(content.as_bytes())?;
        text.push_str(&format!("wrote {}\n", path.display()));
    }
    Ok(CommandReport {
        text,
        failure: None,
    })
}
