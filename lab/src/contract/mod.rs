//! The retry contract as data: one list of promises, each with a short stable id, and for each
//! checker the promises each of its points covers (or why it cannot cover one).
//!
//! The lab checks one contract seven ways: the suite's scenarios, the Rust adapter check
//! ([`conformance`](crate::conformance)), the black-box HTTP and MCP checks (`lab check
//! --target`), the client grader (`lab mcp --grade-client`), the simulator and the model. Each
//! names its points in its own words; this module is where those words meet. Every report prints
//! the promise ids beside its own point names (through [`promises_of`]), and the book's contract
//! chapter and coverage matrix are drawn from [`PROMISES`] and [`coverage`], so the prose, the
//! reports and the checks cannot drift apart.
//!
//! ```
//! use lab::contract::{self, Checker, PromiseId};
//!
//! assert_eq!(contract::promise(PromiseId::Conflict).name, "A changed payload is refused");
//! assert_eq!(PromiseId::parse("conflict"), Some(PromiseId::Conflict));
//! assert!(contract::promises_of(Checker::Suite, "changed_payload").contains(&PromiseId::Conflict));
//! ```
//!
//! The ids are stable: reports, configuration and the book use them, so a promise is renamed by
//! changing its `name`, never its `id`.

mod coverage;
pub mod points;
mod render;

pub use coverage::{Coverage, coverage};
pub use render::{matrix_markdown, points_markdown, promises_markdown, renamed_markdown};

use std::fmt;

use serde::Serialize;

/// How strongly a promise is required, and by whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// The IETF draft's MUST, at the promise's section.
    Must,
    /// The IETF draft's SHOULD (or RECOMMENDED); the lab requires it all the same.
    Should,
    /// The lab's own rule: the draft says nothing, or less (its section, when given, is the one
    /// the rule is stricter than).
    Lab,
}

impl Level {
    /// The word reports and the book print.
    pub fn word(self) -> &'static str {
        match self {
            Level::Must => "MUST",
            Level::Should => "SHOULD",
            Level::Lab => "LAB",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

/// A promise's short stable id, as reports, configuration and the book print it (`lost-reply`).
/// Coverage tables and reports hold these, not strings, so a misspelt id does not compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PromiseId {
    /// `replay`
    Replay,
    /// `lost-reply`
    LostReply,
    /// `one-effect`
    OneEffect,
    /// `conflict`
    Conflict,
    /// `canonical`
    Canonical,
    /// `new-key`
    NewKey,
    /// `scope`
    Scope,
    /// `key-intact`
    KeyIntact,
    /// `no-key`
    NoKey,
    /// `atomic`
    Atomic,
    /// `error-frees-key`
    ErrorFreesKey,
    /// `retention`
    Retention,
    /// `durable`
    Durable,
    /// `keep-key`
    KeepKey,
    /// `honest-verdict`
    HonestVerdict,
}

impl PromiseId {
    /// Every id, in the order the book states the promises.
    pub const ALL: [PromiseId; 15] = [
        PromiseId::Replay,
        PromiseId::LostReply,
        PromiseId::OneEffect,
        PromiseId::Conflict,
        PromiseId::Canonical,
        PromiseId::NewKey,
        PromiseId::Scope,
        PromiseId::KeyIntact,
        PromiseId::NoKey,
        PromiseId::Atomic,
        PromiseId::ErrorFreesKey,
        PromiseId::Retention,
        PromiseId::Durable,
        PromiseId::KeepKey,
        PromiseId::HonestVerdict,
    ];

    /// The id as printed: lowercase words joined by hyphens.
    pub const fn as_str(self) -> &'static str {
        match self {
            PromiseId::Replay => "replay",
            PromiseId::LostReply => "lost-reply",
            PromiseId::OneEffect => "one-effect",
            PromiseId::Conflict => "conflict",
            PromiseId::Canonical => "canonical",
            PromiseId::NewKey => "new-key",
            PromiseId::Scope => "scope",
            PromiseId::KeyIntact => "key-intact",
            PromiseId::NoKey => "no-key",
            PromiseId::Atomic => "atomic",
            PromiseId::ErrorFreesKey => "error-frees-key",
            PromiseId::Retention => "retention",
            PromiseId::Durable => "durable",
            PromiseId::KeepKey => "keep-key",
            PromiseId::HonestVerdict => "honest-verdict",
        }
    }

    /// The id `text` names, if any.
    pub fn parse(text: &str) -> Option<PromiseId> {
        PromiseId::ALL.into_iter().find(|id| id.as_str() == text)
    }
}

impl fmt::Display for PromiseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Ids as reports print them beside a point's name: `[replay, lost-reply]`, or `[]`.
pub fn bracketed(ids: &[PromiseId]) -> String {
    let words: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
    format!("[{}]", words.join(", "))
}

