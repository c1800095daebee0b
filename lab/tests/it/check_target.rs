//! `lab check --target FILE` (issue #23): the black-box check passes `lab serve` with its
//! shipped target file, catches each planted bug of a small service written here (each bug
//! flips its own point and no correct point), and refuses bad target files before it sends
//! anything.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use lab::check::report::Verdict;
use lab::check::{Overrides, Report, Target};
use lab::serde_json::{self, Value, json};

use crate::http::LabServer;

fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(args)
        .output()
        .expect("the lab binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn shipped_target() -> std::path::PathBuf {
    crate::repository_root().join("lab/targets/lab-serve.toml")
}

/// `lab serve` as its shipped target file describes it: two callers, the fault hooks on.
fn serve_with_faults() -> LabServer {
    LabServer::spawn(&[
        "serve",
        "--port",
        "0",
        "--caller",
        "alice=alice-token",
        "--caller",
        "bob=bob-token",
        "--faults",
    ])
}

#[test]
fn lab_serve_passes_every_point_of_its_shipped_target_file() {
    let server = serve_with_faults();
    let target = shipped_target();
    let output = lab(&[
        "check",
        "--target",
        target.to_str().unwrap(),
        "--url",
        &server.url,
    ]);
    let stdout = text(&output.stdout);
    println!("{stdout}");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    assert!(
        stdout.contains("every MUST and LAB sub-check passed"),
        "{stdout}"
    );
    for line in stdout.lines() {
        assert!(!line.starts_with("FAIL"), "a point failed: {line}");
    }
    // The points the file covers with lab serve's fault hooks are checked, not skipped.
    for point in [
        "server-error-then-corrected",
        "fault-between-effect-and-record",
        "other-caller",
    ] {
        assert!(
            stdout.contains(&format!("PASS {point}:")),
            "{point}: {stdout}"
        );
    }
    // The run reports the registry's HTTP points, no more and no fewer, in its order (the file
    // has no [upstream], so no hop point runs).
    let reported: Vec<&str> = stdout
        .lines()
        .filter_map(|line| {
            let rest = ["PASS ", "WARN ", "FAIL ", "NOT COVERED "]
                .iter()
                .find_map(|verdict| line.strip_prefix(verdict))?;
            rest.split_once(": ").map(|(name, _)| name)
        })
        .collect();
    let registry: Vec<&str> = lab::contract::points::on(lab::contract::points::Front::Http)
        .filter(|point| !point.hop)
        .map(|point| point.id)
        .collect();
    assert_eq!(reported, registry, "{stdout}");
}

