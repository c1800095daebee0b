//! `lab serve`: the ticket store over HTTP on 127.0.0.1.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use lab::Error;
use lab::http::{CallerToken, Retention, ServeOptions, TicketServer};

use super::value;
use super::{file_option, flush_stdout};

/// `lab serve`'s arguments.
#[derive(Args)]
pub struct ServeArgs {
    /// The port; 0 picks a free one. The URL is printed on start.
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// The SQLite file [default: a new file in a temporary folder, which stays behind when
    /// the server is killed]
    #[arg(long, value_name = "FILE")]
    pub database: Option<PathBuf>,
    /// A caller and its bearer token, NAME=TOKEN; repeat for more callers
    #[arg(long = "caller", value_name = "NAME=TOKEN", required = true)]
    pub callers: Vec<CallerToken>,
    /// The token of the /admin endpoints (counts, forget, reset); without it they are off
    #[arg(long, value_name = "TOKEN", value_parser = value::token)]
    pub admin_token: Option<String>,
    /// Honour the test-only Lab-Fault header and serve POST /unkeyed-tickets
    #[arg(long)]
    pub faults: bool,
    /// Worker threads, each with its own store connection
    #[arg(long, default_value_t = 8, value_parser = value::workers)]
    pub workers: usize,
    /// Prune replay records this many seconds after their first answer, leaving tombstones
    /// [default: keep them forever]
    #[arg(long, value_name = "SECONDS")]
    pub retention_seconds: Option<u64>,
    /// Keep a pruned key's tombstone (a late retry gets 410) this many seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 30 * 24 * 3600)]
    pub tombstone_seconds: u64,
}

/// Starts the server, prints its URL and serves until the process is stopped.
///
/// # Errors
/// Any error opening the store or binding the port.
pub fn exec(args: ServeArgs) -> lab::Result<()> {
    if let Some(path) = &args.database {
        lab::database_file::check(path).map_err(|err| file_option("--database", path, err))?;
    }
    // A port in use is refused before the store file is created, not after.
    if args.port != 0 {
        std::net::TcpListener::bind(("127.0.0.1", args.port)).map_err(|err| {
            Error::InputInvalid {
                path: "--port".into(),
                problem: format!(
                    "{}: cannot listen on 127.0.0.1:{}: {err}",
                    args.port, args.port
                ),
            }
        })?;
    }
    let database = args.database.clone();
    let server = TicketServer::start(ServeOptions {
        port: args.port,
        database: args.database,
        callers: args.callers,
        admin_token: args.admin_token,
        faults: args.faults,
        workers: args.workers,
        retention: args.retention_seconds.map(|seconds| Retention {
            records: Duration::from_secs(seconds),
            tombstones: Duration::from_secs(args.tombstone_seconds),
        }),
        clock: None,
    })
    .map_err(|err| match (&database, err) {
        // The file passed the check, and SQLite still cannot open it (a folder it cannot write).
        (Some(path), err @ Error::Store { .. }) => file_option("--database", path, err),
        (_, err) => err,
    })?;
    // The first line is the URL, so a script (or a test) can read where to connect.
    println!("listening on {}", server.url());
    flush_stdout()?;
    server.wait();
    Ok(())
}
