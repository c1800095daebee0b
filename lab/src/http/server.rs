//! `lab serve`: the ticket store behind a small synchronous HTTP service on loopback.
//!
//! A fixed pool of worker threads takes requests from one `tiny_http` listener; each worker owns
//! one connection to the SQLite store. The contract is in [`super::contract`] and, for machines,
//! in the OpenAPI description served at `GET /openapi.json`.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::json;
use tiny_http::{Header, Method, Request, Response};

use super::contract::{self, code};
use super::retention::{self, Clock, Pruned, Retention, SystemClock};
use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::sqlite::{SqliteStore, response_text};
use crate::tool::{CreateRequest, Fault, Outcome, TicketId, TicketTool};

/// The machine-readable contract, served at `GET /openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

/// One caller the server accepts: its name (the scope of its keys) and its bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallerToken {
    /// The caller's name; keys are looked up only within it.
    pub caller: String,
    /// The bearer token that authenticates the caller.
    pub token: String,
}

impl FromStr for CallerToken {
    type Err = Error;

    /// Reads `NAME=TOKEN`, as `lab serve --caller` takes it.
    fn from_str(text: &str) -> Result<CallerToken> {
        let invalid = |problem: &str| Error::InputInvalid {
            path: PathBuf::from("--caller"),
            problem: format!("{text:?}: {problem}"),
        };
        let (caller, token) = text
            .split_once('=')
            .ok_or_else(|| invalid("expected NAME=TOKEN"))?;
        // Validate the name by the same rules as every scope's caller.
        Scope::new(caller, contract::CREATE_TICKET)?;
        if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid("the token must be non-empty, without spaces"));
        }
        Ok(CallerToken {
            caller: caller.to_owned(),
            token: token.to_owned(),
        })
    }
}

/// How to start a [`TicketServer`].
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// The port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The SQLite file; `None` uses a temporary store, removed when the [`TicketServer`] is
    /// dropped (not when the process is killed).
    pub database: Option<PathBuf>,
    /// The callers and their tokens.
    pub callers: Vec<CallerToken>,
    /// The token of the `/admin/...` endpoints; `None` turns them off (404).
    pub admin_token: Option<String>,
    /// Honour the test-only `Lab-Fault` header and serve `POST /unkeyed-tickets`.
    pub faults: bool,
    /// Worker threads, each with its own store connection (at least 1).
    pub workers: usize,
    /// Prune replay records after this window, leaving tombstones; `None` keeps them forever.
    pub retention: Option<Retention>,
    /// Where retention reads the time; `None` is the system clock.
    pub clock: Option<Arc<dyn Clock>>,
}

/// A running `lab serve`.
pub struct TicketServer {
    http: Arc<tiny_http::Server>,
    stopping: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    port: u16,
    service: Arc<Service>,
}

struct Service {
    callers: HashMap<String, Scope>,
    admin_token: Option<String>,
    faults: bool,
    /// (caller, key) of the keyed creates being processed now.
    in_flight: Mutex<HashSet<(String, String)>>,
    retention: Option<Retention>,
    clock: Arc<dyn Clock>,
    /// The connection pruning passes write on.
    pruner: Mutex<Option<SqliteStore>>,
}

impl TicketServer {
    /// Opens the store, binds 127.0.0.1 and starts the workers.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] without callers or with a token given twice; [`Error::Store`] or
    /// [`Error::TemporaryFolder`] if the store cannot be opened; [`Error::Listen`] if the port
    /// cannot be bound; [`Error::Io`] if a worker thread cannot start.
    pub fn start(options: ServeOptions) -> Result<TicketServer> {
        let service = Service::new(&options)?;
        let store = match &options.database {
            Some(path) => SqliteStore::open(path)?,
            None => SqliteStore::temporary()?,
        };
        store
            .connection()
            .execute_batch(retention::RETENTION_SCHEMA)?;
        *service.pruner_store() = Some(store.connect()?);
        let service = Arc::new(service);
        let address = format!("127.0.0.1:{}", options.port);
        let http = Arc::new(
            tiny_http::Server::http(&address)
                .map_err(|source| Error::Listen { address, source })?,
        );
        let port = http.server_addr().to_ip().map_or(0, |addr| addr.port());
        let stopping = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for number in 0..options.workers.max(1) {
            let connection = store.connect()?;
            let (http, service, stopping) = (http.clone(), service.clone(), stopping.clone());
            let worker = std::thread::Builder::new()
                .name(format!("lab-serve-{number}"))
                .spawn(move || serve(&http, &service, &connection, &stopping))
                .map_err(|source| Error::Io {
                    action: format!("starting server worker {number}"),
                    source,
                })?;
            workers.push(worker);
        }
        if let Some(retention) = options.retention {
            let (service, stopping) = (service.clone(), stopping.clone());
            let pruner = std::thread::Builder::new()
                .name("lab-serve-pruner".to_owned())
                .spawn(move || prune_periodically(&service, retention, &stopping))
                .map_err(|source| Error::Io {
                    action: "starting the pruning thread".to_owned(),
                    source,
                })?;
            workers.push(pruner);
        }
        // The workers hold their own connections, and through them the temporary folder.
        drop(store);
        Ok(TicketServer {
            http,
            stopping,
            workers,
            port,
            service,
        })
    }

