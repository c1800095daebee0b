//! The MCP client adapter: [`TicketTool`] over an MCP session with `lab mcp` (or any server that
//! keeps the same tools and codes), on rmcp's client, so the seven scenarios run through MCP
//! unchanged.
//!
//! The adapter either starts the server as a child process and talks to it over stdio
//! ([`McpTool::spawn`]), or calls a running server over Streamable HTTP with a bearer token
//! ([`McpTool::over_http`]), through rmcp's client transport on the lab's own hyper
//! ([`super::http_client`]) rather than on reqwest.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use super::http_client::LoopbackHttpClient;
use super::wire::{self, code};
use crate::error::{Error, Result};
use crate::http::wire::fault_header_value;
use crate::key::{OperationKey, Scope};
use crate::tool::{CreateRequest, Fault, Outcome, OwnScope, TicketId, TicketTool};

/// How long a call waits for its answer before its outcome is unknown.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a call that asked for its reply to be lost waits: the server committed, and will
/// never answer.
pub const LOST_REPLY_TIMEOUT: Duration = Duration::from_secs(1);

/// How many times a create is sent again after `in_progress` before the outcome is unknown.
pub const IN_PROGRESS_RETRIES: u32 = 10;

/// The server to start and talk to over stdio.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StdioServer {
    /// The program, usually the `lab` binary.
    pub program: PathBuf,
    /// Its arguments, such as `mcp --stdio-caller support-agent --faults --admin-token T`.
    pub args: Vec<String>,
    /// The admin token the server was started with, for the inspection hooks.
    pub admin_token: Option<String>,
}

impl StdioServer {
    /// `lab mcp` over stdio for `caller`, with faults and the admin tools on, on a temporary
    /// database: what the suite needs from a fresh store.
    pub fn lab(program: PathBuf, caller: &str, admin_token: &str) -> StdioServer {
        StdioServer {
            program,
            args: [
                "mcp",
                "--stdio-caller",
                caller,
                "--faults",
                "--admin-token",
                admin_token,
            ]
            .map(str::to_owned)
            .to_vec(),
            admin_token: Some(admin_token.to_owned()),
        }
    }
}

/// A running `lab mcp` (or a server with the same tools) over Streamable HTTP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpEndpoint {
    /// The endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    /// The caller's bearer token; the server takes the caller from it.
    pub token: String,
    /// The admin token the server was started with, for the inspection hooks.
    pub admin_token: Option<String>,
}

/// An open MCP session: the running client and its handle for calls.
struct Session {
    // Kept so the session (and a child server) lives as long as the last connection.
    _running: RunningService<RoleClient, ()>,
    peer: Peer<RoleClient>,
}

// Fields drop in order: the session before the runtime it runs on.
struct Shared {
    /// The session; over HTTP opened by the first call, so that a server that is down or
    /// refuses the token fails that call rather than the construction.
    session: Mutex<Option<Arc<Session>>>,
    /// Where to open the session when there is none yet (HTTP only).
    endpoint: Option<HttpEndpoint>,
    runtime: tokio::runtime::Runtime,
    admin_token: Option<String>,
    /// The scope this session speaks for: the first a request names.
    scope: OwnScope,
}

/// A [`TicketTool`] that calls `create_ticket` and the admin tools over an MCP session.
///
/// [`TicketTool::connect`] shares the session: MCP lets one session carry concurrent calls, and
/// the server gives each its own store connection.
///
/// The server acts for one caller (the process's over stdio, the token's over HTTP), and its
/// contract has one operation type, so this adapter speaks for one scope: the first a request
/// names. A request in another scope is refused with [`Error::Unsupported`], never sent as
/// another caller's.
#[derive(Clone)]
pub struct McpTool {
    shared: Arc<Shared>,
}

fn mcp_error(action: &str, err: impl std::fmt::Display) -> Error {
    Error::from(Box::<dyn std::error::Error + Send + Sync>::from(format!(
        "MCP {action}: {err}"
    )))
}

fn client_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            action: "starting the MCP client's runtime".to_owned(),
            source,
        })
}

