//! The black-box check's points as data: each point's id, its one-line title, the promises it
//! covers and the fronts it runs on. `lab check --target` reads its points' names and titles from
//! here, the HTTP and MCP coverage tables are derived from here, and `--only` / `--skip` resolve
//! ids against it, so a point has one name on every front and in every report.
//!
//! A point's id never equals a promise's id: `--only replay` means the promise, and the point
//! that retries a completed key is `retry-replays`. The old names (before the registry) are kept
//! in [`RENAMED`], so a user's script or saved report can be read against the new ones.

use super::PromiseId as P;
use super::PromiseId;

/// A front the black-box check drives: the service it talks to directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Front {
    /// An HTTP service (or a gateway in front of the lab's API).
    Http,
    /// An MCP server (or a wrapper in front of the lab's API).
    Mcp,
}

/// One point of `lab check --target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// The short stable id reports print and `--only` / `--skip` take (`reply-dropped`).
    pub id: &'static str,
    /// What it checks, in one line.
    pub title: &'static str,
    /// The promises of the contract it covers.
    pub promises: &'static [PromiseId],
    /// Whether it runs on an HTTP front.
    pub http: bool,
    /// Whether it runs on an MCP front.
    pub mcp: bool,
    /// Whether it runs only when the target file has an `[upstream]` table (the hop points).
    pub hop: bool,
}

impl Point {
    /// Whether the point runs on `front`.
    pub const fn runs_on(&self, front: Front) -> bool {
        match front {
            Front::Http => self.http,
            Front::Mcp => self.mcp,
        }
    }
}

const fn both(id: &'static str, title: &'static str, promises: &'static [PromiseId]) -> Point {
    Point {
        id,
        title,
        promises,
        http: true,
        mcp: true,
        hop: false,
    }
}

const fn http(id: &'static str, title: &'static str, promises: &'static [PromiseId]) -> Point {
    Point {
        http: true,
        mcp: false,
        ..both(id, title, promises)
    }
}

const fn mcp(id: &'static str, title: &'static str, promises: &'static [PromiseId]) -> Point {
    Point {
        http: false,
        mcp: true,
        ..both(id, title, promises)
    }
}

const fn hop(id: &'static str, title: &'static str, promises: &'static [PromiseId]) -> Point {
    Point {
        hop: true,
        ..both(id, title, promises)
    }
}