    /// Runs one pruning pass now, at the clock's time (the periodic pass does the same).
    ///
    /// # Errors
    /// [`Error::InputInvalid`] when the server was started without retention;
    /// [`Error::Store`] on a database error.
    pub fn prune(&self) -> Result<Pruned> {
        self.service.prune()
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Serves until the process is stopped.
    pub fn wait(mut self) {
        for worker in self.workers.drain(..) {
            // A worker ends only when the server stops; a panic in one is already printed.
            let _ = worker.join();
        }
    }
}

impl Drop for TicketServer {
    /// Stops the workers after the requests they are serving.
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // One unblock per thread: the pruner does not need one, and a spare does no harm.
        for _ in &self.workers {
            self.http.unblock();
        }
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

/// Prunes every half window (at most every minute), checking for the stop once a second.
fn prune_periodically(service: &Service, retention: Retention, stopping: &AtomicBool) {
    let every = (retention.records / 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut waited = Duration::ZERO;
    while !stopping.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_secs(1));
        waited += Duration::from_secs(1);
        if waited >= every {
            waited = Duration::ZERO;
            if let Err(err) = service.prune() {
                eprintln!("lab serve: pruning failed: {err}");
            }
        }
    }
}

fn serve(http: &tiny_http::Server, service: &Service, store: &SqliteStore, stopping: &AtomicBool) {
    while !stopping.load(Ordering::SeqCst) {
        // An error is an unblock (we are stopping) or a failed accept (try the next one).
        if let Ok(request) = http.recv() {
            service.handle(store, request);
        }
    }
}

/// What a request's claim on its key found.
enum Claim<'s> {
    Claimed(InFlight<'s>),
    InFlight,
    Expired,
}

/// What the server does with a request.
enum Answer {
    Respond(Response<std::io::Cursor<Vec<u8>>>),
    /// Close the connection without a byte of response: the test-only lost reply.
    DropConnection,
}

fn json_response(status: u16, body: String) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", "application/json"))
}

fn error(status: u16, code: &str, message: impl std::fmt::Display) -> Answer {
    let body = json!({"error": code, "message": message.to_string()});
    let response = json_response(status, body.to_string());
    if status == 401 {
        // RFC 9110 asks every 401 to name the authentication scheme it wants.
        return Answer::Respond(response.with_header(header("WWW-Authenticate", "Bearer")));
    }
    Answer::Respond(response)
}

fn header(name: &str, value: &str) -> Header {
    // Both are ASCII literals or decimal numbers built here: valid header text.
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("an ASCII header")
}

fn header_value<'r>(request: &'r Request, name: &'static str) -> Option<&'r str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

/// Removes its (caller, key) from the in-flight set when the create is done, however it ends.
struct InFlight<'s> {
    service: &'s Service,
    entry: (String, String),
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.service.in_flight().remove(&self.entry);
    }
}