impl McpTool {
    /// Starts the server as a child process and opens a session with it.
    ///
    /// # Errors
    /// [`Error::Io`] when the runtime cannot start; [`Error::Adapter`] when the program cannot
    /// be started or the MCP handshake fails.
    pub fn spawn(server: &StdioServer) -> Result<McpTool> {
        let runtime = client_runtime()?;
        let mut command = tokio::process::Command::new(&server.program);
        command.args(&server.args);
        let running = runtime.block_on(async {
            let (child, _) = TokioChildProcess::builder(command)
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|err| mcp_error(&format!("starting {}", server.program.display()), err))?;
            ().serve(child)
                .await
                .map_err(|err| mcp_error("handshake", err))
        })?;
        let session = Session {
            peer: running.peer().clone(),
            _running: running,
        };
        Ok(McpTool {
            shared: Arc::new(Shared {
                session: Mutex::new(Some(Arc::new(session))),
                endpoint: None,
                runtime,
                admin_token: server.admin_token.clone(),
                scope: OwnScope::default(),
            }),
        })
    }

    /// A tool for the server at `endpoint`, over Streamable HTTP. Nothing is sent yet: the first
    /// call opens the session (the MCP handshake), and a handshake that fails is
    /// [`Error::Http`], since no tool was called.
    ///
    /// # Errors
    /// [`Error::Io`] when the runtime cannot start; [`Error::InputInvalid`] naming the URL when
    /// it is not `http://HOST:PORT/PATH`.
    pub fn over_http(endpoint: &HttpEndpoint) -> Result<McpTool> {
        LoopbackHttpClient::for_url(&endpoint.url).map_err(|problem| Error::InputInvalid {
            subject: "MCP endpoint".to_owned(),
            problem,
        })?;
        Ok(McpTool {
            shared: Arc::new(Shared {
                session: Mutex::new(None),
                endpoint: Some(endpoint.clone()),
                runtime: client_runtime()?,
                admin_token: endpoint.admin_token.clone(),
                scope: OwnScope::default(),
            }),
        })
    }

    /// The open session, opening it over HTTP if there is none yet.
    fn session(&self) -> Result<Arc<Session>> {
        let mut slot = self
            .shared
            .session
            .lock()
            .map_err(|_| mcp_error("session", "a caller panicked while opening the session"))?;
        if let Some(session) = slot.as_ref() {
            return Ok(Arc::clone(session));
        }
        let Some(endpoint) = &self.shared.endpoint else {
            return Err(mcp_error("session", "the stdio session is gone"));
        };
        let handshake_failed = |problem: String| Error::Http {
            method: "POST",
            url: endpoint.url.clone(),
            status: None,
            problem: format!("the MCP handshake failed, so no tool was called: {problem}"),
        };
        let client = LoopbackHttpClient::for_url(&endpoint.url).map_err(&handshake_failed)?;
        let config = StreamableHttpClientTransportConfig::with_uri(endpoint.url.as_str())
            .auth_header(endpoint.token.as_str());
        let running = self.shared.runtime.block_on(async {
            // The transport spawns its worker on the runtime it is made in.
            let transport = StreamableHttpClientTransport::with_client(client, config);
            tokio::time::timeout(CALL_TIMEOUT, ().serve(transport))
                .await
                .map_err(|_| handshake_failed(format!("no answer within {CALL_TIMEOUT:?}")))?
                .map_err(|err| handshake_failed(err.to_string()))
        })?;
        let session = Arc::new(Session {
            peer: running.peer().clone(),
            _running: running,
        });
        *slot = Some(Arc::clone(&session));
        Ok(session)
    }

    /// Calls one tool and waits at most `timeout`.
    ///
    /// # Errors
    /// [`Error::OutcomeUnknown`] when the answer did not come in time or the session broke;
    /// [`Error::Adapter`] for a protocol error.
    pub fn call(
        &self,
        name: &'static str,
        arguments: JsonObject,
        timeout: Duration,
    ) -> Result<CallToolResult> {
        let key = arguments
            .get(wire::OPERATION_KEY)
            .and_then(Value::as_str)
            .map(str::to_owned);
        let request = CallToolRequestParams::new(name).with_arguments(arguments);
        let session = self.session()?;
        let peer = &session.peer;
        self.shared.runtime.block_on(async {
            match tokio::time::timeout(timeout, peer.call_tool(request)).await {
                Err(_) => Err(Error::OutcomeUnknown {
                    key,
                    reason: format!("no answer to {name} within {timeout:?}"),
                }),
                Ok(Err(rmcp::ServiceError::McpError(err))) => Err(mcp_error(name, err.message)),
                Ok(Err(err)) => Err(Error::OutcomeUnknown {
                    key,
                    reason: format!("the MCP session broke during {name}: {err}"),
                }),
                Ok(Ok(result)) => Ok(result),
            }
        })
    }

    /// Refuses a scope other than the one this session speaks for.
    fn speaks_for(&self, scope: &Scope) -> Result<()> {
        self.shared.scope.check(
            scope,
            "the MCP server acts for the one caller it was started for (or whose token it was \
             given), and its contract has one operation type",
        )
    }

    fn admin(&self, name: &'static str, mut arguments: JsonObject) -> Result<Value> {
        let token =
            self.shared.admin_token.clone().ok_or_else(|| {
                mcp_error(name, "the inspection hooks need the server's admin token")
            })?;
        arguments.insert(wire::ADMIN_TOKEN.to_owned(), Value::String(token));
        let result = self.call(name, arguments, CALL_TIMEOUT)?;
        let content = result.structured_content.unwrap_or(Value::Null);
        if result.is_error == Some(true) {
            return Err(mcp_error(name, content));
        }
        Ok(content)
    }

    /// Empties the server's store (the admin tool), so the next ticket is number 1 again.
    ///
    /// # Errors
    /// As [`McpTool::call`]; [`Error::Adapter`] when the server refuses the admin token.
    pub fn reset(&self) -> Result<()> {
        self.admin(wire::ADMIN_RESET, JsonObject::new()).map(drop)
    }

    /// Prunes every replay record on the server now, as retention would after its window (the
    /// admin tool), and says how many: a retry of any of their keys is then `expired`.
    ///
    /// # Errors
    /// As [`McpTool::reset`].
    pub fn expire_records(&self) -> Result<u64> {
        let content = self.admin(wire::ADMIN_EXPIRE_RECORDS, JsonObject::new())?;
        content["expired"]
            .as_u64()
            .ok_or_else(|| mcp_error(wire::ADMIN_EXPIRE_RECORDS, content))
    }

    fn create_once(&self, request: &CreateRequest<'_>) -> Result<Option<Outcome>> {
        let mut arguments = request.payload.as_object().clone();
        let tool = match request.key {
            Some(key) => {
                arguments.insert(wire::OPERATION_KEY.to_owned(), json!(key.as_str()));
                wire::CREATE_TICKET
            }
            // The naive baseline, served only by a server with faults on.
            None => wire::UNKEYED_CREATE_TICKET,
        };
        let key_text = request.key.map(ToString::to_string).unwrap_or_default();
        if let Some(fault) = fault_header_value(request.fault) {
            arguments.insert(wire::FAULT.to_owned(), json!(fault));
        }
        let timeout = if request.fault == Fault::LoseReply {
            LOST_REPLY_TIMEOUT
        } else {
            CALL_TIMEOUT
        };
        let result = self.call(tool, arguments, timeout)?;
        let content = result.structured_content.unwrap_or(Value::Null);
        if result.is_error == Some(true) {
            return match content["code"].as_str() {
                Some(code::CONFLICT) => Err(Error::PayloadConflict { key: key_text }),
                Some(code::EXPIRED) => Err(Error::KeyExpired { key: key_text }),
                Some(code::INJECTED_FAILURE) => Err(Error::InjectedFailure),
                Some(code::IN_PROGRESS) => Ok(None),
                _ => Err(mcp_error(tool, content)),
            };
        }
        let ticket_id: TicketId = serde_json::from_value(content["ticket_id"].clone())
            .map_err(|err| mcp_error(tool, format!("{err}: {content}")))?;
        Ok(Some(if content["replayed"] == json!(true) {
            Outcome::Replayed(ticket_id)
        } else {
            Outcome::Created(ticket_id)
        }))
    }
}

