//! The grader's handler: `lab mcp`'s own ticket tools, wrapped. Every `create_ticket` call is
//! recorded before it runs and settled after; its reply is then sent, lost or held back as the
//! schedule says. The tools themselves are not changed: the wrapper only decides what the client
//! gets to see.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::journal::{self, Arrival, Journal, Settled};
use super::schedule::{Fate, Schedule};
use crate::mcp::server::TicketTools;
use crate::mcp::wire::{self, KeySource};
use crate::payload::Payload;

/// What every session of one grader shares: the journal, the schedule, the design served, and
/// the bound on calls.
pub struct Grader {
    pub(crate) journal: Journal,
    pub(crate) schedule: Schedule,
    pub(crate) key_source: KeySource,
    /// Cancelled when `--calls N` calls have settled.
    pub(crate) stop: CancellationToken,
    pub(crate) calls_bound: Option<u64>,
    settled: AtomicU64,
    prepared: AtomicU64,
    /// Per session, cancelled when the client shows it has left (stdin closed, its DELETE).
    leaving: Mutex<HashMap<String, CancellationToken>>,
    /// Per session and JSON-RPC id, cancelled when the client closes the HTTP response stream
    /// of that request before its reply.
    streams: Mutex<HashMap<(String, String), CancellationToken>>,
    /// Per session, how many requests (`tools/list`, `tools/call`) it has sent so far.
    requests: Mutex<HashMap<String, u64>>,
    /// Per session, the watch on its next request (`tools/list`, `tools/call`): what ends a
    /// held reply's hold early, since a client that sends again has stopped waiting.
    next_request: Mutex<HashMap<String, NextRequest>>,
    /// Over HTTP, the sessions, so that `--drop-connection` can close one.
    pub(crate) http_sessions: std::sync::OnceLock<Arc<HttpSessions>>,
}

/// The HTTP sessions of a grader served over Streamable HTTP.
pub(crate) type HttpSessions =
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

impl Grader {
    pub(crate) fn new(
        journal: Journal,
        schedule: Schedule,
        key_source: KeySource,
        calls_bound: Option<u64>,
    ) -> Grader {
        Grader {
            journal,
            schedule,
            key_source,
            stop: CancellationToken::new(),
            calls_bound,
            settled: AtomicU64::new(0),
            prepared: AtomicU64::new(0),
            leaving: Mutex::new(HashMap::new()),
            streams: Mutex::new(HashMap::new()),
            requests: Mutex::new(HashMap::new()),
            next_request: Mutex::new(HashMap::new()),
            http_sessions: std::sync::OnceLock::new(),
        }
    }

    /// Counts one more request of `session`; returns its number in the session, from 1.
    fn request(&self, session: &str) -> u64 {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        let count = requests.entry(session.to_owned()).or_default();
        *count += 1;
        *count
    }

    /// A request of `session` is on record: fires the watch of the request before it, and
    /// returns this one's, fired in turn by the session's next request. One lock for both, so
    /// that no request can slip between a call's record and its watch.
    fn announce(&self, session: &str) -> NextRequest {
        let watch = NextRequest::default();
        let earlier = self
            .next_request
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session.to_owned(), watch.clone());
        if let Some(earlier) = earlier {
            let _ = earlier.at_ms.set(journal::now_ms());
            earlier.came.cancel();
        }
        watch
    }

    /// The token cancelled when the client closes the response stream of request `id` of
    /// `session` before its reply.
    fn stream(&self, session: &str, id: &str) -> CancellationToken {
        self.streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((session.to_owned(), id.to_owned()))
            .or_default()
            .clone()
    }

    fn stream_done(&self, session: &str, id: &str) {
        self.streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(session.to_owned(), id.to_owned()));
    }

    /// The client closed the HTTP response stream of request `id` of `session` before the
    /// stream's end: a reply held for it is not sent.
    pub(crate) fn stream_closed(&self, session: &str, id: &str) {
        let token = self
            .streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(session.to_owned(), id.to_owned()));
        if let Some(token) = token {
            token.cancel();
        }
    }

    /// The token cancelled when the client leaves `session`.
    fn leaving(&self, session: &str) -> CancellationToken {
        self.leaving
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(session.to_owned())
            .or_default()
            .clone()
    }

    /// The client showed it left `session` (its stdin closed, its DELETE came): recorded in
    /// the journal, and a reply held for it is not sent.
    pub(crate) fn left(&self, session: &str) {
        let _ = self.journal.left(session);
        self.leaving(session).cancel();
    }

    /// A held call's wait ended by cancellation: recorded as the client's (its
    /// `notifications/cancelled`, or its closed response stream) only while the grader itself
    /// is not stopping. The grader's own stop (a signal, its `--calls` bound) cancels every
    /// request's token too; taking that for the client's cancellation made the report say the
    /// client timed out when it had given no sign, and only when the journal's write won the
    /// race with the report.
    fn client_cancelled(&self, number: u64) {
        if !self.stop.is_cancelled() {
            let _ = self.journal.cancelled(number);
        }
    }

    fn settle(&self, number: u64, settled: &Settled) {
        // A journal that cannot be written makes the report incomplete, never the call wrong:
        // the report counts the calls it holds and the tickets the store holds.
        let _ = self.journal.settle(number, settled);
        let done = self.settled.fetch_add(1, Ordering::SeqCst) + 1;
        if self.calls_bound.is_some_and(|bound| done >= bound) {
            self.stop.cancel();
        }
    }
}

