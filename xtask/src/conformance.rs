//! `{{#lab-conformance NAME}}`: the report of a conformance run, made while the book builds.
//!
//! `sqlite` runs the lab's store and shows the whole report; any other name runs the in-memory
//! adapter of the lab's tests with that bug switched on and shows what failed.

use std::fmt::Write as _;

use anyhow::{Result, bail};
use lab::conformance::{self, Report};

#[path = "../../lab/tests/it/conformance/memory.rs"]
#[allow(dead_code)] // the tests use more of it than the book
mod memory;

use memory::{Bug, Memory};

/// The bugs the book can show, by the name its directives use.
const BUGS: &[(&str, Bug)] = &[
    ("correct", Bug::None),
    ("global-keys", Bug::GlobalKeys),
    ("caller-only-scope", Bug::CallerOnlyScope),
    ("compares-received-text", Bug::ComparesReceivedText),
    ("compares-title-only", Bug::ComparesTitleOnly),
    ("accepts-changed-payload", Bug::AcceptsChangedPayload),
    ("replays-newest-ticket", Bug::ReplaysNewestTicket),
    ("reports-replay-as-created", Bug::ReportsReplayAsCreated),
    ("check-unlock-insert", Bug::CheckUnlockInsert),
    ("check-unlock-relock", Bug::CheckUnlockRelock),
    ("lost-reply-rolls-back", Bug::LostReplyRollsBack),
    ("ignores-key", Bug::IgnoresKey),
    ("merges-unkeyed-calls", Bug::MergesUnkeyedCalls),
    ("records-unkeyed-calls", Bug::RecordsUnkeyedCalls),
    ("keeps-ticket-on-failure", Bug::KeepsTicketOnFailure),
    ("ignores-fail-at", Bug::IgnoresFailAt),
    ("forget-keeps-the-record", Bug::ForgetKeepsTheRecord),
    ("ids-per-connection", Bug::IdsPerConnection),
];

/// The report for `name`, as a `text` block.
pub fn report(name: &str) -> Result<String> {
    let text = if name == "sqlite" {
        let report = conformance::run(lab::SqliteStore::temporary);
        if !report.passed() {
            bail!("the SQLite store failed its conformance run:\n{report}");
        }
        report.to_string()
    } else {
        let Some(&(_, bug)) = BUGS.iter().find(|(known, _)| *known == name) else {
            let known: Vec<&str> = BUGS.iter().map(|(known, _)| *known).collect();
            bail!(
                "lab-conformance: unknown adapter `{name}` (known: sqlite, {})",
                known.join(", ")
            );
        };
        let report = conformance::run(|| Ok(Memory::new(bug)));
        if bug != Bug::None && report.passed() {
            bail!("lab-conformance: the adapter `{name}` passed; its bug went unseen");
        }
        failures(&report)
    };
    Ok(format!("```text\n{text}\n```"))
}

/// The failed points and the summary: what a reader of a broken adapter's run needs.
fn failures(report: &Report) -> String {
    let mut out = String::new();
    for (point, failure) in report.failures() {
        let ids = lab::contract::label(lab::contract::Checker::Conformance, point.name);
        let _ = writeln!(out, "FAIL {} {ids}: {}", point.name, point.promise);
        let _ = writeln!(out, "     expected {}", failure.expected);
        let _ = writeln!(out, "     observed {}", failure.observed);
        let _ = writeln!(out, "     likely cause: {}", failure.likely_cause);
    }
    let failed = report.failures().count();
    let _ = write!(
        out,
        "conformance: {} passed, {failed} failed",
        report.points.len() - failed
    );
    out
}
