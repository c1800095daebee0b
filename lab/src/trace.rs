//! Events a run records, for the book's timelines.
//!
//! [`Traced`] wraps any [`TicketTool`] and implements the trait itself, so the scenarios of
//! [`suite`] run through it unchanged. Every create becomes four moments: the caller
//! sends, the service works with the database, the reply travels (or is lost), and the caller draws
//! its conclusion. What the service wrote is never guessed: it is the difference between
//! [`TicketTool::ticket_ids`] before and after the inner call, checked against the outcome.
//!
//! ```
//! use lab::trace::{self, What};
//!
//! let trace = trace::scenario("naive_retry")?;
//! let commits = trace.events.iter().filter(|e| matches!(e.what, What::Commits { .. })).count();
//! assert_eq!(commits, 2);
//! assert_eq!(trace.tickets_at_end, vec![1, 2]);
//! # Ok::<(), lab::Error>(())
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::json;

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::sqlite::SqliteStore;
use crate::suite::{self, Operation};
use crate::tool::{CreateRequest, Fault, Outcome, TicketId, TicketTool};

/// Who acts in a moment: the three lifelines of a timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    /// The caller (an agent's runner). Several callers share one lifeline, told apart by number.
    Caller,
    /// The ticket service.
    Service,
    /// The service's database.
    Database,
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Actor::Caller => "caller",
            Actor::Service => "service",
            Actor::Database => "database",
        })
    }
}

/// What happened in one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum What {
    /// The caller sends a create, with its key or without one.
    Sends {
        /// The operation key, if the request carries one.
        key: Option<String>,
        /// Whether the payload differs from the one this caller first sent under the key.
        changed_payload: bool,
    },
    /// The service committed a ticket (and the key's record, when keyed) in one transaction.
    Commits {
        /// The new ticket, found by comparing the ticket list before and after.
        ticket: TicketId,
        /// The key whose record was committed with it.
        record: Option<String>,
    },
    /// The service found the key's record and replays its ticket, writing nothing.
    FindsRecord {
        /// The key looked up.
        key: String,
        /// The ticket the record points to.
        ticket: TicketId,
    },
    /// The service found the key with another payload and rejected the call, writing nothing.
    RejectsConflict {
        /// The key reused with another payload.
        key: String,
    },
    /// An injected failure struck inside the transaction, which rolled back.
    RollsBack,
    /// The call ended without any new ticket, for another reason.
    WritesNothing,
    /// The service's reply travels to the caller.
    Replies {
        /// What the reply says.
        reply: Reply,
    },
    /// The reply was lost on the way.
    ReplyLost,
    /// The caller draws its conclusion from what reached it.
    Concludes {
        /// What the caller saw.
        seen: Reply,
    },
    /// A record was deleted, as expiry would.
    ForgetsRecord {
        /// The key whose record went.
        key: String,
        /// Whether there was one to delete.
        existed: bool,
    },
}

/// What a reply says, or that none came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A ticket this call created.
    Created(TicketId),
    /// A ticket an earlier call created, replayed.
    Replayed(TicketId),
    /// The key holds another payload.
    Conflict,
    /// The call failed and was rolled back.
    Failed,
    /// No reply came: the outcome is unknown.
    Unknown,
    /// Another error, as the tool reported it.
    Error(String),
}

/// One moment of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Which caller's call this moment belongs to: 0 for the tool a run starts with, 1, 2, ... for
    /// the connections it opens, as the concurrent scenario's callers.
    pub caller: u32,
    /// Who acts.
    pub actor: Actor,
    /// Who receives, or `None` when the actor acts alone (a conclusion, an expiry).
    pub to: Option<Actor>,
    /// What happened.
    pub what: What,
    /// What the caller knows once this moment is over.
    pub knows: String,
}

