//! The API behind a wrapper (`[upstream]`): the lab serves its own ticket contract on loopback,
//! behind a recording proxy, so the hop points can see what the wrapper sent on the agent's
//! behalf (method, path, every header, the body) and what became of it, and can fault the next
//! create: lose its reply after the API committed, or answer it without forwarding (a 503, a 429,
//! an in-progress 409), as a real API does on a bad day.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderValue};
use serde_json::Value;

use super::report::Stop;
use super::target::{CREATE_PATH, DeclaredRoute, Upstream, UpstreamKeyForm};
use crate::http::blocking;
use crate::http::proxy::{Decision, DroppingProxy, Fate, Hold, Tap};
use crate::http::server::{ServeOptions, TicketServer};
use crate::http::wire::IDEMPOTENCY_KEY;
use crate::service::CallerToken;

impl DeclaredRoute {
    /// The segments `{name}` matched, when `method` and `target` are this route's.
    fn matches(&self, method: &str, target: &str) -> Option<Vec<(String, String)>> {
        if !method.eq_ignore_ascii_case(&self.method) {
            return None;
        }
        let path = target.split('?').next().unwrap_or_default();
        let (ours, theirs): (Vec<&str>, Vec<&str>) =
            (self.path.split('/').collect(), path.split('/').collect());
        if ours.len() != theirs.len() {
            return None;
        }
        let mut captured = Vec::new();
        for (pattern, segment) in ours.iter().zip(&theirs) {
            match pattern.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Some(name) if !segment.is_empty() => {
                    captured.push((name.to_owned(), (*segment).to_owned()));
                }
                _ if pattern == segment => {}
                _ => return None,
            }
        }
        Some(captured)
    }

    /// Its answer to a request that matched with `captured`.
    fn answer(&self, captured: &[(String, String)]) -> Decision {
        let body = self.answer.as_ref().map_or_else(String::new, |template| {
            captured
                .iter()
                .fold(template.clone(), |value, (name, segment)| {
                    replaced(&value, &format!("{{{{{name}}}}}"), segment)
                })
                .to_string()
        });
        let headers = if self.answer.is_some() {
            vec![("content-type".to_owned(), "application/json".to_owned())]
        } else {
            Vec::new()
        };
        Decision::Answer {
            status: self.status,
            headers,
            body: Bytes::from(body),
        }
    }
}

/// One request the wrapper sent the API.
#[derive(Clone, Debug)]
pub struct UpstreamRequest {
    /// Its number among the run's upstream requests, from 1.
    pub number: usize,
    /// When it arrived.
    pub arrived: Instant,
    /// How long it took to settle, once it has.
    pub took: Option<std::time::Duration>,
    /// The method.
    pub method: String,
    /// The path and query.
    pub target: String,
    /// Every header, in order, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body as text (lossy).
    pub body: String,
    /// Whether it is a create: the file's create route, or the lab's (`POST /tickets`).
    pub create: bool,
    /// The fault the lab did to it, if any.
    pub fault: Option<String>,
    /// What became of it, once known.
    pub fate: Option<Fate>,
}

impl UpstreamRequest {
    /// Whether it is a create.
    pub fn is_create(&self) -> bool {
        self.create
    }

    /// The values of header `name` (any case).
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The status the API answered, whether or not the wrapper got it.
    pub fn status(&self) -> Option<u16> {
        match &self.fate {
            Some(
                Fate::Answered { status, .. }
                | Fate::Lost { status, .. }
                | Fate::Abandoned { status, .. },
            ) => Some(*status),
            _ => None,
        }
    }

    /// The keys it carries where `spec` says the API reads them: the key header's values, or
    /// the body member `upstream.key_pointer` names (a string as it is, other JSON as text).
    pub fn keys(&self, spec: &Upstream) -> Vec<String> {
        match &spec.key_pointer {
            None => self
                .header(&spec.key_header)
                .into_iter()
                .map(str::to_owned)
                .collect(),
            Some(pointer) => serde_json::from_str::<Value>(&self.body)
                .ok()
                .and_then(|body| body.pointer(pointer).cloned())
                .map(|key| match key {
                    Value::String(text) => text,
                    other => other.to_string(),
                })
                .into_iter()
                .collect(),
        }
    }

