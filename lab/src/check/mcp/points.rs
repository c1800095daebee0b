//! The MCP check's points: the HTTP check's where they apply to a tool call (a changed payload,
//! concurrent calls, scope, key forms, an error then a corrected call; the replay, a lost reply
//! and a new key are written once for both fronts in `both.rs`), and MCP's own: a cancelled
//! call whose work finished, a reconnect before the retry, and the tool's annotations reported
//! as the hints they are. Each point counts the change in effects, and each fault it injects is
//! proved to have fired before it is judged.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::super::both::{self, Front, count_or_stop, effects, lab26, needs_key, section};
use super::super::content::content_of;
use super::super::points::{Run, count_until_risen, run_selected};
use super::super::probe::same_effect;
use super::super::report::{Calibration, Callers, Checks};
use super::super::report::{Grade, Level, PointReport};
use super::hop::told;
use super::probe::{KeyArg, McpProbe, Seen, ToolCall};
use crate::contract::points as registry;
use crate::contract::points::Selection;

/// The MCP specification's rules the MCP points cite (revision 2025-11-25).
mod rule {
    pub const ANNOTATIONS: &str = "tools: annotations are hints, untrusted";
    pub const CANCELLATION: &str = "cancellation: the work may have finished";
}

fn ids(seen: &[Seen]) -> Vec<usize> {
    seen.iter().map(|s| s.id).collect()
}

fn last(seen: &[Seen]) -> &Seen {
    // send_settled sends at least once.
    &seen[seen.len() - 1]
}

/// Every point, in order; the key-required point first, since without a key nothing else is safe.
pub async fn all(
    probe: &Arc<McpProbe>,
    calibration: &Calibration,
    selection: &Selection,
) -> Vec<PointReport> {
    let runs: Vec<Run<'_>> = vec![
        (&registry::KEY_REQUIRED, Box::pin(async { key(probe) })),
        (
            &registry::ANNOTATIONS,
            Box::pin(async { annotations(probe) }),
        ),
        (
            &registry::RETRY_REPLAYS,
            Box::pin(both::replay(probe.as_ref())),
        ),
        (
            &registry::REPLY_DROPPED,
            Box::pin(both::lost_reply(probe.as_ref())),
        ),
        (&registry::CANCELLED, Box::pin(cancelled(probe))),
        (&registry::RECONNECT, Box::pin(reconnect(probe))),
        (
            &registry::CHANGED_PAYLOAD,
            Box::pin(both::changed_payload(probe.as_ref())),
        ),
        (
            &registry::NEW_KEY_SAME_PAYLOAD,
            Box::pin(both::new_key(probe.as_ref())),
        ),
        (&registry::CONCURRENT_FRESH_KEY, Box::pin(concurrent(probe))),
        (
            &registry::CONCURRENT_DISTINCT,
            Box::pin(concurrent_distinct(probe)),
        ),
        (
            &registry::OTHER_CALLER,
            Box::pin(scope(probe, &calibration.callers)),
        ),
        (&registry::KEY_FORMS, Box::pin(key_forms(probe))),
        (
            &registry::ERROR_THEN_CORRECTED,
            Box::pin(error_then_corrected(probe)),
        ),
    ];
    run_selected(selection, runs).await
}

