//! The acceptance test for an adapter: every point of the retry contract, each checked on its own
//! fresh tool, each reported passed or failed with what the contract expects, what the tool did
//! and the likely cause.
//!
//! The seven scenarios of [`suite`](crate::suite) stop at the first failure and were written to
//! show the contract, not to find bugs. This run checks each of them on its own and adds the
//! points they cannot see: scopes, canonical payloads, replays among many tickets, a fault at
//! every step, and many rounds of concurrent callers.
//!
//! `connect` must make a fresh, empty tool each time it is called (a new database, schema or
//! sandbox, or a reset one): every point starts from nothing.
//!
//! ```
//! use lab::{SqliteStore, conformance};
//!
//! let report = conformance::run(SqliteStore::temporary);
//! assert!(report.passed(), "{report}");
//! assert!(report.point("keys_are_scoped_by_caller_and_operation").is_some());
//! report.assert_passed(); // in an adapter's #[test]: panics listing every failure
//! ```

mod points;
mod probe;
mod report;
mod stress;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use crate::error::Result;
use crate::tool::TicketTool;

pub use probe::Fresh;
pub use report::{COVERED, Failure, NOT_COVERED, PointReport, Report, Verdict};

/// How hard the concurrent points push.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Callers released together in each round; more than the machine has cores.
    pub callers: usize,
    /// Rounds on a new key each, where one caller must create and all must agree: four fifths
    /// with two callers racing in parallel, the rest with all of them.
    pub fresh_key_rounds: usize,
    /// Rounds on a key created beforehand, where every caller must replay.
    pub completed_key_rounds: usize,
    /// Seeds the callers' jitter, so a failing run can be repeated.
    pub seed: u64,
}

impl Default for Options {
    /// Sixteen callers, 1000 rounds on new keys and 100 on completed ones: an adapter that gives up
    /// its lock between lookup and insert is caught in practically every run, and a correct SQLite
    /// store finishes the whole run in a few seconds.
    fn default() -> Self {
        Options {
            callers: 16,
            fresh_key_rounds: 1000,
            completed_key_rounds: 100,
            seed: 0x5EED_1AB5,
        }
    }
}

impl Options {
    /// The same options with other numbers of rounds, for a quick run.
    pub fn with_rounds(self, fresh_key_rounds: usize, completed_key_rounds: usize) -> Options {
        Options {
            fresh_key_rounds,
            completed_key_rounds,
            ..self
        }
    }

    /// The same options with another seed for the callers' jitter.
    pub fn with_seed(self, seed: u64) -> Options {
        Options { seed, ..self }
    }

    /// The same options with another number of callers per round (at least two).
    pub fn with_callers(self, callers: usize) -> Options {
        Options {
            callers: callers.max(2),
            ..self
        }
    }
}

