//! Calibration: before any point is graded, the check proves that the target file describes the
//! service, with a few exchanges of its own (recorded in the history under the point
//! `calibration`). A create with the file's fields succeeds; the identity is where the file
//! says, differs between two keys, and names the effect (`naming.rs`: the same on a replay, two
//! for two new keys with identical fields, seen by the count's listing or `[read]`); each
//! caller's count rises by exactly one per create; each declared provocation produces what the
//! points expect of it; the count can be read.
//!
//! It asks only what a service that keeps the contract and one that ignores keys would both
//! answer as the file says: every create but one carries a fresh key, and the one replay is
//! judged by what the count saw (a new effect may rightly name a new value). So a service that
//! ignores keys still calibrates, and its duplicates stay findings of the points. The other
//! reuse is a fault hook's request that answered with a success, sent again under its key: only
//! a replay then (the key's record kept) stops the check, which a service that ignores keys
//! never answers.
//!
//! When a step fails, the check stops before any point with [`Error::TargetMismatch`] (exit
//! status 2), naming the field at fault, the exchange, what came back (trimmed) and the likely
//! fix. A service that does not answer at all is not the file's fault: that stays
//! [`Error::Http`] (exit status 1).

mod count;
pub(crate) mod naming;

use serde_json::Value;

use super::both::{Front, held_created};
use super::excerpt::{one_line, quoted};
use super::history::Answer;
use super::http::{Outgoing, Wire};
use super::probe::{Call, KeyWire, Probe, Seen};
use super::report::{Calibration, Callers, POINT, Proved, Stop};
use super::target::{
    Count, CountCallers, Identity, KeyForm, Provocation, ReadRequest, Replay, is_uuid,
};
use count::{Counter, Created, describe_call, describe_path, identity_field, listed};
pub use count::{count_pointers, id_pointers};

