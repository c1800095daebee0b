//! The MCP check's calibration, as the HTTP check's ([`crate::check::calibration`]): before
//! any point, a few calls of its own prove that the `[mcp]` section describes the server. A
//! create with the file's fields succeeds; the identity is where `[mcp.identity]` says, and
//! differs between two calls; each caller's count rises by exactly one per create; the
//! validation fields are refused; the count can be read. Every call carries a fresh key (or
//! none, for a tool that takes none), so a server that ignores keys still calibrates.

use std::time::Duration;

use serde_json::Value;

use super::super::both::held_created;
use super::super::calibration::naming::{Answers, judge_twins};
use super::super::calibration::{id_pointers, other_shape, shape_at_fault, vary_at_fault};
use super::super::excerpt::one_line;
use super::super::history::Answer;
use super::super::report::{Calibration, Callers, POINT, Stop};
use super::super::upstream::{UpstreamApi, key_elsewhere};
use super::probe::{KeyArg, McpProbe, Seen, ToolCall, api_error_status};
use super::target::{McpCount, McpIdentity, McpTransport};

type Proved<T> = Result<T, Stop>;

/// Runs the calibration against the probe's server, recording its calls.
///
/// # Errors
/// [`Stop::Mismatch`] naming the field at fault; [`Stop::Unreachable`] when the server does not
/// answer.
pub async fn calibrate(probe: &McpProbe) -> Proved<Calibration> {
    let mut calibration = Calibration::default();
    let mut now = probe.count().await?;
    calibration.held(
        "count",
        count_field(probe),
        format!("the count reads {now}"),
        &[],
    );
    let sessions = each_session(probe).await?;
    let what = "a create with the file's fields";
    let first_call = probe.call(
        &format!("calibration: {what}"),
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    let first = created(probe, &mut calibration, &first_call, what).await?;
    callers_apart(probe, &mut calibration, &sessions, &first).await?;
    now = rose(probe, &mut calibration, now, 0, &first).await?;
    let second = create(probe, &mut calibration, 0, "a second create").await?;
    if first.1 == second.1 {
        return Err(Stop::mismatch(
            identity_field(probe),
            format!(
                "two calls with different keys and fields (#{} and #{}) both name {:?}: that is \
                 not what identifies a created thing",
                first.0.id, second.0.id, first.1
            ),
        ));
    }
    calibration.held(
        "identity-differs",
        identity_field(probe),
        format!("two keys name two effects: {} and {}", first.1, second.1),
        &[first.0.id, second.0.id],
    );
    now = rose(probe, &mut calibration, now, 0, &second).await?;
    now = names_the_effect(probe, &mut calibration, now, (&first_call, &first), &second).await?;
    let mut marks = None;
    let api_mark = || probe.upstream.as_ref().map(UpstreamApi::mark);
    for caller in 1..probe.target.callers.len() {
        let mark = api_mark();
        let seen = create(probe, &mut calibration, caller, "a create").await?;
        if caller == 1 {
            marks = mark.zip(api_mark());
        }
        now = rose(probe, &mut calibration, now, caller, &seen).await?;
    }
    let _ = now;
    unproved_callers(probe, &mut calibration, marks);
    validation(probe, &mut calibration).await?;
    calibration.passed = true;
    Ok(calibration)
}

/// Each caller's own count, when the count tool is called on each caller's session and summed
/// (`mcp.count.tool.caller = "each"`, each session's list showing its caller's own effects);
/// empty otherwise.
async fn each_session(probe: &McpProbe) -> Proved<Vec<i64>> {
    match &probe.target.count {
        McpCount::Tool { caller: None, .. } if probe.target.callers.len() > 1 => {
            let all: Vec<usize> = (0..probe.target.callers.len()).collect();
            probe.counts_as(&all).await
        }
        _ => Ok(Vec::new()),
    }
}

/// Whether the first caller's create shows in its own session's list alone (the server tells
/// its callers apart: the other-caller point may accuse a leak), or in another caller's as well (one
/// caller to the server under two names: the file's mistake, named). Without lists per session,
/// nothing the file describes tells them apart, and the other-caller point is not covered.
async fn callers_apart(
    probe: &McpProbe,
    calibration: &mut Calibration,
    before: &[i64],
    first: &(Seen, String),
) -> Proved<()> {
    let callers = &probe.target.callers;
    if callers.len() < 2 {
        return Ok(());
    }
    let (a, b) = (&callers[0].name, &callers[1].name);
    let mut after = before.to_vec();
    for attempt in 0..4 {
        if before.is_empty() || after.iter().sum::<i64>() != before.iter().sum::<i64>() {
            break;
        }
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        after = each_session(probe).await?;
    }
    let rose: Vec<usize> = (0..after.len()).filter(|&i| after[i] > before[i]).collect();
    let id = first.0.id;
    if rose.first() == Some(&0) && rose.len() > 1 {
        let other = &callers[rose[1]].name;
        return Err(Stop::mismatch(
            format!("mcp.callers[{}]", rose[1]),
            format!(
                "{a}'s create (#{id}, naming {}) shows in {other}'s list as well as in {a}'s \
                 (mcp.count.tool.caller = \"each\" reads each caller's own list): to the \
                 server, {a} and {other} are one caller. Give each caller in [[mcp.callers]] \
                 credentials of its own that the server tells apart; if it has no callers of \
                 its own, name one caller only",
                first.1
            ),
        ));
    }
    if rose == [0] {
        let how = format!(
            "{a}'s create (#{id}) shows in {a}'s own list and not in {b}'s \
             (mcp.count.tool.caller = \"each\"): the server tells them apart"
        );
        calibration.held("callers-apart", "[[mcp.callers]]", how.clone(), &[id]);
        calibration.callers = Callers::Apart(how);
    }
    Ok(())
}

/// When the sessions' own lists did not tell the first two callers apart: the proof the API the
/// lab serves gives (`[upstream]`: the two callers' creates arrived with two callers' tokens),
/// or the other-caller point's reason to stay uncovered. `marks` bound the second caller's creates in
/// the API's record.
fn unproved_callers(
    probe: &McpProbe,
    calibration: &mut Calibration,
    marks: Option<(usize, usize)>,
) {
    let callers = &probe.target.callers;
    if callers.len() < 2 || matches!(calibration.callers, Callers::Apart(_)) {
        return;
    }
    let (a, b) = (&callers[0].name, &callers[1].name);
    let at_api = match (&probe.upstream, marks) {
        (Some(api), Some(marks)) => match api.callers_apart((a, b), marks) {
            Ok(how) => {
                calibration.held("callers-apart", "upstream.tokens", how.clone(), &[]);
                calibration.callers = Callers::Apart(how);
                return;
            }
            Err(seen) => format!("; {seen}"),
        },
        _ => String::new(),
    };
    calibration.callers = Callers::Unproved(format!(
        "The calibration could not prove that the server takes {a} and {b} for two callers \
         (two names in [[mcp.callers]] may be one caller to it: a token it ignores, the same \
         credentials under another name), so a result to {b} naming {a}'s effect would prove \
         no leak: the count sees every caller's effects alike{at_api}. To check that keys are \
         scoped by caller, count with a tool that lists each caller's own effects \
         (mcp.count.tool.caller = \"each\"), and give each caller its own credentials \
         (behind [upstream], the token upstream.tokens names for it)"
    ));
}

fn identity_field(probe: &McpProbe) -> &'static str {
    match probe.target.identity {
        McpIdentity::Structured(_) => "mcp.identity.structured_pointer",
        McpIdentity::Text(_) => "mcp.identity.text_regex",
    }
}

