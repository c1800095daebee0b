//! The `lab` command: parse the arguments, dispatch to the subcommand's `exec`, map errors to exit
//! codes. The subcommands live in `cli/`, one file each.
//!
//! Exit status: 0 when every check passed, 1 when a check failed or the run broke, 2 for bad input
//! (fixture, output path, arguments).

use std::process::ExitCode;

use clap::Parser;
use lab::Error;

mod cli;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => cli::run::exec(&cli.run),
        Some(Command::Proxy(args)) => cli::proxy::exec(&args),
        Some(Command::Runner(args)) => cli::runner::exec(args),
        Some(Command::Serve(args)) => cli::serve::exec(args),
        Some(Command::Simulate(args)) => cli::simulate::exec(args),
        Some(Command::Bench(args)) => cli::bench::exec(args),
        Some(Command::BenchProbe(args)) => cli::bench_probe::exec(&args),
        Some(Command::BenchPostgres(args)) => {
            cli::bench_postgres::exec(args, cli.run.lock_timeout_ms)
        }
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
