//! The protocol as a Stateright model: durable runners, a network that loses, duplicates and
//! reorders, and a keyed ticket service that crashes, restarts and prunes.
//!
//! Each action is one step of the code: a runner saving its operation (`runner_save`), one send
//! of its retry loop (`runner_drive`), the service's create (`http_create`, one transaction), a
//! pruning pass (`prune`). What survives a crash is what the code keeps on disk: the runner's row
//! (state, key, sends so far) and the service's records, tickets and tombstones.

use stateright::{Model, Property};

use super::bounds::{Bounds, Variant};
use super::service::{Answer, Compare, Key, Request, ScopeId, Store, Text};

/// One runner process and its one intent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intent {
    /// The scope its token names.
    pub scope: ScopeId,
    /// The intent's name within the scope.
    pub name: &'static str,
}

/// The intents, in the order `--callers` adds them. Each carries its own payload (its index),
/// so every ticket traces back to the intent that asked for it.
pub const INTENTS: [Intent; 3] = [
    Intent {
        scope: 0,
        name: "i1",
    },
    // Another process of the same caller, reusing i1's key with another payload.
    Intent {
        scope: 0,
        name: "i2",
    },
    // Another caller whose key has the same name: scopes keep them apart.
    Intent {
        scope: 1,
        name: "i1",
    },
];

/// The tag of intent `index`, `caller/intent`, as the simulator writes it.
pub fn tag(index: u8) -> String {
    let intent = INTENTS[usize::from(index)];
    format!("c{}/{}", intent.scope + 1, intent.name)
}

/// Where an operation stands in the runner's file (`operations.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RowState {
    /// Saved, no final answer yet.
    Pending,
    /// Pending with a note: the last run found the service unreachable and reported that nothing
    /// took effect (exit status 5).
    Held,
    /// The service reported this ticket.
    Succeeded(u8),
    /// The service rejected the payload.
    Rejected,
    /// Handed to a person: the outcome is unknown.
    Review,
}

impl RowState {
    /// A final answer: succeeded, rejected, or handed to a person.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RowState::Succeeded(_) | RowState::Rejected | RowState::Review
        )
    }
}

/// The runner's row: what survives its crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Row {
    /// The state.
    pub state: RowState,
    /// Sends so far, over every run (`operations.attempts`).
    pub attempts: u8,
    /// Whether any send so far may have reached the service, as the runner can tell: every
    /// send it counted. A refused connection and a lost reply both come back as no answer
    /// (`OutcomeUnknown`), so the runner counts neither as refused.
    pub reached: bool,
    /// The key, when the runner saves it (every variant but memory-key).
    pub key: Option<Key>,
}

/// What the runner process is doing; lost in a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Process {
    /// It has not received its intent yet.
    Idle,
    /// In a run, about to send; `sent` sends this run.
    Ready {
        /// Sends this run.
        sent: u8,
    },
    /// Waiting for the answer to send number `attempt`.
    Awaiting {
        /// The send's number over every run.
        attempt: u8,
        /// Sends this run.
        sent: u8,
    },
    /// The run ended with the operation held: the next run resumes it.
    Exited,
    /// Crashed; the next start resumes from the row.
    Down,
    /// The operation has its final answer.
    Done,
}

/// One runner: its durable row and its process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Runner {
    /// The row in its file, once saved.
    pub row: Option<Row>,
    /// The process.
    pub process: Process,
    /// The key the process holds in memory.
    pub key: Key,
}

/// A message in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Message {
    /// A create, from runner `from`'s send number `attempt`.
    Request {
        /// The runner.
        from: u8,
        /// Its send number.
        attempt: u8,
        /// What it asks.
        request: Request,
    },
    /// The service's answer to runner `to`'s send number `attempt`.
    Reply {
        /// The runner.
        to: u8,
        /// Its send number.
        attempt: u8,
        /// The answer.
        answer: Answer,
    },
}

/// A create the check-then-write service has looked up (and found nothing for) but not written;
/// it lives in the service's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lookup {
    /// The runner.
    pub from: u8,
    /// Its send number.
    pub attempt: u8,
    /// The request.
    pub request: Request,
}