fn count_field(probe: &McpProbe) -> &'static str {
    match &probe.target.count {
        McpCount::Tool {
            from_text: false, ..
        } => "mcp.count.tool.structured_pointer",
        McpCount::Tool {
            from_text: true, ..
        } => "mcp.count.tool.text_pointer",
        McpCount::Sqlite { .. } => "mcp.count.sql.sqlite",
        McpCount::Command(_) => "mcp.count.command",
        McpCount::Upstream => "[upstream]",
    }
}

fn describe(probe: &McpProbe, call: &ToolCall, seen: &Seen) -> String {
    let answer = match &seen.answer {
        Answer::ToolResult { body, .. } => format!("{}: {}", seen.answer.summary(), one_line(body)),
        other => one_line(&other.summary()),
    };
    format!(
        "#{} tools/call {} as {} answered {answer}",
        seen.id, probe.target.tool.name, probe.target.callers[call.caller].name
    )
}

/// A create as `caller` that must succeed and name its effect: the exchange and the identity.
async fn create(
    probe: &McpProbe,
    calibration: &mut Calibration,
    caller: usize,
    what: &str,
) -> Proved<(Seen, String)> {
    let mut call = probe.call(
        &format!("calibration: {what}"),
        probe.intention_key(),
        &probe.fresh_fields(),
    );
    call.caller = caller;
    created(probe, calibration, &call, what).await
}

