//! Issue 46: the check accuses a service of a leak between callers only when the calibration
//! proved that the service takes them for two callers, and it proves every replay mark the file
//! declares before grading. Two names in `[[callers]]` may be one caller to a service (one token
//! under another header name, an extra header it ignores, a header name in another case); a
//! replay status the service never sends is the file's mistake, not the service's.
//!
//! The planted service here is correct: keys are scoped by the caller it reads (a bearer token
//! in `Authorization`, or the same token in `X-Api-Key`), a replay carries the first answer and
//! `Idempotent-Replayed: true`, `GET /tickets` lists the caller's own tickets (every ticket
//! without credentials) and `GET /tickets/{id}` answers the ticket's owner only. One switch
//! plants the leak.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as Segment, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use lab::check::report::{Report, Verdict};
use lab::check::{Overrides, Target};
use lab::serde_json::{self, Value, json};

/// How the planted service behaves.
#[derive(Clone, Copy, Default)]
struct Plant {
    /// Records are found by the key alone: the leak.
    unscoped: bool,
    /// A replay is answered with this status (and the stored body) instead of the first's.
    replay_status: Option<u16>,
}

#[derive(Default)]
struct Ledger {
    next_id: u64,
    /// Each ticket's owner, by id.
    tickets: Vec<(u64, String)>,
    records: HashMap<(String, String), (Value, String)>,
}

#[derive(Clone)]
struct App {
    plant: Plant,
    ledger: Arc<Mutex<Ledger>>,
}

fn reply(status: u16, body: &str, replayed: bool) -> Response {
    let mut response = (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body.to_owned(),
    )
        .into_response();
    if replayed {
        let headers = response.headers_mut();
        headers.insert("idempotent-replayed", "true".parse().unwrap());
    }
    response
}

/// The caller the service reads: the bearer token, or the same token under `X-Api-Key`.
/// Header names are looked up without case, as HTTP compares them.
fn caller(headers: &HeaderMap) -> Option<String> {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    bearer.or(api_key).map(str::to_owned)
}

async fn create(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(who) = caller(&headers) else {
        return reply(401, r#"{"error":"who are you?"}"#, false);
    };
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix('"')?.strip_suffix('"'))
        .map(str::to_owned)
    else {
        return reply(
            400,
            r#"{"error":"an Idempotency-Key sf-string is required"}"#,
            false,
        );
    };
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return reply(400, r#"{"error":"not JSON"}"#, false);
    };
    let scope = if app.plant.unscoped {
        String::new()
    } else {
        who.clone()
    };
    let mut ledger = app.ledger.lock().unwrap();
    if let Some((first, text)) = ledger.records.get(&(scope.clone(), key.clone())).cloned() {
        if first != payload {
            return reply(422, r#"{"error":"key reused with another payload"}"#, false);
        }
        return reply(app.plant.replay_status.unwrap_or(201), &text, true);
    }
    if payload["title"].as_str().is_none_or(str::is_empty) {
        return reply(400, r#"{"error":"a title is required"}"#, false);
    }
    ledger.next_id += 1;
    let id = ledger.next_id;
    ledger.tickets.push((id, who));
    let text = json!({ "id": id }).to_string();
    ledger.records.insert((scope, key), (payload, text.clone()));
    reply(201, &text, false)
}

async fn list(State(app): State<App>, headers: HeaderMap) -> Response {
    let who = caller(&headers);
    let ledger = app.ledger.lock().unwrap();
    let shown: Vec<u64> = ledger
        .tickets
        .iter()
        .filter(|(_, owner)| who.as_ref().is_none_or(|w| w == owner))
        .map(|(id, _)| *id)
        .collect();
    reply(200, &json!({ "tickets": shown }).to_string(), false)
}

async fn one(State(app): State<App>, headers: HeaderMap, Segment(id): Segment<u64>) -> Response {
    let who = caller(&headers);
    let ledger = app.ledger.lock().unwrap();
    match ledger.tickets.iter().find(|(n, _)| *n == id) {
        Some((_, owner)) if who.as_ref() == Some(owner) => {
            reply(200, &json!({ "id": id }).to_string(), false)
        }
        _ => reply(404, r#"{"error":"no such ticket"}"#, false),
    }
}

/// The service on a loopback port, on its own runtime and thread for the test's life.
fn start(plant: Plant) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = App {
        plant,
        ledger: Arc::new(Mutex::new(Ledger::default())),
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
                .route("/tickets", get(list).post(create))
                .route("/tickets/{id}", get(one))
                .with_state(app);
            axum::serve(listener, router).await.unwrap();
        });
    });
    url
}

/// The file, with `CALLERS` and `COUNT` to fill in.
const TARGET: &str = r#"
[service]
base_url = "http://127.0.0.1:9"
timeout_ms = 5000

[create]
path = "/tickets"
headers = { "Content-Type" = "application/json" }
body = { title = "{{title}}" }
fields = { title = "Printer jammed" }
vary = { title = "text" }
success = [201]

[key]
form = "sf-string"

[identity]
json_pointer = "/id"

