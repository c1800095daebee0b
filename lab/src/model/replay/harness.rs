//! The replay itself: the model's path, one action at a time, done by the real system and
//! compared with the model's step.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use stateright::Model;

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::model::{
    Action, Answer, INTENTS, Lookup, Message, Process, Protocol, Row, RowState, State, Ticket,
    Variant, tag,
};
use crate::payload::Payload;
use crate::runner::{Runner, State as RunnerState};
use crate::suite::Operation;
use crate::tool::{Outcome, TicketId};

use super::service::{RealRequest, Served, Service};
use super::wire::{Client, Delivery, Ended, Hub, Point, Slot, start_runner};

/// Where the real system and the model parted: the step, the model's action, what the model
/// did and what the real system did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The step, from 0; the path's length for the check after its last step.
    pub step: usize,
    /// The model's action at that step, if any.
    pub action: Option<Action>,
    /// What the model's step did or needs.
    pub model: String,
    /// What the real system did.
    pub real: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.action {
            Some(action) => write!(f, "step {} ({action:?}): ", self.step)?,
            None => write!(f, "after the last step ({}): ", self.step)?,
        }
        write!(f, "the model {}; the real system {}", self.model, self.real)
    }
}

/// A path the real system took step for step.
#[derive(Clone, Debug)]
pub struct Replayed {
    /// The model's actions, in order.
    pub actions: Vec<Action>,
    /// What the real system did at each step, in words.
    pub real: Vec<String>,
    /// What the real system holds at the end, in the model's terms: each runner's row as its
    /// file holds it, the tickets the service created (each traced to the payload it carries),
    /// and the answers that broke a rule.
    pub observed: State,
    /// The properties broken in the real system at the end.
    pub broken: Vec<&'static str>,
}

/// A request or a reply on the replay's network, paired with the model's message.
#[derive(Clone, Debug)]
enum Flight {
    Request(RealRequest),
    Reply(Result<Outcome, String>),
}

/// Replays `actions` on the real system of `protocol`'s variant: its runners' client and its
/// service. See [`replay_with`].
///
/// # Errors
/// The first [`Mismatch`].
pub fn replay(protocol: &Protocol, actions: &[Action]) -> std::result::Result<Replayed, Mismatch> {
    replay_with(protocol, protocol.variant, actions)
}

/// Replays `actions`, a path of the model `protocol`, on the real system of variant `real`
/// (which differs from `protocol.variant` only to show that a disagreement is caught).
///
/// # Errors
/// The first [`Mismatch`]: a step the model does not allow, or one the real system did
/// otherwise; a failure of the real system's machinery is a mismatch too, saying so.
pub fn replay_with(
    protocol: &Protocol,
    real: Variant,
    actions: &[Action],
) -> std::result::Result<Replayed, Mismatch> {
    let mut replay = Replay::start(protocol, real).map_err(|err| Mismatch {
        step: 0,
        action: actions.first().copied(),
        model: "starts with the service up and no runner".to_owned(),
        real: format!("could not start: {err}"),
    })?;
    let outcome = replay.run(actions);
    replay.stop();
    outcome
}

struct Replay {
    protocol: Protocol,
    real: Variant,
    folder: tempfile::TempDir,
    hub: Arc<Hub>,
    service: Service,
    threads: Vec<Option<JoinHandle<()>>>,
    flights: Vec<(Message, Flight)>,
    lookups: Vec<(Lookup, RealRequest)>,
    state: State,
    observed: State,
    log: Vec<String>,
}

/// The result of one real step: what it did, or what it did that the model's step did not.
type Step = std::result::Result<String, (String, String)>;

fn scope(intent: u8) -> Result<Scope> {
    let scope = INTENTS[usize::from(intent)].scope;
    Scope::new(format!("c{}", scope + 1), "create_ticket")
}

/// Intent `index`'s payload, as its runner saves it.
pub(super) fn payload(index: u8) -> Result<Payload> {
    let tag = tag(index);
    Payload::from_json_text(&format!(
        r#"{{"intent":"{tag}","priority":"normal","title":"Ticket of {tag}"}}"#
    ))
}