/// A key with the characters of a random UUID v4 (lowercase, hyphens), for the calibration's
/// question "does the service take another key shape?". Random from the standard library's
/// randomly seeded hasher: the key must be fresh, not secret.
pub fn uuid_key() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut bytes = [0u8; 16];
    for half in bytes.chunks_mut(8) {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        half.copy_from_slice(&hasher.finish().to_le_bytes());
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Runs the calibration against the probe's target, recording its exchanges.
///
/// # Errors
/// [`Stop::Mismatch`] naming the field at fault; [`Stop::Unreachable`] when the service does not
/// answer.
pub async fn calibrate(probe: &Probe) -> Proved<Calibration> {
    let mut calibration = Calibration::default();
    let mut counter = Counter::new(probe);
    let mut now = match counter.read(&mut calibration, "count").await {
        Ok(now) => now,
        Err(stop) => return Err(prefix_at_fault(probe, stop).await),
    };
    let first = create_step(probe, &mut calibration).await?;
    now = counter.rose(&mut calibration, now, 0, &first).await?;
    let second = created(probe, &mut calibration, 0, "a second create").await?;
    differs(probe, &mut calibration, &first, &second)?;
    now = counter.rose(&mut calibration, now, 0, &second).await?;
    now = naming::names_the_effect(probe, &mut calibration, &counter, now, &first, &second).await?;
    let mut others = Vec::new();
    let mut marks = None;
    let api_mark = || {
        probe
            .upstream
            .as_ref()
            .map(super::upstream::UpstreamApi::mark)
    };
    for caller in 1..probe.target.callers.len() {
        let mark = api_mark();
        let seen = created(probe, &mut calibration, caller, "a create").await?;
        if caller == 1 {
            marks = mark.zip(api_mark());
        }
        now = counter.rose(&mut calibration, now, caller, &seen).await?;
        others.push(seen);
    }
    let _ = now;
    callers_apart(probe, &mut calibration, others.first(), marks).await;
    replay_marks(probe, &mut calibration, &first).await?;
    other_endpoint(probe, &mut calibration).await?;
    provocations(probe, &mut calibration).await?;
    calibration.passed = true;
    Ok(calibration)
}

/// The first create, as the file describes it; when it fails, the likely field at fault.
async fn create_step(probe: &Probe, calibration: &mut Calibration) -> Proved<Created> {
    let call = probe.call(
        "calibration: a create with the file's fields",
        KeyWire::Normal(probe.fresh_key()),
        &probe.fresh_fields(false),
    );
    let seen = probe.send(POINT, &call).await;
    let read = probe.read(&seen.answer, false);
    if !read.success {
        return Err(diagnose(probe, &call, &seen).await);
    }
    calibration.held(
        "create",
        "create",
        format!(
            "a create with the file's fields succeeds: {}",
            seen.answer.summary()
        ),
        &[seen.id],
    );
    let identity = identity(probe, &call, &seen)?;
    calibration.held(
        "identity",
        identity_field(probe),
        format!("the identity is found where the file says: {identity}"),
        &[seen.id],
    );
    Ok(Created {
        call,
        seen,
        identity,
    })
}

/// The identity of a success, or the mismatch naming where the body holds ids.
fn identity(probe: &Probe, call: &Call, seen: &Seen) -> Proved<String> {
    if let Some(found) = probe.read(&seen.answer, call.other_endpoint).identity {
        return Ok(found);
    }
    let exchange = describe_call(probe, call, seen);
    let Answer::Reply { headers, body, .. } = &seen.answer else {
        return Err(Stop::mismatch(identity_field(probe), exchange));
    };
    Err(match &probe.target.identity {
        Identity::Pointer(pointer) => {
            let hint = match serde_json::from_str::<Value>(body) {
                Ok(json) => format!(
                    "the body's pointers that hold ids: {}",
                    listed(&id_pointers(&json))
                ),
                Err(_) => "the body is not JSON; name a header with identity.header".to_owned(),
            };
            Stop::mismatch(
                "identity.json_pointer",
                format!(
                    "{pointer:?} finds nothing in a success ({exchange}); {hint}. Set \
                     identity.json_pointer to the one that names the created thing"
                ),
            )
        }
        Identity::Header(name) => {
            let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
            Stop::mismatch(
                "identity.header",
                format!(
                    "no {name} header in a success ({exchange}); its headers: {}. Name the \
                     one that identifies the created thing, or use identity.json_pointer",
                    names.join(", ")
                ),
            )
        }
    })
}

/// A further create as `caller`, which must succeed and name its effect.
async fn created(
    probe: &Probe,
    calibration: &mut Calibration,
    caller: usize,
    what: &str,
) -> Proved<Created> {
    let mut call = probe.call(
        &format!("calibration: {what} with a fresh key"),
        KeyWire::Normal(probe.fresh_key()),
        &probe.fresh_fields(false),
    );
    call.caller = caller;
    let seen = probe.send(POINT, &call).await;
    let name = &probe.target.callers[caller].name;
    if !probe.read(&seen.answer, false).success {
        let field = if caller == 0 {
            "create".to_owned()
        } else {
            format!("callers[{caller}].headers")
        };
        return Err(Stop::mismatch(
            field,
            format!(
                "{what} as {name}, as the first one succeeded, was refused: {}",
                describe_call(probe, &call, &seen)
            ),
        ));
    }
    let identity = identity(probe, &call, &seen)?;
    held_created(
        probe,
        calibration,
        (caller, name),
        what,
        (&identity, seen.id),
    );
    Ok(Created {
        call,
        seen,
        identity,
    })
}

/// Two creates with different keys and fields name different effects.
fn differs(
    probe: &Probe,
    calibration: &mut Calibration,
    first: &Created,
    second: &Created,
) -> Proved<()> {
    let field = identity_field(probe);
    if first.identity == second.identity {
        return Err(Stop::mismatch(
            field,
            format!(
                "two creates with different keys and fields (#{} and #{}) both name {:?}: that \
                 is not what identifies a created thing. {}",
                first.seen.id,
                second.seen.id,
                first.identity,
                match &second.seen.answer {
                    Answer::Reply { body, .. } => serde_json::from_str::<Value>(body)
                        .map(|json| format!(
                            "The body's pointers that hold ids: {}",
                            listed(&id_pointers(&json))
                        ))
                        .unwrap_or_default(),
                    _ => String::new(),
                }
            ),
        ));
    }
    calibration.held(
        "identity-differs",
        field,
        format!(
            "two keys name two effects: {} and {}",
            first.identity, second.identity
        ),
        &[first.seen.id, second.seen.id],
    );
    Ok(())
}

/// A failed first create: the answer names the field at fault when it can (a path, a
/// credential), and otherwise a few more creates ask which of the key's shape, the key's form
/// or a varied field the service refuses.
async fn diagnose(probe: &Probe, call: &Call, seen: &Seen) -> Stop {
    let exchange = describe_call(probe, call, seen);
    let endpoint = probe.endpoint(false);
    let status = match &seen.answer {
        Answer::Reply { status, .. } => *status,
        _ => {
            return Stop::Unreachable {
                asked: "create",
                problem: exchange,
            };
        }
    };
    match status {
        200..=299 => {
            return Stop::mismatch(
                "create.success",
                format!(
                    "{exchange}, which create.success {:?} does not list: add {status}",
                    endpoint.success
                ),
            );
        }
        404 | 405 => {
            let stop = Stop::mismatch(
                "create.path",
                format!("{exchange}: is create.method and create.path the create's route?"),
            );
            return if status == 404 {
                prefix_at_fault(probe, stop).await
            } else {
                stop
            };
        }
        401 | 403 => {
            return Stop::mismatch(
                "callers[0].headers",
                format!("{exchange}: the service does not take the first caller's credentials"),
            );
        }
        _ => {}
    }
    if let Some(stop) = key_at_fault(probe, call, &exchange).await {
        return stop;
    }
    if let Some(stop) = key_header_at_fault(probe, call, seen, &exchange).await {
        return stop;
    }
    if let Some(stop) = vary_at_fault(probe, call, &exchange).await {
        return stop;
    }
    Stop::mismatch(
        "create",
        format!(
            "{exchange}. The same create with the file's own field values, another key shape \
             and the key's other form was refused as well: check create.body, create.fields \
             and create.headers against what the service takes"
        ),
    )
}

/// A key of the other shape than `sent` (text for a UUID, a UUID for text), and the shape's
/// name in `key.shape`.
pub(crate) fn other_shape(sent: &str) -> (String, &'static str) {
    if is_uuid(sent) {
        (format!("chk-{}", &uuid_key()[..13]), "text")
    } else {
        (uuid_key(), "uuid")
    }
}

/// The mismatch of a create refused (`exchange`) under the key `sent` that exchange `id`, the
/// same create under `other` (of `shape`), got through: the `who` takes keys of another shape.
pub(crate) fn shape_at_fault(
    exchange: &str,
    (sent, other, shape): (&str, &str, &str),
    id: usize,
    who: &str,
) -> Stop {
    Stop::mismatch(
        "key.shape",
        format!(
            "{exchange} to the key {sent:?}, and #{id} succeeded with the key {other:?}: the \
             {who} takes keys of another shape. Set key.shape = \"{shape}\""
        ),
    )
}

/// Whether the service takes the create with the key in another shape (a UUID, or text) or in
/// its other form (bare or quoted); the mismatch naming `key.shape` or `key.form` if so.
async fn key_at_fault(probe: &Probe, call: &Call, exchange: &str) -> Option<Stop> {
    let KeyWire::Normal(sent) = &call.key else {
        return None;
    };
    let (other, shape) = other_shape(sent);
    let mut retry = call.clone();
    retry.step = format!("calibration: the create with a key of shape {shape}");
    retry.key = KeyWire::Normal(other.clone());
    let seen = probe.send(POINT, &retry).await;
    if probe.read(&seen.answer, false).success {
        let tried = (sent.as_str(), other.as_str(), shape);
        return Some(shape_at_fault(exchange, tried, seen.id, "service"));
    }
    let (form, name) = match probe.target.key.form {
        KeyForm::SfString => ("token", "bare"),
        KeyForm::Token | KeyForm::Opaque => ("sf-string", "quoted"),
    };
    retry.step = format!("calibration: the create with the key {name}");
    retry.key = KeyWire::OtherForm(probe.fresh_key());
    let seen = probe.send(POINT, &retry).await;
    probe.read(&seen.answer, false).success.then(|| {
        Stop::mismatch(
            "key.form",
            format!(
                "{exchange}, and #{} succeeded with the key written {name}: set key.form = \
                 \"{form}\"",
                seen.id
            ),
        )
    })
}

/// The header names a refusal's body mentions (hyphenated words, as `Idempotency-Key`), then
/// the common names of a key header: the names to try the key under.
fn key_header_names(probe: &Probe, refusal: &Answer) -> Vec<String> {
    let body = match refusal {
        Answer::Reply { body, .. } => body.as_str(),
        _ => "",
    };
    let sent: Vec<String> = probe
        .endpoint(false)
        .headers
        .iter()
        .chain(probe.target.callers.iter().flat_map(|c| c.headers.iter()))
        .map(|(name, _)| name.to_ascii_lowercase())
        .chain([probe.target.key.header.to_ascii_lowercase()])
        .collect();
    let mut names: Vec<String> = Vec::new();
    let words = body
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .filter(|w| w.contains('-') && w.starts_with(|c: char| c.is_ascii_alphabetic()))
        .take(3);
    for name in words.chain(["Idempotency-Key", "X-Idempotency-Key"]) {
        let name = name.trim_end_matches('-');
        let lower = name.to_ascii_lowercase();
        if !sent.contains(&lower) && !names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            names.push(name.to_owned());
        }
    }
    names
}

