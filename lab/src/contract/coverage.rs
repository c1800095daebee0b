//! Each checker's coverage table: for each of its points (by the name the checker itself gives
//! it), the promises it covers; for each promise it covers with no point, why it cannot.
//!
//! The HTTP and MCP checks' tables are derived from the registry of their points
//! ([`super::points`]); the others are written here, and the tests below compare each with the
//! names the checker's own code gives (its scenarios, verdicts, invariants, properties).

use super::Checker;
use super::PromiseId;
use super::PromiseId as P;
use super::points::Front;

/// One checker's table.
#[derive(Clone, Debug)]
pub struct Coverage {
    /// Which checker.
    pub checker: Checker,
    /// Each of its points, by the checker's own name, and the promise ids it covers.
    pub points: Vec<(&'static str, &'static [PromiseId])>,
    /// Each promise none of its points covers, and why it cannot.
    pub not_checked: &'static [(PromiseId, &'static str)],
}

/// A checker's table as written here: the checkers whose points are not in the registry.
struct Table {
    checker: Checker,
    points: &'static [(&'static str, &'static [PromiseId])],
    not_checked: &'static [(PromiseId, &'static str)],
}

/// The table of `checker`. The HTTP and MCP checks' points come from the registry
/// ([`super::points`]), each with the promises it lists there.
pub fn coverage(checker: Checker) -> Coverage {
    let table = match checker {
        Checker::Http => return from_registry(checker, Front::Http, HTTP_NOT_CHECKED),
        Checker::Mcp => return from_registry(checker, Front::Mcp, MCP_NOT_CHECKED),
        Checker::Suite => &SUITE,
        Checker::Conformance => &CONFORMANCE,
        Checker::Grader => &GRADER,
        Checker::Audit => &AUDIT,
        Checker::Simulator => &SIMULATOR,
        Checker::Model => &MODEL,
    };
    Coverage {
        checker: table.checker,
        points: table.points.to_vec(),
        not_checked: table.not_checked,
    }
}

fn from_registry(
    checker: Checker,
    front: Front,
    not_checked: &'static [(PromiseId, &'static str)],
) -> Coverage {
    Coverage {
        checker,
        points: super::points::on(front)
            .map(|point| (point.id, point.promises))
            .collect(),
        not_checked,
    }
}

/// A caller-side promise, for a checker that is itself the caller.
const CHECK_IS_THE_CALLER: &str = "the check is the caller here and always keeps its key; it \
judges the service, not the service's callers (the grader, the simulator and the model do)";

/// Retention, for a checker that cannot make a service forget a record.
const CANNOT_WAIT_OUT_RETENTION: &str = "a black box cannot make the service forget a record, and \
the published retention is too long to wait out in a run";

const SUITE: Table = Table {
    checker: Checker::Suite,
    points: &[
        ("naive_retry", &[P::NoKey]),
        ("stable_key_retry", &[P::LostReply, P::Replay]),
        ("changed_payload", &[P::Conflict]),
        ("failure_before_commit", &[P::Atomic]),
        ("concurrent_same_key", &[P::OneEffect]),
        ("new_key_same_payload", &[P::NewKey]),
        ("deleted_replay_record", &[P::Retention]),
    ],
    not_checked: &[
        (
            P::Canonical,
            "the scenarios send one payload in one form; the conformance point compares forms",
        ),
        (
            P::Scope,
            "every scenario acts for one caller and one operation",
        ),
        (
            P::KeyIntact,
            "the scenarios call the trait with an already valid key: no wire to alter it",
        ),
        (
            P::ErrorFreesKey,
            "no scenario provokes a handled error before a corrected retry",
        ),
        (
            P::Durable,
            "nothing in a scenario crashes or restarts; lab/tests/it/crash.rs kills the runner",
        ),
        (
            P::KeepKey,
            "the scenarios are the caller and script their keys",
        ),
        (
            P::HonestVerdict,
            "the scenarios report what the store holds, not a caller's verdict",
        ),
    ],
};

