//! Which store the `lab` command runs against: the embedded SQLite store, a PostgreSQL server
//! when the lab was built with the `postgres` feature, or a ticket service over HTTP when it was
//! built with `http`.
//!
//! The choice lives here rather than in `main.rs`, so the command stays thin and a lab built
//! without PostgreSQL support still knows the name and says how to get it.

use std::time::Duration;

use crate::conformance;
use crate::error::Result;
#[cfg(feature = "http")]
use crate::http::{HttpTarget, HttpTool};
#[cfg(feature = "mcp")]
use crate::mcp::{McpTool, client::StdioServer};
use crate::sqlite::SqliteStore;
use crate::suite::{self, Observations, Operation};
#[cfg(feature = "bench")]
use crate::throughput::{ThroughputPlan, ThroughputReport};

/// A store to run the scenarios against.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// A fresh temporary SQLite database per scenario.
    Sqlite,
    /// A fresh schema per scenario on the PostgreSQL server at `url`.
    Postgres {
        /// The connection URL, such as `postgresql://lab@127.0.0.1:5432/tickets`.
        url: String,
        /// How long a create waits for another caller's uncommitted claim on its key.
        lock_timeout: Duration,
    },
    /// A ticket service over HTTP (such as `lab serve`), through [`HttpTool`]; the store is
    /// emptied through its admin endpoint before each scenario.
    #[cfg(feature = "http")]
    Http(HttpTarget),
    /// The ticket tools over MCP, through [`McpTool`]: `program mcp` is started over stdio for
    /// each scenario, on a temporary database of its own, with faults and the admin tools on.
    #[cfg(feature = "mcp")]
    Mcp {
        /// The `lab` binary to start as the server.
        program: std::path::PathBuf,
    },
}

/// The admin token `lab --backend mcp` starts its servers with; they live only as long as one
/// scenario and listen on nothing but the pipe to their parent.
#[cfg(feature = "mcp")]
const MCP_SUITE_ADMIN_TOKEN: &str = "lab-suite-admin";

/// The caller a `lab check --backend mcp` server acts for.
#[cfg(feature = "mcp")]
const MCP_CHECK_CALLER: &str = "support-agent";

impl Backend {
    /// The name the evidence file and the command line use: `sqlite` or `postgres`.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres { .. } => "postgres",
            #[cfg(feature = "http")]
            Backend::Http(_) => "http",
            #[cfg(feature = "mcp")]
            Backend::Mcp { .. } => "mcp",
        }
    }

    /// Runs the seven scenarios, each on a fresh store.
    ///
    /// # Errors
    /// As [`suite::run`]; for PostgreSQL also any connection error, and
    /// [`Error::InputInvalid`](crate::Error::InputInvalid) when the lab was built without the
    /// `postgres` feature; for HTTP, [`Error::Http`](crate::Error::Http) when the
    /// service cannot be reached or refuses the admin token.
    pub fn run_suite(&self, operation: &Operation) -> Result<Observations> {
        match self {
            // Separate temporary databases: the scenarios can run at the same time.
            Backend::Sqlite => suite::run_parallel(operation, |_scenario| SqliteStore::temporary()),
            Backend::Postgres { url, lock_timeout } => {
                postgres::run_suite(url, *lock_timeout, operation)
            }
            // One service, emptied before each scenario: the scenarios run one after another.
            #[cfg(feature = "http")]
            Backend::Http(target) => suite::run(operation, |_scenario| {
                let tool = HttpTool::new(target.clone());
                tool.reset()?;
                Ok(tool)
            }),
            // A fresh server process per scenario: its temporary database is the fresh store.
            #[cfg(feature = "mcp")]
            Backend::Mcp { program } => suite::run(operation, |_scenario| {
                McpTool::spawn(&StdioServer::lab(
                    program.clone(),
                    operation.scope.caller(),
                    MCP_SUITE_ADMIN_TOKEN,
                ))
            }),
        }
    }

    /// Checks every contract point of [`conformance`], each on a fresh store:
    /// a temporary database, a fresh schema, or the service emptied through its admin endpoint.
    ///
    /// # Errors
    /// As [`Backend::run_suite`], for what stops the run before it checks anything; a broken
    /// contract point is in the report, not an error.
    pub fn check(&self, options: &conformance::Options) -> Result<conformance::Report> {
        match self {
            Backend::Sqlite => Ok(conformance::run_with(options, SqliteStore::temporary)),
            Backend::Postgres { url, lock_timeout } => postgres::check(url, *lock_timeout, options),
            #[cfg(feature = "http")]
            Backend::Http(target) => {
                // Fails here, before the report, when the admin token is missing or refused.
                HttpTool::new(target.clone()).reset()?;
                Ok(conformance::run_with(options, || {
                    let tool = HttpTool::new(target.clone());
                    tool.reset()?;
                    Ok(tool)
                }))
            }
            #[cfg(feature = "mcp")]
            Backend::Mcp { program } => {
                let server =
                    StdioServer::lab(program.clone(), MCP_CHECK_CALLER, MCP_SUITE_ADMIN_TOKEN);
                // Fails here, before the report, when the server cannot be started.
                drop(McpTool::spawn(&server)?);
                Ok(conformance::run_with(options, || McpTool::spawn(&server)))
            }
        }
    }

    /// Measures keyed create against plain insert at each number of clients in `plan`.
    ///
    /// # Errors
    /// As [`crate::throughput::compare`]; [`Error::InputInvalid`](crate::Error::InputInvalid) for
    /// SQLite (use `lab bench`, since SQLite takes one writer at a time) and when PostgreSQL
    /// support is not built in.
    #[cfg(feature = "bench")]
    pub fn compare_throughput(&self, plan: &ThroughputPlan) -> Result<ThroughputReport> {
        match self {
            Backend::Sqlite => Err(command_line(
                "the throughput comparison is for PostgreSQL; `lab bench` measures SQLite",
            )),
            #[cfg(feature = "http")]
            Backend::Http(_) => Err(command_line(
                "the throughput comparison is for PostgreSQL; `lab bench` measures SQLite",
            )),
            #[cfg(feature = "mcp")]
            Backend::Mcp { .. } => Err(command_line(
                "the throughput comparison is for PostgreSQL; `lab bench` measures SQLite",
            )),
            Backend::Postgres { url, lock_timeout } => {
                postgres::compare_throughput(url, *lock_timeout, plan)
            }
        }
    }
}

