//! A remote adapter: the lab's retry contract spoken over HTTP to a service, with the HTTP client
//! left to the adapter's author.
//!
//! [`Remote`] is a [`TicketTool`] for any service that keeps the contract of `lab serve` (the
//! book's chapter "The HTTP contract"): it turns each create into one `POST /tickets` (or
//! `POST /unkeyed-tickets` without a key), with the key in `Idempotency-Key` as a quoted string,
//! the fault in `Lab-Fault`, the payload's canonical JSON as the body; it maps each answer to what
//! the trait's caller expects, waits and sends again while the key is in flight (409) or the
//! service is full (503), a bounded number of times, and reads the four test hooks under
//! `/admin/...`. It knows no HTTP client: a [`Transport`] sends one [`Request`] and returns the
//! [`Answer`], so the crate that uses it picks its own client and the lab's core needs none.
//!
//! The pieces are public too ([`create_request`], [`classify`], [`admin_request`],
//! [`ticket_ids`], [`records`], [`forgotten`]), so an async adapter
//! ([`crate::async_tool`]) speaks the same contract without copying it. For a service whose
//! paths or headers differ, translate in the transport, or write the adapter from these pieces.
//!
//! ```
//! use lab::remote::{Answer, Remote, Request, Transport};
//!
//! /// A stand-in for a service: every create answers 201 with ticket 7, replayed.
//! #[derive(Clone)]
//! struct Replaying;
//!
//! impl Transport for Replaying {
//!     fn send(&self, request: &Request) -> Result<Answer, String> {
//!         assert_eq!((request.method, request.path), ("POST", "/tickets"));
//!         Ok(Answer::new(201, true, r#"{"ticket_id": 7}"#))
//!     }
//! }
//!
//! use lab::{Operation, Outcome, TicketTool};
//! let outcome = Remote::new(Replaying).create(Operation::example().request())?;
//! assert_eq!(outcome, Outcome::Replayed(7.into()));
//! # Ok::<(), lab::Error>(())
//! ```

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::tool::{CreateRequest, Fault, Outcome, OwnScope, Step, TicketId, TicketTool};

/// How many times a create is sent in all while the key is in flight (409) or the service is
/// full (503), before the outcome is reported unknown.
pub const SENDS: u32 = 10;

/// How long to wait before sending a create again after a 409 or a 503.
pub const WAIT: Duration = Duration::from_millis(200);

/// One HTTP request, as the contract shapes it. The transport adds the service's address and
/// the caller's credentials (`Authorization: Bearer ...`, and `Lab-Admin-Token` for `/admin/...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST` or `DELETE`.
    pub method: &'static str,
    /// The path, such as `/tickets`.
    pub path: &'static str,
    /// Headers besides the credentials: `Idempotency-Key`, `Lab-Fault`.
    pub headers: Vec<(&'static str, String)>,
    /// The body: the payload's canonical JSON for a create, empty otherwise.
    pub body: String,
}

/// What the service answered: any status is an answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// Whether `Idempotent-Replayed` was in the answer's headers.
    pub replayed: bool,
    /// The body as JSON (`Null` when it was not JSON).
    pub json: Value,
}

impl Answer {
    /// An answer from its status, whether it said `Idempotent-Replayed`, and its body's text.
    pub fn new(status: u16, replayed: bool, body: &str) -> Answer {
        Answer {
            status,
            replayed,
            json: serde_json::from_str(body).unwrap_or(Value::Null),
        }
    }
}

/// Sends one request to the service. `Ok` for any answer, whatever its status; `Err`, with the
/// reason, when no answer came (the connection failed or closed): the service may still have
/// acted on the request.
pub trait Transport: Clone + Send + 'static {
    /// Sends `request` and waits for its answer.
    ///
    /// # Errors
    /// The reason no answer came.
    fn send(&self, request: &Request) -> std::result::Result<Answer, String>;
}

/// The key as an RFC 8941 string, as the IETF draft writes `Idempotency-Key`.
fn quoted(key: &OperationKey) -> String {
    let mut text = String::from('"');
    for c in key.as_str().chars() {
        if matches!(c, '"' | '\\') {
            text.push('\\');
        }
        text.push(c);
    }
    text.push('"');
    text
}

/// The `Lab-Fault` value for a fault, or `None` for no fault.
pub fn fault_header(fault: Fault) -> Option<&'static str> {
    Some(match fault {
        Fault::LoseReply => "lose-reply",
        Fault::BeforeCommit => "before-commit",
        Fault::FailAt(Step::Begin) => "fail-at=begin",
        Fault::FailAt(Step::Lookup) => "fail-at=lookup",
        Fault::FailAt(Step::InsertTicket) => "fail-at=insert-ticket",
        Fault::FailAt(Step::InsertRecord) => "fail-at=insert-record",
        Fault::FailAt(Step::Commit) => "fail-at=commit",
        _ => return None,
    })
}

