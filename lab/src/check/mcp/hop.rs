//! An MCP server in front of the API the lab serves: the hop points ([`crate::check::hop`])
//! call its create tool as an agent would, on the caller's standing session or on a session of
//! their own (a new process over stdio, a reconnect over HTTP) for the restart point.

use std::sync::Arc;

use serde_json::Value;

use super::super::both::{Fields, Front, Provoked, Told};
use super::super::content::ReadBack;
use super::super::history::{Answer, History};
use super::super::probe::Change;
use super::super::report::{Checks, Grade};
use super::super::upstream::UpstreamApi;
use super::probe::{KeyArg, McpProbe, Seen, Session, ToolCall};
use super::target::McpTransport;

impl Front for McpProbe {
    type Call = ToolCall;
    type Session = Session;

    fn api(&self) -> Option<&UpstreamApi> {
        self.upstream.as_ref()
    }

    fn history(&self) -> &History {
        &self.history
    }

    fn keyed(&self) -> bool {
        self.target.keyed()
    }

    fn create_name(&self) -> String {
        self.target.tool.name.clone()
    }

    fn subject(&self) -> &'static str {
        "the tool"
    }

    fn call_word(&self) -> &'static str {
        "tool call"
    }

    fn result_word(&self) -> &'static str {
        "a tool result"
    }

    fn key_place(&self) -> String {
        "a key argument (mcp.tool.key_argument)".to_owned()
    }

    fn vary_field(&self) -> &'static str {
        "mcp.tool.vary"
    }

    fn caller_field(&self, caller: usize) -> String {
        if caller == 0 {
            "mcp.tool".to_owned()
        } else {
            format!("mcp.callers[{caller}]")
        }
    }

    fn count_section(&self) -> &'static str {
        "[mcp.count]"
    }

    fn together(&self) -> usize {
        self.target.load.calls
    }

    fn call_timeout(&self) -> std::time::Duration {
        self.target.timeout
    }

    fn key_listed(&self) -> Option<(String, bool, String, String)> {
        let tool = &self.target.tool;
        let argument = tool.key_argument.as_ref()?;
        let listed = self
            .tools
            .iter()
            .find(|t| t.name == tool.name.as_str())
            .and_then(|t| t.input_schema.get("properties"))
            .and_then(Value::as_object)
            .is_some_and(|properties| properties.contains_key(argument));
        Some((
            format!("the tool's input schema lists {argument}, so an agent knows to send it"),
            listed,
            format!("{argument} among inputSchema.properties"),
            if listed {
                "listed".to_owned()
            } else {
                "not listed: an agent that follows the schema never sends a key".to_owned()
            },
        ))
    }

    fn fresh_fields(&self) -> Fields {
        McpProbe::fresh_fields(self)
    }

    fn changes(&self, fields: &Fields) -> Vec<Change> {
        McpProbe::changes(self, fields)
    }

    fn keyed_call(&self, step: &str, fields: &Fields) -> ToolCall {
        self.call(step, self.intention_key(), fields)
    }

    fn unkeyed_call(&self, step: &str, fields: &Fields) -> ToolCall {
        self.call(step, KeyArg::Absent, fields)
    }

    fn again(&self, call: &ToolCall, step: &str, fields: Option<Fields>) -> ToolCall {
        let mut again = call.clone();
        step.clone_into(&mut again.step);
        if let Some(fields) = fields {
            again.fields = fields;
        }
        again
    }

    fn given_fields(&self) -> Fields {
        self.target.tool.fields.clone()
    }

    fn fields_of(&self, call: &ToolCall) -> Option<Fields> {
        Some(call.fields.clone())
    }

    fn afresh(&self, call: &ToolCall, step: &str, fields: Fields) -> ToolCall {
        let mut again = self.again(call, step, Some(fields));
        again.key = self.intention_key();
        again
    }

    fn key_of(&self, call: &ToolCall) -> String {
        match &call.key {
            KeyArg::Key(key) => key.clone(),
            _ => String::new(),
        }
    }

    fn sent_body(&self, call: &ToolCall) -> Value {
        let mut arguments = self.arguments_of(call);
        if let Some(name) = &self.target.tool.key_argument {
            arguments.remove(name);
        }
        Value::Object(arguments)
    }

    async fn send(&self, point: &'static str, session: Option<&Session>, call: &ToolCall) -> Told {
        let seen = match session {
            Some(session) => self.send_on(point, session, call).await,
            None => McpProbe::send(self, point, call).await,
        };
        told(self, seen)
    }

    async fn send_settled(&self, point: &'static str, call: &ToolCall) -> Vec<Told> {
        let seen = McpProbe::send_settled(self, point, call).await;
        seen.into_iter().map(|seen| told(self, seen)).collect()
    }

    fn rounds(&self) -> usize {
        self.target.load.rounds
    }

    async fn send_together(
        self: &Arc<Self>,
        point: &'static str,
        calls: Vec<ToolCall>,
    ) -> Vec<Told> {
        // Released together once every task has started, so the calls go out side by side
        // however late a task starts on a loaded machine.
        let start = Arc::new(tokio::sync::Barrier::new(calls.len()));
        let tasks: Vec<_> = calls
            .into_iter()
            .map(|call| {
                let (probe, start) = (Arc::clone(self), Arc::clone(&start));
                tokio::spawn(async move {
                    start.wait().await;
                    let seen = McpProbe::send(&probe, point, &call).await;
                    told(&probe, seen)
                })
            })
            .collect();
        let mut answers = Vec::new();
        for task in tasks {
            if let Ok(one) = task.await {
                answers.push(one);
            }
        }
        answers
    }

    fn in_progress(&self, told: &Told) -> bool {
        let code = self.read(&told.answer).code;
        code.is_some_and(|c| self.target.errors.in_progress.contains(&c))
    }

    fn caller_names(&self) -> Vec<String> {
        self.target.callers.iter().map(|c| c.name.clone()).collect()
    }

    fn callers_field(&self) -> &'static str {
        "[[mcp.callers]] (other args or env over stdio, other headers over HTTP)"
    }

    fn by_caller(&self, call: &ToolCall, caller: usize, step: &str) -> ToolCall {
        let mut other = self.again(call, step, None);
        other.caller = caller;
        other
    }

    fn validation_kind(&self) -> &'static str {
        "validation error (mcp.errors.validation)"
    }

    async fn provoke(
        &self,
        point: &'static str,
        checks: &mut Checks,
        call: &ToolCall,
        _provoked: &Provoked,
    ) -> Option<Told> {
        let step = "a call the tool refuses (mcp.errors.validation)";
        let mut bad = self.again(call, step, None);
        bad.fields.extend(self.target.errors.validation.clone());
        let mark = self.upstream.as_ref().map(UpstreamApi::mark);
        self.provoke_refusal();
        let refused = McpProbe::send(self, point, &bad).await;
        self.settle_refusal();
        // Behind a wrapper, the API's own 400 says the call was refused, whatever the result
        // holds.
        let api_refused = self.upstream.as_ref().zip(mark).is_some_and(|(api, mark)| {
            api.creates_since(mark)
                .iter()
                .any(|c| c.status() == Some(400))
        });
        refused_as_told(checks, self, &refused, api_refused).then(|| told(self, refused))
    }

    fn in_progress_words(&self) -> (&'static str, String) {
        (
            "the in-progress code (mcp.errors.in_progress)",
            format!("{:?}", self.target.errors.in_progress),
        )
    }

    fn conflict(&self, refused: &Told) -> Option<(&'static str, bool, String)> {
        let codes = &self.target.errors.conflict;
        let code = self.read(&refused.answer).code;
        (!codes.is_empty()).then(|| {
            (
                "it is refused with the file's conflict code (mcp.errors.conflict)",
                refused.refused && code.is_some_and(|c| codes.contains(&c)),
                format!("{codes:?}"),
            )
        })
    }

    fn restarts_process(&self) -> bool {
        matches!(self.target.transport, McpTransport::Stdio { .. })
    }

    fn cannot_restart(&self) -> Option<String> {
        None
    }

    async fn open(&self) -> Result<Session, String> {
        McpProbe::open(self, 0)
            .await
            .map_err(|stop| stop.to_string())
    }

    async fn close(&self, session: Session) -> String {
        McpProbe::close(self, session).await
    }

    async fn count(&self) -> Result<i64, String> {
        McpProbe::count(self).await.map_err(|stop| stop.to_string())
    }
}

