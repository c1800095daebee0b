//! The stores the ticket service can serve: what it needs from one beyond
//! [`TicketTool`], for SQLite and (feature `postgres`) PostgreSQL.

use crate::error::Result;
use crate::key::{OperationKey, Scope};
use crate::sqlite::{SqliteStore, StoredTicket};
use crate::tool::{TicketId, TicketTool};

/// One connection of a store the service serves, owned by one store thread.
pub(crate) trait ServiceStore: TicketTool + Send {
    /// The tickets `caller` created, by ascending id.
    fn tickets_of(&self, caller: &str) -> Result<Vec<StoredTicket>>;
    /// One of `caller`'s tickets.
    fn ticket_of(&self, caller: &str, id: &TicketId) -> Result<Option<StoredTicket>>;
    /// The response text saved with the record of `key`, if the record exists.
    fn saved_response(&self, scope: &Scope, key: &OperationKey) -> Result<Option<String>>;
    /// Deletes every ticket and record, so numbering starts again at 1.
    fn clear(&self) -> Result<()>;
    /// The SQLite store, whose file also holds the service's retention tables; `None` for a
    /// store shared by several servers, where in-flight detection is the database's own.
    fn sqlite(&self) -> Option<&SqliteStore>;
}

impl ServiceStore for SqliteStore {
    fn tickets_of(&self, caller: &str) -> Result<Vec<StoredTicket>> {
        SqliteStore::tickets_of(self, caller)
    }

    fn ticket_of(&self, caller: &str, id: &TicketId) -> Result<Option<StoredTicket>> {
        SqliteStore::ticket_of(self, caller, id)
    }

    fn saved_response(&self, scope: &Scope, key: &OperationKey) -> Result<Option<String>> {
        SqliteStore::saved_response(self, scope, key)
    }

    fn clear(&self) -> Result<()> {
        SqliteStore::clear(self)
    }

    fn sqlite(&self) -> Option<&SqliteStore> {
        Some(self)
    }
}

#[cfg(feature = "postgres")]
pub(crate) use self::postgres::PostgresServed;

#[cfg(feature = "postgres")]
mod postgres {
    use std::cell::RefCell;

    use ::postgres::{Client, NoTls};

    use super::ServiceStore;
    use crate::error::{Error, Result};
    use crate::key::{OperationKey, Scope};
    use crate::postgres::{PostgresOptions, PostgresStore};
    use crate::sqlite::{SqliteStore, StoredTicket};
    use crate::tool::{CreateRequest, Outcome, TicketId, TicketTool};

    /// A PostgreSQL store and a second connection for the per-caller reads the service serves,
    /// which `PostgresStore` does not offer.
    pub(crate) struct PostgresServed {
        store: PostgresStore,
        reads: RefCell<Client>,
    }

    impl PostgresServed {
        /// Opens the store in `schema` at `url` (creating it if missing) and its read connection.
        pub(crate) fn open(url: &str, schema: &str) -> Result<PostgresServed> {
            let store = PostgresStore::open_with(url, schema, PostgresOptions::default())?;
            let mut reads =
                Client::connect(url, NoTls).map_err(|source| Error::PostgresConnect {
                    target: store.target().to_owned(),
                    source,
                })?;
            // The schema name passed PostgresStore's identifier check; quoting doubles any '"'.
            let quoted = format!("\"{}\"", store.schema().replace('"', "\"\""));
            reads.batch_execute(&format!("SET search_path TO {quoted}"))?;
            Ok(PostgresServed {
                store,
                reads: RefCell::new(reads),
            })
        }
    }

    impl TicketTool for PostgresServed {
        fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
            self.store.create(request)
        }

        fn ticket_ids(&self) -> Result<Vec<TicketId>> {
            self.store.ticket_ids()
        }

        fn count_tickets(&self) -> Result<u64> {
            self.store.count_tickets()
        }

        fn count_records(&self) -> Result<u64> {
            self.store.count_records()
        }

        fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
            self.store.forget_record(scope, key)
        }

        fn connect(&self) -> Result<PostgresServed> {
            Err(Error::InputInvalid {
                subject: "--backend".to_owned(),
                problem: "a served PostgreSQL store opens its connections itself".to_owned(),
            })
        }
    }

    impl ServiceStore for PostgresServed {
        fn tickets_of(&self, caller: &str) -> Result<Vec<StoredTicket>> {
            let rows = self.reads.borrow_mut().query(
                "SELECT id, payload FROM tickets WHERE caller = $1 ORDER BY id",
                &[&caller],
            )?;
            rows.iter()
                .map(|row| {
                    Ok(StoredTicket {
                        id: TicketId::from(row.try_get::<_, i64>(0)?),
                        payload: row.try_get(1)?,
                    })
                })
                .collect()
        }

        fn ticket_of(&self, caller: &str, id: &TicketId) -> Result<Option<StoredTicket>> {
            // This store's ids are bigint: a textual id names no ticket.
            let Some(number) = id.as_i64() else {
                return Ok(None);
            };
            let row = self.reads.borrow_mut().query_opt(
                "SELECT id, payload FROM tickets WHERE caller = $1 AND id = $2",
                &[&caller, &number],
            )?;
            row.map(|row| {
                Ok(StoredTicket {
                    id: TicketId::from(row.try_get::<_, i64>(0)?),
                    payload: row.try_get(1)?,
                })
            })
            .transpose()
        }

        fn saved_response(&self, scope: &Scope, key: &OperationKey) -> Result<Option<String>> {
            let row = self.reads.borrow_mut().query_opt(
                "SELECT response FROM operation_records
                 WHERE caller = $1 AND operation = $2 AND key = $3",
                &[&scope.caller(), &scope.operation(), &key.as_str()],
            )?;
            Ok(row.map(|row| row.try_get(0)).transpose()?)
        }

        fn clear(&self) -> Result<()> {
            self.reads.borrow_mut().batch_execute(
                "TRUNCATE operation_records, tickets; ALTER SEQUENCE ticket_ids RESTART",
            )?;
            Ok(())
        }

        fn sqlite(&self) -> Option<&SqliteStore> {
            None
        }
    }
}
