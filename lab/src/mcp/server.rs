//! `lab mcp`: the ticket tools served over MCP, on rmcp, over stdio or over Streamable HTTP on
//! loopback, on the same SQLite store as `lab serve`.
//!
//! The store is synchronous: every call runs on tokio's blocking threads with a connection taken
//! from a small pool, so the async threads only move messages. Over HTTP the caller comes from the
//! bearer token, checked by a middleware layer before rmcp sees the request; over stdio the
//! caller is the one the process was started for. A key is looked up only within its caller.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use super::contract::{self, code};
use crate::error::{Error, Result};
use crate::http::CallerToken;
use crate::http::contract::parse_fault_header;
use crate::http::retention::{self, Clock, Retention, SystemClock};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::sqlite::SqliteStore;
use crate::tool::{CreateRequest, Fault, Outcome, TicketId, TicketTool};

/// The most a tool call's arguments may take as JSON text: the body limit of `lab serve`. More is
/// refused with a JSON-RPC error (invalid params) before any work, over either transport.
pub const MAX_ARGUMENT_BYTES: usize = 1024 * 1024;

/// The largest HTTP request body read: the arguments' limit, with room for the JSON-RPC frame.
/// A larger body gets 413 before rmcp reads it.
const MAX_BODY_BYTES: usize = 2 * MAX_ARGUMENT_BYTES;

/// The longest token compared; longer ones never match.
const MAX_TOKEN_BYTES: usize = 256;

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

/// A token kept padded, compared in time that depends on neither token.
#[derive(Clone)]
struct Secret {
    padded: [u8; MAX_TOKEN_BYTES],
    length: u64,
}

impl Secret {
    fn new(token: &str) -> Secret {
        let mut padded = [0; MAX_TOKEN_BYTES];
        let length = token.len().min(MAX_TOKEN_BYTES);
        padded[..length].copy_from_slice(&token.as_bytes()[..length]);
        Secret {
            padded,
            length: token.len() as u64,
        }
    }

    fn matches(&self, presented: &str) -> bool {
        let other = Secret::new(presented);
        let same_bytes = self.padded.ct_eq(&other.padded);
        let same_length = self.length.ct_eq(&other.length);
        (same_bytes & same_length).into()
    }
}

/// The caller a request acts for, put into the request by the token layer.
#[derive(Clone, Debug)]
struct Caller(String);

/// The switch a handler sets to lose the reply of this HTTP request after its commit.
#[derive(Clone, Debug, Default)]
struct LoseReply(Arc<AtomicBool>);

/// Connections to one database: the first, which keeps a temporary database alive, and idle
/// ones to reuse. rusqlite's connection is `Send` but not `Sync`, so each call takes one for
/// itself.
struct Stores {
    first: Mutex<SqliteStore>,
    idle: Mutex<Vec<SqliteStore>>,
}

