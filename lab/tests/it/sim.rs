//! The simulator: the correct store passes generated histories, every anti-pattern is caught and
//! shrunk to a history that replays from its seed, and the fail-at-step-N sweep stays clean.

use std::process::Command;

use lab::sim::{
    self, CallResult, Plan, SweepPath, TicketRow, Variant, ViolationKind, What, check, explore,
    find_counterexample, sweep,
};
use lab::{Fault, Step, TicketId};

use crate::repository_root;

#[test]
fn three_hundred_histories_against_the_correct_store_break_no_invariant() {
    let found = explore(Variant::Correct, 1, 300).unwrap();
    assert!(found.failures.is_empty(), "{found}");
    let tally = &found.tally;
    assert_eq!(tally.histories, 300);
    // Every kind of fault was injected, so "no violation" means something.
    for (kind, count) in [
        ("lost replies", tally.lost_replies),
        ("before commit", tally.before_commit),
        ("crashes", tally.crashes),
        ("intents lost before saving", tally.lost_before_saving),
        ("resumed intents", tally.resumed),
        ("concurrent duplicates", tally.concurrent_duplicates),
        ("changed payloads", tally.changed_payloads),
        ("pruned records", tally.pruned),
        ("conflicts", tally.conflicts),
    ] {
        assert!(count > 0, "no {kind} in 300 histories");
    }
    assert!(
        tally.failed_at.iter().all(|&n| n > 0),
        "{:?}",
        tally.failed_at
    );
}

#[test]
fn a_history_replays_exactly_from_its_seed() {
    for seed in [3, 17, 101] {
        let first = Variant::Correct.run(&Plan::generate(seed)).unwrap();
        let again = Variant::Correct.run(&Plan::generate(seed)).unwrap();
        assert_eq!(first.events, again.events);
        assert_eq!(first.end, again.end);
    }
}

#[test]
fn each_anti_pattern_is_caught_and_its_shrunk_history_replays_from_its_seed() {
    for variant in Variant::ANTI_PATTERNS {
        let found = find_counterexample(variant, 1, 1000)
            .unwrap()
            .unwrap_or_else(|| panic!("{variant} was not caught in 1000 histories"));
        assert_eq!(Some(found.target), variant.breaks(), "{found}");
        let small = found.shrunk.plan.size();
        assert!(small.callers == 1 && small.intents <= 2, "{found}");
        assert!(found.shrunk.history.events.len() <= 12, "{found}");
        // The printed seed finds the same history and shrinks it the same way.
        let replayed = find_counterexample(variant, found.seed, 1)
            .unwrap()
            .unwrap();
        assert_eq!(replayed.to_string(), found.to_string());
        // The shrunk plan itself replays to the same steps and the same store.
        let again = variant.run(&found.shrunk.plan).unwrap();
        assert_eq!(again.events, found.shrunk.history.events);
        assert_eq!(check(&again), found.shrunk.findings);
    }
}

#[test]
fn the_correct_store_passes_the_anti_patterns_shrunk_histories() {
    for variant in Variant::ANTI_PATTERNS {
        let found = find_counterexample(variant, 1, 1000).unwrap().unwrap();
        let history = Variant::Correct.run(&found.shrunk.plan).unwrap();
        assert!(
            check(&history).violations.is_empty(),
            "{variant}: {history:?}"
        );
    }
}

#[test]
fn the_fail_at_step_sweep_covers_every_step_with_no_violation() {
    let rows = sweep(Variant::Correct).unwrap();
    assert_eq!(rows.len(), 14);
    for step in Step::ALL {
        assert!(
            rows.iter().any(|r| r.fault == Fault::FailAt(step)),
            "{step:?}"
        );
    }
    for row in &rows {
        assert!(row.findings.violations.is_empty(), "{row}");
        assert_eq!((row.tickets, row.records), (1, 1), "{row}");
        let faulted = match row.path {
            SweepPath::NewKey => &row.results[0],
            SweepPath::Replay => &row.results[1],
        };
        let expected_first = match (row.path, row.fault) {
            (_, Fault::LoseReply) => "unknown",
            (SweepPath::Replay, Fault::FailAt(Step::Begin | Step::Lookup)) => "failed",
            // On the replay path the create returns before it reaches any insert.
            (SweepPath::Replay, _) => "replayed",
            (SweepPath::NewKey, _) => "failed",
        };
        let observed = match faulted {
            CallResult::Unknown => "unknown",
            CallResult::Failed(_) => "failed",
            CallResult::Replayed(id) if *id == 1 => "replayed",
            _ => "other",
        };
        assert_eq!(observed, expected_first, "{row}");
        let retry = row.results.last().unwrap();
        let expected_retry = match (row.path, row.fault) {
            (SweepPath::NewKey, Fault::LoseReply) | (SweepPath::Replay, _) => {
                CallResult::Replayed(1.into())
            }
            (SweepPath::NewKey, _) => CallResult::Created(1.into()),
        };
        assert_eq!(retry, &expected_retry, "{row}");
    }
}

