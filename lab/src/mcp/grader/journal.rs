//! Every `create_ticket` call the grader saw, kept in a table of the grader's own database, so
//! that a client which restarts the server (a new process over stdio) continues one history.

use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::{Error, Result};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS lab_grader_calls (
    number INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL,
    client TEXT NOT NULL,
    request_id TEXT NOT NULL,
    operation_key TEXT,
    arguments TEXT NOT NULL,
    fields TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    fate TEXT NOT NULL DEFAULT 'running',
    answer TEXT NOT NULL DEFAULT '',
    ticket_id TEXT,
    created INTEGER NOT NULL DEFAULT 0,
    reached_client INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0,
    settled_ms INTEGER,
    request_in_session INTEGER,
    named_before INTEGER
);
CREATE TABLE IF NOT EXISTS lab_grader_left (
    session TEXT PRIMARY KEY,
    left_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lab_grader_named (
    session TEXT NOT NULL,
    ticket_id TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);";

/// One call, as the grader recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Call {
    /// Its number in arrival order, from 1.
    pub number: u64,
    /// The session it came in (over stdio, the server process).
    pub session: String,
    /// The client's name and version from its `initialize`.
    pub client: String,
    /// The JSON-RPC id of the `tools/call` request.
    pub request_id: String,
    /// The `operation_key` argument, when it was a string.
    pub operation_key: Option<String>,
    /// Every argument, as sent.
    pub arguments: String,
    /// The arguments without the key: the ticket's fields, as canonical JSON.
    pub fields: String,
    /// When it arrived, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// What the grader did with the reply: `delivered`, `lost`, `delayed NNNms`, or
    /// `running` while it is in progress.
    pub fate: String,
    /// What the tools answered, whether or not the client saw it: `created`, `replayed`, an
    /// error code, or a protocol error.
    pub answer: String,
    /// The ticket the answer named.
    pub ticket_id: Option<String>,
    /// Whether this call created its ticket (rather than replayed one).
    pub created: bool,
    /// Whether the answer reached the client.
    pub reached_client: bool,
    /// Whether the client sent `notifications/cancelled` for it (or went away) while it waited.
    pub cancelled: bool,
    /// When its reply was sent, or given up, in milliseconds since the Unix epoch (`None`
    /// while it runs, or when the process ended before).
    pub settled_ms: Option<u64>,
    /// When its session showed that the client had left (stdin closed, the session's DELETE),
    /// if it did.
    pub left_ms: Option<u64>,
    /// Its number among the requests (`tools/list`, `tools/call`) its session sent, from 1
    /// (`None` in a journal from before the lab counted them): two calls whose numbers follow
    /// each other had no other request between them.
    pub request_in_session: Option<u64>,
    /// When a later request of its session (any tool call but `create_ticket`) first named its
    /// ticket in a `ticket_id` argument, after its reply was sent: the one sign the client read
    /// that reply and acted on it.
    pub ticket_named_ms: Option<u64>,
    /// What the report made of it (not in the journal; see [`super::report`]).
    #[serde(flatten)]
    pub judged: Judged,
}

/// What the report made of one call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Judged {
    /// Its part in its intention: `first`, `resend`, `retry`, `retry with other arguments`,
    /// `re-plan` (see [`super::report::Role`]).
    pub role: String,
    /// Whether the report judged that its reply reached the client: the grader wrote it, and
    /// the client had not shown it had stopped waiting (a cancellation, a closed stream, its
    /// session's end, its next call of the intention); for a reply held back, a later request
    /// of the session named its ticket.
    pub received: bool,
    /// Whether nobody can tell: a reply held back was written into a session that had given no
    /// sign either way (no cancellation, no later request naming its ticket), perhaps after the
    /// client's own timeout.
    pub receipt_unknown: bool,
}

/// A new call, before its answer.
#[derive(Clone, Debug)]
pub struct Arrival {
    /// As [`Call::session`].
    pub session: String,
    /// As [`Call::client`].
    pub client: String,
    /// As [`Call::request_id`].
    pub request_id: String,
    /// As [`Call::operation_key`].
    pub operation_key: Option<String>,
    /// As [`Call::arguments`].
    pub arguments: String,
    /// As [`Call::fields`].
    pub fields: String,
    /// As [`Call::request_in_session`].
    pub request_in_session: u64,
}