/// The create tool takes a key at all (MCP; over HTTP the key is a header every point sends).
pub const KEY_REQUIRED: Point = mcp(
    "key-required",
    "The create tool takes an operation key, so a retry can be told from a new call",
    &[P::NoKey],
);
/// The tool's annotations, as hints (MCP).
pub const ANNOTATIONS: Point = mcp(
    "annotations",
    "The tool's annotations, reported as the hints they are (never a pass on their strength)",
    &[],
);
/// A retry of a completed key.
pub const RETRY_REPLAYS: Point = both(
    "retry-replays",
    "A retry with the same key and payload gets the first result and makes no new effect",
    &[P::Replay],
);
/// A reply read, thrown away, and recovered by a retry.
pub const REPLY_DROPPED: Point = both(
    "reply-dropped",
    "A reply lost on its way back (read, then thrown away) is recovered by a retry with its key",
    &[P::LostReply, P::Replay],
);
/// A connection closed before the reply (HTTP).
pub const HANG_UP: Point = http(
    "hang-up",
    "A client that hangs up before the reply, then retries, gets one effect",
    &[P::LostReply, P::OneEffect],
);
/// A call cancelled after its work finished (MCP).
pub const CANCELLED: Point = mcp(
    "cancelled",
    "A call cancelled (notifications/cancelled) after its work finished, then retried",
    &[P::LostReply],
);
/// A new process or session before the retry (MCP).
pub const RECONNECT: Point = mcp(
    "reconnect",
    "A reconnect (a new process over stdio, a new session over HTTP) before the retry",
    &[P::LostReply],
);
/// The same key with another payload.
pub const CHANGED_PAYLOAD: Point = both(
    "changed-payload",
    "The same key with another payload is refused and the first effect stands",
    &[P::Conflict],
);
/// The same payload reordered and respaced (HTTP).
pub const REORDERED_FIELDS: Point = http(
    "reordered-fields",
    "The same payload with its fields reordered and respaced is the same request",
    &[P::Canonical],
);
/// The same payload under a new key.
pub const NEW_KEY_SAME_PAYLOAD: Point = both(
    "new-key-same-payload",
    "The same payload under a new key is a new effect",
    &[P::NewKey],
);
/// Calls racing on a fresh key.
pub const CONCURRENT_FRESH_KEY: Point = both(
    "concurrent-fresh-key",
    "Calls in flight together on a fresh key converge on one effect",
    &[P::OneEffect],
);
/// Calls racing on a completed key (HTTP).
pub const CONCURRENT_COMPLETED_KEY: Point = http(
    "concurrent-completed-key",
    "Callers racing on a completed key all get its replay",
    &[P::OneEffect, P::Replay],
);
/// Calls in flight together for different intentions (MCP).
pub const CONCURRENT_DISTINCT: Point = mcp(
    "concurrent-distinct",
    "Calls in flight together for different intentions each keep their effect",
    &[P::NewKey],
);
/// Another caller's same key.
pub const OTHER_CALLER: Point = both(
    "other-caller",
    "Another caller's same key is that caller's own, never the first caller's",
    &[P::Scope],
);
/// The same key on another endpoint (HTTP).
pub const OTHER_ENDPOINT: Point = http(
    "other-endpoint",
    "The same key on another endpoint is another operation",
    &[P::Scope],
);
/// A missing, malformed or otherwise written key.
pub const KEY_FORMS: Point = both(
    "key-forms",
    "A missing key, a malformed key, and a key written in another form or type",
    &[P::KeyIntact, P::NoKey],
);
/// A refused request, then the corrected one under the same key.
pub const ERROR_THEN_CORRECTED: Point = both(
    "error-then-corrected",
    "A refused request (4xx) creates nothing, and its key then serves the corrected request",
    &[P::ErrorFreesKey],
);
/// A handled server error, then the retry (HTTP).
pub const SERVER_ERROR_THEN_CORRECTED: Point = http(
    "server-error-then-corrected",
    "A handled server error (5xx) does not burn the key for the retry",
    &[P::ErrorFreesKey],
);
/// A failure between the effect and its record (HTTP, through the file's fault hook).
pub const FAULT_BETWEEN_EFFECT_AND_RECORD: Point = http(
    "fault-between-effect-and-record",
    "A failure after the effect and before its record leaves one effect",
    &[P::Atomic],
);
/// A crash at a chosen step: always reported not covered, it names the gap (HTTP).
pub const CRASH: Point = http(
    "crash",
    "A crash of the service between its effect and its answer",
    &[],
);
/// The agent's key at the API.
pub const HOP_KEY: Point = hop(
    "hop-key",
    "The agent's key reaches the API, where the API reads it",
    &[P::KeyIntact, P::NoKey],
);
/// The agent's body at the API.
pub const HOP_PAYLOAD: Point = hop(
    "hop-payload",
    "The body reaches the API as the agent sent it, and a retry sends it again",
    &[P::KeepKey],
);
/// A retry after a lost result, through the hop.
pub const HOP_RETRY: Point = hop(
    "hop-retry",
    "A retry after a lost result carries the same key to the API, which replays it",
    &[P::KeepKey, P::LostReply],
);
/// The API's reply to the wrapper lost.
pub const HOP_API_LOST: Point = hop(
    "hop-api-lost",
    "The API commits and its reply to the wrapper is lost: the agent is told the truth, and its \
     retry replays",
    &[P::LostReply, P::HonestVerdict],
);
/// The wrapper restarted, or its session reconnected, before the retry.
pub const HOP_RESTART: Point = hop(
    "hop-restart",
    "The wrapper restarts (or, where the check did not start it, its session reconnects) before \
     the retry: the retry carries the same key",
    &[P::KeepKey],
);
/// A new intention through the hop.
pub const HOP_NEW_INTENTION: Point = hop(
    "hop-new-intention",
    "A new intention's key reaches the API as its own: no key fixed for the session",
    &[P::NewKey],
);
/// Calls racing through the hop.
pub const HOP_CONCURRENT: Point = hop(
    "hop-concurrent",
    "Calls in flight together with one key reach the API with that key and make one effect",
    &[P::KeepKey, P::OneEffect],
);
/// The API's retryable answers, through the hop.
pub const HOP_UPSTREAM_RETRY: Point = hop(
    "hop-upstream-retry",
    "The API answers 503 or 429, or late past the wrapper's timeout: the wrapper's own resends \
     keep the key, or the agent is told",
    &[P::KeepKey],
);
/// The API's refusals, through the hop.
pub const HOP_ERRORS: Point = hop(
    "hop-errors",
    "The API's 422 (key reused with another payload) and 409 (in progress) reach the agent as \
     errors",
    &[P::Conflict, P::HonestVerdict],
);

