//! `lab check --target FILE` proves the file describes the service before it grades anything
//! (issue #32): each slip in a target file stops the check with exit status 2, naming the field
//! at fault, before any point runs; a service that ignores keys still calibrates, and its
//! duplicates stay findings.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use lab::serde_json::{self, Value, json};

use crate::http::LabServer;

/// What every calibration failure says first, after the file's name.
const MISMATCH: &str = "does not describe the service";

fn lab_in(folder: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(args)
        .current_dir(folder)
        .output()
        .expect("the lab binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `content` as `target.toml` in a fresh folder and checks `url` with it, from that
/// folder; returns the output and the folder (kept for the run's life).
fn check(content: &str, url: &str, extra: &[&str]) -> (Output, tempfile::TempDir) {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("target.toml");
    std::fs::write(&file, content).unwrap();
    let mut args = vec!["check", "--target", file.to_str().unwrap(), "--url", url];
    args.extend(extra);
    (lab_in(folder.path(), &args), folder)
}

/// Exit status 2, nothing graded (stdout empty), one short message naming `field` and each of
/// `also`.
fn assert_mismatch(output: &Output, field: &str, also: &[&str]) {
    let stderr = text(&output.stderr);
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(2),
        "expected exit 2 naming {field}:\n{stderr}\n{stdout}"
    );
    assert!(stdout.is_empty(), "a point was graded:\n{stdout}");
    assert!(stderr.contains(MISMATCH), "{stderr}");
    assert!(stderr.contains(field), "expected {field} in: {stderr}");
    for word in also {
        assert!(stderr.contains(word), "expected {word:?} in: {stderr}");
    }
    assert!(!stderr.contains("DATA LEAK"), "{stderr}");
    assert!(stderr.len() < 1500, "{} bytes: {stderr}", stderr.len());
}

fn shipped_target() -> String {
    std::fs::read_to_string(crate::repository_root().join("lab/targets/lab-serve.toml")).unwrap()
}

/// `lab serve` with the callers and the fault switch `lab/targets/lab-serve.toml` expects.
fn lab_serve() -> LabServer {
    lab_serve_with(&["--faults"])
}

/// `lab serve` with the two callers `lab/targets/lab-serve.toml` names, and `extra` arguments.
fn lab_serve_with(extra: &[&str]) -> LabServer {
    let mut args = vec![
        "serve",
        "--port",
        "0",
        "--caller",
        "alice=alice-token",
        "--caller",
        "bob=bob-token",
    ];
    args.extend(extra);
    LabServer::spawn(&args)
}

#[test]
fn an_identity_pointer_left_as_init_wrote_it_stops_the_check_naming_the_pointers_that_hold_ids() {
    // --init writes json_pointer = "/id"; lab serve names its tickets at /ticket_id. Today's
    // check compares an absent id with an absent id and reports a data leak.
    let server = lab_serve();
    let file = shipped_target().replace("json_pointer = \"/ticket_id\"", "json_pointer = \"/id\"");
    let (output, _folder) = check(&file, &server.url, &[]);
    assert_mismatch(&output, "identity.json_pointer", &["/ticket_id", "201"]);
}

#[test]
fn a_count_pointer_that_finds_no_list_stops_the_check_with_a_short_message() {
    let server = lab_serve();
    for pointer in ["/items", ""] {
        let file = shipped_target().replace(
            "json_pointer = \"/tickets\"",
            &format!("json_pointer = \"{pointer}\""),
        );
        let (output, _folder) = check(&file, &server.url, &[]);
        assert_mismatch(&output, "count.request.json_pointer", &["/tickets"]);
    }
}

#[test]
fn a_relative_sqlite_path_that_names_no_file_stops_the_check_naming_count_sql_sqlite() {
    let server = lab_serve();
    let file = shipped_target().replace(
        "request = { method = \"GET\", path = \"/tickets\", json_pointer = \"/tickets\", caller = \"each\" }",
        "sql = { sqlite = \"data/lab.sqlite\", query = \"SELECT COUNT(*) FROM tickets\" }",
    );
    assert!(file.contains("data/lab.sqlite"));
    let (output, _folder) = check(&file, &server.url, &[]);
    assert_mismatch(&output, "count.sql.sqlite", &["data/lab.sqlite"]);
}

#[test]
fn provocations_the_service_does_not_honour_stop_the_check_naming_errors_server() {
    // Without --faults, lab serve refuses the Lab-Fault header with a 400: the file's
    // [errors.server] does not provoke a 5xx on this service.
    let server = lab_serve_with(&[]);
    let (output, _folder) = check(&shipped_target(), &server.url, &[]);
    assert_mismatch(&output, "errors.server", &["400", "Lab-Fault"]);
}

// A small ticket service with switches that make it need what some real services need.

#[derive(Clone, Copy, Debug, Default)]
struct Needs {
    /// Keys must be UUIDs (quoted or bare); any other key is answered 500, as a middleware
    /// that parses the key as a UUID does.
    uuid_keys: bool,
    /// `priority` must be one of these.
    priorities: Option<&'static [&'static str]>,
    /// The key is not read: every request is a new ticket.
    ignore_keys: bool,
}

