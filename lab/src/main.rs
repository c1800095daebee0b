//! The `lab` command: parse the arguments, call the library, map errors to exit codes.
//!
//! Exit status: 0 when every check passed, 1 when a check failed or the run broke, 2 for bad input
//! (fixture, output path, arguments).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::builder::PossibleValuesParser;
use clap::{Parser, Subcommand, ValueEnum};
use lab::evidence::AtomicFile;
use lab::sim::{self, SimulateArgs, Variant};
use lab::suite::SCENARIOS;
use lab::{Error, Evidence, SqliteStore, bench, fixture, suite};

/// Runs the seven retry scenarios against the SQLite store and prints what each observed.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// The approved operation to replay [default: the repository's fixture.json, built in]
    #[arg(long, value_name = "FILE", global = true)]
    fixture: Option<PathBuf>,

    /// Write the evidence JSON here (replaced atomically; unchanged if the run fails)
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run seeded histories of callers, faults, crashes and pruning against a tool, and check the
    /// contract's invariants over each (see the book's "Simulated histories" chapter)
    Simulate {
        /// The first history's seed; history n runs with seed + n
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How many histories to run
        #[arg(long, default_value_t = 1000)]
        histories: u64,
        /// The store the simulator runs (the anti-pattern variants use their own SQLite files)
        #[arg(long, value_enum, default_value_t = SimulatedBackend::Sqlite)]
        backend: SimulatedBackend,
        /// The tool: the correct store, or an anti-pattern the checker must catch
        #[arg(long, default_value = "correct", value_parser = PossibleValuesParser::new(Variant::ALL.map(Variant::name)))]
        variant: String,
        /// Run the fail-at-step-N sweep of the create path instead
        #[arg(long)]
        sweep: bool,
        /// Write the book's shrunk counterexamples and sweep table into this folder instead
        #[arg(long, value_name = "DIR")]
        examples: Option<PathBuf>,
    },
    /// Measure naive create, keyed create and replay side by side, and a burst on one key
    Bench {
        /// Calls per sequential measurement
        #[arg(long, default_value_t = bench::BenchPlan::default().iterations)]
        iterations: u32,
        /// Callers released together on one key
        #[arg(long, default_value_t = bench::BenchPlan::default().burst_callers)]
        callers: usize,
    },
}

/// The stores `lab simulate` can drive.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SimulatedBackend {
    Sqlite,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => run_scenarios(cli.fixture.as_deref(), cli.output.as_deref()),
        Some(Command::Bench {
            iterations,
            callers,
        }) => run_bench(iterations, callers),
        Some(Command::Simulate {
            seed,
            histories,
            backend: SimulatedBackend::Sqlite,
            variant,
            sweep,
            examples,
        }) => run_simulate(SimulateArgs {
            seed,
            histories,
            variant: Variant::from_name(&variant).unwrap_or(Variant::Correct),
            sweep,
            examples,
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if err.is_bad_input() => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
        Err(err @ Error::ScenarioFailed { .. }) => {
            eprintln!("FAIL: {err}");
            ExitCode::from(1)
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(1)
        }
    }
}

fn run_scenarios(fixture: Option<&Path>, output: Option<&Path>) -> lab::Result<()> {
    let operation = match fixture {
        Some(path) => fixture::load(path)?,
        None => fixture::built_in()?,
    };
    // Claim the output first, so an unwritable path is reported before the run.
    let output = output.map(AtomicFile::create).transpose()?;
    let observed = suite::run(&operation, |_scenario| SqliteStore::temporary())?;
    if let Some(output) = output {
        output.commit(
            Evidence::new("sqlite", observed.clone())
                .to_json()
                .as_bytes(),
        )?;
    }
    for line in observed.lines() {
        println!("{line}");
    }
    println!("PASS: {} scenarios", SCENARIOS.len());
    Ok(())
}

fn run_bench(iterations: u32, callers: usize) -> lab::Result<()> {
    if iterations == 0 || callers == 0 {
        return Err(Error::InputInvalid {
            path: PathBuf::from("command line"),
            problem: "--iterations and --callers must be at least 1".to_owned(),
        });
    }
    let report = bench::run(bench::BenchPlan {
        iterations,
        burst_callers: callers,
    })?;
    println!("{report}");
    Ok(())
}

fn run_simulate(args: SimulateArgs) -> lab::Result<()> {
    let report = sim::run_command(&args)?;
    print!("{}", report.text);
    report.failure.map_or(Ok(()), Err)
}
