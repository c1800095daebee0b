//! The SQLite store: tickets and operation records in one database file, written together in one
//! transaction.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::tool::{CreateRequest, Fault, Outcome, Step, TicketId, TicketTool};

/// How often SQLite syncs to disk on commit (its `synchronous` pragma).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synchronous {
    /// One fsync per commit in WAL mode: a committed ticket survives power loss. The default.
    #[default]
    Full,
    /// No fsync at all: for measuring CPU cost only, never for data you keep.
    Off,
}

/// Settings for opening a [`SqliteStore`].
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct StoreOptions {
    /// How long a connection waits for another connection's write lock before SQLite gives up with
    /// `SQLITE_BUSY`. Default: 10 seconds.
    pub busy_timeout: Duration,
    /// Durability of each commit. Default: [`Synchronous::Full`].
    pub synchronous: Synchronous,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            busy_timeout: Duration::from_secs(10),
            synchronous: Synchronous::Full,
        }
    }
}

impl StoreOptions {
    /// These options with another busy timeout.
    pub fn with_busy_timeout(self, busy_timeout: Duration) -> Self {
        StoreOptions {
            busy_timeout,
            ..self
        }
    }

    /// These options with another durability setting.
    pub fn with_synchronous(self, synchronous: Synchronous) -> Self {
        StoreOptions {
            synchronous,
            ..self
        }
    }
}

// ANCHOR: schema
/// The schema. An operation record names its ticket, and its primary key is the whole identity:
/// caller, operation type and key.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tickets (
    id      INTEGER PRIMARY KEY,
    caller  TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS operation_records (
    caller    TEXT NOT NULL,
    operation TEXT NOT NULL,
    key       TEXT NOT NULL,
    payload   TEXT NOT NULL,
    ticket_id INTEGER NOT NULL REFERENCES tickets (id),
    response  TEXT NOT NULL,
    PRIMARY KEY (caller, operation, key)
) WITHOUT ROWID;
";
// ANCHOR_END: schema