impl Event {
    /// A short label for the arrow or note.
    pub fn label(&self) -> String {
        let who = if self.caller > 0 {
            format!("caller {}: ", self.caller)
        } else {
            String::new()
        };
        let text = match &self.what {
            What::Sends {
                key: Some(key),
                changed_payload: false,
            } => format!("create, key {key}"),
            What::Sends {
                key: Some(key),
                changed_payload: true,
            } => format!("create, key {key}, changed payload"),
            What::Sends { key: None, .. } => "create, no key".to_owned(),
            What::Commits {
                ticket,
                record: Some(key),
            } => format!("commit ticket {ticket} + record {key}"),
            What::Commits {
                ticket,
                record: None,
            } => format!("commit ticket {ticket}"),
            What::FindsRecord { key, ticket } => format!("{key} → ticket {ticket}: replay"),
            What::RejectsConflict { key } => format!("{key} has another payload; write nothing"),
            What::RollsBack => "failure before commit; roll back".to_owned(),
            What::WritesNothing => "nothing written".to_owned(),
            What::Replies { reply } => reply.to_string(),
            What::ReplyLost => "reply lost".to_owned(),
            What::Concludes {
                seen: Reply::Unknown,
            } => "times out".to_owned(),
            What::Concludes { seen } => format!("reads: {seen}"),
            What::ForgetsRecord { key, existed: true } => format!("record {key} deleted (expiry)"),
            What::ForgetsRecord {
                key,
                existed: false,
            } => format!("no record {key} to delete"),
        };
        format!("{who}{text}")
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Created(id) => write!(f, "ticket {id} (created)"),
            Reply::Replayed(id) => write!(f, "ticket {id} (replayed)"),
            Reply::Conflict => f.write_str("payload conflict"),
            Reply::Failed => f.write_str("failed, rolled back"),
            Reply::Unknown => f.write_str("no reply"),
            Reply::Error(message) => write!(f, "error: {message}"),
        }
    }
}

/// A finished run: its moments and the tickets that exist at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The run's name: a scenario of the suite, or a field-notes story.
    pub name: String,
    /// Tickets that existed before the first traced moment.
    pub tickets_at_start: Vec<TicketId>,
    /// Every moment, in the order they were recorded.
    pub events: Vec<Event>,
    /// Tickets that exist after the last moment.
    pub tickets_at_end: Vec<TicketId>,
}

/// The shared log of one run; every connection of a [`Traced`] tool writes to it.
#[derive(Debug, Default)]
struct Log {
    events: Mutex<Vec<Event>>,
    callers: AtomicU32,
    /// The payload each caller first sent under each key, to mark a changed payload.
    sent: Mutex<Vec<(String, String)>>,
}

/// A [`TicketTool`] that records what happens to every call of the tool it wraps.
#[derive(Debug)]
pub struct Traced<T> {
    inner: T,
    caller: u32,
    log: Arc<Log>,
    tickets_at_start: Vec<TicketId>,
}

impl<T: TicketTool> Traced<T> {
    /// Wraps `inner`; the calls made through it are caller 0, shown without a number.
    ///
    /// # Errors
    /// Any error of the tool while listing its tickets.
    pub fn new(inner: T) -> Result<Traced<T>> {
        let tickets_at_start = inner.ticket_ids()?;
        Ok(Traced {
            inner,
            caller: 0,
            log: Arc::new(Log::default()),
            tickets_at_start,
        })
    }

    /// The run so far, named `name`.
    ///
    /// # Errors
    /// Any error of the tool while listing its tickets.
    pub fn trace(&self, name: &str) -> Result<Trace> {
        Ok(Trace {
            name: name.to_owned(),
            tickets_at_start: self.tickets_at_start.clone(),
            events: lock(&self.log.events).clone(),
            tickets_at_end: self.inner.ticket_ids()?,
        })
    }

    fn record(&self, actor: Actor, to: Option<Actor>, what: What, knows: &str) {
        lock(&self.log.events).push(Event {
            caller: self.caller,
            actor,
            to,
            what,
            knows: knows.to_owned(),
        });
    }

