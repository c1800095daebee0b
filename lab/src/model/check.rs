//! Runs the checker: breadth-first over the reduced model ([`super::reduce`]), on every core for
//! the whole search; a counterexample is then looked for again on one thread, cut at its length,
//! so it is a shortest one and the same bounds always print the same trace.

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
    /// The deepest path explored, in states.
    pub depth: usize,
    /// Wall-clock time of the search, every pass included.
    pub elapsed: Duration,
    /// Distinct states per second of the first pass, the one over the whole state space.
    pub rate: f64,
    /// Threads of the first pass.
    pub threads: usize,
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
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let first = explore(bounds, variant, None, threads)?;
    let Some(mut steps) = first.counterexample.as_ref().map(Counterexample::steps) else {
        return Ok(first);
    };
    // Stateright's breadth-first search records a property's discovery when a state breaks it,
    // but a deeper state of the same block of work (or of another thread) that breaks it too can
    // replace the record. So search again, cut below the counterexample's length, until a cut
    // finds nothing; then once more on one thread, cut at that length, so the counterexample
    // printed is always the same one.
    let mut elapsed = first.elapsed;
    while let Some(cut) = steps.checked_sub(1) {
        let shorter = explore(bounds, variant, Some(cut), threads)?;
        elapsed += shorter.elapsed;
        match shorter.counterexample {
            Some(found) => steps = found.steps(),
            None => break,
        }
    }
    let mut last = explore(bounds, variant, Some(steps), 1)?;
    last.elapsed += elapsed;
    last.rate = first.rate;
    last.threads = first.threads;
    Ok(last)
}

/// The same search, cut at paths of `steps` steps: a counterexample found by [`check`] in
/// `n` steps is a shortest one if this finds none with `n - 1`.
///
/// # Errors
/// As [`check`].
pub fn check_within(bounds: Bounds, variant: Variant, steps: usize) -> Result<Report> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    explore(bounds, variant, Some(steps), threads)
}

fn explore(
    bounds: Bounds,
    variant: Variant,
    steps: Option<usize>,
    threads: usize,
) -> Result<Report> {
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
        .threads(threads)
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
        threads,
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
                " in {:.1} s ({:.0} states per second on {} threads)",
                self.elapsed.as_secs_f64(),
                self.rate,
                self.threads
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
