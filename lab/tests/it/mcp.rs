//! `lab mcp`: the seven scenarios through the Rust MCP adapter, and the official Python SDK
//! driving the server over stdio and over Streamable HTTP.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use lab::mcp::McpTool;
use lab::mcp::client::StdioServer;
use lab::{CreateRequest, Error, Fault, Outcome, SqliteStore, TicketTool};

use crate::repository_root;

const LAB: &str = env!("CARGO_BIN_EXE_lab");

/// The Python interpreter of a venv with the `mcp` package, named by this variable.
const PYTHON_VARIABLE: &str = "LAB_MCP_PYTHON";
/// Set to 1 (CI does) to fail instead of skipping when there is no such interpreter.
const REQUIRE_VARIABLE: &str = "LAB_REQUIRE_MCP_CLIENT";

fn lab_stdout(args: &[&str]) -> String {
    let output = Command::new(LAB).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "lab {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn the_suite_over_mcp_prints_the_seven_lines_of_the_sqlite_run() {
    let folder = tempfile::tempdir().unwrap();
    let sqlite = folder.path().join("sqlite.json");
    let mcp = folder.path().join("mcp.json");
    let over_sqlite = lab_stdout(&["--output", sqlite.to_str().unwrap()]);
    let over_mcp = lab_stdout(&["--adapter", "mcp", "--output", mcp.to_str().unwrap()]);
    assert_eq!(over_mcp, over_sqlite);
    assert_eq!(
        over_mcp.lines().count(),
        8,
        "seven scenario lines and PASS:\n{over_mcp}"
    );
    assert!(over_mcp.ends_with("PASS: 7 scenarios\n"));
    // The evidence files differ only in the backend's name.
    let evidence = |path: &Path| std::fs::read_to_string(path).unwrap();
    assert_eq!(
        evidence(&mcp).replace("\"mcp\"", "\"sqlite\""),
        evidence(&sqlite)
    );
}

fn lab_server(admin_token: &str) -> McpTool {
    McpTool::spawn(&StdioServer::lab(PathBuf::from(LAB), "tests", admin_token)).unwrap()
}

#[test]
fn a_lost_reply_over_stdio_is_an_unknown_outcome_and_the_same_key_replays() {
    let tool = lab_server("admin-token");
    let (scope, key, payload) = crate::sample();
    let request = CreateRequest::keyed(&scope, &key, &payload);

    let lost = tool.create(request.with_fault(Fault::LoseReply));
    assert!(
        matches!(lost, Err(Error::OutcomeUnknown { .. })),
        "{lost:?}"
    );
    // The server committed before it kept silent.
    assert_eq!(tool.ticket_ids().unwrap(), [1]);
    assert_eq!(tool.count_records().unwrap(), 1);

    assert_eq!(tool.create(request).unwrap(), Outcome::Replayed(1.into()));
    assert_eq!(tool.ticket_ids().unwrap(), [1]);
}

#[test]
fn a_changed_payload_over_mcp_is_a_conflict_and_writes_nothing() {
    let tool = lab_server("admin-token");
    let (scope, key, payload) = crate::sample();
    let created = tool.create(CreateRequest::keyed(&scope, &key, &payload));
    assert_eq!(created.unwrap(), Outcome::Created(1.into()));

    let changed = payload.with_field("priority", lab::serde_json::json!("urgent"));
    let conflict = tool.create(CreateRequest::keyed(&scope, &key, &changed));
    assert!(
        matches!(conflict, Err(Error::PayloadConflict { .. })),
        "{conflict:?}"
    );
    assert_eq!(tool.ticket_ids().unwrap(), [1]);
    assert_eq!(tool.count_records().unwrap(), 1);
}

#[test]
fn a_wrong_admin_token_is_refused_by_the_admin_tools() {
    let mut server = StdioServer::lab(PathBuf::from(LAB), "tests", "right-token");
    server.admin_token = Some("wrong-token".to_owned());
    let tool = McpTool::spawn(&server).unwrap();
    let err = tool.count_records().unwrap_err();
    assert!(err.to_string().contains("unauthorized"), "{err}");
}

