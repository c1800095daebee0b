//! The scenario suite: it passes against the store with any valid operation, and it fails, naming
//! the scenario, against adapters that break the contract.

use lab::serde_json::json;
use lab::{
    CreateRequest, Error, Fault, Operation, OperationKey, Outcome, Payload, Result, Scope,
    SqliteStore, TicketId, TicketTool, suite,
};

fn unusual_operation() -> Operation {
    Operation {
        scope: Scope::new("ticket-robot/éü", "file_incident").unwrap(),
        operation_key: OperationKey::try_from("kl\\u-key \"007\" ~").unwrap(),
        payload: Payload::new(json!({
            "zeta": {"nested": {"deeper": [1, 2.5, null, {"b": true, "a": "ü"}]}},
            "alpha": "第一",
            "priority": "urgent",
        }))
        .unwrap(),
    }
}

#[test]
fn the_suite_observes_the_reference_values_with_any_operation() {
    for operation in [Operation::example(), unusual_operation()] {
        let observed = suite::run(&operation, |_| SqliteStore::temporary()).unwrap();
        assert_eq!(
            observed.lines(),
            [
                r#"naive_retry: {"attempts": 2, "tickets": 2}"#,
                r#"stable_key_retry: {"attempts": 3, "replay_ticket_id": 1, "tickets": 1}"#,
                r#"changed_payload: {"rejected": true, "tickets": 1}"#,
                r#"failure_before_commit: {"tickets_after_retry": 1, "tickets_before_retry": 0}"#,
                r#"concurrent_same_key: {"attempts": 8, "returned_ticket_ids": [1], "tickets": 1}"#,
                r#"new_key_same_payload: {"tickets": 2}"#,
                r#"deleted_replay_record: {"tickets": 2}"#,
            ]
        );
    }
}

#[test]
fn every_scenario_gets_a_fresh_tool() {
    let mut names = Vec::new();
    suite::run(&Operation::example(), |name| {
        names.push(name);
        SqliteStore::temporary()
    })
    .unwrap();
    assert_eq!(names, suite::SCENARIOS);
}

/// A wrapper around the real store whose `create` is replaced, to break one rule on purpose.
struct Broken {
    store: SqliteStore,
    create: fn(&SqliteStore, CreateRequest<'_>) -> Result<Outcome>,
}

impl TicketTool for Broken {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        (self.create)(&self.store, request)
    }
    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        self.store.ticket_ids()
    }
    fn count_records(&self) -> Result<u64> {
        self.store.count_records()
    }
    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        self.store.forget_record(scope, key)
    }
    fn connect(&self) -> Result<Self> {
        Ok(Broken {
            store: self.store.connect()?,
            create: self.create,
        })
    }
}

fn failing_scenario(
    create: fn(&SqliteStore, CreateRequest<'_>) -> Result<Outcome>,
) -> (&'static str, String) {
    let result = suite::run(&Operation::example(), |_| {
        Ok(Broken {
            store: SqliteStore::temporary()?,
            create,
        })
    });
    match result {
        Err(err @ Error::ScenarioFailed { scenario, .. }) => (scenario, err.to_string()),
        other => panic!("the suite should have failed, got {other:?}"),
    }
}

#[test]
fn a_tool_that_skips_the_lookup_fails_the_stable_key_scenario() {
    // Ignoring the key is what skipping the lookup amounts to: every call inserts.
    let (scenario, message) = failing_scenario(|store, request| {
        store.create(CreateRequest {
            key: None,
            ..request
        })
    });
    assert_eq!(scenario, "stable_key_retry");
    assert!(
        message.contains("expected a replay of the saved ticket"),
        "{message}"
    );
}

#[test]
fn a_tool_that_commits_the_ticket_before_its_record_fails_the_rollback_scenario() {
    // The ticket insert commits on its own; the failure then hits before the record is written.
    let (scenario, message) = failing_scenario(|store, request| {
        if request.fault == Fault::BeforeCommit {
            store.create(CreateRequest {
                key: None,
                fault: Fault::None,
                ..request
            })?;
            return Err(Error::InjectedFailure);
        }
        store.create(request)
    });
    assert_eq!(scenario, "failure_before_commit");
    assert!(message.contains("0 ticket(s) stored"), "{message}");
}

#[test]
fn a_tool_that_replays_despite_a_changed_payload_fails_the_conflict_scenario() {
    let (scenario, _) = failing_scenario(|store, request| match store.create(request) {
        Err(Error::PayloadConflict { .. }) => Ok(Outcome::Replayed(1.into())),
        other => other,
    });
    assert_eq!(scenario, "changed_payload");
}

#[test]
fn a_tool_that_reports_a_lost_reply_as_success_fails_the_naive_scenario() {
    let (scenario, message) = failing_scenario(|store, request| {
        store.create(CreateRequest {
            fault: Fault::None,
            ..request
        })
    });
    assert_eq!(scenario, "naive_retry");
    assert!(message.contains("outcome-unknown"), "{message}");
}

#[test]
fn a_tool_that_deduplicates_by_content_fails_the_new_key_scenario() {
    let (scenario, message) = failing_scenario(|store, request| {
        let same_content: Option<TicketId> = store
            .connection()
            .query_row(
                "SELECT id FROM tickets WHERE payload = ?1",
                [request.payload.canonical()],
                |row| row.get(0),
            )
            .ok();
        match same_content {
            Some(id) if request.key.is_some() => Ok(Outcome::Replayed(id)),
            _ => store.create(request),
        }
    });
    assert_eq!(scenario, "new_key_same_payload");
    assert!(message.contains("a newly created ticket"), "{message}");
}

#[test]
fn the_parallel_suite_observes_what_the_sequential_suite_observes() {
    let operation = unusual_operation();
    let sequential = suite::run(&operation, |_| SqliteStore::temporary()).unwrap();
    let parallel = suite::run_parallel(&operation, |_| SqliteStore::temporary()).unwrap();
    assert_eq!(parallel, sequential);
}

#[test]
fn the_parallel_suite_reports_the_first_failing_scenario_in_order() {
    // Ignoring faults breaks naive_retry (first) and failure_before_commit (fourth).
    let result = suite::run_parallel(&Operation::example(), |_| {
        Ok(Broken {
            store: SqliteStore::temporary()?,
            create: |store, request| {
                store.create(CreateRequest {
                    fault: Fault::None,
                    ..request
                })
            },
        })
    });
    match result {
        Err(Error::ScenarioFailed { scenario, .. }) => assert_eq!(scenario, "naive_retry"),
        other => panic!("expected a failure, got {other:?}"),
    }
}
