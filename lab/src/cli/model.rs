//! `lab model`: every interleaving of the runner and the service to a bound, checked with
//! Stateright; a broken property comes back as a shortest counterexample.

use clap::Args;
use clap::builder::PossibleValuesParser;
use lab::model::{self, Bounds, Variant};

use super::Finished;

/// `lab model`'s arguments.
#[derive(Args)]
pub struct ModelArgs {
    /// Runner processes, one intent each: c1/i1; c1/i2 (i1's key, another payload); c2/i1
    #[arg(long, default_value_t = Bounds::DEFAULT.callers, value_parser = clap::value_parser!(u8).range(1..=i64::from(Bounds::MAX_CALLERS)))]
    pub callers: u8,
    /// Sends per run of an operation (the runner's retry budget)
    #[arg(long, default_value_t = Bounds::DEFAULT.sends, value_parser = clap::value_parser!(u8).range(1..=i64::from(Bounds::MAX_SENDS)))]
    pub sends: u8,
    /// Messages the network may lose, in all
    #[arg(long, default_value_t = Bounds::DEFAULT.losses, value_parser = clap::value_parser!(u8).range(0..=i64::from(Bounds::MAX_FAULTS)))]
    pub losses: u8,
    /// Requests the network may deliver twice, in all
    #[arg(long, default_value_t = Bounds::DEFAULT.duplicates, value_parser = clap::value_parser!(u8).range(0..=i64::from(Bounds::MAX_FAULTS)))]
    pub duplicates: u8,
    /// Crashes of a runner or of the service, in all
    #[arg(long, default_value_t = Bounds::DEFAULT.crashes, value_parser = clap::value_parser!(u8).range(0..=i64::from(Bounds::MAX_FAULTS)))]
    pub crashes: u8,
    /// Records the retention job may prune, in all
    #[arg(long, default_value_t = Bounds::DEFAULT.prunes, value_parser = clap::value_parser!(u8).range(0..=i64::from(Bounds::MAX_FAULTS)))]
    pub prunes: u8,
    /// The design checked: the lab's, or an anti-pattern whose counterexample to print
    #[arg(long, default_value = "design", value_parser = PossibleValuesParser::new(Variant::ALL.map(Variant::name)))]
    pub variant: String,
}

/// Explores the model and prints the report. A counterexample is a failed check (exit 1), for
/// an anti-pattern as for the design: the status says whether the properties hold.
///
/// # Errors
/// Bad input (exit 2); [`lab::Error::ScenarioFailed`] when a property broke.
pub fn exec(args: &ModelArgs) -> lab::Result<Finished> {
    let bounds = Bounds {
        callers: args.callers,
        sends: args.sends,
        losses: args.losses,
        duplicates: args.duplicates,
        crashes: args.crashes,
        prunes: args.prunes,
    };
    // The parser admits only listed names; an unknown one here is a parser bug, refused as input.
    let Some(variant) = Variant::from_name(&args.variant) else {
        return Err(super::bad_arguments(&format!(
            "--variant {:?}: no such design",
            args.variant
        )));
    };
    let report = model::check(bounds, variant)?;
    print!("{}", report.text(true));
    match &report.counterexample {
        None => Ok(Finished::Succeeded),
        Some(found) => Err(lab::Error::ScenarioFailed {
            scenario: "model",
            expected: format!("every property of {variant} to hold within the bounds"),
            observed: format!("{} broken in {} steps", found.property, found.steps()),
        }),
    }
}
