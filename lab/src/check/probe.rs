//! What every point does with the service: build a request from the target file with fresh
//! keys and field values, send it and record the exchange, read what a reply says (success,
//! identity, replay mark), and count effects.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::excerpt;
use super::history::{Answer, History, Sent};
use super::http::{HangUp, Outgoing, Wire, recorded};
use super::report::Stop;
use super::target::{
    Count, CountCallers, Endpoint, FieldError, Identity, KeyForm, KeyShape, Provocation, ReadBack,
    Replay, Target, Vary, program_in,
};

/// How the key is written in one request.
#[derive(Clone, Debug)]
pub enum KeyWire {
    /// In the file's form.
    Normal(String),
    /// The other form: bare when the file says sf-string, quoted when it says token or opaque.
    OtherForm(String),
    /// Exactly this header value.
    Raw(String),
    /// No key header.
    Absent,
}

/// How the body is written.
#[derive(Clone, Debug)]
pub enum BodyForm {
    /// The template with these fields, keys sorted, no spaces.
    Compact(BTreeMap<String, Value>),
    /// The same, keys in reverse order and spaced out.
    Reordered(BTreeMap<String, Value>),
    /// Exactly this text.
    Text(String),
}

/// One request a point sends.
#[derive(Clone, Debug)]
pub struct Call {
    /// What the point means by it.
    pub step: String,
    /// The caller's index.
    pub caller: usize,
    /// The key.
    pub key: KeyWire,
    /// The body.
    pub body: BodyForm,
    /// Headers added after the endpoint's and the caller's (a fault hook).
    pub extra: Vec<(String, String)>,
    /// The other endpoint instead of the create.
    pub other_endpoint: bool,
}

/// A changed payload: the first request's fields and the changed ones.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// What changed, for the report (`title: "a" → "b"`).
    pub what: String,
    /// The first request's fields.
    pub first: BTreeMap<String, Value>,
    /// The changed request's fields.
    pub changed: BTreeMap<String, Value>,
    /// Whether the two values are ones a loose comparison would merge (`"1024"` and `1024`).
    pub loose: bool,
}

/// `fields` with each free-text field tagged `(check TAG-N)`.
pub fn tagged(
    fields: &BTreeMap<String, Value>,
    vary: &BTreeMap<String, Vary>,
    run: &str,
    n: usize,
) -> BTreeMap<String, Value> {
    fields
        .iter()
        .map(|(name, value)| {
            let value = match (value, vary.get(name)) {
                (Value::String(text), Some(Vary::Text)) => {
                    Value::String(format!("{text} (check {run}-{n})"))
                }
                (other, _) => other.clone(),
            };
            (name.clone(), value)
        })
        .collect()
}

/// The changed payloads `vary` allows from `fields`; `tag` makes a free text new.
pub fn changes(
    fields: &BTreeMap<String, Value>,
    vary: &BTreeMap<String, Vary>,
    tag: &str,
) -> Vec<Change> {
    let mut found = Vec::new();
    let with = |name: &str, value: &Value| {
        let mut out = fields.clone();
        out.insert(name.to_owned(), value.clone());
        out
    };
    let plain = vary.iter().find_map(|(name, how)| {
        let current = fields.get(name)?;
        let other = match how {
            Vary::Text => Value::String(format!(
                "{} (check {tag})",
                current.as_str().unwrap_or_default()
            )),
            Vary::OneOf(values) => values
                .iter()
                .find(|v| *v != current && loose_key(v) != loose_key(current))?
                .clone(),
        };
        Some(Change {
            what: format!("{name}: {current} → {other}"),
            first: fields.clone(),
            changed: with(name, &other),
            loose: false,
        })
    });
    found.extend(plain);
    for (name, how) in vary {
        let Vary::OneOf(values) = how else { continue };
        for (i, a) in values.iter().enumerate() {
            for b in &values[i + 1..] {
                if a != b && loose_key(a) == loose_key(b) {
                    found.push(Change {
                        what: format!("{name}: {a} → {b}"),
                        first: with(name, a),
                        changed: with(name, b),
                        loose: true,
                    });
                }
            }
        }
    }
    found
}

/// What a loose comparison (JavaScript's `==`, a form field read as text) makes of a value:
/// `1`, `1.0` and `"1"` are one number, `true` and `"true"` one boolean.
pub fn loose_key(value: &Value) -> String {
    match value {
        Value::Number(n) => n.as_f64().map_or(n.to_string(), |f| format!("number {f}")),
        Value::Bool(b) => format!("boolean {b}"),
        Value::String(text) => match (text.trim().parse::<f64>(), text.trim()) {
            (Ok(f), _) if f.is_finite() => format!("number {f}"),
            (_, word @ ("true" | "false")) => format!("boolean {word}"),
            _ => format!("text {text}"),
        },
        other => other.to_string(),
    }
}

/// Whether two identities name the same effect: both found and equal. An identity not found is
/// never the same as another not found.
pub fn same_effect(a: &Option<String>, b: &Option<String>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a == b)
}

/// `more` laid over `headers`: each header of `more` replaces every header of `headers` with its
/// name, names compared without case as HTTP compares them, so a caller's `authorization`
/// replaces the create's `Authorization` instead of being sent beside it.
pub fn lay_over(headers: &mut Vec<(String, String)>, more: &[(String, String)]) {
    for (name, value) in more {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        headers.push((name.clone(), value.clone()));
    }
}

/// An answer and the number of its exchange.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The exchange's number in the history.
    pub id: usize,
    /// What came back.
    pub answer: Answer,
}

/// What a reply says, in the target file's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// A success status.
    pub success: bool,
    /// The identity, read as the file says.
    pub identity: Option<String>,
    /// Marked as a replay: `None` when the file gives no mark.
    pub marked_replay: Option<bool>,
}

