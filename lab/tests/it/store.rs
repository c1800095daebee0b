//! The SQLite store's create: persisted rows and returned values, checked together.

use lab::serde_json::json;
use lab::{
    CreateRequest, Error, Fault, OperationKey, Outcome, Payload, Scope, SqliteStore, TicketTool,
};

use crate::sample;

fn record_rows(store: &SqliteStore) -> Vec<(String, String, String, i64, String)> {
    let mut statement = store
        .connection()
        .prepare(
            "SELECT caller, key, payload, ticket_id, response FROM operation_records ORDER BY key",
        )
        .unwrap();
    statement
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn retry_with_same_key_replays_the_original_ticket() {
    let store = SqliteStore::temporary().unwrap();
    let (scope, key, payload) = sample();
    let request = CreateRequest::keyed(&scope, &key, &payload);
    let first = store.create(request).unwrap();
    let second = store.create(request).unwrap();
    assert!(matches!(first, Outcome::Created(_)));
    assert_eq!(second, Outcome::Replayed(first.ticket_id().clone()));
    assert_eq!(store.ticket_ids().unwrap(), vec![first.ticket_id().clone()]);
    let records = record_rows(&store);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].3, first.ticket_id());
    assert_eq!(
        records[0].4,
        format!("{{\"ticket_id\":{}}}", first.ticket_id())
    );
}

#[test]
fn a_lost_reply_still_commits_the_ticket_and_its_record() {
    let store = SqliteStore::temporary().unwrap();
    let (scope, key, payload) = sample();
    let lost =
        store.create(CreateRequest::keyed(&scope, &key, &payload).with_fault(Fault::LoseReply));
    match lost {
        Err(Error::OutcomeUnknown { key: Some(k), .. }) => assert_eq!(k, key.as_str()),
        other => panic!("expected an unknown outcome, got {other:?}"),
    }
    assert_eq!(store.count_tickets().unwrap(), 1);
    assert_eq!(store.count_records().unwrap(), 1);
}

#[test]
fn failure_between_the_inserts_leaves_neither_row() {
    let store = SqliteStore::temporary().unwrap();
    let (scope, key, payload) = sample();
    let failed =
        store.create(CreateRequest::keyed(&scope, &key, &payload).with_fault(Fault::BeforeCommit));
    assert!(matches!(failed, Err(Error::InjectedFailure)), "{failed:?}");
    assert_eq!(store.count_tickets().unwrap(), 0);
    assert_eq!(store.count_records().unwrap(), 0);
    // The connection is usable again: no transaction was left open.
    assert!(store.connection().is_autocommit());
    let retry = store
        .create(CreateRequest::keyed(&scope, &key, &payload))
        .unwrap();
    assert!(matches!(retry, Outcome::Created(_)));
}

#[test]
fn a_changed_payload_is_rejected_and_changes_nothing() {
    let store = SqliteStore::temporary().unwrap();
    let (scope, key, payload) = sample();
    store
        .create(CreateRequest::keyed(&scope, &key, &payload))
        .unwrap();
    let before = record_rows(&store);
    let changed = payload.with_field("priority", json!("urgent"));
    let conflict = store.create(CreateRequest::keyed(&scope, &key, &changed));
    match conflict {
        Err(Error::PayloadConflict { key: k }) => assert_eq!(k, key.as_str()),
        other => panic!("expected a payload conflict, got {other:?}"),
    }
    assert_eq!(record_rows(&store), before);
    assert_eq!(store.count_tickets().unwrap(), 1);
    assert!(store.connection().is_autocommit());
}

