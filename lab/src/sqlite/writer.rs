//! In-process writer coordination with group commit, one per database file per process.
//!
//! Callers put their creates on a shared queue. Whoever finds no commit in progress becomes the
//! leader: it takes every create queued at that moment, runs them on the file's one write
//! connection in one transaction, each in its own savepoint, commits once, and only then hands
//! each caller its own outcome. Callers that arrive meanwhile wait on a condition variable and are
//! served by the next leader, so nobody sleeps in SQLite's busy handler and a burst shares one
//! fsync. An uncontended caller leads its own batch of one: no thread hand-off, no savepoint, and
//! no write lock until it has something to write.
//!
//! A caller that arrives while a commit is in progress may be a retry whose record exists, and
//! then one read on its own connection answers it without waiting. That read is not free: every
//! commit on the shared connection invalidates the reader's page cache, so the read starts over
//! from the root page. The writer therefore reads first only for keys its callers sent recently
//! ([`RecentKeys`]); a key it has not seen queues at once, and the lookup inside the batch's
//! transaction, which every create makes, finds a record if there is one all the same.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};

use rusqlite::{Connection, params};

use super::{
    Call, INSERT_RECORD_UNLESS_RECORDED, INSERT_TICKET, Lifetime, StoreOptions,
    create_in_transaction, insert_new, insert_record, lookup, open_connection,
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
    recent: RecentKeys,
}

/// The keys this file's callers sent lately, as hashes of (caller, operation, key): a hint that
/// decides whether a create waiting for the writer reads its record first, never an answer.
///
/// Both of its mistakes are harmless. A key it forgot (sent long ago, by another process, or
/// before a restart) queues without the early read, and its batch's lookup replays it. A hash
/// that collides costs one read that finds nothing. Two generations bound its memory: when the
/// newer holds [`RecentKeys::GENERATION`] keys, the older is dropped, so a key is remembered for
/// at least that many distinct keys after it was last sent, which covers a retry's usual window.
#[derive(Default)]
struct RecentKeys {
    newer: HashSet<u64>,
    older: HashSet<u64>,
}

impl RecentKeys {
    const GENERATION: usize = 16_384;

    /// Notes that `call`'s key was sent, and says whether it had been sent lately. A call
    /// without a key has nothing to remember.
    #[cfg(test)]
    fn sent(&mut self, call: &Call<'_>) -> bool {
        self.noted(RecentKeys::hash_of(call))
    }

    /// The hash [`RecentKeys`] keeps for `call`'s key, if it has one: computed before the queue's
    /// lock is taken, so callers do not hash while others wait for the lock.
    fn hash_of(call: &Call<'_>) -> Option<u64> {
        let key = call.key?;
        let mut hasher = DefaultHasher::new();
        (call.caller, call.operation, key).hash(&mut hasher);
        Some(hasher.finish())
    }