impl Service {
    fn new(options: &ServeOptions) -> Result<Service> {
        let invalid = |problem: String| Error::InputInvalid {
            path: PathBuf::from("--caller"),
            problem,
        };
        if options.callers.is_empty() {
            return Err(invalid(
                "at least one caller is needed, e.g. --caller support-agent=secret-token".into(),
            ));
        }
        let mut callers = HashMap::new();
        for CallerToken { caller, token } in &options.callers {
            let scope = Scope::new(caller.as_str(), contract::CREATE_TICKET)?;
            if callers.insert(token.clone(), scope).is_some() {
                return Err(invalid(format!("the token of {caller:?} is given twice")));
            }
        }
        Ok(Service {
            callers,
            admin_token: options.admin_token.clone(),
            faults: options.faults,
            in_flight: Mutex::new(HashSet::new()),
            retention: options.retention,
            clock: options
                .clock
                .clone()
                .unwrap_or_else(|| Arc::new(SystemClock)),
            pruner: Mutex::new(None),
        })
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String)>> {
        // The set holds plain strings, consistent after any panic.
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn handle(&self, store: &SqliteStore, mut request: Request) {
        match self.route(store, &mut request) {
            Answer::Respond(response) => {
                // A caller that went away cannot be told anything.
                let _ = request.respond(response);
            }
            Answer::DropConnection => drop(request.into_writer()),
        }
    }

    fn route(&self, store: &SqliteStore, request: &mut Request) -> Answer {
        let path = request.url().split('?').next().unwrap_or("").to_owned();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let method = request.method().clone();
        match (&method, segments.as_slice()) {
            (Method::Get, ["openapi.json"]) => {
                Answer::Respond(json_response(200, OPENAPI.to_owned()))
            }
            (_, ["admin", rest @ ..]) => self.admin(store, request, &method, rest),
            (Method::Post, ["tickets"]) => self.with_caller(request, |scope, request| {
                self.create(store, request, scope, true)
            }),
            (Method::Post, ["unkeyed-tickets"]) if self.faults => self
                .with_caller(request, |scope, request| {
                    self.create(store, request, scope, false)
                }),
            (Method::Get, ["tickets"]) => {
                self.with_caller(request, |scope, _| match store.tickets_of(scope.caller()) {
                    Ok(tickets) => {
                        let list: Vec<_> = tickets.into_iter().map(ticket_json).collect();
                        let body = json!({ "tickets": list });
                        Answer::Respond(json_response(200, body.to_string()))
                    }
                    Err(err) => error(500, code::STORE_FAILURE, err),
                })
            }
            (Method::Get, ["tickets", id]) => self.with_caller(request, |scope, _| {
                // This service's tickets are SQLite rowids: anything else names no ticket.
                let Ok(id) = id.parse::<i64>().map(TicketId::from) else {
                    return error(404, code::NOT_FOUND, format!("no ticket {id:?}"));
                };
                match store.ticket_of(scope.caller(), &id) {
                    Ok(Some(ticket)) => {
                        Answer::Respond(json_response(200, ticket_json(ticket).to_string()))
                    }
                    Ok(None) => error(404, code::NOT_FOUND, format!("no ticket {id} of yours")),
                    Err(err) => error(500, code::STORE_FAILURE, err),
                }
            }),
            _ => error(404, code::NOT_FOUND, format!("no endpoint {method} {path}")),
        }
    }

    /// Runs `then` for the caller the bearer token names, or answers 401.
    fn with_caller(
        &self,
        request: &mut Request,
        then: impl FnOnce(&Scope, &mut Request) -> Answer,
    ) -> Answer {
        let token = header_value(request, "Authorization")
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim);
        match token.and_then(|token| self.callers.get(token)) {
            Some(scope) => then(&scope.clone(), request),
            None => error(
                401,
                code::UNAUTHORIZED,
                "send Authorization: Bearer TOKEN with a token this server knows",
            ),
        }
    }