/// The watch a request keeps on its session's next request.
#[derive(Clone, Default)]
struct NextRequest {
    /// Cancelled when the next request is on record.
    came: CancellationToken,
    /// When it was, set before `came` is cancelled: the time a reply it releases is sent,
    /// however late the held call's task runs after it.
    at_ms: Arc<std::sync::OnceLock<u64>>,
}

/// One session's handler: the ticket tools and the grader around them.
#[derive(Clone)]
pub struct Graded {
    pub(crate) inner: TicketTools,
    pub(crate) grader: Arc<Grader>,
    /// The session's name in the journal.
    pub(crate) session: Arc<str>,
    /// How `--drop-connection` ends this connection.
    pub(crate) connection: Connection,
}

/// How the grader ends a connection instead of answering (`--drop-connection`).
#[derive(Clone)]
pub enum Connection {
    /// Cancelling the token ends it: over stdio the grader's stop (the process exits), in
    /// process the session's own.
    Token(CancellationToken),
    /// Over HTTP: the session the request's `Mcp-Session-Id` names is closed.
    Http,
}

/// What the tools answered, as the journal keeps it: the answer, the ticket, and whether it
/// was created (the fate and whether it reached the client are the caller's to fill in).
fn summarize(answer: &Result<CallToolResponse, ErrorData>) -> Settled {
    let settled = |answer: String, ticket_id: Option<String>, created: bool| Settled {
        fate: String::new(),
        answer,
        ticket_id,
        created,
        reached_client: false,
        at_ms: None,
    };
    match answer {
        Ok(CallToolResponse::Complete(result)) => {
            let content = result.structured_content.clone().unwrap_or(Value::Null);
            if result.is_error == Some(true) {
                let code = content["code"].as_str().unwrap_or("error").to_owned();
                return settled(format!("error {code}"), None, false);
            }
            let ticket = match &content["ticket_id"] {
                Value::Null => None,
                Value::String(text) => Some(text.clone()),
                other => Some(other.to_string()),
            };
            let replayed = content["replayed"] == Value::Bool(true);
            let word = if replayed { "replayed" } else { "created" };
            settled(word.to_owned(), ticket, !replayed)
        }
        Ok(_) => settled(
            "an answer that is not a tool result".to_owned(),
            None,
            false,
        ),
        Err(err) => settled(format!("protocol error: {}", err.message), None, false),
    }
}

/// The ticket's fields: every argument but the key and the fault, as canonical JSON.
pub(crate) fn fields_of(arguments: &JsonObject) -> String {
    let mut fields = arguments.clone();
    fields.remove(wire::OPERATION_KEY);
    fields.remove(wire::FAULT);
    let value = Value::Object(fields);
    match Payload::new(value.clone()) {
        Ok(payload) => payload.canonical().to_owned(),
        Err(_) => value.to_string(),
    }
}

impl Graded {
    /// The tools, with `create_ticket`'s text for the design served, and `prepare_ticket` when
    /// the design has it.
    fn tools(&self, mut tools: Vec<Tool>) -> Vec<Tool> {
        let source = self.grader.key_source;
        for tool in &mut tools {
            if tool.name == wire::CREATE_TICKET {
                tool.description = Some(source.create_description().into());
                let mut schema = (*tool.input_schema).clone();
                if let Some(Value::Object(properties)) = schema.get_mut("properties")
                    && let Some(Value::Object(key)) = properties.get_mut(wire::OPERATION_KEY)
                {
                    key.insert(
                        "description".to_owned(),
                        Value::String(source.key_description().to_owned()),
                    );
                }
                tool.input_schema = Arc::new(schema);
            }
        }
        if source == KeySource::Prepare {
            let mut prepare = Tool::new(
                wire::PREPARE_TICKET,
                wire::PREPARE_TICKET_DESCRIPTION,
                match json!({"type": "object", "properties": {}}) {
                    Value::Object(map) => map,
                    _ => JsonObject::new(),
                },
            );
            prepare.annotations = Some(
                ToolAnnotations::with_title("Get a key for one new ticket")
                    .read_only(false)
                    .destructive(false)
                    .idempotent(false)
                    .open_world(false),
            );
            tools.push(prepare);
        }
        tools
    }