    /// The body as JSON, without the key member when the API reads its key from the body: the
    /// payload the API compares between a create and its retry.
    pub fn payload(&self, spec: &Upstream) -> Option<Value> {
        let mut body: Value = serde_json::from_str(&self.body).ok()?;
        if let Some(pointer) = &spec.key_pointer {
            take_pointer(&mut body, pointer);
        }
        Some(body)
    }

    /// One line for a report: `POST /tickets (Idempotency-Key: "...") body {...} -> 201`.
    pub fn describe(&self, spec: &Upstream) -> String {
        let keys = self.keys(spec);
        let place = spec.key_place();
        let key = if keys.is_empty() {
            format!("no key in {place}")
        } else {
            format!("{place}: {}", keys.join(", "))
        };
        let fate = match &self.fate {
            None => "no answer yet".to_owned(),
            Some(Fate::Answered { status, .. }) => status.to_string(),
            Some(Fate::Lost { status, .. }) => format!("{status}, reply lost by the lab"),
            Some(Fate::Abandoned { status, .. }) => {
                format!("{status}, the wrapper closed its connection while the reply was held")
            }
            Some(Fate::Failed(problem)) => format!("failed: {problem}"),
        };
        let fault = self
            .fault
            .as_ref()
            .map(|f| format!(" [{f}]"))
            .unwrap_or_default();
        format!(
            "{} {} ({key}) body {} -> {fate}{fault}",
            self.method,
            self.target,
            super::excerpt::trimmed(&self.body, 160)
        )
    }
}

/// A fault for the next create the wrapper sends.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Forward it; the API commits; the wrapper's connection is closed without the reply.
    LoseReply,
    /// Forward it; the API commits; its reply is passed on only when the hold ends.
    Late {
        /// Ended by the check on an event it observes, or by its bound.
        hold: Hold,
        /// The event, as the report names it: "until ...".
        until: String,
    },
    /// Answer it without forwarding.
    Answer {
        /// The status.
        status: u16,
        /// Extra headers (`Retry-After`).
        headers: Vec<(String, String)>,
        /// The body (a problem document).
        body: String,
        /// How the report names it.
        name: String,
    },
}

/// Records every request and applies the queued faults to creates, in order.
#[derive(Default)]
struct Recorder {
    spec: Option<Upstream>,
    requests: Mutex<Vec<UpstreamRequest>>,
    faults: Mutex<VecDeque<Fault>>,
    /// Bumped each time a request arrives or settles, so the check waits on what the API sees
    /// rather than for a time.
    changes: tokio::sync::watch::Sender<u64>,
}

