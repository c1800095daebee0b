//! The one ticket service both servers translate to: who the caller is, the claim on a key,
//! the create and the classification of what it did, retention and its prune guard. `lab serve`
//! (`crate::http::server`) and `lab mcp` (`crate::mcp::server`) only turn their requests into
//! these calls and these answers into their own. Synchronous: it runs on a store thread.

mod callers;
mod claim;
mod outcome;
pub mod retention;
mod store;
mod store_threads;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use claim::{Claim, Claims};
use retention::{Clock, Pruned, Retention, SystemClock};

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::sqlite::{SqliteStore, response_text};
use crate::tool::{CreateRequest, Fault, Outcome, TicketId, TicketTool};

pub use callers::{CallerToken, MAX_TOKEN_BYTES, check_token};
pub(crate) use callers::{Callers, Secret, bearer_token};
pub(crate) use outcome::{Created, Refusal};
#[cfg(feature = "postgres")]
pub(crate) use store::PostgresServed;
pub(crate) use store::ServiceStore;
pub(crate) use store_threads::StoreThreads;

/// How a [`TicketService`] is set up; each server fills it from its own options.
pub(crate) struct ServiceOptions<'o> {
    /// The callers and their tokens; `None` for a process that acts for one caller (MCP over
    /// stdio), which authenticates nobody.
    pub(crate) callers: Option<&'o [CallerToken]>,
    /// The token of the admin endpoints or tools; `None` turns them off.
    pub(crate) admin_token: Option<&'o str>,
    /// Honour the test-only faults.
    pub(crate) faults: bool,
    /// How long a request whose key is in progress waits for it before it is told to come back.
    pub(crate) in_progress_wait: Duration,
    /// The periodic pruning window; `None` keeps records until a pruning pass is asked for.
    pub(crate) retention: Option<Retention>,
    /// Date every record and honour tombstones even without `retention` (MCP's test-only
    /// expire tool prunes on demand).
    pub(crate) dated: bool,
    /// Where retention reads the time; `None` is the system clock.
    pub(crate) clock: Option<Arc<dyn Clock>>,
}

/// The service's state shared by every request.
pub(crate) struct TicketService {
    callers: Option<Callers>,
    admin_token: Option<Secret>,
    faults: bool,
    claims: Claims,
    retention: Option<Retention>,
    dated: bool,
    clock: Arc<dyn Clock>,
    /// The connection pruning passes write on.
    pruner: Mutex<Option<SqliteStore>>,
}

/// The switch a boundary sets to lose the reply of one request after its commit: the test-only
/// lost reply. The connection's writer reads it and closes instead of answering.
#[derive(Clone, Debug, Default)]
pub(crate) struct LostReply(Arc<AtomicBool>);

