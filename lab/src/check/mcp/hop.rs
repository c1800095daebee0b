//! The hop points: an MCP server that wraps an HTTP API, judged from the API's side.
//!
//! With `[upstream]` in the target file, the lab serves the API the wrapper calls and records
//! every request it sends (see [`super::upstream`]). These points call the wrapper's create tool
//! as an agent would and read what reached the API: whether the key did, in which header and with
//! which value; whether a retry (after a lost result, after the API's own reply was lost, after
//! the wrapper restarted, after an upstream 503 or 429 the wrapper may resend by itself) carried
//! the same key; whether a new intention got a new one; whether the API's refusals came back to
//! the agent as errors; whether the body reached the API as the agent sent it. Every upstream
//! request a point rests on is recorded in the run's history beside the tool calls, so the
//! reports show agent, wrapper and API together.

use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use serde_json::Value;

use super::super::calibration::{Calibration, Step as CalibrationStep};
use super::super::history::{Answer, Sent, WRAPPER_TO_API};
use super::super::points::Checks;
use super::super::probe::same_effect;
use super::super::report::{Grade, PointReport};
use super::points::{count_or_stop, effects};
use super::probe::{KeyArg, McpProbe, Seen, Session, ToolCall};
use super::upstream::{Fault, UpstreamApi, UpstreamRequest, carries, ticket_id};
use crate::http::contract::{ProblemType, problem as contract};
use crate::http::proxy::Fate;

/// The draft's sections the grades cite, their rule carried from the agent's key argument to the
/// wrapper's header.
mod section {
    pub const UNIQUENESS: &str = "2.2";
    pub const ENFORCEMENT: &str = "2.6";
    pub const ERRORS: &str = "2.7";
}

/// Every hop point, in order; none without `[upstream]`.
pub async fn all(probe: &Arc<McpProbe>) -> Vec<PointReport> {
    let Some(api) = &probe.upstream else {
        return Vec::new();
    };
    vec![
        key(probe, api).await,
        payload(probe, api).await,
        retry(probe, api).await,
        api_lost(probe, api).await,
        restart(probe, api).await,
        new_intention(probe, api).await,
        upstream_retries(probe, api).await,
        errors(probe, api).await,
    ]
}