/// The request for one create.
pub fn create_request(request: &CreateRequest<'_>) -> Request {
    let mut headers = Vec::new();
    if let Some(fault) = fault_header(request.fault) {
        headers.push(("Lab-Fault", fault.to_owned()));
    }
    let path = match request.key {
        Some(key) => {
            headers.push(("Idempotency-Key", quoted(key)));
            "/tickets"
        }
        None => "/unkeyed-tickets",
    };
    Request {
        method: "POST",
        path,
        headers,
        body: request.payload.canonical().to_owned(),
    }
}

/// What to do with a create's answer.
#[derive(Debug)]
pub enum Next {
    /// Report this to the trait's caller.
    Done(Result<Outcome>),
    /// The key is in flight, or the service full: wait [`WAIT`] and send the same request again.
    SendAgain,
}

/// Maps a create's answer (or the reason none came) to the trait's answer.
///
/// `201` is a created ticket, or a replayed one with `Idempotent-Replayed`; `422` a payload
/// conflict; `410` an expired key; `500` with the problem type `.../injected-failure` the
/// injected failure; `409` and `503` send again. No answer, and any other answer, is an unknown
/// outcome, never a failure: the service may have committed.
pub fn classify(request: &CreateRequest<'_>, answer: std::result::Result<Answer, String>) -> Next {
    let key = request.key.map(ToString::to_string);
    let unknown = |reason: String| {
        Next::Done(Err(Error::OutcomeUnknown {
            key: key.clone(),
            reason,
        }))
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(reason) => return unknown(format!("no answer: {reason}")),
    };
    let problem = answer.json["type"].as_str().unwrap_or_default();
    let id = match &answer.json["ticket_id"] {
        Value::Number(n) => n.as_i64().map(TicketId::from),
        Value::String(text) => Some(TicketId::from(text.as_str())),
        _ => None,
    };
    Next::Done(match (answer.status, id) {
        (201, Some(id)) if answer.replayed => Ok(Outcome::Replayed(id)),
        (201, Some(id)) => Ok(Outcome::Created(id)),
        (409 | 503, _) => return Next::SendAgain,
        (422, _) => Err(Error::PayloadConflict {
            key: key.unwrap_or_default(),
        }),
        (410, _) => Err(Error::KeyExpired {
            key: key.unwrap_or_default(),
        }),
        (500, _) if problem.ends_with("injected-failure") => Err(Error::InjectedFailure),
        (status, _) => return unknown(format!("answered {status}: {}", answer.json)),
    })
}

/// The outcome reported when a create was sent [`SENDS`] times and the key was still in flight.
pub fn still_in_flight(request: &CreateRequest<'_>) -> Error {
    Error::OutcomeUnknown {
        key: request.key.map(ToString::to_string),
        reason: format!("still in flight (409 or 503) after {SENDS} sends"),
    }
}

/// One of the test hooks: `GET /admin/tickets`, `GET /admin/records`, `DELETE /admin/records`
/// (with the key to forget), `POST /admin/reset`.
pub fn admin_request(
    method: &'static str,
    path: &'static str,
    key: Option<&OperationKey>,
) -> Request {
    Request {
        method,
        path,
        headers: key
            .map(|key| ("Idempotency-Key", quoted(key)))
            .into_iter()
            .collect(),
        body: String::new(),
    }
}

/// A hook's JSON, or an error naming the request and what came back.
fn admin_json(request: &Request, answer: std::result::Result<Answer, String>) -> Result<Value> {
    let problem = match answer {
        Ok(answer) if answer.status == 200 => return Ok(answer.json),
        Ok(answer) => format!("status {}, body {}", answer.status, answer.json),
        Err(reason) => reason,
    };
    Err(Error::Http {
        method: request.method,
        url: request.path.to_owned(),
        status: None,
        problem,
    })
}

/// The answer of `GET /admin/tickets`: `{"ticket_ids": [...]}`.
///
/// # Errors
/// [`Error::Http`] for no answer, another status or another shape.
pub fn ticket_ids(answer: std::result::Result<Answer, String>) -> Result<Vec<TicketId>> {
    let request = admin_request("GET", "/admin/tickets", None);
    let json = admin_json(&request, answer)?;
    serde_json::from_value(json["ticket_ids"].clone()).map_err(|_| {
        admin_json(&request, Err(format!("no list of ticket ids in {json}"))).unwrap_err()
    })
}

/// The answer of `GET /admin/records`: `{"records": N}`.
///
/// # Errors
/// [`Error::Http`] for no answer, another status or another shape.
pub fn records(answer: std::result::Result<Answer, String>) -> Result<u64> {
    let request = admin_request("GET", "/admin/records", None);
    let json = admin_json(&request, answer)?;
    json["records"].as_u64().ok_or_else(|| {
        admin_json(&request, Err(format!("no count of records in {json}"))).unwrap_err()
    })
}

