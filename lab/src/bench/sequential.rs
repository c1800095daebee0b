//! One caller, one reused connection: what the key adds to a create, and what a replay costs next
//! to a plain read.

use std::fmt;
use std::time::Instant;

use rusqlite::params;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{median_f64, per_call, replayed};
use crate::error::Result;
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::sqlite::{Coordination, INSERT_TICKET, SqliteStore, StoreOptions, Synchronous};
use crate::tool::{CreateRequest, TicketTool};

/// Costs with each durability setting.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sequential {
    /// `synchronous=FULL`: one fsync per commit.
    pub durable: Costs,
    /// `synchronous=OFF`: no fsync, so the CPU's share shows.
    pub cpu_bound: Costs,
}

/// Nanoseconds per call.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Costs {
    /// `INSERT INTO tickets` on its own (autocommit), as a tool without keys would.
    pub plain_insert_ns: f64,
    /// A keyed create with group commit (the default).
    pub keyed_create_group_commit_ns: f64,
    /// A keyed create on the caller's own connection (`Coordination::BusyHandler`).
    pub keyed_create_busy_handler_ns: f64,
    /// `SELECT` of one operation record by its primary key.
    pub plain_select_ns: f64,
    /// A keyed create whose record exists: a replay.
    pub replay_ns: f64,
}

/// Measures `calls` calls of each kind, durable and CPU-bound, in `repeats` rounds that take
/// turns, and keeps the median of each kind.
///
/// # Errors
/// Any store error; [`Error::ScenarioFailed`](crate::Error::ScenarioFailed) if a replay creates.
pub fn measure(calls: u32, repeats: usize) -> Result<Sequential> {
    Ok(Sequential {
        durable: costs(Synchronous::Full, calls, repeats)?,
        cpu_bound: costs(Synchronous::Off, calls, repeats)?,
    })
}

fn costs(synchronous: Synchronous, calls: u32, repeats: usize) -> Result<Costs> {
    let rounds = (0..repeats.max(1))
        .map(|_| round(synchronous, calls))
        .collect::<Result<Vec<_>>>()?;
    let median = |field: fn(&Costs) -> f64| median_f64(rounds.iter().map(field).collect());
    Ok(Costs {
        plain_insert_ns: median(|c| c.plain_insert_ns),
        keyed_create_group_commit_ns: median(|c| c.keyed_create_group_commit_ns),
        keyed_create_busy_handler_ns: median(|c| c.keyed_create_busy_handler_ns),
        plain_select_ns: median(|c| c.plain_select_ns),
        replay_ns: median(|c| c.replay_ns),
    })
}

/// One round: every kind of call, `calls` times each, on fresh stores.
fn round(synchronous: Synchronous, calls: u32) -> Result<Costs> {
    let options = StoreOptions::default().with_synchronous(synchronous);
    let scope = Scope::new("bench", "create_ticket")?;
    let payload = Payload::new(json!({"title": "Benchmark ticket", "priority": "normal"}))?;
    let keys = (0..calls)
        .map(|i| OperationKey::try_from(format!("bench-{i:08}")))
        .collect::<Result<Vec<_>>>()?;

    let store = SqliteStore::temporary_with(options)?;
    let plain_insert_ns = timed(calls, |_| {
        store
            .connection()
            .prepare_cached(INSERT_TICKET)?
            .execute(params![scope.caller(), payload.canonical()])?;
        Ok(())
    })?;

    let group = SqliteStore::temporary_with(options)?;
    let keyed_create_group_commit_ns = timed(calls, |i| {
        group
            .create(CreateRequest::keyed(&scope, &keys[i], &payload))
            .map(drop)
    })?;

    let alone = SqliteStore::temporary_with(options.with_coordination(Coordination::BusyHandler))?;
    let keyed_create_busy_handler_ns = timed(calls, |i| {
        alone
            .create(CreateRequest::keyed(&scope, &keys[i], &payload))
            .map(drop)
    })?;

    let plain_select_ns = timed(calls, |i| {
        let _: i64 = group
            .connection()
            .prepare_cached(
                "SELECT ticket_id FROM operation_records
                 WHERE caller = ?1 AND operation = ?2 AND key = ?3",
            )?
            .query_row(
                params![scope.caller(), scope.operation(), keys[i].as_str()],
                |row| row.get(0),
            )?;
        Ok(())
    })?;

    let replay_ns = timed(calls, |i| {
        replayed(
            group.create(CreateRequest::keyed(&scope, &keys[i], &payload))?,
            "bench replay",
        )
    })?;

    Ok(Costs {
        plain_insert_ns,
        keyed_create_group_commit_ns,
        keyed_create_busy_handler_ns,
        plain_select_ns,
        replay_ns,
    })
}

fn timed(calls: u32, mut call: impl FnMut(usize) -> Result<()>) -> Result<f64> {
    let start = Instant::now();
    for i in 0..calls as usize {
        call(i)?;
    }
    Ok(per_call(start.elapsed(), calls))
}

/// Reads one measurement out of [`Costs`].
type Field = fn(&Costs) -> f64;

impl fmt::Display for Sequential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "one caller, one reused connection (microseconds per call; ratio to the plain statement)"
        )?;
        writeln!(
            f,
            "{:<34} {:>12} {:>8} {:>12} {:>8}",
            "", "durable", "ratio", "cpu-bound", "ratio"
        )?;
        let rows: [(&str, Field, Field); 5] = [
            ("plain insert", |c| c.plain_insert_ns, |c| c.plain_insert_ns),
            (
                "keyed create (group commit)",
                |c| c.keyed_create_group_commit_ns,
                |c| c.plain_insert_ns,
            ),
            (
                "keyed create (busy handler)",
                |c| c.keyed_create_busy_handler_ns,
                |c| c.plain_insert_ns,
            ),
            (
                "plain select by key",
                |c| c.plain_select_ns,
                |c| c.plain_select_ns,
            ),
            ("replay", |c| c.replay_ns, |c| c.plain_select_ns),
        ];
        for (name, value, base) in rows {
            writeln!(
                f,
                "{:<34} {:>12.1} {:>8.2} {:>12.1} {:>8.2}",
                name,
                value(&self.durable) / 1000.0,
                value(&self.durable) / base(&self.durable),
                value(&self.cpu_bound) / 1000.0,
                value(&self.cpu_bound) / base(&self.cpu_bound),
            )?;
        }
        Ok(())
    }
}
