//! `lab runner`: a durable caller. It saves each operation (scope, key, payload, state) in its own
//! SQLite file before it sends anything, retries transport failures with the same key under a
//! budget, records how each operation ended, and on start resumes every operation left
//! unfinished. It never makes up a new key: an outcome it cannot learn goes to a person.
//!
//! A fault of the runner's own configuration (a service that refuses connections, a token it
//! refuses) is told apart from an uncertain outcome: such a send cannot have taken effect, so
//! the operation stays pending ([`State::Held`]) and the next run, with the configuration fixed,
//! sends it again with the same key.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::sim::SplitMix64;
use crate::suite::Operation;
use crate::tool::{CreateRequest, Fault, TicketId, TicketTool};

/// The environment variable that makes the runner pause at a [`PausePoint`], so a crash test can
/// kill it there: `after-save` or `after-reply`.
pub const PAUSE_VARIABLE: &str = "LAB_RUNNER_PAUSE_AT";

/// The environment variable that makes the runner ask, on the first send of each operation's
/// run, for its reply to be lost (`lose-reply`), from a service started with faults on, so a
/// test sees the retry with the same key end in a replay. Test only, like [`PAUSE_VARIABLE`].
pub const FAULT_VARIABLE: &str = "LAB_RUNNER_FIRST_SEND_FAULT";

/// The fault [`FAULT_VARIABLE`] asks for on the first send of each run: [`Fault::None`] when it
/// is unset.
///
/// # Errors
/// [`Error::InputInvalid`] for a value other than `lose-reply`.
pub fn first_send_fault_from_environment() -> Result<Fault> {
    match std::env::var(FAULT_VARIABLE).ok().as_deref() {
        None | Some("") => Ok(Fault::None),
        Some("lose-reply") => Ok(Fault::LoseReply),
        Some(other) => Err(Error::InputInvalid {
            subject: FAULT_VARIABLE.to_owned(),
            problem: format!("{other:?}: expected lose-reply"),
        }),
    }
}

/// The runner's schema: one row per operation, keyed by its whole identity.
pub const RUNNER_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS operations (
    caller    TEXT NOT NULL,
    operation TEXT NOT NULL,
    key       TEXT NOT NULL,
    payload   TEXT NOT NULL,
    state     TEXT NOT NULL CHECK (state IN ('pending', 'succeeded', 'rejected', 'needs_review')),
    ticket_id INTEGER,
    note      TEXT,
    attempts  INTEGER NOT NULL DEFAULT 0,
    refused_sends INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (caller, operation, key)
) WITHOUT ROWID;
";

/// Added to a runner file made before the column existed. Its earlier sends are not known to have
/// been refused, so none counts as refused: such an operation is never held on their account.
const ADD_REFUSED_SENDS: &str =
    "ALTER TABLE operations ADD COLUMN refused_sends INTEGER NOT NULL DEFAULT 0";

/// How hard the runner tries before it hands an operation to a person. The budget bounds retries;
/// it has nothing to do with duplicates, which the key prevents however often the runner retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Sends per run of an operation, the first included (at least 1).
    pub attempts: u32,
    /// The ceiling of the wait after the first failed send; it doubles after each further one.
    /// The wait itself is drawn between zero and the ceiling ("full jitter"), so callers that
    /// failed together do not come back together.
    pub first_backoff: Duration,
    /// The highest ceiling of a wait between two sends.
    pub max_backoff: Duration,
    /// No send starts later than this after the run of an operation began.
    pub deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            first_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            deadline: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The ceiling of the wait after failed send number `failed` (1 for the first).
    pub fn backoff(&self, failed: u32) -> Duration {
        let doubled = self
            .first_backoff
            .saturating_mul(1 << failed.saturating_sub(1).min(16));
        doubled.min(self.max_backoff)
    }

    /// The wait after failed send number `failed`: drawn uniformly from zero to
    /// [`RetryPolicy::backoff`] ("full jitter", as in the AWS Architecture Blog's "Exponential
    /// Backoff And Jitter"), by `jitter`.
    pub fn jittered_backoff(&self, failed: u32, jitter: &mut Jitter) -> Duration {
        let ceiling = self.backoff(failed);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(jitter.below_or_at(nanos))
    }
}

