//! Sequence diagrams drawn from traces of real runs (`{{#lab-timeline NAME}}`).
//!
//! NAME is one of the seven scenarios of `lab::suite` or one of the book's five stories
//! (`lab::trace::STORIES`). The preprocessor runs it on a fresh temporary SQLite store through
//! `lab::trace::Traced` and draws what the trace recorded, so the picture cannot show a ticket the
//! lab did not write. Like the charts, the SVG has no script, draws text in `currentColor` so it
//! follows mdBook's light and dark themes, uses colours that stand out on both, and carries a
//! `<title>`, a `<desc>` and an `aria-label`; a generated table follows it as its text alternative.

use std::fmt::Write;

use anyhow::{Context, Result};
use lab::trace::{self, Actor, Event, Reply, Trace, What};

use crate::diagram;

/// Where the three lifelines stand, and where the "caller knows" column starts.
const CALLER_X: f64 = 60.0;
const SERVICE_X: f64 = 240.0;
const DATABASE_X: f64 = 420.0;
const KNOWS_X: f64 = 492.0;
const WIDTH: f64 = 760.0;
const TOP: f64 = 78.0;

/// Colours for marks (never for text), each with a contrast of at least 3 against both mdBook's
/// light background and its darkest one.
pub(crate) const COMMIT: &str = "#2f7fc1";
pub(crate) const REPLAY: &str = "#2e9a55";
pub(crate) const REFUSED: &str = "#d0603a";

/// Runs `name` and draws its timeline, followed by its text alternative.
pub fn draw(name: &str) -> Result<String> {
    let trace = if lab::suite::SCENARIOS.contains(&name) {
        trace::scenario(name)
    } else {
        trace::story(name)
    }
    .with_context(|| format!("running the timeline `{name}`"))?;
    Ok(format!("{}\n\n{}", svg(&trace), text_alternative(&trace)))
}

fn x_of(actor: Actor) -> f64 {
    match actor {
        Actor::Caller => CALLER_X,
        Actor::Service => SERVICE_X,
        Actor::Database => DATABASE_X,
    }
}

fn tickets(ids: &[lab::TicketId]) -> String {
    match ids {
        [] => "no tickets".to_owned(),
        [one] => format!("ticket {one}"),
        many => format!(
            "tickets {}",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// One sentence for the whole run: the summary that screen readers hear first.
fn summary(trace: &Trace) -> String {
    let calls = trace
        .events
        .iter()
        .filter(|e| matches!(e.what, What::Sends { .. }))
        .count();
    format!(
        "Timeline of {} from a real run: {calls} call{}, {} moments; the database holds {} at the start and {} at the end.",
        trace.name,
        if calls == 1 { "" } else { "s" },
        trace.events.len(),
        tickets(&trace.tickets_at_start),
        tickets(&trace.tickets_at_end),
    )
}

/// Greedy word wrap at `width` characters.
pub(crate) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_owned()),
        }
    }
    lines
}

/// The colour and dash of an event's mark.
fn style(event: &Event) -> (&'static str, &'static str) {
    match &event.what {
        What::Commits { .. } => (COMMIT, ""),
        What::FindsRecord { .. }
        | What::Replies {
            reply: Reply::Replayed(_),
        } => (REPLAY, ""),
        What::RejectsConflict { .. }
        | What::RollsBack
        | What::ReplyLost
        | What::ForgetsRecord { .. } => (REFUSED, ""),
        What::Replies { .. } => ("currentColor", " stroke-dasharray=\"6 4\""),
        _ => ("currentColor", ""),
    }
}

/// The SVG sequence diagram.
pub fn svg(trace: &Trace) -> String {
    let rows: Vec<(Vec<String>, Vec<String>)> = trace
        .events
        .iter()
        .map(|e| (wrap(&e.label(), 30), wrap(&e.knows, 40)))
        .collect();
    let heights = diagram::row_heights(&rows);
    let body: f64 = heights.iter().sum();
    let height = TOP + body + 44.0;
    let description: Vec<String> = trace
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            format!(
                "{}. {}: {}. The caller knows: {}.",
                i + 1,
                e.actor,
                e.label(),
                e.knows
            )
        })
        .collect();
    let mut out = String::new();
    diagram::open(
        &mut out,
        WIDTH,
        height,
        &summary(trace),
        &format!("Timeline: {}", trace.name),
        &description.join(" "),
    );
    for actor in [Actor::Caller, Actor::Service, Actor::Database] {
        // The database's line starts below the tickets it holds at the start.
        let top = if actor == Actor::Database { 58.0 } else { 36.0 };
        let name = actor.to_string();
        diagram::lifeline(&mut out, x_of(actor), 96.0, &name, top, height - 36.0);
    }
    let _ = write!(
        out,
        r#"<text x="{KNOWS_X}" y="28" font-weight="bold" stroke="none">the caller knows</text><text x="{DATABASE_X}" y="52" font-size="11" text-anchor="middle" stroke="none">at the start: {}</text>"#,
        tickets(&trace.tickets_at_start),
    );
    let mut y = TOP;
    for (i, (event, (label, knows))) in trace.events.iter().zip(&rows).enumerate() {
        let row = heights[i];
        draw_event(&mut out, event, i + 1, y, row, label);
        diagram::beside(&mut out, KNOWS_X, y, knows, "");
        diagram::separator(&mut out, KNOWS_X, WIDTH - 10.0, y + row - 4.0);
        y += row;
    }
    let _ = write!(
        out,
        r#"<text x="{DATABASE_X}" y="{}" font-weight="bold" text-anchor="middle" stroke="none">at the end: {}</text></svg>"#,
        height - 14.0,
        tickets(&trace.tickets_at_end),
    );
    out
}

