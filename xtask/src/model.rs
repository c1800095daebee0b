//! The model-checking chapter's figures, from a run of `lab::model` while the book builds
//! (`{{#lab-model KIND VARIANT [FIELD]}}`):
//!
//! - `{{#lab-model report VARIANT}}`: the report `lab model --variant VARIANT` prints at the
//!   default bounds (bounds, states, time, properties, and the counterexample if any), as text.
//! - `{{#lab-model value VARIANT FIELD}}`: one figure of that run: `states`, `generated`,
//!   `seconds`, `depth` (the longest path, in steps), `steps` (the counterexample's length),
//!   `property` (the one it breaks), `bounds` (the command-line bounds).
//! - `{{#lab-model timeline VARIANT}}`: the counterexample drawn as the book's timelines are
//!   (lanes for each runner, the network and the service; an SVG without script, text in
//!   `currentColor`, a title, a description and a table as its text alternative), after its text.
//!
//! - `{{#lab-model depth}}`: the table of bounds, states and times of `model-depth.json`, the
//!   release-build run `cargo xtask model-depth` recorded.
//!
//! - `{{#lab-model replays}}`: each anti-pattern's counterexample replayed on the real runners and
//!   service ([`lab::model::replay`]), as a table: its steps, the property the model breaks, and
//!   those broken in the real system.
//! - `{{#lab-model replay VARIANT}}`: one replay, the model's steps beside the real system's, as
//!   a table, and the counterexample's drawing with the real system's words on its arrows.
//!
//! Each variant is explored once per build; the directives share the run.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{LazyLock, Mutex, PoisonError};

use anyhow::{Context, Result, bail};
use lab::model::{self, Bounds, Counterexample, Lane, Mark, Moment, Report, Variant};

use crate::diagram;
use crate::diagram::escape;
use crate::timeline::{COMMIT, REFUSED, REPLAY, wrap};

static RUNS: LazyLock<Mutex<HashMap<&'static str, Report>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The run of `variant` at the default bounds, made once per process.
fn run(variant: Variant) -> Result<Report> {
    let mut runs = RUNS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(report) = runs.get(variant.name()) {
        return Ok(report.clone());
    }
    let report = model::check(Bounds::DEFAULT, variant)
        .with_context(|| format!("exploring the model of {variant}"))?;
    runs.insert(variant.name(), report.clone());
    Ok(report)
}

/// Expands one directive's arguments (after `lab-model`).
pub fn directive(arguments: &str) -> Result<String> {
    let words: Vec<&str> = arguments.split_whitespace().collect();
    let variant = |name: &str| {
        Variant::from_name(name).with_context(|| {
            format!(
                "lab-model: no variant `{name}` (known: {})",
                Variant::ALL.map(Variant::name).join(", ")
            )
        })
    };
    match words.as_slice() {
        ["report", name] => Ok(format!("```text\n{}```", run(variant(name)?)?.text(true))),
        ["value", name, field] => value(&run(variant(name)?)?, field),
        ["depth"] => crate::model_depth::table(&crate::root()),
        ["replays"] => replays(),
        ["replay", name] => replay_drawn(variant(name)?),
        ["timeline", name] => {
            let report = run(variant(name)?)?;
            let found = report
                .counterexample
                .as_ref()
                .with_context(|| format!("lab-model: {name} has no counterexample to draw"))?;
            Ok(format!(
                "```text\n{}```\n\n{}\n\n{}",
                found.timeline,
                svg(report.variant, found),
                text_alternative(report.variant, found)
            ))
        }
        _ => bail!(
            "lab-model takes `report VARIANT`, `value VARIANT FIELD`, `timeline VARIANT`, \
             `depth`, `replays` or `replay VARIANT`, not `{arguments}`"
        ),
    }
}

