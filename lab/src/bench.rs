//! `lab bench`: what the keyed create costs, measured side by side in one run.
//!
//! Every figure is a ratio between measurements taken in the same run on the same machine, so a
//! noisy neighbour slows both sides alike. No test asserts on them; the targets are read off the
//! printed table.
//!
//! - [`sequential`]: one caller on one reused connection: plain insert vs keyed create, plain
//!   select vs replay, durable and CPU-bound.
//! - [`bursts`]: many callers released together, on one key and on distinct keys, with group commit
//!   and with SQLite's busy handler only, against the disk's raw fdatasync rate.
//! - [`retained`]: create and replay with a thousand and with a million records kept.

pub mod bursts;
pub mod probe;
pub mod retained;
pub mod sequential;

use std::cmp::Ordering;
use std::fmt;
use std::time::Duration;

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::tool::Outcome;

/// The `p`th percentile (0 to 100) of `values` in the order `order`: the values are sorted and
/// the one at 0-based index ⌊n × p / 100⌋, capped at n − 1, is returned. So the 50th percentile
/// of an even count is the upper of the two middle values, and `p` = 100 is the largest. Every
/// median and percentile the lab and xtask report uses this one rule, so recorded figures keep
/// their meaning; an empty list gives `None`, and each caller says what that means for it.
pub fn percentile<T>(
    mut values: Vec<T>,
    p: u32,
    order: impl FnMut(&T, &T) -> Ordering,
) -> Option<T> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(order);
    let index = (values.len() * p as usize / 100).min(values.len() - 1);
    Some(values.swap_remove(index))
}

/// The median of measured times, by [`percentile`]; `NaN` for no samples, so a missing
/// measurement shows as missing in the report instead of as zero.
pub fn median_f64(values: Vec<f64>) -> f64 {
    percentile(values, 50, f64::total_cmp).unwrap_or(f64::NAN)
}

/// What to measure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchPlan {
    /// Calls per sequential measurement.
    pub iterations: u32,
    /// Burst sizes: callers released together.
    pub bursts: Vec<usize>,
    /// Numbers of retained records to compare.
    pub retained: Vec<u64>,
    /// How often each burst and each sequential measurement is repeated; the median is kept.
    pub repeats: usize,
}

impl Default for BenchPlan {
    fn default() -> Self {
        BenchPlan {
            iterations: 2_000,
            bursts: vec![8, 64, 256],
            retained: vec![1_000, 1_000_000],
            repeats: 5,
        }
    }
}

impl BenchPlan {
    /// A plan small enough for a smoke test: seconds, not minutes.
    pub fn quick() -> Self {
        BenchPlan {
            iterations: 100,
            bursts: vec![8, 64],
            retained: vec![100, 10_000],
            repeats: 3,
        }
    }
}

/// One run's measurements; serialised, the `lab` part of `bench.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchReport {
    /// What was measured.
    pub plan: BenchPlan,
    /// The machine it ran on.
    pub machine: Machine,
    /// One caller, one connection.
    pub sequential: sequential::Sequential,
    /// Callers released together.
    pub bursts: bursts::Bursts,
    /// Create and replay cost by number of retained records.
    pub retained: Vec<retained::Retained>,
}

/// The machine a run was taken on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    /// The processor's model name, as the operating system reports it.
    pub cpu: String,
    /// Logical processors available to the run.
    pub cores: usize,
    /// Operating system and architecture.
    pub platform: String,
    /// The SQLite library linked into the lab.
    pub sqlite: String,
    /// The lab crate's version.
    pub lab: String,
}