/// One promise of the retry contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Promise {
    /// The short stable id reports print (`replay`).
    pub id: PromiseId,
    /// A name of a few words.
    pub name: &'static str,
    /// The promise, in one sentence.
    pub statement: &'static str,
    /// The section of draft-ietf-httpapi-idempotency-key-header-06 it rests on, if any.
    pub section: Option<&'static str>,
    /// MUST or SHOULD where the draft says so, LAB where the rule is the lab's own.
    pub level: Level,
    /// Why it matters, in a sentence.
    pub why: &'static str,
}

/// The draft the sections refer to.
pub const DRAFT: &str = "draft-ietf-httpapi-idempotency-key-header-06";

/// Every promise of the contract, in the order the book states them.
pub const PROMISES: &[Promise] = &[
    Promise {
        id: PromiseId::Replay,
        name: "A retry replays",
        statement: "A retry with a completed key and the same payload gets the original result, \
                    the same ticket, and writes nothing.",
        section: Some("2.6"),
        level: Level::Should,
        why: "A caller that retries after any doubt must get back what it asked for, not a copy.",
    },
    Promise {
        id: PromiseId::LostReply,
        name: "A lost reply loses only the answer",
        statement: "When the reply is lost after the commit (a dropped answer, a hang-up, a \
                    cancelled call, a reconnect), the effect stands and the retry with the same \
                    key replays it.",
        section: None,
        level: Level::Lab,
        why: "This is the failure the key exists for: a timeout can hide a create that happened.",
    },
    Promise {
        id: PromiseId::OneEffect,
        name: "One key, one effect",
        statement: "Callers racing on one key, fresh or completed, converge on one effect, and \
                    every success they are told of names it.",
        section: Some("2.6"),
        level: Level::Lab,
        why: "Retries and duplicates arrive together in practice; a race must not make two \
              tickets.",
    },
    Promise {
        id: PromiseId::Conflict,
        name: "A changed payload is refused",
        statement: "The same key with another payload is refused and changes nothing; the \
                    original still replays.",
        section: Some("2.7"),
        level: Level::Must,
        why: "A key names one intention; silently replaying or applying another payload hides a \
              caller's bug.",
    },
    Promise {
        id: PromiseId::Canonical,
        name: "Payloads compare in canonical form",
        statement: "Field order and whitespace never make a conflict, and any changed value does; \
                    a retry with its own payload is never refused.",
        section: Some("2.4"),
        level: Level::Lab,
        why: "A client library that re-serialises a retry must not have it refused as another \
              intention.",
    },
    Promise {
        id: PromiseId::NewKey,
        name: "A new key is a new intention",
        statement: "The same payload under a new key is a new effect; the service never merges \
                    intentions by their content.",
        section: Some("2.2"),
        level: Level::Lab,
        why: "Two tickets with equal text can both be wanted; only the caller knows, through \
              its key.",
    },
    Promise {
        id: PromiseId::Scope,
        name: "A key never grants access",
        statement: "Keys are scoped by caller and operation: another caller's, or another \
                    endpoint's, same key is its own and never replays or reveals the first.",
        section: Some("5"),
        level: Level::Should,
        why: "A guessed or reused key must not leak another caller's result.",
    },
    Promise {
        id: PromiseId::KeyIntact,
        name: "The key arrives intact",
        statement: "A key reaches the store exactly as the caller sent it, or is refused where it \
                    enters; it is never altered, trimmed or truncated.",
        section: Some("2.1"),
        level: Level::Must,
        why: "An altered key can merge two intentions or split one.",
    },
    Promise {
        id: PromiseId::NoKey,
        name: "Without a key, nothing is merged",
        statement: "A create takes a key; a call without one is refused where a key is required, \
                    or creates every time and stores no record.",
        section: Some("2.7"),
        level: Level::Should,
        why: "Without a key a retry cannot be told from a new call, so nothing may pretend to.",
    },
    Promise {
        id: PromiseId::Atomic,
        name: "Effect and record together",
        statement: "The effect and its key's record commit in one transaction, or neither does: \
                    a failure at any step leaves nothing, and the retry creates once.",
        section: None,
        level: Level::Lab,
        why: "An effect without its record is a duplicate waiting for the next retry.",
    },
    Promise {
        id: PromiseId::ErrorFreesKey,
        name: "An error does not burn the key",
        statement: "A request answered with a handled error (a 4xx refusal or a 5xx) leaves no \
                    record, so the corrected or repeated request with the same key proceeds.",
        section: Some("2.7"),
        level: Level::Lab,
        why: "A key burned by an error forces the caller to mint a new one, and then a retry \
              can no longer be recognised.",
    },
    Promise {
        id: PromiseId::Retention,
        name: "Replay while retained",
        statement: "A completed key replays for as long as its record is retained; only after the \
                    published retention may it create again.",
        section: Some("2.3"),
        level: Level::Should,
        why: "A caller plans its retries against the published window; a record pruned early \
              turns a late retry into a duplicate.",
    },
    Promise {
        id: PromiseId::Durable,
        name: "An acknowledged create survives",
        statement: "An acknowledged create, and a caller's saved key, survive a crash or restart \
                    of the service or of the caller.",
        section: None,
        level: Level::Lab,
        why: "A retry after a restart is the common case, and it must still find the record.",
    },
    Promise {
        id: PromiseId::KeepKey,
        name: "A retry keeps its key",
        statement: "A caller that does not know the outcome retries with the same key and the \
                    same payload; it never mints a new key for the same intention.",
        section: Some("2.2"),
        level: Level::Lab,
        why: "The service can only replay what it can recognise: a new key is a new ticket.",
    },
    Promise {
        id: PromiseId::HonestVerdict,
        name: "An unknown outcome stays unknown",
        statement: "An outcome the caller could not learn is resolved by a retry with the same \
                    key or handed to a person, never reported as \"nothing took effect\".",
        section: None,
        level: Level::Lab,
        why: "A false \"nothing happened\" is how a committed ticket gets created twice.",
    },
];

