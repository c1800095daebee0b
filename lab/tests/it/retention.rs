//! Retention in `lab serve`: records pruned after the window leave tombstones, a late retry gets
//! 410 "expired", and the runner hands it to review. Time is a manual clock, moved by the test.

use std::sync::Arc;
use std::time::Duration;

use lab::http::{
    CallerToken, HttpTarget, HttpTool, ManualClock, Retention, ServeOptions, TicketServer,
};
use lab::runner::{RetryPolicy, Runner, State};
use lab::{CreateRequest, Error, OperationKey, Outcome, Payload, Scope, TicketTool};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

fn server_with_retention(clock: &ManualClock) -> TicketServer {
    TicketServer::start(ServeOptions {
        callers: vec!["alice=token-a".parse::<CallerToken>().unwrap()],
        admin_token: Some("admin-token".to_owned()),
        workers: 2,
        retention: Some(Retention {
            records: HOUR,
            tombstones: DAY,
        }),
        clock: Some(Arc::new(clock.clone())),
        ..ServeOptions::default()
    })
    .unwrap()
}

#[test]
fn a_retry_after_the_window_is_told_expired_and_the_runner_hands_it_to_review() {
    let clock = ManualClock::at(1_000_000);
    let server = server_with_retention(&clock);
    let target = HttpTarget::new(&server.url(), "token-a", Some("admin-token")).unwrap();
    let tool = HttpTool::new(target.clone());
    let scope = Scope::new("alice", "create_ticket").unwrap();
    let key = OperationKey::try_from("late-retry-1").unwrap();
    let payload = Payload::new(lab::serde_json::json!({"title": "Renew the certificate"})).unwrap();
    let request = CreateRequest::keyed(&scope, &key, &payload);

    // A runner saved the operation and sent it; the service committed; the runner died before
    // recording the reply. Its file says pending.
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    let runner = Runner::open(&database, HttpTool::new(target), RetryPolicy::default()).unwrap();
    rusqlite::Connection::open(&database)
        .unwrap()
        .execute(
            "INSERT INTO operations (caller, operation, key, payload, state)
             VALUES ('alice', 'create_ticket', ?1, ?2, 'pending')",
            [key.as_str(), payload.canonical()],
        )
        .unwrap();
    assert_eq!(tool.create(request).unwrap(), Outcome::Created(1.into()));

    // Within the window the record is kept and a retry is replayed.
    clock.advance(HOUR / 2);
    assert_eq!(server.prune().unwrap().records, 0);
    assert_eq!(tool.create(request).unwrap(), Outcome::Replayed(1.into()));

    // Past the window the record becomes a tombstone, and a retry is told the key expired.
    clock.advance(HOUR);
    assert_eq!(server.prune().unwrap().records, 1);
    assert_eq!(tool.count_records().unwrap(), 0);
    assert!(matches!(
        tool.create(request),
        Err(Error::KeyExpired { .. })
    ));

    // The runner resumes its pending operation, gets 410, and hands it to a person.
    let resumed = runner.resume().unwrap();
    assert_eq!(resumed.len(), 1);
    assert!(
        matches!(&resumed[0].state, State::NeedsReview { reason } if reason.contains("expired")),
        "{resumed:?}"
    );
    assert_eq!(runner.operations().unwrap()[0].state, resumed[0].state);
    assert_eq!(tool.ticket_ids().unwrap(), [1], "no second ticket");

    // After the tombstone's own window the key is unknown again: the retention boundary, where
    // a create is a new ticket. The contract promises nothing past it.
    clock.advance(DAY);
    assert_eq!(server.prune().unwrap().tombstones, 1);
    assert_eq!(tool.create(request).unwrap(), Outcome::Created(2.into()));
}

#[test]
fn a_server_without_retention_keeps_records_and_refuses_to_prune() {
    let server = TicketServer::start(ServeOptions {
        callers: vec!["alice=token-a".parse::<CallerToken>().unwrap()],
        workers: 1,
        ..ServeOptions::default()
    })
    .unwrap();
    assert!(matches!(server.prune(), Err(Error::InputInvalid { .. })));
}
