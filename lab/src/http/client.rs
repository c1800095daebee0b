//! The HTTP client adapter: [`TicketTool`] over real connections to `lab serve` (or any service
//! that keeps the same contract), so the seven scenarios run against it unchanged.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, Request, Uri};
use serde_json::Value;

use super::blocking::{Answer, BlockingClient, NoAnswer};
use super::sf;
use super::wire::{self, problem};
use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::tool::{CreateRequest, Fault, Outcome, OwnScope, TicketId, TicketTool};

/// How many times a create is sent again after a 409 (key in flight) or a 503 (the service at its
/// connection limit) before the adapter gives up and reports the outcome unknown.
pub const IN_FLIGHT_RETRIES: u32 = 10;

/// What one create request got back.
enum Sent {
    /// An answer the contract defines: an outcome or an error to report.
    Answer(Result<Outcome>),
    /// 409: the key is being processed by another request, or 503: the service shed the
    /// connection before reading the request; wait (as long as `Retry-After` asks, within
    /// [`super::blocking::MAX_RETRY_AFTER`]) and send it again.
    InFlight(Duration),
}

/// Where the adapter finds the service and who it is there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpTarget {
    /// The base URL, such as `http://127.0.0.1:8080` (loopback only).
    pub url: String,
    /// The caller's bearer token; the service derives the caller's scope from it.
    pub token: String,
    /// The admin token, needed for the inspection hooks (counts, forget, reset).
    pub admin_token: Option<String>,
}

impl HttpTarget {
    /// Checks that the URL is `http://` on a loopback host and trims a trailing `/`.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] for another scheme or host, or a URL `http::Uri` cannot read,
    /// naming the URL.
    pub fn new(url: &str, token: &str, admin_token: Option<&str>) -> Result<HttpTarget> {
        let invalid = |problem: &str| Error::InputInvalid {
            subject: "--url".to_owned(),
            problem: format!("{url:?}: {problem}"),
        };
        let uri: Uri = url
            .parse()
            .map_err(|_| invalid("expected http://127.0.0.1:PORT"))?;
        if uri.scheme_str() != Some("http") {
            return Err(invalid("expected http://127.0.0.1:PORT"));
        }
        if !matches!(uri.host(), Some("127.0.0.1" | "localhost" | "[::1]")) {
            return Err(invalid("only loopback addresses (127.0.0.1, localhost)"));
        }
        Ok(HttpTarget {
            url: url.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            admin_token: admin_token.map(str::to_owned),
        })
    }

    /// `host:port` of the URL, for the connection and the `Host` header.
    fn address(&self) -> String {
        let uri: Option<Uri> = self.url.parse().ok();
        let authority = uri.as_ref().and_then(Uri::authority);
        match authority {
            Some(authority) => format!(
                "{}:{}",
                authority.host(),
                authority.port_u16().unwrap_or(80)
            ),
            // `new` parsed it; a target built by hand with a broken URL fails to connect.
            None => self.url.clone(),
        }
    }

    /// The path before the contract's own paths (`""` or `/prefix`).
    fn base_path(&self) -> String {
        let uri: Option<Uri> = self.url.parse().ok();
        uri.map(|uri| uri.path().trim_end_matches('/').to_owned())
            .unwrap_or_default()
    }
}

/// A [`TicketTool`] that calls a ticket service over HTTP. Each value keeps its own connection
/// pool; [`TicketTool::connect`] makes another, as a second caller would have.
///
/// The service takes the caller from the bearer token, and its contract has one operation type,
/// so this adapter speaks for one scope: the first a request names. A request in another scope
/// is refused with [`Error::Unsupported`], never sent under the wrong caller.
pub struct HttpTool {
    target: HttpTarget,
    /// The connection, or the reason there is none (the client's runtime could not start).
    client: std::result::Result<BlockingClient, String>,
    /// The scope this adapter (and every connection made from it) speaks for.
    scope: Arc<OwnScope>,
}