impl Stores {
    fn open(database: Option<&PathBuf>) -> Result<Stores> {
        let first = match database {
            Some(path) => SqliteStore::open(path)?,
            None => SqliteStore::temporary()?,
        };
        // Records are dated as `lab serve` dates them, so a pruned key answers `expired`.
        first
            .connection()
            .execute_batch(retention::RETENTION_SCHEMA)?;
        Ok(Stores {
            first: Mutex::new(first),
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Runs `work` on a connection of its own, on the calling (blocking) thread.
    fn with<T>(&self, work: impl FnOnce(&SqliteStore) -> Result<T>) -> Result<T> {
        let reused = self.idle.lock().map_err(poisoned)?.pop();
        let store = match reused {
            Some(store) => store,
            None => self.first.lock().map_err(poisoned)?.connect()?,
        };
        let result = work(&store);
        self.idle.lock().map_err(poisoned)?.push(store);
        result
    }
}

fn poisoned<T>(_: std::sync::PoisonError<T>) -> Error {
    Error::from(Box::<dyn std::error::Error + Send + Sync>::from(
        "a store thread panicked while holding the connection pool",
    ))
}

/// The MCP server handler: the three ticket tools, and the admin tools when enabled.
#[derive(Clone)]
pub(crate) struct TicketTools {
    shared: Arc<Shared>,
}

struct Shared {
    stores: Stores,
    faults: bool,
    admin: Option<Secret>,
    /// Over stdio, the caller of every call; over HTTP, `None` (the token layer names it).
    stdio_caller: Option<String>,
}

/// A tool's answer, before it becomes a `CallToolResult`.
type Answer = std::result::Result<CallToolResult, ErrorData>;

/// A contract failure: a tool result with `isError: true` and a code a client matches on.
fn failure(code: &str, message: &str) -> CallToolResult {
    CallToolResult::structured_error(json!({"code": code, "message": message}))
}

fn bad_arguments(message: String) -> ErrorData {
    ErrorData::invalid_params(message, None)
}

/// The tools this server lists.
fn tools(faults: bool, admin: bool) -> Vec<Tool> {
    // ANCHOR: mcp_annotations
    let create = ToolAnnotations::with_title("Create a ticket (idempotent per operation_key)")
        .read_only(false)
        .destructive(false)
        // Repeating a call with the same arguments, key included, has no further effect.
        .idempotent(true)
        .open_world(false);
    let read = |title: &str| {
        ToolAnnotations::with_title(title)
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false)
    };
    // ANCHOR_END: mcp_annotations
    let mut tools = vec![
        tool(
            contract::CREATE_TICKET,
            contract::CREATE_TICKET_DESCRIPTION,
            contract::create_ticket_input(faults),
            Some(contract::create_ticket_output()),
            create,
        ),
        tool(
            contract::GET_TICKET,
            contract::GET_TICKET_DESCRIPTION,
            contract::get_ticket_input(),
            Some(contract::ticket_output()),
            read("Read one of your tickets"),
        ),
        tool(
            contract::LIST_TICKETS,
            contract::LIST_TICKETS_DESCRIPTION,
            contract::list_tickets_input(),
            Some(contract::list_tickets_output()),
            read("List your tickets"),
        ),
    ];
    if faults {
        let annotations = ToolAnnotations::with_title("Test only: create without a key")
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(false);
        tools.push(tool(
            contract::UNKEYED_CREATE_TICKET,
            "Test only: the naive create. Every call makes a new ticket, retries included.",
            contract::unkeyed_create_ticket_input(),
            Some(contract::create_ticket_output()),
            annotations,
        ));
    }
    if admin {
        for name in contract::ADMIN_TOOLS {
            let annotations = ToolAnnotations::with_title("Test only")
                .read_only(false)
                .destructive(true)
                .open_world(false);
            tools.push(tool(
                name,
                "Test only: the lab's inspection hooks, with the admin token.",
                contract::admin_input(name == contract::ADMIN_FORGET_RECORD),
                None,
                annotations,
            ));
        }
    }
    tools
}

fn tool(
    name: &'static str,
    description: &'static str,
    input: JsonObject,
    output: Option<JsonObject>,
    annotations: ToolAnnotations,
) -> Tool {
    let mut tool = Tool::new(name, description, input);
    tool.output_schema = output.map(Arc::new);
    tool.annotations = Some(annotations);
    tool
}

fn string_argument<'a>(
    arguments: &'a JsonObject,
    name: &str,
    required: bool,
) -> std::result::Result<Option<&'a str>, ErrorData> {
    match arguments.get(name) {
        None if required => Err(bad_arguments(format!("missing required argument {name:?}"))),
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(bad_arguments(format!(
            "argument {name:?} must be a string, found {}",
            crate::payload::json_type(other)
        ))),
    }
}

