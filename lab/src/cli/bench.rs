//! `lab bench`: the keyed create side by side with plain statements, bursts and large stores.

use std::path::PathBuf;

use clap::Args;
use lab::bench::{self, BenchPlan};
use lab::evidence::AtomicFile;

use super::bad_arguments;

/// `lab bench`'s arguments.
#[derive(Args)]
pub struct BenchArgs {
    /// Calls per sequential measurement
    #[arg(long, default_value_t = BenchPlan::default().iterations)]
    pub iterations: u32,
    /// Burst sizes: callers released together
    #[arg(long, value_delimiter = ',', default_value = "8,64,256")]
    pub bursts: Vec<usize>,
    /// Numbers of retained records to compare
    #[arg(long, value_delimiter = ',', default_value = "1000,1000000")]
    pub retained: Vec<u64>,
    /// Repeats of each measurement; the median is reported
    #[arg(long, default_value_t = BenchPlan::default().repeats)]
    pub repeats: usize,
    /// A small plan for a smoke run: seconds instead of minutes (overrides the four above)
    #[arg(long)]
    pub quick: bool,
    /// Also write the measurements as JSON here (atomically)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Measures, prints the report and writes the JSON.
///
/// # Errors
/// Bad input (a zero in the plan, an unwritable `--json`) before anything runs; a store that fails.
pub fn exec(args: BenchArgs) -> lab::Result<()> {
    let plan = if args.quick {
        BenchPlan::quick()
    } else {
        BenchPlan {
            iterations: args.iterations,
            bursts: args.bursts,
            retained: args.retained,
            repeats: args.repeats,
        }
    };
    if plan.iterations == 0
        || plan.repeats == 0
        || plan.bursts.contains(&0)
        || plan.retained.contains(&0)
    {
        return Err(bad_arguments(
            "--iterations, --repeats, --bursts and --retained must be at least 1",
        ));
    }
    let output = args.json.as_deref().map(AtomicFile::create).transpose()?;
    let report = bench::run(&plan)?;
    println!("{report}");
    if let Some(output) = output {
        output.commit(report.to_json().as_bytes())?;
    }
    Ok(())
}
