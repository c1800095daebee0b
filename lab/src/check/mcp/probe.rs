//! The MCP check's client side, on rmcp: sessions (a process of its own over stdio, a new
//! session over Streamable HTTP), tool calls recorded in the history, a call cancelled with
//! `notifications/cancelled`, and counting effects.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, JsonObject, ServerResult, Tool,
};
use rmcp::service::{PeerRequestOptions, RequestHandle, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::Value;

use super::super::excerpt::one_line;
use super::super::history::{Answer, History, Sent};
use super::super::probe::{Change, changes, command_count, count_at, render, sqlite_count, tagged};
use super::super::report::Stop;
use super::super::target::{in_folder, program_in};
use super::target::{McpCount, McpIdentity, McpTarget, McpTransport};
use crate::mcp::http_client::LoopbackHttpClient;

/// The least time a server is given to start and finish its MCP handshake.
pub(crate) const START_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

/// An open session with the server, for one caller.
pub struct Session {
    running: RunningService<RoleClient, ()>,
    /// The child's process id, over stdio.
    pub pid: Option<u32>,
}

/// What the key argument holds in a call.
#[derive(Clone, Debug)]
pub enum KeyArg {
    /// This key, as a string.
    Key(String),
    /// No key argument at all.
    Absent,
    /// This JSON value as the key argument (a malformed key).
    Raw(Value),
}

/// One call of the create tool, as a point means it.
#[derive(Clone, Debug)]
pub struct ToolCall {
    /// What the point meant by it.
    pub step: String,
    /// The caller (an index into the target's callers).
    pub caller: usize,
    /// The key.
    pub key: KeyArg,
    /// The fields the arguments are rendered with.
    pub fields: BTreeMap<String, Value>,
}

/// A call's answer as the points read it.
#[derive(Clone, Debug, Default)]
pub struct Read {
    /// A tool result without `isError`.
    pub success: bool,
    /// The identity the file's `[mcp.identity]` finds in a success.
    pub identity: Option<String>,
    /// An error result's code, when the file says where it is.
    pub code: Option<String>,
    /// An error result or a JSON-RPC error: the call was refused. Also a refusal the file's
    /// code reader finds in a result not marked `isError` ([`Read::flagged_success`]).
    pub refused: bool,
    /// A refusal in a result not marked `isError`: the server refused, as the file reads it, but
    /// told the agent that its call succeeded. A point that asks whether the agent was told of a
    /// failure never passes on it.
    pub flagged_success: bool,
}

impl Read {
    /// Whether the agent was told its call failed: an error result (`isError`) or a JSON-RPC
    /// error, never a result not marked `isError`, whatever code its text holds.
    pub fn told_refused(&self) -> bool {
        self.refused && !self.flagged_success
    }
}

/// A recorded call.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Its number in the history.
    pub id: usize,
    /// What came back.
    pub answer: Answer,
    /// How the points read it.
    pub read: Read,
}

/// A call sent and not yet answered, which the check may cancel.
pub struct Pending {
    handle: RequestHandle<RoleClient>,
    sent: Sent,
    at: Instant,
}

/// The run's state: the target, one session per caller, the history.
pub struct McpProbe {
    /// The target.
    pub target: McpTarget,
    /// The run's folder, `{{dir}}` in the file.
    pub dir: tempfile::TempDir,
    /// What was sent and what came back.
    pub history: History,
    sessions: Vec<Session>,
    /// The tools the server listed to the first caller.
    pub tools: Vec<Tool>,
    run: String,
    serial: AtomicUsize,
    /// The API behind a wrapper (`[upstream]`), served by the lab.
    pub upstream: Option<super::super::upstream::UpstreamApi>,
}

fn with_dir(text: &str, dir: &std::path::Path, upstream: Option<&str>) -> String {
    let text = text.replace("{{dir}}", &dir.display().to_string());
    match upstream {
        Some(url) => text.replace(super::target::UPSTREAM_PLACEHOLDER, url),
        None => text,
    }
}

