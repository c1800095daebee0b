//! `conformance::run` against adapters written outside the library: two correct ones pass every
//! run, and each realistic bug is caught in every run, at the contract point that names it.

mod memory;
mod own_sqlite;

use std::time::Instant;

use lab::conformance::{self, Report};
use lab::{SqliteStore, TicketTool};

use memory::{Bug, Memory};
use own_sqlite::KeyOnTicket;

/// Runs of `conformance::run` per adapter in the tests that count catches: 10 unless
/// `LAB_CONFORMANCE_RUNS` says otherwise (`LAB_CONFORMANCE_RUNS=100` for the full count; a run
/// on SQLite takes most of a second).
fn runs() -> usize {
    std::env::var("LAB_CONFORMANCE_RUNS")
        .ok()
        .and_then(|runs| runs.parse().ok())
        .unwrap_or(10)
}

/// The concurrent points need the cores to themselves: two of these tests at once would race
/// each other for them. Each test holds this while it runs.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static CORES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    CORES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn failed_points(report: &Report) -> Vec<&'static str> {
    report.failures().map(|(point, _)| point.name).collect()
}

#[test]
fn the_sqlite_store_passes_every_contract_point_within_ten_seconds() {
    let _cores = one_at_a_time();
    let start = Instant::now();
    let report = conformance::run(SqliteStore::temporary);
    let elapsed = start.elapsed();
    eprintln!(
        "conformance on the SQLite store: {:.2} s",
        elapsed.as_secs_f64()
    );
    report.assert_passed();
    assert_eq!(report.points.len(), conformance::point_names().len());
    assert!(report.points.len() >= 17, "{report}");
}

#[test]
fn a_boxed_tool_runs_the_suite_and_the_conformance_run() {
    let _cores = one_at_a_time();
    let boxed =
        || -> lab::Result<Box<dyn TicketTool + Send>> { Ok(Box::new(Memory::new(Bug::None))) };
    conformance::run(boxed).assert_passed();
    let observed = lab::suite::run(&lab::Operation::example(), |_| boxed()).unwrap();
    assert_eq!(observed.concurrent_same_key.tickets, 1);
}

#[test]
fn two_correct_adapters_pass_every_run() {
    let _cores = one_at_a_time();
    for run in 0..runs() {
        let report = conformance::run(|| Ok(Memory::new(Bug::None)));
        assert!(report.passed(), "in-memory adapter, run {run}:\n{report}");
    }
    for run in 0..runs() {
        let report = conformance::run(KeyOnTicket::temporary);
        assert!(
            report.passed(),
            "key-on-ticket SQLite adapter, run {run}:\n{report}"
        );
    }
}

#[test]
fn a_check_unlock_insert_race_is_caught_in_every_run() {
    let _cores = one_at_a_time();
    for run in 0..runs() {
        let report = conformance::run(|| Ok(Memory::new(Bug::CheckUnlockInsert)));
        let (_, failure) = report
            .failures()
            .find(|(p, _)| p.name == "callers_released_together_converge_on_fresh_keys")
            .unwrap_or_else(|| panic!("run {run} missed the race:\n{report}"));
        assert!(
            failure.likely_cause.contains("check, unlock, insert"),
            "{failure}"
        );
    }
}

#[test]
fn the_narrowest_unlock_and_relock_race_is_caught_in_most_runs() {
    let _cores = one_at_a_time();
    let runs = runs();
    let caught = (0..runs)
        .filter(|_| {
            let report = conformance::run(|| Ok(Memory::new(Bug::CheckUnlockRelock)));
            report
                .point("callers_released_together_converge_on_fresh_keys")
                .is_some_and(|point| !point.passed())
        })
        .count();
    eprintln!("unlock-and-relock race caught in {caught} of {runs} runs");
    // The window is a few nanoseconds, met only when two callers run on two cores at the same
    // moment; found in every run of 20 here, also with the machine busy. Half is a bound no
    // healthy harness misses by chance.
    assert!(caught * 2 >= runs, "caught in only {caught} of {runs} runs");
}

