//! The graded report: one line per point in a summary table, then each point with every
//! sub-check it made, graded by what the IETF draft requires (MUST), what it recommends
//! (SHOULD), or what this lab's stricter contract adds (LAB).
//!
//! The run passes when every MUST and every LAB sub-check passed; a failed SHOULD is reported
//! and does not fail the run. The report knows nothing of HTTP: a point is a name, sub-checks
//! and the numbers of the exchanges they rest on.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::history::{CountRead, Exchange};
use crate::contract::Checker;
use crate::error::Error;

/// [`Report::command`] of an audit of recordings: its calibration's steps say what was read.
pub const AUDIT: &str = "lab audit";

/// The point name the calibration's exchanges are recorded under.
pub const POINT: &str = "calibration";

/// What the calibration proved, step by step.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Calibration {
    /// Every step, in order; the last one failed when `passed` is false.
    pub steps: Vec<Step>,
    /// Whether every step held.
    pub passed: bool,
    /// Set when a step failed because of the server behind the file, not the file: a wrapper
    /// whose creates the API it wraps refuses (`[upstream]`). Then the points say why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wrapper_at_fault: Option<String>,
    /// Whether the service takes the first two callers for two callers: the other-caller point
    /// accuses a leak only on this proof.
    pub callers: Callers,
}

/// What the calibration proved of the first two callers of `[[callers]]`. Two names in the file
/// are not two callers to the service (one token under another header name, an extra header
/// the service ignores): only what the service lets the check see tells them apart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "proved", content = "how", rename_all = "kebab-case")]
pub enum Callers {
    /// The service tells them apart: how the calibration saw it.
    Apart(String),
    /// Nothing the file describes showed it: why, and what the file could add.
    Unproved(String),
}

impl Default for Callers {
    fn default() -> Callers {
        Callers::Unproved("the calibration did not ask".to_owned())
    }
}

/// One thing the calibration proved about the file.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// The step's short name (`identity`).
    pub name: &'static str,
    /// The field of the target file it proves (`identity.json_pointer`).
    pub field: String,
    /// Whether it held.
    pub passed: bool,
    /// What was seen, as a sentence.
    pub detail: String,
    /// The exchanges it rests on.
    pub exchanges: Vec<usize>,
}

/// Why a calibration stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The file does not describe the service: this field is at fault.
    Mismatch {
        /// The field.
        field: String,
        /// The exchange, what came back and the likely fix.
        problem: String,
    },
    /// The service did not answer (or failed on its own): not the file's fault.
    Unreachable {
        /// What was asked (`count`, `create`).
        asked: &'static str,
        /// What happened.
        problem: String,
    },
}

/// What went wrong, in words, for a point that records it (the field first, where the file is
/// at fault).
impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Mismatch { field, problem } => write!(f, "{field}: {problem}"),
            Stop::Unreachable { problem, .. } => f.write_str(problem),
        }
    }
}

impl From<super::target::FieldError> for Stop {
    /// The file's fault, at the field the error names.
    fn from(err: super::target::FieldError) -> Stop {
        let problem = crate::error::folded(&err.what());
        Stop::mismatch(err.field, problem)
    }
}