/// Whether the service takes the create with the key under another header name: the one its
/// refusal names, or a common one; the mismatch naming `key.header` if so. Only where the
/// create without any key is refused too, so the success is the key's and not its absence.
async fn key_header_at_fault(
    probe: &Probe,
    call: &Call,
    seen: &Seen,
    exchange: &str,
) -> Option<Stop> {
    let mut bare = call.clone();
    bare.step = "calibration: the create without a key".to_owned();
    bare.key = KeyWire::Absent;
    if probe
        .read(&probe.send(POINT, &bare).await.answer, false)
        .success
    {
        return None;
    }
    for name in key_header_names(probe, &seen.answer) {
        let mut under = bare.clone();
        under.step = format!("calibration: the create with the key in {name}");
        let key = probe.key_value(&KeyWire::Normal(probe.fresh_key()))?;
        under.extra.push((name.clone(), key));
        let took = probe.send(POINT, &under).await;
        if probe.read(&took.answer, false).success {
            let file = &probe.target.key.header;
            return Some(Stop::mismatch(
                "key.header",
                format!(
                    "{exchange}, and #{} succeeded with the key in {name}: the service reads \
                     its key from {name}, not {file}. Set key.header = \"{name}\"",
                    took.id
                ),
            ));
        }
    }
    None
}

