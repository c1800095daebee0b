//! The HTTP check's points: everything the retry contract says that a black box can observe,
//! each with its own fresh keys and field values, judged by the change in the effect count so
//! that a service holding other data can be checked. The points an MCP server shares are
//! written once in `both.rs`; here are the HTTP service's own (a cut-off request, a reordered
//! body, retries on a completed key, another endpoint, the key's forms as a header, a server
//! error, a fault between the effect and its record). Every point records every sub-check it
//! made, passed or not, so a mild symptom never hides a worse one (a collision across callers
//! beside a leak).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::both::{self, Front, Provoked, Rounds, count_or_stop, effects, lab26, section};
use super::calibration::{Retried, retried};
use super::content::{self, content_of};
use super::history::Answer;
use super::http::HangUp;
use super::http_front::told;
use super::probe::{BodyForm, Call, KeyWire, Probe, Read, Seen, same_effect};
use super::report::{Calibration, Checks, Grade, PointReport, Stop, SubCheck};
use super::target::{Endpoint, KeyForm, Replay};
use crate::contract::points as registry;
use crate::contract::points::Selection;

/// How long after cutting a request off the check retries it.
const HANG_UP_BACKOFF: Duration = Duration::from_secs(1);

/// Reads `count` until it has risen above `before`, and returns it: the effect of a call whose
/// answer the check never read is visible from outside, so what the check sends next meets a
/// service that finished that call, however slow the machine. After `bound` (the file's timeout:
/// a service that made no effect of the call never shows one) the last count read is returned;
/// the sub-checks judge it.
///
/// # Errors
/// The reason, when the count cannot be read.
pub(crate) async fn count_until_risen<Counted, Failed>(
    count: impl Fn() -> Counted,
    before: i64,
    bound: Duration,
) -> Result<i64, Failed>
where
    Counted: std::future::Future<Output = Result<i64, Failed>>,
{
    let started = std::time::Instant::now();
    loop {
        let now = count().await?;
        if now > before || started.elapsed() >= bound {
            return Ok(now);
        }
        // A read-back costs the service a request: look again soon, not in a tight loop.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

impl Checks {
    /// The effect count now; `None`, with the failed sub-check added, when it cannot be read (the
    /// point stops there: nothing after it can be judged).
    async fn count(&mut self, probe: &Probe) -> Option<i64> {
        both::counted(probe, self).await
    }
}

/// A point of the registry and the run that checks it: a future, so a point the selection leaves
/// out is never started.
pub(crate) type Run<'a> = (
    &'static registry::Point,
    Pin<Box<dyn Future<Output = PointReport> + 'a>>,
);

/// Runs, one after another in the order given, the points `selection` keeps.
pub(crate) async fn run_selected(selection: &Selection, runs: Vec<Run<'_>>) -> Vec<PointReport> {
    let mut reports = Vec::new();
    for (point, run) in runs {
        if selection.runs(point) {
            reports.push(run.await);
        }
    }
    reports
}

/// Every point `selection` keeps, in order; the other-caller point rests on what `calibration`
/// proved of the callers.
pub async fn all(
    probe: &Arc<Probe>,
    calibration: &Calibration,
    selection: &Selection,
) -> Vec<PointReport> {
    let runs: Vec<Run<'_>> = vec![
        (
            &registry::RETRY_REPLAYS,
            Box::pin(both::replay(probe.as_ref())),
        ),
        (
            &registry::REPLY_DROPPED,
            Box::pin(both::lost_reply(probe.as_ref())),
        ),
        (&registry::HANG_UP, Box::pin(hang_up(probe))),
        (
            &registry::CHANGED_PAYLOAD,
            Box::pin(both::changed_payload(probe.as_ref())),
        ),
        (&registry::REORDERED_FIELDS, Box::pin(reordered(probe))),
        (
            &registry::NEW_KEY_SAME_PAYLOAD,
            Box::pin(both::new_key(probe.as_ref())),
        ),
        (
            &registry::CONCURRENT_FRESH_KEY,
            Box::pin(both::concurrent(probe)),
        ),
        (
            &registry::CONCURRENT_COMPLETED_KEY,
            Box::pin(concurrent_completed(probe)),
        ),
        (
            &registry::OTHER_CALLER,
            Box::pin(both::other_caller(probe.as_ref(), &calibration.callers)),
        ),
        (&registry::OTHER_ENDPOINT, Box::pin(other_endpoint(probe))),
        (&registry::KEY_FORMS, Box::pin(key_forms(probe))),
        (
            &registry::ERROR_THEN_CORRECTED,
            Box::pin(both::error_then_corrected(probe.as_ref())),
        ),
        (
            &registry::SERVER_ERROR_THEN_CORRECTED,
            Box::pin(server_error_then_corrected(probe)),
        ),
        (
            &registry::FAULT_BETWEEN_EFFECT_AND_RECORD,
            Box::pin(fault_between(probe)),
        ),
        (&registry::CRASH, Box::pin(async { crash() })),
    ];
    let mut points = run_selected(selection, runs).await;
    note_an_unseen_replay_mark(probe, &mut points);
    points
}

