//! `lab bench`: the cost of the keyed create, measured side by side in one run.
//!
//! The numbers are ratios taken on one machine in one run, so a noisy neighbour slows every column
//! alike. No test asserts on them.

use std::fmt;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::sqlite::{SqliteStore, StoreOptions, sqlite_version};
use crate::tool::{CreateRequest, Outcome, TicketTool};

/// What to measure.
#[derive(Clone, Copy, Debug)]
pub struct BenchPlan {
    /// Calls per sequential measurement.
    pub iterations: u32,
    /// Callers released together on one key in the burst.
    pub burst_callers: usize,
}

impl Default for BenchPlan {
    fn default() -> Self {
        BenchPlan {
            iterations: 300,
            burst_callers: 64,
        }
    }
}

/// Calls per second of one sequential measurement.
#[derive(Clone, Copy, Debug)]
pub struct Rate {
    /// Calls made.
    pub calls: u32,
    /// Time they took.
    pub elapsed: Duration,
}

impl Rate {
    /// Calls per second.
    pub fn per_second(self) -> f64 {
        f64::from(self.calls) / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// The measurements of one `lab bench` run.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// The plan it followed.
    pub plan: BenchPlan,
    /// Creates without a key.
    pub naive: Rate,
    /// Creates with a fresh key each.
    pub keyed: Rate,
    /// Repeats of one keyed create, each a replay.
    pub replay: Rate,
    /// Time until every burst caller had its answer.
    pub burst_elapsed: Duration,
    /// Tickets that existed after the burst: one is correct.
    pub burst_tickets: u64,
    /// Distinct ticket identifiers the burst callers were given: one is correct.
    pub burst_distinct_ids: usize,
}

/// Runs the measurements on fresh temporary stores with default (durable) options.
///
/// # Errors
/// Any store error; [`Error::ScenarioFailed`] if a replay creates a ticket.
pub fn run(plan: BenchPlan) -> Result<BenchReport> {
    let scope = Scope::new("bench", "create_ticket")?;
    let payload = Payload::new(json!({"title": "Benchmark ticket", "priority": "normal"}))?;

    let store = SqliteStore::temporary()?;
    let naive = timed(plan.iterations, |_| {
        store
            .create(CreateRequest::unkeyed(&scope, &payload))
            .map(drop)
    })?;

    let store = SqliteStore::temporary()?;
    let keys = (0..plan.iterations)
        .map(|i| OperationKey::try_from(format!("bench-{i}")))
        .collect::<Result<Vec<_>>>()?;
    let keyed = timed(plan.iterations, |i| {
        store
            .create(CreateRequest::keyed(&scope, &keys[i as usize], &payload))
            .map(drop)
    })?;

    let replayed = &keys[0];
    let replay = timed(plan.iterations, |_| {
        match store.create(CreateRequest::keyed(&scope, replayed, &payload))? {
            Outcome::Replayed(_) => Ok(()),
            created => Err(Error::ScenarioFailed {
                scenario: "bench replay",
                expected: "a replay".to_owned(),
                observed: format!("{created:?}"),
            }),
        }
    })?;

    let (burst_elapsed, burst_tickets, burst_distinct_ids) =
        burst(plan.burst_callers, &scope, &keys[0], &payload)?;
    Ok(BenchReport {
        plan,
        naive,
        keyed,
        replay,
        burst_elapsed,
        burst_tickets,
        burst_distinct_ids,
    })
}

fn timed(calls: u32, mut call: impl FnMut(u32) -> Result<()>) -> Result<Rate> {
    let start = Instant::now();
    for i in 0..calls {
        call(i)?;
    }
    Ok(Rate {
        calls,
        elapsed: start.elapsed(),
    })
}

/// `callers` threads, each on its own connection, released together with one key.
fn burst(
    callers: usize,
    scope: &Scope,
    key: &OperationKey,
    payload: &Payload,
) -> Result<(Duration, u64, usize)> {
    let store = SqliteStore::temporary_with(StoreOptions::default())?;
    let connections = (0..callers)
        .map(|_| store.connect())
        .collect::<Result<Vec<_>>>()?;
    let barrier = Barrier::new(callers + 1);
    let (elapsed, outcomes) = std::thread::scope(|threads| {
        let handles: Vec<_> = connections
            .into_iter()
            .map(|connection| {
                let barrier = &barrier;
                threads.spawn(move || {
                    barrier.wait();
                    connection.create(CreateRequest::keyed(scope, key, payload))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let outcomes: Vec<Result<Outcome>> = handles
            .into_iter()
            .map(|handle| handle.join().expect("a burst thread panicked"))
            .collect();
        (start.elapsed(), outcomes)
    });
    let mut ids = outcomes
        .into_iter()
        .map(|outcome| outcome.map(Outcome::ticket_id))
        .collect::<Result<Vec<_>>>()?;
    ids.sort_unstable();
    ids.dedup();
    Ok((elapsed, store.count_tickets()?, ids.len()))
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let naive = self.naive.per_second();
        let keyed = self.keyed.per_second();
        let replay = self.replay.per_second();
        writeln!(
            f,
            "SQLite {}, WAL, synchronous=FULL, one reused connection, {} calls each",
            sqlite_version(),
            self.plan.iterations
        )?;
        writeln!(f, "{:<28} {:>12} {:>24}", "measurement", "calls/s", "ratio")?;
        writeln!(
            f,
            "{:<28} {:>12.0} {:>24}",
            "naive create (no key)", naive, "1.00 (baseline)"
        )?;
        writeln!(
            f,
            "{:<28} {:>12.0} {:>24}",
            "keyed create",
            keyed,
            format!("{:.2} x naive", keyed / naive)
        )?;
        writeln!(
            f,
            "{:<28} {:>12.0} {:>24}",
            "replay of a saved key",
            replay,
            format!("{:.2} x keyed create", replay / keyed)
        )?;
        write!(
            f,
            "burst: {} callers, one key, released together: all answered in {:.1} ms; \
             tickets: {}, distinct ids returned: {} (expected 1 and 1)",
            self.plan.burst_callers,
            self.burst_elapsed.as_secs_f64() * 1000.0,
            self.burst_tickets,
            self.burst_distinct_ids
        )
    }
}