/// Every point, in the order a run reports them (a front runs those that run on it).
pub const ALL: &[&Point] = &[
    &KEY_REQUIRED,
    &ANNOTATIONS,
    &RETRY_REPLAYS,
    &REPLY_DROPPED,
    &HANG_UP,
    &CANCELLED,
    &RECONNECT,
    &CHANGED_PAYLOAD,
    &REORDERED_FIELDS,
    &NEW_KEY_SAME_PAYLOAD,
    &CONCURRENT_FRESH_KEY,
    &CONCURRENT_COMPLETED_KEY,
    &CONCURRENT_DISTINCT,
    &OTHER_CALLER,
    &OTHER_ENDPOINT,
    &KEY_FORMS,
    &ERROR_THEN_CORRECTED,
    &SERVER_ERROR_THEN_CORRECTED,
    &FAULT_BETWEEN_EFFECT_AND_RECORD,
    &CRASH,
    &HOP_KEY,
    &HOP_PAYLOAD,
    &HOP_RETRY,
    &HOP_API_LOST,
    &HOP_RESTART,
    &HOP_NEW_INTENTION,
    &HOP_CONCURRENT,
    &HOP_UPSTREAM_RETRY,
    &HOP_ERRORS,
];

/// The points that run on `front`, in report order.
pub fn on(front: Front) -> impl Iterator<Item = &'static Point> {
    ALL.iter().copied().filter(move |p| p.runs_on(front))
}

/// The point with this id.
pub fn point(id: &str) -> Option<&'static Point> {
    ALL.iter().copied().find(|p| p.id == id)
}

/// Point names before the registry, and the name each has now: `(old, front, new)`. Only names
/// that changed are listed; the book's table of renames is drawn from it.
pub const RENAMED: &[(&str, Front, &str)] = &[
    ("replay", Front::Http, "retry-replays"),
    ("replay", Front::Mcp, "retry-replays"),
    ("lost-reply", Front::Http, "reply-dropped"),
    ("lost-result", Front::Mcp, "reply-dropped"),
    ("new-key", Front::Http, "new-key-same-payload"),
    ("new-key", Front::Mcp, "new-key-same-payload"),
    ("concurrent", Front::Mcp, "concurrent-fresh-key"),
    ("scope", Front::Http, "other-caller"),
    ("scope", Front::Mcp, "other-caller"),
    ("key", Front::Mcp, "key-required"),
];

/// What `--only` or `--skip` named, resolved: a point's id, or a promise's id (every point that
/// covers it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selector {
    /// One point.
    Point(&'static Point),
    /// Every point that covers this promise.
    Promise(PromiseId),
}

