//! One kind of call, repeated, on a CPU-bound store: the unit that an instruction counter such as
//! `valgrind --tool=callgrind` measures from outside. Running it twice with different call counts
//! and subtracting removes the start-up and set-up cost, which is the same in both runs.

use rusqlite::params;
use serde_json::json;

use super::{plain_select, replayed};
use crate::error::Result;
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::sqlite::{
    Coordination, INSERT_RECORD, INSERT_TICKET, SqliteStore, StoreOptions, Synchronous,
    response_text,
};
use crate::tool::{CreateRequest, TicketTool};

/// Records every probe store holds before its calls, whatever the operation.
pub const PREFILLED: u32 = 2_000;

/// The kinds of call a probe can repeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `INSERT INTO tickets` in autocommit.
    PlainInsert,
    /// A create without a key, through the store.
    NaiveCreate,
    /// A keyed create with a new key, through group commit.
    KeyedCreate,
    /// A keyed create with a new key, on the caller's own connection.
    KeyedCreateBusyHandler,
    /// The two writes of a first create alone: `BEGIN`, the ticket's and the record's `INSERT`,
    /// `COMMIT`, as bare SQL with no lookup. A create that writes these two rows cannot cost
    /// less.
    TicketAndRecord,
    /// `SELECT` of an operation record by primary key.
    PlainSelect,
    /// A keyed create whose record exists.
    Replay,
}

impl Operation {
    /// Every operation, with the name the command line uses.
    pub const ALL: [(&'static str, Operation); 7] = [
        ("plain-insert", Operation::PlainInsert),
        ("naive-create", Operation::NaiveCreate),
        ("keyed-create", Operation::KeyedCreate),
        (
            "keyed-create-busy-handler",
            Operation::KeyedCreateBusyHandler,
        ),
        ("ticket-and-record", Operation::TicketAndRecord),
        ("plain-select", Operation::PlainSelect),
        ("replay", Operation::Replay),
    ];

    /// The operation a command-line name stands for.
    pub fn named(name: &str) -> Option<Operation> {
        Operation::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, op)| *op)
    }
}

/// The function an instruction counter should count, and nothing outside it: its name for
/// `valgrind --tool=callgrind --toggle-collect=...`. Building keys, filling the store and starting
/// the program all happen outside it, so they add nothing to any call's count.
pub const MEASURED_FUNCTION: &str = "lab::bench::probe::repeat";

/// What a probe left behind: the store's rows after its calls, [`PREFILLED`] of each included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    /// Tickets in the store.
    pub tickets: u64,
    /// Operation records in the store.
    pub records: u64,
}

/// Sets up a CPU-bound store with [`PREFILLED`] keyed tickets, then runs `operation` `calls` times.
///
/// # Errors
/// Any store error; [`Error::ScenarioFailed`](crate::Error::ScenarioFailed) if a replay creates.
pub fn run(operation: Operation, calls: u32) -> Result<Rows> {
    let coordination = match operation {
        Operation::KeyedCreateBusyHandler => Coordination::BusyHandler,
        _ => Coordination::GroupCommit,
    };
    let store = SqliteStore::temporary_with(
        StoreOptions::default()
            .with_synchronous(Synchronous::Off)
            .with_coordination(coordination),
    )?;
    let scope = Scope::new("probe", "create_ticket")?;
    let payload = Payload::new(json!({"title": "Probe ticket", "priority": "normal"}))?;
    let kept = (0..PREFILLED)
        .map(|i| OperationKey::try_from(format!("kept-{i:08}")))
        .collect::<Result<Vec<_>>>()?;
    for key in &kept {
        store.create(CreateRequest::keyed(&scope, key, &payload))?;
    }
    let fresh = (0..calls)
        .map(|i| OperationKey::try_from(format!("new-{i:08}")))
        .collect::<Result<Vec<_>>>()?;
    repeat(operation, &store, &scope, &payload, &kept, &fresh)?;
    Ok(Rows {
        tickets: store.count_tickets()?,
        records: store.count_records()?,
    })
}

/// The calls themselves: one per key in `fresh`. Kept out of line so that a counter can be told
/// to count inside this function only ([`MEASURED_FUNCTION`]).
#[inline(never)]
fn repeat(
    operation: Operation,
    store: &SqliteStore,
    scope: &Scope,
    payload: &Payload,
    kept: &[OperationKey],
    fresh: &[OperationKey],
) -> Result<()> {
    let db = store.connection();
    for (i, new) in fresh.iter().enumerate() {
        let old = &kept[i % kept.len()];
        match operation {
            Operation::PlainInsert => {
                db.prepare_cached(INSERT_TICKET)?
                    .execute(params![scope.caller(), payload.canonical()])?;
            }
            Operation::NaiveCreate => {
                store.create(CreateRequest::unkeyed(scope, payload))?;
            }
            Operation::KeyedCreate | Operation::KeyedCreateBusyHandler => {
                store.create(CreateRequest::keyed(scope, new, payload))?;
            }
            Operation::TicketAndRecord => {
                db.prepare_cached("BEGIN")?.execute([])?;
                db.prepare_cached(INSERT_TICKET)?
                    .execute(params![scope.caller(), payload.canonical()])?;
                let ticket_id = db.last_insert_rowid();
                db.prepare_cached(INSERT_RECORD)?.execute(params![
                    scope.caller(),
                    scope.operation(),
                    new.as_str(),
                    payload.canonical(),
                    ticket_id,
                    response_text(ticket_id),
                ])?;
                db.prepare_cached("COMMIT")?.execute([])?;
            }
            Operation::PlainSelect => {
                plain_select(db, scope, old)?;
            }
            Operation::Replay => {
                replayed(
                    store.create(CreateRequest::keyed(scope, old, payload))?,
                    "probe replay",
                )?;
            }
        }
    }
    Ok(())
}
