//! Callers released together: how long until every one has its answer, how many tickets exist
//! afterwards, and how the throughput compares with the disk's raw fdatasync rate.

use std::fmt;
use std::io::Write;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{median_f64, plain_select};
use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::sqlite::{Coordination, SqliteStore, StoreOptions};
use crate::tool::{CreateRequest, TicketTool};

/// The median burst of each kind in one run, and the disk's rate measured beside them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Bursts {
    /// 4 KiB write plus `fdatasync` on one file in the same folder, per second.
    pub fdatasync_per_second: f64,
    /// The floor under every burst of a size: threads released together that do nothing, by
    /// number of threads (median milliseconds until the last one was running).
    pub idle_floor_ms: Vec<(usize, f64)>,
    /// The floor under a burst on one key with group commit, where every caller reads its
    /// record at least once: threads released together, each running the replay's bare `SELECT`
    /// once on its own connection, prepared and cached by one earlier read, by number of threads
    /// (median milliseconds until the last one had its row).
    pub read_floor_ms: Vec<(usize, f64)>,
    /// One entry per size, key shape and coordination.
    pub runs: Vec<Burst>,
}

/// One burst.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Burst {
    /// Callers released together, each on its own connection and thread.
    pub callers: usize,
    /// `true`: every caller sends the same key; `false`: each its own.
    pub one_key: bool,
    /// `group_commit` or `busy_handler`.
    pub coordination: String,
    /// From the release until the last caller had its answer (milliseconds).
    pub elapsed_ms: f64,
    /// Tickets afterwards: 1 for one key, `callers` for distinct keys.
    pub tickets: u64,
    /// Creates answered per second.
    pub creates_per_second: f64,
    /// Shared transactions run (group commit only).
    pub transactions: Option<u64>,
}

/// Runs each burst size on one key and on distinct keys, with both coordinations, `repeats` times
/// each (the two designs taking turns), and keeps the run with the median time of each.
///
/// # Errors
/// Any store error; [`Error::ScenarioFailed`] if a burst leaves the wrong number of tickets.
pub fn measure(sizes: &[usize], repeats: usize) -> Result<Bursts> {
    let fdatasync_per_second = fdatasync_rate(200)?;
    let mut runs = Vec::new();
    let mut idle_floor_ms = Vec::new();
    let mut read_floor_ms = Vec::new();
    for &callers in sizes {
        // Every kind takes its turn in each repetition, so a change in the shared machine's speed
        // falls on all of them alike.
        let (mut idle, mut reads) = (Vec::new(), Vec::new());
        let mut bursts: [(Vec<Burst>, Vec<Burst>); 2] = Default::default();
        for _ in 0..repeats.max(1) {
            idle.push(idle_burst(callers));
            reads.push(read_burst(callers)?);
            for (one_key, (group, busy)) in [true, false].into_iter().zip(&mut bursts) {
                group.push(burst(callers, one_key, Coordination::GroupCommit)?);
                busy.push(burst(callers, one_key, Coordination::BusyHandler)?);
            }
        }
        idle_floor_ms.push((callers, median_f64(idle)));
        read_floor_ms.push((callers, median_f64(reads)));
        for (group, busy) in bursts {
            runs.push(median(group)?);
            runs.push(median(busy)?);
        }
    }
    Ok(Bursts {
        fdatasync_per_second,
        idle_floor_ms,
        read_floor_ms,
        runs,
    })
}

