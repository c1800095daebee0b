//! An in-memory ticket tool written as an adapter author would, outside the library, with one
//! switch per realistic bug. `Bug::None` is the correct adapter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lab::{CreateRequest, Error, Fault, OperationKey, Outcome, Scope, Step, TicketId, TicketTool};

/// One realistic mistake, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// The correct adapter.
    None,
    /// Records are found by key alone, whoever asks.
    GlobalKeys,
    /// Records are found by caller and key, whatever the operation type.
    CallerOnlyScope,
    /// The payload is compared as the text received.
    ComparesReceivedText,
    /// Only the title is compared.
    ComparesTitleOnly,
    /// A changed payload is replayed like the original.
    AcceptsChangedPayload,
    /// A replay returns the newest ticket instead of the recorded one.
    ReplaysNewestTicket,
    /// A replay is reported as a new create.
    ReportsReplayAsCreated,
    /// The lookup and the insert take the lock separately, and the new row is prepared between
    /// them: check, unlock, insert.
    CheckUnlockInsert,
    /// The lock is given up after the lookup and taken straight back: the narrowest window.
    CheckUnlockRelock,
    /// A lost reply rolls the create back instead of committing it.
    LostReplyRollsBack,
    /// The key is ignored: every call creates.
    IgnoresKey,
    /// Calls without a key are merged by payload.
    MergesUnkeyedCalls,
    /// Calls without a key store a record under an empty key.
    RecordsUnkeyedCalls,
    /// The ticket is kept when the record insert fails (no transaction).
    KeepsTicketOnFailure,
    /// Fault::FailAt is not injected.
    IgnoresFailAt,
    /// forget_record says yes and keeps the record.
    ForgetKeepsTheRecord,
    /// Ticket ids are counted per connection, so two connections hand out one id twice.
    IdsPerConnection,
}

type Identity = (String, String, String);

#[derive(Default)]
struct State {
    tickets: Vec<(TicketId, String)>,
    records: HashMap<Identity, (String, TicketId)>,
    next: i64,
}

/// The adapter: one shared state, as one service, seen through any number of connections.
pub struct Memory {
    state: Arc<Mutex<State>>,
    bug: Bug,
    local_next: Mutex<i64>,
}

