//! In-process writer coordination with group commit, one per database file per process.
//!
//! Callers put their creates on a shared queue. Whoever finds no commit in progress becomes the
//! leader: it takes every create queued at that moment, runs them on the file's one write
//! connection in one transaction, each in its own savepoint, commits once, and only then hands
//! each caller its own outcome. Callers that arrive meanwhile wait on a condition variable and are
//! served by the next leader, so nobody sleeps in SQLite's busy handler and a burst shares one
//! fsync. An uncontended caller leads its own batch of one: no thread hand-off, no savepoint, and
//! no write lock until it has something to write.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};

use rusqlite::Connection;

use super::{
    Call, Lifetime, StoreOptions, create_in_transaction, insert_new, lookup, open_connection,
};
use crate::error::{Error, Result};
use crate::tool::{Fault, Outcome, Step};

/// A queued create, owned so the leader can run it on its thread.
struct Job {
    ticket: u64,
    caller: String,
    operation: String,
    key: Option<String>,
    payload: String,
    fault: Fault,
}

impl Job {
    fn call(&self) -> Call<'_> {
        Call {
            caller: &self.caller,
            operation: &self.operation,
            key: self.key.as_deref(),
            payload: &self.payload,
            fault: self.fault,
        }
    }
}

/// What the callers share, under one lock.
#[derive(Default)]
struct Queue {
    next_ticket: u64,
    waiting: Vec<Job>,
    /// Outcomes of finished jobs, by queue ticket, until their caller takes them.
    finished: HashMap<u64, Result<Outcome>>,
    leading: bool,
    counters: GroupCommits,
}

/// How many shared transactions the store's callers ran, and how many creates they held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupCommits {
    /// Transactions begun (each ends in one commit, or one rollback if the commit failed).
    pub transactions: u64,
    /// Creates run in them.
    pub creates: u64,
}

/// The coordination point of one database file, shared by every store on it in this process.
pub(super) struct Writer {
    queue: Mutex<Queue>,
    served: Condvar,
    /// The one write connection; only the current leader locks it.
    connection: Mutex<Connection>,
    max_batch: usize,
}

/// Writers by canonical file path.
fn registry() -> &'static Mutex<HashMap<PathBuf, Weak<Writer>>> {
    static WRITERS: OnceLock<Mutex<HashMap<PathBuf, Weak<Writer>>>> = OnceLock::new();
    WRITERS.get_or_init(Mutex::default)
}

/// Locks a mutex even if a panicking thread poisoned it: every update below leaves the data
/// consistent at each step, and a leader that panics fails its batch before it unwinds.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

impl Writer {
    /// The writer for `path`, made if no store in this process has one.
    pub(super) fn for_file(
        path: &Path,
        options: StoreOptions,
        lifetime: Lifetime,
    ) -> Result<Arc<Writer>> {
        let canonical = path.canonicalize().map_err(|source| Error::Io {
            action: format!("cannot resolve the database path {}", path.display()),
            source,
        })?;
        let mut writers = lock(registry());
        writers.retain(|_, writer| writer.strong_count() > 0);
        if let Some(writer) = writers.get(&canonical).and_then(Weak::upgrade) {
            return Ok(writer);
        }
        let writer = Arc::new(Writer {
            queue: Mutex::default(),
            served: Condvar::new(),
            connection: Mutex::new(open_connection(path, options, lifetime)?),
            max_batch: options.max_batch.max(1),
        });
        writers.insert(canonical, Arc::downgrade(&writer));
        Ok(writer)
    }

    /// What the callers have done so far.
    pub(super) fn group_commits(&self) -> GroupCommits {
        lock(&self.queue).counters
    }