[replay]
header = "Idempotent-Replayed"
value = "true"

CALLERS

[count]
COUNT

[errors]
validation = { fields = { title = "" } }

[load]
fresh_rounds = 2
completed_rounds = 2
callers = 3
"#;

/// Alice and Bob, each with a token of their own.
const TWO: &str = r#"[[callers]]
name = "alice"
headers = { Authorization = "Bearer alice" }

[[callers]]
name = "bob"
headers = { Authorization = "Bearer bob" }"#;

/// Each caller's own list, added up.
const EACH: &str = r#"request = { path = "/tickets", json_pointer = "/tickets", caller = "each" }"#;

/// Every ticket, read without credentials.
const ALL: &str = r#"request = { path = "/tickets", json_pointer = "/tickets", caller = "none" }"#;

/// The file with these callers and this count.
fn file(callers: &str, count: &str) -> String {
    TARGET.replace("CALLERS", callers).replace("COUNT", count)
}

/// Bob as a second name for Alice's token, in the way `bob_headers` sends it.
fn one_caller(bob_headers: &str) -> String {
    TWO.replace(
        "headers = { Authorization = \"Bearer bob\" }",
        &format!("headers = {bob_headers}"),
    )
}

/// The check of `content` against a fresh planted service.
fn check(content: &str, plant: Plant) -> lab::Result<Report> {
    let overrides = Overrides {
        base_url: Some(start(plant)),
        allow_remote: false,
        upstream_port: None,
    };
    let target = Target::parse(content, Path::new("callers.toml"), &overrides)?;
    lab::check::run(target)
}

fn scope(report: &Report) -> &lab::check::report::PointReport {
    report
        .points
        .iter()
        .find(|p| p.name == "other-caller")
        .unwrap()
}

/// Every line the report prints, and its JSON, without the words of an accusation.
fn accuses_no_leak(report: &Report) {
    for said in [report.to_string(), report.to_json()] {
        assert!(!said.contains("DATA LEAK"), "{said}");
    }
}

#[test]
fn one_token_under_another_header_name_is_one_caller_and_no_leak_is_claimed() {
    // Bob sends Alice's token under X-Api-Key, which the service reads as well: to it, both are
    // Alice. The count sees every ticket, so nothing the file describes tells them apart.
    let content = file(&one_caller("{ X-Api-Key = \"alice\" }"), ALL);
    let report = check(&content, Plant::default()).unwrap();
    let point = scope(&report);
    assert_eq!(point.verdict, Verdict::NotCovered, "{report}");
    let lab::check::report::Coverage::NotCovered { reason } = &point.coverage else {
        panic!("{report}");
    };
    assert!(reason.contains("could not prove"), "{reason}");
    assert!(reason.contains("caller = \"each\""), "{reason}");
    accuses_no_leak(&report);
    assert!(report.passed, "{report}");
}

#[test]
fn a_header_the_service_ignores_does_not_make_a_second_caller() {
    let content = file(
        &one_caller("{ Authorization = \"Bearer alice\", X-Caller = \"bob\" }"),
        ALL,
    );
    let report = check(&content, Plant::default()).unwrap();
    assert_eq!(scope(&report).verdict, Verdict::NotCovered, "{report}");
    accuses_no_leak(&report);
}

#[test]
fn the_callers_own_lists_name_two_names_for_one_caller_before_anything_is_graded() {
    // With each caller's own list counted, Alice's create shows in Bob's list as well: the
    // calibration proves they are one caller, and says so, naming [[callers]].
    let content = file(&one_caller("{ X-Api-Key = \"alice\" }"), EACH);
    match check(&content, Plant::default()) {
        Err(lab::Error::TargetMismatch { field, problem, .. }) => {
            assert_eq!(field, "callers[1].headers", "{problem}");
            assert!(
                problem.contains("alice and bob are one caller"),
                "{problem}"
            );
            assert!(problem.contains("credentials of its own"), "{problem}");
        }
        other => panic!("expected a mismatch naming callers[1].headers: {other:?}"),
    }
}

#[test]
fn header_names_compare_without_case_in_the_target_file() {
    let listener = crate::check_target::Listener::new();
    let refused = |content: String, field: &str| {
        let content = content.replace("http://127.0.0.1:9", &listener.url);
        let err = Target::parse(&content, Path::new("callers.toml"), &Overrides::default())
            .expect_err(field)
            .to_string();
        assert!(err.contains(field), "expected {field} in: {err}");
    };
    // Alice's own header, its name in lower case: the same credentials.
    refused(
        file(&one_caller("{ authorization = \"Bearer alice\" }"), ALL),
        "callers[1].headers",
    );
    // One header given twice under one caller.
    refused(
        file(
            &one_caller("{ Authorization = \"Bearer bob\", authorization = \"Bearer b\" }"),
            ALL,
        ),
        "callers[1].headers.authorization",
    );
    // The key header, which the check sends itself, in another case among the create's.
    refused(
        file(TWO, ALL).replace(
            "headers = { \"Content-Type\" = \"application/json\" }",
            "headers = { \"Content-Type\" = \"application/json\", \"idempotency-key\" = \"k\" }",
        ),
        "create.headers.idempotency-key",
    );
    assert_eq!(listener.connections(), 0, "something was sent");
}