/// The venv's python, or `None` after a loud skip; a failure when CI requires the client.
///
/// `LAB_MCP_PYTHON` names it; else the clients' venv that `.ci/run` makes from
/// `lab/tests/clients/requirements.txt` (`LAB_CLIENTS_VENV`), which pins `mcp` too. CI's
/// `LAB_REQUIRE_CLIENTS=1` requires it as `LAB_REQUIRE_MCP_CLIENT=1` does.
fn python(test: &str) -> Option<PathBuf> {
    let named = std::env::var_os(PYTHON_VARIABLE)
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("LAB_CLIENTS_VENV")
                .filter(|path| !path.is_empty())
                .map(|venv| PathBuf::from(venv).join("bin/python"))
        });
    let required = [REQUIRE_VARIABLE, "LAB_REQUIRE_CLIENTS"]
        .iter()
        .any(|variable| std::env::var(variable).as_deref() == Ok("1"));
    match named {
        Some(path) => Some(path),
        None if required => panic!(
            "{REQUIRE_VARIABLE}=1 or LAB_REQUIRE_CLIENTS=1, but neither {PYTHON_VARIABLE} nor \
             LAB_CLIENTS_VENV is set: point {PYTHON_VARIABLE} at a venv's python with the `mcp` \
             package (python3 -m venv target/mcp-venv && target/mcp-venv/bin/pip install \
             mcp==2.3.0)"
        ),
        None => {
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED: {test}: no MCP Python SDK. Set {PYTHON_VARIABLE}=PATH/TO/venv/bin/python \
                 (a venv with `pip install mcp==2.3.0`) or LAB_CLIENTS_VENV; {REQUIRE_VARIABLE}=1 \
                 makes this a failure ***\n"
            );
            None
        }
    }
}

/// Runs the Python client with `args`, prints its output (the transcript) and returns it.
fn run_python_client(python: &Path, args: &[&str]) -> String {
    let script = repository_root().join("lab/tests/clients/mcp_client.py");
    let output = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the Python MCP client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The transcript must match the one the book shows (`src/mcp/python-session-*.txt`), so the
/// chapter cannot drift from a run. `LAB_BLESS=1` rewrites it.
pub fn compare_with_the_book(transcript: &str, name: &str) {
    let path = repository_root().join("src/mcp").join(name);
    if std::env::var("LAB_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, transcript).unwrap();
    }
    let shown = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        shown,
        transcript,
        "{} differs from the run; rerun with LAB_BLESS=1 and review the diff",
        path.display()
    );
}

fn stored_titles(database: &Path) -> Vec<String> {
    let store = SqliteStore::open(database).unwrap();
    let mut titles: Vec<String> = store
        .tickets_of("support-agent")
        .unwrap()
        .into_iter()
        .map(|ticket| {
            let payload: lab::serde_json::Value =
                lab::serde_json::from_str(&ticket.payload).unwrap();
            payload["title"].as_str().unwrap().to_owned()
        })
        .collect();
    titles.sort();
    titles
}

#[test]
fn the_python_sdk_over_stdio_lists_creates_replays_conflicts_and_recovers_a_lost_reply() {
    let Some(python) = python("the_python_sdk_over_stdio_...") else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("tickets.db");
    let transcript = run_python_client(&python, &["stdio", LAB, database.to_str().unwrap()]);
    assert!(transcript.ends_with("PASS: 26 checks\n"), "{transcript}");
    // What the server stored: one ticket per intention, whatever the retries and sessions.
    assert_eq!(
        stored_titles(&database),
        ["Lost reply", "Queue backlog", "Sixteen callers"]
    );
    compare_with_the_book(&transcript, "python-session-stdio.txt");
}

/// `lab mcp --transport http --faults` on `database`, for callers support-agent (`token-a`) and
/// other-agent (`token-b`); killed when dropped.
pub struct HttpServer {
    child: Child,
    /// The endpoint it printed, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    database: PathBuf,
}

impl HttpServer {
    /// Starts it and reads the URL it prints.
    pub fn start(database: &Path) -> HttpServer {
        HttpServer::start_with(database, &[])
    }