/// The crash point: always not covered, it names the gap and what would fill it.
fn crash() -> PointReport {
    PointReport::not_covered(
        registry::CRASH.id,
        registry::CRASH.title,
        "A black box cannot crash the service at a chosen step. For a Rust tool, `lab check \
         --backend ...` stands in for it inside the create: a failure before the commit, and a \
         reply lost after it. A service's own harness can kill it at its dangerous points (as \
         lab/tests/it/crash.rs does to the runner) and then run this check's retry-replays point."
            .to_owned(),
    )
}

/// A replay header the file declares that no answer of the whole run carried (or never with
/// the declared value): the field it rests on and what the run saw, or `None` when the mark was
/// seen (or the file declares none). What it means depends on the retries: see
/// [`file_at_fault`] and [`note_an_unseen_replay_mark`].
fn unseen_replay_mark(probe: &Probe) -> Option<(&'static str, String)> {
    let Replay::Header { name, value } = &probe.target.replay else {
        return None;
    };
    let exchanges = probe.history.exchanges();
    let seen: Vec<&str> = exchanges
        .iter()
        .filter_map(|exchange| exchange.answer.header(name))
        .collect();
    match value {
        _ if seen.is_empty() => Some((
            "replay.header",
            format!("no answer of this run carried a {name} header at all"),
        )),
        Some(wanted) if !seen.iter().any(|v| v.trim().eq_ignore_ascii_case(wanted)) => Some((
            "replay.value",
            format!(
                "{name} came with {:?}, never with {wanted:?}",
                seen.iter().take(3).collect::<Vec<_>>()
            ),
        )),
        _ => None,
    }
}

/// Whether a sub-check rests on the file's replay mark.
fn rests_on_the_mark(check: &SubCheck) -> bool {
    check.what.contains("as [replay] says")
}

/// A replay mark no answer carried, in a run whose retries did not all replay cleanly: either
/// the service does not mark replays (or does not replay), or the file names the wrong mark, and
/// the run cannot tell which. The failed sub-checks that rest on the mark say both.
fn note_an_unseen_replay_mark(probe: &Probe, points: &mut [PointReport]) {
    let Some((field, seen)) = unseen_replay_mark(probe) else {
        return;
    };
    let note = format!(
        "{seen}: either the service does not mark its replays this way, or {field} in the \
         target file is wrong; name the mark the service uses, or say replay.inferred = true"
    );
    for point in points.iter_mut() {
        for check in point.checks.iter_mut() {
            if check.failed() && rests_on_the_mark(check) {
                check.observed = note.clone();
            }
        }
    }
}

/// A mismatch the whole run shows can only come from the file: the service replayed (the
/// replay point's retries named the first effect and made none of their own, every sub-check
/// but the mark passed), yet no answer carried the mark the file declares. Such a run grades
/// nothing: the check stops as a failed calibration does (exit 2), naming the field. A service
/// that never replays keeps its findings: the missing mark is then one more of them.
pub fn file_at_fault(probe: &Probe, points: &[PointReport]) -> Option<Stop> {
    let (field, seen) = unseen_replay_mark(probe)?;
    let replay = points
        .iter()
        .find(|p| p.name == registry::RETRY_REPLAYS.id)?;
    let mark_failed = replay
        .checks
        .iter()
        .any(|c| c.failed() && rests_on_the_mark(c));
    let all_else_passed = replay
        .checks
        .iter()
        .all(|c| !c.failed() || rests_on_the_mark(c));
    (mark_failed && all_else_passed).then(|| {
        Stop::mismatch(
            field,
            format!(
                "the retries replayed (each named the first effect and made none of its own), \
                 but {seen}: {field} in the target file is wrong (the file is at fault, not the \
                 service); name the mark the service uses, or say replay.inferred = true"
            ),
        )
    })
}

/// Sends the first request of a point and checks that it succeeded; `None` (with the failed
/// sub-check added) when it did not, since nothing after it can be judged.
async fn first(
    probe: &Probe,
    point: &'static str,
    checks: &mut Checks,
    call: &Call,
) -> Option<(Seen, Read)> {
    let seen = probe.send(point, call).await;
    let read = probe.read(&seen.answer, call.other_endpoint);
    let ok = checks.add(
        Grade::lab(),
        format!("{} with a fresh key succeeds", call.step),
        read.success,
        "a success status",
        probe.describe(&seen.answer),
        &[seen.id],
    );
    ok.then_some((seen, read))
}

fn last(seen: &[Seen]) -> &Seen {
    // send_settled sends at least once.
    &seen[seen.len() - 1]
}

