//! `lab serve`: the ticket store over HTTP on 127.0.0.1.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use lab::Error;
use lab::http::{CallerToken, Retention, ServeOptions, StopSignals, TicketServer};

use super::value;
use super::{bad_arguments, file_option, flush_stdout};

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
    /// The store to serve: sqlite, or postgres (with --database-url; several servers may share
    /// one schema)
    #[arg(long, value_name = "NAME", default_value = "sqlite")]
    pub backend: String,
    /// The PostgreSQL connection URL, for --backend postgres
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// The PostgreSQL schema, for --backend postgres; created if missing
    #[arg(long, value_name = "NAME", default_value = "lab_serve")]
    pub schema: String,
}

/// Starts the server, prints its URL and serves until the process is stopped.
///
/// # Errors
/// Any error opening the store or binding the port.
pub fn exec(args: ServeArgs) -> lab::Result<()> {
    // Without the postgres feature the target is `()`: checked the same way, used nowhere.
    #[cfg_attr(not(feature = "postgres"), allow(clippy::let_unit_value))]
    let _postgres = postgres_target(&args)?;
    if let Some(path) = &args.database {
        lab::database_file::check(path).map_err(|err| file_option("--database", path, err))?;
    }
    // A port in use is refused before the store file is created, not after.
    if args.port != 0 {
        std::net::TcpListener::bind(("127.0.0.1", args.port)).map_err(|err| {
            Error::InputInvalid {
                subject: "--port".to_owned(),
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
        limits: None,
        #[cfg(feature = "postgres")]
        postgres: _postgres,
    })
    .map_err(|err| match (&database, err) {
        // The file passed the check, and SQLite still cannot open it (a folder it cannot write).
        (Some(path), err @ Error::Store { .. }) => file_option("--database", path, err),
        (_, err) => err,
    })?;
    // Caught before the URL is printed: a script that stops the server as soon as it has read
    // the URL must get a clean stop, not a killed process.
    let signals = StopSignals::install()?;
    // The first line is the URL, so a script (or a test) can read where to connect.
    println!("listening on {}", server.url());
    flush_stdout()?;
    server.wait_until(signals)
}

/// The PostgreSQL store `--backend` names, or `None` for SQLite.
#[cfg(feature = "postgres")]
fn postgres_target(args: &ServeArgs) -> lab::Result<Option<lab::http::ServePostgres>> {
    match (args.backend.as_str(), &args.database_url) {
        ("sqlite", None) => Ok(None),
        ("postgres", Some(url)) => Ok(Some(lab::http::ServePostgres {
            url: url.clone(),
            schema: args.schema.clone(),
        })),
        ("postgres", None) => Err(bad_arguments("--backend postgres needs --database-url URL")),
        ("sqlite", Some(_)) => Err(bad_arguments("--database-url is for --backend postgres")),
        (other, _) => Err(bad_arguments(&format!(
            "--backend {other:?}: expected sqlite or postgres"
        ))),
    }
}

/// Without the `postgres` feature, only SQLite can be served.
#[cfg(not(feature = "postgres"))]
fn postgres_target(args: &ServeArgs) -> lab::Result<()> {
    match (args.backend.as_str(), &args.database_url) {
        ("sqlite", None) => Ok(()),
        _ => Err(bad_arguments(
            "lab serve --backend postgres needs the lab built with --features postgres",
        )),
    }
}