impl Stop {
    /// A mismatch of `field`.
    pub fn mismatch(field: impl Into<String>, problem: impl Into<String>) -> Stop {
        Stop::Mismatch {
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// The error the command line reports: a mismatch exits 2, an unreachable service 1.
    pub fn into_error(self, file: &str, place: &str) -> Error {
        match self {
            Stop::Mismatch { field, problem } => Error::TargetMismatch {
                file: file.to_owned(),
                field,
                problem,
            },
            Stop::Unreachable { asked, problem } => Error::Http {
                method: asked,
                url: place.to_owned(),
                status: None,
                problem,
            },
        }
    }
}

pub(super) type Proved<T> = Result<T, Stop>;

impl Calibration {
    /// Adds a step that held.
    pub fn held(
        &mut self,
        name: &'static str,
        field: impl Into<String>,
        detail: impl Into<String>,
        exchanges: &[usize],
    ) {
        self.steps.push(Step {
            name,
            field: field.into(),
            passed: true,
            detail: detail.into(),
            exchanges: exchanges.to_vec(),
        });
    }
}

/// The draft this check grades against, with its section numbers: the newest revision whose
/// full text could be read when the check was written (the working group's repository and the
/// published revision agree). Later revisions are listed by the IETF datatracker; a grade that
/// their text changes is to be rechecked against them.
pub const DRAFT: &str = "draft-ietf-httpapi-idempotency-key-header-06";

/// Where a reader finds that draft.
pub const DRAFT_URL: &str =
    "https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header-06";

/// How binding a sub-check is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    /// The draft's MUST: required.
    Must,
    /// The draft's SHOULD: reported, not required.
    Should,
    /// The lab's contract, stricter than the draft: required.
    Lab,
}

/// A sub-check's grade: its level, the draft's section it rests on, and for a LAB grade what
/// the draft itself says there (if anything).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Grade {
    /// The level.
    pub level: Level,
    /// The draft's section (`2.7`), when the draft speaks to it.
    pub section: Option<&'static str>,
    /// For a LAB grade: the draft's own level at that section.
    pub draft_level: Option<Level>,
    /// A rule of the MCP specification the grade rests on instead of the draft's
    /// (`tools: annotations are hints`), for the MCP check's own points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_rule: Option<&'static str>,
}

impl Grade {
    /// The draft's MUST at `section`.
    pub const fn must(section: &'static str) -> Grade {
        Grade {
            level: Level::Must,
            section: Some(section),
            draft_level: None,
            mcp_rule: None,
        }
    }

    /// The draft's SHOULD at `section`.
    pub const fn should(section: &'static str) -> Grade {
        Grade {
            level: Level::Should,
            section: Some(section),
            draft_level: None,
            mcp_rule: None,
        }
    }

    /// The lab's contract where the draft says nothing binding.
    pub const fn lab() -> Grade {
        Grade {
            level: Level::Lab,
            section: None,
            draft_level: None,
            mcp_rule: None,
        }
    }

    /// The lab's contract, where the draft at `section` only recommends (or allows otherwise).
    pub const fn lab_over_should(section: &'static str) -> Grade {
        Grade {
            level: Level::Lab,
            section: Some(section),
            draft_level: Some(Level::Should),
            mcp_rule: None,
        }
    }

    /// A level the MCP specification sets at `rule` (for MCP's own points: annotations,
    /// cancellation).
    pub const fn mcp(level: Level, rule: &'static str) -> Grade {
        Grade {
            level,
            section: None,
            draft_level: None,
            mcp_rule: Some(rule),
        }
    }

    /// Whether a failure fails the run.
    pub fn required(&self) -> bool {
        matches!(self.level, Level::Must | Level::Lab)
    }
}

impl fmt::Display for Grade {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(rule) = self.mcp_rule {
            let level = match self.level {
                Level::Must => "MUST",
                Level::Should => "SHOULD",
                Level::Lab => "LAB",
            };
            return write!(f, "{level} (MCP {rule})");
        }
        match (self.level, self.section, self.draft_level) {
            (Level::Must, Some(s), _) => write!(f, "MUST §{s}"),
            (Level::Should, Some(s), _) => write!(f, "SHOULD §{s}"),
            (Level::Lab, Some(s), Some(_)) => write!(f, "LAB (§{s} SHOULD)"),
            (Level::Lab, Some(s), None) => write!(f, "LAB (§{s})"),
            (Level::Must, None, _) => write!(f, "MUST"),
            (Level::Should, None, _) => write!(f, "SHOULD"),
            (Level::Lab, None, _) => write!(f, "LAB"),
        }
    }
}

/// One thing a point checked.
#[derive(Clone, Debug, Serialize)]
pub struct SubCheck {
    /// What was checked, as a sentence.
    pub what: String,
    /// How binding it is.
    pub grade: Grade,
    /// Whether it held.
    pub passed: bool,
    /// What the contract expects.
    pub expected: String,
    /// What the service did.
    pub observed: String,
    /// The exchanges it rests on.
    pub exchanges: Vec<usize>,
    /// Set when the check could not judge it, with why and what would: a count that saw no new
    /// effect cannot see an effect changed in place. Such a sub-check is neither ok nor failed
    /// (`passed` is false), and is left out of the verdict and the tallies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_covered: Option<String>,
}