/// The random draws of the runner's backoff, from the simulator's seeded SplitMix64, so a test
/// that fixes the seed sees the same waits every run. Not for anything secret.
#[derive(Clone, Debug)]
pub struct Jitter(SplitMix64);

impl Jitter {
    /// Draws that follow from `seed`.
    pub fn seeded(seed: u64) -> Jitter {
        Jitter(SplitMix64::new(seed))
    }

    /// Draws seeded from the clock and the process: two runners started together still differ.
    pub fn from_entropy() -> Jitter {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        // Truncating the nanoseconds keeps their fast-moving low bits, the ones that differ.
        Jitter::seeded(nanos as u64 ^ (u64::from(std::process::id()) << 32))
    }

    /// A draw from 0 to `most`, both included.
    pub fn below_or_at(&mut self, most: u64) -> u64 {
        match most {
            u64::MAX => self.0.next_u64(),
            most => self.0.between(0, most),
        }
    }
}

/// Where an operation stands in the runner's file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Saved; no final answer yet. Resumed on the next start.
    Pending,
    /// The service reported the ticket, created or replayed.
    Succeeded {
        /// The ticket the service reported.
        ticket_id: TicketId,
    },
    /// The service refused the operation for good: its key was first used with another payload.
    Rejected {
        /// What the service said.
        reason: String,
    },
    /// The runner cannot learn the outcome alone: the budget ran out, or the service no longer
    /// recognises the key. A person must look before anything is sent again.
    NeedsReview {
        /// Why.
        reason: String,
    },
    /// Still pending, because of the runner's own configuration: the service refused the
    /// connection, or refused the token, and no send of this operation in any run can have taken
    /// effect (each was refused before the service could act). Resumed on the next start, with
    /// the same key, like [`State::Pending`]; saved as `pending` with the reason as its note.
    Held {
        /// What to fix, naming the option.
        reason: String,
    },
}

impl State {
    /// True for the states the next start sends again: pending and held.
    pub fn is_unfinished(&self) -> bool {
        matches!(self, State::Pending | State::Held { .. })
    }
}

/// One operation as the runner saved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedOperation {
    /// The caller and operation type.
    pub scope: Scope,
    /// The key, saved before the first send and never replaced.
    pub key: OperationKey,
    /// The payload, as canonical JSON.
    pub payload: Payload,
    /// Where it stands.
    pub state: State,
    /// Sends so far, over every run.
    pub attempts: u32,
}

impl std::fmt::Display for SavedOperation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = self.key.as_str();
        let attempts = self.attempts;
        match &self.state {
            State::Pending => write!(f, "{key}: pending after {attempts} send(s)"),
            State::Succeeded { ticket_id } => {
                write!(
                    f,
                    "{key}: succeeded, ticket {ticket_id}, after {attempts} send(s)"
                )
            }
            State::Rejected { reason } => write!(f, "{key}: rejected: {reason}"),
            State::NeedsReview { reason } => write!(f, "{key}: needs review: {reason}"),
            State::Held { reason } => write!(
                f,
                "{key}: held, still pending after {attempts} send(s): {reason}"
            ),
        }
    }
}

/// A point where the runner can be made to stop for a crash test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PausePoint {
    /// The operation is saved; nothing has been sent.
    AfterSave,
    /// The service answered with a ticket; the runner has not recorded it.
    AfterReply,
}

impl PausePoint {
    /// The pause point [`PAUSE_VARIABLE`] names, if it is set.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] for a value other than `after-save` or `after-reply`.
    pub fn from_environment() -> Result<Option<PausePoint>> {
        match std::env::var(PAUSE_VARIABLE).ok().as_deref() {
            None | Some("") => Ok(None),
            Some("after-save") => Ok(Some(PausePoint::AfterSave)),
            Some("after-reply") => Ok(Some(PausePoint::AfterReply)),
            Some(other) => Err(Error::InputInvalid {
                subject: PAUSE_VARIABLE.to_owned(),
                problem: format!("{other:?}: expected after-save or after-reply"),
            }),
        }
    }