/// A path that answered 404 (`count.request.path` or `create.path` at fault in `stop`): when the
/// same request without the base URL's path prefix is answered, or the file's other path answers
/// 404 too, the prefix is at fault, not the path: the mismatch names `service.base_url`.
/// Otherwise `stop` stands.
async fn prefix_at_fault(probe: &Probe, stop: Stop) -> Stop {
    let Stop::Mismatch { field, problem } = &stop else {
        return stop;
    };
    let counting = field == "count.request.path";
    let answered_404 = probe
        .history
        .exchanges()
        .last()
        .is_some_and(|e| e.answer.status() == Some(404));
    if !(counting || field == "create.path") || !answered_404 {
        return stop;
    }
    // The exchange only: the path's advice would send the user to the wrong field.
    let problem = problem.split(": is ").next().unwrap_or(problem);
    let service = &probe.target.service;
    let prefix = service.url.path();
    let base = service.base_url.trim_end_matches('/');
    let root = base.strip_suffix(prefix).unwrap_or(base);
    if !prefix.is_empty()
        && let Some(id) = answered_at_root(probe, counting).await
    {
        return Stop::mismatch(
            "service.base_url",
            format!(
                "{problem}; #{id}, the same request without the base URL's path prefix \
                 {prefix}, succeeded: the service's routes are not under {prefix}. Set \
                 service.base_url (or --url) to {root}"
            ),
        );
    }
    let Some(other) = other_path(probe, counting).await else {
        return stop;
    };
    if other.answer.status() != Some(404) {
        return stop;
    }
    let under = if prefix.is_empty() {
        "with no path prefix".to_owned()
    } else {
        format!("under the path prefix {prefix}")
    };
    Stop::mismatch(
        "service.base_url",
        format!(
            "{problem}; #{} {} answered 404 as well: no path the file names is found at {base}, \
             {under}. Set service.base_url (or --url) to the URL the service's routes start at",
            other.id,
            describe_path(probe, counting)
        ),
    )
}

/// Sends the failed request (the count's, or a create) without the base URL's prefix; the
/// exchange when it succeeded there.
async fn answered_at_root(probe: &Probe, counting: bool) -> Option<usize> {
    if counting {
        let service = &probe.target.service;
        let root = Counter::over(
            probe,
            Wire::new(service.url.host(), service.url.port(), "", service.timeout),
        );
        return root.by_request().await.ok()?.1.last().copied();
    }
    let call = probe.call(
        "calibration: the create without the base URL's path prefix",
        KeyWire::Normal(probe.fresh_key()),
        &probe.fresh_fields(false),
    );
    let seen = probe.send_without_prefix(POINT, &call).await;
    probe.read(&seen.answer, false).success.then_some(seen.id)
}

/// Another path the file names, sent under the base URL: the create after a count that 404ed,
/// the other endpoint after a create that did.
async fn other_path(probe: &Probe, counting: bool) -> Option<Seen> {
    if !counting && probe.target.other_endpoint.is_none() {
        return None;
    }
    let mut call = probe.call(
        "calibration: another path the file names",
        KeyWire::Normal(probe.fresh_key()),
        &probe.fresh_fields(!counting),
    );
    call.other_endpoint = !counting;
    Some(probe.send(POINT, &call).await)
}

/// When a create with varied fields was refused (`exchange`): the same create with the file's
/// own values, then with each varied field alone, names the `vary` entry at fault. `None` when
/// the file's own values are refused too (the fault is elsewhere) or nothing was varied.
pub(crate) async fn vary_at_fault<F: Front>(
    front: &F,
    call: &F::Call,
    exchange: &str,
) -> Option<Stop> {
    let (varied, given) = (front.fields_of(call)?, front.given_fields());
    if varied == given {
        return None;
    }
    let step = "calibration: the create with the file's own field values";
    let seen = front
        .send(POINT, None, &front.afresh(call, step, given.clone()))
        .await;
    if !seen.succeeded() {
        return None;
    }
    let (vary, subject) = (front.vary_field(), front.subject());
    for (name, value) in varied.iter().filter(|(n, v)| given.get(*n) != Some(*v)) {
        let mut one = given.clone();
        one.insert(name.clone(), value.clone());
        let step = format!("calibration: the create with only {name} varied");
        let refused = front
            .send(POINT, None, &front.afresh(call, &step, one))
            .await;
        if !refused.succeeded() {
            return Some(Stop::mismatch(
                format!("{vary}.{name}"),
                format!(
                    "{subject} refuses {name} = {value} (#{} answered {}), a value the check made \
                     from the file's {} so that each point's effects are its own; #{} with the \
                     file's own values succeeded. Give {name} as a list of values {subject} takes \
                     ({vary} = {{ {name} = [...] }}), or do not vary it",
                    refused.id,
                    quoted(&refused.answer),
                    given.get(name).cloned().unwrap_or(Value::Null),
                    seen.id
                ),
            ));
        }
    }
    Some(Stop::mismatch(
        vary,
        format!(
            "{exchange}; #{} with the file's own field values succeeded, and no single varied \
             field is refused alone: vary fewer fields",
            seen.id
        ),
    ))
}