    /// Starts it with `extra` options (such as `--admin-token T`).
    pub fn start_with(database: &Path, extra: &[&str]) -> HttpServer {
        let mut child = Command::new(LAB)
            .args(["mcp", "--transport", "http", "--faults", "--database"])
            .arg(database)
            .args([
                "--caller",
                "support-agent=token-a",
                "--caller",
                "other-agent=token-b",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        HttpServer {
            child,
            url: line.trim().to_owned(),
            database: database.to_owned(),
        }
    }

    /// Every ticket in its database, read behind the server's back.
    pub fn ticket_ids(&self) -> Vec<lab::TicketId> {
        SqliteStore::open(&self.database)
            .unwrap()
            .ticket_ids()
            .unwrap()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_python_sdk_over_streamable_http_keeps_callers_apart_and_recovers_a_lost_reply() {
    let Some(python) = python("the_python_sdk_over_streamable_http_...") else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("tickets.db");
    let server = HttpServer::start(&database);
    assert!(
        server.url.starts_with("http://127.0.0.1:"),
        "{}",
        server.url
    );
    let transcript = run_python_client(&python, &["http", &server.url, "token-a", "token-b"]);
    drop(server);
    assert!(transcript.ends_with("PASS: 27 checks\n"), "{transcript}");
    assert_eq!(
        stored_titles(&database),
        ["Lost reply", "Queue backlog", "Sixteen callers"]
    );
    // The URL's port changes from run to run; the rest must match the book.
    compare_with_the_book(&transcript, "python-session-http.txt");
}

/// POSTs `body` to an MCP endpoint with `token`, on the lab's own HTTP client; the status and
/// the body's text.
fn post_json(url: &str, token: &str, body: &str) -> (u16, String) {
    let uri: lab::http::blocking::Uri = url.parse().unwrap();
    let address = uri.authority().unwrap().as_str().to_owned();
    let client =
        lab::http::blocking::BlockingClient::new(&address, std::time::Duration::from_secs(10))
            .unwrap();
    let request = lab::http::blocking::Request::post(uri.path())
        .header("host", &address)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned().into())
        .unwrap();
    let answer = client.send(request, false).expect("an answer");
    (
        answer.status,
        String::from_utf8_lossy(&answer.body).into_owned(),
    )
}

#[test]
fn an_http_request_without_a_known_token_is_refused_before_the_mcp_layer() {
    let folder = tempfile::tempdir().unwrap();
    let server = HttpServer::start(&folder.path().join("tickets.db"));
    let (status, text) = post_json(
        &server.url,
        "not-a-token",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    );
    assert_eq!(status, 401, "{text}");
}

#[test]
fn lab_check_over_mcp_passes_every_point_and_declares_per_request_scopes_not_covered() {
    let output = Command::new(LAB)
        .args(["check", "--adapter", "mcp", "--rounds", "20"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    // One server acts for one caller, whatever scope a request names: the caller comes from the
    // process or the token, never from an argument. So the point is declared, loudly, not covered.
    assert!(
        stdout.contains("NOT COVERED keys_are_scoped_by_caller_and_operation"),
        "{stdout}"
    );
    assert!(stdout.contains("0 failed, 1 not covered"), "{stdout}");
}

/// A raw JSON-RPC session with `lab mcp --faults` over stdio, for what no SDK would send: each
/// line written as given, each answer read with a bound on the wait.
struct RawStdio {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    answers: std::sync::mpsc::Receiver<lab::serde_json::Value>,
}

/// How long a raw session waits for an answer before the test fails (never reached when the
/// server answers; a hang fails instead of blocking the suite).
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

impl RawStdio {
    fn start(initialize: bool) -> RawStdio {
        let mut child = Command::new(LAB)
            .args(["mcp", "--faults"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, answers) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send
                    .send(lab::serde_json::from_str(&line).unwrap())
                    .is_err()
                {
                    return;
                }
            }
        });
        let mut session = RawStdio {
            stdin: child.stdin.take(),
            child,
            answers,
        };
        if initialize {
            session.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
            assert_eq!(session.answer()["id"], 0);
            session.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        }
        session
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn answer(&self) -> lab::serde_json::Value {
        self.answers
            .recv_timeout(ANSWER_WAIT)
            .expect("the server answered nothing: a hang")
    }

    /// Calls `name` with `arguments` (any JSON text) as request `id`, and returns the answer.
    fn call(&mut self, id: u64, name: &str, arguments: &str) -> lab::serde_json::Value {
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{arguments}}}}}"#
        ));
        let answer = self.answer();
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }

    /// A ping, answered: the session is still alive after whatever came before.
    fn still_answers(&mut self, id: u64) {
        self.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        let answer = self.answer();
        assert_eq!(
            (&answer["id"], &answer["result"]),
            (&lab::serde_json::json!(id), &lab::serde_json::json!({})),
            "{answer}"
        );
    }

    /// Closes stdin and waits (bounded) for the exit status.
    fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        wait_bounded(&mut self.child)
    }
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits at most [`ANSWER_WAIT`] for `child` to exit; a server that does not is killed and the
/// test fails.
fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + ANSWER_WAIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server did not exit");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn error_code(answer: &lab::serde_json::Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected a JSON-RPC error, got {answer}"))
}