#[derive(Default)]
struct Desk {
    next_id: u64,
    tickets: Vec<(String, u64)>,
    records: HashMap<(String, String), (Value, String)>,
}

#[derive(Clone)]
struct App {
    needs: Needs,
    desk: Arc<Mutex<Desk>>,
}

fn reply(status: u16, body: Value) -> Response {
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn caller(headers: &HeaderMap) -> Option<String> {
    headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::to_owned)
}

fn is_uuid(key: &str) -> bool {
    let groups: Vec<&str> = key.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
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

async fn create(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(who) = caller(&headers) else {
        return reply(401, json!({"error": "who are you?"}));
    };
    let key = headers
        .get("idempotency-key")
        .map(|v| key_text(v.to_str().unwrap_or_default()));
    let key = match (key, app.needs.ignore_keys) {
        (_, true) => None,
        (None, false) => return reply(400, json!({"error": "an Idempotency-Key is required"})),
        (Some(None), false) => return reply(400, json!({"error": "a malformed key"})),
        (Some(Some(key)), false) => {
            if app.needs.uuid_keys && !is_uuid(&key) {
                return reply(
                    500,
                    json!({"error": "badly formed hexadecimal UUID string"}),
                );
            }
            Some(key)
        }
    };
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return reply(400, json!({"error": "not JSON"}));
    };
    let mut desk = app.desk.lock().unwrap();
    if let Some(key) = &key
        && let Some((first, text)) = desk.records.get(&(who.clone(), key.clone())).cloned()
    {
        if first != payload {
            return reply(422, json!({"error": "key reused with another payload"}));
        }
        return reply(201, serde_json::from_str(&text).unwrap());
    }
    if payload["title"].as_str().is_none_or(str::is_empty) {
        return reply(400, json!({"error": "a title is required"}));
    }
    if let Some(allowed) = app.needs.priorities
        && !payload["priority"]
            .as_str()
            .is_some_and(|p| allowed.contains(&p))
    {
        return reply(
            422,
            json!({"error": format!("priority must be one of {}", allowed.join(", "))}),
        );
    }
    desk.next_id += 1;
    let id = desk.next_id;
    desk.tickets.push((who.clone(), id));
    let answer = json!({"ticket": {"ticket_id": id, "title": payload["title"]}, "status": "open"});
    if let Some(key) = key {
        desk.records
            .insert((who, key), (payload, answer.to_string()));
    }
    reply(201, answer)
}

async fn list(State(app): State<App>, headers: HeaderMap) -> Response {
    let Some(who) = caller(&headers) else {
        return reply(401, json!({"error": "who are you?"}));
    };
    let desk = app.desk.lock().unwrap();
    let mine: Vec<u64> = desk
        .tickets
        .iter()
        .filter(|(owner, _)| *owner == who)
        .map(|(_, id)| *id)
        .collect();
    reply(200, json!({ "tickets": mine }))
}

/// The service on a loopback port, on its own runtime and thread for the test's life.
fn start_desk(needs: Needs) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = App {
        needs,
        desk: Arc::new(Mutex::new(Desk::default())),
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
                .with_state(app);
            axum::serve(listener, router).await.unwrap();
        });
    });
    url
}

const DESK_TARGET: &str = r#"
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
json_pointer = "/ticket/ticket_id"