/// The promise with this id.
pub fn promise(id: PromiseId) -> &'static Promise {
    // PROMISES lists every id in the enum's order (a test holds this).
    &PROMISES[id as usize]
}

/// Every checker of the contract, in the order the matrix shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Checker {
    /// The seven scenarios (`lab`, [`suite`](crate::suite)).
    Suite,
    /// The Rust adapter check (`lab check --backend`, [`conformance`](crate::conformance)).
    Conformance,
    /// The black-box HTTP check (`lab check --target`).
    Http,
    /// The black-box MCP check (`lab check --target` with an `[mcp]` section).
    Mcp,
    /// The client grader (`lab mcp --grade-client`).
    Grader,
    /// The audit of recorded traffic (`lab audit`).
    Audit,
    /// The simulator's checker (`lab simulate`).
    Simulator,
    /// The model's properties (`lab model`).
    Model,
}

impl Checker {
    /// Every checker.
    pub const ALL: [Checker; 8] = [
        Checker::Suite,
        Checker::Conformance,
        Checker::Http,
        Checker::Mcp,
        Checker::Grader,
        Checker::Audit,
        Checker::Simulator,
        Checker::Model,
    ];

    /// Its name in the matrix.
    pub fn name(self) -> &'static str {
        match self {
            Checker::Suite => "suite",
            Checker::Conformance => "Rust adapter check",
            Checker::Http => "HTTP check",
            Checker::Mcp => "MCP check",
            Checker::Grader => "client grader",
            Checker::Audit => "audit",
            Checker::Simulator => "simulator",
            Checker::Model => "model",
        }
    }

    /// What it calls the things it checks.
    pub fn unit(self) -> &'static str {
        match self {
            Checker::Suite => "scenario",
            Checker::Conformance | Checker::Http | Checker::Mcp | Checker::Audit => "point",
            Checker::Grader => "verdict",
            Checker::Simulator => "invariant",
            Checker::Model => "property",
        }
    }
}

/// The promise ids `checker`'s point (scenario, verdict, invariant, property) named `point`
/// covers; empty for a point that covers none or that the checker does not have.
pub fn promises_of(checker: Checker, point: &str) -> &'static [PromiseId] {
    coverage(checker)
        .points
        .iter()
        .find(|(name, _)| *name == point)
        .map_or(&[], |(_, ids)| *ids)
}

/// The ids `checker`'s `point` covers, as reports print them beside the point's name:
/// `[replay, lost-reply]`, or `[]`.
pub fn label(checker: Checker, point: &str) -> String {
    bracketed(promises_of(checker, point))
}

/// How `checker` covers the promise `id`: the points that do, or why none can.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    /// These points cover it.
    Checked(Vec<&'static str>),
    /// None does, for this reason.
    NotChecked(&'static str),
    /// Neither: a gap in the tables (a test fails on it).
    Missing,
}

/// How `checker` covers the promise `id`.
pub fn cell(checker: Checker, id: PromiseId) -> Cell {
    let table = coverage(checker);
    let points: Vec<&'static str> = table
        .points
        .iter()
        .filter(|(_, ids)| ids.contains(&id))
        .map(|(name, _)| *name)
        .collect();
    if !points.is_empty() {
        return Cell::Checked(points);
    }
    match table.not_checked.iter().find(|(promise, _)| *promise == id) {
        Some((_, reason)) => Cell::NotChecked(reason),
        None => Cell::Missing,
    }
}
