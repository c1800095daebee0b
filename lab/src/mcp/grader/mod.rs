//! The client grader (`lab mcp --grade-client`): `lab mcp`'s ticket tools, served to a team's
//! own agent loop, with some replies lost or held back on a schedule. Every `create_ticket` call
//! is recorded (arguments, key, session, JSON-RPC id, time, what the tools answered and whether
//! the client saw it); at the end a report groups the calls into intentions and says, for each,
//! whether every retry reused the key and the arguments, how many tickets exist, and a verdict.
//!
//! The grader wraps the rmcp handler of `lab mcp` ([`handler::Graded`]) rather than changing its
//! tools, so what it grades against is exactly what `lab mcp` serves. It serves over stdio, one
//! session per process (the journal lives in the database, so a client that restarts the
//! server on the same `--database` continues one history), or over Streamable HTTP on loopback
//! ([`ClientGrader::serve_http`]), where a client that reconnects opens a new MCP session on
//! the same server. In-process sessions
//! ([`ClientGrader::connect`]) are how the lab's own scripted loops ([`loops`]) are graded.

pub mod handler;
pub mod journal;
pub mod loops;
pub mod report;
pub mod schedule;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::response::IntoResponse;
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};

use self::handler::{Connection, Graded, Grader};
use self::journal::Journal;
pub use self::report::{Report, Verdict};
pub use self::schedule::{Calls, Delay, Schedule};
use super::server::{self, McpOptions, Transport};
use super::wire::KeySource;
use crate::error::{Error, Result};
use crate::sqlite::SqliteStore;

/// What a grader serves and how it treats replies.
#[derive(Clone, Debug)]
pub struct GradeOptions {
    /// The caller every call acts for (as `lab mcp --stdio-caller`).
    pub caller: String,
    /// The database; `None` for a temporary one (then a restarted server starts a new history).
    pub database: Option<PathBuf>,
    /// The replies to lose and to hold back.
    pub schedule: Schedule,
    /// The key design whose description and tools are served.
    pub key_source: KeySource,
    /// Stop after this many `create_ticket` calls have settled.
    pub calls: Option<u64>,
}

/// A grader: the journal, the store, and a way to open sessions.
pub struct ClientGrader {
    grader: Arc<Grader>,
    options: McpOptions,
    database: PathBuf,
    caller: String,
    sessions: AtomicU64,
    // Kept so a temporary database lives as long as the grader.
    _folder: Option<tempfile::TempDir>,
}

fn mcp_error(action: &str, err: impl std::fmt::Display) -> Error {
    Error::from(Box::<dyn std::error::Error + Send + Sync>::from(format!(
        "MCP grader: {action}: {err}"
    )))
}

impl ClientGrader {
    /// Opens the store and the journal.
    ///
    /// # Errors
    /// [`Error::InvalidIdentifier`] for a bad caller; [`Error::Store`] when the database cannot
    /// be opened; [`Error::Io`] when a temporary folder cannot be made.
    pub fn open(options: GradeOptions) -> Result<ClientGrader> {
        let (folder, database) = match &options.database {
            Some(path) => (None, path.clone()),
            None => {
                let folder = tempfile::tempdir().map_err(|source| Error::Io {
                    action: "making the grader's temporary folder".to_owned(),
                    source,
                })?;
                let path = folder.path().join("graded.sqlite");
                (Some(folder), path)
            }
        };
        let served = McpOptions {
            transport: Transport::Stdio {
                caller: options.caller.clone(),
            },
            database: Some(database.clone()),
            faults: false,
            admin_token: None,
        };
        // Opening the tools first creates the store's tables in a new file.
        drop(server::ticket_tools(&served)?);
        let journal = Journal::open(&database)?;
        let grader = Grader::new(journal, options.schedule, options.key_source, options.calls);
        Ok(ClientGrader {
            grader: Arc::new(grader),
            options: served,
            database,
            caller: options.caller,
            sessions: AtomicU64::new(0),
            _folder: folder,
        })
    }

