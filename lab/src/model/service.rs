//! The ticket service as the model sees it: what the store keeps, and what one keyed create does
//! to it. The same step is written out as a table of transitions ([`TRANSITIONS`]) that a test
//! walks against the real service, so the model cannot drift from what ships.

use std::fmt;

/// A scope (a caller's identity, as the bearer token names it): 0 is `c1`, 1 is `c2`.
pub type ScopeId = u8;

/// An operation key as a runner sends it. Every intent of the model uses the key name `k1`; an
/// anti-pattern that mints keys adds a generation (`k1~2`, `k1~3`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub u8);

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 | 1 => f.write_str("k1"),
            generation => write!(f, "k1~{generation}"),
        }
    }
}

/// A payload as sent: which payload (each intent has its own), and how its JSON text is spelled
/// (0 is the canonical key order, 1 another order of the same fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Text {
    /// The payload, by the index of the intent it belongs to.
    pub payload: u8,
    /// The key order of its JSON text.
    pub spelling: u8,
}

/// One keyed create as it reaches the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    /// The caller's scope.
    pub scope: ScopeId,
    /// The key.
    pub key: Key,
    /// The payload.
    pub text: Text,
}

/// What the service answers a create.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// A new ticket and its record were committed together (HTTP 201).
    Created(u8),
    /// The key's record names this ticket; nothing was written (201 with
    /// `Idempotent-Replayed: true`).
    Replayed(u8),
    /// The key's record holds another payload; nothing was written (422).
    Conflict,
    /// The key's record was pruned and its tombstone remains; nothing was written (410).
    Expired,
}

/// An operation record: the key's identity, the payload it was first used with, its ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    /// The scope.
    pub scope: ScopeId,
    /// The key.
    pub key: Key,
    /// The payload text as the first request sent it.
    pub text: Text,
    /// The ticket.
    pub ticket: u8,
}

/// A ticket, traced to the intent whose payload it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket {
    /// Its identifier, from 1.
    pub id: u8,
    /// The scope that created it.
    pub scope: ScopeId,
    /// The payload it carries, by intent.
    pub payload: u8,
}

/// What the service's database holds: it survives a crash of the service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Store {
    /// Operation records, sorted.
    pub records: Vec<Record>,
    /// Tickets, by identifier.
    pub tickets: Vec<Ticket>,
    /// Tombstones of pruned records: (scope, key), sorted.
    pub tombstones: Vec<(ScopeId, Key)>,
}

/// How a store compares the payload of a retry with the record's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// As canonical JSON: the same fields in another order are the same payload (the lab's store).
    Canonical,
    /// As the text received, byte for byte (the raw-payload anti-pattern).
    Raw,
}

impl Store {
    /// The record of `scope` and `key`, if one is kept.
    pub fn record(&self, scope: ScopeId, key: Key) -> Option<&Record> {
        self.records
            .iter()
            .find(|r| r.scope == scope && r.key == key)
    }

    /// Tickets carrying intent `payload`'s payload.
    pub fn tickets_of(&self, payload: u8) -> impl Iterator<Item = &Ticket> {
        self.tickets.iter().filter(move |t| t.payload == payload)
    }

    // ANCHOR: model_lookup
    /// The first half of a create: the answer the store's records and tombstones already give,
    /// or `None` when the key is new. Reads only.
    pub fn lookup(&self, request: &Request, compare: Compare) -> Option<Answer> {
        if self.tombstones.contains(&(request.scope, request.key)) {
            return Some(Answer::Expired);
        }
        let record = self.record(request.scope, request.key)?;
        let same = match compare {
            Compare::Canonical => record.text.payload == request.text.payload,
            Compare::Raw => record.text == request.text,
        };
        Some(if same {
            Answer::Replayed(record.ticket)
        } else {
            Answer::Conflict
        })
    }

    /// The second half: a new ticket and its record, written together.
    pub fn write(&mut self, request: &Request) -> Answer {
        let id = u8::try_from(self.tickets.len() + 1).unwrap_or(u8::MAX);
        self.tickets.push(Ticket {
            id,
            scope: request.scope,
            payload: request.text.payload,
        });
        self.records.push(Record {
            scope: request.scope,
            key: request.key,
            text: request.text,
            ticket: id,
        });
        self.records.sort();
        Answer::Created(id)
    }

    /// One keyed create as the lab's service runs it: the lookup and the write in one
    /// transaction, under the key's claim, so nothing can come between them.
    pub fn create(&mut self, request: &Request, compare: Compare) -> Answer {
        match self.lookup(request, compare) {
            Some(answer) => answer,
            None => self.write(request),
        }
    }
    // ANCHOR_END: model_lookup

    /// A pruning pass deletes every record of `scope` and `key`, leaving a tombstone when
    /// `tombstone` is true.
    pub fn prune(&mut self, scope: ScopeId, key: Key, tombstone: bool) {
        self.records.retain(|r| (r.scope, r.key) != (scope, key));
        if tombstone && !self.tombstones.contains(&(scope, key)) {
            self.tombstones.push((scope, key));
            self.tombstones.sort();
        }
    }
}

/// What the store holds for the key before a transition: the row's left column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Before {
    /// Nothing: the key was never used.
    Nothing,
    /// The record of the first request (payload of `c1/i1`, canonical text), ticket 1.
    Record,
    /// The record was pruned; its tombstone remains, and so does ticket 1.
    Tombstone,
}