/// The run's shared state.
pub struct Probe {
    /// The target.
    pub target: Target,
    wire: Wire,
    /// What was sent and what came back.
    pub history: History,
    run: String,
    serial: AtomicUsize,
    /// The API behind a gateway (`[upstream]`), served by the lab.
    pub upstream: Option<super::upstream::UpstreamApi>,
    /// The gateway process, when the check starts it (`service.command`).
    pub gateway: Option<super::gateway::Gateway>,
    /// The run's folder: the API's store, the gateway's output.
    dir: Option<tempfile::TempDir>,
}

impl Probe {
    /// A probe for `target`.
    pub fn new(target: Target) -> Probe {
        let service = &target.service;
        let wire = Wire::new(
            service.url.host(),
            service.url.port(),
            service.url.path(),
            service.timeout,
        );
        // Keys and field values carry the run's tag, so two runs against one service never
        // meet on a key.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let tag = (nanos as u64) ^ (u64::from(std::process::id()) << 40);
        Probe {
            target,
            wire,
            history: History::new(),
            run: format!("{:x}", tag & 0xffff_ffff_ffff),
            serial: AtomicUsize::new(0),
            upstream: None,
            gateway: None,
            dir: None,
        }
    }

    /// A probe for `target` that also serves the API of its `[upstream]` and starts its
    /// `service.command`, if the file has them, and waits until the service listens.
    ///
    /// # Errors
    /// A mismatch naming `service.command`, `service.base_url` or `upstream.routes` when the
    /// service cannot start as the file says; unreachable when the check's own parts cannot.
    pub async fn start(target: Target) -> Result<Probe, Stop> {
        let mut probe = Probe::new(target);
        if probe.target.upstream.is_none() && probe.target.service.command.is_none() {
            return Ok(probe);
        }
        let own = |problem: String| Stop::Unreachable {
            asked: "start",
            problem,
        };
        let dir = tempfile::Builder::new()
            .prefix("lab-check-")
            .tempdir()
            .map_err(|err| own(format!("the run's folder: {err}")))?;
        if let Some(spec) = &probe.target.upstream {
            probe.upstream =
                Some(super::upstream::UpstreamApi::start(spec, dir.path()).map_err(own)?);
        }
        if probe.target.service.command.is_some() {
            let url = probe
                .upstream
                .as_ref()
                .map(super::upstream::UpstreamApi::url);
            let gateway = super::gateway::Gateway::new(
                &probe.target.service,
                probe.target.folder.clone(),
                url.as_deref(),
                dir.path(),
            );
            if let Err(problem) = gateway.start().await {
                let stop = Stop::from(problem);
                return Err(super::upstream::blame_stop(probe.upstream.as_ref(), stop));
            }
            probe.gateway = Some(gateway);
        }
        probe.dir = Some(dir);
        Ok(probe)
    }