/// Each bug, the contract point that must name it, and a word its likely cause must contain.
const BUGS: &[(Bug, &str, &str)] = &[
    (
        Bug::GlobalKeys,
        "keys_are_scoped_by_caller_and_operation",
        "scoped globally",
    ),
    (
        Bug::CallerOnlyScope,
        "keys_are_scoped_by_caller_and_operation",
        "operation type",
    ),
    (
        Bug::ComparesReceivedText,
        "payloads_are_compared_in_canonical_form",
        "as the text received",
    ),
    (
        Bug::ComparesTitleOnly,
        "payloads_are_compared_in_canonical_form",
        "changed payload was accepted",
    ),
    (
        Bug::AcceptsChangedPayload,
        "scenario_changed_payload",
        "not compared",
    ),
    (
        Bug::ReplaysNewestTicket,
        "each_replay_returns_its_own_ticket",
        "newest",
    ),
    (
        Bug::ReportsReplayAsCreated,
        "scenario_stable_key_retry",
        "replay",
    ),
    (
        Bug::LostReplyRollsBack,
        "a_lost_reply_leaves_the_ticket_committed",
        "rollback",
    ),
    (
        Bug::IgnoresKey,
        "a_lost_reply_leaves_the_ticket_committed",
        "key was not found",
    ),
    (
        Bug::MergesUnkeyedCalls,
        "calls_without_a_key_are_never_merged",
        "merged",
    ),
    (
        Bug::RecordsUnkeyedCalls,
        "calls_without_a_key_are_never_merged",
        "without a key stored",
    ),
    (
        Bug::KeepsTicketOnFailure,
        "a_failure_at_any_step_leaves_nothing",
        "one transaction",
    ),
    (
        Bug::IgnoresFailAt,
        "a_failure_at_any_step_leaves_nothing",
        "ignores the fault",
    ),
    (
        Bug::ForgetKeepsTheRecord,
        "a_forgotten_record_lets_the_key_create_again",
        "forget",
    ),
    (
        Bug::IdsPerConnection,
        "callers_released_together_converge_on_fresh_keys",
        "one ticket",
    ),
];

#[test]
fn every_bug_class_is_caught_in_every_run_at_the_point_that_names_it() {
    let _cores = one_at_a_time();
    for &(bug, point, cause) in BUGS {
        for run in 0..runs() {
            let report = conformance::run(|| Ok(Memory::new(bug)));
            let failure = report
                .failures()
                .find(|(p, _)| p.name == point)
                .map(|(_, failure)| failure);
            let Some(failure) = failure else {
                panic!(
                    "{bug:?}, run {run}: expected {point} to fail; failed {:?}\n{report}",
                    failed_points(&report)
                );
            };
            let text = failure.to_string();
            assert!(text.contains(cause), "{bug:?}: {point}: {text}");
        }
    }
}

#[test]
fn one_failure_does_not_hide_another() {
    let _cores = one_at_a_time();
    let report = conformance::run(|| Ok(Memory::new(Bug::GlobalKeys)));
    let failed = failed_points(&report);
    // Only the point on scoped keys fails: the other points all use one caller, so they still pass.
    assert_eq!(
        failed,
        ["keys_are_scoped_by_caller_and_operation"],
        "{report}"
    );
    assert_eq!(report.points.len(), conformance::point_names().len());
    let text = report.to_string();
    assert!(text.contains("not covered by a pass"), "{text}");
    assert!(text.contains("1 failed"), "{text}");
    let panic = std::panic::catch_unwind(|| report.assert_passed()).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("FAIL keys_are_scoped_by_caller_and_operation"),
        "{message}"
    );
}

