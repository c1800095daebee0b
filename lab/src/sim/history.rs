//! What happened in one simulated history: every step, in order, and what the store held at the
//! end. The checker reads it; the timeline prints it.

use crate::tool::{Fault, TicketId};

use super::plan::Plan;
use super::subject::StoreView;

/// One run of a plan.
#[derive(Clone, Debug)]
pub struct History {
    /// The plan that was run.
    pub plan: Plan,
    /// Every intent of every caller, in plan order; events refer to them by index.
    pub intents: Vec<IntentInfo>,
    /// What happened, in the order it happened.
    pub events: Vec<Event>,
    /// The tool's tickets and records after the last step.
    pub end: StoreView,
}

/// One intent and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentInfo {
    /// Index of its caller in the plan.
    pub caller: usize,
    /// The caller's name (its scope).
    pub caller_name: String,
    /// The intent's name within its caller.
    pub name: String,
    /// The operation key it was saved with.
    pub key: String,
    /// The name of the earlier intent whose key it reuses, if any.
    pub reuses: Option<String>,
    /// Its payload's canonical text.
    pub payload: String,
    /// How it ended.
    pub end: IntentEnd,
}

impl IntentInfo {
    /// The tag written into the intent's payload, `caller/intent`, by which tickets are traced back
    /// to the intent that asked for them.
    pub fn tag(&self) -> String {
        format!("{}/{}", self.caller_name, self.name)
    }
}

/// Where an intent stands at the end of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntentEnd {
    /// The caller crashed before saving it: there is nothing to resume, and it was never sent.
    NeverSaved,
    /// Saved, but neither answered nor handed to a person (the checker reports this).
    Open,
    /// The caller learned its ticket.
    Done(TicketId),
    /// The caller gave up and marked it for review by a person.
    Review(String),
}

/// One step of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The simulated time, in ticks.
    pub time: u64,
    /// What happened.
    pub what: What,
}

/// The kinds of step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    /// A caller received an intent; it is only in memory so far.
    Received {
        /// The intent.
        intent: usize,
    },
    /// The caller saved the intent and its key in its journal, before any call.
    Saved {
        /// The intent.
        intent: usize,
    },
    /// One step of one create call.
    Call {
        /// The intent.
        intent: usize,
        /// Which dispatch of the intent this is (1, 2, ...); two in flight at once are concurrent
        /// duplicates.
        lane: u32,
        /// The attempt's number within its lane, from 1.
        attempt: u32,
        /// The injected fault.
        fault: Fault,
        /// The payload's JSON text as sent.
        text: String,
        /// What the step returned.
        result: CallResult,
    },
    /// A caller gave up on an intent and marked it for review.
    Reviewed {
        /// The intent.
        intent: usize,
        /// Why.
        reason: String,
    },
    /// A caller crashed; intents it had received but not saved are lost.
    Crashed {
        /// The caller.
        caller: usize,
        /// Intents received but never saved.
        lost: Vec<usize>,
    },
    /// A caller restarted and resumed every saved, unanswered intent with its saved key.
    Restarted {
        /// The caller.
        caller: usize,
        /// The intents resumed.
        resumed: Vec<usize>,
    },
    /// The retention job deleted a key's operation record.
    Pruned {
        /// The caller (scope) of the key.
        caller: usize,
        /// The key.
        key: String,
        /// Ticks since the key's last call.
        idle: u64,
        /// The highest ticket identifier at that moment: tickets up to it were created before.
        watermark: TicketId,
    },
}

/// What one step of a create returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallResult {
    /// A new ticket.
    Created(TicketId),
    /// A replay of an earlier ticket.
    Replayed(TicketId),
    /// A payload conflict: the key names another payload.
    Conflict,
    /// The outcome is unknown (a lost reply).
    Unknown,
    /// The call failed and reported it (an injected failure, rolled back).
    Failed(String),
    /// The create is not finished; this step did what the text says.
    Pending(String),
    /// The caller crashed before this create could finish its next step.
    Abandoned,
}

impl CallResult {
    /// The ticket a success reported.
    pub fn ticket(&self) -> Option<TicketId> {
        match self {
            CallResult::Created(id) | CallResult::Replayed(id) => Some(id.clone()),
            _ => None,
        }
    }

    /// True when the caller cannot tell whether the call took effect.
    pub fn is_uncertain(&self) -> bool {
        matches!(
            self,
            CallResult::Unknown | CallResult::Failed(_) | CallResult::Abandoned
        )
    }
}
