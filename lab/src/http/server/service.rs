//! What the service does with a request once the HTTP layer has read it: who the caller is, the
//! claim on a key, the create, pruning. Synchronous; it runs on a store thread.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;

use super::ServeOptions;
use super::served::ServedStore;
use crate::error::{Error, Result};
use crate::http::contract::{self, problem};
use crate::http::problem::Problem;
use crate::http::retention::{self, Clock, Pruned, Retention, SystemClock};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::sqlite::{SqliteStore, response_text};
use crate::tool::{CreateRequest, Fault, Outcome, TicketId};

/// The longest token the server accepts, in bytes. Tokens are compared padded to this length, so
/// the comparison takes the same time whatever the presented token's length.
pub const MAX_TOKEN_BYTES: usize = 256;

/// A token, kept padded so comparing it reveals neither its content nor its length.
pub(super) struct Secret {
    padded: [u8; MAX_TOKEN_BYTES],
    length: u64,
}

impl Secret {
    /// A secret from `token`; `option` names where it came from in the refusal.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] naming `option` when the token is empty, blank, holds a space or a
    /// control character, or is longer than [`MAX_TOKEN_BYTES`].
    pub(super) fn new(option: &str, token: &str) -> Result<Secret> {
        check_token(option, token)?;
        let mut padded = [0; MAX_TOKEN_BYTES];
        padded[..token.len()].copy_from_slice(token.as_bytes());
        Ok(Secret {
            padded,
            length: token.len() as u64,
        })
    }

    /// Whether `presented` is this token, in time that depends on neither.
    fn matches(&self, presented: &[u8]) -> bool {
        let mut padded = [0; MAX_TOKEN_BYTES];
        let length = presented.len().min(MAX_TOKEN_BYTES);
        padded[..length].copy_from_slice(&presented[..length]);
        let same_bytes = self.padded.ct_eq(&padded);
        let same_length = self.length.ct_eq(&(presented.len() as u64));
        (same_bytes & same_length).into()
    }
}

/// The token rule, for `--caller NAME=TOKEN` and `--admin-token`.
///
/// # Errors
/// [`Error::InputInvalid`] naming `option`.
pub(super) fn check_token(option: &str, token: &str) -> Result<()> {
    let problem = if token.trim().is_empty() {
        Some("the token must not be empty or blank")
    } else if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("the token must not hold spaces or control characters")
    } else if token.len() > MAX_TOKEN_BYTES {
        Some("the token must be at most 256 bytes")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Error::InputInvalid {
            path: PathBuf::from(option),
            problem: problem.to_owned(),
        }),
        None => Ok(()),
    }
}

/// What a create sent back, for the HTTP layer to answer.
pub(super) enum Created {
    /// `201`, the saved response text.
    New(String),
    /// `201` with `Idempotent-Replayed: true`, the saved response text.
    Replayed(String),
    /// The test-only lost reply: the ticket is committed, and the connection must close without
    /// a byte of response.
    LostReply,
}

/// (caller, key) of a keyed create in progress.
type Entry = (String, String);

/// The service's state shared by every request.
pub(super) struct Service {
    callers: Vec<(Secret, Scope)>,
    admin_token: Option<Secret>,
    faults: bool,
    /// How many requests hold each key now. A key held by a request whose record does not exist
    /// yet is in progress; the others may join once the record exists, since they only read it.
    holders: Mutex<HashMap<Entry, usize>>,
    /// Signalled whenever a request lets go of its key.
    released: Condvar,
    /// How long a request whose key is in progress waits for it before it is answered 409.
    in_progress_wait: Duration,
    retention: Option<Retention>,
    clock: Arc<dyn Clock>,
    /// The connection pruning passes write on.
    pruner: Mutex<Option<SqliteStore>>,
}

/// What a request's claim on its key found.
enum Claim<'s> {
    Held(Holding<'s>),
    InProgress,
    Expired,
}

/// One request's hold on its key, released when the request is done however it ends.
struct Holding<'s> {
    service: &'s Service,
    entry: Entry,
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        let mut holders = self.service.holders();
        if let Some(count) = holders.get_mut(&self.entry) {
            *count -= 1;
            if *count == 0 {
                holders.remove(&self.entry);
            }
        }
        self.service.released.notify_all();
    }
}

