//! A correct adapter on a schema of its own, as an engineer would write for a service whose
//! tickets carry their key: one row per ticket, the key in a unique index on the ticket itself.
//! Connections share one file and take turns on a lock of their own before `BEGIN IMMEDIATE`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use lab::{CreateRequest, Error, OperationKey, Outcome, Scope, Step, TicketId, TicketTool};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

/// The adapter.
pub struct KeyOnTicket {
    db: Connection,
    path: Arc<(tempfile::TempDir, PathBuf)>,
    writers: Arc<Mutex<()>>,
}

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS tickets (
        id INTEGER PRIMARY KEY,
        caller TEXT NOT NULL,
        operation TEXT NOT NULL,
        op_key TEXT,
        payload TEXT NOT NULL,
        UNIQUE (caller, operation, op_key)
    );";

fn open(path: &std::path::Path) -> lab::Result<Connection> {
    let db = Connection::open(path)?;
    db.pragma_update(None, "journal_mode", "WAL")?;
    // A test adapter: durability is not what it checks.
    db.pragma_update(None, "synchronous", "OFF")?;
    db.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(db)
}

impl KeyOnTicket {
    pub fn temporary() -> lab::Result<KeyOnTicket> {
        let folder = tempfile::tempdir().map_err(Error::adapter)?;
        let path = folder.path().join("tickets.sqlite");
        let db = open(&path)?;
        db.execute_batch(SCHEMA)?;
        Ok(KeyOnTicket {
            db,
            path: Arc::new((folder, path)),
            writers: Arc::default(),
        })
    }
}

impl TicketTool for KeyOnTicket {
    fn create(&self, request: CreateRequest<'_>) -> lab::Result<Outcome> {
        let _turn = self.writers.lock().unwrap_or_else(PoisonError::into_inner);
        request.fault.inject(Step::Begin)?;
        // The write lock before the lookup, so no other connection can insert between the two.
        let db = rusqlite::Transaction::new_unchecked(&self.db, TransactionBehavior::Immediate)?;
        request.fault.inject(Step::Lookup)?;
        let key = request.key.map(OperationKey::as_str);
        if let Some(key) = key {
            let saved: Option<(i64, String)> = db
                .query_row(
                    "SELECT id, payload FROM tickets WHERE caller = ?1 AND operation = ?2 AND op_key = ?3",
                    params![request.scope.caller(), request.scope.operation(), key],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            if let Some((id, payload)) = saved {
                if payload != request.payload.canonical() {
                    return Err(Error::PayloadConflict {
                        key: key.to_owned(),
                    });
                }
                return request.reply(Outcome::Replayed(id.into()));
            }
        }
        request.fault.inject(Step::InsertTicket)?;
        db.execute(
            "INSERT INTO tickets (caller, operation, op_key, payload) VALUES (?1, ?2, ?3, ?4)",
            params![
                request.scope.caller(),
                request.scope.operation(),
                key,
                request.payload.canonical()
            ],
        )?;
        let id = db.last_insert_rowid();
        // The record is the ticket row itself; the step stays, so sweeps reach it.
        request.fault.inject(Step::InsertRecord)?;
        request.fault.inject(Step::Commit)?;
        db.commit()?;
        request.reply(Outcome::Created(id.into()))
    }

    fn ticket_ids(&self) -> lab::Result<Vec<TicketId>> {
        let mut statement = self.db.prepare("SELECT id FROM tickets ORDER BY id")?;
        let ids: lab::Result<Vec<TicketId>> = statement
            .query_map([], |row| row.get::<_, i64>(0))?
            .map(|id| id.map(TicketId::from).map_err(Error::from))
            .collect();
        ids
    }

    fn count_records(&self) -> lab::Result<u64> {
        let n: i64 = self.db.query_row(
            "SELECT count(*) FROM tickets WHERE op_key IS NOT NULL",
            [],
            |r| r.get(0),
        )?;
        Ok(n as u64)
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> lab::Result<bool> {
        let _turn = self.writers.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = self.db.execute(
            "UPDATE tickets SET op_key = NULL WHERE caller = ?1 AND operation = ?2 AND op_key = ?3",
            params![scope.caller(), scope.operation(), key.as_str()],
        )?;
        Ok(changed > 0)
    }

    fn connect(&self) -> lab::Result<Self> {
        Ok(KeyOnTicket {
            db: open(&self.path.1)?,
            path: Arc::clone(&self.path),
            writers: Arc::clone(&self.writers),
        })
    }
}
