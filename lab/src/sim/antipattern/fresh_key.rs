//! Anti-pattern: a new key on every attempt.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Result;
use crate::sim::subject::{Progress, StoreView, Subject};
use crate::sqlite::SqliteStore;
use crate::tool::{CreateRequest, Outcome, TicketTool};

// ANCHOR: fresh_key
/// A client library that "helpfully" makes a fresh key for every attempt, in front of the correct
/// store. Every retry looks like a new operation, so a retry after a lost reply creates a second
/// ticket.
pub struct FreshKeyPerAttempt {
    store: SqliteStore,
    attempts: Arc<AtomicU64>,
}

impl TicketTool for FreshKeyPerAttempt {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        let Some(key) = request.key else {
            return self.store.create(request);
        };
        let attempt = self.attempts.fetch_add(1, Ordering::Relaxed) + 1;
        let fresh = key.with_suffix(&format!("~attempt-{attempt}"))?;
        self.store.create(CreateRequest {
            key: Some(&fresh),
            ..request
        })
    }
    // ANCHOR_END: fresh_key

    forward_inspection!(store);

    fn connect(&self) -> Result<Self> {
        Ok(FreshKeyPerAttempt {
            store: self.store.connect()?,
            attempts: Arc::clone(&self.attempts),
        })
    }
}

impl FreshKeyPerAttempt {
    /// The adapter in front of `store`.
    pub fn new(store: SqliteStore) -> FreshKeyPerAttempt {
        FreshKeyPerAttempt {
            store,
            attempts: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Subject for FreshKeyPerAttempt {
    type Pending = Infallible;

    fn resume(&self, _request: CreateRequest<'_>, pending: Infallible) -> Progress<Infallible> {
        match pending {}
    }

    fn view(&self) -> Result<StoreView> {
        self.store.view()
    }
}