/// `call`, which must succeed and name its effect: the exchange and the identity.
async fn created(
    probe: &McpProbe,
    calibration: &mut Calibration,
    call: &ToolCall,
    what: &str,
) -> Proved<(Seen, String)> {
    let caller = call.caller;
    let mark = probe.upstream.as_ref().map(UpstreamApi::mark);
    let seen = probe.send(POINT, call).await;
    if let (Some(api), Some(mark), KeyArg::Key(key)) = (&probe.upstream, mark, &call.key)
        && let Some((field, place)) = key_elsewhere(api, mark, key)
    {
        return Err(Stop::mismatch(
            field,
            format!(
                "#{} reached the API with the agent's key in {place}, not in {}: say where the \
                 wrapper sends it ({field}{})",
                seen.id,
                api.spec.key_place(),
                if field == api.spec.key_field() {
                    String::new()
                } else {
                    format!(" instead of {}", api.spec.key_field())
                }
            ),
        ));
    }
    let who = &probe.target.callers[caller].name;
    if !seen.read.success {
        if let (Some(api), Some(mark)) = (&probe.upstream, mark)
            && let Some(stop) = unauthorized(probe, api, mark, caller, &seen)
        {
            return Err(stop);
        }
        if let Answer::NoAnswer { .. } = seen.answer {
            return Err(Stop::Unreachable {
                asked: "create",
                problem: describe(probe, call, &seen),
            });
        }
        return Err(diagnose(probe, call, &seen).await);
    }
    let Some(identity) = seen.read.identity.clone() else {
        return Err(no_identity(probe, call, &seen));
    };
    held_created(
        probe,
        calibration,
        (caller, who),
        what,
        (&identity, seen.id),
    );
    Ok((seen, identity))
}

/// The field that gives `caller` its credentials: its environment or its words over stdio (the
/// one the file uses; the environment when it uses neither), its headers over HTTP.
fn credentials_field(probe: &McpProbe, caller: usize) -> String {
    let who = &probe.target.callers[caller];
    let part = match &probe.target.transport {
        McpTransport::Http { .. } => "headers",
        McpTransport::Stdio { .. } if who.env.is_empty() && !who.args.is_empty() => "args",
        McpTransport::Stdio { .. } => "env",
    };
    format!("mcp.callers[{caller}].{part}")
}

/// A create the API refused for its token (`401`, `403`): the caller's credentials, which the
/// wrapper passes on, are at fault, not the tool's arguments. Says which token arrived, never
/// the token itself.
fn unauthorized(
    probe: &McpProbe,
    api: &UpstreamApi,
    mark: usize,
    caller: usize,
    seen: &Seen,
) -> Option<Stop> {
    let refused = api
        .since(mark)
        .into_iter()
        .find(|r| matches!(r.status(), Some(401 | 403)))?;
    let status = refused.status().unwrap_or_default();
    let who = &probe.target.callers[caller].name;
    let header = api.spec.token_header.as_deref().unwrap_or("authorization");
    let arrived = match api.token_of(&refused) {
        None => format!("no {} header arrived", header.to_ascii_lowercase()),
        Some(Ok(name)) if name == *who => format!("{who}'s token arrived"),
        Some(Ok(name)) => format!("{name}'s token arrived, not {who}'s"),
        Some(Err(())) => "a token upstream.tokens does not name arrived".to_owned(),
    };
    let field = credentials_field(probe, caller);
    Some(Stop::mismatch(
        field.clone(),
        format!(
            "#{} reached the API as {} {}, which the API answered {status} ({arrived}): the API \
             refused the caller's token, not the tool's arguments. Give {who} the token \
             upstream.tokens names for it, where the wrapper reads it ({field})",
            seen.id, refused.method, refused.target
        ),
    ))
}

