//! Create and replay with few and with many records kept: the cost of a deeper index.

use std::fmt;
use std::time::Instant;

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{median_f64 as median, per_call, plain_select, replayed};
use crate::error::Result;
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::sqlite::{SqliteStore, StoreOptions, Synchronous};
use crate::tool::{CreateRequest, TicketTool};

/// Costs with a given number of records already kept.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Retained {
    /// Tickets and records in the store before the measurement.
    pub records: u64,
    /// Nanoseconds per keyed create of a new key (median of the repetitions).
    pub create_ns: f64,
    /// Nanoseconds per replay of a key chosen across the whole range, once the pages those keys
    /// live on are in memory (the later passes over the same keys; median).
    pub replay_ns: f64,
    /// The same replays on the first pass, when each may have to bring its page in from the file.
    pub replay_cold_ns: f64,
    /// Nanoseconds per bare `SELECT` of the same keys' records (the read at the heart of a
    /// replay, with no transaction and none of the store's code; median), measured in the same
    /// rounds: how much of the replay's change with size belongs to SQLite's B-tree alone.
    pub select_ns: f64,
}

/// One store of the comparison, filled and ready.
struct FilledStore {
    records: u64,
    store: SqliteStore,
    /// Keys spread over the whole kept range, replayed on every pass.
    old_keys: Vec<OperationKey>,
    create: Vec<f64>,
    replay: Vec<f64>,
    select: Vec<f64>,
    replay_cold_ns: f64,
}

/// Fills one CPU-bound store (`synchronous=OFF`, so the index, not the disk, is measured) per
/// entry of `sizes`, then measures `calls` creates and replays on each, `repeats` times. The
/// stores take turns within every repetition, so a change in the machine's speed during the run
/// falls on all of them alike; each figure is the median of its repetitions.
///
/// # Errors
/// Any store error; [`Error::ScenarioFailed`](crate::Error::ScenarioFailed) if a replay creates.
pub fn measure(sizes: &[u64], calls: u32, repeats: usize) -> Result<Vec<Retained>> {
    let scope = Scope::new("bench", "create_ticket")?;
    let payload = Payload::new(json!({"title": "Retained ticket", "priority": "normal"}))?;
    let mut stores = Vec::new();
    for &records in sizes {
        eprintln!("bench: filling a store with {records} records...");
        let store = SqliteStore::temporary_with(
            StoreOptions::default().with_synchronous(Synchronous::Off),
        )?;
        fill(&store, &scope, &payload, records)?;
        // Spread the replays over the whole key range, so they do not all hit one cached page.
        let stride = (records / u64::from(calls.max(1))).max(1);
        let old_keys = (0..u64::from(calls))
            .map(|i| OperationKey::try_from(format!("kept-{:010}", (i * stride) % records.max(1))))
            .collect::<Result<Vec<_>>>()?;
        // The first pass may have to bring each page in from the file.
        let replay_cold_ns = replay_all(&store, &scope, &payload, &old_keys)?;
        stores.push(FilledStore {
            records,
            store,
            old_keys,
            create: Vec::new(),
            replay: Vec::new(),
            select: Vec::new(),
            replay_cold_ns,
        });
    }
    for round in 0..repeats.max(1) {
        // Alternate the order too, so neither store always runs right after the other.
        let order: Vec<usize> = if round % 2 == 0 {
            (0..stores.len()).collect()
        } else {
            (0..stores.len()).rev().collect()
        };
        for index in order {
            let filled = &mut stores[index];
            let new_keys = (0..calls)
                .map(|i| OperationKey::try_from(format!("new-{round}-{i:08}")))
                .collect::<Result<Vec<_>>>()?;
            let start = Instant::now();
            for key in &new_keys {
                filled
                    .store
                    .create(CreateRequest::keyed(&scope, key, &payload))?;
            }
            filled.create.push(per_call(start.elapsed(), calls));
            let db = filled.store.connection();
            remove_new_rows(db, filled.records)?;
            // After writes, the first pass costs what a cold pass costs: the write connection no
            // longer has the replayed pages cached. One unmeasured pass brings them back, so the
            // measured pass is the warm one this figure stands for.
            replay_all(&filled.store, &scope, &payload, &filled.old_keys)?;
            let replay_ns = replay_all(&filled.store, &scope, &payload, &filled.old_keys)?;
            filled.replay.push(replay_ns);
            // The store's own connection did not run the replays (the shared write connection
            // did), so it too gets one unmeasured pass first.
            select_all(db, &scope, &filled.old_keys)?;
            filled
                .select
                .push(select_all(db, &scope, &filled.old_keys)?);
        }
    }
    Ok(stores
        .into_iter()
        .map(|filled| Retained {
            records: filled.records,
            create_ns: median(filled.create),
            replay_ns: median(filled.replay),
            replay_cold_ns: filled.replay_cold_ns,
            select_ns: median(filled.select),
        })
        .collect())
}

