//! Fewer states for the same answers: the checker explores one representative of each class of
//! states that the protocol cannot tell apart, and a path it finds is mapped back to a path of
//! the protocol itself.
//!
//! Each reduction renames something no step and no property looks at except through equality,
//! so two states of one class take the same steps to states of one class, and break the same
//! properties (a bisimulation). Breadth-first distances are kept, so a shortest counterexample
//! of the reduced search is as short as one of the full search:
//!
//! 1. **Dead sends.** A request or a looked-up create whose runner no longer waits on that send
//!    can never be answered to anyone: a runner waits only on its latest send, and its sends are
//!    numbered by its row's count, which only grows, even across crashes. Its send number is
//!    replaced by 0, so two dead copies differ only in what they ask.
//! 2. **Send numbers.** Where the key is not made from the count (every variant but fresh-key and
//!    memory-key), a runner's count matters only to match an answer to the send it waits on, and
//!    to pick the spelling of the payload's text. The count becomes 1 (or 2, keeping its parity,
//!    where the spelling matters: raw-payload), and so does the number of the send it waits on.
//! 3. **Spelling.** Where payloads are compared canonically (every variant but raw-payload), the
//!    key order of a payload's text changes no answer: it becomes the canonical one.
//! 4. **Ticket numbers.** The service numbers tickets in the order it creates them, so two
//!    callers that create in the other order leave states that differ only in the numbers. A new
//!    ticket gets the next free number, and the properties compare numbers only with each other,
//!    so the tickets are renumbered in a fixed order (by scope, payload, then the old number).
//! 5. **Finished runners.** A runner whose operation has its final answer takes no step again,
//!    and the properties read only its row's state: its count of sends and whether a send got
//!    through are forgotten. The key a runner holds in memory is read only while a run sends, and
//!    a run's start sets it anew, so outside a run it is forgotten too.
//! 6. **The two processes of caller c1.** `c1/i1` and `c1/i2` share a scope and a key name and
//!    differ only in their payloads, so swapping the two runners along with their payloads
//!    everywhere (messages, records, tickets) is a symmetry of the protocol. The representative
//!    is the smaller of the state and its swap. `c2/i1` has a scope of its own: no symmetry moves
//!    it, so callers are not symmetric in general, only these two.

use stateright::{Model, Property};

use super::bounds::Variant;
use super::protocol::{Action, Message, Process, Protocol, RowState, State, properties};
use super::service::Answer;

/// The protocol as the checker explores it: the same steps, each state replaced by its class's
/// representative ([`Protocol::representative`]).
#[derive(Clone, Copy, Debug)]
pub struct Reduced(pub Protocol);

impl Model for Reduced {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        self.0
            .init_states()
            .iter()
            .map(|s| self.0.representative(s))
            .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.0.actions(state, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.0
            .next_state(last, action)
            .map(|next| self.0.representative(&next))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties()
    }
}

impl Protocol {
    /// The representative of `state`'s class: the state with every renaming of the module's
    /// list applied, and the smaller of it and its swap of `c1/i1` with `c1/i2`.
    pub fn representative(&self, state: &State) -> State {
        let plain = self.normal(state.clone());
        if state.runners.len() < 2 {
            return plain;
        }
        let swapped = self.normal(swap_first_two(state));
        plain.min(swapped)
    }

    /// Whether the variant makes keys from the runner's count of sends.
    fn keys_from_count(&self) -> bool {
        matches!(self.variant, Variant::FreshKey | Variant::MemoryKey)
    }

