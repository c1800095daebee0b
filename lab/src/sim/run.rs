//! The scheduler: runs one plan against one tool, in one thread, one step at a time, and records
//! the history.
//!
//! Time is a tick counter; each step takes one tick. At every step a seeded choice picks which of
//! the ready steps runs next, so interleavings vary from seed to seed and replay exactly for the
//! same seed. Nothing reads the wall clock or any other source of randomness.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::tool::{CreateRequest, Outcome, TicketId};

use super::history::{CallResult, Event, History, IntentEnd, IntentInfo, What};
use super::plan::{AttemptPlan, KEY_ORDERS, Plan};
use super::rng::SplitMix64;
use super::subject::{Progress, Subject};

/// The operation type every simulated call uses.
pub const OPERATION: &str = "create_ticket";

/// Runs `plan` against `root`, a fresh tool, and returns what happened.
///
/// Each caller talks to the tool through its own connection ([`TicketTool::connect`](crate::TicketTool::connect)); a crash
/// drops it and a restart opens another. The retention job and the final look at the store use
/// `root`.
///
/// # Errors
/// Any error of the tool while connecting, pruning or reading its state. Errors of a create call
/// are not errors of the run: they are outcomes, recorded in the history.
pub fn run<S: Subject>(plan: &Plan, root: &S) -> Result<History> {
    Scheduler::new(plan, root)?.run()
}

struct Scheduler<'a, S: Subject> {
    plan: &'a Plan,
    root: &'a S,
    rng: SplitMix64,
    now: u64,
    tasks: Vec<Task<S::Pending>>,
    callers: Vec<CallerState<S>>,
    intents: Vec<IntentState>,
    events: Vec<Event>,
    /// When each (caller, key) was last used by a call, and whether the retention job has
    /// deleted its record since.
    last_use: BTreeMap<(usize, String), (u64, bool)>,
}

struct Task<P> {
    ready: u64,
    kind: TaskKind<P>,
}

enum TaskKind<P> {
    Receive { intent: usize },
    Save { intent: usize },
    Attempt(Attempt<P>),
    Restart { caller: usize },
    Prune,
}

struct Attempt<P> {
    intent: usize,
    lane: u32,
    attempts: Vec<AttemptPlan>,
    index: usize,
    pending: Option<P>,
}

struct CallerState<S> {
    scope: Scope,
    up: bool,
    connection: Option<S>,
    /// Intents received but not yet saved: a crash loses them.
    unsaved: Vec<usize>,
    /// Steps the caller has taken, for its planned crash.
    steps: u32,
}

