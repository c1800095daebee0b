//! The simulator: seeded histories of callers, faults, crashes and pruning, run against a ticket
//! tool in one thread, checked against the contract's invariants, and shrunk to a short timeline
//! when they break.
//!
//! ```
//! use lab::sim::{Plan, Variant, check};
//!
//! // One history, replayed exactly from its seed, against the lab's store.
//! let history = Variant::Correct.run(&Plan::generate(7))?;
//! assert!(check(&history).violations.is_empty());
//! assert_eq!(history.events, Variant::Correct.run(&Plan::generate(7))?.events);
//! # Ok::<(), lab::Error>(())
//! ```

mod agent;
mod antipattern;
mod check;
mod command;
mod explore;
mod history;
mod plan;
mod rng;
mod run;
mod shrink;
mod subject;
mod sweep;
mod tally;
pub(crate) mod timeline;
mod variant;

pub use agent::{AgentLoop, AgentRun, PROMPTS, agent_table, run_agent};
pub use antipattern::{
    CheckThenWrite, EarlyPrune, FreshKeyPerAttempt, MemoryKey, RawPayloadText, Scratch, Unclaimed,
};
pub use check::{Allowed, Findings, Violation, ViolationKind, check};
pub use command::{
    BOOK_HISTORIES, BOOK_SEED, CommandReport, SimulateArgs, book_examples, run_command,
};
pub use explore::{Counterexample, Exploration, explore, find_counterexample};
pub use history::{CallResult, Event, History, IntentEnd, IntentInfo, What};
pub use plan::{
    AttemptPlan, CallerPlan, CrashPlan, IntentPlan, KEY_ORDERS, Plan, PlanSize, RETENTION,
};
pub use rng::SplitMix64;
pub use run::{OPERATION, run};
pub use shrink::{Shrunk, shrink};
pub use subject::{Progress, RecordRow, StoreView, Subject, TicketRow, read_lab_schema};
pub use sweep::{SWEEP_FAULTS, SweepPath, SweepRow, sweep, sweep_table};
pub use tally::Tally;
pub use timeline::timeline;
pub use variant::{Variant, WithSubject};
