//! Retention for the ticket service: replay records are pruned after a window, and each pruned key leaves
//! a compact tombstone (its identity and when it expired, no payload, no response), kept longer,
//! so a late retry is answered 410 "expired" instead of silently becoming a second ticket.
//!
//! Time comes from a [`Clock`], so tests move it forward instead of sleeping.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Result;
use crate::key::{OperationKey, Scope};

/// The service's retention tables, beside the store's own in the same file. `record_times` says
/// when each record was first answered; `expired_keys` holds the tombstones.
pub const RETENTION_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS record_times (
    caller     TEXT NOT NULL,
    operation  TEXT NOT NULL,
    key        TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (caller, operation, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS expired_keys (
    caller     TEXT NOT NULL,
    operation  TEXT NOT NULL,
    key        TEXT NOT NULL,
    expired_at INTEGER NOT NULL,
    PRIMARY KEY (caller, operation, key)
) WITHOUT ROWID;
";

/// Where the service reads the time, in whole seconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time in seconds.
    fn now(&self) -> u64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> u64 {
        // A clock set before 1970 reads as the epoch: records then look new, which only delays
        // pruning.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs())
    }
}

/// A clock that moves only when told to, for tests. Clones share one time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    seconds: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `seconds`.
    pub fn at(seconds: u64) -> ManualClock {
        ManualClock {
            seconds: Arc::new(AtomicU64::new(seconds)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.seconds.fetch_add(by.as_secs(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u64 {
        self.seconds.load(Ordering::SeqCst)
    }
}

/// How long the service keeps what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// A replay record is kept at least this long after its first answer; a retry within it is
    /// replayed.
    pub records: Duration,
    /// A tombstone is kept this long after its record was pruned; a retry within it gets 410.
    /// After it, the key is unknown and a create with it makes a new ticket.
    pub tombstones: Duration,
}

/// What one pruning pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Records deleted, each leaving a tombstone.
    pub records: u64,
    /// Tombstones deleted because they outlived their own window.
    pub tombstones: u64,
}

/// Seconds as SQLite's integer; times past `i64::MAX` seconds do not occur.
fn sql_time(seconds: u64) -> i64 {
    i64::try_from(seconds).unwrap_or(i64::MAX)
}

/// Notes when the record of `key` was first answered. Called after the create committed; a record
/// whose time was never noted (a crash in between) gets one at the next pruning pass, so it is
/// kept longer, never shorter.
///
/// # Errors
/// [`Error::Store`](crate::Error::Store) on a database error.
pub fn note_record(db: &Connection, scope: &Scope, key: &OperationKey, now: u64) -> Result<()> {
    db.prepare_cached(
        "INSERT OR IGNORE INTO record_times (caller, operation, key, created_at)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        scope.caller(),
        scope.operation(),
        key.as_str(),
        sql_time(now)
    ])?;
    Ok(())
}

/// Whether `key` has a tombstone: its record was pruned and a retry must get 410.
///
/// # Errors
/// [`Error::Store`](crate::Error::Store) on a database error.
pub fn is_expired(db: &Connection, scope: &Scope, key: &OperationKey) -> Result<bool> {
    Ok(db
        .prepare_cached(
            "SELECT 1 FROM expired_keys WHERE caller = ?1 AND operation = ?2 AND key = ?3",
        )?
        .query_row(
            params![scope.caller(), scope.operation(), key.as_str()],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

// ANCHOR: prune
/// One pruning pass at time `now`, in one transaction: records older than the window become
/// tombstones, and tombstones older than theirs go. `in_flight` keys are left alone this pass.
///
/// # Errors
/// [`Error::Store`](crate::Error::Store) on a database error; the transaction is rolled back.
pub fn prune(
    db: &Connection,
    now: u64,
    retention: Retention,
    in_flight: &HashSet<(String, String)>,
) -> Result<Pruned> {
    let tx = rusqlite::Transaction::new_unchecked(db, rusqlite::TransactionBehavior::Immediate)?;
    // Records answered before retention began being tracked are dated now: kept longer.
    tx.execute(
        "INSERT OR IGNORE INTO record_times (caller, operation, key, created_at)
         SELECT caller, operation, key, ?1 FROM operation_records",
        [sql_time(now)],
    )?;
    let cutoff = now.saturating_sub(retention.records.as_secs());
    let old: Vec<(String, String, String)> = tx
        .prepare(
            "SELECT caller, operation, key FROM record_times WHERE created_at <= ?1
             ORDER BY caller, operation, key",
        )?
        .query_map([sql_time(cutoff)], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?
        .collect::<Result<_, _>>()?;
    let mut pruned = Pruned::default();
    for (caller, operation, key) in old {
        if in_flight.contains(&(caller.clone(), key.clone())) {
            continue;
        }
        let identity = params![caller, operation, key];
        tx.execute(
            "DELETE FROM operation_records WHERE caller = ?1 AND operation = ?2 AND key = ?3",
            identity,
        )?;
        tx.execute(
            "DELETE FROM record_times WHERE caller = ?1 AND operation = ?2 AND key = ?3",
            identity,
        )?;
        tx.execute(
            "INSERT OR REPLACE INTO expired_keys (caller, operation, key, expired_at)
             VALUES (?1, ?2, ?3, ?4)",
            params![caller, operation, key, sql_time(now)],
        )?;
        pruned.records += 1;
    }
    let tombstone_cutoff = now.saturating_sub(retention.tombstones.as_secs());
    let gone = tx.execute(
        "DELETE FROM expired_keys WHERE expired_at <= ?1",
        [sql_time(tombstone_cutoff)],
    )?;
    pruned.tombstones = gone as u64;
    tx.commit()?;
    Ok(pruned)
}
// ANCHOR_END: prune
