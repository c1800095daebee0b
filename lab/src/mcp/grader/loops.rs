//! The lab's scripted agent loops, over MCP, against the grader: no model, the same decisions
//! every run. Two are the loops of the decisions chapter (`crate::sim::agent`), now sending real
//! `tools/call` requests; three show the key designs of [`KeySource`] when the model re-plans
//! after a reconnect.

use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RunningService;
use serde_json::{Value, json};

use super::{ClientGrader, GradeOptions, Report, Schedule};
use crate::error::{Error, Result};
use crate::mcp::wire::{self, KeySource};
use crate::sim::AgentLoop;
use crate::suite::Operation;

/// How long a scripted loop waits for an answer before it treats the call as timed out. A lost
/// reply never comes, so the wait only decides how long a run takes.
pub const LOOP_TIMEOUT: Duration = Duration::from_secs(2);

/// How many times a loop sends one intention before it gives up.
const SENDS: u32 = 3;

/// One scripted loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptedLoop {
    /// A loop of the decisions chapter: [`AgentLoop::FreshCallOnTimeout`] or
    /// [`AgentLoop::SavedKeyOnTimeout`].
    Agent(AgentLoop),
    /// The host made the key once when it approved the ticket; after a timeout the loop
    /// reconnects and the model re-plans (rewords the title), the host fills in its key.
    HostKeyReplan,
    /// The model derives `ticket-<task id>-<purpose>`; after a reconnect it re-plans and picks
    /// another purpose word.
    TaskIdReplan,
    /// The model asks `prepare_ticket` for a key; after a reconnect it re-plans and prepares
    /// again.
    PrepareReplan,
}

impl ScriptedLoop {
    /// Every scripted loop, in the order the book shows them.
    pub const ALL: [ScriptedLoop; 5] = [
        ScriptedLoop::Agent(AgentLoop::FreshCallOnTimeout),
        ScriptedLoop::Agent(AgentLoop::SavedKeyOnTimeout),
        ScriptedLoop::HostKeyReplan,
        ScriptedLoop::TaskIdReplan,
        ScriptedLoop::PrepareReplan,
    ];

    /// Its name, as the book's directive and the tests give it.
    pub fn name(self) -> &'static str {
        match self {
            ScriptedLoop::Agent(AgentLoop::FreshCallOnTimeout) => "fresh-call",
            ScriptedLoop::Agent(AgentLoop::SavedKeyOnTimeout) => "saved-key",
            ScriptedLoop::HostKeyReplan => "host-key-replan",
            ScriptedLoop::TaskIdReplan => "task-id-replan",
            ScriptedLoop::PrepareReplan => "prepare-replan",
        }
    }

    /// The loop of this name.
    pub fn named(name: &str) -> Option<ScriptedLoop> {
        ScriptedLoop::ALL
            .into_iter()
            .find(|each| each.name() == name)
    }

    /// The key design the grader serves it.
    pub fn key_source(self) -> KeySource {
        match self {
            ScriptedLoop::Agent(_) | ScriptedLoop::HostKeyReplan => KeySource::Host,
            ScriptedLoop::TaskIdReplan => KeySource::TaskId,
            ScriptedLoop::PrepareReplan => KeySource::Prepare,
        }
    }

    /// One line on what it does.
    pub fn describe(self) -> &'static str {
        match self {
            ScriptedLoop::Agent(agent) => agent.describe(),
            ScriptedLoop::HostKeyReplan => {
                "the host's key; reconnects, the model rewords the ticket, the host keeps the key"
            }
            ScriptedLoop::TaskIdReplan => {
                "a key from the task id; reconnects, the model picks another purpose word"
            }
            ScriptedLoop::PrepareReplan => {
                "a key from prepare_ticket; reconnects, the model prepares again"
            }
        }
    }
}

type Client = RunningService<RoleClient, ()>;

/// Sends one `create_ticket` (or other tool) call; `None` when no answer came in time (the
/// SDK then sends `notifications/cancelled`).
async fn send(
    client: &Client,
    name: &'static str,
    arguments: JsonObject,
) -> Option<CallToolResult> {
    let request = CallToolRequestParams::new(name).with_arguments(arguments);
    match tokio::time::timeout(LOOP_TIMEOUT, client.peer().call_tool(request)).await {
        Ok(Ok(result)) => Some(result),
        _ => None,
    }
}