    /// The database the tickets and the journal are in.
    pub fn database(&self) -> &Path {
        &self.database
    }

    fn handler(&self, session: String, connection: Connection) -> Result<Graded> {
        Ok(Graded {
            inner: server::ticket_tools(&self.options)?,
            grader: Arc::clone(&self.grader),
            session: session.into(),
            connection,
        })
    }

    /// Opens a new in-process session (a new MCP connection on a pipe in memory) and returns
    /// its client; the server side runs on the current tokio runtime until the client closes.
    ///
    /// # Errors
    /// As [`ClientGrader::open`]; [`Error::Adapter`] when the handshake fails.
    pub async fn connect(&self) -> Result<RunningService<RoleClient, ()>> {
        let number = self.sessions.fetch_add(1, Ordering::SeqCst) + 1;
        // Cancelled by `--drop-connection`: the server side closes the pipe.
        let connection = tokio_util::sync::CancellationToken::new();
        let handler = self.handler(
            format!("session {number}"),
            Connection::Token(connection.clone()),
        )?;
        let (server_side, client_side) = tokio::io::duplex(64 * 1024);
        let (server_read, server_write) = tokio::io::split(server_side);
        tokio::spawn(async move {
            if let Ok(running) = handler
                .serve_with_ct((server_read, server_write), connection)
                .await
            {
                let _ = running.waiting().await;
            }
        });
        let (client_read, client_write) = tokio::io::split(client_side);
        ().serve((client_read, client_write))
            .await
            .map_err(|err| mcp_error("opening a session", err))
    }

    /// The report over every call recorded so far (by any process on this database).
    ///
    /// # Errors
    /// [`Error::Store`] when the journal or the tickets cannot be read.
    pub fn report(&self) -> Result<Report> {
        let calls = self.grader.journal.calls()?;
        let tickets = SqliteStore::open(&self.database)?.tickets_of(&self.caller)?;
        Ok(report::grade(
            &calls,
            &tickets,
            self.grader.key_source.name(),
            &self.grader.schedule.to_string(),
        ))
    }

    /// Serves over Streamable HTTP at `http://127.0.0.1:PORT/mcp` (port 0 picks a free one)
    /// until SIGTERM or SIGINT arrives or the `calls` bound is reached; then returns the report.
    /// `on_url` is given the endpoint once it listens. Every call acts for the grader's caller:
    /// loopback only, no tokens. A session is what the client's `Mcp-Session-Id` names; a
    /// client on a protocol version without sessions is one session.
    ///
    /// # Errors
    /// As [`ClientGrader::open`]; [`Error::Listen`] when the port cannot be bound.
    pub fn serve_http(&self, port: u16, on_url: impl FnOnce(String)) -> Result<Report> {
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService,
        };
        let address = format!("127.0.0.1:{port}");
        let listener = std::net::TcpListener::bind(&address).map_err(|source| Error::Listen {
            address: address.clone(),
            source: Box::new(source),
        })?;
        let io = |action: &str| {
            let action = action.to_owned();
            move |source| Error::Io { action, source }
        };
        listener
            .set_nonblocking(true)
            .map_err(io("configuring the listener"))?;
        let bound = listener
            .local_addr()
            .map_err(io("reading the listener's address"))?;
        let tools = server::ticket_tools(&self.options)?;
        let grader = Arc::clone(&self.grader);
        let left = Arc::clone(&self.grader);
        let stop = self.grader.stop.clone();
        let runtime = server::runtime()?;
        let served = runtime.block_on(async move {
            let signals = server::signal_stop(stop.clone())?;
            let listener = tokio::net::TcpListener::from_std(listener)
                .map_err(io("handing the listener to tokio"))?;
            let config = StreamableHttpServerConfig::default()
                .with_legacy_session_mode(true)
                .with_json_response(true)
                .with_cancellation_token(stop.child_token());
            let sessions = Arc::new(LocalSessionManager::default());
            let _ = grader.http_sessions.set(Arc::clone(&sessions));
            let service = StreamableHttpService::new(
                move || {
                    Ok(Graded {
                        inner: tools.clone(),
                        grader: Arc::clone(&grader),
                        session: "http".into(),
                        connection: Connection::Http,
                    })
                },
                sessions,
                config,
            );
            let router =
                axum::Router::new()
                    .nest_service("/mcp", service)
                    .layer(axum::middleware::from_fn(move |request, next| {
                        session_end(Arc::clone(&left), request, next)
                    }));
            on_url(format!("http://{bound}/mcp"));
            let stopped = stop.clone();
            let serving = axum::serve(listener, router)
                .with_graceful_shutdown(async move { stopped.cancelled().await });
            // A lost reply's call waits for its client; once stopped, two seconds for the rest.
            let result = tokio::select! {
                served = serving => served.map_err(io("serving the grader over HTTP")),
                () = async {
                    stop.cancelled().await;
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                } => Ok(()),
            };
            signals.abort();
            result
        });
        runtime.shutdown_background();
        served?;
        self.report()
    }

    /// Serves over stdio until the client closes stdin, SIGTERM or SIGINT arrives, or the
    /// `calls` bound is reached; then returns the report.
    ///
    /// # Errors
    /// As [`ClientGrader::open`]; [`Error::Adapter`] when the session fails.
    pub fn serve_stdio(&self) -> Result<Report> {
        let session = format!("process {}", std::process::id());
        // `--drop-connection` ends the process: the client must start it again to go on.
        let handler = self.handler(session.clone(), Connection::Token(self.grader.stop.clone()))?;
        let grader = Arc::clone(&self.grader);
        server::serve_handler_on_stdio(handler, self.grader.stop.clone(), move || {
            grader.left(&session);
        })?;
        self.report()
    }
}