fn ids(seen: &[Seen]) -> Vec<usize> {
    seen.iter().map(|s| s.id).collect()
}

/// A retry's answer, judged against the first success: success, same identity.
fn retry_matches(
    probe: &Probe,
    checks: &mut Checks,
    what: &str,
    first: &Read,
    retry: &Seen,
    grade: Grade,
) -> bool {
    let told = told(probe, retry.clone());
    let first = first.identity.as_deref();
    both::retry_matches(probe, checks, (grade, what), first, &told, &[retry.id])
}

async fn hang_up(probe: &Probe) -> PointReport {
    const NAME: &str = registry::HANG_UP.id;
    const TITLE: &str = registry::HANG_UP.title;
    let mut checks = Checks::new();
    for moment in HangUp::ALL {
        if hang_up_at(probe, &mut checks, NAME, moment).await.is_none() {
            break;
        }
    }
    PointReport::covered(NAME, TITLE, checks.0)
}

/// One hang-up moment and its retries; `None` when the point stops.
async fn hang_up_at(
    probe: &Probe,
    checks: &mut Checks,
    name: &'static str,
    moment: HangUp,
) -> Option<()> {
    let fields = probe.fresh_fields(false);
    let before = checks.count(probe).await?;
    let call = probe.call(
        &format!("a request the client hangs up on {}", moment.describe()),
        KeyWire::Normal(probe.fresh_key()),
        &fields,
    );
    let (cut, result) = probe.hang_up(name, &call, moment).await;
    if let Err(problem) = result {
        checks.add(
            Grade::lab(),
            format!(
                "the check can send a request and hang up {}",
                moment.describe()
            ),
            false,
            "a connection",
            problem,
            &[cut],
        );
        return Some(());
    }
    if moment == HangUp::AfterRequest {
        // The whole request reached the service, which may finish it though the client is gone:
        // the retry waits until its effect is visible (or the file's timeout shows none), so it
        // meets a service that finished the first request, however slow the machine.
        if let Err(problem) =
            count_until_risen(|| probe.count(), before, probe.target.service.timeout).await
        {
            both::count_failed(checks, probe.count_section(), &problem);
            return None;
        }
    } else {
        // A request cut off before its end: no effect to wait for, and nothing outside shows when
        // the service has finished with it. The retry comes a second later, as a client's
        // backoff would: what the service still holds of the cut request by then (a key it
        // locked and never released) is what the retry meets. A second, not a blink, so that a
        // service slowed by a loaded machine has read the end of the stream by then too.
        tokio::time::sleep(HANG_UP_BACKOFF).await;
        let now = checks.count(probe).await?;
        checks.add(
            Grade::lab(),
            format!("a request cut off {} made no effect", moment.describe()),
            now == before,
            "no effect from an incomplete request",
            effects(now - before),
            &[cut],
        );
    }
    let retries = retries_after_hang_up(probe, checks, name, moment, &call).await;
    let after = checks.count(probe).await?;
    let mut evidence = vec![cut];
    evidence.extend(retries);
    checks.add(
        lab26(),
        format!(
            "hanging up {} and retrying made exactly one effect",
            moment.describe()
        ),
        after - before == 1,
        "one effect",
        effects(after - before),
        &evidence,
    );
    Some(())
}

/// The retry after hanging up and a second retry: the first succeeds, the second names its
/// effect. The exchanges of both.
async fn retries_after_hang_up(
    probe: &Probe,
    checks: &mut Checks,
    name: &'static str,
    moment: HangUp,
    call: &Call,
) -> Vec<usize> {
    let mut retry = call.clone();
    retry.step = format!("the retry after hanging up {}", moment.describe());
    let retried = probe.send_settled(name, &retry).await;
    let read = probe.read(&last(&retried).answer, false);
    checks.add(
        lab26(),
        format!("the retry after hanging up {} succeeds", moment.describe()),
        read.success,
        "a success status",
        probe.describe(&last(&retried).answer),
        &ids(&retried),
    );
    let again = probe.send_settled(name, &retry).await;
    if read.success {
        retry_matches(
            probe,
            checks,
            &format!(
                "a second retry after hanging up {} names the same effect",
                moment.describe()
            ),
            &read,
            last(&again),
            lab26(),
        );
    }
    let mut exchanges = ids(&retried);
    exchanges.extend(ids(&again));
    exchanges
}