/// The ids of the points a `lab check --target --json` run reported.
fn reported_points(output: &Output) -> Vec<String> {
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", text(&output.stderr)));
    report["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|point| point["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn only_and_skip_run_the_points_an_id_names_and_a_bad_id_is_refused_before_anything_is_sent() {
    let server = serve_with_faults();
    let target = shipped_target();
    let target = target.to_str().unwrap();
    let check = |selection: &[&str]| {
        let mut args = vec!["check", "--target", target, "--url", &server.url, "--json"];
        args.extend_from_slice(selection);
        lab(&args)
    };
    // A promise's id names every point that covers it; a point's name names that point.
    let by_promise = check(&["--only", "lost-reply", "--only", "crash"]);
    assert_eq!(
        by_promise.status.code(),
        Some(0),
        "{}",
        text(&by_promise.stderr)
    );
    assert_eq!(
        reported_points(&by_promise),
        ["reply-dropped", "hang-up", "crash"]
    );
    // --skip leaves out what it names, a promise's points included.
    let skipped = check(&["--only", "scope", "--skip", "other-endpoint"]);
    assert_eq!(skipped.status.code(), Some(0), "{}", text(&skipped.stderr));
    assert_eq!(reported_points(&skipped), ["other-caller"]);
    // A misspelt id, or an old point name, stops before anything is sent: exit 2, naming it.
    // The URL is a listener of this test's, which must see no connection.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    for (id, said) in [
        ("repaly", "retry-replays"),
        ("lost-result", "reply-dropped"),
    ] {
        let refused = lab(&["check", "--target", target, "--url", &url, "--skip", id]);
        let stderr = text(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(id) && stderr.contains(said), "{stderr}");
        assert!(refused.stdout.is_empty(), "{}", text(&refused.stdout));
    }
    // A selection that leaves none of the file's points (an MCP point of an HTTP file, or one
    // point both kept and left out) is refused the same way: a report of no point reads as a pass.
    for selection in [
        &["--only", "cancelled"][..],
        &["--only", "crash", "--skip", "crash"][..],
    ] {
        let mut args = vec!["check", "--target", target, "--url", &url];
        args.extend_from_slice(selection);
        let refused = lab(&args);
        let stderr = text(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{selection:?}: {stderr}");
        assert!(
            stderr.contains("leave no point") && stderr.contains("retry-replays"),
            "{stderr}"
        );
        assert!(refused.stdout.is_empty(), "{}", text(&refused.stdout));
    }
    assert!(
        listener.accept().is_err(),
        "a refused selection connected to the service"
    );
}

#[test]
fn without_its_fault_switch_lab_serve_is_not_described_by_the_file_and_nothing_is_graded() {
    // The same file against a server without --faults: the hooks are refused with a 400. The
    // file's [errors.server] then provokes no 5xx on this service, which the calibration
    // reports as the file's mismatch before any point (it used to fail two points).
    let server = LabServer::spawn(&[
        "serve",
        "--port",
        "0",
        "--caller",
        "alice=alice-token",
        "--caller",
        "bob=bob-token",
    ]);
    let file = lab::check::TargetFile::from_file(
        &shipped_target(),
        &Overrides {
            base_url: Some(server.url.clone()),
            allow_remote: false,
            upstream_port: None,
        },
    );
    let Ok(lab::check::TargetFile::Http(target)) = file else {
        panic!("the shipped target file is an HTTP one");
    };
    match lab::check::run(*target) {
        Err(lab::Error::TargetMismatch { field, problem, .. }) => {
            assert_eq!(field, "errors.server", "{problem}");
            assert!(problem.contains("400"), "{problem}");
        }
        other => panic!("expected a mismatch of errors.server: {other:?}"),
    }
}

// A small ticket service with an idempotency layer, and switches that plant one bug each.

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bugs {
    /// Records are found by the key alone, not by (caller, key).
    pub(crate) unscoped: bool,
    /// A reused key with another payload replays the first answer.
    pub(crate) accept_changed: bool,
    /// A validation error is saved under the key and replayed to the corrected request.
    pub(crate) burn_on_4xx: bool,
    /// A completed key is answered 409.
    pub(crate) conflict_on_replay: bool,
    /// The key is not read at all.
    pub(crate) no_key: bool,
    /// Records are found by (caller, key) whatever the endpoint, so one key on two endpoints
    /// collides.
    pub(crate) operation_blind: bool,
    /// The key is the header's value as it comes, any string (as Stripe reads it): a quoted
    /// key is another key, and nothing is malformed. No bug: a form the file may declare.
    pub(crate) opaque_keys: bool,
    /// Only UUID keys are taken; any other is refused with a 400.
    pub(crate) uuid_keys_only: bool,
}

#[derive(Default)]
struct Shop {
    next_id: u64,
    tickets: Vec<String>,
    records: HashMap<(String, String), (Value, u16, String)>,
}

#[derive(Clone)]
struct App {
    bugs: Bugs,
    shop: Arc<Mutex<Shop>>,
}

fn answer(status: u16, body: String, replayed: bool) -> Response {
    let mut response = (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body,
    )
        .into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", "true".parse().unwrap());
    }
    response
}

fn key_of(bugs: Bugs, headers: &HeaderMap) -> Result<Option<String>, ()> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let value = value.to_str().map_err(|_| ())?;
    if bugs.uuid_keys_only && !lab::check::target::is_uuid(value) {
        return Err(());
    }
    if bugs.opaque_keys {
        return Ok(Some(value.to_owned()));
    }
    match value.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"').map(|k| Some(k.to_owned())).ok_or(()),
        None if value.starts_with(|c: char| c.is_ascii_alphabetic()) => Ok(Some(value.to_owned())),
        None => Err(()),
    }
}

