//! The MCP check's points: the ones both fronts share are in `both.rs` (a replay, a lost reply,
//! a changed payload, a new key, calls together, another caller, an error then a corrected
//! call); here are MCP's own: the key argument itself, the tool's annotations reported as the
//! hints they are, a cancelled call whose work finished, a reconnect before the retry, calls
//! with distinct keys together, and the key's forms as an argument. Each point counts the
//! change in effects, and each fault it injects is proved to have fired before it is judged.

use std::sync::Arc;

use serde_json::Value;

use super::super::both::{self, Front, count_or_stop, effects, needs_key, section};
use super::super::content::content_of;
use super::super::points::{Run, count_until_risen, run_selected};
use super::super::report::{Calibration, Checks};
use super::super::report::{Grade, Level, PointReport};
use super::hop::told;
use super::probe::{KeyArg, McpProbe, Seen};
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
        (
            &registry::CONCURRENT_FRESH_KEY,
            Box::pin(both::concurrent(probe)),
        ),
        (
            &registry::CONCURRENT_DISTINCT,
            Box::pin(concurrent_distinct(probe)),
        ),
        (
            &registry::OTHER_CALLER,
            Box::pin(both::other_caller(probe.as_ref(), &calibration.callers)),
        ),
        (&registry::KEY_FORMS, Box::pin(key_forms(probe))),
        (
            &registry::ERROR_THEN_CORRECTED,
            Box::pin(both::error_then_corrected(probe.as_ref())),
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

async fn concurrent_distinct(probe: &Arc<McpProbe>) -> PointReport {
    const NAME: &str = registry::CONCURRENT_DISTINCT.id;
    const TITLE: &str = registry::CONCURRENT_DISTINCT.title;
    let mut checks = Checks::new();
    let calls = probe.target.load.calls;
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let mut tasks = Vec::new();
    // Released together once every task has started, as `both::concurrent`'s.
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