impl Tap for Recorder {
    fn arrived(
        &self,
        method: &str,
        target: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> (usize, Decision) {
        let mut request = UpstreamRequest {
            number: 0,
            arrived: Instant::now(),
            took: None,
            method: method.to_owned(),
            target: target.to_owned(),
            headers: headers
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: String::from_utf8_lossy(body).into_owned(),
            create: self.is_create(method, target),
            fault: None,
            fate: None,
        };
        let decision = if request.is_create() {
            match self
                .faults
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front()
            {
                None => Decision::Forward,
                Some(Fault::LoseReply) => {
                    request.fault = Some("the API committed; the lab lost its reply".to_owned());
                    Decision::LoseReply
                }
                Some(Fault::Late { hold, until }) => {
                    request.fault = Some(format!(
                        "the API committed; the lab held its reply until {until} (at most {} s)",
                        hold.bound.as_secs()
                    ));
                    Decision::Late(hold)
                }
                Some(Fault::Answer {
                    status,
                    headers,
                    body,
                    name,
                }) => {
                    request.fault = Some(format!("answered {status} by the lab: {name}"));
                    Decision::Answer {
                        status,
                        headers,
                        body: Bytes::from(body),
                    }
                }
            }
        } else {
            self.declared(method, target, &mut request)
        };
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        request.number = requests.len() + 1;
        let number = request.number;
        requests.push(request);
        drop(requests);
        self.changes.send_modify(|n| *n += 1);
        (number, decision)
    }

    fn rewrite(&self, number: usize, request: &mut hyper::Request<Full<Bytes>>) {
        let Some(spec) = &self.spec else { return };
        let headers = request.headers_mut();
        if let Some(name) = &spec.token_header
            && let Some(token) = headers.remove(name.as_str())
            && let Ok(bearer) = HeaderValue::from_bytes(&[b"Bearer ", token.as_bytes()].concat())
        {
            headers.insert(hyper::header::AUTHORIZATION, bearer);
        }
        if !self.was_create(number) {
            return;
        }
        // The key, from wherever this API carries it, as the lab's API reads it: one RFC 8941
        // string (a bare key is quoted; one already quoted or a token stays as it is).
        let keys: Vec<HeaderValue> = match &spec.key_pointer {
            Some(pointer) => key_out_of_body(request, pointer),
            None => {
                let headers = request.headers_mut();
                let keys = headers
                    .get_all(spec.key_header.as_str())
                    .iter()
                    .cloned()
                    .collect();
                headers.remove(spec.key_header.as_str());
                keys
            }
        };
        let headers = request.headers_mut();
        for value in keys {
            let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
            let written = match spec.key_form {
                UpstreamKeyForm::Plain if !text.starts_with('"') => {
                    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
                }
                _ => text,
            };
            if let Ok(value) = HeaderValue::from_str(&written) {
                headers.append(IDEMPOTENCY_KEY, value);
            }
        }
        if spec.create.is_some() {
            *request.method_mut() = hyper::Method::POST;
            if let Ok(uri) = CREATE_PATH.parse() {
                *request.uri_mut() = uri;
            }
        }
    }

    fn reply(&self, number: usize, status: u16, body: &Bytes) -> Option<(u16, Bytes)> {
        let route = self.spec.as_ref()?.create.as_ref()?;
        if !self.was_create(number) || !(200..300).contains(&status) {
            return None;
        }
        let id = ticket_id(body)?;
        let answer = match &route.answer {
            Some(template) => with_id(template, &id),
            None => serde_json::from_slice(body).ok()?,
        };
        Some((route.status, Bytes::from(answer.to_string())))
    }

    fn settled(&self, number: usize, fate: Fate) {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(request) = requests.get_mut(number - 1) {
            request.took = Some(request.arrived.elapsed());
            request.fate = Some(fate);
        }
        drop(requests);
        self.changes.send_modify(|n| *n += 1);
    }
}

impl Recorder {
    /// The file's answer to a request one of its `[[upstream.routes]]` matches, noted on
    /// `request`; else forward it to the lab's API.
    fn declared(&self, method: &str, target: &str, request: &mut UpstreamRequest) -> Decision {
        let routes = self.spec.as_ref().map_or(&[][..], |s| s.routes.as_slice());
        for (index, route) in routes.iter().enumerate() {
            if let Some(captured) = route.matches(method, target) {
                request.fault = Some(format!(
                    "answered {} by the file's upstream.routes[{index}]",
                    route.status
                ));
                return route.answer(&captured);
            }
        }
        Decision::Forward
    }

    fn is_create(&self, method: &str, target: &str) -> bool {
        let path = target.split('?').next().unwrap_or_default();
        match self.spec.as_ref().and_then(|s| s.create.as_ref()) {
            Some(route) => method == route.method && path == route.path,
            None => method == "POST" && path == CREATE_PATH,
        }
    }

