//! `lab mcp`: the ticket tools served over MCP, on rmcp, over stdio or over Streamable HTTP on
//! loopback, on the same SQLite store and the same ticket service as `lab serve`.
//!
//! Laid out as `crate::http::server` is: this file holds the options and the server's life
//! (start, stop, signals); [`tools`] turns tool calls into the service's calls and its answers
//! into tool results, as the HTTP routes do; [`stdio`] is the line transport, with its limit and
//! its parse error; [`streamable`] is the HTTP transport, with the bearer-token layer and the
//! HTTP server's accept loop (its connection limits and its lost reply). The store runs on the
//! service's store threads, so the async threads only move messages. A key is looked up only
//! within its caller.

mod stdio;
mod streamable;
pub(crate) mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::http::server::Limits;
use crate::key::Scope;
use crate::service::{CallerToken, ServiceOptions, ServiceStore, StoreThreads, TicketService};
use crate::tool::TicketTool as _;

pub use streamable::McpServer;
pub use tools::MAX_ARGUMENT_BYTES;
pub(crate) use tools::TicketTools;

/// The longest line read over stdio: the arguments' limit, with room for the JSON-RPC frame (the
/// body limit over HTTP). A longer line is answered with a parse error and skipped.
pub const MAX_LINE_BYTES: usize = 2 * MAX_ARGUMENT_BYTES;

/// Store threads, each with its own connection: calls run side by side up to this many.
const STORE_THREADS: usize = 4;

/// How the server talks to its client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// JSON-RPC lines on stdin and stdout, for one client that started the process. Every call is
    /// `caller`'s.
    Stdio {
        /// The caller every call of this process acts for.
        caller: String,
    },
    /// Streamable HTTP on `127.0.0.1:port` at `/mcp`, each request authenticated by a bearer
    /// token; the token names the caller.
    Http {
        /// The port; 0 picks a free one.
        port: u16,
        /// The callers and their tokens.
        callers: Vec<CallerToken>,
    },
}

/// What `lab mcp` serves, where, and which test-only tools it adds.
#[derive(Clone, Debug)]
pub struct McpOptions {
    /// Stdio or Streamable HTTP.
    pub transport: Transport,
    /// The SQLite file; `None` for a temporary database deleted when the server stops.
    pub database: Option<PathBuf>,
    /// Honour the test-only `lab_fault` argument of `create_ticket`.
    pub faults: bool,
    /// The token of the test-only admin tools (counts, forget, reset); without it they are
    /// neither listed nor callable.
    pub admin_token: Option<String>,
}

/// The service and its store threads, shared by every call.
pub(crate) struct Shared {
    pub(crate) service: Arc<TicketService>,
    pub(crate) stores: StoreThreads,
    /// Over stdio, the caller of every call; over HTTP, `None` (the token layer names it).
    pub(crate) stdio_caller: Option<Scope>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Queued calls finish; then the threads close their connections (and a temporary
        // database's folder with the last of them).
        self.stores.stop();
        self.service.close_pruner();
    }
}

fn shared(options: &McpOptions) -> Result<Arc<Shared>> {
    let (callers, stdio_caller) = match &options.transport {
        Transport::Stdio { caller } => (
            None,
            Some(Scope::new(caller.as_str(), super::wire::CREATE_TICKET)?),
        ),
        Transport::Http { callers, .. } => (Some(callers.as_slice()), None),
    };
    let service = TicketService::new(&ServiceOptions {
        callers,
        admin_token: options.admin_token.as_deref(),
        faults: options.faults,
        in_progress_wait: Limits::default().in_progress_wait,
        retention: None,
        // The test-only expire tool prunes on demand: records are dated and tombstones honoured.
        dated: true,
        clock: None,
    })?;
    let first = service.open_sqlite(options.database.as_deref())?;
    let connections = (0..STORE_THREADS)
        .map(|_| {
            first
                .connect()
                .map(|store| Box::new(store) as Box<dyn ServiceStore>)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Shared {
        service: Arc::new(service),
        stores: StoreThreads::start(connections)?,
        stdio_caller,
    }))
}

/// The handler `lab mcp` serves, for a wrapper such as the client grader (`super::grader`).
///
/// # Errors
/// As [`serve_stdio`] for the options and the store.
pub(crate) fn ticket_tools(options: &McpOptions) -> Result<TicketTools> {
    Ok(TicketTools::new(shared(options)?))
}

/// The runtime every MCP server runs on: two threads move messages; the store has its own.
///
/// # Errors
/// [`Error::Io`] when the runtime cannot start.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            action: "starting the MCP server's runtime".to_owned(),
            source,
        })
}

fn mcp_error(action: &str, err: impl std::fmt::Display) -> Error {
    Error::from(Box::<dyn std::error::Error + Send + Sync>::from(format!(
        "MCP: {action}: {err}"
    )))
}

/// Serves over stdio until the client closes stdin, or SIGTERM or SIGINT arrives; either way
/// the calls in progress are cancelled, the store is closed, and it returns `Ok` (exit 0). A
/// client that closes stdin before `initialize` has simply gone: that is not an error either.
///
/// # Errors
/// [`Error::InvalidIdentifier`] for a bad caller name; [`Error::Store`] when the database cannot
/// be opened; [`Error::Adapter`] when the MCP session fails to start.
pub fn serve_stdio(options: &McpOptions) -> Result<()> {
    serve_handler_on_stdio(ticket_tools(options)?, CancellationToken::new(), || {})
}

/// Serves `handler` over stdio (line-bounded, `-32700` for a bad line) until the client closes
/// stdin, `stop` is cancelled, or SIGTERM or SIGINT arrives. `lab mcp` and the client grader
/// both serve this way.
pub(crate) fn serve_handler_on_stdio<H>(
    handler: H,
    stop: CancellationToken,
    on_end: impl FnOnce() + Send + 'static,
) -> Result<()>
where
    H: rmcp::ServerHandler,
{
    let runtime = runtime()?;
    let served = runtime.block_on(async move {
        use rmcp::ServiceExt;
        let signals = signal_stop(stop.clone())?;
        let started = handler
            .serve_with_ct(stdio::transport().on_end(on_end), stop.child_token())
            .await;
        let running = match started {
            Ok(running) => running,
            Err(
                rmcp::service::ServerInitializeError::ConnectionClosed(_)
                | rmcp::service::ServerInitializeError::Cancelled,
            ) => return Ok(()),
            Err(err) => return Err(mcp_error("starting the stdio session", err)),
        };
        let quit = running.waiting().await;
        signals.abort();
        quit.map(drop)
            .map_err(|err| mcp_error("serving stdio", err))
    });
    // The session and its store are closed by now. tokio reads stdin on a blocking thread that
    // a signal does not wake: leave it rather than wait for a line that may never come.
    runtime.shutdown_background();
    served
}

/// Cancels `stop` on the first SIGTERM or SIGINT.
///
/// # Errors
/// [`Error::Io`] when the handler cannot be installed.
pub(crate) fn signal_stop(stop: CancellationToken) -> Result<tokio::task::JoinHandle<()>> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| Error::Io {
            action: "listening for SIGTERM".to_owned(),
            source,
        })?;
    Ok(tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        stop.cancel();
    }))
}
