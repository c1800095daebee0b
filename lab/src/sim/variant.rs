//! Which tool a simulation runs against: the lab's store, or one of the anti-patterns.

use std::fmt;

use crate::error::Result;
use crate::sqlite::{SqliteStore, StoreOptions, Synchronous};

use super::antipattern::{
    CheckThenWrite, EarlyPrune, FreshKeyPerAttempt, MemoryKey, RawPayloadText,
};
use super::check::ViolationKind;
use super::history::History;
use super::plan::Plan;
use super::run::run;
use super::subject::Subject;

/// Work to do with a fresh tool of any variant: the one place that names each variant's type.
pub trait WithSubject {
    /// What the work returns.
    type Output;

    /// Does the work with `subject`.
    ///
    /// # Errors
    /// Any error of the tool.
    fn call<S: Subject>(self, subject: &S) -> Result<Self::Output>;
}

/// A tool the simulator can run: the correct store, or an anti-pattern on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The lab's SQLite store.
    Correct,
    /// A new key on every attempt.
    FreshKey,
    /// Look the key up, then write in another transaction, with no unique constraint.
    CheckThenWrite,
    /// Records pruned long before the promised retention runs out.
    EarlyPrune,
    /// Keys remembered only in memory, which a caller restart loses.
    MemoryKey,
    /// Payloads compared as raw text, so key order matters.
    RawPayload,
}

impl Variant {
    /// Every variant, the correct store first.
    pub const ALL: [Variant; 6] = [
        Variant::Correct,
        Variant::FreshKey,
        Variant::CheckThenWrite,
        Variant::EarlyPrune,
        Variant::MemoryKey,
        Variant::RawPayload,
    ];

    /// The anti-patterns only.
    pub const ANTI_PATTERNS: [Variant; 5] = [
        Variant::FreshKey,
        Variant::CheckThenWrite,
        Variant::EarlyPrune,
        Variant::MemoryKey,
        Variant::RawPayload,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Correct => "correct",
            Variant::FreshKey => "fresh-key",
            Variant::CheckThenWrite => "check-then-write",
            Variant::EarlyPrune => "early-prune",
            Variant::MemoryKey => "memory-key",
            Variant::RawPayload => "raw-payload",
        }
    }

    /// The variant with this name.
    pub fn from_name(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == name)
    }

    /// One line on what the variant does.
    pub fn describe(self) -> &'static str {
        match self {
            Variant::Correct => "the lab's SQLite store: key and ticket in one transaction",
            Variant::FreshKey => "a new key on every attempt",
            Variant::CheckThenWrite => {
                "look the key up, then write in a second transaction, no unique constraint"
            }
            Variant::EarlyPrune => "records deleted after an eighth of the promised retention",
            Variant::MemoryKey => "keys remembered in memory only; a caller restart forgets them",
            Variant::RawPayload => "payloads compared as received text, so key order matters",
        }
    }

    /// The invariant this anti-pattern breaks first; `None` for the correct store.
    pub fn breaks(self) -> Option<ViolationKind> {
        match self {
            Variant::Correct => None,
            Variant::FreshKey
            | Variant::CheckThenWrite
            | Variant::EarlyPrune
            | Variant::MemoryKey => Some(ViolationKind::DuplicateTicket),
            Variant::RawPayload => Some(ViolationKind::SpuriousConflict),
        }
    }

    // ANCHOR: run_variant
    /// Runs `plan` against a fresh tool of this variant.
    ///
    /// # Errors
    /// Any error creating the tool or reading it back.
    pub fn run(self, plan: &Plan) -> Result<History> {
        struct RunPlan<'p>(&'p Plan);
        impl WithSubject for RunPlan<'_> {
            type Output = History;
            fn call<S: Subject>(self, subject: &S) -> Result<History> {
                run(self.0, subject)
            }
        }
        self.with_fresh(RunPlan(plan))
    }

    /// Hands a fresh tool of this variant to `job`.
    ///
    /// The stores skip the sync to disk on commit (`Synchronous::Off`): the simulator checks who
    /// was told what and what was stored, not what survives a power cut, and the sync would only
    /// make ten thousand histories slower.
    ///
    /// # Errors
    /// Any error creating the tool, or of `job`.
    pub fn with_fresh<J: WithSubject>(self, job: J) -> Result<J::Output> {
        let store = || {
            SqliteStore::temporary_with(StoreOptions::default().with_synchronous(Synchronous::Off))
        };
        match self {
            Variant::Correct => job.call(&store()?),
            Variant::FreshKey => job.call(&FreshKeyPerAttempt::new(store()?)),
            Variant::CheckThenWrite => job.call(&CheckThenWrite::temporary()?),
            Variant::EarlyPrune => job.call(&EarlyPrune::new(store()?)),
            Variant::MemoryKey => job.call(&MemoryKey::new(store()?)),
            Variant::RawPayload => job.call(&RawPayloadText::temporary()?),
        }
    }
    // ANCHOR_END: run_variant
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