    fn name(self) -> &'static str {
        match self {
            PausePoint::AfterSave => "after-save",
            PausePoint::AfterReply => "after-reply",
        }
    }
}

/// What the runner asks about the service it was configured with, to tell a fault of its own
/// configuration (nothing reached the service, or the service refused the credentials) from an
/// outcome it cannot know. A check must never send anything that could create a ticket.
pub trait ServiceCheck {
    /// Before an operation's first send of a run: why nothing can reach the service as
    /// configured (it refuses connections), or `None` when it can be tried.
    fn unreachable(&self) -> Option<String>;

    /// After the service answered a send with something outside the contract (`answer`): why
    /// the runner's configuration is at fault, or `None` when the answer must go to a person.
    /// Only an answer that shows the send was turned away before the service could act (its
    /// token refused, no ticket service at the address) may be called a configuration fault:
    /// the runner then counts the send as refused.
    fn refused_configuration(&self, answer: &Error) -> Option<String>;
}

/// The durable caller, over any [`TicketTool`].
pub struct Runner<T> {
    db: Connection,
    path: PathBuf,
    tool: T,
    policy: RetryPolicy,
    /// The draws of the backoff's jitter; a cell because a run takes `&self`.
    jitter: std::cell::RefCell<Jitter>,
    pause: Option<PausePoint>,
    first_send_fault: Fault,
    check: Option<Box<dyn ServiceCheck>>,
    before_send: Option<Box<dyn Fn()>>,
}

impl<T: TicketTool> Runner<T> {
    /// Opens (creating if needed) the runner's file at `path`. A file that is not a SQLite
    /// database, or a database of something else, is refused before anything is written to it.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] naming the file when it is a folder, a device, not SQLite, or holds
    /// tables of something else; [`Error::Store`] if the file cannot be opened or its schema
    /// created.
    pub fn open(path: impl AsRef<Path>, tool: T, policy: RetryPolicy) -> Result<Runner<T>> {
        let path = path.as_ref().to_owned();
        crate::database_file::check(&path)?;
        let db = Connection::open(&path)?;
        db.busy_timeout(Duration::from_secs(10))?;
        // Read before the first write: switching the journal mode rewrites the file's header.
        let fresh = check_schema(&db, &path)?;
        if fresh {
            // A file the runner made itself. One it finds already holding its table keeps the
            // journal mode it has, so opening it (to be refused a bad --key, say) changes nothing.
            db.pragma_update(None, "journal_mode", "WAL")?;
        }
        // Every state change must survive a crash of the runner the moment after it returns.
        db.pragma_update(None, "synchronous", "FULL")?;
        db.execute_batch(RUNNER_SCHEMA)?;
        Ok(Runner {
            db,
            path,
            tool,
            policy,
            jitter: std::cell::RefCell::new(Jitter::from_entropy()),
            pause: None,
            first_send_fault: Fault::None,
            check: None,
            before_send: None,
        })
    }

    /// The same runner, drawing its backoff's waits from `jitter` (a test fixes the seed).
    pub fn with_jitter(self, jitter: Jitter) -> Runner<T> {
        Runner {
            jitter: std::cell::RefCell::new(jitter),
            ..self
        }
    }

    /// The same runner, asking `check` before each operation's run and after a refusal, so a
    /// fault of its own configuration leaves the operation pending instead of in review.
    pub fn with_check(self, check: impl ServiceCheck + 'static) -> Runner<T> {
        Runner {
            check: Some(Box::new(check)),
            ..self
        }
    }

    /// The same runner, pausing at `pause` (for crash tests).
    pub fn with_pause(self, pause: Option<PausePoint>) -> Runner<T> {
        Runner { pause, ..self }
    }

    /// The same runner, asking for `fault` on the first send of each operation's run (for tests
    /// against a service with faults on; see [`FAULT_VARIABLE`]).
    pub fn with_first_send_fault(self, fault: Fault) -> Runner<T> {
        Runner {
            first_send_fault: fault,
            ..self
        }
    }