    /// What the service did, read from the tickets before and after and the call's result.
    fn effect(
        &self,
        request: &CreateRequest<'_>,
        result: &Result<Outcome>,
        new: &[TicketId],
    ) -> What {
        let key = request.key.map(|k| k.as_str().to_owned());
        match result {
            Ok(Outcome::Created(id)) if new.contains(id) => What::Commits {
                ticket: id.clone(),
                record: key,
            },
            Ok(Outcome::Replayed(id)) => match key {
                Some(key) => What::FindsRecord {
                    key,
                    ticket: id.clone(),
                },
                None => What::WritesNothing,
            },
            // A lost reply after a commit: the new ticket is the one the ticket list gained. With
            // other callers committing at the same time the list may gain several; then it names
            // none, rather than guess.
            Err(Error::OutcomeUnknown { .. }) if new.len() == 1 => What::Commits {
                ticket: new[0].clone(),
                record: key,
            },
            Err(Error::PayloadConflict { key }) => What::RejectsConflict { key: key.clone() },
            Err(Error::InjectedFailure) => What::RollsBack,
            _ => What::WritesNothing,
        }
    }
}

fn lock<V>(mutex: &Mutex<V>) -> std::sync::MutexGuard<'_, V> {
    // A panic while holding the log leaves it as complete as it was; keep using it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

const WAITING: &str = "Still nothing";

impl<T: TicketTool + Send + 'static> TicketTool for Traced<T> {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        let key = request.key.map(|k| k.as_str().to_owned());
        let changed_payload = match &key {
            Some(key) => {
                let mut sent = lock(&self.log.sent);
                let canonical = request.payload.canonical().to_owned();
                match sent.iter().find(|(k, _)| k == key) {
                    Some((_, first)) => *first != canonical,
                    None => {
                        sent.push((key.clone(), canonical));
                        false
                    }
                }
            }
            None => false,
        };
        self.record(
            Actor::Caller,
            Some(Actor::Service),
            What::Sends {
                key: key.clone(),
                changed_payload,
            },
            "The request left; no answer yet",
        );
        let before = self.inner.ticket_ids()?;
        let result = self.inner.create(request);
        let after = self.inner.ticket_ids()?;
        let new: Vec<TicketId> = after
            .into_iter()
            .filter(|id| !before.contains(id))
            .collect();
        let effect = self.effect(&request, &result, &new);
        self.record(Actor::Service, Some(Actor::Database), effect, WAITING);
        let seen = match &result {
            Ok(Outcome::Created(id)) => Reply::Created(id.clone()),
            Ok(Outcome::Replayed(id)) => Reply::Replayed(id.clone()),
            Err(Error::PayloadConflict { .. }) => Reply::Conflict,
            Err(Error::InjectedFailure) => Reply::Failed,
            Err(Error::OutcomeUnknown { .. }) => Reply::Unknown,
            Err(other) => Reply::Error(other.to_string()),
        };
        if seen == Reply::Unknown {
            self.record(
                Actor::Service,
                Some(Actor::Caller),
                What::ReplyLost,
                WAITING,
            );
        } else {
            self.record(
                Actor::Service,
                Some(Actor::Caller),
                What::Replies {
                    reply: seen.clone(),
                },
                WAITING,
            );
        }
        let knows = match (&seen, &key) {
            (Reply::Created(id), _) => format!("Ticket {id} exists: this call created it"),
            (Reply::Replayed(id), _) => {
                format!("Ticket {id} exists: an earlier call made it, this one wrote nothing")
            }
            (Reply::Conflict, Some(key)) => {
                format!("{key} belongs to another payload; new intent needs a new key")
            }
            (Reply::Failed, _) => "The call failed and was rolled back: no ticket".to_owned(),
            (Reply::Unknown, Some(key)) => {
                format!("Outcome unknown, but {key} names it: retry with {key}")
            }
            (Reply::Unknown, None) => "Outcome unknown, and nothing names the operation".to_owned(),
            (Reply::Conflict, None) | (Reply::Error(_), _) => format!("The call failed: {seen}"),
        };
        self.record(Actor::Caller, None, What::Concludes { seen }, &knows);
        result
    }

    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        self.inner.ticket_ids()
    }

    fn count_tickets(&self) -> Result<u64> {
        self.inner.count_tickets()
    }

    fn count_records(&self) -> Result<u64> {
        self.inner.count_records()
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        let existed = self.inner.forget_record(scope, key)?;
        self.record(
            Actor::Database,
            None,
            What::ForgetsRecord {
                key: key.as_str().to_owned(),
                existed,
            },
            "Nothing: expiry is invisible to the caller",
        );
        Ok(existed)
    }

    fn connect(&self) -> Result<Self> {
        Ok(Traced {
            inner: self.inner.connect()?,
            caller: self.log.callers.fetch_add(1, Ordering::SeqCst) + 1,
            log: Arc::clone(&self.log),
            tickets_at_start: self.tickets_at_start.clone(),
        })
    }
}