    /// Notes a key by its [`RecentKeys::hash_of`], and says whether it had been sent lately.
    fn noted(&mut self, hash: Option<u64>) -> bool {
        let Some(hash) = hash else {
            return false;
        };
        if self.newer.contains(&hash) {
            return true;
        }
        let seen = self.older.contains(&hash);
        if self.newer.len() >= Self::GENERATION {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.insert(hash);
        seen
    }
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
    /// reading before it takes the write lock ([`create_read_first`]). Otherwise, if its key was
    /// sent lately, it first reads its record on its own connection, `reader` (a retry whose
    /// record exists needs no queue); then it queues and waits to be served by the next batch.
    pub(super) fn create(&self, call: &Call<'_>, reader: &Connection) -> Result<Outcome> {
        let hash = RecentKeys::hash_of(call);
        let mut queue = lock(&self.queue);
        let sent_lately = queue.recent.noted(hash);
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
        if queue.leading && sent_lately {
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

// ANCHOR: one_transaction
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
// ANCHOR_END: one_transaction

fn in_savepoint(db: &Connection, call: &Call<'_>) -> Result<Outcome> {
    if call.key.is_some() {
        // The lookup this replaces fails here under the same fault.
        call.fault.inject(Step::Lookup)?;
    }
    run(db, "SAVEPOINT create_call")?;
    let inserted = insert_unless_recorded(db, call).and_then(|created| {
        if created.is_some() {
            call.fault.inject(Step::Commit)?;
        }
        Ok(created)
    });
    if !matches!(inserted, Ok(Some(_))) {
        run(db, "ROLLBACK TO create_call")?;
    }
    run(db, "RELEASE create_call")?;
    match inserted? {
        Some(created) => Ok(created),
        // The key had a record: its create is undone, and the record says replay or conflict.
        None => lookup(db, call)?.unwrap_or_else(|| {
            Err(Error::OutcomeUnknown {
                key: call.key.map(str::to_owned),
                reason: "the record that refused the insert cannot be read".to_owned(),
            })
        }),
    }
}

/// A batch's create, insert first. The batch holds the write lock, so no record for this key can
/// be committed meanwhile, and the record's insert is the lookup: it is refused (`DO NOTHING`)
/// exactly when the key has a record. A first create, the common case, so makes no separate
/// read; a replay pays for a ticket insert that its savepoint undoes. `None`: the key has a
/// record.
///
/// A fault injected at either insert fails the create only once the key proved new, as it would
/// have after a lookup that found nothing; the caller's rollback to its savepoint undoes both
/// inserts.
fn insert_unless_recorded(db: &Connection, call: &Call<'_>) -> Result<Option<Outcome>> {
    let Some(key) = call.key else {
        return insert_new(db, call).map(Some);
    };
    db.prepare_cached(INSERT_TICKET)?
        .execute(params![call.caller, call.payload])?;
    let ticket_id = db.last_insert_rowid();
    let recorded = insert_record(db, INSERT_RECORD_UNLESS_RECORDED, call, key, ticket_id)?;
    if recorded == 0 {
        return Ok(None);
    }
    call.fault.inject(Step::InsertTicket)?;
    call.fault.inject(Step::InsertRecord)?;
    Ok(Some(Outcome::Created(ticket_id.into())))
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::key::{OperationKey, Scope};
    use crate::payload::Payload;
    use crate::sqlite::SqliteStore;
    use crate::tool::{CreateRequest, TicketTool};

    fn call<'a>(key: Option<&'a str>) -> Call<'a> {
        Call {
            caller: "alice",
            operation: "create_ticket",
            key,
            payload: "{}",
            fault: Fault::None,
        }
    }

    #[test]
    fn recent_keys_remember_a_key_for_a_generation_and_never_a_call_without_one() {
        let mut recent = RecentKeys::default();
        assert!(!recent.sent(&call(Some("first"))));
        assert!(recent.sent(&call(Some("first"))));
        assert!(!recent.sent(&call(None)));
        assert!(!recent.sent(&call(None)));
        // Another caller's key of the same text is another key.
        let other = Call {
            caller: "bob",
            ..call(Some("first"))
        };
        assert!(!recent.sent(&other));
        // One full generation later the key is still remembered (in the older set); two later,
        // it is forgotten, and the memory stays bounded.
        let keys: Vec<String> = (0..2 * RecentKeys::GENERATION)
            .map(|n| format!("filler-{n}"))
            .collect();
        for key in &keys[..RecentKeys::GENERATION] {
            recent.sent(&call(Some(key)));
        }
        assert!(recent.sent(&call(Some("first"))), "forgotten too soon");
        for key in &keys {
            recent.sent(&call(Some(key)));
        }
        assert!(!recent.sent(&call(Some("first"))), "remembered for ever");
        assert!(recent.newer.len() + recent.older.len() <= 2 * RecentKeys::GENERATION + 1);
    }

    /// Waits, bounded, until `done` holds.
    fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn during_a_commit_a_recent_key_reads_first_and_an_unseen_one_queues_and_still_replays() {
        let store = SqliteStore::temporary().unwrap();
        let writer = store.writer.clone().expect("group commit is the default");
        let scope = Scope::new("alice", "create_ticket").unwrap();
        let payload = Payload::new(serde_json::json!({"title": "t"})).unwrap();
        let sent = OperationKey::try_from("sent-here").unwrap();
        let created = store
            .create(CreateRequest::keyed(&scope, &sent, &payload))
            .unwrap();
        // A record this writer never saw: written on another connection, as another process
        // on the same file would.
        let elsewhere = OperationKey::try_from("sent-elsewhere").unwrap();
        let other = SqliteStore::open_with(
            store.path(),
            StoreOptions::default().with_coordination(crate::sqlite::Coordination::BusyHandler),
        )
        .unwrap();
        let created_elsewhere = other
            .create(CreateRequest::keyed(&scope, &elsewhere, &payload))
            .unwrap();

        // A commit is in progress for as long as this test says.
        lock(&writer.queue).leading = true;
        let retry = store.connect().unwrap();
        let (sent_c, payload_c, scope_c) = (sent.clone(), payload.clone(), scope.clone());
        let early = std::thread::spawn(move || {
            retry.create(CreateRequest::keyed(&scope_c, &sent_c, &payload_c))
        });
        eventually("the recent key's retry answers during the commit", || {
            early.is_finished()
        });
        assert_eq!(
            early.join().unwrap().unwrap(),
            Outcome::Replayed(created.ticket_id().clone())
        );
        assert!(lock(&writer.queue).waiting.is_empty());

        let queued = store.connect().unwrap();
        let (key_c, payload_c, scope_c) = (elsewhere.clone(), payload.clone(), scope.clone());
        let late = std::thread::spawn(move || {
            queued.create(CreateRequest::keyed(&scope_c, &key_c, &payload_c))
        });
        eventually("the unseen key queues", || {
            lock(&writer.queue).waiting.len() == 1
        });
        assert!(!late.is_finished());
        // The commit ends; the queued create leads its own batch and finds the record there.
        lock(&writer.queue).leading = false;
        writer.served.notify_all();
        assert_eq!(
            late.join().unwrap().unwrap(),
            Outcome::Replayed(created_elsewhere.ticket_id().clone())
        );
        assert_eq!(store.count_tickets().unwrap(), 2);
    }

    #[test]
    fn a_batch_inserts_first_and_still_replays_conflicts_and_fails_alone() {
        let store = SqliteStore::temporary().unwrap();
        let db = store.connection();
        let at = |key: &'static str, payload: &'static str, fault: Fault| Call {
            key: Some(key),
            payload,
            fault,
            ..call(None)
        };
        let committed = commit_together(db, &[at("old", "{\"a\":1}", Fault::None)]);
        let old = committed.into_iter().next().unwrap().unwrap();
        let fails = Fault::FailAt(Step::InsertRecord);
        let batch = [
            at("new", "{\"b\":1}", Fault::None),
            // A replay and a conflict of a committed record; a replay reaches no insert, so a
            // fault at one is never injected.
            at("old", "{\"a\":1}", Fault::FailAt(Step::InsertTicket)),
            at("old", "{\"a\":2}", Fault::None),
            // The same key twice in one batch: the second replays the first.
            at("new", "{\"b\":1}", Fault::None),
            at("failing", "{\"c\":1}", fails),
            at("failing-late", "{\"c\":2}", Fault::FailAt(Step::Commit)),
            Call {
                fault: fails,
                ..call(None)
            },
            call(None),
        ];
        let outcomes = commit_together(db, &batch);
        let new = outcomes[0].as_ref().unwrap().clone();
        assert!(matches!(new, Outcome::Created(_)), "{new:?}");
        assert_eq!(
            outcomes[1].as_ref().unwrap(),
            &Outcome::Replayed(old.ticket_id().clone())
        );
        assert!(
            matches!(outcomes[2], Err(Error::PayloadConflict { .. })),
            "{:?}",
            outcomes[2]
        );
        assert_eq!(
            outcomes[3].as_ref().unwrap(),
            &Outcome::Replayed(new.ticket_id().clone())
        );
        for failed in [4, 5, 6] {
            assert!(
                matches!(outcomes[failed], Err(Error::InjectedFailure)),
                "{failed}: {:?}",
                outcomes[failed]
            );
        }
        assert!(matches!(outcomes[7], Ok(Outcome::Created(_))));
        // Tickets: old, new and the unkeyed one; records: old and new. Nothing of the failed
        // or replayed creates is left, and the ids have no gaps.
        assert_eq!(store.ticket_ids().unwrap().len(), 3);
        assert_eq!(store.count_records().unwrap(), 2);
        let ids: Vec<i64> = store
            .ticket_ids()
            .unwrap()
            .iter()
            .map(|id| id.as_i64().unwrap())
            .collect();
        assert_eq!(ids, [1, 2, 3]);
    }
}