impl McpProbe {
    /// Makes the run's folder and opens a session for each caller.
    ///
    /// # Errors
    /// A mismatch naming `mcp.command` when the command cannot be started, or `upstream.routes`
    /// when the wrapper stopped at its start because the API lacked a route it asked for;
    /// unreachable when the folder cannot be made or a session cannot be opened.
    pub async fn start(target: McpTarget) -> Result<McpProbe, Stop> {
        let dir = tempfile::Builder::new()
            .prefix("lab-check-mcp-")
            .tempdir()
            .map_err(|err| unreachable(format!("making the run's folder: {err}")))?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let tag = (nanos as u64) ^ (u64::from(std::process::id()) << 40);
        let mut probe = McpProbe {
            target,
            dir,
            history: History::new(),
            sessions: Vec::new(),
            tools: Vec::new(),
            run: format!("{:x}", tag & 0xffff_ffff_ffff),
            serial: AtomicUsize::new(0),
            upstream: None,
        };
        if let Some(spec) = &probe.target.upstream {
            probe.upstream = Some(
                super::super::upstream::UpstreamApi::start(spec, probe.dir.path())
                    .map_err(unreachable)?,
            );
        }
        if let Err(stop) = probe.connect().await {
            // A wrapper that stops at its start because the API lacked a route it asked for
            // (a token check): the file's fault, named by the field that declares routes.
            return Err(super::super::upstream::blame_stop(
                probe.upstream.as_ref(),
                stop,
            ));
        }
        Ok(probe)
    }

    /// Opens every caller's session and lists the tools.
    async fn connect(&mut self) -> Result<(), Stop> {
        for caller in 0..self.target.callers.len() {
            let session = self.open(caller).await?;
            self.sessions.push(session);
        }
        let peer = self.sessions[0].running.peer().clone();
        self.tools = tokio::time::timeout(self.target.timeout, peer.list_all_tools())
            .await
            .map_err(|_| unreachable("tools/list: no answer in time".to_owned()))?
            .map_err(|err| unreachable(format!("tools/list: {err}")))?;
        Ok(())
    }

    /// Closes every session (stdio servers end with their stdin).
    pub async fn finish(self) {
        for session in self.sessions {
            let _ = session.running.cancel().await;
        }
    }