const CONFORMANCE: Table = Table {
    checker: Checker::Conformance,
    points: &[
        ("scenario_naive_retry", &[P::NoKey]),
        ("scenario_stable_key_retry", &[P::LostReply, P::Replay]),
        ("scenario_changed_payload", &[P::Conflict]),
        ("scenario_failure_before_commit", &[P::Atomic]),
        ("scenario_concurrent_same_key", &[P::OneEffect]),
        ("scenario_new_key_same_payload", &[P::NewKey]),
        ("scenario_deleted_replay_record", &[P::Retention]),
        (
            "a_lost_reply_leaves_the_ticket_committed",
            &[P::LostReply, P::Replay],
        ),
        (
            "a_lost_reply_on_a_replay_changes_nothing",
            &[P::LostReply, P::Replay],
        ),
        ("keys_are_scoped_by_caller_and_operation", &[P::Scope]),
        (
            "payloads_are_compared_in_canonical_form",
            &[P::Canonical, P::Conflict],
        ),
        ("each_replay_returns_its_own_ticket", &[P::Replay]),
        ("calls_without_a_key_are_never_merged", &[P::NoKey]),
        (
            "a_failure_at_any_step_leaves_nothing",
            &[P::Atomic, P::ErrorFreesKey],
        ),
        (
            "a_forgotten_record_lets_the_key_create_again",
            &[P::Retention],
        ),
        (
            "callers_released_together_converge_on_fresh_keys",
            &[P::OneEffect],
        ),
        (
            "callers_released_together_replay_completed_keys",
            &[P::OneEffect, P::Replay],
        ),
    ],
    not_checked: &[
        (
            P::KeyIntact,
            "the trait takes an OperationKey that is already valid; an adapter's own \
          wire is checked from outside by the HTTP or MCP check",
        ),
        (
            P::Durable,
            "the check cannot crash the tool's process or database (see `lab check`'s \
          list of what a pass does not cover)",
        ),
        (P::KeepKey, CHECK_IS_THE_CALLER),
        (P::HonestVerdict, CHECK_IS_THE_CALLER),
    ],
};

/// What the HTTP check cannot cover; its points are in the registry.
const HTTP_NOT_CHECKED: &[(PromiseId, &str)] = &[
    (P::Retention, CANNOT_WAIT_OUT_RETENTION),
    (
        P::Durable,
        "a black box cannot crash the service at a chosen step (its `crash` point \
          reports this as not covered)",
    ),
];

/// What the MCP check cannot cover; its points are in the registry.
const MCP_NOT_CHECKED: &[(PromiseId, &str)] = &[
    (
        P::Canonical,
        "not yet: no MCP point sends the arguments reordered (a gap, not a limit: \
          the HTTP check's reordered-fields point shows how)",
    ),
    (
        P::Atomic,
        "the MCP target file has no fault hook between the effect and its record, so \
          no point can fail the service there",
    ),
    (P::Retention, CANNOT_WAIT_OUT_RETENTION),
    (
        P::Durable,
        "a black box cannot crash the server at a chosen step; the reconnect point \
          restarts the session, not the store",
    ),
];

/// The grader judges the client, against `lab mcp`'s own service.
const GRADER_SERVES_THE_LAB: &str = "the grader serves the lab's own service and judges the \
client's calls; the service's promises are checked by the suite and the checks";

/// A promise of the service that traffic does not show.
const TRAFFIC_CANNOT_SHOW: &str = "recorded traffic does not show it: it happens inside the \
service (the check and the suite prove it)";

/// The audit of recorded traffic (`lab audit`): its points are `audit::judge::POINTS`, whose
/// test holds them to this table.
const AUDIT: Table = Table {
    checker: Checker::Audit,
    points: &[
        ("retry-without-key", &[P::KeepKey, P::LostReply]),
        ("new-key-after-lost-reply", &[P::KeepKey, P::LostReply]),
        ("changed-payload", &[P::Conflict, P::Canonical]),
        ("one-key-one-effect", &[P::OneEffect, P::Replay]),
        ("unresolved-intention", &[P::HonestVerdict]),
    ],
    not_checked: &[
        (
            P::NewKey,
            "a new key after a reply that arrived is a new intention, and the audit does not \
          judge it: a second ticket with the same fields may be wanted",
        ),
        (
            P::Scope,
            "a recording's callers are who the file's credentials say; the audit never meets \
          one caller's key under another's, so it keeps them apart rather than judge a leak",
        ),
        (
            P::KeyIntact,
            "the recorder sees the key as sent, not as the service read it",
        ),
        (
            P::NoKey,
            "two requests without a key answered with one effect look like a replay the \
          service was not asked for, or a cache; the audit does not tell them apart",
        ),
        (P::Atomic, TRAFFIC_CANNOT_SHOW),
        (
            P::ErrorFreesKey,
            "a refused request's key sent again is judged as one key's attempts: its effect, \
          not whether the refusal freed the key",
        ),
        (P::Retention, TRAFFIC_CANNOT_SHOW),
        (P::Durable, TRAFFIC_CANNOT_SHOW),
    ],
};

