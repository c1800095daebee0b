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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::history::{Answer, Sent};
use super::http::{Outgoing, Wire};
use super::probe::{BodyForm, Call, KeyWire, Probe, Seen};
use super::target::{Count, CountCallers, Identity, KeyForm, Provocation, ReadRequest, Replay};
use crate::error::Error;

/// The point name the calibration's exchanges are recorded under.
pub const POINT: &str = "calibration";

/// The most characters of a reply a calibration message quotes.
pub const QUOTED: usize = 300;

/// What the calibration proved, step by step.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Calibration {
    /// Every step, in order; the last one failed when `passed` is false.
    pub steps: Vec<Step>,
    /// Whether every step held.
    pub passed: bool,
    /// Set when a step failed because of the server behind the file, not the file: a wrapper
    /// whose creates the API it wraps refuses (`[upstream]`). Then the points say why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wrapper_at_fault: Option<String>,
    /// Whether the service takes the first two callers for two callers: the scope point
    /// accuses a leak only on this proof.
    pub callers: Callers,
}

/// What the calibration proved of the first two callers of `[[callers]]`. Two names in the file
/// are not two callers to the service (one token under another header name, an extra header
/// the service ignores): only what the service lets the check see tells them apart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "proved", content = "how", rename_all = "kebab-case")]
pub enum Callers {
    /// The service tells them apart: how the calibration saw it.
    Apart(String),
    /// Nothing the file describes showed it: why, and what the file could add.
    Unproved(String),
}

impl Default for Callers {
    fn default() -> Callers {
        Callers::Unproved("the calibration did not ask".to_owned())
    }
}

/// One thing the calibration proved about the file.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// The step's short name (`identity`).
    pub name: &'static str,
    /// The field of the target file it proves (`identity.json_pointer`).
    pub field: String,
    /// Whether it held.
    pub passed: bool,
    /// What was seen, as a sentence.
    pub detail: String,
    /// The exchanges it rests on.
    pub exchanges: Vec<usize>,
}

/// Why a calibration stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The file does not describe the service: this field is at fault.
    Mismatch {
        /// The field.
        field: String,
        /// The exchange, what came back and the likely fix.
        problem: String,
    },
    /// The service did not answer (or failed on its own): not the file's fault.
    Unreachable {
        /// What was asked (`count`, `create`).
        asked: &'static str,
        /// What happened.
        problem: String,
    },
}

