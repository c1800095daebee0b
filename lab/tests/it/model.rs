//! The model checker (`lab::model`, `lab model`): the design holds at the bounds CI runs, each
//! anti-pattern yields a shortest counterexample to the property it breaks, and the model's
//! service step answers the transition table as the real service does.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use lab::http::{
    CallerToken, HttpTarget, HttpTool, ManualClock, Retention, ServeOptions, TicketServer,
};
use lab::model::{
    self, Action, Before, Bounds, Expect, Protocol, State, TRANSITIONS, Transition, Variant,
};
use lab::{CreateRequest, Error, OperationKey, Outcome, Payload, Scope, SqliteStore, TicketTool};
use stateright::Model;

const HOUR: Duration = Duration::from_secs(3600);

/// The real payload of model payload `index` (the intent's own), spelled `spelling`.
fn payload(index: u8, spelling: u8) -> Payload {
    let tag = model::tag(index);
    let text = if spelling == 0 {
        format!(r#"{{"intent":"{tag}","priority":"normal","title":"Ticket of {tag}"}}"#)
    } else {
        format!(r#"{{"title":"Ticket of {tag}","priority":"normal","intent":"{tag}"}}"#)
    };
    Payload::from_json_text(&text).unwrap()
}

fn scope(id: u8) -> Scope {
    Scope::new(format!("c{}", id + 1), "create_ticket").unwrap()
}

fn key(key: model::Key) -> OperationKey {
    OperationKey::try_from(key.to_string()).unwrap()
}

/// A real answer in the table's terms.
fn expect_of(result: lab::Result<Outcome>) -> Expect {
    match result {
        Ok(Outcome::Created(_)) => Expect::Created,
        Ok(Outcome::Replayed(id)) if id == 1 => Expect::ReplaysOriginal,
        Err(Error::PayloadConflict { .. }) => Expect::Conflict,
        Err(Error::KeyExpired { .. }) => Expect::Expired,
        other => panic!("an answer outside the table: {other:?}"),
    }
}

/// Runs one row against `lab serve` (its claim, its tombstones, its SQLite store): the answer,
/// and how many tickets and records the request added.
fn on_the_service(row: Transition) -> (Expect, u64, u64) {
    let clock = ManualClock::at(1_000_000);
    let server = TicketServer::start(ServeOptions {
        callers: vec![
            "c1=token-c1".parse::<CallerToken>().unwrap(),
            "c2=token-c2".parse::<CallerToken>().unwrap(),
        ],
        admin_token: Some("admin-token".to_owned()),
        workers: 1,
        retention: Some(Retention {
            records: HOUR,
            tombstones: HOUR * 24,
        }),
        clock: Some(Arc::new(clock.clone())),
        ..ServeOptions::default()
    })
    .unwrap();
    let tool = |token: &str| {
        HttpTool::new(HttpTarget::new(&server.url(), token, Some("admin-token")).unwrap())
    };
    let first = model::FIRST;
    let c1 = tool("token-c1");
    if row.before != Before::Nothing {
        let (s, k) = (scope(0), key(first.key));
        let p = payload(first.text.payload, first.text.spelling);
        let request = CreateRequest::keyed(&s, &k, &p);
        assert_eq!(c1.create(request).unwrap(), Outcome::Created(1.into()));
    }
    if row.before == Before::Tombstone {
        clock.advance(HOUR * 2);
        assert_eq!(server.prune().unwrap().records, 1);
    }
    let (tickets, records) = (c1.count_tickets().unwrap(), c1.count_records().unwrap());
    let sent = row.sent.request();
    let caller = if sent.scope == 0 {
        c1
    } else {
        tool("token-c2")
    };
    let p = payload(sent.text.payload, sent.text.spelling);
    let answer = caller.create(CreateRequest::keyed(&scope(sent.scope), &key(sent.key), &p));
    (
        expect_of(answer),
        caller.count_tickets().unwrap() - tickets,
        caller.count_records().unwrap() - records,
    )
}

#[test]
fn the_real_service_answers_every_row_of_the_transition_table_as_the_model_does() {
    for row in TRANSITIONS {
        let (model_answer, model_tickets, model_records) = row.in_the_model();
        let (answer, tickets, records) = on_the_service(row);
        let written = u64::from(row.writes());
        assert_eq!(answer, row.expect, "lab serve, {row:?}");
        assert_eq!(
            Some(answer),
            model_answer,
            "lab serve and the model, {row:?}"
        );
        assert_eq!((tickets, records), (written, written), "lab serve, {row:?}");
        assert_eq!(
            (model_tickets as u64, model_records as u64),
            (tickets, records),
            "lab serve and the model wrote differently, {row:?}"
        );
    }
}

#[test]
fn the_sqlite_store_answers_the_rows_without_a_tombstone_as_the_model_does() {
    // The store alone keeps no tombstones (the service does): those rows are the service's.
    for row in TRANSITIONS.iter().filter(|r| r.before != Before::Tombstone) {
        let store = SqliteStore::temporary().unwrap();
        let first = model::FIRST;
        if row.before == Before::Record {
            let p = payload(first.text.payload, first.text.spelling);
            store
                .create(CreateRequest::keyed(&scope(0), &key(first.key), &p))
                .unwrap();
        }
        let (tickets, records) = (
            store.count_tickets().unwrap(),
            store.count_records().unwrap(),
        );
        let sent = row.sent.request();
        let p = payload(sent.text.payload, sent.text.spelling);
        let answer =
            expect_of(store.create(CreateRequest::keyed(&scope(sent.scope), &key(sent.key), &p)));
        let (model_answer, model_tickets, _) = row.in_the_model();
        assert_eq!(Some(answer), model_answer, "{row:?}");
        assert_eq!(answer, row.expect, "{row:?}");
        assert_eq!(
            store.count_tickets().unwrap() - tickets,
            model_tickets as u64,
            "{row:?}"
        );
        assert_eq!(
            store.count_records().unwrap() - records,
            u64::from(row.writes()),
            "{row:?}"
        );
    }
}

#[test]
fn the_design_holds_every_property_at_the_default_bounds() {
    let report = model::check(Bounds::DEFAULT, Variant::Design).unwrap();
    assert!(
        report.holds(),
        "{}",
        report
            .counterexample
            .map(|c| c.timeline)
            .unwrap_or_default()
    );
    // Every property was checked, the liveness one included.
    assert_eq!(report.properties.len(), 6);
    assert!(
        report
            .properties
            .iter()
            .any(|(_, kind)| *kind == "eventually")
    );
    // The search ran to the end: far more than the handful of states of a counterexample.
    assert!(report.states > 10_000, "{} states", report.states);
}

/// Whether every `always` property of `protocol` holds in `state`, and the names of those broken.
fn broken(protocol: &Protocol, state: &State) -> Vec<&'static str> {
    protocol
        .properties()
        .into_iter()
        .filter(|p| p.expectation == stateright::Expectation::Always)
        .filter(|p| !(p.condition)(protocol, state))
        .map(|p| p.name)
        .collect()
}

#[test]
fn each_anti_pattern_yields_a_shortest_counterexample_to_the_property_it_breaks() {
    for variant in Variant::ANTI_PATTERNS {
        let report = model::check(Bounds::DEFAULT, variant).unwrap();
        let found = report
            .counterexample
            .unwrap_or_else(|| panic!("{variant}: no counterexample"));
        assert_eq!(Some(found.property), variant.breaks(), "{variant}");

        // Replayed step by step, the path is real, and only its last state breaks a property.
        let protocol = Protocol::new(Bounds::DEFAULT, variant);
        let mut state = protocol.init_states().remove(0);
        for (at, action) in found.actions().into_iter().enumerate() {
            assert!(broken(&protocol, &state).is_empty(), "{variant} at {at}");
            let mut enabled = Vec::new();
            protocol.actions(&state, &mut enabled);
            assert!(
                enabled.contains(&action),
                "{variant}: {action:?} not enabled"
            );
            state = protocol.next_state(&state, action).unwrap();
        }
        assert!(
            broken(&protocol, &state).contains(&found.property),
            "{variant}"
        );

        // Shortest: with every path one step shorter explored, nothing breaks.
        let shorter = model::check_within(Bounds::DEFAULT, variant, found.steps() - 1).unwrap();
        assert!(
            shorter.holds(),
            "{variant}: a shorter counterexample exists"
        );

        // And the design, given the same steps, breaks nothing (where they are steps it has).
        let design = Protocol::new(Bounds::DEFAULT, Variant::Design);
        let mut state = design.init_states().remove(0);
        for action in found.actions() {
            let mut enabled = Vec::new();
            design.actions(&state, &mut enabled);
            let Some(next) = enabled
                .contains(&action)
                .then(|| design.next_state(&state, action))
                .flatten()
            else {
                break;
            };
            state = next;
            assert!(
                broken(&design, &state).is_empty(),
                "design on {variant}'s steps"
            );
        }

        // The shape of the mistake shows in the trace.
        let actions = found.actions();
        let text = &found.timeline;
        match variant {
            Variant::FreshKey => assert!(text.contains("k1~2"), "{text}"),
            Variant::CheckThenWrite => {
                assert_eq!(
                    text.matches("looked up the key: no record").count(),
                    2,
                    "{text}"
                );
                assert_eq!(
                    actions
                        .iter()
                        .filter(|a| matches!(a, Action::Write(_)))
                        .count(),
                    2
                );
            }
            Variant::EarlyPrune => {
                assert!(actions.iter().any(|a| matches!(a, Action::Prune(_))));
                assert!(text.contains("leaving nothing behind"), "{text}");
            }
            Variant::MemoryKey => {
                assert!(actions.iter().any(|a| matches!(a, Action::Crash(_))));
                assert!(text.contains(" (key k1~2)\n"), "{text}");
            }
            Variant::RawPayload => {
                assert!(text.contains("payload text in another key order"), "{text}")
            }
            Variant::HeldAfterSend => {
                assert!(actions.contains(&Action::CrashService));
                assert!(text.contains("created ticket 1"), "{text}");
                assert!(text.contains("held, nothing sent"), "{text}");
            }
            Variant::Design => unreachable!(),
        }
        assert!(text.contains("\nVIOLATION "), "{text}");
    }
}

fn lab_model(arguments: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_lab"))
        .arg("model")
        .args(arguments)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn lab_model_exits_0_when_the_properties_hold_1_for_a_counterexample_and_2_for_bad_bounds() {
    let small = [
        "--callers",
        "1",
        "--crashes",
        "1",
        "--prunes",
        "0",
        "--duplicates",
        "0",
    ];
    let (status, stdout, _) = lab_model(&small);
    assert_eq!(status, Some(0), "{stdout}");
    assert!(stdout.contains("no counterexample"), "{stdout}");

    let mut variant = small.to_vec();
    variant.extend(["--variant", "fresh-key"]);
    let (status, stdout, stderr) = lab_model(&variant);
    assert_eq!(status, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("VIOLATION at most one effect per intention"),
        "{stdout}"
    );

    for bad in [
        &["--callers", "4"][..],
        &["--sends", "0"],
        &["--variant", "no-such-design"],
        &["--prunes", "many"],
    ] {
        let (status, stdout, stderr) = lab_model(bad);
        assert_eq!(status, Some(2), "{bad:?}: {stderr}");
        assert!(stdout.is_empty(), "{bad:?} printed {stdout}");
        assert_eq!(stderr.lines().count(), 1, "{bad:?}: {stderr}");
    }
}