    fn was_create(&self, number: usize) -> bool {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(number - 1)
            .is_some_and(UpstreamRequest::is_create)
    }
}

/// Takes the member `pointer` names out of `value`, and returns it.
pub(crate) fn take_pointer(value: &mut Value, pointer: &str) -> Option<Value> {
    let (parent, last) = pointer.rsplit_once('/')?;
    let last = last.replace("~1", "/").replace("~0", "~");
    value.pointer_mut(parent)?.as_object_mut()?.remove(&last)
}

/// Takes the key out of a create's JSON body (`pointer`), so that the lab's API stores the
/// payload without it, and returns it as a header value for `Idempotency-Key`. The body and its
/// length are rewritten; a body that is not JSON, or has no key there, is left as it is.
fn key_out_of_body(request: &mut hyper::Request<Full<Bytes>>, pointer: &str) -> Vec<HeaderValue> {
    use futures::FutureExt;
    use http_body_util::BodyExt;
    let Some(bytes) = request
        .body()
        .clone()
        .collect()
        .now_or_never()
        .and_then(Result::ok)
        .map(http_body_util::Collected::to_bytes)
    else {
        return Vec::new();
    };
    let Ok(mut body) = serde_json::from_slice::<Value>(&bytes) else {
        return Vec::new();
    };
    let Some(key) = take_pointer(&mut body, pointer) else {
        return Vec::new();
    };
    let text = match key {
        Value::String(text) => text,
        other => other.to_string(),
    };
    let rewritten = Bytes::from(body.to_string());
    request.headers_mut().insert(
        hyper::header::CONTENT_LENGTH,
        HeaderValue::from(rewritten.len()),
    );
    *request.body_mut() = Full::new(rewritten);
    HeaderValue::from_str(&text).into_iter().collect()
}

/// The ticket id in an answer of the lab's API (`{"ticket_id": N}`), as text.
pub fn ticket_id(body: &[u8]) -> Option<String> {
    let json: serde_json::Value = serde_json::from_slice(body).ok()?;
    json.get("ticket_id").map(|id| match id {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    })
}

/// `template` with every `{{id}}` in its strings replaced by `id`.
fn with_id(template: &serde_json::Value, id: &str) -> serde_json::Value {
    replaced(template, "{{id}}", id)
}

/// `template` with every `mark` in its strings replaced by `text`.
fn replaced(template: &serde_json::Value, mark: &str, text: &str) -> serde_json::Value {
    use serde_json::Value;
    match template {
        Value::String(found) => Value::String(found.replace(mark, text)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| replaced(v, mark, text)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), replaced(v, mark, text)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The API the lab serves a wrapper, and what the wrapper sent it.
pub struct UpstreamApi {
    /// The proxy and the server, taken by `drop` (the proxy stops first).
    running: Option<(DroppingProxy, TicketServer)>,
    url: String,
    port: u16,
    recorder: Arc<Recorder>,
    admin_token: String,
    /// The file's `[upstream]`.
    pub spec: Upstream,
}

impl UpstreamApi {
    /// Starts the lab's ticket API on a fresh store in `dir`, and the recorder in front of it.
    ///
    /// # Errors
    /// The reason, when either cannot start.
    pub fn start(spec: &Upstream, dir: &std::path::Path) -> Result<UpstreamApi, String> {
        let admin_token = format!("admin-{}", uuid::Uuid::new_v4().simple());
        let callers = spec
            .tokens
            .iter()
            .map(|(name, token)| format!("{name}={token}").parse::<CallerToken>())
            .collect::<crate::error::Result<Vec<_>>>()
            .map_err(|err| format!("upstream.tokens: {err}"))?;
        let server = TicketServer::start(ServeOptions {
            port: 0,
            database: Some(dir.join("upstream-api.sqlite3")),
            callers,
            admin_token: Some(admin_token.clone()),
            workers: 2,
            ..ServeOptions::default()
        })
        .map_err(|err| format!("starting the API the lab serves: {err}"))?;
        let recorder = Arc::new(Recorder {
            spec: Some(spec.clone()),
            ..Recorder::default()
        });
        let address = ([127, 0, 0, 1], server.port()).into();
        let proxy = DroppingProxy::start_tapped(address, spec.port.unwrap_or(0), recorder.clone())
            .map_err(|err| format!("starting the API's recorder: {err}"))?;
        Ok(UpstreamApi {
            url: proxy.url(),
            port: server.port(),
            running: Some((proxy, server)),
            recorder,
            admin_token,
            spec: spec.clone(),
        })
    }

    /// The base URL the wrapper is given, `{{upstream}}`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Queues a fault for the next create the wrapper sends.
    pub fn fault_next(&self, fault: Fault) {
        self.recorder
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(fault);
    }

    /// Holds the API's reply to the next create the wrapper sends until the returned sender says
    /// `true` (or is dropped), at most `bound`; `until` names the event for the report.
    pub fn hold_next(&self, until: &str, bound: Duration) -> tokio::sync::watch::Sender<bool> {
        let (release, released) = tokio::sync::watch::channel(false);
        self.fault_next(Fault::Late {
            hold: Hold {
                release: released,
                bound,
            },
            until: until.to_owned(),
        });
        release
    }

    /// Changes each time a request arrives at the API or settles: what a wait on the API's
    /// requests wakes on.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.recorder.changes.subscribe()
    }

    /// Adds `note` to the fault the report gives request `number` (what a hold's bound meant,
    /// when it ended the hold).
    pub fn annotate(&self, number: usize, note: &str) {
        let mut requests = self
            .recorder
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(fault) = number
            .checked_sub(1)
            .and_then(|index| requests.get_mut(index))
            .and_then(|r| r.fault.as_mut())
        {
            fault.push_str("; ");
            fault.push_str(note);
        }
    }

    /// Drops the faults no create has used, and says how many there were.
    pub fn clear_faults(&self) -> usize {
        let mut faults = self
            .recorder
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let left = faults.len();
        faults.clear();
        left
    }

    /// How many requests the API has seen so far: a mark for [`UpstreamApi::since`].
    pub fn mark(&self) -> usize {
        self.recorder
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The requests after `mark`.
    pub fn since(&self, mark: usize) -> Vec<UpstreamRequest> {
        self.recorder
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(mark..)
            .unwrap_or_default()
            .to_vec()
    }

    /// The creates after `mark`.
    pub fn creates_since(&self, mark: usize) -> Vec<UpstreamRequest> {
        self.since(mark)
            .into_iter()
            .filter(UpstreamRequest::is_create)
            .collect()
    }

    /// Every request of the run.
    pub fn all(&self) -> Vec<UpstreamRequest> {
        self.since(0)
    }

    /// Whose token `request` arrived with: `Some(Ok(name))` for a token `upstream.tokens` names,
    /// `Some(Err(()))` for one it does not, `None` when the token header is absent. The header is
    /// `upstream.token_header`, else `Authorization` with or without its `Bearer ` scheme.
    pub fn token_of(&self, request: &UpstreamRequest) -> Option<Result<String, ()>> {
        let header = self.spec.token_header.as_deref().unwrap_or("authorization");
        let sent = *request.header(header).first()?;
        let token = match sent.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case("bearer ") => &sent[7..],
            _ => sent,
        };
        Some(
            self.spec
                .tokens
                .iter()
                .find(|(_, t)| t == token.trim())
                .map(|(name, _)| name.clone())
                .ok_or(()),
        )
    }

    /// Whether the wrapper passed two of its callers on to the API as two callers, which the lab
    /// sees because it serves the API: every create before `marks.0` (sent as the first caller)
    /// arrived with one caller's token of `upstream.tokens`, and every create from `marks.0` to
    /// `marks.1` (sent as the second) with another caller's. `Ok` with the proof in words; `Err` with what arrived otherwise.
    ///
    /// # Errors
    /// What the creates arrived with, when it does not prove the two apart.
    pub fn callers_apart(
        &self,
        names: (&str, &str),
        marks: (usize, usize),
    ) -> Result<String, String> {
        let all = self.all();
        let first = all.get(..marks.0).unwrap_or_default();
        let second = all.get(marks.0..marks.1).unwrap_or_default();
        let arrived = |requests: &[UpstreamRequest], who: &str| -> Result<String, String> {
            let tokens: std::collections::BTreeSet<Option<Result<String, ()>>> = requests
                .iter()
                .filter(|r| r.is_create())
                .map(|r| self.token_of(r))
                .collect();
            match Vec::from_iter(tokens).as_slice() {
                [] => Err(format!("no create sent as {who} reached the API")),
                [Some(Ok(name))] => Ok(name.clone()),
                [None] => Err(format!("{who}'s creates reached the API with no token")),
                [Some(Err(()))] => Err(format!(
                    "{who}'s creates reached the API with a token upstream.tokens does not name"
                )),
                _ => Err(format!(
                    "{who}'s creates reached the API with several tokens"
                )),
            }
        };
        let (a, b) = names;
        let (x, y) = (arrived(first, a)?, arrived(second, b)?);
        if x == y {
            return Err(format!(
                "the creates sent as {a} and as {b} both reached the API with {x}'s token: \
                 the wrapper passed them on as one caller"
            ));
        }
        Ok(format!(
            "{a}'s creates reached the API (which the lab serves) with {x}'s token of \
             upstream.tokens, and {b}'s with {y}'s: the API takes them for two callers"
        ))
    }

    /// The tickets in the API's store, asked directly (not through the recorder).
    ///
    /// # Errors
    /// The reason, when the API does not answer.
    pub async fn count(&self) -> Result<i64, String> {
        let address = format!("127.0.0.1:{}", self.port);
        let mut sender = blocking::connect(&address)
            .await
            .map_err(|err| format!("the API the lab serves: {err}"))?;
        let request = hyper::Request::get("/admin/tickets")
            .header("host", &address)
            .header(crate::http::wire::ADMIN_TOKEN, &self.admin_token)
            .body(Full::new(Bytes::new()))
            .map_err(|err| err.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|err| format!("the API the lab serves: {err}"))?;
        let answer = blocking::read_whole(response, 16 * 1024 * 1024)
            .await
            .map_err(|err| format!("the API the lab serves: {err}"))?;
        let json: serde_json::Value = serde_json::from_slice(&answer.body)
            .map_err(|err| format!("the API's ticket list: {err}"))?;
        json.get("ticket_ids")
            .and_then(serde_json::Value::as_array)
            .map(|ids| ids.len() as i64)
            .ok_or_else(|| format!("the API's ticket list: {json}"))
    }
}

impl Drop for UpstreamApi {
    /// Stops the proxy, then the server, on a thread of their own: the server's shutdown waits
    /// on a runtime of its own, which must not start inside the check's.
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = std::thread::spawn(move || drop(running)).join();
        }
    }
}

