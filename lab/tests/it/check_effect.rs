//! Issue 46, classes 2 and 7: the calibration proves that `identity` names the effect (the same
//! value on a replay, a new one for a new key even with identical fields, the value the count's
//! listing or `[read]` sees), and a sub-check whose truth needs the effect's content compares it
//! by `[read]`, or is not covered, never ok on a count alone.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use lab::check::{Overrides, Report, Target};
use lab::serde_json::{self, Value, json};

/// What the helpdesk does wrong, if anything.
#[derive(Clone, Copy, Debug, Default)]
struct Faults {
    /// A call under a known key writes the ticket again (the changed payload's fields, a new
    /// revision) and answers it, instead of replaying.
    rewrite: bool,
    /// The key is not read: every create is a new ticket.
    ignore_keys: bool,
}

#[derive(Clone, Debug)]
struct Ticket {
    id: String,
    title: Value,
    priority: Value,
    revision: u64,
}

#[derive(Default)]
struct Helpdesk {
    tickets: Vec<Ticket>,
    records: HashMap<(String, String), (Value, usize)>,
    requests: u64,
    last_served: u128,
}

#[derive(Clone)]
struct App {
    faults: Faults,
    desk: Arc<Mutex<Helpdesk>>,
}

fn reply(status: u16, body: Value, replayed: bool) -> Response {
    let mut response = (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", "true".parse().unwrap());
    }
    response
}

fn stored(ticket: &Ticket) -> Value {
    json!({"id": ticket.id, "title": ticket.title, "priority": ticket.priority,
           "revision": ticket.revision})
}

impl Helpdesk {
    /// The ticket as a create's answer: its fields, and what each answer has of its own (a
    /// request id, the moment it was served, always later than the last).
    fn answer(&mut self, at: usize) -> Value {
        self.requests += 1;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        self.last_served = now.max(self.last_served + 1);
        let mut body = stored(&self.tickets[at]);
        body["request_id"] = json!(format!("req-{}", self.requests));
        body["served_at"] = json!(self.last_served.to_string());
        body
    }
}

async fn create(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(who) = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
    else {
        return reply(401, json!({"error": "who are you?"}), false);
    };
    let key = match headers
        .get("idempotency-key")
        .map(|v| key_text(v.to_str().unwrap_or("")))
    {
        Some(None) => return reply(400, json!({"error": "a malformed key"}), false),
        Some(Some(key)) => Some(key),
        None => None,
    };
    let key = if app.faults.ignore_keys {
        Some(format!("ignored-{}", rand_suffix()))
    } else {
        key
    };
    let Some(key) = key else {
        return reply(
            400,
            json!({"error": "an Idempotency-Key is required"}),
            false,
        );
    };
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return reply(400, json!({"error": "not JSON"}), false);
    };
    if payload["title"].as_str().is_none_or(str::is_empty) {
        return reply(400, json!({"error": "a title is required"}), false);
    }
    let mut desk = app.desk.lock().unwrap();
    if let Some((first, at)) = desk.records.get(&(who.clone(), key.clone())).cloned() {
        if app.faults.rewrite {
            let ticket = &mut desk.tickets[at];
            ticket.title = payload["title"].clone();
            ticket.priority = payload["priority"].clone();
            ticket.revision += 1;
            let body = desk.answer(at);
            return reply(201, body, false);
        }
        if first != payload {
            return reply(
                422,
                json!({"error": "key reused with another payload"}),
                false,
            );
        }
        let body = desk.answer(at);
        return reply(201, body, true);
    }
    let at = desk.tickets.len();
    desk.tickets.push(Ticket {
        id: format!("t-{}", at + 1),
        title: payload["title"].clone(),
        priority: payload["priority"].clone(),
        revision: 1,
    });
    desk.records.insert((who, key), (payload, at));
    let body = desk.answer(at);
    reply(201, body, false)
}

/// A key's characters: an sf-string's inside, or a bare token; `None` when malformed.
fn key_text(value: &str) -> Option<String> {
    let inner = match value.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"')?,
        None => value,
    };
    let token = |c: char| c.is_ascii_alphanumeric() || "-_.:".contains(c);
    (!inner.is_empty() && inner.chars().all(token)).then(|| inner.to_owned())
}