impl TicketTools {
    /// The caller this request acts for: the process's over stdio, the token's over HTTP.
    fn caller(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> std::result::Result<String, ErrorData> {
        if let Some(caller) = &self.shared.stdio_caller {
            return Ok(caller.clone());
        }
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .map(|caller| caller.0.clone())
            // The token layer refuses a request without a caller before rmcp sees it.
            .ok_or_else(|| ErrorData::invalid_request("no authenticated caller", None))
    }

    /// Runs store work off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&SqliteStore) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let shared = Arc::clone(&self.shared);
        tokio::task::spawn_blocking(move || shared.stores.with(work))
            .await
            .map_err(|join| Error::from(Box::<dyn std::error::Error + Send + Sync>::from(join)))?
    }

    async fn create_ticket(
        &self,
        arguments: JsonObject,
        keyed: bool,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let caller = self.caller(&context)?;
        let key_text = if keyed {
            Some(
                string_argument(&arguments, contract::OPERATION_KEY, true)?
                    .unwrap_or_default()
                    .to_owned(),
            )
        } else {
            None
        };
        string_argument(&arguments, "title", true)?;
        // null is a value of its own here: a payload with `"priority": null` is another payload.
        for optional in ["priority", "body"] {
            if arguments.get(optional) != Some(&Value::Null) {
                string_argument(&arguments, optional, false)?;
            }
        }
        let fault = match string_argument(&arguments, contract::FAULT, false)? {
            None => Fault::None,
            Some(_) if !self.shared.faults => {
                return Err(bad_arguments(format!(
                    "{} is test-only: start the server with --faults",
                    contract::FAULT
                )));
            }
            Some(value) => parse_fault_header(value)
                .ok_or_else(|| bad_arguments(format!("unknown {} {value:?}", contract::FAULT)))?,
        };
        let key = match key_text.map(OperationKey::try_from).transpose() {
            Ok(key) => key,
            Err(err) => return Ok(failure(code::INVALID_KEY, &err.to_string())),
        };
        let mut fields = arguments;
        fields.remove(contract::OPERATION_KEY);
        fields.remove(contract::FAULT);
        let payload =
            Payload::new(Value::Object(fields)).map_err(|err| bad_arguments(err.to_string()))?;
        let scope = Scope::new(caller, contract::CREATE_TICKET)
            .map_err(|err| ErrorData::invalid_request(err.to_string(), None))?;
        // The reply is lost here, at the transport, after the store answered.
        let store_fault = if fault == Fault::LoseReply {
            Fault::None
        } else {
            fault
        };
        let result = self
            .blocking(move |store| {
                // A key whose record was pruned is not created again: its outcome is unknown.
                if let Some(key) = &key
                    && retention::is_expired(store.connection(), &scope, key)?
                {
                    return Err(Error::KeyExpired {
                        key: key.as_str().to_owned(),
                    });
                }
                let outcome = store.create(CreateRequest {
                    scope: &scope,
                    key: key.as_ref(),
                    payload: &payload,
                    fault: store_fault,
                })?;
                if let (Some(key), Outcome::Created(_)) = (&key, &outcome) {
                    // Without a date the next pass dates the record: kept longer, never shorter.
                    let _ =
                        retention::note_record(store.connection(), &scope, key, SystemClock.now());
                }
                Ok(outcome)
            })
            .await;
        let answer = match result {
            Ok(outcome) => {
                let ticket_id = outcome.ticket_id().clone();
                CallToolResult::structured(json!({
                    "ticket_id": ticket_id,
                    "replayed": matches!(outcome, Outcome::Replayed(_)),
                }))
            }
            Err(err @ Error::PayloadConflict { .. }) => failure(code::CONFLICT, &err.to_string()),
            Err(Error::KeyExpired { key }) => failure(
                code::EXPIRED,
                &format!("operation_key {key:?}: {}", contract::EXPIRED_ADVICE),
            ),
            Err(err @ Error::InjectedFailure) => failure(code::INJECTED_FAILURE, &err.to_string()),
            // The store's wait for another writer of this key ran out.
            Err(err @ Error::OutcomeUnknown { .. }) => failure(code::IN_PROGRESS, &err.to_string()),
            Err(err) => failure(code::INTERNAL, &err.to_string()),
        };
        if fault == Fault::LoseReply {
            return self.lose(answer, &context).await;
        }
        Ok(answer)
    }