    /// Runs one create and returns its outcome once the transaction holding it has committed.
    ///
    /// With no commit in progress the caller runs its create at once on the shared connection,
    /// reading before it takes the write lock ([`create_read_first`]). Otherwise it first reads
    /// its record on its own connection, `reader` (a retry whose record exists needs no queue),
    /// then queues and waits to be served by the next batch.
    pub(super) fn create(&self, call: &Call<'_>, reader: &Connection) -> Result<Outcome> {
        let mut queue = lock(&self.queue);
        if !queue.leading && queue.waiting.is_empty() {
            queue.leading = true;
            drop(queue);
            let mut lead = Lead::new(self, &[]);
            let db = lock(&self.connection);
            lead.ran_transaction(1);
            let outcome = create_read_first(&db, call);
            drop(db);
            lead.finish(Vec::new());
            return outcome;
        }
        if queue.leading {
            drop(queue);
            if let Some(saved) = lookup(reader, call)? {
                return saved;
            }
            queue = lock(&self.queue);
        }
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.waiting.push(Job {
            ticket,
            caller: call.caller.to_owned(),
            operation: call.operation.to_owned(),
            key: call.key.map(str::to_owned),
            payload: call.payload.to_owned(),
            fault: call.fault,
        });
        loop {
            if let Some(outcome) = queue.finished.remove(&ticket) {
                return outcome;
            }
            if queue.leading {
                queue = self
                    .served
                    .wait(queue)
                    .unwrap_or_else(|poison| poison.into_inner());
                continue;
            }
            // Nobody is committing: lead the next batch, which holds at least this create.
            queue.leading = true;
            let take = queue.waiting.len().min(self.max_batch);
            let batch: Vec<Job> = queue.waiting.drain(..take).collect();
            drop(queue);
            let mut lead = Lead::new(self, &batch);
            lead.ran_transaction(batch.len());
            let calls: Vec<Call<'_>> = batch.iter().map(Job::call).collect();
            let outcomes = commit_together(&lock(&self.connection), &calls);
            lead.finish(outcomes);
            queue = lock(&self.queue);
        }
    }
}

/// The mark of the caller running a transaction on the shared connection. Finishing it (or
/// unwinding, if that caller panics) hands out the batch's outcomes, clears the mark and wakes the
/// waiting callers, so nobody is left waiting for ever.
struct Lead<'a> {
    writer: &'a Writer,
    batch: &'a [Job],
    transactions: u64,
    creates: u64,
    finished: bool,
}

impl<'a> Lead<'a> {
    fn new(writer: &'a Writer, batch: &'a [Job]) -> Self {
        Lead {
            writer,
            batch,
            transactions: 0,
            creates: 0,
            finished: false,
        }
    }

    fn ran_transaction(&mut self, creates: usize) {
        self.transactions += 1;
        self.creates += creates as u64;
    }

    fn finish(mut self, outcomes: Vec<Result<Outcome>>) {
        self.hand_out(outcomes);
    }

    fn hand_out(&mut self, outcomes: Vec<Result<Outcome>>) {
        self.finished = true;
        let mut queue = lock(&self.writer.queue);
        queue.counters.transactions += self.transactions;
        queue.counters.creates += self.creates;
        let mut outcomes = outcomes.into_iter();
        for job in self.batch {
            let outcome = outcomes.next().unwrap_or_else(|| {
                Err(Error::OutcomeUnknown {
                    key: job.key.clone(),
                    reason: "the caller committing this batch panicked".to_owned(),
                })
            });
            queue.finished.insert(job.ticket, outcome);
        }
        queue.leading = false;
        self.writer.served.notify_all();
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.hand_out(Vec::new());
        }
    }
}

// ANCHOR: read_first
/// A create that found nobody else queued. Its transaction starts with a plain `BEGIN`, which
/// takes no lock until the first write, so a retry whose record exists is answered by the lookup
/// alone: it neither waits for another process's writer nor holds one up. A first create takes
/// the write lock with its first insert. SQLite refuses that upgrade with `SQLITE_BUSY` when
/// another connection has written since the lookup read, or is writing now; the lookup's answer
/// may be out of date then, so the create starts over behind `BEGIN IMMEDIATE`.
fn create_read_first(db: &Connection, call: &Call<'_>) -> Result<Outcome> {
    // transaction returns exactly one outcome for each call it is given.
    match transaction(db, "BEGIN", &[*call])
        .pop()
        .expect("one outcome")
    {
        Err(err) if is_busy(&err) => commit_together(db, &[*call])
            .pop()
            .expect("one outcome per call"),
        outcome => outcome,
    }
}