/// The largest request body the grader reads to find a `tools/call`'s JSON-RPC id.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// What the client shows over HTTP without an MCP message: a session's DELETE is its client
/// leaving, recorded before the session ends, so a reply held for it is not counted as
/// received (its success is answered `200`, which clients expect: the Python SDK logs `202`
/// as a failed termination); and a `tools/call` whose response stream the client closes
/// before the stream's end is a call the client stopped waiting for.
async fn session_end(
    grader: Arc<Grader>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let session_id = request
        .headers()
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
        .map(|id| format!("http session {id}"));
    let method = request.method().clone();
    if method == axum::http::Method::DELETE
        && let Some(session) = &session_id
    {
        grader.left(session);
        let mut response = next.run(request).await;
        if response.status() == axum::http::StatusCode::ACCEPTED {
            *response.status_mut() = axum::http::StatusCode::OK;
        }
        return response;
    }
    let (Some(session), true) = (session_id, method == axum::http::Method::POST) else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return axum::http::StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let call_id = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .filter(|message| message["method"] == "tools/call")
        .and_then(|message| message.get("id").map(serde_json::Value::to_string));
    let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    let response = next.run(request).await;
    match call_id {
        Some(id) => response.map(|body| {
            axum::body::Body::new(Watched {
                body,
                closed: Some(Box::new(move || grader.stream_closed(&session, &id))),
            })
        }),
        None => response,
    }
}

/// A response body that calls `closed` when it is dropped before its end: the client closed
/// the connection or the stream.
struct Watched {
    body: axum::body::Body,
    closed: Option<Box<dyn FnOnce() + Send>>,
}

impl hyper::body::Body for Watched {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<std::result::Result<hyper::body::Frame<Self::Data>, Self::Error>>>
    {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if let std::task::Poll::Ready(None) = polled {
            // The whole stream went out: nothing was cut off.
            self.closed = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        // A body that knows it is done (a JSON reply) may be dropped without a last poll.
        if let Some(closed) = self.closed.take()
            && !hyper::body::Body::is_end_stream(&self.body)
        {
            closed();
        }
    }
}
