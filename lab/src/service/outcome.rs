//! What a create did, as the service tells a boundary: created, replayed, a lost reply, or a
//! refusal of one of a few kinds. An internal error's cause goes to the log beside an opaque
//! id; the caller gets the id only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::key::OperationKey;
use crate::tool::TicketId;

/// A create that went through.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Created {
    /// A new ticket, and the response text saved with its record.
    New { id: TicketId, text: String },
    /// The key's earlier ticket, and the saved response text.
    Replayed { id: TicketId, text: String },
    /// The test-only lost reply: the ticket is committed, and the boundary must close without a
    /// byte of answer.
    LostReply,
}

/// A create that did not go through, classified.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The key's first request is still in progress; retry with the same key.
    InProgress { key: OperationKey },
    /// The key's record was pruned; a person must check what happened.
    Expired { key: OperationKey },
    /// The key was first used with another payload; nothing was written.
    Conflict(String),
    /// A fault injected on purpose (test only); rolled back.
    InjectedFailure(String),
    /// The service failed; the cause is in the log beside this id.
    Internal { error_id: String },
}

impl Refusal {
    /// An internal failure: logged with a fresh opaque id, which is all the caller learns.
    pub(crate) fn internal(cause: impl std::fmt::Display) -> Refusal {
        let error_id = error_id();
        eprintln!("lab: internal error {error_id}: {cause}");
        Refusal::Internal { error_id }
    }

    /// What to tell the caller of an internal failure.
    pub(crate) fn internal_detail(error_id: &str) -> String {
        format!("the service failed; quote error id {error_id} when reporting it")
    }
}

/// An id unique within this process and unlikely to repeat across restarts: the start time and a
/// counter. It says nothing about the failure itself.
fn error_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs())
    });
    format!("{start:x}-{:04x}", NEXT.fetch_add(1, Ordering::Relaxed))
}