    /// The same runner, calling `hook` before it counts each send: the point between two sends
    /// (for the model's replays, which stop a runner there or crash it there).
    pub fn with_before_send(self, hook: impl Fn() + 'static) -> Runner<T> {
        Runner {
            before_send: Some(Box::new(hook)),
            ..self
        }
    }

    /// The runner's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Saves `operation` (unless it is saved already) and runs it to a final state or until the
    /// budget is spent.
    ///
    /// # Errors
    /// [`Error::PayloadConflict`] when the runner already saved this key with another payload
    /// (nothing is sent); [`Error::Store`] if the runner's file fails.
    pub fn submit(&self, operation: &Operation) -> Result<SavedOperation> {
        let saved = match self.find(&operation.scope, &operation.operation_key)? {
            Some(saved) if saved.payload != operation.payload => {
                return Err(Error::PayloadConflict {
                    key: operation.operation_key.to_string(),
                });
            }
            Some(saved) => saved,
            None => self.save(operation)?,
        };
        self.pause_at(PausePoint::AfterSave, &saved.key);
        if saved.state.is_unfinished() {
            self.drive(saved)
        } else {
            Ok(saved)
        }
    }

    /// Puts operations in review back to pending, so this run (or the next) sends them again
    /// with their saved keys: for a person who looked on the service and found no ticket, or who
    /// fixed what made the runner give up. Every key is checked before any is changed; nothing is
    /// sent here.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] when no operation is saved under a key, or it is not in review
    /// (then none is changed); [`Error::Store`] if the runner's file fails.
    pub fn reopen(&self, scope: &Scope, keys: &[OperationKey]) -> Result<Vec<SavedOperation>> {
        let mut in_review = Vec::new();
        for key in keys {
            let refused = |problem: String| Error::InputInvalid {
                subject: "--resend".to_owned(),
                problem: format!("{:?}: {problem}", key.as_str()),
            };
            match self.find(scope, key)? {
                None => {
                    return Err(refused(format!(
                        "{} holds no operation of caller {} with this key",
                        self.path.display(),
                        scope.caller()
                    )));
                }
                Some(saved) if matches!(saved.state, State::NeedsReview { .. }) => {
                    in_review.push(saved);
                }
                Some(saved) => {
                    return Err(refused(format!(
                        "only an operation in review is sent again; this one is {saved}"
                    )));
                }
            }
        }
        in_review
            .into_iter()
            .map(|saved| self.record(saved, State::Pending))
            .collect()
    }

    /// The operation saved under `scope` and `key`, if any; nothing is sent.
    ///
    /// # Errors
    /// [`Error::Store`] if the runner's file fails, or the row does not read back.
    pub fn saved(&self, scope: &Scope, key: &OperationKey) -> Result<Option<SavedOperation>> {
        self.find(scope, key)
    }

    /// Runs every operation still pending (or held) in the file, with its saved key, in key order.
    ///
    /// # Errors
    /// [`Error::Store`] if the runner's file fails.
    pub fn resume(&self) -> Result<Vec<SavedOperation>> {
        let pending: Vec<SavedOperation> = self
            .operations()?
            .into_iter()
            .filter(|saved| saved.state.is_unfinished())
            .collect();
        pending.into_iter().map(|saved| self.drive(saved)).collect()
    }

    /// Every operation in the file, by scope and key.
    ///
    /// # Errors
    /// [`Error::Store`] if the runner's file fails, or a row does not read back.
    pub fn operations(&self) -> Result<Vec<SavedOperation>> {
        let mut statement = self.db.prepare_cached(
            "SELECT caller, operation, key, payload, state, ticket_id, note, attempts
             FROM operations ORDER BY caller, operation, key",
        )?;
        let rows = statement.query_map([], Row::read)?;
        rows.map(|row| row?.into_saved()).collect()
    }

    fn find(&self, scope: &Scope, key: &OperationKey) -> Result<Option<SavedOperation>> {
        self.db
            .prepare_cached(
                "SELECT caller, operation, key, payload, state, ticket_id, note, attempts
                 FROM operations WHERE caller = ?1 AND operation = ?2 AND key = ?3",
            )?
            .query_row(
                params![scope.caller(), scope.operation(), key.as_str()],
                Row::read,
            )
            .optional()?
            .map(Row::into_saved)
            .transpose()
    }

