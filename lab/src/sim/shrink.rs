//! Shrinking: make a failing plan smaller, one edit at a time, keeping each edit that still
//! breaks the same invariant.

use crate::error::Result;
use crate::tool::Fault;

use super::check::{Findings, ViolationKind, check};
use super::history::History;
use super::plan::Plan;
use super::variant::Variant;

/// The smallest failing history the shrinker found.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The smaller plan.
    pub plan: Plan,
    /// Its history.
    pub history: History,
    /// The checker's findings on it.
    pub findings: Findings,
    /// How many candidate plans were run.
    pub runs: usize,
}

// ANCHOR: shrink
/// Shrinks `plan`, which breaks `target` on `variant`, by trying smaller plans in turn: fewer
/// callers, fewer intents, fewer attempts, fewer faults, shorter waits. An edit is kept when the
/// smaller plan still breaks `target`; shrinking stops when no edit is kept or after `budget`
/// runs. Every run is deterministic, so the result is too.
///
/// # Errors
/// Any error of the tool while running a candidate.
pub fn shrink(
    variant: Variant,
    plan: &Plan,
    target: ViolationKind,
    budget: usize,
) -> Result<Shrunk> {
    let history = variant.run(plan)?;
    let findings = check(&history);
    let mut best = Shrunk {
        plan: plan.clone(),
        history,
        findings,
        runs: 1,
    };
    // After a kept edit, carry on from the same position in the new list: the edits before it
    // failed a moment ago and would most likely fail again. A pass that keeps nothing from the
    // start of the list ends the search.
    let mut start = 0;
    loop {
        let list = candidates(&best.plan);
        let mut kept = None;
        for (position, candidate) in list.into_iter().enumerate().skip(start) {
            if best.runs >= budget {
                return Ok(best);
            }
            best.runs += 1;
            let history = variant.run(&candidate)?;
            let findings = check(&history);
            if findings.violations.iter().any(|v| v.kind == target) {
                best.plan = candidate;
                best.history = history;
                best.findings = findings;
                kept = Some(position);
                break;
            }
        }
        match kept {
            Some(position) => start = position,
            None if start == 0 => break,
            None => start = 0,
        }
    }
    Ok(best)
}
// ANCHOR_END: shrink

/// How many other interleavings the shrinker tries for each cut: removing a caller changes which
/// steps are ready when, so the same seed no longer picks the same interleaving.
const RESCHEDULES: u64 = 4;

/// Every one-edit-smaller plan, the biggest cuts first. Each cut is tried with the plan's own
/// schedule, then with a few others.
fn candidates(plan: &Plan) -> Vec<Plan> {
    let mut out = Vec::new();
    let cuts = std::cell::Cell::new(true);
    let mut edit = |change: &dyn Fn(&mut Plan) -> bool| {
        let mut candidate = plan.clone();
        if change(&mut candidate) {
            let base = candidate.schedule;
            out.push(candidate.clone());
            if cuts.get() {
                for k in 1..=RESCHEDULES {
                    candidate.schedule = base.wrapping_add(k);
                    out.push(candidate.clone());
                }
            }
        }
    };
    cut(plan, &mut edit);
    cuts.set(false);
    simplify(plan, &mut edit);
    out
}

/// Tries one edit of a plan: keeps the edited copy if the edit changed something.
type Edit<'e> = dyn FnMut(&dyn Fn(&mut Plan) -> bool) + 'e;

/// Cuts: a caller, an intent, a crash, the pruning, a lane or an attempt fewer.
fn cut(plan: &Plan, edit: &mut Edit<'_>) {
    for c in 0..plan.callers.len() {
        edit(&|p| {
            p.callers.len() > 1 && {
                p.callers.remove(c);
                true
            }
        });
    }
    for (c, caller) in plan.callers.iter().enumerate() {
        for i in 0..caller.intents.len() {
            edit(&|p| {
                let intents = &mut p.callers[c].intents;
                intents.len() > 1 && {
                    intents.remove(i);
                    true
                }
            });
        }
    }
    for c in 0..plan.callers.len() {
        edit(&|p| p.callers[c].crash.take().is_some());
    }
    edit(&|p| p.prune_every.take().is_some());
    for (c, caller) in plan.callers.iter().enumerate() {
        for (i, intent) in caller.intents.iter().enumerate() {
            edit(&|p| {
                p.callers[c].intents[i].lanes.len() > 1
                    && p.callers[c].intents[i].lanes.pop().is_some()
            });
            for (l, lane) in intent.lanes.iter().enumerate() {
                for a in 0..lane.len() {
                    edit(&|p| {
                        let lane = &mut p.callers[c].intents[i].lanes[l];
                        lane.len() > 1 && {
                            lane.remove(a);
                            true
                        }
                    });
                }
            }
        }
    }
}

/// Simpler values: no fault, sorted JSON, shorter waits, earlier events.
fn simplify(plan: &Plan, edit: &mut Edit<'_>) {
    for (c, caller) in plan.callers.iter().enumerate() {
        for (i, intent) in caller.intents.iter().enumerate() {
            for (l, lane) in intent.lanes.iter().enumerate() {
                for a in 0..lane.len() {
                    edit(&|p| {
                        let attempt = &mut p.callers[c].intents[i].lanes[l][a];
                        std::mem::replace(&mut attempt.fault, Fault::None) != Fault::None
                    });
                    edit(&|p| {
                        let attempt = &mut p.callers[c].intents[i].lanes[l][a];
                        std::mem::replace(&mut attempt.order, 0) != 0
                    });
                    edit(&|p| {
                        let attempt = &mut p.callers[c].intents[i].lanes[l][a];
                        let shorter = attempt.delay / 2;
                        std::mem::replace(&mut attempt.delay, shorter) != shorter
                    });
                }
            }
            edit(&|p| std::mem::replace(&mut p.callers[c].intents[i].arrives, 0) != 0);
            edit(&|p| std::mem::replace(&mut p.callers[c].intents[i].save_after, 1) != 1);
        }
        for sooner in [2, 1] {
            edit(&|p| {
                p.callers[c].crash.as_mut().is_some_and(|crash| {
                    let after = if sooner == 2 {
                        crash.after / 2
                    } else {
                        crash.after - 1
                    };
                    after > 0 && std::mem::replace(&mut crash.after, after) != after
                })
            });
        }
        edit(&|p| {
            p.callers[c].crash.as_mut().is_some_and(|crash| {
                let shorter = crash.down_for / 2;
                shorter > 0 && std::mem::replace(&mut crash.down_for, shorter) != shorter
            })
        });
    }
}