#[test]
fn protocol_faults_over_stdio_get_json_rpc_errors_and_the_session_goes_on() {
    let mut session = RawStdio::start(true);
    let huge = format!(
        r#"{{"operation_key":"huge-1","title":"{}"}}"#,
        "x".repeat(lab::mcp::server::MAX_ARGUMENT_BYTES)
    );
    let faults: [(&str, &str, String, i64); 6] = [
        (
            "an unknown tool",
            "delete_everything",
            "{}".to_owned(),
            -32602,
        ),
        (
            "a missing operation_key",
            "create_ticket",
            r#"{"title":"t"}"#.to_owned(),
            -32602,
        ),
        (
            "a mistyped title",
            "create_ticket",
            r#"{"operation_key":"k-1","title":7}"#.to_owned(),
            -32602,
        ),
        (
            "a mistyped operation_key",
            "create_ticket",
            r#"{"operation_key":["k"],"title":"t"}"#.to_owned(),
            -32602,
        ),
        ("huge arguments", "create_ticket", huge, -32602),
        // rmcp refuses params it cannot read as a tools/call before the handler runs.
        (
            "arguments that are not an object",
            "create_ticket",
            "[1, 2]".to_owned(),
            -32601,
        ),
    ];
    for (id, (what, tool, arguments, code)) in (1..).zip(faults) {
        let answer = session.call(id, tool, &arguments);
        assert_eq!(error_code(&answer), code, "{what}: {answer}");
        session.still_answers(100 + id);
    }
    // An unknown method, a batch (MCP has none since 2025-06-18), an unknown notification, a
    // line that is not JSON and a line over the limit: errors for all but the notification
    // (JSON-RPC answers none), and the session goes on after each.
    session.send(r#"{"jsonrpc":"2.0","id":20,"method":"tickets/steal"}"#);
    let unknown = session.answer();
    assert_eq!(
        (error_code(&unknown), &unknown["id"]),
        (-32601, &lab::serde_json::json!(20))
    );
    session.send(
        r#"[{"jsonrpc":"2.0","id":21,"method":"ping"},{"jsonrpc":"2.0","id":22,"method":"ping"}]"#,
    );
    assert_eq!(error_code(&session.answer()), -32600);
    session.send(r#"{"jsonrpc":"2.0","method":"notifications/whatever"}"#);
    session.send("{not json");
    let parse_error = session.answer();
    assert_eq!(
        (error_code(&parse_error), &parse_error["id"]),
        (-32700, &lab::serde_json::Value::Null),
        "{parse_error}"
    );
    session.send(&format!(
        r#"{{"jsonrpc":"2.0","id":25,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(lab::mcp::server::MAX_LINE_BYTES)
    ));
    let too_long = session.answer();
    assert_eq!(error_code(&too_long), -32700, "a line over the limit");
    session.still_answers(23);
    // Nothing was written by any of it: the first ticket is still to come.
    let created = session.call(
        24,
        "create_ticket",
        r#"{"operation_key":"k-1","title":"t","extra":1}"#,
    );
    assert_eq!(
        created["result"]["structuredContent"],
        lab::serde_json::json!({"ticket_id": 1, "replayed": false})
    );
    assert_eq!(session.close().code(), Some(0));
}

#[test]
fn an_operation_key_that_breaks_the_key_rule_is_an_invalid_key_result_and_writes_nothing() {
    let mut session = RawStdio::start(true);
    let too_long = "k".repeat(256);
    let bad_keys = ["", too_long.as_str(), "clé-1", " key-1", "key-1 ", "key\t1"];
    for (id, key) in (1..).zip(bad_keys) {
        let arguments = lab::serde_json::json!({"operation_key": key, "title": "t"});
        let answer = session.call(id, "create_ticket", &arguments.to_string());
        let result = &answer["result"];
        assert_eq!(result["isError"], true, "{key:?}: {answer}");
        assert_eq!(
            result["structuredContent"]["code"], "invalid_key",
            "{key:?}"
        );
    }
    let listed = session.call(10, "list_tickets", "{}");
    assert_eq!(
        listed["result"]["structuredContent"]["tickets"],
        lab::serde_json::json!([])
    );
    assert_eq!(session.close().code(), Some(0));
}

#[test]
fn a_call_before_initialize_is_refused_and_stdin_closing_then_exits_0() {
    let mut session = RawStdio::start(false);
    session.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_tickets","arguments":{}}}"#);
    let answer = session.answer();
    assert_eq!(
        (error_code(&answer), &answer["id"]),
        (-32602, &lab::serde_json::json!(1))
    );
    assert_eq!(session.close().code(), Some(0));
}

#[test]
fn a_cancelled_create_whose_reply_was_lost_gets_no_answer_and_its_retry_replays() {
    let mut session = RawStdio::start(true);
    session.send(r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"create_ticket","arguments":{"operation_key":"cancel-1","title":"t","lab_fault":"lose-reply"}}}"#);
    session.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9,"reason":"timed out"}}"#);
    // The next answer is the retry's: the cancelled request gets none (as MCP asks).
    let retry = session.call(
        10,
        "create_ticket",
        r#"{"operation_key":"cancel-1","title":"t"}"#,
    );
    // Whether the cancelled call's create committed before the retry ran is a race; either way
    // the key names one ticket, and both calls name it.
    let created = &retry["result"]["structuredContent"];
    assert_eq!(created["ticket_id"], 1, "{retry}");
    let again = session.call(
        11,
        "create_ticket",
        r#"{"operation_key":"cancel-1","title":"t"}"#,
    );
    assert_eq!(
        again["result"]["structuredContent"],
        lab::serde_json::json!({"ticket_id": 1, "replayed": true})
    );
    let listed = session.call(12, "list_tickets", "{}");
    let tickets = listed["result"]["structuredContent"]["tickets"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(tickets, 1, "{listed}");
    assert_eq!(session.close().code(), Some(0));
}

