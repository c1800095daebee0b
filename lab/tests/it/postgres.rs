//! The PostgreSQL store (feature `postgres`): the seven scenarios, and the concurrency the
//! scenarios do not reach: many processes on one key, a wait that runs out, and scopes that must
//! not meet.
//!
//! Every test gets a fresh schema on the server that `server::server` finds or starts, and checks
//! both the rows left in it and what callers were told.

pub(crate) mod server;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::Duration;

use lab::serde_json::json;
use lab::{
    CreateRequest, Error, Fault, Operation, OperationKey, Outcome, Payload, PostgresOptions,
    PostgresStore, Scope, TicketTool, suite,
};

use crate::sample;

/// A fresh store on `url` whose creates wait at most `lock_timeout` for a competing claim.
fn store_with(url: &str, lock_timeout: Duration) -> PostgresStore {
    PostgresStore::temporary_with(
        url,
        PostgresOptions::default().with_lock_timeout(lock_timeout),
    )
    .unwrap()
}

fn store(url: &str) -> PostgresStore {
    store_with(url, Duration::from_secs(30))
}

/// A plain client on the store's schema, for looking at rows and holding transactions open.
fn inspector(url: &str, store: &PostgresStore) -> ::postgres::Client {
    let mut client = ::postgres::Client::connect(url, ::postgres::NoTls).unwrap();
    client
        .batch_execute(&format!("SET search_path TO \"{}\"", store.schema()))
        .unwrap();
    client
}

/// (caller, operation, key, payload, ticket_id, response) of every record, ordered.
type RecordRow = (String, String, String, String, i64, String);