/// One moment's arrow (or mark) and its label, in the row from `y`, `row` high.
fn draw_event(out: &mut String, event: &Event, number: usize, y: f64, row: f64, label: &[String]) {
    let arrow_y = y + label.len() as f64 * diagram::LINE_HEIGHT + 2.0;
    let (colour, dash) = style(event);
    diagram::step_number(out, arrow_y, number);
    let from = x_of(event.actor);
    let Some(to) = event.to else {
        // The actor acts alone: a mark on its lifeline and the label beside it.
        diagram::mark(out, from, y, row, colour);
        diagram::beside(out, from + 12.0, y, label, "");
        return;
    };
    let end = x_of(to);
    let direction = if end > from { 1.0 } else { -1.0 };
    let lost = event.what == What::ReplyLost;
    // A lost reply stops halfway, at a cross.
    let stop = if lost {
        (from + end) / 2.0
    } else {
        end - direction * 2.0
    };
    diagram::shaft(out, from, stop, arrow_y, colour, dash);
    if lost {
        let _ = write!(
            out,
            r#"<path d="M{a} {b} L{c} {d} M{a} {d} L{c} {b}" stroke="{colour}" stroke-width="3"/>"#,
            a = stop - 7.0,
            b = arrow_y - 7.0,
            c = stop + 7.0,
            d = arrow_y + 7.0,
        );
    } else {
        diagram::head(out, stop, arrow_y, direction, colour);
    }
    diagram::centred(out, (from + stop) / 2.0, y, label);
}

/// The same moments as a Markdown table, folded under the diagram.
pub fn text_alternative(trace: &Trace) -> String {
    let mut out = format!(
        "<details class=\"lab-timeline-text\">\n<summary>The timeline as text</summary>\n\n{}\n\n| Moment | Who | What happens | What the caller knows |\n| --- | --- | --- | --- |\n",
        summary(trace)
    );
    for (i, event) in trace.events.iter().enumerate() {
        let who = match event.to {
            Some(to) => format!("{} → {to}", event.actor),
            None => event.actor.to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | {who} | {} | {} |",
            i + 1,
            event.label().replace('|', "\\|"),
            event.knows.replace('|', "\\|")
        );
    }
    out.push_str("\n</details>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_naive_retry_timeline_shows_two_tickets() {
        let drawn = draw("naive_retry").unwrap();
        assert_eq!(drawn.matches(">commit ticket ").count(), 2, "{drawn}");
        assert!(drawn.contains("at the end: tickets 1, 2</text>"));
        assert!(drawn.contains("| 2 | service → database | commit ticket 1 |"));
    }

    #[test]
    fn the_stable_key_timeline_shows_one_ticket_and_two_replays() {
        let drawn = draw("stable_key_retry").unwrap();
        assert!(drawn.contains("at the end: ticket 1</text>"), "{drawn}");
        assert_eq!(drawn.matches(">reply lost</text>").count(), 1);
        assert_eq!(drawn.matches(">ticket 1 (replayed)</text>").count(), 2);
    }

    #[test]
    fn a_changed_run_changes_the_picture() {
        let mut trace = trace::scenario("naive_retry").unwrap();
        let before = svg(&trace);
        // As if the second call had replayed instead of creating.
        trace.tickets_at_end.pop();
        trace.events[5].what = What::WritesNothing;
        let after = svg(&trace);
        assert_ne!(before, after);
        assert_eq!(after.matches(">commit ticket ").count(), 1);
        assert!(after.contains("at the end: ticket 1</text>"));
    }

    #[test]
    fn every_timeline_has_a_text_alternative_and_no_script() {
        for name in lab::suite::SCENARIOS.iter().chain(trace::STORIES.iter()) {
            let drawn = draw(name).unwrap();
            assert!(drawn.starts_with("<svg class=\"lab-timeline\""), "{name}");
            assert!(
                drawn.contains("role=\"img\"") && drawn.contains("<title>"),
                "{name}"
            );
            assert!(drawn.contains("<desc>1. caller: "), "{name}");
            assert!(
                drawn.contains("<summary>The timeline as text</summary>"),
                "{name}"
            );
            assert!(!drawn.contains("<script"), "{name}");
            // Text is drawn only in currentColor (the svg's fill): no text element sets a colour.
            assert!(
                drawn
                    .split("<text")
                    .skip(1)
                    .all(|t| !t[..t.find('>').unwrap()].contains("fill=")),
                "{name}"
            );
        }
        assert!(draw("no_such_timeline").is_err());
    }

    #[test]
    fn the_field_notes_timelines_have_four_moments_each() {
        for name in trace::STORIES {
            let trace = trace::story(name).unwrap();
            assert_eq!(trace.events.len(), 4, "{name}");
            assert_eq!(svg(&trace).matches("<text x=\"8\"").count(), 4, "{name}");
        }
    }
}