/// Keeps a store at its size, so the next round measures the same number of records. Both
/// deletes walk only the new rows (the kept tickets are numbered 1 to `records`). The records go
/// first, and the foreign-key check is off for this connection meanwhile: with it, deleting each
/// ticket would scan every record for one that still names it.
fn remove_new_rows(db: &Connection, records: u64) -> Result<()> {
    db.pragma_update(None, "foreign_keys", "OFF")?;
    db.execute_batch("BEGIN IMMEDIATE")?;
    db.execute("DELETE FROM operation_records WHERE key GLOB 'new-*'", [])?;
    db.execute(
        "DELETE FROM tickets WHERE id > ?1",
        [i64::try_from(records).unwrap_or(i64::MAX)],
    )?;
    db.execute_batch("COMMIT")?;
    db.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

/// Nanoseconds per replay of each key in `keys`.
fn replay_all(
    store: &SqliteStore,
    scope: &Scope,
    payload: &Payload,
    keys: &[OperationKey],
) -> Result<f64> {
    let start = Instant::now();
    for key in keys {
        replayed(
            store.create(CreateRequest::keyed(scope, key, payload))?,
            "bench retained replay",
        )?;
    }
    Ok(per_call(
        start.elapsed(),
        u32::try_from(keys.len()).unwrap_or(u32::MAX),
    ))
}

/// Nanoseconds per bare `SELECT` of each key's record on `db`.
fn select_all(db: &Connection, scope: &Scope, keys: &[OperationKey]) -> Result<f64> {
    let start = Instant::now();
    for key in keys {
        plain_select(db, scope, key)?;
    }
    Ok(per_call(
        start.elapsed(),
        u32::try_from(keys.len()).unwrap_or(u32::MAX),
    ))
}

/// Inserts `records` tickets with their operation records in one transaction, as a long-lived
/// store would have accumulated them.
fn fill(store: &SqliteStore, scope: &Scope, payload: &Payload, records: u64) -> Result<()> {
    let db = store.connection();
    db.execute_batch("BEGIN")?;
    {
        let mut ticket =
            db.prepare("INSERT INTO tickets (id, caller, payload) VALUES (?1, ?2, ?3)")?;
        let mut record = db.prepare(
            "INSERT INTO operation_records (caller, operation, key, payload, ticket_id, response)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for i in 0..records {
            let id = i64::try_from(i + 1).unwrap_or(i64::MAX);
            ticket.execute(params![id, scope.caller(), payload.canonical()])?;
            record.execute(params![
                scope.caller(),
                scope.operation(),
                format!("kept-{i:010}"),
                payload.canonical(),
                id,
                format!("{{\"ticket_id\":{id}}}"),
            ])?;
        }
    }
    db.execute_batch("COMMIT")?;
    // A long-lived store has long since moved its pages from the write-ahead log into the database
    // file; do the same, so the measurement is of the index and not of one huge log.
    db.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    Ok(())
}

/// Prints the comparison of the first (fewest records) with each larger count.
pub(super) fn write_table(f: &mut fmt::Formatter<'_>, rows: &[Retained]) -> fmt::Result {
    writeln!(
        f,
        "retained records (cpu-bound; speed relative to the smallest store)"
    )?;
    writeln!(
        f,
        "{:>10} {:>12} {:>8} {:>12} {:>8} {:>16} {:>12} {:>8}",
        "records",
        "create us",
        "speed",
        "replay us",
        "speed",
        "first pass us",
        "select us",
        "speed"
    )?;
    let Some(base) = rows.first() else {
        return Ok(());
    };
    for row in rows {
        writeln!(
            f,
            "{:>10} {:>12.2} {:>8.2} {:>12.2} {:>8.2} {:>16.2} {:>12.2} {:>8.2}",
            row.records,
            row.create_ns / 1000.0,
            base.create_ns / row.create_ns,
            row.replay_ns / 1000.0,
            base.replay_ns / row.replay_ns,
            row.replay_cold_ns / 1000.0,
            row.select_ns / 1000.0,
            base.select_ns / row.select_ns,
        )?;
    }
    Ok(())
}
