//! The ticket tool contract: the one trait every backend and adapter implements, what a create can
//! return, and the faults a test can ask for.

use std::fmt;
use std::str::FromStr;

use crate::error::Result;
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;

/// The identifier a ticket tool gives a ticket it created: a number (SQLite's rowid, a serial
/// column) or text (`PROJ-123`, a UUID), whichever the tool uses.
///
/// The contract only needs identifiers to be compared: a replay must return the identifier the
/// first create returned. A number is written to JSON as a number and text as a string, so the
/// lab's output keeps `"ticket_id": 1`.
///
/// ```
/// use lab::TicketId;
///
/// let numbered = TicketId::from(47);
/// let named = TicketId::from("PROJ-123");
/// assert_eq!(numbered.as_i64(), Some(47));
/// assert_eq!(named.as_text(), Some("PROJ-123"));
/// assert_eq!(named.to_string(), "PROJ-123");
/// assert_eq!(serde_json::to_string(&numbered)?, "47");
/// assert_eq!(serde_json::to_string(&named)?, r#""PROJ-123""#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum TicketId {
    /// A numeric identifier.
    Number(i64),
    /// A textual identifier, kept exactly as the tool gave it.
    Text(Box<str>),
}

impl TicketId {
    /// The identifier as a number, when it is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            TicketId::Number(n) => Some(*n),
            TicketId::Text(_) => None,
        }
    }

    /// The identifier as text, when it is textual.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            TicketId::Number(_) => None,
            TicketId::Text(text) => Some(text),
        }
    }
}

impl From<i64> for TicketId {
    fn from(n: i64) -> Self {
        TicketId::Number(n)
    }
}

impl From<&str> for TicketId {
    fn from(text: &str) -> Self {
        TicketId::Text(text.into())
    }
}

impl From<String> for TicketId {
    fn from(text: String) -> Self {
        TicketId::Text(text.into())
    }
}

/// Reads an integer as a number and anything else as text, as a path segment such as
/// `/tickets/47` or `/tickets/PROJ-123` arrives.
impl FromStr for TicketId {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        Ok(match text.parse::<i64>() {
            Ok(n) if n.to_string() == text => TicketId::Number(n),
            _ => TicketId::from(text),
        })
    }
}

impl PartialEq<i64> for TicketId {
    fn eq(&self, other: &i64) -> bool {
        self.as_i64() == Some(*other)
    }
}

impl PartialEq<TicketId> for i64 {
    fn eq(&self, other: &TicketId) -> bool {
        other == self
    }
}

impl PartialEq<&TicketId> for i64 {
    fn eq(&self, other: &&TicketId) -> bool {
        *other == self
    }
}

impl PartialEq<&str> for TicketId {
    fn eq(&self, other: &&str) -> bool {
        self.as_text() == Some(*other)
    }
}

impl fmt::Display for TicketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TicketId::Number(n) => write!(f, "{n}"),
            TicketId::Text(text) => f.write_str(text),
        }
    }
}

impl fmt::Debug for TicketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TicketId::Number(n) => write!(f, "{n}"),
            TicketId::Text(text) => write!(f, "{text:?}"),
        }
    }
}

impl rusqlite::types::ToSql for TicketId {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            TicketId::Number(n) => n.to_sql(),
            TicketId::Text(text) => text.as_ref().to_sql(),
        }
    }
}

impl rusqlite::types::FromSql for TicketId {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        match value {
            rusqlite::types::ValueRef::Integer(n) => Ok(TicketId::Number(n)),
            rusqlite::types::ValueRef::Text(_) => Ok(TicketId::from(value.as_str()?)),
            _ => Err(rusqlite::types::FromSqlError::InvalidType),
        }
    }
}

// ANCHOR: outcome
/// What a successful create reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// This call created the ticket.
    Created(TicketId),
    /// An earlier call with the same key and payload created the ticket; this call wrote
    /// nothing and replayed the saved result.
    Replayed(TicketId),
}

impl Outcome {
    /// The ticket's identifier, whichever call created it.
    pub fn ticket_id(&self) -> &TicketId {
        match self {
            Outcome::Created(id) | Outcome::Replayed(id) => id,
        }
    }

    /// True when the call replayed an earlier result.
    pub fn is_replay(&self) -> bool {
        matches!(self, Outcome::Replayed(_))
    }
}
// ANCHOR_END: outcome