impl HttpTool {
    /// An adapter for `target`. Nothing is sent until the first call.
    pub fn new(target: HttpTarget) -> HttpTool {
        let client = BlockingClient::new(&target.address(), Duration::from_secs(30))
            .map_err(|err| err.to_string());
        HttpTool {
            target,
            client,
            scope: Arc::default(),
        }
    }

    /// Refuses a scope other than the one this adapter speaks for.
    fn speaks_for(&self, scope: &Scope) -> Result<()> {
        self.scope.check(
            scope,
            "the service takes the caller from the bearer token, and its contract has one \
             operation type",
        )
    }

    /// The target this adapter calls.
    pub fn target(&self) -> &HttpTarget {
        &self.target
    }

    /// Empties the service's store (`POST /admin/reset`), so ticket numbers start again at 1.
    ///
    /// # Errors
    /// [`Error::Http`] if the service refuses or cannot be reached.
    pub fn reset(&self) -> Result<()> {
        self.admin("POST", "/admin/reset", None).map(drop)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.target.url)
    }

    /// Sends `method path` with the caller's token, `headers` and `body`, and reads the answer.
    fn call(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: String,
        keep: bool,
    ) -> std::result::Result<Answer, NoAnswer> {
        let client = self
            .client
            .as_ref()
            .map_err(|why| NoAnswer::Unsent(why.clone()))?;
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.target.base_path()))
            .header("host", client.address())
            .header("authorization", format!("Bearer {}", self.target.token));
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        if !keep {
            request = request.header("connection", "close");
        }
        let request = request
            .body(body.into())
            .map_err(|err| NoAnswer::Unsent(format!("cannot build the request: {err}")))?;
        client.send(request, keep)
    }

    // ANCHOR: http_client_create
    fn send_create(&self, request: CreateRequest<'_>) -> Sent {
        let path = if request.key.is_some() {
            "/tickets"
        } else {
            "/unkeyed-tickets"
        };
        let mut headers = vec![("content-type", "application/json".to_owned())];
        if let Some(key) = request.key {
            headers.push((wire::IDEMPOTENCY_KEY, sf::serialize_key(key)));
        }
        if let Some(fault) = wire::fault_header_value(request.fault) {
            headers.push((wire::FAULT_HEADER, fault));
        }
        // The server closes the connection instead of answering a lost reply; never reuse it.
        let keep = request.fault != Fault::LoseReply;
        let body = request.payload.canonical().to_owned();
        let key = request.key.map(ToString::to_string);
        let answer = match self.call(Method::POST, path, &headers, body, keep) {
            Ok(answer) => answer,
            // Shed before the request went out (a 503 written on accepting the connection):
            // nothing happened yet; wait as for a 503.
            Err(NoAnswer::NotSent(_)) => {
                return Sent::InFlight(Duration::from_secs(wire::RETRY_AFTER_SECONDS));
            }
            // The request may have reached the service and committed: only a retry with the same
            // key can tell.
            Err(why) => {
                return Sent::Answer(Err(Error::OutcomeUnknown {
                    key,
                    reason: format!("no response from {}: {why}", self.url(path)),
                }));
            }
        };
        self.classify(path, key, &answer)
    }

    /// What the answer to a create means, by its status and problem type.
    fn classify(&self, path: &str, key: Option<String>, answer: &Answer) -> Sent {
        let status = answer.status;
        let replayed = answer.header(wire::IDEMPOTENT_REPLAYED) == Some("true");
        let body = String::from_utf8_lossy(&answer.body);
        let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        // Errors are matched on their problem type, never on their text.
        let kind = parsed["type"].as_str().and_then(problem::from_uri);
        let wait = || {
            answer
                .retry_after()
                .unwrap_or(Duration::from_secs(wire::RETRY_AFTER_SECONDS))
        };
        Sent::Answer(match (status, kind) {
            (409, Some(problem::IN_FLIGHT)) => return Sent::InFlight(wait()),
            // Shed at the connection limit before the request was read: nothing happened yet.
            (503, Some(problem::OVERLOADED)) => return Sent::InFlight(wait()),
            // The request timed out on the server; its create may still have committed.
            (408, Some(problem::REQUEST_TIMEOUT)) => Err(Error::OutcomeUnknown {
                key,
                reason: format!("{} answered 408: the request timed out", self.url(path)),
            }),
            (201, _) => match parsed["ticket_id"].as_i64() {
                Some(id) if replayed => Ok(Outcome::Replayed(id.into())),
                Some(id) => Ok(Outcome::Created(id.into())),
                None => Err(self.unexpected("POST", path, status, &body)),
            },
            (422, Some(problem::PAYLOAD_CONFLICT)) => Err(Error::PayloadConflict {
                key: key.unwrap_or_default(),
            }),
            (410, Some(problem::KEY_EXPIRED)) => Err(Error::KeyExpired {
                key: key.unwrap_or_default(),
            }),
            (500, Some(problem::INJECTED_FAILURE)) => Err(Error::InjectedFailure),
            _ => Err(self.unexpected("POST", path, status, &body)),
        })
    }
    // ANCHOR_END: http_client_create

    fn unexpected(&self, method: &'static str, path: &str, status: u16, body: &str) -> Error {
        Error::Http {
            method,
            url: self.url(path),
            status: Some(status),
            problem: format!("status {status}, body {body:?}"),
        }
    }

    fn admin(&self, method: &'static str, path: &str, key: Option<&OperationKey>) -> Result<Value> {
        let Some(admin_token) = &self.target.admin_token else {
            return Err(Error::Http {
                method,
                url: self.url(path),
                status: None,
                problem: "the inspection hooks need the admin token (--admin-token)".to_owned(),
            });
        };
        let mut headers = vec![(wire::ADMIN_TOKEN, admin_token.clone())];
        if let Some(key) = key {
            headers.push((wire::IDEMPOTENCY_KEY, sf::serialize_key(key)));
        }
        let verb = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
        let answer = self
            .call(verb, path, &headers, String::new(), true)
            .map_err(|why| Error::Http {
                method,
                url: self.url(path),
                status: None,
                problem: why.to_string(),
            })?;
        let body = String::from_utf8_lossy(&answer.body);
        if !(200..300).contains(&answer.status) {
            return Err(self.unexpected(method, path, answer.status, &body));
        }
        serde_json::from_str(&body).map_err(|_| self.unexpected(method, path, 200, &body))
    }
}