    /// Reductions 1 to 5, then every set sorted.
    fn normal(&self, mut s: State) -> State {
        let raw = self.variant == Variant::RawPayload;
        let collapse = !self.keys_from_count();
        // The count a runner's send number `n` becomes.
        let renumber = |n: u8| match (collapse, n, raw) {
            (false, n, _) | (_, n @ 0, _) => n,
            (true, n, true) => 1 + (n - 1) % 2,
            (true, _, false) => 1,
        };
        let awaited: Vec<Option<u8>> = s
            .runners
            .iter()
            .map(|r| match r.process {
                Process::Awaiting { attempt, .. } => Some(attempt),
                _ => None,
            })
            .collect();
        let live = |from: u8, attempt: u8| awaited[usize::from(from)] == Some(attempt);
        for message in &mut s.network {
            match message {
                Message::Request {
                    from,
                    attempt,
                    request,
                } => {
                    *attempt = if live(*from, *attempt) {
                        renumber(*attempt)
                    } else {
                        0
                    };
                    if !raw {
                        request.text.spelling = 0;
                    }
                }
                Message::Reply { attempt, .. } => *attempt = renumber(*attempt),
            }
        }
        for lookup in &mut s.lookups {
            lookup.attempt = if live(lookup.from, lookup.attempt) {
                renumber(lookup.attempt)
            } else {
                0
            };
            if !raw {
                lookup.request.text.spelling = 0;
            }
        }
        for runner in &mut s.runners {
            if let Some(row) = runner.row.as_mut() {
                row.attempts = renumber(row.attempts);
                if runner.process == Process::Done {
                    row.attempts = 0;
                    row.reached = false;
                }
            }
            // The key in memory is read only while a run sends; a run's start sets it anew.
            if !matches!(
                runner.process,
                Process::Ready { .. } | Process::Awaiting { .. }
            ) {
                runner.key = super::service::Key(1);
            }
            if let Process::Awaiting { attempt, .. } = &mut runner.process {
                *attempt = renumber(*attempt);
            }
        }
        if !raw {
            for record in &mut s.store.records {
                record.text.spelling = 0;
            }
        }
        renumber_tickets(&mut s);
        s.network.sort();
        s.lookups.sort();
        s.store.records.sort();
        s
    }
}

/// Reduction 4: tickets numbered by scope, payload and old number, and every mention of a number
/// renamed with them.
fn renumber_tickets(s: &mut State) {
    let mut order: Vec<(u8, u8, u8)> = s
        .store
        .tickets
        .iter()
        .map(|t| (t.scope, t.payload, t.id))
        .collect();
    order.sort_unstable();
    let new_id = |old: u8| {
        order
            .iter()
            .position(|&(_, _, id)| id == old)
            .and_then(|at| u8::try_from(at + 1).ok())
            .unwrap_or(old)
    };
    for ticket in &mut s.store.tickets {
        ticket.id = new_id(ticket.id);
    }
    s.store.tickets.sort_by_key(|t| t.id);
    for record in &mut s.store.records {
        record.ticket = new_id(record.ticket);
    }
    for message in &mut s.network {
        if let Message::Reply { answer, .. } = message {
            *answer = match *answer {
                Answer::Created(id) => Answer::Created(new_id(id)),
                Answer::Replayed(id) => Answer::Replayed(new_id(id)),
                other => other,
            };
        }
    }
    for runner in &mut s.runners {
        if let Some(row) = runner.row.as_mut()
            && let RowState::Succeeded(id) = row.state
        {
            row.state = RowState::Succeeded(new_id(id));
        }
    }
}

/// Reduction 6: `c1/i1` and `c1/i2` swapped, with their payloads.
fn swap_first_two(state: &State) -> State {
    let swap = |i: u8| match i {
        0 => 1,
        1 => 0,
        other => other,
    };
    let mut s = state.clone();
    s.runners.swap(0, 1);
    for message in &mut s.network {
        match message {
            Message::Request { from, request, .. } => {
                *from = swap(*from);
                request.text.payload = swap(request.text.payload);
            }
            Message::Reply { to, .. } => *to = swap(*to),
        }
    }
    for lookup in &mut s.lookups {
        lookup.from = swap(lookup.from);
        lookup.request.text.payload = swap(lookup.request.text.payload);
    }
    for record in &mut s.store.records {
        record.text.payload = swap(record.text.payload);
    }
    for ticket in &mut s.store.tickets {
        ticket.payload = swap(ticket.payload);
    }
    s
}

