use std::sync::Arc;
use std::time::Duration;

use lab::serde_json::{self, Value};
use lab::tool::OwnScope;
use lab::{
    CreateRequest, Error, Fault, OperationKey, Outcome, Result, Scope,
    Step, TicketId, TicketTool, conformance,
};

/// The service as one caller sees it: the token names the caller.
#[derive(Clone)]
struct Service {
    url: String,
    token: String,
    admin_token: String,
    own: Arc<OwnScope>,
}

impl Service {
    /// Sends one request; any status is an answer, no answer an error.
    fn send(&self, method: &str, path: &str, headers: &[(&str, &str)],
        body: &str) -> std::result::Result<(u16, bool, Value), String> {
        let url = format!("{}{path}", self.url);
        let mut call = ureq::request(method, &url)
            .set("Authorization", &format!("Bearer {}", self.token))
            .set("Lab-Admin-Token", &self.admin_token);
        for (name, value) in headers {
            call = call.set(name, value);
        }
        let response = match call.send_string(body) {
            Ok(r) | Err(ureq::Error::Status(_, r)) => r,
            Err(lost) => return Err(format!("{method} {url}: {lost}")),
        };
        let replayed = response.header("Idempotent-Replayed").is_some();
        let status = response.status();
        let text = response.into_string().unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok((status, replayed, json))
    }

    /// An admin endpoint's JSON answer: the test's view of the store.
    fn admin(&self, method: &str, path: &str, key: Option<&OperationKey>)
        -> Result<Value> {
        let key = key.map(|key| format!("{:?}", key.as_str()));
        let headers: Vec<_> =
            key.iter().map(|k| ("Idempotency-Key", k.as_str())).collect();
        match self.send(method, path, &headers, "") {
            Ok((200, _, json)) => Ok(json),
            other => Err(Error::adapter(std::io::Error::other(format!(
                "{method} {path}: {other:?}"
            )))),
        }
    }
}

impl TicketTool for Service {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        self.own.check(request.scope, "the token names one caller")?;
        let key = request.key.map(|key| format!("{:?}", key.as_str()));
        let fault = match request.fault {
            Fault::LoseReply => "lose-reply",
            Fault::BeforeCommit => "before-commit",
            Fault::FailAt(Step::Begin) => "fail-at=begin",
            Fault::FailAt(Step::Lookup) => "fail-at=lookup",
            Fault::FailAt(Step::InsertTicket) => "fail-at=insert-ticket",
            Fault::FailAt(Step::InsertRecord) => "fail-at=insert-record",
            Fault::FailAt(Step::Commit) => "fail-at=commit",
            _ => "",
        };
        let mut headers = vec![("Lab-Fault", fault)];
        headers.retain(|(_, value)| !value.is_empty());
        let path = match &key {
            Some(key) => {
                headers.push(("Idempotency-Key", key));
                "/tickets"
            }
            None => "/unkeyed-tickets",
        };
        let body = request.payload.canonical();
        let unknown = |reason| Error::OutcomeUnknown {
            key: request.key.map(ToString::to_string),
            reason,
        };
        for _ in 0..10 {
            let (status, replayed, json) = self
                .send("POST", path, &headers, body)
                .map_err(unknown)?;
            let problem = json["type"].as_str().unwrap_or_default();
            let id = json["ticket_id"].as_i64().map(TicketId::from);
            match (status, id) {
                (201, Some(id)) if replayed => {
                    return Ok(Outcome::Replayed(id));
                }
                (201, Some(id)) => return Ok(Outcome::Created(id)),
                (409 | 503, _) => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                (422, _) => {
                    let key = request.key.map(|k| k.to_string());
                    return Err(Error::PayloadConflict {
                        key: key.unwrap_or_default(),
                    });
                }
                (500, _) if problem.ends_with("injected-failure") => {
                    return Err(Error::InjectedFailure);
                }
                _ => return Err(unknown(format!("{status}: {json}"))),
            }
        }
        Err(unknown("still in flight after ten tries".to_owned()))
    }

    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        let json = self.admin("GET", "/admin/tickets", None)?;
        let ids = json["ticket_ids"].as_array().cloned().unwrap_or_default();
        Ok(ids.iter().filter_map(Value::as_i64).map(TicketId::from).collect())
    }

    fn count_records(&self) -> Result<u64> {
        let json = self.admin("GET", "/admin/records", None)?;
        Ok(json["records"].as_u64().unwrap_or_default())
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey)
        -> Result<bool> {
        self.own.check(scope, "the token names one caller")?;
        let json = self.admin("DELETE", "/admin/records", Some(key))?;
        Ok(json["forgotten"].as_bool().unwrap_or_default())
    }

    fn connect(&self) -> Result<Service> {
        Ok(self.clone())
    }
}

#[test]
fn the_service_keeps_the_retry_contract() {
    let url = std::env::var("TICKETS_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8080".to_owned());
    let report = conformance::run(|| {
        let service = Service {
            url: url.clone(),
            token: "token-a".to_owned(),
            admin_token: "admin-1".to_owned(),
            own: Arc::default(),
        };
        // Each contract point starts from an empty service.
        service.admin("POST", "/admin/reset", None)?;
        Ok(service)
    });
    println!("{report}");
    report.assert_passed();
}
