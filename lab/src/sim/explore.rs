//! Many histories: run seed after seed, check each, and shrink the first that fails.

use std::fmt;
use std::time::{Duration, Instant};

use crate::error::Result;

use super::check::{Violation, ViolationKind, check};
use super::plan::{Plan, PlanSize};
use super::shrink::{Shrunk, shrink};
use super::tally::Tally;
use super::timeline::timeline;
use super::variant::Variant;

/// How many candidate runs the shrinker may spend.
pub const SHRINK_BUDGET: usize = 3000;

/// What a run of many histories found.
#[derive(Clone, Debug)]
pub struct Exploration {
    /// The tool.
    pub variant: Variant,
    /// The first history's seed; history `n` (from 0) has seed `seed + n`.
    pub seed: u64,
    /// Counts over the histories run.
    pub tally: Tally,
    /// Histories that broke an invariant, with their seeds.
    pub failures: Vec<(u64, Vec<Violation>)>,
    /// The first failure, shrunk.
    pub counterexample: Option<Counterexample>,
    /// Wall-clock time, for the command's report only (its `Display` leaves it out, so the text
    /// is the same on every run); nothing in a history depends on it.
    pub elapsed: Duration,
}

/// A failing history, shrunk, with what it takes to replay it.
#[derive(Clone, Debug)]
pub struct Counterexample {
    /// The tool.
    pub variant: Variant,
    /// The seed of the history that failed.
    pub seed: u64,
    /// How many histories ran before it was found (itself included).
    pub histories_run: u64,
    /// The invariant kept while shrinking (the most serious one the history broke).
    pub target: ViolationKind,
    /// The failing plan's size before shrinking.
    pub original: PlanSize,
    /// Steps in the failing history before shrinking.
    pub original_steps: usize,
    /// The shrunk history.
    pub shrunk: Shrunk,
}

// ANCHOR: explore
/// Runs `histories` histories from `seed` against `variant` and checks each. The correct store
/// runs them all; an anti-pattern stops at its first failure. The first failure is shrunk.
///
/// # Errors
/// Any error of the tool (not a broken invariant: those are reported in the result).
pub fn explore(variant: Variant, seed: u64, histories: u64) -> Result<Exploration> {
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for n in 0..histories {
        let history_seed = seed.wrapping_add(n);
        let history = variant.run(&Plan::generate(history_seed))?;
        let findings = check(&history);
        tally.add(&history);
        tally.retention_boundary += findings.allowed.retention_boundary as u64;
        if !findings.violations.is_empty() {
            failures.push((history_seed, findings.violations));
            if variant != Variant::Correct {
                break;
            }
        }
    }
    let counterexample = match failures.first() {
        Some((failed, violations)) => Some(counterexample(
            variant,
            *failed,
            violations,
            tally.histories,
        )?),
        None => None,
    };
    Ok(Exploration {
        variant,
        seed,
        tally,
        failures,
        counterexample,
        elapsed: started.elapsed(),
    })
}
// ANCHOR_END: explore

/// Runs histories from `seed` against `variant` until one fails (at most `histories`), and shrinks
/// it.
///
/// # Errors
/// Any error of the tool.
pub fn find_counterexample(
    variant: Variant,
    seed: u64,
    histories: u64,
) -> Result<Option<Counterexample>> {
    for n in 0..histories {
        let history_seed = seed.wrapping_add(n);
        let findings = check(&variant.run(&Plan::generate(history_seed))?);
        if !findings.violations.is_empty() {
            return counterexample(variant, history_seed, &findings.violations, n + 1).map(Some);
        }
    }
    Ok(None)
}

fn counterexample(
    variant: Variant,
    seed: u64,
    violations: &[Violation],
    histories_run: u64,
) -> Result<Counterexample> {
    // Violations are sorted most serious first.
    let target = violations
        .first()
        .map_or(ViolationKind::DuplicateTicket, |v| v.kind);
    let plan = Plan::generate(seed);
    let original_steps = variant.run(&plan)?.events.len();
    let shrunk = shrink(variant, &plan, target, SHRINK_BUDGET)?;
    Ok(Counterexample {
        variant,
        seed,
        histories_run,
        target,
        original: plan.size(),
        original_steps,
        shrunk,
    })
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let small = self.shrunk.plan.size();
        writeln!(
            f,
            "variant {} ({}): {} in history seed {}",
            self.variant,
            self.variant.describe(),
            self.target.name(),
            self.seed
        )?;
        writeln!(
            f,
            "shrunk from {} callers, {} intents, {} steps to {} caller{}, {} intent{}, {} steps",
            self.original.callers,
            self.original.intents,
            self.original_steps,
            small.callers,
            plural(small.callers),
            small.intents,
            plural(small.intents),
            self.shrunk.history.events.len()
        )?;
        writeln!(
            f,
            "replay: lab simulate --variant {} --seed {} --histories 1",
            self.variant, self.seed
        )?;
        write!(
            f,
            "{}",
            timeline(&self.shrunk.history, &self.shrunk.findings)
        )
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The counts and the violations found; the shrunk counterexample has its own `Display`.
impl fmt::Display for Exploration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulate: backend sqlite, variant {} ({}), seeds {} to {}",
            self.variant,
            self.variant.describe(),
            self.seed,
            self.seed
                .wrapping_add(self.tally.histories.saturating_sub(1))
        )?;
        write!(f, "{}", self.tally)?;
        let violations: usize = self.failures.iter().map(|(_, v)| v.len()).sum();
        // The histories with a violation, out of every history run: "0 in 0" after ten thousand
        // runs read as if none had run.
        writeln!(
            f,
            "violations found: {violations}, in {} of {} histories",
            self.failures.len(),
            self.tally.histories
        )?;
        for (seed, found) in self.failures.iter().take(5) {
            for violation in found {
                writeln!(f, "  seed {seed}: {violation}")?;
            }
        }
        Ok(())
    }
}