/// Faults still allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Left {
    /// Requests the network may still lose.
    pub losses: u8,
    /// Requests it may still duplicate.
    pub duplicates: u8,
    /// Crashes still allowed.
    pub crashes: u8,
    /// Records the retention job may still prune.
    pub prunes: u8,
}

/// Facts no participant keeps, recorded for the properties.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ghost {
    /// A conflict answer came with a change to the store.
    pub conflict_changed: bool,
    /// A request was told it conflicts with a record of its own payload.
    pub own_payload_rejected: bool,
}

/// The whole system at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// The runners, by intent.
    pub runners: Vec<Runner>,
    /// Whether the service is running.
    pub up: bool,
    /// The service's database.
    pub store: Store,
    /// The check-then-write service's looked-up creates (its memory).
    pub lookups: Vec<Lookup>,
    /// Messages in flight, sorted: any may be delivered next, so order is free.
    pub network: Vec<Message>,
    /// Faults still allowed.
    pub left: Left,
    /// Facts for the properties.
    pub ghost: Ghost,
}

/// One step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Runner `0` receives its intent and saves it, then starts its run.
    Save(u8),
    /// Runner `0` sends its next attempt.
    Send(u8),
    /// Runner `0` gives up waiting for its answer.
    Timeout(u8),
    /// Runner `0` reads the answer to its current send.
    Receive(u8),
    /// Runner `0` crashes.
    Crash(u8),
    /// Runner `0` starts again after a crash and resumes from its row.
    Restart(u8),
    /// Runner `0` is run again after a run that left its operation unfinished.
    Rerun(u8),
    /// The service takes the request at this index of the network and runs its create.
    Deliver(usize),
    /// The check-then-write service writes the looked-up create at this index.
    Write(usize),
    /// The network loses the request at this index.
    Lose(usize),
    /// The network delivers the request at this index twice.
    Duplicate(usize),
    /// The service crashes: its memory and the requests on its connections are lost.
    CrashService,
    /// The service starts again on the same database.
    RestartService,
    /// The retention job prunes the record at this index.
    Prune(usize),
}

/// The model: bounds and a variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protocol {
    /// The bounds.
    pub bounds: Bounds,
    /// The design checked.
    pub variant: Variant,
}

/// At most one ticket per intention.
pub const ONE_EFFECT: &str = "at most one effect per intention";
/// A reported ticket is the one made for this intention.
pub const ORIGINAL_EFFECT: &str = "a replay names the original effect";
/// A conflict writes nothing.
pub const REJECTED_CHANGES_NOTHING: &str = "a rejected payload changes nothing";
/// The same payload is never a conflict.
pub const OWN_PAYLOAD: &str = "a retry with its own payload is never rejected";
/// "Held" only when nothing took effect.
pub const UNKNOWN_IS_NOT_NOTHING: &str = "an unknown outcome is never reported as nothing happened";
/// Liveness.
pub const FINAL_ANSWER: &str = "every intention ends with a final answer";

impl Variant {
    /// The property this variant breaks first (at the shallowest depth); `None` for the design.
    pub fn breaks(self) -> Option<&'static str> {
        match self {
            Variant::Design => None,
            Variant::FreshKey
            | Variant::CheckThenWrite
            | Variant::EarlyPrune
            | Variant::MemoryKey => Some(ONE_EFFECT),
            Variant::RawPayload => Some(OWN_PAYLOAD),
            Variant::HeldAfterSend => Some(UNKNOWN_IS_NOT_NOTHING),
        }
    }
}

impl Protocol {
    /// The model of `variant` within `bounds`.
    pub fn new(bounds: Bounds, variant: Variant) -> Protocol {
        Protocol { bounds, variant }
    }

    pub(super) fn compare(&self) -> Compare {
        match self.variant {
            Variant::RawPayload => Compare::Raw,
            _ => Compare::Canonical,
        }
    }

    fn runners(&self) -> std::ops::Range<u8> {
        0..self.bounds.callers
    }