/// The field a stop is blamed on when the wrapper asked for a route the lab's API lacks.
pub const ROUTES_FIELD: &str = "upstream.routes";

impl UpstreamApi {
    /// The requests the wrapper sent that the lab's API answered as routes it does not have
    /// (`404` "no endpoint", `405`), which no `[[upstream.routes]]` entry answered: routes of the
    /// wrapper's API the file does not declare. One line each, `#3 GET /v1/me`, each method and path once.
    pub fn undeclared(&self) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        for request in self.all() {
            // The lab's API has no such route: its fallback's 404 ("no endpoint ..."), not a
            // missing ticket's, or its 405 for a method its path lacks.
            let answered_404 = match &request.fate {
                Some(Fate::Answered {
                    status: 404, body, ..
                }) => String::from_utf8_lossy(body).contains("no endpoint "),
                Some(Fate::Answered { status: 405, .. }) => true,
                _ => false,
            };
            let path = request.target.split('?').next().unwrap_or_default();
            let line = format!("{} {path}", request.method);
            if request.create || request.fault.is_some() || !answered_404 {
                continue;
            }
            if !seen.iter().any(|l| l.starts_with(&format!("{line} ("))) {
                seen.push(format!("{line} (its request #{})", request.number));
            }
        }
        seen
    }

    /// `problem`, a reason the check stopped, with the routes the file did not declare, when
    /// the wrapper asked for any: then the file is at fault, and `Some`.
    pub fn blame_routes(&self, problem: &str) -> Option<String> {
        let missing = self.undeclared();
        if missing.is_empty() {
            return None;
        }
        let named = match missing.len() {
            0..=3 => missing.join(", "),
            n => format!("{} and {} more", missing[..3].join(", "), n - 3),
        };
        Some(format!(
            "the wrapper asked the API for {named}, which the API the lab serves does not have \
             (404 or 405): declare what the wrapper's API answers there in [[upstream.routes]] \
             (method, path, status, answer). What the check saw: {problem}"
        ))
    }

    /// A stop, blamed on [`ROUTES_FIELD`] when the wrapper asked for routes the file did not
    /// declare; as it was otherwise.
    pub fn blame(&self, stop: Stop) -> Stop {
        let problem = match &stop {
            Stop::Mismatch { problem, .. } | Stop::Unreachable { problem, .. } => problem,
        };
        match self.blame_routes(problem) {
            Some(problem) => Stop::mismatch(ROUTES_FIELD, problem),
            None => stop,
        }
    }
}