    /// Loses a reply after its commit. Over HTTP the token layer's switch makes it close the
    /// connection instead of answering; over stdio the answer is never written: the call waits
    /// until the client cancels it or goes away.
    async fn lose(&self, answer: CallToolResult, context: &RequestContext<RoleServer>) -> Answer {
        let switch = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<LoseReply>());
        match switch {
            Some(switch) => {
                switch.0.store(true, Ordering::SeqCst);
                Ok(answer)
            }
            None => {
                context.ct.cancelled().await;
                Err(ErrorData::internal_error(
                    "the reply was lost on purpose",
                    None,
                ))
            }
        }
    }

    async fn get_ticket(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let caller = self.caller(&context)?;
        let id = match arguments.get("ticket_id") {
            Some(Value::Number(n)) => n
                .as_i64()
                .map(TicketId::from)
                .ok_or_else(|| bad_arguments("ticket_id must be an integer".to_owned()))?,
            Some(Value::String(text)) => text.parse().unwrap_or_else(|never| match never {}),
            _ => {
                return Err(bad_arguments(
                    "ticket_id must be an integer or a string".to_owned(),
                ));
            }
        };
        let lookup = id.clone();
        let found = self
            .blocking(move |store| store.ticket_of(&caller, &lookup))
            .await;
        Ok(match found {
            Ok(Some(ticket)) => {
                CallToolResult::structured(ticket_json(&ticket.id, &ticket.payload))
            }
            Ok(None) => failure(code::NOT_FOUND, &format!("you have no ticket {id}")),
            Err(err) => failure(code::INTERNAL, &err.to_string()),
        })
    }

    async fn list_tickets(&self, context: RequestContext<RoleServer>) -> Answer {
        let caller = self.caller(&context)?;
        let found = self.blocking(move |store| store.tickets_of(&caller)).await;
        Ok(match found {
            Ok(tickets) => {
                let tickets: Vec<Value> = tickets
                    .iter()
                    .map(|ticket| ticket_json(&ticket.id, &ticket.payload))
                    .collect();
                CallToolResult::structured(json!({"tickets": tickets}))
            }
            Err(err) => failure(code::INTERNAL, &err.to_string()),
        })
    }

    async fn admin(
        &self,
        name: &str,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let presented =
            string_argument(&arguments, contract::ADMIN_TOKEN, true)?.unwrap_or_default();
        let allowed = self
            .shared
            .admin
            .as_ref()
            .is_some_and(|secret| secret.matches(presented));
        if !allowed {
            return Ok(failure(code::UNAUTHORIZED, "the admin token is wrong"));
        }
        let done = match name {
            contract::ADMIN_TICKET_IDS => self
                .blocking(|store| store.ticket_ids())
                .await
                .map(|ids| json!({"ticket_ids": ids})),
            contract::ADMIN_COUNT_RECORDS => self
                .blocking(|store| store.count_records())
                .await
                .map(|records| json!({"records": records})),
            contract::ADMIN_FORGET_RECORD => {
                let caller = self.caller(&context)?;
                let key_text = string_argument(&arguments, contract::OPERATION_KEY, true)?
                    .unwrap_or_default()
                    .to_owned();
                let key = match OperationKey::try_from(key_text) {
                    Ok(key) => key,
                    Err(err) => return Ok(failure(code::INVALID_KEY, &err.to_string())),
                };
                let scope = Scope::new(caller, contract::CREATE_TICKET)
                    .map_err(|err| ErrorData::invalid_request(err.to_string(), None))?;
                self.blocking(move |store| store.forget_record(&scope, &key))
                    .await
                    .map(|forgotten| json!({"forgotten": forgotten}))
            }
            contract::ADMIN_EXPIRE_RECORDS => {
                let window = Retention {
                    records: std::time::Duration::ZERO,
                    tombstones: std::time::Duration::from_secs(24 * 60 * 60),
                };
                self.blocking(move |store| {
                    retention::prune(
                        store.connection(),
                        SystemClock.now(),
                        window,
                        &std::collections::HashSet::new(),
                    )
                })
                .await
                .map(|pruned| json!({"expired": pruned.records}))
            }
            _ => self
                .blocking(|store| {
                    store.clear()?;
                    store
                        .connection()
                        .execute_batch("DELETE FROM record_times; DELETE FROM expired_keys;")?;
                    Ok(())
                })
                .await
                .map(|()| json!({"reset": true})),
        };
        Ok(match done {
            Ok(value) => CallToolResult::structured(value),
            Err(err) => failure(code::INTERNAL, &err.to_string()),
        })
    }
}

