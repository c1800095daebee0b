//! The anti-patterns, each an adapter that implements [`TicketTool`](crate::TicketTool) wrongly on
//! purpose, so the simulator can show that its checker catches the mistake.

/// The inspection half of [`TicketTool`](crate::TicketTool), forwarded to the field that holds
/// the rows. Each anti-pattern gets its mistake wrong in `create` alone; what the checker reads
/// afterwards must be the database as it is.
macro_rules! forward_inspection {
    ($rows:ident) => {
        fn ticket_ids(&self) -> crate::error::Result<Vec<crate::tool::TicketId>> {
            self.$rows.ticket_ids()
        }

        fn count_records(&self) -> crate::error::Result<u64> {
            self.$rows.count_records()
        }

        fn forget_record(
            &self,
            scope: &crate::key::Scope,
            key: &crate::key::OperationKey,
        ) -> crate::error::Result<bool> {
            self.$rows.forget_record(scope, key)
        }
    };
}

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
