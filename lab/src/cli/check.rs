//! `lab check`: every contract point of the conformance run against a store or a service, with
//! what each expects, what the tool did and the likely cause.

use clap::Args;
use lab::Error;
use lab::conformance::Options;

use super::run::{BackendArgs, BackendName, backend};
use super::{Finished, bad_arguments};

/// `lab check`'s arguments.
#[derive(Args)]
pub struct CheckArgs {
    /// Which store or service to check.
    #[command(flatten)]
    pub target: BackendArgs,

    /// Rounds on new keys in the concurrent points (four fifths with two callers racing, the
    /// rest with all of them)
    #[arg(long, value_name = "N", default_value_t = Options::default().fresh_key_rounds as u32,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rounds: u32,

    /// Callers released together in the crowded rounds
    #[arg(long, value_name = "N", default_value_t = Options::default().callers as u32,
          value_parser = clap::value_parser!(u32).range(2..=256))]
    pub callers: u32,

    /// Seeds the callers' jitter, to repeat a run
    #[arg(long, default_value_t = Options::default().seed)]
    pub seed: u64,
}

/// Runs the conformance checks and prints the report.
///
/// # Errors
/// Bad input before anything connects; a store or service that cannot be reached; and
/// [`Error::ScenarioFailed`] (exit status 1) when a contract point failed.
pub fn exec(args: &CheckArgs) -> lab::Result<Finished> {
    if args.target.backend == BackendName::Http && args.target.admin_token.is_none() {
        return Err(bad_arguments(
            "lab check --backend http needs --admin-token: each contract point starts from an \
             empty service, emptied through its admin endpoint",
        ));
    }
    let backend = backend(&args.target)?;
    let options = Options::default()
        .with_rounds(
            args.rounds as usize,
            Options::default().completed_key_rounds,
        )
        .with_callers(args.callers as usize)
        .with_seed(args.seed);
    let report = backend.check(&options)?;
    println!("{report}");
    if report.passed() {
        return Ok(Finished::Succeeded);
    }
    let failed: Vec<&str> = report.failures().map(|(point, _)| point.name).collect();
    Err(Error::ScenarioFailed {
        scenario: "conformance",
        expected: format!("all {} contract points to pass", report.points.len()),
        observed: format!("{} failed: {}", failed.len(), failed.join(", ")),
    })
}