impl Service {
    /// The service for `options`, with its tokens checked.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] without callers, with a token given twice, or with an empty,
    /// blank or malformed token.
    pub(super) fn new(options: &ServeOptions) -> Result<Service> {
        let invalid = |problem: String| Error::InputInvalid {
            path: PathBuf::from("--caller"),
            problem,
        };
        if options.callers.is_empty() {
            return Err(invalid(
                "at least one NAME=TOKEN is needed, e.g. --caller support-agent=secret-token"
                    .into(),
            ));
        }
        let mut callers = Vec::new();
        let mut seen = HashSet::new();
        for caller in &options.callers {
            let scope = Scope::new(caller.caller.as_str(), contract::CREATE_TICKET)?;
            if !seen.insert(caller.token.as_str()) {
                return Err(invalid(format!(
                    "the token of {:?} is given twice",
                    caller.caller
                )));
            }
            callers.push((Secret::new("--caller", &caller.token)?, scope));
        }
        let admin_token = match &options.admin_token {
            Some(token) => Some(Secret::new("--admin-token", token)?),
            None => None,
        };
        Ok(Service {
            callers,
            admin_token,
            faults: options.faults,
            holders: Mutex::new(HashMap::new()),
            released: Condvar::new(),
            in_progress_wait: options.limits.unwrap_or_default().in_progress_wait,
            retention: options.retention,
            clock: options
                .clock
                .clone()
                .unwrap_or_else(|| Arc::new(SystemClock)),
            pruner: Mutex::new(None),
        })
    }

    /// Whether the test-only fault header and endpoint are on.
    pub(super) fn faults(&self) -> bool {
        self.faults
    }

    /// Whether the admin endpoints are on.
    pub(super) fn has_admin(&self) -> bool {
        self.admin_token.is_some()
    }

    /// The caller whose bearer token is `token`. Every caller's token is compared, each in
    /// constant time, so the answer's timing names none of them.
    pub(super) fn caller(&self, token: &[u8]) -> Option<Scope> {
        let mut found = None;
        for (secret, scope) in &self.callers {
            if secret.matches(token) {
                found = Some(scope);
            }
        }
        found.cloned()
    }

    /// Whether `token` is the admin token (never, when the admin endpoints are off).
    pub(super) fn is_admin(&self, token: &[u8]) -> bool {
        self.admin_token
            .as_ref()
            .is_some_and(|secret| secret.matches(token))
    }

    /// Gives the pruner its connection.
    pub(super) fn set_pruner(&self, store: SqliteStore) {
        *self.pruner_store() = Some(store);
    }

    /// Closes the pruner's connection.
    pub(super) fn close_pruner(&self) {
        drop(self.pruner_store().take());
    }

    fn holders(&self) -> MutexGuard<'_, HashMap<Entry, usize>> {
        // The map holds plain strings and counts, consistent after any panic.
        self.holders.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn pruner_store(&self) -> MutexGuard<'_, Option<SqliteStore>> {
        // The guarded value is a connection; a panic elsewhere leaves it usable.
        self.pruner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // ANCHOR: http_create
    /// One create, on a store thread's connection.
    pub(super) fn create(
        &self,
        store: &dyn ServedStore,
        scope: &Scope,
        key: Option<&OperationKey>,
        payload: &Payload,
        fault: Fault,
    ) -> Result<Created, Problem> {
        // A request for a key whose first request is still in progress is told to come back,
        // not queued; a key whose record was pruned is told it expired.
        let _holding = match (key, store.sqlite()) {
            // On a store that other servers share, the database's unique index is the claim.
            (Some(_), None) | (None, _) => None,
            (Some(key), Some(sqlite)) => match self.claim(sqlite, scope, key) {
                Ok(Claim::Held(holding)) => Some(holding),
                Ok(Claim::InProgress) => return Err(in_progress(key)),
                Ok(Claim::Expired) => return Err(expired(key)),
                Err(err) => return Err(Problem::internal(err)),
            },
        };
        let request = CreateRequest {
            scope,
            key,
            payload,
            fault,
        };
        match store.create(request) {
            Ok(Outcome::Created(id)) => {
                if let (Some(key), Some(_), Some(sqlite)) = (key, self.retention, store.sqlite()) {
                    let noted =
                        retention::note_record(sqlite.connection(), scope, key, self.clock.now());
                    if let Err(err) = noted {
                        // The record stands without a time; the next pass dates it (kept longer).
                        eprintln!("lab serve: cannot note when {key} was created: {err}");
                    }
                }
                Ok(Created::New(created_text(&id)))
            }
            Ok(Outcome::Replayed(id)) => {
                // The record was read a moment ago and records never change: the saved text is
                // there. Fall back to the same text built from the id all the same.
                let saved = key
                    .and_then(|key| store.saved_response(scope, key).ok().flatten())
                    .unwrap_or_else(|| created_text(&id));
                Ok(Created::Replayed(saved))
            }
            Err(Error::OutcomeUnknown { .. }) if fault == Fault::LoseReply => {
                Ok(Created::LostReply)
            }
            // PostgreSQL gave up waiting for another server's uncommitted claim on this key (or
            // lost its connection mid-statement): nothing was written here, and a retry with the
            // same key learns the outcome.
            Err(Error::OutcomeUnknown { .. }) if store.sqlite().is_none() => {
                Err(key.map_or_else(|| Problem::internal("outcome unknown"), in_progress))
            }
            Err(err @ Error::PayloadConflict { .. }) => {
                Err(Problem::new(problem::PAYLOAD_CONFLICT, err))
            }
            Err(err @ Error::InjectedFailure) => Err(Problem::new(problem::INJECTED_FAILURE, err)),
            Err(err) => Err(Problem::internal(err)),
        }
    }
    // ANCHOR_END: http_create

