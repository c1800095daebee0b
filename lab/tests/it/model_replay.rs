//! The model and the code, checked against each other: every anti-pattern's shortest
//! counterexample replayed on real runners and a real service breaks the same property there;
//! the design's runs under faults are paths of the model; and a real system that differs from
//! the model in one step is caught at that step.

use lab::model::replay::{Mismatch, replay, replay_with};
use lab::model::{self, Action, Bounds, Protocol, Variant};
use lab::sim::SplitMix64;
use stateright::Model;

#[test]
fn every_anti_patterns_shortest_counterexample_breaks_the_same_property_in_the_real_system() {
    for variant in Variant::ANTI_PATTERNS {
        let report = model::check(Bounds::DEFAULT, variant).unwrap();
        let found = report.counterexample.unwrap();
        let protocol = Protocol::new(Bounds::DEFAULT, variant);
        let replayed = replay(&protocol, &found.actions())
            .unwrap_or_else(|mismatch| panic!("{variant}: {mismatch}\n{}", found.timeline));
        assert!(
            replayed.broken.contains(&found.property),
            "{variant}: the real system broke {:?}, the model {}\n{}",
            replayed.broken,
            found.property,
            replayed.real.join("\n")
        );
        assert_eq!(replayed.real.len(), found.steps(), "{variant}");
    }
}

/// The longest prefix of `actions` the design's model can take.
fn design_prefix(actions: &[Action]) -> Vec<Action> {
    let design = Protocol::new(Bounds::DEFAULT, Variant::Design);
    let mut state = design.init_states().remove(0);
    let mut prefix = Vec::new();
    for &action in actions {
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
        prefix.push(action);
    }
    prefix
}

#[test]
fn the_designs_real_system_given_each_counterexamples_steps_breaks_nothing() {
    let design = Protocol::new(Bounds::DEFAULT, Variant::Design);
    for variant in Variant::ANTI_PATTERNS {
        let found = model::check(Bounds::DEFAULT, variant)
            .unwrap()
            .counterexample
            .unwrap();
        let steps = design_prefix(&found.actions());
        let replayed = replay(&design, &steps)
            .unwrap_or_else(|mismatch| panic!("design on {variant}'s steps: {mismatch}"));
        assert!(
            replayed.broken.is_empty(),
            "design on {variant}'s steps broke {:?}",
            replayed.broken
        );
    }
}

/// A run of the design under faults drawn by `seed`: at each step, one of the steps the model
/// allows, until none is left or `most` were taken. Prunes are left out while the service holds
/// more than one record: a real pruning pass prunes every record past the window at once.
fn random_run(protocol: &Protocol, seed: u64, most: usize) -> Vec<Action> {
    let mut rng = SplitMix64::new(seed);
    let mut state = protocol.init_states().remove(0);
    let mut path = Vec::new();
    while path.len() < most {
        let mut enabled = Vec::new();
        protocol.actions(&state, &mut enabled);
        enabled.retain(|a| !matches!(a, Action::Prune(_)) || state.store.records.len() == 1);
        if enabled.is_empty() {
            break;
        }
        let action = enabled[rng.index(enabled.len())];
        state = protocol.next_state(&state, action).unwrap();
        path.push(action);
    }
    path
}

#[test]
fn runs_of_the_real_runner_and_service_under_faults_are_paths_of_the_model() {
    let protocol = Protocol::new(Bounds::DEFAULT, Variant::Design);
    for seed in 1..=12 {
        let path = random_run(&protocol, seed, 40);
        let replayed = replay(&protocol, &path)
            .unwrap_or_else(|mismatch| panic!("seed {seed}: {mismatch}\n{path:?}"));
        assert!(
            replayed.broken.is_empty(),
            "seed {seed}: {:?}",
            replayed.broken
        );
        assert_eq!(replayed.real.len(), path.len());
    }
}

/// A retry after a lost reply: the runner's second send must carry the first one's key.
const RETRY: [Action; 6] = [
    Action::Save(0),
    Action::Send(0),
    Action::Deliver(0),
    Action::Timeout(0),
    Action::Send(0),
    Action::Deliver(0),
];

fn one_caller(variant: Variant) -> Protocol {
    Protocol::new(
        Bounds {
            callers: 1,
            ..Bounds::DEFAULT
        },
        variant,
    )
}

#[test]
fn a_runner_that_differs_from_the_model_in_one_step_fails_at_that_step() {
    // The design's model, a runner whose client makes a new key per send: caught at the retry.
    let caught: Mismatch = replay_with(&one_caller(Variant::Design), Variant::FreshKey, &RETRY)
        .expect_err("a fresh key per send is not the model's runner");
    assert_eq!(caught.step, 4, "{caught}");
    assert_eq!(caught.action, Some(Action::Send(0)), "{caught}");
    assert!(caught.real.contains("k1~2"), "{caught}");
    // The other way: a model that makes a new key per send, the lab's runner.
    let caught = replay_with(&one_caller(Variant::FreshKey), Variant::Design, &RETRY)
        .expect_err("the lab's runner keeps its key");
    assert_eq!(caught.step, 4, "{caught}");
    // The same path, the same design on both sides, holds.
    let held = replay(&one_caller(Variant::Design), &RETRY).unwrap();
    assert!(held.broken.is_empty(), "{:?}", held.broken);
}

#[test]
fn a_service_that_prunes_without_a_tombstone_is_caught_where_the_model_keeps_one() {
    let path = [
        Action::Save(0),
        Action::Send(0),
        Action::Deliver(0),
        Action::Timeout(0),
        Action::Prune(0),
        Action::Send(0),
        Action::Deliver(0),
    ];
    let caught = replay_with(&one_caller(Variant::Design), Variant::EarlyPrune, &path)
        .expect_err("a delete without a tombstone is not the model's prune");
    assert_eq!(caught.step, 6, "{caught}");
    assert!(caught.model.contains("Expired"), "{caught}");
}

#[test]
fn a_step_the_model_does_not_allow_is_refused_before_the_real_system_takes_it() {
    let caught = replay(
        &one_caller(Variant::Design),
        &[Action::Save(0), Action::Receive(0)],
    )
    .expect_err("nothing to receive");
    assert_eq!(caught.step, 1, "{caught}");
    assert!(caught.model.contains("does not allow"), "{caught}");
}