/// `stop`, blamed on [`ROUTES_FIELD`] when `api` saw the wrapper ask for routes the file did not
/// declare (see [`UpstreamApi::blame`]); as it was otherwise, or without an API.
pub fn blame_stop(api: Option<&UpstreamApi>, stop: Stop) -> Stop {
    match api {
        Some(api) => api.blame(stop),
        None => stop,
    }
}

/// When the creates after `mark` lack the key where the file says the API reads it, but carry
/// the agent's `key` elsewhere (another header, a member of the body): the field at fault
/// (`upstream.key_header`, `upstream.key_pointer`) and where the key was. The file names the
/// wrong place, and the wrapper is not at fault.
///
/// Only a place of the kind the file declares is advised (another header for a header, another
/// member for a body key): a key found in the body of an API the file says reads a header (or
/// the reverse) is the wrapper's finding, since advising the other kind of place would have the
/// check grade an API that reads the key where this one does not.
pub fn key_elsewhere(api: &UpstreamApi, mark: usize, key: &str) -> Option<(&'static str, String)> {
    api.creates_since(mark)
        .iter()
        .filter(|c| c.keys(&api.spec).is_empty())
        .find_map(|c| found_elsewhere(c, key))
        .filter(|(field, _)| *field == api.spec.key_field())
}