/// A suffix no two calls share, for the keys a key-blind service makes up.
fn rand_suffix() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    u128::from(NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn list(State(app): State<App>) -> Response {
    let desk = app.desk.lock().unwrap();
    let all: Vec<Value> = desk.tickets.iter().map(stored).collect();
    reply(200, json!({ "tickets": all }), false)
}

async fn count(State(app): State<App>) -> Response {
    let n = app.desk.lock().unwrap().tickets.len();
    reply(200, json!({ "count": n }), false)
}

async fn one(State(app): State<App>, UrlPath(id): UrlPath<String>) -> Response {
    let desk = app.desk.lock().unwrap();
    match desk.tickets.iter().find(|t| t.id == id) {
        Some(ticket) => reply(200, json!({ "ticket": stored(ticket) }), false),
        None => reply(404, json!({"error": "no such ticket"}), false),
    }
}

/// The helpdesk on a loopback port, on its own runtime and thread for the test's life.
fn start_helpdesk(faults: Faults) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = App {
        faults,
        desk: Arc::new(Mutex::new(Helpdesk::default())),
    };
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let router = Router::new()
                .route("/tickets", post(create).get(list))
                .route("/tickets/{id}", get(one))
                .route("/count", get(count))
                .with_state(app);
            axum::serve(listener, router).await.unwrap();
        });
    });
    url
}

const HELPDESK_TARGET: &str = r#"
[service]
base_url = "http://127.0.0.1:9"
timeout_ms = 5000

[create]
path = "/tickets"
headers = { "Content-Type" = "application/json" }
body = { title = "{{title}}", priority = "{{priority}}" }
fields = { title = "Printer jammed", priority = "high" }
vary = { title = "text" }
success = [201]

[key]
form = "sf-string"

[identity]
json_pointer = "/id"

[replay]
header = "Idempotent-Replayed"

[[callers]]
name = "alice"
headers = { Authorization = "Bearer alice" }

[[callers]]
name = "bob"
headers = { Authorization = "Bearer bob" }

[count]
request = { path = "/tickets", json_pointer = "/tickets", caller = "none" }

[read]
request = { path = "/tickets/{{id}}", json_pointer = "/ticket" }

[errors]
validation = { fields = { title = "" } }

[load]
fresh_rounds = 2
completed_rounds = 2
callers = 3
"#;

/// The helpdesk file without its `[read]`.
fn without_read(file: &str) -> String {
    file.replace(
        "[read]\nrequest = { path = \"/tickets/{{id}}\", json_pointer = \"/ticket\" }\n",
        "",
    )
}

/// The helpdesk file counting by a number, so no listing shows which effects there are.
fn counted_by_number(file: &str) -> String {
    file.replace(
        "request = { path = \"/tickets\", json_pointer = \"/tickets\", caller = \"none\" }",
        "request = { path = \"/count\", json_pointer = \"/count\", caller = \"none\" }",
    )
}

fn run(file: &str, faults: Faults) -> Result<Report, lab::Error> {
    let overrides = Overrides {
        base_url: Some(start_helpdesk(faults)),
        allow_remote: false,
        upstream_port: None,
    };
    let target = Target::parse(file, Path::new("helpdesk.toml"), &overrides).unwrap();
    lab::check::run(target)
}

/// The check stops with exit status 2 naming `identity.json_pointer`, and says `also`.
fn assert_identity_refused(file: &str, also: &[&str]) {
    match run(file, Faults::default()) {
        Err(lab::Error::TargetMismatch { field, problem, .. }) => {
            println!("{problem}");
            assert_eq!(field, "identity.json_pointer", "{problem}");
            for word in also {
                assert!(problem.contains(word), "expected {word:?} in: {problem}");
            }
        }
        Err(other) => panic!("expected a mismatch of identity.json_pointer: {other}"),
        Ok(report) => panic!(
            "the check graded a correct service against a wrong identity: failed {:?}\n{report}",
            report.failed().map(|p| p.name).collect::<Vec<_>>()
        ),
    }
}

