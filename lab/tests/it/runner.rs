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
pub fn runner_record(database: &Path, key: &str) -> (String, Option<i64>) {
    let db = rusqlite::Connection::open(database).unwrap();
    db.query_row(
        "SELECT state, ticket_id FROM operations WHERE key = ?1",
        [key],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .unwrap()
}

/// Every ticket on the service, read directly (not through the proxy).
pub fn service_tickets(server: &LabServer) -> Vec<i64> {
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
        ("succeeded".to_owned(), Some(1))
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