fn ticket_json(id: &TicketId, payload: &str) -> Value {
    let payload: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
    json!({"ticket_id": id, "payload": payload})
}

impl ServerHandler for TicketTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("lab", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Support tickets. create_ticket takes an operation_key: reuse it for every \
                 retry of one intention, and never replace it with a new key when an outcome \
                 is unknown.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools(
            self.shared.faults,
            self.shared.admin.is_some(),
        )))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools(self.shared.faults, self.shared.admin.is_some())
            .into_iter()
            .find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let size = serde_json::to_vec(&arguments).map_or(usize::MAX, |text| text.len());
        if size > MAX_ARGUMENT_BYTES {
            return Err(bad_arguments(format!(
                "the arguments are {size} bytes of JSON; at most {MAX_ARGUMENT_BYTES} are read"
            )));
        }
        let admin_enabled = self.shared.admin.is_some();
        let answer = match request.name.as_ref() {
            contract::CREATE_TICKET => self.create_ticket(arguments, true, context).await,
            contract::UNKEYED_CREATE_TICKET if self.shared.faults => {
                self.create_ticket(arguments, false, context).await
            }
            contract::GET_TICKET => self.get_ticket(arguments, context).await,
            contract::LIST_TICKETS => self.list_tickets(context).await,
            name if admin_enabled && contract::ADMIN_TOOLS.contains(&name) => {
                self.admin(name, arguments, context).await
            }
            name => Err(ErrorData::invalid_params(
                format!("unknown tool {name:?}"),
                None,
            )),
        };
        answer.map(CallToolResponse::from)
    }
}

fn shared(options: &McpOptions) -> Result<Arc<Shared>> {
    let stdio_caller = match &options.transport {
        Transport::Stdio { caller } => {
            Scope::new(caller.as_str(), contract::CREATE_TICKET)?;
            Some(caller.clone())
        }
        Transport::Http { .. } => None,
    };
    Ok(Arc::new(Shared {
        stores: Stores::open(options.database.as_ref())?,
        faults: options.faults,
        admin: options.admin_token.as_deref().map(Secret::new),
        stdio_caller,
    }))
}

