//! `lab serve --backend postgres`: two server processes on one schema, released together on one
//! key, leave one ticket, and every 2xx carries its id. The claim is PostgreSQL's unique index,
//! not either process's memory.

use std::sync::{Arc, Barrier};

use crate::http::LabServer;
use crate::http_hostile::{Raw, RawReply};
use crate::postgres::server as pg_server;

fn post(url: &str, key: &str) -> RawReply {
    let body = r#"{"title": "Shared database"}"#;
    let request = format!(
        "POST /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\n\
         Idempotency-Key: \"{key}\"\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    Raw::connect(url)
        .send(request.as_bytes())
        .reply(false)
        .expect("a response")
}

#[test]
fn two_servers_on_one_postgres_schema_released_together_on_one_key_leave_one_ticket() {
    let Some(pg) = pg_server::server(
        "two_servers_on_one_postgres_schema_released_together_on_one_key_leave_one_ticket",
    ) else {
        return;
    };
    let schema = format!("lab_serve_it_{}", std::process::id());
    let args = |schema: &str| -> Vec<String> {
        [
            "serve",
            "--port",
            "0",
            "--backend",
            "postgres",
            "--database-url",
            pg.url,
            "--schema",
            schema,
            "--caller",
            "alice=token-a",
            "--workers",
            "4",
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let first_args = args(&schema);
    let first = LabServer::spawn(&first_args.iter().map(String::as_str).collect::<Vec<_>>());
    let second = LabServer::spawn(&first_args.iter().map(String::as_str).collect::<Vec<_>>());
    let urls = Arc::new([first.url.clone(), second.url.clone()]);
    let release = Arc::new(Barrier::new(32));
    let senders: Vec<_> = (0..32)
        .map(|n| {
            let (urls, release) = (urls.clone(), release.clone());
            std::thread::spawn(move || {
                release.wait();
                post(&urls[n % 2], "shared-1")
            })
        })
        .collect();
    let replies: Vec<RawReply> = senders.into_iter().map(|s| s.join().unwrap()).collect();
    let mut ids: Vec<i64> = Vec::new();
    for reply in &replies {
        match reply.status {
            201 => ids.push(reply.json()["ticket_id"].as_i64().unwrap()),
            409 => assert_eq!(reply.header("retry-after"), Some("1"), "{reply:?}"),
            _ => panic!("not in the contract: {reply:?}"),
        }
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "every 2xx carries one id: {replies:?}");
    let created = replies
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_none())
        .count();
    assert_eq!(created, 1, "{replies:?}");

    // Once committed, both servers replay it.
    for url in urls.iter() {
        let again = post(url, "shared-1");
        assert_eq!(again.status, 201);
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(again.json()["ticket_id"].as_i64(), Some(ids[0]));
    }

    let mut db = postgres::Client::connect(pg.url, postgres::NoTls).unwrap();
    let count = |db: &mut postgres::Client, table: &str| -> i64 {
        db.query_one(&format!("SELECT count(*) FROM \"{schema}\".{table}"), &[])
            .unwrap()
            .get(0)
    };
    let (tickets, records) = (
        count(&mut db, "tickets"),
        count(&mut db, "operation_records"),
    );
    drop((first, second));
    db.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .unwrap();
    assert_eq!((tickets, records), (1, 1));
}

#[test]
fn the_seven_scenarios_pass_against_lab_serve_on_postgres_with_the_reference_lines() {
    let Some(pg) = pg_server::server(
        "the_seven_scenarios_pass_against_lab_serve_on_postgres_with_the_reference_lines",
    ) else {
        return;
    };
    let schema = format!("lab_serve_suite_{}", std::process::id());
    let server = LabServer::spawn(&[
        "serve",
        "--port",
        "0",
        "--backend",
        "postgres",
        "--database-url",
        pg.url,
        "--schema",
        &schema,
        "--caller",
        "alice=token-a",
        "--admin-token",
        "admin-token",
        "--faults",
    ]);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lab"))
        .args([
            "--adapter",
            "http",
            "--url",
            &server.url,
            "--token",
            "token-a",
        ])
        .args(["--admin-token", "admin-token"])
        .output()
        .unwrap();
    drop(server);
    let mut db = postgres::Client::connect(pg.url, postgres::NoTls).unwrap();
    db.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        crate::cli::REFERENCE_LINES
    );
}
