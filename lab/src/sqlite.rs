//! The SQLite store: tickets and operation records in one database file, written together in one
//! transaction.
//!
//! Writers in one process take turns on one write connection per database file, and the creates
//! that arrive together are committed in one transaction (group commit; see [`Coordination`]).
//! Other processes are kept apart by SQLite's own lock and the busy timeout.

mod writer;

pub use writer::GroupCommits;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::ffi;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, params};

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

/// How writers in this process take turns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Coordination {
    /// Stores on one file in this process share one write connection and a queue. A caller that
    /// finds no commit in progress runs every create queued at that moment in one transaction,
    /// each in its own savepoint, and hands each caller its outcome after the shared commit.
    /// Nobody sleeps in SQLite's busy handler, and one fsync covers many creates. A retry whose
    /// record exists is answered by a read, without queueing and without the write lock.
    /// The default.
    #[default]
    GroupCommit,
    /// The textbook form: every connection takes the write lock itself with `BEGIN IMMEDIATE`,
    /// looks up, inserts and commits; contending callers wait in SQLite's busy handler. Kept to
    /// measure the difference, and as the plainest reading of the design.
    BusyHandler,
}

/// Settings for opening a [`SqliteStore`].
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct StoreOptions {
    /// How long a connection waits for another connection's write lock before SQLite gives up with
    /// `SQLITE_BUSY`. With [`Coordination::GroupCommit`] only other processes make anyone wait.
    /// Default: 10 seconds.
    pub busy_timeout: Duration,
    /// Durability of each commit. Default: [`Synchronous::Full`].
    pub synchronous: Synchronous,
    /// How writers in this process take turns. Default: [`Coordination::GroupCommit`].
    pub coordination: Coordination,
    /// The most creates one group commit may hold. Default: 256.
    pub max_batch: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            busy_timeout: Duration::from_secs(10),
            synchronous: Synchronous::Full,
            coordination: Coordination::GroupCommit,
            max_batch: 256,
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

    /// These options with another way of coordinating writers.
    pub fn with_coordination(self, coordination: Coordination) -> Self {
        StoreOptions {
            coordination,
            ..self
        }
    }

    /// These options with another group-commit bound (at least 1).
    pub fn with_max_batch(self, max_batch: usize) -> Self {
        StoreOptions {
            max_batch: max_batch.max(1),
            ..self
        }
    }
}

// ANCHOR: schema
/// The schema. An operation record names its ticket, and its primary key is the whole identity:
/// caller, operation type and key. The key comes first in the index because it is the column that
/// tells records apart: most callers and operation types repeat on every row, so with the key
/// first one string comparison usually settles each step down the tree.
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
    PRIMARY KEY (key, caller, operation)
) WITHOUT ROWID;
";
// ANCHOR_END: schema

/// A connection to a SQLite ticket store.
///
/// Each value owns one connection and reuses it for every call; [`TicketTool::connect`] opens
/// another for a second caller. Writes go through the file's shared write connection (or, with
/// [`Coordination::BusyHandler`], through this value's own). A store made by
/// [`SqliteStore::temporary`] lives in a temporary folder that is removed when the last connection
/// to it is dropped.
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
/// assert_eq!(first, Outcome::Created(1.into()));
/// assert_eq!(again, Outcome::Replayed(1.into()));
/// assert_eq!(store.count_tickets()?, 1);
/// # Ok::<(), lab::Error>(())
/// ```
pub struct SqliteStore {
    // Fields drop in this order: the shared write connection closes (with the last store on the
    // file) before a temporary folder is removed.
    connection: Connection,
    path: PathBuf,
    options: StoreOptions,
    lifetime: Lifetime,
    writer: Option<Arc<writer::Writer>>,
    folder: Option<Arc<tempfile::TempDir>>,
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
    /// Stores opened on one file in one process share one write connection, opened with the first
    /// one's options.
    ///
    /// # Errors
    /// [`Error::Store`] if the file cannot be opened or the schema cannot be created.
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<SqliteStore> {
        SqliteStore::create_schema_and_connect(
            path.as_ref().to_owned(),
            options,
            Lifetime::Kept,
            None,
        )
    }

