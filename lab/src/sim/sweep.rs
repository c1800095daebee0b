//! The fail-at-step-N sweep: fail the create path at each of its steps in turn (and lose the reply
//! after the commit), retry with the same key, and check the invariants every time.

use std::fmt;

use serde_json::json;

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::tool::{CreateRequest, Fault, Outcome, Step};

use super::check::{Findings, Violation, ViolationKind, check};
use super::history::{CallResult, Event, History, IntentEnd, IntentInfo, What};
use super::plan::{AttemptPlan, CallerPlan, IntentPlan, Plan, RETENTION};
use super::run::OPERATION;
use super::subject::{Progress, Subject};
use super::tally::step_name;
use super::variant::{Variant, WithSubject};

/// Every fault the sweep injects: each step of the create path, the shorthand for "between the two
/// inserts", and the reply lost after the commit.
pub const SWEEP_FAULTS: [Fault; 7] = [
    Fault::FailAt(Step::Begin),
    Fault::FailAt(Step::Lookup),
    Fault::FailAt(Step::InsertTicket),
    Fault::FailAt(Step::InsertRecord),
    Fault::FailAt(Step::Commit),
    Fault::BeforeCommit,
    Fault::LoseReply,
];

/// Which path of the create the fault strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepPath {
    /// The first call with a new key: the path that writes.
    NewKey,
    /// A call whose key already has a record: the path that replays.
    Replay,
}

/// One fault on one path, then a retry with the same key.
#[derive(Clone, Debug)]
pub struct SweepRow {
    /// The path.
    pub path: SweepPath,
    /// The injected fault.
    pub fault: Fault,
    /// What each call returned, in order (for the replay path the first is the clean create).
    pub results: Vec<CallResult>,
    /// Tickets at the end.
    pub tickets: usize,
    /// Operation records at the end.
    pub records: usize,
    /// The checker's findings, plus this sweep's own expectation: one ticket, one record, and the
    /// last answer naming that ticket.
    pub findings: Findings,
}

// ANCHOR: sweep
/// Runs every fault of [`SWEEP_FAULTS`] on both paths against fresh tools of `variant`.
///
/// # Errors
/// Any error of the tool outside the injected faults.
pub fn sweep(variant: Variant) -> Result<Vec<SweepRow>> {
    let mut rows = Vec::new();
    for path in [SweepPath::NewKey, SweepPath::Replay] {
        for fault in SWEEP_FAULTS {
            let faults = match path {
                SweepPath::NewKey => vec![fault, Fault::None],
                SweepPath::Replay => vec![Fault::None, fault, Fault::None],
            };
            let history = variant.with_fresh(Script(faults))?;
            rows.push(row(path, fault, &history));
        }
    }
    Ok(rows)
}
// ANCHOR_END: sweep

fn row(path: SweepPath, fault: Fault, history: &History) -> SweepRow {
    let mut findings = check(history);
    let results: Vec<CallResult> = history
        .events
        .iter()
        .filter_map(|e| match &e.what {
            What::Call { result, .. } if !matches!(result, CallResult::Pending(_)) => {
                Some(result.clone())
            }
            _ => None,
        })
        .collect();
    let tickets = history.end.tickets.len();
    let records = history.end.records.as_ref().map_or(0, Vec::len);
    let first_ticket = history.end.tickets.first().map(|t| t.id.clone());
    let last_answer = results.last().and_then(CallResult::ticket);
    let mut expect = |broken: bool, kind: ViolationKind, detail: String| {
        if broken {
            findings.violations.push(Violation { kind, detail });
        }
    };
    expect(
        tickets > 1,
        ViolationKind::DuplicateTicket,
        format!("{tickets} tickets after the retry"),
    );
    expect(
        last_answer.is_none() || last_answer != first_ticket,
        ViolationKind::Unresolved,
        format!("the retry's answer {last_answer:?} does not name the ticket {first_ticket:?}"),
    );
    expect(
        records != tickets,
        ViolationKind::Unpaired,
        format!("{tickets} tickets but {records} records"),
    );
    SweepRow {
        path,
        fault,
        results,
        tickets,
        records,
        findings,
    }
}

/// One caller, one intent, one key, and calls with these faults in turn, each run to the end.
struct Script(Vec<Fault>);