impl LostReply {
    /// Asks for this reply to be lost.
    pub(crate) fn lose(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the reply must be lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl TicketService {
    /// The service for `options`, with its tokens checked.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] without callers, with a token given twice, or with an empty,
    /// blank or malformed token; [`Error::InvalidIdentifier`] for a bad caller name.
    pub(crate) fn new(options: &ServiceOptions<'_>) -> Result<TicketService> {
        Ok(TicketService {
            callers: options.callers.map(Callers::new).transpose()?,
            admin_token: options
                .admin_token
                .map(|token| Secret::new("--admin-token", token))
                .transpose()?,
            faults: options.faults,
            claims: Claims::new(options.in_progress_wait),
            retention: options.retention,
            dated: options.dated || options.retention.is_some(),
            clock: options
                .clock
                .clone()
                .unwrap_or_else(|| Arc::new(SystemClock)),
            pruner: Mutex::new(None),
        })
    }

    /// Whether the test-only faults are on.
    pub(crate) fn faults(&self) -> bool {
        self.faults
    }

    /// Whether the admin endpoints are on.
    pub(crate) fn has_admin(&self) -> bool {
        self.admin_token.is_some()
    }

    /// The caller whose bearer token is `token` (never, for a service without callers).
    pub(crate) fn caller(&self, token: &[u8]) -> Option<Scope> {
        self.callers
            .as_ref()
            .and_then(|callers| callers.find(token))
    }

    /// Whether `token` is the admin token (never, when the admin endpoints are off).
    pub(crate) fn is_admin(&self, token: &[u8]) -> bool {
        self.admin_token
            .as_ref()
            .is_some_and(|secret| secret.matches(token))
    }

    /// Opens the SQLite store at `database` (or a temporary one), with the retention tables,
    /// and gives the pruner its own connection.
    ///
    /// # Errors
    /// [`Error::Store`] or [`Error::TemporaryFolder`] if the store cannot be opened.
    pub(crate) fn open_sqlite(&self, database: Option<&std::path::Path>) -> Result<SqliteStore> {
        let store = match database {
            Some(path) => SqliteStore::open(path)?,
            None => SqliteStore::temporary()?,
        };
        store
            .connection()
            .execute_batch(retention::RETENTION_SCHEMA)?;
        *self.pruner_store() = Some(store.connect()?);
        Ok(store)
    }

    /// Closes the pruner's connection.
    pub(crate) fn close_pruner(&self) {
        drop(self.pruner_store().take());
    }

    fn pruner_store(&self) -> MutexGuard<'_, Option<SqliteStore>> {
        // The guarded value is a connection; a panic elsewhere leaves it usable.
        self.pruner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // ANCHOR: http_create
    /// One create, on a store thread's connection, classified.
    ///
    /// # Errors
    /// A [`Refusal`] saying which: in progress, expired, conflict, injected failure, internal.
    pub(crate) fn create(
        &self,
        store: &dyn ServiceStore,
        scope: &Scope,
        key: Option<&OperationKey>,
        payload: &Payload,
        fault: Fault,
    ) -> Result<Created, Refusal> {
        // A request for a key whose first request is still in progress is told to come back,
        // not queued; a key whose record was pruned is told it expired.
        let _holding = match (key, store.sqlite()) {
            // On a store that other servers share, the database's unique index is the claim.
            (Some(_), None) | (None, _) => None,
            (Some(key), Some(sqlite)) => match self.claims.claim(sqlite, self.dated, scope, key) {
                Ok(Claim::Held(holding)) => Some(holding),
                Ok(Claim::InProgress) => return Err(Refusal::InProgress { key: key.clone() }),
                Ok(Claim::Expired) => return Err(Refusal::Expired { key: key.clone() }),
                Err(err) => return Err(Refusal::internal(err)),
            },
        };
        let request = CreateRequest {
            scope,
            key,
            payload,
            fault,
        };
        let created = store.create(request);
        self.classify(store, scope, key, created, fault)
    }

    /// What a create's result means for the caller.
    fn classify(
        &self,
        store: &dyn ServiceStore,
        scope: &Scope,
        key: Option<&OperationKey>,
        created: Result<Outcome>,
        fault: Fault,
    ) -> Result<Created, Refusal> {
        match created {
            Ok(Outcome::Created(id)) => {
                if let (Some(key), true, Some(sqlite)) = (key, self.dated, store.sqlite()) {
                    let noted =
                        retention::note_record(sqlite.connection(), scope, key, self.clock.now());
                    if let Err(err) = noted {
                        // The record stands without a time; the next pass dates it (kept longer).
                        eprintln!("lab: cannot note when {key} was created: {err}");
                    }
                }
                let text = created_text(&id);
                Ok(Created::New { id, text })
            }
            Ok(Outcome::Replayed(id)) => {
                // The record was read a moment ago and records never change: the saved text is
                // there. Fall back to the same text built from the id all the same.
                let text = key
                    .and_then(|key| store.saved_response(scope, key).ok().flatten())
                    .unwrap_or_else(|| created_text(&id));
                Ok(Created::Replayed { id, text })
            }
            Err(Error::OutcomeUnknown { .. }) if fault == Fault::LoseReply => {
                Ok(Created::LostReply)
            }
            // PostgreSQL gave up waiting for another server's uncommitted claim on this key (or
            // lost its connection mid-statement): nothing was written here, and a retry with the
            // same key learns the outcome.
            Err(Error::OutcomeUnknown { .. }) if store.sqlite().is_none() => match key {
                Some(key) => Err(Refusal::InProgress { key: key.clone() }),
                None => Err(Refusal::internal("outcome unknown")),
            },
            Err(err @ Error::PayloadConflict { .. }) => Err(Refusal::Conflict(err.to_string())),
            Err(err @ Error::InjectedFailure) => Err(Refusal::InjectedFailure(err.to_string())),
            Err(err) => Err(Refusal::internal(err)),
        }
    }
    // ANCHOR_END: http_create

    /// One pruning pass now, at the clock's time, with the periodic window.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] when the service was started without retention;
    /// [`Error::Store`] on a database error.
    pub(crate) fn prune(&self) -> Result<Pruned> {
        let Some(retention) = self.retention else {
            return Err(Error::InputInvalid {
                subject: "--retention-seconds".to_owned(),
                problem: "the server was started without retention".to_owned(),
            });
        };
        self.prune_with(retention)
    }

    /// One pruning pass now with `window`, leaving the keys held by requests in progress alone.
    ///
    /// # Errors
    /// [`Error::Store`] on a database error.
    pub(crate) fn prune_with(&self, window: Retention) -> Result<Pruned> {
        // Holders' lock first, then the connection: the same order as a request's claim.
        self.claims.while_held(|held| {
            let pruner = self.pruner_store();
            let Some(store) = pruner.as_ref() else {
                return Ok(Pruned::default());
            };
            retention::prune(store.connection(), self.clock.now(), window, held)
        })
    }

    /// Deletes every ticket, record and tombstone, so numbering starts again at 1.
    ///
    /// # Errors
    /// [`Error::Store`] on a database error.
    pub(crate) fn reset(&self, store: &dyn ServiceStore) -> Result<()> {
        store.clear()?;
        if let Some(sqlite) = store.sqlite() {
            sqlite
                .connection()
                .execute_batch("DELETE FROM record_times; DELETE FROM expired_keys;")?;
        }
        Ok(())
    }
}

/// The body of a created ticket: the saved form for a numeric id, the same shape with a string
/// otherwise.
fn created_text(id: &TicketId) -> String {
    match id.as_i64() {
        Some(n) => response_text(n),
        None => serde_json::json!({ "ticket_id": id }).to_string(),
    }
}

#[cfg(test)]
mod tests;
