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

#[test]
fn a_runner_with_no_service_spends_its_budget_and_hands_the_operation_to_review() {
    // A port nobody listens on: every send is a transport failure.
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", unused.local_addr().unwrap());
    drop(unused);
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    let output = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["runner", "--database"])
        .arg(&database)
        .args(["--url", &url, "--token", "token-a", "--caller", "alice"])
        .args([
            "--key",
            "nobody-home",
            "--payload",
            PAYLOAD,
            "--attempts",
            "3",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.starts_with("nobody-home: needs review: no answer after 3 send(s)"),
        "{stdout}"
    );
    assert_eq!(
        runner_record(&database, "nobody-home"),
        ("needs_review".to_owned(), None)
    );
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
