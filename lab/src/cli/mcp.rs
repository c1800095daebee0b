//! `lab mcp`: the ticket tools over the Model Context Protocol, over stdio (the default) or over
//! Streamable HTTP on 127.0.0.1.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use lab::http::{CallerToken, StopSignals};
use lab::mcp::grader::{Calls, ClientGrader, Delay, GradeOptions, Schedule};
use lab::mcp::server::serve_stdio;
use lab::mcp::wire::KeySource;
use lab::mcp::{McpOptions, McpServer, Transport};

use super::value;
use super::{bad_arguments, file_option, flush_stdout};

/// The transports `lab mcp` speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TransportName {
    /// JSON-RPC on stdin and stdout, for the client that started the process
    Stdio,
    /// Streamable HTTP at http://127.0.0.1:PORT/mcp, with bearer tokens
    Http,
}

/// `lab mcp`'s arguments.
#[derive(Args)]
pub struct McpArgs {
    /// stdio, or http (then --caller NAME=TOKEN is needed, except with --grade-client, whose
    /// every call acts for one caller and takes no token)
    #[arg(long, value_enum, default_value_t = TransportName::Stdio)]
    pub transport: TransportName,
    /// For --transport http: the port; 0 picks a free one. The URL is printed on start.
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// For --transport http: a caller and its bearer token, NAME=TOKEN; repeat for more callers
    #[arg(long = "caller", value_name = "NAME=TOKEN")]
    pub callers: Vec<CallerToken>,
    /// For --transport stdio: the caller every call of this process acts for
    #[arg(long, value_name = "NAME", default_value = "support-agent", value_parser = value::caller)]
    pub stdio_caller: String,
    /// The SQLite file [default: a temporary database, deleted when the server stops]
    #[arg(long, value_name = "FILE")]
    pub database: Option<PathBuf>,
    /// Honour create_ticket's test-only lab_fault argument (lose-reply, before-commit)
    #[arg(long)]
    pub faults: bool,
    /// List and accept the test-only admin tools (counts, forget, reset) with this token
    #[arg(long, value_name = "TOKEN", value_parser = value::token)]
    pub admin_token: Option<String>,
    /// Grade the client: serve the ticket tools over stdio (or --transport http, printing the
    /// URL), lose or delay replies on a schedule,
    /// record every create_ticket call, and at the end (stdin closed, SIGTERM, or --calls) write
    /// a report per intention to stderr or --report
    #[arg(long)]
    pub grade_client: bool,
    /// For --grade-client: the replies to lose: none, or call numbers (1 is the first
    /// create_ticket call), ranges N-M and first (the first call of every intention),
    /// comma-separated [default: first, or none when another schedule names first]
    #[arg(long, value_name = "SCHEDULE", requires = "grade_client", value_parser = Calls::parse)]
    pub lose_replies: Option<Calls>,
    /// For --grade-client: the replies to send late, CALLS@DURATION (first@1500ms, 2,4@2s; at
    /// most 60s): each is sent after DURATION, or when the client's next request of the session
    /// arrives if that is sooner, and never once the client cancelled it or left
    #[arg(long, value_name = "CALLS@DURATION", requires = "grade_client", value_parser = Delay::parse)]
    pub delay_replies: Option<Delay>,
    /// For --grade-client: the calls to answer in_progress (as while another call with the
    /// key runs) after their ticket is made: CALLS as for --lose-replies
    #[arg(long, value_name = "CALLS", requires = "grade_client", value_parser = Calls::parse)]
    pub in_progress: Option<Calls>,
    /// For --grade-client: the calls after which the connection ends instead of a reply, their
    /// ticket made: over stdio the process exits (start it again on the same --database to go
    /// on), over http the session is closed; CALLS as for --lose-replies
    #[arg(long, value_name = "CALLS", requires = "grade_client", value_parser = Calls::parse)]
    pub drop_connection: Option<Calls>,
    /// For --grade-client: stop after this many create_ticket calls have been answered or lost
    #[arg(long, value_name = "N", requires = "grade_client", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub calls: Option<u64>,
    /// For --grade-client: where the key comes from: host (the lab's design), task-id, or prepare
    #[arg(long, value_name = "DESIGN", default_value = "host", requires = "grade_client", value_parser = key_source)]
    pub key_source: KeySource,
    /// For --grade-client: write the report as JSON
    #[arg(long, requires = "grade_client")]
    pub json: bool,
    /// For --grade-client: write the report to FILE (replaced whole) instead of stderr
    #[arg(long, value_name = "FILE", requires = "grade_client")]
    pub report: Option<PathBuf>,
}

