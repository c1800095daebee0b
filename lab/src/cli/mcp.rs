//! `lab mcp`: the ticket tools over the Model Context Protocol, over stdio (the default) or over
//! Streamable HTTP on 127.0.0.1.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use lab::http::{CallerToken, StopSignals};
use lab::mcp::server::serve_stdio;
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
    /// stdio, or http (then --caller NAME=TOKEN is needed)
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
