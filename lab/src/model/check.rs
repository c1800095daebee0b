//! Runs the checker: breadth-first over the reduced model ([`super::reduce`]), on one thread, so
//! the same bounds always print the same figures and the same trace. Stateright's breadth-first
//! search on several threads hands states out in blocks, so a thread can reach a state first by a
//! longer path than its shortest, and the deepest path it reports changed from run to run (27 or
//! 28 steps for `--duplicates 1`); a counterexample is looked for again, cut below its length,
//! until it is a shortest one.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model};

use crate::error::{Error, Result};

use super::bounds::{Bounds, Variant};
use super::protocol::{Action, Protocol, State};
use super::reduce::{Reduced, concrete_path};
use super::timeline::{Moment, render};

/// A shortest path to a state that breaks a property.
#[derive(Clone, Debug)]
pub struct Counterexample {
    /// The property broken.
    pub property: &'static str,
    /// The states from the initial one, each with the action taken from it (none for the last).
    pub path: Vec<(State, Option<Action>)>,
    /// The path as the simulator prints a history.
    pub timeline: String,
    /// The path as moments between lanes, for a drawing.
    pub moments: Vec<Moment>,
}

impl Counterexample {
    /// Steps from the initial state.
    pub fn steps(&self) -> usize {
        self.path.len().saturating_sub(1)
    }

    /// The actions, in order.
    pub fn actions(&self) -> Vec<Action> {
        self.path.iter().filter_map(|(_, a)| *a).collect()
    }
}

/// What one exploration found.
#[derive(Clone, Debug)]
pub struct Report {
    /// The bounds.
    pub bounds: Bounds,
    /// The design checked.
    pub variant: Variant,
    /// States generated, revisits included.
    pub generated: usize,
    /// Distinct states.
    pub states: usize,
    /// The deepest state, in states from the initial one along its shortest path (the initial
    /// state is depth 1).
    pub depth: usize,
    /// Wall-clock time of the search, every pass included.
    pub elapsed: Duration,
    /// Distinct states per second of the first pass, the one over the whole state space.
    pub rate: f64,
    /// Each property, and whether it is an invariant (`always`) or liveness (`eventually`).
    pub properties: Vec<(&'static str, &'static str)>,
    /// The shortest counterexample, if any property broke.
    pub counterexample: Option<Counterexample>,
}

/// Explores every interleaving of `variant` within `bounds`, stopping at the first (shortest)
/// counterexample.
///
/// # Errors
/// [`Error::InputInvalid`] naming the option whose bound is out of range.
pub fn check(bounds: Bounds, variant: Variant) -> Result<Report> {
    let first = explore(bounds, variant, None)?;
    let Some(mut steps) = first.counterexample.as_ref().map(Counterexample::steps) else {
        return Ok(first);
    };
    // Stateright's breadth-first search records a property's discovery when a state breaks it,
    // but a deeper state of the same block of work that breaks it too can replace the record. So
    // search again, cut below the counterexample's length, until a cut finds nothing; then once
    // more, cut at that length, so the figures printed are those of the search that found it.
    let mut elapsed = first.elapsed;
    while let Some(cut) = steps.checked_sub(1) {
        let shorter = explore(bounds, variant, Some(cut))?;
        elapsed += shorter.elapsed;
        match shorter.counterexample {
            Some(found) => steps = found.steps(),
            None => break,
        }
    }
    let mut last = explore(bounds, variant, Some(steps))?;
    last.elapsed += elapsed;
    last.rate = first.rate;
    Ok(last)
}

/// The same search, cut at paths of `steps` steps: a counterexample found by [`check`] in
/// `n` steps is a shortest one if this finds none with `n - 1`.
///
/// # Errors
/// As [`check`].
pub fn check_within(bounds: Bounds, variant: Variant, steps: usize) -> Result<Report> {
    explore(bounds, variant, Some(steps))
}