/// The intent whose payload `payload` is.
fn intent_of(payload: &Payload) -> Option<u8> {
    let tag = payload.as_object().get("intent")?.as_str()?;
    (0..INTENTS.len() as u8).find(|&i| crate::model::tag(i) == tag)
}

impl Replay {
    fn start(protocol: &Protocol, real: Variant) -> Result<Replay> {
        let folder = tempfile::tempdir().map_err(|source| Error::TemporaryFolder { source })?;
        let service = Service::start(Served::of(real), folder.path())?;
        let runners = usize::from(protocol.bounds.callers);
        let state =
            protocol
                .init_states()
                .into_iter()
                .next()
                .ok_or_else(|| Error::ScenarioFailed {
                    scenario: "replay",
                    expected: "an initial state".to_owned(),
                    observed: "none".to_owned(),
                })?;
        Ok(Replay {
            protocol: *protocol,
            real,
            folder,
            hub: Hub::new(runners),
            service,
            threads: (0..runners).map(|_| None).collect(),
            flights: Vec::new(),
            lookups: Vec::new(),
            observed: state.clone(),
            state,
            log: Vec::new(),
        })
    }

    fn file(&self, runner: u8) -> PathBuf {
        self.folder.path().join(format!("runner-{runner}.sqlite3"))
    }

    fn run(&mut self, actions: &[Action]) -> std::result::Result<Replayed, Mismatch> {
        for (step, &action) in actions.iter().enumerate() {
            let mismatch = |(model, real): (String, String)| Mismatch {
                step,
                action: Some(action),
                model,
                real,
            };
            let mut enabled = Vec::new();
            self.protocol.actions(&self.state, &mut enabled);
            let next = enabled
                .contains(&action)
                .then(|| self.protocol.next_state(&self.state, action))
                .flatten()
                .ok_or_else(|| {
                    mismatch((
                        "does not allow this step here".to_owned(),
                        "was asked to take it".to_owned(),
                    ))
                })?;
            let did = self.step(action, &next).map_err(mismatch)?;
            self.state = next;
            self.compare_tickets().map_err(mismatch)?;
            self.log.push(did);
        }
        let end = |(model, real): (String, String)| Mismatch {
            step: actions.len(),
            action: None,
            model,
            real,
        };
        self.compare_rows().map_err(end)?;
        let broken = self.broken();
        Ok(Replayed {
            actions: actions.to_vec(),
            real: self.log.clone(),
            observed: self.observed.clone(),
            broken,
        })
    }

    fn stop(&mut self) {
        {
            let mut slots = self.hub.lock();
            for slot in slots.iter_mut().filter(|s| s.at.is_some()) {
                slot.delivery = Some(Delivery::Crash);
            }
        }
        self.hub.notify();
        for thread in self.threads.iter_mut().filter_map(Option::take) {
            let _ = thread.join();
        }
    }
}

/// A failure of the replay's machinery, as a mismatch's two sides.
fn machinery(err: &Error) -> (String, String) {
    (
        "needs the step done".to_owned(),
        format!("failed to do it: {err}"),
    )
}

impl Replay {
    fn step(&mut self, action: Action, next: &State) -> Step {
        match action {
            Action::Save(i) => self.save(i, next),
            Action::Send(i) => self.send(i, next),
            Action::Timeout(i) => {
                self.drop_replies(i);
                let lost = Error::OutcomeUnknown {
                    key: None,
                    reason: "no reply within the runner's wait".to_owned(),
                };
                self.answer(i, Delivery::Answer(Err(lost)), next)
                    .map(|s| format!("{} times out: {s}", tag(i)))
            }
            Action::Receive(i) => self.receive(i, next),
            Action::Crash(i) => self.crash(i),
            Action::Restart(i) | Action::Rerun(i) => {
                self.start_process(i, None)?;
                self.settled(i, next)
                    .map(|s| format!("{} starts again: {s}", tag(i)))
            }
            Action::Deliver(index) => self.deliver(index, next),
            Action::Write(index) => self.write(index, next),
            Action::Lose(index) => {
                let at = self.flight(&self.state.network[index])?;
                self.flights.remove(at);
                Ok(format!("the network loses request {index}"))
            }
            Action::Duplicate(index) => {
                let at = self.flight(&self.state.network[index])?;
                self.flights.push(self.flights[at].clone());
                Ok(format!("the network delivers request {index} twice"))
            }
            Action::CrashService => {
                self.service.crash();
                self.hub.up.store(false, Ordering::SeqCst);
                self.flights
                    .retain(|(_, f)| !matches!(f, Flight::Request(_)));
                self.lookups.clear();
                Ok("the service stops; requests in flight are lost".to_owned())
            }
            Action::RestartService => {
                self.service.restart().map_err(|e| machinery(&e))?;
                self.hub.up.store(true, Ordering::SeqCst);
                Ok("the service starts again on its database".to_owned())
            }
            Action::Prune(index) => self.prune(index),
        }
    }

