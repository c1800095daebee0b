//! What the simulator needs from a tool beyond [`TicketTool`]: a create it may split into steps,
//! a look at everything stored, and the retention the tool really applies.

use std::convert::Infallible;

use crate::error::Result;
use crate::sqlite::SqliteStore;
use crate::tool::{CreateRequest, Outcome, TicketId, TicketTool};

// ANCHOR: subject
/// A ticket tool as the simulator drives it.
///
/// For a correct store a create is one scheduler step: one call, one transaction. An adapter whose
/// create is really several separate actions (look up, then write) returns
/// [`Progress::Pending`] after each but the last, and the scheduler may run other callers in
/// between, as a real server would.
pub trait Subject: TicketTool + Sized {
    /// What a create in progress must remember until its next step.
    type Pending;

    /// Runs the first step of a create. The default runs the whole create as one step.
    fn start(&self, request: CreateRequest<'_>) -> Progress<Self::Pending> {
        Progress::Done(self.create(request))
    }

    /// Runs the next step of a create that [`start`](Subject::start) left pending.
    fn resume(&self, request: CreateRequest<'_>, pending: Self::Pending)
    -> Progress<Self::Pending>;

    /// Every ticket and operation record the tool holds, read through this connection.
    ///
    /// # Errors
    /// Any error of the backend.
    fn view(&self) -> Result<StoreView>;

    /// How long, in ticks, the tool really keeps a record after its key was last used, when it was
    /// promised `promised`. A correct tool keeps its promise.
    fn retention(&self, promised: u64) -> u64 {
        promised
    }
}
// ANCHOR_END: subject

/// Where a create stands after one step.
#[derive(Debug)]
pub enum Progress<P> {
    /// The create finished with this result.
    Done(Result<Outcome>),
    /// The create has more to do; `did` says what this step did, for the timeline.
    Pending {
        /// What the next step needs.
        pending: P,
        /// What this step did, such as `looked up k1: no record`.
        did: String,
    },
}

/// Everything a tool stores, as the checker compares it with what callers were told.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreView {
    /// Every ticket, in ascending identifier order.
    pub tickets: Vec<TicketRow>,
    /// Every operation record, or `None` for a tool that keeps no durable record of its keys.
    pub records: Option<Vec<RecordRow>>,
}

/// One stored ticket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketRow {
    /// The ticket's identifier.
    pub id: TicketId,
    /// The caller whose scope created it.
    pub caller: String,
    /// Its payload text.
    pub payload: String,
}

/// One stored operation record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRow {
    /// The caller (scope) the key belongs to.
    pub caller: String,
    /// The key as stored.
    pub key: String,
    /// The payload text saved with the key.
    pub payload: String,
    /// The ticket the record names.
    pub ticket_id: TicketId,
}

/// Reads tickets and records from the lab's schema (`tickets`, `operation_records`).
///
/// # Errors
/// [`Error::Store`](crate::Error::Store) if a query fails.
pub fn read_lab_schema(connection: &rusqlite::Connection) -> Result<StoreView> {
    let tickets = connection
        .prepare_cached("SELECT id, caller, payload FROM tickets ORDER BY id")?
        .query_map([], |row| {
            Ok(TicketRow {
                id: row.get(0)?,
                caller: row.get(1)?,
                payload: row.get(2)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let records = connection
        .prepare_cached(
            "SELECT caller, key, payload, ticket_id FROM operation_records ORDER BY caller, key",
        )?
        .query_map([], |row| {
            Ok(RecordRow {
                caller: row.get(0)?,
                key: row.get(1)?,
                payload: row.get(2)?,
                ticket_id: row.get(3)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StoreView {
        tickets,
        records: Some(records),
    })
}

/// The lab's own store: one create, one transaction, one step.
impl Subject for SqliteStore {
    type Pending = Infallible;

    fn resume(&self, _request: CreateRequest<'_>, pending: Infallible) -> Progress<Infallible> {
        match pending {}
    }

    fn view(&self) -> Result<StoreView> {
        read_lab_schema(self.connection())
    }
}
