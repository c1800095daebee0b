//! The contract as the book shows it: the list of promises, and the coverage matrix, both in
//! Markdown, drawn from the same data the reports use.

use std::fmt::Write as _;

use super::{Cell, Checker, DRAFT, PROMISES, Promise, cell};

/// The draft's address, for a section link.
const DRAFT_URL: &str =
    "https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header-06";

fn level(promise: &Promise) -> String {
    match promise.section {
        Some(section) => format!(
            "{}, [§{section}]({DRAFT_URL}#section-{section})",
            promise.level
        ),
        None => promise.level.to_string(),
    }
}

/// The promises as a Markdown list: id, name, statement, level and section, why.
pub fn promises_markdown() -> String {
    let mut out = String::new();
    for p in PROMISES {
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "- **`{}`: {}.** {} *{}.* Why: {}",
            p.id,
            p.name,
            p.statement,
            level(p),
            p.why
        );
    }
    let _ = write!(
        out,
        "\nThe lab requires every promise; the level says where it comes from. MUST and SHOULD \
         are the levels of the [draft](glossary.md#draft), {DRAFT}, at the section shown; LAB \
         marks the lab's own rule, or one stricter than the draft at that section. A check's \
         report grades each [sub-check](glossary.md#sub-check) on its own, and only MUST and LAB \
         sub-checks fail a run: one that proves a SHOULD promise is graded `LAB (§2.6 SHOULD)`, \
         one stricter than a section `LAB (§5)`, and a SHOULD sub-check, a finer point of the \
         draft such as a replay's status, only warns."
    );
    out
}

/// The coverage matrix as Markdown: a table of promises against checkers, each cell the
/// points that cover the promise (`✓ replay, lost-reply`) or a numbered note saying why none
/// can, the notes listed below the table.
pub fn matrix_markdown() -> String {
    let mut out = String::from("| promise |");
    for checker in Checker::ALL {
        let _ = write!(out, " {} |", checker.name());
    }
    out.push_str("\n| --- |");
    out.push_str(&" --- |".repeat(Checker::ALL.len()));
    out.push('\n');
    let mut notes: Vec<(&'static str, Vec<String>)> = Vec::new();
    for p in PROMISES {
        let _ = write!(out, "| `{}` |", p.id);
        for checker in Checker::ALL {
            let text = match cell(checker, p.id) {
                Cell::Checked(points) => {
                    let names: Vec<String> = points.iter().map(|n| format!("`{n}`")).collect();
                    names.join(", ")
                }
                Cell::NotChecked(reason) => {
                    let at = match notes.iter().position(|(r, _)| *r == reason) {
                        Some(at) => at,
                        None => {
                            notes.push((reason, Vec::new()));
                            notes.len() - 1
                        }
                    };
                    notes[at].1.push(format!("{} × `{}`", checker.name(), p.id));
                    format!("— ({})", at + 1)
                }
                Cell::Missing => "**missing**".to_owned(),
            };
            let _ = write!(out, " {text} |");
        }
        out.push('\n');
    }
    out.push_str("\nWhy a cell is empty:\n\n");
    for (n, (reason, cells)) in notes.iter().enumerate() {
        let _ = writeln!(out, "{}. {}: {reason}.", n + 1, cells.join("; "));
    }
    out
}

/// The black-box check's points as a Markdown table: id, title, fronts, promises.
pub fn points_markdown() -> String {
    let mut out = String::from(
        "| point | what it checks | runs on | promises |\n| --- | --- | --- | --- |\n",
    );
    for point in super::points::ALL {
        let fronts = match (point.http, point.mcp, point.hop) {
            (true, true, true) => "HTTP and MCP, with `[upstream]`",
            (true, true, false) => "HTTP and MCP",
            (true, false, _) => "HTTP",
            (false, _, _) => "MCP",
        };
        let promises: Vec<String> = point.promises.iter().map(|id| format!("`{id}`")).collect();
        let _ = writeln!(
            out,
            "| `{}` | {} | {fronts} | {} |",
            point.id,
            point.title,
            if promises.is_empty() {
                "none".to_owned()
            } else {
                promises.join(", ")
            }
        );
    }
    out
}

/// The points renamed when the registry gave each probe one name: old name, front, new name.
pub fn renamed_markdown() -> String {
    let mut out = String::from("| old name | check | new name |\n| --- | --- | --- |\n");
    for (old, front, new) in super::points::RENAMED {
        let check = match front {
            super::points::Front::Http => "HTTP",
            super::points::Front::Mcp => "MCP",
        };
        let _ = writeln!(out, "| `{old}` | {check} | `{new}` |");
    }
    out
}