    /// A fresh store in a new temporary folder, removed when the last connection is dropped.
    ///
    /// # Errors
    /// [`Error::TemporaryFolder`] or [`Error::Store`] if the folder or the database cannot be
    /// created.
    pub fn temporary() -> Result<SqliteStore> {
        SqliteStore::temporary_with(StoreOptions::default())
    }

    /// Like [`SqliteStore::temporary`], with options.
    ///
    /// # Errors
    /// [`Error::TemporaryFolder`] or [`Error::Store`] if the folder or the database cannot be
    /// created.
    pub fn temporary_with(options: StoreOptions) -> Result<SqliteStore> {
        let folder = tempfile::Builder::new()
            .prefix("tool-retries-")
            .tempdir()
            .map_err(|source| Error::TemporaryFolder { source })?;
        let path = folder.path().join("tickets.sqlite");
        SqliteStore::create_schema_and_connect(
            path,
            options,
            Lifetime::Temporary,
            Some(Arc::new(folder)),
        )
    }

    // ANCHOR: set_up
    /// Opens the file, making it first if need be: the switch to WAL and the schema are written
    /// with `synchronous=OFF`, since no ticket exists yet that a crash could lose. A crash part
    /// way leaves a file with no tables, or an empty one; the next open finds the schema missing
    /// and creates it (the tables are made in one transaction, so never one without the other),
    /// and SQLite refuses a file whose first page is damaged. Before any ticket is written, one
    /// fsync makes the file's first page durable; the schema sits in the WAL, which the first
    /// ticket's commit syncs with its directory.
    fn create_schema_and_connect(
        path: PathBuf,
        options: StoreOptions,
        lifetime: Lifetime,
        folder: Option<Arc<tempfile::TempDir>>,
    ) -> Result<SqliteStore> {
        let connection = open_unsynced(&path, options, lifetime)?;
        // Creating the tables takes the write lock even when they exist, so callers that open a
        // store at the same moment would queue for it in SQLite's busy handler. Reading the
        // schema first needs no lock; only a new file pays for the transaction.
        if !has_schema(&connection)? {
            connection.execute_batch(&format!("BEGIN IMMEDIATE; {SCHEMA} COMMIT;"))?;
        }
        set_durability(&connection, options)?;
        if options.synchronous == Synchronous::Full {
            // SQLite syncs only the WAL on commit. The main file's first page (which says the
            // file is in WAL mode) was written unsynced above, and without it a crash would
            // leave an empty file whose WAL SQLite then deletes, tickets and all.
            sync_database_file(&connection, &path)?;
        }
        SqliteStore::with_connection(connection, path, options, lifetime, folder)
    }
    // ANCHOR_END: set_up