    fn next(&self) -> usize {
        self.serial.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A key no call of any run has used: a fresh random UUID v4.
    pub fn fresh_key(&self) -> String {
        let uuid = uuid::Uuid::new_v4().to_string();
        match &self.target.upstream {
            Some(spec) => super::super::upstream::written_key(spec.key_form, &uuid),
            None => uuid,
        }
    }

    /// A number no run has used as a key (the first 32 bits of a fresh UUID).
    pub fn fresh_key_number(&self) -> u32 {
        let bytes = uuid::Uuid::new_v4().into_bytes();
        u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    }

    /// The tool's fields as the file gives them, each free-text field (`vary = "text"`) tagged
    /// so that this call's effect is its own; every other field exactly as given.
    pub fn fresh_fields(&self) -> BTreeMap<String, Value> {
        let n = self.next();
        tagged(
            &self.target.tool.fields,
            &self.target.tool.vary,
            &self.run,
            n,
        )
    }

    /// The changed arguments `mcp.tool.vary` allows from `fields` (see the HTTP check's).
    pub fn changes(&self, fields: &BTreeMap<String, Value>) -> Vec<Change> {
        let tag = format!("{}-{}", self.run, self.next());
        changes(fields, &self.target.tool.vary, &tag)
    }

    /// A call of the create tool by the first caller.
    pub fn call(&self, step: &str, key: KeyArg, fields: &BTreeMap<String, Value>) -> ToolCall {
        ToolCall {
            step: step.to_owned(),
            caller: 0,
            key,
            fields: fields.clone(),
        }
    }

    /// With `[upstream]`, has the API refuse the next create as invalid (400), as it would
    /// refuse fields it does not accept: the lab's API takes any object, so `mcp.errors.validation`
    /// alone cannot provoke a refusal there. Returns whether a refusal was queued.
    pub fn provoke_refusal(&self) -> bool {
        let Some(api) = &self.upstream else {
            return false;
        };
        let kind = crate::http::wire::problem::INVALID_REQUEST;
        api.fault_next(super::super::upstream::Fault::Answer {
            status: kind.status,
            headers: vec![(
                "content-type".to_owned(),
                crate::http::wire::PROBLEM_JSON.to_owned(),
            )],
            body: serde_json::json!({
                "type": kind.uri(),
                "title": kind.title,
                "status": kind.status,
                "detail": "the request is refused by the lab, which plays the API here",
            })
            .to_string(),
            name: "an invalid request".to_owned(),
        });
        true
    }

    /// Drops a refusal [`McpProbe::provoke_refusal`] queued that no create used.
    pub fn settle_refusal(&self) {
        if let Some(api) = &self.upstream {
            api.clear_faults();
        }
    }

    /// The key argument for a fresh intention: a fresh key, or none when the tool takes none.
    pub fn intention_key(&self) -> KeyArg {
        if self.target.keyed() {
            KeyArg::Key(self.fresh_key())
        } else {
            KeyArg::Absent
        }
    }

    /// The arguments `call` sends, the key argument included.
    pub fn arguments_of(&self, call: &ToolCall) -> JsonObject {
        self.arguments(call)
    }

    fn arguments(&self, call: &ToolCall) -> JsonObject {
        let mut arguments = match render(&self.target.tool.arguments, &call.fields) {
            Value::Object(map) => map,
            // Validation made the template an object.
            _ => JsonObject::new(),
        };
        if let Some(name) = &self.target.tool.key_argument {
            match &call.key {
                KeyArg::Key(key) => {
                    arguments.insert(name.clone(), Value::String(key.clone()));
                }
                KeyArg::Raw(value) => {
                    arguments.insert(name.clone(), value.clone());
                }
                KeyArg::Absent => {}
            }
        }
        arguments
    }

    fn sent(&self, point: &'static str, call: &ToolCall, arguments: &JsonObject) -> Sent {
        Sent {
            point,
            step: call.step.clone(),
            caller: Some(self.target.callers[call.caller].name.clone()),
            key: match &call.key {
                KeyArg::Key(key) => Some(key.clone()),
                KeyArg::Raw(value) => Some(value.to_string()),
                KeyArg::Absent => None,
            },
            method: "tools/call".to_owned(),
            path: self.target.tool.name.clone(),
            body: Value::Object(arguments.clone()).to_string(),
        }
    }

    fn request(&self, arguments: JsonObject) -> ClientRequest {
        ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(self.target.tool.name.clone()).with_arguments(arguments),
        ))
    }

    /// Opens a new session for `caller`: a new process over stdio, a new session over HTTP.
    ///
    /// # Errors
    /// The reason, naming the command or the URL.
    pub async fn open(&self, caller: usize) -> Result<Session, Stop> {
        let who = &self.target.callers[caller];
        let dir = self.dir.path();
        let upstream_url = self
            .upstream
            .as_ref()
            .map(super::super::upstream::UpstreamApi::url);
        let upstream = upstream_url.as_deref();
        let opening = async {
            match &self.target.transport {
                McpTransport::Stdio { command, env } => {
                    let folder = &self.target.folder;
                    let program = program_in(folder, &with_dir(&command[0], dir, upstream));
                    let mut process = tokio::process::Command::new(program);
                    process.current_dir(folder);
                    process.args(
                        command[1..]
                            .iter()
                            .map(|word| with_dir(word, dir, upstream)),
                    );
                    process.args(who.args.iter().map(|word| with_dir(word, dir, upstream)));
                    for (name, value) in env.iter().chain(&who.env) {
                        process.env(name, with_dir(value, dir, upstream));
                    }
                    let (child, _) = TokioChildProcess::builder(process)
                        .stderr(Stdio::null())
                        .spawn()
                        .map_err(|err| {
                            Stop::mismatch("mcp.command", format!("{:?}: {err}", command[0]))
                        })?;
                    let pid = child.id();
                    let running = ().serve(child).await.map_err(|err| {
                        unreachable(format!("the MCP handshake over stdio failed: {err}"))
                    })?;
                    Ok(Session { running, pid })
                }
                McpTransport::Http { url, headers } => {
                    let client = LoopbackHttpClient::for_url(url).map_err(unreachable)?;
                    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                    for (name, value) in headers.iter().chain(&who.headers) {
                        let name = axum::http::HeaderName::from_bytes(name.as_bytes())
                            .map_err(|err| unreachable(format!("header {name:?}: {err}")))?;
                        let value = axum::http::HeaderValue::from_str(value)
                            .map_err(|err| unreachable(format!("header {name:?}: {err}")))?;
                        config.custom_headers.insert(name, value);
                    }
                    let transport = StreamableHttpClientTransport::with_client(client, config);
                    let running = ().serve(transport).await.map_err(|err| {
                        unreachable(format!("the MCP handshake with {url} failed: {err}"))
                    })?;
                    Ok(Session { running, pid: None })
                }
            }
        };
        // A start (a process to launch, an interpreter to load) is given at least a minute, and
        // more where the file's timeout is longer: waiting longer for a start changes no
        // verdict, while the file's answer timeout, met by a slow start on a loaded machine,
        // failed the whole check.
        let bound = self.target.timeout.max(START_BOUND);
        tokio::time::timeout(bound, opening)
            .await
            .map_err(|_| unreachable(format!("no MCP handshake within {bound:?}")))?
    }

    /// Closes a session and says what ended: the process (gone, by its id) or the session.
    pub async fn close(&self, session: Session) -> String {
        let pid = session.pid;
        let _ = tokio::time::timeout(self.target.timeout, session.running.cancel()).await;
        match pid {
            None => "the session was closed (the client ended it)".to_owned(),
            Some(pid) => {
                let started = Instant::now();
                while started.elapsed() < self.target.timeout {
                    if !process_alive(pid) {
                        return format!("process {pid} exited");
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                format!("process {pid} was still running after its stdin closed")
            }
        }
    }

    /// Calls the create tool on the caller's own session.
    pub async fn send(&self, point: &'static str, call: &ToolCall) -> Seen {
        let session = &self.sessions[call.caller];
        self.send_on(point, session, call).await
    }

    /// Calls the create tool on `session`.
    pub async fn send_on(&self, point: &'static str, session: &Session, call: &ToolCall) -> Seen {
        let arguments = self.arguments(call);
        let sent = self.sent(point, call, &arguments);
        let at = Instant::now();
        let peer = session.running.peer().clone();
        let request = self.request(arguments);
        let answer = match tokio::time::timeout(self.target.timeout, async {
            peer.send_request(request).await
        })
        .await
        {
            Err(_) => Answer::NoAnswer {
                reason: format!("no result within {:?}", self.target.timeout),
            },
            Ok(result) => self.answer(result),
        };
        self.record(sent, answer, at)
    }

    /// Calls again while the file's in-progress codes come back (at most ten times, 200 ms
    /// apart), and returns every call made.
    pub async fn send_settled(&self, point: &'static str, call: &ToolCall) -> Vec<Seen> {
        let mut seen = Vec::new();
        for _ in 0..10 {
            let one = self.send(point, call).await;
            let busy = one
                .read
                .code
                .as_ref()
                .is_some_and(|c| self.target.errors.in_progress.contains(c));
            seen.push(one);
            if !busy {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        seen
    }

    /// Sends the call and returns without waiting for its result.
    ///
    /// # Errors
    /// The reason, when the request could not be sent.
    pub async fn start_call(
        &self,
        point: &'static str,
        call: &ToolCall,
    ) -> Result<Pending, String> {
        let arguments = self.arguments(call);
        let sent = self.sent(point, call, &arguments);
        let at = Instant::now();
        let peer = self.sessions[call.caller].running.peer().clone();
        let handle = peer
            .send_cancellable_request(self.request(arguments), PeerRequestOptions::no_options())
            .await
            .map_err(|err| format!("sending the call: {err}"))?;
        Ok(Pending { handle, sent, at })
    }

    /// Sends `notifications/cancelled` for a pending call and records it: its result, if any
    /// comes, is never read.
    ///
    /// Called once the call's work is visible, it first waits for the result the server sends
    /// for that work (at most the file's timeout, for a server that never sends one), so the
    /// cancellation always meets a call whose result has come, unread, however slow the machine:
    /// the result is recorded as the answer, so the retry can be held to the effect it names;
    /// the caller still never reads it.
    pub async fn cancel(&self, mut pending: Pending, reason: &str) -> Seen {
        let id = pending.handle.id.clone();
        let arrived = tokio::time::timeout(self.target.timeout, &mut pending.handle.rx)
            .await
            .ok()
            .and_then(Result::ok);
        let sent = pending.handle.cancel(Some(reason.to_owned())).await;
        let arrived = arrived.map(|result| self.answer(result));
        let came = arrived.as_ref().map_or(String::new(), |answer| {
            format!(
                "; its result had already come, unread by the client: {}",
                answer.summary()
            )
        });
        let answer = match sent {
            Ok(()) => Answer::NoAnswer {
                reason: format!(
                    "cancelled by the check: notifications/cancelled for request {id}{came}"
                ),
            },
            Err(err) => Answer::NoAnswer {
                reason: format!("the cancellation of request {id} could not be sent: {err}{came}"),
            },
        };
        let mut seen = self.record(pending.sent, answer, pending.at);
        if let Some(arrived) = &arrived {
            // The points hold the retry to the effect the unread result names.
            seen.read = self.read(arrived);
        }
        seen
    }

    fn record(&self, sent: Sent, answer: Answer, at: Instant) -> Seen {
        let read = self.read(&answer);
        let id = self.history.record(sent, answer.clone(), at);
        Seen { id, answer, read }
    }

    fn answer(&self, result: Result<ServerResult, rmcp::ServiceError>) -> Answer {
        match result {
            Ok(ServerResult::CallToolResult(result)) => {
                let is_error = result.is_error == Some(true);
                let json = serde_json::to_value(&result).unwrap_or(Value::Null);
                // An API's error in a result not marked isError, naming no effect, is a refusal
                // the agent is told is a success, whether or not the file reads codes there.
                let code = self.refusal_code(&json, is_error).or_else(|| {
                    (!is_error && self.identity(&json).is_none())
                        .then(|| api_error_status(&json))
                        .flatten()
                });
                Answer::ToolResult {
                    is_error,
                    code,
                    body: super::super::history::cut(&json.to_string()),
                }
            }
            Ok(other) => Answer::NoAnswer {
                reason: format!(
                    "an answer that is not a tool result: {}",
                    serde_json::to_string(&other).unwrap_or_default()
                ),
            },
            Err(rmcp::ServiceError::McpError(err)) => Answer::RpcError {
                code: err.code.0,
                message: err.message.to_string(),
            },
            Err(err) => Answer::NoAnswer {
                reason: err.to_string(),
            },
        }
    }

    /// A result's refusal code, where the file says it is: in an error result's
    /// `structuredContent` (`code_pointer`), or in any result's text, read as JSON
    /// (`text_code_pointer`) or matched (`text_code_pattern`).
    fn refusal_code(&self, json: &Value, is_error: bool) -> Option<String> {
        let errors = &self.target.errors;
        let structured = errors
            .code_pointer
            .as_ref()
            .filter(|_| is_error)
            .and_then(|pointer| {
                json.get("structuredContent")
                    .and_then(|s| s.pointer(pointer))
                    .filter(|v| !v.is_null())
                    .map(as_text)
            });
        let text = texts(json);
        let in_json = || {
            let pointer = errors.text_code_pointer.as_ref()?;
            let parsed: Value = serde_json::from_str(&text).ok()?;
            parsed
                .pointer(pointer)
                .filter(|v| !v.is_null())
                .map(as_text)
        };
        let matched = || {
            let found = errors.text_code_pattern.as_ref()?.captures(&text)?;
            found.get(1).map(|m| m.as_str().to_owned())
        };
        structured.or_else(in_json).or_else(matched)
    }

    /// How the points read an answer.
    pub fn read(&self, answer: &Answer) -> Read {
        match answer {
            Answer::ToolResult {
                is_error: false,
                code: Some(code),
                ..
            } => Read {
                // A refusal inside a result not marked isError, found where the file says: the
                // agent reads a success.
                code: Some(code.clone()),
                refused: true,
                flagged_success: true,
                ..Read::default()
            },
            Answer::ToolResult {
                is_error: false,
                body,
                ..
            } => {
                let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
                Read {
                    success: true,
                    identity: self.identity(&json),
                    ..Read::default()
                }
            }
            Answer::ToolResult {
                is_error: true,
                code,
                ..
            } => Read {
                code: code.clone(),
                refused: true,
                ..Read::default()
            },
            Answer::RpcError { .. } => Read {
                refused: true,
                ..Read::default()
            },
            _ => Read::default(),
        }
    }

    fn identity(&self, result: &Value) -> Option<String> {
        match &self.target.identity {
            McpIdentity::Structured(pointer) => result
                .get("structuredContent")
                .and_then(|s| s.pointer(pointer))
                .filter(|v| !v.is_null())
                .map(as_text),
            McpIdentity::Text(regex) => {
                let text = texts(result);
                let found = regex.captures(&text)?;
                found
                    .get(1)
                    .or_else(|| found.get(0))
                    .map(|m| m.as_str().to_owned())
            }
        }
    }

    /// An answer for a report line: the summary, and a success's identity.
    pub fn describe(&self, seen: &Seen) -> String {
        if seen.read.flagged_success {
            return format!(
                "{}: the agent is told its call succeeded",
                seen.answer.summary()
            );
        }
        if seen.read.refused {
            return seen.answer.summary();
        }
        match (&seen.answer, &seen.read.identity) {
            (
                Answer::ToolResult {
                    is_error: false, ..
                },
                Some(identity),
            ) => {
                format!("a tool result naming {identity}")
            }
            (
                Answer::ToolResult {
                    is_error: false, ..
                },
                None,
            ) => "a tool result naming no effect (nothing at [mcp.identity])".to_owned(),
            (answer, _) => answer.summary(),
        }
    }

    /// The number of effects now, as `[mcp.count]` says, recorded in the history among the
    /// exchanges (the reports draw it).
    ///
    /// # Errors
    /// A mismatch naming the `[mcp.count]` field at fault, or unreachable when the server did
    /// not answer.
    pub async fn count(&self) -> Result<i64, Stop> {
        self.history.record_count(self.count_unrecorded().await)
    }

    async fn count_unrecorded(&self) -> Result<i64, Stop> {
        let dir = self.dir.path();
        match &self.target.count {
            McpCount::Tool { caller, .. } => {
                let callers: Vec<usize> = match caller {
                    Some(one) => vec![*one],
                    None => (0..self.sessions.len()).collect(),
                };
                Ok(self.counts_as(&callers).await?.iter().sum())
            }
            McpCount::Sqlite { file, query } => {
                let file = in_folder(&self.target.folder, Path::new(&with_dir(file, dir, None)));
                sqlite_count(file, query.clone()).await.map_err(in_mcp)
            }
            McpCount::Command(argv) => {
                let argv = argv.iter().map(|word| with_dir(word, dir, None)).collect();
                command_count(argv, self.target.folder.clone())
                    .await
                    .map_err(in_mcp)
            }
            McpCount::Upstream => match &self.upstream {
                Some(api) => api
                    .count()
                    .await
                    .map_err(|problem| Stop::mismatch("[upstream]", one_line(&problem))),
                None => Err(Stop::mismatch("[upstream]", "the API was not started")),
            },
        }
    }

    /// The count tool's count on each of `callers`' sessions, in order (not recorded); empty
    /// when the file counts otherwise.
    ///
    /// # Errors
    /// A mismatch naming the `mcp.count.tool` field at fault; unreachable when the server did
    /// not answer.
    pub async fn counts_as(&self, callers: &[usize]) -> Result<Vec<i64>, Stop> {
        let McpCount::Tool {
            name,
            arguments,
            pointer,
            from_text,
            ..
        } = &self.target.count
        else {
            return Ok(Vec::new());
        };
        let mut parts = Vec::new();
        for &caller in callers {
            let peer = self.sessions[caller].running.peer().clone();
            let arguments = match arguments {
                Value::Object(map) => map.clone(),
                _ => JsonObject::new(),
            };
            let params = CallToolRequestParams::new(name.clone()).with_arguments(arguments);
            let tool = |field: &str, problem: String| {
                Stop::mismatch(field, one_line(&format!("{name}: {problem}")))
            };
            let pointer_field = if *from_text {
                "mcp.count.tool.text_pointer"
            } else {
                "mcp.count.tool.structured_pointer"
            };
            let result = tokio::time::timeout(self.target.timeout, peer.call_tool(params))
                .await
                .map_err(|_| Stop::Unreachable {
                    asked: "count",
                    problem: format!("mcp.count.tool {name}: no answer in time"),
                })?
                .map_err(|err| match err {
                    // The server refused the call: the tool or its arguments are the file's.
                    ServiceError::McpError(_) | ServiceError::UnexpectedResponse => {
                        tool("mcp.count.tool.name", err.to_string())
                    }
                    other => Stop::Unreachable {
                        asked: "count",
                        problem: one_line(&format!("mcp.count.tool {name}: {other}")),
                    },
                })?;
            let json = serde_json::to_value(&result).unwrap_or(Value::Null);
            if result.is_error == Some(true) {
                return Err(tool(
                    "mcp.count.tool.name",
                    format!("an error result: {json}"),
                ));
            }
            let source = if *from_text {
                serde_json::from_str(&texts(&json))
                    .map_err(|err| tool(pointer_field, format!("the text is not JSON: {err}")))?
            } else {
                json.get("structuredContent")
                    .cloned()
                    .unwrap_or(Value::Null)
            };
            parts.push(count_at(&source, pointer).map_err(|problem| tool(pointer_field, problem))?);
        }
        Ok(parts)
    }
}

fn as_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The text content blocks of a result, joined by line breaks.
/// The HTTP status of an API error a tool result carries: a problem document (RFC 9457) or an
/// error object with a `status` from 400 to 599, in `structuredContent` or in the text read as
/// JSON; or a text naming a 4xx or 5xx status as HTTP clients word it ("422 Client Error",
/// "HTTP error 503", "status code 401", "404 Not Found").
pub fn api_error_status(result: &Value) -> Option<String> {
    static WORDS: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let text = texts(result);
    let parsed: Option<Value> = serde_json::from_str(&text).ok();
    let documents = [result.get("structuredContent"), parsed.as_ref()];
    let status_of = |object: &Value| {
        let status = object.get("status").and_then(Value::as_u64)?;
        let described = ["title", "type", "detail", "error", "message"]
            .iter()
            .any(|name| object.get(name).is_some());
        ((400..600).contains(&status) && described).then(|| status.to_string())
    };
    let in_document = documents.into_iter().flatten().find_map(|document| {
        status_of(document).or_else(|| {
            ["error", "problem"]
                .iter()
                .find_map(|name| document.get(name).and_then(status_of))
        })
    });
    in_document.or_else(|| {
        let words = WORDS.get_or_init(|| {
            regex::Regex::new(
                r"(?i)(?:HTTP(?:/[\d.]+)?(?: error)?:? |status(?: code)?:? )([45]\d\d)|([45]\d\d):? (?:Client Error|Server Error|Bad Request|Unauthorized|Payment Required|Forbidden|Not Found|Method Not Allowed|Conflict|Gone|Precondition Failed|Unprocessable (?:Entity|Content)|Too Many Requests|Internal Server Error|Bad Gateway|Service Unavailable|Gateway Time-?out)",
            )
            .expect("a valid regex")
        });
        let found = words.captures(&text)?;
        found
            .get(1)
            .or_else(|| found.get(2))
            .map(|m| m.as_str().to_owned())
    })
}

fn texts(result: &Value) -> String {
    result
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Whether a process is still running (not gone, not a zombie), from `/proc`.
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_none_or(|(_, rest)| !rest.starts_with(['Z', 'X'])),
    }
}

/// A count the HTTP check's reader refused, named as the MCP file names the field
/// (`mcp.count.sql.query`).
fn in_mcp(err: super::super::target::FieldError) -> Stop {
    Stop::from(super::super::target::FieldError {
        field: format!("mcp.{}", err.field),
        ..err
    })
}

/// A server the check could not reach or talk to: not the file's fault.
fn unreachable(problem: String) -> Stop {
    Stop::Unreachable {
        asked: "MCP",
        problem,
    }
}