impl TicketTool for HttpTool {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        self.speaks_for(request.scope)?;
        // Bounded: a key still in flight after this many waits is reported unknown.
        for _ in 0..=IN_FLIGHT_RETRIES {
            match self.send_create(request) {
                Sent::Answer(answer) => return answer,
                Sent::InFlight(wait) => std::thread::sleep(wait),
            }
        }
        Err(Error::OutcomeUnknown {
            key: request.key.map(ToString::to_string),
            reason: format!(
                "the key was still in flight, or the service at its connection limit, after \
                 {IN_FLIGHT_RETRIES} waits (409 or 503)"
            ),
        })
    }

    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        let body = self.admin("GET", "/admin/tickets", None)?;
        serde_json::from_value(body["ticket_ids"].clone())
            .map_err(|_| self.unexpected("GET", "/admin/tickets", 200, &body.to_string()))
    }

    fn count_records(&self) -> Result<u64> {
        let body = self.admin("GET", "/admin/records", None)?;
        body["records"]
            .as_u64()
            .ok_or_else(|| self.unexpected("GET", "/admin/records", 200, &body.to_string()))
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        self.speaks_for(scope)?;
        // The scope on the server is the token's caller; the key travels in its usual header.
        let body = self.admin("DELETE", "/admin/records", Some(key))?;
        body["forgotten"]
            .as_bool()
            .ok_or_else(|| self.unexpected("DELETE", "/admin/records", 200, &body.to_string()))
    }

    fn connect(&self) -> Result<HttpTool> {
        Ok(HttpTool {
            scope: Arc::clone(&self.scope),
            ..HttpTool::new(self.target.clone())
        })
    }
}
