//! The `lab` command: parse the arguments, call the library, map errors to exit codes.
//!
//! Exit status: 0 when every check passed, 1 when a check failed or the run broke, 2 for bad input
//! (fixture, output path, arguments).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::PossibleValuesParser;
use clap::{Parser, Subcommand, ValueEnum};
use lab::backend::Backend;
use lab::evidence::AtomicFile;
use lab::http::{
    CallerToken, DroppingProxy, HttpTarget, HttpTool, Retention, ServeOptions, TicketServer,
};
use lab::runner::{PausePoint, RetryPolicy, Runner};
use lab::sim::{self, SimulateArgs, Variant};
use lab::suite::SCENARIOS;
use lab::throughput::ThroughputPlan;
use lab::{Error, Evidence, bench, fixture};

/// Runs the seven retry scenarios against a store (SQLite by default) and prints what each observed.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// The store to run the scenarios against (`http`: a ticket service such as `lab serve`)
    #[arg(long, visible_alias = "adapter", value_enum, default_value_t = BackendName::Sqlite)]
    backend: BackendName,

    /// For --backend http: the service's base URL on loopback (e.g. http://127.0.0.1:8080)
    #[arg(long, value_name = "URL")]
    url: Option<String>,

    /// For --backend http: the caller's bearer token
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,

    /// For --backend http: the token of the service's admin endpoints, which the suite uses to
    /// count, forget and reset
    #[arg(long, value_name = "TOKEN")]
    admin_token: Option<String>,

    /// PostgreSQL connection URL, for --backend postgres
    /// (e.g. postgresql://user@127.0.0.1:5432/db)
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,

    /// PostgreSQL only: how long a create waits for another caller's uncommitted claim on the same
    /// key before it reports an unknown outcome (lock_timeout)
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    lock_timeout_ms: u64,

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
    /// Forward requests to a ticket service on loopback, and lose the replies of the first N
    /// (the connection closes after the service answered)
    Proxy {
        /// The service's base URL, e.g. http://127.0.0.1:8080
        #[arg(long, value_name = "URL")]
        upstream: String,
        /// The proxy's port; 0 picks a free one. The URL is printed on start.
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// How many replies to lose, counting from the first request
        #[arg(long, value_name = "N", default_value_t = 1)]
        drop_first: u32,
    },
    /// A durable caller: save the operation, send it with its key, retry transport failures, and
    /// resume unfinished operations on start
    Runner {
        /// The runner's own SQLite file
        #[arg(long, value_name = "FILE")]
        database: PathBuf,
        /// The ticket service's base URL on loopback
        #[arg(long, value_name = "URL")]
        url: String,
        /// The caller's bearer token
        #[arg(long, value_name = "TOKEN")]
        token: String,
        /// The caller's name, saved with each operation as its scope
        #[arg(long, value_name = "NAME")]
        caller: String,
        /// A new operation's key; without it, the runner only resumes unfinished operations
        #[arg(long, value_name = "KEY", requires = "payload")]
        key: Option<String>,
        /// A new operation's payload, a JSON object
        #[arg(long, value_name = "JSON", requires = "key")]
        payload: Option<String>,
        /// Sends per operation and run, the first included
        #[arg(long, default_value_t = RetryPolicy::default().attempts)]
        attempts: u32,
        /// No send starts later than this many milliseconds after the operation's run began
        #[arg(long, value_name = "MS", default_value_t = 30_000)]
        deadline_ms: u64,
    },
    /// Serve the ticket store over HTTP on 127.0.0.1 (see the book's "Across a real boundary")
    Serve {
        /// The port; 0 picks a free one. The URL is printed on start.
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// The SQLite file [default: a new file in a temporary folder, which stays behind when
        /// the server is killed]
        #[arg(long, value_name = "FILE")]
        database: Option<PathBuf>,
        /// A caller and its bearer token, NAME=TOKEN; repeat for more callers
        #[arg(long = "caller", value_name = "NAME=TOKEN", required = true)]
        callers: Vec<CallerToken>,
        /// The token of the /admin endpoints (counts, forget, reset); without it they are off
        #[arg(long, value_name = "TOKEN")]
        admin_token: Option<String>,
        /// Honour the test-only Lab-Fault header and serve POST /unkeyed-tickets
        #[arg(long)]
        faults: bool,
        /// Worker threads, each with its own store connection
        #[arg(long, default_value_t = 8)]
        workers: usize,
        /// Prune replay records this many seconds after their first answer, leaving tombstones
        /// [default: keep them forever]
        #[arg(long, value_name = "SECONDS")]
        retention_seconds: Option<u64>,
        /// Keep a pruned key's tombstone (a late retry gets 410) this many seconds
        #[arg(long, value_name = "SECONDS", default_value_t = 30 * 24 * 3600)]
        tombstone_seconds: u64,
        /// The store to serve: sqlite, or postgres (with --database-url; several servers may
        /// share one schema)
        #[arg(long, value_name = "NAME", default_value = "sqlite")]
        backend: String,
        /// The PostgreSQL connection URL for --backend postgres
        #[arg(long, value_name = "URL")]
        database_url: Option<String>,
        /// The PostgreSQL schema for --backend postgres, created if missing
        #[arg(long, value_name = "NAME", default_value = "lab_serve")]
        schema: String,
    },
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
    /// Measure the keyed create side by side with plain statements, bursts of callers and large
    /// stores, and print the ratios
    Bench {
        /// Calls per sequential measurement
        #[arg(long, default_value_t = bench::BenchPlan::default().iterations)]
        iterations: u32,
        /// Burst sizes: callers released together
        #[arg(long, value_delimiter = ',', default_value = "8,64,256")]
        bursts: Vec<usize>,
        /// Numbers of retained records to compare
        #[arg(long, value_delimiter = ',', default_value = "1000,1000000")]
        retained: Vec<u64>,
        /// Repeats of each measurement; the median is reported
        #[arg(long, default_value_t = bench::BenchPlan::default().repeats)]
        repeats: usize,
        /// A small plan for a smoke run: seconds instead of minutes (overrides the four above)
        #[arg(long)]
        quick: bool,
        /// Also write the measurements as JSON here (atomically)
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Repeat one kind of call on a CPU-bound store, for an instruction counter (valgrind) to
    /// measure from outside; used by `cargo xtask bench`
    #[command(hide = true)]
    BenchProbe {
        /// plain-insert, naive-create, keyed-create, keyed-create-busy-handler, ticket-and-record,
        /// plain-select or replay
        operation: String,
        /// How many calls
        calls: u32,
    },
    /// Measure keyed create against plain insert on PostgreSQL at several numbers of clients
    BenchPostgres {
        /// PostgreSQL connection URL (e.g. postgresql://user@127.0.0.1:5432/db)
        #[arg(long, value_name = "URL")]
        database_url: String,
        /// Creates per measurement, shared among the clients
        #[arg(long, default_value_t = ThroughputPlan::default().calls)]
        calls: u32,
        /// Numbers of concurrent clients, one table row each
        #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
        clients: Vec<usize>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendName {
    Sqlite,
    Postgres,
    Http,
}

/// The stores `lab simulate` can drive.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SimulatedBackend {
    Sqlite,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => backend(&cli).and_then(|backend| {
            run_scenarios(&backend, cli.fixture.as_deref(), cli.output.as_deref())
        }),
        Some(Command::Proxy {
            upstream,
            port,
            drop_first,
        }) => proxy(&upstream, port, drop_first),
        Some(Command::Runner {
            database,
            url,
            token,
            caller,
            key,
            payload,
            attempts,
            deadline_ms,
        }) => run_runner(RunnerArgs {
            database,
            url,
            token,
            caller,
            new_operation: key.zip(payload),
            policy: RetryPolicy {
                attempts,
                deadline: Duration::from_millis(deadline_ms),
                ..RetryPolicy::default()
            },
        }),
        Some(Command::Serve {
            port,
            database,
            callers,
            admin_token,
            faults,
            workers,
            retention_seconds,
            tombstone_seconds,
            backend,
            database_url,
            schema,
        }) => serve_backend(&backend, database_url, schema).and_then(|_postgres| {
            serve(ServeOptions {
                port,
                database,
                callers,
                admin_token,
                faults,
                workers,
                retention: retention_seconds.map(|seconds| Retention {
                    records: Duration::from_secs(seconds),
                    tombstones: Duration::from_secs(tombstone_seconds),
                }),
                clock: None,
                limits: None,
                #[cfg(feature = "postgres")]
                postgres: _postgres,
            })
        }),
        Some(Command::Bench {
            iterations,
            bursts,
            retained,
            repeats,
            quick,
            json,
        }) => {
            let plan = if quick {
                bench::BenchPlan::quick()
            } else {
                bench::BenchPlan {
                    iterations,
                    bursts,
                    retained,
                    repeats,
                }
            };
            run_bench(&plan, json.as_deref())
        }
        Some(Command::BenchProbe { operation, calls }) => {
            match bench::probe::Operation::named(&operation) {
                Some(operation) => bench::probe::run(operation, calls).map(drop),
                None => Err(bad_arguments(&format!(
                    "unknown probe operation {operation:?}"
                ))),
            }
        }
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
        Some(Command::BenchPostgres {
            database_url,
            calls,
            clients,
        }) => store_backend(
            BackendName::Postgres,
            Some(database_url),
            cli.lock_timeout_ms,
        )
        .and_then(|backend| run_throughput(&backend, calls, clients)),
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

fn backend(cli: &Cli) -> lab::Result<Backend> {
    let http_flags = cli.url.is_some() || cli.token.is_some() || cli.admin_token.is_some();
    match (cli.backend, &cli.url, &cli.token) {
        (BackendName::Http, Some(url), Some(token)) => Ok(Backend::Http(HttpTarget::new(
            url,
            token,
            cli.admin_token.as_deref(),
        )?)),
        (BackendName::Http, _, _) => Err(bad_arguments(
            "--backend http needs --url URL and --token TOKEN (and --admin-token for the \
             suite's counts)",
        )),
        (_, _, _) if http_flags => Err(bad_arguments(
            "--url, --token and --admin-token are for --backend http",
        )),
        (name, _, _) => store_backend(name, cli.database_url.clone(), cli.lock_timeout_ms),
    }
}

fn store_backend(
    name: BackendName,
    url: Option<String>,
    lock_timeout_ms: u64,
) -> lab::Result<Backend> {
    match (name, url) {
        (BackendName::Sqlite | BackendName::Http, None) => Ok(Backend::Sqlite),
        (BackendName::Sqlite | BackendName::Http, Some(_)) => {
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

fn proxy(upstream: &str, port: u16, drop_first: u32) -> lab::Result<()> {
    let proxy = DroppingProxy::start(DroppingProxy::upstream_address(upstream)?, port, drop_first)?;
    println!("listening on {}", proxy.url());
    flush_stdout()?;
    proxy.wait();
    Ok(())
}

struct RunnerArgs {
    database: PathBuf,
    url: String,
    token: String,
    caller: String,
    new_operation: Option<(String, String)>,
    policy: RetryPolicy,
}

fn run_runner(args: RunnerArgs) -> lab::Result<()> {
    let tool = HttpTool::new(HttpTarget::new(&args.url, &args.token, None)?);
    let pause = PausePoint::from_environment()?;
    let runner = Runner::open(&args.database, tool, args.policy)?.with_pause(pause);
    // Unfinished operations first, each with its saved key.
    for saved in runner.resume()? {
        println!("resumed {saved}");
    }
    if let Some((key, payload)) = args.new_operation {
        let operation = lab::Operation {
            scope: lab::Scope::new(args.caller, lab::http::contract::CREATE_TICKET)?,
            operation_key: lab::OperationKey::try_from(key)?,
            payload: lab::Payload::from_json_text(&payload)?,
        };
        println!("{}", runner.submit(&operation)?);
    }
    Ok(())
}

fn flush_stdout() -> lab::Result<()> {
    std::io::Write::flush(&mut std::io::stdout()).map_err(|source| Error::Io {
        action: "writing the address to stdout".to_owned(),
        source,
    })
}

/// The PostgreSQL store `lab serve --backend` names, or `None` for SQLite.
#[cfg(feature = "postgres")]
fn serve_backend(
    backend: &str,
    url: Option<String>,
    schema: String,
) -> lab::Result<Option<lab::http::ServePostgres>> {
    match (backend, url) {
        ("sqlite", None) => Ok(None),
        ("postgres", Some(url)) => Ok(Some(lab::http::ServePostgres { url, schema })),
        ("postgres", None) => Err(bad_arguments("--backend postgres needs --database-url URL")),
        ("sqlite", Some(_)) => Err(bad_arguments("--database-url is for --backend postgres")),
        (other, _) => Err(bad_arguments(&format!(
            "--backend {other:?}: sqlite or postgres"
        ))),
    }
}

/// Without the `postgres` feature, only SQLite can be served.
#[cfg(not(feature = "postgres"))]
fn serve_backend(backend: &str, url: Option<String>, _schema: String) -> lab::Result<()> {
    match (backend, url) {
        ("sqlite", None) => Ok(()),
        _ => Err(bad_arguments(
            "lab serve --backend postgres needs the lab built with --features postgres",
        )),
    }
}

fn serve(options: ServeOptions) -> lab::Result<()> {
    let server = TicketServer::start(options)?;
    // The first line is the URL, so a script (or a test) can read where to connect.
    println!("listening on {}", server.url());
    flush_stdout()?;
    server.wait()
}

fn bad_arguments(problem: &str) -> Error {
    Error::InputInvalid {
        path: PathBuf::from("command line"),
        problem: problem.to_owned(),
    }
}

fn run_scenarios(
    backend: &Backend,
    fixture: Option<&Path>,
    output: Option<&Path>,
) -> lab::Result<()> {
    let operation = match fixture {
        Some(path) => fixture::load(path)?,
        None => fixture::built_in()?,
    };
    // Claim the output first, so an unwritable path is reported before the run.
    let output = output.map(AtomicFile::create).transpose()?;
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

fn run_bench(plan: &bench::BenchPlan, json: Option<&Path>) -> lab::Result<()> {
    if plan.iterations == 0
        || plan.repeats == 0
        || plan.bursts.contains(&0)
        || plan.retained.contains(&0)
    {
        return Err(bad_arguments(
            "--iterations, --repeats, --bursts and --retained must be at least 1",
        ));
    }
    let output = json.map(AtomicFile::create).transpose()?;
    let report = bench::run(plan)?;
    println!("{report}");
    if let Some(output) = output {
        output.commit(report.to_json().as_bytes())?;
    }
    Ok(())
}

fn run_simulate(args: SimulateArgs) -> lab::Result<()> {
    let report = sim::run_command(&args)?;
    print!("{}", report.text);
    report.failure.map_or(Ok(()), Err)
}

fn run_throughput(backend: &Backend, calls: u32, clients: Vec<usize>) -> lab::Result<()> {
    if calls == 0 || clients.is_empty() || clients.contains(&0) {
        return Err(bad_arguments(
            "--calls and every number in --clients must be at least 1",
        ));
    }
    println!(
        "{}",
        backend.compare_throughput(&ThroughputPlan { clients, calls })?
    );
    Ok(())
}