#[test]
fn two_callers_the_service_tells_apart_get_the_scope_point_graded() {
    // Proved by the callers' own lists.
    let content = file(TWO, EACH);
    let correct = check(&content, Plant::default()).unwrap();
    assert_eq!(scope(&correct).verdict, Verdict::Pass, "{correct}");
    assert!(
        correct
            .calibration
            .steps
            .iter()
            .any(|s| s.name == "callers-apart"),
        "{correct}"
    );
    let leaky = check(
        &content,
        Plant {
            unscoped: true,
            ..Plant::default()
        },
    )
    .unwrap();
    assert_eq!(scope(&leaky).verdict, Verdict::Fail, "{leaky}");
    assert!(leaky.to_string().contains("DATA LEAK"), "{leaky}");
}

#[test]
fn a_read_the_service_answers_only_to_the_owner_proves_two_callers() {
    // The count sees every ticket; the read by identity shows whose a ticket is.
    let read = "\n[read]\nrequest = { path = \"/tickets/{{id}}\", json_pointer = \"/id\" }\n";
    let content = format!("{}{read}", file(TWO, ALL));
    let leaky = check(
        &content,
        Plant {
            unscoped: true,
            ..Plant::default()
        },
    )
    .unwrap();
    assert_eq!(scope(&leaky).verdict, Verdict::Fail, "{leaky}");
    assert!(leaky.to_string().contains("DATA LEAK"), "{leaky}");
    // Bob as a second name for Alice: the read answers both, and proves nothing.
    let same = format!(
        "{}{read}",
        file(&one_caller("{ X-Api-Key = \"alice\" }"), ALL)
    );
    let report = check(&same, Plant::default()).unwrap();
    assert_eq!(scope(&report).verdict, Verdict::NotCovered, "{report}");
    accuses_no_leak(&report);
}

#[test]
fn a_replay_status_the_service_never_sends_stops_the_check_naming_replay_status() {
    // The service replays with the first answer's status (201) and its replay header; a file
    // that says replays are answered 200 describes another service.
    let marked = "[replay]\nheader = \"Idempotent-Replayed\"\nvalue = \"true\"";
    let wrong = file(TWO, EACH).replace(marked, "[replay]\nstatus = 200");
    match check(&wrong, Plant::default()) {
        Err(lab::Error::TargetMismatch { field, problem, .. }) => {
            assert_eq!(field, "replay.status", "{problem}");
            assert!(problem.contains("201"), "{problem}");
            assert!(problem.contains("replay.inferred = true"), "{problem}");
            assert!(problem.contains("idempotent-replayed"), "{problem}");
        }
        other => panic!("expected a mismatch naming replay.status: {other:?}"),
    }
    // A service that replays with a status of its own: the file's other status is named with
    // the one seen, and the right one calibrates and passes the retry-replays point.
    let plant = Plant {
        replay_status: Some(200),
        ..Plant::default()
    };
    let other = file(TWO, EACH).replace(marked, "[replay]\nstatus = 202");
    match check(&other, plant) {
        Err(lab::Error::TargetMismatch { field, problem, .. }) => {
            assert_eq!(field, "replay.status", "{problem}");
            assert!(problem.contains("set replay.status = 200"), "{problem}");
        }
        other => panic!("expected a mismatch naming replay.status: {other:?}"),
    }
    let right = file(TWO, EACH).replace(marked, "[replay]\nstatus = 200");
    let report = check(&right, plant).unwrap();
    let replay = report
        .points
        .iter()
        .find(|p| p.name == "retry-replays")
        .unwrap();
    assert_eq!(replay.verdict, Verdict::Pass, "{report}");
}

#[test]
fn over_mcp_two_names_for_one_caller_are_named_before_anything_is_graded() {
    // The planted MCP server acts for the caller its --caller names; Bob's session is started
    // for Alice too, with a variable the server ignores, so the file's two callers are one.
    let Some(python) = crate::check_mcp::python(
        "check_callers::over_mcp_two_names_for_one_caller_are_named_before_anything_is_graded",
    ) else {
        return;
    };
    let server = crate::repository_root().join("lab/tests/mcp-servers/planted/server.py");
    let folder = tempfile::tempdir().unwrap();
    let file = crate::check_mcp::fitted(
        "lab/tests/mcp-servers/planted/target.toml",
        &[
            ("\"python3\"", &format!("{:?}", python.to_str().unwrap())),
            ("\"server.py\"", &format!("{:?}", server.to_str().unwrap())),
            (
                "args = [\"--caller\", \"bob\"]",
                "args = [\"--caller\", \"alice\"]\nenv = { CALLER_NOTE = \"bob\" }",
            ),
        ],
        folder.path(),
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["check", "--target", file.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("mcp.callers[1]"), "{stderr}");
    assert!(stderr.contains("alice and bob are one caller"), "{stderr}");
    assert!(output.stdout.is_empty());
}
