//! Keyed create against plain insert, at several numbers of concurrent clients, for any
//! [`TicketTool`]: what the operation key costs when many callers write at once.
//!
//! Each measurement runs on a fresh tool. Every client gets its own connection and its share of
//! the calls; the clients are released together and the clock runs until the last one is done.
//! Each kind is measured twice, in the order plain, keyed, keyed, plain, so a machine that speeds
//! up or slows down during the run favours neither. After each keyed measurement the same clients
//! replay the keys they created and, in turn, read each record with a plain select. Last, every
//! client sends one fresh key at the same moment (the same-key race), round after round beside
//! rounds of one plain insert each. The ratios come from one run on one machine; no test asserts
//! on them.
//!
//! ```
//! use lab::SqliteStore;
//! use lab::throughput::{ThroughputPlan, compare};
//!
//! let plan = ThroughputPlan { clients: vec![1, 2], calls: 20 };
//! let rows = compare(&plan, SqliteStore::temporary)?;
//! assert_eq!(rows.len(), 2);
//! assert_eq!(rows[1].keyed.calls, 40); // two measurements of 20 calls
//! assert_eq!(rows[1].replay.calls, 40); // a replay of each of their keys
//! assert!(rows[0].race.is_none()); // a race needs two clients
//! # Ok::<(), lab::Error>(())
//! ```

use std::fmt;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::bench::Rate;
use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::tool::{CreateRequest, Outcome, TicketId, TicketTool};

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

impl ThroughputPlan {
    /// Rounds of the same-key race at each number of clients: enough for a median, bounded so
    /// a race at 64 clients stays within seconds.
    pub fn race_rounds(&self) -> u32 {
        (self.calls / 100).clamp(5, 50)
    }
}

/// A store that can also run the bare read at the heart of a replay, with none of the tool's
/// code around it: the baseline a replay is compared with.
pub trait PlainSelect {
    /// The ticket id of the operation record for `key` in `scope`, read by its primary key in
    /// one statement; `None` if there is no such record.
    ///
    /// # Errors
    /// Any error of the store.
    fn plain_select(&self, scope: &Scope, key: &OperationKey) -> Result<Option<TicketId>>;
}

impl PlainSelect for crate::SqliteStore {
    fn plain_select(&self, scope: &Scope, key: &OperationKey) -> Result<Option<TicketId>> {
        use rusqlite::OptionalExtension;
        Ok(self
            .connection()
            .prepare_cached(
                "SELECT ticket_id FROM operation_records
                 WHERE key = ?1 AND caller = ?2 AND operation = ?3",
            )?
            .query_row(
                rusqlite::params![key.as_str(), scope.caller(), scope.operation()],
                |row| row.get(0),
            )
            .optional()?)
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
    /// Plain selects of the records the keyed creates wrote.
    pub select: Rate,
    /// Keyed creates whose record exists: replays of the same keys.
    pub replay: Rate,
    /// All the clients with one fresh key, released together; `None` for a single client.
    pub race: Option<Race>,
}

impl ThroughputRow {
    /// Keyed creates per second over plain inserts per second.
    pub fn ratio(&self) -> f64 {
        self.keyed.per_second() / self.plain.per_second().max(f64::MIN_POSITIVE)
    }