/// The handler `lab mcp` serves, for a wrapper such as the client grader (`super::grader`).
pub(crate) fn ticket_tools(options: &McpOptions) -> Result<TicketTools> {
    Ok(TicketTools {
        shared: shared(options)?,
    })
}

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
    let handler = TicketTools {
        shared: shared(options)?,
    };
    let runtime = runtime()?;
    let served = runtime.block_on(async move {
        let stop = CancellationToken::new();
        let signals = signal_stop(stop.clone())?;
        let started = handler
            .serve_with_ct(rmcp::transport::stdio(), stop.child_token())
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

/// The token layer's state: the callers' secrets.
#[derive(Clone)]
struct Callers(Arc<Vec<(Secret, String)>>);

/// Refuses a request without a known bearer token (401, before rmcp reads it), names its
/// caller, and closes the connection instead of answering when the handler lost the reply.
async fn authenticate(
    State(callers): State<Callers>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_owned();
    let mut found = None;
    // Every token is compared, so the timing names none of them.
    for (secret, caller) in callers.0.iter() {
        if secret.matches(&presented) {
            found = Some(caller.clone());
        }
    }
    let Some(caller) = found else {
        return (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "a known bearer token is required",
        )
            .into_response();
    };
    let switch = LoseReply::default();
    request.extensions_mut().insert(Caller(caller));
    request.extensions_mut().insert(switch.clone());
    let response = next.run(request).await;
    if switch.0.load(Ordering::SeqCst) {
        // A body that fails before its first byte: hyper closes the connection without a reply.
        let (mut parts, _) = response.into_parts();
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::new(LostBody));
    }
    response
}

/// A body that fails at its first frame, so hyper drops the connection instead of finishing
/// the reply.
struct LostBody;

impl axum::body::HttpBody for LostBody {
    type Data = axum::body::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<std::result::Result<hyper::body::Frame<Self::Data>, Self::Error>>>
    {
        std::task::Poll::Ready(Some(Err(std::io::Error::other(
            "the reply was lost on purpose",
        ))))
    }
}

/// `lab mcp` over Streamable HTTP, running on its own thread.
pub struct McpServer {
    address: SocketAddr,
    stop: CancellationToken,
    thread: Option<JoinHandle<Result<()>>>,
}

impl McpServer {
    /// Binds `127.0.0.1:port` and starts serving `/mcp` on a thread of its own.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] when the transport is not HTTP; as [`serve_stdio`] for the store;
    /// [`Error::Listen`] when the address cannot be bound.
    pub fn start(options: &McpOptions) -> Result<McpServer> {
        let Transport::Http { port, callers } = &options.transport else {
            return Err(Error::InputInvalid {
                path: PathBuf::from("command line"),
                problem: "McpServer::start is for the HTTP transport".to_owned(),
            });
        };
        let shared = shared(options)?;
        let callers = Callers(Arc::new(
            callers
                .iter()
                .map(|caller| (Secret::new(&caller.token), caller.caller.clone()))
                .collect(),
        ));
        let address = format!("127.0.0.1:{port}");
        let listener = std::net::TcpListener::bind(&address).map_err(|source| Error::Listen {
            address: address.clone(),
            source: Box::new(source),
        })?;
        listener.set_nonblocking(true).map_err(|source| Error::Io {
            action: "configuring the listener".to_owned(),
            source,
        })?;
        let bound = listener.local_addr().map_err(|source| Error::Io {
            action: "reading the listener's address".to_owned(),
            source,
        })?;
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
                // Stateless JSON answers: one POST, one reply, so a lost reply is one closed
                // connection and no stream can resume it behind the test's back.
                let config = StreamableHttpServerConfig::default()
                    .with_legacy_session_mode(false)
                    .with_json_response(true)
                    .with_cancellation_token(stopped.child_token());
                let service = StreamableHttpService::new(
                    move || {
                        Ok(TicketTools {
                            shared: Arc::clone(&shared),
                        })
                    },
                    Arc::new(NeverSessionManager::default()),
                    config,
                );
                let router = axum::Router::new()
                    .nest_service("/mcp", service)
                    .layer(tower_http::limit::RequestBodyLimitLayer::new(
                        MAX_BODY_BYTES,
                    ))
                    .layer(middleware::from_fn_with_state(callers, authenticate));
                axum::serve(listener, router)
                    .with_graceful_shutdown(async move { stopped.cancelled().await })
                    .await
                    .map_err(|source| Error::Io {
                        action: "serving MCP over HTTP".to_owned(),
                        source,
                    })
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