/// A sub-check of `point` whose sentence starts with `what`, from the JSON report.
fn sub_check(report: &Report, point: &str, what: &str) -> Value {
    let json: Value = serde_json::from_str(&report.to_json()).unwrap();
    json["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == point)
        .and_then(|p| {
            p["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["what"].as_str().unwrap().starts_with(what))
                .cloned()
        })
        .unwrap_or_else(|| panic!("no sub-check {what:?} in {point}:\n{report}"))
}

#[test]
fn the_helpdesk_passes_with_its_file_with_or_without_a_read() {
    for file in [
        HELPDESK_TARGET.to_owned(),
        without_read(HELPDESK_TARGET),
        counted_by_number(&without_read(HELPDESK_TARGET)),
    ] {
        let report = run(&file, Faults::default()).unwrap();
        assert!(report.failed().next().is_none(), "{report}");
    }
}

#[test]
fn an_identity_pointer_at_the_title_is_refused_naming_the_pointer_that_names_the_effect() {
    // A title tagged per create is unique, so it passed as an identity; the new-key-same-payload point then
    // read two tickets with one payload as one effect.
    let file = HELPDESK_TARGET.replace("json_pointer = \"/id\"", "json_pointer = \"/title\"");
    assert_identity_refused(&file, &["/title", "\"/id\""]);
    assert_identity_refused(&without_read(&file), &["/title", "\"/id\""]);
    assert_identity_refused(
        &counted_by_number(&without_read(&file)),
        &["/title", "\"/id\""],
    );
}

#[test]
fn an_identity_pointer_at_a_request_id_or_a_timestamp_is_refused() {
    // Each answer has its own: a replay of the same effect named another, and every replay
    // point read a correct service's replays as new effects.
    for pointer in ["/request_id", "/served_at"] {
        let file = HELPDESK_TARGET.replace(
            "json_pointer = \"/id\"",
            &format!("json_pointer = \"{pointer}\""),
        );
        assert_identity_refused(&file, &[pointer, "\"/id\""]);
        assert_identity_refused(&without_read(&file), &[pointer, "\"/id\""]);
        assert_identity_refused(
            &counted_by_number(&without_read(&file)),
            &[pointer, "\"/id\"", "replay"],
        );
    }
}

#[test]
fn a_service_that_ignores_keys_still_calibrates_with_the_right_identity() {
    let report = run(
        HELPDESK_TARGET,
        Faults {
            ignore_keys: true,
            ..Faults::default()
        },
    )
    .unwrap();
    let failed: Vec<&str> = report.failed().map(|p| p.name).collect();
    assert!(failed.contains(&"retry-replays"), "{report}");
    assert!(failed.contains(&"reply-dropped"), "{report}");
}

#[test]
fn a_retry_that_rewrites_the_effect_fails_on_its_content_read_back() {
    let report = run(
        HELPDESK_TARGET,
        Faults {
            rewrite: true,
            ..Faults::default()
        },
    )
    .unwrap();
    let retries = sub_check(&report, "retry-replays", "the retries made no effect");
    assert_eq!(retries["passed"], json!(false), "{retries:#}");
    assert!(retries.get("not_covered").is_none(), "{retries:#}");
    let observed = retries["observed"].as_str().unwrap();
    assert!(observed.contains("revision"), "{observed}");
    for (point, what) in [
        ("reply-dropped", "the lost reply and its retry"),
        ("reordered-fields", "one effect in all"),
        ("concurrent-completed-key", "the retries made no effect"),
    ] {
        let check = sub_check(&report, point, what);
        assert_eq!(check["passed"], json!(false), "{point}: {check:#}");
        assert!(check.get("not_covered").is_none(), "{point}: {check:#}");
    }
}

#[test]
fn without_a_read_an_effect_the_count_cannot_see_is_not_covered_never_ok() {
    // Without a read, a retry that writes the effect again unmarked looks like a replay that
    // lacks the declared mark, which the calibration refuses; a file that infers replays is
    // graded, and what only content shows is NOT COVERED.
    let inferred = without_read(HELPDESK_TARGET)
        .replace("header = \"Idempotent-Replayed\"", "inferred = true");
    for (file, faults) in [
        (without_read(HELPDESK_TARGET), Faults::default()),
        (
            inferred,
            Faults {
                rewrite: true,
                ..Faults::default()
            },
        ),
    ] {
        let report = run(&file, faults).unwrap();
        for (point, what) in [
            ("retry-replays", "the retries made no effect"),
            ("reply-dropped", "the lost reply and its retry"),
            ("changed-payload", "the changed payload made no effect"),
            ("reordered-fields", "one effect in all"),
            ("concurrent-completed-key", "the retries made no effect"),
        ] {
            let check = sub_check(&report, point, what);
            assert_ne!(check["passed"], json!(true), "{point}: {check:#}");
            let reason = check["not_covered"].as_str().unwrap_or_default();
            assert!(reason.contains("[read]"), "{point}: {check:#}");
        }
        assert!(report.to_string().contains("NOT COVERED"), "{report}");
    }
}