/// When the calibration stopped on a wrapper whose creates the API refused (400 or 422): the
/// calibration as it stands, and the points that show what the wrapper did to the key. `None`
/// when the API refused nothing, or those points find nothing wrong, so the file is at fault.
pub async fn when_refused(
    probe: &Arc<McpProbe>,
    mismatch: &str,
) -> Option<(Calibration, Vec<PointReport>)> {
    let api = probe.upstream.as_ref()?;
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
        .map(|c| record(probe, api, super::super::calibration::POINT, c))
        .collect();
    let points = vec![
        key(probe, api).await,
        new_intention(probe, api).await,
        payload(probe, api).await,
    ];
    let found = points
        .iter()
        .any(|p| p.checks.iter().any(|c| !c.passed && c.grade.required()));
    if !found {
        return None;
    }
    let mut points = points;
    let reason = "the calibration could not make a create through the wrapper (the API refused \
                  it), so this point, which needs one, did not run"
        .to_owned();
    for (name, title) in [
        (
            "hop-retry",
            "A retry after a lost result carries the same key to the API",
        ),
        (
            "hop-api-lost",
            "The API commits and its reply to the wrapper is lost",
        ),
        ("hop-restart", "The wrapper restarts before the retry"),
        ("hop-upstream-retry", "The API answers 503 or 429"),
        (
            "hop-errors",
            "The API's 422 and 409 reach the agent as errors",
        ),
    ] {
        points.push(PointReport::not_covered(name, title, reason.clone()));
    }
    let calibration = Calibration {
        steps: vec![CalibrationStep {
            name: "create",
            field: "[upstream]".to_owned(),
            passed: false,
            detail: format!(
                "{}; at the API: {}",
                super::super::calibration::trimmed(mismatch),
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
    };
    Some((calibration, points))
}

/// One tool call and the creates it made at the API.
struct Hop {
    seen: Seen,
    creates: Vec<UpstreamRequest>,
    /// The tool call's number in the history, then its creates'.
    ids: Vec<usize>,
}

impl Hop {
    fn key_values(&self, header: &str) -> Vec<Option<String>> {
        self.creates
            .iter()
            .map(|c| c.header(header).first().map(|v| (*v).to_owned()))
            .collect()
    }
}

/// Calls the tool (on `session`, or the first caller's own) and collects the creates the
/// wrapper made for it, recorded in the history. Faults no create used are dropped.
async fn through(
    probe: &McpProbe,
    api: &UpstreamApi,
    point: &'static str,
    session: Option<&Session>,
    call: &ToolCall,
) -> Hop {
    let mark = api.mark();
    let seen = match session {
        Some(session) => probe.send_on(point, session, call).await,
        None => probe.send(point, call).await,
    };
    api.clear_faults();
    let creates = api.creates_since(mark);
    let mut ids = vec![seen.id];
    for create in &creates {
        ids.push(record(probe, api, point, create));
    }
    Hop { seen, creates, ids }
}

/// Records one upstream create in the history, as the wrapper's exchange with the API.
fn record(
    probe: &McpProbe,
    api: &UpstreamApi,
    point: &'static str,
    create: &UpstreamRequest,
) -> usize {
    let header = &api.spec.key_header;
    let sent = Sent {
        point,
        step: "the wrapper's request to the API".to_owned(),
        caller: Some(WRAPPER_TO_API.to_owned()),
        key: create.header(header).first().map(|v| (*v).to_owned()),
        method: create.method.clone(),
        path: create.target.clone(),
        body: create.body.clone(),
    };
    let answer = match &create.fate {
        Some(Fate::Answered { status, body }) => Answer::Reply {
            status: *status,
            headers: Vec::new(),
            body: String::from_utf8_lossy(body).into_owned(),
        },
        Some(Fate::Lost { status, .. }) => Answer::NoAnswer {
            reason: format!("the API answered {status}; the lab lost the reply on purpose"),
        },
        Some(Fate::Failed(problem)) => Answer::NoAnswer {
            reason: problem.clone(),
        },
        None => Answer::NoAnswer {
            reason: "no answer by the time the tool call ended".to_owned(),
        },
    };
    probe.history.record_timed(
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
        .map(|c| c.describe(&api.spec.key_header))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The agent's retry of `call`: the same key and arguments, under another step's name.
fn retry_of(call: &ToolCall, step: &str) -> ToolCall {
    let mut again = call.clone();
    again.step = step.to_owned();
    again
}

fn agent_key(call: &ToolCall) -> &str {
    match &call.key {
        KeyArg::Key(key) => key,
        _ => "",
    }
}

/// A point that needs a key, on a tool that takes none: it cannot pass, and `hop-key` shows why.
fn cannot(probe: &McpProbe, name: &'static str, title: &'static str) -> Option<PointReport> {
    if probe.target.keyed() {
        return None;
    }
    let mut checks = Checks::new();
    checks.add(
        Grade::lab(),
        "the tool takes an operation key to pass on to the API",
        false,
        "a key argument (mcp.tool.key_argument)",
        format!(
            "{} takes no key: the API cannot tell a retry from a new call (hop-key shows the \
             creates)",
            probe.target.tool.name
        ),
        &[],
    );
    Some(PointReport::covered(name, title, checks.0))
}

/// The two sub-checks a retried intention ends with: every create of it carried the agent's key,
/// and it made one effect in all (`delta`, the count's change since before its first call).
fn kept_and_once(
    checks: &mut Checks,
    api: &UpstreamApi,
    hops: &[&Hop],
    call: &ToolCall,
    (keys, once): (&str, &str),
    delta: i64,
) {
    keys_carried(checks, api, hops, agent_key(call), keys);
    checks.add(
        Grade::lab_over_should(section::ENFORCEMENT),
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
    let header = &api.spec.key_header;
    // Each create with its number in the history (a hop's ids are its call's, then its creates').
    let creates: Vec<(usize, &UpstreamRequest)> = hops
        .iter()
        .flat_map(|h| h.ids.iter().skip(1).copied().zip(&h.creates))
        .collect();
    let ids: Vec<usize> = hops.iter().flat_map(|h| h.ids.iter().copied()).collect();
    let all = !creates.is_empty()
        && creates.iter().all(|(_, c)| {
            let values = c.header(header);
            values.len() == 1 && carries(values[0], key)
        });
    let observed = creates
        .iter()
        .map(|(id, c)| match c.header(header).as_slice() {
            [] => format!("#{id}: no {header}"),
            values => format!("#{id}: {}", values.join(", ")),
        })
        .collect::<Vec<_>>();
    checks.add(
        Grade::lab_over_should(section::UNIQUENESS),
        what,
        all,
        format!("{header}: {key} on every create"),
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
async fn no_key_evidence(probe: &McpProbe, api: &UpstreamApi, checks: &mut Checks, before: i64) {
    let point = "hop-key";
    let tool = &probe.target.tool;
    let header = &api.spec.key_header;
    let fields = probe.fresh_fields();
    let call = probe.call("the call", KeyArg::Absent, &fields);
    let first = through(probe, api, point, None, &call).await;
    let again = retry_of(&call, "the agent's retry, the same arguments");
    let second = through(probe, api, point, None, &again).await;
    let after = probe.count().await.unwrap_or(before);
    let creates: Vec<&UpstreamRequest> = first.creates.iter().chain(&second.creates).collect();
    let identical = creates.len() == 2
        && creates[0].body == creates[1].body
        && creates.iter().all(|c| c.header(header).is_empty());
    let ids: Vec<usize> = first.ids.iter().chain(&second.ids).copied().collect();
    checks.add(
        Grade::lab(),
        "the tool takes a key, so a retry can be told from a new call at the API",
        false,
        format!("an argument the wrapper sends as {header}"),
        if identical {
            format!(
                "unsafe to retry: the same call twice sent two byte-identical creates \
                 without {header}, and made {}: {}",
                effects(after - before),
                lines(api, &creates.into_iter().cloned().collect::<Vec<_>>())
            )
        } else {
            format!(
                "{} takes no key; the same call twice made {}: {}",
                tool.name,
                effects(after - before),
                lines(api, &creates.into_iter().cloned().collect::<Vec<_>>())
            )
        },
        &ids,
    );
}

async fn key(probe: &McpProbe, api: &UpstreamApi) -> PointReport {
    const NAME: &str = "hop-key";
    const TITLE: &str = "The agent's key reaches the API, in the header the API reads";
    let mut checks = Checks::new();
    let tool = &probe.target.tool;
    let header = &api.spec.key_header;
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let Some(argument) = &tool.key_argument else {
        // No key at all: what a retry does at the API is the evidence.
        no_key_evidence(probe, api, &mut checks, before).await;
        return PointReport::covered(NAME, TITLE, checks.0);
    };
    let listed = probe
        .tools
        .iter()
        .find(|t| t.name == tool.name.as_str())
        .and_then(|t| t.input_schema.get("properties"))
        .and_then(Value::as_object)
        .is_some_and(|properties| properties.contains_key(argument));
    checks.add(
        Grade::lab(),
        format!("the tool's input schema lists {argument}, so an agent knows to send it"),
        listed,
        format!("{argument} among inputSchema.properties"),
        if listed {
            "listed".to_owned()
        } else {
            "not listed: an agent that follows the schema never sends a key".to_owned()
        },
        &[],
    );
    let call = probe.call(
        "a new intention",
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let hop = through(probe, api, NAME, None, &call).await;
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    checks.add(
        Grade::lab(),
        "one tool call, one create at the API",
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
        agent_key(&call),
        &format!("the create carries the agent's key in {header}, unchanged"),
    );
    checks.add(
        Grade::lab(),
        "the agent is told what was created",
        hop.seen.read.success && hop.seen.read.identity.is_some(),
        "a tool result naming the effect",
        probe.describe(&hop.seen),
        &[hop.seen.id],
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

/// The body the API should get for `call`: its arguments without the key, or the member
/// `upstream.body_argument` names.
fn expected_body(probe: &McpProbe, api: &UpstreamApi, call: &ToolCall) -> Option<Value> {
    let mut arguments = probe.arguments_of(call);
    if let Some(name) = &probe.target.tool.key_argument {
        arguments.remove(name);
    }
    let arguments = Value::Object(arguments);
    if api.spec.body_argument.is_empty() {
        return Some(arguments);
    }
    arguments.pointer(&api.spec.body_argument).cloned()
}

async fn payload(probe: &McpProbe, api: &UpstreamApi) -> PointReport {
    const NAME: &str = "hop-payload";
    const TITLE: &str = "The body reaches the API as the agent sent it, and a retry sends it again";
    if let Some(report) = cannot(probe, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let call = probe.call(
        "a new intention",
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let first = through(probe, api, NAME, None, &call).await;
    let again = retry_of(&call, "the agent's retry, the same arguments");
    let second = through(probe, api, NAME, None, &again).await;
    let Some(create) = first.creates.first() else {
        checks.add(
            Grade::lab(),
            "the call reaches the API",
            false,
            "a create",
            probe.describe(&first.seen),
            &first.ids,
        );
        return PointReport::covered(NAME, TITLE, checks.0);
    };
    let expected = expected_body(probe, api, &call);
    let got: Option<Value> = serde_json::from_str(&create.body).ok();
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
    let bodies: Vec<&str> = first
        .creates
        .iter()
        .chain(&second.creates)
        .map(|c| c.body.as_str())
        .collect();
    let parsed: Vec<Option<Value>> = bodies
        .iter()
        .map(|b| serde_json::from_str(b).ok())
        .collect();
    let same = bodies.len() >= 2 && parsed.iter().all(|p| p.is_some() && *p == parsed[0]);
    let ids: Vec<usize> = first.ids.iter().chain(&second.ids).copied().collect();
    checks.add(
        Grade::lab_over_should(section::ENFORCEMENT),
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

async fn retry(probe: &McpProbe, api: &UpstreamApi) -> PointReport {
    const NAME: &str = "hop-retry";
    const TITLE: &str =
        "A retry after a lost result carries the same key to the API, which replays it";
    if let Some(report) = cannot(probe, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let call = probe.call(
        "the call whose result the agent loses",
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let first = through(probe, api, NAME, None, &call).await;
    let after_first = count_or_stop!(probe, checks, NAME, TITLE);
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
    let again = retry_of(&call, "the agent's retry, the same key and arguments");
    let second = through(probe, api, NAME, None, &again).await;
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    kept_and_once(
        &mut checks,
        api,
        &[&first, &second],
        &call,
        (
            "the retry's create carries the same key as the first's",
            "the retry made no second effect at the API",
        ),
        after - before,
    );
    let expected = first.seen.read.identity.as_deref().unwrap_or("none");
    checks.add(
        Grade::lab_over_should(section::ENFORCEMENT),
        "the agent's retry is told of the first call's effect",
        second.seen.read.success
            && same_effect(&second.seen.read.identity, &first.seen.read.identity),
        format!("a tool result naming {expected}"),
        probe.describe(&second.seen),
        &[first.seen.id, second.seen.id],
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
                r"(?i)unknown|may (or may not )?have|might have|uncertain|not (be )?sure|hang ?up|closed|reset|disconnect|timed? ?out|timeout|no (reply|response)|connection|eof|broken pipe|aborted|socket|unreachable",
            )
            .expect("a valid regex")
        })
        .is_match(text)
}

/// The text an agent reads in a result: its text blocks, or the error's message.
fn agent_text(seen: &Seen) -> String {
    match &seen.answer {
        Answer::ToolResult { body, .. } => match serde_json::from_str::<Value>(body) {
            Ok(json) => json
                .get("content")
                .and_then(Value::as_array)
                .map(|blocks| {
                    blocks
                        .iter()
                        .filter_map(|b| b.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default(),
            Err(_) => body.clone(),
        },
        Answer::RpcError { message, .. } => message.clone(),
        other => other.summary(),
    }
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
fn judge_what_the_agent_is_told(
    probe: &McpProbe,
    checks: &mut Checks,
    first: &Hop,
    committed: Option<&str>,
) -> bool {
    let read = &first.seen.read;
    let told_success = read.success && !read.refused;
    if told_success {
        // The wrapper resent by itself and got the API's replay: a success is true only if it
        // names the effect the API committed.
        checks.add(
            Grade::lab_over_should(section::ENFORCEMENT),
            "a success names the effect the API committed, never another",
            names_id(read.identity.as_deref(), committed),
            format!(
                "a tool result naming {}",
                committed.unwrap_or("the committed ticket")
            ),
            probe.describe(&first.seen),
            &first.ids,
        );
    } else {
        let text = agent_text(&first.seen);
        let has_text = !text.trim().is_empty();
        checks.add(
            Grade::lab(),
            "the agent is told something: the error has a text",
            has_text,
            "a text",
            if has_text {
                "a text".to_owned()
            } else {
                format!("{} with an empty text", first.seen.answer.summary())
            },
            &[first.seen.id],
        );
        checks.add(
            Grade::should(section::ERRORS),
            "the error says the outcome is unknown, or names the failure that makes it so",
            says_unknown(&text),
            "a text naming a lost connection, a timeout or an unknown outcome",
            if text.trim().is_empty() {
                format!("{} with an empty text", first.seen.answer.summary())
            } else {
                format!("{:?}", super::super::excerpt::trimmed(&text, 200))
            },
            &[first.seen.id],
        );
    }
    told_success
}

async fn api_lost(probe: &McpProbe, api: &UpstreamApi) -> PointReport {
    const NAME: &str = "hop-api-lost";
    const TITLE: &str = "The API commits and its reply to the wrapper is lost: the agent is told the truth, and \
         its retry replays";
    if let Some(report) = cannot(probe, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    api.fault_next(Fault::LoseReply);
    let call = probe.call(
        "the call whose API reply is lost",
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let first = through(probe, api, NAME, None, &call).await;
    let after_first = count_or_stop!(probe, checks, NAME, TITLE);
    let committed = first.creates.iter().find_map(|c| match &c.fate {
        Some(Fate::Lost { body, .. }) => Some(ticket_id(body)),
        _ => None,
    });
    let fired = checks.add(
        Grade::lab(),
        "the fault fired: the API committed the create and the lab lost its reply",
        committed.is_some() && after_first > before,
        "an effect, its reply lost on the way to the wrapper",
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
    let committed = committed.flatten();
    let told_success =
        judge_what_the_agent_is_told(probe, &mut checks, &first, committed.as_deref());
    let mut hops = vec![first];
    if !told_success {
        let again = retry_of(&call, "the agent's retry, the same key and arguments");
        hops.push(through(probe, api, NAME, None, &again).await);
    }
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    kept_and_once(
        &mut checks,
        api,
        &hops.iter().collect::<Vec<_>>(),
        &call,
        (
            "every create of the intention carries the agent's key, resends included",
            "no second effect at the API",
        ),
        after - before,
    );
    if let Some(retry) = hops.get(1) {
        checks.add(
            Grade::lab_over_should(section::ENFORCEMENT),
            "the agent's retry is told of the effect the API committed",
            retry.seen.read.success
                && names_id(retry.seen.read.identity.as_deref(), committed.as_deref()),
            format!(
                "a tool result naming {}",
                committed.as_deref().unwrap_or("the committed ticket")
            ),
            probe.describe(&retry.seen),
            &retry.ids,
        );
    }
    PointReport::covered(NAME, TITLE, checks.0)
}

async fn restart(probe: &McpProbe, api: &UpstreamApi) -> PointReport {
    const NAME: &str = "hop-restart";
    const TITLE: &str = "The wrapper restarts before the retry: the retry carries the same key";
    if let Some(report) = cannot(probe, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let call = probe.call(
        "the call before the restart",
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let mut hops = Vec::new();
    for round in 0..2 {
        let session = match probe.open(0).await {
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
                return PointReport::covered(NAME, TITLE, checks.0);
            }
        };
        let mut this = call.clone();
        if round == 1 {
            this.step = "the agent's retry on the restarted wrapper".to_owned();
        }
        hops.push(through(probe, api, NAME, Some(&session), &this).await);
        let ended = probe.close(session).await;
        if round == 0 {
            let after_first = count_or_stop!(probe, checks, NAME, TITLE);
            let fired = checks.add(
                Grade::lab(),
                "the fault fired: the first call made its effect, then the wrapper ended",
                after_first - before == 1 && !ended.contains("still running"),
                "one effect, then the wrapper gone",
                format!("{}; {ended}", effects(after_first - before)),
                &hops[0].ids,
            );
            if !fired {
                return PointReport::covered(NAME, TITLE, checks.0);
            }
        }
    }
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    kept_and_once(
        &mut checks,
        api,
        &hops.iter().collect::<Vec<_>>(),
        &call,
        (
            "the retry through the restarted wrapper carries the same key",
            "the retry made no second effect at the API",
        ),
        after - before,
    );
    PointReport::covered(NAME, TITLE, checks.0)
}

async fn new_intention(probe: &McpProbe, api: &UpstreamApi) -> PointReport {
    const NAME: &str = "hop-new-intention";
    const TITLE: &str =
        "A new intention's key reaches the API as its own: no key fixed for the session";
    if let Some(report) = cannot(probe, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    let fields = probe.fresh_fields();
    let first_call = probe.call("the first intention", probe.intention_key(), &fields);
    let second_call = probe.call(
        "a second intention, the same fields, a new key",
        probe.intention_key(),
        &fields,
    );
    let first = through(probe, api, NAME, None, &first_call).await;
    let second = through(probe, api, NAME, None, &second_call).await;
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    keys_carried(
        &mut checks,
        api,
        &[&first],
        agent_key(&first_call),
        "the first intention's create carries its key",
    );
    keys_carried(
        &mut checks,
        api,
        &[&second],
        agent_key(&second_call),
        "the second intention's create carries its own key, not the first's",
    );
    let header = &api.spec.key_header;
    let (a, b) = (first.key_values(header), second.key_values(header));
    let ids: Vec<usize> = first.ids.iter().chain(&second.ids).copied().collect();
    checks.add(
        Grade::lab_over_should(section::UNIQUENESS),
        "the two intentions reach the API under two keys",
        !a.is_empty() && !b.is_empty() && a.iter().all(|k| k.is_some() && !b.contains(k)),
        "two different keys",
        format!("{a:?} then {b:?}"),
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
fn judge_resends(probe: &McpProbe, checks: &mut Checks, first: &Hop, status: &str) -> bool {
    let resends = first.creates.len().saturating_sub(1);
    let read = &first.seen.read;
    if resends == 0 {
        checks.add(
            Grade::lab(),
            format!("the wrapper did not resend the {status}: the agent is told the call failed"),
            read.refused || !read.success,
            "an error result",
            probe.describe(&first.seen),
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
        "a tool result naming the effect",
        probe.describe(&first.seen),
        &first.ids,
    );
    true
}

async fn upstream_retries(probe: &McpProbe, api: &UpstreamApi) -> PointReport {
    const NAME: &str = "hop-upstream-retry";
    const TITLE: &str = "The API answers 503 or 429, or late past the wrapper's timeout: the wrapper's own \
         resends keep the key, or the agent is told";
    if let Some(report) = cannot(probe, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    let cases = [
        (503, Some(contract::OVERLOADED), "Service Unavailable", "0"),
        (429, None, "Too Many Requests", "1"),
    ];
    if let Some(timeout) = api.spec.wrapper_timeout {
        late(probe, api, NAME, &mut checks, timeout).await;
    }
    for (status, kind, title, retry_after) in cases {
        let before = count_or_stop!(probe, checks, NAME, TITLE);
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
        let call = probe.call(
            &format!("the call the API first answers {status}"),
            probe.intention_key(),
            &probe.fresh_fields(),
        );
        let first = through(probe, api, NAME, None, &call).await;
        let resent = judge_resends(probe, &mut checks, &first, &status.to_string());
        let mut hops = vec![first];
        if !resent {
            let again = retry_of(&call, &format!("the agent's retry after the {status}"));
            hops.push(through(probe, api, NAME, None, &again).await);
        }
        let after = count_or_stop!(probe, checks, NAME, TITLE);
        kept_and_once(
            &mut checks,
            api,
            &hops.iter().collect::<Vec<_>>(),
            &call,
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
async fn count_or_note(probe: &McpProbe, checks: &mut Checks) -> Option<i64> {
    match probe.count().await {
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

/// The API does the work and answers past the wrapper's own timeout (`upstream.wrapper_timeout_ms`):
/// a resend by the wrapper keeps the key; without one, the agent is told, and its retry with the
/// key names the one effect.
async fn late(
    probe: &McpProbe,
    api: &UpstreamApi,
    point: &'static str,
    checks: &mut Checks,
    timeout: Duration,
) {
    let Some(before) = count_or_note(probe, checks).await else {
        return;
    };
    let hold = timeout + Duration::from_secs(1);
    api.fault_next(Fault::Late(hold));
    let call = probe.call(
        "the call whose API reply comes past the wrapper's timeout",
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let first = through(probe, api, point, None, &call).await;
    // Let the held reply go out, so the next call meets an idle API.
    tokio::time::sleep(hold.saturating_sub(timeout)).await;
    let resends = first.creates.len().saturating_sub(1);
    let read = first.seen.read.clone();
    let mut hops = vec![first];
    if resends == 0 && read.success {
        checks.add(
            Grade::lab(),
            "the wrapper waited for the late reply: the agent is told what was created",
            read.identity.is_some(),
            "a tool result naming the effect",
            probe.describe(&hops[0].seen),
            &hops[0].ids,
        );
    } else if resends == 0 {
        let text = agent_text(&hops[0].seen);
        checks.add(
            Grade::should(section::ERRORS),
            "the wrapper gave up at its timeout: the error says the outcome is unknown, or \
             names the timeout",
            says_unknown(&text),
            "a text naming a timeout or an unknown outcome",
            format!("{:?}", super::super::excerpt::trimmed(&text, 200)),
            &hops[0].ids,
        );
        let again = retry_of(&call, "the agent's retry after the timeout");
        hops.push(through(probe, api, point, None, &again).await);
    }
    let Some(after) = count_or_note(probe, checks).await else {
        return;
    };
    kept_and_once(
        checks,
        api,
        &hops.iter().collect::<Vec<_>>(),
        &call,
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
async fn conflict_reaches_agent(
    probe: &McpProbe,
    api: &UpstreamApi,
    point: &'static str,
    checks: &mut Checks,
) {
    match probe.changes(&probe.fresh_fields()).into_iter().next() {
        None => {
            checks.add(
                Grade::should(section::ERRORS),
                "a changed payload can be sent (mcp.tool.vary names a field)",
                false,
                "a field the check may change",
                "mcp.tool.vary names none, so the API's 422 cannot be provoked",
                &[],
            );
        }
        Some(change) => {
            let call = probe.call("the first call", probe.intention_key(), &change.first);
            let first = through(probe, api, point, None, &call).await;
            let mut changed = call.clone();
            changed.step = format!("the same key, {}", change.what);
            changed.fields = change.changed;
            let second = through(probe, api, point, None, &changed).await;
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
                let read = &second.seen.read;
                checks.add(
                    Grade::lab_over_should(section::ERRORS),
                    "the agent gets the 422 as an error, never as a success",
                    read.refused || !read.success,
                    "an error result",
                    probe.describe(&second.seen),
                    &ids,
                );
                let text = agent_text(&second.seen);
                checks.add(
                    Grade::should(section::ERRORS),
                    "the error's text tells the agent what the API said",
                    !text.trim().is_empty(),
                    "a text",
                    if text.trim().is_empty() {
                        "an empty text".to_owned()
                    } else {
                        format!("{:?}", super::super::excerpt::trimmed(&text, 200))
                    },
                    &[second.seen.id],
                );
            }
        }
    }
}

async fn errors(probe: &McpProbe, api: &UpstreamApi) -> PointReport {
    const NAME: &str = "hop-errors";
    const TITLE: &str = "The API's 422 (key reused with another payload) and 409 (in progress) reach the agent \
         as errors";
    if let Some(report) = cannot(probe, NAME, TITLE) {
        return report;
    }
    let mut checks = Checks::new();
    conflict_reaches_agent(probe, api, NAME, &mut checks).await;
    let before = count_or_stop!(probe, checks, NAME, TITLE);
    api.fault_next(Fault::Answer {
        status: 409,
        headers: vec![(
            "content-type".to_owned(),
            "application/problem+json".to_owned(),
        )],
        body: problem(409, Some(contract::IN_FLIGHT), ""),
        name: "in progress".to_owned(),
    });
    let call = probe.call(
        "a call the API answers 409 (in progress)",
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let busy = through(probe, api, NAME, None, &call).await;
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
    let read = &busy.seen.read;
    let resent = busy.creates.len() > 1;
    checks.add(
        Grade::lab_over_should(section::ERRORS),
        "the agent gets the 409 as an error (or the wrapper's resend's true result), never a \
         success naming nothing",
        read.refused || !read.success || (resent && read.identity.is_some()),
        "an error result",
        probe.describe(&busy.seen),
        &busy.ids,
    );
    let again = retry_of(&call, "the agent's retry after the 409");
    let retry = through(probe, api, NAME, None, &again).await;
    let after = count_or_stop!(probe, checks, NAME, TITLE);
    keys_carried(
        &mut checks,
        api,
        &[&busy, &retry],
        agent_key(&call),
        "the retry after the 409 carries the same key",
    );
    checks.add(
        Grade::lab_over_should(section::ENFORCEMENT),
        "the retry after the 409 makes the one effect",
        after - before == 1 && retry.seen.read.success,
        "one effect, and a tool result naming it",
        format!(
            "{}; {}",
            effects(after - before),
            probe.describe(&retry.seen)
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
        ] {
            assert!(says_unknown(text), "{text}");
        }
        for text in ["", "Please retry.", "Error calling tool 'createTicket'"] {
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