/// The answer of `DELETE /admin/records`: `{"forgotten": true}` or `false`.
///
/// # Errors
/// [`Error::Http`] for no answer, another status or another shape.
pub fn forgotten(answer: std::result::Result<Answer, String>) -> Result<bool> {
    let request = admin_request("DELETE", "/admin/records", None);
    let json = admin_json(&request, answer)?;
    json["forgotten"]
        .as_bool()
        .ok_or_else(|| admin_json(&request, Err(format!("no `forgotten` in {json}"))).unwrap_err())
}

/// A [`TicketTool`] over a [`Transport`]: the contract of `lab serve`, any HTTP client.
///
/// The service takes the caller from the transport's credentials, so one `Remote` speaks for one
/// caller: it takes the first scope it is asked for and refuses any other with
/// [`Error::Unsupported`], which the conformance run reports as not covered.
#[derive(Clone)]
pub struct Remote<T> {
    transport: T,
    own: Arc<OwnScope>,
}

impl<T: Transport> Remote<T> {
    /// An adapter that sends through `transport`.
    pub fn new(transport: T) -> Remote<T> {
        Remote {
            transport,
            own: Arc::default(),
        }
    }

    /// `POST /admin/reset`: empties the service, so a contract point starts from nothing.
    ///
    /// # Errors
    /// [`Error::Http`] when the hook did not answer 200.
    pub fn reset(&self) -> Result<()> {
        let request = admin_request("POST", "/admin/reset", None);
        admin_json(&request, self.transport.send(&request)).map(drop)
    }

    fn hook(
        &self,
        method: &'static str,
        path: &'static str,
        key: Option<&OperationKey>,
    ) -> std::result::Result<Answer, String> {
        self.transport.send(&admin_request(method, path, key))
    }
}