    fn next(&self) -> usize {
        self.serial.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A key no request of any run has used, in the file's `key.shape`: a random UUID v4, or
    /// `chk-RUN-N`; either is valid as a token and an sf-string. With `key.pattern`, one the
    /// pattern takes (the file's validation proved that keys of its shape do; a pattern that
    /// takes only some of them is met by drawing again, a bounded number of times).
    pub fn fresh_key(&self) -> String {
        let draw = || match self.target.key.shape {
            KeyShape::Uuid => uuid::Uuid::new_v4().to_string(),
            KeyShape::Text => format!("chk-{}-{}", self.run, self.next()),
        };
        let mut key = draw();
        if let Some(pattern) = &self.target.key.pattern {
            for _ in 0..64 {
                if pattern.matches(&key) {
                    break;
                }
                key = draw();
            }
        }
        key
    }

    /// A fresh key outside `key.pattern`, which the service must refuse; `None` without a
    /// pattern (the file's validation proved that a pattern refuses one of them).
    pub fn key_outside_pattern(&self) -> Option<String> {
        self.target.key.pattern.as_ref()?.outside(&self.fresh_key())
    }

    /// A malformed key around a fresh one (an unclosed sf-string quote, and a quote is no token
    /// character either), so no run ever meets another run's malformed key.
    pub fn malformed_key(&self) -> String {
        format!("\"{}", self.fresh_key())
    }

    /// The endpoint's fields as the file gives them, each free-text field (`vary = "text"`)
    /// tagged so that this request's effect is its own; every other field exactly as given.
    pub fn fresh_fields(&self, other_endpoint: bool) -> BTreeMap<String, Value> {
        let endpoint = self.endpoint(other_endpoint);
        let n = self.next();
        tagged(&endpoint.fields, &endpoint.vary, &self.run, n)
    }

    /// The changed payloads the file allows, from `fields` (the first request's): one change of
    /// the first field that can change, then every pair of listed values a loose comparison
    /// would merge. Empty when `vary` names no field that can change.
    pub fn changes(&self, fields: &BTreeMap<String, Value>) -> Vec<Change> {
        let vary = &self.target.create.vary;
        changes(fields, vary, &format!("{}-{}", self.run, self.next()))
    }

    /// `fields` with a provocation's fields laid over them.
    pub fn provoked(
        &self,
        fields: &BTreeMap<String, Value>,
        provocation: &Provocation,
    ) -> BodyForm {
        match &provocation.body_text {
            Some(text) => BodyForm::Text(text.clone()),
            None => {
                let mut fields = fields.clone();
                fields.extend(provocation.fields.clone());
                BodyForm::Compact(fields)
            }
        }
    }

    /// The create (or the other endpoint).
    pub fn endpoint(&self, other_endpoint: bool) -> &Endpoint {
        match (&self.target.other_endpoint, other_endpoint) {
            (Some(other), true) => other,
            _ => &self.target.create,
        }
    }

    /// A call of the create with the caller, key and fields; the first caller by default.
    pub fn call(&self, step: &str, key: KeyWire, fields: &BTreeMap<String, Value>) -> Call {
        Call {
            step: step.to_owned(),
            caller: 0,
            key,
            body: BodyForm::Compact(fields.clone()),
            extra: Vec::new(),
            other_endpoint: false,
        }
    }

    /// The key header's value for `key`, as the file's form writes it.
    pub fn key_value(&self, key: &KeyWire) -> Option<String> {
        let quoted = |k: &str| format!("\"{k}\"");
        match (key, self.target.key.form) {
            (KeyWire::Normal(k), KeyForm::SfString)
            | (KeyWire::OtherForm(k), KeyForm::Token | KeyForm::Opaque) => Some(quoted(k)),
            (KeyWire::Normal(k), KeyForm::Token | KeyForm::Opaque)
            | (KeyWire::OtherForm(k), KeyForm::SfString) => Some(k.clone()),
            (KeyWire::Raw(text), _) => Some(text.clone()),
            (KeyWire::Absent, _) => None,
        }
    }

    fn outgoing(&self, point: &'static str, call: &Call) -> (Outgoing, Sent) {
        let endpoint = self.endpoint(call.other_endpoint);
        let mut headers = endpoint.headers.clone();
        let caller = &self.target.callers[call.caller.min(self.target.callers.len() - 1)];
        lay_over(&mut headers, &caller.headers);
        let key = self.key_value(&call.key);
        if let Some(value) = &key {
            lay_over(
                &mut headers,
                &[(self.target.key.header.clone(), value.clone())],
            );
        }
        lay_over(&mut headers, &call.extra);
        let body = match (&call.body, &endpoint.body) {
            (BodyForm::Text(text), _) => text.clone(),
            (BodyForm::Compact(fields), Some(template)) => {
                let mut text = String::new();
                write_json(&render(template, fields), false, &mut text, 0);
                text
            }
            (BodyForm::Reordered(fields), Some(template)) => {
                let mut text = String::new();
                write_json(&render(template, fields), true, &mut text, 0);
                text
            }
            (_, None) => String::new(),
        };
        let sent = Sent {
            point,
            step: call.step.clone(),
            caller: Some(caller.name.clone()),
            key,
            method: endpoint.method.clone(),
            path: endpoint.path.clone(),
            body: body.clone(),
        };
        let outgoing = Outgoing {
            method: endpoint.method.clone(),
            path: endpoint.path.clone(),
            headers,
            body: body.into_bytes(),
        };
        (outgoing, sent)
    }

    /// Sends one call and records it.
    pub async fn send(&self, point: &'static str, call: &Call) -> Seen {
        let (outgoing, sent) = self.outgoing(point, call);
        let at = Instant::now();
        // A gateway the restart point stopped is started again before anything else is sent.
        let started = match &self.gateway {
            Some(gateway) => gateway.ensure().await,
            None => Ok(()),
        };
        let answer = match started {
            Ok(()) => self.wire.send(&outgoing).await,
            Err(reason) => Answer::NoAnswer { reason },
        };
        let id = self.history.record(sent, recorded(answer.clone()), at);
        Seen { id, answer }
    }

    /// Sends one call to the service's root, without the base URL's path prefix, and records
    /// it: whether the service answers there tells a wrong prefix from a wrong path.
    pub async fn send_without_prefix(&self, point: &'static str, call: &Call) -> Seen {
        let (outgoing, sent) = self.outgoing(point, call);
        let service = &self.target.service;
        let root = Wire::new(service.url.host(), service.url.port(), "", service.timeout);
        let at = Instant::now();
        let answer = root.send(&outgoing).await;
        let id = self.history.record(sent, recorded(answer.clone()), at);
        Seen { id, answer }
    }

    /// Sends a request the file describes beside the create (a read by identity) as `caller`:
    /// the caller's headers, the request's own laid over them; recorded under `point`.
    pub async fn send_as(
        &self,
        point: &'static str,
        step: &str,
        caller: usize,
        mut outgoing: Outgoing,
    ) -> Seen {
        let who = &self.target.callers[caller];
        let mut headers = who.headers.clone();
        lay_over(&mut headers, &outgoing.headers);
        outgoing.headers = headers;
        let sent = Sent {
            point,
            step: step.to_owned(),
            caller: Some(who.name.clone()),
            key: None,
            method: outgoing.method.clone(),
            path: outgoing.path.clone(),
            body: String::from_utf8_lossy(&outgoing.body).into_owned(),
        };
        let at = Instant::now();
        let answer = self.wire.send(&outgoing).await;
        let id = self.history.record(sent, recorded(answer.clone()), at);
        Seen { id, answer }
    }

    /// Sends `calls` together: every connection is opened first, then all requests are
    /// released at once, so they meet inside the service.
    pub async fn send_together(
        self: &std::sync::Arc<Self>,
        point: &'static str,
        calls: Vec<Call>,
    ) -> Vec<Seen> {
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(calls.len()));
        let mut tasks = tokio::task::JoinSet::new();
        for (index, call) in calls.into_iter().enumerate() {
            let probe = std::sync::Arc::clone(self);
            let barrier = std::sync::Arc::clone(&barrier);
            tasks.spawn(async move {
                let (outgoing, sent) = probe.outgoing(point, &call);
                let connection = probe.wire.connect().await;
                barrier.wait().await;
                let at = Instant::now();
                let answer = match connection {
                    Ok(connection) => probe.wire.send_on(connection, &outgoing).await,
                    Err(reason) => Answer::NoAnswer { reason },
                };
                let id = probe.history.record(sent, recorded(answer.clone()), at);
                (index, Seen { id, answer })
            });
        }
        let mut seen = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(one) => seen.push(one),
                Err(err) => seen.push((
                    usize::MAX,
                    Seen {
                        id: 0,
                        answer: Answer::NoAnswer {
                            reason: format!("the caller's task failed: {err}"),
                        },
                    },
                )),
            }
        }
        seen.sort_by_key(|(index, _)| *index);
        seen.into_iter().map(|(_, seen)| seen).collect()
    }

    /// Sends a call until it is no longer answered "in progress" (at most ten times, waiting
    /// as `Retry-After` asks, capped at two seconds, a quarter second without it).
    pub async fn send_settled(&self, point: &'static str, call: &Call) -> Vec<Seen> {
        let mut seen = Vec::new();
        for _ in 0..10 {
            let one = self.send(point, call).await;
            let waiting = one
                .answer
                .status()
                .is_some_and(|s| self.target.statuses.in_progress.contains(&s))
                && !self.read(&one.answer, call.other_endpoint).success;
            let wait = one
                .answer
                .header("retry-after")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(Duration::from_millis(250), |s| {
                    Duration::from_secs(s.min(2))
                });
            seen.push(one);
            if !waiting {
                break;
            }
            tokio::time::sleep(wait).await;
        }
        seen
    }

    /// Writes a call up to `moment`, hangs up, and records it.
    pub async fn hang_up(
        &self,
        point: &'static str,
        call: &Call,
        moment: HangUp,
    ) -> (usize, Result<(), String>) {
        let (outgoing, sent) = self.outgoing(point, call);
        let at = Instant::now();
        let result = self.wire.hang_up(&outgoing, moment).await;
        let answer = match &result {
            Ok(()) => Answer::HungUp {
                moment: moment.describe().to_owned(),
            },
            Err(reason) => Answer::NoAnswer {
                reason: reason.clone(),
            },
        };
        (self.history.record(sent, answer, at), result)
    }

    /// What a reply says in the file's terms.
    pub fn read(&self, answer: &Answer, other_endpoint: bool) -> Read {
        let Answer::Reply { status, .. } = answer else {
            return Read {
                success: false,
                identity: None,
                marked_replay: None,
            };
        };
        let endpoint = self.endpoint(other_endpoint);
        let declared = if endpoint.success.is_empty() {
            (200..=299).contains(status)
        } else {
            endpoint.success.contains(status)
        };
        let identity = self.identity_in(answer);
        // A replay answered with the file's replay status and the stored body (a 409 that names
        // the first effect) is the first request's success, replayed.
        let replayed = matches!(self.target.replay, Replay::Status(s) if s == *status);
        let success = declared || (replayed && identity.is_some());
        let marked_replay = match &self.target.replay {
            Replay::Header { name, value } => Some(answer.header(name).is_some_and(|v| {
                value
                    .as_deref()
                    .is_none_or(|wanted| v.trim().eq_ignore_ascii_case(wanted))
            })),
            Replay::Status(replay_status) => Some(status == replay_status),
            Replay::Inferred => None,
        };
        Read {
            success,
            identity: identity.filter(|_| success),
            marked_replay,
        }
    }

    /// The identity an answer holds where `[identity]` says, whatever its status.
    pub fn identity_in(&self, answer: &Answer) -> Option<String> {
        let Answer::Reply { body, .. } = answer else {
            return None;
        };
        match &self.target.identity {
            Identity::Pointer(pointer) => serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|json| json.pointer(pointer).cloned())
                .filter(|value| !value.is_null())
                .map(|value| match value {
                    Value::String(text) => text,
                    other => other.to_string(),
                }),
            Identity::Header(name) => answer.header(name).map(str::to_owned),
        }
    }

    /// An answer in words, naming what the file says its status means.
    pub fn describe(&self, answer: &Answer) -> String {
        let Some(status) = answer.status() else {
            return answer.summary();
        };
        let read = self.read(answer, false);
        let statuses = &self.target.statuses;
        let meaning = if read.success {
            match &read.identity {
                Some(identity) => format!(" with identity {identity}"),
                None => " with no identity where [identity] says".to_owned(),
            }
        } else {
            // A status the file lists under more than one meaning (409 for both "in progress"
            // and "another payload" is common) is named with each: the status alone cannot say
            // which one the service meant.
            let meanings: Vec<&str> = [
                (
                    statuses.in_progress.contains(&status),
                    "statuses.in_progress: \"still in progress\"",
                ),
                (
                    statuses.conflict.contains(&status),
                    "statuses.conflict: \"key used with another payload\"",
                ),
                (
                    statuses.bad_key.contains(&status) || statuses.missing_key.contains(&status),
                    "a bad-request status",
                ),
            ]
            .into_iter()
            .filter_map(|(listed, meaning)| listed.then_some(meaning))
            .collect();
            if meanings.is_empty() {
                String::new()
            } else {
                format!(" ({})", meanings.join(", or "))
            }
        };
        format!("{status}{meaning}")
    }

    /// Runs the reset the file names, if any.
    ///
    /// # Errors
    /// A mismatch naming `service.reset` when the service answers it with anything but a
    /// success, or `service.reset_command` when the command fails; unreachable when the service
    /// does not answer at all.
    pub async fn reset(&self) -> Result<(), Stop> {
        if let Some(endpoint) = &self.target.service.reset {
            let outgoing = Outgoing {
                method: endpoint.method.clone(),
                path: endpoint.path.clone(),
                headers: endpoint.headers.clone(),
                body: endpoint
                    .body
                    .as_ref()
                    .map(|b| b.to_string().into_bytes())
                    .unwrap_or_default(),
            };
            reset_answered(endpoint, &self.wire.send(&outgoing).await)?;
        }
        if let Some(argv) = self.target.service.reset_command.clone() {
            let folder = self.target.folder.clone();
            let command = |problem: String| Stop::mismatch("service.reset_command", problem);
            let status = tokio::task::spawn_blocking(move || {
                std::process::Command::new(program_in(&folder, &argv[0]))
                    .args(&argv[1..])
                    .current_dir(folder)
                    .status()
            })
            .await
            .map_err(|err| command(err.to_string()))?
            .map_err(|err| command(err.to_string()))?;
            if !status.success() {
                return Err(command(format!("exited with {status}")));
            }
        }
        Ok(())
    }

    /// The number of effects now, as `[count]` says, recorded in the history among the
    /// exchanges (the reports draw it).
    ///
    /// # Errors
    /// The reason, when the count cannot be read.
    pub async fn count(&self) -> Result<i64, FieldError> {
        self.history.record_count(self.count_unrecorded().await)
    }

    async fn count_unrecorded(&self) -> Result<i64, FieldError> {
        match &self.target.count {
            Count::Request {
                request,
                pointer,
                callers,
            } => {
                let as_callers: Vec<Option<usize>> = match callers {
                    CountCallers::Each => (0..self.target.callers.len()).map(Some).collect(),
                    CountCallers::One(one) => vec![*one],
                };
                let mut total = 0;
                for caller in as_callers {
                    let mut headers = request.headers.clone();
                    if let Some(index) = caller {
                        lay_over(&mut headers, &self.target.callers[index].headers);
                    }
                    let outgoing = Outgoing {
                        method: request.method.clone(),
                        path: request.path.clone(),
                        headers,
                        body: Vec::new(),
                    };
                    let answer = self.wire.send(&outgoing).await;
                    total += count_in(&answer, pointer).map_err(|problem| {
                        FieldError::new(
                            "count.request",
                            format!("{} {}: {problem}", request.method, request.path),
                        )
                    })?;
                }
                Ok(total)
            }
            Count::Sqlite { file, query } => sqlite_count(file.clone(), query.clone()).await,
            Count::Postgres { url, query } => postgres_count(url.clone(), query.clone()).await,
            Count::Command(argv) => command_count(argv.clone(), self.target.folder.clone()).await,
            Count::Upstream => match &self.upstream {
                Some(api) => api
                    .count()
                    .await
                    .map_err(|problem| FieldError::new("[upstream]", problem)),
                None => Err(FieldError::new(
                    "[upstream]",
                    "the API the lab serves is not running",
                )),
            },
        }
    }
}