/// The other endpoint, when the file names one, takes a create with a fresh key.
async fn other_endpoint(probe: &Probe, calibration: &mut Calibration) -> Proved<()> {
    if probe.target.other_endpoint.is_none() {
        return Ok(());
    }
    let mut call = probe.call(
        "calibration: a create on the other endpoint",
        KeyWire::Normal(probe.fresh_key()),
        &probe.fresh_fields(true),
    );
    call.other_endpoint = true;
    let seen = probe.send(POINT, &call).await;
    if !probe.read(&seen.answer, true).success {
        return Err(Stop::mismatch(
            "other_endpoint",
            format!(
                "{}: a create on the other endpoint with a fresh key must succeed",
                describe_call(probe, &call, &seen)
            ),
        ));
    }
    calibration.held(
        "other-endpoint",
        "other_endpoint",
        format!(
            "a create on the other endpoint succeeds: {}",
            seen.answer.summary()
        ),
        &[seen.id],
    );
    Ok(())
}

/// Each declared provocation, under a fresh key, answers what the points expect of it.
async fn provocations(probe: &Probe, calibration: &mut Calibration) -> Proved<()> {
    let errors = &probe.target.errors;
    let validation_field = if errors.validation_given {
        "errors.validation"
    } else {
        "errors.validation (not given: a body that is not JSON)"
    };
    let mut asked: Vec<(&'static str, String, &Provocation, &str)> = vec![(
        "validation",
        validation_field.to_owned(),
        &errors.validation,
        "4xx",
    )];
    for (i, server) in errors.server.iter().enumerate() {
        let field = if errors.server.len() == 1 {
            "errors.server".to_owned()
        } else {
            format!("errors.server[{i}]")
        };
        asked.push(("server-error", field, server, "5xx"));
    }
    if let Some(hook) = &probe.target.faults.between_effect_and_record {
        asked.push((
            "fault-hook",
            "faults.between_effect_and_record".to_owned(),
            hook,
            "5xx or no answer",
        ));
    }
    for (name, field, provocation, expected) in asked {
        let fields = probe.fresh_fields(false);
        let mut call = probe.call(
            &format!("calibration: {field}"),
            KeyWire::Normal(probe.fresh_key()),
            &fields,
        );
        call.body = probe.provoked(&fields, provocation);
        call.extra = provocation.headers.clone();
        let seen = probe.send(POINT, &call).await;
        if name == "fault-hook" && probe.read(&seen.answer, false).success {
            hook_that_answered(probe, calibration, &call, &seen, field).await?;
            continue;
        }
        let status = seen.answer.status();
        let fired = match expected {
            "4xx" => status.is_some_and(|s| (400..=499).contains(&s)),
            "5xx" => status.is_some_and(|s| (500..=599).contains(&s)),
            _ => status.is_none_or(|s| s >= 500),
        };
        if !fired {
            return Err(Stop::mismatch(
                field.split(' ').next().unwrap_or(name).to_owned(),
                provocation_missed(probe, &call, &seen, provocation, expected),
            ));
        }
        calibration.held(
            name,
            field,
            format!("provoked {}", seen.answer.summary()),
            &[seen.id],
        );
    }
    Ok(())
}

/// A fault hook that answered with a success is a real fault when the key's record was lost
/// after the answer went out, as with a middleware that saves it after the response. Only a
/// replay proves the hook did not make the record fail: the same request, sent again under its
/// key, answered from the record. That alone is refused; the point tells the rest, comparing
/// the retry with a retry after a plain create (or says it cannot be told).
async fn hook_that_answered(
    probe: &Probe,
    calibration: &mut Calibration,
    hooked: &Call,
    seen: &Seen,
    field: String,
) -> Proved<()> {
    let mut again = hooked.clone();
    again.step = "calibration: the fault hook's request again, under its key".to_owned();
    let settled = probe.send_settled(POINT, &again).await;
    // send_settled sends at least once.
    let retry = &settled[settled.len() - 1];
    let first = probe.read(&seen.answer, false);
    if retried(probe, &first, retry) == Retried::Replayed {
        return Err(Stop::mismatch(
            field,
            format!(
                "{}, a success; #{} sent the same request again under its key and was \
                 replayed ({}): the key's record was kept, so the hook did not make it fail. \
                 Name a hook that fails the service after its effect (a 5xx or no answer), or \
                 one that loses the key's record after a success. If the service writes the \
                 key's record with its effect, no moment lies between them to fault: leave \
                 [faults] between_effect_and_record out (its point is then not covered)",
                describe_call(probe, hooked, seen),
                retry.id,
                probe.describe(&retry.answer)
            ),
        ));
    }
    calibration.held(
        "fault-hook",
        field,
        format!(
            "provoked {}, a success; sent again under its key, it was not replayed ({}): the \
             point compares that with a retry after a plain create",
            seen.answer.summary(),
            retry.answer.summary()
        ),
        &[seen.id, retry.id],
    );
    Ok(())
}

/// What a request sent again under a used key was answered, in the terms that tell whether
/// the key's record was kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Retried {
    /// Answered from the record: a success naming the first effect, or marked as a replay.
    Replayed,
    /// A success naming another effect: no record stopped it.
    NewEffect,
    /// Anything else, by its status (`None`: no answer).
    Answered(Option<u16>),
}

