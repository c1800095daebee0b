//! The MCP client adapter: [`TicketTool`] over an MCP session with `lab mcp` (or any server that
//! keeps the same tools and codes), on rmcp's client, so the seven scenarios run through MCP
//! unchanged.
//!
//! The adapter starts the server as a child process and talks to it over stdio. Over Streamable
//! HTTP the lab is driven by the official Python SDK in the tests instead (rmcp's HTTP client
//! needs reqwest, a second HTTP stack the lab would carry only for this).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use super::contract::{self, code};
use crate::error::{Error, Result};
use crate::http::contract::fault_header_value;
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

// Fields drop in order: the session before the runtime it runs on.
struct Session {
    // Kept so the session (and the child) lives as long as the last connection.
    _running: RunningService<RoleClient, ()>,
    peer: Peer<RoleClient>,
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
    session: Arc<Session>,
}

fn mcp_error(action: &str, err: impl std::fmt::Display) -> Error {
    Error::from(Box::<dyn std::error::Error + Send + Sync>::from(format!(
        "MCP {action}: {err}"
    )))
}

impl McpTool {
    /// Starts the server as a child process and opens a session with it.
    ///
    /// # Errors
    /// [`Error::Io`] when the runtime cannot start; [`Error::Adapter`] when the program cannot
    /// be started or the MCP handshake fails.
    pub fn spawn(server: &StdioServer) -> Result<McpTool> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|source| Error::Io {
                action: "starting the MCP client's runtime".to_owned(),
                source,
            })?;
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
        Ok(McpTool {
            session: Arc::new(Session {
                peer: running.peer().clone(),
                runtime,
                _running: running,
                admin_token: server.admin_token.clone(),
                scope: OwnScope::default(),
            }),
        })
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
            .get(contract::OPERATION_KEY)
            .and_then(Value::as_str)
            .map(str::to_owned);
        let request = CallToolRequestParams::new(name).with_arguments(arguments);
        let peer = &self.session.peer;
        self.session.runtime.block_on(async {
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
        self.session.scope.check(
            scope,
            "the MCP server acts for the one caller it was started for (or whose token it was \
             given), and its contract has one operation type",
        )
    }

    fn admin(&self, name: &'static str, mut arguments: JsonObject) -> Result<Value> {
        let token =
            self.session.admin_token.clone().ok_or_else(|| {
                mcp_error(name, "the inspection hooks need the server's admin token")
            })?;
        arguments.insert(contract::ADMIN_TOKEN.to_owned(), Value::String(token));
        let result = self.call(name, arguments, CALL_TIMEOUT)?;
        let content = result.structured_content.unwrap_or(Value::Null);
        if result.is_error == Some(true) {
            return Err(mcp_error(name, content));
        }
        Ok(content)
    }

    fn create_once(&self, request: &CreateRequest<'_>) -> Result<Option<Outcome>> {
        let mut arguments = request.payload.as_object().clone();
        let tool = match request.key {
            Some(key) => {
                arguments.insert(contract::OPERATION_KEY.to_owned(), json!(key.as_str()));
                contract::CREATE_TICKET
            }
            // The naive baseline, served only by a server with faults on.
            None => contract::UNKEYED_CREATE_TICKET,
        };
        let key_text = request.key.map(ToString::to_string).unwrap_or_default();
        if let Some(fault) = fault_header_value(request.fault) {
            arguments.insert(contract::FAULT.to_owned(), json!(fault));
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
        let content = self.admin(contract::ADMIN_TICKET_IDS, JsonObject::new())?;
        serde_json::from_value(content["ticket_ids"].clone())
            .map_err(|err| mcp_error(contract::ADMIN_TICKET_IDS, err))
    }

    fn count_records(&self) -> Result<u64> {
        let content = self.admin(contract::ADMIN_COUNT_RECORDS, JsonObject::new())?;
        content["records"]
            .as_u64()
            .ok_or_else(|| mcp_error(contract::ADMIN_COUNT_RECORDS, content))
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        self.speaks_for(scope)?;
        // The scope on the server is the session's caller.
        let mut arguments = JsonObject::new();
        arguments.insert(contract::OPERATION_KEY.to_owned(), json!(key.as_str()));
        let content = self.admin(contract::ADMIN_FORGET_RECORD, arguments)?;
        content["forgotten"]
            .as_bool()
            .ok_or_else(|| mcp_error(contract::ADMIN_FORGET_RECORD, content))
    }

    fn connect(&self) -> Result<McpTool> {
        Ok(self.clone())
    }
}
