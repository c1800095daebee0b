//! Anti-pattern: check for the key, then write, with nothing in the database to stop two writers.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::error::{Error, Result};
use crate::sim::subject::{Progress, StoreView, Subject, read_lab_schema};
use crate::tool::{CreateRequest, Outcome, Step, TicketId, TicketTool};

use super::scratch::{Scratch, insert_ticket_and_record};

// ANCHOR: check_then_write_schema
/// The lab's tables without the primary key on operation records: the database would accept two
/// records for one key.
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
    response  TEXT NOT NULL
);
";
// ANCHOR_END: check_then_write_schema

/// A create that looked its key up, found nothing, and has not written yet.
#[derive(Debug)]
pub struct Unclaimed;

/// A store that looks the key up in one transaction and writes the ticket and its record in
/// another, with no unique constraint. Between the two, another caller with the same key can look
/// up too, find nothing as well, and both write.
pub struct CheckThenWrite {
    db: Scratch,
}

impl CheckThenWrite {
    /// A fresh store in a temporary folder.
    ///
    /// # Errors
    /// Any error creating the database.
    pub fn temporary() -> Result<CheckThenWrite> {
        Ok(CheckThenWrite {
            db: Scratch::create(SCHEMA)?,
        })
    }
}

// ANCHOR: check_then_write
impl Subject for CheckThenWrite {
    type Pending = Unclaimed;

    /// Step one: look the key up, in a transaction of its own.
    fn start(&self, request: CreateRequest<'_>) -> Progress<Unclaimed> {
        let looked_up = (|| {
            request.fault.inject(Step::Begin)?;
            request.fault.inject(Step::Lookup)?;
            let Some(key) = request.key else {
                return Ok(None);
            };
            let saved: Option<(String, TicketId)> = self
                .db
                .connection()
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
            Ok(saved)
        })();
        match looked_up {
            Err(err) => Progress::Done(Err(err)),
            Ok(Some((payload, _))) if payload != request.payload.canonical() => {
                Progress::Done(Err(Error::PayloadConflict {
                    key: request.key.map(ToString::to_string).unwrap_or_default(),
                }))
            }
            Ok(Some((_, ticket))) => Progress::Done(request.reply(Outcome::Replayed(ticket))),
            Ok(None) => Progress::Pending {
                pending: Unclaimed,
                did: "looked up the key: no record".to_owned(),
            },
        }
    }

    /// Step two: write the ticket and its record, in a second transaction.
    fn resume(&self, request: CreateRequest<'_>, _unclaimed: Unclaimed) -> Progress<Unclaimed> {
        Progress::Done(self.write(request))
    }
    // ANCHOR_END: check_then_write

    fn view(&self) -> Result<StoreView> {
        read_lab_schema(self.db.connection())
    }
}

impl CheckThenWrite {
    fn write(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        let payload = request.payload.canonical();
        let tx = rusqlite::Transaction::new_unchecked(
            self.db.connection(),
            TransactionBehavior::Immediate,
        )?;
        let ticket_id = insert_ticket_and_record(&tx, request, payload, payload)?;
        request.fault.inject(Step::Commit)?;
        tx.commit()?;
        request.reply(Outcome::Created(ticket_id))
    }
}

impl TicketTool for CheckThenWrite {
    /// Both steps back to back: alone, the adapter looks correct.
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        match self.start(request) {
            Progress::Done(result) => result,
            Progress::Pending { .. } => self.write(request),
        }
    }

    forward_inspection!(db);

    fn connect(&self) -> Result<Self> {
        Ok(CheckThenWrite {
            db: self.db.connect()?,
        })
    }
}
