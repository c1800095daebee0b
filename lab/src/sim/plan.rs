//! What one history will do, decided entirely by its seed: callers, their intents, the faults each
//! attempt meets, crashes, and when the retention job runs.
//!
//! A plan is plain data. The shrinker edits it (drops a caller, an intent, a fault) and runs it
//! again; the scheduler's choices come from the same seed.

use crate::tool::{Fault, Step};

use super::rng::SplitMix64;

/// The retention the contract promises, in ticks: an operation record is kept at least this long
/// after the last call that used its key.
pub const RETENTION: u64 = 40;

/// One history's script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The seed the plan was generated from.
    pub seed: u64,
    /// The seed of the scheduler's choices: the plan's seed, unless the shrinker tried another
    /// interleaving of a smaller plan.
    pub schedule: u64,
    /// The promised retention, in ticks.
    pub retention: u64,
    /// The callers, each a separate scope.
    pub callers: Vec<CallerPlan>,
    /// How often the retention job runs, in ticks; `None` when it never runs.
    pub prune_every: Option<u64>,
}

/// One caller: a scope of its own, a journal that survives its crashes, and its intents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallerPlan {
    /// The caller's name, also its scope (`c1`, `c2`, ...).
    pub name: String,
    /// What it means to do, in arrival order.
    pub intents: Vec<IntentPlan>,
    /// When it crashes, if it does.
    pub crash: Option<CrashPlan>,
}

/// A caller crash: everything in memory is lost, the journal survives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashPlan {
    /// The crash comes right after the caller's own step number `after` (receiving, saving or
    /// one step of a call). Counting the caller's own steps, not the clock, keeps the crash at
    /// the same point of the caller's work when the shrinker removes other callers.
    pub after: u32,
    /// How long the caller stays down before it restarts.
    pub down_for: u64,
}

/// One intended operation of a caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentPlan {
    /// The intent's name within its caller (`i1`, `i2`, ...).
    pub name: String,
    /// The operation key the caller saves with it. Callers reuse the same key names on purpose, so
    /// that anything visible across scopes would show.
    pub key: String,
    /// When the intent reuses an earlier intent's key with its own, different payload: that
    /// intent's name.
    pub reuses: Option<String>,
    /// When the caller receives the intent.
    pub arrives: u64,
    /// Ticks between receiving the intent and saving it with its key; a crash in between loses it.
    pub save_after: u64,
    /// The first dispatch's attempts, in order; a second entry is a concurrent duplicate dispatch
    /// of the same intent with the same key.
    pub lanes: Vec<Vec<AttemptPlan>>,
}

/// One call of the create tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptPlan {
    /// Ticks to wait before this attempt (for a retry: the back-off).
    pub delay: u64,
    /// The fault the call meets.
    pub fault: Fault,
    /// Which key order the caller writes the payload's JSON text in (0 is sorted).
    pub order: u8,
}

impl AttemptPlan {
    /// An attempt with no delay, no fault and sorted JSON text.
    pub const PLAIN: AttemptPlan = AttemptPlan {
        delay: 0,
        fault: Fault::None,
        order: 0,
    };
}

/// How many orders the payload's four fields can be written in.
pub const KEY_ORDERS: u8 = 24;

impl Plan {
    // ANCHOR: generate
    /// The plan for `seed`: two to four callers with two to four intents each, and faults of
    /// every kind the simulator knows, each with its own probability.
    pub fn generate(seed: u64) -> Plan {
        let mut rng = SplitMix64::new(seed);
        let callers = (1..=rng.between(2, 4))
            .map(|c| {
                let mut intents: Vec<IntentPlan> = Vec::new();
                let mut arrives = rng.below(10);
                for i in 1..=rng.between(2, 4) {
                    let reused = (!intents.is_empty() && rng.chance(10))
                        .then(|| intents[rng.index(intents.len())].clone());
                    let first_lane = attempts(&mut rng);
                    let mut lanes = vec![first_lane];
                    if rng.chance(15) {
                        lanes.push(attempts(&mut rng));
                    }
                    intents.push(IntentPlan {
                        name: format!("i{i}"),
                        key: reused
                            .as_ref()
                            .map_or_else(|| format!("k{i}"), |r| r.key.clone()),
                        reuses: reused.map(|r| r.name),
                        arrives,
                        save_after: rng.between(1, 3),
                        lanes,
                    });
                    arrives += rng.between(0, 15);
                }
                let crash = rng.chance(40).then(|| CrashPlan {
                    after: rng.between(1, 12) as u32,
                    down_for: if rng.chance(15) {
                        RETENTION + rng.between(1, 30)
                    } else {
                        rng.between(1, 12)
                    },
                });
                CallerPlan {
                    name: format!("c{c}"),
                    intents,
                    crash,
                }
            })
            .collect();
        let prune_every = Some(rng.between(3, 10));
        Plan {
            seed,
            schedule: seed,
            retention: RETENTION,
            callers,
            prune_every,
        }
    }
    // ANCHOR_END: generate

    /// Callers, intents, attempts and injected events: the measures the shrinker makes smaller.
    pub fn size(&self) -> PlanSize {
        let intents = self.callers.iter().flat_map(|c| &c.intents);
        PlanSize {
            callers: self.callers.len(),
            intents: intents.clone().count(),
            attempts: intents.clone().flat_map(|i| &i.lanes).map(Vec::len).sum(),
            faults: intents
                .flat_map(|i| i.lanes.iter().flatten())
                .filter(|a| a.fault != Fault::None)
                .count()
                + self.callers.iter().filter(|c| c.crash.is_some()).count()
                + usize::from(self.prune_every.is_some()),
        }
    }
}

/// How big a plan is, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanSize {
    /// Callers.
    pub callers: usize,
    /// Intents, over all callers.
    pub intents: usize,
    /// Planned attempts, over all lanes.
    pub attempts: usize,
    /// Injected faults, crashes and retention runs.
    pub faults: usize,
}

/// One to four attempts; the last is usually clean, so most intents end with an answer.
fn attempts(rng: &mut SplitMix64) -> Vec<AttemptPlan> {
    let count = rng.between(1, 4);
    (0..count)
        .map(|n| AttemptPlan {
            delay: if n == 0 {
                0
            } else if rng.chance(10) {
                // A late retry: it may arrive after the record's retention has run out.
                RETENTION + rng.between(1, 30)
            } else {
                rng.between(1, 12)
            },
            fault: if n + 1 == count && rng.chance(80) {
                Fault::None
            } else {
                fault(rng)
            },
            order: (rng.below(u64::from(KEY_ORDERS))) as u8,
        })
        .collect()
}

fn fault(rng: &mut SplitMix64) -> Fault {
    match rng.below(100) {
        0..=44 => Fault::None,
        45..=69 => Fault::LoseReply,
        70..=74 => Fault::BeforeCommit,
        _ => Fault::FailAt(Step::ALL[rng.index(Step::ALL.len())]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_plan_and_another_seed_another() {
        assert_eq!(Plan::generate(42), Plan::generate(42));
        assert_ne!(Plan::generate(42), Plan::generate(43));
    }

    #[test]
    fn plans_stay_within_their_bounds() {
        for seed in 0..200 {
            let plan = Plan::generate(seed);
            assert!((2..=4).contains(&plan.callers.len()));
            for caller in &plan.callers {
                assert!((2..=4).contains(&caller.intents.len()));
                for intent in &caller.intents {
                    assert!((1..=2).contains(&intent.lanes.len()));
                    assert!(intent.lanes.iter().all(|l| (1..=4).contains(&l.len())));
                }
            }
        }
    }
}
