//! Counts over many histories: the faults injected, by kind, and what callers were told.

use std::fmt;

use crate::tool::{Fault, Step};

use super::history::{CallResult, History, What};

/// What a set of histories injected and observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Histories counted.
    pub histories: u64,
    /// Callers, over all histories.
    pub callers: u64,
    /// Intents received.
    pub intents: u64,
    /// Create calls finished (a call split into steps counts once).
    pub calls: u64,
    /// Replies lost after the commit.
    pub lost_replies: u64,
    /// Failures injected at each step of the create path, in [`Step::ALL`] order.
    pub failed_at: [u64; 5],
    /// Failures injected with [`Fault::BeforeCommit`].
    pub before_commit: u64,
    /// Caller crashes.
    pub crashes: u64,
    /// Intents lost because their caller crashed before saving them.
    pub lost_before_saving: u64,
    /// Intents resumed with their saved key after a restart.
    pub resumed: u64,
    /// Intents dispatched twice at once.
    pub concurrent_duplicates: u64,
    /// Calls that reused an earlier intent's key with another payload.
    pub changed_payloads: u64,
    /// Operation records deleted by the retention job.
    pub pruned: u64,
    /// Calls answered with a new ticket.
    pub created: u64,
    /// Calls answered with a replay.
    pub replayed: u64,
    /// Calls rejected as a payload conflict.
    pub conflicts: u64,
    /// Intents marked for review.
    pub reviewed: u64,
    /// Keys that got a new ticket after their record was pruned within the contract.
    pub retention_boundary: u64,
}

impl Tally {
    /// Adds one history.
    pub fn add(&mut self, history: &History) {
        self.histories += 1;
        self.callers += history.plan.callers.len() as u64;
        self.concurrent_duplicates += history
            .plan
            .callers
            .iter()
            .flat_map(|c| &c.intents)
            .filter(|i| i.lanes.len() > 1)
            .count() as u64;
        for event in &history.events {
            match &event.what {
                What::Received { .. } => self.intents += 1,
                What::Call {
                    intent,
                    fault,
                    result,
                    ..
                } if !matches!(result, CallResult::Pending(_) | CallResult::Abandoned) => {
                    self.calls += 1;
                    match fault {
                        Fault::LoseReply => self.lost_replies += 1,
                        Fault::BeforeCommit => self.before_commit += 1,
                        Fault::FailAt(step) => {
                            if let Some(i) = Step::ALL.iter().position(|s| s == step) {
                                self.failed_at[i] += 1;
                            }
                        }
                        _ => {}
                    }
                    if history.intents[*intent].reuses.is_some() {
                        self.changed_payloads += 1;
                    }
                    match result {
                        CallResult::Created(_) => self.created += 1,
                        CallResult::Replayed(_) => self.replayed += 1,
                        CallResult::Conflict => self.conflicts += 1,
                        _ => {}
                    }
                }
                What::Reviewed { .. } => self.reviewed += 1,
                What::Crashed { lost, .. } => {
                    self.crashes += 1;
                    self.lost_before_saving += lost.len() as u64;
                }
                What::Restarted { resumed, .. } => self.resumed += resumed.len() as u64,
                What::Pruned { .. } => self.pruned += 1,
                _ => {}
            }
        }
    }
}

/// The step's name as the reports print it.
pub fn step_name(step: Step) -> &'static str {
    match step {
        Step::Begin => "begin",
        Step::Lookup => "lookup",
        Step::InsertTicket => "ticket insert",
        Step::InsertRecord => "record insert",
        Step::Commit => "commit",
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "histories run: {} ({} callers, {} intents, {} create calls)",
            self.histories, self.callers, self.intents, self.calls
        )?;
        writeln!(f, "faults injected, by kind:")?;
        let mut rows: Vec<(String, u64)> =
            vec![("lost reply after commit".into(), self.lost_replies)];
        for (step, count) in Step::ALL.iter().zip(self.failed_at) {
            rows.push((format!("failure at {}", step_name(*step)), count));
        }
        rows.extend([
            ("failure before commit".into(), self.before_commit),
            ("caller crash".into(), self.crashes),
            (
                "  intent lost before it was saved".into(),
                self.lost_before_saving,
            ),
            ("  intent resumed with its saved key".into(), self.resumed),
            (
                "concurrent duplicate dispatch".into(),
                self.concurrent_duplicates,
            ),
            (
                "changed payload under an old key".into(),
                self.changed_payloads,
            ),
            ("record pruned by retention".into(), self.pruned),
        ]);
        for (label, count) in rows {
            writeln!(f, "  {label:<42} {count:>8}")?;
        }
        writeln!(f, "outcomes:")?;
        for (label, count) in [
            ("created", self.created),
            ("replayed", self.replayed),
            ("payload conflict", self.conflicts),
            ("marked for review", self.reviewed),
            (
                "new ticket after a pruned record (allowed)",
                self.retention_boundary,
            ),
        ] {
            writeln!(f, "  {label:<42} {count:>8}")?;
        }
        Ok(())
    }
}
