//! Anti-pattern: no durable key, only memory that a restart loses.

use std::cell::RefCell;
use std::collections::HashMap;
use std::convert::Infallible;

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::sim::subject::{Progress, StoreView, Subject};
use crate::sqlite::SqliteStore;
use crate::tool::{CreateRequest, Fault, Outcome, TicketId, TicketTool};

type Seen = HashMap<(String, String, String), (String, TicketId)>;

// ANCHOR: memory_key
/// A tool that remembers the keys it has seen in a map in memory instead of in the database: the
/// "please do not create duplicates" hope, with nothing durable behind it. The tool runs in its
/// caller's process (as a tool server started with an agent does), so a restart of the caller
/// starts it afresh with an empty map. Tickets are written without any operation record.
pub struct MemoryKey {
    store: SqliteStore,
    seen: RefCell<Seen>,
}

impl TicketTool for MemoryKey {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        let Some(key) = request.key else {
            return self.store.create(request);
        };
        let id = (
            request.scope.caller().to_owned(),
            request.scope.operation().to_owned(),
            key.to_string(),
        );
        let remembered = self.seen.borrow().get(&id).cloned();
        let outcome = match remembered {
            Some((payload, _)) if payload != request.payload.canonical() => {
                return Err(Error::PayloadConflict {
                    key: key.to_string(),
                });
            }
            Some((_, ticket)) => Outcome::Replayed(ticket),
            None => {
                // The reply is lost on its way back to the caller, after the tool has seen it.
                let fault = match request.fault {
                    Fault::LoseReply => Fault::None,
                    other => other,
                };
                let plain = CreateRequest::unkeyed(request.scope, request.payload);
                let created = self.store.create(plain.with_fault(fault))?;
                let payload = request.payload.canonical().to_owned();
                self.seen
                    .borrow_mut()
                    .insert(id, (payload, created.ticket_id().clone()));
                created
            }
        };
        if request.fault == Fault::LoseReply {
            return Err(Error::OutcomeUnknown {
                key: Some(key.to_string()),
                reason: "the reply was lost after the commit".to_owned(),
            });
        }
        Ok(outcome)
    }
    // ANCHOR_END: memory_key

    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        self.store.ticket_ids()
    }

    fn count_records(&self) -> Result<u64> {
        Ok(self.seen.borrow().len() as u64)
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        let id = (
            scope.caller().to_owned(),
            scope.operation().to_owned(),
            key.to_string(),
        );
        Ok(self.seen.borrow_mut().remove(&id).is_some())
    }

    /// A new process: same database, empty memory.
    fn connect(&self) -> Result<Self> {
        Ok(MemoryKey::new(self.store.connect()?))
    }
}

impl MemoryKey {
    /// The adapter around `store`, with nothing remembered yet.
    pub fn new(store: SqliteStore) -> MemoryKey {
        MemoryKey {
            store,
            seen: RefCell::new(HashMap::new()),
        }
    }
}

impl Subject for MemoryKey {
    type Pending = Infallible;

    fn resume(&self, _request: CreateRequest<'_>, pending: Infallible) -> Progress<Infallible> {
        match pending {}
    }

    /// Tickets only: what this tool remembers lives in memory, not in the store.
    fn view(&self) -> Result<StoreView> {
        Ok(StoreView {
            records: None,
            ..self.store.view()?
        })
    }
}
