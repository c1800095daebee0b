//! Keyed create against plain insert, at several numbers of concurrent clients, for any
//! [`TicketTool`]: what the operation key costs when many callers write at once.
//!
//! Each measurement runs on a fresh tool. Every client gets its own connection and its share of
//! the calls; the clients are released together and the clock runs until the last one is done.
//! Each kind is measured twice, in the order plain, keyed, keyed, plain, so a machine that speeds
//! up or slows down during the run favours neither. The ratios come from one run on one machine;
//! no test asserts on them.
//!
//! ```
//! use lab::SqliteStore;
//! use lab::throughput::{ThroughputPlan, compare};
//!
//! let plan = ThroughputPlan { clients: vec![1, 2], calls: 20 };
//! let rows = compare(&plan, SqliteStore::temporary)?;
//! assert_eq!(rows.len(), 2);
//! assert_eq!(rows[1].keyed.calls, 40); // two measurements of 20 calls
//! # Ok::<(), lab::Error>(())
//! ```

use std::fmt;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::bench::Rate;
use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::tool::{CreateRequest, Outcome, TicketTool};

/// What to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThroughputPlan {
    /// The numbers of concurrent clients, one table row each.
    pub clients: Vec<usize>,
    /// Creates per measurement, shared among the clients.
    pub calls: u32,
}

impl Default for ThroughputPlan {
    fn default() -> Self {
        ThroughputPlan {
            clients: vec![1, 8, 64],
            calls: 10_000,
        }
    }
}

/// One row of the table: both kinds at one number of clients.
#[derive(Clone, Copy, Debug)]
pub struct ThroughputRow {
    /// Concurrent clients, each on its own connection.
    pub clients: usize,
    /// Creates without a key: one plain insert each.
    pub plain: Rate,
    /// Creates with a fresh key each: claim, insert and record.
    pub keyed: Rate,
}

impl ThroughputRow {
    /// Keyed creates per second over plain inserts per second.
    pub fn ratio(&self) -> f64 {
        self.keyed.per_second() / self.plain.per_second().max(f64::MIN_POSITIVE)
    }
}

/// Measures each number of clients in `plan`, on tools made fresh by `fresh`.
///
/// # Errors
/// Any error of the tool; [`Error::ScenarioFailed`] if a keyed create with a fresh key replays,
/// or the tool holds a different number of tickets or records than calls were made.
pub fn compare<T, F>(plan: &ThroughputPlan, mut fresh: F) -> Result<Vec<ThroughputRow>>
where
    T: TicketTool + Send,
    F: FnMut() -> Result<T>,
{
    let scope = Scope::new("throughput", "create_ticket")?;
    let payload = Payload::new(json!({"title": "Throughput ticket", "priority": "normal"}))?;
    let mut rows = Vec::with_capacity(plan.clients.len());
    for &clients in &plan.clients {
        let clients = clients.max(1);
        let mut plain = Vec::new();
        let mut keyed = Vec::new();
        for (round, with_keys) in [false, true, true, false].into_iter().enumerate() {
            let tool = fresh()?;
            let keys = with_keys
                .then(|| fresh_keys(plan.calls, clients, round))
                .transpose()?;
            let rate = measure(&tool, clients, &scope, &payload, plan.calls, keys)?;
            if with_keys { &mut keyed } else { &mut plain }.push(rate);
        }
        rows.push(ThroughputRow {
            clients,
            plain: total(&plain),
            keyed: total(&keyed),
        });
    }
    Ok(rows)
}

/// `calls` distinct keys, dealt out to `clients` lists.
fn fresh_keys(calls: u32, clients: usize, round: usize) -> Result<Vec<Vec<OperationKey>>> {
    let mut keys = vec![Vec::new(); clients];
    for call in 0..calls {
        let client = call as usize % clients;
        keys[client].push(OperationKey::try_from(format!(
            "r{round}-c{client}-{call}"
        ))?);
    }
    Ok(keys)
}