    /// The start of a run: the runner checks the service before its first send (`ServiceCheck`).
    fn start_run(&self, state: &mut State, runner: u8) {
        let up = state.up;
        let variant = self.variant;
        let me = &mut state.runners[usize::from(runner)];
        let Some(row) = me.row.as_mut() else {
            me.process = Process::Idle;
            return;
        };
        if row.state.is_final() {
            me.process = Process::Done;
            return;
        }
        if !up {
            // ANCHOR: model_held
            // Unreachable: nothing is sent this run. "Held" says nothing took effect, which the
            // runner knows only if no run has sent anything; after any send, the outcome is
            // unknown and goes to a person.
            if variant == Variant::HeldAfterSend || !row.reached {
                row.state = RowState::Held;
                me.process = Process::Exited;
            } else {
                row.state = RowState::Review;
                me.process = Process::Done;
            }
            // ANCHOR_END: model_held
            return;
        }
        row.state = RowState::Pending;
        if variant == Variant::MemoryKey {
            // The key was only in memory: this run makes another.
            me.key = Key(row.attempts + 1);
        }
        me.process = Process::Ready { sent: 0 };
    }

    fn reply(state: &mut State, to: u8, attempt: u8, answer: Answer) {
        // Only a runner still waiting on that send has a connection to answer on.
        if matches!(state.runners[usize::from(to)].process,
            Process::Awaiting { attempt: waiting, .. } if waiting == attempt)
        {
            state.network.push(Message::Reply {
                to,
                attempt,
                answer,
            });
            state.network.sort();
        }
    }

    fn note_answer(state: &mut State, request: &Request, before: &Store, answer: Answer) {
        if answer == Answer::Conflict {
            if state.store != *before {
                state.ghost.conflict_changed = true;
            }
            if before
                .record(request.scope, request.key)
                .is_some_and(|r| r.text.payload == request.text.payload)
            {
                state.ghost.own_payload_rejected = true;
            }
        }
    }

    /// Runner `i` counts a send, then sends it, or finds the service down (connection refused).
    fn send(&self, state: &mut State, i: u8) -> Option<()> {
        let budget = self.bounds.sends;
        let up = state.up;
        let variant = self.variant;
        let me = &mut state.runners[usize::from(i)];
        let Process::Ready { sent } = me.process else {
            return None;
        };
        let row = me.row.as_mut()?;
        // `count_send` commits before the request goes out.
        row.attempts += 1;
        let attempt = row.attempts;
        // The runner cannot tell a refused connection from a lost reply: both are no answer,
        // so from here on it may never say that nothing took effect. (The model once kept a
        // refused send out of this, and a replay on the real runner caught the difference.)
        row.reached = true;
        if !up {
            // Connection refused: the service cannot have acted, but the runner does not know.
            Protocol::end_send(me, sent + 1, budget);
            return Some(());
        }
        let key = match variant {
            Variant::FreshKey => Key(attempt),
            Variant::MemoryKey => me.key,
            _ => row.key.unwrap_or(me.key),
        };
        let intent = INTENTS[usize::from(i)];
        let request = Request {
            scope: intent.scope,
            key,
            // Sends alternate between two spellings of the same JSON object.
            text: Text {
                payload: i,
                spelling: (attempt - 1) % 2,
            },
        };
        me.process = Process::Awaiting {
            attempt,
            sent: sent + 1,
        };
        state.network.push(Message::Request {
            from: i,
            attempt,
            request,
        });
        state.network.sort();
        Some(())
    }

    /// Runner `i` stops waiting for its attempt and closes the connection.
    fn timeout(state: &mut State, i: u8, budget: u8) -> Option<()> {
        let me = &mut state.runners[usize::from(i)];
        let Process::Awaiting { attempt, sent } = me.process else {
            return None;
        };
        Protocol::end_send(me, sent, budget);
        // The connection is closed: an answer on it is never read.
        state.network.retain(
            |m| !matches!(m, Message::Reply { to, attempt: a, .. } if *to == i && *a == attempt),
        );
        Some(())
    }