fn no_identity(probe: &McpProbe, call: &ToolCall, seen: &Seen) -> Stop {
    let exchange = describe(probe, call, seen);
    let result: Value = match &seen.answer {
        Answer::ToolResult { body, .. } => serde_json::from_str(body).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    match &probe.target.identity {
        McpIdentity::Structured(pointer) => {
            let structured = result.get("structuredContent").cloned().unwrap_or_default();
            let ids = id_pointers(&structured);
            Stop::mismatch(
                "mcp.identity.structured_pointer",
                format!(
                    "{pointer:?} finds nothing in the result's structuredContent ({exchange}); \
                     its pointers that hold ids: {}. Without structuredContent, read the text \
                     with mcp.identity.text_regex",
                    if ids.is_empty() {
                        "none".to_owned()
                    } else {
                        ids.join(", ")
                    }
                ),
            )
        }
        McpIdentity::Text(regex) => Stop::mismatch(
            "mcp.identity.text_regex",
            format!(
                "{:?} matches nothing in the result's text ({exchange}); fit it to the text",
                regex.as_str()
            ),
        ),
    }
}

/// A refused first create: another key shape, or the file's own field values, taken where the
/// varied call was refused, names the field at fault.
async fn diagnose(probe: &McpProbe, call: &ToolCall, seen: &Seen) -> Stop {
    let exchange = describe(probe, call, seen);
    if let Some(stop) = schema_at_fault(probe, &exchange) {
        return stop;
    }
    // A result that names an API's 401 or 403: the token the server sends, which a caller gives.
    let result: Value = match &seen.answer {
        Answer::ToolResult { body, .. } => serde_json::from_str(body).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    if let Some(status) = api_error_status(&result).filter(|s| s == "401" || s == "403") {
        let field = credentials_field(probe, call.caller);
        return Stop::mismatch(
            field.clone(),
            format!(
                "{exchange}: the API behind the server answered {status}, which is about the \
                 caller's credentials, not the tool's arguments. Give {} the token the API takes, \
                 where the server reads it ({field})",
                probe.target.callers[call.caller].name
            ),
        );
    }
    if let KeyArg::Key(sent) = &call.key {
        let (other, shape) = other_shape(sent);
        let mut retry = call.clone();
        retry.step = format!("calibration: the create with a key of shape {shape}");
        retry.key = KeyArg::Key(other.clone());
        let again = probe.send(POINT, &retry).await;
        if again.read.success {
            let tried = (sent.as_str(), other.as_str(), shape);
            return shape_at_fault(&exchange, tried, again.id, "server");
        }
    }
    if let Some(stop) = vary_at_fault(probe, call, &exchange).await {
        return stop;
    }
    Stop::mismatch(
        "mcp.tool",
        format!(
            "{exchange}. The same call with the file's own field values was refused as well: \
             check mcp.tool.name, mcp.tool.arguments and mcp.tool.fields against the tool's \
             input schema"
        ),
    )
}

/// The arguments the tool's input schema requires and the file never sends: the key argument
/// the file does not name, or an argument missing from `mcp.tool.arguments`.
fn schema_at_fault(probe: &McpProbe, exchange: &str) -> Option<Stop> {
    let tool = &probe.target.tool;
    let listed = probe.tools.iter().find(|t| t.name == tool.name.as_str());
    let Some(listed) = listed else {
        let names: Vec<&str> = probe.tools.iter().map(|t| t.name.as_ref()).collect();
        return Some(Stop::mismatch(
            "mcp.tool.name",
            format!(
                "{exchange}; the server lists no tool {:?}, only: {}",
                tool.name,
                names.join(", ")
            ),
        ));
    };
    let required = listed.input_schema.get("required")?.as_array()?;
    let given = tool.arguments.as_object()?;
    let missing: Vec<&str> = required
        .iter()
        .filter_map(Value::as_str)
        .filter(|name| !given.contains_key(*name) && tool.key_argument.as_deref() != Some(name))
        .collect();
    let first = missing.first()?;
    if tool.key_argument.is_none() && first.to_ascii_lowercase().contains("key") {
        return Some(Stop::mismatch(
            "mcp.tool.key_argument",
            format!(
                "{exchange}; the tool's input schema requires {first:?}, which the file does not \
                 send (no_key = true): say key_argument = {first:?}"
            ),
        ));
    }
    // A declared key argument the schema does not know, while it requires a key of another
    // name: the key argument is misnamed, not an argument missing.
    let properties = listed
        .input_schema
        .get("properties")
        .and_then(Value::as_object);
    if let Some(declared) = tool.key_argument.as_deref()
        && first.to_ascii_lowercase().contains("key")
        && properties.is_some_and(|p| !p.contains_key(declared))
    {
        return Some(Stop::mismatch(
            "mcp.tool.key_argument",
            format!(
                "{exchange}; the tool's input schema has no argument {declared:?} and requires \
                 {first:?}: say key_argument = {first:?}"
            ),
        ));
    }
    Some(Stop::mismatch(
        "mcp.tool.arguments",
        format!(
            "{exchange}; the tool's input schema requires {}, which mcp.tool.arguments does not \
             give",
            missing.join(", ")
        ),
    ))
}

/// The count once `done` holds of it, read again a few times within a second while it does
/// not (a count that lags).
async fn settled(probe: &McpProbe, before: i64, done: impl Fn(i64) -> bool) -> Proved<i64> {
    let mut now = before;
    for attempt in 0..4 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        now = probe.count().await?;
        if done(now) {
            break;
        }
    }
    Ok(now)
}

/// The identity names the effect, not a value each result has of its own (a request id, a
/// time) or one the arguments decide (a title): the first call again, same key and arguments,
/// names it again unless it made a new effect; two fresh keys with identical arguments name
/// two effects when they made two. Judged on the count, so a server that ignores keys still
/// calibrates. The count after these calls.
async fn names_the_effect(
    probe: &McpProbe,
    calibration: &mut Calibration,
    now: i64,
    (first_call, first): (&ToolCall, &(Seen, String)),
    second: &(Seen, String),
) -> Proved<i64> {
    let (now, replayed) = replay(probe, now, first_call, first).await?;
    let fields = probe.fresh_fields();
    let mut twins = Vec::new();
    for which in ["first", "second"] {
        let call = probe.call(
            &format!("calibration: the {which} of two new keys with identical arguments"),
            probe.intention_key(),
            &fields,
        );
        let seen = probe.send(POINT, &call).await;
        if let Some(named) = seen.read.identity.clone() {
            twins.push((seen, named));
        }
    }
    let after = settled(probe, now, |n| n >= now + 2).await?;
    let answers = Answers {
        first: structured(&first.0),
        second: structured(&second.0),
        replay: replayed.as_ref().map(|r| structured(r.seen())),
        twins: match twins.as_slice() {
            [a, b] => Some((structured(&a.0), structured(&b.0))),
            _ => None,
        },
    };
    if let [(a, named), (b, other)] = twins.as_slice() {
        let wrong = || {
            format!(
                "two calls with new keys and identical arguments (#{} and #{}) made two \
                 effects, counted, and both named {named:?}: a value the arguments decide (a \
                 title), not what identifies the created thing.{}",
                a.id,
                b.id,
                advice(probe, &answers)
            )
        };
        let twins = ((a.id, named.as_str()), (b.id, other.as_str()));
        let field = (identity_field(probe), "arguments");
        judge_twins(calibration, field, twins, after - now, wrong)?;
    }
    if let Some(replayed) = &replayed {
        judge_replay(probe, calibration, &answers, first, replayed)?;
    }
    Ok(after)
}

/// The result's `structuredContent`, `null` without one.
fn structured(seen: &Seen) -> Value {
    match &seen.answer {
        Answer::ToolResult { body, .. } => serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|result| result.get("structuredContent").cloned())
            .unwrap_or_default(),
        _ => Value::Null,
    }
}

