//! The anti-patterns, each an adapter that implements [`TicketTool`](crate::TicketTool) wrongly on
//! purpose, so the simulator can show that its checker catches the mistake.

mod check_then_write;
mod early_prune;
mod fresh_key;
mod memory_key;
mod raw_payload;
mod scratch;

pub use check_then_write::{CheckThenWrite, Unclaimed};
pub use early_prune::EarlyPrune;
pub use fresh_key::FreshKeyPerAttempt;
pub use memory_key::MemoryKey;
pub use raw_payload::RawPayloadText;
pub use scratch::Scratch;