[[callers]]
name = "alice"
headers = { Authorization = "Bearer alice" }

[[callers]]
name = "bob"
headers = { Authorization = "Bearer bob" }

[count]
request = { path = "/tickets", json_pointer = "/tickets", caller = "each" }

[errors]
validation = { fields = { title = "" } }

[load]
fresh_rounds = 2
completed_rounds = 2
callers = 3
"#;

#[test]
fn the_desk_service_calibrates_and_passes_when_the_file_describes_it() {
    let (output, _folder) = check(DESK_TARGET, &start_desk(Needs::default()), &[]);
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    assert!(
        stdout.contains("calibration: the file describes the service"),
        "{stdout}"
    );
}

#[test]
fn an_enum_field_the_check_varies_and_the_service_refuses_stops_the_check_naming_the_field() {
    let url = start_desk(Needs {
        priorities: Some(&["low", "med", "high"]),
        ..Needs::default()
    });
    // The file lets the check vary priority as free text, which this service refuses.
    let file = DESK_TARGET.replace(
        "vary = { title = \"text\" }",
        "vary = { title = \"text\", priority = \"text\" }",
    );
    let (output, _folder) = check(&file, &url, &[]);
    assert_mismatch(&output, "create.vary.priority", &["422", "low, med, high"]);
}

#[test]
fn a_key_form_the_service_refuses_stops_the_check_naming_key_shape() {
    let url = start_desk(Needs {
        uuid_keys: true,
        ..Needs::default()
    });
    // The file asks for keys shaped as text; this service takes only UUIDs.
    let file = DESK_TARGET.replace(
        "form = \"sf-string\"",
        "form = \"sf-string\"\nshape = \"text\"",
    );
    let (output, _folder) = check(&file, &url, &[]);
    assert_mismatch(
        &output,
        "key.shape",
        &["500", "UUID", "key.shape = \"uuid\""],
    );
}