/// A contract point's check: given a source of fresh tools, pass or say how it failed.
type CheckFn<T> = Box<dyn Fn(&mut Fresh<'_, T>) -> probe::Check>;

/// One contract point: its name, its promise, and the check.
struct Point<T> {
    name: &'static str,
    promise: &'static str,
    check: CheckFn<T>,
}

impl<T> Point<T> {
    fn new(
        name: &'static str,
        promise: &'static str,
        check: impl Fn(&mut Fresh<'_, T>) -> probe::Check + 'static,
    ) -> Point<T> {
        Point {
            name,
            promise,
            check: Box::new(check),
        }
    }
}

/// Checks every contract point with the default [`Options`], each on a tool `connect` makes fresh.
pub fn run<T, F>(connect: F) -> Report
where
    T: TicketTool + Send + 'static,
    F: FnMut() -> Result<T>,
{
    run_with(&Options::default(), connect)
}

/// Like [`run`], with the concurrent points' [`Options`].
pub fn run_with<T, F>(options: &Options, mut connect: F) -> Report
where
    T: TicketTool + Send + 'static,
    F: FnMut() -> Result<T>,
{
    let start = Instant::now();
    let points = all_points::<T>(options);
    let mut reports = Vec::with_capacity(points.len());
    for point in points {
        let began = Instant::now();
        let mut fresh = Fresh::new(&mut connect);
        // A panicking adapter fails its point; the other points still run.
        let verdict = match catch_unwind(AssertUnwindSafe(|| (point.check)(&mut fresh))) {
            Ok(Ok(())) => Verdict::Pass,
            Ok(Err(failure)) => match failure.unsupported() {
                Some(reason) => Verdict::NotCovered {
                    reason: reason.to_owned(),
                },
                None => Verdict::Fail(failure),
            },
            Err(panic) => Verdict::Fail(Failure::new(
                "the tool to answer without panicking",
                format!("a panic: {}", panic_text(&panic)),
                "the adapter panicked (an unwrap on an error, or a poisoned lock)",
            )),
        };
        reports.push(PointReport {
            name: point.name,
            promise: point.promise,
            verdict,
            elapsed: began.elapsed(),
        });
    }
    Report {
        points: reports,
        elapsed: start.elapsed(),
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// The names of every contract point, in the order a run checks them.
pub fn point_names() -> Vec<&'static str> {
    all_points::<crate::SqliteStore>(&Options::default())
        .iter()
        .map(|point| point.name)
        .collect()
}

fn all_points<T: TicketTool + Send + 'static>(options: &Options) -> Vec<Point<T>> {
    let mut all: Vec<Point<T>> = points::scenarios::<T>().into_iter().collect();
    all.extend([
        Point::new(
            "a_lost_reply_leaves_the_ticket_committed",
            "a lost reply loses only the answer: the ticket and its record are committed, and \
             retries with the key replay them",
            points::a_lost_reply_leaves_the_ticket_committed::<T>,
        ),
        Point::new(
            "a_lost_reply_on_a_replay_changes_nothing",
            "a replay whose answer is lost writes nothing, and the next retry replays again",
            points::a_lost_reply_on_a_replay_changes_nothing::<T>,
        ),
        Point::new(
            "keys_are_scoped_by_caller_and_operation",
            "two callers, or two operation types, with one key get separate tickets and never \
             replay or conflict with each other's records",
            points::keys_are_scoped_by_caller_and_operation::<T>,
        ),
        Point::new(
            "payloads_are_compared_in_canonical_form",
            "reordered fields and whitespace replay; any changed value conflicts, and a conflict \
             leaves the record and the ticket as they were",
            points::payloads_are_compared_in_canonical_form::<T>,
        ),
        Point::new(
            "each_replay_returns_its_own_ticket",
            "with several keys and other tickets interleaved, each retry replays its own ticket",
            points::each_replay_returns_its_own_ticket::<T>,
        ),
        Point::new(
            "calls_without_a_key_are_never_merged",
            "calls without a key always create, whatever their payload, and store no record",
            points::calls_without_a_key_are_never_merged::<T>,
        ),
        Point::new(
            "a_failure_at_any_step_leaves_nothing",
            "a failure at any step of the create leaves no ticket and no record, and the retry \
             then creates exactly once",
            points::a_failure_at_any_step_leaves_nothing::<T>,
        ),
        Point::new(
            "a_forgotten_record_lets_the_key_create_again",
            "once a key's record is forgotten (retention ran out), the key creates a new ticket, \
             as the contract documents",
            points::a_forgotten_record_lets_the_key_create_again::<T>,
        ),
    ]);
    let (fresh_options, done_options) = (options.clone(), options.clone());
    all.extend([
        Point::new(
            "callers_released_together_converge_on_fresh_keys",
            "in every round of callers released together on a new key, one creates and all \
             report its ticket",
            move |fresh| {
                stress::callers_released_together_converge_on_fresh_keys(fresh, &fresh_options)
            },
        ),
        Point::new(
            "callers_released_together_replay_completed_keys",
            "callers released together on a completed key all replay its ticket and write \
             nothing",
            move |fresh| {
                stress::callers_released_together_replay_completed_keys(fresh, &done_options)
            },
        ),
    ]);
    all
}