impl Machine {
    /// This machine.
    pub fn here() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|line| line.starts_with("model name"))
                    .and_then(|line| line.split_once(':'))
                    .map(|(_, name)| name.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            platform: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
            sqlite: crate::sqlite::sqlite_version().to_owned(),
            lab: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

/// Runs every measurement of `plan`, printing progress to stderr.
///
/// # Errors
/// Any store error, or a burst or replay that broke the contract (as
/// [`Error::ScenarioFailed`]).
pub fn run(plan: &BenchPlan) -> Result<BenchReport> {
    eprintln!("bench: sequential calls ({} each)...", plan.iterations);
    let sequential = sequential::measure(plan.iterations, plan.repeats)?;
    eprintln!(
        "bench: bursts {:?}, {} times each...",
        plan.bursts, plan.repeats
    );
    let bursts = bursts::measure(&plan.bursts, plan.repeats)?;
    let retained = retained::measure(&plan.retained, plan.iterations, plan.repeats)?;
    Ok(BenchReport {
        plan: plan.clone(),
        machine: Machine::here(),
        sequential,
        bursts,
        retained,
    })
}

impl BenchReport {
    /// The report as pretty JSON with a final newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("the report is plain data");
        text.push('\n');
        text
    }
}

/// Calls per second of one measurement.
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

/// Checks that a measured replay was one: a create there would mean the record was not found,
/// and the figure would measure something else.
pub(crate) fn replayed(outcome: Outcome, measurement: &'static str) -> Result<()> {
    match outcome {
        Outcome::Replayed(_) => Ok(()),
        other => Err(Error::ScenarioFailed {
            scenario: measurement,
            expected: "a replay".to_owned(),
            observed: format!("{other:?}"),
        }),
    }
}

/// The bare read at the heart of a replay: one operation record's ticket by primary key, in
/// autocommit, with none of the store's code around it. The baseline that replays are compared
/// with.
pub(crate) fn plain_select(db: &Connection, scope: &Scope, key: &OperationKey) -> Result<i64> {
    Ok(db
        .prepare_cached(
            "SELECT ticket_id FROM operation_records
             WHERE key = ?1 AND caller = ?2 AND operation = ?3",
        )?
        .query_row(
            params![key.as_str(), scope.caller(), scope.operation()],
            |row| row.get(0),
        )?)
}

/// Nanoseconds per call.
pub(crate) fn per_call(elapsed: Duration, calls: u32) -> f64 {
    elapsed.as_secs_f64() * 1e9 / f64::from(calls.max(1))
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.machine;
        writeln!(
            f,
            "machine: {} ({} logical cores), {}, SQLite {}, lab {}",
            m.cpu, m.cores, m.platform, m.sqlite, m.lab
        )?;
        writeln!(f)?;
        write!(f, "{}", self.sequential)?;
        writeln!(f)?;
        write!(f, "{}", self.bursts)?;
        writeln!(f)?;
        retained::write_table(f, &self.retained)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_list_has_no_percentile() {
        assert_eq!(percentile(Vec::<u32>::new(), 50, Ord::cmp), None);
        assert!(median_f64(Vec::new()).is_nan());
    }

    #[test]
    fn the_percentile_is_the_value_at_index_n_times_p_over_100_of_the_sorted_list() {
        let values = vec![40, 10, 30, 20];
        // ⌊4 × 50 / 100⌋ = 2: the upper of the two middle values, as the recorded medians use.
        assert_eq!(percentile(values.clone(), 50, Ord::cmp), Some(30));
        assert_eq!(percentile(values.clone(), 0, Ord::cmp), Some(10));
        // ⌊4 × 99 / 100⌋ = 3, and anything past the end is capped at the largest.
        assert_eq!(percentile(values.clone(), 99, Ord::cmp), Some(40));
        assert_eq!(percentile(values.clone(), 100, Ord::cmp), Some(40));
        assert_eq!(percentile(values, 250, Ord::cmp), Some(40));
        assert_eq!(median_f64(vec![3.0, f64::INFINITY, 1.0]), 3.0);
        assert_eq!(percentile(vec![7], 50, Ord::cmp), Some(7));
    }

    #[test]
    fn the_percentile_follows_the_order_it_is_given() {
        let runs = vec![(1, 9.0), (2, 1.0), (3, 5.0)];
        let middle = percentile(runs, 50, |a: &(i32, f64), b| a.1.total_cmp(&b.1));
        assert_eq!(middle, Some((3, 5.0)));
    }
}
