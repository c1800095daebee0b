//! Each checker's coverage table: for each of its points (by the name the checker itself gives
//! it), the promises it covers; for each promise it covers with no point, why it cannot.
//!
//! The tests below read every checker's point names from the checker's own code, so a point
//! renamed, added or removed there fails here until its table says what it covers.

use super::Checker;

/// One checker's table.
#[derive(Clone, Copy, Debug)]
pub struct Coverage {
    /// Which checker.
    pub checker: Checker,
    /// Each of its points, by the checker's own name, and the promise ids it covers.
    pub points: &'static [(&'static str, &'static [&'static str])],
    /// Each promise none of its points covers, and why it cannot.
    pub not_checked: &'static [(&'static str, &'static str)],
}

/// The table of `checker`.
pub fn coverage(checker: Checker) -> &'static Coverage {
    match checker {
        Checker::Suite => &SUITE,
        Checker::Conformance => &CONFORMANCE,
        Checker::Http => &HTTP,
        Checker::Mcp => &MCP,
        Checker::Grader => &GRADER,
        Checker::Simulator => &SIMULATOR,
        Checker::Model => &MODEL,
    }
}

/// A caller-side promise, for a checker that is itself the caller.
const CHECK_IS_THE_CALLER: &str = "the check is the caller here and always keeps its key; it \
judges the service, not the service's callers (the grader, the simulator and the model do)";

/// Retention, for a checker that cannot make a service forget a record.
const CANNOT_WAIT_OUT_RETENTION: &str = "a black box cannot make the service forget a record, and \
the published retention is too long to wait out in a run";

const SUITE: Coverage = Coverage {
    checker: Checker::Suite,
    points: &[
        ("naive_retry", &["no-key"]),
        ("stable_key_retry", &["lost-reply", "replay"]),
        ("changed_payload", &["conflict"]),
        ("failure_before_commit", &["atomic"]),
        ("concurrent_same_key", &["one-effect"]),
        ("new_key_same_payload", &["new-key"]),
        ("deleted_replay_record", &["retention"]),
    ],
    not_checked: &[
        (
            "canonical",
            "the scenarios send one payload in one form; the conformance point compares forms",
        ),
        (
            "scope",
            "every scenario acts for one caller and one operation",
        ),
        (
            "key-intact",
            "the scenarios call the trait with an already valid key: no wire to alter it",
        ),
        (
            "error-frees-key",
            "no scenario provokes a handled error before a corrected retry",
        ),
        (
            "durable",
            "nothing in a scenario crashes or restarts; lab/tests/it/crash.rs kills the runner",
        ),
        (
            "keep-key",
            "the scenarios are the caller and script their keys",
        ),
        (
            "honest-verdict",
            "the scenarios report what the store holds, not a caller's verdict",
        ),
    ],
};

const CONFORMANCE: Coverage = Coverage {
    checker: Checker::Conformance,
    points: &[
        ("scenario_naive_retry", &["no-key"]),
        ("scenario_stable_key_retry", &["lost-reply", "replay"]),
        ("scenario_changed_payload", &["conflict"]),
        ("scenario_failure_before_commit", &["atomic"]),
        ("scenario_concurrent_same_key", &["one-effect"]),
        ("scenario_new_key_same_payload", &["new-key"]),
        ("scenario_deleted_replay_record", &["retention"]),
        (
            "a_lost_reply_leaves_the_ticket_committed",
            &["lost-reply", "replay"],
        ),
        (
            "a_lost_reply_on_a_replay_changes_nothing",
            &["lost-reply", "replay"],
        ),
        ("keys_are_scoped_by_caller_and_operation", &["scope"]),
        (
            "payloads_are_compared_in_canonical_form",
            &["canonical", "conflict"],
        ),
        ("each_replay_returns_its_own_ticket", &["replay"]),
        ("calls_without_a_key_are_never_merged", &["no-key"]),
        (
            "a_failure_at_any_step_leaves_nothing",
            &["atomic", "error-frees-key"],
        ),
        (
            "a_forgotten_record_lets_the_key_create_again",
            &["retention"],
        ),
        (
            "callers_released_together_converge_on_fresh_keys",
            &["one-effect"],
        ),
        (
            "callers_released_together_replay_completed_keys",
            &["one-effect", "replay"],
        ),
    ],
    not_checked: &[
        (
            "key-intact",
            "the trait takes an OperationKey that is already valid; an adapter's own \
          wire is checked from outside by the HTTP or MCP check",
        ),
        (
            "durable",
            "the check cannot crash the tool's process or database (see `lab check`'s \
          list of what a pass does not cover)",
        ),
        ("keep-key", CHECK_IS_THE_CALLER),
        ("honest-verdict", CHECK_IS_THE_CALLER),
    ],
};