#[test]
fn the_sweep_fails_a_tool_that_keeps_no_record() {
    let rows = sweep(Variant::MemoryKey).unwrap();
    assert!(
        rows.iter().all(|r| r
            .findings
            .violations
            .iter()
            .any(|v| v.kind == ViolationKind::Unpaired)),
        "{}",
        sim::sweep_table(&rows)
    );
}

/// A history without retention runs, so every ticket keeps its record.
fn unpruned(seed: u64) -> lab::sim::History {
    let mut plan = Plan::generate(seed);
    plan.prune_every = None;
    Variant::Correct.run(&plan).unwrap()
}

#[test]
fn the_checker_reports_a_second_ticket_for_one_key() {
    let mut history = unpruned(5);
    assert!(check(&history).violations.is_empty());
    let copy = history.end.tickets[0].clone();
    let id = TicketId::from(history.end.tickets.last().unwrap().id.as_i64().unwrap() + 1);
    history.end.tickets.push(TicketRow { id, ..copy });
    let findings = check(&history);
    assert_eq!(
        findings.violations[0].kind,
        ViolationKind::DuplicateTicket,
        "{findings:?}"
    );
    // The new ticket has no record either.
    assert!(
        findings
            .violations
            .iter()
            .any(|v| v.kind == ViolationKind::Unpaired)
    );
}

#[test]
fn the_checker_reports_a_record_without_its_ticket_and_a_ticket_of_another_scope() {
    let mut history = unpruned(5);
    let records = history.end.records.as_mut().unwrap();
    records[0].ticket_id = 999.into();
    let findings = check(&history);
    assert!(
        findings
            .violations
            .iter()
            .any(|v| v.kind == ViolationKind::Unpaired
                && v.detail.contains("ticket 999, which does not exist")),
        "{findings:?}"
    );
    let mut history = unpruned(5);
    history.end.tickets[0].caller = "someone-else".to_owned();
    let findings = check(&history);
    assert!(
        findings
            .violations
            .iter()
            .any(|v| v.kind == ViolationKind::CrossScope)
    );
}

#[test]
fn a_new_ticket_after_a_pruned_record_is_the_retention_boundary_not_a_violation() {
    let boundary = (1..400)
        .map(|seed| Variant::Correct.run(&Plan::generate(seed)).unwrap())
        .find(|history| check(history).allowed.retention_boundary > 0)
        .expect("some history crosses the retention boundary");
    assert!(check(&boundary).violations.is_empty());
    assert!(boundary.events.iter().any(|e| matches!(
        &e.what,
        What::Pruned { idle, .. } if *idle >= boundary.plan.retention
    )));
    // The same history, judged as if the record had been pruned too early, is a violation.
    let mut early = boundary.clone();
    early.plan.retention = u64::MAX;
    let findings = check(&early);
    assert_eq!(findings.violations[0].kind, ViolationKind::DuplicateTicket);
}

#[test]
fn the_books_counterexamples_and_sweep_match_a_fresh_run() {
    let folder = repository_root().join("src/simulation");
    for (name, fresh) in sim::book_examples().unwrap() {
        let committed = std::fs::read_to_string(folder.join(&name)).unwrap_or_default();
        assert_eq!(
            committed, fresh,
            "src/simulation/{name} disagrees with a fresh run: regenerate it with \
             `cargo run -p lab -- simulate --examples src/simulation`"
        );
    }
}