fn key(probe: &McpProbe) -> PointReport {
    const NAME: &str = registry::KEY_REQUIRED.id;
    const TITLE: &str = registry::KEY_REQUIRED.title;
    let mut checks = Checks::new();
    let tool = &probe.target.tool;
    let listed = probe.tools.iter().find(|t| t.name == tool.name.as_str());
    checks.add(
        Grade::lab(),
        format!("tools/list lists {}", tool.name),
        listed.is_some(),
        format!("a tool named {}", tool.name),
        match listed {
            Some(_) => "listed".to_owned(),
            None => format!(
                "not listed; the server lists {}",
                probe
                    .tools
                    .iter()
                    .map(|t| t.name.as_ref())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        &[],
    );
    let Some(argument) = &tool.key_argument else {
        checks.add(
            Grade::lab(),
            "the tool can be retried safely: an argument carries an operation key",
            false,
            "a key argument that names one intention",
            format!(
                "none (mcp.tool.no_key = true): {} cannot be retried safely; a call whose result \
                 is lost can only be sent again as a new call, and the points that need a key \
                 cannot pass",
                tool.name
            ),
            &[],
        );
        return PointReport::covered(NAME, TITLE, checks.0);
    };
    if let Some(listed) = listed {
        let schema = Value::Object((*listed.input_schema).clone());
        let named = schema["properties"].get(argument).is_some();
        checks.add(
            Grade::lab(),
            format!("its inputSchema names the key argument {argument}"),
            named,
            format!("properties.{argument}"),
            if named {
                "named".to_owned()
            } else {
                "not in the schema: a model is never told of it".to_owned()
            },
            &[],
        );
        let required = schema["required"]
            .as_array()
            .is_some_and(|list| list.iter().any(|v| v.as_str() == Some(argument)));
        checks.add(
            Grade::should(section::ERRORS),
            format!("its inputSchema requires {argument}"),
            required,
            format!("{argument} in required"),
            if required {
                "required".to_owned()
            } else {
                "optional: a call without it is a call that cannot be retried".to_owned()
            },
            &[],
        );
    }
    PointReport::covered(NAME, TITLE, checks.0)
}

fn annotations(probe: &McpProbe) -> PointReport {
    const NAME: &str = registry::ANNOTATIONS.id;
    const TITLE: &str = registry::ANNOTATIONS.title;
    let mut checks = Checks::new();
    let grade = Grade::mcp(Level::Should, rule::ANNOTATIONS);
    let tool = &probe.target.tool;
    let Some(listed) = probe.tools.iter().find(|t| t.name == tool.name.as_str()) else {
        return PointReport::not_covered(
            NAME,
            TITLE,
            format!(
                "{} is not listed, so it has no annotations to read",
                tool.name
            ),
        );
    };
    let hints = listed.annotations.clone().unwrap_or_default();
    let show = |hint: Option<bool>| match hint {
        Some(value) => value.to_string(),
        None => "absent".to_owned(),
    };
    let stated = format!(
        "readOnlyHint = {}, destructiveHint = {}, idempotentHint = {}",
        show(hints.read_only_hint),
        show(hints.destructive_hint),
        show(hints.idempotent_hint)
    );
    checks.add(
        grade,
        "readOnlyHint is not true on the tool that creates",
        hints.read_only_hint != Some(true),
        "readOnlyHint false or absent",
        stated.clone(),
        &[],
    );
    let idempotent = hints.idempotent_hint == Some(true);
    checks.add(
        grade,
        "idempotentHint = true only where a key makes a repeated call harmless",
        !idempotent || probe.target.keyed(),
        "idempotentHint true only with a key argument",
        if idempotent && !probe.target.keyed() {
            format!(
                "{stated}, and no key argument: a client told the tool is idempotent may retry \
                 it and make a second effect"
            )
        } else {
            format!("{stated}; the points that retry, not the hint, show what a retry does")
        },
        &[],
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

/// Sends the first call of a point and checks it succeeded.
async fn first(
    probe: &McpProbe,
    point: &'static str,
    checks: &mut Checks,
    call: &ToolCall,
) -> Option<Seen> {
    let seen = probe.send(point, call).await;
    let ok = checks.add(
        Grade::lab(),
        format!("{} succeeds and names its effect", call.step),
        seen.read.success && seen.read.identity.is_some(),
        "a tool result naming the effect ([mcp.identity])",
        probe.describe(&seen),
        &[seen.id],
    );
    ok.then_some(seen)
}

/// The retry half of the cancelled and reconnect points: the retry names the effect `first`
/// named, and the count stays one up.
async fn judge_retry(
    probe: &McpProbe,
    checks: &mut Checks,
    first: &Seen,
    retried: &[Seen],
    before: i64,
) {
    let texts = (
        "the retry names the first call's effect",
        "the retry made no second effect",
    );
    let first = told(probe, first.clone());
    let effect = content_of(probe, first.identity.as_deref()).await;
    let retried: Vec<_> = retried
        .iter()
        .map(|seen| told(probe, seen.clone()))
        .collect();
    both::judge_retry(probe, checks, texts, (&first, &effect), &retried, before).await;
}

async fn cancelled(probe: &McpProbe) -> PointReport {
    const NAME: &str = registry::CANCELLED.id;
    const TITLE: &str = registry::CANCELLED.title;
    let mut checks = Checks::new();
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let call = probe.call(
        "the call then cancelled",
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let pending = match probe.start_call(NAME, &call).await {
        Ok(pending) => pending,
        Err(problem) => {
            checks.add(
                Grade::lab(),
                "the call can be sent",
                false,
                "sent",
                problem,
                &[],
            );
            return PointReport::covered(NAME, TITLE, checks.0);
        }
    };
    // Wait until the work is visible from outside, then cancel: the race every client with a
    // timeout runs into.
    let now = count_until_risen(|| probe.count(), before, probe.target.timeout)
        .await
        .unwrap_or(before);
    let cancelled = probe
        .cancel(pending, "the check cancels a call whose work finished")
        .await;
    let fired = checks.add(
        Grade::lab(),
        "the fault fired: the call's work finished before notifications/cancelled was sent",
        now - before == 1,
        "one effect, then the cancellation",
        format!(
            "{}, then {}",
            effects(now - before),
            cancelled.answer.summary()
        ),
        &[cancelled.id],
    );
    if !fired {
        return PointReport::covered(NAME, TITLE, checks.0);
    }
    let mut again = call.clone();
    again.step = "the retry after the cancellation".to_owned();
    let retried = probe.send_settled(NAME, &again).await;
    let retry = last(&retried);
    checks.add(
        Grade::mcp(Level::Lab, rule::CANCELLATION),
        "a cancelled call's work is not undone without a trace: the retry is answered",
        retry.read.success || retry.read.told_refused(),
        "an answer to the retry",
        probe.describe(retry),
        &[retry.id],
    );
    // The cancelled call's own result, when it came before the cancellation: the client never
    // read it, the history keeps it, and the retry must name the effect it names.
    judge_retry(probe, &mut checks, &cancelled, &retried, before).await;
    PointReport::covered(NAME, TITLE, checks.0)
}

async fn reconnect(probe: &McpProbe) -> PointReport {
    const NAME: &str = registry::RECONNECT.id;
    const TITLE: &str = registry::RECONNECT.title;
    let mut checks = Checks::new();
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let call = probe.call(
        "the call before the reconnect",
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let open = |problem: String, checks: &mut Checks| {
        checks.add(
            Grade::lab(),
            "a new session opens",
            false,
            "a session",
            problem,
            &[],
        );
    };
    let session = match probe.open(0).await {
        Ok(session) => session,
        Err(stop) => {
            open(stop.to_string(), &mut checks);
            return PointReport::covered(NAME, TITLE, checks.0);
        }
    };
    let first_seen = probe.send_on(NAME, &session, &call).await;
    let ended = probe.close(session).await;
    let after_first = count_or_stop!(probe, checks, NAME, TITLE);
    let fired = checks.add(
        Grade::lab(),
        "the fault fired: the first call's work happened, then its session ended",
        after_first - before == 1 && !ended.contains("still running"),
        "one effect, then the session gone",
        format!("{}; {ended}", effects(after_first - before)),
        &[first_seen.id],
    );
    if !fired {
        return PointReport::covered(NAME, TITLE, checks.0);
    }
    let session = match probe.open(0).await {
        Ok(session) => session,
        Err(stop) => {
            open(stop.to_string(), &mut checks);
            return PointReport::covered(NAME, TITLE, checks.0);
        }
    };
    let mut again = call.clone();
    again.step = format!(
        "the retry on a new {}",
        if session.pid.is_some() {
            format!("process ({})", session.pid.unwrap_or_default())
        } else {
            "session".to_owned()
        }
    );
    let retry = probe.send_on(NAME, &session, &again).await;
    probe.close(session).await;
    let retried = std::slice::from_ref(&retry);
    judge_retry(probe, &mut checks, &first_seen, retried, before).await;
    PointReport::covered(NAME, TITLE, checks.0)
}

async fn concurrent(probe: &Arc<McpProbe>) -> PointReport {
    const NAME: &str = registry::CONCURRENT_FRESH_KEY.id;
    const TITLE: &str = registry::CONCURRENT_FRESH_KEY.title;
    if let Some(report) = needs_key(probe.as_ref(), NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let load = probe.target.load;
    let mut found = Race::default();
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    for round in 0..load.rounds {
        race_round(probe, NAME, round, &mut found).await;
    }
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    let Race {
        ids: all_ids,
        disagreements,
        failures,
    } = found;
    checks.add(
        lab26(),
        "every call of a round that succeeded names one and the same effect",
        disagreements.is_empty(),
        "one effect per round",
        if disagreements.is_empty() {
            "one per round".to_owned()
        } else {
            disagreements.join("; ")
        },
        &all_ids,
    );
    checks.add(
        Grade::should(section::ENFORCEMENT),
        "every call is answered with the effect once the first finished (in-progress codes retried)",
        failures.is_empty(),
        "a tool result for each",
        if failures.is_empty() {
            format!("{} calls, each answered", all_ids.len())
        } else {
            failures.join("; ")
        },
        &all_ids,
    );
    checks.add(
        lab26(),
        format!(
            "{} rounds of {} calls together: one effect per round",
            load.rounds, load.calls
        ),
        after - before == load.rounds as i64,
        effects(load.rounds as i64),
        effects(after - before),
        &all_ids,
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

/// What the rounds of the concurrent-fresh-key point found.
#[derive(Default)]
struct Race {
    /// Every exchange of every round.
    ids: Vec<usize>,
    /// A round whose successes named more than one effect, and the effects.
    disagreements: Vec<String>,
    /// A call that ended without a success naming an effect.
    failures: Vec<String>,
}

/// One round: the load's calls with one key sent together, each settled, into `found`.
async fn race_round(probe: &Arc<McpProbe>, name: &'static str, round: usize, found: &mut Race) {
    let call = probe.call(
        &format!("round {} call", round + 1),
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let mut tasks = Vec::new();
    // Released together once every task has started, so the calls go out side by side however
    // late a task starts on a loaded machine.
    let start = Arc::new(tokio::sync::Barrier::new(probe.target.load.calls));
    for i in 0..probe.target.load.calls {
        let probe = Arc::clone(probe);
        let start = Arc::clone(&start);
        let mut call = call.clone();
        call.step = format!("{} {}", call.step, i + 1);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            probe.send_settled(name, &call).await
        }));
    }
    let mut identities = BTreeMap::new();
    for task in tasks {
        let Ok(seen) = task.await else { continue };
        found.ids.extend(ids(&seen));
        let one = last(&seen);
        match (&one.read.identity, one.read.success) {
            (Some(identity), true) => {
                *identities.entry(identity.clone()).or_insert(0) += 1;
            }
            _ => found
                .failures
                .push(format!("#{}: {}", one.id, probe.describe(one))),
        }
    }
    if identities.len() > 1 {
        found.disagreements.push(format!(
            "round {}: {}",
            round + 1,
            identities.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
}

async fn concurrent_distinct(probe: &Arc<McpProbe>) -> PointReport {
    const NAME: &str = registry::CONCURRENT_DISTINCT.id;
    const TITLE: &str = registry::CONCURRENT_DISTINCT.title;
    let mut checks = Checks::new();
    let calls = probe.target.load.calls;
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let mut tasks = Vec::new();
    // Released together, as race_round's.
    let start = Arc::new(tokio::sync::Barrier::new(calls));
    for i in 0..calls {
        let probe = Arc::clone(probe);
        let start = Arc::clone(&start);
        let call = probe.call(
            &format!("intention {} of {calls}", i + 1),
            probe.intention_key(),
            &probe.fresh_fields(),
        );
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            probe.send_settled(NAME, &call).await
        }));
    }
    let mut all_ids = Vec::new();
    let mut acknowledged = 0;
    let mut failures = Vec::new();
    for task in tasks {
        let Ok(seen) = task.await else { continue };
        all_ids.extend(ids(&seen));
        let one = last(&seen);
        if one.read.success && one.read.identity.is_some() {
            acknowledged += 1;
        } else {
            failures.push(format!("#{}: {}", one.id, probe.describe(one)));
        }
    }
    checks.add(
        Grade::lab(),
        format!("{calls} calls together, each its own intention, each succeed"),
        failures.is_empty(),
        format!("{calls} tool results naming an effect"),
        if failures.is_empty() {
            format!("{acknowledged} acknowledged")
        } else {
            failures.join("; ")
        },
        &all_ids,
    );
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    checks.add(
        Grade::lab(),
        "every acknowledged effect is there afterwards (none lost to another call)",
        after - before >= acknowledged,
        format!("{} counted", effects(acknowledged)),
        format!(
            "{} counted for {acknowledged} acknowledged{}",
            effects(after - before),
            if after - before < acknowledged {
                format!(": {} acknowledged lost", acknowledged - (after - before))
            } else {
                String::new()
            }
        ),
        &all_ids,
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

async fn scope(probe: &McpProbe, proved: &Callers) -> PointReport {
    const NAME: &str = registry::OTHER_CALLER.id;
    const TITLE: &str = registry::OTHER_CALLER.title;
    if let Some(report) = needs_key(probe, NAME, TITLE) {
        return report;
    }
    let callers = &probe.target.callers;
    if callers.len() < 2 {
        return PointReport::not_covered(
            NAME,
            TITLE,
            "The file names one caller; name a second in [[mcp.callers]] (other args or env over \
             stdio, other headers over HTTP) to check that keys are scoped by caller."
                .to_owned(),
        );
    }
    // A result naming the first caller's effect is a leak only between two callers.
    if let Callers::Unproved(why) = proved {
        return PointReport::not_covered(NAME, TITLE, why.clone());
    }
    let mut checks = Checks::new();
    let (a, b) = (&callers[0].name, &callers[1].name);
    let grade = Grade {
        section: Some(section::SECURITY),
        ..Grade::lab()
    };
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let call = probe.call(
        &format!("{a}'s call"),
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let Some(first_seen) = first(probe, NAME, &mut checks, &call).await else {
        return PointReport::covered(NAME, TITLE, checks.0);
    };
    let mut other = call.clone();
    other.caller = 1;
    other.step = format!("{b}'s call, same key and arguments");
    let seen = probe.send_settled(NAME, &other).await;
    let other_seen = last(&seen);
    let leak = other_seen.read.success
        && same_effect(&other_seen.read.identity, &first_seen.read.identity);
    checks.add(
        grade,
        format!("{b} is not given {a}'s effect"),
        !leak,
        format!("{b}'s own effect"),
        if leak {
            format!(
                "DATA LEAK: {b} got {a}'s effect {}",
                first_seen.read.identity.as_deref().unwrap_or("")
            )
        } else {
            probe.describe(other_seen)
        },
        &[first_seen.id, other_seen.id],
    );
    checks.add(
        grade,
        format!("{b}'s call succeeds as a call of its own"),
        other_seen.read.success && !leak,
        "a tool result",
        probe.describe(other_seen),
        &ids(&seen),
    );
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    checks.add(
        grade,
        "two callers, one key each: two effects in all",
        after - before == 2,
        "two effects",
        effects(after - before),
        &[first_seen.id, other_seen.id],
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

async fn key_forms(probe: &McpProbe) -> PointReport {
    const NAME: &str = registry::KEY_FORMS.id;
    const TITLE: &str = registry::KEY_FORMS.title;
    if let Some(report) = needs_key(probe, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let bad_codes = &probe.target.errors.bad_key;
    let forms = [
        (
            "a call without the key argument",
            KeyArg::Absent,
            Grade::should(section::ERRORS),
        ),
        (
            "a call with an empty key",
            KeyArg::Raw(Value::from("")),
            Grade::lab(),
        ),
        (
            "a call with the key as a number",
            // A fresh number each run, so a server that reads it as text never meets a key of
            // an earlier run.
            KeyArg::Raw(Value::from(u64::from(probe.fresh_key_number()))),
            Grade::lab(),
        ),
    ];
    for (step, key, grade) in forms {
        let before = count_or_stop!(probe, checks, NAME, TITLE);
        let seen = probe
            .send(NAME, &probe.call(step, key, &probe.fresh_fields()))
            .await;
        checks.add(
            grade,
            format!("{step} is refused"),
            seen.read.told_refused(),
            "an error result or a JSON-RPC error",
            probe.describe(&seen),
            &[seen.id],
        );
        if step.contains("empty") && !bad_codes.is_empty() {
            checks.add(
                Grade::should(section::ERRORS),
                format!("{step} is refused with the file's bad-key code (mcp.errors.bad_key)"),
                seen.read.told_refused()
                    && seen
                        .read
                        .code
                        .as_ref()
                        .is_some_and(|c| bad_codes.contains(c)),
                format!("{bad_codes:?}"),
                probe.describe(&seen),
                &[seen.id],
            );
        }
        let after = count_or_stop!(probe, checks, NAME, TITLE);
        checks.add(
            Grade::lab(),
            format!("{step} made no effect"),
            after == before,
            "no effect",
            effects(after - before),
            &[seen.id],
        );
    }
    PointReport::covered(NAME, TITLE, checks.0)
}

/// Whether the provoked call was refused (the fault fired; `api_refused`: the API behind a
/// wrapper answered it 400), with its sub-check: the refusal the agent is told as one. A refusal
/// in a result not marked `isError` fired the fault, but the agent was told its call succeeded:
/// that sub-check fails, and none passes on it.
fn refused_as_told(
    checks: &mut Checks,
    probe: &McpProbe,
    refused: &Seen,
    api_refused: bool,
) -> bool {
    let unmarked = matches!(
        refused.answer,
        super::super::history::Answer::ToolResult {
            is_error: false,
            ..
        }
    );
    if refused.read.flagged_success || (api_refused && unmarked) {
        checks.add(
            Grade::lab(),
            "the refusal reaches the agent as one: an error result (isError) or a JSON-RPC error",
            false,
            "an error result or a JSON-RPC error",
            probe.describe(refused),
            &[refused.id],
        );
        return true;
    }
    checks.add(
        Grade::lab(),
        "the fault fired: the provoked call is refused",
        refused.read.refused,
        "an error result or a JSON-RPC error",
        probe.describe(refused),
        &[refused.id],
    )
}

async fn error_then_corrected(probe: &McpProbe) -> PointReport {
    const NAME: &str = registry::ERROR_THEN_CORRECTED.id;
    const TITLE: &str = registry::ERROR_THEN_CORRECTED.title;
    let mut checks = Checks::new();
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let fields = probe.fresh_fields();
    let mut bad = fields.clone();
    bad.extend(probe.target.errors.validation.clone());
    let key = probe.intention_key();
    let mark = probe.upstream.as_ref().map(|api| api.mark());
    probe.provoke_refusal();
    let refused = probe
        .send(
            NAME,
            &probe.call(
                "a call the tool refuses (mcp.errors.validation)",
                key.clone(),
                &bad,
            ),
        )
        .await;
    probe.settle_refusal();
    // Behind a wrapper, the API's own 400 says the call was refused, whatever the result holds.
    let api_refused = probe
        .upstream
        .as_ref()
        .zip(mark)
        .is_some_and(|(api, mark)| {
            api.creates_since(mark)
                .iter()
                .any(|c| c.status() == Some(400))
        });
    let fired = refused_as_told(&mut checks, probe, &refused, api_refused);
    let after_refused = count_or_stop!(probe, checks, NAME, TITLE);
    checks.add(
        Grade::lab(),
        "the refused call made no effect",
        after_refused == before,
        "no effect",
        effects(after_refused - before),
        &[refused.id],
    );
    if !fired || !probe.target.keyed() {
        return PointReport::covered(NAME, TITLE, checks.0);
    }
    let corrected = probe.call("the corrected call, same key", key, &fields);
    let seen = last(&probe.send_settled(NAME, &corrected).await).clone();
    checks.add(
        lab26(),
        "the corrected call under the same key succeeds (an error does not burn the key)",
        seen.read.success && seen.read.identity.is_some(),
        "a tool result naming the effect",
        probe.describe(&seen),
        &[refused.id, seen.id],
    );
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    checks.add(
        Grade::lab(),
        "the corrected call made one effect",
        after - before == 1,
        "one effect",
        effects(after - before),
        &[seen.id],
    );
    PointReport::covered(NAME, TITLE, checks.0)
}