fn value(report: &Report, field: &str) -> Result<String> {
    let found = || {
        report
            .counterexample
            .as_ref()
            .with_context(|| format!("lab-model: {} has no counterexample", report.variant))
    };
    Ok(match field {
        "states" => report.states.to_string(),
        "generated" => report.generated.to_string(),
        "seconds" => format!("{:.1}", report.elapsed.as_secs_f64()),
        "depth" => report.depth.saturating_sub(1).to_string(),
        "steps" => found()?.steps().to_string(),
        "property" => found()?.property.to_owned(),
        "bounds" => report.bounds.arguments(),
        other => bail!(
            "lab-model value: no field `{other}` (known: states, generated, seconds, depth, \
             steps, property, bounds)"
        ),
    })
}

/// The counterexample of `variant` replayed on the real system.
fn replayed(variant: Variant) -> Result<(Report, lab::model::replay::Replayed)> {
    let report = run(variant)?;
    let found = report
        .counterexample
        .as_ref()
        .with_context(|| format!("lab-model: {variant} has no counterexample to replay"))?;
    let protocol = lab::model::Protocol::new(report.bounds, variant);
    let replayed = lab::model::replay::replay(&protocol, &found.actions())
        .map_err(|mismatch| anyhow::anyhow!("replaying {variant}'s counterexample: {mismatch}"))?;
    Ok((report, replayed))
}

fn replays() -> Result<String> {
    let mut out = String::from(
        "| Anti-pattern | Real service | Steps | The model breaks | Broken in the real system |\n\
         | --- | --- | ---: | --- | --- |\n",
    );
    for variant in Variant::ANTI_PATTERNS {
        let (report, replayed) = replayed(variant)?;
        let found = report
            .counterexample
            .as_ref()
            .with_context(|| format!("{variant}: no counterexample"))?;
        let served = match lab::model::replay::Served::of(variant) {
            lab::model::replay::Served::LabServe => "`lab serve`",
            lab::model::replay::Served::CheckThenWrite => "the simulator's check-then-write store",
            lab::model::replay::Served::RawPayload => "the simulator's raw-text store",
        };
        let broken = if replayed.broken.is_empty() {
            "nothing".to_owned()
        } else {
            replayed.broken.join("; ")
        };
        let _ = writeln!(
            out,
            "| {variant} | {served} | {} | {} | {broken} |",
            found.steps(),
            found.property
        );
    }
    Ok(out)
}

fn replay_drawn(variant: Variant) -> Result<String> {
    let (report, replayed) = replayed(variant)?;
    let found = report
        .counterexample
        .as_ref()
        .with_context(|| format!("{variant}: no counterexample"))?;
    // The drawing first, then the side-by-side table in an open text block: at phone width the
    // drawing gives way to that table (theme/lab.css), as every timeline does to its text.
    let mut table = String::from(
        "<details class=\"lab-timeline-text\" open>\n<summary>The model's path and the real \
         system, step by step</summary>\n\n| Step | The model | The real system |\n| --- | --- \
         | --- |\n",
    );
    for (i, (moment, real)) in found.moments.iter().zip(&replayed.real).enumerate() {
        let _ = writeln!(
            table,
            "| {i} | {}: {} | {} |",
            lane_name(moment.from),
            moment.text.replace('|', "\\|"),
            real.replace('|', "\\|")
        );
    }
    table.push_str("\n</details>\n");
    let mut out = format!(
        "The shortest counterexample for {variant}, {} steps, replayed: in the real system it \
         broke {}.\n\n",
        found.steps(),
        replayed.broken.join("; ")
    );
    let real_moments = found
        .moments
        .iter()
        .zip(&replayed.real)
        .map(|(m, real)| Moment {
            text: real.clone(),
            ..m.clone()
        })
        .collect();
    let drawn = Counterexample {
        moments: real_moments,
        ..found.clone()
    };
    out.push_str(&svg(variant, &drawn));
    out.push_str("\n\n");
    out.push_str(&table);
    Ok(out)
}

const LANE_WIDTH: f64 = 150.0;
const LEFT: f64 = 90.0;
const TOP: f64 = 78.0;