fn arguments(key: &str, payload: &Value) -> JsonObject {
    let mut arguments = match payload {
        Value::Object(map) => map.clone(),
        _ => JsonObject::new(),
    };
    arguments.insert(
        wire::OPERATION_KEY.to_owned(),
        Value::String(key.to_owned()),
    );
    arguments
}

fn ticket_reached(result: &Option<CallToolResult>) -> bool {
    result
        .as_ref()
        .is_some_and(|r| r.is_error != Some(true) && r.structured_content.is_some())
}

fn is_conflict(result: &Option<CallToolResult>) -> bool {
    result.as_ref().is_some_and(|r| {
        r.is_error == Some(true)
            && r.structured_content
                .as_ref()
                .and_then(|c| c["code"].as_str())
                == Some(wire::code::CONFLICT)
    })
}

async fn close(client: Client) {
    let _ = client.cancel().await;
}

async fn drive(scripted: ScriptedLoop, grader: &ClientGrader) -> Result<()> {
    let task = Operation::example();
    let payload = Value::Object(task.payload.as_object().clone());
    let mut client = grader.connect().await?;
    match scripted {
        ScriptedLoop::Agent(agent_loop) => {
            // As `crate::sim::agent`: the model asks once; the loop resends a timeout.
            for send_number in 1..=SENDS {
                let key = match agent_loop {
                    AgentLoop::FreshCallOnTimeout => format!("call-{send_number}"),
                    AgentLoop::SavedKeyOnTimeout => task.operation_key.as_str().to_owned(),
                };
                if ticket_reached(
                    &send(&client, wire::CREATE_TICKET, arguments(&key, &payload)).await,
                ) {
                    break;
                }
            }
        }
        ScriptedLoop::HostKeyReplan => {
            let key = "approved-ticket-7f3a";
            let mut planned = payload.clone();
            for _ in 1..=SENDS {
                let answer = send(&client, wire::CREATE_TICKET, arguments(key, &planned)).await;
                if ticket_reached(&answer) {
                    break;
                }
                if is_conflict(&answer) {
                    // The description: resend the arguments the key was first sent with.
                    planned = payload.clone();
                    continue;
                }
                // A timeout: reconnect, and the model plans the call again in other words.
                close(client).await;
                client = grader.connect().await?;
                planned["title"] = json!("Printer on the third floor jams");
            }
        }
        ScriptedLoop::TaskIdReplan => {
            let purposes = ["printer", "jam", "printer-jam"];
            for purpose in purposes {
                let key = format!("ticket-T-1042-{purpose}");
                if ticket_reached(
                    &send(&client, wire::CREATE_TICKET, arguments(&key, &payload)).await,
                ) {
                    break;
                }
                close(client).await;
                client = grader.connect().await?;
            }
        }
        ScriptedLoop::PrepareReplan => {
            for _ in 1..=SENDS {
                let prepared = send(&client, wire::PREPARE_TICKET, JsonObject::new()).await;
                let key = prepared
                    .and_then(|r| r.structured_content)
                    .and_then(|c| c[wire::OPERATION_KEY].as_str().map(str::to_owned))
                    .ok_or_else(|| {
                        Error::from(Box::<dyn std::error::Error + Send + Sync>::from(
                            "prepare_ticket returned no key",
                        ))
                    })?;
                if ticket_reached(
                    &send(&client, wire::CREATE_TICKET, arguments(&key, &payload)).await,
                ) {
                    break;
                }
                close(client).await;
                client = grader.connect().await?;
            }
        }
    }
    close(client).await;
    Ok(())
}

/// Runs `scripted` against a fresh grader that loses the first reply of every intention, and
/// returns the grader's report.
///
/// # Errors
/// As [`ClientGrader::open`] and [`ClientGrader::report`].
pub fn run(scripted: ScriptedLoop) -> Result<Report> {
    let grader = ClientGrader::open(GradeOptions {
        caller: "support-agent".to_owned(),
        database: None,
        schedule: Schedule::new(super::Calls::parse("first").unwrap_or_default(), None)
            .unwrap_or_default(),
        key_source: scripted.key_source(),
        calls: None,
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            action: "starting the scripted loop's runtime".to_owned(),
            source,
        })?;
    runtime.block_on(drive(scripted, &grader))?;
    runtime.shutdown_timeout(Duration::from_secs(5));
    grader.report()
}