/// The plan a script follows: one caller with one intent and `calls` plain attempts.
fn plan(calls: usize) -> Plan {
    Plan {
        seed: 0,
        schedule: 0,
        retention: RETENTION,
        callers: vec![CallerPlan {
            name: "c1".to_owned(),
            intents: vec![IntentPlan {
                name: "i1".to_owned(),
                key: "k1".to_owned(),
                reuses: None,
                arrives: 0,
                save_after: 1,
                lanes: vec![vec![AttemptPlan::PLAIN; calls]],
            }],
            crash: None,
        }],
        prune_every: None,
    }
}

impl WithSubject for Script {
    type Output = History;

    fn call<S: Subject>(self, subject: &S) -> Result<History> {
        let scope = Scope::new("c1", OPERATION)?;
        let key = OperationKey::try_from("k1")?;
        let payload = Payload::new(json!({"intent": "c1/i1", "title": "Swept ticket"}))?;
        let mut end = IntentEnd::Open;
        let mut events = vec![
            Event {
                time: 0,
                what: What::Received { intent: 0 },
            },
            Event {
                time: 1,
                what: What::Saved { intent: 0 },
            },
        ];
        for (n, fault) in self.0.iter().enumerate() {
            let request = CreateRequest::keyed(&scope, &key, &payload).with_fault(*fault);
            let mut progress = subject.start(request);
            let result = loop {
                match progress {
                    Progress::Done(result) => break result,
                    Progress::Pending { pending, .. } => {
                        progress = subject.resume(request, pending)
                    }
                }
            };
            let result = match result {
                Ok(Outcome::Created(id)) => CallResult::Created(id),
                Ok(Outcome::Replayed(id)) => CallResult::Replayed(id),
                Err(Error::PayloadConflict { .. }) => CallResult::Conflict,
                Err(Error::OutcomeUnknown { .. }) => CallResult::Unknown,
                Err(other) => CallResult::Failed(other.to_string()),
            };
            if let (IntentEnd::Open, Some(id)) = (&end, result.ticket()) {
                end = IntentEnd::Done(id);
            }
            events.push(Event {
                time: 2 + n as u64,
                what: What::Call {
                    intent: 0,
                    lane: 1,
                    attempt: u32::try_from(n + 1).unwrap_or(u32::MAX),
                    fault: *fault,
                    text: payload.canonical().to_owned(),
                    result,
                },
            });
        }
        Ok(History {
            plan: plan(self.0.len()),
            intents: vec![IntentInfo {
                caller: 0,
                caller_name: "c1".to_owned(),
                name: "i1".to_owned(),
                key: "k1".to_owned(),
                reuses: None,
                payload: payload.canonical().to_owned(),
                end,
            }],
            events,
            end: subject.view()?,
        })
    }
}

fn fault_name(fault: Fault) -> String {
    match fault {
        Fault::FailAt(step) => format!("fail at {}", step_name(step)),
        Fault::BeforeCommit => "fail before commit".to_owned(),
        Fault::LoseReply => "lose the reply".to_owned(),
        _ => "none".to_owned(),
    }
}

fn short(result: &CallResult) -> String {
    match result {
        CallResult::Created(id) => format!("created {id}"),
        CallResult::Replayed(id) => format!("replayed {id}"),
        CallResult::Conflict => "conflict".to_owned(),
        CallResult::Unknown => "unknown".to_owned(),
        CallResult::Failed(_) => "failed".to_owned(),
        CallResult::Pending(_) => "pending".to_owned(),
        CallResult::Abandoned => "abandoned".to_owned(),
    }
}

impl fmt::Display for SweepRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = match self.path {
            SweepPath::NewKey => "new key",
            SweepPath::Replay => "replay",
        };
        let calls: Vec<String> = self.results.iter().map(short).collect();
        write!(
            f,
            "{path:<8} {:<22} {:<42} {:>7} {:>7}  {}",
            fault_name(self.fault),
            calls.join(", then "),
            self.tickets,
            self.records,
            if self.findings.violations.is_empty() {
                "ok".to_owned()
            } else {
                format!("VIOLATION {}", self.findings.violations[0])
            }
        )
    }
}

/// The sweep as a table, with a header line.
pub fn sweep_table(rows: &[SweepRow]) -> String {
    let mut out = format!(
        "{:<8} {:<22} {:<42} {:>7} {:>7}  {}\n",
        "path",
        "fault",
        "calls, then retries with the same key",
        "tickets",
        "records",
        "invariants"
    );
    for row in rows {
        out.push_str(&format!("{row}\n"));
    }
    out
}