/// The request of a transition, compared with the first request under key `k1` of `c1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// The same payload, the same text.
    Same,
    /// The same payload, its fields in another order.
    Respelled,
    /// Another payload under the same key (`c1/i2`).
    Changed,
    /// The same key name from another scope (`c2`), with its own payload.
    OtherScope,
}

/// What the service must answer, and whether it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// A new ticket and record (the next identifier).
    Created,
    /// The original ticket, ticket 1; nothing written.
    ReplaysOriginal,
    /// A payload conflict; nothing written.
    Conflict,
    /// The key expired; nothing written.
    Expired,
}

/// One row of the service's transition table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// What the store holds for the key.
    pub before: Before,
    /// What arrives.
    pub sent: Sent,
    /// What the service answers.
    pub expect: Expect,
}

// ANCHOR: transitions
/// The keyed create, state by request: the model's service step and the real service (its store,
/// its claim on the key and its tombstones) must both answer every row this way.
pub const TRANSITIONS: [Transition; 12] = {
    use Before::{Nothing, Record, Tombstone};
    use Expect::{Conflict, Created, Expired, ReplaysOriginal};
    use Sent::{Changed, OtherScope, Respelled, Same};
    const fn row(before: Before, sent: Sent, expect: Expect) -> Transition {
        Transition {
            before,
            sent,
            expect,
        }
    }
    [
        row(Nothing, Same, Created),
        row(Nothing, Respelled, Created),
        row(Nothing, Changed, Created),
        row(Nothing, OtherScope, Created),
        row(Record, Same, ReplaysOriginal),
        row(Record, Respelled, ReplaysOriginal),
        row(Record, Changed, Conflict),
        row(Record, OtherScope, Created),
        row(Tombstone, Same, Expired),
        row(Tombstone, Respelled, Expired),
        row(Tombstone, Changed, Expired),
        row(Tombstone, OtherScope, Created),
    ]
};
// ANCHOR_END: transitions

/// The first request under key `k1` of `c1`: payload of `c1/i1`, canonical text.
pub const FIRST: Request = Request {
    scope: 0,
    key: Key(1),
    text: Text {
        payload: 0,
        spelling: 0,
    },
};

impl Sent {
    /// The request this row sends, in the model's terms.
    pub fn request(self) -> Request {
        match self {
            Sent::Same => FIRST,
            Sent::Respelled => Request {
                text: Text {
                    payload: 0,
                    spelling: 1,
                },
                ..FIRST
            },
            Sent::Changed => Request {
                text: Text {
                    payload: 1,
                    spelling: 0,
                },
                ..FIRST
            },
            Sent::OtherScope => Request {
                scope: 1,
                key: Key(1),
                text: Text {
                    payload: 2,
                    spelling: 0,
                },
            },
        }
    }
}

impl Before {
    /// The model's store in this state.
    pub fn store(self) -> Store {
        let mut store = Store::default();
        if self != Before::Nothing {
            store.write(&FIRST);
        }
        if self == Before::Tombstone {
            store.prune(FIRST.scope, FIRST.key, true);
        }
        store
    }
}

impl Transition {
    /// What the model's service step does with this row: its answer in the table's terms (`None`
    /// for a replay of a ticket other than the original, which no row allows), and how many
    /// tickets and records the store gained.
    pub fn in_the_model(self) -> (Option<Expect>, usize, usize) {
        let mut store = self.before.store();
        let (tickets, records) = (store.tickets.len(), store.records.len());
        let expect = match store.create(&self.sent.request(), Compare::Canonical) {
            Answer::Created(_) => Some(Expect::Created),
            Answer::Replayed(1) => Some(Expect::ReplaysOriginal),
            Answer::Replayed(_) => None,
            Answer::Conflict => Some(Expect::Conflict),
            Answer::Expired => Some(Expect::Expired),
        };
        (
            expect,
            store.tickets.len() - tickets,
            store.records.len() - records,
        )
    }

    /// Whether the row writes a ticket and a record.
    pub fn writes(self) -> bool {
        self.expect == Expect::Created
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_service_step_answers_every_row_of_the_table() {
        for row in TRANSITIONS {
            let (expect, tickets, records) = row.in_the_model();
            assert_eq!(expect, Some(row.expect), "{row:?}");
            let written = usize::from(row.writes());
            assert_eq!((tickets, records), (written, written), "{row:?}");
        }
    }

    #[test]
    fn the_table_covers_every_state_and_request_once() {
        for before in [Before::Nothing, Before::Record, Before::Tombstone] {
            for sent in [Sent::Same, Sent::Respelled, Sent::Changed, Sent::OtherScope] {
                let rows = TRANSITIONS
                    .iter()
                    .filter(|r| r.before == before && r.sent == sent)
                    .count();
                assert_eq!(rows, 1, "{before:?} {sent:?}");
            }
        }
    }

    #[test]
    fn a_raw_compare_rejects_the_same_payload_spelled_otherwise() {
        let store = Before::Record.store();
        let respelled = Sent::Respelled.request();
        assert_eq!(
            store.lookup(&respelled, Compare::Canonical),
            Some(Answer::Replayed(1))
        );
        assert_eq!(
            store.lookup(&respelled, Compare::Raw),
            Some(Answer::Conflict)
        );
    }
}
