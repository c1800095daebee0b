//! `{{#lab-check-findings}}`: the table of what `lab check --target` found in the ticket services
//! on real third-party idempotency middlewares (`lab/tests/blackbox/*/`).
//!
//! The table is drawn from each service's `findings.json`, which the middleware tests
//! (`lab/tests/it/middlewares.rs`) write from a real run when `LAB_WRITE_FINDINGS=1` and compare
//! with every other run, so the book shows what the check last found and CI fails when a run
//! finds otherwise. Every point that did not pass is a row; each failed sub-check names its grade
//! and links the draft's section it rests on.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The folder of the services, under the repository root.
const SERVICES: &str = "lab/tests/blackbox";

/// The table as Markdown, read from every `lab/tests/blackbox/*/findings.json` under `root`.
///
/// # Errors
/// A folder that cannot be read, a findings file that is not the tests' JSON, or no findings at
/// all (the table would silently be empty).
pub fn table(root: &Path) -> Result<String> {
    let folder = root.join(SERVICES);
    let mut files = Vec::new();
    for entry in
        std::fs::read_dir(&folder).with_context(|| format!("reading {}", folder.display()))?
    {
        let path = entry?.path().join("findings.json");
        if path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        bail!(
            "lab-check-findings: no findings.json under {} (run the middleware tests with \
             LAB_WRITE_FINDINGS=1)",
            folder.display()
        );
    }
    let mut services = Vec::new();
    for path in &files {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let value: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        services.push(value);
    }
    render(&services)
}

/// A heading line and a table per service, in the order given: one row per point that did not
/// pass, its failed sub-checks one per line, each with its grade.
fn render(services: &[Value]) -> Result<String> {
    let mut out = String::new();
    for service in services {
        let package = text(service, "package")?;
        let framework = text(service, "framework")?;
        let draft_url = text(service, "draft_url")?;
        let points = service
            .get("points")
            .and_then(Value::as_array)
            .with_context(|| format!("findings of {package}: no `points` list"))?;
        let mut rows = String::new();
        let (mut failed_points, mut covered) = (0, 0);
        for point in points {
            let name = text(point, "name")?;
            // Passed points, and points a black box cannot reach (the same for every service;
            // the chapter says what would cover them), are not findings.
            let verdict = match text(point, "verdict")? {
                "NOT_COVERED" => continue,
                "PASS" => {
                    covered += 1;
                    continue;
                }
                "PASS_WITH_WARNINGS" => "WARN",
                other => other,
            };
            covered += 1;
            if verdict == "FAIL" {
                failed_points += 1;
            }
            let failed = point
                .get("failed")
                .and_then(Value::as_array)
                .with_context(|| {
                    format!("findings of {package}, point {name}: no `failed` list")
                })?;
            if failed.is_empty() {
                bail!("findings of {package}, point {name}: {verdict} with no failed sub-check");
            }
            let mut found = Vec::new();
            for check in failed {
                found.push(format!(
                    "{}: {}",
                    cell(text(check, "what")?),
                    grade(check, draft_url)?
                ));
            }
            let _ = writeln!(rows, "| `{name}` | {verdict} | {} |", found.join("<br>"));
        }
        let _ = writeln!(
            out,
            "**{package}**, on {framework}: {failed_points} of {covered} points checked failed.\n"
        );
        if rows.is_empty() {
            out.push_str("Every point it could check passed.\n\n");
        } else {
            out.push_str("| Point | Verdict | Failed sub-checks, each with its grade |\n| --- | --- | --- |\n");
            out.push_str(&rows);
            out.push('\n');
        }
    }
    Ok(out)
}

/// `MUST §2.7`, its section linked into the draft.
fn grade(check: &Value, draft_url: &str) -> Result<String> {
    let level = text(check, "level")?;
    let section = check.get("section").and_then(Value::as_str);
    let over = check.get("draft_level").and_then(Value::as_str);
    Ok(match (section, over) {
        (Some(s), Some(d)) => format!("{level} ([§{s}]({draft_url}#section-{s}) {d})"),
        (Some(s), None) if level == "LAB" => format!("{level} ([§{s}]({draft_url}#section-{s}))"),
        (Some(s), None) => format!("{level} [§{s}]({draft_url}#section-{s})"),
        (None, _) => level.to_owned(),
    })
}

fn text<'v>(value: &'v Value, field: &str) -> Result<&'v str> {
    value
        .get(field)
        .and_then(Value::as_str)
        .with_context(|| format!("findings: `{field}` missing or not text in {value}"))
}

/// Text safe inside a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(verdict: &str, failed: Value) -> Value {
        serde_json::json!({
            "service": "demo",
            "package": "demo-idempotency 1.0 (PyPI)",
            "framework": "Flask 3",
            "draft_url": "https://example.org/draft",
            "points": [
                {"name": "replay", "verdict": "PASS", "failed": []},
                {"name": "scope", "verdict": verdict, "failed": failed},
                {"name": "crash", "verdict": "NOT_COVERED", "failed": []},
            ],
        })
    }

    #[test]
    fn failed_sub_checks_become_rows_with_their_linked_sections() {
        let failed = serde_json::json!([
            {"what": "another caller's key | the first caller's ticket", "level": "LAB", "section": "2.6", "draft_level": "SHOULD"},
            {"what": "a new effect", "level": "MUST", "section": "2.7"},
        ]);
        let table = render(&[service("FAIL", failed)]).unwrap();
        assert!(
            table.contains("| `scope` | FAIL | another caller's key \\| the first caller's ticket: LAB ([§2.6](https://example.org/draft#section-2.6) SHOULD)<br>"),
            "{table}"
        );
        assert!(
            table.contains(
                "**demo-idempotency 1.0 (PyPI)**, on Flask 3: 1 of 2 points checked failed."
            ),
            "{table}"
        );
        assert!(
            table.contains("MUST [§2.7](https://example.org/draft#section-2.7)"),
            "{table}"
        );
        assert!(
            !table.contains("`replay`"),
            "passed points are left out:\n{table}"
        );
    }

    #[test]
    fn a_service_that_passed_everything_says_so_and_bad_files_are_errors() {
        let table = render(&[service("PASS", serde_json::json!([]))]).unwrap();
        assert!(
            table.contains("Every point it could check passed."),
            "{table}"
        );
        let broken = serde_json::json!({"package": "x", "framework": "y", "draft_url": "z"});
        assert!(render(&[broken]).is_err());
    }

    #[test]
    fn the_committed_findings_render_every_service_and_each_failed_sub_check() {
        let root = crate::root();
        let table = table(&root).unwrap();
        let folder = root.join(SERVICES);
        let mut services = 0;
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path().join("findings.json");
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            services += 1;
            let findings: Value = serde_json::from_str(&text).unwrap();
            let package = findings["package"].as_str().unwrap();
            let section = table
                .split(&format!("**{package}**"))
                .nth(1)
                .unwrap_or_else(|| panic!("{package} has no heading:\n{table}"));
            let section = section.split("\n**").next().unwrap();
            for point in findings["points"].as_array().unwrap() {
                let row = format!("| `{}` |", point["name"].as_str().unwrap());
                let shown = point["verdict"] != "PASS" && point["verdict"] != "NOT_COVERED";
                assert_eq!(section.contains(&row), shown, "{package} {row}:\n{section}");
                for check in point["failed"].as_array().unwrap() {
                    assert!(section.contains(check["what"].as_str().unwrap()), "{check}");
                }
            }
        }
        assert!(services > 0, "no findings.json under {}", folder.display());
        println!("{table}");
    }
}