    /// Runner `i` reads the answer to the attempt it waits on, and settles its row.
    fn receive(state: &mut State, i: u8) -> Option<()> {
        let Process::Awaiting { attempt, .. } = state.runners[usize::from(i)].process else {
            return None;
        };
        let at = state.network.iter().position(
            |m| matches!(m, Message::Reply { to, attempt: a, .. } if *to == i && *a == attempt),
        )?;
        let Message::Reply { answer, .. } = state.network.remove(at) else {
            return None;
        };
        let me = &mut state.runners[usize::from(i)];
        let row = me.row.as_mut()?;
        row.state = match answer {
            Answer::Created(id) | Answer::Replayed(id) => RowState::Succeeded(id),
            Answer::Conflict => RowState::Rejected,
            Answer::Expired => RowState::Review,
        };
        me.process = Process::Done;
        Some(())
    }

    /// The service takes request `index` off the network and answers it (or, checking before
    /// writing, only looks the key up).
    fn deliver(&self, state: &mut State, index: usize) -> Option<()> {
        let Message::Request {
            from,
            attempt,
            request,
        } = state.network.remove(index)
        else {
            return None;
        };
        let before = state.store.clone();
        let answer = if self.variant == Variant::CheckThenWrite {
            match state.store.lookup(&request, self.compare()) {
                Some(answer) => answer,
                None => {
                    state.lookups.push(Lookup {
                        from,
                        attempt,
                        request,
                    });
                    state.lookups.sort();
                    return Some(());
                }
            }
        } else {
            state.store.create(&request, self.compare())
        };
        Protocol::note_answer(state, &request, &before, answer);
        Protocol::reply(state, from, attempt, answer);
        Some(())
    }