/// How `retry` answered, against the first request's answer `first`.
pub(crate) fn retried(probe: &Probe, first: &super::probe::Read, retry: &Seen) -> Retried {
    let read = probe.read(&retry.answer, false);
    match (&first.identity, &read.identity) {
        (Some(a), Some(b)) if read.success => {
            if a == b {
                Retried::Replayed
            } else {
                Retried::NewEffect
            }
        }
        _ if read.marked_replay == Some(true) => Retried::Replayed,
        _ => Retried::Answered(retry.answer.status()),
    }
}

fn provocation_missed(
    probe: &Probe,
    call: &Call,
    seen: &Seen,
    provocation: &Provocation,
    expected: &str,
) -> String {
    let how: Vec<String> = provocation
        .headers
        .iter()
        .map(|(n, v)| format!("header {n}: {v}"))
        .chain(
            provocation
                .fields
                .iter()
                .map(|(n, v)| format!("field {n} = {v}")),
        )
        .chain(
            provocation
                .body_text
                .iter()
                .map(|t| format!("body {}", one_line(t))),
        )
        .collect();
    let fix = if expected == "4xx" {
        "Name a request this service refuses with a 4xx and no effect (field values it \
         refuses, or a body it cannot read)"
    } else {
        "Name a request this service answers so (a test hook it honours in tests)"
    };
    format!(
        "sent with {}: {}; the points expect a {expected}. {fix}",
        how.join(", "),
        describe_call(probe, call, seen)
    )
}

/// Whether the service tells the first two callers apart, when the count did not show it: the
/// file's read by identity (`read.request`) of the second caller's effect, sent as its owner and
/// as the first caller, shows it when the owner is answered and the other refused. Otherwise
/// nothing the file describes can tell a leak from two names for one caller, and the scope
/// point is not covered. Never stops the calibration: the other points do not rest on it.
async fn callers_apart(
    probe: &Probe,
    calibration: &mut Calibration,
    second: Option<&Created>,
    marks: Option<(usize, usize)>,
) {
    if matches!(calibration.callers, Callers::Apart(_)) {
        return;
    }
    let callers = &probe.target.callers;
    let (a, b) = (&callers[0].name, &callers[1].name);
    let at_api = match (&probe.upstream, marks) {
        (Some(api), Some(marks)) => match api.callers_apart((a, b), marks) {
            Ok(how) => {
                let ids: Vec<usize> = second.iter().map(|c| c.seen.id).collect();
                calibration.held("callers-apart", "upstream.tokens", how.clone(), &ids);
                calibration.callers = Callers::Apart(how);
                return;
            }
            Err(seen) => format!("; {seen}"),
        },
        _ => String::new(),
    };
    let request = probe.target.read.as_ref().and_then(|r| r.request.as_ref());
    let read = match (request, second) {
        (Some(request), Some(created)) => match read_apart(probe, request, created).await {
            Ok((how, exchanges)) => {
                calibration.held("callers-apart", "[[callers]]", how.clone(), &exchanges);
                calibration.callers = Callers::Apart(how);
                return;
            }
            Err(seen) => format!("; {seen}"),
        },
        _ => "; the file declares no read by identity (read.request)".to_owned(),
    };
    let count = match &probe.target.count {
        Count::Request {
            callers: CountCallers::One(None),
            ..
        } => "the count (count.request, sent without a caller) sees every caller's effects"
            .to_owned(),
        Count::Request {
            callers: CountCallers::One(Some(one)),
            ..
        } => format!(
            "the count is read as {} alone, and sees every caller's effects",
            callers[*one].name
        ),
        Count::Request { .. } => "the callers' own lists did not tell them apart".to_owned(),
        _ => "the count sees every caller's effects alike".to_owned(),
    };
    calibration.callers = Callers::Unproved(format!(
        "The calibration could not prove that the service takes {a} and {b} for two callers \
         (two names in [[callers]] may be one caller to it: one token under another header \
         name, or a header it ignores), so a reply to {b} naming {a}'s effect would prove no \
         leak: {count}{read}{at_api}. To check that keys are scoped by caller, count with a \
         list that shows each caller its own effects (count.request with caller = \"each\"), \
         or declare a read by identity that the service answers only to the effect's own \
         caller (read.request), and give each caller in [[callers]] its own credentials \
         (behind [upstream], the token upstream.tokens names for it)"
    ));
}