    // ANCHOR: runner_save
    /// Saves the operation as pending before anything is sent: after a crash from here on, the
    /// next start finds it and resumes it with the same key.
    fn save(&self, operation: &Operation) -> Result<SavedOperation> {
        self.db
            .prepare_cached(
                "INSERT INTO operations (caller, operation, key, payload, state)
                 VALUES (?1, ?2, ?3, ?4, 'pending')",
            )?
            .execute(params![
                operation.scope.caller(),
                operation.scope.operation(),
                operation.operation_key.as_str(),
                operation.payload.canonical(),
            ])?;
        Ok(SavedOperation {
            scope: operation.scope.clone(),
            key: operation.operation_key.clone(),
            payload: operation.payload.clone(),
            state: State::Pending,
            attempts: 0,
        })
    }
    // ANCHOR_END: runner_save

    // ANCHOR: runner_drive
    /// Sends the saved operation with its saved key until the service gives a final answer, the
    /// budget is spent, or the deadline passes.
    fn drive(&self, mut saved: SavedOperation) -> Result<SavedOperation> {
        // Sends of this operation, over every run, that the service turned away before it could
        // act. Held means "nothing took effect": true only while every send so far was refused.
        let mut refused = self.refused_sends(&saved)?;
        // Nothing can reach the service: send nothing, and keep the operation pending if no
        // earlier send can have taken effect.
        if let Some(reason) = self.check.as_ref().and_then(|check| check.unreachable()) {
            let state = self.held_unless_sent(&saved, refused, reason);
            return self.record(saved, state);
        }
        let started = Instant::now();
        let request = CreateRequest::keyed(&saved.scope, &saved.key, &saved.payload);
        let mut last_failure = String::new();
        for send in 1..=self.policy.attempts.max(1) {
            if send > 1 {
                let wait = self
                    .policy
                    .jittered_backoff(send - 1, &mut self.jitter.borrow_mut());
                if started.elapsed() + wait > self.policy.deadline {
                    last_failure = format!("deadline reached; last failure: {last_failure}");
                    break;
                }
                std::thread::sleep(wait);
            }
            if let Some(hook) = &self.before_send {
                hook();
            }
            saved.attempts += 1;
            self.count_send(&saved)?;
            let sent = if send == 1 {
                request.with_fault(self.first_send_fault)
            } else {
                request
            };
            let final_state = match self.tool.create(sent) {
                Ok(outcome) => {
                    self.pause_at(PausePoint::AfterReply, &saved.key);
                    State::Succeeded {
                        ticket_id: outcome.ticket_id().clone(),
                    }
                }
                Err(err @ Error::PayloadConflict { .. }) => State::Rejected {
                    reason: err.to_string(),
                },
                Err(err @ Error::KeyExpired { .. }) => State::NeedsReview {
                    reason: err.to_string(),
                },
                // The service answered, and the answer is not in the contract: retrying the same
                // request would get the same answer. A refused token is the runner's own fault:
                // the send was turned away, and if every send was, it stays pending for a run
                // with the token fixed.
                Err(err @ Error::Http { .. }) => {
                    self.outside_contract(&saved, &mut refused, &err)?
                }
                // A lost reply, a key in flight, a failure rolled back: the same key again. The
                // send may have taken effect.
                Err(err) => {
                    last_failure = err.to_string();
                    continue;
                }
            };
            return self.record(saved, final_state);
        }
        let reason = format!("no answer after {} send(s): {last_failure}", saved.attempts);
        self.record(saved, State::NeedsReview { reason })
    }
    // ANCHOR_END: runner_drive

    /// The state after an answer outside the contract: held when the check finds the send was
    /// turned away for the runner's own configuration (counted in `refused`), else in review.
    fn outside_contract(
        &self,
        saved: &SavedOperation,
        refused: &mut u32,
        err: &Error,
    ) -> Result<State> {
        let refusal = self
            .check
            .as_ref()
            .and_then(|check| check.refused_configuration(err));
        Ok(match refusal {
            Some(reason) => {
                *refused += 1;
                self.count_refused(saved, *refused)?;
                self.held_unless_sent(saved, *refused, reason)
            }
            None => State::NeedsReview {
                reason: format!(
                    "the service answered outside the contract ({err}) to send {} of key {}",
                    saved.attempts,
                    saved.key.as_str()
                ),
            },
        })
    }