#[test]
fn sigterm_stops_the_stdio_server_and_the_http_server_with_exit_0() {
    let mut session = RawStdio::start(true);
    session.still_answers(1);
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    unsafe { libc::kill(session.child.id() as i32, libc::SIGTERM) };
    assert_eq!(wait_bounded(&mut session.child).code(), Some(0));

    // A SIGTERM sent the moment the address is printed (as a supervisor's script may) is a
    // clean stop too: the handlers are in place before the line. Repeated, since the window
    // this closes was narrow.
    for round in 0..10 {
        let folder = tempfile::tempdir().unwrap();
        let mut server = HttpServer::start(&folder.path().join("tickets.db"));
        // SAFETY: as above.
        unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
        assert_eq!(
            wait_bounded(&mut server.child).code(),
            Some(0),
            "lab mcp, round {round}"
        );

        let mut serve = Command::new(LAB)
            .args(["serve", "--port", "0", "--caller", "support-agent=token-a"])
            .arg("--database")
            .arg(folder.path().join("served.db"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(serve.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("listening on "), "{line:?}");
        // SAFETY: as above.
        unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) };
        assert_eq!(
            wait_bounded(&mut serve).code(),
            Some(0),
            "lab serve, round {round}"
        );
    }
}

#[test]
fn protocol_faults_over_http_are_answered_and_the_server_goes_on() {
    let folder = tempfile::tempdir().unwrap();
    let server = HttpServer::start(&folder.path().join("tickets.db"));
    let post = |body: &str| post_json(&server.url, "token-a", body);
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for (what, body) in [
        ("malformed JSON", "{not json".to_owned()),
        ("a batch", format!("[{ping},{ping}]")),
    ] {
        let (status, text) = post(&body);
        assert!((400..500).contains(&status), "{what}: {status} {text}");
        let (status, text) = post(ping);
        assert_eq!(status, 200, "after {what}: {text}");
    }
    // A body over the limit is refused from its Content-Length, before a byte of it is read.
    let authority = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp");
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    stream.set_read_timeout(Some(ANSWER_WAIT)).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer token-a\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\n\r\n",
        64 * 1024 * 1024
    )
    .unwrap();
    let mut status_line = String::new();
    BufReader::new(stream).read_line(&mut status_line).unwrap();
    assert!(status_line.starts_with("HTTP/1.1 413"), "{status_line}");
    let (status, text) = post(ping);
    assert_eq!(status, 200, "after a huge body: {text}");
}