/// Where a request carries the agent's `key`, when it does: the field that would name that
/// place (`upstream.key_header`, `upstream.key_pointer`) and the place in words.
pub fn found_elsewhere(request: &UpstreamRequest, key: &str) -> Option<(&'static str, String)> {
    let in_header = request
        .headers
        .iter()
        .find(|(_, value)| carries(value, key))
        .map(|(name, _)| ("upstream.key_header", format!("the header {name}")));
    in_header.or_else(|| {
        let body: Value = serde_json::from_str(&request.body).ok()?;
        pointer_to(&body, key, String::new())
            .map(|pointer| ("upstream.key_pointer", format!("the body's {pointer}")))
    })
}

/// The JSON pointer of a string in `value` that carries `key`.
fn pointer_to(value: &Value, key: &str, at: String) -> Option<String> {
    let escape = |name: &str| name.replace('~', "~0").replace('/', "~1");
    match value {
        Value::String(text) if carries(text, key) => Some(at),
        Value::Object(map) => map
            .iter()
            .find_map(|(name, v)| pointer_to(v, key, format!("{at}/{}", escape(name)))),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| pointer_to(v, key, format!("{at}/{i}"))),
        _ => None,
    }
}

/// The key as the agent writes it: the API's header form.
pub fn written_key(form: UpstreamKeyForm, uuid: &str) -> String {
    match form {
        UpstreamKeyForm::SfString => format!("\"{uuid}\""),
        UpstreamKeyForm::Token => format!("k-{uuid}"),
        UpstreamKeyForm::Plain => uuid.to_owned(),
    }
}

