//! The prompt anti-pattern, run: a scripted agent told in its prompt never to retry, or to reuse
//! its key, still creates the ticket twice when the loop around it retries a timed-out call as a
//! fresh call. The prompt reaches the model; the retry is decided by the loop, which never reads
//! it.
//!
//! ```
//! use lab::sim::{AgentLoop, PROMPTS, run_agent};
//!
//! for prompt in PROMPTS {
//!     // The model obeys: it asks for the ticket once. The loop sends twice.
//!     let run = run_agent(AgentLoop::FreshCallOnTimeout, prompt)?;
//!     assert_eq!((run.model_calls, run.sends, run.tickets), (1, 2, 2));
//!     // A loop that saved the key when it accepted the task: one ticket.
//!     let run = run_agent(AgentLoop::SavedKeyOnTimeout, prompt)?;
//!     assert_eq!(run.tickets, 1);
//! }
//! # Ok::<(), lab::Error>(())
//! ```

use std::fmt;

use crate::error::{Error, Result};
use crate::key::OperationKey;
use crate::sqlite::SqliteStore;
use crate::suite::Operation;
use crate::tool::{CreateRequest, Fault, Outcome, TicketTool};

/// The instructions the scripted agent is run with: none, "never retry", "reuse the key".
pub const PROMPTS: [&str; 3] = [
    "Create the ticket.",
    "Create the ticket. Never retry a tool call.",
    "Create the ticket. On a timeout, reuse the idempotency key.",
];

/// How many times a loop sends one tool call before it gives up.
const SENDS_PER_CALL: u32 = 3;

/// How the loop around the model handles a tool call that timed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentLoop {
    /// The loop sends the call again as a new call: a new call id, which the tool adapter uses
    /// as the idempotency key. Many agent loops number their calls this way.
    FreshCallOnTimeout,
    /// The loop made the key when it accepted the task, saved it, and sends it on every attempt.
    SavedKeyOnTimeout,
}

impl AgentLoop {
    /// One line on what the loop does.
    pub fn describe(self) -> &'static str {
        match self {
            AgentLoop::FreshCallOnTimeout => "retries a timeout as a new call, new key",
            AgentLoop::SavedKeyOnTimeout => "retries a timeout with the key it saved",
        }
    }
}

/// What one scripted agent run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentRun {
    /// The loop that ran the model.
    pub agent_loop: AgentLoop,
    /// The prompt the model was given.
    pub prompt: &'static str,
    /// How many tool calls the model asked for.
    pub model_calls: u32,
    /// How many creates the loop sent to the tool.
    pub sends: u32,
    /// How many tickets the store holds afterwards.
    pub tickets: u64,
}

impl fmt::Display for AgentRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "prompt: {}", self.prompt)?;
        write!(
            f,
            "  model asked {} time(s), loop sent {}, tickets: {}",
            self.model_calls, self.sends, self.tickets
        )
    }
}

/// What the scripted model answers when shown the conversation so far.
enum ModelTurn {
    /// Ask for the ticket.
    CallCreateTicket,
    /// Stop: the task is done, or the prompt forbids another try.
    Finish,
}

/// The scripted model. It follows its prompt wherever the prompt can reach: it asks for the
/// ticket once, and after a failed call it asks again only if the prompt allows a retry.
fn scripted_model(prompt: &str, results: &[Result<Outcome>]) -> ModelTurn {
    match results.last() {
        None => ModelTurn::CallCreateTicket,
        Some(Ok(_)) => ModelTurn::Finish,
        Some(Err(_)) if prompt.contains("Never retry") => ModelTurn::Finish,
        Some(Err(_)) => ModelTurn::CallCreateTicket,
    }
}

/// Runs the scripted agent with `prompt` under `agent_loop`, against a fresh lab store whose
/// first reply is lost (the call times out after the ticket was committed).
///
/// # Errors
/// Any error of the store other than the injected lost reply.
pub fn run_agent(agent_loop: AgentLoop, prompt: &'static str) -> Result<AgentRun> {
    let store = SqliteStore::temporary()?;
    let task = Operation::example();
    let mut results = Vec::new();
    let (mut model_calls, mut sends) = (0, 0);
    while let ModelTurn::CallCreateTicket = scripted_model(prompt, &results) {
        model_calls += 1;
        match send_tool_call(&store, &task, agent_loop, &mut sends) {
            Err(Error::OutcomeUnknown { key, reason }) => {
                results.push(Err(Error::OutcomeUnknown { key, reason }));
            }
            answer => results.push(Ok(answer?)),
        }
    }
    Ok(AgentRun {
        agent_loop,
        prompt,
        model_calls,
        sends,
        tickets: store.count_tickets()?,
    })
}

// ANCHOR: agent_loop
/// The loop sends the model's tool call, and on a timeout sends it
/// again. The prompt is not an argument: the loop never reads it.
fn send_tool_call(
    store: &SqliteStore,
    task: &Operation,
    agent_loop: AgentLoop,
    sends: &mut u32,
) -> Result<Outcome> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        *sends += 1;
        let key = match agent_loop {
            // A new call id on every send, used as the key.
            AgentLoop::FreshCallOnTimeout => OperationKey::try_from(format!("call-{sends}"))?,
            // The key made and saved when the task was accepted.
            AgentLoop::SavedKeyOnTimeout => task.operation_key.clone(),
        };
        // The first reply is lost: the tool call times out.
        let fault = if *sends == 1 {
            Fault::LoseReply
        } else {
            Fault::None
        };
        let request = CreateRequest::keyed(&task.scope, &key, &task.payload);
        match store.create(request.with_fault(fault)) {
            Err(Error::OutcomeUnknown { .. }) if attempt < SENDS_PER_CALL => {}
            answer => return answer,
        }
    }
}
// ANCHOR_END: agent_loop

/// The book's text of every prompt under both loops.
///
/// # Errors
/// Any error of [`run_agent`].
pub fn agent_table() -> Result<String> {
    let mut text = String::new();
    for agent_loop in [AgentLoop::FreshCallOnTimeout, AgentLoop::SavedKeyOnTimeout] {
        text.push_str(&format!("loop: {}\n", agent_loop.describe()));
        for prompt in PROMPTS {
            text.push_str(&format!("{}\n", run_agent(agent_loop, prompt)?));
        }
    }
    Ok(text)
}
