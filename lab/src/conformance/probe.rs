//! The vocabulary the contract points are written in: fresh tools, the fixture, and calls that turn
//! a surprise into a [`Failure`] with its likely cause.

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::tool::{CreateRequest, Outcome, TicketId, TicketTool};

use super::report::Failure;

/// The result of one contract point.
pub type Check = std::result::Result<(), Failure>;

/// Makes the fresh tools a point needs, through the caller's `connect`.
pub struct Fresh<'c, T> {
    connect: &'c mut dyn FnMut() -> Result<T>,
}

impl<'c, T: TicketTool> Fresh<'c, T> {
    pub(super) fn new(connect: &'c mut dyn FnMut() -> Result<T>) -> Self {
        Fresh { connect }
    }

    /// A new tool with no tickets and no records.
    pub fn tool(&mut self) -> std::result::Result<T, Failure> {
        let tool = (self.connect)().map_err(|err| {
            Failure::new(
                "connect to make a fresh tool",
                format!("error: {err}"),
                "the connect function given to conformance::run failed",
            )
        })?;
        let (tickets, records) = (tool.count_tickets()?, tool.count_records()?);
        if tickets != 0 || records != 0 {
            return Err(Failure::new(
                "a fresh tool with no tickets and no records",
                format!("{tickets} ticket(s) and {records} record(s)"),
                "connect must return a new, empty tool for every contract point (a new database, \
                 schema or sandbox, or a reset of it)",
            ));
        }
        Ok(tool)
    }
}

/// The caller most points act for.
pub fn caller() -> Scope {
    scope("conformance-agent", "create_ticket")
}

/// A scope from literals within the identifier rules.
pub fn scope(caller: &str, operation: &str) -> Scope {
    Scope::new(caller, operation).expect("the conformance fixture's scopes are within the rules")
}

/// A key from a literal within the key rules.
pub fn key(name: &str) -> OperationKey {
    OperationKey::try_from(name).expect("the conformance fixture's keys are within the rules")
}

/// The payload most points send: nested objects and arrays, so a canonical form is needed.
pub fn payload_value() -> Value {
    json!({
        "title": "Disk almost full on db-1",
        "priority": "normal",
        "labels": ["disk", "database"],
        "details": {"host": "db-1", "free_bytes": 1024, "mounts": [{"path": "/", "read_only": false}]}
    })
}

/// [`payload_value`] as a payload.
pub fn payload() -> Payload {
    Payload::new(payload_value()).expect("the conformance payload is an object")
}

/// A payload from a value the fixture builds.
pub fn payload_of(value: Value) -> Payload {
    Payload::new(value).expect("the conformance fixture's payloads are objects")
}

/// A tool seen by one contract point.
pub struct Probe<'a, T> {
    tool: &'a T,
}

impl<'a, T: TicketTool> Probe<'a, T> {
    /// Wraps a tool.
    pub fn new(tool: &'a T) -> Self {
        Probe { tool }
    }

    /// A create that must make a new ticket. `replayed` names the likely cause when it replays.
    pub fn created(
        &self,
        request: CreateRequest<'_>,
        what: &str,
        replayed: &str,
    ) -> std::result::Result<TicketId, Failure> {
        let expected = format!("{what} to create a new ticket");
        match self.tool.create(request) {
            Ok(Outcome::Created(id)) => Ok(id),
            Ok(Outcome::Replayed(id)) => Err(Failure::new(
                expected,
                format!("a replay of ticket {id}"),
                replayed,
            )),
            Err(err) => Err(unexpected_error(expected, &err)),
        }
    }

    /// A create that must replay ticket `id`.
    pub fn replays(&self, request: CreateRequest<'_>, id: &TicketId, what: &str) -> Check {
        let expected = format!("{what} to replay ticket {id}");
        match self.tool.create(request) {
            Ok(Outcome::Replayed(got)) if got == *id => Ok(()),
            Ok(Outcome::Replayed(got)) => Err(Failure::new(
                expected,
                format!("a replay of ticket {got}"),
                "the replay returns some other ticket than the one its record names (the newest \
                 ticket, or one found by payload): return the record's ticket id",
            )),
            Ok(Outcome::Created(got)) => Err(Failure::new(
                expected,
                format!("a new ticket {got}"),
                "the key was not found: the record is not written with the ticket, or the lookup \
                 does not use the key (or uses more than caller, operation and key)",
            )),
            Err(err) => Err(unexpected_error(expected, &err)),
        }
    }