// ANCHOR: fault
/// A fault to inject into one create, so tests can reach the failures that matter on purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// No fault: the call runs normally.
    #[default]
    None,
    /// Fail after the ticket insert and before the operation record insert. The transaction
    /// must roll back both, and the call returns
    /// [`Error::InjectedFailure`](crate::Error::InjectedFailure).
    BeforeCommit,
    /// Commit, then lose the reply. The ticket exists, but the caller gets
    /// [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown).
    LoseReply,
    /// Fail at one step of the create path, for sweeps that try every step in turn. The call
    /// returns [`Error::InjectedFailure`](crate::Error::InjectedFailure) and everything the
    /// transaction wrote is rolled back. A step the call does not reach (a replay inserts nothing)
    /// is not injected.
    FailAt(Step),
}
// ANCHOR_END: fault

/// The steps of the create path, in order, where [`Fault::FailAt`] can strike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Starting the transaction: nothing has happened yet.
    Begin,
    /// Looking up the operation record.
    Lookup,
    /// Inserting the ticket.
    InsertTicket,
    /// Inserting the operation record, after the ticket: the same point as [`Fault::BeforeCommit`].
    InsertRecord,
    /// Committing.
    Commit,
}

impl Step {
    /// Every step, in the order a create reaches them.
    pub const ALL: [Step; 5] = [
        Step::Begin,
        Step::Lookup,
        Step::InsertTicket,
        Step::InsertRecord,
        Step::Commit,
    ];
}

impl Fault {
    /// Whether this fault asks to fail at `step`. [`Fault::BeforeCommit`] is the record insert.
    pub fn fails_at(self, step: Step) -> bool {
        match self {
            Fault::FailAt(at) => at == step,
            Fault::BeforeCommit => step == Step::InsertRecord,
            _ => false,
        }
    }

    /// For adapters: call at each step of the create path; fails the call there when this fault
    /// asks for it.
    ///
    /// # Errors
    /// [`Error::InjectedFailure`](crate::Error::InjectedFailure) when the fault fails at `step`.
    pub fn inject(self, step: Step) -> Result<()> {
        if self.fails_at(step) {
            return Err(crate::Error::InjectedFailure);
        }
        Ok(())
    }
}

/// A create request: who asks, under which key, for what, and which fault to inject.
#[derive(Clone, Copy, Debug)]
pub struct CreateRequest<'a> {
    /// The caller and operation type. Keys are looked up only inside this scope.
    pub scope: &'a Scope,
    /// The operation key, or `None` for the naive create that cannot recognise a retry.
    pub key: Option<&'a OperationKey>,
    /// The ticket's content.
    pub payload: &'a Payload,
    /// The fault to inject, usually [`Fault::None`].
    pub fault: Fault,
}

impl<'a> CreateRequest<'a> {
    /// A keyed request with no fault.
    pub fn keyed(scope: &'a Scope, key: &'a OperationKey, payload: &'a Payload) -> Self {
        CreateRequest {
            scope,
            key: Some(key),
            payload,
            fault: Fault::None,
        }
    }

    /// A request without a key: every call is a new ticket.
    pub fn unkeyed(scope: &'a Scope, payload: &'a Payload) -> Self {
        CreateRequest {
            scope,
            key: None,
            payload,
            fault: Fault::None,
        }
    }

    /// The same request with a fault to inject.
    pub fn with_fault(self, fault: Fault) -> Self {
        CreateRequest { fault, ..self }
    }

    // ANCHOR: reply
    /// Delivers the outcome, unless the test asked for the reply to be lost. Adapters call this
    /// after the commit: the ticket exists, yet the caller learns nothing.
    ///
    /// # Errors
    /// [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown) for [`Fault::LoseReply`].
    pub fn reply(self, outcome: Outcome) -> Result<Outcome> {
        if self.fault == Fault::LoseReply {
            return Err(crate::Error::OutcomeUnknown {
                key: self.key.map(ToString::to_string),
                reason: "the reply was lost after the commit".to_owned(),
            });
        }
        Ok(outcome)
    }
    // ANCHOR_END: reply
}

// ANCHOR: trait
/// A ticket-creating tool, seen through one connection.
///
/// The scenario suite is written against this trait alone, so anything that implements it (the
/// SQLite store here, another database, an HTTP client for a sandbox service) runs the same seven
/// scenarios. Besides the create itself, the trait has the inspection hooks a test needs: which
/// tickets exist, how many replay records are kept, and a way to forget one record to show what
/// happens when retention runs out.
///
/// An implementation must be `Send + 'static` (it owns its connection rather than borrowing
/// one): the concurrent checks move each connection to its own caller thread, and
/// [`ConnectBoxed`] then comes for free, so a `Box<dyn TicketTool + Send>` works wherever a tool
/// does.
pub trait TicketTool: ConnectBoxed {
    /// Creates a ticket, or replays the saved result when the key was seen before with the same
    /// payload.
    ///
    /// # Errors
    /// - [`Error::PayloadConflict`](crate::Error::PayloadConflict) when the key was first used with
    ///   another payload; nothing is written.
    /// - [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown) when the reply was lost or a wait
    ///   ran out; the caller must retry with the same key.
    /// - [`Error::InjectedFailure`](crate::Error::InjectedFailure) for [`Fault::BeforeCommit`].
    /// - Any error of the backend itself.
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome>;

