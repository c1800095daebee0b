//! The `lab` command line, one file per subcommand (as cargo's own `src/bin/cargo/commands/`):
//! each file holds its clap arguments and an `exec` function. A new subcommand is a new file and
//! one variant of [`Command`].
//!
//! This is a module of the binary, not of the library: the arguments are not an API, and the
//! library's users (adapter authors, the book) never see clap.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use lab::Error;

pub mod bench;
pub mod bench_postgres;
pub mod bench_probe;
pub mod proxy;
pub mod run;
pub mod runner;
pub mod serve;
pub mod simulate;

/// Runs the seven retry scenarios against a store (SQLite by default) and prints what each observed.
#[derive(Parser)]
#[command(version, about)]
pub struct Cli {
    /// The default command's arguments: the seven-scenario run.
    #[command(flatten)]
    pub run: run::RunArgs,

    /// The subcommand; without one, the scenarios run.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands, each defined in its own file.
#[derive(Subcommand)]
pub enum Command {
    /// Forward requests to a ticket service on loopback, and lose the replies of the first N
    /// (the connection closes after the service answered)
    Proxy(proxy::ProxyArgs),
    /// A durable caller: save the operation, send it with its key, retry transport failures, and
    /// resume unfinished operations on start
    Runner(runner::RunnerArgs),
    /// Serve the ticket store over HTTP on 127.0.0.1 (see the book's "Across a real boundary")
    Serve(serve::ServeArgs),
    /// Run seeded histories of callers, faults, crashes and pruning against a tool, and check the
    /// contract's invariants over each (see the book's "Simulated histories" chapter)
    Simulate(simulate::SimulateCommand),
    /// Measure the keyed create side by side with plain statements, bursts of callers and large
    /// stores, and print the ratios
    Bench(bench::BenchArgs),
    /// Repeat one kind of call on a CPU-bound store, for an instruction counter (valgrind) to
    /// measure from outside; used by `cargo xtask bench`
    #[command(hide = true)]
    BenchProbe(bench_probe::BenchProbeArgs),
    /// Measure keyed create against plain insert on PostgreSQL at several numbers of clients
    BenchPostgres(bench_postgres::BenchPostgresArgs),
}

/// An error about the command line, reported as bad input (exit status 2).
pub fn bad_arguments(problem: &str) -> Error {
    Error::InputInvalid {
        path: PathBuf::from("command line"),
        problem: problem.to_owned(),
    }
}

/// Writes what is on stdout now, so a script (or a test) reading the first line sees it at once.
///
/// # Errors
/// [`Error::Io`] when stdout is closed.
pub fn flush_stdout() -> lab::Result<()> {
    std::io::Write::flush(&mut std::io::stdout()).map_err(|source| Error::Io {
        action: "writing the address to stdout".to_owned(),
        source,
    })
}