/// Whether SQLite refused a lock rather than the statement.
fn is_busy(err: &Error) -> bool {
    matches!(
        err,
        Error::Store {
            source: rusqlite::Error::SqliteFailure(failure, _)
        } if failure.code == rusqlite::ErrorCode::DatabaseBusy
    )
}
// ANCHOR_END: read_first

// ANCHOR: group_commit
/// One transaction for the whole batch, which takes the write lock before its first lookup. With
/// several creates, each runs in its own savepoint: one that fails rolls back to it and leaves the
/// others alone. Outcomes are handed out only after the commit.
pub(super) fn commit_together(db: &Connection, batch: &[Call<'_>]) -> Vec<Result<Outcome>> {
    transaction(db, "BEGIN IMMEDIATE", batch)
}

/// The batch in one transaction opened by `begin`.
fn transaction(db: &Connection, begin: &str, batch: &[Call<'_>]) -> Vec<Result<Outcome>> {
    if !db.is_autocommit() {
        // Only a leader that panicked mid-batch leaves a transaction open; its work is void.
        let _ = db.execute_batch("ROLLBACK");
    }
    if let Err(err) = run(db, begin) {
        return batch.iter().map(|_| Err(copy_of(&err))).collect();
    }
    let outcomes: Vec<Result<Outcome>> = match batch {
        [call] => vec![run_alone(db, call)],
        _ => batch.iter().map(|call| in_savepoint(db, call)).collect(),
    };
    let all_failed = outcomes.iter().all(Result::is_err);
    let end = if all_failed { "ROLLBACK" } else { "COMMIT" };
    match run(db, end) {
        Ok(()) => outcomes,
        Err(err) => {
            // A failed COMMIT may or may not have reached the disk: each create in the batch now
            // has an unknown outcome, and a retry with the same key finds out which.
            let _ = run(db, "ROLLBACK");
            batch
                .iter()
                .zip(outcomes)
                .map(|(call, outcome)| match outcome {
                    Ok(Outcome::Created(_)) => Err(Error::OutcomeUnknown {
                        key: call.key.map(str::to_owned),
                        reason: format!("the shared commit failed: {err}"),
                    }),
                    other => other,
                })
                .collect()
        }
    }
}

/// A batch of one needs no savepoint: if it fails, the whole transaction rolls back.
fn run_alone(db: &Connection, call: &Call<'_>) -> Result<Outcome> {
    let outcome = create_in_transaction(db, call)?;
    if let Outcome::Created(_) = outcome {
        call.fault.inject(Step::Commit)?;
    }
    Ok(outcome)
}

fn in_savepoint(db: &Connection, call: &Call<'_>) -> Result<Outcome> {
    // A replay or a conflict writes nothing, so it needs no savepoint.
    if let Some(saved) = lookup(db, call)? {
        return saved;
    }
    run(db, "SAVEPOINT create_call")?;
    let outcome = insert_new(db, call).and_then(|outcome| {
        call.fault.inject(Step::Commit)?;
        Ok(outcome)
    });
    if outcome.is_err() {
        run(db, "ROLLBACK TO create_call")?;
    }
    run(db, "RELEASE create_call")?;
    outcome
}

/// Runs a statement without parameters from the connection's cache, so it is parsed once.
fn run(db: &Connection, sql: &str) -> rusqlite::Result<()> {
    db.prepare_cached(sql)?.execute([]).map(drop)
}
// ANCHOR_END: group_commit

/// rusqlite errors cannot be cloned; every caller of a failed batch gets an equivalent one.
fn copy_of(err: &rusqlite::Error) -> Error {
    let source = match err {
        rusqlite::Error::SqliteFailure(code, message) => {
            rusqlite::Error::SqliteFailure(*code, message.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    };
    Error::Store { source }
}
