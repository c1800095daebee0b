//! The hop points: an MCP server that wraps an HTTP API, judged from the API's side.
//!
//! With `[upstream]` in the target file, the lab serves the API the wrapper calls and records
//! every request it sends (see [`super::upstream`]). These points call the wrapper's create tool
//! as an agent would and read what reached the API: whether the key did, in which header and with
//! which value; whether a retry (after a lost result, after the API's own reply was lost, after
//! the wrapper restarted, after an upstream 503 or 429 the wrapper may resend by itself) carried
//! the same key; whether a new intention got a new one; whether calls sent together with one key
//! all reached it under that key and made one effect; whether the API's refusals came back to
//! the agent as errors; whether the body reached the API as the agent sent it. Every upstream
//! request a point rests on is recorded in the run's history beside the tool calls, so the
//! reports show agent, wrapper and API together.

use std::time::Duration;

use regex::Regex;
use serde_json::Value;

use super::both::{Front, Told, count_or_stop, effects, lab26, section, without_key};
use super::history::{Answer, Sent, WRAPPER_TO_API};
use super::points::{Run, run_selected};
use super::probe::same_effect;
use super::report::{Calibration, Checks, Grade, POINT, PointReport, Step as CalibrationStep};
use super::target::Upstream;
use super::upstream::{Fault, UpstreamApi, UpstreamRequest, carries, ticket_id};
use crate::contract::points as registry;
use crate::contract::points::Selection;
use crate::http::proxy::Fate;
use crate::http::wire::{ProblemType, problem as problem_type};

/// Every hop point, in order; none without `[upstream]`.
pub(crate) async fn all<F: Front>(front: &F, selection: &Selection) -> Vec<PointReport> {
    let Some(api) = front.api() else {
        return Vec::new();
    };
    let runs: Vec<Run<'_>> = vec![
        (&registry::HOP_KEY, Box::pin(key(front, api))),
        (&registry::HOP_PAYLOAD, Box::pin(payload(front, api))),
        (&registry::HOP_RETRY, Box::pin(retry(front, api))),
        (&registry::HOP_API_LOST, Box::pin(api_lost(front, api))),
        (&registry::HOP_RESTART, Box::pin(restart(front, api))),
        (
            &registry::HOP_NEW_INTENTION,
            Box::pin(new_intention(front, api)),
        ),
        (&registry::HOP_CONCURRENT, Box::pin(concurrent(front, api))),
        (
            &registry::HOP_UPSTREAM_RETRY,
            Box::pin(upstream_retries(front, api)),
        ),
        (&registry::HOP_ERRORS, Box::pin(errors(front, api))),
    ];
    run_selected(selection, runs).await
}

/// When the calibration stopped on a wrapper whose creates the API refused (400 or 422): the
/// calibration as it stands, and the points that show what the wrapper did to the key. `None`
/// when the API refused nothing, or those points find nothing wrong, so the file is at fault.
pub(crate) async fn when_refused<F: Front>(
    front: &F,
    mismatch: &str,
    selection: &Selection,
) -> Option<(Calibration, Vec<PointReport>)> {
    let api = front.api()?;
    let refused: Vec<UpstreamRequest> = api
        .all()
        .into_iter()
        .filter(|c| c.is_create() && matches!(c.status(), Some(400 | 422)))
        .collect();
    if refused.is_empty() {
        return None;
    }
    let ids: Vec<usize> = refused
        .iter()
        .map(|c| record(front, api, POINT, c))
        .collect();
    let points = vec![
        key(front, api).await,
        new_intention(front, api).await,
        payload(front, api).await,
    ];
    let found = points
        .iter()
        .any(|p| p.checks.iter().any(|c| c.failed() && c.grade.required()));
    if !found {
        return None;
    }
    let mut points = points;
    let reason = "the calibration could not make a create through the wrapper (the API refused \
                  it), so this point, which needs one, did not run"
        .to_owned();
    for point in [
        &registry::HOP_RETRY,
        &registry::HOP_API_LOST,
        &registry::HOP_RESTART,
        &registry::HOP_CONCURRENT,
        &registry::HOP_UPSTREAM_RETRY,
        &registry::HOP_ERRORS,
    ] {
        points.push(PointReport::not_covered(
            point.id,
            point.title,
            reason.clone(),
        ));
    }
    let calibration = Calibration {
        steps: vec![CalibrationStep {
            name: "create",
            field: "[upstream]".to_owned(),
            passed: false,
            detail: format!(
                "{}; at the API: {}",
                super::excerpt::one_line(mismatch),
                lines(api, &refused)
            ),
            exchanges: ids,
        }],
        passed: false,
        wrapper_at_fault: Some(
            "the hop points below show what the wrapper sent it (its key, its body) and what \
             the API answered"
                .to_owned(),
        ),
        ..Calibration::default()
    };
    // These points ran to tell whether the wrapper is at fault; the report keeps the selected.
    points.retain(|point| registry::point(point.name).is_none_or(|p| selection.runs(p)));
    Some((calibration, points))
}

/// One tool call and the creates it made at the API.
struct Hop {
    told: Told,
    creates: Vec<UpstreamRequest>,
    /// The tool call's number in the history, then its creates'.
    ids: Vec<usize>,
}

impl Hop {
    fn key_values(&self, spec: &Upstream) -> Vec<Option<String>> {
        self.creates
            .iter()
            .map(|c| c.keys(spec).into_iter().next())
            .collect()
    }
}

/// Calls the tool (on `session`, or the first caller's own) and collects the creates the
/// wrapper made for it, recorded in the history. Faults no create used are dropped.
async fn through<F: Front>(
    front: &F,
    api: &UpstreamApi,
    point: &'static str,
    session: Option<&F::Session>,
    call: &F::Call,
) -> Hop {
    let mark = api.mark();
    let told = front.send(point, session, call).await;
    api.clear_faults();
    let creates = api.creates_since(mark);
    let mut ids = vec![told.id];
    for create in &creates {
        ids.push(record(front, api, point, create));
    }
    Hop { told, creates, ids }
}