async fn create(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    keyed(&app, "tickets", "title", &headers, &body)
}

async fn comment(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    keyed(&app, "comments", "text", &headers, &body)
}

/// The idempotency layer around one endpoint: `operation` names it, `required` is the field its
/// validation asks for; only tickets are counted.
fn keyed(
    app: &App,
    operation: &str,
    required: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let Some(caller) = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
    else {
        return answer(401, "{}".into(), false);
    };
    let key = if app.bugs.no_key {
        None
    } else {
        match key_of(app.bugs, headers) {
            Ok(Some(key)) => Some(key),
            Ok(None) => return answer(400, r#"{"error":"no key"}"#.into(), false),
            Err(()) => return answer(400, r#"{"error":"bad key"}"#.into(), false),
        }
    };
    let payload: Option<Value> = serde_json::from_slice(body).ok();
    let mut shop = app.shop.lock().unwrap();
    let scope = |key: &str| {
        let who = if app.bugs.unscoped {
            ""
        } else {
            caller.as_str()
        };
        let what = if app.bugs.operation_blind {
            ""
        } else {
            operation
        };
        (format!("{who}/{what}"), key.to_owned())
    };
    if let Some(key) = &key
        && let Some((first, status, text)) = shop.records.get(&scope(key)).cloned()
    {
        if app.bugs.conflict_on_replay {
            return answer(409, r#"{"error":"in progress"}"#.into(), false);
        }
        if payload.as_ref() != Some(&first) && !app.bugs.accept_changed {
            return answer(422, r#"{"error":"key reused"}"#.into(), false);
        }
        return answer(status, text, true);
    }
    let valid = payload
        .as_ref()
        .and_then(|p| p[required].as_str())
        .is_some_and(|title| !title.is_empty());
    if !valid {
        let text = r#"{"error":"a title is required"}"#.to_owned();
        if let (Some(key), true, Some(payload)) = (&key, app.bugs.burn_on_4xx, &payload) {
            shop.records
                .insert(scope(key), (payload.clone(), 400, text.clone()));
        }
        return answer(400, text, false);
    }
    shop.next_id += 1;
    let id = shop.next_id;
    if operation == "tickets" {
        shop.tickets.push(caller.clone());
    }
    let text = json!({"id": id}).to_string();
    if let (Some(key), Some(payload)) = (&key, payload) {
        shop.records
            .insert(scope(key), (payload, 201, text.clone()));
    }
    answer(201, text, false)
}

/// Every ticket without credentials; with them, the caller's own (so that the check can see that
/// the service tells its callers apart).
async fn count(State(app): State<App>, headers: HeaderMap) -> Response {
    let caller = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let shop = app.shop.lock().unwrap();
    let n = shop
        .tickets
        .iter()
        .filter(|owner| caller.is_none_or(|c| c == owner.as_str()))
        .count();
    answer(200, json!({ "count": n }).to_string(), false)
}

/// The service on a loopback port, served by its own runtime on its own thread for the test's
/// life; returns its base URL.
pub(crate) fn start_shop(bugs: Bugs) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = App {
        bugs,
        shop: Arc::new(Mutex::new(Shop::default())),
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
                .route("/tickets", post(create))
                .route("/comments", post(comment))
                .route("/count", get(count))
                .with_state(app);
            axum::serve(listener, router).await.unwrap();
        });
    });
    url
}

pub(crate) const SHOP_TARGET: &str = r#"
[service]
base_url = "http://127.0.0.1:9"
timeout_ms = 5000

[create]
path = "/tickets"
headers = { "Content-Type" = "application/json" }
body = { title = "{{title}}", priority = "{{priority}}", tags = ["{{priority}}", "printer"] }
fields = { title = "Printer jammed", priority = "high" }
vary = { title = "text" }

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
request = { path = "/count", json_pointer = "/count", caller = "each" }