    /// Replays per second over plain selects per second.
    pub fn replay_ratio(&self) -> f64 {
        self.replay.per_second() / self.select.per_second().max(f64::MIN_POSITIVE)
    }
}

/// The same-key race: every client sends a keyed create with one fresh key at the same moment;
/// one creates, the others wait for its claim and replay. Timed from the release until the last
/// client has its answer, beside the same clients each sending one plain insert.
#[derive(Clone, Copy, Debug)]
pub struct Race {
    /// Rounds run, each with a fresh key.
    pub rounds: u32,
    /// Median time of a round of the race.
    pub median: Duration,
    /// Slowest round of the race.
    pub max: Duration,
    /// Median time of a round of plain inserts, one per client.
    pub plain_median: Duration,
}

impl Race {
    /// The race's median round over the plain inserts' median round.
    pub fn ratio(&self) -> f64 {
        self.median.as_secs_f64() / self.plain_median.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// Measures each number of clients in `plan`, on tools made fresh by `fresh`.
///
/// # Errors
/// Any error of the tool; [`Error::ScenarioFailed`] if a keyed create with a fresh key replays,
/// a replay creates, a plain select misses its record, a race gives two ticket ids, or the tool
/// holds a different number of tickets or records than calls were made.
pub fn compare<T, F>(plan: &ThroughputPlan, mut fresh: F) -> Result<Vec<ThroughputRow>>
where
    T: TicketTool + PlainSelect + Send,
    F: FnMut() -> Result<T>,
{
    let scope = Scope::new("throughput", "create_ticket")?;
    let payload = Payload::new(json!({"title": "Throughput ticket", "priority": "normal"}))?;
    let mut rows = Vec::with_capacity(plan.clients.len());
    for &clients in &plan.clients {
        let clients = clients.max(1);
        let mut plain = Vec::new();
        let mut keyed = Vec::new();
        let mut select = Vec::new();
        let mut replay = Vec::new();
        for (round, with_keys) in [false, true, true, false].into_iter().enumerate() {
            let tool = fresh()?;
            if !with_keys {
                plain.push(measure(&tool, clients, plan.calls, None, |c, _| {
                    created(c.create(CreateRequest::unkeyed(&scope, &payload))?)
                })?);
                check_counts(&tool, plan.calls, 0)?;
                continue;
            }
            let keys = fresh_keys(plan.calls, clients, round)?;
            keyed.push(measure(
                &tool,
                clients,
                plan.calls,
                Some(&keys),
                |c, key| created(c.create(CreateRequest::keyed(&scope, key?, &payload))?),
            )?);
            check_counts(&tool, plan.calls, plan.calls)?;
            // Replays and selects of the records just written, in alternating order.
            let replays = || {
                measure(&tool, clients, plan.calls, Some(&keys), |c, key| {
                    let outcome = c.create(CreateRequest::keyed(&scope, key?, &payload))?;
                    crate::bench::replayed(outcome, "throughput replay")
                })
            };
            let selects = || {
                measure(&tool, clients, plan.calls, Some(&keys), |c, key| {
                    match c.plain_select(&scope, key?)? {
                        Some(_) => Ok(()),
                        None => Err(missing("a plain select to find the record")),
                    }
                })
            };
            if round == 1 {
                replay.push(replays()?);
                select.push(selects()?);
            } else {
                select.push(selects()?);
                replay.push(replays()?);
            }
            check_counts(&tool, plan.calls, plan.calls)?;
        }
        let race = if clients > 1 {
            Some(race(
                &fresh()?,
                clients,
                plan.race_rounds(),
                &scope,
                &payload,
            )?)
        } else {
            None
        };
        rows.push(ThroughputRow {
            clients,
            plain: total(&plain),
            keyed: total(&keyed),
            select: total(&select),
            replay: total(&replay),
            race,
        });
    }
    Ok(rows)
}

fn missing(expected: &str) -> Error {
    Error::ScenarioFailed {
        scenario: "throughput",
        expected: expected.to_owned(),
        observed: "no record".to_owned(),
    }
}

/// A create that must have created: a replay here means the key was not fresh.
fn created(outcome: Outcome) -> Result<()> {
    match outcome {
        Outcome::Replayed(id) => Err(Error::ScenarioFailed {
            scenario: "throughput",
            expected: "every create with a fresh key to create".to_owned(),
            observed: format!("a replay of ticket {id}"),
        }),
        Outcome::Created(_) => Ok(()),
    }
}

fn check_counts<T: TicketTool>(tool: &T, tickets: u32, records: u32) -> Result<()> {
    let (found_tickets, found_records) = (tool.count_tickets()?, tool.count_records()?);
    if found_tickets != u64::from(tickets) || found_records != u64::from(records) {
        return Err(Error::ScenarioFailed {
            scenario: "throughput",
            expected: format!("{tickets} tickets and {records} records"),
            observed: format!("{found_tickets} tickets and {found_records} records"),
        });
    }
    Ok(())
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

/// Releases `clients` callers together; each makes its share of `calls` calls of `call`, which
/// is given the caller's connection and, with `keys`, the caller's key for that call.
fn measure<T, C>(
    tool: &T,
    clients: usize,
    calls: u32,
    keys: Option<&[Vec<OperationKey>]>,
    call: C,
) -> Result<Rate>
where
    T: TicketTool + Send,
    C: Fn(&T, Result<&OperationKey>) -> Result<()> + Sync,
{
    let connections = (0..clients)
        .map(|_| tool.connect())
        .collect::<Result<Vec<T>>>()?;
    let shares: Vec<usize> = (0..clients)
        .map(|client| (calls as usize + clients - 1 - client) / clients)
        .collect();
    let barrier = Barrier::new(clients + 1);
    let (elapsed, results) = std::thread::scope(|threads| {
        let handles: Vec<_> = connections
            .into_iter()
            .zip(shares)
            .enumerate()
            .map(|(client, (connection, share))| {
                let own_keys = keys.and_then(|keys| keys.get(client));
                let (barrier, call) = (&barrier, &call);
                threads.spawn(move || -> Result<()> {
                    barrier.wait();
                    for index in 0..share {
                        let key = own_keys
                            .and_then(|keys| keys.get(index))
                            .ok_or_else(|| missing("a key for every call"));
                        call(&connection, key)?;
                    }
                    Ok(())
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<Result<()>> = handles.into_iter().map(join).collect();
        (start.elapsed(), results)
    });
    results.into_iter().collect::<Result<()>>()?;
    Ok(Rate { calls, elapsed })
}

fn join<R>(handle: std::thread::ScopedJoinHandle<'_, Result<R>>) -> Result<R> {
    handle.join().unwrap_or_else(|_| {
        Err(Error::ScenarioFailed {
            scenario: "throughput",
            expected: "every client to finish".to_owned(),
            observed: "a client thread panicked".to_owned(),
        })
    })
}

/// `rounds` same-key races of `clients` callers, each round against a round of one plain insert
/// per caller, taking turns; the same threads and connections serve every round.
fn race<T: TicketTool + Send>(
    tool: &T,
    clients: usize,
    rounds: u32,
    scope: &Scope,
    payload: &Payload,
) -> Result<Race> {
    let connections = (0..clients)
        .map(|_| tool.connect())
        .collect::<Result<Vec<T>>>()?;
    let keys = (0..rounds)
        .map(|round| OperationKey::try_from(format!("race-{round}")))
        .collect::<Result<Vec<_>>>()?;
    let start = Barrier::new(clients + 1);
    let end = Barrier::new(clients + 1);
    // Each round is a race then a plain round; a caller's answers, in order.
    let (times, answers) = std::thread::scope(|threads| {
        let handles: Vec<_> = connections
            .into_iter()
            .map(|connection| {
                let (start, end, keys) = (&start, &end, &keys);
                threads.spawn(move || -> Result<Vec<TicketId>> {
                    let mut ids = Vec::with_capacity(keys.len());
                    for key in keys {
                        start.wait();
                        let outcome = connection.create(CreateRequest::keyed(scope, key, payload));
                        end.wait();
                        ids.push(outcome?.ticket_id().clone());
                        start.wait();
                        let outcome = connection.create(CreateRequest::unkeyed(scope, payload));
                        end.wait();
                        created(outcome?)?;
                    }
                    Ok(ids)
                })
            })
            .collect();
        let mut times = Vec::with_capacity(keys.len());
        for _ in &keys {
            let mut pair = [Duration::ZERO; 2];
            for time in &mut pair {
                start.wait();
                let began = Instant::now();
                end.wait();
                *time = began.elapsed();
            }
            times.push(pair);
        }
        let answers: Vec<Result<Vec<TicketId>>> = handles.into_iter().map(join).collect();
        (times, answers)
    });
    let answers = answers.into_iter().collect::<Result<Vec<_>>>()?;
    for (round, key) in keys.iter().enumerate() {
        let mut ids: Vec<&TicketId> = answers.iter().map(|ids| &ids[round]).collect();
        ids.sort();
        ids.dedup();
        if ids.len() != 1 {
            return Err(Error::ScenarioFailed {
                scenario: "throughput race",
                expected: format!("one ticket id for the {clients} callers of key {key}"),
                observed: format!("{ids:?}"),
            });
        }
    }
    // One ticket per race and one per plain insert; one record per race.
    check_counts(tool, rounds + rounds * clients as u32, rounds)?;
    // No rounds, no times: a zero, as `max` below gives.
    let median = |index: usize| {
        let values: Vec<Duration> = times.iter().map(|pair| pair[index]).collect();
        crate::bench::percentile(values, 50, Ord::cmp).unwrap_or_default()
    };
    Ok(Race {
        rounds,
        median: median(0),
        max: times.iter().map(|pair| pair[0]).max().unwrap_or_default(),
        plain_median: median(1),
    })
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

impl ThroughputReport {
    /// The report as JSON: the figures `cargo xtask bench` keeps in `bench.json`.
    pub fn to_json(&self) -> Value {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|row| {
                json!({
                    "clients": row.clients,
                    "plain_insert_per_second": row.plain.per_second(),
                    "keyed_create_per_second": row.keyed.per_second(),
                    "keyed_over_plain": row.ratio(),
                    "plain_select_per_second": row.select.per_second(),
                    "replay_per_second": row.replay.per_second(),
                    "replay_over_select": row.replay_ratio(),
                    "race": row.race.map(|race| json!({
                        "rounds": race.rounds,
                        "median_ms": ms(race.median),
                        "max_ms": ms(race.max),
                        "plain_round_median_ms": ms(race.plain_median),
                        "median_over_plain_round": race.ratio(),
                    })),
                })
            })
            .collect();
        json!({
            "heading": self.heading,
            "calls": self.plan.calls,
            "rows": rows,
        })
    }
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
        write!(
            f,
            "\n\nreplays of the keyed creates' records against a plain select of each\n\
             {:>7} {:>16} {:>16} {:>12}",
            "clients", "plain select/s", "replay/s", "replay/sel"
        )?;
        for row in &self.rows {
            write!(
                f,
                "\n{:>7} {:>16.0} {:>16.0} {:>12.2}",
                row.clients,
                row.select.per_second(),
                row.replay.per_second(),
                row.replay_ratio()
            )?;
        }
        write!(
            f,
            "\n\nevery client with one fresh key at once, against one plain insert each\n\
             {:>7} {:>7} {:>12} {:>12} {:>12} {:>12}",
            "clients", "rounds", "race p50 ms", "race max ms", "plain p50 ms", "race/plain"
        )?;
        for row in &self.rows {
            if let Some(race) = row.race {
                write!(
                    f,
                    "\n{:>7} {:>7} {:>12.2} {:>12.2} {:>12.2} {:>12.2}",
                    row.clients,
                    race.rounds,
                    race.median.as_secs_f64() * 1e3,
                    race.max.as_secs_f64() * 1e3,
                    race.plain_median.as_secs_f64() * 1e3,
                    race.ratio()
                )?;
            }
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
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 14, "{text}");
        assert!(lines[2].ends_with("keyed/plain"));
        assert!(lines[7].ends_with("replay/sel"), "{text}");
        // A race needs two clients: one row, for 3.
        assert!(lines[12].ends_with("race/plain"), "{text}");
        assert!(lines[13].trim_start().starts_with('3'), "{text}");
        let json = report.to_json();
        assert!(json["rows"][0]["race"].is_null());
        assert_eq!(json["rows"][1]["race"]["rounds"], 5);
        assert!(json["rows"][1]["replay_over_select"].as_f64().unwrap() > 0.0);
    }

    #[test]
    fn calls_are_shared_out_without_loss() {
        let keys = fresh_keys(10, 3, 0).unwrap();
        assert_eq!(keys.iter().map(Vec::len).collect::<Vec<_>>(), [4, 3, 3]);
    }
}