    fn start_process(
        &mut self,
        i: u8,
        operation: Option<Operation>,
    ) -> std::result::Result<(), (String, String)> {
        let runner = usize::from(i);
        if let Some(old) = self.threads[runner].take() {
            let _ = old.join();
        }
        let client = Client::of(self.real);
        let thread = start_runner(
            &self.hub,
            runner,
            self.file(i),
            client,
            self.protocol.bounds.sends,
            operation,
        )
        .map_err(|e| machinery(&e))?;
        self.threads[runner] = Some(thread);
        Ok(())
    }

    fn save(&mut self, i: u8, next: &State) -> Step {
        let key = OperationKey::try_from("k1".to_owned()).map_err(|e| machinery(&e))?;
        let operation = Operation {
            scope: scope(i).map_err(|e| machinery(&e))?,
            operation_key: key,
            payload: payload(i).map_err(|e| machinery(&e))?,
        };
        self.start_process(i, Some(operation))?;
        self.settled(i, next)
            .map(|s| format!("{} saves its operation: {s}", tag(i)))
    }

    /// Waits for runner `i` to stop before its next send or to end, and checks that against
    /// the model's process in `next`.
    fn settled(&self, i: u8, next: &State) -> Step {
        let runner = usize::from(i);
        let reached =
            |s: &[Slot]| matches!(s[runner].at, Some(Point::Ready)) || s[runner].ended.is_some();
        if !self.hub.wait_for(reached) {
            return Err((
                "has the runner send or finish".to_owned(),
                format!(
                    "runner {} did neither within {:?}",
                    tag(i),
                    super::wire::SETTLE
                ),
            ));
        }
        let slots = self.hub.lock();
        let slot = &slots[runner];
        let process = next.runners[runner].process;
        match (process, &slot.at, slot.ended.as_ref()) {
            (Process::Ready { .. }, Some(Point::Ready), _) => Ok("about to send".to_owned()),
            (Process::Exited | Process::Done, None, Some(Ended::Returned)) => {
                drop(slots);
                self.ended_as_modelled(i, next)
            }
            (process, at, ended) => Err((
                format!("has runner {} {process:?}", tag(i)),
                match (at, ended) {
                    (Some(at), _) => format!("has it stopped at {at:?}"),
                    (None, Some(ended)) => format!("has its run end: {ended:?}"),
                    (None, None) => "has it neither send nor end".to_owned(),
                },
            )),
        }
    }
}

impl Replay {
    /// A run ended: the runner's file must hold the state the model's row has.
    fn ended_as_modelled(&self, i: u8, next: &State) -> Step {
        let real = self
            .real_row(i)
            .map_err(|e| machinery(&e))?
            .map(|r| r.state);
        let model = next.runners[usize::from(i)].row.map(|r| r.state);
        if real == model {
            return Ok(format!("the run ended: {}", words(real)));
        }
        Err((
            format!("ends the run of {} {}", tag(i), words(model)),
            format!("ended it {}", words(real)),
        ))
    }
}

/// A row's state in words.
fn words(state: Option<RowState>) -> String {
    match state {
        None => "with no row".to_owned(),
        Some(RowState::Pending) => "pending".to_owned(),
        Some(RowState::Held) => "held (nothing took effect)".to_owned(),
        Some(RowState::Succeeded(id)) => format!("succeeded, ticket {id}"),
        Some(RowState::Rejected) => "rejected".to_owned(),
        Some(RowState::Review) => "in review (the outcome is unknown)".to_owned(),
    }
}

