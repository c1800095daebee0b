//! Anti-pattern: payloads compared as the raw text received, so key order matters.

use std::convert::Infallible;

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::error::{Error, Result};
use crate::sim::subject::{Progress, StoreView, Subject, read_lab_schema};
use crate::sqlite::SCHEMA;
use crate::tool::{CreateRequest, Outcome, Step, TicketId, TicketTool};

use super::scratch::{Scratch, insert_ticket_and_record};

/// A store with the lab's schema and one transaction per create, which saves the payload text
/// exactly as it arrived and compares a retry's text with it byte for byte.
pub struct RawPayloadText {
    db: Scratch,
}

impl RawPayloadText {
    /// A fresh store in a temporary folder.
    ///
    /// # Errors
    /// Any error creating the database.
    pub fn temporary() -> Result<RawPayloadText> {
        Ok(RawPayloadText {
            db: Scratch::create(SCHEMA)?,
        })
    }
}

impl TicketTool for RawPayloadText {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        request.fault.inject(Step::Begin)?;
        let tx = rusqlite::Transaction::new_unchecked(
            self.db.connection(),
            TransactionBehavior::Immediate,
        )?;
        request.fault.inject(Step::Lookup)?;
        // ANCHOR: raw_payload
        // The mistake: the text as received, not the canonical form. The same object written
        // with its keys in another order is a different text.
        let text = request
            .payload
            .as_received()
            .unwrap_or(request.payload.canonical());
        // ANCHOR_END: raw_payload
        if let Some(key) = request.key {
            let saved: Option<(String, TicketId)> = tx
                .query_row(
                    "SELECT payload, ticket_id FROM operation_records
                     WHERE caller = ?1 AND operation = ?2 AND key = ?3",
                    params![
                        request.scope.caller(),
                        request.scope.operation(),
                        key.as_str()
                    ],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            if let Some((saved, ticket_id)) = saved {
                if saved != text {
                    return Err(Error::PayloadConflict {
                        key: key.to_string(),
                    });
                }
                drop(tx);
                return request.reply(Outcome::Replayed(ticket_id));
            }
        }
        let ticket_id = insert_ticket_and_record(&tx, request, request.payload.canonical(), text)?;
        request.fault.inject(Step::Commit)?;
        tx.commit()?;
        request.reply(Outcome::Created(ticket_id))
    }

    forward_inspection!(db);

    fn connect(&self) -> Result<Self> {
        Ok(RawPayloadText {
            db: self.db.connect()?,
        })
    }
}

impl Subject for RawPayloadText {
    type Pending = Infallible;

    fn resume(&self, _request: CreateRequest<'_>, pending: Infallible) -> Progress<Infallible> {
        match pending {}
    }

    fn view(&self) -> Result<StoreView> {
        read_lab_schema(self.db.connection())
    }
}