    // ANCHOR: http_claim
    /// Claims the key for this request, under the lock that a pruning pass also holds, so a key
    /// cannot expire between the check and the create.
    ///
    /// A key another request holds is in progress only while its record does not exist: once
    /// the record is committed, any number of retries may hold the key at once, since each only
    /// reads the record and replays it (or finds a conflict). A request that finds its key in
    /// progress waits a moment for it to be let go, so requests released together converge
    /// without another round trip; only a first request still running after the wait makes a 409.
    fn claim(&self, store: &SqliteStore, scope: &Scope, key: &OperationKey) -> Result<Claim<'_>> {
        let entry = (scope.caller().to_owned(), key.as_str().to_owned());
        let deadline = Instant::now() + self.in_progress_wait;
        let mut holders = self.holders();
        loop {
            if !holders.contains_key(&entry) {
                if self.retention.is_some()
                    && retention::is_expired(store.connection(), scope, key)?
                {
                    return Ok(Claim::Expired);
                }
                break;
            }
            if store.saved_response(scope, key)?.is_some() {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Claim::InProgress);
            }
            holders = self
                .released
                .wait_timeout(holders, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *holders.entry(entry.clone()).or_insert(0) += 1;
        Ok(Claim::Held(Holding {
            service: self,
            entry,
        }))
    }
    // ANCHOR_END: http_claim

    /// One pruning pass now, at the clock's time.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] when the server was started without retention;
    /// [`Error::Store`] on a database error.
    pub(super) fn prune(&self) -> Result<Pruned> {
        let Some(retention) = self.retention else {
            return Err(Error::InputInvalid {
                path: PathBuf::from("--retention-seconds"),
                problem: "the server was started without retention".to_owned(),
            });
        };
        // Holders' lock first, then the connection: the same order as a request's claim.
        let holders = self.holders();
        let pruner = self.pruner_store();
        let Some(store) = pruner.as_ref() else {
            return Ok(Pruned::default());
        };
        let held: HashSet<Entry> = holders.keys().cloned().collect();
        retention::prune(store.connection(), self.clock.now(), retention, &held)
    }
}

/// The body of a 201: the saved form for a numeric id, the same shape with a string otherwise.
fn created_text(id: &TicketId) -> String {
    match id.as_i64() {
        Some(n) => response_text(n),
        None => serde_json::json!({ "ticket_id": id }).to_string(),
    }
}

fn in_progress(key: &OperationKey) -> Problem {
    let detail = format!(
        "a request with key {:?} is being processed; retry after {} s with the same key",
        key.as_str(),
        contract::RETRY_AFTER_SECONDS
    );
    Problem::new(problem::IN_FLIGHT, detail)
}

fn expired(key: &OperationKey) -> Problem {
    let detail = format!(
        "the record of key {:?} was pruned after the retention window; this service cannot say \
         whether it took effect and will not create again under it: review before any new key",
        key.as_str()
    );
    Problem::new(problem::KEY_EXPIRED, detail)
}