impl Selector {
    /// Reads a point id or a promise id. An old point name is refused with its new one, and any
    /// other text with the ids there are.
    ///
    /// # Errors
    /// The problem, in a sentence that names `text`.
    pub fn parse(text: &str) -> Result<Selector, String> {
        if let Some(point) = point(text) {
            return Ok(Selector::Point(point));
        }
        if let Some(id) = PromiseId::parse(text) {
            return Ok(Selector::Promise(id));
        }
        if let Some((_, _, new)) = RENAMED.iter().find(|(old, _, _)| *old == text) {
            return Err(format!(
                "{text:?} is the old name of the point now called {new:?}"
            ));
        }
        let points: Vec<&str> = ALL.iter().map(|p| p.id).collect();
        let promises: Vec<&str> = PromiseId::ALL.iter().map(|p| p.as_str()).collect();
        Err(format!(
            "{text:?} is neither a point nor a promise; points: {}; promises: {}",
            points.join(", "),
            promises.join(", ")
        ))
    }

    /// Whether `point` is one this selector names.
    pub fn names(self, point: &Point) -> bool {
        match self {
            Selector::Point(named) => named.id == point.id,
            Selector::Promise(id) => point.promises.contains(&id),
        }
    }
}

/// Which points a run makes: all, or those `--only` names, less those `--skip` names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// `--only`: when not empty, a point runs only if one of these names it.
    pub only: Vec<Selector>,
    /// `--skip`: a point that one of these names does not run.
    pub skip: Vec<Selector>,
}

impl Selection {
    /// Whether `point` runs.
    pub fn runs(&self, point: &Point) -> bool {
        (self.only.is_empty() || self.only.iter().any(|s| s.names(point)))
            && !self.skip.iter().any(|s| s.names(point))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn ids_are_unique_kebab_case_and_never_a_promises_id() {
        let mut seen = BTreeSet::new();
        for point in ALL {
            assert!(seen.insert(point.id), "{} twice", point.id);
            assert!(
                point.id.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{}",
                point.id
            );
            assert_eq!(
                PromiseId::parse(point.id),
                None,
                "{} is a promise's id",
                point.id
            );
            assert!(point.http || point.mcp, "{} runs nowhere", point.id);
            assert!(
                !point.title.ends_with('.'),
                "{}: a title, not a sentence",
                point.id
            );
            assert_eq!(point.hop, point.id.starts_with("hop-"), "{}", point.id);
        }
    }

    #[test]
    fn every_old_name_leads_to_a_point_of_its_front_and_is_no_current_id() {
        for (old, front, new) in RENAMED {
            let now = point(new).unwrap_or_else(|| panic!("{new} is no point"));
            assert!(now.runs_on(*front), "{new} does not run on {front:?}");
            assert!(point(old).is_none(), "{old} is still a point's id");
            // An old name that is a promise's id now selects the promise's points, the renamed
            // one among them; any other old name is refused with the new one.
            match PromiseId::parse(old) {
                Some(id) => assert!(now.promises.contains(&id), "{new} does not cover {old}"),
                None => {
                    let err = Selector::parse(old).unwrap_err();
                    assert!(err.contains(new), "{err}");
                }
            }
        }
    }

    #[test]
    fn a_selection_takes_points_and_promises_and_refuses_anything_else() {
        let only = Selection {
            only: vec![Selector::parse("lost-reply").unwrap()],
            skip: vec![Selector::parse("hang-up").unwrap()],
        };
        let run: Vec<&str> = on(Front::Http)
            .filter(|p| only.runs(p))
            .map(|p| p.id)
            .collect();
        assert_eq!(run, ["reply-dropped", "hop-retry", "hop-api-lost"]);
        assert!(Selection::default().runs(&CRASH));
        let err = Selector::parse("repaly").unwrap_err();
        assert!(
            err.contains("\"repaly\"") && err.contains("retry-replays"),
            "{err}"
        );
    }
}