/// A connection to a SQLite ticket store.
///
/// Each value owns one connection and reuses it for every call; [`TicketTool::connect`] opens
/// another for a second caller. A store made by [`SqliteStore::temporary`] lives in a temporary
/// folder that is removed when the last connection to it is dropped.
///
/// ```
/// use lab::{CreateRequest, OperationKey, Outcome, Payload, Scope, SqliteStore, TicketTool};
/// use serde_json::json;
///
/// let store = SqliteStore::temporary()?;
/// let scope = Scope::new("release-bot", "create_ticket")?;
/// let key = OperationKey::try_from("release-42")?;
/// let payload = Payload::new(json!({"title": "Ship 4.2"}))?;
///
/// let first = store.create(CreateRequest::keyed(&scope, &key, &payload))?;
/// let again = store.create(CreateRequest::keyed(&scope, &key, &payload))?;
/// assert_eq!(first, Outcome::Created(1));
/// assert_eq!(again, Outcome::Replayed(1));
/// assert_eq!(store.count_tickets()?, 1);
/// # Ok::<(), lab::Error>(())
/// ```
pub struct SqliteStore {
    connection: Connection,
    path: PathBuf,
    options: StoreOptions,
    /// Keeps a temporary folder alive while any connection to it is open.
    _folder: Option<Arc<tempfile::TempDir>>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path` with default options.
    ///
    /// # Errors
    /// [`Error::Store`] if the file cannot be opened or the schema cannot be created.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        SqliteStore::open_with(path, StoreOptions::default())
    }

    /// Opens (creating if needed) the store at `path`.
    ///
    /// # Errors
    /// [`Error::Store`] if the file cannot be opened or the schema cannot be created.
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<SqliteStore> {
        let store = SqliteStore::connect_to(path.as_ref().to_owned(), options, None)?;
        store.connection.execute_batch(SCHEMA)?;
        Ok(store)
    }

    /// A fresh store in a new temporary folder, removed when the last connection is dropped.
    ///
    /// # Errors
    /// [`Error::Store`] if the folder or the database cannot be created.
    pub fn temporary() -> Result<SqliteStore> {
        SqliteStore::temporary_with(StoreOptions::default())
    }

    /// Like [`SqliteStore::temporary`], with options.
    ///
    /// # Errors
    /// [`Error::Store`] if the folder or the database cannot be created.
    pub fn temporary_with(options: StoreOptions) -> Result<SqliteStore> {
        let folder = tempfile::Builder::new()
            .prefix("tool-retries-")
            .tempdir()
            .map_err(|source| Error::TemporaryFolder { source })?;
        let path = folder.path().join("tickets.sqlite");
        let store = SqliteStore::connect_to(path, options, Some(Arc::new(folder)))?;
        store.connection.execute_batch(SCHEMA)?;
        Ok(store)
    }

    fn connect_to(
        path: PathBuf,
        options: StoreOptions,
        folder: Option<Arc<tempfile::TempDir>>,
    ) -> Result<SqliteStore> {
        let connection = Connection::open(&path)?;
        connection.busy_timeout(options.busy_timeout)?;
        // WAL lets readers proceed during a write; the mode is stored in the file, so setting it
        // again on later connections is a cheap no-op.
        connection.pragma_update(None, "journal_mode", "WAL")?;
        let synchronous = match options.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Off => "OFF",
        };
        connection.pragma_update(None, "synchronous", synchronous)?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        Ok(SqliteStore {
            connection,
            path,
            options,
            _folder: folder,
        })
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The underlying connection, for inspection in tests and examples.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    fn begin_immediate(&self) -> Result<Transaction<'_>> {
        // new_unchecked lets a shared reference start a transaction; SqliteStore is not Sync, so
        // no other thread can use this connection meanwhile.
        Ok(Transaction::new_unchecked(
            &self.connection,
            TransactionBehavior::Immediate,
        )?)
    }
}

impl SqliteStore {
    // ANCHOR: create
    fn create_ticket(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        inject(request, Step::Begin)?;
        // IMMEDIATE takes the write lock before the lookup, so two callers with one key cannot
        // both see "no record" and both insert.
        let tx = self.begin_immediate()?;
        inject(request, Step::Lookup)?;
        let payload = request.payload.canonical();
        if let Some(key) = request.key {
            let saved: Option<(String, TicketId)> = tx
                .prepare_cached(
                    "SELECT payload, ticket_id FROM operation_records
                     WHERE caller = ?1 AND operation = ?2 AND key = ?3",
                )?
                .query_row(
                    params![
                        request.scope.caller(),
                        request.scope.operation(),
                        key.as_str()
                    ],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            if let Some((saved_payload, ticket_id)) = saved {
                if saved_payload != payload {
                    // Dropping `tx` rolls back; nothing was written anyway.
                    return Err(Error::PayloadConflict {
                        key: key.to_string(),
                    });
                }
                drop(tx);
                return reply(request, Outcome::Replayed(ticket_id));
            }
        }
        inject(request, Step::InsertTicket)?;
        tx.prepare_cached("INSERT INTO tickets (caller, payload) VALUES (?1, ?2)")?
            .execute(params![request.scope.caller(), payload])?;
        let ticket_id = tx.last_insert_rowid();
        // An injected failure here returns early; dropping `tx` rolls back the ticket.
        inject(request, Step::InsertRecord)?;
        if let Some(key) = request.key {
            tx.prepare_cached(
                "INSERT INTO operation_records
                 (caller, operation, key, payload, ticket_id, response)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                request.scope.caller(),
                request.scope.operation(),
                key.as_str(),
                payload,
                ticket_id,
                format!("{{\"ticket_id\":{ticket_id}}}"),
            ])?;
        }
        inject(request, Step::Commit)?;
        tx.commit()?;
        reply(request, Outcome::Created(ticket_id))
    }
    // ANCHOR_END: create
}

impl TicketTool for SqliteStore {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        self.create_ticket(request)
    }

    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        let mut statement = self
            .connection
            .prepare_cached("SELECT id FROM tickets ORDER BY id")?;
        let ids = statement.query_map([], |row| row.get(0))?;
        Ok(ids.collect::<Result<_, _>>()?)
    }

    fn count_tickets(&self) -> Result<u64> {
        self.count("SELECT COUNT(*) FROM tickets")
    }

    fn count_records(&self) -> Result<u64> {
        self.count("SELECT COUNT(*) FROM operation_records")
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        let deleted = self.connection.execute(
            "DELETE FROM operation_records WHERE caller = ?1 AND operation = ?2 AND key = ?3",
            params![scope.caller(), scope.operation(), key.as_str()],
        )?;
        Ok(deleted > 0)
    }

    fn connect(&self) -> Result<SqliteStore> {
        SqliteStore::connect_to(self.path.clone(), self.options, self._folder.clone())
    }
}

impl SqliteStore {
    fn count(&self, sql: &str) -> Result<u64> {
        let count: i64 = self
            .connection
            .prepare_cached(sql)?
            .query_row([], |row| row.get(0))?;
        // COUNT(*) is never negative.
        Ok(count.unsigned_abs())
    }
}

/// Fails the call at `step` when the request's fault asks for it.
fn inject(request: CreateRequest<'_>, step: Step) -> Result<()> {
    if request.fault.fails_at(step) {
        return Err(Error::InjectedFailure);
    }
    Ok(())
}

// ANCHOR: reply
/// Delivers the outcome, unless the test asked for the reply to be lost. This runs after the commit:
/// the ticket exists, yet the caller learns nothing.
fn reply(request: CreateRequest<'_>, outcome: Outcome) -> Result<Outcome> {
    if request.fault == Fault::LoseReply {
        return Err(Error::OutcomeUnknown {
            key: request.key.map(ToString::to_string),
            reason: "the reply was lost after the commit".to_owned(),
        });
    }
    Ok(outcome)
}
// ANCHOR_END: reply

/// The version of the SQLite library linked into this build.
pub fn sqlite_version() -> &'static str {
    rusqlite::version()
}