    // ANCHOR: http_create
    fn create(
        &self,
        store: &SqliteStore,
        request: &mut Request,
        scope: &Scope,
        keyed: bool,
    ) -> Answer {
        let key = match (keyed, header_value(request, contract::IDEMPOTENCY_KEY)) {
            (false, _) => None,
            (true, None) => {
                let message = format!("send an {} header", contract::IDEMPOTENCY_KEY);
                return error(400, code::MISSING_KEY, message);
            }
            (true, Some(text)) => match OperationKey::try_from(text) {
                Ok(key) => Some(key),
                Err(err) => return error(400, code::INVALID_REQUEST, err),
            },
        };
        let fault = match self.fault(request) {
            Ok(fault) => fault,
            Err(answer) => return answer,
        };
        if fault == Fault::LoseReply && !closes_connection(request) {
            // tiny_http keeps a connection open for the next request; only a caller that asked
            // for the connection to be closed sees it close instead of a response.
            let message = "lose-reply needs the request header Connection: close";
            return error(400, code::INVALID_REQUEST, message);
        }
        let payload = match read_payload(request) {
            Ok(payload) => payload,
            Err(answer) => return answer,
        };
        // A second request for a key being processed is told to come back, not queued; a key
        // whose record was pruned is told it expired.
        let _in_flight = match &key {
            Some(key) => match self.claim(store, scope, key) {
                Ok(Claim::Claimed(claim)) => Some(claim),
                Ok(Claim::InFlight) => return in_flight(key),
                Ok(Claim::Expired) => return expired(key),
                Err(err) => return error(500, code::STORE_FAILURE, err),
            },
            None => None,
        };
        let create = CreateRequest {
            scope,
            key: key.as_ref(),
            payload: &payload,
            fault,
        };
        match store.create(create) {
            Ok(Outcome::Created(id)) => {
                if let (Some(key), Some(_)) = (&key, self.retention) {
                    let noted =
                        retention::note_record(store.connection(), scope, key, self.clock.now());
                    if let Err(err) = noted {
                        // The record stands without a time; the next pass dates it (kept longer).
                        eprintln!("lab serve: cannot note when {key} was created: {err}");
                    }
                }
                Answer::Respond(json_response(201, created_text(&id)))
            }
            Ok(Outcome::Replayed(id)) => {
                // The record was read a moment ago and records never change: the saved text is
                // there. Fall back to the same text built from the id all the same.
                let saved = key
                    .as_ref()
                    .and_then(|key| store.saved_response(scope, key).ok().flatten())
                    .unwrap_or_else(|| created_text(&id));
                Answer::Respond(
                    json_response(201, saved)
                        .with_header(header(contract::IDEMPOTENT_REPLAYED, "true")),
                )
            }
            Err(Error::OutcomeUnknown { .. }) if fault == Fault::LoseReply => {
                Answer::DropConnection
            }
            Err(err @ Error::PayloadConflict { .. }) => error(422, code::KEY_REUSED, err),
            Err(err @ Error::InjectedFailure) => error(500, code::INJECTED_FAILURE, err),
            Err(err) => error(500, code::STORE_FAILURE, err),
        }
    }
    // ANCHOR_END: http_create

    /// The fault the test-only header asks for; 400 when faults are off or the value is unknown.
    fn fault(&self, request: &Request) -> Result<Fault, Answer> {
        let Some(value) = header_value(request, contract::FAULT_HEADER) else {
            return Ok(Fault::None);
        };
        if !self.faults {
            let message = format!(
                "{} is honoured only by a server started with --faults",
                contract::FAULT_HEADER
            );
            return Err(error(400, code::INVALID_REQUEST, message));
        }
        contract::parse_fault_header(value).ok_or_else(|| {
            let message = format!("unknown {} value {value:?}", contract::FAULT_HEADER);
            error(400, code::INVALID_REQUEST, message)
        })
    }

