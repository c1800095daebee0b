//! The seven scenarios that prove the retry contract, written once against [`TicketTool`].
//!
//! Each scenario drives a fresh tool, checks both what was persisted (ticket and record counts) and
//! what callers were told (the identifiers returned), and reports what it observed. A check that
//! fails returns [`Error::ScenarioFailed`] naming the scenario, what the contract expects and what the
//! tool did. Checks are ordinary code, active in every build profile.
//!
//! Run the whole suite with [`run`], or one scenario with its own function:
//!
//! ```
//! use lab::{Operation, SqliteStore, suite};
//!
//! let operation = Operation::example();
//! let observed = suite::run(&operation, |_scenario| SqliteStore::temporary())?;
//! assert_eq!(observed.naive_retry.tickets, 2);
//! assert_eq!(observed.stable_key_retry.tickets, 1);
//! for line in observed.lines() {
//!     println!("{line}");
//! }
//! # Ok::<(), lab::Error>(())
//! ```

use std::cell::Cell;
use std::fmt;
use std::sync::Barrier;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::{Payload, Separators, sorted_json};
use crate::tool::{CreateRequest, Fault, Outcome, TicketId, TicketTool};

/// The names of the seven scenarios, in the order they run and are reported.
pub const SCENARIOS: [&str; 7] = [
    "naive_retry",
    "stable_key_retry",
    "changed_payload",
    "failure_before_commit",
    "concurrent_same_key",
    "new_key_same_payload",
    "deleted_replay_record",
];

/// How many callers the concurrent scenario releases at once.
pub const CONCURRENT_CALLERS: usize = 8;

/// One approved operation: who asks, under which key, for what. The fixture file holds one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// The caller and operation type.
    pub scope: Scope,
    /// The key that names this one intention.
    pub operation_key: OperationKey,
    /// The ticket's content.
    pub payload: Payload,
}

impl Operation {
    /// A small synthetic operation, for examples and tests.
    pub fn example() -> Operation {
        Operation {
            scope: Scope::new("example-agent", "create_ticket")
                .expect("a literal scope within the rules"),
            operation_key: OperationKey::try_from("example-ticket-001")
                .expect("a literal key within the rules"),
            payload: Payload::new(json!({"title": "Example ticket", "priority": "normal"}))
                .expect("a literal object"),
        }
    }

    /// The keyed request for this operation.
    pub fn request(&self) -> CreateRequest<'_> {
        CreateRequest::keyed(&self.scope, &self.operation_key, &self.payload)
    }
}

/// What the suite observed, one field per scenario. Serialised, this is the `scenarios` object of
/// `results.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observations {
    /// A lost reply, then a retry without a key.
    pub naive_retry: NaiveRetry,
    /// A lost reply, then two retries with the original key.
    pub stable_key_retry: StableKeyRetry,
    /// The original key reused with a changed payload.
    pub changed_payload: ChangedPayload,
    /// A failure between the two inserts, then a retry.
    pub failure_before_commit: FailureBeforeCommit,
    /// Eight callers released together with one key.
    pub concurrent_same_key: ConcurrentSameKey,
    /// The same payload under a second key.
    pub new_key_same_payload: NewKeySamePayload,
    /// A retry after the operation record was deleted.
    pub deleted_replay_record: DeletedReplayRecord,
}

/// Observed in `naive_retry`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NaiveRetry {
    /// Calls made.
    pub attempts: u32,
    /// Tickets that exist afterwards.
    pub tickets: u64,
}

/// Observed in `stable_key_retry`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StableKeyRetry {
    /// Calls made.
    pub attempts: u32,
    /// Tickets that exist afterwards.
    pub tickets: u64,
    /// The ticket identifier the replay returned.
    pub replay_ticket_id: TicketId,
}

/// Observed in `changed_payload`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangedPayload {
    /// Whether the changed payload was rejected as a conflict.
    pub rejected: bool,
    /// Tickets that exist afterwards.
    pub tickets: u64,
}

