//! `lab simulate`: seeded histories against a tool, checked against the contract's invariants.

use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use clap::{Args, ValueEnum};
use lab::sim::{self, SimulateArgs, Variant};

/// `lab simulate`'s arguments.
#[derive(Args)]
pub struct SimulateCommand {
    /// The first history's seed; history n runs with seed + n
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How many histories to run
    #[arg(long, default_value_t = 1000)]
    pub histories: u64,
    /// The store the simulator runs (the anti-pattern variants use their own SQLite files)
    #[arg(long, value_enum, default_value_t = SimulatedBackend::Sqlite)]
    pub backend: SimulatedBackend,
    /// The tool: the correct store, or an anti-pattern the checker must catch
    #[arg(long, default_value = "correct", value_parser = PossibleValuesParser::new(Variant::ALL.map(Variant::name)))]
    pub variant: String,
    /// Run the fail-at-step-N sweep of the create path instead
    #[arg(long)]
    pub sweep: bool,
    /// Write the book's shrunk counterexamples and sweep table into this folder instead
    #[arg(long, value_name = "DIR")]
    pub examples: Option<PathBuf>,
}

/// The stores `lab simulate` can drive: `sqlite`.
// No doc comment on the variant: clap would print it as a possible value's help.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SimulatedBackend {
    Sqlite,
}

/// Runs the histories (or the sweep) and prints the report.
///
/// # Errors
/// Bad input; an invariant the correct store broke; an anti-pattern the checker missed.
pub fn exec(args: SimulateCommand) -> lab::Result<()> {
    let SimulatedBackend::Sqlite = args.backend;
    // The examples are written after minutes of search: refuse a missing folder first.
    if let Some(folder) = &args.examples
        && !folder.is_dir()
    {
        return Err(lab::Error::InputInvalid {
            subject: "--examples".to_owned(),
            problem: format!("{}: not a folder", folder.display()),
        });
    }
    let report = sim::run_command(&SimulateArgs {
        seed: args.seed,
        histories: args.histories,
        variant: Variant::from_name(&args.variant).unwrap_or(Variant::Correct),
        sweep: args.sweep,
        examples: args.examples,
    })?;
    print!("{}", report.text);
    report.failure.map_or(Ok(()), Err)
}