/// A real answer in the model's terms, or its error's text.
fn answer_of(real: &Result<Outcome, String>) -> Option<Answer> {
    let id = |t: &TicketId| t.as_i64().and_then(|n| u8::try_from(n).ok());
    match real {
        Ok(Outcome::Created(t)) => id(t).map(Answer::Created),
        Ok(Outcome::Replayed(t)) => id(t).map(Answer::Replayed),
        Err(text) if text.starts_with("conflict:") => Some(Answer::Conflict),
        Err(text) if text.starts_with("expired:") => Some(Answer::Expired),
        Err(_) => None,
    }
}

/// A real create's result, kept as data: errors the runner tells apart keep their kind.
fn kept(result: Result<Outcome>) -> Result<Outcome, String> {
    result.map_err(|err| match err {
        Error::PayloadConflict { .. } => format!("conflict: {err}"),
        Error::KeyExpired { .. } => format!("expired: {err}"),
        other => other.to_string(),
    })
}

/// The same result, as the runner's tool returns it.
fn unkept(result: &Result<Outcome, String>, key: &str) -> Result<Outcome> {
    match result {
        Ok(outcome) => Ok(outcome.clone()),
        Err(text) if text.starts_with("conflict:") => Err(Error::PayloadConflict {
            key: key.to_owned(),
        }),
        Err(text) if text.starts_with("expired:") => Err(Error::KeyExpired {
            key: key.to_owned(),
        }),
        Err(text) => Err(Error::OutcomeUnknown {
            key: Some(key.to_owned()),
            reason: text.clone(),
        }),
    }
}

impl Replay {
    fn send(&mut self, i: u8, next: &State) -> Step {
        let runner = usize::from(i);
        if !matches!(self.hub.lock()[runner].at, Some(Point::Ready)) {
            return Err((
                format!("has {} send", tag(i)),
                "has it not stopped before a send".to_owned(),
            ));
        }
        self.hub.lock()[runner].delivery = Some(Delivery::Go);
        self.hub.notify();
        let sending = |s: &[Slot]| {
            matches!(s[runner].at, Some(Point::Sending(_))) || s[runner].ended.is_some()
        };
        self.hub.wait_for(sending);
        let request = {
            let mut slots = self.hub.lock();
            match slots[runner].at.take() {
                Some(Point::Sending(request)) => {
                    slots[runner].at = Some(Point::Waiting);
                    request
                }
                other => {
                    slots[runner].at = other.clone();
                    return Err((
                        format!("has {} send", tag(i)),
                        format!("has it at {other:?}, ended {:?}", slots[runner].ended),
                    ));
                }
            }
        };
        let found = next
            .network
            .iter()
            .find(|m| {
                matches!(m, Message::Request { from, attempt, .. }
                if *from == i && Some(*attempt) == next.runners[runner].row.map(|r| r.attempts))
            })
            .copied();
        let Some(
            message @ Message::Request {
                request: sent,
                attempt,
                ..
            },
        ) = found
        else {
            // The service is down: the connection is refused, for real.
            let refused = self.service.refused(&request);
            let text = format!("{:?}", refused.as_ref().err());
            return self.answer(i, Delivery::Answer(refused), next).map(|s| {
                format!(
                    "{} sends key {}, refused ({text}): {s}",
                    tag(i),
                    request.key
                )
            });
        };
        same_send(i, &request, &sent, attempt)?;
        self.flights
            .push((message, Flight::Request(request.clone())));
        Ok(format!("{} sends key {}", tag(i), request.key))
    }