/// Runs `work` on one thread per item, all released together from a barrier, and returns the
/// milliseconds from the release until the last one returned, with every result.
///
/// The clock runs on the working threads' own readings: from the first moment any of them ran past
/// the barrier until the last had its answer. The thread that waits for them may be woken late,
/// after some have finished, and ending a thread is not part of its work.
fn released_together<I, T, F>(items: Vec<I>, work: F) -> (f64, Vec<T>)
where
    I: Send,
    T: Send,
    F: Fn(I) -> T + Sync,
{
    let barrier = Barrier::new(items.len() + 1);
    std::thread::scope(|threads| {
        let handles: Vec<_> = items
            .into_iter()
            .map(|item| {
                let (barrier, work) = (&barrier, &work);
                threads.spawn(move || {
                    barrier.wait();
                    let released = Instant::now();
                    let answer = work(item);
                    (released, Instant::now(), answer)
                })
            })
            .collect();
        barrier.wait();
        let mut first: Option<Instant> = None;
        let mut last: Option<Instant> = None;
        let answers = handles
            .into_iter()
            .map(|handle| {
                let (released, done, answer) = handle.join().expect("a burst thread panicked");
                first = Some(first.map_or(released, |t| t.min(released)));
                last = Some(last.map_or(done, |t| t.max(done)));
                answer
            })
            .collect();
        let elapsed = match (first, last) {
            (Some(first), Some(last)) => last.duration_since(first).as_secs_f64() * 1000.0,
            _ => 0.0,
        };
        (elapsed, answers)
    })
}

/// Milliseconds for `threads` threads, released together, to do nothing.
fn idle_burst(threads: usize) -> f64 {
    released_together(vec![(); threads], |()| ()).0
}

/// Milliseconds for `threads` threads, released together, to read one existing record each with
/// the replay's bare `SELECT`, each on its own connection. Every connection has run that read
/// once before the release, so the statement is prepared and the pages are cached: no caller
/// that reads its record at least once can finish sooner.
fn read_burst(threads: usize) -> Result<f64> {
    let store = SqliteStore::temporary()?;
    let scope = Scope::new("burst", "create_ticket")?;
    let key = OperationKey::try_from("one-key")?;
    let payload = Payload::new(json!({"title": "Burst ticket"}))?;
    store.create(CreateRequest::keyed(&scope, &key, &payload))?;
    let connections = (0..threads)
        .map(|_| {
            let connection = store.connect()?;
            plain_select(connection.connection(), &scope, &key)?;
            Ok(connection)
        })
        .collect::<Result<Vec<_>>>()?;
    let (elapsed, ids) = released_together(connections, |connection| {
        plain_select(connection.connection(), &scope, &key)
    });
    for id in ids {
        id?;
    }
    Ok(elapsed)
}

/// The run with the median elapsed time, by [`super::percentile`].
fn median(runs: Vec<Burst>) -> Result<Burst> {
    super::percentile(runs, 50, |a, b| a.elapsed_ms.total_cmp(&b.elapsed_ms)).ok_or_else(|| {
        Error::InputInvalid {
            subject: "bench plan".to_owned(),
            problem: "a burst size was measured zero times".to_owned(),
        }
    })
}

/// The disk's raw rate: write 4 KiB and `fdatasync`, over and over, in a temporary folder.
///
/// # Errors
/// [`Error::Io`] if the file cannot be written or synced.
pub fn fdatasync_rate(syncs: u32) -> Result<f64> {
    let io = |source| Error::Io {
        action: "measuring the fdatasync rate".to_owned(),
        source,
    };
    let folder = tempfile::Builder::new()
        .prefix("tool-retries-fsync-")
        .tempdir()
        .map_err(io)?;
    let mut file = std::fs::File::create(folder.path().join("sync")).map_err(io)?;
    let block = [7u8; 4096];
    let start = Instant::now();
    for _ in 0..syncs {
        file.write_all(&block).map_err(io)?;
        file.sync_data().map_err(io)?;
    }
    Ok(f64::from(syncs) / start.elapsed().as_secs_f64())
}