    /// A create that must be refused as a payload conflict.
    pub fn conflicts(&self, request: CreateRequest<'_>, what: &str) -> Check {
        let expected = format!("{what} to be rejected as a payload conflict");
        match self.tool.create(request) {
            Err(Error::PayloadConflict { .. }) => Ok(()),
            Ok(Outcome::Replayed(id)) => Err(Failure::new(
                expected,
                format!("a replay of ticket {id}"),
                "a changed payload was accepted: compare the whole canonical payload \
                 (Payload::canonical), not some of its fields, and never skip the comparison",
            )),
            Ok(Outcome::Created(id)) => Err(Failure::new(
                expected,
                format!("a new ticket {id}"),
                "the key was not found, or a mismatch is treated as a new operation: one key \
                 names one intention, so a different payload under it must be refused",
            )),
            Err(err) => Err(unexpected_error(expected, &err)),
        }
    }

    /// A create whose reply must be lost ([`Fault::LoseReply`](crate::Fault::LoseReply)).
    pub fn reply_lost(&self, request: CreateRequest<'_>, what: &str) -> Check {
        let expected = format!("{what} to report an unknown outcome (the reply was lost)");
        match self.tool.create(request) {
            Err(Error::OutcomeUnknown { .. }) => Ok(()),
            Ok(outcome) => Err(Failure::new(
                expected,
                format!("{outcome:?}"),
                "the tool ignores Fault::LoseReply: answer through CreateRequest::reply after \
                 the commit",
            )),
            Err(err) => Err(unexpected_error(expected, &err)),
        }
    }

    /// A create that must fail with the injected failure.
    pub fn injected_failure(&self, request: CreateRequest<'_>, what: &str) -> Check {
        let expected = format!("{what} to fail with the injected failure");
        match self.tool.create(request) {
            Err(Error::InjectedFailure) => Ok(()),
            Ok(outcome) => Err(Failure::new(
                expected,
                format!("{outcome:?}"),
                "the tool ignores the fault: call request.fault.inject(step) at each step of the \
                 create path (Begin, Lookup, InsertTicket, InsertRecord, Commit)",
            )),
            Err(err) => Err(unexpected_error(expected, &err)),
        }
    }

    /// The tickets and records stored must be exactly these.
    pub fn stored(&self, tickets: &[TicketId], records: u64, cause: &str) -> Check {
        // Compared as sets: a tool with textual identifiers need not list them in creation order.
        let mut found = self.tool.ticket_ids()?;
        found.sort();
        let mut tickets = tickets.to_vec();
        tickets.sort();
        let found_records = self.tool.count_records()?;
        if found != tickets || found_records != records {
            return Err(Failure::new(
                format!("tickets {tickets:?} and {records} record(s) stored"),
                format!("tickets {found:?} and {found_records} record(s)"),
                cause,
            ));
        }
        Ok(())
    }

    /// The ticket listing as the tool reports it.
    pub fn tickets(&self) -> std::result::Result<Vec<TicketId>, Failure> {
        Ok(self.tool.ticket_ids()?)
    }
}

/// An error where the contract expects something else.
pub fn unexpected_error(expected: String, err: &Error) -> Failure {
    if let Error::Unsupported { what } = err {
        return Failure::from(Error::Unsupported { what: what.clone() });
    }
    let cause = match err {
        Error::PayloadConflict { .. } => {
            "the payload is compared as the text received, or the lookup finds another caller's \
             or operation's record: compare Payload::canonical within (caller, operation, key)"
        }
        Error::OutcomeUnknown { .. } => {
            "the tool reported an unknown outcome where nothing was lost: a fault was injected \
             that the request did not ask for, or a wait ran out"
        }
        Error::InjectedFailure => {
            "the tool injected a failure the request did not ask for: compare the request's \
             fault with the step (Fault::inject)"
        }
        _ => "the tool reported an error of its own (see the error)",
    };
    Failure::new(expected, format!("error: {err}"), cause)
}