impl SubCheck {
    /// Whether it was judged and did not hold (a sub-check not covered was not judged).
    pub fn failed(&self) -> bool {
        !self.passed && self.not_covered.is_none()
    }
}

/// A point's sub-checks as they are made, in order; the MCP points keep theirs the same way.
pub(crate) struct Checks(pub(crate) Vec<SubCheck>);

impl Checks {
    pub(crate) fn new() -> Checks {
        Checks(Vec::new())
    }

    /// Records one sub-check and returns whether it passed.
    pub(crate) fn add(
        &mut self,
        grade: Grade,
        what: impl Into<String>,
        passed: bool,
        expected: impl Into<String>,
        observed: impl Into<String>,
        exchanges: &[usize],
    ) -> bool {
        self.0.push(SubCheck {
            what: what.into(),
            grade,
            passed,
            expected: expected.into(),
            observed: observed.into(),
            exchanges: exchanges.to_vec(),
            not_covered: None,
        });
        passed
    }

    /// Records a sub-check the check could not judge, with why and what would judge it.
    pub(crate) fn not_covered(
        &mut self,
        grade: Grade,
        what: impl Into<String>,
        expected: impl Into<String>,
        why: impl Into<String>,
        exchanges: &[usize],
    ) {
        let why = why.into();
        self.0.push(SubCheck {
            what: what.into(),
            grade,
            passed: false,
            expected: expected.into(),
            observed: "not judged".to_owned(),
            exchanges: exchanges.to_vec(),
            not_covered: Some(why),
        });
    }
}

/// Whether a point could be checked from outside.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "coverage", rename_all = "snake_case")]
pub enum Coverage {
    /// Checked; the sub-checks say how it went.
    Covered,
    /// Not checked, and what would check it.
    NotCovered {
        /// Why not, and what would cover it.
        reason: String,
    },
}

/// A point's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Every sub-check held.
    Pass,
    /// Every required sub-check held; a SHOULD did not.
    PassWithWarnings,
    /// A required sub-check failed.
    Fail,
    /// The point could not be checked.
    NotCovered,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "PASS",
            Verdict::PassWithWarnings => "WARN",
            Verdict::Fail => "FAIL",
            Verdict::NotCovered => "NOT COVERED",
        })
    }
}

/// One point and every sub-check it made.
#[derive(Clone, Debug, Serialize)]
pub struct PointReport {
    /// The point's short name (`scope`).
    pub name: &'static str,
    /// What it checks, as a sentence.
    pub title: &'static str,
    /// The contract's promises it covers (ids of [`crate::contract`]), set by [`Report::new`].
    pub promises: &'static [crate::contract::PromiseId],
    /// Whether it could be checked.
    #[serde(flatten)]
    pub coverage: Coverage,
    /// Every sub-check, passed or not.
    pub checks: Vec<SubCheck>,
    /// The verdict the sub-checks make.
    pub verdict: Verdict,
}

impl PointReport {
    /// A point from its sub-checks.
    pub fn covered(name: &'static str, title: &'static str, checks: Vec<SubCheck>) -> PointReport {
        let verdict = if checks.iter().any(|c| c.failed() && c.grade.required()) {
            Verdict::Fail
        } else if checks.iter().any(SubCheck::failed) {
            Verdict::PassWithWarnings
        } else {
            Verdict::Pass
        };
        PointReport {
            name,
            title,
            promises: &[],
            coverage: Coverage::Covered,
            checks,
            verdict,
        }
    }

    /// A point a black box cannot reach, with what would.
    pub fn not_covered(name: &'static str, title: &'static str, reason: String) -> PointReport {
        PointReport {
            name,
            title,
            promises: &[],
            coverage: Coverage::NotCovered { reason },
            checks: Vec::new(),
            verdict: Verdict::NotCovered,
        }
    }

