//! `lab bench-probe` (hidden): one kind of call repeated, for an instruction counter to measure.

use clap::Args;
use lab::bench::probe::{self, Operation};

use super::bad_arguments;

/// `lab bench-probe`'s arguments.
#[derive(Args)]
pub struct BenchProbeArgs {
    /// plain-insert, naive-create, keyed-create, keyed-create-busy-handler, ticket-and-record,
    /// plain-select or replay
    pub operation: String,
    /// How many calls
    pub calls: u32,
}

/// Repeats the call.
///
/// # Errors
/// Bad input for an unknown operation; a store that fails.
pub fn exec(args: &BenchProbeArgs) -> lab::Result<()> {
    match Operation::named(&args.operation) {
        Some(operation) => probe::run(operation, args.calls).map(drop),
        None => Err(bad_arguments(&format!(
            "unknown probe operation {:?}",
            args.operation
        ))),
    }
}
