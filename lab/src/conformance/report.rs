//! What a conformance run found: one verdict per contract point, and what a pass does not cover.

use std::fmt;
use std::time::Duration;

use crate::error::Error;

/// How one contract point broke: what the contract expects, what the tool did, and the most likely
/// cause in an adapter's code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// What the contract requires at this point.
    pub expected: String,
    /// What the tool did instead.
    pub observed: String,
    /// The mistake in an adapter that most often produces this observation.
    pub likely_cause: String,
    /// Set when the tool answered [`Error::Unsupported`]: the point is not covered, not failed.
    unsupported: Option<String>,
}

impl Failure {
    /// A failure with its three parts.
    pub fn new(
        expected: impl Into<String>,
        observed: impl Into<String>,
        likely_cause: impl Into<String>,
    ) -> Failure {
        Failure {
            expected: expected.into(),
            observed: observed.into(),
            likely_cause: likely_cause.into(),
            unsupported: None,
        }
    }

    /// What the tool said it cannot do, when this is a declared gap rather than a failure.
    pub(super) fn unsupported(&self) -> Option<&str> {
        self.unsupported.as_deref()
    }
}

/// A call that should have succeeded returned an error of the tool's own.
impl From<Error> for Failure {
    fn from(err: Error) -> Failure {
        let mut failure = Failure::new(
            "the call to succeed",
            format!("error: {err}"),
            "the tool reported an error of its own (see the error)",
        );
        if let Error::Unsupported { what } = err {
            failure.unsupported = Some(what);
        }
        failure
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "expected {}; observed {}; likely cause: {}",
            self.expected, self.observed, self.likely_cause
        )
    }
}

/// The verdict on one contract point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The tool kept the contract at this point.
    Pass,
    /// The tool broke it.
    Fail(Failure),
    /// The tool declared that it cannot do what the point needs ([`Error::Unsupported`]); the
    /// point says nothing about the tool, and the report says so.
    NotCovered {
        /// What the tool said it cannot do.
        reason: String,
    },
}

/// One contract point, checked on a fresh tool.
#[derive(Clone, Debug)]
pub struct PointReport {
    /// The point's name, a sentence in snake case.
    pub name: &'static str,
    /// What the contract promises here, in one sentence.
    pub promise: &'static str,
    /// Whether the tool kept it.
    pub verdict: Verdict,
    /// How long the check took.
    pub elapsed: Duration,
}

impl PointReport {
    /// True when the tool kept this point.
    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Pass
    }

    /// True when the tool broke this point (a point not covered is not broken).
    pub fn failed(&self) -> bool {
        matches!(self.verdict, Verdict::Fail(_))
    }
}

/// What a pass of [`run`](super::run) shows, one line each.
pub const COVERED: &[&str] = &[
    "the seven scenarios of the suite, each on its own fresh tool",
    "a lost reply leaves the ticket committed, and a retry with the key replays it",
    "keys are scoped by caller and by operation type",
    "payloads are compared in canonical form: field order and whitespace never matter, any value does",
    "a conflict changes nothing, and the original still replays",
    "each replay returns its own recorded ticket while other tickets exist",
    "a failure at any step of the create leaves nothing behind, and the retry creates once",
    "calls without a key are never merged and store no record",
    "callers released together on one key converge on one ticket, on fresh and on completed keys",
    "after the record is forgotten (the retention boundary), the key creates again",
];

/// What no pass can show, however many points pass.
pub const NOT_COVERED: &[&str] = &[
    "side effects outside the tool's tickets (emails, webhooks, payments sent by the real service)",
    "durability across a crash or restart of the tool's process or database",
    "retention in real time: forget_record stands in for the window running out",
    "races across processes or machines, and more concurrency than the callers released here",
    "faults the adapter cannot map: a fault it ignores is reported as a failure, not skipped",
];

/// Everything a conformance run found.
#[derive(Clone, Debug)]
pub struct Report {
    /// One entry per contract point, in the order they ran.
    pub points: Vec<PointReport>,
    /// How long the whole run took.
    pub elapsed: Duration,
}

impl Report {
    /// True when no contract point failed. Points the tool declared it cannot support are not
    /// failures; [`Report::not_covered`] lists them, and the report prints them.
    pub fn passed(&self) -> bool {
        !self.points.iter().any(PointReport::failed)
    }

    /// The points that failed, with how.
    pub fn failures(&self) -> impl Iterator<Item = (&PointReport, &Failure)> {
        self.points.iter().filter_map(|point| match &point.verdict {
            Verdict::Fail(failure) => Some((point, failure)),
            _ => None,
        })
    }

    /// The points the tool declared it cannot support, with its reason.
    pub fn not_covered(&self) -> impl Iterator<Item = (&PointReport, &str)> {
        self.points.iter().filter_map(|point| match &point.verdict {
            Verdict::NotCovered { reason } => Some((point, reason.as_str())),
            _ => None,
        })
    }

    /// The verdict on the point called `name`, if the run has one.
    pub fn point(&self, name: &str) -> Option<&PointReport> {
        self.points.iter().find(|point| point.name == name)
    }

    /// For a `#[test]` in an adapter's crate: returns when no point failed, and panics with
    /// every failure otherwise, so one broken point does not hide another. Points the tool
    /// declared unsupported do not fail it; check [`Report::not_covered`] to forbid them.
    ///
    /// # Panics
    /// When any contract point failed; the message lists each failure.
    pub fn assert_passed(&self) {
        if !self.passed() {
            panic!("the tool broke the retry contract:\n{self}");
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for point in &self.points {
            // The contract's promise ids beside the point's own name, so reports line up.
            let ids = crate::contract::label(crate::contract::Checker::Conformance, point.name);
            match &point.verdict {
                Verdict::Pass => writeln!(f, "PASS {} {ids}", point.name)?,
                Verdict::NotCovered { reason } => {
                    writeln!(f, "NOT COVERED {} {ids}: {}", point.name, point.promise)?;
                    writeln!(f, "     the tool says: {reason}")?;
                }
                Verdict::Fail(failure) => {
                    writeln!(f, "FAIL {} {ids}: {}", point.name, point.promise)?;
                    writeln!(f, "     expected {}", failure.expected)?;
                    writeln!(f, "     observed {}", failure.observed)?;
                    writeln!(f, "     likely cause: {}", failure.likely_cause)?;
                }
            }
        }
        let failed = self.failures().count();
        let not_covered = self.not_covered().count();
        writeln!(f, "a pass covers:")?;
        for line in COVERED {
            writeln!(f, "  - {line}")?;
        }
        writeln!(f, "not covered by a pass:")?;
        for line in NOT_COVERED {
            writeln!(f, "  - {line}")?;
        }
        let passed = self.points.len() - failed - not_covered;
        write!(f, "conformance: {passed} passed, {failed} failed")?;
        if not_covered > 0 {
            write!(f, ", {not_covered} not covered")?;
        }
        write!(f, " in {:.2} s", self.elapsed.as_secs_f64())
    }
}