fn records(client: &mut ::postgres::Client) -> Vec<RecordRow> {
    client
        .query(
            "SELECT caller, operation, key, payload, ticket_id, response FROM operation_records
             ORDER BY caller, operation, key",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect()
}

/// (id, caller, payload) of every ticket, ordered.
fn tickets(client: &mut ::postgres::Client) -> Vec<(i64, String, String)> {
    client
        .query("SELECT id, caller, payload FROM tickets ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// Connections of this database that sit inside a transaction: none should, between calls.
fn open_transactions(client: &mut ::postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
            &[],
        )
        .unwrap()
        .get(0)
}

/// The lock requests on this database that wait (are not granted): each one's lock type, and
/// for an advisory lock its 64-bit key. The tests wait for these to know that a caller is blocked
/// where they want it, instead of sleeping and hoping it got there.
fn lock_waits(client: &mut ::postgres::Client) -> Vec<(String, Option<i64>)> {
    client
        .query(
            // By the waiting backend's database: a wait for another transaction's row or id
            // names no database of its own.
            "SELECT l.locktype,
                    CASE WHEN l.locktype = 'advisory' AND l.objsubid = 1
                         THEN (l.classid::bigint << 32) | l.objid::bigint END
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE NOT l.granted AND a.datname = current_database()",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

fn schema_exists(client: &mut ::postgres::Client, name: &str) -> bool {
    client
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
            &[&name],
        )
        .unwrap()
        .get::<_, i64>(0)
        == 1
}

fn response(id: i64) -> String {
    format!("{{\"ticket_id\":{id}}}")
}

fn unusual_operation() -> Operation {
    Operation {
        scope: Scope::new("ticket-robot/éü \"quoted\"", "file_incident").unwrap(),
        operation_key: OperationKey::try_from("key \"007\"'; DROP TABLE tickets; --").unwrap(),
        payload: Payload::new(json!({
            "zeta": {"nested": [1, 2.5, null, {"b": true, "a": "ü"}]},
            "alpha": "第一",
            "priority": "urgent",
        }))
        .unwrap(),
    }
}

#[test]
fn the_seven_scenarios_pass_against_postgres_with_the_reference_values() {
    let Some(pg) = server::server("the_seven_scenarios_pass_against_postgres") else {
        return;
    };
    for operation in [Operation::example(), unusual_operation()] {
        let mut schemas = Vec::new();
        let observed = suite::run(&operation, |_| {
            let store = PostgresStore::temporary(pg.url)?;
            schemas.push(store.schema().to_owned());
            Ok(store)
        })
        .unwrap();
        let lines = observed.lines();
        assert_eq!(
            lines,
            [
                r#"naive_retry: {"attempts": 2, "tickets": 2}"#,
                r#"stable_key_retry: {"attempts": 3, "replay_ticket_id": 1, "tickets": 1}"#,
                r#"changed_payload: {"rejected": true, "tickets": 1}"#,
                r#"failure_before_commit: {"tickets_after_retry": 1, "tickets_before_retry": 0}"#,
                // The id is the one ticket's, whichever caller's draw from the sequence won.
                &format!(
                    r#"concurrent_same_key: {{"attempts": 8, "returned_ticket_ids": {:?}, "tickets": 1}}"#,
                    observed.concurrent_same_key.returned_ticket_ids
                ),
                r#"new_key_same_payload: {"tickets": 2}"#,
                r#"deleted_replay_record: {"tickets": 2}"#,
            ]
        );
        assert_eq!(observed.concurrent_same_key.returned_ticket_ids.len(), 1);
        // Seven fresh schemas, all dropped again with their stores.
        schemas.sort();
        schemas.dedup();
        assert_eq!(schemas.len(), 7);
        let mut client = ::postgres::Client::connect(pg.url, ::postgres::NoTls).unwrap();
        for schema in &schemas {
            assert!(!schema_exists(&mut client, schema), "{schema} was left");
        }
    }
}

#[test]
fn retry_with_same_key_replays_the_original_ticket_on_postgres() {
    let Some(pg) = server::server("retry_with_same_key_replays_the_original_ticket_on_postgres")
    else {
        return;
    };
    let store = store(pg.url);
    let (scope, key, payload) = sample();
    let request = CreateRequest::keyed(&scope, &key, &payload);
    let first = store.create(request).unwrap();
    let second = store.create(request).unwrap();
    let Outcome::Created(id) = first else {
        panic!("expected a create, got {first:?}")
    };
    assert_eq!(second, Outcome::Replayed(id.clone()));
    let id = id.as_i64().unwrap();
    let mut client = inspector(pg.url, &store);
    assert_eq!(
        tickets(&mut client),
        [(id, "tests".to_owned(), payload.canonical().to_owned())]
    );
    assert_eq!(
        records(&mut client),
        [(
            "tests".to_owned(),
            "create_ticket".to_owned(),
            key.to_string(),
            payload.canonical().to_owned(),
            id,
            response(id)
        )]
    );
}

#[test]
fn a_lost_reply_on_postgres_still_commits_the_ticket_and_its_record() {
    let Some(pg) = server::server("a_lost_reply_on_postgres_still_commits_the_ticket") else {
        return;
    };
    let store = store(pg.url);
    let (scope, key, payload) = sample();
    let request = CreateRequest::keyed(&scope, &key, &payload);
    match store.create(request.with_fault(Fault::LoseReply)) {
        Err(Error::OutcomeUnknown { key: Some(k), .. }) => assert_eq!(k, key.as_str()),
        other => panic!("expected an unknown outcome, got {other:?}"),
    }
    let mut client = inspector(pg.url, &store);
    let stored = tickets(&mut client);
    assert_eq!(stored.len(), 1);
    assert_eq!(records(&mut client)[0].4, stored[0].0);
    assert_eq!(
        store.create(request).unwrap(),
        Outcome::Replayed(stored[0].0.into())
    );
}

#[test]
fn a_failure_before_commit_on_postgres_leaves_neither_row_nor_an_open_transaction() {
    let Some(pg) = server::server("a_failure_before_commit_on_postgres_leaves_neither_row") else {
        return;
    };
    let store = store(pg.url);
    let (scope, key, payload) = sample();
    let request = CreateRequest::keyed(&scope, &key, &payload);
    let mut client = inspector(pg.url, &store);
    for fault in [Fault::BeforeCommit]
        .into_iter()
        .chain(lab::tool::Step::ALL.map(Fault::FailAt))
    {
        let failed = store.create(request.with_fault(fault));
        assert!(
            matches!(failed, Err(Error::InjectedFailure)),
            "{fault:?}: {failed:?}"
        );
        assert_eq!(tickets(&mut client), [], "{fault:?}");
        assert_eq!(records(&mut client), [], "{fault:?}");
        assert_eq!(open_transactions(&mut client), 0, "{fault:?}");
    }
    let retry = store.create(request).unwrap();
    assert!(matches!(retry, Outcome::Created(_)), "{retry:?}");
    assert_eq!(store.ticket_ids().unwrap(), [retry.ticket_id().clone()]);
    // A replay writes nothing, so a fault at a write step is not reached, as on SQLite.
    let replay = store.create(request.with_fault(Fault::BeforeCommit));
    assert_eq!(
        replay.unwrap(),
        Outcome::Replayed(retry.ticket_id().clone())
    );
}

#[test]
fn a_changed_payload_on_postgres_is_rejected_and_changes_nothing() {
    let Some(pg) = server::server("a_changed_payload_on_postgres_is_rejected") else {
        return;
    };
    let store = store(pg.url);
    let (scope, key, payload) = sample();
    let created = store
        .create(CreateRequest::keyed(&scope, &key, &payload))
        .unwrap();
    let mut client = inspector(pg.url, &store);
    let (tickets_before, records_before) = (tickets(&mut client), records(&mut client));
    let changed = payload.with_field("priority", json!("urgent"));
    match store.create(CreateRequest::keyed(&scope, &key, &changed)) {
        Err(Error::PayloadConflict { key: k }) => assert_eq!(k, key.as_str()),
        other => panic!("expected a payload conflict, got {other:?}"),
    }
    assert_eq!(tickets(&mut client), tickets_before);
    assert_eq!(records(&mut client), records_before);
    assert_eq!(
        store
            .create(CreateRequest::keyed(&scope, &key, &payload))
            .unwrap(),
        Outcome::Replayed(created.ticket_id().clone())
    );
}

#[test]
fn the_same_key_under_two_callers_creates_two_tickets_and_neither_replays_the_other() {
    let Some(pg) = server::server("the_same_key_under_two_callers_creates_two_tickets") else {
        return;
    };
    // A short bound: bob's create must not wait for alice's claim at all.
    let store = store_with(pg.url, Duration::from_millis(300));
    let (_, key, payload) = sample();
    let alice = Scope::new("alice", "create_ticket").unwrap();
    let bob = Scope::new("bob", "create_ticket").unwrap();
    let bobs_payload = payload.with_field("title", json!("Bob's own ticket"));

    // Alice's claim is written and not yet committed while bob creates with the same key.
    let mut holder = inspector(pg.url, &store);
    let mut alices_claim = holder.transaction().unwrap();
    let alice_id: i64 = alices_claim
        .query_one(
            lab::postgres::CLAIM_AND_CREATE,
            &[
                &"alice",
                &"create_ticket",
                &key.as_str(),
                &payload.canonical(),
            ],
        )
        .unwrap()
        .get(0);
    let bobs = store
        .create(CreateRequest::keyed(&bob, &key, &bobs_payload))
        .unwrap();
    alices_claim.commit().unwrap();
    let Outcome::Created(bob_id) = bobs else {
        panic!("bob's first create must create, got {bobs:?}")
    };
    let bob_id = bob_id.as_i64().unwrap();
    assert_ne!(alice_id, bob_id);

    // Each caller replays only its own ticket, and neither payload conflicts with the other's.
    assert_eq!(
        store
            .create(CreateRequest::keyed(&alice, &key, &payload))
            .unwrap(),
        Outcome::Replayed(alice_id.into())
    );
    assert_eq!(
        store
            .create(CreateRequest::keyed(&bob, &key, &bobs_payload))
            .unwrap(),
        Outcome::Replayed(bob_id.into())
    );
    let mut client = inspector(pg.url, &store);
    let mut expected = vec![
        (alice_id, "alice".to_owned(), payload.canonical().to_owned()),
        (
            bob_id,
            "bob".to_owned(),
            bobs_payload.canonical().to_owned(),
        ),
    ];
    expected.sort();
    assert_eq!(tickets(&mut client), expected);
    let saved = records(&mut client);
    assert_eq!(
        saved
            .iter()
            .map(|r| (r.0.as_str(), r.4, r.5.clone()))
            .collect::<Vec<_>>(),
        [
            ("alice", alice_id, response(alice_id)),
            ("bob", bob_id, response(bob_id))
        ]
    );
    // Forgetting bob's record leaves alice's.
    assert!(store.forget_record(&bob, &key).unwrap());
    assert_eq!(records(&mut client).len(), 1);
    assert_eq!(records(&mut client)[0].0, "alice");
}

#[test]
fn a_caller_that_outwaits_the_lock_timeout_is_told_the_outcome_is_unknown_and_a_retry_gets_the_ticket()
 {
    let Some(pg) = server::server("a_caller_that_outwaits_the_lock_timeout") else {
        return;
    };
    let store = store_with(pg.url, Duration::from_millis(200));
    let (scope, key, payload) = sample();
    let request = CreateRequest::keyed(&scope, &key, &payload);

    // The winner: the store's own claim, held open by the test past the loser's bound.
    let mut holder = inspector(pg.url, &store);
    let mut winner = holder.transaction().unwrap();
    let winner_id: i64 = winner
        .query_one(
            lab::postgres::CLAIM_AND_CREATE,
            &[
                &scope.caller(),
                &scope.operation(),
                &key.as_str(),
                &payload.canonical(),
            ],
        )
        .unwrap()
        .get(0);

    let loser = store.create(request);
    match &loser {
        Err(Error::OutcomeUnknown {
            key: Some(k),
            reason,
        }) => {
            assert_eq!(k, key.as_str());
            assert!(reason.contains("lock_timeout (200 ms) ran out"), "{reason}");
            assert!(reason.contains("retry later"), "{reason}");
        }
        other => panic!("expected an unknown outcome, got {other:?}"),
    }
    let message = loser.unwrap_err().to_string();
    assert!(message.contains("retry with the same key"), "{message}");

    // The loser wrote nothing, and left no transaction open: only the winner's rows exist, still
    // uncommitted, so another connection sees none.
    let mut observer = inspector(pg.url, &store);
    assert_eq!(tickets(&mut observer), []);
    assert_eq!(records(&mut observer), []);
    assert_eq!(open_transactions(&mut observer), 1, "only the winner's");

    winner.commit().unwrap();
    assert_eq!(
        store.create(request).unwrap(),
        Outcome::Replayed(winner_id.into())
    );
    assert_eq!(
        tickets(&mut observer),
        [(
            winner_id,
            "tests".to_owned(),
            payload.canonical().to_owned()
        )]
    );
    assert_eq!(records(&mut observer).len(), 1);
}

#[test]
fn a_caller_waiting_on_a_claim_that_rolls_back_creates_the_ticket_itself() {
    let Some(pg) = server::server("a_caller_waiting_on_a_claim_that_rolls_back") else {
        return;
    };
    let store = store(pg.url);
    let (scope, key, payload) = sample();
    let mut holder = inspector(pg.url, &store);
    let mut first = holder.transaction().unwrap();
    first
        .query_one(
            lab::postgres::CLAIM_AND_CREATE,
            &[
                &scope.caller(),
                &scope.operation(),
                &key.as_str(),
                &payload.canonical(),
            ],
        )
        .unwrap();
    let waiter = store.connect().unwrap();
    let request = CreateRequest::keyed(&scope, &key, &payload);
    let mut observer = inspector(pg.url, &store);
    let outcome = std::thread::scope(|threads| {
        let waiting = threads.spawn(move || waiter.create(request));
        // The waiter blocks on the identity's claim until `first` ends; rolling back frees it.
        // The rollback waits for the waiter to be blocked (or, wrongly, done), so it cannot come
        // before the waiter's claim and let it create without waiting.
        crate::eventually("the waiter blocks on the held claim", || {
            waiting.is_finished() || !lock_waits(&mut observer).is_empty()
        });
        first.rollback().unwrap();
        waiting.join().unwrap()
    });
    let Ok(Outcome::Created(id)) = outcome else {
        panic!("expected the waiter to create, got {outcome:?}")
    };
    let id = id.as_i64().unwrap();
    let mut client = inspector(pg.url, &store);
    assert_eq!(
        tickets(&mut client).iter().map(|t| t.0).collect::<Vec<_>>(),
        [id]
    );
    assert_eq!(records(&mut client)[0].4, id);
}

/// CI once printed `"returned_ticket_ids": [2]` for eight callers on one key: the claim drew its
/// ticket id before it inserted its record, so a caller that drew id 1 and was then overtaken left
/// the winner holding id 2. A trigger makes the first claim slow at exactly that moment: after its
/// id is drawn, before its record reaches the unique index: there it waits for an advisory lock
/// the test holds, and the test lets it go only once the second caller is blocked, or done.
#[test]
fn the_caller_that_draws_the_first_ticket_id_wins_even_when_it_is_overtaken() {
    let Some(pg) = server::server("the_caller_that_draws_the_first_ticket_id_wins") else {
        return;
    };
    // The gate's key: any number no identity's lock is likely to hash to.
    const GATE: i64 = 45_000_045;
    let store = store(pg.url);
    let mut client = inspector(pg.url, &store);
    client
        .batch_execute(&format!(
            "CREATE FUNCTION slow_first_claim() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.ticket_id = 1 THEN PERFORM pg_advisory_xact_lock({GATE}); END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER slow_first_claim BEFORE INSERT ON operation_records
                 FOR EACH ROW EXECUTE FUNCTION slow_first_claim();
             SELECT pg_advisory_lock({GATE});"
        ))
        .unwrap();
    let mut observer = inspector(pg.url, &store);
    let (scope, key, payload) = sample();
    let (first, second) = (store.connect().unwrap(), store.connect().unwrap());
    let (first, second) = std::thread::scope(|threads| {
        let request = CreateRequest::keyed(&scope, &key, &payload);
        let first = threads.spawn(move || first.create(request));
        crate::eventually(
            "the first caller waits at the gate, holding ticket id 1",
            || lock_waits(&mut observer).contains(&("advisory".to_owned(), Some(GATE))),
        );
        let second = threads.spawn(move || second.create(request));
        // Blocked behind the first caller's claim, as it must be; a claim that does not wait
        // finishes instead, and takes ticket id 2.
        crate::eventually("the second caller is blocked or done", || {
            second.is_finished() || lock_waits(&mut observer).len() >= 2
        });
        client
            .batch_execute(&format!("SELECT pg_advisory_unlock({GATE})"))
            .unwrap();
        (first.join().unwrap(), second.join().unwrap())
    });
    let ids: Vec<i64> = tickets(&mut client).iter().map(|t| t.0).collect();
    assert_eq!(
        (first.unwrap(), second.unwrap(), ids),
        (
            Outcome::Created(1.into()),
            Outcome::Replayed(1.into()),
            vec![1]
        )
    );
}

#[test]
fn creates_without_a_key_on_postgres_are_never_deduplicated() {
    let Some(pg) = server::server("creates_without_a_key_on_postgres") else {
        return;
    };
    let store = store(pg.url);
    let (scope, _, payload) = sample();
    let a = store
        .create(CreateRequest::unkeyed(&scope, &payload))
        .unwrap();
    let b = store
        .create(CreateRequest::unkeyed(&scope, &payload))
        .unwrap();
    assert!(matches!(
        (&a, &b),
        (Outcome::Created(_), Outcome::Created(_))
    ));
    assert_ne!(a.ticket_id(), b.ticket_id());
    assert_eq!(store.count_tickets().unwrap(), 2);
    assert_eq!(store.count_records().unwrap(), 0);
}

#[test]
fn a_temporary_schema_lives_until_its_last_connection_is_dropped() {
    let Some(pg) = server::server("a_temporary_schema_lives_until_its_last_connection") else {
        return;
    };
    let first = store(pg.url);
    let second = first.connect().unwrap();
    let name = first.schema().to_owned();
    let mut client = ::postgres::Client::connect(pg.url, ::postgres::NoTls).unwrap();
    drop(first);
    assert!(schema_exists(&mut client, &name));
    drop(second);
    assert!(!schema_exists(&mut client, &name));
}

/// The shared key, scope and payload of the multi-process race.
fn race_operation() -> Operation {
    Operation {
        scope: Scope::new("race", "create_ticket").unwrap(),
        operation_key: OperationKey::try_from("one-key-for-64-callers").unwrap(),
        payload: Payload::new(json!({"title": "Raced ticket", "priority": "normal"})).unwrap(),
    }
}

const RACE_PROCESSES: usize = 4;
const RACE_THREADS: usize = 16;
const RACE_CHILD_TEST: &str = "postgres::one_process_of_the_multi_process_race";

#[test]
fn sixty_four_callers_in_four_processes_converge_on_one_ticket() {
    let Some(pg) = server::server("sixty_four_callers_in_four_processes") else {
        return;
    };
    let store = store(pg.url);
    let mut children: Vec<_> = (0..RACE_PROCESSES)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([RACE_CHILD_TEST, "--exact", "--ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .env(server::URL_VARIABLE, pg.url)
                .env("LAB_RACE_SCHEMA", store.schema())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outputs: Vec<_> = children
        .iter_mut()
        .map(|child| BufReader::new(child.stdout.take().unwrap()))
        .collect();
    // Every process has its sixteen connections open and its threads waiting; then all go.
    for output in &mut outputs {
        let ready = lines_until(output, "RACE READY");
        assert!(ready.is_some(), "a race process did not get ready");
    }
    for child in &mut children {
        let stdin = child.stdin.as_mut().unwrap();
        writeln!(stdin, "go").unwrap();
        stdin.flush().unwrap();
    }
    let mut results = Vec::new();
    for (child, output) in children.iter_mut().zip(outputs) {
        let lines: Vec<String> = output.lines().map(Result::unwrap).collect();
        results.extend(
            lines
                .iter()
                // libtest may print "test NAME ... " on the same line, before the test's output.
                .filter_map(|line| line.split_once("RACE RESULT "))
                .map(|(_, result)| result.to_owned()),
        );
        assert!(child.wait().unwrap().success(), "{lines:#?}");
    }

    assert_eq!(results.len(), RACE_PROCESSES * RACE_THREADS, "{results:#?}");
    let created: Vec<&String> = results
        .iter()
        .filter(|r| r.starts_with("created "))
        .collect();
    assert_eq!(created.len(), 1, "{results:#?}");
    let id: i64 = created[0]["created ".len()..].parse().unwrap();
    for result in &results {
        assert!(
            *result == format!("created {id}") || *result == format!("replayed {id}"),
            "every caller must report ticket {id}: {results:#?}"
        );
    }
    let operation = race_operation();
    let mut client = inspector(pg.url, &store);
    assert_eq!(
        tickets(&mut client),
        [(
            id,
            "race".to_owned(),
            operation.payload.canonical().to_owned()
        )]
    );
    let saved = records(&mut client);
    assert_eq!(saved.len(), 1);
    assert_eq!((saved[0].4, saved[0].5.clone()), (id, response(id)));
}

/// Reads lines until one ends with `wanted`, returning the lines before it.
fn lines_until(output: &mut impl BufRead, wanted: &str) -> Option<Vec<String>> {
    let mut before = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if output.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line.trim_end().ends_with(wanted) {
            return Some(before);
        }
        before.push(line.trim_end().to_owned());
    }
}

/// One of the race's processes: sixteen callers, each on its own connection, released together
/// when the parent writes a line. It prints one `RACE RESULT` line per caller.
#[test]
#[ignore = "a child process of sixty_four_callers_in_four_processes_converge_on_one_ticket"]
fn one_process_of_the_multi_process_race() {
    let url = std::env::var(server::URL_VARIABLE).expect("started by the multi-process race");
    let schema = std::env::var("LAB_RACE_SCHEMA").expect("started by the multi-process race");
    let options = PostgresOptions::default().with_lock_timeout(Duration::from_secs(30));
    let store = PostgresStore::open_with(&url, &schema, options).unwrap();
    let callers: Vec<PostgresStore> = (0..RACE_THREADS)
        .map(|_| store.connect().unwrap())
        .collect();
    let operation = race_operation();
    let barrier = Barrier::new(RACE_THREADS + 1);
    let outcomes: Vec<lab::Result<Outcome>> = std::thread::scope(|threads| {
        let handles: Vec<_> = callers
            .into_iter()
            .map(|caller| {
                let (barrier, operation) = (&barrier, &operation);
                threads.spawn(move || {
                    barrier.wait();
                    caller.create(operation.request())
                })
            })
            .collect();
        println!("RACE READY");
        std::io::stdout().flush().unwrap();
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).unwrap();
        barrier.wait();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for outcome in outcomes {
        match outcome {
            Ok(Outcome::Created(id)) => println!("RACE RESULT created {id}"),
            Ok(Outcome::Replayed(id)) => println!("RACE RESULT replayed {id}"),
            Err(err) => println!("RACE RESULT error {err}"),
        }
    }
}

#[test]
fn the_lab_command_runs_the_seven_scenarios_against_postgres() {
    let Some(pg) = server::server("the_lab_command_runs_the_seven_scenarios_against_postgres")
    else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["--backend", "postgres", "--database-url", pg.url])
        .args(["--output", "r.json"])
        .current_dir(folder.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let names: Vec<&str> = lines
        .iter()
        .filter_map(|line| line.split_once(": ").map(|(name, _)| name))
        .collect();
    assert_eq!(&names[..7], suite::SCENARIOS);
    assert_eq!(lines[7], "PASS: 7 scenarios");
    let written: lab::serde_json::Value =
        lab::serde_json::from_slice(&std::fs::read(folder.path().join("r.json")).unwrap()).unwrap();
    assert_eq!(written["backend"], "postgres");
    assert_eq!(written["passed"], true);
    assert_eq!(written["scenarios"]["naive_retry"]["tickets"], 2);
    assert_eq!(
        written["scenarios"]["stable_key_retry"]["replay_ticket_id"],
        1
    );
    assert_eq!(written["scenarios"]["concurrent_same_key"]["tickets"], 1);
}

#[test]
fn the_throughput_table_has_a_ratio_for_each_number_of_clients() {
    let Some(pg) = server::server("the_throughput_table_has_a_ratio_for_each_number_of_clients")
    else {
        return;
    };
    let output = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["bench-postgres", "--database-url", pg.url])
        .args(["--calls", "40", "--clients", "1,4"])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].contains("PostgreSQL"), "{stdout}");
    assert!(lines[2].ends_with("keyed/plain"), "{stdout}");
    // Keyed against plain, then replay against select: a row per number of clients each.
    for table in [&lines[3..5], &lines[8..10]] {
        for (line, clients) in table.iter().zip(["1", "4"]) {
            let cells: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cells.len(), 4, "{line}");
            assert_eq!(cells[0], clients);
            assert!(cells[3].parse::<f64>().unwrap() > 0.0, "{line}");
        }
    }
    assert!(lines[7].ends_with("replay/sel"), "{stdout}");
    // The same-key race needs two clients: one row, for 4.
    assert!(lines[12].ends_with("race/plain"), "{stdout}");
    let race: Vec<&str> = lines[13].split_whitespace().collect();
    assert_eq!((race.len(), race[0]), (6, "4"), "{stdout}");
    assert!(race[5].parse::<f64>().unwrap() > 0.0, "{stdout}");
    assert_eq!(lines.len(), 14, "{stdout}");
}

#[test]
fn lab_check_passes_every_contract_point_on_postgres() {
    let Some(pg) = server::server("lab_check_passes_every_contract_point_on_postgres") else {
        return;
    };
    let _cores = crate::conformance::one_at_a_time();
    let started = std::time::Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["check", "--backend", "postgres", "--database-url", pg.url])
        .args(["--rounds", "300"])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    eprintln!(
        "lab check on PostgreSQL: {:.2} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let points = lab::conformance::point_names();
    let summary = format!("conformance: {} passed, 0 failed in ", points.len());
    assert!(stdout.contains(&summary), "{stdout}");
}