/// An error about the command line, reported as bad input.
#[cfg(any(feature = "bench", not(feature = "postgres")))]
fn command_line(problem: &str) -> crate::Error {
    crate::Error::InputInvalid {
        subject: "command line".to_owned(),
        problem: problem.to_owned(),
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use std::time::Duration;

    use crate::conformance;
    use crate::error::Result;
    use crate::postgres::{PostgresOptions, PostgresStore};
    use crate::suite::{self, Observations, Operation};
    #[cfg(feature = "bench")]
    use crate::throughput::{self, ThroughputPlan, ThroughputReport};

    pub fn run_suite(
        url: &str,
        lock_timeout: Duration,
        operation: &Operation,
    ) -> Result<Observations> {
        let options = PostgresOptions::default().with_lock_timeout(lock_timeout);
        suite::run(operation, |_scenario| {
            PostgresStore::temporary_with(url, options)
        })
    }

    pub fn check(
        url: &str,
        lock_timeout: Duration,
        options: &conformance::Options,
    ) -> Result<conformance::Report> {
        let store_options = PostgresOptions::default().with_lock_timeout(lock_timeout);
        // One store first, so a bad URL or an unreachable server fails before the report.
        drop(PostgresStore::temporary_with(url, store_options)?);
        Ok(conformance::run_with(options, || {
            PostgresStore::temporary_with(url, store_options)
        }))
    }

    #[cfg(feature = "bench")]
    pub fn compare_throughput(
        url: &str,
        lock_timeout: Duration,
        plan: &ThroughputPlan,
    ) -> Result<ThroughputReport> {
        let options = PostgresOptions::default().with_lock_timeout(lock_timeout);
        // One store first, to name the server and to fail early on a bad URL.
        let probe = PostgresStore::temporary_with(url, options)?;
        let heading = format!(
            "keyed create vs plain insert on PostgreSQL {} at {}",
            probe.server_version()?,
            probe.target()
        );
        drop(probe);
        let rows = throughput::compare(plan, || PostgresStore::temporary_with(url, options))?;
        Ok(ThroughputReport {
            heading,
            plan: plan.clone(),
            rows,
        })
    }
}

#[cfg(not(feature = "postgres"))]
mod postgres {
    use std::time::Duration;

    use crate::error::{Error, Result};
    use crate::suite::{Observations, Operation};
    #[cfg(feature = "bench")]
    use crate::throughput::{ThroughputPlan, ThroughputReport};

    fn not_built_in() -> Error {
        super::command_line(
            "--backend postgres: this lab was built without PostgreSQL support; rebuild it with \
             the `postgres` feature, e.g. `cargo run -p lab --features postgres -- --backend \
             postgres --database-url URL`",
        )
    }

    pub fn run_suite(_: &str, _: Duration, _: &Operation) -> Result<Observations> {
        Err(not_built_in())
    }

    pub fn check(
        _: &str,
        _: Duration,
        _: &crate::conformance::Options,
    ) -> Result<crate::conformance::Report> {
        Err(not_built_in())
    }

    #[cfg(feature = "bench")]
    pub fn compare_throughput(
        _: &str,
        _: Duration,
        _: &ThroughputPlan,
    ) -> Result<ThroughputReport> {
        Err(not_built_in())
    }
}