/// Runs one scenario of the suite on a fresh temporary SQLite store through [`Traced`], with the
/// example operation, and returns its trace.
///
/// # Errors
/// [`Error::ScenarioFailed`] if the scenario fails; an error of the store; or
/// [`Error::InvalidIdentifier`] for a name that is not one of [`suite::SCENARIOS`].
pub fn scenario(name: &str) -> Result<Trace> {
    let tool = Traced::new(SqliteStore::temporary()?)?;
    let operation = Operation::example();
    match name {
        "naive_retry" => suite::naive_retry(&tool, &operation).map(drop),
        "stable_key_retry" => suite::stable_key_retry(&tool, &operation).map(drop),
        "changed_payload" => suite::changed_payload(&tool, &operation).map(drop),
        "failure_before_commit" => suite::failure_before_commit(&tool, &operation).map(drop),
        "concurrent_same_key" => suite::concurrent_same_key(&tool, &operation).map(drop),
        "new_key_same_payload" => suite::new_key_same_payload(&tool, &operation).map(drop),
        "deleted_replay_record" => suite::deleted_replay_record(&tool, &operation).map(drop),
        other => {
            return Err(unknown(
                "scenario",
                other,
                "not one of the seven scenarios (suite::SCENARIOS)",
            ));
        }
    }?;
    tool.trace(name)
}

/// The field notes' five stories, in the book's order.
pub const STORIES: [&str; 5] = [
    "one_intended_operation",
    "missing_reply",
    "name_the_operation",
    "retry_same_key",
    "changed_intent",
];

/// Runs one of the field notes' five [`STORIES`] as a short run of a fresh temporary SQLite store.
/// Only the story's own call is traced; what comes before it (an earlier call) runs untraced, and
/// shows in the trace as the tickets at the start.
///
/// # Errors
/// An error of the store, or [`Error::InvalidIdentifier`] for an unknown name.
pub fn story(name: &str) -> Result<Trace> {
    let store = SqliteStore::temporary()?;
    let scope = Scope::new("release-runner", "create_ticket")?;
    let key = OperationKey::try_from("k7")?;
    let v1 = Payload::new(json!({"release": "v1", "title": "Ship the release"}))?;
    let v2 = v1.with_field("release", json!("v2"));
    let keyed_v1 = CreateRequest::keyed(&scope, &key, &v1);
    let lost = Fault::LoseReply;
    // Each story's calls. The errors the stories provoke on purpose are part of the trace; any
    // other error of the store ends the run.
    let expected = |result: Result<Outcome>| match result {
        Ok(_)
        | Err(Error::OutcomeUnknown { .. })
        | Err(Error::PayloadConflict { .. })
        | Err(Error::InjectedFailure) => Ok(()),
        Err(other) => Err(other),
    };
    let traced = match name {
        "one_intended_operation" => {
            let tool = Traced::new(store)?;
            expected(tool.create(CreateRequest::unkeyed(&scope, &v1)))?;
            tool
        }
        "missing_reply" => {
            let tool = Traced::new(store)?;
            expected(tool.create(CreateRequest::unkeyed(&scope, &v1).with_fault(lost)))?;
            tool
        }
        "name_the_operation" => {
            let tool = Traced::new(store)?;
            expected(tool.create(keyed_v1.with_fault(lost)))?;
            tool
        }
        "retry_same_key" => {
            expected(store.create(keyed_v1.with_fault(lost)))?;
            let tool = Traced::new(store)?;
            expected(tool.create(keyed_v1))?;
            tool
        }
        "changed_intent" => {
            expected(store.create(keyed_v1.with_fault(lost)))?;
            let tool = Traced::new(store)?;
            // The traced caller is the one that sent v1 under k7 before.
            lock(&tool.log.sent).push((key.as_str().to_owned(), v1.canonical().to_owned()));
            expected(tool.create(CreateRequest::keyed(&scope, &key, &v2)))?;
            tool
        }
        other => {
            return Err(unknown(
                "story",
                other,
                "not one of the five stories (trace::STORIES)",
            ));
        }
    };
    traced.trace(name)
}