    fn tally(&self, required: bool) -> (usize, usize) {
        let mine = self
            .checks
            .iter()
            .filter(|c| c.grade.required() == required && c.not_covered.is_none());
        let (mut passed, mut all) = (0, 0);
        for check in mine {
            all += 1;
            passed += usize::from(check.passed);
        }
        (passed, all)
    }
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The command that made it: `lab check`, or `lab audit` (whose calibration lists what it
    /// read of each recording).
    pub command: &'static str,
    /// The target file.
    pub target: String,
    /// The service's base URL.
    pub base_url: String,
    /// The draft the grades cite.
    pub draft: &'static str,
    /// What the grades rest on, as the report's second line says it.
    #[serde(skip)]
    pub graded_against: String,
    /// What the check proved about the target file before it graded any point.
    pub calibration: Calibration,
    /// Every point, in the order they ran.
    pub points: Vec<PointReport>,
    /// How long the run took.
    #[serde(rename = "elapsed_ms", serialize_with = "millis")]
    pub elapsed: Duration,
    /// Every exchange, in order.
    pub history: Vec<Exchange>,
    /// Every reading of the effect count, placed among the exchanges.
    pub counts: Vec<CountRead>,
    /// Whether every MUST and LAB sub-check passed.
    pub passed: bool,
}

fn millis<S: serde::Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(value.as_millis() as u64)
}

impl Report {
    /// A report of `points`; passed when no required sub-check failed.
    pub fn new(
        target: String,
        base_url: String,
        points: Vec<PointReport>,
        elapsed: Duration,
        history: Vec<Exchange>,
    ) -> Report {
        let passed = points.iter().all(|p| p.verdict != Verdict::Fail);
        let mut report = Report {
            command: "lab check",
            target,
            base_url,
            draft: DRAFT,
            graded_against: format!("{DRAFT} (MUST, SHOULD) and the lab's contract (LAB)"),
            calibration: Calibration::default(),
            points,
            elapsed,
            history,
            counts: Vec::new(),
            passed,
        };
        report.name_promises(Checker::Http);
        report
    }

    /// Names, beside each point, the promises `checker`'s table says it covers.
    pub fn name_promises(&mut self, checker: Checker) {
        for point in &mut self.points {
            point.promises = crate::contract::promises_of(checker, point.name);
        }
    }

    /// The points that failed.
    pub fn failed(&self) -> impl Iterator<Item = &PointReport> {
        self.points.iter().filter(|p| p.verdict == Verdict::Fail)
    }

    /// Exchange `id`. A run's history numbers its exchanges from 1, in order; an audit's holds
    /// only the exchanges it cites, each under its create's number in the recordings.
    pub fn exchange(&self, id: usize) -> Option<&Exchange> {
        let in_order = id.checked_sub(1).and_then(|i| self.history.get(i));
        in_order
            .filter(|e| e.id == id)
            .or_else(|| self.history.iter().find(|e| e.id == id))
    }

    /// The keys the exchanges carried, as sent (`#3 "…" #4 no key`), for a failed sub-check's
    /// lines; `None` without exchanges. Every exchange in `--json` carries its key too.
    fn keys_of(&self, ids: &[usize]) -> Option<String> {
        let keys: Vec<String> = ids
            .iter()
            .filter_map(|&id| self.exchange(id))
            .map(|e| match &e.key {
                Some(key) => format!("#{} {key}", e.id),
                None => format!("#{} no key", e.id),
            })
            .collect();
        (!keys.is_empty()).then(|| keys.join(", "))
    }

    /// Where the recordings hold the exchanges (`#1 proxy.jsonl line 2`), for an audit's
    /// failed sub-check; `None` without exchanges.
    pub(crate) fn places_of(&self, ids: &[usize]) -> Option<String> {
        let places: Vec<String> = ids
            .iter()
            .filter_map(|&id| self.exchange(id))
            .map(|e| format!("#{} {}", e.id, e.step))
            .collect();
        (!places.is_empty()).then(|| places.join(", "))
    }