impl Stop {
    /// A mismatch of `field`.
    pub fn mismatch(field: impl Into<String>, problem: impl Into<String>) -> Stop {
        Stop::Mismatch {
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// The error the command line reports: a mismatch exits 2, an unreachable service 1.
    pub fn into_error(self, file: &str, place: &str) -> Error {
        match self {
            Stop::Mismatch { field, problem } => Error::TargetMismatch {
                file: file.to_owned(),
                field,
                problem,
            },
            Stop::Unreachable { asked, problem } => Error::Http {
                method: asked,
                url: place.to_owned(),
                status: None,
                problem,
            },
        }
    }
}

pub(super) type Proved<T> = Result<T, Stop>;

impl Calibration {
    /// Adds a step that held.
    pub fn held(
        &mut self,
        name: &'static str,
        field: impl Into<String>,
        detail: impl Into<String>,
        exchanges: &[usize],
    ) {
        self.steps.push(Step {
            name,
            field: field.into(),
            passed: true,
            detail: detail.into(),
            exchanges: exchanges.to_vec(),
        });
    }
}

/// `text` cut to [`QUOTED`] characters on one line, marking the cut.
pub fn trimmed(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = one_line.chars().take(QUOTED).collect();
    if out.len() < one_line.len() {
        out.push_str(&format!("… ({} bytes in all)", text.len()));
    }
    out
}

/// An answer for a message: `500 {"error": ...}`, or why none came.
pub fn quoted(answer: &Answer) -> String {
    match answer {
        Answer::Reply { status, body, .. } if body.trim().is_empty() => {
            format!("{status} with an empty body")
        }
        Answer::Reply { status, body, .. } => format!("{status} {}", trimmed(body)),
        other => trimmed(&other.summary()),
    }
}

/// The JSON pointers in `value` that hold a scalar whose name says it is an identity (`id`,
/// `ticket_id`, `ticketId`, `uuid`); or, when none does, every scalar's pointer. At most eight.
pub fn id_pointers(value: &Value) -> Vec<String> {
    let mut all = Vec::new();
    scalars(value, String::new(), 0, &mut all);
    let ids: Vec<String> = all.iter().filter(|p| id_like(p)).cloned().collect();
    let mut found = if ids.is_empty() { all } else { ids };
    found.truncate(8);
    found
}

/// Whether a pointer's last name says it holds an identity (`id`, `ticket_id`, `ticketId`,
/// `uuid`).
pub(super) fn id_like(pointer: &str) -> bool {
    let name = pointer.rsplit('/').next().unwrap_or_default();
    let lower = name.to_ascii_lowercase();
    lower == "id"
        || lower.ends_with("_id")
        || lower.ends_with("-id")
        || lower.contains("uuid")
        || (name.ends_with("Id") && name.len() > 2)
}

/// The pointers of `value`'s scalars (a list's first item standing for its items).
pub(super) fn scalars(value: &Value, at: String, depth: usize, out: &mut Vec<String>) {
    if depth > 6 {
        return;
    }
    match value {
        Value::Object(map) => {
            for (name, inner) in map {
                let escaped = name.replace('~', "~0").replace('/', "~1");
                scalars(inner, format!("{at}/{escaped}"), depth + 1, out);
            }
        }
        // The first item stands for a list's items.
        Value::Array(items) => {
            if let Some(first) = items.first() {
                scalars(first, format!("{at}/0"), depth + 1, out);
            }
        }
        Value::String(_) | Value::Number(_) if !at.is_empty() => out.push(at),
        _ => {}
    }
}

/// The JSON pointers in `value` that hold a list or a whole number: what a count pointer may
/// name. At most eight.
pub fn count_pointers(value: &Value) -> Vec<String> {
    fn walk(value: &Value, at: String, depth: usize, out: &mut Vec<String>) {
        if depth > 6 {
            return;
        }
        match value {
            Value::Array(_) if !at.is_empty() => out.push(at),
            Value::Number(n) if n.is_i64() && !at.is_empty() => out.push(at),
            Value::Object(map) => {
                for (name, inner) in map {
                    let escaped = name.replace('~', "~0").replace('/', "~1");
                    walk(inner, format!("{at}/{escaped}"), depth + 1, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), 0, &mut out);
    if value.is_array() {
        out.insert(0, "\"\" (the whole body)".to_owned());
    }
    out.truncate(8);
    out
}

/// Pointers in words: `/a, /b`, or a sentence saying there are none.
fn listed(pointers: &[String]) -> String {
    if pointers.is_empty() {
        "none".to_owned()
    } else {
        pointers.join(", ")
    }
}

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

/// Whether `key` has a UUID's characters.
pub fn is_uuid(key: &str) -> bool {
    let groups: Vec<&str> = key.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
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
    now = super::naming::names_the_effect(probe, &mut calibration, &counter, now, &first, &second)
        .await?;
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

/// A create as it went: the call, the exchange and the identity read from it.
pub(super) struct Created {
    pub(super) call: Call,
    pub(super) seen: Seen,
    pub(super) identity: String,
}

fn describe_call(probe: &Probe, call: &Call, seen: &Seen) -> String {
    let endpoint = probe.endpoint(call.other_endpoint);
    let caller = &probe.target.callers[call.caller].name;
    format!(
        "#{} {} {} as {caller} answered {}",
        seen.id,
        endpoint.method,
        endpoint.path,
        quoted(&seen.answer)
    )
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

/// The field the identity is read by.
pub(super) fn identity_field(probe: &Probe) -> &'static str {
    match probe.target.identity {
        Identity::Pointer(_) => "identity.json_pointer",
        Identity::Header(_) => "identity.header",
    }
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
    calibration.held(
        "create",
        if caller == 0 {
            "create".to_owned()
        } else {
            format!("callers[{caller}]")
        },
        format!("{what} as {name} succeeds, naming {identity}"),
        &[seen.id],
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
    if let Some(stop) = field_at_fault(probe, call, &exchange).await {
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

/// Whether the service takes the create with the key in another shape (a UUID, or text) or in
/// its other form (bare or quoted); the mismatch naming `key.shape` or `key.form` if so.
async fn key_at_fault(probe: &Probe, call: &Call, exchange: &str) -> Option<Stop> {
    let KeyWire::Normal(sent) = &call.key else {
        return None;
    };
    let (other, shape) = if is_uuid(sent) {
        (format!("chk-{}", &uuid_key()[..13]), "text")
    } else {
        (uuid_key(), "uuid")
    };
    let mut retry = call.clone();
    retry.step = format!("calibration: the create with a key of shape {shape}");
    retry.key = KeyWire::Normal(other.clone());
    let seen = probe.send(POINT, &retry).await;
    if probe.read(&seen.answer, false).success {
        return Some(Stop::mismatch(
            "key.shape",
            format!(
                "{exchange} to the key {sent:?}, and #{} succeeded with the key {other:?}: the \
                 service takes keys of another shape. Set key.shape = \"{shape}\"",
                seen.id
            ),
        ));
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
    let prefix = service.prefix.trim_end_matches('/');
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
        let root = Counter {
            wire: Wire::new(&service.host, service.port, "", service.timeout),
            ..Counter::new(probe)
        };
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

fn describe_path(probe: &Probe, counting: bool) -> String {
    let endpoint = probe.endpoint(!counting);
    format!("{} {}", endpoint.method, endpoint.path)
}

/// Whether the service takes the create with the file's own field values, and if so, which
/// field it refuses when the check varies it.
async fn field_at_fault(probe: &Probe, call: &Call, exchange: &str) -> Option<Stop> {
    let BodyForm::Compact(varied) = &call.body else {
        return None;
    };
    let given = &probe.endpoint(false).fields;
    if varied == given {
        return None;
    }
    let mut exact = call.clone();
    exact.step = "calibration: the create with the file's own field values".to_owned();
    exact.key = KeyWire::Normal(probe.fresh_key());
    exact.body = BodyForm::Compact(given.clone());
    let seen = probe.send(POINT, &exact).await;
    if !probe.read(&seen.answer, false).success {
        return None;
    }
    for (name, value) in varied.iter().filter(|(n, v)| given.get(*n) != Some(*v)) {
        let mut one: BTreeMap<String, Value> = given.clone();
        one.insert(name.clone(), value.clone());
        let mut single = exact.clone();
        single.step = format!("calibration: the create with only {name} varied");
        single.key = KeyWire::Normal(probe.fresh_key());
        single.body = BodyForm::Compact(one);
        let refused = probe.send(POINT, &single).await;
        if !probe.read(&refused.answer, false).success {
            return Some(Stop::mismatch(
                format!("create.vary.{name}"),
                format!(
                    "the service refuses {name} = {value} (#{} answered {}), a value the check \
                     made from the file's {} so that each point's effects are its own; #{} \
                     with the file's own values succeeded. Give {name} as a list of values the \
                     service takes (create.vary = {{ {name} = [...] }}), or do not vary it",
                    refused.id,
                    quoted(&refused.answer),
                    given.get(name).cloned().unwrap_or(Value::Null),
                    seen.id
                ),
            ));
        }
    }
    Some(Stop::mismatch(
        "create.vary",
        format!(
            "{exchange}; #{} with the file's own field values succeeded, and no single varied \
             field is refused alone: vary fewer fields",
            seen.id
        ),
    ))
}

/// Counting as the file says, with the calibration's own requests recorded.
pub(super) struct Counter<'p> {
    probe: &'p Probe,
    wire: Wire,
    /// The effects the last count by request listed, when its pointer names a list: then the
    /// listing holds every effect counted.
    listed: std::sync::Mutex<Option<Value>>,
    /// Each caller's own count at the last read, when the count is read as each caller
    /// (`count.request.caller = "each"`); empty otherwise.
    parts: std::sync::Mutex<Vec<i64>>,
}

impl<'p> Counter<'p> {
    fn new(probe: &'p Probe) -> Counter<'p> {
        let service = &probe.target.service;
        Counter {
            probe,
            wire: Wire::new(
                &service.host,
                service.port,
                &service.prefix,
                service.timeout,
            ),
            listed: std::sync::Mutex::new(None),
            parts: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// What the last count by request listed (every caller's lists, in one list); `None` when
    /// the count is not a listing.
    /// Each caller's own count at the last read (`count.request.caller = "each"`); empty
    /// otherwise.
    fn parts(&self) -> Vec<i64> {
        self.parts.lock().map(|p| p.clone()).unwrap_or_default()
    }

    pub(super) fn listing(&self) -> Option<Value> {
        self.listed.lock().ok()?.clone()
    }

    /// The count once `done` holds of it, read again a few times within a second while it does
    /// not (a count that lags); the last count read.
    pub(super) async fn settled(&self, before: i64, done: impl Fn(i64) -> bool) -> Proved<i64> {
        let mut now = before;
        for attempt in 0..4 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            now = self.count().await?.0;
            if done(now) {
                break;
            }
        }
        Ok(now)
    }

    /// The count now, as a calibration step.
    async fn read(&mut self, calibration: &mut Calibration, name: &'static str) -> Proved<i64> {
        let (n, field, exchanges) = self.count().await?;
        calibration.held(name, field, format!("the count reads {n}"), &exchanges);
        Ok(n)
    }

    /// The count after `created` (by `caller`) rose by exactly one from `before`; a count that
    /// lags is read again, a few times within a second.
    async fn rose(
        &mut self,
        calibration: &mut Calibration,
        before: i64,
        caller: usize,
        created: &Created,
    ) -> Proved<i64> {
        let parts_before = self.parts();
        let mut seen = Vec::new();
        let mut after = before;
        for attempt in 0..4 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let (n, _, exchanges) = self.count().await?;
            seen.extend(exchanges);
            after = n;
            if after != before {
                break;
            }
        }
        self.apart_or_one(calibration, caller, &parts_before, created)?;
        let (field, _) = self.field();
        let name = &self.probe.target.callers[caller].name;
        if after - before != 1 {
            return Err(Stop::mismatch(
                field,
                self.not_one(name, before, after, created),
            ));
        }
        let mut exchanges = vec![created.seen.id];
        exchanges.extend(seen);
        calibration.held(
            "count-rises",
            field,
            format!("{name}'s create raised the count by one: {before} to {after}"),
            &exchanges,
        );
        Ok(after)
    }

    /// With a count read as each caller, each list showing a caller its own effects: a create
    /// that shows in its own caller's list alone proves that the service tells that caller from
    /// the others; one that shows in another caller's list as well proves that the service takes
    /// the two for one caller, and every count of the run would count its effects twice.
    fn apart_or_one(
        &self,
        calibration: &mut Calibration,
        caller: usize,
        before: &[i64],
        created: &Created,
    ) -> Proved<()> {
        let after = &self.parts();
        if before.len() != after.len() || after.get(caller).is_none_or(|n| *n <= before[caller]) {
            return Ok(());
        }
        let callers = &self.probe.target.callers;
        let name = &callers[caller].name;
        let id = created.seen.id;
        if let Some(other) = (0..after.len()).find(|&i| i != caller && after[i] > before[i]) {
            let other_name = &callers[other].name;
            return Err(Stop::mismatch(
                format!("callers[{}].headers", other.max(caller)),
                format!(
                    "{name}'s create (#{id}, naming {}) shows in {other_name}'s list as well as \
                     in {name}'s (count.request.caller = \"each\" reads each caller's own \
                     list): to the service, {name} and {other_name} are one caller. Give each \
                     caller in [[callers]] credentials of its own that the service tells apart \
                     (its own token, in the header the service reads); if the service has no \
                     callers of its own, count as one caller (count.request.caller = \
                     \"{name}\"), and the scope point is not covered",
                    created.identity
                ),
            ));
        }
        if caller == 0 && !matches!(calibration.callers, Callers::Apart(_)) {
            let others: Vec<&str> = callers[1..].iter().map(|c| c.name.as_str()).collect();
            let how = format!(
                "{name}'s create (#{id}) shows in {name}'s own list and not in {}'s \
                 (count.request.caller = \"each\"): the service tells them apart",
                others.join("'s or ")
            );
            calibration.held("callers-apart", "[[callers]]", how.clone(), &[id]);
            calibration.callers = Callers::Apart(how);
        }
        Ok(())
    }

    fn not_one(&self, name: &str, before: i64, after: i64, created: &Created) -> String {
        let why = match (&self.probe.target.count, after - before) {
            (
                Count::Request {
                    callers: CountCallers::One(Some(one)),
                    ..
                },
                0,
            ) if self.probe.target.callers[*one].name != name => format!(
                " The count is read as {} only, and may list only that caller's effects: \
                 count.request.caller = \"each\" sums every caller's",
                self.probe.target.callers[*one].name
            ),
            (_, 0) => " The count does not see the created thing: does it count what the \
                       create makes?"
                .to_owned(),
            _ => " The count holds more than the created things: it must count them, one \
                  each"
                .to_owned(),
        };
        format!(
            "{name}'s create (#{}, naming {}) changed the count from {before} to {after}, not by \
             exactly one.{why}",
            created.seen.id, created.identity
        )
    }

    /// The field the count is read by, and its kind in words.
    fn field(&self) -> (&'static str, &'static str) {
        match &self.probe.target.count {
            Count::Request { .. } => ("count.request", "request"),
            Count::Sqlite { .. } => ("count.sql.sqlite", "SQLite query"),
            Count::Postgres { .. } => ("count.sql.postgres", "PostgreSQL query"),
            Count::Command(_) => ("count.command", "command"),
            Count::Upstream => (
                "[upstream]",
                "count of the tickets in the API the lab serves",
            ),
        }
    }

    /// The count, the field it proves, and the exchanges it took.
    async fn count(&self) -> Proved<(i64, &'static str, Vec<usize>)> {
        let (field, _) = self.field();
        match &self.probe.target.count {
            Count::Request { .. } => {
                let (n, exchanges) = self.by_request().await?;
                Ok((n, field, exchanges))
            }
            Count::Sqlite { file, .. } if !file.exists() => {
                let cwd = std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default();
                let from = if file.is_relative() {
                    format!(" (a relative path, read from the working folder {cwd})")
                } else {
                    format!(
                        " (a relative path in the file is read from the file's folder, {})",
                        self.probe.target.folder.display()
                    )
                };
                Err(Stop::mismatch(
                    "count.sql.sqlite",
                    format!(
                        "no file at {}{from}: name the service's database file. If the \
                         service makes it on its first write, count with count.command, \
                         printing 0 while the file is missing",
                        file.display()
                    ),
                ))
            }
            _ => self
                .probe
                .count()
                .await
                .map(|n| (n, field, Vec::new()))
                .map_err(|problem| {
                    let named = problem
                        .split([':', ' '])
                        .next()
                        .filter(|f| f.starts_with("count."))
                        .unwrap_or(field)
                        .to_owned();
                    Stop::mismatch(named, trimmed(&problem))
                }),
        }
    }

    /// The count by the file's request, sent as each caller it names, recorded.
    async fn by_request(&self) -> Proved<(i64, Vec<usize>)> {
        let Count::Request {
            request,
            pointer,
            callers,
        } = &self.probe.target.count
        else {
            return Ok((0, Vec::new()));
        };
        let as_callers: Vec<Option<usize>> = match callers {
            CountCallers::Each => (0..self.probe.target.callers.len()).map(Some).collect(),
            CountCallers::One(one) => vec![*one],
        };
        let (mut total, mut exchanges, mut parts) = (0, Vec::new(), Vec::new());
        let mut listed = Some(Vec::new());
        for caller in as_callers {
            let mut headers = request.headers.clone();
            let who = caller.map(|i| &self.probe.target.callers[i]);
            if let Some(who) = who {
                super::probe::lay_over(&mut headers, &who.headers);
            }
            let outgoing = Outgoing {
                method: request.method.clone(),
                path: request.path.clone(),
                headers,
                body: Vec::new(),
            };
            let sent = Sent {
                point: POINT,
                step: "calibration: the count".to_owned(),
                caller: who.map(|w| w.name.clone()),
                key: None,
                method: request.method.clone(),
                path: request.path.clone(),
                body: String::new(),
            };
            let at = Instant::now();
            let answer = self.wire.send(&outgoing).await;
            let id = self
                .probe
                .history
                .record(sent, super::http::recorded(answer.clone()), at);
            exchanges.push(id);
            let exchange = format!(
                "#{id} {} {}{}",
                request.method,
                request.path,
                who.map(|w| format!(" as {}", w.name)).unwrap_or_default()
            );
            let part = counted(&answer, pointer, &exchange, caller)?;
            parts.push(part);
            total += part;
            let items = match &answer {
                Answer::Reply { body, .. } => serde_json::from_str::<Value>(body)
                    .ok()
                    .and_then(|json| json.pointer(pointer).and_then(Value::as_array).cloned()),
                _ => None,
            };
            listed = listed.zip(items).map(|(mut all, items)| {
                all.extend(items);
                all
            });
        }
        if let Ok(mut last) = self.listed.lock() {
            *last = listed.map(Value::Array);
        }
        if *callers == CountCallers::Each
            && let Ok(mut last) = self.parts.lock()
        {
            *last = parts;
        }
        Ok((total, exchanges))
    }
}

/// The count a counting reply holds, or the field at fault.
fn counted(answer: &Answer, pointer: &str, exchange: &str, caller: Option<usize>) -> Proved<i64> {
    let Answer::Reply { status, body, .. } = answer else {
        return Err(Stop::Unreachable {
            asked: "count",
            problem: format!("{exchange}: {}", answer.summary()),
        });
    };
    let said = format!("{exchange} answered {}", quoted(answer));
    match status {
        200..=299 => {}
        401 | 403 => {
            let field = caller.map_or("count.request.headers".to_owned(), |i| {
                format!("callers[{i}].headers")
            });
            return Err(Stop::mismatch(
                field,
                format!("{said}: the count request is not let in with these credentials"),
            ));
        }
        400..=499 => {
            return Err(Stop::mismatch(
                "count.request.path",
                format!("{said}: is count.request.method and count.request.path a listing?"),
            ));
        }
        _ => {
            return Err(Stop::Unreachable {
                asked: "count",
                problem: said,
            });
        }
    }
    let Ok(json) = serde_json::from_str::<Value>(body) else {
        return Err(Stop::mismatch(
            "count.request.path",
            format!("{said}: not JSON; name a listing that answers JSON"),
        ));
    };
    let found = json.pointer(pointer);
    match found {
        Some(Value::Array(items)) => return Ok(items.len() as i64),
        Some(Value::Number(n)) if n.is_i64() => return Ok(n.as_i64().unwrap_or_default()),
        Some(Value::String(text)) if text.parse::<i64>().is_ok() => {
            return Ok(text.parse().unwrap_or_default());
        }
        _ => {}
    }
    let held = match found {
        None => "finds nothing".to_owned(),
        Some(Value::Object(_)) => "holds an object, not a list or a number".to_owned(),
        Some(other) => format!(
            "holds {}, not a list or a number",
            trimmed(&other.to_string())
        ),
    };
    Err(Stop::mismatch(
        "count.request.json_pointer",
        format!(
            "{pointer:?} {held} ({said}); the pointers in the body that hold a list or a \
             number: {}",
            listed(&count_pointers(&json))
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
                .map(|t| format!("body {}", trimmed(t))),
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
    let content = super::content::content_of(probe, &first_read).await;
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
    // names: a first answer marked with it is the service's finding (the replay point's).
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
        assert!(quoted_text.len() < QUOTED + 40, "{quoted_text}");
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