fn key_source(text: &str) -> Result<KeySource, String> {
    text.parse()
}

/// Serves until stdin closes (stdio) or the process is stopped (HTTP).
///
/// # Errors
/// Bad input when the options do not fit the transport or the database is not a SQLite file;
/// any error opening the store or binding the port.
pub fn exec(args: McpArgs) -> lab::Result<()> {
    if let Some(path) = &args.database {
        lab::database_file::check(path).map_err(|err| file_option("--database", path, err))?;
    }
    if args.grade_client {
        return grade(args);
    }
    let transport = match args.transport {
        TransportName::Stdio if !args.callers.is_empty() || args.port != 0 => {
            return Err(bad_arguments(
                "--caller and --port are for --transport http; over stdio, --stdio-caller names the caller",
            ));
        }
        TransportName::Stdio => Transport::Stdio {
            caller: args.stdio_caller,
        },
        TransportName::Http if args.callers.is_empty() => {
            return Err(bad_arguments("--transport http needs --caller NAME=TOKEN"));
        }
        TransportName::Http => Transport::Http {
            port: args.port,
            callers: args.callers,
        },
    };
    let options = McpOptions {
        transport,
        database: args.database,
        faults: args.faults,
        admin_token: args.admin_token,
    };
    match options.transport {
        Transport::Stdio { .. } => serve_stdio(&options),
        Transport::Http { .. } => {
            let server = McpServer::start(&options)?;
            // Caught before the URL is printed, as `lab serve` does.
            let signals = StopSignals::install()?;
            println!("{}", server.url());
            flush_stdout()?;
            signals.wait()?;
            server.stop()
        }
    }
}

/// `lab mcp --grade-client`: serves until the client is done, then writes the report.
fn grade(args: McpArgs) -> lab::Result<()> {
    if !args.callers.is_empty() || (args.transport == TransportName::Stdio && args.port != 0) {
        return Err(bad_arguments(
            "--grade-client takes no --caller: every call acts for --stdio-caller (over http too, \
             on loopback without tokens); --port is for --transport http",
        ));
    }
    if args.faults || args.admin_token.is_some() {
        return Err(bad_arguments(
            "--grade-client loses replies itself and lists only the ticket tools: drop --faults and --admin-token",
        ));
    }
    let (in_progress, drop) = (
        args.in_progress.unwrap_or_default(),
        args.drop_connection.unwrap_or_default(),
    );
    // Losing the first reply of every intention is the default, unless another schedule
    // takes the first calls.
    let first_taken = [&in_progress, &drop]
        .iter()
        .any(|calls| calls.names_first())
        || args
            .delay_replies
            .as_ref()
            .is_some_and(|delay| delay.calls.names_first());
    let lose = args.lose_replies.unwrap_or_else(|| {
        if first_taken {
            Calls::default()
        } else {
            Calls::first()
        }
    });
    let schedule = Schedule::with(lose, args.delay_replies, in_progress, drop)
        .map_err(|problem| bad_arguments(&problem))?;
    let report_file = match &args.report {
        Some(path) => Some(lab::evidence::AtomicFile::create(path)?),
        None => None,
    };
    let grader = ClientGrader::open(GradeOptions {
        caller: args.stdio_caller,
        database: args.database,
        schedule,
        key_source: args.key_source,
        calls: args.calls,
    })?;
    let report = match args.transport {
        TransportName::Stdio => grader.serve_stdio()?,
        TransportName::Http => grader.serve_http(args.port, |url| {
            println!("{url}");
            let _ = flush_stdout();
        })?,
    };
    let text = if args.json {
        serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
    } else {
        report.to_string()
    };
    match report_file {
        Some(file) => file.commit(text.as_bytes()),
        None => {
            eprint!("{text}");
            Ok(())
        }
    }
}