/// The path of the protocol that `reduced`, a path of representatives, stands for: from the
/// protocol's initial state, each step is the first enabled action (the reduced path's own
/// first) whose next state has the next representative. `None` if some step has no such action,
/// which the bisimulation rules out.
pub(super) fn concrete_path(
    protocol: &Protocol,
    reduced: &[(State, Option<Action>)],
) -> Option<Vec<(State, Option<Action>)>> {
    let mut state = protocol.init_states().into_iter().next()?;
    let mut path = Vec::with_capacity(reduced.len());
    for (next, (_, taken)) in reduced.iter().skip(1).zip(reduced) {
        let mut enabled = Vec::new();
        protocol.actions(&state, &mut enabled);
        let candidates = taken.iter().copied().chain(enabled.iter().copied());
        let (action, after) = candidates.filter(|a| enabled.contains(a)).find_map(|a| {
            protocol
                .next_state(&state, a)
                .filter(|after| protocol.representative(after) == next.0)
                .map(|after| (a, after))
        })?;
        path.push((state, Some(action)));
        state = after;
    }
    path.push((state, None));
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Bounds;

    #[test]
    fn two_orders_of_independent_creates_are_one_class() {
        use Action::*;
        let bounds = Bounds {
            callers: 3,
            ..Bounds::DEFAULT
        };
        let protocol = Protocol::new(bounds, Variant::Design);
        let run = |actions: &[Action]| {
            let mut s = protocol.init_states().remove(0);
            for &a in actions {
                s = protocol.next_state(&s, a).unwrap();
            }
            s
        };
        let first = run(&[Save(0), Save(2), Send(0), Send(2), Deliver(0), Deliver(0)]);
        let second = run(&[Save(0), Save(2), Send(0), Send(2), Deliver(1), Deliver(0)]);
        assert_ne!(first, second);
        assert_eq!(
            protocol.representative(&first),
            protocol.representative(&second)
        );
        // c1/i1 and c1/i2 swapped are one class; c1/i1 and c2/i1 are not.
        let one = run(&[Save(0)]);
        assert_eq!(
            protocol.representative(&one),
            protocol.representative(&run(&[Save(1)]))
        );
        assert_ne!(
            protocol.representative(&one),
            protocol.representative(&run(&[Save(2)]))
        );
    }

    #[test]
    fn a_key_made_from_the_count_keeps_the_count() {
        use Action::*;
        let one = Bounds {
            callers: 1,
            ..Bounds::DEFAULT
        };
        let protocol = Protocol::new(one, Variant::FreshKey);
        let mut s = protocol.init_states().remove(0);
        for a in [Save(0), Send(0), Timeout(0)] {
            s = protocol.next_state(&s, a).unwrap();
        }
        let once = protocol.representative(&s);
        let twice = protocol.representative(&protocol.next_state(&s, Send(0)).unwrap());
        assert_ne!(once.runners[0].row, twice.runners[0].row);
    }

    #[test]
    fn the_reduced_search_breaks_the_same_properties_as_the_full_one_and_no_sooner() {
        use stateright::{Checker, Model};
        // One caller: every anti-pattern breaks a property with one, and the full search stays
        // small enough for a debug build.
        let small = Bounds {
            callers: 1,
            sends: 2,
            losses: 1,
            duplicates: 0,
            crashes: 2,
            prunes: 1,
        };
        for variant in Variant::ALL {
            let protocol = Protocol::new(small, variant);
            let full = protocol.checker().spawn_bfs().join();
            let reduced = Reduced(protocol).checker().spawn_bfs().join();
            let names = |d: Vec<&'static str>| {
                let mut d = d;
                d.sort_unstable();
                d
            };
            assert_eq!(
                names(full.discoveries().into_keys().collect()),
                names(reduced.discoveries().into_keys().collect()),
                "{variant}"
            );
            assert!(reduced.unique_state_count() < full.unique_state_count());
            // The shortest counterexample of the reduced search is a shortest of the full one.
            if let Some(found) = crate::model::check(small, variant).unwrap().counterexample {
                let cut = |steps: usize| {
                    protocol
                        .checker()
                        .target_max_depth(steps + 2)
                        .spawn_bfs()
                        .join()
                        .discoveries()
                        .contains_key(found.property)
                };
                assert!(!cut(found.steps() - 1), "{variant}");
                assert!(cut(found.steps()), "{variant}");
            }
        }
    }
}