/// The lanes a counterexample uses: its runners in order, then the network and the service.
fn lanes(found: &Counterexample) -> Vec<Lane> {
    let mut runners: Vec<u8> = found
        .moments
        .iter()
        .flat_map(|m| [Some(m.from), m.to])
        .flatten()
        .filter_map(|lane| match lane {
            Lane::Runner(i) => Some(i),
            _ => None,
        })
        .collect();
    runners.sort_unstable();
    runners.dedup();
    let mut lanes: Vec<Lane> = runners.into_iter().map(Lane::Runner).collect();
    lanes.extend([Lane::Network, Lane::Service]);
    lanes
}

fn lane_name(lane: Lane) -> String {
    match lane {
        Lane::Runner(i) => format!("runner {}", model::tag(i)),
        Lane::Network => "network".to_owned(),
        Lane::Service => "service".to_owned(),
    }
}

fn summary(variant: Variant, found: &Counterexample) -> String {
    format!(
        "Shortest counterexample for {variant}, found by the model checker: {} steps, breaking \"{}\".",
        found.steps(),
        found.property
    )
}

/// The counterexample as an SVG sequence diagram.
pub fn svg(variant: Variant, found: &Counterexample) -> String {
    let lanes = lanes(found);
    let x_of =
        |lane: Lane| LEFT + LANE_WIDTH * lanes.iter().position(|l| *l == lane).unwrap_or(0) as f64;
    let tickets_x = LEFT + LANE_WIDTH * (lanes.len() as f64 - 1.0) + 70.0;
    let width = tickets_x + 170.0;
    let rows: Vec<(Vec<String>, Vec<String>)> = found
        .moments
        .iter()
        .map(|m| (wrap(&m.text, 34), wrap(&m.tickets, 24)))
        .collect();
    let heights = diagram::row_heights(&rows);
    let height = TOP + heights.iter().sum::<f64>() + 40.0;
    let description: Vec<String> = found
        .moments
        .iter()
        .enumerate()
        .map(|(i, m)| {
            format!(
                "{i}. {}: {}. Tickets: {}.",
                lane_name(m.from),
                m.text,
                m.tickets
            )
        })
        .collect();
    let mut out = String::new();
    diagram::open(
        &mut out,
        width,
        height,
        &summary(variant, found),
        &format!("Counterexample: {variant}"),
        &description.join(" "),
    );
    for &lane in &lanes {
        diagram::lifeline(
            &mut out,
            x_of(lane),
            130.0,
            &lane_name(lane),
            36.0,
            height - 30.0,
        );
    }
    let _ = write!(
        out,
        r#"<text x="{tickets_x}" y="28" font-weight="bold" stroke="none">tickets</text>"#
    );
    let mut y = TOP;
    for (i, (moment, (text, tickets))) in found.moments.iter().zip(&rows).enumerate() {
        let row = heights[i];
        let from = x_of(moment.from);
        let to = moment.to.map(x_of);
        draw_moment(&mut out, moment, i, (from, to), (y, row), text);
        diagram::beside(&mut out, tickets_x, y, tickets, "");
        diagram::separator(&mut out, tickets_x, width - 10.0, y + row - 4.0);
        y += row;
    }
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" font-weight="bold" stroke="none">VIOLATION: {}</text></svg>"#,
        LEFT - 60.0,
        height - 10.0,
        escape(found.property)
    );
    out
}

