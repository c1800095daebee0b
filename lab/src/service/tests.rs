//! The service's create, claim and pruning, data in and data out on a temporary store.

use super::*;
use crate::tool::TicketTool;

fn service(dated: bool) -> (TicketService, SqliteStore) {
    let service = TicketService::new(&ServiceOptions {
        callers: None,
        admin_token: Some("admin-token"),
        faults: true,
        in_progress_wait: Duration::from_millis(10),
        retention: None,
        dated,
        clock: None,
    })
    .unwrap();
    let store = service.open_sqlite(None).unwrap();
    (service, store)
}

fn request() -> (Scope, OperationKey, Payload) {
    (
        Scope::new("tests", "create_ticket").unwrap(),
        OperationKey::try_from("k-1").unwrap(),
        Payload::new(serde_json::json!({"title": "Disk full"})).unwrap(),
    )
}

#[test]
fn a_first_create_is_new_and_its_retry_replays_the_saved_text() {
    let (service, store) = service(false);
    let (scope, key, payload) = request();
    let first = service.create(&store, &scope, Some(&key), &payload, Fault::None);
    let Ok(Created::New { id, text }) = first else {
        panic!("{first:?}")
    };
    let again = service.create(&store, &scope, Some(&key), &payload, Fault::None);
    assert_eq!(again, Ok(Created::Replayed { id, text }));
}

#[test]
fn another_payload_under_the_key_is_a_conflict_that_writes_nothing() {
    let (service, store) = service(false);
    let (scope, key, payload) = request();
    service
        .create(&store, &scope, Some(&key), &payload, Fault::None)
        .unwrap();
    let other = payload.with_field("priority", serde_json::json!("urgent"));
    let conflict = service.create(&store, &scope, Some(&key), &other, Fault::None);
    assert!(
        matches!(conflict, Err(Refusal::Conflict(_))),
        "{conflict:?}"
    );
    assert_eq!(store.count_tickets().unwrap(), 1);
}

#[test]
fn a_pruned_key_is_expired_where_records_are_dated_and_never_created_again() {
    let (service, store) = service(true);
    let (scope, key, payload) = request();
    service
        .create(&store, &scope, Some(&key), &payload, Fault::None)
        .unwrap();
    let window = Retention {
        records: Duration::ZERO,
        tombstones: Duration::from_secs(60),
    };
    assert_eq!(service.prune_with(window).unwrap().records, 1);
    let retry = service.create(&store, &scope, Some(&key), &payload, Fault::None);
    assert_eq!(retry, Err(Refusal::Expired { key }));
    assert_eq!(store.count_tickets().unwrap(), 1);
}

#[test]
fn a_key_held_by_a_request_in_progress_is_left_alone_by_a_pruning_pass() {
    let (service, store) = service(true);
    let (scope, key, payload) = request();
    service
        .create(&store, &scope, Some(&key), &payload, Fault::None)
        .unwrap();
    let window = Retention {
        records: Duration::ZERO,
        tombstones: Duration::from_secs(60),
    };
    let holding = service.claims.claim(&store, true, &scope, &key).unwrap();
    assert!(matches!(holding, Claim::Held(_)));
    assert_eq!(service.prune_with(window).unwrap().records, 0);
    drop(holding);
    assert_eq!(service.prune_with(window).unwrap().records, 1);
}

#[test]
fn a_lost_reply_is_committed_and_its_retry_replays() {
    let (service, store) = service(false);
    let (scope, key, payload) = request();
    let lost = service.create(&store, &scope, Some(&key), &payload, Fault::LoseReply);
    assert_eq!(lost, Ok(Created::LostReply));
    let retry = service.create(&store, &scope, Some(&key), &payload, Fault::None);
    assert!(matches!(retry, Ok(Created::Replayed { .. })), "{retry:?}");
}

#[test]
fn an_internal_failure_tells_the_caller_an_id_and_not_the_cause() {
    let refusal = Refusal::internal("disk I/O error at /secret/path");
    let Refusal::Internal { error_id } = &refusal else {
        panic!("{refusal:?}")
    };
    let detail = Refusal::internal_detail(error_id);
    assert!(detail.contains(error_id.as_str()), "{detail}");
    assert!(!detail.contains("secret"), "{detail}");
    assert_ne!(
        Refusal::internal("again"),
        refusal,
        "each failure gets its own id"
    );
}

#[test]
fn reset_clears_tickets_records_and_tombstones() {
    let (service, store) = service(true);
    let (scope, key, payload) = request();
    service
        .create(&store, &scope, Some(&key), &payload, Fault::None)
        .unwrap();
    let window = Retention {
        records: Duration::ZERO,
        tombstones: Duration::from_secs(60),
    };
    service.prune_with(window).unwrap();
    service.reset(&store).unwrap();
    let fresh = service.create(&store, &scope, Some(&key), &payload, Fault::None);
    assert!(matches!(fresh, Ok(Created::New { .. })), "{fresh:?}");
}