    fn with_connection(
        connection: Connection,
        path: PathBuf,
        options: StoreOptions,
        lifetime: Lifetime,
        folder: Option<Arc<tempfile::TempDir>>,
    ) -> Result<SqliteStore> {
        let writer = match options.coordination {
            Coordination::GroupCommit => Some(writer::Writer::for_file(&path, options, lifetime)?),
            Coordination::BusyHandler => None,
        };
        Ok(SqliteStore {
            connection,
            path,
            options,
            lifetime,
            writer,
            folder,
        })
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This value's own connection, for inspection in tests and examples.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// The group commits run by this file's stores in this process, or `None` with
    /// [`Coordination::BusyHandler`].
    pub fn group_commits(&self) -> Option<GroupCommits> {
        self.writer.as_ref().map(|writer| writer.group_commits())
    }

    /// The options this store was opened with.
    pub fn options(&self) -> StoreOptions {
        self.options
    }

    // ANCHOR: busy_handler
    /// The create on this value's own connection, in its own transaction. Contending connections
    /// wait for the write lock in SQLite's busy handler.
    fn create_alone(&self, call: &Call<'_>) -> Result<Outcome> {
        // commit_together returns exactly one outcome for each call it is given.
        writer::commit_together(&self.connection, &[*call])
            .pop()
            .expect("one outcome per call")
    }
    // ANCHOR_END: busy_handler
}

/// Whether both tables exist already. A file that has them was made by [`SCHEMA`], which creates
/// both in one transaction.
fn has_schema(connection: &Connection) -> Result<bool> {
    let tables: i64 = connection.query_row(
        "SELECT COUNT(*) FROM sqlite_schema
         WHERE type = 'table' AND name IN ('tickets', 'operation_records')",
        [],
        |row| row.get(0),
    )?;
    Ok(tables == 2)
}

/// Whether a store's file is kept after its last connection closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lifetime {
    /// A file the caller named: on close, SQLite copies the WAL into it (a checkpoint, with its
    /// syncs) and removes the WAL.
    Kept,
    /// A file in a temporary folder that is removed after the last connection: a checkpoint on
    /// close would sync data about to be deleted, so connections close without one.
    Temporary,
}

/// Opens one connection with the store's settings.
fn open_connection(path: &Path, options: StoreOptions, lifetime: Lifetime) -> Result<Connection> {
    let connection = open_unsynced(path, options, lifetime)?;
    set_durability(&connection, options)?;
    Ok(connection)
}

/// Opens one connection in WAL mode with `synchronous=OFF`: only for making the file, before
/// [`set_durability`].
fn open_unsynced(path: &Path, options: StoreOptions, lifetime: Lifetime) -> Result<Connection> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(options.busy_timeout)?;
    if lifetime == Lifetime::Temporary {
        connection.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    }
    // On a new file the switch to WAL writes the first page, in a rollback-journal transaction
    // of its own; there is nothing yet to keep, so it goes unsynced.
    connection.pragma_update(None, "synchronous", "OFF")?;
    // WAL lets readers proceed during a write; the mode is stored in the file, so setting it again
    // on later connections is a cheap no-op.
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "foreign_keys", "ON")?;
    // Reading the file through a memory map saves a system call and a copy per page read, which
    // keeps lookups cheap when a long-lived store holds millions of records.
    connection.pragma_update(None, "mmap_size", 256 * 1024 * 1024)?;
    // SQLite's own page cache holds decoded pages; 2 MiB (its default) is too small for the
    // interior and hot leaf pages of millions of records. Negative means KiB; memory is taken only
    // as pages are read.
    connection.pragma_update(None, "cache_size", -32 * 1024)?;
    Ok(connection)
}

/// Sets the durability every commit of a ticket runs with.
fn set_durability(connection: &Connection, options: StoreOptions) -> Result<()> {
    let synchronous = match options.synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Off => "OFF",
    };
    connection.pragma_update(None, "synchronous", synchronous)?;
    Ok(())
}

/// Flushes the database file to the disk through SQLite's own descriptor of it.
///
/// Never by opening the file again with another API: closing any descriptor of a file drops
/// every POSIX lock the process holds on it, SQLite's included. Another process closing its
/// connection would then take itself for the last one, checkpoint, and delete the WAL that this
/// process still writes: every later commit would go to an unlinked file and be lost.
fn sync_database_file(connection: &Connection, path: &Path) -> Result<()> {
    let failed = |code: i32| Error::Io {
        action: format!("cannot sync the database file {}", path.display()),
        source: std::io::Error::other(format!("SQLite result code {code}")),
    };
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: the handle is this open connection's, "main" names its database, and
    // SQLITE_FCNTL_FILE_POINTER writes one `sqlite3_file` pointer into `file`, which lives
    // across the call.
    let code = unsafe {
        ffi::sqlite3_file_control(
            connection.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast(),
        )
    };
    if code != ffi::SQLITE_OK || file.is_null() {
        return Err(failed(code));
    }
    // SAFETY: SQLite owns the file object while the connection is open, which `connection`
    // borrowed keeps it; a file that is open has its methods set.
    let sync = unsafe { (*file).pMethods.as_ref() }.and_then(|methods| methods.xSync);
    let Some(sync) = sync else {
        return Err(failed(ffi::SQLITE_MISUSE));
    };
    // SAFETY: xSync of the file's own VFS, on the file it belongs to, with a valid flag; SQLite
    // calls it the same way from its pager, which is not running: this thread owns the
    // connection.
    match unsafe { sync(file, ffi::SQLITE_SYNC_NORMAL) } {
        ffi::SQLITE_OK => Ok(()),
        code => Err(failed(code)),
    }
}