const HTTP: Coverage = Coverage {
    checker: Checker::Http,
    points: &[
        ("replay", &["replay"]),
        ("lost-reply", &["lost-reply", "replay"]),
        ("hang-up", &["lost-reply", "one-effect"]),
        ("changed-payload", &["conflict"]),
        ("reordered-fields", &["canonical"]),
        ("new-key", &["new-key"]),
        ("concurrent-fresh-key", &["one-effect"]),
        ("concurrent-completed-key", &["one-effect", "replay"]),
        ("scope", &["scope"]),
        ("other-endpoint", &["scope"]),
        ("key-forms", &["key-intact", "no-key"]),
        ("error-then-corrected", &["error-frees-key"]),
        ("server-error-then-corrected", &["error-frees-key"]),
        ("fault-between-effect-and-record", &["atomic"]),
        // Always reported not covered: it names the gap, it checks nothing.
        ("crash", &[]),
        // The hop points, with `[upstream]`: the service is a gateway, the API's caller, so the
        // caller's promises are checked on it.
        ("hop-key", &["key-intact", "no-key"]),
        ("hop-payload", &["keep-key"]),
        ("hop-retry", &["keep-key", "lost-reply"]),
        ("hop-api-lost", &["lost-reply", "honest-verdict"]),
        ("hop-restart", &["keep-key"]),
        ("hop-new-intention", &["new-key"]),
        ("hop-concurrent", &["keep-key", "one-effect"]),
        ("hop-upstream-retry", &["keep-key"]),
        ("hop-errors", &["conflict", "honest-verdict"]),
    ],
    not_checked: &[
        ("retention", CANNOT_WAIT_OUT_RETENTION),
        (
            "durable",
            "a black box cannot crash the service at a chosen step (its `crash` point \
          reports this as not covered)",
        ),
    ],
};

const MCP: Coverage = Coverage {
    checker: Checker::Mcp,
    points: &[
        ("key", &["no-key"]),
        // Reported as the hints they are, never a pass or a failure.
        ("annotations", &[]),
        ("replay", &["replay"]),
        ("lost-result", &["lost-reply", "replay"]),
        ("cancelled", &["lost-reply"]),
        ("reconnect", &["lost-reply"]),
        ("changed-payload", &["conflict"]),
        ("new-key", &["new-key"]),
        ("concurrent", &["one-effect"]),
        ("concurrent-distinct", &["new-key"]),
        ("scope", &["scope"]),
        ("key-forms", &["key-intact", "no-key"]),
        ("error-then-corrected", &["error-frees-key"]),
        // The hop points, with `[upstream]`: the wrapper is the API's caller, so the caller's
        // promises are checked on it.
        ("hop-key", &["key-intact", "no-key"]),
        ("hop-payload", &["keep-key"]),
        ("hop-retry", &["keep-key", "lost-reply"]),
        ("hop-api-lost", &["lost-reply", "honest-verdict"]),
        ("hop-restart", &["keep-key"]),
        ("hop-new-intention", &["new-key"]),
        ("hop-concurrent", &["keep-key", "one-effect"]),
        ("hop-upstream-retry", &["keep-key"]),
        ("hop-errors", &["conflict", "honest-verdict"]),
    ],
    not_checked: &[
        (
            "canonical",
            "not yet: no MCP point sends the arguments reordered (a gap, not a limit: \
          the HTTP check's reordered-fields point shows how)",
        ),
        (
            "atomic",
            "the MCP target file has no fault hook between the effect and its record, so \
          no point can fail the service there",
        ),
        ("retention", CANNOT_WAIT_OUT_RETENTION),
        (
            "durable",
            "a black box cannot crash the server at a chosen step; the reconnect point \
          restarts the session, not the store",
        ),
    ],
};