impl Probe {
    /// The effect named `identity`, read back as `[read]` says: the request's answer at its
    /// pointer and the query's first row, as JSON (`None` without a `[read]`).
    ///
    /// # Errors
    /// The reason, naming `read.request` or `read.sql`.
    pub async fn read_effect(&self, identity: &str) -> Option<Result<Value, FieldError>> {
        let read = self.target.read.as_ref()?;
        Some(self.read_back(read, identity).await)
    }

    async fn read_back(&self, read: &ReadBack, identity: &str) -> Result<Value, FieldError> {
        let mut parts = serde_json::Map::new();
        if let Some(request) = &read.request {
            let mut headers = self.target.callers[0].headers.clone();
            lay_over(&mut headers, &request.headers);
            let path = request.path.replace("{{id}}", &path_segment(identity));
            let outgoing = Outgoing {
                method: request.method.clone(),
                path: path.clone(),
                headers,
                body: Vec::new(),
            };
            let answer = self.wire.send(&outgoing).await;
            let found = match &answer {
                Answer::Reply { status, body, .. } if (200..=299).contains(status) => {
                    serde_json::from_str::<Value>(body)
                        .map_err(|err| format!("the answer is not JSON: {err}"))
                        .and_then(|json| {
                            json.pointer(&request.pointer).cloned().ok_or_else(|| {
                                format!(
                                    "nothing at read.request.json_pointer {:?}",
                                    request.pointer
                                )
                            })
                        })
                }
                other => Err(other.summary()),
            };
            let value = found.map_err(|problem| {
                FieldError::new(
                    "read.request",
                    format!("{} {path}: {problem}", request.method),
                )
            })?;
            parts.insert("request".to_owned(), value);
        }
        if let Some(sql) = &read.sql {
            let row = sqlite_row(sql.file.clone(), sql.query.clone(), identity.to_owned()).await?;
            parts.insert("sql".to_owned(), row);
        }
        Ok(Value::Object(parts))
    }
}

