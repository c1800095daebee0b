//! A throwaway SQLite database for adapters that keep their own schema.

use std::path::PathBuf;
use std::sync::Arc;

use rusqlite::{Connection, params};

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::sqlite::{INSERT_RECORD, INSERT_TICKET};
use crate::tool::{CreateRequest, Step, TicketId};

/// A connection to a database file in a temporary folder, removed when the last connection to it
/// is dropped. Commits are not synced to disk: the simulator checks coordination, not durability.
pub struct Scratch {
    connection: Connection,
    path: PathBuf,
    folder: Arc<tempfile::TempDir>,
}

impl Scratch {
    /// A fresh database with `schema` applied.
    ///
    /// # Errors
    /// [`Error::TemporaryFolder`] or [`Error::Store`] if the folder or the database cannot be
    /// created.
    pub fn create(schema: &str) -> Result<Scratch> {
        let folder = tempfile::Builder::new()
            .prefix("tool-retries-sim-")
            .tempdir()
            .map_err(|source| Error::TemporaryFolder { source })?;
        let path = folder.path().join("tickets.sqlite");
        let scratch = Scratch::open(path, Arc::new(folder))?;
        scratch.connection.execute_batch(schema)?;
        Ok(scratch)
    }

    /// Another connection to the same database.
    ///
    /// # Errors
    /// [`Error::Store`] if the database cannot be opened.
    pub fn connect(&self) -> Result<Scratch> {
        Scratch::open(self.path.clone(), Arc::clone(&self.folder))
    }

    fn open(path: PathBuf, folder: Arc<tempfile::TempDir>) -> Result<Scratch> {
        let connection = Connection::open(&path)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "OFF")?;
        Ok(Scratch {
            connection,
            path,
            folder,
        })
    }

    /// The connection.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Every ticket identifier, ascending (the lab's `tickets` table).
    ///
    /// # Errors
    /// [`Error::Store`] if the query fails.
    pub fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        let mut statement = self
            .connection
            .prepare_cached("SELECT id FROM tickets ORDER BY id")?;
        let ids = statement.query_map([], |row| row.get(0))?;
        Ok(ids.collect::<Result<_, _>>()?)
    }

    /// How many rows the `operation_records` table holds.
    ///
    /// # Errors
    /// [`Error::Store`] if the query fails.
    pub fn count_records(&self) -> Result<u64> {
        let count: i64 =
            self.connection
                .query_row("SELECT COUNT(*) FROM operation_records", [], |row| {
                    row.get(0)
                })?;
        // COUNT(*) is never negative.
        Ok(count.unsigned_abs())
    }

    /// Deletes the records of one key; whether there were any.
    ///
    /// # Errors
    /// [`Error::Store`] if the statement fails.
    pub fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        let deleted = self.connection.execute(
            "DELETE FROM operation_records WHERE caller = ?1 AND operation = ?2 AND key = ?3",
            params![scope.caller(), scope.operation(), key.as_str()],
        )?;
        Ok(deleted > 0)
    }
}

/// The two writes of a first create, as the lab's store makes them: the ticket, then the record
/// that points to it, with the fault steps between. `record_payload` is what the record keeps to
/// compare later requests with.
///
/// # Errors
/// [`Error::InjectedFailure`] at a step the request's fault names; [`Error::Store`].
pub(super) fn insert_ticket_and_record(
    db: &Connection,
    request: CreateRequest<'_>,
    ticket_payload: &str,
    record_payload: &str,
) -> Result<TicketId> {
    request.fault.inject(Step::InsertTicket)?;
    db.execute(
        INSERT_TICKET,
        params![request.scope.caller(), ticket_payload],
    )?;
    let ticket_id = db.last_insert_rowid();
    request.fault.inject(Step::InsertRecord)?;
    if let Some(key) = request.key {
        db.execute(
            INSERT_RECORD,
            params![
                request.scope.caller(),
                request.scope.operation(),
                key.as_str(),
                record_payload,
                ticket_id,
                format!("{{\"ticket_id\":{ticket_id}}}"),
            ],
        )?;
    }
    Ok(ticket_id.into())
}
