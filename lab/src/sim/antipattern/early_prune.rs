//! Anti-pattern: pruning records before delayed retries arrive.

use std::convert::Infallible;

use crate::error::Result;
use crate::sim::subject::{Progress, StoreView, Subject};
use crate::sqlite::SqliteStore;
use crate::tool::{CreateRequest, Outcome, TicketTool};

/// The fraction of the promised retention this store really keeps records for.
pub const KEPT_FRACTION: u64 = 8;

// ANCHOR: early_prune
/// The correct store, run with a retention job that deletes records after an eighth of the period
/// the contract promises. A caller whose retry is delayed longer than that, yet well within the
/// promise, finds no record and gets a second ticket.
pub struct EarlyPrune {
    store: SqliteStore,
}

impl Subject for EarlyPrune {
    type Pending = Infallible;

    fn retention(&self, promised: u64) -> u64 {
        (promised / KEPT_FRACTION).max(1)
    }
    // ANCHOR_END: early_prune

    fn resume(&self, _request: CreateRequest<'_>, pending: Infallible) -> Progress<Infallible> {
        match pending {}
    }

    fn view(&self) -> Result<StoreView> {
        self.store.view()
    }
}

impl EarlyPrune {
    /// The adapter around `store`.
    pub fn new(store: SqliteStore) -> EarlyPrune {
        EarlyPrune { store }
    }
}

impl TicketTool for EarlyPrune {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        self.store.create(request)
    }

    forward_inspection!(store);

    fn connect(&self) -> Result<Self> {
        Ok(EarlyPrune {
            store: self.store.connect()?,
        })
    }
}