#[test]
fn key_order_in_the_payload_does_not_make_a_conflict() {
    let store = SqliteStore::temporary().unwrap();
    let (scope, key, _) = sample();
    let a: Payload =
        lab::serde_json::from_str(r#"{"title": "x", "meta": {"b": 1, "a": [1, 2]}}"#).unwrap();
    let b: Payload =
        lab::serde_json::from_str(r#"{"meta": {"a": [1, 2], "b": 1}, "title": "x"}"#).unwrap();
    let first = store
        .create(CreateRequest::keyed(&scope, &key, &a))
        .unwrap();
    let second = store
        .create(CreateRequest::keyed(&scope, &key, &b))
        .unwrap();
    assert_eq!(second, Outcome::Replayed(first.ticket_id().clone()));
    assert_eq!(store.count_tickets().unwrap(), 1);
}

#[test]
fn the_same_key_under_two_callers_names_two_operations() {
    let store = SqliteStore::temporary().unwrap();
    let (_, key, payload) = sample();
    let alice = Scope::new("alice", "create_ticket").unwrap();
    let bob = Scope::new("bob", "create_ticket").unwrap();
    let a = store
        .create(CreateRequest::keyed(&alice, &key, &payload))
        .unwrap();
    let b = store
        .create(CreateRequest::keyed(
            &bob,
            &key,
            &payload.with_field("title", json!("other")),
        ))
        .unwrap();
    assert!(matches!(
        (&a, &b),
        (Outcome::Created(_), Outcome::Created(_))
    ));
    assert_ne!(a.ticket_id(), b.ticket_id());
    // Each caller replays only its own ticket.
    assert_eq!(
        store
            .create(CreateRequest::keyed(&alice, &key, &payload))
            .unwrap(),
        Outcome::Replayed(a.ticket_id().clone())
    );
    // Forgetting bob's record leaves alice's.
    assert!(store.forget_record(&bob, &key).unwrap());
    assert_eq!(store.count_records().unwrap(), 1);
}

#[test]
fn the_same_key_under_two_operation_types_names_two_operations() {
    let store = SqliteStore::temporary().unwrap();
    let (_, key, payload) = sample();
    let create = Scope::new("alice", "create_ticket").unwrap();
    let escalate = Scope::new("alice", "escalate_ticket").unwrap();
    let a = store
        .create(CreateRequest::keyed(&create, &key, &payload))
        .unwrap();
    let b = store
        .create(CreateRequest::keyed(&escalate, &key, &payload))
        .unwrap();
    assert_ne!(a.ticket_id(), b.ticket_id());
    assert_eq!(store.count_records().unwrap(), 2);
}

#[test]
fn creates_without_a_key_are_never_deduplicated() {
    let store = SqliteStore::temporary().unwrap();
    let (scope, _, payload) = sample();
    let a = store
        .create(CreateRequest::unkeyed(&scope, &payload))
        .unwrap();
    let b = store
        .create(CreateRequest::unkeyed(&scope, &payload))
        .unwrap();
    assert_ne!(a.ticket_id(), b.ticket_id());
    assert_eq!(store.count_records().unwrap(), 0);
}

#[test]
fn a_record_survives_reopening_the_file() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("tickets.sqlite");
    let (scope, key, payload) = sample();
    let created = SqliteStore::open(&path)
        .unwrap()
        .create(CreateRequest::keyed(&scope, &key, &payload))
        .unwrap();
    let reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(
        reopened
            .create(CreateRequest::keyed(&scope, &key, &payload))
            .unwrap(),
        Outcome::Replayed(created.ticket_id().clone())
    );
}

#[test]
fn opening_a_store_on_an_existing_file_needs_no_write_lock() {
    let store = SqliteStore::temporary().unwrap();
    let (scope, key, payload) = sample();
    let created = store
        .create(CreateRequest::keyed(&scope, &key, &payload))
        .unwrap();
    // Another connection holds the write lock; a caller opening the file at that moment must
    // not have to wait for it (a zero busy timeout turns any wait into an error).
    let holder = store.connect().unwrap();
    holder
        .connection()
        .execute_batch("BEGIN IMMEDIATE")
        .unwrap();
    let opened = SqliteStore::open_with(
        store.path(),
        lab::StoreOptions::default().with_busy_timeout(std::time::Duration::ZERO),
    )
    .unwrap();
    assert_eq!(
        opened.saved_response(&scope, &key).unwrap(),
        Some(format!("{{\"ticket_id\":{}}}", created.ticket_id()))
    );
    holder.connection().execute_batch("ROLLBACK").unwrap();
}

#[test]
fn the_store_runs_in_wal_mode_with_full_sync_and_the_default_busy_timeout() {
    let store = SqliteStore::temporary().unwrap();
    let connection = store.connection();
    let mode: String = connection
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    let sync: i64 = connection
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .unwrap();
    let timeout: i64 = connection
        .query_row("PRAGMA busy_timeout", [], |r| r.get(0))
        .unwrap();
    assert_eq!((mode.as_str(), sync, timeout), ("wal", 2, 10_000));
}

#[test]
fn a_short_busy_timeout_turns_a_held_lock_into_an_error_without_a_write() {
    let store = SqliteStore::temporary_with(
        lab::StoreOptions::default().with_busy_timeout(std::time::Duration::from_millis(50)),
    )
    .unwrap();
    let other = store.connect().unwrap();
    other.connection().execute_batch("BEGIN IMMEDIATE").unwrap();
    let (scope, key, payload) = sample();
    let blocked = store.create(CreateRequest::keyed(&scope, &key, &payload));
    assert!(matches!(blocked, Err(Error::Store { .. })), "{blocked:?}");
    other.connection().execute_batch("ROLLBACK").unwrap();
    assert_eq!(store.count_tickets().unwrap(), 0);
}

#[test]
fn the_temporary_folder_is_removed_with_the_last_connection() {
    let store = SqliteStore::temporary().unwrap();
    let folder = store.path().parent().unwrap().to_owned();
    let second = store.connect().unwrap();
    drop(store);
    assert!(folder.exists(), "a connection is still open");
    drop(second);
    assert!(!folder.exists());
}

#[test]
fn keys_are_validated_before_they_reach_the_store() {
    assert!(OperationKey::try_from("").is_err());
    assert!(OperationKey::try_from("a\u{0}b").is_err());
    assert!(Scope::new("caller", "").is_err());
}

#[test]
fn a_failure_at_any_step_leaves_nothing_and_a_retry_creates_once() {
    use lab::Step;
    for step in Step::ALL {
        let store = SqliteStore::temporary().unwrap();
        let (scope, key, payload) = sample();
        let request = CreateRequest::keyed(&scope, &key, &payload);
        let failed = store.create(request.with_fault(Fault::FailAt(step)));
        assert!(
            matches!(failed, Err(Error::InjectedFailure)),
            "{step:?}: {failed:?}"
        );
        assert_eq!(
            (
                store.count_tickets().unwrap(),
                store.count_records().unwrap()
            ),
            (0, 0),
            "{step:?}"
        );
        assert!(
            store.connection().is_autocommit(),
            "{step:?}: a transaction was left open"
        );
        let retry = store.create(request).unwrap();
        assert!(matches!(retry, Outcome::Created(_)), "{step:?}");
        // On the replay path no insert or commit is reached, so those faults do not fire.
        let replay = store.create(request.with_fault(Fault::FailAt(step)));
        match step {
            Step::Begin | Step::Lookup => {
                assert!(matches!(replay, Err(Error::InjectedFailure)), "{step:?}")
            }
            _ => assert_eq!(
                replay.unwrap(),
                Outcome::Replayed(retry.ticket_id().clone()),
                "{step:?}"
            ),
        }
        assert_eq!(store.count_tickets().unwrap(), 1, "{step:?}");
    }
}

/// What a crash while a new file was being made can leave: the first page written (the switch to
/// WAL), the schema not yet.
fn half_made_file(path: &std::path::Path) {
    let connection = rusqlite::Connection::open(path).unwrap();
    connection
        .execute_batch("PRAGMA synchronous=OFF; PRAGMA journal_mode=WAL;")
        .unwrap();
    drop(connection);
    assert!(std::fs::metadata(path).unwrap().len() > 0);
}

#[test]
fn a_file_left_half_made_is_finished_before_use_not_used_half_built() {
    let folder = tempfile::tempdir().unwrap();
    for (name, make) in [
        (
            "empty.sqlite",
            (|path| std::fs::write(path, b"").unwrap()) as fn(&std::path::Path),
        ),
        ("first-page.sqlite", half_made_file),
    ] {
        let path = folder.path().join(name);
        make(&path);
        let store = SqliteStore::open(&path).unwrap();
        let (scope, key, payload) = sample();
        let created = store
            .create(CreateRequest::keyed(&scope, &key, &payload))
            .unwrap();
        assert_eq!(created, Outcome::Created(1.into()), "{name}");
        assert_eq!(record_rows(&store).len(), 1, "{name}");
        let sync: i64 = store
            .connection()
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 2, "{name}: tickets are written with synchronous=FULL");
    }
}

#[test]
fn a_file_with_a_damaged_first_page_is_refused() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("torn.sqlite");
    half_made_file(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[16..100].fill(0xff); // page size, versions, counters: the header after its magic string
    std::fs::write(&path, &bytes).unwrap();
    let refused = SqliteStore::open(&path);
    assert!(
        matches!(refused, Err(Error::Store { .. })),
        "{:?}",
        refused.err()
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the file is left as it was"
    );
}

#[test]
fn a_named_file_is_checkpointed_when_its_last_store_closes() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("kept.sqlite");
    let (scope, key, payload) = sample();
    let store = SqliteStore::open(&path).unwrap();
    store
        .create(CreateRequest::keyed(&scope, &key, &payload))
        .unwrap();
    let wal = folder.path().join("kept.sqlite-wal");
    assert!(wal.exists());
    drop(store);
    // The close copied the log into the file and removed it: the file alone holds the ticket.
    assert!(!wal.exists());
    let tickets: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM tickets", [], |r| r.get(0))
        .unwrap();
    assert_eq!(tickets, 1);
}