/// How a call ended, as [`Journal::settle`] records it.
#[derive(Clone, Debug)]
pub struct Settled {
    /// As [`Call::fate`].
    pub fate: String,
    /// As [`Call::answer`].
    pub answer: String,
    /// As [`Call::ticket_id`].
    pub ticket_id: Option<String>,
    /// As [`Call::created`].
    pub created: bool,
    /// As [`Call::reached_client`].
    pub reached_client: bool,
    /// When it was settled, where that was earlier than its record (a held reply released by
    /// the client's next request: settled when that request was on record); `None`: now.
    pub at_ms: Option<u64>,
}

/// The table of calls, on a connection of its own to the grader's database.
pub struct Journal {
    connection: Mutex<Connection>,
}

fn poisoned<T>(_: std::sync::PoisonError<T>) -> Error {
    Error::from(Box::<dyn std::error::Error + Send + Sync>::from(
        "a grader thread panicked while holding the journal",
    ))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

impl Journal {
    /// Opens (and creates when missing) the table in the database at `path`.
    ///
    /// # Errors
    /// [`Error::Store`] when SQLite cannot open the file or create the table.
    pub fn open(path: &Path) -> Result<Journal> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(std::time::Duration::from_secs(10))?;
        connection.execute_batch(SCHEMA)?;
        // A journal written by an older lab lacks the columns added since.
        for (column, kind) in [
            ("settled_ms", "INTEGER"),
            ("request_in_session", "INTEGER"),
            ("named_before", "INTEGER"),
        ] {
            let has: bool = connection
                .prepare("SELECT 1 FROM pragma_table_info('lab_grader_calls') WHERE name = ?1")?
                .exists([column])?;
            if !has {
                connection.execute_batch(&format!(
                    "ALTER TABLE lab_grader_calls ADD COLUMN {column} {kind}"
                ))?;
            }
        }
        Ok(Journal {
            connection: Mutex::new(connection),
        })
    }

    /// Records a call's arrival; returns its number and whether it is the first of its
    /// intention (no earlier call had its key or its fields).
    ///
    /// # Errors
    /// [`Error::Store`] when the row cannot be written.
    pub fn arrive(&self, call: &Arrival) -> Result<(u64, bool)> {
        let mut connection = self.connection.lock().map_err(poisoned)?;
        let transaction =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let earlier: Option<i64> = transaction
            .query_row(
                "SELECT number FROM lab_grader_calls WHERE fields = ?1 \
                 OR (operation_key IS NOT NULL AND operation_key = ?2) LIMIT 1",
                params![call.fields, call.operation_key],
                |row| row.get(0),
            )
            .optional()?;
        transaction.execute(
            "INSERT INTO lab_grader_calls \
             (session, client, request_id, operation_key, arguments, fields, started_ms, \
             request_in_session) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                call.session,
                call.client,
                call.request_id,
                call.operation_key,
                call.arguments,
                call.fields,
                i64::try_from(now_ms()).unwrap_or(i64::MAX),
                i64::try_from(call.request_in_session).unwrap_or(i64::MAX)
            ],
        )?;
        let number = transaction.last_insert_rowid();
        transaction.commit()?;
        Ok((u64::try_from(number).unwrap_or(0), earlier.is_none()))
    }

    /// Records how call `number` ended.
    ///
    /// # Errors
    /// [`Error::Store`] when the row cannot be written.
    pub fn settle(&self, number: u64, settled: &Settled) -> Result<()> {
        let connection = self.connection.lock().map_err(poisoned)?;
        connection.execute(
            // `named_before`: the last ticket a request had named by now, so that only a naming
            // recorded after this (after the reply was written) counts as the client acting on it.
            "UPDATE lab_grader_calls SET fate = ?2, answer = ?3, ticket_id = ?4, created = ?5, \
             reached_client = ?6, settled_ms = ?7, \
             named_before = (SELECT COALESCE(MAX(rowid), 0) FROM lab_grader_named) \
             WHERE number = ?1",
            params![
                i64::try_from(number).unwrap_or(i64::MAX),
                settled.fate,
                settled.answer,
                settled.ticket_id,
                settled.created,
                settled.reached_client,
                i64::try_from(settled.at_ms.unwrap_or_else(now_ms)).unwrap_or(i64::MAX)
            ],
        )?;
        Ok(())
    }

    /// Records that the client cancelled call `number`, or went away, while it waited.
    ///
    /// # Errors
    /// [`Error::Store`] when the row cannot be written.
    pub fn cancelled(&self, number: u64) -> Result<()> {
        let connection = self.connection.lock().map_err(poisoned)?;
        connection.execute(
            "UPDATE lab_grader_calls SET cancelled = 1 WHERE number = ?1",
            params![i64::try_from(number).unwrap_or(i64::MAX)],
        )?;
        Ok(())
    }

    /// Records that a request of `session` named ticket `ticket_id` (a `ticket_id` argument),
    /// now.
    ///
    /// # Errors
    /// [`Error::Store`] when the row cannot be written.
    pub fn named(&self, session: &str, ticket_id: &str) -> Result<()> {
        let connection = self.connection.lock().map_err(poisoned)?;
        connection.execute(
            "INSERT INTO lab_grader_named (session, ticket_id, at_ms) VALUES (?1, ?2, ?3)",
            params![
                session,
                ticket_id,
                i64::try_from(now_ms()).unwrap_or(i64::MAX)
            ],
        )?;
        Ok(())
    }

    /// Records that the client left `session` (its stdin closed, its DELETE came), now; a
    /// session that leaves twice keeps its first time.
    ///
    /// # Errors
    /// [`Error::Store`] when the row cannot be written.
    pub fn left(&self, session: &str) -> Result<()> {
        let connection = self.connection.lock().map_err(poisoned)?;
        connection.execute(
            "INSERT OR IGNORE INTO lab_grader_left (session, left_ms) VALUES (?1, ?2)",
            params![session, i64::try_from(now_ms()).unwrap_or(i64::MAX)],
        )?;
        Ok(())
    }

    /// Every call, in arrival order.
    ///
    /// # Errors
    /// [`Error::Store`] when the table cannot be read.
    pub fn calls(&self) -> Result<Vec<Call>> {
        let connection = self.connection.lock().map_err(poisoned)?;
        let mut statement = connection.prepare(
            "SELECT number, c.session, client, request_id, operation_key, arguments, fields, \
             started_ms, fate, answer, ticket_id, created, reached_client, cancelled, \
             settled_ms, l.left_ms, request_in_session, \
             (SELECT MIN(n.at_ms) FROM lab_grader_named n WHERE n.session = c.session \
              AND n.ticket_id = c.ticket_id AND n.rowid > COALESCE(c.named_before, 0)) \
             FROM lab_grader_calls c LEFT JOIN lab_grader_left l ON l.session = c.session \
             ORDER BY number",
        )?;
        let rows = statement.query_map([], |row| {
            Ok(Call {
                number: u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
                session: row.get(1)?,
                client: row.get(2)?,
                request_id: row.get(3)?,
                operation_key: row.get(4)?,
                arguments: row.get(5)?,
                fields: row.get(6)?,
                started_ms: u64::try_from(row.get::<_, i64>(7)?).unwrap_or(0),
                fate: row.get(8)?,
                answer: row.get(9)?,
                ticket_id: row.get(10)?,
                created: row.get(11)?,
                reached_client: row.get(12)?,
                cancelled: row.get(13)?,
                settled_ms: row
                    .get::<_, Option<i64>>(14)?
                    .map(|ms| u64::try_from(ms).unwrap_or(0)),
                left_ms: row
                    .get::<_, Option<i64>>(15)?
                    .map(|ms| u64::try_from(ms).unwrap_or(0)),
                request_in_session: row
                    .get::<_, Option<i64>>(16)?
                    .map(|n| u64::try_from(n).unwrap_or(0)),
                ticket_named_ms: row
                    .get::<_, Option<i64>>(17)?
                    .map(|ms| u64::try_from(ms).unwrap_or(0)),
                judged: Judged::default(),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<Call>>>()?)
    }
}