/// An identity as one path segment: unreserved characters as they are, others percent-encoded.
pub(crate) fn path_segment(identity: &str) -> String {
    let mut out = String::new();
    for byte in identity.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The first row of a read-only SQLite query with `?1` bound to `identity`, as a JSON list.
async fn sqlite_row(
    file: std::path::PathBuf,
    query: String,
    identity: String,
) -> Result<Value, FieldError> {
    tokio::task::spawn_blocking(move || {
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection = rusqlite::Connection::open_with_flags(&file, flags).map_err(|err| {
            FieldError::new("read.sql.sqlite", format!("{}: {err}", file.display()))
        })?;
        let mut statement = connection
            .prepare(&query)
            .map_err(|err| FieldError::new("read.sql.query", err.to_string()))?;
        let columns = statement.column_count();
        statement
            .query_row([identity.as_str()], |row| {
                (0..columns)
                    .map(|i| {
                        row.get::<_, rusqlite::types::Value>(i).map(|v| match v {
                            rusqlite::types::Value::Null => Value::Null,
                            rusqlite::types::Value::Integer(n) => Value::from(n),
                            rusqlite::types::Value::Real(f) => Value::from(f),
                            rusqlite::types::Value::Text(t) => Value::from(t),
                            rusqlite::types::Value::Blob(b) => Value::from(format!("{b:?}")),
                        })
                    })
                    .collect::<rusqlite::Result<Vec<Value>>>()
            })
            .map(Value::Array)
            .map_err(|err| FieldError::new("read.sql.query", format!("?1 = {identity:?}: {err}")))
    })
    .await
    .map_err(|err| FieldError::new("read.sql.sqlite", err.to_string()))?
}

/// The first column of a read-only SQLite query: a count. The file is opened read-only, through
/// SQLite, for this one query.
///
/// # Errors
/// The reason, naming `count.sql.sqlite` or `count.sql.query`.
pub async fn sqlite_count(file: std::path::PathBuf, query: String) -> Result<i64, FieldError> {
    tokio::task::spawn_blocking(move || {
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection = rusqlite::Connection::open_with_flags(&file, flags).map_err(|err| {
            FieldError::new("count.sql.sqlite", format!("{}: {err}", file.display()))
        })?;
        connection
            .query_row(&query, [], |row| row.get::<_, i64>(0))
            .map_err(|err| FieldError::new("count.sql.query", err.to_string()))
    })
    .await
    .map_err(|err| FieldError::new("count.sql.sqlite", err.to_string()))?
}

/// The one number a command prints, run in `folder` (the target file's).
///
/// # Errors
/// The reason, naming `count.command`.
pub async fn command_count(
    argv: Vec<String>,
    folder: std::path::PathBuf,
) -> Result<i64, FieldError> {
    let command = |problem: String| FieldError::new("count.command", problem);
    tokio::task::spawn_blocking(move || {
        let output = std::process::Command::new(program_in(&folder, &argv[0]))
            .args(&argv[1..])
            .current_dir(folder)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|err| command(format!("{:?}: {err}", argv[0])))?;
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(command(format!(
                "exited with {}{}",
                output.status,
                last_line_said(&output.stderr)
            )));
        }
        text.trim()
            .parse::<i64>()
            .map_err(|_| command(format!("printed {:?}, not one number", text.trim())))
    })
    .await
    .map_err(|err| command(err.to_string()))?
}