/// The grader judges the client, against `lab mcp`'s own service.
const GRADER_SERVES_THE_LAB: &str = "the grader serves the lab's own service and judges the \
client's calls; the service's promises are checked by the suite and the checks";

const GRADER: Coverage = Coverage {
    checker: Checker::Grader,
    points: &[
        ("PASS", &["keep-key", "lost-reply"]),
        ("FAIL", &["keep-key", "one-effect"]),
        ("UNRESOLVED", &["honest-verdict"]),
        // No reply of the intention was lost or late: nothing was tested.
        ("NOT EXERCISED", &[]),
    ],
    not_checked: &[
        ("replay", GRADER_SERVES_THE_LAB),
        ("conflict", GRADER_SERVES_THE_LAB),
        ("canonical", GRADER_SERVES_THE_LAB),
        (
            "new-key",
            "a call with a new key and the same fields joins the earlier intention; the \
          grader cannot tell a wanted second ticket from a re-plan (it says so in every report)",
        ),
        ("scope", GRADER_SERVES_THE_LAB),
        ("key-intact", GRADER_SERVES_THE_LAB),
        ("no-key", GRADER_SERVES_THE_LAB),
        ("atomic", GRADER_SERVES_THE_LAB),
        ("error-frees-key", GRADER_SERVES_THE_LAB),
        ("retention", GRADER_SERVES_THE_LAB),
        (
            "durable",
            "the client's own state is out of sight: whether it saved the key durably \
          before sending",
        ),
    ],
};

const SIMULATOR: Coverage = Coverage {
    checker: Checker::Simulator,
    points: &[
        (
            "duplicate ticket",
            &["one-effect", "retention", "durable", "keep-key"],
        ),
        ("divergent success", &["replay", "lost-reply"]),
        ("visible across scopes", &["scope"]),
        ("conflict changed the original", &["conflict"]),
        ("same payload rejected as a conflict", &["canonical"]),
        ("changed payload accepted", &["conflict"]),
        ("ticket and record not paired", &["atomic"]),
        ("unknown outcome left unresolved", &["honest-verdict"]),
        ("ticket nobody asked for", &["one-effect"]),
    ],
    not_checked: &[
        (
            "new-key",
            "every generated intention has its own payload, so merging by content \
          cannot show",
        ),
        (
            "key-intact",
            "the simulator calls the trait with keys that are already valid",
        ),
        ("no-key", "every simulated intention carries a key"),
        (
            "error-frees-key",
            "generated payloads are all valid; faults fail the create, and the \
          retry after one is judged by the duplicate and unresolved invariants",
        ),
    ],
};

const MODEL: Coverage = Coverage {
    checker: Checker::Model,
    points: &[
        (
            "at most one effect per intention",
            &["one-effect", "retention", "durable", "keep-key"],
        ),
        (
            "a replay names the original effect",
            &["replay", "lost-reply", "scope"],
        ),
        ("a rejected payload changes nothing", &["conflict"]),
        (
            "a retry with its own payload is never rejected",
            &["canonical"],
        ),
        (
            "an unknown outcome is never reported as nothing happened",
            &["honest-verdict"],
        ),
        (
            "every intention ends with a final answer",
            &["honest-verdict"],
        ),
    ],
    not_checked: &[
        (
            "new-key",
            "no two intents of the model share a payload under different keys",
        ),
        (
            "key-intact",
            "keys are abstract values in the model: there is no wire to alter them",
        ),
        ("no-key", "every runner in the model sends a key"),
        (
            "atomic",
            "the service's create is one step of the model: assumed, not checked (the \
          check-then-write variant shows what breaks when it is two)",
        ),
        (
            "error-frees-key",
            "the model has no validation or server errors",
        ),
    ],
};

#[cfg(test)]
mod tests;
