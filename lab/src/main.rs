//! The `lab` command: parse the arguments, dispatch to the subcommand's `exec`, map errors to exit
//! codes. The subcommands live in `cli/`, one file each.
//!
//! Exit status: 0 when every check passed (for `lab runner`: every operation succeeded), 1 when a
//! check failed or the run broke, 2 for bad input (arguments, fixture, output path, database);
//! `lab runner` adds 3 (rejected), 4 (needs review) and 5 (held by its own configuration). The
//! list is `cli::EXIT_STATUSES`, printed by `--help`.

use std::process::ExitCode;

use clap::Parser;
use lab::Error;

mod cli;

use cli::{Cli, Command, Finished, bad_arguments};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return clap_error(&err),
    };
    let result = match (cli.command, cli.run.given_to_a_subcommand()) {
        (None, _) => cli::run::exec(&cli.run).map(|()| Finished::Succeeded),
        (Some(_), Some(option)) => Err(bad_arguments(&format!(
            "{option} is for the scenario run (`lab` without a subcommand)"
        ))),
        (Some(command), None) if cli.run.fixture.is_some() && !command.reads_fixture() => Err(
            bad_arguments("--fixture is for the scenario run (`lab` without a subcommand)"),
        ),
        (Some(command), None) => dispatch(command, cli.run.target.lock_timeout_ms),
    };
    match result {
        Ok(finished) => ExitCode::from(finished.exit_status()),
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

fn dispatch(command: Command, lock_timeout_ms: u64) -> lab::Result<Finished> {
    let done = |result: lab::Result<()>| result.map(|()| Finished::Succeeded);
    match command {
        Command::Proxy(args) => done(cli::proxy::exec(&args)),
        Command::Runner(args) => cli::runner::exec(args),
        Command::Serve(args) => done(cli::serve::exec(args)),
        Command::Mcp(args) => done(cli::mcp::exec(args)),
        Command::Check(args) => cli::check::exec(&args),
        Command::Audit(args) => cli::audit::exec(&args),
        Command::Simulate(args) => done(cli::simulate::exec(args)),
        Command::Model(args) => cli::model::exec(&args),
        Command::Bench(args) => done(cli::bench::exec(args)),
        Command::BenchProbe(args) => done(cli::bench_probe::exec(&args)),
        Command::BenchPostgres(args) => done(cli::bench_postgres::exec(args, lock_timeout_ms)),
    }
}

/// Help and version as clap prints them; a usage error on one line (clap's text up to its first
/// blank line, which names the option and the value), with exit status 2.
fn clap_error(err: &clap::Error) -> ExitCode {
    if !err.use_stderr() {
        // --help, --version: not errors.
        let _ = err.print();
        return ExitCode::SUCCESS;
    }
    let text = err.render().to_string();
    let first_paragraph = text.split("\n\n").next().unwrap_or(&text);
    let line: Vec<&str> = first_paragraph.split_whitespace().collect();
    eprintln!("{}", line.join(" "));
    ExitCode::from(2)
}