/// Releases `clients` callers together; each makes its share of `calls` creates, keyed when
/// `keys` holds their keys.
fn measure<T: TicketTool + Send>(
    tool: &T,
    clients: usize,
    scope: &Scope,
    payload: &Payload,
    calls: u32,
    keys: Option<Vec<Vec<OperationKey>>>,
) -> Result<Rate> {
    let connections = (0..clients)
        .map(|_| tool.connect())
        .collect::<Result<Vec<T>>>()?;
    let shares: Vec<usize> = (0..clients)
        .map(|client| (calls as usize + clients - 1 - client) / clients)
        .collect();
    let keyed = keys.is_some();
    let mut keys = keys.unwrap_or_default().into_iter();
    let barrier = Barrier::new(clients + 1);
    let (elapsed, results) = std::thread::scope(|threads| {
        let handles: Vec<_> = connections
            .into_iter()
            .zip(shares)
            .map(|(connection, share)| {
                let own_keys = keys.next().unwrap_or_default();
                let barrier = &barrier;
                threads.spawn(move || -> Result<()> {
                    barrier.wait();
                    for call in 0..share {
                        let request = match own_keys.get(call) {
                            Some(key) => CreateRequest::keyed(scope, key, payload),
                            None => CreateRequest::unkeyed(scope, payload),
                        };
                        if let Outcome::Replayed(id) = connection.create(request)? {
                            return Err(Error::ScenarioFailed {
                                scenario: "throughput",
                                expected: "every create with a fresh key to create".to_owned(),
                                observed: format!("a replay of ticket {id}"),
                            });
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<Result<()>> = handles
            .into_iter()
            .map(|handle| {
                handle.join().unwrap_or_else(|_| {
                    Err(Error::ScenarioFailed {
                        scenario: "throughput",
                        expected: "every client to finish".to_owned(),
                        observed: "a client thread panicked".to_owned(),
                    })
                })
            })
            .collect();
        (start.elapsed(), results)
    });
    results.into_iter().collect::<Result<()>>()?;
    let tickets = tool.count_tickets()?;
    let records = tool.count_records()?;
    let expected_records = if keyed { u64::from(calls) } else { 0 };
    if tickets != u64::from(calls) || records != expected_records {
        return Err(Error::ScenarioFailed {
            scenario: "throughput",
            expected: format!("{calls} tickets and {expected_records} records"),
            observed: format!("{tickets} tickets and {records} records"),
        });
    }
    Ok(Rate { calls, elapsed })
}

fn total(rates: &[Rate]) -> Rate {
    Rate {
        calls: rates.iter().map(|rate| rate.calls).sum(),
        elapsed: rates.iter().map(|rate| rate.elapsed).sum::<Duration>(),
    }
}

/// A table of [`ThroughputRow`]s under a heading that says what was measured.
#[derive(Clone, Debug)]
pub struct ThroughputReport {
    /// What was measured: the server and how it was reached.
    pub heading: String,
    /// The plan followed.
    pub plan: ThroughputPlan,
    /// One row per number of clients.
    pub rows: Vec<ThroughputRow>,
}

impl fmt::Display for ThroughputReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.heading)?;
        writeln!(
            f,
            "one connection per client; {} creates per measurement, fresh tables each; \
             each kind measured twice (plain, keyed, keyed, plain)",
            self.plan.calls
        )?;
        write!(
            f,
            "{:>7} {:>16} {:>16} {:>12}",
            "clients", "plain insert/s", "keyed create/s", "keyed/plain"
        )?;
        for row in &self.rows {
            write!(
                f,
                "\n{:>7} {:>16.0} {:>16.0} {:>12.2}",
                row.clients,
                row.plain.per_second(),
                row.keyed.per_second(),
                row.ratio()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SqliteStore;

    #[test]
    fn every_call_is_counted_and_the_table_has_a_row_per_client_count() {
        let plan = ThroughputPlan {
            clients: vec![1, 3],
            calls: 10,
        };
        let rows = compare(&plan, SqliteStore::temporary).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].clients, 3);
        assert_eq!((rows[1].plain.calls, rows[1].keyed.calls), (20, 20));
        let report = ThroughputReport {
            heading: "SQLite".to_owned(),
            plan,
            rows,
        };
        let text = report.to_string();
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.lines().nth(2).unwrap().ends_with("keyed/plain"));
    }

    #[test]
    fn calls_are_shared_out_without_loss() {
        let keys = fresh_keys(10, 3, 0).unwrap();
        assert_eq!(keys.iter().map(Vec::len).collect::<Vec<_>>(), [4, 3, 3]);
    }
}