    /// Claims the key for this request. The tombstone is read under the in-flight lock, which a
    /// pruning pass also holds, so a key cannot expire between the check and the create.
    fn claim(&self, store: &SqliteStore, scope: &Scope, key: &OperationKey) -> Result<Claim<'_>> {
        let entry = (scope.caller().to_owned(), key.as_str().to_owned());
        let mut in_flight = self.in_flight();
        if in_flight.contains(&entry) {
            return Ok(Claim::InFlight);
        }
        if self.retention.is_some() && retention::is_expired(store.connection(), scope, key)? {
            return Ok(Claim::Expired);
        }
        in_flight.insert(entry.clone());
        Ok(Claim::Claimed(InFlight {
            service: self,
            entry,
        }))
    }

    fn pruner_store(&self) -> std::sync::MutexGuard<'_, Option<SqliteStore>> {
        // The guarded value is a connection; a panic elsewhere leaves it usable.
        self.pruner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn prune(&self) -> Result<Pruned> {
        let Some(retention) = self.retention else {
            return Err(Error::InputInvalid {
                path: PathBuf::from("--retention-seconds"),
                problem: "the server was started without retention".to_owned(),
            });
        };
        // In-flight lock first, then the connection: the same order as a request's claim.
        let in_flight = self.in_flight();
        let pruner = self.pruner_store();
        let Some(store) = pruner.as_ref() else {
            return Ok(Pruned::default());
        };
        retention::prune(store.connection(), self.clock.now(), retention, &in_flight)
    }

    fn admin(
        &self,
        store: &SqliteStore,
        request: &mut Request,
        method: &Method,
        rest: &[&str],
    ) -> Answer {
        let Some(admin_token) = &self.admin_token else {
            return error(404, code::NOT_FOUND, "the admin endpoints are off");
        };
        if header_value(request, contract::ADMIN_TOKEN) != Some(admin_token.as_str()) {
            let message = format!("send {} with the admin token", contract::ADMIN_TOKEN);
            return error(401, code::UNAUTHORIZED, message);
        }
        let answer = |result: Result<serde_json::Value>| match result {
            Ok(body) => Answer::Respond(json_response(200, body.to_string())),
            Err(err) => error(500, code::STORE_FAILURE, err),
        };
        match (method, rest) {
            (Method::Get, ["tickets"]) => {
                answer(store.ticket_ids().map(|ids| json!({"ticket_ids": ids})))
            }
            (Method::Get, ["records"]) => {
                answer(store.count_records().map(|n| json!({"records": n})))
            }
            (Method::Post, ["reset"]) => answer(store.clear().map(|()| json!({"cleared": true}))),
            (Method::Post, ["prune"]) => {
                answer(self.prune().map(
                    |pruned| json!({"records": pruned.records, "tombstones": pruned.tombstones}),
                ))
            }
            (Method::Delete, ["records"]) => self.with_caller(request, |scope, request| {
                let key = header_value(request, contract::IDEMPOTENCY_KEY).unwrap_or("");
                match OperationKey::try_from(key) {
                    Ok(key) => answer(
                        store
                            .forget_record(scope, &key)
                            .map(|forgotten| json!({"forgotten": forgotten})),
                    ),
                    Err(err) => error(400, code::INVALID_REQUEST, err),
                }
            }),
            _ => error(404, code::NOT_FOUND, "no such admin endpoint"),
        }
    }
}

fn in_flight(key: &OperationKey) -> Answer {
    let message = format!(
        "a request with key {:?} is being processed; retry after {} s with the same key",
        key.as_str(),
        contract::RETRY_AFTER_SECONDS
    );
    match error(409, code::IN_FLIGHT, message) {
        Answer::Respond(response) => Answer::Respond(response.with_header(header(
            "Retry-After",
            &contract::RETRY_AFTER_SECONDS.to_string(),
        ))),
        other => other,
    }
}

fn closes_connection(request: &Request) -> bool {
    header_value(request, "Connection").is_some_and(|value| value.eq_ignore_ascii_case("close"))
}

fn expired(key: &OperationKey) -> Answer {
    let message = format!(
        "the record of key {:?} was pruned after the retention window; this service cannot say \
         whether it took effect and will not create again under it: review before any new key",
        key.as_str()
    );
    error(410, code::KEY_EXPIRED, message)
}

fn read_payload(request: &mut Request) -> Result<Payload, Answer> {
    let too_large = || {
        let message = format!("the body is over {} bytes", contract::MAX_BODY_BYTES);
        error(413, code::TOO_LARGE, message)
    };
    if request
        .body_length()
        .is_some_and(|length| length as u64 > contract::MAX_BODY_BYTES)
    {
        return Err(too_large());
    }
    let mut text = String::new();
    request
        .as_reader()
        .take(contract::MAX_BODY_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|err| {
            error(
                400,
                code::INVALID_REQUEST,
                format!("unreadable body: {err}"),
            )
        })?;
    if text.len() as u64 > contract::MAX_BODY_BYTES {
        return Err(too_large());
    }
    Payload::from_json_text(&text).map_err(|err| error(400, code::INVALID_REQUEST, err))
}

fn ticket_json(ticket: crate::sqlite::StoredTicket) -> serde_json::Value {
    // The payload was stored as canonical JSON by this crate, so it parses; show it as text if not.
    let payload =
        serde_json::from_str(&ticket.payload).unwrap_or(serde_json::Value::String(ticket.payload));
    json!({"id": ticket.id, "payload": payload})
}

/// The body of a 201: the saved form for a numeric id, the same shape with a string otherwise.
fn created_text(id: &TicketId) -> String {
    match id.as_i64() {
        Some(n) => response_text(n),
        None => json!({ "ticket_id": id }).to_string(),
    }
}