/// One step's arrow from `from` to `to` (or its mark when `to` is `None`) and its text, in the
/// row from `y`, `row` high.
fn draw_moment(
    out: &mut String,
    moment: &Moment,
    number: usize,
    (from, to): (f64, Option<f64>),
    (y, row): (f64, f64),
    text: &[String],
) {
    let arrow_y = y + text.len() as f64 * diagram::LINE_HEIGHT + 2.0;
    let colour = match moment.mark {
        Mark::Commit => COMMIT,
        Mark::Replay => REPLAY,
        Mark::Loss => REFUSED,
        Mark::Plain => "currentColor",
    };
    diagram::step_number(out, arrow_y, number);
    match to {
        Some(end) => {
            let direction = if end > from { 1.0 } else { -1.0 };
            let stop = end - direction * 2.0;
            diagram::shaft(out, from, stop, arrow_y, colour, "");
            diagram::head(out, stop, arrow_y, direction, colour);
            diagram::centred(out, (from + stop) / 2.0, y, text);
        }
        None => {
            diagram::mark(out, from, y, row, colour);
            // The label sits beside the mark, on the side with room.
            if moment.from == Lane::Service {
                diagram::beside(out, from - 12.0, y, text, r#" text-anchor="end""#);
            } else {
                diagram::beside(out, from + 12.0, y, text, r#" text-anchor="start""#);
            }
        }
    }
}

/// The same steps as a Markdown table, folded under the diagram.
pub fn text_alternative(variant: Variant, found: &Counterexample) -> String {
    let mut out = format!(
        "<details class=\"lab-timeline-text\">\n<summary>The counterexample as a table</summary>\n\n{}\n\n| Step | Who | What happens | Tickets after it |\n| --- | --- | --- | --- |\n",
        summary(variant, found)
    );
    for (i, moment) in found.moments.iter().enumerate() {
        let who = match moment.to {
            Some(to) => format!("{} → {}", lane_name(moment.from), lane_name(to)),
            None => lane_name(moment.from),
        };
        let _ = writeln!(
            out,
            "| {i} | {who} | {} | {} |",
            moment.text.replace('|', "\\|"),
            moment.tickets.replace('|', "\\|")
        );
    }
    out.push_str("\n</details>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counterexample_is_drawn_with_one_numbered_row_per_step_and_no_script() {
        let small = Bounds {
            callers: 1,
            sends: 2,
            losses: 0,
            duplicates: 0,
            crashes: 0,
            prunes: 0,
        };
        let report = model::check(small, Variant::FreshKey).unwrap();
        let found = report.counterexample.unwrap();
        let drawn = svg(Variant::FreshKey, &found);
        assert!(drawn.starts_with("<svg class=\"lab-timeline\""));
        assert!(drawn.contains("role=\"img\"") && drawn.contains("<title>"));
        assert!(!drawn.contains("<script"));
        assert_eq!(drawn.matches("<text x=\"8\"").count(), found.steps());
        assert!(drawn.contains(&format!("VIOLATION: {}", found.property)));
        // Text is drawn in currentColor only.
        assert!(
            drawn
                .split("<text")
                .skip(1)
                .all(|t| !t[..t.find('>').unwrap()].contains("fill="))
        );
        let table = text_alternative(Variant::FreshKey, &found);
        // The header, its rule, and one row per step.
        assert_eq!(table.matches("\n| ").count(), found.steps() + 2);
    }

    #[test]
    fn the_depth_table_has_a_row_per_named_bound_from_the_recorded_run() {
        let table = directive("depth").unwrap();
        for (name, bounds) in Bounds::NAMED {
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("| {name} |")))
                .unwrap_or_else(|| panic!("no row for {name}:\n{table}"));
            assert!(row.contains(&bounds.arguments()), "{row}");
        }
        assert!(table.contains("load average"), "{table}");
    }

    #[test]
    fn a_replay_is_drawn_beside_its_model_path_with_one_row_per_step() {
        let drawn = directive("replay memory-key").unwrap();
        let found = run(Variant::MemoryKey).unwrap().counterexample.unwrap();
        // The header, its rule, and one row per step, each with the real system's words.
        assert_eq!(drawn.matches("\n| ").count(), found.steps() + 2, "{drawn}");
        assert!(drawn.contains("starts again"), "{drawn}");
        assert!(drawn.contains("<svg class=\"lab-timeline\""));
        // The table follows the drawing in an open text block, which a phone shows in its place.
        let table = drawn
            .find("<details class=\"lab-timeline-text\" open>")
            .unwrap();
        assert!(drawn.find("<svg").unwrap() < table, "{drawn}");
        assert!(drawn[table..].contains("| Step | The model | The real system |"));
    }

    #[test]
    fn an_unknown_variant_or_field_fails_the_build() {
        assert!(directive("timeline no-such-variant").is_err());
        assert!(directive("value design no-such-field").is_err());
        assert!(directive("report").is_err());
    }
}