/// Whether a header value carries the agent's key: the same text, or the same once the
/// wrapper's own sf-string quoting is taken off (or put on).
pub fn carries(value: &str, key: &str) -> bool {
    let bare = |s: &str| {
        s.strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .map(str::to_owned)
            .unwrap_or_else(|| s.to_owned())
    };
    value == key || bare(value) == bare(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::target::{UpstreamFile, upstream};

    fn route(method: &str, path: &str, answer: Option<Value>) -> DeclaredRoute {
        DeclaredRoute {
            method: method.to_owned(),
            path: path.to_owned(),
            status: 200,
            answer,
        }
    }

    #[test]
    fn a_declared_route_matches_its_method_and_each_segment_and_captures_the_named_ones() {
        let read = route("GET", "/v1/messages/{id}", None);
        assert_eq!(
            read.matches("GET", "/v1/messages/msg_7?expand=1"),
            Some(vec![("id".to_owned(), "msg_7".to_owned())])
        );
        assert_eq!(
            read.matches("get", "/v1/messages/7"),
            Some(vec![("id".to_owned(), "7".to_owned())])
        );
        assert_eq!(read.matches("POST", "/v1/messages/7"), None);
        assert_eq!(read.matches("GET", "/v1/messages"), None);
        assert_eq!(read.matches("GET", "/v1/messages/"), None);
        assert_eq!(read.matches("GET", "/v1/messages/7/events"), None);
        assert_eq!(read.matches("GET", "/v2/messages/7"), None);
        assert_eq!(
            route("GET", "/v1/me", None).matches("GET", "/v1/me"),
            Some(Vec::new())
        );
    }

    #[test]
    fn a_key_in_the_body_is_read_at_its_pointer_and_left_out_of_the_payload() {
        let file: UpstreamFile = toml::from_str(
            r#"
            tokens = { a = "t" }
            key_pointer = "/meta/idempotency~1key"
            key_form = "plain"
            create = { path = "/tickets" }
            "#,
        )
        .unwrap();
        let spec = upstream(file).unwrap();
        let request = UpstreamRequest {
            number: 1,
            arrived: Instant::now(),
            took: None,
            method: "POST".to_owned(),
            target: "/tickets".to_owned(),
            headers: vec![("idempotency-key".to_owned(), "\"elsewhere\"".to_owned())],
            body: r#"{"title":"t","meta":{"idempotency/key":"k1","n":1}}"#.to_owned(),
            create: true,
            fault: None,
            fate: None,
        };
        assert_eq!(request.keys(&spec), ["k1"]);
        assert_eq!(
            request.payload(&spec),
            Some(serde_json::json!({"title": "t", "meta": {"n": 1}}))
        );
        assert_eq!(spec.key_place(), "the body's /meta/idempotency~1key");
        let body: Value = serde_json::from_str(&request.body).unwrap();
        assert_eq!(
            pointer_to(&body, "\"k1\"", String::new()).as_deref(),
            Some("/meta/idempotency~1key")
        );
        assert_eq!(pointer_to(&body, "k2", String::new()), None);
    }

    #[test]
    fn a_declared_answer_names_the_captured_segments_and_says_json() {
        let read = route(
            "GET",
            "/v1/{kind}/{id}",
            Some(serde_json::json!({"id": "{{id}}", "kind": ["{{kind}}"], "n": 1})),
        );
        let captured = read.matches("GET", "/v1/messages/msg_7").unwrap();
        let Decision::Answer {
            status,
            headers,
            body,
        } = read.answer(&captured)
        else {
            panic!("a declared route is answered by the lab");
        };
        assert_eq!(status, 200);
        assert_eq!(
            headers,
            vec![("content-type".to_owned(), "application/json".to_owned())]
        );
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"id": "msg_7", "kind": ["messages"], "n": 1})
        );
        let Decision::Answer { headers, body, .. } = route("DELETE", "/v1/me", None).answer(&[])
        else {
            panic!("a declared route is answered by the lab");
        };
        assert!(headers.is_empty() && body.is_empty());
    }
}