    /// The identifiers of every ticket that exists, in ascending order, across all scopes.
    ///
    /// # Errors
    /// Any error of the backend.
    fn ticket_ids(&self) -> Result<Vec<TicketId>>;

    /// How many tickets exist. The default counts [`ticket_ids`](TicketTool::ticket_ids).
    ///
    /// # Errors
    /// Any error of the backend.
    fn count_tickets(&self) -> Result<u64> {
        Ok(self.ticket_ids()?.len() as u64)
    }

    /// How many operation records (saved replays) exist, across all scopes.
    ///
    /// # Errors
    /// Any error of the backend.
    fn count_records(&self) -> Result<u64>;

    /// Deletes the operation record of one key, as expiry would. Returns whether one existed.
    ///
    /// # Errors
    /// Any error of the backend.
    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool>;

    /// Opens another, independent connection to the same tool, as a second caller would. The
    /// concurrent scenario gives each of its callers one.
    ///
    /// # Errors
    /// Any error of the backend while connecting.
    fn connect(&self) -> Result<Self>
    where
        Self: Sized;
}
// ANCHOR_END: trait

/// Opens another connection as a boxed tool, so that a `Box<dyn TicketTool + Send>` is a
/// [`TicketTool`] too and the suite, the conformance run and the runner accept one.
///
/// Implemented for every `TicketTool + Send + 'static`; an adapter never implements it by hand.
///
/// ```
/// use lab::{Operation, SqliteStore, TicketTool, suite};
///
/// let boxed = |_: &str| -> lab::Result<Box<dyn TicketTool + Send>> {
///     Ok(Box::new(SqliteStore::temporary()?))
/// };
/// let observed = suite::run(&Operation::example(), boxed)?;
/// assert_eq!(observed.concurrent_same_key.tickets, 1);
/// # Ok::<(), lab::Error>(())
/// ```
pub trait ConnectBoxed {
    /// [`TicketTool::connect`], boxed.
    ///
    /// # Errors
    /// Any error of the backend while connecting.
    fn connect_boxed(&self) -> Result<Box<dyn TicketTool + Send>>;
}

impl<T: TicketTool + Send + 'static> ConnectBoxed for T {
    fn connect_boxed(&self) -> Result<Box<dyn TicketTool + Send>> {
        Ok(Box::new(self.connect()?))
    }
}

impl TicketTool for Box<dyn TicketTool + Send> {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        (**self).create(request)
    }

    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        (**self).ticket_ids()
    }

    fn count_tickets(&self) -> Result<u64> {
        (**self).count_tickets()
    }

    fn count_records(&self) -> Result<u64> {
        (**self).count_records()
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        (**self).forget_record(scope, key)
    }

    fn connect(&self) -> Result<Self> {
        (**self).connect_boxed()
    }
}

/// The one scope an adapter speaks for when its service fixes the caller (a bearer token, a
/// session): taken from the first request that names one, every other refused with
/// [`Error::Unsupported`](crate::Error::Unsupported) rather than sent as the wrong caller.
///
/// ```
/// use lab::{Scope, tool::OwnScope};
///
/// let own = OwnScope::default();
/// let alice = Scope::new("alice", "create_ticket")?;
/// own.check(&alice, "the token names one caller")?;
/// own.check(&alice, "the token names one caller")?;
/// let bob = Scope::new("bob", "create_ticket")?;
/// assert!(matches!(own.check(&bob, "the token names one caller"), Err(lab::Error::Unsupported { .. })));
/// # Ok::<(), lab::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct OwnScope(std::sync::Mutex<Option<Scope>>);

impl OwnScope {
    /// Takes `scope` as the adapter's own on first use, and accepts only it afterwards.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) for another scope, naming both and
    /// `why` the adapter speaks for one.
    pub fn check(&self, scope: &Scope, why: &str) -> Result<()> {
        let mut own = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match own.as_ref() {
            None => {
                *own = Some(scope.clone());
                Ok(())
            }
            Some(own) if own == scope => Ok(()),
            Some(own) => Err(crate::Error::Unsupported {
                what: format!(
                    "a request for caller {:?}, operation {:?}, to an adapter that speaks for \
                     caller {:?}, operation {:?}: {why}",
                    scope.caller(),
                    scope.operation(),
                    own.caller(),
                    own.operation()
                ),
            }),
        }
    }
}