/// What the first call sent again (same key and arguments) named.
enum Replayed {
    /// The first effect's identity again.
    Same(Seen),
    /// Another value, with a new effect counted: the server does not hold the key.
    NewEffect(Seen),
    /// Another value with no new effect; `stable`: a third send named that value again, which
    /// a value each result has of its own (a request id, a time) would not.
    Other { seen: Seen, stable: bool },
}

impl Replayed {
    fn seen(&self) -> &Seen {
        match self {
            Replayed::Same(seen) | Replayed::NewEffect(seen) | Replayed::Other { seen, .. } => seen,
        }
    }
}

/// The first call sent again, when it carries a key and the server answers it with an
/// identity; the count after.
async fn replay(
    probe: &McpProbe,
    now: i64,
    first_call: &ToolCall,
    first: &(Seen, String),
) -> Proved<(i64, Option<Replayed>)> {
    let KeyArg::Key(_) = first_call.key else {
        return Ok((now, None));
    };
    let mut again = first_call.clone();
    again.step = "calibration: the first create again, same key and arguments".to_owned();
    let seen = probe.send(POINT, &again).await;
    let Some(named) = seen.read.identity.clone().filter(|_| seen.read.success) else {
        return Ok((settled(probe, now, |_| true).await?, None));
    };
    let same = named == first.1;
    let after = settled(probe, now, |n| same || n != now).await?;
    if same {
        return Ok((after, Some(Replayed::Same(seen))));
    }
    if after != now {
        return Ok((after, Some(Replayed::NewEffect(seen))));
    }
    again.step = "calibration: the first create a third time, same key and arguments".to_owned();
    let third = probe.send(POINT, &again).await;
    let stable = third.read.identity.as_deref() == Some(named.as_str());
    let after = settled(probe, now, |_| true).await?;
    Ok((after, Some(Replayed::Other { seen, stable })))
}