/// Records one upstream create in the history, as the wrapper's exchange with the API.
fn record<F: Front>(
    front: &F,
    api: &UpstreamApi,
    point: &'static str,
    create: &UpstreamRequest,
) -> usize {
    let sent = Sent {
        point,
        step: "the wrapper's request to the API".to_owned(),
        caller: Some(WRAPPER_TO_API.to_owned()),
        key: create.keys(&api.spec).into_iter().next(),
        method: create.method.clone(),
        path: create.target.clone(),
        body: create.body.clone(),
    };
    let answer = match &create.fate {
        Some(Fate::Answered { status, body, .. }) => Answer::Reply {
            status: *status,
            headers: Vec::new(),
            body: String::from_utf8_lossy(body).into_owned(),
        },
        Some(Fate::Lost { status, .. }) => Answer::NoAnswer {
            reason: format!("the API answered {status}; the lab lost the reply on purpose"),
        },
        Some(Fate::Abandoned { status, .. }) => Answer::NoAnswer {
            reason: format!(
                "the API answered {status}; the wrapper closed its connection while the lab held \
                 the reply"
            ),
        },
        Some(Fate::Failed(problem)) => Answer::NoAnswer {
            reason: problem.clone(),
        },
        None => Answer::NoAnswer {
            reason: format!("no answer by the time the {} ended", front.call_word()),
        },
    };
    front.history().record_timed(
        sent,
        answer,
        create.arrived,
        create.took.unwrap_or_default(),
    )
}