const GRADER: Table = Table {
    checker: Checker::Grader,
    points: &[
        ("PASS", &[P::KeepKey, P::LostReply]),
        ("FAIL", &[P::KeepKey, P::OneEffect]),
        ("UNRESOLVED", &[P::HonestVerdict]),
        // No reply of the intention was lost or late: nothing was tested.
        ("NOT EXERCISED", &[]),
    ],
    not_checked: &[
        (P::Replay, GRADER_SERVES_THE_LAB),
        (P::Conflict, GRADER_SERVES_THE_LAB),
        (P::Canonical, GRADER_SERVES_THE_LAB),
        (
            P::NewKey,
            "a call with a new key and the same fields joins the earlier intention; the \
          grader cannot tell a wanted second ticket from a re-plan (it says so in every report)",
        ),
        (P::Scope, GRADER_SERVES_THE_LAB),
        (P::KeyIntact, GRADER_SERVES_THE_LAB),
        (P::NoKey, GRADER_SERVES_THE_LAB),
        (P::Atomic, GRADER_SERVES_THE_LAB),
        (P::ErrorFreesKey, GRADER_SERVES_THE_LAB),
        (P::Retention, GRADER_SERVES_THE_LAB),
        (
            P::Durable,
            "the client's own state is out of sight: whether it saved the key durably \
          before sending",
        ),
    ],
};

const SIMULATOR: Table = Table {
    checker: Checker::Simulator,
    points: &[
        (
            "duplicate ticket",
            &[P::OneEffect, P::Retention, P::Durable, P::KeepKey],
        ),
        ("divergent success", &[P::Replay, P::LostReply]),
        ("visible across scopes", &[P::Scope]),
        ("conflict changed the original", &[P::Conflict]),
        ("same payload rejected as a conflict", &[P::Canonical]),
        ("changed payload accepted", &[P::Conflict]),
        ("ticket and record not paired", &[P::Atomic]),
        ("unknown outcome left unresolved", &[P::HonestVerdict]),
        ("ticket nobody asked for", &[P::OneEffect]),
    ],
    not_checked: &[
        (
            P::NewKey,
            "every generated intention has its own payload, so merging by content \
          cannot show",
        ),
        (
            P::KeyIntact,
            "the simulator calls the trait with keys that are already valid",
        ),
        (P::NoKey, "every simulated intention carries a key"),
        (
            P::ErrorFreesKey,
            "generated payloads are all valid; faults fail the create, and the \
          retry after one is judged by the duplicate and unresolved invariants",
        ),
    ],
};

const MODEL: Table = Table {
    checker: Checker::Model,
    points: &[
        (
            "at most one effect per intention",
            &[P::OneEffect, P::Retention, P::Durable, P::KeepKey],
        ),
        (
            "a replay names the original effect",
            &[P::Replay, P::LostReply, P::Scope],
        ),
        ("a rejected payload changes nothing", &[P::Conflict]),
        (
            "a retry with its own payload is never rejected",
            &[P::Canonical],
        ),
        (
            "an unknown outcome is never reported as nothing happened",
            &[P::HonestVerdict],
        ),
        (
            "every intention ends with a final answer",
            &[P::HonestVerdict],
        ),
    ],
    not_checked: &[
        (
            P::NewKey,
            "no two intents of the model share a payload under different keys",
        ),
        (
            P::KeyIntact,
            "keys are abstract values in the model: there is no wire to alter them",
        ),
        (P::NoKey, "every runner in the model sends a key"),
        (
            P::Atomic,
            "the service's create is one step of the model: assumed, not checked (the \
          check-then-write variant shows what breaks when it is two)",
        ),
        (
            P::ErrorFreesKey,
            "the model has no validation or server errors",
        ),
    ],
};

#[cfg(test)]
mod tests;