/// The second caller's effect read as its owner and as the first caller: `Ok` with the proof
/// and its exchanges when the owner is answered and the other refused (a 4xx); `Err` with what
/// the two reads answered otherwise.
async fn read_apart(
    probe: &Probe,
    request: &ReadRequest,
    created: &Created,
) -> Result<(String, Vec<usize>), String> {
    let callers = &probe.target.callers;
    let (a, b) = (&callers[0].name, &callers[1].name);
    let path = request
        .path
        .replace("{{id}}", &super::probe::path_segment(&created.identity));
    let outgoing = Outgoing {
        method: request.method.clone(),
        path: path.clone(),
        headers: request.headers.clone(),
        body: Vec::new(),
    };
    let step = |who: &str| format!("calibration: {b}'s effect read as {who}");
    let owner = probe.send_as(POINT, &step(b), 1, outgoing.clone()).await;
    let other = probe.send_as(POINT, &step(a), 0, outgoing).await;
    let answered = owner
        .answer
        .status()
        .is_some_and(|s| (200..=299).contains(&s));
    let refused = other
        .answer
        .status()
        .is_some_and(|s| (400..=499).contains(&s));
    let said = |seen: &Seen| format!("#{} {}", seen.id, quoted(&seen.answer));
    let what = format!(
        "{} {path} of {b}'s effect {} answered {b} {} and {a} {}",
        request.method,
        created.identity,
        said(&owner),
        said(&other)
    );
    if answered && refused {
        Ok((
            format!("read.request {what}: the service tells them apart"),
            vec![created.seen.id, owner.id, other.id],
        ))
    } else {
        Err(format!("the read by identity (read.request {what})"))
    }
}

/// Each mark `[replay]` declares, seen on a replay of its own: the first create sent again with
/// its key and body (the one exchange of the calibration that reuses a key). A retry that names
/// the first effect was replayed, so a mark it lacks (or that the first answer carries as well)
/// is the file's mistake, named. A retry that does not name the first effect proves nothing of
/// the mark: the service did not replay, which the points grade.
async fn replay_marks(probe: &Probe, calibration: &mut Calibration, first: &Created) -> Proved<()> {
    let field = match &probe.target.replay {
        Replay::Inferred => return Ok(()),
        Replay::Status(_) => "replay.status",
        Replay::Header { value: None, .. } => "replay.header",
        Replay::Header { .. } => "replay.header, replay.value",
    };
    let first_read = probe.read(&first.seen.answer, false);
    // With a `[read]`, the effect as it was: a retry that rewrote it was no replay.
    let content = super::content::content_of(probe, first_read.identity.as_deref()).await;
    let mut retry = first.call.clone();
    retry.step = "calibration: the first create again, same key and body".to_owned();
    let seen = probe.send(POINT, &retry).await;
    let read = probe.read(&seen.answer, false);
    let rewritten = matches!(
        super::content::since(probe, &content).await,
        super::content::Since::Changed(_)
    );
    // Named by the identity whatever the status: a replay answered with a status the file does
    // not list as a success (a 200 where a first create is a 201) is still a replay; one that
    // changed the effect's content is the points' finding, not a replay.
    let replayed =
        !rewritten && probe.identity_in(&seen.answer).as_deref() == Some(first.identity.as_str());
    let mark = read.marked_replay == Some(true);
    // A mark the first answer carries as well marks nothing, unless it is a value the file
    // names: a first answer marked with it is the service's finding (the retry-replays point's).
    let shared = first_read.marked_replay == Some(true)
        && !matches!(probe.target.replay, Replay::Header { value: Some(_), .. });
    if mark && !(replayed && shared) {
        calibration.held(
            "replay-mark",
            field,
            format!(
                "the first create sent again (#{}) carries the replay mark: {}",
                seen.id,
                seen.answer.summary()
            ),
            &[first.seen.id, seen.id],
        );
        return Ok(());
    }
    if !replayed {
        return Ok(());
    }
    Err(mark_missed(probe, first, &seen))
}

/// The mismatch of a mark a replay (`seen`, naming the first effect) lacks, or that the first
/// answer carries as well: the field, what was seen and the fix.
fn mark_missed(probe: &Probe, first: &Created, seen: &Seen) -> Stop {
    let (first_status, status) = (first.seen.answer.status(), seen.answer.status());
    let said = format!(
        "the first create (#{}, answered {}) sent again with its key and body (#{}) was \
         replayed (or its effect written again in place, which a [read] would tell): it names \
         the first effect {} and answered {}",
        first.seen.id,
        first_status.map_or("nothing".to_owned(), |s| s.to_string()),
        seen.id,
        first.identity,
        quoted(&seen.answer)
    );
    // A header that this replay carries and the first answer does not: the likely mark.
    let header = match (&first.seen.answer, &seen.answer) {
        (
            Answer::Reply {
                headers: before, ..
            },
            Answer::Reply { headers, .. },
        ) => headers
            .iter()
            .find(|(n, _)| {
                n.to_ascii_lowercase().contains("replay")
                    && !before.iter().any(|(m, _)| m.eq_ignore_ascii_case(n))
            })
            .map(|(n, v)| format!(" (or replay.header = {n:?}, value = {v:?}, which it carries)")),
        _ => None,
    }
    .unwrap_or_default();
    match &probe.target.replay {
        Replay::Status(wanted) if first_status == Some(*wanted) => Stop::mismatch(
            "replay.status",
            format!(
                "{said}. The first answer has the status {wanted} too, so it marks no replay: \
                 say replay.inferred = true{header}"
            ),
        ),
        Replay::Status(wanted) if status != first_status => Stop::mismatch(
            "replay.status",
            format!(
                "{said}, not {wanted}: set replay.status = {}",
                status.map_or("-".to_owned(), |s| s.to_string())
            ),
        ),
        Replay::Status(wanted) => Stop::mismatch(
            "replay.status",
            format!(
                "{said}, not {wanted}: its status is the first answer's, so only its identity \
                 marks it: say replay.inferred = true{header}"
            ),
        ),
        Replay::Header { name, value } => header_missed(name, value.as_deref(), first, seen, &said),
        Replay::Inferred => Stop::mismatch("replay", said),
    }
}