impl<T: Transport> TicketTool for Remote<T> {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        self.own
            .check(request.scope, "the transport's token names one caller")?;
        let sent = create_request(&request);
        for _ in 0..SENDS {
            match classify(&request, self.transport.send(&sent)) {
                Next::Done(answer) => return answer,
                Next::SendAgain => std::thread::sleep(WAIT),
            }
        }
        Err(still_in_flight(&request))
    }

    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        ticket_ids(self.hook("GET", "/admin/tickets", None))
    }

    fn count_records(&self) -> Result<u64> {
        records(self.hook("GET", "/admin/records", None))
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        self.own
            .check(scope, "the transport's token names one caller")?;
        forgotten(self.hook("DELETE", "/admin/records", Some(key)))
    }

    fn connect(&self) -> Result<Remote<T>> {
        Ok(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::Operation;
    use std::sync::Mutex;

    /// A transport that records each request and answers from a script.
    #[derive(Clone, Default)]
    struct Scripted {
        sent: Arc<Mutex<Vec<Request>>>,
        answers: Arc<Mutex<Vec<std::result::Result<Answer, String>>>>,
    }

    impl Scripted {
        fn answering(answers: Vec<std::result::Result<Answer, String>>) -> Scripted {
            let mut answers = answers;
            answers.reverse();
            Scripted {
                answers: Arc::new(Mutex::new(answers)),
                ..Scripted::default()
            }
        }
    }

    impl Transport for Scripted {
        fn send(&self, request: &Request) -> std::result::Result<Answer, String> {
            self.sent.lock().unwrap().push(request.clone());
            self.answers.lock().unwrap().pop().expect("an answer left")
        }
    }

    #[test]
    fn a_create_is_one_post_with_the_quoted_key_the_fault_and_the_canonical_body() {
        let op = Operation::example();
        let request = op.request().with_fault(Fault::FailAt(Step::Commit));
        let sent = create_request(&request);
        assert_eq!((sent.method, sent.path), ("POST", "/tickets"));
        assert!(
            sent.headers
                .contains(&("Lab-Fault", "fail-at=commit".to_owned()))
        );
        let key = sent
            .headers
            .iter()
            .find(|(n, _)| *n == "Idempotency-Key")
            .unwrap();
        assert_eq!(key.1, format!("\"{}\"", op.operation_key.as_str()));
        assert_eq!(sent.body, op.payload.canonical());
        let unkeyed = CreateRequest::unkeyed(&op.scope, &op.payload);
        assert_eq!(create_request(&unkeyed).path, "/unkeyed-tickets");
        assert!(create_request(&unkeyed).headers.is_empty());
    }

    #[test]
    fn each_answer_maps_to_what_the_trait_promises() {
        let op = Operation::example();
        let request = op.request();
        let done = |answer| match classify(&request, answer) {
            Next::Done(done) => done,
            Next::SendAgain => panic!("sent again"),
        };
        let id = r#"{"ticket_id": 3}"#;
        assert_eq!(
            done(Ok(Answer::new(201, false, id))).unwrap(),
            Outcome::Created(3.into())
        );
        assert_eq!(
            done(Ok(Answer::new(201, true, id))).unwrap(),
            Outcome::Replayed(3.into())
        );
        let text = r#"{"ticket_id": "PROJ-1"}"#;
        assert_eq!(
            done(Ok(Answer::new(201, false, text))).unwrap(),
            Outcome::Created("PROJ-1".into())
        );
        assert!(matches!(
            done(Ok(Answer::new(422, false, "{}"))),
            Err(Error::PayloadConflict { .. })
        ));
        assert!(matches!(
            done(Ok(Answer::new(410, false, "{}"))),
            Err(Error::KeyExpired { .. })
        ));
        let injected = r#"{"type": "https://example.org/problems/injected-failure"}"#;
        assert!(matches!(
            done(Ok(Answer::new(500, false, injected))),
            Err(Error::InjectedFailure)
        ));
        // An internal error is not the injected one: the service may have committed.
        assert!(matches!(
            done(Ok(Answer::new(500, false, "{}"))),
            Err(Error::OutcomeUnknown { .. })
        ));
        assert!(matches!(
            done(Err("reset".into())),
            Err(Error::OutcomeUnknown { .. })
        ));
        assert!(matches!(
            done(Ok(Answer::new(201, false, "{}"))),
            Err(Error::OutcomeUnknown { .. })
        ));
        for status in [409, 503] {
            assert!(matches!(
                classify(&request, Ok(Answer::new(status, false, "{}"))),
                Next::SendAgain
            ));
        }
    }

    #[test]
    fn a_key_in_flight_is_sent_again_and_then_reported_unknown() {
        let op = Operation::example();
        let busy = || Ok(Answer::new(409, false, "{}"));
        let mut answers: Vec<_> = (0..SENDS - 1).map(|_| busy()).collect();
        answers.push(Ok(Answer::new(201, true, r#"{"ticket_id": 1}"#)));
        let transport = Scripted::answering(answers);
        let tool = Remote::new(transport.clone());
        assert_eq!(
            tool.create(op.request()).unwrap(),
            Outcome::Replayed(1.into())
        );
        assert_eq!(transport.sent.lock().unwrap().len(), SENDS as usize);

        let transport = Scripted::answering((0..SENDS).map(|_| busy()).collect());
        let err = Remote::new(transport.clone())
            .create(op.request())
            .unwrap_err();
        assert!(err.to_string().contains("still in flight"), "{err}");
        assert_eq!(transport.sent.lock().unwrap().len(), SENDS as usize);
    }

    #[test]
    fn the_hooks_read_their_answers_and_name_a_bad_one() {
        let op = Operation::example();
        let transport = Scripted::answering(vec![
            Ok(Answer::new(200, false, r#"{"ticket_ids": [1, 2]}"#)),
            Ok(Answer::new(200, false, r#"{"records": 4}"#)),
            Ok(Answer::new(200, false, r#"{"forgotten": true}"#)),
            Ok(Answer::new(404, false, "{}")),
            Ok(Answer::new(200, false, r#"{"records": "four"}"#)),
        ]);
        let tool = Remote::new(transport.clone());
        assert_eq!(
            tool.ticket_ids().unwrap(),
            vec![TicketId::from(1), TicketId::from(2)]
        );
        assert_eq!(tool.count_records().unwrap(), 4);
        assert!(tool.forget_record(&op.scope, &op.operation_key).unwrap());
        let err = tool.reset().unwrap_err().to_string();
        assert!(
            err.contains("POST /admin/reset") && err.contains("404"),
            "{err}"
        );
        let err = tool.count_records().unwrap_err().to_string();
        assert!(err.contains("no count of records"), "{err}");
        let sent = transport.sent.lock().unwrap();
        assert_eq!(sent[2].method, "DELETE");
        assert_eq!(
            sent[2].headers[0].1,
            format!("\"{}\"", op.operation_key.as_str())
        );
    }

    #[test]
    fn one_remote_speaks_for_one_caller() {
        let op = Operation::example();
        let transport =
            Scripted::answering(vec![Ok(Answer::new(201, false, r#"{"ticket_id": 1}"#))]);
        let tool = Remote::new(transport);
        tool.create(op.request()).unwrap();
        let other = Scope::new("someone-else", "create_ticket").unwrap();
        let request = CreateRequest::keyed(&other, &op.operation_key, &op.payload);
        assert!(matches!(
            tool.create(request),
            Err(Error::Unsupported { .. })
        ));
    }
}