    /// The session a request came in: over HTTP one handler may serve several sessions, and
    /// the session is the one the client's `Mcp-Session-Id` header names.
    fn session_of(&self, context: &RequestContext<RoleServer>) -> String {
        http_session_id(context).map_or_else(
            || self.session.to_string(),
            |id| format!("{} session {id}", self.session),
        )
    }

    /// Ends this connection without a reply, as `--drop-connection` asks: once the call's
    /// ticket is committed and recorded.
    fn drop_connection(&self, context: &RequestContext<RoleServer>) {
        match &self.connection {
            Connection::Token(token) => token.cancel(),
            Connection::Http => {
                let (Some(sessions), Some(id)) =
                    (self.grader.http_sessions.get(), http_session_id(context))
                else {
                    return;
                };
                let (sessions, id) = (
                    Arc::clone(sessions),
                    rmcp::transport::streamable_http_server::session::SessionId::from(id),
                );
                // Not awaited here: closing the session ends the worker this call runs in.
                tokio::spawn(async move {
                    use rmcp::transport::streamable_http_server::session::SessionManager;
                    let _ = sessions.close_session(&id).await;
                });
            }
        }
    }

    /// The journal's record of a call as it arrives: who sent it, in which session, with
    /// which key and fields.
    fn arrival(&self, arguments: &JsonObject, context: &RequestContext<RoleServer>) -> Arrival {
        // From `initialize`, or (a client on a protocol version without it) from the
        // request's own `_meta`.
        let client = context
            .peer
            .peer_info()
            .map(|info| info.client_info.clone())
            .or_else(|| context.meta.client_info())
            .map_or_else(
                || "unknown client".to_owned(),
                |info| format!("{} {}", info.name, info.version),
            );
        let session = self.session_of(context);
        Arrival {
            request_in_session: self.grader.request(&session),
            session,
            client,
            request_id: serde_json::to_string(&context.id).unwrap_or_default(),
            operation_key: arguments
                .get(wire::OPERATION_KEY)
                .and_then(Value::as_str)
                .map(str::to_owned),
            arguments: Value::Object(arguments.clone()).to_string(),
            fields: fields_of(arguments),
        }
    }

    /// Records a call's arrival: its record, its number, and the fate the schedule gives it.
    fn arrive(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Arrival, u64, Fate, NextRequest), ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        let arrival = self.arrival(&arguments, context);
        let (number, first) = self
            .grader
            .journal
            .arrive(&arrival)
            .map_err(|err| ErrorData::internal_error(format!("grader journal: {err}"), None))?;
        // After the journal's record: a reply this arrival releases is sent after it arrived.
        let next_request = self.grader.announce(&arrival.session);
        let fate = self.grader.schedule.fate(number, first);
        Ok((arrival, number, fate, next_request))
    }

    async fn create(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (arrival, number, fate, next_request) = self.arrive(&request, &context)?;
        let leaving = self.grader.leaving(&arrival.session);
        let grader = &self.grader;
        let request_id = arrival.request_id.clone();
        let stopped = stopped_waiting(
            context.ct.clone(),
            grader.stream(&arrival.session, &request_id),
        );
        let answer = self.inner.call_tool(request, context.clone()).await;
        let said = summarize(&answer);
        let settled = |fate: String, reached_client: bool| Settled {
            fate,
            reached_client,
            ..said.clone()
        };
        let replied = match fate {
            Fate::Deliver => {
                grader.settle(number, &settled("delivered".to_owned(), true));
                answer
            }
            Fate::InProgress => {
                grader.settle(number, &settled("in progress".to_owned(), false));
                Ok(crate::mcp::server::tools::in_progress_result(
                    arrival.operation_key.as_deref().unwrap_or_default(),
                )
                .into())
            }
            Fate::Drop => {
                grader.settle(number, &settled("dropped".to_owned(), false));
                self.drop_connection(&context);
                // Nothing is ever written for it: the connection's end takes this call with it.
                std::future::pending().await
            }
            Fate::Lose => {
                grader.settle(number, &settled("lost".to_owned(), false));
                // Never answered: the call waits until the client cancels it or goes away.
                // Biased: a cancellation read before stdin's end is recorded as one, whichever
                // of the two the task sees first.
                tokio::select! {
                    biased;
                    () = stopped => grader.client_cancelled(number),
                    () = leaving.cancelled() => {}
                }
                Err(ErrorData::internal_error(
                    "the grader lost this reply on purpose",
                    None,
                ))
            }
            Fate::Delay(by) => {
                let signs = Signs {
                    stopped,
                    next_request,
                    leaving,
                };
                hold_reply(grader, number, by, &said, signs, answer).await
            }
        };
        grader.stream_done(&arrival.session, &request_id);
        replied
    }
}