    /// [`State::Held`] with `reason` when every send of `saved` so far, in any run, was refused
    /// before the service could act; otherwise [`State::NeedsReview`], since an earlier send may
    /// have created the ticket.
    fn held_unless_sent(&self, saved: &SavedOperation, refused: u32, reason: String) -> State {
        if saved.attempts <= refused {
            return State::Held { reason };
        }
        State::NeedsReview {
            reason: format!(
                "{reason}; but {} of its {} send(s) got no answer the runner understood, so the \
                 service may hold a ticket for key {}",
                saved.attempts - refused,
                saved.attempts,
                saved.key.as_str()
            ),
        }
    }

    /// How many sends of `saved`, over every run, the service refused before it could act.
    fn refused_sends(&self, saved: &SavedOperation) -> Result<u32> {
        Ok(self
            .db
            .prepare_cached(
                "SELECT refused_sends FROM operations
                 WHERE caller = ?1 AND operation = ?2 AND key = ?3",
            )?
            .query_row(
                params![
                    saved.scope.caller(),
                    saved.scope.operation(),
                    saved.key.as_str()
                ],
                |row| row.get(0),
            )?)
    }

    fn count_refused(&self, saved: &SavedOperation, refused: u32) -> Result<()> {
        self.db
            .prepare_cached(
                "UPDATE operations SET refused_sends = ?4
                 WHERE caller = ?1 AND operation = ?2 AND key = ?3",
            )?
            .execute(params![
                saved.scope.caller(),
                saved.scope.operation(),
                saved.key.as_str(),
                refused,
            ])?;
        Ok(())
    }

    fn count_send(&self, saved: &SavedOperation) -> Result<()> {
        self.db
            .prepare_cached(
                "UPDATE operations SET attempts = ?4
                 WHERE caller = ?1 AND operation = ?2 AND key = ?3",
            )?
            .execute(params![
                saved.scope.caller(),
                saved.scope.operation(),
                saved.key.as_str(),
                saved.attempts,
            ])?;
        Ok(())
    }

    fn record(&self, mut saved: SavedOperation, state: State) -> Result<SavedOperation> {
        let (name, ticket_id, note) = match &state {
            State::Pending => ("pending", None, None),
            State::Succeeded { ticket_id } => ("succeeded", Some(ticket_id.clone()), None),
            State::Rejected { reason } => ("rejected", None, Some(reason.as_str())),
            State::NeedsReview { reason } => ("needs_review", None, Some(reason.as_str())),
            State::Held { reason } => ("pending", None, Some(reason.as_str())),
        };
        self.db
            .prepare_cached(
                "UPDATE operations SET state = ?4, ticket_id = ?5, note = ?6
                 WHERE caller = ?1 AND operation = ?2 AND key = ?3",
            )?
            .execute(params![
                saved.scope.caller(),
                saved.scope.operation(),
                saved.key.as_str(),
                name,
                ticket_id,
                note,
            ])?;
        saved.state = state;
        Ok(saved)
    }