#[test]
fn an_adapters_own_error_converts_without_boilerplate() {
    fn call_the_service() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Err("503 from the sandbox".into())
    }
    fn create() -> lab::Result<()> {
        call_the_service()?;
        Ok(())
    }
    let err = create().unwrap_err();
    assert!(matches!(err, lab::Error::Adapter { .. }), "{err:?}");
    assert_eq!(err.to_string(), "adapter: 503 from the sandbox");
    let io = std::io::Error::other("connection reset");
    assert_eq!(
        lab::Error::adapter(io).to_string(),
        "adapter: connection reset"
    );
}

#[test]
fn a_textual_ticket_id_works_through_the_whole_run() {
    let _cores = one_at_a_time();
    // The in-memory adapter numbers its tickets; this one names them as a tracker would.
    struct Named(Memory);
    impl TicketTool for Named {
        fn create(&self, request: lab::CreateRequest<'_>) -> lab::Result<lab::Outcome> {
            let named = |id: &lab::TicketId| lab::TicketId::from(format!("PROJ-{id}"));
            Ok(match self.0.create(request)? {
                lab::Outcome::Created(id) => lab::Outcome::Created(named(&id)),
                lab::Outcome::Replayed(id) => lab::Outcome::Replayed(named(&id)),
            })
        }
        fn ticket_ids(&self) -> lab::Result<Vec<lab::TicketId>> {
            let ids = self.0.ticket_ids()?;
            Ok(ids
                .iter()
                .map(|id| lab::TicketId::from(format!("PROJ-{id}")))
                .collect())
        }
        fn count_records(&self) -> lab::Result<u64> {
            self.0.count_records()
        }
        fn forget_record(&self, scope: &lab::Scope, key: &lab::OperationKey) -> lab::Result<bool> {
            self.0.forget_record(scope, key)
        }
        fn connect(&self) -> lab::Result<Self> {
            Ok(Named(self.0.connect()?))
        }
    }
    conformance::run(|| Ok(Named(Memory::new(Bug::None)))).assert_passed();
    let observed = lab::suite::run(&lab::Operation::example(), |_| {
        Ok(Named(Memory::new(Bug::None)))
    })
    .unwrap();
    assert_eq!(observed.stable_key_retry.replay_ticket_id, "PROJ-1");
    let line = observed.lines()[1].clone();
    assert!(line.contains(r#""replay_ticket_id": "PROJ-1""#), "{line}");
}

#[test]
fn a_point_the_tool_declares_unsupported_is_reported_not_covered_never_passed() {
    let _cores = one_at_a_time();
    /// Speaks for one caller, and says so for any other.
    struct OneCaller(Memory);
    impl TicketTool for OneCaller {
        fn create(&self, request: lab::CreateRequest<'_>) -> lab::Result<lab::Outcome> {
            if request.scope.caller() == "bob-agent" {
                return Err(lab::Error::Unsupported {
                    what: "one caller per token".to_owned(),
                });
            }
            self.0.create(request)
        }
        fn ticket_ids(&self) -> lab::Result<Vec<lab::TicketId>> {
            self.0.ticket_ids()
        }
        fn count_records(&self) -> lab::Result<u64> {
            self.0.count_records()
        }
        fn forget_record(&self, scope: &lab::Scope, key: &lab::OperationKey) -> lab::Result<bool> {
            self.0.forget_record(scope, key)
        }
        fn connect(&self) -> lab::Result<Self> {
            Ok(OneCaller(self.0.connect()?))
        }
    }
    let report = conformance::run(|| Ok(OneCaller(Memory::new(Bug::None))));
    assert!(report.passed(), "{report}");
    let point = report
        .point("keys_are_scoped_by_caller_and_operation")
        .unwrap();
    assert!(!point.passed() && !point.failed(), "{report}");
    let text = report.to_string();
    assert!(
        text.contains("NOT COVERED keys_are_scoped_by_caller_and_operation"),
        "{text}"
    );
    assert!(
        text.contains("the tool says: one caller per token"),
        "{text}"
    );
}