/// One create, as plain strings: what the SQL needs, borrowed from a request or from a job queued
/// for the writer thread.
#[derive(Clone, Copy, Debug)]
struct Call<'a> {
    caller: &'a str,
    operation: &'a str,
    key: Option<&'a str>,
    payload: &'a str,
    fault: Fault,
}

impl<'a> From<CreateRequest<'a>> for Call<'a> {
    fn from(request: CreateRequest<'a>) -> Call<'a> {
        Call {
            caller: request.scope.caller(),
            operation: request.scope.operation(),
            key: request.key.map(OperationKey::as_str),
            payload: request.payload.canonical(),
            fault: request.fault,
        }
    }
}

// ANCHOR: create
/// The create itself, inside a transaction (or savepoint) that already holds the write lock, so no
/// other writer can insert a record for this key between the lookup and the inserts. The caller
/// commits, or rolls back on any error.
fn create_in_transaction(db: &Connection, call: &Call<'_>) -> Result<Outcome> {
    if let Some(saved) = lookup(db, call)? {
        return saved; // a replay or a conflict: nothing to write
    }
    insert_new(db, call)
}

/// The ticket's insert; `?1` is the caller, `?2` the payload.
pub(crate) const INSERT_TICKET: &str = "INSERT INTO tickets (caller, payload) VALUES (?1, ?2)";

/// The record's insert: caller, operation type, key, payload, ticket and saved response.
pub(crate) const INSERT_RECORD: &str = "INSERT INTO operation_records
     (caller, operation, key, payload, ticket_id, response)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// The record's insert where a record for the key may exist: it then writes nothing, and says
/// so by changing no row. Only the primary key's conflict is meant; any other constraint still
/// fails the statement.
pub(crate) const INSERT_RECORD_UNLESS_RECORDED: &str = "INSERT INTO operation_records
     (caller, operation, key, payload, ticket_id, response)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
     ON CONFLICT (key, caller, operation) DO NOTHING";

/// The ticket, then the record that points to it: the two writes of a first create.
fn insert_new(db: &Connection, call: &Call<'_>) -> Result<Outcome> {
    call.fault.inject(Step::InsertTicket)?;
    db.prepare_cached(INSERT_TICKET)?
        .execute(params![call.caller, call.payload])?;
    let ticket_id = db.last_insert_rowid();
    // An injected failure here stops between the two inserts; the rollback removes the ticket.
    call.fault.inject(Step::InsertRecord)?;
    if let Some(key) = call.key {
        insert_record(db, INSERT_RECORD, call, key, ticket_id)?;
    }
    Ok(Outcome::Created(ticket_id.into()))
}

/// The record of `call` under `key`, pointing to `ticket_id`, by `sql` ([`INSERT_RECORD`] or
/// [`INSERT_RECORD_UNLESS_RECORDED`]); the rows it wrote.
fn insert_record(
    db: &Connection,
    sql: &str,
    call: &Call<'_>,
    key: &str,
    ticket_id: i64,
) -> rusqlite::Result<usize> {
    db.prepare_cached(sql)?.execute(params![
        call.caller,
        call.operation,
        key,
        call.payload,
        ticket_id,
        response_text(ticket_id),
    ])
}