    /// The report as pretty JSON, history included.
    pub fn to_json(&self) -> String {
        // Every field is a string, a number, a bool or a list of them: serialising cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|err| format!("{{\"error\": \"{err}\"}}"))
    }
}

impl Report {
    /// The summary: one line per point, its verdict and its tallies.
    fn summary_table(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .points
            .iter()
            .map(|p| p.name.len())
            .max()
            .unwrap_or(5)
            .max(5);
        writeln!(
            f,
            "{:width$}  {:11}  {:>8}  {:>6}",
            "point", "verdict", "required", "should"
        )?;
        for point in &self.points {
            let (req_ok, req_all) = point.tally(true);
            let (sh_ok, sh_all) = point.tally(false);
            let fraction = |ok: usize, all: usize| {
                if all == 0 {
                    "-".to_owned()
                } else {
                    format!("{ok}/{all}")
                }
            };
            writeln!(
                f,
                "{:width$}  {:11}  {:>8}  {:>6}",
                point.name,
                point.verdict.to_string(),
                fraction(req_ok, req_all),
                fraction(sh_ok, sh_all)
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} --target {} ({})",
            self.command, self.target, self.base_url
        )?;
        writeln!(f, "Graded against {}.", self.graded_against)?;
        writeln!(f)?;
        if self.command == AUDIT {
            writeln!(f, "recordings: read in one pass")?;
            for step in &self.calibration.steps {
                writeln!(f, "  {} — {}: {}", step.name, step.field, step.detail)?;
            }
            writeln!(f)?;
        } else if !self.calibration.steps.is_empty() {
            writeln!(f, "{}", self.calibration)?;
        }
        self.summary_table(f)?;
        writeln!(f)?;
        for point in &self.points {
            let ids = crate::contract::bracketed(point.promises);
            writeln!(f, "{} {}: {} {ids}", point.verdict, point.name, point.title)?;
            if let Coverage::NotCovered { reason } = &point.coverage {
                writeln!(f, "  {reason}")?;
            }
            for check in &point.checks {
                let mark = if check.passed { "ok  " } else { "FAIL" };
                let exchanges = exchange_ids(&check.exchanges);
                if let Some(why) = &check.not_covered {
                    writeln!(
                        f,
                        "  NOT COVERED {} — {}{exchanges}",
                        check.grade, check.what
                    )?;
                    writeln!(f, "       why: {why}")?;
                    continue;
                }
                writeln!(f, "  {mark} {} — {}{exchanges}", check.grade, check.what)?;
                if !check.passed {
                    writeln!(f, "       expected: {}", check.expected)?;
                    writeln!(f, "       observed: {}", check.observed)?;
                    if let Some(keys) = self.keys_of(&check.exchanges) {
                        writeln!(f, "       keys: {keys}")?;
                    }
                    if self.command == AUDIT
                        && let Some(places) = self.places_of(&check.exchanges)
                    {
                        writeln!(f, "       recorded at: {places}")?;
                    }
                }
            }
        }
        writeln!(f)?;
        let failed: Vec<&str> = self.failed().map(|p| p.name).collect();
        let verdict = if failed.is_empty() {
            "every MUST and LAB sub-check passed".to_owned()
        } else {
            format!("failed: {}", failed.join(", "))
        };
        write!(
            f,
            "{} exchanges {}in {:.1} s; {verdict}",
            self.history.len(),
            if self.command == AUDIT { "cited " } else { "" },
            self.elapsed.as_secs_f64()
        )
    }
}

/// The exchanges a line rests on: ` [#1 #2]`, or nothing.
fn exchange_ids(ids: &[usize]) -> String {
    if ids.is_empty() {
        return String::new();
    }
    let ids: Vec<String> = ids.iter().map(|id| format!("#{id}")).collect();
    format!(" [{}]", ids.join(" "))
}