impl Memory {
    pub fn new(bug: Bug) -> Memory {
        Memory {
            state: Arc::default(),
            bug,
            local_next: Mutex::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn identity(&self, scope: &Scope, key: &OperationKey) -> Identity {
        let key = key.as_str().to_owned();
        match self.bug {
            Bug::GlobalKeys => (String::new(), String::new(), key),
            Bug::CallerOnlyScope => (scope.caller().to_owned(), String::new(), key),
            _ => (scope.caller().to_owned(), scope.operation().to_owned(), key),
        }
    }

    fn compared(&self, request: &CreateRequest<'_>) -> String {
        match self.bug {
            Bug::ComparesReceivedText => request
                .payload
                .as_received()
                .unwrap_or(request.payload.canonical())
                .to_owned(),
            Bug::ComparesTitleOnly => request.payload.as_object()["title"].to_string(),
            _ => request.payload.canonical().to_owned(),
        }
    }

    fn inject(&self, fault: Fault, step: Step) -> lab::Result<()> {
        if self.bug == Bug::IgnoresFailAt && matches!(fault, Fault::FailAt(_)) {
            return Ok(());
        }
        fault.inject(step)
    }

    /// The saved answer for this key, if there is one.
    fn saved(&self, state: &State, request: &CreateRequest<'_>) -> Option<lab::Result<Outcome>> {
        let key = request.key?;
        if self.bug == Bug::IgnoresKey {
            return None;
        }
        let (payload, ticket) = state.records.get(&self.identity(request.scope, key))?;
        if *payload != self.compared(request) && self.bug != Bug::AcceptsChangedPayload {
            return Some(Err(Error::PayloadConflict {
                key: key.to_string(),
            }));
        }
        let ticket = match self.bug {
            Bug::ReplaysNewestTicket => {
                state.tickets.last().map_or(ticket.clone(), |t| t.0.clone())
            }
            _ => ticket.clone(),
        };
        Some(Ok(match self.bug {
            Bug::ReportsReplayAsCreated => Outcome::Created(ticket),
            _ => Outcome::Replayed(ticket),
        }))
    }

    fn insert(&self, state: &mut State, request: &CreateRequest<'_>) -> lab::Result<Outcome> {
        if self.bug == Bug::MergesUnkeyedCalls && request.key.is_none() {
            let canonical = request.payload.canonical();
            if let Some((id, _)) = state.tickets.iter().find(|(_, p)| p == canonical) {
                return Ok(Outcome::Created(id.clone()));
            }
        }
        self.inject(request.fault, Step::InsertTicket)?;
        let id = if self.bug == Bug::IdsPerConnection {
            let mut next = self
                .local_next
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            *next += 1;
            TicketId::from(*next)
        } else {
            state.next += 1;
            TicketId::from(state.next)
        };
        let before = (state.tickets.len(), state.records.len());
        state
            .tickets
            .push((id.clone(), request.payload.canonical().to_owned()));
        let record = match (request.key, self.bug) {
            (Some(key), _) => Some(self.identity(request.scope, key)),
            (None, Bug::RecordsUnkeyedCalls) => Some(Default::default()),
            (None, _) => None,
        };
        let written = self
            .inject(request.fault, Step::InsertRecord)
            .and_then(|()| {
                if let Some(identity) = record {
                    state
                        .records
                        .insert(identity, (self.compared(request), id.clone()));
                }
                self.inject(request.fault, Step::Commit)
            });
        if let Err(err) = written {
            // The "transaction" rolls back, unless the bug keeps the ticket.
            if self.bug != Bug::KeepsTicketOnFailure {
                state.tickets.truncate(before.0);
            }
            if state.records.len() != before.1 {
                state.records.retain(|_, (_, t)| *t != id);
            }
            return Err(err);
        }
        Ok(Outcome::Created(id))
    }
}

impl TicketTool for Memory {
    fn create(&self, request: CreateRequest<'_>) -> lab::Result<Outcome> {
        self.inject(request.fault, Step::Begin)?;
        let mut state = self.lock();
        self.inject(request.fault, Step::Lookup)?;
        if let Some(saved) = self.saved(&state, &request) {
            drop(state);
            return request.reply(saved?);
        }
        match self.bug {
            Bug::CheckUnlockInsert => {
                // The mistake: the lock is given up while the new row is prepared.
                drop(state);
                let row = (
                    request.payload.canonical().to_owned(),
                    self.compared(&request),
                );
                state = self.lock();
                drop(row);
            }
            Bug::CheckUnlockRelock => {
                // The same mistake at its narrowest: the lock is given up and taken straight back.
                drop(state);
                state = self.lock();
            }
            _ => {}
        }
        if self.bug == Bug::LostReplyRollsBack && request.fault == Fault::LoseReply {
            return request.reply(Outcome::Created(TicketId::from(0)));
        }
        let outcome = self.insert(&mut state, &request)?;
        drop(state);
        request.reply(outcome)
    }

    fn ticket_ids(&self) -> lab::Result<Vec<TicketId>> {
        let mut ids: Vec<TicketId> = self.lock().tickets.iter().map(|t| t.0.clone()).collect();
        ids.sort();
        Ok(ids)
    }

    fn count_records(&self) -> lab::Result<u64> {
        Ok(self.lock().records.len() as u64)
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> lab::Result<bool> {
        let identity = self.identity(scope, key);
        let mut state = self.lock();
        if self.bug == Bug::ForgetKeepsTheRecord {
            return Ok(state.records.contains_key(&identity));
        }
        Ok(state.records.remove(&identity).is_some())
    }

    fn connect(&self) -> lab::Result<Self> {
        Ok(Memory {
            state: Arc::clone(&self.state),
            bug: self.bug,
            local_next: Mutex::new(0),
        })
    }
}
