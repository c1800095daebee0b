//! The claim on a key: which requests hold which key now, under the lock a pruning pass also
//! takes, so a key cannot expire between the check and the create.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::retention;
use crate::error::Result;
use crate::key::{OperationKey, Scope};
use crate::sqlite::SqliteStore;

/// (caller, key) of a keyed create in progress.
pub(crate) type Entry = (String, String);

/// The keys held now, and the signal that one was let go.
pub(crate) struct Claims {
    /// How many requests hold each key now. A key held by a request whose record does not exist
    /// yet is in progress; the others may join once the record exists, since they only read it.
    holders: Mutex<HashMap<Entry, usize>>,
    /// Signalled whenever a request lets go of its key while another request waits.
    released: Condvar,
    /// Requests waiting on `released` now. Changed and read only under `holders`' lock, so a
    /// request that lets go of its key sees every waiter that could miss the change; when there
    /// is none it skips the signal, which is a system call even with nobody to wake.
    waiting: AtomicUsize,
    /// How long a request whose key is in progress waits for it before it is told to come back.
    in_progress_wait: Duration,
}

/// What a request's claim on its key found.
pub(crate) enum Claim<'c> {
    Held(Holding<'c>),
    InProgress,
    Expired,
}

/// One request's hold on its key, released when the request is done however it ends.
pub(crate) struct Holding<'c> {
    claims: &'c Claims,
    entry: Entry,
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        let mut holders = self.claims.holders();
        if let Some(count) = holders.get_mut(&self.entry) {
            *count -= 1;
            if *count == 0 {
                holders.remove(&self.entry);
            }
        }
        if self.claims.waiting.load(Ordering::Relaxed) > 0 {
            self.claims.released.notify_all();
        }
    }
}

impl Claims {
    pub(crate) fn new(in_progress_wait: Duration) -> Claims {
        Claims {
            holders: Mutex::new(HashMap::new()),
            released: Condvar::new(),
            waiting: AtomicUsize::new(0),
            in_progress_wait,
        }
    }

    fn holders(&self) -> MutexGuard<'_, HashMap<Entry, usize>> {
        // The map holds plain strings and counts, consistent after any panic.
        self.holders.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // ANCHOR: http_claim
    /// Claims the key for this request, under the lock that a pruning pass also holds, so a key
    /// cannot expire between the check and the create. `dated`: the store keeps tombstones.
    ///
    /// A key another request holds is in progress only while its record does not exist: once
    /// the record is committed, any number of retries may hold the key at once, since each only
    /// reads the record and replays it (or finds a conflict). A request that finds its key in
    /// progress waits a moment for it to be let go, so requests released together converge
    /// without another round trip; only a first request still running after the wait makes a 409.
    pub(crate) fn claim(
        &self,
        store: &SqliteStore,
        dated: bool,
        scope: &Scope,
        key: &OperationKey,
    ) -> Result<Claim<'_>> {
        let entry = (scope.caller().to_owned(), key.as_str().to_owned());
        let deadline = Instant::now() + self.in_progress_wait;
        let mut holders = self.holders();
        loop {
            if !holders.contains_key(&entry) {
                if dated && retention::is_expired(store.connection(), scope, key)? {
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
            self.waiting.fetch_add(1, Ordering::Relaxed);
            holders = self
                .released
                .wait_timeout(holders, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        *holders.entry(entry.clone()).or_insert(0) += 1;
        Ok(Claim::Held(Holding {
            claims: self,
            entry,
        }))
    }
    // ANCHOR_END: http_claim

    /// Runs `prune` with the keys held now, holding the lock throughout so no claim starts
    /// meanwhile. The holders' lock is always taken before the pruner's connection.
    pub(crate) fn while_held<T>(&self, prune: impl FnOnce(&HashSet<Entry>) -> T) -> T {
        let holders = self.holders();
        let held: HashSet<Entry> = holders.keys().cloned().collect();
        prune(&held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> (SqliteStore, Scope, OperationKey) {
        let store = SqliteStore::temporary().unwrap();
        store
            .connection()
            .execute_batch(retention::RETENTION_SCHEMA)
            .unwrap();
        let scope = Scope::new("tests", "create_ticket").unwrap();
        (store, scope, OperationKey::try_from("k-1").unwrap())
    }

    #[test]
    fn a_key_held_without_a_record_is_in_progress_after_the_wait() {
        let (store, scope, key) = fixture();
        let claims = Claims::new(Duration::from_millis(20));
        let first = claims.claim(&store, true, &scope, &key).unwrap();
        assert!(matches!(first, Claim::Held(_)));
        let second = claims.claim(&store, true, &scope, &key).unwrap();
        assert!(matches!(second, Claim::InProgress));
        drop(first);
        let third = claims.claim(&store, true, &scope, &key).unwrap();
        assert!(matches!(third, Claim::Held(_)));
    }

    #[test]
    fn a_pruning_pass_sees_the_keys_held_and_a_released_key_is_gone() {
        let (store, scope, key) = fixture();
        let claims = Claims::new(Duration::ZERO);
        let holding = claims.claim(&store, true, &scope, &key).unwrap();
        let entry = ("tests".to_owned(), "k-1".to_owned());
        assert!(claims.while_held(|held| held.contains(&entry)));
        drop(holding);
        assert!(claims.while_held(HashSet::is_empty));
    }

    #[test]
    fn a_key_with_a_tombstone_is_expired_only_where_records_are_dated() {
        let (store, scope, key) = fixture();
        store
            .connection()
            .execute(
                "INSERT INTO expired_keys VALUES (?1, ?2, ?3, 0)",
                [scope.caller(), scope.operation(), key.as_str()],
            )
            .unwrap();
        let claims = Claims::new(Duration::ZERO);
        assert!(matches!(
            claims.claim(&store, true, &scope, &key).unwrap(),
            Claim::Expired
        ));
        assert!(matches!(
            claims.claim(&store, false, &scope, &key).unwrap(),
            Claim::Held(_)
        ));
    }
}