#[test]
fn an_expired_key_over_mcp_is_an_expired_result_that_tells_the_model_what_to_do() {
    let tool = lab_server("admin-token");
    let (scope, key, payload) = crate::sample();
    let request = CreateRequest::keyed(&scope, &key, &payload);
    assert_eq!(tool.create(request).unwrap(), Outcome::Created(1.into()));
    // Retention prunes the record (a window of zero); a tombstone is left.
    assert_eq!(tool.expire_records().unwrap(), 1);
    let expired = tool.create(request);
    assert!(
        matches!(expired, Err(Error::KeyExpired { .. })),
        "{expired:?}"
    );
    // What the model reads: the code, and what to do.
    let mut arguments = payload.as_object().clone();
    arguments.insert("operation_key".to_owned(), key.as_str().into());
    let result = tool
        .call("create_ticket", arguments, lab::mcp::client::CALL_TIMEOUT)
        .unwrap();
    assert_eq!(result.is_error, Some(true));
    let content = result.structured_content.unwrap();
    assert_eq!(content["code"], "expired");
    let message = content["message"].as_str().unwrap();
    assert!(message.contains("Do not retry with a new key"), "{message}");
    assert!(message.contains("list_tickets"), "{message}");
    // Nothing was created again.
    assert_eq!(tool.ticket_ids().unwrap(), [1]);
}

#[test]
fn the_suite_over_mcp_streamable_http_observes_what_the_sqlite_run_observes() {
    let folder = tempfile::tempdir().unwrap();
    let server = HttpServer::start_with(
        &folder.path().join("tickets.db"),
        &["--admin-token", "admin-token"],
    );
    let operation = lab::fixture::built_in().unwrap();
    let endpoint = lab::mcp::HttpEndpoint {
        url: server.url.clone(),
        token: "token-a".to_owned(),
        admin_token: Some("admin-token".to_owned()),
    };
    let over_mcp = lab::suite::run(&operation, |_scenario| {
        let tool = McpTool::over_http(&endpoint)?;
        tool.reset()?;
        Ok(tool)
    })
    .unwrap();
    let over_sqlite = lab::backend::Backend::Sqlite.run_suite(&operation).unwrap();
    assert_eq!(over_mcp, over_sqlite);
}

/// A retry and a pruning pass at once: the retry must replay (the record still stood) or be
/// `expired` (it was pruned first), never make a second ticket. Before the MCP tools took the
/// service's claim, the retry checked for a tombstone, the pass pruned the record, and the retry
/// then found no record and created again.
#[test]
fn a_prune_racing_a_retry_over_mcp_never_makes_a_second_ticket() {
    let folder = tempfile::tempdir().unwrap();
    let server = lab::mcp::McpServer::start(&lab::mcp::McpOptions {
        transport: lab::mcp::Transport::Http {
            port: 0,
            callers: vec!["support-agent=token-a".parse().unwrap()],
        },
        database: Some(folder.path().join("tickets.db")),
        faults: false,
        admin_token: Some("admin-token".to_owned()),
    })
    .unwrap();
    let endpoint = lab::mcp::HttpEndpoint {
        url: server.url(),
        token: "token-a".to_owned(),
        admin_token: Some("admin-token".to_owned()),
    };
    let connect = || McpTool::over_http(&endpoint).unwrap();
    let (first, pruner) = (connect(), connect());
    let retries: Vec<McpTool> = (0..6).map(|_| connect()).collect();
    let scope = lab::Scope::new("support-agent", "create_ticket").unwrap();
    let payload = crate::sample().2;
    // Bounded in rounds and in time; the old code made a second ticket within a few dozen rounds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut rounds = 0;
    while rounds < 300 && std::time::Instant::now() < deadline {
        rounds += 1;
        let key = lab::OperationKey::try_from(format!("race-{rounds}")).unwrap();
        let request = CreateRequest::keyed(&scope, &key, &payload);
        assert!(matches!(first.create(request), Ok(Outcome::Created(_))));
        let barrier = std::sync::Barrier::new(retries.len() + 1);
        std::thread::scope(|threads| {
            for retry in &retries {
                let barrier = &barrier;
                threads.spawn(move || {
                    barrier.wait();
                    let answer = retry.create(request);
                    assert!(
                        matches!(
                            answer,
                            Ok(Outcome::Replayed(_)) | Err(Error::KeyExpired { .. })
                        ),
                        "round {rounds}: a retry got {answer:?}"
                    );
                });
            }
            barrier.wait();
            // The pass starts at a different moment of the retries' calls each round.
            std::thread::sleep(std::time::Duration::from_micros(150 * (rounds as u64 % 12)));
            pruner.expire_records().unwrap();
        });
        assert_eq!(
            first.ticket_ids().unwrap().len(),
            rounds,
            "round {rounds}: one key, more than one ticket"
        );
    }
    server.stop().unwrap();
}