/// The saved outcome for this key, if a record exists: the ticket for the same payload, a
/// conflict for another. A call without a key has no record.
fn lookup(db: &Connection, call: &Call<'_>) -> Result<Option<Result<Outcome>>> {
    let Some(key) = call.key else {
        return Ok(None);
    };
    call.fault.inject(Step::Lookup)?;
    let saved: Option<(bool, TicketId)> = db
        .prepare_cached(
            "SELECT payload, ticket_id FROM operation_records
             WHERE caller = ?1 AND operation = ?2 AND key = ?3",
        )?
        .query_row(params![call.caller, call.operation, key], |row| {
            // Compared where SQLite holds it: a replay copies no text out of the record.
            let same_payload = row.get_ref(0)? == ValueRef::Text(call.payload.as_bytes());
            Ok((same_payload, row.get(1)?))
        })
        .optional()?;
    Ok(saved.map(|(same_payload, ticket_id)| {
        if same_payload {
            Ok(Outcome::Replayed(ticket_id))
        } else {
            Err(Error::PayloadConflict {
                key: key.to_owned(),
            })
        }
    }))
}
// ANCHOR_END: create

impl TicketTool for SqliteStore {
    // ANCHOR: dispatch
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        let call = Call::from(request);
        call.fault.inject(Step::Begin)?;
        // A record never changes once committed, so the group-commit path may settle a retry
        // whose record exists with one read, without the write lock and without waiting.
        let outcome = match &self.writer {
            None => self.create_alone(&call)?,
            Some(writer) => writer.create(&call, &self.connection)?,
        };
        request.reply(outcome)
    }
    // ANCHOR_END: dispatch

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
        let connection = open_connection(&self.path, self.options, self.lifetime)?;
        SqliteStore::with_connection(
            connection,
            self.path.clone(),
            self.options,
            self.lifetime,
            self.folder.clone(),
        )
    }
}

/// A ticket as its caller sees it: the identifier and the canonical payload text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredTicket {
    /// The ticket's identifier.
    pub id: TicketId,
    /// The payload the ticket was created with, as canonical JSON text.
    pub payload: String,
}

/// Inspection within one caller's scope, and the saved responses a front end replays.
impl SqliteStore {
    /// The tickets `caller` created, in ascending order of identifier. A key never grants access:
    /// other callers' tickets are not listed.
    ///
    /// # Errors
    /// [`Error::Store`] on a database error.
    pub fn tickets_of(&self, caller: &str) -> Result<Vec<StoredTicket>> {
        let mut statement = self
            .connection
            .prepare_cached("SELECT id, payload FROM tickets WHERE caller = ?1 ORDER BY id")?;
        let tickets = statement.query_map([caller], |row| {
            Ok(StoredTicket {
                id: row.get(0)?,
                payload: row.get(1)?,
            })
        })?;
        Ok(tickets.collect::<Result<_, _>>()?)
    }

    /// One ticket of `caller`, or `None` when it does not exist or belongs to another caller.
    ///
    /// # Errors
    /// [`Error::Store`] on a database error.
    pub fn ticket_of(&self, caller: &str, id: &TicketId) -> Result<Option<StoredTicket>> {
        Ok(self
            .connection
            .prepare_cached("SELECT id, payload FROM tickets WHERE caller = ?1 AND id = ?2")?
            .query_row(params![caller, id], |row| {
                Ok(StoredTicket {
                    id: row.get(0)?,
                    payload: row.get(1)?,
                })
            })
            .optional()?)
    }

    /// The response text saved with the record of `key` in `scope`, which a replay sends back
    /// verbatim; `None` when no record exists.
    ///
    /// # Errors
    /// [`Error::Store`] on a database error.
    pub fn saved_response(&self, scope: &Scope, key: &OperationKey) -> Result<Option<String>> {
        Ok(self
            .connection
            .prepare_cached(
                "SELECT response FROM operation_records
                 WHERE caller = ?1 AND operation = ?2 AND key = ?3",
            )?
            .query_row(
                params![scope.caller(), scope.operation(), key.as_str()],
                |row| row.get(0),
            )
            .optional()?)
    }

