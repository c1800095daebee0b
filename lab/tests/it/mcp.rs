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
fn compare_with_the_book(transcript: &str, name: &str) {
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
        let mut child = Command::new(LAB)
            .args(["mcp", "--transport", "http", "--faults", "--database"])
            .arg(database)
            .args([
                "--caller",
                "support-agent=token-a",
                "--caller",
                "other-agent=token-b",
            ])
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

#[test]
fn an_http_request_without_a_known_token_is_refused_before_the_mcp_layer() {
    let folder = tempfile::tempdir().unwrap();
    let server = HttpServer::start(&folder.path().join("tickets.db"));
    let response = ureq::post(&server.url)
        .set("Authorization", "Bearer not-a-token")
        .set("Content-Type", "application/json")
        .set("Accept", "application/json, text/event-stream")
        .send_string(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    match response {
        Err(ureq::Error::Status(status, _)) => assert_eq!(status, 401),
        other => panic!("expected 401, got {other:?}"),
    }
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