    fn pause_at(&self, point: PausePoint, key: &OperationKey) {
        if self.pause != Some(point) {
            return;
        }
        // The test waits for this line, then kills the process with SIGKILL.
        println!("paused at {} for {}", point.name(), key.as_str());
        let _ = std::io::Write::flush(&mut std::io::stdout());
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// A row of the runner's table, before validation.
struct Row {
    caller: String,
    operation: String,
    key: String,
    payload: String,
    state: String,
    ticket_id: Option<TicketId>,
    note: Option<String>,
    attempts: u32,
}

impl Row {
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
        Ok(Row {
            caller: row.get(0)?,
            operation: row.get(1)?,
            key: row.get(2)?,
            payload: row.get(3)?,
            state: row.get(4)?,
            ticket_id: row.get(5)?,
            note: row.get(6)?,
            attempts: row.get(7)?,
        })
    }

    fn into_saved(self) -> Result<SavedOperation> {
        let note = self.note.unwrap_or_default();
        let state = match (self.state.as_str(), self.ticket_id) {
            ("pending", _) if note.is_empty() => State::Pending,
            ("pending", _) => State::Held { reason: note },
            ("succeeded", Some(ticket_id)) => State::Succeeded { ticket_id },
            ("rejected", _) => State::Rejected { reason: note },
            ("needs_review", _) => State::NeedsReview { reason: note },
            (other, _) => {
                return Err(Error::InputInvalid {
                    subject: "runner file".to_owned(),
                    problem: format!(
                        "operation {:?} has state {other:?} without a ticket",
                        self.key
                    ),
                });
            }
        };
        Ok(SavedOperation {
            scope: Scope::new(self.caller, self.operation)?,
            key: OperationKey::try_from(self.key)?,
            payload: Payload::from_json_text(&self.payload)?,
            state,
            attempts: self.attempts,
        })
    }
}

/// The columns of the runner's table, in order, as `RUNNER_SCHEMA` creates them.
const COLUMNS: [&str; 9] = [
    "caller",
    "operation",
    "key",
    "payload",
    "state",
    "ticket_id",
    "note",
    "attempts",
    "refused_sends",
];

/// Refuses a database that holds anything but the runner's own table, so the runner never adds
/// its table to another program's file. True when the file holds no table at all yet.
fn check_schema(db: &Connection, path: &Path) -> Result<bool> {
    let tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let invalid = |problem: String| Error::InputInvalid {
        subject: path.display().to_string(),
        problem,
    };
    match tables.as_slice() {
        [] => Ok(true),
        [only] if only == "operations" => {
            let columns: Vec<String> = db
                .prepare("SELECT name FROM pragma_table_info('operations') ORDER BY cid")?
                .query_map([], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            if columns == COLUMNS {
                Ok(false)
            } else if columns == COLUMNS[..COLUMNS.len() - 1] {
                // A file of an earlier runner: it gains the column, every send counted unrefused.
                db.execute_batch(ADD_REFUSED_SENDS)?;
                Ok(false)
            } else {
                Err(invalid(format!(
                    "its `operations` table has the columns {}, not the runner's",
                    columns.join(", ")
                )))
            }
        }
        _ => Err(invalid(format!(
            "a SQLite database of something else (tables: {}); the runner keeps a file of its own",
            tables.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jittered_wait_lies_between_zero_and_the_doubling_ceiling() {
        let policy = RetryPolicy::default();
        let mut jitter = Jitter::seeded(7);
        for failed in 1..=8 {
            let ceiling = policy.backoff(failed);
            for _ in 0..200 {
                let wait = policy.jittered_backoff(failed, &mut jitter);
                assert!(wait <= ceiling, "send {failed}: {wait:?} over {ceiling:?}");
            }
        }
        assert_eq!(policy.backoff(1), policy.first_backoff);
        assert_eq!(policy.backoff(30), policy.max_backoff);
    }

    #[test]
    fn the_same_seed_draws_the_same_waits_and_another_seed_others() {
        let policy = RetryPolicy::default();
        let draws = |seed| {
            let mut jitter = Jitter::seeded(seed);
            (1..=6)
                .map(|failed| policy.jittered_backoff(failed, &mut jitter))
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(42), draws(42));
        assert_ne!(draws(42), draws(43));
    }

    #[test]
    fn full_jitter_spreads_the_waits_over_the_whole_range() {
        // Not a constant, not only the ceiling: the draws cover the low and the high quarter, and
        // their mean is near half the ceiling.
        let mut jitter = Jitter::seeded(1);
        let draws: Vec<u64> = (0..4000).map(|_| jitter.below_or_at(1000)).collect();
        assert!(draws.iter().any(|d| *d < 250) && draws.iter().any(|d| *d > 750));
        assert!(draws.iter().all(|d| *d <= 1000));
        let mean = draws.iter().sum::<u64>() / draws.len() as u64;
        assert!((450..=550).contains(&mean), "mean {mean}");
        assert_eq!(Jitter::seeded(9).below_or_at(0), 0);
    }
}