/// Observed in `failure_before_commit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureBeforeCommit {
    /// Tickets that existed after the failed call.
    pub tickets_before_retry: u64,
    /// Tickets that exist after the retry.
    pub tickets_after_retry: u64,
}

/// Observed in `concurrent_same_key`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrentSameKey {
    /// Callers released together.
    pub attempts: u32,
    /// Tickets that exist afterwards.
    pub tickets: u64,
    /// The distinct ticket identifiers the callers were given, sorted.
    pub returned_ticket_ids: Vec<TicketId>,
}

/// Observed in `new_key_same_payload`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewKeySamePayload {
    /// Tickets that exist afterwards.
    pub tickets: u64,
}

/// Observed in `deleted_replay_record`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeletedReplayRecord {
    /// Tickets that exist afterwards.
    pub tickets: u64,
}

impl Observations {
    /// One line per scenario, `name: {json}`, with keys sorted and `", "` / `": "` separators: the
    /// format the reference lab prints.
    pub fn lines(&self) -> Vec<String> {
        let value = serde_json::to_value(self).expect("observations are plain data");
        SCENARIOS
            .iter()
            .map(|name| format!("{name}: {}", sorted_json(&value[name], Separators::SPACED)))
            .collect()
    }
}

/// Runs the seven scenarios in order, each on a tool made fresh by `fresh` (which is given the
/// scenario's name), and returns what they observed.
///
/// # Errors
/// The first failed check, as [`Error::ScenarioFailed`]; or an error from `fresh`.
pub fn run<T, F>(operation: &Operation, mut fresh: F) -> Result<Observations>
where
    T: TicketTool + Send,
    F: FnMut(&'static str) -> Result<T>,
{
    Ok(Observations {
        naive_retry: naive_retry(&fresh("naive_retry")?, operation)?,
        stable_key_retry: stable_key_retry(&fresh("stable_key_retry")?, operation)?,
        changed_payload: changed_payload(&fresh("changed_payload")?, operation)?,
        failure_before_commit: failure_before_commit(&fresh("failure_before_commit")?, operation)?,
        concurrent_same_key: concurrent_same_key(&fresh("concurrent_same_key")?, operation)?,
        new_key_same_payload: new_key_same_payload(&fresh("new_key_same_payload")?, operation)?,
        deleted_replay_record: deleted_replay_record(&fresh("deleted_replay_record")?, operation)?,
    })
}

/// Like [`run`], but runs the seven scenarios at the same time, each on its own thread and its own
/// fresh tool, which hides most of the waiting for the disk. Use it when the tools `fresh` makes
/// are truly independent (separate databases or schemas), as the SQLite store's temporary
/// databases are. The observations and the first failure reported are the same as with [`run`].
///
/// # Errors
/// The first failed check in scenario order, as [`Error::ScenarioFailed`]; or an error from
/// `fresh`.
pub fn run_parallel<T, F>(operation: &Operation, fresh: F) -> Result<Observations>
where
    T: TicketTool + Send,
    F: Fn(&'static str) -> Result<T> + Sync,
{
    std::thread::scope(|threads| {
        let fresh = &fresh;
        let naive = threads.spawn(move || naive_retry(&fresh("naive_retry")?, operation));
        let stable =
            threads.spawn(move || stable_key_retry(&fresh("stable_key_retry")?, operation));
        let changed = threads.spawn(move || changed_payload(&fresh("changed_payload")?, operation));
        let failure = threads
            .spawn(move || failure_before_commit(&fresh("failure_before_commit")?, operation));
        let concurrent =
            threads.spawn(move || concurrent_same_key(&fresh("concurrent_same_key")?, operation));
        let new_key =
            threads.spawn(move || new_key_same_payload(&fresh("new_key_same_payload")?, operation));
        let deleted = threads
            .spawn(move || deleted_replay_record(&fresh("deleted_replay_record")?, operation));
        // Joined in scenario order, so the first failure reported is the one `run` would report.
        Ok(Observations {
            naive_retry: join(naive)?,
            stable_key_retry: join(stable)?,
            changed_payload: join(changed)?,
            failure_before_commit: join(failure)?,
            concurrent_same_key: join(concurrent)?,
            new_key_same_payload: join(new_key)?,
            deleted_replay_record: join(deleted)?,
        })
    })
}

fn join<R>(handle: std::thread::ScopedJoinHandle<'_, Result<R>>) -> Result<R> {
    match handle.join() {
        Ok(result) => result,
        // A scenario panics only if the tool under test panicked; pass it on unchanged.
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// One scenario's view of the tool: counts the calls it makes and turns every surprise into a
/// [`Error::ScenarioFailed`] that names the scenario.
struct Probe<'a, T> {
    scenario: &'static str,
    tool: &'a T,
    attempts: Cell<u32>,
}

impl<'a, T: TicketTool> Probe<'a, T> {
    fn new(scenario: &'static str, tool: &'a T) -> Self {
        Probe {
            scenario,
            tool,
            attempts: Cell::new(0),
        }
    }

    fn fail(&self, expected: impl fmt::Display, observed: impl fmt::Display) -> Error {
        Error::ScenarioFailed {
            scenario: self.scenario,
            expected: expected.to_string(),
            observed: observed.to_string(),
        }
    }

    /// Asserts a condition about the run; `observed` is only formatted when it fails.
    fn check(&self, ok: bool, expected: &str, observed: impl fmt::Debug) -> Result<()> {
        if ok {
            Ok(())
        } else {
            Err(self.fail(expected, format!("{observed:?}")))
        }
    }

    fn call(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        self.attempts.set(self.attempts.get() + 1);
        self.tool.create(request)
    }

    /// A call that must return a ticket; `created` says whether it must be new or a replay.
    fn expect_ticket(&self, request: CreateRequest<'_>, created: bool) -> Result<TicketId> {
        let (expected, wanted): (&str, fn(&Outcome) -> bool) = if created {
            ("a newly created ticket", |o| !o.is_replay())
        } else {
            ("a replay of the saved ticket", Outcome::is_replay)
        };
        match self.call(request) {
            Ok(outcome) if wanted(&outcome) => Ok(outcome.ticket_id().clone()),
            Ok(outcome) => Err(self.fail(expected, format!("{outcome:?}"))),
            Err(err) => Err(self.fail(expected, format!("error: {err}"))),
        }
    }

    /// A call that must fail with a particular error.
    fn expect_error(
        &self,
        request: CreateRequest<'_>,
        expected: &str,
        matches: fn(&Error) -> bool,
    ) -> Result<()> {
        match self.call(request) {
            Err(err) if matches(&err) => Ok(()),
            Err(err) => Err(self.fail(expected, format!("error: {err}"))),
            Ok(outcome) => Err(self.fail(expected, format!("{outcome:?}"))),
        }
    }

    fn expect_lost_reply(&self, request: CreateRequest<'_>) -> Result<()> {
        self.expect_error(request, "an outcome-unknown error (reply lost)", |e| {
            matches!(e, Error::OutcomeUnknown { .. })
        })
    }

    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        self.tool
            .ticket_ids()
            .map_err(|err| self.fail("a list of tickets", format!("error: {err}")))
    }

    fn records(&self) -> Result<u64> {
        self.tool
            .count_records()
            .map_err(|err| self.fail("a count of operation records", format!("error: {err}")))
    }

    /// Checks the persisted state: exactly `tickets` and `records`, and returns the ticket count.
    fn check_counts(
        &self,
        tickets: &[TicketId],
        want_tickets: usize,
        want_records: u64,
    ) -> Result<u64> {
        self.check(
            tickets.len() == want_tickets,
            &format!("{want_tickets} ticket(s) stored"),
            tickets,
        )?;
        let records = self.records()?;
        self.check(
            records == want_records,
            &format!("{want_records} operation record(s) stored"),
            records,
        )?;
        Ok(tickets.len() as u64)
    }
}

// ANCHOR: naive_retry
/// The reply to a create without a key is lost after the commit, and the caller retries. Without a
/// key the tool cannot recognise the retry: two tickets for one intention.
///
/// # Errors
/// [`Error::ScenarioFailed`] if the tool does not behave so.
pub fn naive_retry<T: TicketTool>(tool: &T, operation: &Operation) -> Result<NaiveRetry> {
    let probe = Probe::new("naive_retry", tool);
    let request = CreateRequest::unkeyed(&operation.scope, &operation.payload);
    probe.expect_lost_reply(request.with_fault(Fault::LoseReply))?;
    let retry = probe.expect_ticket(request, true)?;
    let tickets = probe.ticket_ids()?;
    probe.check(
        tickets.contains(&retry),
        "the retry's ticket among those stored",
        &tickets,
    )?;
    let count = probe.check_counts(&tickets, 2, 0)?;
    Ok(NaiveRetry {
        attempts: probe.attempts.get(),
        tickets: count,
    })
}
// ANCHOR_END: naive_retry

// ANCHOR: stable_key_retry
/// The same lost reply, but the call carries the operation key. Both retries replay the ticket the
/// first call committed.
///
/// # Errors
/// [`Error::ScenarioFailed`] if a retry creates a ticket or returns another identifier.
pub fn stable_key_retry<T: TicketTool>(tool: &T, operation: &Operation) -> Result<StableKeyRetry> {
    let probe = Probe::new("stable_key_retry", tool);
    probe.expect_lost_reply(operation.request().with_fault(Fault::LoseReply))?;
    let first = probe.expect_ticket(operation.request(), false)?;
    let replay = probe.expect_ticket(operation.request(), false)?;
    probe.check(
        first == replay,
        "both retries to return one identifier",
        (&first, &replay),
    )?;
    let tickets = probe.ticket_ids()?;
    probe.check(
        tickets == [first.clone()],
        "the stored ticket to be the one returned",
        (&tickets, &first),
    )?;
    let count = probe.check_counts(&tickets, 1, 1)?;
    Ok(StableKeyRetry {
        attempts: probe.attempts.get(),
        tickets: count,
        replay_ticket_id: replay,
    })
}
// ANCHOR_END: stable_key_retry

// ANCHOR: changed_payload
/// The key is reused with a changed priority. The tool must reject it and leave the original
/// ticket and its replay as they were.
///
/// # Errors
/// [`Error::ScenarioFailed`] if the changed call is accepted or changes anything.
pub fn changed_payload<T: TicketTool>(tool: &T, operation: &Operation) -> Result<ChangedPayload> {
    let probe = Probe::new("changed_payload", tool);
    let original = probe.expect_ticket(operation.request(), true)?;
    let changed = changed_priority(&operation.payload);
    let conflicting = CreateRequest::keyed(&operation.scope, &operation.operation_key, &changed);
    probe.expect_error(conflicting, "a payload-conflict error", |e| {
        matches!(e, Error::PayloadConflict { .. })
    })?;
    let tickets = probe.ticket_ids()?;
    let count = probe.check_counts(&tickets, 1, 1)?;
    let replay = probe.expect_ticket(operation.request(), false)?;
    probe.check(
        replay == original,
        "the original payload to still replay the original ticket",
        (original, replay),
    )?;
    Ok(ChangedPayload {
        rejected: true,
        tickets: count,
    })
}
// ANCHOR_END: changed_payload

/// The payload with its `priority` changed: to `urgent`, or to `routine` if it already was urgent.
fn changed_priority(payload: &Payload) -> Payload {
    let urgent = json!("urgent");
    let priority = if payload.as_object().get("priority") == Some(&urgent) {
        json!("routine")
    } else {
        urgent
    };
    payload.with_field("priority", priority)
}

// ANCHOR: failure_before_commit
/// The call fails between the ticket insert and the record insert. Nothing may remain, and the
/// retry must create the ticket afresh.
///
/// # Errors
/// [`Error::ScenarioFailed`] if a partial write survives or the retry does not create.
pub fn failure_before_commit<T: TicketTool>(
    tool: &T,
    operation: &Operation,
) -> Result<FailureBeforeCommit> {
    let probe = Probe::new("failure_before_commit", tool);
    probe.expect_error(
        operation.request().with_fault(Fault::BeforeCommit),
        "the injected failure before commit",
        |e| matches!(e, Error::InjectedFailure),
    )?;
    let before = probe.check_counts(&probe.ticket_ids()?, 0, 0)?;
    let created = probe.expect_ticket(operation.request(), true)?;
    let tickets = probe.ticket_ids()?;
    probe.check(
        tickets == [created.clone()],
        "the stored ticket to be the one returned",
        (&tickets, &created),
    )?;
    let after = probe.check_counts(&tickets, 1, 1)?;
    Ok(FailureBeforeCommit {
        tickets_before_retry: before,
        tickets_after_retry: after,
    })
}
// ANCHOR_END: failure_before_commit

// ANCHOR: concurrent_same_key
/// Eight callers, each on its own connection, wait at a barrier and then send the same keyed
/// call at once. Exactly one creates; every caller gets that ticket's identifier.
///
/// # Errors
/// [`Error::ScenarioFailed`] if any caller fails, or callers see different tickets.
pub fn concurrent_same_key<T: TicketTool + Send>(
    tool: &T,
    operation: &Operation,
) -> Result<ConcurrentSameKey> {
    let probe = Probe::new("concurrent_same_key", tool);
    // Connect everyone first: a caller that failed to connect would leave the others stuck at the
    // barrier.
    let callers = (0..CONCURRENT_CALLERS)
        .map(|_| tool.connect())
        .collect::<Result<Vec<T>>>()
        .map_err(|err| probe.fail("a connection per caller", format!("error: {err}")))?;
    let barrier = Barrier::new(CONCURRENT_CALLERS);
    let results: Vec<Result<Outcome>> = std::thread::scope(|threads| {
        let handles: Vec<_> = callers
            .into_iter()
            .map(|caller| {
                let barrier = &barrier;
                threads.spawn(move || {
                    barrier.wait();
                    caller.create(operation.request())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a caller thread panicked"))
            .collect()
    });
    let mut outcomes = Vec::with_capacity(results.len());
    for result in results {
        outcomes.push(result.map_err(|err| {
            probe.fail("every caller to get the ticket", format!("error: {err}"))
        })?);
    }
    let created = outcomes.iter().filter(|o| !o.is_replay()).count();
    probe.check(created == 1, "exactly one caller to create", &outcomes)?;
    let mut ids: Vec<TicketId> = outcomes.iter().map(|o| o.ticket_id().clone()).collect();
    ids.sort_unstable();
    ids.dedup();
    let tickets = probe.ticket_ids()?;
    probe.check(
        ids.len() == 1 && tickets == ids,
        "every caller to report the one stored ticket",
        (&ids, &tickets),
    )?;
    let count = probe.check_counts(&tickets, 1, 1)?;
    Ok(ConcurrentSameKey {
        attempts: u32::try_from(outcomes.len()).expect("eight callers fit in u32"),
        tickets: count,
        returned_ticket_ids: ids,
    })
}
// ANCHOR_END: concurrent_same_key

// ANCHOR: new_key_same_payload
/// A second, separate intention with identical content gets its own key, and so its own ticket.
///
/// # Errors
/// [`Error::ScenarioFailed`] if the tool deduplicates by content.
pub fn new_key_same_payload<T: TicketTool>(
    tool: &T,
    operation: &Operation,
) -> Result<NewKeySamePayload> {
    let probe = Probe::new("new_key_same_payload", tool);
    let second_key = second_intention(&operation.operation_key)?;
    let first = probe.expect_ticket(operation.request(), true)?;
    let second = probe.expect_ticket(
        CreateRequest::keyed(&operation.scope, &second_key, &operation.payload),
        true,
    )?;
    probe.check(first != second, "two different tickets", (first, second))?;
    let count = probe.check_counts(&probe.ticket_ids()?, 2, 2)?;
    Ok(NewKeySamePayload { tickets: count })
}
// ANCHOR_END: new_key_same_payload

/// A key for a second intention, different from `key`.
fn second_intention(key: &OperationKey) -> Result<OperationKey> {
    let second = key.with_suffix("-new-intent")?;
    if &second != key {
        return Ok(second);
    }
    // Only a key of maximal length that already ends in the suffix gets here.
    key.with_suffix("-another-intent")
}

// ANCHOR: deleted_replay_record
/// The operation record is deleted, as an expiry would, and the caller retries. The tool can no
/// longer recognise the key: a second ticket. Deduplication lasts only as long as the record.
///
/// # Errors
/// [`Error::ScenarioFailed`] if the record cannot be deleted or the tool behaves otherwise.
pub fn deleted_replay_record<T: TicketTool>(
    tool: &T,
    operation: &Operation,
) -> Result<DeletedReplayRecord> {
    let probe = Probe::new("deleted_replay_record", tool);
    let first = probe.expect_ticket(operation.request(), true)?;
    let forgotten = tool
        .forget_record(&operation.scope, &operation.operation_key)
        .map_err(|err| probe.fail("the record to be deleted", format!("error: {err}")))?;
    probe.check(forgotten, "a record to delete", forgotten)?;
    let second = probe.expect_ticket(operation.request(), true)?;
    probe.check(
        first != second,
        "a second, different ticket",
        (first, second),
    )?;
    let count = probe.check_counts(&probe.ticket_ids()?, 2, 1)?;
    Ok(DeletedReplayRecord { tickets: count })
}
// ANCHOR_END: deleted_replay_record

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_changed_payload_always_differs_from_the_original() {
        let normal = Payload::new(json!({"priority": "normal"})).unwrap();
        let urgent = Payload::new(json!({"priority": "urgent"})).unwrap();
        let none = Payload::new(json!({"title": "x"})).unwrap();
        for payload in [normal, urgent, none] {
            assert_ne!(changed_priority(&payload), payload);
        }
    }

    #[test]
    fn the_second_intention_key_differs_even_at_the_length_bound() {
        let tail = "-new-intent";
        let key =
            OperationKey::try_from(format!("{}{tail}", "k".repeat(255 - tail.len()))).unwrap();
        assert_ne!(second_intention(&key).unwrap(), key);
    }

    #[test]
    fn lines_sort_keys_and_use_spaced_separators() {
        let observed = Observations {
            naive_retry: NaiveRetry {
                attempts: 2,
                tickets: 2,
            },
            stable_key_retry: StableKeyRetry {
                attempts: 3,
                tickets: 1,
                replay_ticket_id: 7.into(),
            },
            changed_payload: ChangedPayload {
                rejected: true,
                tickets: 1,
            },
            failure_before_commit: FailureBeforeCommit {
                tickets_before_retry: 0,
                tickets_after_retry: 1,
            },
            concurrent_same_key: ConcurrentSameKey {
                attempts: 8,
                tickets: 1,
                returned_ticket_ids: vec![4.into(), 5.into()],
            },
            new_key_same_payload: NewKeySamePayload { tickets: 2 },
            deleted_replay_record: DeletedReplayRecord { tickets: 2 },
        };
        let lines = observed.lines();
        assert_eq!(
            lines[1],
            r#"stable_key_retry: {"attempts": 3, "replay_ticket_id": 7, "tickets": 1}"#
        );
        assert_eq!(
            lines[4],
            r#"concurrent_same_key: {"attempts": 8, "returned_ticket_ids": [4, 5], "tickets": 1}"#
        );
    }
}