    /// Gives runner `i`, waiting in its tool, `delivery`, and checks where it goes next.
    fn answer(&mut self, i: u8, delivery: Delivery, next: &State) -> Step {
        let runner = usize::from(i);
        {
            let mut slots = self.hub.lock();
            if !matches!(slots[runner].at, Some(Point::Waiting)) {
                return Err((
                    format!("has {} wait for an answer", tag(i)),
                    format!("has it at {:?}", slots[runner].at),
                ));
            }
            slots[runner].delivery = Some(delivery);
        }
        self.hub.notify();
        // Let the runner take the delivery before looking where it went.
        let taken = self.hub.wait_for(|s| s[runner].delivery.is_none());
        if !taken {
            return Err((
                "has the runner take its answer".to_owned(),
                "it did not".to_owned(),
            ));
        }
        self.settled(i, next)
    }

    fn receive(&mut self, i: u8, next: &State) -> Step {
        let at = self
            .flights
            .iter()
            .position(|(m, _)| matches!(m, Message::Reply { to, .. } if *to == i))
            .ok_or_else(|| (format!("has a reply for {}", tag(i)), "has none".to_owned()))?;
        let (_, flight) = self.flights.remove(at);
        let Flight::Reply(result) = flight else {
            return Err(("has a reply".to_owned(), "has a request".to_owned()));
        };
        let text = format!("{result:?}");
        self.answer(i, Delivery::Answer(unkept(&result, "k1")), next)
            .map(|s| format!("{} reads {text}: {s}", tag(i)))
    }

    fn crash(&mut self, i: u8) -> Step {
        let runner = usize::from(i);
        self.drop_replies(i);
        {
            let mut slots = self.hub.lock();
            if slots[runner].at.is_none() {
                return Err((
                    format!("crashes {} while it runs", tag(i)),
                    "has it not running".to_owned(),
                ));
            }
            slots[runner].delivery = Some(Delivery::Crash);
        }
        self.hub.notify();
        let crashed = self.hub.wait_for(|s| s[runner].ended.is_some());
        if let Some(thread) = self.threads[runner].take() {
            let _ = thread.join();
        }
        let ended = self.hub.lock()[runner].ended.clone();
        match ended {
            Some(Ended::Crashed) if crashed => Ok(format!("{} crashes", tag(i))),
            other => Err((
                format!("crashes {} in a call", tag(i)),
                format!("ended {other:?}"),
            )),
        }
    }

    fn drop_replies(&mut self, i: u8) {
        self.flights
            .retain(|(m, _)| !matches!(m, Message::Reply { to, .. } if *to == i));
    }

    /// Where `message` is on the real network.
    fn flight(&self, message: &Message) -> std::result::Result<usize, (String, String)> {
        self.flights
            .iter()
            .position(|(m, _)| m == message)
            .ok_or_else(|| (format!("has {message:?} in flight"), "does not".to_owned()))
    }
}

/// Whether runner `i`'s real request is the model's `sent`, its send number `attempt`: its row
/// saved with the send already counted, the same key, its own payload, spelled as the model
/// spells it.
fn same_send(
    i: u8,
    request: &RealRequest,
    sent: &crate::model::Request,
    attempt: u8,
) -> std::result::Result<(), (String, String)> {
    let model_key = sent.key.to_string();
    let Some(counted) = request.sends else {
        return Err((
            format!("has {} send key {model_key} with its row saved", tag(i)),
            format!(
                "sends key {} with no row for it in the runner's file",
                request.key
            ),
        ));
    };
    if counted != u32::from(attempt) {
        return Err((
            format!(
                "has {} send key {model_key} as send {attempt}, counted in its file before it \
                 goes out",
                tag(i)
            ),
            format!(
                "sends key {} while its file counts {counted} send(s)",
                request.key
            ),
        ));
    }
    let own = intent_of(&request.payload) == Some(i);
    let respelled = request
        .payload
        .as_received()
        .is_some_and(|t| !t.starts_with("{\"intent\""));
    if request.key.as_str() != model_key || !own || respelled != (sent.text.spelling == 1) {
        return Err((
            format!(
                "sends key {model_key}, payload of {}, spelling {}",
                tag(i),
                sent.text.spelling
            ),
            format!(
                "sends key {}, payload {:?}",
                request.key,
                request.payload.as_received()
            ),
        ));
    }
    Ok(())
}

/// A real key in the model's terms: `k1` is generation 1, `k1~n` generation n.
fn key_of(key: &OperationKey) -> crate::model::Key {
    let generation = key
        .as_str()
        .rsplit_once('~')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(1);
    crate::model::Key(generation)
}