impl TicketTool for McpTool {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        self.speaks_for(request.scope)?;
        for _ in 0..=IN_PROGRESS_RETRIES {
            if let Some(outcome) = self.create_once(&request)? {
                return Ok(outcome);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(Error::OutcomeUnknown {
            key: request.key.map(ToString::to_string),
            reason: "the key stayed in progress on the server".to_owned(),
        })
    }

    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        let content = self.admin(wire::ADMIN_TICKET_IDS, JsonObject::new())?;
        serde_json::from_value(content["ticket_ids"].clone())
            .map_err(|err| mcp_error(wire::ADMIN_TICKET_IDS, err))
    }

    fn count_records(&self) -> Result<u64> {
        let content = self.admin(wire::ADMIN_COUNT_RECORDS, JsonObject::new())?;
        content["records"]
            .as_u64()
            .ok_or_else(|| mcp_error(wire::ADMIN_COUNT_RECORDS, content))
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        self.speaks_for(scope)?;
        // The scope on the server is the session's caller.
        let mut arguments = JsonObject::new();
        arguments.insert(wire::OPERATION_KEY.to_owned(), json!(key.as_str()));
        let content = self.admin(wire::ADMIN_FORGET_RECORD, arguments)?;
        content["forgotten"]
            .as_bool()
            .ok_or_else(|| mcp_error(wire::ADMIN_FORGET_RECORD, content))
    }

    fn connect(&self) -> Result<McpTool> {
        Ok(self.clone())
    }
}