/// A replay that made no new effect names the first effect. Another value is the file's fault
/// when it changes from one replay to the next (a value each result has of its own), or when
/// another pointer of `structuredContent` held one value per effect, the same on the replay:
/// else it may be the server's replay that names another effect, which the points report.
fn judge_replay(
    probe: &McpProbe,
    calibration: &mut Calibration,
    answers: &Answers,
    first: &(Seen, String),
    replayed: &Replayed,
) -> Proved<()> {
    let field = identity_field(probe);
    let (seen, how) = match replayed {
        Replayed::Same(seen) => (
            seen,
            format!(
                "a replay (same key and arguments) names the first effect again, {}",
                first.1
            ),
        ),
        Replayed::NewEffect(seen) => (
            seen,
            format!(
                "a replay made a new effect, named {}: the server does not hold the key, which \
                 the points report",
                seen.read.identity.as_deref().unwrap_or_default()
            ),
        ),
        Replayed::Other { seen, stable } => {
            let held_by_another = match &probe.target.identity {
                McpIdentity::Structured(pointer) => !answers.identities(None, pointer).is_empty(),
                McpIdentity::Text(_) => false,
            };
            if *stable && !held_by_another {
                return Ok(());
            }
            return Err(Stop::mismatch(
                field,
                format!(
                    "a replay of #{} (same key, same arguments) made no new effect, counted, \
                     yet #{} named {:?}, not {:?}{}: the identity read so is a value each \
                     result has of its own (a request id, a time). Name what identifies the \
                     created thing.{}",
                    first.0.id,
                    seen.id,
                    seen.read.identity.as_deref().unwrap_or_default(),
                    first.1,
                    if *stable {
                        ""
                    } else {
                        ", and a third send named yet another"
                    },
                    advice(probe, answers)
                ),
            ));
        }
    };
    calibration.held("identity-replayed", field, how, &[first.0.id, seen.id]);
    Ok(())
}