impl fmt::Display for Calibration {
    /// The calibration's heading and one line per step, then an empty line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.passed {
            writeln!(
                f,
                "calibration: the file describes the service ({} step{}, before any point)",
                self.steps.len(),
                if self.steps.len() == 1 { "" } else { "s" }
            )?;
        } else if let Some(reason) = &self.wrapper_at_fault {
            writeln!(
                f,
                "calibration: the file describes the wrapper, but the API it wraps refuses its \
                 creates: {reason}"
            )?;
        } else {
            writeln!(f, "calibration: the file does not describe the service")?;
        }
        for step in &self.steps {
            let mark = if step.passed { "ok  " } else { "FAIL" };
            writeln!(
                f,
                "  {mark} {} — {}: {}{}",
                step.name,
                step.field,
                step.detail,
                exchange_ids(&step.exchanges)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(grade: Grade, passed: bool) -> SubCheck {
        SubCheck {
            what: "w".into(),
            grade,
            passed,
            expected: "e".into(),
            observed: "o".into(),
            exchanges: vec![1],
            not_covered: None,
        }
    }

    #[test]
    fn only_a_required_failure_fails_a_point_and_the_run() {
        let warn = PointReport::covered("a", "t", vec![check(Grade::should("2.7"), false)]);
        let fail = PointReport::covered("b", "t", vec![check(Grade::lab(), false)]);
        let must = PointReport::covered("c", "t", vec![check(Grade::must("2.7"), false)]);
        assert_eq!(warn.verdict, Verdict::PassWithWarnings);
        assert_eq!(fail.verdict, Verdict::Fail);
        assert_eq!(must.verdict, Verdict::Fail);
        let gap = PointReport::not_covered("d", "t", "why".into());
        let report = Report::new(
            "f".into(),
            "u".into(),
            vec![warn.clone(), gap],
            Duration::ZERO,
            vec![],
        );
        assert!(report.passed);
        let report = Report::new(
            "f".into(),
            "u".into(),
            vec![warn, fail],
            Duration::ZERO,
            vec![],
        );
        assert!(!report.passed);
        assert!(report.to_string().contains("failed: b"));
    }

    #[test]
    fn the_calibration_is_printed_before_the_points_and_carried_in_the_json() {
        let mut report = Report::new(
            "f".into(),
            "u".into(),
            vec![PointReport::covered(
                "a",
                "t",
                vec![check(Grade::lab(), true)],
            )],
            Duration::ZERO,
            vec![],
        );
        report
            .calibration
            .held("identity", "identity.json_pointer", "found: 7", &[3]);
        report.calibration.passed = true;
        let text = report.to_string();
        let calibration = text.find("calibration: the file describes the service (1 step, ");
        let table = text.find("\npoint ");
        assert!(calibration.is_some() && calibration < table, "{text}");
        assert!(text.contains("  ok   identity — identity.json_pointer: found: 7 [#3]\n"));
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["calibration"]["passed"], serde_json::json!(true));
        assert_eq!(
            json["calibration"]["steps"][0]["field"],
            serde_json::json!("identity.json_pointer")
        );
    }

    #[test]
    fn a_failed_sub_check_shows_the_keys_its_exchanges_carried() {
        let exchange = |id: usize, key: Option<&str>| Exchange {
            id,
            point: "replay",
            step: "s".into(),
            caller: None,
            key: key.map(str::to_owned),
            method: "POST".into(),
            path: "/t".into(),
            body: String::new(),
            answer: super::super::history::Answer::NoAnswer { reason: "r".into() },
            at_ms: 0,
            took_ms: 0,
        };
        let mut failed = check(Grade::lab(), false);
        failed.exchanges = vec![1, 2];
        let report = Report::new(
            "f".into(),
            "u".into(),
            vec![PointReport::covered("a", "t", vec![failed])],
            Duration::ZERO,
            vec![exchange(1, Some("\"k-1\"")), exchange(2, None)],
        );
        assert!(
            report.to_string().contains("keys: #1 \"k-1\", #2 no key"),
            "{report}"
        );
    }

    #[test]
    fn grades_name_their_level_and_section() {
        assert_eq!(Grade::must("2.7").to_string(), "MUST §2.7");
        assert_eq!(
            Grade::lab_over_should("2.6").to_string(),
            "LAB (§2.6 SHOULD)"
        );
        assert_eq!(Grade::lab().to_string(), "LAB");
    }
}