#[test]
fn the_simulate_command_reports_its_runs_and_exit_status() {
    let lab = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lab"))
            .arg("simulate")
            .args(args)
            .output()
            .unwrap()
    };
    let correct = lab(&["--seed", "1", "--histories", "20"]);
    let text = String::from_utf8(correct.stdout).unwrap();
    assert!(correct.status.success(), "{text}");
    assert!(text.contains("histories run: 20 "), "{text}");
    assert!(text.contains("lost reply after commit"), "{text}");
    assert!(
        text.contains("violations found: 0, in 0 of 20 histories"),
        "{text}"
    );

    let caught = lab(&["--variant", "fresh-key", "--histories", "50"]);
    let text = String::from_utf8(caught.stdout).unwrap();
    assert!(caught.status.success(), "{text}");
    assert!(
        text.contains("replay: lab simulate --variant fresh-key --seed "),
        "{text}"
    );
    assert!(text.contains("VIOLATION duplicate ticket"), "{text}");

    let sweep = lab(&["--sweep"]);
    let text = String::from_utf8(sweep.stdout).unwrap();
    assert!(sweep.status.success(), "{text}");
    assert!(text.contains("0 with violations"), "{text}");

    let bad = lab(&["--histories", "0"]);
    assert_eq!(bad.status.code(), Some(2));
    let bad = lab(&["--variant", "optimistic"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// The lab's store, except that a changed payload under a used key is replayed instead of
/// rejected: the mistake the seven scenarios cannot see once the scenario's own conflict passes.
struct ReplaysAnyPayload(lab::SqliteStore);

impl lab::TicketTool for ReplaysAnyPayload {
    fn create(&self, request: lab::CreateRequest<'_>) -> lab::Result<lab::Outcome> {
        match self.0.create(request) {
            Err(lab::Error::PayloadConflict { .. }) => {
                let key = request.key.expect("only a keyed call conflicts");
                let saved = self
                    .0
                    .saved_response(request.scope, key)?
                    .unwrap_or_default();
                let saved: lab::serde_json::Value = lab::serde_json::from_str(&saved).unwrap();
                request.reply(lab::Outcome::Replayed(
                    saved["ticket_id"].as_i64().unwrap().into(),
                ))
            }
            other => other,
        }
    }
    fn ticket_ids(&self) -> lab::Result<Vec<TicketId>> {
        self.0.ticket_ids()
    }
    fn count_records(&self) -> lab::Result<u64> {
        self.0.count_records()
    }
    fn forget_record(&self, scope: &lab::Scope, key: &lab::OperationKey) -> lab::Result<bool> {
        self.0.forget_record(scope, key)
    }
    fn connect(&self) -> lab::Result<Self> {
        Ok(ReplaysAnyPayload(self.0.connect()?))
    }
}

impl sim::Subject for ReplaysAnyPayload {
    type Pending = std::convert::Infallible;
    fn resume(
        &self,
        _request: lab::CreateRequest<'_>,
        pending: Self::Pending,
    ) -> sim::Progress<Self::Pending> {
        match pending {}
    }
    fn view(&self) -> lab::Result<sim::StoreView> {
        sim::read_lab_schema(self.0.connection())
    }
}

#[test]
fn the_checker_flags_an_adapter_that_accepts_a_changed_payload() {
    let mut caught = Vec::new();
    for seed in 1..=40 {
        let tool = ReplaysAnyPayload(lab::SqliteStore::temporary().unwrap());
        let history = sim::run(&Plan::generate(seed), &tool).unwrap();
        let findings = check(&history);
        if let Some(v) = findings
            .violations
            .iter()
            .find(|v| v.kind == ViolationKind::AcceptedChangedPayload)
        {
            caught.push((seed, v.detail.clone()));
        }
        // The lab's own store, on the same plan, is never flagged.
        let correct = sim::run(
            &Plan::generate(seed),
            &lab::SqliteStore::temporary().unwrap(),
        )
        .unwrap();
        assert!(check(&correct).violations.is_empty(), "seed {seed}");
    }
    assert!(
        caught.len() >= 5,
        "caught in only {} of 40 histories: {caught:?}",
        caught.len()
    );
    assert!(caught[0].1.contains("sent another payload"), "{caught:?}");
}

#[test]
fn an_agent_told_never_to_retry_still_duplicates_when_its_loop_retries_with_a_fresh_call() {
    for prompt in sim::PROMPTS {
        let fresh = sim::run_agent(sim::AgentLoop::FreshCallOnTimeout, prompt).unwrap();
        // The model asked once, as its prompt says; the loop sent twice, each with a new key.
        assert_eq!(fresh.model_calls, 1, "{fresh}");
        assert_eq!(fresh.sends, 2, "{fresh}");
        assert_eq!(fresh.tickets, 2, "{fresh}");

        let saved = sim::run_agent(sim::AgentLoop::SavedKeyOnTimeout, prompt).unwrap();
        // The same two sends, with the key saved when the task was accepted: one ticket.
        assert_eq!((saved.model_calls, saved.sends), (1, 2), "{saved}");
        assert_eq!(saved.tickets, 1, "{saved}");
    }
    // The prompts the book shows include the two instructions the anti-pattern is about.
    assert!(sim::PROMPTS.iter().any(|p| p.contains("Never retry")));
    assert!(
        sim::PROMPTS
            .iter()
            .any(|p| p.contains("reuse the idempotency key"))
    );
}