async fn reordered(probe: &Probe) -> PointReport {
    const NAME: &str = registry::REORDERED_FIELDS.id;
    const TITLE: &str = registry::REORDERED_FIELDS.title;
    let mut checks = Checks::new();
    let key = probe.fresh_key();
    let fields = probe.fresh_fields(false);
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let call = probe.call("the first request", KeyWire::Normal(key), &fields);
    let Some((_, first_read)) = first(probe, NAME, &mut checks, &call).await else {
        return PointReport::covered(NAME, TITLE, checks.0);
    };
    let effect = content_of(probe, first_read.identity.as_deref()).await;
    let mut respaced = call.clone();
    respaced.step = "the same payload, fields reversed and respaced".to_owned();
    respaced.body = BodyForm::Reordered(fields);
    let seen = probe.send_settled(NAME, &respaced).await;
    let answer = &last(&seen).answer;
    let conflict = answer
        .status()
        .is_some_and(|s| probe.target.statuses.conflict.contains(&s));
    let read = probe.read(answer, false);
    checks.add(
        Grade::lab(),
        "the reordered payload replays the first effect",
        read.success && same_effect(&read.identity, &first_read.identity),
        "a success naming the first effect",
        if conflict {
            format!(
                "{}: the same payload in other text was taken for a changed one",
                probe.describe(answer)
            )
        } else {
            probe.describe(answer)
        },
        &ids(&seen),
    );
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    content::judged(
        &mut checks,
        (Grade::lab(), "one effect in all".to_owned(), "one effect"),
        (after - before == 1, effects(after - before)),
        content::since(probe, &effect).await,
        &ids(&seen),
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

async fn concurrent_completed(probe: &Arc<Probe>) -> PointReport {
    const NAME: &str = registry::CONCURRENT_COMPLETED_KEY.id;
    const TITLE: &str = registry::CONCURRENT_COMPLETED_KEY.title;
    let mut checks = Checks::new();
    let mut found = Rounds::default();
    for round in 1..=probe.target.load.completed_rounds {
        if completed_round(probe, &mut checks, NAME, round, &mut found)
            .await
            .is_none()
        {
            return PointReport::covered(NAME, TITLE, checks.0);
        }
    }
    completed_verdicts(probe, &mut checks, &found);
    PointReport::covered(NAME, TITLE, checks.0)
}

/// One round: a first request, then racing retries of its key, into `found`; `None` when the
/// point stops.
async fn completed_round(
    probe: &Arc<Probe>,
    checks: &mut Checks,
    name: &'static str,
    round: usize,
    found: &mut Rounds,
) -> Option<()> {
    let key = probe.fresh_key();
    let fields = probe.fresh_fields(false);
    let call = probe.call(
        &format!("round {round}, the first request"),
        KeyWire::Normal(key.clone()),
        &fields,
    );
    let opened = probe.send(name, &call).await;
    let first_read = probe.read(&opened.answer, false);
    if !first_read.success {
        checks.add(
            Grade::lab(),
            format!("round {round}: the first request with a fresh key succeeds"),
            false,
            "a success status",
            probe.describe(&opened.answer),
            &[opened.id],
        );
        return None;
    }
    let before = checks.count(probe).await?;
    let effect = content_of(probe.as_ref(), first_read.identity.as_deref()).await;
    let calls = (0..probe.target.load.callers)
        .map(|i| {
            probe.call(
                &format!("round {round}, retry {}", i + 1),
                KeyWire::Normal(key.clone()),
                &fields,
            )
        })
        .collect();
    let seen = probe.send_together(name, calls).await;
    for one in &seen {
        let read = probe.read(&one.answer, false);
        if read.success && same_effect(&read.identity, &first_read.identity) {
            continue;
        }
        match &one.answer {
            Answer::Reply { status, .. } if probe.target.statuses.in_progress.contains(status) => {
                found.in_progress.push(one.id);
            }
            Answer::Reply { .. } => found
                .other_statuses
                .push((probe.describe(&one.answer), one.id)),
            _ => found.unanswered.push((one.answer.summary(), one.id)),
        }
    }
    let after = checks.count(probe).await?;
    if after != before {
        found
            .wrong_effects
            .push((round, after - before, ids(&seen)));
    }
    found
        .contents
        .push((round, content::since(probe.as_ref(), &effect).await));
    found.rounds += 1;
    Some(())
}

/// The rounds of retries on a completed key: every one a replay, and no effect.
fn completed_verdicts(probe: &Probe, checks: &mut Checks, found: &Rounds) {
    let rounds = found.rounds;
    checks.add(
        lab26(),
        format!(
            "in {rounds} rounds of {} retries together, every retry replayed the first effect",
            probe.target.load.callers
        ),
        found.other_statuses.is_empty()
            && found.in_progress.is_empty()
            && found.unanswered.is_empty(),
        "a success naming the first effect, every time",
        match (
            found.other_statuses.first(),
            found.in_progress.first(),
            found.unanswered.first(),
        ) {
            (None, None, None) => "so they did".to_owned(),
            (_, Some(_), _) => format!(
                "{} answered with the in-progress status for a completed key",
                found.in_progress.len()
            ),
            (Some((what, _)), None, _) => format!(
                "{} answered otherwise; the first: {what}",
                found.other_statuses.len()
            ),
            (None, None, Some((why, _))) => format!("{} unanswered: {why}", found.unanswered.len()),
        },
        &found
            .in_progress
            .iter()
            .chain(found.other_statuses.iter().map(|o| &o.1))
            .chain(found.unanswered.iter().map(|o| &o.1))
            .take(3)
            .copied()
            .collect::<Vec<_>>(),
    );
    content::judged(
        checks,
        (
            lab26(),
            "the retries made no effect".to_owned(),
            "no new effect",
        ),
        (
            found.wrong_effects.is_empty(),
            found
                .wrong_effects
                .first()
                .map_or("no new effect".to_owned(), |(round, n, _)| {
                    format!("round {round}: {}", effects(*n))
                }),
        ),
        content::over_rounds(&found.contents),
        &found
            .wrong_effects
            .first()
            .map(|w| w.2.clone())
            .unwrap_or_default(),
    );
}

async fn other_endpoint(probe: &Probe) -> PointReport {
    const NAME: &str = registry::OTHER_ENDPOINT.id;
    const TITLE: &str = registry::OTHER_ENDPOINT.title;
    let Some(other) = &probe.target.other_endpoint else {
        return PointReport::not_covered(
            NAME,
            TITLE,
            "The target file names no [other_endpoint]. Name another endpoint that takes keys \
             to check that a key is scoped by operation."
                .to_owned(),
        );
    };
    let mut checks = Checks::new();
    let key = probe.fresh_key();
    let fields = probe.fresh_fields(false);
    let call = probe.call("the create", KeyWire::Normal(key.clone()), &fields);
    let Some((first_seen, first_read)) = first(probe, NAME, &mut checks, &call).await else {
        return PointReport::covered(NAME, TITLE, checks.0);
    };
    let effect = content_of(probe, first_read.identity.as_deref()).await;
    let elsewhere = Call {
        step: format!("the same key on {} {}", other.method, other.path),
        caller: 0,
        key: KeyWire::Normal(key),
        body: BodyForm::Compact(probe.fresh_fields(true)),
        extra: Vec::new(),
        other_endpoint: true,
    };
    let seen = probe.send_settled(NAME, &elsewhere).await;
    let answer = &last(&seen).answer;
    let read = probe.read(answer, true);
    let replayed_first = read.success
        && (answer.same_body(&first_seen.answer)
            || same_effect(&read.identity, &first_read.identity));
    checks.add(
        Grade::lab(),
        format!("{} {} accepts the key as its own", other.method, other.path),
        read.success && !replayed_first,
        "a success of its own",
        if replayed_first {
            "the create's reply was replayed to another endpoint".to_owned()
        } else if answer
            .status()
            .is_some_and(|s| probe.target.statuses.conflict.contains(&s))
        {
            format!("{}: the key collided across operations", answer.summary())
        } else {
            answer.summary()
        },
        &ids(&seen),
    );
    left_alone(probe, &mut checks, other, &effect, &ids(&seen)).await;
    let mut again = call.clone();
    again.step = "the create's retry".to_owned();
    let retried = probe.send_settled(NAME, &again).await;
    retry_matches(
        probe,
        &mut checks,
        "the create's key still names the create's effect",
        &first_read,
        last(&retried),
        lab26(),
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

/// The key's use on the other endpoint left the create's effect as `[read]` read it.
async fn left_alone(
    probe: &Probe,
    checks: &mut Checks,
    other: &Endpoint,
    effect: &Result<content::Content, String>,
    exchanges: &[usize],
) {
    content::judged(
        checks,
        (
            Grade::lab(),
            format!(
                "the key's use on {} {} left the create's effect alone",
                other.method, other.path
            ),
            "the create's effect as it was",
        ),
        (
            true,
            "the other endpoint's effects are not counted".to_owned(),
        ),
        content::since(probe, effect).await,
        exchanges,
    );
}

async fn key_forms(probe: &Probe) -> PointReport {
    const NAME: &str = registry::KEY_FORMS.id;
    const TITLE: &str = registry::KEY_FORMS.title;
    let mut checks = Checks::new();
    key_forms_checks(probe, &mut checks, NAME).await;
    PointReport::covered(NAME, TITLE, checks.0)
}

/// A request whose key must be refused, and the sub-checks it gets.
struct Refused<'a> {
    step: &'static str,
    wire: KeyWire,
    grade: Grade,
    what: &'static str,
    statuses: &'a [u16],
    no_effect: &'static str,
}

/// The requests the file's `[key]` says the service must refuse: no key (when it is required),
/// a key the declared form makes malformed (an unclosed quote is neither an sf-string nor a
/// token; an opaque key is any string), and a key outside `key.pattern`.
fn refused_keys(probe: &Probe) -> Vec<Refused<'_>> {
    let statuses = &probe.target.statuses;
    let mut refused = Vec::new();
    if probe.target.key.required {
        refused.push(Refused {
            step: "a request with no key",
            wire: KeyWire::Absent,
            grade: Grade::should(section::ERRORS),
            what: "a request with no key is refused with statuses.missing_key",
            statuses: &statuses.missing_key,
            no_effect: "the request with no key made no effect",
        });
    }
    if probe.target.key.form != KeyForm::Opaque {
        refused.push(Refused {
            step: MALFORMED,
            // Built around a fresh key, so a second run never meets the first run's record.
            wire: KeyWire::Raw(probe.malformed_key()),
            grade: Grade::should(section::SYNTAX),
            what: "a malformed key is refused with statuses.bad_key",
            statuses: &statuses.bad_key,
            no_effect: "the request with a malformed key made no effect",
        });
    }
    if let Some(outside) = probe.key_outside_pattern() {
        // The file says the service takes only keys that match: one that does not is refused
        // as the file's statuses say, a promise of the file's own, not of the draft.
        refused.push(Refused {
            step: "a request with a key outside key.pattern",
            wire: KeyWire::Normal(outside),
            grade: Grade::lab(),
            what: "a key outside key.pattern is refused with statuses.bad_key",
            statuses: &statuses.bad_key,
            no_effect: "the request with a key outside key.pattern made no effect",
        });
    }
    refused
}

/// The step of the malformed key's request.
const MALFORMED: &str = "a request with a malformed key (an unclosed quote)";

/// The key-forms point's sub-checks; `None` where it stopped.
async fn key_forms_checks(probe: &Probe, checks: &mut Checks, name: &'static str) -> Option<()> {
    if !probe.target.key.required {
        optional_key(probe, checks, name).await?;
    }
    let mut before = checks.count(probe).await?;
    for case in refused_keys(probe) {
        let seen = probe
            .send(
                name,
                &probe.call(case.step, case.wire, &probe.fresh_fields(false)),
            )
            .await;
        checks.add(
            case.grade,
            case.what,
            seen.answer
                .status()
                .is_some_and(|s| case.statuses.contains(&s)),
            format!("{:?}", case.statuses),
            probe.describe(&seen.answer),
            &[seen.id],
        );
        let after = checks.count(probe).await?;
        let advice = if case.step == MALFORMED && after != before {
            opaque_advice(probe)
        } else {
            String::new()
        };
        checks.add(
            Grade::lab(),
            case.no_effect,
            after == before,
            "no effect",
            format!("{}{advice}", effects(after - before)),
            &[seen.id],
        );
        before = after;
    }
    other_key_form(probe, checks, name).await
}

/// What a failure that an opaque service makes by design (a quoted key is a second key, a
/// malformed sf-string a key of its own) says about the file: the form the check held the
/// service to, and how to declare an opaque key.
fn opaque_advice(probe: &Probe) -> String {
    let held = match (probe.target.key.form, probe.target.key.form_declared) {
        (KeyForm::Opaque, _) => return String::new(),
        (KeyForm::SfString, false) => {
            "the file names no key.form, so the check held the service to the draft's sf-string"
        }
        (KeyForm::SfString, true) => {
            "key.form = \"sf-string\" says that the service reads the draft's form"
        }
        (KeyForm::Token, _) => {
            "key.form = \"token\" says that the service reads the key as a token"
        }
    };
    format!(
        ". A service that takes the key as an opaque string (any string, as Stripe does) does \
         this by design; {held}. If the service takes any string, declare key.form = \
         \"opaque\" in [key] (with key.pattern, if it takes only keys that match one)"
    )
}

/// `key.required = false`: a request without a key is a plain request. The draft's section 2.7
/// asks for a 400 only when the key is missing "for a documented idempotent operation requiring
/// this header"; an endpoint where the key is optional processes the request once, as any
/// request (or refuses it with a status the file lists in statuses.missing_key).
async fn optional_key(probe: &Probe, checks: &mut Checks, name: &'static str) -> Option<()> {
    let before = checks.count(probe).await?;
    let call = probe.call(
        "a request with no key (the key is optional: key.required = false)",
        KeyWire::Absent,
        &probe.fresh_fields(false),
    );
    let seen = probe.send(name, &call).await;
    let read = probe.read(&seen.answer, false);
    let listed = seen
        .answer
        .status()
        .is_some_and(|s| probe.target.statuses.missing_key.contains(&s));
    let after = checks.count(probe).await?;
    let grade = Grade {
        section: Some(section::ERRORS),
        ..Grade::lab()
    };
    checks.add(
        grade,
        "a request with no key, where the key is optional, is processed as a plain request",
        (read.success && after - before == 1) || (listed && after == before),
        "a success and one effect (or a statuses.missing_key refusal and none)",
        format!(
            "{}; {}",
            probe.describe(&seen.answer),
            effects(after - before)
        ),
        &[seen.id],
    );
    Some(())
}

/// The key in the file's form, then the same key in the other form. Where the file says that
/// the service reads sf-strings or tokens, the other form is refused or names the same effect
/// (LAB); that the draft's quoted String names the same effect as a bare key is a SHOULD line.
async fn other_key_form(probe: &Probe, checks: &mut Checks, name: &'static str) -> Option<()> {
    let key = probe.fresh_key();
    let fields = probe.fresh_fields(false);
    let form = probe.target.key.form;
    let (written, other_form) = match form {
        KeyForm::SfString => ("a quoted sf-string", "a bare token"),
        KeyForm::Token => ("a bare token", "a quoted sf-string"),
        KeyForm::Opaque => ("the bare string", "the draft's quoted String"),
    };
    let call = probe.call(
        &format!("the key as {written} (the file's form)"),
        KeyWire::Normal(key.clone()),
        &fields,
    );
    let (first_seen, first_read) = first(probe, name, checks, &call).await?;
    let after_first = checks.count(probe).await?;
    let mut other = call.clone();
    other.step = format!("the same key as {other_form}");
    other.key = KeyWire::OtherForm(key);
    let seen = probe.send_settled(name, &other).await;
    let answer = &last(&seen).answer;
    let read = probe.read(answer, false);
    let after = checks.count(probe).await?;
    let refused = answer.status().is_some_and(|s| (400..=499).contains(&s));
    let same = read.success && same_effect(&read.identity, &first_read.identity);
    let observed = format!(
        "{}; {}",
        probe.describe(answer),
        if after == after_first && same {
            "read as the same key".to_owned()
        } else if after == after_first {
            "no new effect".to_owned()
        } else {
            format!(
                "{}: the key's two spellings are two keys",
                effects(after - after_first)
            )
        }
    );
    let exchanges = [first_seen.id, last(&seen).id];
    if form != KeyForm::Opaque {
        let advice = if after == after_first {
            String::new()
        } else {
            opaque_advice(probe)
        };
        checks.add(
            Grade {
                section: Some(section::SYNTAX),
                ..Grade::lab()
            },
            format!("the key as {other_form} is refused or names the same effect, never a second"),
            after == after_first && (refused || same),
            "a 4xx or the first effect, and no new effect",
            format!("{observed}{advice}"),
            &exchanges,
        );
    }
    if form != KeyForm::SfString {
        // The draft's syntax is the quoted String: a client that follows it sends this form.
        checks.add(
            Grade::should(section::SYNTAX),
            "the key as the draft's quoted String names the same effect",
            same,
            "the first effect",
            observed,
            &exchanges,
        );
    }
    Some(())
}

/// An error answer under a key, then the corrected request under the same key.
async fn server_error_then_corrected(probe: &Probe) -> PointReport {
    const NAME: &str = registry::SERVER_ERROR_THEN_CORRECTED.id;
    const TITLE: &str = registry::SERVER_ERROR_THEN_CORRECTED.title;
    let provocations = &probe.target.errors.server;
    if provocations.is_empty() {
        return PointReport::not_covered(
            NAME,
            TITLE,
            "The target file gives no [errors.server]. Name a header or field values that make \
             the service answer a handled 5xx (a test hook), to check that the retry is \
             processed rather than answered with the saved error."
                .to_owned(),
        );
    }
    let mut checks = Checks::new();
    for i in 0..provocations.len() {
        // One provocation keeps the plain wording; several name theirs, each graded on its own.
        let kind = if provocations.len() == 1 {
            "server error (5xx)".to_owned()
        } else {
            format!("server error (5xx) of errors.server[{i}]")
        };
        let provoked = Provoked {
            server: Some(i),
            kind,
        };
        both::error_then_fix(probe, &mut checks, NAME, &provoked).await;
    }
    PointReport::covered(NAME, TITLE, checks.0)
}

/// The effects a failed attempt and its retry made, with why more than one is a failure.
fn stayed_without_record(made: i64) -> String {
    let why = if made > 1 {
        ": the failed attempt's effect stayed without its record"
    } else {
        ""
    };
    format!("{}{why}", effects(made))
}

async fn fault_between(probe: &Probe) -> PointReport {
    const NAME: &str = registry::FAULT_BETWEEN_EFFECT_AND_RECORD.id;
    const TITLE: &str = registry::FAULT_BETWEEN_EFFECT_AND_RECORD.title;
    let Some(hook) = &probe.target.faults.between_effect_and_record else {
        return PointReport::not_covered(
            NAME,
            TITLE,
            "A black box cannot fail the service between its effect and its record. Name a \
             fault hook in [faults] between_effect_and_record (a header the service honours in \
             tests), or check a Rust tool with `lab check --backend ...`, which injects this \
             fault inside the create."
                .to_owned(),
        );
    };
    let mut checks = Checks::new();
    let key = probe.fresh_key();
    let fields = probe.fresh_fields(false);
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let mut faulted = probe.call(
        "a request with the fault hook",
        KeyWire::Normal(key.clone()),
        &fields,
    );
    faulted.body = probe.provoked(&fields, hook);
    faulted.extra = hook.headers.clone();
    let seen = probe.send(NAME, &faulted).await;
    let hooked = probe.read(&seen.answer, false);
    // A hook that answered with a success lost the key's record, if anything: the retry is the
    // same request again, as a client sends it, and what it gets is compared at the end with a
    // retry after a plain create. Past a failure, the retry is the request without the hook.
    let retry = if hooked.success {
        let mut again = faulted.clone();
        again.step = "the same request again, under its key".to_owned();
        again
    } else {
        fault_fired(probe, &mut checks, &seen);
        probe.call("the retry without the hook", KeyWire::Normal(key), &fields)
    };
    let settled = probe.send_settled(NAME, &retry).await;
    let retry_read = probe.read(&last(&settled).answer, false);
    checks.add(
        lab26(),
        "the retry succeeds",
        retry_read.success,
        "a success",
        probe.describe(&last(&settled).answer),
        &ids(&settled),
    );
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    checks.add(
        Grade::lab(),
        "the failed attempt and its retry made exactly one effect",
        after - before == 1,
        "one effect",
        stayed_without_record(after - before),
        &[seen.id],
    );
    if retry_read.success {
        let again = probe.send_settled(NAME, &retry).await;
        retry_matches(
            probe,
            &mut checks,
            "a second retry names the same effect",
            &retry_read,
            last(&again),
            lab26(),
        );
    }
    if hooked.success {
        let (seen, retry) = (&seen, last(&settled));
        if let Err(reason) = hook_left_a_trace(probe, NAME, &mut checks, seen, retry).await {
            return PointReport::not_covered(NAME, TITLE, reason);
        }
    }
    PointReport::covered(NAME, TITLE, checks.0)
}

/// A hook that answered with a failure: only a 5xx or no answer shows it fired (a 4xx is the
/// hook refused). When it did not, the point goes on: what the retry then does (a duplicate, a
/// key stuck in progress) is still what a client meets.
fn fault_fired(probe: &Probe, checks: &mut Checks, seen: &Seen) {
    let fired = seen.answer.status().is_none_or(|s| s >= 500);
    checks.add(
        Grade::lab(),
        "the fault hook fired: a 5xx or no answer",
        fired,
        "a 5xx or no answer",
        format!(
            "{}; the point goes on to show what the retry does",
            probe.describe(&seen.answer)
        ),
        &[seen.id],
    );
}

/// Whether a hook that answered with a success left a trace: its request sent again under its
/// key was answered otherwise than a plain create's retry (under a fresh key) is. Then the
/// sub-check saying so goes first; when they were answered alike (both replayed, both made a
/// new effect, both got one status), the hook left nothing a black box can see, and the reason
/// why the point cannot tell is returned.
async fn hook_left_a_trace(
    probe: &Probe,
    name: &'static str,
    checks: &mut Checks,
    seen: &Seen,
    retry: &Seen,
) -> Result<(), String> {
    let hooked = retried(probe, &probe.read(&seen.answer, false), retry);
    let plain = probe.call(
        "a plain create, to compare its retry with the hook's",
        KeyWire::Normal(probe.fresh_key()),
        &probe.fresh_fields(false),
    );
    let first = probe.send(name, &plain).await;
    let read = probe.read(&first.answer, false);
    if !read.success {
        return Err(format!(
            "The hook answered {} and a plain create to compare with was refused ({}), so \
             whether the hook lost the key's record cannot be told.",
            seen.answer.summary(),
            probe.describe(&first.answer)
        ));
    }
    let mut again = plain;
    again.step = "the plain create again, under its key".to_owned();
    let settled = probe.send_settled(name, &again).await;
    let compared = last(&settled);
    let plain_retried = retried(probe, &read, compared);
    let told = format!(
        "the hook's request (#{}, {}) sent again under its key: {} (#{}); a plain create's \
         retry: {} (#{})",
        seen.id,
        seen.answer.summary(),
        retry.answer.summary(),
        retry.id,
        compared.answer.summary(),
        compared.id
    );
    if hooked == Retried::Replayed || hooked == plain_retried {
        return Err(format!(
            "The hook answered with a success, and {told}: answered alike, so the hook left \
             no trace a black box can see, and whether it lost the key's record cannot be \
             told. A hook that answers 5xx (or no answer) after the effect shows that it \
             fired."
        ));
    }
    checks.add(
        Grade::lab(),
        "the fault hook fired: its retry was answered otherwise than a plain create's",
        true,
        "another answer than a plain create's retry gets",
        told,
        &[seen.id, retry.id, first.id, compared.id],
    );
    checks.0.rotate_right(1);
    Ok(())
}