fn lines(api: &UpstreamApi, creates: &[UpstreamRequest]) -> String {
    if creates.is_empty() {
        return "no create reached the API".to_owned();
    }
    creates
        .iter()
        .map(|c| c.describe(&api.spec))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The keys the creates carried, as the API got them (`no key` for a create without one), for a
/// reader: never Rust's debug form.
fn key_list(keys: &[Option<String>]) -> String {
    if keys.is_empty() {
        return "no create".to_owned();
    }
    keys.iter()
        .map(|key| key.clone().unwrap_or_else(|| "no key".to_owned()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A point that needs a key, on a tool that takes none: it cannot pass, and `hop-key` shows why.
fn cannot<F: Front>(front: &F, name: &'static str, title: &'static str) -> Option<PointReport> {
    without_key(
        front,
        (name, title),
        " to pass on to the API",
        "the API cannot tell a retry from a new call (hop-key shows the creates)",
    )
}

/// The two sub-checks a retried intention ends with: every create of it carried the agent's key,
/// and it made one effect in all (`delta`, the count's change since before its first call).
fn kept_and_once(
    checks: &mut Checks,
    api: &UpstreamApi,
    hops: &[&Hop],
    key: &str,
    (keys, once): (&str, &str),
    delta: i64,
) {
    keys_carried(checks, api, hops, key, keys);
    checks.add(
        lab26(),
        once,
        delta == 1,
        "one effect in all",
        effects(delta),
        &hops.last().map(|h| h.ids.clone()).unwrap_or_default(),
    );
}

/// Adds "every create carries the agent's key" and returns whether it held.
fn keys_carried(
    checks: &mut Checks,
    api: &UpstreamApi,
    hops: &[&Hop],
    key: &str,
    what: &str,
) -> bool {
    let place = api.spec.key_place();
    // Each create with its number in the history (a hop's ids are its call's, then its creates').
    let creates: Vec<(usize, &UpstreamRequest)> = hops
        .iter()
        .flat_map(|h| h.ids.iter().skip(1).copied().zip(&h.creates))
        .collect();
    let ids: Vec<usize> = hops.iter().flat_map(|h| h.ids.iter().copied()).collect();
    let all = !creates.is_empty()
        && creates.iter().all(|(_, c)| {
            let values = c.keys(&api.spec);
            values.len() == 1 && carries(&values[0], key)
        });
    let observed = creates
        .iter()
        .map(|(id, c)| match c.keys(&api.spec).as_slice() {
            [] => match super::upstream::found_elsewhere(c, key) {
                Some((_, there)) => format!(
                    "#{id}: no key in {place}; the agent's key was in {there}, where the API \
                     does not read it"
                ),
                None => format!("#{id}: no key in {place}"),
            },
            values => format!("#{id}: {}", values.join(", ")),
        })
        .collect::<Vec<_>>();
    checks.add(
        Grade::lab_over_should(section::UNIQUENESS),
        what,
        all,
        format!("{place}: {key} on every create"),
        if observed.is_empty() {
            "no create reached the API".to_owned()
        } else {
            observed.join("; ")
        },
        &ids,
    )
}

/// A tool without a key, called twice with the same arguments as an agent retries: the creates
/// the API got are the evidence that it cannot be retried safely.
async fn no_key_evidence<F: Front>(front: &F, api: &UpstreamApi, checks: &mut Checks, before: i64) {
    let point = registry::HOP_KEY.id;
    let place = api.spec.key_place();
    let fields = front.fresh_fields();
    let call = front.unkeyed_call("the call", &fields);
    let first = through(front, api, point, None, &call).await;
    let again = front.again(&call, "the agent's retry, the same arguments", None);
    let second = through(front, api, point, None, &again).await;
    let after = front.count().await.unwrap_or(before);
    let creates: Vec<&UpstreamRequest> = first.creates.iter().chain(&second.creates).collect();
    let identical = creates.len() == 2
        && creates[0].body == creates[1].body
        && creates.iter().all(|c| c.keys(&api.spec).is_empty());
    let ids: Vec<usize> = first.ids.iter().chain(&second.ids).copied().collect();
    checks.add(
        Grade::lab(),
        format!(
            "{} takes a key, so a retry can be told from a new call at the API",
            front.subject()
        ),
        false,
        format!("an argument the wrapper sends as {place}"),
        if identical {
            format!(
                "unsafe to retry: the same call twice sent two byte-identical creates \
                 without a key in {place}, and made {}: {}",
                effects(after - before),
                lines(api, &creates.into_iter().cloned().collect::<Vec<_>>())
            )
        } else {
            format!(
                "{} takes no key; the same call twice made {}: {}",
                front.create_name(),
                effects(after - before),
                lines(api, &creates.into_iter().cloned().collect::<Vec<_>>())
            )
        },
        &ids,
    );
}

async fn key<F: Front>(front: &F, api: &UpstreamApi) -> PointReport {
    const NAME: &str = registry::HOP_KEY.id;
    const TITLE: &str = registry::HOP_KEY.title;
    let mut checks = Checks::new();
    let place = api.spec.key_place();
    let before = count_or_stop!(front, checks, NAME, TITLE);
    if !front.keyed() {
        // No key at all: what a retry does at the API is the evidence.
        no_key_evidence(front, api, &mut checks, before).await;
        return PointReport::covered(NAME, TITLE, checks.0);
    }
    if let Some((name, listed, expected, observed)) = front.key_listed() {
        checks.add(Grade::lab(), name, listed, expected, observed, &[]);
    }
    let call = front.keyed_call("a new intention", &front.fresh_fields());
    let hop = through(front, api, NAME, None, &call).await;
    let after = count_or_stop!(front, checks, NAME, TITLE);
    checks.add(
        Grade::lab(),
        format!("one {}, one create at the API", front.call_word()),
        hop.creates.len() == 1 && after - before == 1,
        "one create, one effect",
        format!(
            "{} create(s), {}: {}",
            hop.creates.len(),
            effects(after - before),
            lines(api, &hop.creates)
        ),
        &hop.ids,
    );
    keys_carried(
        &mut checks,
        api,
        &[&hop],
        &front.key_of(&call),
        &format!("the create carries the agent's key in {place}, unchanged"),
    );
    checks.add(
        Grade::lab(),
        "the agent is told what was created",
        hop.told.success && hop.told.identity.is_some(),
        format!("{} naming the effect", front.result_word()),
        hop.told.described.clone(),
        &[hop.told.id],
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

/// The body the API should get for `call`, its key member aside: its arguments without the key,
/// or the member `upstream.body_argument` names.
fn expected_body<F: Front>(front: &F, api: &UpstreamApi, call: &F::Call) -> Option<Value> {
    let arguments = front.sent_body(call);
    let mut body = if api.spec.body_argument.is_empty() {
        arguments
    } else {
        arguments.pointer(&api.spec.body_argument).cloned()?
    };
    if let Some(pointer) = &api.spec.key_pointer {
        super::upstream::take_pointer(&mut body, pointer);
    }
    Some(body)
}

async fn payload<F: Front>(front: &F, api: &UpstreamApi) -> PointReport {
    const NAME: &str = registry::HOP_PAYLOAD.id;
    const TITLE: &str = registry::HOP_PAYLOAD.title;
    if let Some(report) = cannot(front, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let call = front.keyed_call("a new intention", &front.fresh_fields());
    let first = through(front, api, NAME, None, &call).await;
    let again = front.again(&call, "the agent's retry, the same arguments", None);
    let second = through(front, api, NAME, None, &again).await;
    let Some(create) = first.creates.first() else {
        checks.add(
            Grade::lab(),
            "the call reaches the API",
            false,
            "a create",
            first.told.described.clone(),
            &first.ids,
        );
        return PointReport::covered(NAME, TITLE, checks.0);
    };
    let expected = expected_body(front, api, &call);
    let got = create.payload(&api.spec);
    checks.add(
        Grade::should(section::ENFORCEMENT),
        "the API gets the agent's fields as its body, not re-wrapped or re-encoded",
        expected.is_some() && expected == got,
        match &expected {
            Some(value) => format!("the body {value}"),
            None => format!(
                "nothing at upstream.body_argument {:?} in the arguments",
                api.spec.body_argument
            ),
        },
        format!(
            "#{}: {}",
            first.ids.get(1).copied().unwrap_or_default(),
            create.body
        ),
        &first.ids,
    );
    let parsed: Vec<Option<Value>> = first
        .creates
        .iter()
        .chain(&second.creates)
        .map(|c| c.payload(&api.spec))
        .collect();
    let same = parsed.len() >= 2 && parsed.iter().all(|p| p.is_some() && *p == parsed[0]);
    let ids: Vec<usize> = first.ids.iter().chain(&second.ids).copied().collect();
    checks.add(
        lab26(),
        "the retry's body means what the first call's did, so the API replays it",
        same,
        "the same JSON on every create of the intention",
        lines(
            api,
            &first
                .creates
                .iter()
                .chain(&second.creates)
                .cloned()
                .collect::<Vec<_>>(),
        ),
        &ids,
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

async fn retry<F: Front>(front: &F, api: &UpstreamApi) -> PointReport {
    const NAME: &str = registry::HOP_RETRY.id;
    const TITLE: &str = registry::HOP_RETRY.title;
    if let Some(report) = cannot(front, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let before = count_or_stop!(front, checks, NAME, TITLE);
    let call = front.keyed_call(
        "the call whose result the agent loses",
        &front.fresh_fields(),
    );
    let first = through(front, api, NAME, None, &call).await;
    let after_first = count_or_stop!(front, checks, NAME, TITLE);
    let fired = checks.add(
        Grade::lab(),
        "the fault fired: the first call made its effect at the API, its result then discarded",
        after_first - before == 1,
        "one effect",
        format!(
            "{}: {}",
            effects(after_first - before),
            lines(api, &first.creates)
        ),
        &first.ids,
    );
    if !fired {
        return PointReport::covered(NAME, TITLE, checks.0);
    }
    let again = front.again(&call, "the agent's retry, the same key and arguments", None);
    let second = through(front, api, NAME, None, &again).await;
    let after = count_or_stop!(front, checks, NAME, TITLE);
    kept_and_once(
        &mut checks,
        api,
        &[&first, &second],
        &front.key_of(&call),
        (
            "the retry's create carries the same key as the first's",
            "the retry made no second effect at the API",
        ),
        after - before,
    );
    let expected = first.told.identity.as_deref().unwrap_or("none");
    checks.add(
        lab26(),
        "the agent's retry is told of the first call's effect",
        second.told.success && same_effect(&second.told.identity, &first.told.identity),
        format!("{} naming {expected}", front.result_word()),
        second.told.described.clone(),
        &[first.told.id, second.told.id],
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

/// The words by which an error says that the outcome is unknown, or names the failure that
/// makes it so (a lost connection, a timeout): not an empty text, not a bare "please retry".
fn says_unknown(text: &str) -> bool {
    static WORDS: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    WORDS
        .get_or_init(|| {
            Regex::new(
                r"(?i)unknown|may (or may not )?have|might have|uncertain|not (be )?sure|hang ?up|closed|reset|disconnect|timed?[ -]?out|timeout|no (reply|response)|connection|eof|broken pipe|aborted|socket|unreachable",
            )
            .expect("a valid regex")
        })
        .is_match(text)
}

/// Whether the identity a wrapper returned names the id the API committed: the same text, or
/// the same digits in another API's form (`msg_7` for `7`, when `[upstream.create].answer` says
/// so).
fn names_id(identity: Option<&str>, committed: Option<&str>) -> bool {
    let (Some(identity), Some(committed)) = (identity, committed) else {
        return false;
    };
    identity == committed
        || identity
            .chars()
            .filter(char::is_ascii_digit)
            .collect::<String>()
            == committed
}

/// What the agent is told when the API's reply to the wrapper is lost: a success that names the
/// committed effect (the wrapper resent and got the replay), or an error with a text that says
/// the outcome is unknown. Returns whether it was told a success.
fn judge_what_the_agent_is_told<F: Front>(
    front: &F,
    checks: &mut Checks,
    first: &Hop,
    committed: Option<&str>,
) -> bool {
    let read = &first.told;
    let told_success = read.success && !read.refused;
    if told_success {
        // The wrapper resent by itself and got the API's replay: a success is true only if it
        // names the effect the API committed.
        checks.add(
            lab26(),
            "a success names the effect the API committed, never another",
            names_id(read.identity.as_deref(), committed),
            format!(
                "{} naming {}",
                front.result_word(),
                committed.unwrap_or("the committed ticket")
            ),
            first.told.described.clone(),
            &first.ids,
        );
    } else {
        let text = first.told.text.clone();
        let has_text = !text.trim().is_empty();
        checks.add(
            Grade::lab(),
            "the agent is told something: the error has a text",
            has_text,
            "a text",
            if has_text {
                "a text".to_owned()
            } else {
                format!("{} with an empty text", first.told.answer.summary())
            },
            &[first.told.id],
        );
        checks.add(
            Grade::should(section::ERRORS),
            "the error says the outcome is unknown, or names the failure that makes it so",
            says_unknown(&text),
            "a text naming a lost connection, a timeout or an unknown outcome",
            if text.trim().is_empty() {
                format!("{} with an empty text", first.told.answer.summary())
            } else {
                format!("{:?}", super::excerpt::trimmed(&text, 200))
            },
            &[first.told.id],
        );
    }
    told_success
}

/// Adds "the fault fired" for a lost API reply and returns whether it did (`fired`; `delta`
/// is the count's rise). When it fired, the observed names what shows it: the create whose
/// reply the lab lost. Other creates of the call (a wrapper's resend) are graded by the
/// sub-checks that count effects; printed here, they made a passed sub-check read as a second
/// effect (issue 46).
fn lost_reply_fired(
    checks: &mut Checks,
    api: &UpstreamApi,
    first: &Hop,
    fired: bool,
    delta: i64,
) -> bool {
    let lost: Vec<UpstreamRequest> = first
        .creates
        .iter()
        .filter(|c| matches!(c.fate, Some(Fate::Lost { .. })))
        .cloned()
        .collect();
    checks.add(
        Grade::lab(),
        "the fault fired: the API committed the create and the lab lost its reply",
        fired,
        "an effect, its reply lost on the way to the wrapper",
        if fired {
            format!("the count rose; {}", lines(api, &lost))
        } else {
            format!("{}: {}", effects(delta), lines(api, &first.creates))
        },
        &first.ids,
    )
}

async fn api_lost<F: Front>(front: &F, api: &UpstreamApi) -> PointReport {
    const NAME: &str = registry::HOP_API_LOST.id;
    const TITLE: &str = registry::HOP_API_LOST.title;
    if let Some(report) = cannot(front, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let before = count_or_stop!(front, checks, NAME, TITLE);
    api.fault_next(Fault::LoseReply);
    let call = front.keyed_call("the call whose API reply is lost", &front.fresh_fields());
    let first = through(front, api, NAME, None, &call).await;
    let after_first = count_or_stop!(front, checks, NAME, TITLE);
    let committed = first.creates.iter().find_map(|c| match &c.fate {
        Some(Fate::Lost { body, .. }) => Some(ticket_id(body)),
        _ => None,
    });
    let fired = lost_reply_fired(
        &mut checks,
        api,
        &first,
        committed.is_some() && after_first > before,
        after_first - before,
    );
    if !fired {
        return PointReport::covered(NAME, TITLE, checks.0);
    }
    let committed = committed.flatten();
    let told_success =
        judge_what_the_agent_is_told(front, &mut checks, &first, committed.as_deref());
    let mut hops = vec![first];
    if !told_success {
        let again = front.again(&call, "the agent's retry, the same key and arguments", None);
        hops.push(through(front, api, NAME, None, &again).await);
    }
    let after = count_or_stop!(front, checks, NAME, TITLE);
    kept_and_once(
        &mut checks,
        api,
        &hops.iter().collect::<Vec<_>>(),
        &front.key_of(&call),
        (
            "every create of the intention carries the agent's key, resends included",
            "no second effect at the API",
        ),
        after - before,
    );
    if let Some(retry) = hops.get(1) {
        checks.add(
            lab26(),
            "the agent's retry is told of the effect the API committed",
            retry.told.success && names_id(retry.told.identity.as_deref(), committed.as_deref()),
            format!(
                "{} naming {}",
                front.result_word(),
                committed.as_deref().unwrap_or("the committed ticket")
            ),
            retry.told.described.clone(),
            &retry.ids,
        );
    }
    PointReport::covered(NAME, TITLE, checks.0)
}

/// The restart point's words: a process ended and started again, or (where the check cannot
/// end the wrapper's process: an MCP server over HTTP it did not start) a session closed and a
/// new one opened, said as such, since a key kept in the process survives it.
struct RestartWords {
    retry: &'static str,
    fired: &'static str,
    gone: &'static str,
    kept: &'static str,
}

const PROCESS_RESTART: RestartWords = RestartWords {
    retry: "the agent's retry on the restarted wrapper",
    fired: "the fault fired: the first call made its effect, then the wrapper ended",
    gone: "one effect, then the wrapper gone",
    kept: "the retry through the restarted wrapper carries the same key",
};

const SESSION_RESTART: RestartWords = RestartWords {
    retry: "the agent's retry on a new session",
    fired: "the fault fired: the first call made its effect, then its session ended",
    gone: "one effect, then the session closed",
    kept: "the retry on the new session carries the same key",
};

async fn restart<F: Front>(front: &F, api: &UpstreamApi) -> PointReport {
    const NAME: &str = registry::HOP_RESTART.id;
    let words = if front.restarts_process() {
        PROCESS_RESTART
    } else {
        SESSION_RESTART
    };
    let title = registry::HOP_RESTART.title;
    if let Some(report) = cannot(front, NAME, title) {
        return report;
    }
    if let Some(reason) = front.cannot_restart() {
        return PointReport::not_covered(NAME, title, reason);
    }
    let mut checks = Checks::new();
    let before = count_or_stop!(front, checks, NAME, title);
    let call = front.keyed_call("the call before the restart", &front.fresh_fields());
    let mut hops = Vec::new();
    for round in 0..2 {
        let session = match front.open().await {
            Ok(session) => session,
            Err(problem) => {
                checks.add(
                    Grade::lab(),
                    "a new session of the wrapper opens",
                    false,
                    "a session",
                    problem,
                    &[],
                );
                return PointReport::covered(NAME, title, checks.0);
            }
        };
        let this = if round == 1 {
            front.again(&call, words.retry, None)
        } else {
            call.clone()
        };
        hops.push(through(front, api, NAME, Some(&session), &this).await);
        let ended = front.close(session).await;
        if round == 0 {
            let after_first = count_or_stop!(front, checks, NAME, title);
            let fired = checks.add(
                Grade::lab(),
                words.fired,
                after_first - before == 1 && !ended.contains("still running"),
                words.gone,
                format!("{}; {ended}", effects(after_first - before)),
                &hops[0].ids,
            );
            if !fired {
                return PointReport::covered(NAME, title, checks.0);
            }
        }
    }
    let after = count_or_stop!(front, checks, NAME, title);
    kept_and_once(
        &mut checks,
        api,
        &hops.iter().collect::<Vec<_>>(),
        &front.key_of(&call),
        (words.kept, "the retry made no second effect at the API"),
        after - before,
    );
    PointReport::covered(NAME, title, checks.0)
}

async fn new_intention<F: Front>(front: &F, api: &UpstreamApi) -> PointReport {
    const NAME: &str = registry::HOP_NEW_INTENTION.id;
    const TITLE: &str = registry::HOP_NEW_INTENTION.title;
    if let Some(report) = cannot(front, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let before = count_or_stop!(front, checks, NAME, TITLE);
    let fields = front.fresh_fields();
    let first_call = front.keyed_call("the first intention", &fields);
    let second_call = front.keyed_call("a second intention, the same fields, a new key", &fields);
    let first = through(front, api, NAME, None, &first_call).await;
    let second = through(front, api, NAME, None, &second_call).await;
    let after = count_or_stop!(front, checks, NAME, TITLE);
    keys_carried(
        &mut checks,
        api,
        &[&first],
        &front.key_of(&first_call),
        "the first intention's create carries its key",
    );
    keys_carried(
        &mut checks,
        api,
        &[&second],
        &front.key_of(&second_call),
        "the second intention's create carries its own key, not the first's",
    );
    let (a, b) = (first.key_values(&api.spec), second.key_values(&api.spec));
    let ids: Vec<usize> = first.ids.iter().chain(&second.ids).copied().collect();
    checks.add(
        Grade::lab_over_should(section::UNIQUENESS),
        "the two intentions reach the API under two keys",
        !a.is_empty() && !b.is_empty() && a.iter().all(|k| k.is_some() && !b.contains(k)),
        "two different keys",
        format!("{} then {}", key_list(&a), key_list(&b)),
        &ids,
    );
    checks.add(
        Grade::lab(),
        "two intentions, two effects",
        after - before == 2,
        "two effects",
        effects(after - before),
        &ids,
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

/// Waits until `done` holds of the API's requests since `mark` and of the number of calls back at
/// the check (`returned`), looked at again each time a request arrives at the API or settles, or
/// a call returns; `false` when `bound` runs out first. The events order the hop points' faults,
/// so that a loaded machine delays a verdict instead of changing it; `bound` only ends a run
/// whose wrapper never shows the event.
async fn wait_on(
    api: &UpstreamApi,
    mark: usize,
    mut returned: tokio::sync::watch::Receiver<usize>,
    bound: Duration,
    done: impl Fn(&[UpstreamRequest], usize) -> bool,
) -> bool {
    let mut seen = api.changes();
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        // Marked seen before looking, so a change while `done` looks wakes the next wait.
        seen.borrow_and_update();
        let back = *returned.borrow_and_update();
        if done(&api.since(mark), back) {
            return true;
        }
        tokio::select! {
            _ = seen.changed() => {}
            // A dropped sender disables this branch for the wait; the API's events still wake it.
            Ok(()) = returned.changed() => {}
            () = tokio::time::sleep_until(deadline) => return false,
        }
    }
}

/// The first create since a mark (the one a queued fault applied to), and the others.
fn held_and_others(
    requests: &[UpstreamRequest],
) -> (Option<&UpstreamRequest>, Vec<&UpstreamRequest>) {
    let mut creates = requests.iter().filter(|r| r.is_create());
    (creates.next(), creates.collect())
}

/// Sends `calls` together with the first create's reply held until the others reached the API
/// or came back (at most `bound`); returns what each was told and the mark before them.
async fn send_held_together<F: Front>(
    front: &F,
    api: &UpstreamApi,
    point: &'static str,
    calls: &[F::Call],
    bound: Duration,
) -> (Vec<Told>, usize) {
    let release = api.hold_next(
        "the other calls sent together had reached the API or come back",
        bound,
    );
    let (back, returned) = tokio::sync::watch::channel(0_usize);
    let mark = api.mark();
    let others = calls.len() - 1;
    let sends = futures::future::join_all(calls.iter().map(|c| {
        let back = &back;
        async move {
            let told = front.send(point, None, c).await;
            back.send_modify(|n| *n += 1);
            told
        }
    }));
    let together_seen = async {
        let seen = wait_on(api, mark, returned, bound, |requests, returned| {
            let (held, others_creates) = held_and_others(requests);
            // A create still waiting at the API is a call not back yet; one that settled is
            // counted when its call comes back, so no call is counted twice.
            let waiting = others_creates.iter().filter(|c| c.fate.is_none()).count();
            held.is_some_and(|h| h.fate.is_some()) || returned + waiting >= others
        })
        .await;
        let _ = release.send(true);
        seen
    };
    let (told, seen) = tokio::join!(sends, together_seen);
    api.clear_faults();
    if !seen && let (Some(held), _) = held_and_others(&api.since(mark)) {
        api.annotate(
            held.number,
            &format!(
                "the bound ended the hold: after {} ms the other calls had neither reached the \
                 API nor come back, so the wrapper held them back while one was in flight, and \
                 they were judged as calls one after another",
                bound.as_millis()
            ),
        );
    }
    (told, mark)
}

async fn concurrent<F: Front>(front: &F, api: &UpstreamApi) -> PointReport {
    const NAME: &str = registry::HOP_CONCURRENT.id;
    const TITLE: &str = registry::HOP_CONCURRENT.title;
    if let Some(report) = cannot(front, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let before = count_or_stop!(front, checks, NAME, TITLE);
    let together = front.together().max(2);
    let call = front.keyed_call("the intention sent together", &front.fresh_fields());
    let calls: Vec<F::Call> = (1..=together)
        .map(|i| {
            front.again(
                &call,
                &format!("call {i} of {together}, sent together"),
                None,
            )
        })
        .collect();
    // The first create's reply is held until every other call has reached the API (its create
    // waiting there) or come back to the check, so they were in flight together whatever the
    // machine's speed. The bound only ends the hold for a wrapper that holds the others back while
    // one is in flight; it stays under half the wrapper's own timeout, when the file names it
    // (the point is calls in flight together, not a late reply: hop-upstream-retry's), and under
    // half the check's, so the calls queued behind it still get their answers in time.
    let bound = api
        .spec
        .wrapper_timeout
        .unwrap_or(Duration::MAX)
        .min(front.call_timeout())
        / 2;
    let (told, mark) = send_held_together(front, api, NAME, &calls, bound).await;
    let creates = api.creates_since(mark);
    let create_ids: Vec<usize> = creates
        .iter()
        .map(|c| record(front, api, NAME, c))
        .collect();
    let after = count_or_stop!(front, checks, NAME, TITLE);
    // One hop for the lot: the creates cannot be told apart by the call that made them.
    let all = Hop {
        told: told[0].clone(),
        creates,
        ids: std::iter::once(told[0].id).chain(create_ids).collect(),
    };
    let ids: Vec<usize> = told
        .iter()
        .map(|t| t.id)
        .chain(all.ids.iter().skip(1).copied())
        .collect();
    kept_and_once(
        &mut checks,
        api,
        &[&all],
        &front.key_of(&call),
        (
            "every create of the calls sent together carries the agent's key",
            "the calls sent together made one effect at the API",
        ),
        after - before,
    );
    judge_together(front, &mut checks, &told, &all, &ids);
    PointReport::covered(NAME, TITLE, checks.0)
}

/// What the calls sent together were told: every success names the one effect the API committed,
/// and a call that was not told a success gets an error with a text (the API's in-progress answer
/// passed on, which the agent retries).
fn judge_together<F: Front>(
    front: &F,
    checks: &mut Checks,
    told: &[Told],
    all: &Hop,
    ids: &[usize],
) {
    let committed: Vec<String> = all
        .creates
        .iter()
        .filter_map(|c| match &c.fate {
            Some(
                Fate::Answered {
                    status: 200 | 201,
                    body,
                    ..
                }
                | Fate::Lost {
                    status: 200 | 201,
                    body,
                    ..
                }
                | Fate::Abandoned {
                    status: 200 | 201,
                    body,
                    ..
                },
            ) => ticket_id(body),
            _ => None,
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let successes: Vec<&Told> = told.iter().filter(|t| t.success && !t.refused).collect();
    let one = committed.len() <= 1
        && successes
            .iter()
            .all(|t| names_id(t.identity.as_deref(), committed.first().map(String::as_str)));
    checks.add(
        lab26(),
        "every call told a success is told of the one effect the API committed",
        one,
        format!(
            "{} naming {}",
            front.result_word(),
            committed
                .first()
                .map_or("the one committed ticket", String::as_str)
        ),
        told.iter()
            .map(|t| format!("#{}: {}", t.id, t.described))
            .collect::<Vec<_>>()
            .join("; "),
        ids,
    );
    let silent: Vec<String> = told
        .iter()
        .filter(|t| (t.refused || !t.success) && t.text.trim().is_empty())
        .map(|t| format!("#{}: {}", t.id, t.answer.summary()))
        .collect();
    checks.add(
        Grade::lab(),
        "a call not told a success is told an error with a text",
        silent.is_empty(),
        "a success, or an error with a text",
        if silent.is_empty() {
            format!("{} of {} told a success", successes.len(), told.len())
        } else {
            format!("{} with an empty text", silent.join("; "))
        },
        ids,
    );
}

/// A problem document as the lab's API sends it (RFC 9457); `about:blank` for a status its
/// contract has no type of (429).
fn problem(status: u16, kind: Option<ProblemType>, title: &str) -> String {
    serde_json::json!({
        "type": kind.map_or_else(|| "about:blank".to_owned(), |k| k.uri()),
        "title": kind.map_or(title, |k| k.title),
        "status": status,
        "detail": "answered by the lab, which plays the API here",
    })
    .to_string()
}

/// Whether the wrapper resent a create the API first answered `status`, with the sub-check that
/// says what the agent was told: the effect, after a resend; that the call failed, without one.
fn judge_resends<F: Front>(front: &F, checks: &mut Checks, first: &Hop, status: &str) -> bool {
    let resends = first.creates.len().saturating_sub(1);
    let read = &first.told;
    if resends == 0 {
        checks.add(
            Grade::lab(),
            format!("the wrapper did not resend the {status}: the agent is told the call failed"),
            read.refused || !read.success,
            "an error result",
            first.told.described.clone(),
            &first.ids,
        );
        return false;
    }
    checks.add(
        Grade::lab(),
        format!(
            "the wrapper resent the {status} by itself ({}), and the agent is told what was \
             created",
            if resends == 1 {
                "once".to_owned()
            } else {
                format!("{resends} times")
            }
        ),
        read.success && read.identity.is_some(),
        format!("{} naming the effect", front.result_word()),
        first.told.described.clone(),
        &first.ids,
    );
    true
}

async fn upstream_retries<F: Front>(front: &F, api: &UpstreamApi) -> PointReport {
    const NAME: &str = registry::HOP_UPSTREAM_RETRY.id;
    const TITLE: &str = registry::HOP_UPSTREAM_RETRY.title;
    if let Some(report) = cannot(front, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let cases = [
        (
            503,
            Some(problem_type::OVERLOADED),
            "Service Unavailable",
            "0",
        ),
        (429, None, "Too Many Requests", "1"),
    ];
    if let Some(timeout) = api.spec.wrapper_timeout {
        late(front, api, NAME, &mut checks, timeout).await;
    }
    for (status, kind, title, retry_after) in cases {
        let before = count_or_stop!(front, checks, NAME, TITLE);
        api.fault_next(Fault::Answer {
            status,
            headers: vec![
                (
                    "content-type".to_owned(),
                    "application/problem+json".to_owned(),
                ),
                ("retry-after".to_owned(), retry_after.to_owned()),
            ],
            body: problem(status, kind, title),
            name: title.to_owned(),
        });
        let call = front.keyed_call(
            &format!("the call the API first answers {status}"),
            &front.fresh_fields(),
        );
        let first = through(front, api, NAME, None, &call).await;
        let resent = judge_resends(front, &mut checks, &first, &status.to_string());
        let mut hops = vec![first];
        if !resent {
            let again = front.again(
                &call,
                &format!("the agent's retry after the {status}"),
                None,
            );
            hops.push(through(front, api, NAME, None, &again).await);
        }
        let after = count_or_stop!(front, checks, NAME, TITLE);
        kept_and_once(
            &mut checks,
            api,
            &hops.iter().collect::<Vec<_>>(),
            &front.key_of(&call),
            (
                &format!(
                    "every create after the {status}, the wrapper's resends and the agent's \
                     retry, carries the agent's key"
                ),
                &format!("one effect for the intention the API first answered {status}"),
            ),
            after - before,
        );
    }
    PointReport::covered(NAME, TITLE, checks.0)
}

/// The count now, or `None` after a failed sub-check saying it could not be read.
async fn count_or_note<F: Front>(front: &F, checks: &mut Checks) -> Option<i64> {
    match front.count().await {
        Ok(n) => Some(n),
        Err(problem) => {
            checks.add(
                Grade::lab(),
                "the API's tickets can be counted",
                false,
                "a count",
                problem,
                &[],
            );
            None
        }
    }
}

/// How long a released hold may take to settle: the proxy passes the reply on, or hears that the
/// wrapper closed its connection. A guard only.
const HOLD_SETTLES: Duration = Duration::from_secs(30);

/// Sends `call` with its create's reply held until the wrapper gave up on it (at most halfway
/// between its `timeout` and the check's), then waits for the held reply to settle.
async fn send_held_late<F: Front>(
    front: &F,
    api: &UpstreamApi,
    point: &'static str,
    call: &F::Call,
    timeout: Duration,
) -> Hop {
    // Held until the wrapper shows it gave up: it closed its connection to the API, sent another
    // create, or answered the agent; a wrapper that wakes late at its timeout still meets a held
    // reply. The bound, halfway between the wrapper's timeout and the check's, only ends the hold
    // for a wrapper that waits on: it then gets the reply, and the check still gets its answer.
    let bound = timeout + front.call_timeout().saturating_sub(timeout) / 2;
    let release = api.hold_next(
        "the wrapper gave up on it (closed its connection, sent another create, or answered the \
         agent)",
        bound,
    );
    let (back, returned) = tokio::sync::watch::channel(0_usize);
    let mark = api.mark();
    let sent = async {
        let hop = through(front, api, point, None, call).await;
        back.send_modify(|n| *n += 1);
        hop
    };
    let gave_up = async {
        let seen = wait_on(api, mark, returned, bound, |requests, returned| {
            let (held, others) = held_and_others(requests);
            returned > 0 || held.is_some_and(|h| h.fate.is_some()) || !others.is_empty()
        })
        .await;
        let _ = release.send(true);
        seen
    };
    let (first, gave_up) = tokio::join!(sent, gave_up);
    if let Some(held) = first.creates.first() {
        if !gave_up {
            api.annotate(
                held.number,
                &format!(
                    "the bound ended the hold: after {} ms the wrapper had not given up, so it got \
                     the reply",
                    bound.as_millis()
                ),
            );
        }
        // The held reply gone out or abandoned, so the next call meets an idle API.
        let (_, nobody) = tokio::sync::watch::channel(0_usize);
        wait_on(api, mark, nobody, HOLD_SETTLES, |requests, _| {
            held_and_others(requests).0.is_none_or(|h| h.fate.is_some())
        })
        .await;
    }
    first
}

/// The API does the work and answers past the wrapper's own timeout (`upstream.wrapper_timeout_ms`):
/// a resend by the wrapper keeps the key; without one, the agent is told, and its retry with the
/// key names the one effect.
async fn late<F: Front>(
    front: &F,
    api: &UpstreamApi,
    point: &'static str,
    checks: &mut Checks,
    timeout: Duration,
) {
    let Some(before) = count_or_note(front, checks).await else {
        return;
    };
    let call = front.keyed_call(
        "the call whose API reply comes past the wrapper's timeout",
        &front.fresh_fields(),
    );
    let first = send_held_late(front, api, point, &call, timeout).await;
    let resends = first.creates.len().saturating_sub(1);
    let read = first.told.clone();
    let mut hops = vec![first];
    if resends == 0 && read.success {
        checks.add(
            Grade::lab(),
            "the wrapper waited for the late reply: the agent is told what was created",
            read.identity.is_some(),
            format!("{} naming the effect", front.result_word()),
            hops[0].told.described.clone(),
            &hops[0].ids,
        );
    } else if resends == 0 {
        let text = hops[0].told.text.clone();
        checks.add(
            Grade::should(section::ERRORS),
            "the wrapper gave up at its timeout: the error says the outcome is unknown, or \
             names the timeout",
            says_unknown(&text),
            "a text naming a timeout or an unknown outcome",
            format!("{:?}", super::excerpt::trimmed(&text, 200)),
            &hops[0].ids,
        );
        let again = front.again(&call, "the agent's retry after the timeout", None);
        hops.push(through(front, api, point, None, &again).await);
    }
    let Some(after) = count_or_note(front, checks).await else {
        return;
    };
    kept_and_once(
        checks,
        api,
        &hops.iter().collect::<Vec<_>>(),
        &front.key_of(&call),
        (
            "every create after the late reply, the wrapper's resends and the agent's retry, \
             carries the agent's key",
            "one effect for the intention whose API reply came late",
        ),
        after - before,
    );
}

/// The API's `422` for a changed payload under one key: it must reach the agent as an error,
/// with the API's text.
async fn conflict_reaches_agent<F: Front>(
    front: &F,
    api: &UpstreamApi,
    point: &'static str,
    checks: &mut Checks,
) {
    match front.changes(&front.fresh_fields()).into_iter().next() {
        None => {
            checks.add(
                Grade::should(section::ERRORS),
                format!(
                    "a changed payload can be sent ({} names a field)",
                    front.vary_field()
                ),
                false,
                "a field the check may change",
                format!(
                    "{} names none, so the API's 422 cannot be provoked",
                    front.vary_field()
                ),
                &[],
            );
        }
        Some(change) => {
            let call = front.keyed_call("the first call", &change.first);
            let first = through(front, api, point, None, &call).await;
            let changed = front.again(
                &call,
                &format!("the same key, {}", change.what),
                Some(change.changed),
            );
            let second = through(front, api, point, None, &changed).await;
            let refused_by_api = second.creates.iter().any(|c| c.status() == Some(422));
            let ids: Vec<usize> = first.ids.iter().chain(&second.ids).copied().collect();
            let fired = checks.add(
                Grade::lab(),
                "the fault fired: the API refused the changed payload with 422",
                refused_by_api,
                "a 422 at the API",
                lines(api, &second.creates),
                &ids,
            );
            if fired {
                let read = &second.told;
                checks.add(
                    Grade::lab_over_should(section::ERRORS),
                    "the agent gets the 422 as an error, never as a success",
                    read.refused || !read.success,
                    "an error result",
                    second.told.described.clone(),
                    &ids,
                );
                let text = second.told.text.clone();
                checks.add(
                    Grade::should(section::ERRORS),
                    "the error's text tells the agent what the API said",
                    !text.trim().is_empty(),
                    "a text",
                    if text.trim().is_empty() {
                        "an empty text".to_owned()
                    } else {
                        format!("{:?}", super::excerpt::trimmed(&text, 200))
                    },
                    &[second.told.id],
                );
            }
        }
    }
}

async fn errors<F: Front>(front: &F, api: &UpstreamApi) -> PointReport {
    const NAME: &str = registry::HOP_ERRORS.id;
    const TITLE: &str = registry::HOP_ERRORS.title;
    if let Some(report) = cannot(front, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    conflict_reaches_agent(front, api, NAME, &mut checks).await;
    let before = count_or_stop!(front, checks, NAME, TITLE);
    api.fault_next(Fault::Answer {
        status: 409,
        headers: vec![(
            "content-type".to_owned(),
            "application/problem+json".to_owned(),
        )],
        body: problem(409, Some(problem_type::IN_FLIGHT), ""),
        name: "in progress".to_owned(),
    });
    let call = front.keyed_call(
        "a call the API answers 409 (in progress)",
        &front.fresh_fields(),
    );
    let busy = through(front, api, NAME, None, &call).await;
    let answered: Vec<&UpstreamRequest> = busy
        .creates
        .iter()
        .filter(|c| c.status() == Some(409))
        .collect();
    if answered.is_empty() {
        checks.add(
            Grade::lab(),
            "the fault fired: the API answered 409",
            false,
            "a 409 at the API",
            lines(api, &busy.creates),
            &busy.ids,
        );
        return PointReport::covered(NAME, TITLE, checks.0);
    }
    let read = &busy.told;
    let resent = busy.creates.len() > 1;
    checks.add(
        Grade::lab_over_should(section::ERRORS),
        "the agent gets the 409 as an error (or the wrapper's resend's true result), never a \
         success naming nothing",
        read.refused || !read.success || (resent && read.identity.is_some()),
        "an error result",
        busy.told.described.clone(),
        &busy.ids,
    );
    let again = front.again(&call, "the agent's retry after the 409", None);
    let retry = through(front, api, NAME, None, &again).await;
    let after = count_or_stop!(front, checks, NAME, TITLE);
    keys_carried(
        &mut checks,
        api,
        &[&busy, &retry],
        &front.key_of(&call),
        "the retry after the 409 carries the same key",
    );
    checks.add(
        lab26(),
        "the retry after the 409 makes the one effect",
        after - before == 1 && retry.told.success,
        format!("one effect, and {} naming it", front.result_word()),
        format!(
            "{}; {}",
            effects(after - before),
            retry.told.described.clone()
        ),
        &retry.ids,
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_that_names_the_failure_or_the_unknown_outcome_says_so() {
        for text in [
            "The outcome is unknown: retry with the same key",
            "API request failed: socket hang up",
            "Error: read ECONNRESET (connection reset)",
            "the request timed out",
            "<title>504 Gateway Time-out</title>",
        ] {
            assert!(says_unknown(text), "{text}");
        }
        for text in [
            "",
            "Please retry.",
            "Error calling tool 'createTicket'",
            "<title>502 Bad Gateway</title>",
        ] {
            assert!(!says_unknown(text), "{text}");
        }
    }

    #[test]
    fn the_ticket_of_an_api_answer_is_read_as_text() {
        assert_eq!(ticket_id(br#"{"ticket_id": 7}"#).as_deref(), Some("7"));
        assert_eq!(ticket_id(b"not json"), None);
    }

    #[test]
    fn an_identity_names_the_committed_id_even_in_another_apis_form() {
        assert!(names_id(Some("7"), Some("7")));
        assert!(names_id(Some("msg_7"), Some("7")));
        assert!(!names_id(Some("msg_17"), Some("7")));
        assert!(!names_id(None, Some("7")));
    }
}