fn explore(bounds: Bounds, variant: Variant, steps: Option<usize>) -> Result<Report> {
    if let Some(problem) = bounds.problem() {
        return Err(Error::InputInvalid {
            subject: "command line".to_owned(),
            problem,
        });
    }
    let protocol = Protocol::new(bounds, variant);
    let properties = protocol
        .properties()
        .iter()
        .map(|p| {
            let kind = match p.expectation {
                Expectation::Always => "always",
                Expectation::Eventually => "eventually",
                Expectation::Sometimes => "sometimes",
            };
            (p.name, kind)
        })
        .collect();
    let started = Instant::now();
    let mut builder = Reduced(protocol)
        .checker()
        .finish_when(HasDiscoveries::AnyFailures);
    if let Some(steps) = steps {
        // Depth counts states: the initial state is depth 1, and states at the target depth
        // are not checked, so paths of `steps` steps are the longest checked.
        builder = builder.target_max_depth(steps + 2);
    }
    let checker = builder.spawn_bfs().join();
    let elapsed = started.elapsed();
    let discoveries = checker.discoveries();
    // With a stop at the first failure there is usually one; if there were more, take the
    // shortest, then by name, so the report does not depend on a map's order.
    let found = discoveries
        .into_iter()
        .min_by_key(|(name, path)| (path.clone().into_vec().len(), *name));
    let counterexample = found
        .map(|(property, path)| {
            let path = concrete_path(&protocol, &path.into_vec()).ok_or_else(|| {
                Error::ScenarioFailed {
                    scenario: "model",
                    expected: "every step of the reduced search to be a step of the protocol"
                        .to_owned(),
                    observed: format!("a path to {property} that the protocol cannot take"),
                }
            })?;
            let (timeline, moments) = render(&protocol, &path, property);
            Ok::<_, Error>(Counterexample {
                property,
                path,
                timeline,
                moments,
            })
        })
        .transpose()?;
    let states = checker.unique_state_count();
    Ok(Report {
        bounds,
        variant,
        generated: checker.state_count(),
        states,
        depth: checker.max_depth(),
        elapsed,
        rate: states as f64 / elapsed.as_secs_f64().max(1e-9),
        properties,
        counterexample,
    })
}

impl Report {
    /// Whether every property held.
    pub fn holds(&self) -> bool {
        self.counterexample.is_none()
    }

    /// The report as `lab model` prints it. With `timed` false the time is left out, so two runs
    /// print the same text.
    pub fn text(&self, timed: bool) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "model of {} ({}): lab model --variant {} {}",
            self.variant,
            self.variant.describe(),
            self.variant,
            self.bounds.arguments()
        );
        let time = if timed {
            format!(
                " in {:.1} s ({:.0} states per second)",
                self.elapsed.as_secs_f64(),
                self.rate
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "explored {} distinct states ({} generated), paths up to {} steps{time}",
            self.states,
            self.generated,
            self.depth.saturating_sub(1)
        );
        for (name, kind) in &self.properties {
            let ids = crate::contract::label(crate::contract::Checker::Model, name);
            let _ = writeln!(out, "  {kind:<10} {name} {ids}");
        }
        match &self.counterexample {
            None => {
                let _ = writeln!(
                    out,
                    "no counterexample: every property holds within the bounds"
                );
            }
            Some(found) => {
                let _ = writeln!(
                    out,
                    "shortest counterexample ({} steps, breadth-first) to: {}",
                    found.steps(),
                    found.property
                );
                out.push_str(&found.timeline);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Bounds = Bounds {
        callers: 1,
        sends: 2,
        losses: 1,
        duplicates: 0,
        crashes: 1,
        prunes: 1,
    };

    #[test]
    fn a_counterexample_is_a_shortest_one_and_the_same_every_run() {
        let first = check(SMALL, Variant::FreshKey).unwrap();
        let found = first.counterexample.as_ref().unwrap();
        assert!(
            check_within(SMALL, Variant::FreshKey, found.steps() - 1)
                .unwrap()
                .holds()
        );
        assert!(
            !check_within(SMALL, Variant::FreshKey, found.steps())
                .unwrap()
                .holds()
        );
        let again = check(SMALL, Variant::FreshKey).unwrap();
        assert_eq!(first.text(false), again.text(false));
    }

    /// The deepest state's distance from the initial state, by a plain breadth-first search of
    /// the same model, one level at a time.
    fn deepest_shortest_path(bounds: Bounds, variant: Variant) -> usize {
        let model = Reduced(Protocol::new(bounds, variant));
        let mut seen: std::collections::HashSet<State> = model.init_states().into_iter().collect();
        let mut level: Vec<State> = seen.iter().cloned().collect();
        let mut steps = 0;
        let mut actions = Vec::new();
        loop {
            let mut next_level = Vec::new();
            for state in &level {
                model.actions(state, &mut actions);
                for action in actions.drain(..) {
                    if let Some(next) = model.next_state(state, action)
                        && seen.insert(next.clone())
                    {
                        next_level.push(next);
                    }
                }
            }
            if next_level.is_empty() {
                return steps;
            }
            steps += 1;
            level = next_level;
        }
    }

    #[test]
    fn the_depth_printed_is_the_deepest_shortest_path_every_run() {
        // A bound where the search on two threads printed 27 or 28 steps from run to run.
        let bounds = Bounds {
            duplicates: 1,
            ..Bounds::DEFAULT
        };
        let expected = deepest_shortest_path(bounds, Variant::Design);
        let first = check(bounds, Variant::Design).unwrap();
        assert_eq!(first.depth - 1, expected, "{}", first.text(false));
        let again = check(bounds, Variant::Design).unwrap();
        assert_eq!(first.text(false), again.text(false));
    }

    #[test]
    fn bad_bounds_are_bad_input() {
        let bad = Bounds {
            callers: 0,
            ..SMALL
        };
        let err = check(bad, Variant::Design).unwrap_err();
        assert!(err.is_bad_input(), "{err}");
        assert!(err.to_string().contains("--callers 0"), "{err}");
    }
}
