//! `lab` without a subcommand: the seven scenarios against a store, and the evidence file.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use lab::backend::Backend;
use lab::evidence::AtomicFile;
use lab::http::HttpTarget;
use lab::suite::SCENARIOS;
use lab::{Evidence, fixture};

use super::bad_arguments;
use super::value;
use lab::BaseUrl;

/// The scenario run's arguments, which are also the top level's.
#[derive(Args)]
pub struct RunArgs {
    /// Which store or service the scenarios run against.
    #[command(flatten)]
    pub target: BackendArgs,

    /// The approved operation to replay [default: the repository's fixture.json, built in]
    #[arg(long, value_name = "FILE", global = true)]
    pub fixture: Option<PathBuf>,

    /// Write the evidence JSON here (replaced atomically; unchanged if the run fails)
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// The store or service a command runs against: `lab` and `lab check` share these options.
#[derive(Args)]
pub struct BackendArgs {
    /// The store to run the scenarios against (`http`: a ticket service such as `lab serve`)
    #[arg(long, visible_alias = "adapter", value_enum, default_value_t = BackendName::Sqlite)]
    pub backend: BackendName,

    /// For --backend http: the service's base URL on loopback (e.g. http://127.0.0.1:8080)
    #[arg(long, value_name = "URL", value_parser = value::loopback_url)]
    pub url: Option<BaseUrl>,

    /// For --backend http: the caller's bearer token
    #[arg(long, value_name = "TOKEN", value_parser = value::token)]
    pub token: Option<String>,

    /// For --backend http: the token of the service's admin endpoints, which the suite uses to
    /// count, forget and reset
    #[arg(long, value_name = "TOKEN", value_parser = value::token)]
    pub admin_token: Option<String>,

    /// PostgreSQL connection URL, for --backend postgres
    /// (e.g. postgresql://user@127.0.0.1:5432/db)
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,

    /// PostgreSQL only: how long a create waits for another caller's uncommitted claim on the same
    /// key before it reports an unknown outcome (lock_timeout)
    #[arg(long, value_name = "MS", default_value_t = 5000, value_parser = value::lock_timeout_ms)]
    pub lock_timeout_ms: u64,
}

/// The stores the scenarios can run against: `sqlite`, `postgres` (feature `postgres`), `http`
/// (a ticket service such as `lab serve`) or `mcp` (`lab mcp` over stdio, started for each
/// scenario).
// The variants carry no doc comments: clap would print them as a list of possible values and
// change the `--help` text users already know.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendName {
    Sqlite,
    Postgres,
    Http,
    Mcp,
}

/// Runs the seven scenarios and writes the evidence.
///
/// # Errors
/// Bad input (arguments, fixture, output path) before anything runs; a failed scenario check; a
/// store that fails.
pub fn exec(args: &RunArgs) -> lab::Result<()> {
    let backend = backend(&args.target)?;
    let operation = match &args.fixture {
        Some(path) => fixture::load(path)?,
        None => fixture::built_in()?,
    };
    // Claim the output first, so an unwritable path is reported before the run.
    let output = args.output.as_deref().map(AtomicFile::create).transpose()?;
    let observed = backend.run_suite(&operation)?;
    if let Some(output) = output {
        output.commit(
            Evidence::new(backend.name(), observed.clone())
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

impl RunArgs {
    /// The first of the run's own options given to a subcommand, which would ignore it.
    /// (`--lock-timeout-ms` is also `lab bench-postgres`'s; `--fixture` is checked apart.)
    pub fn given_to_a_subcommand(&self) -> Option<&'static str> {
        [
            (self.target.backend != BackendName::Sqlite, "--backend"),
            (self.target.url.is_some(), "--url"),
            (self.target.token.is_some(), "--token"),
            (self.target.admin_token.is_some(), "--admin-token"),
            (self.target.database_url.is_some(), "--database-url"),
            (self.output.is_some(), "--output"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }
}

/// The backend the options name, checked before anything connects.
///
/// # Errors
/// [`lab::Error::InputInvalid`] naming the option when the options do not fit together.
pub fn backend(args: &BackendArgs) -> lab::Result<Backend> {
    let http_flags = args.url.is_some() || args.token.is_some() || args.admin_token.is_some();
    match (args.backend, &args.url, &args.token) {
        (BackendName::Http, Some(url), Some(token)) => Ok(Backend::Http(HttpTarget::new(
            url.text(),
            token,
            args.admin_token.as_deref(),
        )?)),
        (BackendName::Http, _, _) => Err(bad_arguments(
            "--backend http needs --url URL and --token TOKEN (and --admin-token for the \
             suite's counts)",
        )),
        (_, _, _) if http_flags => Err(bad_arguments(
            "--url, --token and --admin-token are for --backend http",
        )),
        (BackendName::Mcp, _, _) if args.database_url.is_some() => {
            Err(bad_arguments("--database-url is for --backend postgres"))
        }
        // `lab mcp` over stdio, started from this very binary.
        (BackendName::Mcp, _, _) => Ok(Backend::Mcp {
            program: std::env::current_exe().map_err(|source| lab::Error::Io {
                action: "finding the lab binary to start `lab mcp`".to_owned(),
                source,
            })?,
        }),
        (name, _, _) => store_backend(name, args.database_url.clone(), args.lock_timeout_ms),
    }
}

/// The SQLite or PostgreSQL backend the arguments name (HTTP is not a store of its own).
///
/// # Errors
/// [`lab::Error::InputInvalid`] when `--database-url` is missing for PostgreSQL, or given for
/// another store.
pub fn store_backend(
    name: BackendName,
    url: Option<String>,
    lock_timeout_ms: u64,
) -> lab::Result<Backend> {
    match (name, url) {
        (BackendName::Sqlite | BackendName::Http | BackendName::Mcp, None) => Ok(Backend::Sqlite),
        (BackendName::Sqlite | BackendName::Http | BackendName::Mcp, Some(_)) => {
            Err(bad_arguments("--database-url is for --backend postgres"))
        }
        (BackendName::Postgres, Some(url)) => Ok(Backend::Postgres {
            url,
            lock_timeout: Duration::from_millis(lock_timeout_ms),
        }),
        (BackendName::Postgres, None) => Err(bad_arguments(
            "PostgreSQL needs --database-url URL (e.g. postgresql://user@127.0.0.1:5432/db)",
        )),
    }
}
