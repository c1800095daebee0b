//! `lab runner`, the durable caller, against `lab serve` through `lab proxy`, all as processes.

use std::path::Path;
use std::process::{Command, Output};

use lab::TicketTool;
use lab::http::{HttpTarget, HttpTool};

use crate::http::LabServer;

const PAYLOAD: &str = r#"{"title": "Rotate the logs", "priority": "normal"}"#;

fn runner(database: &Path, url: &str, key: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lab"));
    command
        .args(["runner", "--database"])
        .arg(database)
        .args(["--url", url, "--token", "token-a", "--caller", "alice"]);
    if let Some(key) = key {
        command.args(["--key", key, "--payload", PAYLOAD]);
    }
    command.output().unwrap()
}

/// The runner's record of `key`: state and ticket id.
pub fn runner_record(database: &Path, key: &str) -> (String, Option<lab::TicketId>) {
    let db = rusqlite::Connection::open(database).unwrap();
    db.query_row(
        "SELECT state, ticket_id FROM operations WHERE key = ?1",
        [key],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .unwrap()
}

/// Every ticket on the service, read directly (not through the proxy).
pub fn service_tickets(server: &LabServer) -> Vec<lab::TicketId> {
    let target = HttpTarget::new(&server.url, "token-a", Some("admin-token")).unwrap();
    HttpTool::new(target).ticket_ids().unwrap()
}

#[test]
fn through_a_dropping_proxy_the_runner_retries_and_records_the_one_ticket() {
    let server = LabServer::start(&[]);
    let proxy = LabServer::spawn(&["proxy", "--upstream", &server.url, "--drop-first", "1"]);
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");

    let output = runner(&database, &proxy.url, Some("rotate-logs-1"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    // The first reply was lost on the wire; the retry with the same key got the replay.
    assert_eq!(
        stdout.trim(),
        "rotate-logs-1: succeeded, ticket 1, after 2 send(s)"
    );
    assert_eq!(service_tickets(&server), [1]);
    assert_eq!(
        runner_record(&database, "rotate-logs-1"),
        ("succeeded".to_owned(), Some(1.into()))
    );

    // Run again: nothing is pending, nothing is sent, still one ticket.
    let again = runner(&database, &proxy.url, None);
    assert!(again.status.success(), "{again:?}");
    assert_eq!(String::from_utf8_lossy(&again.stdout), "");
    assert_eq!(service_tickets(&server), [1]);
}

/// Runs `lab runner` with `token` against `url` and any `extra` arguments.
fn runner_with(database: &Path, url: &str, token: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["runner", "--database"])
        .arg(database)
        .args(["--url", url, "--token", token, "--caller", "alice"])
        .args(extra)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_runner_with_no_service_sends_nothing_holds_the_operation_and_resumes_it_with_the_same_key() {
    // A port nobody listens on: nothing can reach the service, so nothing can have taken effect.
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", unused.local_addr().unwrap());
    drop(unused);
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    let new = [
        "--key",
        "nobody-home",
        "--payload",
        PAYLOAD,
        "--attempts",
        "3",
    ];
    let output = runner_with(&database, &url, "token-a", &new);
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    let stdout = text(&output.stdout);
    assert!(
        stdout.starts_with(
            "nobody-home: held, still pending after 0 send(s): nothing accepts connections at"
        ),
        "{stdout}"
    );
    let stderr = text(&output.stderr);
    assert!(stderr.contains("held: nobody-home:"), "{stderr}");
    assert!(stderr.contains("fix --url"), "{stderr}");
    assert!(stderr.contains("goes out with the same key"), "{stderr}");
    assert_eq!(
        runner_record(&database, "nobody-home"),
        ("pending".to_owned(), None)
    );

    // The service comes up (here: somewhere else, so --url changes); the same file resumes it.
    let server = LabServer::start(&[]);
    let again = runner_with(&database, &server.url, "token-a", &[]);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert_eq!(
        text(&again.stdout),
        "resumed nobody-home: succeeded, ticket 1, after 1 send(s)\n"
    );
    assert_eq!(service_tickets(&server), [1]);
    assert_eq!(
        runner_record(&database, "nobody-home"),
        ("succeeded".to_owned(), Some(1.into()))
    );
}

/// Issue 46: the held line told a person to run `lab runner --database FILE` again, which
/// clap refuses (--token, --caller and --url are required), with the path unquoted. The command
/// it prints now is run here as printed, by a shell, from another folder, with a path that
/// holds a space and a quote: it resumes the operation with its key.
#[test]
fn the_held_lines_command_resumes_the_operation_when_run_as_printed() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = unused.local_addr().unwrap().port().to_string();
    let url = format!("http://127.0.0.1:{port}");
    drop(unused);
    let folder = tempfile::tempdir().unwrap();
    let inner = folder.path().join("runner's files");
    std::fs::create_dir(&inner).unwrap();
    let database = inner.join("my runner.sqlite");
    let new = ["--key", "quoted-1", "--payload", PAYLOAD, "--attempts", "2"];
    let output = runner_with(&database, &url, "token-a", &new);
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    let stderr = text(&output.stderr);
    let printed = stderr
        .split_once("Fix that and run `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(command, _)| command.to_owned())
        .unwrap_or_else(|| panic!("no command in {stderr}"));
    assert!(printed.starts_with("lab runner "), "{printed}");
    // The service comes up where the run looked for it.
    let database_text = folder.path().join("tickets.db");
    let server = LabServer::spawn(&[
        "serve",
        "--port",
        &port,
        "--database",
        database_text.to_str().unwrap(),
        "--caller",
        "alice=token-a",
        "--admin-token",
        "admin-token",
    ]);
    let lab = Path::new(env!("CARGO_BIN_EXE_lab"));
    let path = format!(
        "{}:{}",
        lab.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let again = Command::new("sh")
        .args(["-c", &printed])
        .env("PATH", path)
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0), "{printed}: {again:?}");
    assert_eq!(
        text(&again.stdout),
        "resumed quoted-1: succeeded, ticket 1, after 1 send(s)\n"
    );
    assert_eq!(service_tickets(&server), [1]);
    assert_eq!(
        runner_record(&database, "quoted-1"),
        ("succeeded".to_owned(), Some(1.into()))
    );
}

#[test]
fn a_refused_token_holds_the_operation_and_the_fixed_token_resumes_it_with_the_same_key() {
    let server = LabServer::start(&[]);
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    let new = ["--key", "wrong-token-1", "--payload", PAYLOAD];
    let output = runner_with(&database, &server.url, "token-zz", &new);
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    assert!(
        text(&output.stdout)
            .starts_with("wrong-token-1: held, still pending after 1 send(s): the service at"),
        "{output:?}"
    );
    assert!(
        text(&output.stderr)
            .contains("refuses the token given with --token (status 401): fix --token")
    );
    assert_eq!(
        runner_record(&database, "wrong-token-1"),
        ("pending".to_owned(), None)
    );
    assert_eq!(service_tickets(&server), Vec::<i64>::new());

    // The same command with the right token: the saved operation goes out, once.
    let fixed = runner_with(&database, &server.url, "token-a", &new);
    assert_eq!(fixed.status.code(), Some(0), "{fixed:?}");
    assert_eq!(
        text(&fixed.stdout),
        "resumed wrong-token-1: succeeded, ticket 1, after 2 send(s)\nwrong-token-1: succeeded, ticket 1, after 2 send(s)\n"
    );
    assert_eq!(service_tickets(&server), [1]);
    assert_eq!(
        runner_record(&database, "wrong-token-1"),
        ("succeeded".to_owned(), Some(1.into()))
    );
}

#[test]
fn a_url_whose_path_has_no_service_holds_the_operation_until_the_url_is_fixed() {
    let server = LabServer::start(&[]);
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    let wrong = format!("{}/api", server.url);
    let new = ["--key", "wrong-path-1", "--payload", PAYLOAD];
    let output = runner_with(&database, &wrong, "token-a", &new);
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    assert!(
        text(&output.stderr).contains("no ticket service answers at"),
        "{output:?}"
    );
    assert!(text(&output.stderr).contains("fix --url"), "{output:?}");
    assert_eq!(
        runner_record(&database, "wrong-path-1"),
        ("pending".to_owned(), None)
    );
    assert_eq!(service_tickets(&server), Vec::<i64>::new());

    let fixed = runner_with(&database, &server.url, "token-a", &[]);
    assert_eq!(fixed.status.code(), Some(0), "{fixed:?}");
    assert_eq!(
        text(&fixed.stdout),
        "resumed wrong-path-1: succeeded, ticket 1, after 2 send(s)\n"
    );
    assert_eq!(service_tickets(&server), [1]);
}

#[test]
fn an_unknown_outcome_needs_review_exits_4_and_says_what_to_look_for() {
    let server = LabServer::start(&[]);
    // Every reply is lost: the service commits, the runner never hears.
    let proxy = LabServer::spawn(&["proxy", "--upstream", &server.url, "--drop-first", "10"]);
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    let new = ["--key", "lost-1", "--payload", PAYLOAD, "--attempts", "2"];
    let output = runner_with(&database, &proxy.url, "token-a", &new);
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    assert!(
        text(&output.stdout).starts_with("lost-1: needs review: no answer after 2 send(s)"),
        "{output:?}"
    );
    let last = text(&output.stderr);
    assert!(
        last.trim_end().ends_with("Look on the service for a ticket of caller alice with key lost-1; the runner will not send it again unless told to with --resend lost-1."),
        "{last}"
    );
    assert_eq!(
        runner_record(&database, "lost-1"),
        ("needs_review".to_owned(), None)
    );
    // The key kept it to one ticket, which a person now finds.
    assert_eq!(service_tickets(&server), [1]);

    // A run without --resend sends nothing, and says the operation still needs a person.
    let again = runner_with(&database, &proxy.url, "token-a", &[]);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert!(
        text(&again.stderr).starts_with("still needs review: lost-1:"),
        "{again:?}"
    );
    assert_eq!(
        runner_record(&database, "lost-1"),
        ("needs_review".to_owned(), None)
    );

    // A person decides to send it again: the same key, so the service replays the one ticket.
    let direct = LabServer::spawn(&["proxy", "--upstream", &server.url, "--drop-first", "0"]);
    let resent = runner_with(&database, &direct.url, "token-a", &["--resend", "lost-1"]);
    assert_eq!(resent.status.code(), Some(0), "{resent:?}");
    assert_eq!(
        text(&resent.stdout),
        "resumed lost-1: succeeded, ticket 1, after 3 send(s)\n"
    );
    assert_eq!(
        runner_record(&database, "lost-1"),
        ("succeeded".to_owned(), Some(1.into()))
    );
    assert_eq!(service_tickets(&server), [1]);
}

#[test]
fn a_key_the_service_holds_with_another_payload_exits_3() {
    let server = LabServer::start(&[]);
    let folder = tempfile::tempdir().unwrap();
    let first = runner_with(
        &folder.path().join("a.sqlite"),
        &server.url,
        "token-a",
        &["--key", "shared", "--payload", PAYLOAD],
    );
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let second = folder.path().join("b.sqlite");
    let output = runner_with(
        &second,
        &server.url,
        "token-a",
        &["--key", "shared", "--payload", r#"{"title": "Else"}"#],
    );
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert!(
        text(&output.stderr)
            .contains("rejected: shared: the service holds this key with another payload")
    );
    assert_eq!(runner_record(&second, "shared").0, "rejected");
    assert_eq!(service_tickets(&server), [1]);
}

#[test]
fn a_key_the_service_saw_with_another_payload_is_rejected_and_not_retried() {
    use lab::http::{CallerToken, ServeOptions, TicketServer};
    use lab::runner::{RetryPolicy, Runner, State};
    use lab::{CreateRequest, Operation, OperationKey, Payload, Scope};

    let server = TicketServer::start(ServeOptions {
        callers: vec!["alice=token-a".parse::<CallerToken>().unwrap()],
        admin_token: Some("admin-token".to_owned()),
        workers: 2,
        ..ServeOptions::default()
    })
    .unwrap();
    let target = HttpTarget::new(&server.url(), "token-a", Some("admin-token")).unwrap();
    let direct = HttpTool::new(target.clone());
    let operation = Operation {
        scope: Scope::new("alice", "create_ticket").unwrap(),
        operation_key: OperationKey::try_from("shared-key").unwrap(),
        payload: Payload::new(lab::serde_json::json!({"title": "Second intent"})).unwrap(),
    };
    // Someone else already used the key, with another payload.
    let first = Payload::new(lab::serde_json::json!({"title": "First intent"})).unwrap();
    direct
        .create(CreateRequest::keyed(
            &operation.scope,
            &operation.operation_key,
            &first,
        ))
        .unwrap();

    let folder = tempfile::tempdir().unwrap();
    let runner = Runner::open(
        folder.path().join("runner.sqlite"),
        HttpTool::new(target),
        RetryPolicy::default(),
    )
    .unwrap();
    let saved = runner.submit(&operation).unwrap();
    assert!(
        matches!(&saved.state, State::Rejected { reason } if reason.contains("different payload")),
        "{saved:?}"
    );
    assert_eq!(saved.attempts, 1, "a 422 is final: no retry");
    assert_eq!(runner.operations().unwrap(), [saved]);
    assert_eq!(direct.ticket_ids().unwrap(), [1]);
}

/// Runs `lab runner` against the MCP server at `url` with `token`, for caller support-agent.
fn runner_over_mcp(database: &Path, url: &str, token: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["runner", "--database"])
        .arg(database)
        .args([
            "--mcp-url",
            url,
            "--token",
            token,
            "--caller",
            "support-agent",
        ])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn over_mcp_the_runner_creates_replays_and_rejects_as_over_http() {
    let folder = tempfile::tempdir().unwrap();
    let server = crate::mcp::HttpServer::start(&folder.path().join("tickets.db"));
    let database = folder.path().join("runner.sqlite");
    let new = ["--key", "mcp-1", "--payload", PAYLOAD];

    // The first reply is lost on purpose; the retry with the same key replays the one ticket.
    let lost = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["runner", "--database"])
        .arg(&database)
        .args([
            "--mcp-url",
            &server.url,
            "--token",
            "token-a",
            "--caller",
            "support-agent",
        ])
        .args(new)
        .env(lab::runner::FAULT_VARIABLE, "lose-reply")
        .output()
        .unwrap();
    assert_eq!(lost.status.code(), Some(0), "{lost:?}");
    assert_eq!(
        text(&lost.stdout),
        "mcp-1: succeeded, ticket 1, after 2 send(s)\n"
    );
    assert_eq!(
        runner_record(&database, "mcp-1"),
        ("succeeded".to_owned(), Some(1.into()))
    );
    assert_eq!(server.ticket_ids(), [1]);

    // Another runner file, the same key, another payload: rejected, exit 3, nothing written.
    let other = folder.path().join("other.sqlite");
    let conflict = runner_over_mcp(
        &other,
        &server.url,
        "token-a",
        &["--key", "mcp-1", "--payload", r#"{"title": "Else"}"#],
    );
    assert_eq!(conflict.status.code(), Some(3), "{conflict:?}");
    assert_eq!(runner_record(&other, "mcp-1").0, "rejected");
    assert_eq!(server.ticket_ids(), [1]);
}

#[test]
fn over_mcp_no_server_and_a_refused_token_hold_the_operation_and_a_fixed_run_sends_it_once() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}/mcp", unused.local_addr().unwrap());
    drop(unused);
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    let new = ["--key", "mcp-held", "--payload", PAYLOAD];

    let down = runner_over_mcp(&database, &nowhere, "token-a", &new);
    assert_eq!(down.status.code(), Some(5), "{down:?}");
    assert!(text(&down.stderr).contains("fix --mcp-url"), "{down:?}");
    assert_eq!(
        runner_record(&database, "mcp-held"),
        ("pending".to_owned(), None)
    );

    let server = crate::mcp::HttpServer::start(&folder.path().join("tickets.db"));
    let refused = runner_over_mcp(&database, &server.url, "token-zz", &[]);
    assert_eq!(refused.status.code(), Some(5), "{refused:?}");
    assert!(
        text(&refused.stderr)
            .contains("refuses the token given with --token (status 401): fix --token"),
        "{refused:?}"
    );
    assert_eq!(
        runner_record(&database, "mcp-held"),
        ("pending".to_owned(), None)
    );
    assert_eq!(server.ticket_ids(), Vec::<i64>::new());

    let fixed = runner_over_mcp(&database, &server.url, "token-a", &[]);
    assert_eq!(fixed.status.code(), Some(0), "{fixed:?}");
    assert_eq!(
        text(&fixed.stdout),
        "resumed mcp-held: succeeded, ticket 1, after 2 send(s)\n"
    );
    assert_eq!(server.ticket_ids(), [1]);
}

#[test]
fn over_mcp_an_expired_key_needs_review_and_exits_4() {
    let folder = tempfile::tempdir().unwrap();
    let server = crate::mcp::HttpServer::start_with(
        &folder.path().join("tickets.db"),
        &["--admin-token", "admin-token"],
    );
    let first = folder.path().join("first.sqlite");
    let new = ["--key", "mcp-old", "--payload", PAYLOAD];
    assert_eq!(
        runner_over_mcp(&first, &server.url, "token-a", &new)
            .status
            .code(),
        Some(0)
    );
    let admin = lab::mcp::McpTool::over_http(&lab::mcp::HttpEndpoint {
        url: server.url.clone(),
        token: "token-a".to_owned(),
        admin_token: Some("admin-token".to_owned()),
    })
    .unwrap();
    assert_eq!(admin.expire_records().unwrap(), 1);

    // A second runner file that never heard the answer sends the key again: expired.
    let second = folder.path().join("second.sqlite");
    let late = runner_over_mcp(&second, &server.url, "token-a", &new);
    assert_eq!(late.status.code(), Some(4), "{late:?}");
    assert!(
        text(&late.stdout).starts_with("mcp-old: needs review:"),
        "{late:?}"
    );
    assert_eq!(
        runner_record(&second, "mcp-old"),
        ("needs_review".to_owned(), None)
    );
    assert_eq!(server.ticket_ids(), [1]);
}

#[test]
fn over_mcp_bad_options_are_refused_with_exit_2_before_the_runner_file_exists() {
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    let new = ["--key", "k", "--payload", PAYLOAD];
    let cases: [(&[&str], Option<&str>, &str); 4] = [
        (
            &["--mcp-url", "http://example.com/mcp"],
            None,
            "not loopback",
        ),
        (&["--mcp-url", "http://127.0.0.1:0/mcp"], None, "port \"0\""),
        (
            &[
                "--mcp-url",
                "http://127.0.0.1:9/mcp",
                "--url",
                "http://127.0.0.1:9",
            ],
            None,
            "cannot be used with",
        ),
        (
            &["--mcp-url", "http://127.0.0.1:9/mcp"],
            Some("lose-everything"),
            "expected lose-reply",
        ),
    ];
    for (options, fault, why) in cases {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lab"));
        command
            .args(["runner", "--database"])
            .arg(&database)
            .args(options)
            .args(["--token", "token-a", "--caller", "support-agent"])
            .args(new);
        if let Some(fault) = fault {
            command.env(lab::runner::FAULT_VARIABLE, fault);
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{options:?}: {output:?}");
        assert!(
            text(&output.stderr).contains(why),
            "{options:?}: {}",
            text(&output.stderr)
        );
        assert!(!database.exists(), "{options:?} made the runner file");
    }
}

/// The runner over MCP as the book shows it (`src/mcp/runner-session.txt`, rewritten with
/// `LAB_BLESS=1`): a lost first reply, a run with nothing left to do, a refused token held.
#[test]
fn over_mcp_the_runner_session_the_book_shows_comes_from_this_run() {
    let folder = tempfile::tempdir().unwrap();
    let server = crate::mcp::HttpServer::start(&folder.path().join("tickets.db"));
    let mut transcript = String::new();
    let mut run = |token: &str, extra: &[&str], fault: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lab"));
        command
            .current_dir(folder.path())
            .args([
                "runner",
                "--database",
                "runner.sqlite",
                "--mcp-url",
                &server.url,
            ])
            .args(["--token", token, "--caller", "support-agent"])
            .args(extra);
        let shown_args: Vec<String> = command
            .get_args()
            .map(|arg| arg.to_string_lossy().replace(&server.url, "$MCP_URL"))
            .map(|arg| {
                if arg.contains(' ') {
                    format!("'{arg}'")
                } else {
                    arg
                }
            })
            .collect();
        if let Some(fault) = fault {
            command.env(lab::runner::FAULT_VARIABLE, fault);
            transcript.push_str(&format!(
                "$ {}={fault} \\\n    ",
                lab::runner::FAULT_VARIABLE
            ));
        } else {
            transcript.push_str("$ ");
        }
        let output = command.output().unwrap();
        transcript.push_str(&format!("lab {}\n", shown_args.join(" ")));
        for stream in [&output.stdout, &output.stderr] {
            transcript.push_str(&text(stream).replace(&server.url, "$MCP_URL"));
        }
        transcript.push_str(&format!(
            "exit status {}\n\n",
            output.status.code().unwrap()
        ));
        output.status.code()
    };
    let new = [
        "--key",
        "disk-full-7",
        "--payload",
        r#"{"title": "Disk full"}"#,
    ];
    assert_eq!(run("token-a", &new, Some("lose-reply")), Some(0));
    assert_eq!(run("token-a", &[], None), Some(0));
    let other = [
        "--key",
        "disk-full-8",
        "--payload",
        r#"{"title": "Disk full again"}"#,
    ];
    assert_eq!(run("token-zz", &other, None), Some(5));
    assert_eq!(run("token-a", &[], None), Some(0));
    assert_eq!(server.ticket_ids(), [1, 2]);
    crate::mcp::compare_with_the_book(transcript.trim_end(), "runner-session.txt");
}

/// A ticket service written the way some idempotency middlewares answer: a new key creates a
/// ticket (201), and a key it has seen is answered 409 instead of a replay. It serves no
/// OpenAPI document, and nothing but `POST /tickets` (404).
struct ConflictOnReplay {
    url: String,
    tickets: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl ConflictOnReplay {
    fn start() -> ConflictOnReplay {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let tickets = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let keys = std::sync::Arc::clone(&tickets);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                let (mut length, mut key) = (0usize, None);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    let (name, value) = line.split_once(':').unwrap_or((&line, ""));
                    match name.to_ascii_lowercase().as_str() {
                        "content-length" => length = value.trim().parse().unwrap_or(0),
                        "idempotency-key" => key = Some(value.trim().to_owned()),
                        _ => {}
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let (status, answer) = match (request_line.split(' ').nth(1), key) {
                    (Some("/tickets"), Some(key)) if request_line.starts_with("POST") => {
                        let mut tickets = keys.lock().unwrap();
                        if tickets.contains(&key) {
                            (
                                "409 Conflict",
                                r#"{"detail":"request already processed"}"#.to_owned(),
                            )
                        } else {
                            tickets.push(key);
                            (
                                "201 Created",
                                format!(r#"{{"ticket_id":{}}}"#, tickets.len()),
                            )
                        }
                    }
                    _ => ("404 Not Found", r#"{"detail":"Not Found"}"#.to_owned()),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        ConflictOnReplay { url, tickets }
    }
}

#[test]
fn a_409_after_a_lost_reply_needs_review_naming_the_key_not_held() {
    let service = ConflictOnReplay::start();
    // The first send commits a ticket and its reply is lost; the retry is answered 409.
    let proxy = LabServer::spawn(&["proxy", "--upstream", &service.url, "--drop-first", "1"]);
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    let new = ["--key", "conflict-1", "--payload", PAYLOAD];
    let output = runner_with(&database, &proxy.url, "token-a", &new);
    assert_eq!(
        service.tickets.lock().unwrap().as_slice(),
        ["\"conflict-1\""],
        "the first send created the ticket"
    );
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    let stdout = text(&output.stdout);
    assert!(
        stdout.starts_with("conflict-1: needs review:") && stdout.contains("status 409"),
        "{stdout}"
    );
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("with key conflict-1") && !stderr.contains("Nothing this run sent"),
        "{stderr}"
    );
    assert_eq!(
        runner_record(&database, "conflict-1"),
        ("needs_review".to_owned(), None)
    );
}

#[test]
fn a_send_whose_outcome_is_unknown_is_never_held_when_the_service_is_gone_on_resume() {
    let server = LabServer::start(&[]);
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    // The service committed and answered; the runner is killed before it records the answer.
    let mut child = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["runner", "--database"])
        .arg(&database)
        .args([
            "--url",
            &server.url,
            "--token",
            "token-a",
            "--caller",
            "alice",
        ])
        .args(["--key", "gone-1", "--payload", PAYLOAD])
        .env(lab::runner::PAUSE_VARIABLE, "after-reply")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let stdout = child.stdout.take().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    assert_eq!(line.trim(), "paused at after-reply for gone-1");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(service_tickets(&server), [1]);
    let service_url = server.url.clone();
    drop(server);
    // The next run finds nothing at the address. A ticket exists: "nothing took effect" is false.
    let output = runner_with(&database, &service_url, "token-a", &[]);
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    let stdout = text(&output.stdout);
    assert!(
        stdout.starts_with("resumed gone-1: needs review: nothing accepts connections")
            && stdout.contains("may hold a ticket for key gone-1"),
        "{stdout}"
    );
    assert!(!text(&output.stderr).contains("Nothing this run sent"));
}
