//! `lab mcp --transport http`: Streamable HTTP at `/mcp` on loopback. The bearer-token layer
//! names the caller before rmcp reads the request; the connections are accepted by the HTTP
//! server's own loop, so they get its limits and its one lost-reply mechanism.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::tools::{Caller, MAX_ARGUMENT_BYTES};
use super::{McpOptions, Shared, TicketTools, Transport, mcp_error, runtime, shared};
use crate::error::{Error, Result};
use crate::http::server::{Limits, accept_until_stopped, bind_loopback};
use crate::service::bearer_token;

/// The largest HTTP request body read: the arguments' limit, with room for the JSON-RPC frame.
/// A larger body gets 413 before rmcp reads it.
const MAX_BODY_BYTES: usize = 2 * MAX_ARGUMENT_BYTES;

/// `lab mcp` over Streamable HTTP, running on its own thread.
pub struct McpServer {
    address: SocketAddr,
    stop: CancellationToken,
    thread: Option<JoinHandle<Result<()>>>,
}

/// Refuses a request without a known bearer token (401, before rmcp reads it) and names its
/// caller for the tools.
async fn authenticate(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| bearer_token(value.as_bytes()))
        .and_then(|token| shared.service.caller(token));
    let Some(scope) = caller else {
        return (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "a known bearer token is required",
        )
            .into_response();
    };
    request.extensions_mut().insert(Caller(scope));
    next.run(request).await
}

/// The router: rmcp's service at `/mcp` behind the body limit and the token layer.
fn router(shared: Arc<Shared>, stopped: &CancellationToken) -> axum::Router {
    // Stateless JSON answers: one POST, one reply, so a lost reply is one closed connection
    // and no stream can resume it behind the test's back.
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_cancellation_token(stopped.child_token());
    let tools = Arc::clone(&shared);
    let service = StreamableHttpService::new(
        move || Ok(TicketTools::new(Arc::clone(&tools))),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(tower_http::limit::RequestBodyLimitLayer::new(
            MAX_BODY_BYTES,
        ))
        .layer(middleware::from_fn_with_state(shared, authenticate))
}

impl McpServer {
    /// Binds `127.0.0.1:port` and starts serving `/mcp` on a thread of its own.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] when the transport is not HTTP or a caller's token breaks the
    /// token rule; as [`super::serve_stdio`] for the store; [`Error::Listen`] when the address
    /// cannot be bound.
    pub fn start(options: &McpOptions) -> Result<McpServer> {
        let Transport::Http { port, .. } = &options.transport else {
            return Err(Error::InputInvalid {
                subject: "command line".to_owned(),
                problem: "McpServer::start is for the HTTP transport".to_owned(),
            });
        };
        let shared = shared(options)?;
        let (listener, bound) = bind_loopback(*port)?;
        let stop = CancellationToken::new();
        let runtime = runtime()?;
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).map_err(|source| Error::Io {
                        action: "handing the listener to tokio".to_owned(),
                        source,
                    })?;
                let router = router(shared, &stopped);
                let (stopping, stop_seen) = tokio::sync::watch::channel(false);
                tokio::spawn(async move {
                    stopped.cancelled().await;
                    let _ = stopping.send(true);
                });
                accept_until_stopped(listener, router, Limits::default(), stop_seen).await;
                Ok(())
            })
        });
        Ok(McpServer {
            address: bound,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The endpoint's URL, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }

    /// Stops accepting, lets calls in progress finish, and waits for the thread.
    ///
    /// # Errors
    /// What the server's thread ended with.
    pub fn stop(mut self) -> Result<()> {
        self.stop.cancel();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(mcp_error("stopping", "the server thread panicked")),
            None => Ok(()),
        }
    }

    /// Serves until SIGINT or SIGTERM.
    ///
    /// # Errors
    /// As [`McpServer::stop`].
    pub fn wait_for_signal(self) -> Result<()> {
        crate::http::StopSignals::install()?.wait()?;
        self.stop()
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