/// The pointers of `structuredContent` that behaved as an identity in every exchange, as
/// advice; empty when none did or the identity is read from the text.
fn advice(probe: &McpProbe, answers: &Answers) -> String {
    let but = match &probe.target.identity {
        McpIdentity::Structured(pointer) => pointer.as_str(),
        McpIdentity::Text(_) => "",
    };
    let found: Vec<String> = answers
        .identities(None, but)
        .iter()
        .map(|p| format!("{p:?}"))
        .collect();
    match found.first() {
        None => String::new(),
        Some(best) => format!(
            " The pointers of structuredContent that held one value per effect, the same on a \
             replay: {}. Set mcp.identity.structured_pointer = {best}",
            found.join(", ")
        ),
    }
}

/// The count after a create rose by exactly one (read again a few times when it lags).
async fn rose(
    probe: &McpProbe,
    calibration: &mut Calibration,
    before: i64,
    caller: usize,
    created: &(Seen, String),
) -> Proved<i64> {
    let mut after = before;
    for attempt in 0..4 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        after = probe.count().await?;
        if after != before {
            break;
        }
    }
    let who = &probe.target.callers[caller].name;
    if after - before != 1 {
        let why = match &probe.target.count {
            McpCount::Tool {
                caller: Some(one), ..
            } if *one != caller && after == before => format!(
                " The count is read on {}'s session only, and may list only its effects: \
                 mcp.count.tool.caller = \"each\" sums every caller's",
                probe.target.callers[*one].name
            ),
            _ => String::new(),
        };
        return Err(Stop::mismatch(
            count_field(probe),
            format!(
                "{who}'s create (#{}, naming {}) changed the count from {before} to {after}, \
                 not by exactly one.{why}",
                created.0.id, created.1
            ),
        ));
    }
    calibration.held(
        "count-rises",
        count_field(probe),
        format!("{who}'s create raised the count by one: {before} to {after}"),
        &[created.0.id],
    );
    Ok(after)
}

/// The validation fields make the tool refuse the call.
async fn validation(probe: &McpProbe, calibration: &mut Calibration) -> Proved<()> {
    let mut fields = probe.fresh_fields();
    fields.extend(probe.target.errors.validation.clone());
    let call = probe.call(
        "calibration: mcp.errors.validation",
        probe.intention_key(),
        &fields,
    );
    let provoked = probe.provoke_refusal();
    let seen = probe.send(POINT, &call).await;
    probe.settle_refusal();
    if !seen.read.refused {
        if provoked {
            return provoked_unread(probe, calibration, &call, &seen);
        }
        return Err(Stop::mismatch(
            "mcp.errors.validation",
            format!(
                "the fields {} were not refused ({}); the points expect an error result or a \
                 JSON-RPC error. Name field values the tool refuses",
                serde_json::to_string(&probe.target.errors.validation).unwrap_or_default(),
                describe(probe, &call, &seen)
            ),
        ));
    }
    calibration.held(
        "validation",
        if provoked {
            "[upstream]"
        } else {
            "mcp.errors.validation"
        },
        if provoked {
            format!("the API's 400 came back as {}", probe.describe(&seen))
        } else {
            format!("provoked {}", probe.describe(&seen))
        },
        &[seen.id],
    );
    Ok(())
}

/// The API's provoked `400` that did not come back as a refusal. In a result not marked
/// `isError`, the wrapper told the agent its call succeeded: that is what the points grade (each
/// that asks whether the agent was told of a failure fails), not a slip in the file, and the
/// calibration does not ask for a code reader, which would not change what the agent reads.
fn provoked_unread(
    probe: &McpProbe,
    calibration: &mut Calibration,
    call: &ToolCall,
    seen: &Seen,
) -> Proved<()> {
    if let Answer::ToolResult {
        is_error: false, ..
    } = seen.answer
    {
        calibration.held(
            "validation",
            "[upstream]",
            format!(
                "the API's 400 came back in a result not marked isError ({}): the agent is told \
                 its call succeeded, which the points grade",
                describe(probe, call, seen)
            ),
            &[seen.id],
        );
        return Ok(());
    }
    Err(Stop::Unreachable {
        asked: "create",
        problem: format!(
            "the API answered the create 400 (the lab had it refuse), and the agent got no \
             result: {}",
            describe(probe, call, seen)
        ),
    })
}