struct IntentState {
    info: IntentInfo,
    key: OperationKey,
    saved: bool,
    lanes_started: u32,
    /// How far the first lane got through its attempts, so a restart continues from there.
    first_lane_next: usize,
    first_lane: Vec<AttemptPlan>,
    lanes: Vec<Vec<AttemptPlan>>,
    arrives: u64,
    save_after: u64,
    fields: [(&'static str, Value); 4],
}

impl<'a, S: Subject> Scheduler<'a, S> {
    fn new(plan: &'a Plan, root: &'a S) -> Result<Self> {
        let mut callers = Vec::new();
        let mut intents = Vec::new();
        let mut tasks = Vec::new();
        for (c, caller) in plan.callers.iter().enumerate() {
            callers.push(CallerState {
                scope: Scope::new(caller.name.as_str(), OPERATION)?,
                up: true,
                connection: None,
                unsaved: Vec::new(),
                steps: 0,
            });
            for intent in &caller.intents {
                let tag = format!("{}/{}", caller.name, intent.name);
                let fields = [
                    ("intent", json!(tag)),
                    (
                        "priority",
                        json!(["low", "normal", "urgent"][tag.len() % 3]),
                    ),
                    ("tags", json!(["simulated", caller.name])),
                    (
                        "title",
                        json!(format!("Ticket {} of {}", intent.name, caller.name)),
                    ),
                ];
                let index = intents.len();
                let payload = payload_text(&fields, 0);
                intents.push(IntentState {
                    info: IntentInfo {
                        caller: c,
                        caller_name: caller.name.clone(),
                        name: intent.name.clone(),
                        key: intent.key.clone(),
                        reuses: intent.reuses.clone(),
                        payload: Payload::from_json_text(&payload)?.canonical().to_owned(),
                        end: IntentEnd::NeverSaved,
                    },
                    key: OperationKey::try_from(intent.key.as_str())?,
                    saved: false,
                    lanes_started: 0,
                    first_lane_next: 0,
                    first_lane: intent.lanes.first().cloned().unwrap_or_default(),
                    lanes: intent.lanes.clone(),
                    arrives: intent.arrives,
                    save_after: intent.save_after,
                    fields,
                });
                tasks.push(Task {
                    ready: intents[index].arrives,
                    kind: TaskKind::Receive { intent: index },
                });
            }
        }
        if let Some(every) = plan.prune_every {
            tasks.push(Task {
                ready: every,
                kind: TaskKind::Prune,
            });
        }
        Ok(Scheduler {
            plan,
            root,
            // A stream of its own, so the scheduler's draws do not depend on how many draws
            // generating the plan took.
            rng: SplitMix64::new(plan.schedule ^ 0x5CED_u64.rotate_left(40)),
            now: 0,
            tasks,
            callers,
            intents,
            events: Vec::new(),
            last_use: BTreeMap::new(),
        })
    }

    // ANCHOR: schedule
    fn run(mut self) -> Result<History> {
        loop {
            let eligible: Vec<usize> = (0..self.tasks.len())
                .filter(|&t| self.is_eligible(&self.tasks[t]))
                .collect();
            let Some(earliest) = eligible.iter().map(|&t| self.tasks[t].ready).min() else {
                break;
            };
            self.now = self.now.max(earliest);
            let ready: Vec<usize> = eligible
                .into_iter()
                .filter(|&t| self.tasks[t].ready <= self.now)
                .collect();
            // The seeded choice of which ready step runs next is the whole interleaving.
            let task = self.tasks.remove(ready[self.rng.index(ready.len())]);
            let caller = self.caller_of(&task);
            self.step(task)?;
            self.now += 1;
            if let Some(caller) = caller {
                self.callers[caller].steps += 1;
                let planned = self.plan.callers[caller].crash.map(|crash| crash.after);
                if planned == Some(self.callers[caller].steps) {
                    self.crash(caller);
                    self.now += 1;
                }
            }
        }
        self.finish()
    }
    // ANCHOR_END: schedule

    /// The caller whose own step this is, if any.
    fn caller_of(&self, task: &Task<S::Pending>) -> Option<usize> {
        match &task.kind {
            TaskKind::Receive { intent } | TaskKind::Save { intent } => {
                Some(self.intents[*intent].info.caller)
            }
            TaskKind::Attempt(attempt) => Some(self.intents[attempt.intent].info.caller),
            TaskKind::Restart { .. } | TaskKind::Prune => None,
        }
    }

    /// Steps of a caller that is down wait for its restart.
    fn is_eligible(&self, task: &Task<S::Pending>) -> bool {
        self.caller_of(task)
            .is_none_or(|caller| self.callers[caller].up)
    }

    fn record(&mut self, what: What) {
        self.events.push(Event {
            time: self.now,
            what,
        });
    }

    fn schedule(&mut self, delay: u64, kind: TaskKind<S::Pending>) {
        self.tasks.push(Task {
            ready: self.now + 1 + delay,
            kind,
        });
    }

    fn step(&mut self, task: Task<S::Pending>) -> Result<()> {
        match task.kind {
            TaskKind::Receive { intent } => {
                let caller = self.intents[intent].info.caller;
                self.callers[caller].unsaved.push(intent);
                self.record(What::Received { intent });
                let delay = self.intents[intent].save_after.saturating_sub(1);
                self.schedule(delay, TaskKind::Save { intent });
            }
            TaskKind::Save { intent } => self.save(intent),
            TaskKind::Attempt(attempt) => self.attempt(attempt)?,
            TaskKind::Restart { caller } => self.restart(caller),
            TaskKind::Prune => {
                self.prune()?;
                // The job keeps running for as long as there is anything else left to do.
                if let Some(every) = self.plan.prune_every
                    && !self.tasks.is_empty()
                {
                    self.schedule(every.saturating_sub(1), TaskKind::Prune);
                }
            }
        }
        Ok(())
    }

    // ANCHOR: save
    /// The durable-caller rule: the intent and its key are saved before anything is sent.
    fn save(&mut self, intent: usize) {
        let caller = self.intents[intent].info.caller;
        self.callers[caller].unsaved.retain(|&i| i != intent);
        let state = &mut self.intents[intent];
        state.saved = true;
        state.info.end = IntentEnd::Open;
        self.record(What::Saved { intent });
        for lane in self.intents[intent].lanes.clone() {
            self.start_lane(intent, lane, 0);
        }
    }
    // ANCHOR_END: save

    fn start_lane(&mut self, intent: usize, attempts: Vec<AttemptPlan>, delay: u64) {
        let state = &mut self.intents[intent];
        state.lanes_started += 1;
        let lane = state.lanes_started;
        let first = attempts.first().map_or(0, |a| a.delay);
        self.schedule(
            delay + first,
            TaskKind::Attempt(Attempt {
                intent,
                lane,
                attempts,
                index: 0,
                pending: None,
            }),
        );
    }

    fn attempt(&mut self, mut attempt: Attempt<S::Pending>) -> Result<()> {
        let intent = attempt.intent;
        if attempt.pending.is_none() && self.intents[intent].info.end != IntentEnd::Open {
            // Another dispatch of the same intent already got its answer.
            return Ok(());
        }
        let caller = self.intents[intent].info.caller;
        let Some(&plan) = attempt.attempts.get(attempt.index) else {
            return Ok(());
        };
        if attempt.lane == 1 {
            self.intents[intent].first_lane_next = attempt.index + 1;
        }
        // A caller opens its connection on its first call, and again after each restart.
        let connection = match self.callers[caller].connection.take() {
            Some(connection) => connection,
            None => self.root.connect()?,
        };
        let state = &self.intents[intent];
        let text = payload_text(&state.fields, plan.order);
        let payload = Payload::from_json_text(&text)?;
        let request = CreateRequest::keyed(&self.callers[caller].scope, &state.key, &payload)
            .with_fault(plan.fault);
        let progress = match attempt.pending.take() {
            None => connection.start(request),
            Some(pending) => connection.resume(request, pending),
        };
        self.callers[caller].connection = Some(connection);
        let state = &self.intents[intent];
        let key = (caller, state.info.key.clone());
        self.last_use.insert(key, (self.now, false));
        let result = match progress {
            Progress::Pending { pending, did } => {
                self.record_call(&attempt, plan, text, CallResult::Pending(did));
                attempt.pending = Some(pending);
                self.schedule(0, TaskKind::Attempt(attempt));
                return Ok(());
            }
            Progress::Done(result) => result,
        };
        let result = match result {
            Ok(Outcome::Created(id)) => CallResult::Created(id),
            Ok(Outcome::Replayed(id)) => CallResult::Replayed(id),
            Err(Error::PayloadConflict { .. }) => CallResult::Conflict,
            Err(Error::OutcomeUnknown { .. }) => CallResult::Unknown,
            Err(Error::InjectedFailure) => {
                CallResult::Failed("injected failure, rolled back".to_owned())
            }
            Err(other) => CallResult::Failed(other.to_string()),
        };
        self.record_call(&attempt, plan, text, result.clone());
        self.answer(attempt, result);
        Ok(())
    }

    fn record_call(
        &mut self,
        attempt: &Attempt<S::Pending>,
        plan: AttemptPlan,
        text: String,
        result: CallResult,
    ) {
        self.record(What::Call {
            intent: attempt.intent,
            lane: attempt.lane,
            attempt: u32::try_from(attempt.index + 1).unwrap_or(u32::MAX),
            fault: plan.fault,
            text,
            result,
        });
    }

    // ANCHOR: answer
    /// What the caller does with an answer: keep a ticket, hand a conflict to a person, and retry
    /// anything uncertain with the same key until its attempts run out.
    fn answer(&mut self, mut attempt: Attempt<S::Pending>, result: CallResult) {
        let intent = attempt.intent;
        let open = self.intents[intent].info.end == IntentEnd::Open;
        match result {
            CallResult::Created(id) | CallResult::Replayed(id) => {
                if open {
                    self.intents[intent].info.end = IntentEnd::Done(id);
                }
            }
            CallResult::Conflict => self.review(intent, "the key names another payload"),
            _ if !open => {}
            _ if attempt.index + 1 < attempt.attempts.len() => {
                attempt.index += 1;
                let delay = attempt.attempts[attempt.index].delay;
                self.schedule(delay, TaskKind::Attempt(attempt));
            }
            _ => self.review(intent, "no answer after every attempt"),
        }
    }
    // ANCHOR_END: answer

    fn review(&mut self, intent: usize, reason: &str) {
        if self.intents[intent].info.end == IntentEnd::Open {
            self.intents[intent].info.end = IntentEnd::Review(reason.to_owned());
            self.record(What::Reviewed {
                intent,
                reason: reason.to_owned(),
            });
        }
    }

    fn crash(&mut self, caller: usize) {
        let state = &mut self.callers[caller];
        state.up = false;
        state.connection = None;
        let lost = std::mem::take(&mut state.unsaved);
        let intents = &self.intents;
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.tasks)
            .into_iter()
            .partition(|task| match &task.kind {
                TaskKind::Save { intent } => intents[*intent].info.caller == caller,
                TaskKind::Attempt(a) => intents[a.intent].info.caller == caller,
                _ => false,
            });
        self.tasks = others;
        for task in mine {
            if let TaskKind::Attempt(attempt) = task.kind
                && attempt.pending.is_some()
                && let Some(&plan) = attempt.attempts.get(attempt.index)
            {
                let text = payload_text(&self.intents[attempt.intent].fields, plan.order);
                self.record_call(&attempt, plan, text, CallResult::Abandoned);
            }
        }
        self.record(What::Crashed { caller, lost });
        let down_for = self.plan.callers[caller]
            .crash
            .map_or(1, |crash| crash.down_for);
        self.schedule(down_for.saturating_sub(1), TaskKind::Restart { caller });
    }

    // ANCHOR: restart
    /// A restarted caller reads its journal and resumes every saved, unanswered intent with the
    /// key it saved. Intents it never saved are gone: there is nothing to resume.
    fn restart(&mut self, caller: usize) {
        self.callers[caller].up = true;
        let resumed: Vec<usize> = (0..self.intents.len())
            .filter(|&i| {
                let state = &self.intents[i];
                state.info.caller == caller && state.saved && state.info.end == IntentEnd::Open
            })
            .collect();
        for &intent in &resumed {
            let state = &self.intents[intent];
            let mut rest: Vec<AttemptPlan> = state.first_lane[state.first_lane_next..].to_vec();
            if rest.is_empty() {
                rest.push(AttemptPlan::PLAIN);
            }
            rest[0].delay = 0;
            self.start_lane(intent, rest, 0);
        }
        self.record(What::Restarted { caller, resumed });
    }
    // ANCHOR_END: restart

    // ANCHOR: prune
    /// The retention job: deletes the record of every key whose last call is older than the
    /// retention the tool applies.
    fn prune(&mut self) -> Result<()> {
        let window = self.root.retention(self.plan.retention);
        let due: Vec<(usize, String, u64)> = self
            .last_use
            .iter()
            .filter(|(_, (at, pruned))| !pruned && self.now - at >= window)
            .map(|((caller, key), (at, _))| (*caller, key.clone(), self.now - at))
            .collect();
        for (caller, key, idle) in due {
            let operation_key = OperationKey::try_from(key.as_str())?;
            if let Some(entry) = self.last_use.get_mut(&(caller, key.clone())) {
                entry.1 = true;
            }
            if self
                .root
                .forget_record(&self.callers[caller].scope, &operation_key)?
            {
                let watermark = self
                    .root
                    .ticket_ids()?
                    .last()
                    .cloned()
                    .unwrap_or(TicketId::Number(0));
                self.record(What::Pruned {
                    caller,
                    key,
                    idle,
                    watermark,
                });
            }
        }
        Ok(())
    }
    // ANCHOR_END: prune

    fn finish(self) -> Result<History> {
        Ok(History {
            plan: self.plan.clone(),
            intents: self.intents.into_iter().map(|state| state.info).collect(),
            events: self.events,
            end: self.root.view()?,
        })
    }
}

/// The payload's JSON text with its fields in order number `order` of [`KEY_ORDERS`]: the same
/// object, spelled differently.
fn payload_text(fields: &[(&'static str, Value); 4], order: u8) -> String {
    let mut remaining: Vec<&(&str, Value)> = fields.iter().collect();
    let mut code = usize::from(order % KEY_ORDERS);
    let mut parts = Vec::with_capacity(4);
    // Decode `order` as a permutation (factorial number system): 0 keeps the sorted order.
    for radix in (1..=4usize).rev() {
        let factorial: usize = (1..radix).product();
        let (name, value) = remaining.remove(code / factorial);
        code %= factorial;
        parts.push(format!("{}:{value}", Value::from(*name)));
    }
    format!("{{{}}}", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_order_spells_the_same_payload() {
        let fields = [
            ("intent", json!("c1/i1")),
            ("priority", json!("low")),
            ("tags", json!(["a"])),
            ("title", json!("T")),
        ];
        let texts: Vec<String> = (0..KEY_ORDERS).map(|o| payload_text(&fields, o)).collect();
        let mut distinct = texts.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), usize::from(KEY_ORDERS));
        let canonical = Payload::from_json_text(&texts[0]).unwrap();
        assert_eq!(texts[0], canonical.canonical());
        for text in &texts {
            assert_eq!(Payload::from_json_text(text).unwrap(), canonical);
        }
    }
}