/// What a failed command said last on its standard error, as ": LINE" cut to a readable
/// length, or nothing when it said nothing: a count that stops working mid-run (a store the
/// service itself broke) must say why, not only that it exited.
fn last_line_said(stderr: &[u8]) -> String {
    const MOST: usize = 300;
    let text = String::from_utf8_lossy(stderr);
    let Some(line) = text.lines().map(str::trim).rfind(|l| !l.is_empty()) else {
        return String::new();
    };
    match line.char_indices().nth(MOST) {
        Some((cut, _)) => format!(": {}...", &line[..cut]),
        None => format!(": {line}"),
    }
}

#[cfg(feature = "postgres")]
async fn postgres_count(url: String, query: String) -> Result<i64, FieldError> {
    let query_field = |problem: String| FieldError::new("count.sql.query", problem);
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls)
            .map_err(|err| FieldError::new("count.sql.postgres", err.to_string()))?;
        let row = client
            .query_one(query.as_str(), &[])
            .map_err(|err| query_field(err.to_string()))?;
        row.try_get::<_, i64>(0)
            .map_err(|err| query_field(format!("the first column is not a bigint: {err}")))
    })
    .await
    .map_err(|err| FieldError::new("count.sql.postgres", err.to_string()))?
}

#[cfg(not(feature = "postgres"))]
async fn postgres_count(_: String, _: String) -> Result<i64, FieldError> {
    Err(FieldError::new(
        "count.sql.postgres",
        "this lab was built without the postgres feature",
    ))
}

/// The count a counting reply holds at `pointer`: a list's length, or a number.
fn count_in(answer: &Answer, pointer: &str) -> Result<i64, String> {
    let Answer::Reply { status, body, .. } = answer else {
        return Err(answer.summary());
    };
    if !(200..=299).contains(status) {
        return Err(format!("answered {status}"));
    }
    let json: Value =
        serde_json::from_str(body).map_err(|err| format!("the answer is not JSON: {err}"))?;
    count_at(&json, pointer)
}

/// The count `source` holds at `pointer`: a list's length, or a number (as a number or text).
pub(crate) fn count_at(source: &Value, pointer: &str) -> Result<i64, String> {
    match source.pointer(pointer) {
        Some(Value::Array(items)) => Ok(items.len() as i64),
        Some(Value::Number(n)) if n.as_i64().is_some() => Ok(n.as_i64().unwrap_or_default()),
        Some(Value::String(text)) if text.parse::<i64>().is_ok() => {
            Ok(text.parse().unwrap_or_default())
        }
        Some(other) => Err(format!("{pointer} holds {other}, not a list or a number")),
        None => Err(format!("nothing at {pointer}")),
    }
}