fn burst(callers: usize, one_key: bool, coordination: Coordination) -> Result<Burst> {
    // The busy handler may need far longer than the default ten seconds at 256 callers; the
    // point is to measure that wait, not to give up.
    let options = StoreOptions::default()
        .with_coordination(coordination)
        .with_busy_timeout(Duration::from_secs(300));
    let store = SqliteStore::temporary_with(options)?;
    let scope = Scope::new("burst", "create_ticket")?;
    let payload = Payload::new(json!({"title": "Burst ticket"}))?;
    let keys = (0..callers)
        .map(|i| {
            OperationKey::try_from(if one_key {
                "one-key".to_owned()
            } else {
                format!("key-{i}")
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let connections = (0..callers)
        .map(|_| store.connect())
        .collect::<Result<Vec<_>>>()?;
    let requests: Vec<_> = connections.into_iter().zip(&keys).collect();
    let (elapsed_ms, outcomes) = released_together(requests, |(connection, key)| {
        connection.create(CreateRequest::keyed(&scope, key, &payload))
    });
    let outcomes = outcomes.into_iter().collect::<Result<Vec<_>>>()?;
    let tickets = store.count_tickets()?;
    let expected = if one_key { 1 } else { callers as u64 };
    let mut ids: Vec<_> = outcomes.iter().map(|o| o.ticket_id()).collect();
    ids.sort_unstable();
    ids.dedup();
    if tickets != expected || ids.len() as u64 != expected {
        return Err(Error::ScenarioFailed {
            scenario: "bench burst",
            expected: format!("{expected} ticket(s) and as many distinct identifiers"),
            observed: format!("{tickets} ticket(s), {} distinct identifiers", ids.len()),
        });
    }
    Ok(Burst {
        callers,
        one_key,
        coordination: match coordination {
            Coordination::BusyHandler => "busy_handler".to_owned(),
            _ => "group_commit".to_owned(),
        },
        elapsed_ms,
        tickets,
        creates_per_second: callers as f64 * 1000.0 / elapsed_ms.max(f64::MIN_POSITIVE),
        transactions: store.group_commits().map(|c| c.transactions),
    })
}

impl Bursts {
    /// The run for one size, key shape and coordination.
    pub fn find(&self, callers: usize, one_key: bool, coordination: &str) -> Option<&Burst> {
        self.runs.iter().find(|b| {
            b.callers == callers && b.one_key == one_key && b.coordination == coordination
        })
    }
}

impl fmt::Display for Bursts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "bursts: callers released together (durable; medians); raw fdatasync rate {:.0}/s;\n\
             floors: the same number of threads released together doing nothing (idle), or\n\
             reading one record each on their own connection (reads)",
            self.fdatasync_per_second
        )?;
        writeln!(
            f,
            "{:>7} {:<9} {:>8} {:>9} {:>16} {:>10} {:>9} {:>10} {:>8} {:>8}",
            "callers",
            "keys",
            "idle ms",
            "reads ms",
            "busy handler ms",
            "group ms",
            "speed-up",
            "group /s",
            "x fsync",
            "commits"
        )?;
        let mut sizes: Vec<usize> = self.runs.iter().map(|b| b.callers).collect();
        sizes.dedup();
        for callers in sizes {
            for one_key in [true, false] {
                let (Some(group), Some(busy)) = (
                    self.find(callers, one_key, "group_commit"),
                    self.find(callers, one_key, "busy_handler"),
                ) else {
                    continue;
                };
                let floor = |floors: &[(usize, f64)]| {
                    floors
                        .iter()
                        .find(|(n, _)| *n == callers)
                        .map_or(f64::NAN, |(_, ms)| *ms)
                };
                writeln!(
                    f,
                    "{:>7} {:<9} {:>8.2} {:>9.2} {:>16.1} {:>10.2} {:>9.1} {:>10.0} {:>8.2} {:>8}",
                    callers,
                    if one_key { "one" } else { "distinct" },
                    floor(&self.idle_floor_ms),
                    floor(&self.read_floor_ms),
                    busy.elapsed_ms,
                    group.elapsed_ms,
                    busy.elapsed_ms / group.elapsed_ms,
                    group.creates_per_second,
                    group.creates_per_second / self.fdatasync_per_second,
                    group.transactions.map_or("-".to_owned(), |t| t.to_string()),
                )?;
            }
        }
        Ok(())
    }
}