impl Replay {
    fn deliver(&mut self, index: usize, next: &State) -> Step {
        let message = self.state.network[index];
        let Message::Request {
            from,
            attempt,
            request: sent,
        } = message
        else {
            return Err((
                "delivers a request".to_owned(),
                "was given a reply".to_owned(),
            ));
        };
        let at = self.flight(&message)?;
        let (_, Flight::Request(real)) = self.flights.remove(at) else {
            return Err((
                "delivers a request".to_owned(),
                "holds a reply there".to_owned(),
            ));
        };
        let before = self.tickets().map_err(|e| machinery(&e))?;
        let result = self
            .service
            .deliver(&real)
            .map_err(|e| machinery(&e))?
            .map(kept);
        let compare = self.protocol.compare();
        let model = if self.protocol.variant == Variant::CheckThenWrite {
            self.state.store.lookup(&sent, compare)
        } else {
            Some(self.state.store.clone().create(&sent, compare))
        };
        let Some(result) = result else {
            if model.is_some() {
                return Err((
                    format!("answers {model:?}"),
                    "only looked the key up".to_owned(),
                ));
            }
            self.lookups.push((
                Lookup {
                    from,
                    attempt,
                    request: sent,
                },
                real,
            ));
            return Ok(format!("the service looks key {} up: no record", sent.key));
        };
        if answer_of(&result) != model {
            return Err((format!("answers {model:?}"), format!("answered {result:?}")));
        }
        self.observe(&real, &result, before)?;
        self.reply(from, attempt, result.clone(), next);
        Ok(format!(
            "the service answers {} for key {}: {result:?}",
            tag(from),
            real.key
        ))
    }

    fn write(&mut self, index: usize, next: &State) -> Step {
        let lookup = self.state.lookups[index];
        let at = self
            .lookups
            .iter()
            .position(|(l, _)| *l == lookup)
            .ok_or_else(|| (format!("has {lookup:?} looked up"), "has not".to_owned()))?;
        let (_, real) = self.lookups.remove(at);
        let before = self.tickets().map_err(|e| machinery(&e))?;
        let result = kept(self.service.write(&real).map_err(|e| machinery(&e))?);
        let model = self.state.store.clone().write(&lookup.request);
        if answer_of(&result) != Some(model) {
            return Err((format!("writes {model:?}"), format!("wrote {result:?}")));
        }
        self.observe(&real, &result, before)?;
        self.reply(lookup.from, lookup.attempt, result.clone(), next);
        Ok(format!(
            "the service writes for {}: {result:?}",
            tag(lookup.from)
        ))
    }

    /// Puts the service's answer on the network if the model's step did (the runner still
    /// waits on that send).
    fn reply(&mut self, to: u8, attempt: u8, result: Result<Outcome, String>, next: &State) {
        let waiting = next.network.iter().find(
            |m| matches!(m, Message::Reply { to: t, attempt: a, .. } if *t == to && *a == attempt),
        );
        if let Some(message) = waiting {
            self.flights.push((*message, Flight::Reply(result)));
        }
    }

    fn prune(&mut self, index: usize) -> Step {
        let record = self.state.store.records[index];
        let scope = Scope::new(format!("c{}", record.scope + 1), "create_ticket")
            .map_err(|e| machinery(&e))?;
        let key = OperationKey::try_from(record.key.to_string()).map_err(|e| machinery(&e))?;
        let tombstone = self.real != Variant::EarlyPrune;
        let pruned = self
            .service
            .prune(&scope, &key, tombstone)
            .map_err(|e| machinery(&e))?;
        if pruned != 1 {
            return Err((
                format!("prunes the one record of key {key}"),
                format!("pruned {pruned} records"),
            ));
        }
        self.observed
            .store
            .records
            .retain(|r| (r.scope, r.key) != (record.scope, record.key));
        let how = if tombstone {
            "a pruning pass"
        } else {
            "a delete, leaving nothing"
        };
        Ok(format!(
            "the service prunes key {key} of c{} ({how})",
            record.scope + 1
        ))
    }
}