/// The template with its `{{field}}` placeholders filled: a text that is one placeholder takes
/// the field's value (a number stays a number); one inside a longer text takes its text.
pub fn render(template: &Value, fields: &BTreeMap<String, Value>) -> Value {
    match template {
        Value::String(text) => {
            let trimmed = text.trim();
            if let Some(name) = trimmed
                .strip_prefix("{{")
                .and_then(|t| t.strip_suffix("}}"))
                && !name.contains("{{")
                && let Some(value) = fields.get(name.trim())
            {
                return value.clone();
            }
            let mut out = text.clone();
            for (name, value) in fields {
                let as_text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out = out.replace(&format!("{{{{{name}}}}}"), &as_text);
            }
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| render(v, fields)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), render(v, fields)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Writes JSON with object keys sorted (`reordered`: reversed, with spaces and line breaks), so
/// the same payload can be sent in two textual forms.
pub fn write_json(value: &Value, reordered: bool, out: &mut String, depth: usize) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            if reordered {
                keys.reverse();
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if reordered {
                    out.push('\n');
                    out.push_str(&"   ".repeat(depth + 1));
                }
                out.push_str(&Value::String((*key).clone()).to_string());
                out.push_str(if reordered { " :  " } else { ":" });
                write_json(&map[key.as_str()], reordered, out, depth + 1);
            }
            if reordered {
                out.push_str("\n\t");
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(if reordered { " , " } else { "," });
                }
                write_json(item, reordered, out, depth + 1);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A reset the service answered with a success; the file's fault when it answered with anything
/// else, and not when it did not answer at all.
fn reset_answered(endpoint: &Endpoint, answer: &Answer) -> Result<(), Stop> {
    let problem = || {
        format!(
            "{} {}: {}",
            endpoint.method,
            endpoint.path,
            answer.summary()
        )
    };
    match answer.status() {
        Some(status) if (200..=299).contains(&status) => Ok(()),
        Some(_) => Err(Stop::mismatch(
            "service.reset",
            excerpt::one_line(&problem()),
        )),
        None => Err(Stop::Unreachable {
            asked: "reset",
            problem: format!("service.reset {}", problem()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_count_or_read_the_file_describes_wrongly_names_its_field_once() {
        let folder = tempfile::tempdir().unwrap();
        let db = folder.path().join("store.sqlite3");
        rusqlite::Connection::open(&db)
            .unwrap()
            .execute_batch("CREATE TABLE tickets (id INTEGER PRIMARY KEY)")
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let counted = runtime.block_on(sqlite_count(db.clone(), "SELECT nope".to_owned()));
        let err = counted.unwrap_err();
        assert_eq!(err.field, "count.sql.query");
        // Once read "count.sql.query: count.sql.query: no such column", the field found by
        // sorting the message on its first word.
        let stop = Stop::from(err).into_error("t.toml", "u").to_string();
        assert!(
            stop.starts_with(
                "t.toml does not describe the service: count.sql.query: no such column"
            ),
            "{stop}"
        );
        let read = runtime.block_on(sqlite_row(db, "SELECT * FROM nowhere".into(), "1".into()));
        assert_eq!(read.unwrap_err().field, "read.sql.query");
        let argv = vec!["sh".to_owned(), "-c".to_owned(), "echo many".to_owned()];
        let printed = runtime.block_on(command_count(argv, folder.path().to_owned()));
        let err = printed.unwrap_err();
        assert_eq!(err.field, "count.command");
        assert!(err.problem.starts_with("printed \"many\""), "{err}");
    }

    #[test]
    fn a_reset_the_service_refuses_is_the_files_fault_and_one_it_never_answers_is_not() {
        let reset = Endpoint {
            method: "POST".to_owned(),
            path: "/admin/reset".to_owned(),
            headers: Vec::new(),
            body: None,
            fields: BTreeMap::new(),
            vary: BTreeMap::new(),
            success: Vec::new(),
        };
        let reply = |status| Answer::Reply {
            status,
            headers: Vec::new(),
            body: "nope".to_owned(),
        };
        assert!(reset_answered(&reset, &reply(204)).is_ok());
        let refused = reset_answered(&reset, &reply(404)).unwrap_err();
        // The field is named once, by the error, and not again in its problem.
        let err = refused
            .into_error("t.toml", "http://127.0.0.1:1")
            .to_string();
        assert!(
            err.starts_with(
                "t.toml does not describe the service: service.reset: POST /admin/reset: 404"
            ),
            "{err}"
        );
        let silent = Answer::NoAnswer {
            reason: "connection refused".to_owned(),
        };
        let unanswered = reset_answered(&reset, &silent).unwrap_err();
        assert!(matches!(
            unanswered,
            Stop::Unreachable { asked: "reset", .. }
        ));
        assert!(!unanswered.into_error("t.toml", "u").is_bad_input());
    }

    #[test]
    fn a_template_takes_its_fields_as_values_or_as_text() {
        let template = json!({"title": "{{title}}", "n": "{{n}}", "note": "about {{title}}"});
        let fields: BTreeMap<String, Value> = [
            ("title".to_owned(), json!("Jam")),
            ("n".to_owned(), json!(3)),
        ]
        .into();
        assert_eq!(
            render(&template, &fields),
            json!({"title": "Jam", "n": 3, "note": "about Jam"})
        );
    }

    #[test]
    fn the_reordered_form_is_other_text_for_the_same_json() {
        let value = json!({"a": 1, "b": {"c": [1, 2], "d": "x"}});
        let (mut compact, mut reordered) = (String::new(), String::new());
        write_json(&value, false, &mut compact, 0);
        write_json(&value, true, &mut reordered, 0);
        assert_eq!(compact, r#"{"a":1,"b":{"c":[1,2],"d":"x"}}"#);
        assert_ne!(compact, reordered);
        assert!(reordered.find("\"b\"") < reordered.find("\"a\""));
        assert_eq!(serde_json::from_str::<Value>(&reordered).unwrap(), value);
    }

    #[test]
    fn only_free_text_fields_are_tagged_and_others_are_sent_as_given() {
        let fields: BTreeMap<String, Value> = [
            ("title".to_owned(), json!("Jam")),
            ("priority".to_owned(), json!("high")),
        ]
        .into();
        let vary = BTreeMap::from([("title".to_owned(), Vary::Text)]);
        let sent = tagged(&fields, &vary, "r", 4);
        assert_eq!(sent["title"], json!("Jam (check r-4)"));
        assert_eq!(sent["priority"], json!("high"));
        assert_eq!(tagged(&fields, &BTreeMap::new(), "r", 4), fields);
    }

    #[test]
    fn each_pair_a_loose_comparison_merges_is_a_change_of_its_own() {
        let fields: BTreeMap<String, Value> = [
            ("size".to_owned(), json!(1024)),
            ("priority".to_owned(), json!("low")),
        ]
        .into();
        let vary = BTreeMap::from([
            (
                "priority".to_owned(),
                Vary::OneOf(vec![json!("low"), json!("high")]),
            ),
            (
                "size".to_owned(),
                Vary::OneOf(vec![json!(1024), json!("1024"), json!(1024.0), json!(7)]),
            ),
        ]);
        let found = changes(&fields, &vary, "t");
        // The plain change first: the first field that can change, to a value no loose
        // comparison merges with its own.
        assert!(!found[0].loose);
        assert_eq!(found[0].changed["priority"], json!("high"));
        assert_eq!(found[0].changed["size"], json!(1024));
        let pairs: Vec<(Value, Value)> = found[1..]
            .iter()
            .map(|c| (c.first["size"].clone(), c.changed["size"].clone()))
            .collect();
        assert_eq!(
            pairs,
            vec![
                (json!(1024), json!("1024")),
                (json!(1024), json!(1024.0)),
                (json!("1024"), json!(1024.0)),
            ]
        );
        assert!(found[1..].iter().all(|c| c.loose));
        assert_eq!(loose_key(&json!(true)), loose_key(&json!("true")));
        assert_ne!(loose_key(&json!(1)), loose_key(&json!(true)));
        assert!(changes(&fields, &BTreeMap::new(), "t").is_empty());
    }

    #[test]
    fn a_free_text_change_keeps_the_fields_own_text_and_changes_nothing_else() {
        let fields: BTreeMap<String, Value> = [
            ("title".to_owned(), json!("Jam (check r-1)")),
            ("priority".to_owned(), json!("high")),
        ]
        .into();
        let vary = BTreeMap::from([("title".to_owned(), Vary::Text)]);
        let found = changes(&fields, &vary, "r-2");
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].changed["title"],
            json!("Jam (check r-1) (check r-2)")
        );
        assert_eq!(found[0].changed["priority"], json!("high"));
    }

    #[test]
    fn a_status_listed_under_two_meanings_is_described_with_both() {
        let file = |statuses: &str| {
            let text = format!(
                "[service]\nbase_url = \"http://127.0.0.1:8000\"\n[create]\npath = \"/t\"\n\
                 body = {{ title = \"{{{{title}}}}\" }}\nfields = {{ title = \"Jam\" }}\n\
                 [key]\nform = \"sf-string\"\n[identity]\njson_pointer = \"/id\"\n\
                 [[callers]]\nname = \"a\"\nheaders = {{ A = \"1\" }}\n\
                 [[callers]]\nname = \"b\"\nheaders = {{ A = \"2\" }}\n\
                 [count]\nrequest = {{ path = \"/t\", json_pointer = \"/t\" }}\n\
                 [statuses]\n{statuses}\n"
            );
            Probe::new(
                crate::check::target::Target::parse(
                    &text,
                    std::path::Path::new("t.toml"),
                    &crate::check::target::Overrides::default(),
                )
                .unwrap(),
            )
        };
        let reply = |status: u16| Answer::Reply {
            status,
            headers: vec![],
            body: "{}".to_owned(),
        };
        // 409 for both: the description cannot pick one, so it names both.
        let both = file("in_progress = [409]\nconflict = [409, 422]");
        let said = both.describe(&reply(409));
        assert!(said.contains("still in progress"), "{said}");
        assert!(said.contains("key used with another payload"), "{said}");
        assert_eq!(
            both.describe(&reply(422)),
            "422 (statuses.conflict: \"key used with another payload\")"
        );
        // 409 for one meaning only: that one alone.
        let one = file("in_progress = [425]\nconflict = [409]");
        let said = one.describe(&reply(409));
        assert!(!said.contains("in progress"), "{said}");
        assert_eq!(one.describe(&reply(418)), "418");
    }

    #[test]
    fn a_failed_commands_last_words_are_kept_and_cut() {
        assert_eq!(last_line_said(b""), "");
        assert_eq!(last_line_said(b"\n  \n"), "");
        assert_eq!(
            last_line_said(b"at read (x.js:3)\nError: tasks.json is not JSON\n\n"),
            ": Error: tasks.json is not JSON"
        );
        let long = "\u{e9}".repeat(400);
        let said = last_line_said(long.as_bytes());
        assert!(
            said.ends_with("...") && said.chars().count() == 2 + 300 + 3,
            "{said}"
        );
    }

    #[test]
    fn a_header_laid_over_replaces_its_name_in_any_case() {
        let pair = |n: &str, v: &str| (n.to_owned(), v.to_owned());
        let mut headers = vec![pair("Authorization", "Bearer a"), pair("Accept", "*/*")];
        lay_over(&mut headers, &[pair("authorization", "Bearer b")]);
        assert_eq!(
            headers,
            [pair("Accept", "*/*"), pair("authorization", "Bearer b")]
        );
    }

    #[test]
    fn an_absent_identity_never_names_the_same_effect() {
        assert!(!same_effect(&None, &None));
        assert!(!same_effect(&Some("1".to_owned()), &None));
        assert!(!same_effect(&Some("1".to_owned()), &Some("2".to_owned())));
        assert!(same_effect(&Some("1".to_owned()), &Some("1".to_owned())));
    }

    #[test]
    fn a_count_is_a_list_length_or_a_number() {
        let reply = |body: &str| Answer::Reply {
            status: 200,
            headers: vec![],
            body: body.to_owned(),
        };
        assert_eq!(count_in(&reply(r#"{"t":[1,2,3]}"#), "/t"), Ok(3));
        assert_eq!(count_in(&reply(r#"{"n":7}"#), "/n"), Ok(7));
        assert!(count_in(&reply(r#"{"n":{}}"#), "/n").is_err());
        assert!(count_in(&reply("{}"), "/n").is_err());
    }
}