[other_endpoint]
path = "/comments"
headers = { "Content-Type" = "application/json" }
body = { text = "{{text}}" }
fields = { text = "Seen on floor two as well" }
vary = { text = "text" }

[errors]
validation = { fields = { title = "" } }

[load]
fresh_rounds = 4
completed_rounds = 2
callers = 6
"#;

fn check_shop(bugs: Bugs) -> Report {
    let url = start_shop(bugs);
    let overrides = Overrides {
        base_url: Some(url),
        allow_remote: false,
        upstream_port: None,
    };
    let target = Target::parse(SHOP_TARGET, Path::new("shop.toml"), &overrides).unwrap();
    lab::check::run(target).unwrap()
}

fn failed(report: &Report) -> Vec<&'static str> {
    report.failed().map(|point| point.name).collect()
}

fn observed_in(report: &Report, point: &str) -> String {
    report
        .points
        .iter()
        .find(|p| p.name == point)
        .unwrap()
        .checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.observed.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_correct_service_passes_and_each_planted_bug_fails_its_own_point() {
    let correct = check_shop(Bugs::default());
    assert!(correct.passed, "{correct}");
    assert!(failed(&correct).is_empty());

    let unscoped = check_shop(Bugs {
        unscoped: true,
        ..Bugs::default()
    });
    assert_eq!(failed(&unscoped), ["other-caller"], "{unscoped}");
    assert!(
        observed_in(&unscoped, "other-caller").contains("DATA LEAK"),
        "{unscoped}"
    );

    let changed = check_shop(Bugs {
        accept_changed: true,
        ..Bugs::default()
    });
    assert_eq!(failed(&changed), ["changed-payload"], "{changed}");
    assert!(
        observed_in(&changed, "changed-payload").contains("answered as a replay"),
        "{changed}"
    );

    let burned = check_shop(Bugs {
        burn_on_4xx: true,
        ..Bugs::default()
    });
    assert_eq!(failed(&burned), ["error-then-corrected"], "{burned}");
    assert!(
        observed_in(&burned, "error-then-corrected").contains("burned"),
        "{burned}"
    );

    let conflict = check_shop(Bugs {
        conflict_on_replay: true,
        ..Bugs::default()
    });
    // Every point that retries a completed key sees the 409; the retry-replays point names it.
    assert!(failed(&conflict).contains(&"retry-replays"), "{conflict}");
    assert!(
        failed(&conflict).contains(&"concurrent-completed-key"),
        "{conflict}"
    );
    assert!(
        observed_in(&conflict, "retry-replays").contains("409"),
        "{conflict}"
    );
    assert!(
        observed_in(&conflict, "concurrent-completed-key")
            .contains("in-progress status for a completed key"),
        "{conflict}"
    );

    let blind = check_shop(Bugs {
        operation_blind: true,
        ..Bugs::default()
    });
    assert_eq!(failed(&blind), ["other-endpoint"], "{blind}");
    assert!(
        observed_in(&blind, "other-endpoint").contains("collided across operations"),
        "{blind}"
    );

    let no_key = check_shop(Bugs {
        no_key: true,
        ..Bugs::default()
    });
    for point in [
        "retry-replays",
        "reply-dropped",
        "concurrent-fresh-key",
        "key-forms",
    ] {
        assert!(failed(&no_key).contains(&point), "{point}: {no_key}");
    }
}

#[test]
fn a_point_reports_every_sub_check_not_only_the_first_failure() {
    // Unscoped keys give bob alice's ticket: the leak, the missing effect and bob's retry are
    // each reported, and alice's own retry still passes.
    let report = check_shop(Bugs {
        unscoped: true,
        ..Bugs::default()
    });
    let scope = report
        .points
        .iter()
        .find(|p| p.name == "other-caller")
        .unwrap();
    let failures = scope.checks.iter().filter(|c| !c.passed).count();
    assert!(failures >= 3, "{report}");
    assert!(
        scope
            .checks
            .iter()
            .any(|c| c.passed && c.what.contains("alice's retry"))
    );
    assert_eq!(scope.verdict, Verdict::Fail);
}

#[test]
fn the_json_report_carries_every_point_and_the_history_and_exit_one_on_a_failure() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("shop.toml");
    std::fs::write(&file, SHOP_TARGET).unwrap();
    let file = file.to_str().unwrap();
    let good = lab(&[
        "check",
        "--target",
        file,
        "--json",
        "--url",
        &start_shop(Bugs::default()),
    ]);
    assert_eq!(good.status.code(), Some(0), "{}", text(&good.stderr));
    let json: Value = serde_json::from_slice(&good.stdout).unwrap();
    assert_eq!(json["passed"], json!(true));
    assert_eq!(json["draft"], json!(lab::check::report::DRAFT));
    let points = json["points"].as_array().unwrap();
    assert!(
        points
            .iter()
            .any(|p| p["name"] == "crash" && p["verdict"] == "NOT_COVERED")
    );
    let history = json["history"].as_array().unwrap();
    assert!(history.len() > 50, "{}", history.len());
    assert!(history.iter().any(|e| e["answer"]["kind"] == "hung_up"));

    let leaky = Bugs {
        unscoped: true,
        ..Bugs::default()
    };
    let bad = lab(&["check", "--target", file, "--url", &start_shop(leaky)]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(text(&bad.stdout).contains("DATA LEAK"));
    assert!(
        text(&bad.stderr).contains("other-caller"),
        "{}",
        text(&bad.stderr)
    );
}

/// A port on 127.0.0.1 that counts the connections made to it.
pub(crate) struct Listener {
    listener: std::net::TcpListener,
    pub(crate) url: String,
}

impl Listener {
    pub(crate) fn new() -> Listener {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        Listener { listener, url }
    }

    pub(crate) fn connections(&self) -> usize {
        std::iter::from_fn(|| self.listener.accept().ok()).count()
    }
}

#[test]
fn bad_target_files_are_refused_naming_the_field_and_nothing_is_sent() {
    let listener = Listener::new();
    let good = SHOP_TARGET.replace("http://127.0.0.1:9", &listener.url);
    let cases = [
        (
            good.replace("path = \"/tickets\"", "pth = \"/tickets\""),
            "pth",
        ),
        (
            good.replace("json_pointer = \"/id\"", "json_pointer = \"id\""),
            "identity.json_pointer",
        ),
        (
            good.replace("form = \"sf-string\"", "form = \"quoted\""),
            "key.form",
        ),
        (good.replace("{{title}}", "{{titel}}"), "create.body"),
        (
            good.replace("Bearer bob", "Bearer alice"),
            "callers[1].headers",
        ),
        (
            good.replace("callers = 6", "callers = 100000"),
            "load.callers",
        ),
        (
            good.replace("caller = \"each\"", "caller = \"carol\""),
            "count.request.caller",
        ),
        (
            good.replace("[errors]\n", "[errors]\nserver = {}\n"),
            "errors.server",
        ),
        (
            good.replace(&listener.url, "http://192.0.2.7:80"),
            "service.base_url",
        ),
        (
            "[service]\nbase_url = \"http://127.0.0.1:1\"\n".to_owned(),
            "[create]",
        ),
        ("not toml at all = = =".to_owned(), "shop.toml"),
    ];
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("shop.toml");
    for (content, field) in cases {
        std::fs::write(&file, &content).unwrap();
        let output = lab(&["check", "--target", file.to_str().unwrap()]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{field}: {stderr}");
        assert!(stderr.contains(field), "expected {field} in: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(output.stdout.is_empty());
    }
    // Options of the adapter route are refused with a target, not ignored.
    std::fs::write(&file, &good).unwrap();
    for extra in [["--token", "t"], ["--rounds", "7"]] {
        let mut args = vec!["check", "--target", file.to_str().unwrap()];
        args.extend(extra);
        let output = lab(&args);
        assert_eq!(output.status.code(), Some(2), "{extra:?}");
        assert!(text(&output.stderr).contains(extra[0]));
    }
    let missing = lab(&["check", "--target", "/nonexistent/target.toml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(listener.connections(), 0, "something was sent");
    // A valid file and no service: one line naming the address, status 1, not a report of
    // failed points.
    let closed = {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", port.local_addr().unwrap())
    };
    let absent = lab(&[
        "check",
        "--target",
        file.to_str().unwrap(),
        "--url",
        &closed,
    ]);
    assert_eq!(absent.status.code(), Some(1), "{}", text(&absent.stderr));
    assert!(
        text(&absent.stderr).contains(&closed),
        "{}",
        text(&absent.stderr)
    );
    assert!(absent.stdout.is_empty());
}

#[test]
fn init_writes_a_starting_file_that_validates_and_never_replaces_one() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("new.toml");
    let path = file.to_str().unwrap();
    let written = lab(&["check", "--target", path, "--init", "http://127.0.0.1:8123"]);
    assert_eq!(written.status.code(), Some(0), "{}", text(&written.stderr));
    let content = std::fs::read_to_string(&file).unwrap();
    assert!(content.contains("base_url = \"http://127.0.0.1:8123\""));
    Target::parse(&content, &file, &Overrides::default()).unwrap();
    let again = lab(&["check", "--target", path, "--init", "http://127.0.0.1:9999"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains("exists"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), content);
    let remote = lab(&[
        "check",
        "--target",
        folder.path().join("r.toml").to_str().unwrap(),
        "--init",
        "http://192.0.2.7:80",
    ]);
    assert_eq!(remote.status.code(), Some(2));
    assert!(!folder.path().join("r.toml").exists());
}

#[test]
fn the_openapi_description_documents_every_admin_endpoint_with_the_statuses_it_answers() {
    use lab::check::http::{Outgoing, Wire};
    let server = LabServer::start(&[]);
    let port: u16 = server.url.rsplit(':').next().unwrap().parse().unwrap();
    let wire = Wire::new("127.0.0.1", port, "", std::time::Duration::from_secs(10));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let send = |method: &str, path: &str, headers: &[(&str, &str)]| {
        let outgoing = Outgoing {
            method: method.to_owned(),
            path: path.to_owned(),
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: Vec::new(),
        };
        runtime.block_on(wire.send(&outgoing))
    };
    let spec = send("GET", "/openapi.json", &[]);
    let lab::check::history::Answer::Reply { body, .. } = spec else {
        panic!("no OpenAPI: {spec:?}")
    };
    let spec: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        spec["components"]["securitySchemes"]["adminToken"]["name"],
        json!("Lab-Admin-Token")
    );
    let admin = ("Lab-Admin-Token", "admin-token");
    let caller = ("Authorization", "Bearer token-a");
    let key = ("Idempotency-Key", "\"forget-me\"");
    // Each admin route with its credentials, and the status it answers on this server (started
    // without retention, so a prune is refused with 400).
    type Route<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, u16);
    let routes: [Route; 5] = [
        ("GET", "/admin/tickets", vec![admin], 200),
        ("GET", "/admin/records", vec![admin], 200),
        ("DELETE", "/admin/records", vec![admin, caller, key], 200),
        ("POST", "/admin/reset", vec![admin], 200),
        ("POST", "/admin/prune", vec![admin], 400),
    ];
    for (method, path, headers, expected) in routes {
        let operation = &spec["paths"][path][method.to_ascii_lowercase()];
        assert!(operation.is_object(), "{method} {path} is not documented");
        let documented = |status: u16| operation["responses"][status.to_string()].is_object();
        let with = send(method, path, &headers);
        assert_eq!(with.status(), Some(expected), "{method} {path}: {with:?}");
        assert!(
            documented(expected),
            "{method} {path}: {expected} not documented"
        );
        let without = send(method, path, &[caller]);
        assert_eq!(without.status(), Some(401), "{method} {path}: {without:?}");
        assert!(documented(401), "{method} {path}: 401 not documented");
    }
}