/// What ends a held reply's hold, besides its time.
struct Signs<S> {
    /// The client's cancellation, or its closed response stream.
    stopped: S,
    /// The session's next request.
    next_request: NextRequest,
    /// The client leaving the session.
    leaving: CancellationToken,
}

/// Holds call `number`'s `answer` for `by` ([`Fate::Delay`]), or until the client gives a sign.
async fn hold_reply(
    grader: &Grader,
    number: u64,
    by: std::time::Duration,
    said: &Settled,
    signs: Signs<impl std::future::Future<Output = ()>>,
    answer: Result<CallToolResponse, ErrorData>,
) -> Result<CallToolResponse, ErrorData> {
    let fate = format!("delayed {}ms", by.as_millis());
    let settled = |reached_client: bool| Settled {
        fate: fate.clone(),
        reached_client,
        ..said.clone()
    };
    // The answer is on record before the hold: a process that ends during it leaves a reply
    // that never reached the client, not a call with no answer.
    let _ = grader.journal.settle(number, &settled(false));
    // The hold ends at the first of: the client's cancellation (the reply is not sent), its
    // next request of the session (the reply goes out, sent as of that request's record: the
    // client had stopped waiting), its leaving (the reply is not sent), or the schedule's time.
    // Biased, in the order the client can give them (a cancellation or a request is read before
    // stdin's end), so that signs that came together are taken in that order however late this
    // task runs, and the hold's time ends it only when the client gives no sign.
    let Signs {
        stopped,
        next_request,
        leaving,
    } = signs;
    tokio::select! {
        biased;
        () = stopped => {
            grader.settle(number, &settled(false));
            grader.client_cancelled(number);
            Err(ErrorData::internal_error("cancelled while the grader held the reply", None))
        }
        () = next_request.came.cancelled() => {
            let released = Settled {
                at_ms: next_request.at_ms.get().copied(),
                ..settled(true)
            };
            grader.settle(number, &released);
            answer
        }
        () = leaving.cancelled() => {
            grader.settle(number, &settled(false));
            Err(ErrorData::internal_error("the client left while the grader held the reply", None))
        }
        () = tokio::time::sleep(by) => {
            grader.settle(number, &settled(true));
            answer
        }
    }
}

/// Done when the client stops waiting for one call: it sends `notifications/cancelled` for it
/// (`cancelled`), or closes the call's response stream (`closed`).
async fn stopped_waiting(cancelled: CancellationToken, closed: CancellationToken) {
    tokio::select! {
        () = cancelled.cancelled() => {}
        () = closed.cancelled() => {}
    }
}

/// The `Mcp-Session-Id` of a request that came over HTTP.
fn http_session_id(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get("mcp-session-id"))
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

impl ServerHandler for Graded {
    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let session = self.session_of(&context);
        self.grader.request(&session);
        self.grader.announce(&session);
        let listed = self.inner.list_tools(request, context).await?;
        Ok(ListToolsResult::with_all_items(self.tools(listed.tools)))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let mut tools = Vec::new();
        if let Some(tool) = self.inner.get_tool(name) {
            tools.push(tool);
        }
        self.tools(tools).into_iter().find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != wire::CREATE_TICKET {
            let session = self.session_of(&context);
            self.grader.request(&session);
            // A ticket this request names is the client acting on a reply that told it of
            // that ticket: what shows a held reply was read (see `report::reached`). Recorded
            // before the request is announced, so that a held reply this request releases is
            // settled after it: naming a ticket before its reply came proves nothing.
            let named = request.arguments.as_ref().and_then(|a| a.get("ticket_id"));
            let named = match named {
                Some(Value::String(id)) => Some(id.clone()),
                Some(Value::Number(id)) => Some(id.to_string()),
                _ => None,
            };
            if let Some(id) = named {
                let _ = self.grader.journal.named(&session, &id);
            }
            self.grader.announce(&session);
        }
        match request.name.as_ref() {
            wire::CREATE_TICKET => self.create(request, context).await,
            wire::PREPARE_TICKET if self.grader.key_source == KeySource::Prepare => {
                let issued = self.grader.prepared.fetch_add(1, Ordering::SeqCst) + 1;
                let key = format!("prepared-{}-{issued}", std::process::id());
                Ok(CallToolResult::structured(json!({ wire::OPERATION_KEY: key })).into())
            }
            _ => self.inner.call_tool(request, context).await,
        }
    }
}