fn unknown(field: &'static str, value: &str, reason: &'static str) -> Error {
    Error::InvalidIdentifier {
        field,
        value: value.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commits(trace: &Trace) -> Vec<TicketId> {
        trace
            .events
            .iter()
            .filter_map(|e| match &e.what {
                What::Commits { ticket, .. } => Some(ticket.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn every_scenario_runs_through_the_traced_tool_with_four_moments_per_call() {
        for name in suite::SCENARIOS {
            let trace = scenario(name).unwrap();
            let sends = trace
                .events
                .iter()
                .filter(|e| matches!(e.what, What::Sends { .. }))
                .count();
            let forgets = trace
                .events
                .iter()
                .filter(|e| matches!(e.what, What::ForgetsRecord { .. }))
                .count();
            assert!(sends > 0, "{name}");
            assert_eq!(trace.events.len(), 4 * sends + forgets, "{name}");
            // Every ticket at the end was committed by a traced call.
            assert_eq!(commits(&trace).len(), trace.tickets_at_end.len(), "{name}");
        }
    }

    #[test]
    fn the_naive_retry_commits_two_tickets_and_the_keyed_retry_one() {
        assert_eq!(commits(&scenario("naive_retry").unwrap()), vec![1, 2]);
        let stable = scenario("stable_key_retry").unwrap();
        assert_eq!(commits(&stable), vec![1]);
        assert_eq!(stable.tickets_at_end, vec![1]);
        let replays = stable
            .events
            .iter()
            .filter(|e| {
                matches!(
                    e.what,
                    What::FindsRecord {
                        ticket: TicketId::Number(1),
                        ..
                    }
                )
            })
            .count();
        assert_eq!(replays, 2);
    }

    #[test]
    fn concurrent_callers_are_numbered_and_exactly_one_commits() {
        let trace = scenario("concurrent_same_key").unwrap();
        let mut callers: Vec<u32> = trace.events.iter().map(|e| e.caller).collect();
        callers.sort_unstable();
        callers.dedup();
        assert_eq!(callers.len(), suite::CONCURRENT_CALLERS);
        assert_eq!(commits(&trace), vec![1]);
    }

    #[test]
    fn the_stories_end_as_the_field_notes_say() {
        let lost = story("missing_reply").unwrap();
        assert_eq!(commits(&lost), vec![1]);
        assert!(lost.events.iter().any(|e| e.what == What::ReplyLost));
        assert!(
            lost.events[3]
                .knows
                .starts_with("Outcome unknown, and nothing")
        );
        let retry = story("retry_same_key").unwrap();
        assert_eq!(retry.tickets_at_start, vec![1]);
        assert_eq!(retry.tickets_at_end, vec![1]);
        assert!(commits(&retry).is_empty());
        let changed = story("changed_intent").unwrap();
        assert!(matches!(
            changed.events[0].what,
            What::Sends {
                changed_payload: true,
                ..
            }
        ));
        assert!(matches!(
            changed.events[1].what,
            What::RejectsConflict { .. }
        ));
        for name in STORIES {
            assert_eq!(story(name).unwrap().events.len(), 4, "{name}");
        }
    }

    #[test]
    fn unknown_names_are_rejected() {
        assert!(scenario("nope").is_err());
        assert!(story("nope").is_err());
    }
}