#[test]
fn a_replay_mark_no_answer_carries_stops_the_check_once_the_retries_have_replayed() {
    // lab serve marks its replays `Idempotent-Replayed: true`. A file naming another header, or
    // another value, looks like a service that never marks its replays until a retry is seen
    // replaying (the calibration's own retry names the first effect): then only the file can be
    // at fault, so nothing is graded and the check exits 2, naming the field.
    let server = lab_serve();
    let wrong_header = shipped_target().replace(
        "header = \"Idempotent-Replayed\"",
        "header = \"X-Replayed\"",
    );
    assert_ne!(wrong_header, shipped_target());
    let (output, _folder) = check(&wrong_header, &server.url, &[]);
    assert_mismatch(
        &output,
        "replay.header",
        &["X-Replayed", "replay.inferred", "was replayed"],
    );
    let wrong_value = shipped_target().replace("value = \"true\"", "value = \"yes\"");
    assert_ne!(wrong_value, shipped_target());
    let (output, _folder) = check(&wrong_value, &server.url, &[]);
    assert_mismatch(&output, "replay.value", &["\"yes\"", "\"true\""]);
    // A service that never replays: the missing mark is one more finding beside its duplicates,
    // not the file's fault.
    let url = start_desk(Needs {
        ignore_keys: true,
        ..Needs::default()
    });
    let marked = DESK_TARGET.replacen(
        "[identity]",
        "[replay]\nheader = \"Replayed\"\n\n[identity]",
        1,
    );
    assert_ne!(marked, DESK_TARGET);
    let (output, _folder) = check(&marked, &url, &["--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let replay = report["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "retry-replays")
        .unwrap();
    assert_eq!(replay["verdict"], json!("FAIL"), "{replay:#}");
    assert!(
        replay["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["passed"] == json!(false)
                && !c["what"].as_str().unwrap().contains("[replay]")),
        "a finding beside the mark: {replay:#}"
    );
}

#[test]
fn a_service_that_ignores_keys_calibrates_and_its_duplicates_are_findings() {
    let url = start_desk(Needs {
        ignore_keys: true,
        ..Needs::default()
    });
    let (output, _folder) = check(DESK_TARGET, &url, &["--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["calibration"]["passed"], json!(true), "{report:#}");
    let steps = report["calibration"]["steps"].as_array().unwrap();
    assert!(
        steps.iter().all(|s| s["passed"] == json!(true)),
        "{steps:#?}"
    );
    let verdict = |name: &str| {
        report["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["verdict"].clone())
    };
    assert_eq!(verdict("retry-replays"), Some(json!("FAIL")));
    assert_eq!(verdict("reply-dropped"), Some(json!("FAIL")));
    // The calibration's exchanges are in the history, marked as its own.
    let history = report["history"].as_array().unwrap();
    assert!(history.iter().any(|e| e["point"] == "calibration"));
}

/// Compares `shown` with the chapter's file `name`; `LAB_BLESS=1` rewrites it.
fn compare_with_the_chapter(shown: &str, name: &str) {
    let path = crate::repository_root()
        .join("src/check-your-own-tool")
        .join(name);
    if std::env::var("LAB_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, shown).unwrap();
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        written,
        shown,
        "{} differs from the run; rerun with LAB_BLESS=1 and review the diff",
        path.display()
    );
}

/// The block a chapter shows for a command and what it printed.
fn console(command: &str, output: &str) -> String {
    format!("```console\n$ {command}\n{}\n```\n", output.trim_end())
}

/// The chapter's steps from `--init` to a green calibration, each a real run against `lab
/// serve`: the starting file as `--init` writes it fails calibration three times, each time
/// naming the field to fix, then calibrates. Every output is the chapter's, compared here.
#[test]
fn the_chapters_walk_from_init_to_a_green_calibration_is_a_real_run() {
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("lab.sqlite");
    let server = lab_serve_with(&["--database", database.to_str().unwrap()]);
    let init = lab_in(
        folder.path(),
        &["check", "--target", "service.toml", "--init", &server.url],
    );
    assert_eq!(init.status.code(), Some(0), "{}", text(&init.stderr));
    let shown_url = "http://127.0.0.1:8080";
    compare_with_the_chapter(
        &console(
            &format!("lab check --target service.toml --init {shown_url}"),
            &text(&init.stderr),
        ),
        "calibration-init.txt",
    );
    let file = folder.path().join("service.toml");
    let shown_file = |file: &Path| {
        std::fs::read_to_string(file)
            .unwrap()
            .replace(&server.url, shown_url)
    };
    let written = shown_file(&file);
    assert!(written.contains(shown_url), "{written}");
    compare_with_the_chapter(&written, "service-init.toml");
    compare_with_the_chapter(&without_comments(&written), "service-init-tables.txt");
    let fixes = [
        (
            "json_pointer = \"\"",
            "json_pointer = \"/tickets\"",
            "count.request.json_pointer",
        ),
        (
            "json_pointer = \"/id\"",
            "json_pointer = \"/ticket_id\"",
            "identity.json_pointer",
        ),
        (
            "validation = { fields = { title = \"\" } }",
            "validation = { body_text = \"{\\\"title\\\": \\\"no closing brace\\\"\" }",
            "errors.validation",
        ),
    ];
    for (step, (from, to, field)) in fixes.iter().enumerate() {
        let output = lab_in(folder.path(), &["check", "--target", "service.toml"]);
        assert_mismatch(&output, field, &[]);
        let shown = console(
            "lab check --target service.toml",
            &format!("{}$ echo $?\n2", text(&output.stderr)),
        );
        compare_with_the_chapter(&shown, &format!("calibration-{}.txt", step + 1));
        let content = std::fs::read_to_string(&file).unwrap();
        assert!(content.contains(from), "{from} is not in the starting file");
        std::fs::write(&file, content.replacen(from, to, 1)).unwrap();
    }
    let output = lab_in(folder.path(), &["check", "--target", "service.toml"]);
    let stdout = text(&output.stdout);
    let calibration: Vec<&str> = stdout
        .lines()
        .skip_while(|line| !line.starts_with("calibration: "))
        .take_while(|line| !line.is_empty())
        .collect();
    assert!(
        calibration[0].starts_with("calibration: the file describes the service"),
        "{stdout}"
    );
    assert!(calibration.iter().skip(1).all(|l| l.starts_with("  ok ")));
    compare_with_the_chapter(
        &console(
            "lab check --target service.toml",
            &format!("...\n{}\n...", calibration.join("\n")),
        ),
        "calibration-green.txt",
    );
    // The file the steps end with is the one the chapter's report is of.
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    compare_with_the_chapter(&shown_file(&file), "service.toml");
}

/// The block the chapter shows of a target file: its tables and fields, without the comments,
/// one blank line between tables.
fn without_comments(file: &str) -> String {
    let mut shown = String::from("```toml\n");
    for line in file.lines() {
        let line = line.trim_end();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if line.starts_with('[') && shown.len() > "```toml\n".len() {
            shown.push('\n');
        }
        shown.push_str(line);
        shown.push('\n');
    }
    shown.push_str("```\n");
    shown
}

/// The fields a table of the reference chapter lists, from the rows after `marker`: each row's
/// first cell, in backticks.
fn fields_in_the_book(chapter: &str, marker: &str) -> Vec<String> {
    let mut fields: Vec<String> = chapter
        .split_once(marker)
        .unwrap_or_else(|| panic!("no {marker} in the chapter"))
        .1
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .filter_map(|row| row.split('`').nth(1).map(str::to_owned))
        .collect();
    fields.sort();
    fields
}

#[test]
fn the_reference_lists_every_field_the_parsers_accept_and_no_other() {
    let chapter =
        std::fs::read_to_string(crate::repository_root().join("src/target-file-reference.md"))
            .unwrap_or_default();
    for (marker, accepted) in [
        (
            "<!-- fields: http -->",
            lab::check::target::accepted_fields(),
        ),
        (
            "<!-- fields: mcp -->",
            lab::check::mcp::target::accepted_fields(),
        ),
    ] {
        let listed = fields_in_the_book(&chapter, marker);
        let missing: Vec<&String> = accepted.iter().filter(|f| !listed.contains(f)).collect();
        let extra: Vec<&String> = listed.iter().filter(|f| !accepted.contains(f)).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{marker}: the parser accepts, the book does not list: {missing:?}; the book lists, \
             the parser does not accept: {extra:?}"
        );
    }
}

/// `lab/targets/lab-mcp-stdio.toml` with `lab` this build, and each `(from, to)` applied.
fn mcp_stdio_target(changes: &[(&str, &str)]) -> String {
    let mut text =
        std::fs::read_to_string(crate::repository_root().join("lab/targets/lab-mcp-stdio.toml"))
            .unwrap()
            .replace(
                "\"lab\", \"mcp\"",
                &format!("{:?}, \"mcp\"", env!("CARGO_BIN_EXE_lab")),
            );
    for (from, to) in changes {
        assert!(text.contains(from), "no {from:?} in the MCP target");
        text = text.replace(from, to);
    }
    text
}

#[test]
fn an_mcp_file_with_a_wrong_identity_or_count_pointer_stops_before_any_point() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("target.toml");
    let run = |content: &str| {
        std::fs::write(&file, content).unwrap();
        lab_in(
            folder.path(),
            &["check", "--target", file.to_str().unwrap()],
        )
    };
    let identity = run(&mcp_stdio_target(&[(
        "structured_pointer = \"/ticket_id\"",
        "structured_pointer = \"/id\"",
    )]));
    assert_mismatch(
        &identity,
        "mcp.identity.structured_pointer",
        &["/ticket_id"],
    );
    let count = run(&mcp_stdio_target(&[(
        "structured_pointer = \"/tickets\"",
        "structured_pointer = \"/items\"",
    )]));
    assert_mismatch(&count, "mcp.count.tool.structured_pointer", &["/items"]);
    let validation = run(&mcp_stdio_target(&[(
        "validation = { title = 7 }",
        "validation = { title = \"a title the tool takes\" }",
    )]));
    assert_mismatch(&validation, "mcp.errors.validation", &[]);
    // A key argument the schema does not know, while it requires another: the key is
    // misnamed, and the message names the one to use, in one unbroken sentence.
    let key = run(&mcp_stdio_target(&[(
        "key_argument = \"operation_key\"",
        "key_argument = \"key\"",
    )]));
    assert_mismatch(
        &key,
        "mcp.tool.key_argument",
        &[
            "has no argument \"key\"",
            "key_argument = \"operation_key\"",
        ],
    );
    assert!(!text(&key.stderr).contains("   "), "{}", text(&key.stderr));
}