    fn end_send(me: &mut Runner, sent: u8, budget: u8) {
        if sent >= budget {
            if let Some(row) = me.row.as_mut() {
                row.state = RowState::Review;
            }
            me.process = Process::Done;
        } else {
            me.process = Process::Ready { sent };
        }
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            runners: self
                .runners()
                .map(|_| Runner {
                    row: None,
                    process: Process::Idle,
                    key: Key(1),
                })
                .collect(),
            up: true,
            store: Store::default(),
            lookups: Vec::new(),
            network: Vec::new(),
            left: Left {
                losses: self.bounds.losses,
                duplicates: self.bounds.duplicates,
                crashes: self.bounds.crashes,
                prunes: self.bounds.prunes,
            },
            ghost: Ghost::default(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, runner) in state.runners.iter().enumerate() {
            let i = i as u8;
            match runner.process {
                Process::Idle => actions.push(Action::Save(i)),
                Process::Ready { .. } => actions.push(Action::Send(i)),
                Process::Awaiting { attempt, .. } => {
                    let answered = state.network.iter().any(|m| {
                        matches!(m, Message::Reply { to, attempt: a, .. } if *to == i && *a == attempt)
                    });
                    if answered {
                        actions.push(Action::Receive(i));
                    }
                    actions.push(Action::Timeout(i));
                }
                Process::Exited if state.up => actions.push(Action::Rerun(i)),
                Process::Down => actions.push(Action::Restart(i)),
                Process::Exited | Process::Done => {}
            }
            if state.left.crashes > 0
                && matches!(
                    runner.process,
                    Process::Ready { .. } | Process::Awaiting { .. }
                )
            {
                actions.push(Action::Crash(i));
            }
        }
        for (index, message) in state.network.iter().enumerate() {
            if matches!(message, Message::Request { .. }) {
                if state.up {
                    actions.push(Action::Deliver(index));
                }
                if state.left.duplicates > 0 {
                    actions.push(Action::Duplicate(index));
                }
                // A lost reply needs no action of its own: the runner's timeout, which may come
                // while a reply is on its way, closes the connection and the reply is never read.
                if state.left.losses > 0 {
                    actions.push(Action::Lose(index));
                }
            }
        }
        if state.up {
            for index in 0..state.lookups.len() {
                actions.push(Action::Write(index));
            }
            if state.left.prunes > 0 {
                for index in 0..state.store.records.len() {
                    actions.push(Action::Prune(index));
                }
            }
            if state.left.crashes > 0 {
                actions.push(Action::CrashService);
            }
        } else {
            actions.push(Action::RestartService);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        // An index past what the state holds names no step.
        let fits = match action {
            Action::Deliver(i) | Action::Lose(i) | Action::Duplicate(i) => i < last.network.len(),
            Action::Write(i) => i < last.lookups.len(),
            Action::Prune(i) => i < last.store.records.len(),
            _ => true,
        };
        if !fits {
            return None;
        }
        let mut state = last.clone();
        let budget = self.bounds.sends;
        match action {
            Action::Save(i) => {
                // ANCHOR: model_save
                // The row, with its key, is written before anything is sent.
                let me = &mut state.runners[usize::from(i)];
                me.row = Some(Row {
                    state: RowState::Pending,
                    attempts: 0,
                    reached: false,
                    key: (self.variant != Variant::MemoryKey).then_some(Key(1)),
                });
                me.key = Key(1);
                // ANCHOR_END: model_save
                self.start_run(&mut state, i);
            }
            Action::Send(i) => self.send(&mut state, i)?,
            Action::Timeout(i) => Protocol::timeout(&mut state, i, budget)?,
            Action::Receive(i) => Protocol::receive(&mut state, i)?,
            Action::Crash(i) => {
                state.left.crashes -= 1;
                state.runners[usize::from(i)].process = Process::Down;
                state
                    .network
                    .retain(|m| !matches!(m, Message::Reply { to, .. } if *to == i));
            }
            Action::Restart(i) | Action::Rerun(i) => self.start_run(&mut state, i),
            Action::Deliver(index) => self.deliver(&mut state, index)?,
            Action::Write(index) => {
                let lookup = state.lookups.remove(index);
                let answer = state.store.write(&lookup.request);
                Protocol::reply(&mut state, lookup.from, lookup.attempt, answer);
            }
            Action::Lose(index) => {
                state.left.losses -= 1;
                state.network.remove(index);
            }
            Action::Duplicate(index) => {
                state.left.duplicates -= 1;
                let copy = state.network[index];
                state.network.push(copy);
                state.network.sort();
            }
            Action::CrashService => {
                state.left.crashes -= 1;
                state.up = false;
                state.lookups.clear();
                state
                    .network
                    .retain(|m| !matches!(m, Message::Request { .. }));
            }
            Action::RestartService => state.up = true,
            Action::Prune(index) => {
                state.left.prunes -= 1;
                let record = state.store.records[index];
                let tombstone = self.variant != Variant::EarlyPrune;
                state.store.prune(record.scope, record.key, tombstone);
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties()
    }
}

/// The contract's rules, for any model whose states are the protocol's: the protocol itself, and
/// the reduced model the checker explores.
pub(super) fn properties<M: Model<State = State>>() -> Vec<Property<M>> {
    vec![
        Property::always(ONE_EFFECT, |_: &M, s: &State| one_effect(s)),
        Property::always(ORIGINAL_EFFECT, |_: &M, s: &State| original_effect(s)),
        Property::always(REJECTED_CHANGES_NOTHING, |_: &M, s: &State| {
            !s.ghost.conflict_changed
        }),
        Property::always(OWN_PAYLOAD, |_: &M, s: &State| {
            !s.ghost.own_payload_rejected
        }),
        Property::always(UNKNOWN_IS_NOT_NOTHING, |_: &M, s: &State| {
            unknown_is_not_nothing(s)
        }),
        Property::eventually(FINAL_ANSWER, |_: &M, s: &State| {
            s.runners
                .iter()
                .all(|r| r.row.is_some_and(|row| row.state.is_final()))
        }),
    ]
}

fn one_effect(s: &State) -> bool {
    (0..s.runners.len() as u8).all(|i| s.store.tickets_of(i).count() <= 1)
}

fn original_effect(s: &State) -> bool {
    s.runners.iter().enumerate().all(|(i, r)| match r.row {
        Some(Row {
            state: RowState::Succeeded(id),
            ..
        }) => s.store.tickets_of(i as u8).next().map(|t| t.id) == Some(id),
        _ => true,
    })
}

fn unknown_is_not_nothing(s: &State) -> bool {
    s.runners.iter().enumerate().all(|(i, r)| {
        !matches!(
            r.row,
            Some(Row {
                state: RowState::Held,
                ..
            })
        ) || s.store.tickets_of(i as u8).next().is_none()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(protocol: &Protocol, actions: &[Action]) -> State {
        let mut state = protocol.init_states().remove(0);
        for &action in actions {
            let mut enabled = Vec::new();
            protocol.actions(&state, &mut enabled);
            assert!(enabled.contains(&action), "{action:?} in {state:?}");
            state = protocol.next_state(&state, action).unwrap();
        }
        state
    }

    fn property(protocol: &Protocol, name: &str) -> Property<Protocol> {
        protocol
            .properties()
            .into_iter()
            .find(|p| p.name == name)
            .unwrap()
    }

    const ONE: Bounds = Bounds {
        callers: 1,
        ..Bounds::DEFAULT
    };

    #[test]
    fn held_is_said_only_when_no_send_got_past_the_connection() {
        use Action::*;
        let committed = [
            Save(0),
            Send(0),
            Crash(0),
            Deliver(0),
            CrashService,
            Restart(0),
        ];
        for (variant, held) in [(Variant::Design, false), (Variant::HeldAfterSend, true)] {
            let protocol = Protocol::new(ONE, variant);
            let state = after(&protocol, &committed);
            let row = state.runners[0].row.unwrap();
            assert_eq!(row.state == RowState::Held, held, "{variant}");
            assert_eq!(state.store.tickets.len(), 1);
            let honest = property(&protocol, UNKNOWN_IS_NOT_NOTHING);
            assert_eq!((honest.condition)(&protocol, &state), !held, "{variant}");
        }
        // Nothing sent at all: held is the truth, in the design too.
        let protocol = Protocol::new(ONE, Variant::Design);
        let state = after(&protocol, &[CrashService, Save(0)]);
        assert_eq!(state.runners[0].row.unwrap().state, RowState::Held);
        assert!((property(&protocol, UNKNOWN_IS_NOT_NOTHING).condition)(
            &protocol, &state
        ));
    }

    #[test]
    fn the_final_answer_property_holds_only_once_every_intention_is_answered() {
        use Action::*;
        let protocol = Protocol::new(ONE, Variant::Design);
        let final_answer = property(&protocol, FINAL_ANSWER);
        let pending = after(&protocol, &[Save(0), Send(0)]);
        assert!(!(final_answer.condition)(&protocol, &pending));
        let answered = after(&protocol, &[Save(0), Send(0), Deliver(0), Receive(0)]);
        assert_eq!(
            answered.runners[0].row.unwrap().state,
            RowState::Succeeded(1)
        );
        assert!((final_answer.condition)(&protocol, &answered));
    }

    #[test]
    fn a_retry_after_a_prune_is_told_expired_and_handed_to_a_person() {
        use Action::*;
        let protocol = Protocol::new(ONE, Variant::Design);
        let state = after(
            &protocol,
            &[
                Save(0),
                Send(0),
                Deliver(0),
                Timeout(0),
                Prune(0),
                Send(0),
                Deliver(0),
                Receive(0),
            ],
        );
        assert_eq!(state.runners[0].row.unwrap().state, RowState::Review);
        assert_eq!(state.store.tickets.len(), 1);
        // Without the tombstone, the same steps make a second ticket.
        let early = Protocol::new(ONE, Variant::EarlyPrune);
        let state = after(
            &early,
            &[
                Save(0),
                Send(0),
                Deliver(0),
                Timeout(0),
                Prune(0),
                Send(0),
                Deliver(0),
            ],
        );
        assert_eq!(state.store.tickets.len(), 2);
    }
}