impl Replay {
    fn tickets(&self) -> Result<Option<u64>> {
        if !self.hub.up.load(Ordering::SeqCst) && matches!(self.service, Service::Lab { .. }) {
            return Ok(None);
        }
        self.service.tickets(&scope(0)?).map(Some)
    }

    /// Notes what a real answer shows: a ticket created (traced to the payload it carries and
    /// recorded under its key), or a conflict with the payload's own record, or one that wrote.
    fn observe(
        &mut self,
        real: &RealRequest,
        result: &Result<Outcome, String>,
        before: Option<u64>,
    ) -> std::result::Result<(), (String, String)> {
        let scope = if real.scope.caller() == "c1" { 0 } else { 1 };
        let payload = intent_of(&real.payload).unwrap_or(u8::MAX);
        let key = key_of(&real.key);
        match answer_of(result) {
            Some(Answer::Created(id)) => {
                self.observed
                    .store
                    .tickets
                    .push(Ticket { id, scope, payload });
                self.observed.store.records.push(crate::model::Record {
                    scope,
                    key,
                    text: crate::model::Text {
                        payload,
                        spelling: 0,
                    },
                    ticket: id,
                });
            }
            Some(Answer::Conflict) => {
                let own = self
                    .observed
                    .store
                    .record(scope, key)
                    .is_some_and(|r| r.text.payload == payload);
                self.observed.ghost.own_payload_rejected |= own;
                let after = self.tickets().map_err(|e| machinery(&e))?;
                self.observed.ghost.conflict_changed |= before != after;
            }
            _ => {}
        }
        Ok(())
    }

    fn compare_tickets(&self) -> std::result::Result<(), (String, String)> {
        let Some(real) = self.tickets().map_err(|e| machinery(&e))? else {
            return Ok(());
        };
        let model = self.state.store.tickets.len() as u64;
        if real == model {
            return Ok(());
        }
        Err((
            format!("holds {model} ticket(s) after it"),
            format!("holds {real}"),
        ))
    }

    /// Each runner's row as its file holds it, in the model's terms.
    fn real_row(&self, i: u8) -> Result<Option<Row>> {
        let file = self.file(i);
        if !file.exists() {
            return Ok(None);
        }
        let runner = Runner::open(
            &file,
            crate::sqlite::SqliteStore::temporary()?,
            Default::default(),
        )?;
        let saved = runner.operations()?.into_iter().next();
        Ok(saved.map(|saved| Row {
            state: match saved.state {
                RunnerState::Pending => RowState::Pending,
                RunnerState::Held { .. } => RowState::Held,
                RunnerState::Succeeded { ticket_id } => RowState::Succeeded(
                    ticket_id
                        .as_i64()
                        .and_then(|n| u8::try_from(n).ok())
                        .unwrap_or(u8::MAX),
                ),
                RunnerState::Rejected { .. } => RowState::Rejected,
                RunnerState::NeedsReview { .. } => RowState::Review,
            },
            attempts: u8::try_from(saved.attempts).unwrap_or(u8::MAX),
            reached: false,
            key: Some(key_of(&saved.key)),
        }))
    }

    fn compare_rows(&mut self) -> std::result::Result<(), (String, String)> {
        for i in 0..self.state.runners.len() as u8 {
            let real = self.real_row(i).map_err(|e| machinery(&e))?;
            let model = self.state.runners[usize::from(i)].row.map(|r| r.state);
            if real.map(|r| r.state) != model {
                return Err((
                    format!("leaves {}'s row {model:?}", tag(i)),
                    format!("left it {:?}", real.map(|r| r.state)),
                ));
            }
            self.observed.runners[usize::from(i)].row = real;
        }
        Ok(())
    }

    /// The invariants broken by what the real system holds.
    fn broken(&self) -> Vec<&'static str> {
        crate::model::protocol::properties::<Protocol>()
            .into_iter()
            .filter(|p| p.expectation == stateright::Expectation::Always)
            .filter(|p| !(p.condition)(&self.protocol, &self.observed))
            .map(|p| p.name)
            .collect()
    }
}