/// A replay header the replay lacks, carries with another value, or shares with the first answer.
fn header_missed(
    name: &str,
    value: Option<&str>,
    first: &Created,
    seen: &Seen,
    said: &str,
) -> Stop {
    let on_replay = seen.answer.header(name);
    let on_first = first.seen.answer.header(name);
    match (on_replay, value) {
        (None, _) => {
            let names: Vec<String> = match &seen.answer {
                Answer::Reply { headers, .. } => super::excerpt::telling_headers(headers)
                    .map(|(n, _)| n.clone())
                    .collect(),
                _ => Vec::new(),
            };
            Stop::mismatch(
                "replay.header",
                format!(
                    "{said}, with no {name} header (its headers: {}). Name the header the \
                     service marks replays with, or say replay.inferred = true",
                    listed(&names)
                ),
            )
        }
        (Some(got), Some(wanted)) if !got.trim().eq_ignore_ascii_case(wanted) => Stop::mismatch(
            "replay.value",
            format!("{said}, with {name}: {got}, not {wanted:?}: set replay.value = {got:?}"),
        ),
        (Some(got), None) if on_first.is_some_and(|v| v.trim() != got.trim()) => Stop::mismatch(
            "replay.value",
            format!(
                "{said}, with {name}: {got}; the first answer carries {name}: {} as well, so \
                 the header alone marks nothing: set replay.value = {got:?}",
                on_first.unwrap_or_default()
            ),
        ),
        (Some(got), _) => Stop::mismatch(
            "replay.header",
            format!(
                "{said}, with {name}: {got}; the first answer carries {name}: {} as well, so \
                 it marks no replay: name the mark only replays carry, or say \
                 replay.inferred = true",
                on_first.unwrap_or_default()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::count::counted;
    use super::*;
    use serde_json::json;

    #[test]
    fn id_pointers_name_the_scalars_whose_name_says_id() {
        let body = json!({"ticket": {"ticket_id": 7, "title": "x"}, "requestId": "r", "n": 1});
        assert_eq!(id_pointers(&body), ["/requestId", "/ticket/ticket_id"]);
        let none = json!({"title": "x", "n": 1});
        assert_eq!(id_pointers(&none), ["/n", "/title"]);
        assert!(id_pointers(&json!("bare")).is_empty());
    }

    #[test]
    fn count_pointers_name_lists_and_whole_numbers() {
        let body = json!({"tickets": [1, 2], "page": {"total": 2, "ratio": 0.5}, "t": "x"});
        assert_eq!(count_pointers(&body), ["/page/total", "/tickets"]);
        assert_eq!(count_pointers(&json!([1])), ["\"\" (the whole body)"]);
    }

    #[test]
    fn a_long_reply_is_quoted_on_one_line_and_cut() {
        let long = format!("{{\"error\":\n\"{}\"}}", "x".repeat(1000));
        let quoted_text = quoted(&Answer::Reply {
            status: 500,
            headers: vec![],
            body: long.clone(),
        });
        assert!(quoted_text.starts_with("500 {\"error\": \"xxx"));
        assert!(
            quoted_text.len() < super::super::excerpt::QUOTED + 40,
            "{quoted_text}"
        );
        assert!(quoted_text.ends_with(&format!("({} bytes in all)", long.len())));
        assert!(!quoted_text.contains('\n'));
    }

    #[test]
    fn uuid_keys_have_a_uuids_characters_and_differ() {
        let (a, b) = (uuid_key(), uuid_key());
        assert!(is_uuid(&a) && is_uuid(&b), "{a} {b}");
        assert_ne!(a, b);
        assert_eq!(&a[14..15], "4");
        assert!(!is_uuid("chk-1-2"));
    }

    #[test]
    fn a_count_reply_without_a_list_at_the_pointer_names_the_pointer_and_the_lists_there() {
        let reply = Answer::Reply {
            status: 200,
            headers: vec![],
            body: json!({"tickets": [1, 2, 3]}).to_string(),
        };
        assert_eq!(counted(&reply, "/tickets", "#1", Some(0)), Ok(3));
        let Err(Stop::Mismatch { field, problem }) = counted(&reply, "", "#1", Some(0)) else {
            panic!("the whole object is not a count");
        };
        assert_eq!(field, "count.request.json_pointer");
        assert!(problem.contains("/tickets"), "{problem}");
        let missing = Answer::NoAnswer {
            reason: "connection refused".into(),
        };
        assert!(matches!(
            counted(&missing, "/tickets", "#1", None),
            Err(Stop::Unreachable { .. })
        ));
    }
}
