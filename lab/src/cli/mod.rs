//! The `lab` command line, one file per subcommand (as cargo's own `src/bin/cargo/commands/`):
//! each file holds its clap arguments and an `exec` function. A new subcommand is a new file and
//! one variant of [`Command`].
//!
//! This is a module of the binary, not of the library: the arguments are not an API, and the
//! library's users (adapter authors, the book) never see clap.

use std::path::Path;

use clap::{Parser, Subcommand};
use lab::Error;
use lab::runner::State;

pub mod audit;
pub mod bench;
pub mod bench_postgres;
pub mod bench_probe;
pub mod check;
pub mod check_reports;
pub mod mcp;
pub mod model;
pub mod proxy;
pub mod run;
pub mod runner;
pub mod serve;
pub mod simulate;
pub mod value;

/// The exit statuses, as `--help` lists them after the options.
pub const EXIT_STATUSES: &str = "\
Exit status:
  0  every check passed; for `lab runner`, every operation it ran succeeded
  1  a check failed, lab audit found something, or the run broke (a store or the runner's file
     failed)
  2  bad input: an argument, the fixture, --output, --database, a --target file or a recording
     lab audit cannot read; nothing was
     created, changed or sent, except by `lab check --target` when its calibration (or, for a
     replay mark the service never sends, its run) found that the file does not describe the
     service: then nothing is graded
  3  lab runner: an operation was rejected (its key was first used with another payload)
  4  lab runner: an operation needs review (its outcome is unknown; look on the service)
  5  lab runner: an operation was held by the runner's own configuration (nothing accepts
     connections at --url or --mcp-url, no ticket service answers there, or it refuses
     --token); nothing took effect, and the next run with the same --database sends it with
     the same key
When operations end differently, the status is the first of 4, 3, 5 that applies.";

/// How a command that ran to its end finished. Each has its own exit status, listed in
/// [`EXIT_STATUSES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Finished {
    /// Every check passed, every operation succeeded (or there was nothing to do).
    Succeeded,
    /// Held by the runner's configuration; resumed with the same key on the next run.
    Held,
    /// Rejected by the service: the key was first used with another payload.
    Rejected,
    /// The outcome is unknown; a person must look.
    NeedsReview,
}

impl Finished {
    /// How a run of several operations ended: the most urgent of their states, in the order
    /// needs review, rejected, held. An operation left pending (a paused crash test) counts as
    /// held.
    pub fn of<'s>(states: impl IntoIterator<Item = &'s State>) -> Finished {
        states
            .into_iter()
            .map(|state| match state {
                State::Succeeded { .. } => Finished::Succeeded,
                State::Pending | State::Held { .. } => Finished::Held,
                State::Rejected { .. } => Finished::Rejected,
                State::NeedsReview { .. } => Finished::NeedsReview,
            })
            .max()
            .unwrap_or(Finished::Succeeded)
    }

    /// The exit status.
    pub fn exit_status(self) -> u8 {
        match self {
            Finished::Succeeded => 0,
            Finished::Rejected => 3,
            Finished::NeedsReview => 4,
            Finished::Held => 5,
        }
    }
}

/// Runs the seven retry scenarios against a store (SQLite by default) and prints what each observed.
#[derive(Parser)]
#[command(version, about, after_help = EXIT_STATUSES)]
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
    /// Check the retry contract over recorded traffic: HAR files, OpenTelemetry traces (OTLP
    /// JSON) and `lab proxy --record` files, by the target file `lab check` reads
    Audit(audit::AuditArgs),
    /// Forward requests to a ticket service on loopback, and lose the replies of the first N
    /// (the connection closes after the service answered)
    Proxy(proxy::ProxyArgs),
    /// A durable caller: save the operation, send it with its key, retry transport failures, and
    /// resume unfinished operations on start
    Runner(runner::RunnerArgs),
    /// Serve the ticket store over HTTP on 127.0.0.1 (see the book's "The HTTP contract")
    Serve(serve::ServeArgs),
    /// Serve the ticket tools over the Model Context Protocol: stdio, or Streamable HTTP on
    /// 127.0.0.1 with bearer tokens (see the book's "Over MCP" chapter)
    Mcp(mcp::McpArgs),
    /// Check every point of the retry contract against a store or a service (`--backend http`),
    /// each on a fresh store, and report each passed or failed with its likely cause; or, with
    /// `--target FILE`, any HTTP service that takes an operation key, or an MCP server (a file
    /// with an [mcp] section), as a black box
    Check(check::CheckArgs),
    /// Run seeded histories of callers, faults, crashes and pruning against a tool, and check the
    /// contract's invariants over each (see the book's "Simulated histories" chapter)
    Simulate(simulate::SimulateCommand),
    /// Explore every interleaving of the runner and the service to a bound (Stateright), and
    /// print a shortest counterexample for a property that breaks (see "Every interleaving")
    Model(model::ModelArgs),
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

impl Command {
    /// Whether the subcommand reads the global `--fixture`; given to one that does not, the
    /// option is refused rather than ignored.
    pub fn reads_fixture(&self) -> bool {
        match self {
            Command::Proxy(_)
            | Command::Audit(_)
            | Command::Check(_)
            | Command::Runner(_)
            | Command::Serve(_)
            | Command::Mcp(_)
            | Command::Simulate(_)
            | Command::Model(_)
            | Command::Bench(_)
            | Command::BenchProbe(_)
            | Command::BenchPostgres(_) => false,
        }
    }
}

/// An error about the command line, reported as bad input (exit status 2).
pub fn bad_arguments(problem: &str) -> Error {
    Error::InputInvalid {
        subject: "command line".to_owned(),
        problem: problem.to_owned(),
    }
}

/// An error about the file an option names, as bad input naming the option and the path: what
/// was wrong with the file, or what SQLite said when it could not use it.
pub fn file_option(option: &str, path: &Path, err: Error) -> Error {
    let problem = match err {
        Error::InputInvalid { problem, .. } => problem,
        Error::InputUnreadable { source, .. } => format!("cannot be read: {source}"),
        Error::Store { source } => format!("SQLite cannot use it: {source}"),
        other => return other,
    };
    Error::InputInvalid {
        subject: option.to_owned(),
        problem: format!("{}: {problem}", path.display()),
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
