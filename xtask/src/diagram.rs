//! The drawing pieces the two sequence diagrams share: the book's timelines (`timeline.rs`, from
//! traces) and the model checker's counterexamples (`model.rs`). Each piece appends SVG to a
//! `String`; writing to a `String` cannot fail, so the results of `write!` are ignored.

use std::fmt::Write;

/// The height of one line of text, in SVG units.
pub const LINE_HEIGHT: f64 = 14.0;

/// The opening `<svg>` tag of a diagram `width` by `height`, with `label` as its `aria-label`,
/// then its `<title>` and `<desc>`.
pub fn open(out: &mut String, width: f64, height: f64, label: &str, title: &str, desc: &str) {
    let _ = write!(
        out,
        r#"<svg class="lab-timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" style="max-width: {width}px" role="img" aria-label="{}" font-family="sans-serif" font-size="12" fill="currentColor" stroke="currentColor" stroke-width="0">"#,
        escape(label)
    );
    let _ = write!(
        out,
        "<title>{}</title><desc>{}</desc>",
        escape(title),
        escape(desc)
    );
}

/// A lifeline: a box `box_width` wide at the top holding `name`, and a dotted line from `top`
/// down to `bottom`.
pub fn lifeline(out: &mut String, x: f64, box_width: f64, name: &str, top: f64, bottom: f64) {
    let _ = write!(
        out,
        r#"<rect x="{}" y="10" width="{box_width}" height="26" rx="4" fill="none" stroke-width="1.5"/><text x="{x}" y="28" text-anchor="middle" font-weight="bold" stroke="none">{}</text><line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke-width="1" stroke-dasharray="2 3"/>"#,
        x - box_width / 2.0,
        escape(name),
    );
}

/// The moment's number in the left margin, on the height of its arrow.
pub fn step_number(out: &mut String, y: f64, number: usize) {
    let _ = write!(
        out,
        r#"<text x="8" y="{y}" font-size="11" stroke="none">{number}</text>"#
    );
}

/// A horizontal line from `from` to `stop` at `y`; `dash` is an extra attribute or empty.
pub fn shaft(out: &mut String, from: f64, stop: f64, y: f64, colour: &str, dash: &str) {
    let _ = write!(
        out,
        r#"<line x1="{from}" y1="{y}" x2="{stop}" y2="{y}" stroke="{colour}" stroke-width="2"{dash}/>"#
    );
}

/// An arrowhead ending at `stop`, pointing right for `direction` 1 and left for -1.
pub fn head(out: &mut String, stop: f64, y: f64, direction: f64, colour: &str) {
    let _ = write!(
        out,
        r#"<polygon points="{stop},{y} {},{} {},{}" fill="{colour}" stroke="{colour}" stroke-width="1"/>"#,
        stop - direction * 9.0,
        y - 5.0,
        stop - direction * 9.0,
        y + 5.0,
    );
}

/// A mark on a lifeline for a moment an actor acts alone, `row` high.
pub fn mark(out: &mut String, x: f64, y: f64, row: f64, colour: &str) {
    let _ = write!(
        out,
        r#"<rect x="{}" y="{}" width="10" height="{}" fill="{colour}" stroke="{colour}" stroke-width="1"/>"#,
        x - 5.0,
        y + 2.0,
        row - 10.0,
    );
}

/// Lines of text centred on `x`, above an arrow whose row starts at `y`.
pub fn centred(out: &mut String, x: f64, y: f64, lines: &[String]) {
    for (n, line) in lines.iter().enumerate() {
        let _ = write!(
            out,
            r#"<text x="{x}" y="{}" text-anchor="middle" stroke="none">{}</text>"#,
            y + (n as f64 + 1.0) * LINE_HEIGHT - 4.0,
            escape(line)
        );
    }
}

/// Lines of text from `x` in a row starting at `y`; `anchor` is an extra attribute or empty.
pub fn beside(out: &mut String, x: f64, y: f64, lines: &[String], anchor: &str) {
    for (n, line) in lines.iter().enumerate() {
        let _ = write!(
            out,
            r#"<text x="{x}" y="{}"{anchor} stroke="none">{}</text>"#,
            y + (n as f64 + 1.0) * LINE_HEIGHT,
            escape(line)
        );
    }
}

/// The faint line under a row, from `x` to `right`, at `y`.
pub fn separator(out: &mut String, x: f64, right: f64, y: f64) {
    let _ = write!(
        out,
        r#"<line x1="{x}" y1="{y}" x2="{right}" y2="{y}" stroke-width="0.5" stroke-opacity="0.4"/>"#,
    );
}

/// The height of each row: its arrow label over the arrow, or its side column, whichever is
/// taller, plus a margin.
pub fn row_heights(rows: &[(Vec<String>, Vec<String>)]) -> Vec<f64> {
    rows.iter()
        .map(|(label, side)| (label.len() + 1).max(side.len()) as f64 * LINE_HEIGHT + 14.0)
        .collect()
}

/// `text` escaped for SVG text and attribute values.
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