    /// Deletes every ticket and record, so the next ticket is number 1 again: a fresh store for
    /// the next scenario of a suite run over HTTP.
    ///
    /// # Errors
    /// [`Error::Store`] on a database error.
    pub fn clear(&self) -> Result<()> {
        // Records first: they refer to tickets. Without AUTOINCREMENT, SQLite numbers the next
        // ticket one above the largest that exists, so an empty table starts again at 1.
        self.connection.execute_batch(
            "BEGIN IMMEDIATE; DELETE FROM operation_records; DELETE FROM tickets; COMMIT;",
        )?;
        Ok(())
    }
}

/// The response body saved with a record and sent for a created ticket: `{"ticket_id":N}`.
pub fn response_text(ticket_id: i64) -> String {
    format!("{{\"ticket_id\":{ticket_id}}}")
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

/// The version of the SQLite library linked into this build.
pub fn sqlite_version() -> &'static str {
    rusqlite::version()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::payload::Payload;

    /// An in-memory database with the store's schema: the create path's parts run against it
    /// directly, without a store, a file or the writer thread.
    fn schema() -> Connection {
        let db = Connection::open_in_memory().unwrap();
        db.execute_batch(SCHEMA).unwrap();
        db
    }

    fn call<'a>(key: Option<&'a str>, payload: &'a str, fault: Fault) -> Call<'a> {
        Call {
            caller: "alice",
            operation: "create_ticket",
            key,
            payload,
            fault,
        }
    }

    fn rows(db: &Connection, table: &str) -> i64 {
        db.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
            row.get(0)
        })
        .unwrap()
    }

    #[test]
    fn a_first_create_writes_the_ticket_and_a_record_that_points_to_it() {
        let db = schema();
        let outcome = create_in_transaction(&db, &call(Some("k"), "{}", Fault::None)).unwrap();
        assert_eq!(outcome, Outcome::Created(1.into()));
        let (ticket, response): (i64, String) = db
            .query_row(
                "SELECT ticket_id, response FROM operation_records WHERE key = 'k'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!((ticket, response.as_str()), (1, "{\"ticket_id\":1}"));
        assert_eq!(
            (rows(&db, "tickets"), rows(&db, "operation_records")),
            (1, 1)
        );
    }

    #[test]
    fn a_retry_replays_and_another_payload_conflicts_and_neither_writes() {
        let db = schema();
        create_in_transaction(&db, &call(Some("k"), "{\"a\":1}", Fault::None)).unwrap();
        let replay = create_in_transaction(&db, &call(Some("k"), "{\"a\":1}", Fault::None));
        assert_eq!(replay.unwrap(), Outcome::Replayed(1.into()));
        let conflict = create_in_transaction(&db, &call(Some("k"), "{\"a\":2}", Fault::None));
        assert!(
            matches!(&conflict, Err(Error::PayloadConflict { key }) if key == "k"),
            "{conflict:?}"
        );
        assert_eq!(
            (rows(&db, "tickets"), rows(&db, "operation_records")),
            (1, 1)
        );
    }

    #[test]
    fn a_call_without_a_key_is_never_looked_up_and_leaves_no_record() {
        let db = schema();
        let keyless = call(None, "{}", Fault::FailAt(Step::Lookup));
        // The lookup step is not reached, so its injected failure does not fire.
        assert!(lookup(&db, &keyless).unwrap().is_none());
        let first = create_in_transaction(&db, &call(None, "{}", Fault::None)).unwrap();
        let second = create_in_transaction(&db, &call(None, "{}", Fault::None)).unwrap();
        assert_eq!(
            (first, second),
            (Outcome::Created(1.into()), Outcome::Created(2.into()))
        );
        assert_eq!(
            (rows(&db, "tickets"), rows(&db, "operation_records")),
            (2, 0)
        );
    }

    #[test]
    fn a_failure_between_the_inserts_leaves_the_ticket_for_the_caller_to_roll_back() {
        let db = schema();
        db.execute_batch("BEGIN").unwrap();
        let failed = insert_new(
            &db,
            &call(Some("k"), "{}", Fault::FailAt(Step::InsertRecord)),
        );
        assert!(matches!(failed, Err(Error::InjectedFailure)), "{failed:?}");
        // insert_new does not roll back itself: the transaction around it does.
        assert_eq!(
            (rows(&db, "tickets"), rows(&db, "operation_records")),
            (1, 0)
        );
        db.execute_batch("ROLLBACK").unwrap();
        assert_eq!(
            (rows(&db, "tickets"), rows(&db, "operation_records")),
            (0, 0)
        );
    }

    #[test]
    fn a_record_is_looked_up_only_within_its_caller_and_operation() {
        let db = schema();
        create_in_transaction(&db, &call(Some("k"), "{}", Fault::None)).unwrap();
        let bob = Call {
            caller: "bob",
            ..call(Some("k"), "{}", Fault::None)
        };
        let other_operation = Call {
            operation: "close_ticket",
            ..call(Some("k"), "{}", Fault::None)
        };
        assert!(lookup(&db, &bob).unwrap().is_none());
        assert!(lookup(&db, &other_operation).unwrap().is_none());
        assert!(matches!(
            lookup(&db, &call(Some("k"), "{}", Fault::None)).unwrap(),
            Some(Ok(Outcome::Replayed(_)))
        ));
    }

    #[test]
    fn a_record_without_its_ticket_is_refused_by_the_schema() {
        let db = schema();
        db.execute_batch("PRAGMA foreign_keys = ON").unwrap();
        let orphan = insert_record(
            &db,
            INSERT_RECORD,
            &call(Some("k"), "{}", Fault::None),
            "k",
            99,
        );
        assert!(orphan.is_err(), "{orphan:?}");
        assert_eq!(rows(&db, "operation_records"), 0);
    }

    #[test]
    fn the_schema_is_recognised_only_when_both_tables_exist() {
        let db = Connection::open_in_memory().unwrap();
        assert!(!has_schema(&db).unwrap());
        db.execute_batch("CREATE TABLE tickets (id INTEGER PRIMARY KEY)")
            .unwrap();
        assert!(!has_schema(&db).unwrap());
        assert!(has_schema(&schema()).unwrap());
    }

    #[test]
    fn inspection_stays_in_the_callers_scope_and_clear_starts_numbering_again() {
        let store = SqliteStore::temporary().unwrap();
        let scope = Scope::new("alice", "create_ticket").unwrap();
        let key = OperationKey::try_from("k-1").unwrap();
        let payload = Payload::new(json!({"title": "t"})).unwrap();
        store
            .create(CreateRequest::keyed(&scope, &key, &payload))
            .unwrap();
        let tickets = store.tickets_of("alice").unwrap();
        assert_eq!(tickets.len(), 1);
        assert_eq!(tickets[0].payload, payload.canonical());
        assert!(store.tickets_of("bob").unwrap().is_empty());
        assert_eq!(store.ticket_of("bob", &tickets[0].id).unwrap(), None);
        assert_eq!(
            store.saved_response(&scope, &key).unwrap().as_deref(),
            Some("{\"ticket_id\":1}")
        );
        store.clear().unwrap();
        assert_eq!(
            (
                store.count_tickets().unwrap(),
                store.count_records().unwrap()
            ),
            (0, 0)
        );
        assert_eq!(store.saved_response(&scope, &key).unwrap(), None);
        let again = store.create(CreateRequest::keyed(&scope, &key, &payload));
        assert_eq!(again.unwrap(), Outcome::Created(1.into()));
    }
}