impl ReadBack for McpProbe {
    async fn content(&self, _identity: &str) -> Result<Value, String> {
        Err(
            "the MCP check cannot read one effect back (it has no [read]), and a count cannot \
             see an effect changed in place under the same key"
                .to_owned(),
        )
    }
}

/// What the agent was told by one result, in the file's terms.
pub(crate) fn told(probe: &McpProbe, seen: Seen) -> Told {
    Told {
        id: seen.id,
        // A refusal in a result not marked isError is a success to the agent: the points
        // that ask whether it was told of a failure read it as one.
        success: seen.read.success || seen.read.flagged_success,
        refused: seen.read.told_refused(),
        flagged: seen.read.flagged_success,
        identity: seen.read.identity.clone(),
        text: agent_text(&seen),
        described: probe.describe(&seen),
        answer: seen.answer,
    }
}

/// The text an agent reads in a result: its text blocks, or the error's message.
fn agent_text(seen: &Seen) -> String {
    match &seen.answer {
        Answer::ToolResult { body, .. } => match serde_json::from_str::<Value>(body) {
            Ok(json) => json
                .get("content")
                .and_then(Value::as_array)
                .map(|blocks| {
                    blocks
                        .iter()
                        .filter_map(|b| b.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default(),
            Err(_) => body.clone(),
        },
        Answer::RpcError { message, .. } => message.clone(),
        other => other.summary(),
    }
}

/// Whether the provoked call was refused (the fault fired; `api_refused`: the API behind a
/// wrapper answered it 400), with its sub-check: the refusal the agent is told as one. A refusal
/// in a result not marked `isError` fired the fault, but the agent was told its call succeeded:
/// that sub-check fails, and none passes on it.
fn refused_as_told(
    checks: &mut Checks,
    probe: &McpProbe,
    refused: &Seen,
    api_refused: bool,
) -> bool {
    let unmarked = matches!(
        refused.answer,
        Answer::ToolResult {
            is_error: false,
            ..
        }
    );
    if refused.read.flagged_success || (api_refused && unmarked) {
        checks.add(
            Grade::lab(),
            "the refusal reaches the agent as one: an error result (isError) or a JSON-RPC error",
            false,
            "an error result or a JSON-RPC error",
            probe.describe(refused),
            &[refused.id],
        );
        return true;
    }
    checks.add(
        Grade::lab(),
        "the fault fired: the provoked call is refused",
        refused.read.refused,
        "an error result or a JSON-RPC error",
        probe.describe(refused),
        &[refused.id],
    )
}
