//! The `lab` preprocessor: fills the book's figures from `results.json`, so no observed value is
//! ever typed into a chapter.
//!
//! - `{{#lab-output}}` becomes a `text` block with the lines `lab` prints for that run.
//! - `{{#lab-value PATH}}` becomes one value of results.json; PATH is dot-separated, such as
//!   `scenarios.naive_retry.tickets` or `sqlite`.
//! - `{{#lab-bench PATH}}` becomes one value of `bench.json` (written by `cargo xtask bench`);
//!   `{{#lab-bench-ratio A / B}}` the ratio of two of its values, to two decimals.
//! - `{{#lab-plot NAME}}` becomes an SVG chart drawn from `bench.json` (`bursts`, `retained`), and
//!   `{{#lab-table NAME}}` a Markdown table (`sequential`, `instructions`, `bursts`, `retained`,
//!   `http`).
//! - `{{#lab-conformance NAME}}` becomes the report of a conformance run: `sqlite` for the lab's
//!   store, or the name of a bug switched on in the tests' in-memory adapter.
//! - `{{#lab-contract promises}}`, `matrix`, `points` and `renamed` become the contract's promises
//!   and the coverage matrix, from `lab::contract` (see `contract.rs`).
//! - `{{#lab-check-findings}}` becomes the table of what `lab check --target` found in the
//!   middleware services, from their `findings.json` (see `check_findings.rs`).
//! - `{{#lab-grader NAME}}` becomes the client grader's report on a scripted loop, or `table`
//!   for all of them (`grader.rs`).
//! - `{{#lab-model KIND VARIANT [FIELD]}}` becomes a figure of a run of the model checker: its
//!   report, one value, or a counterexample drawn as a timeline (`model.rs`).
//! - `{{#lab-shell [status=N] lab ARGS}}` becomes the command `lab ARGS` and what
//!   it printed, run while the book builds (`shell.rs`); it must exit with status N (default 0).
//! - `{{#lab-session NAME}}` becomes a terminal session: a service started in the background,
//!   the commands a chapter tells the reader to type against it, each with what it printed
//!   (`session.rs`).
//! - `{{#lab-check-report NAME}}` becomes `lab check --target` run against a service started for
//!   it (`lab-serve`), with both commands and the report (`check_report.rs`); `NAME summary
//!   POINT...` keeps the summary and those points.
//! - `{{#lab-outside TEXT | SOURCE}}` becomes TEXT with a link to SOURCE (an `https://` address)
//!   beside it: the one way to quote a figure from outside the lab (the number check in
//!   `numbers.rs` refuses typed ones).
//! - `{{#lab-rust-version}}` becomes the `rust-version` the workspace's Cargo.toml declares.
//! - `{{#lab-map}}` becomes the map of the book's parts and chapters, numbered as the sidebar
//!   numbers them, generated from SUMMARY.md (`map.rs`).
//! - `{{#lab-schemathesis-baseline}}` says which failures the Schemathesis baseline accepts, and
//!   `{{#lab-conformance-bugs}}` how many mistakes the conformance tests switch on (`facts.rs`).
//! - A backslash before any of them (`\{{#lab-output}}`) leaves the directive as text.
//!
//! An unknown directive or path fails the build, naming the chapter.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use lab::Evidence;
use lab::payload::{Separators, sorted_json};
use lab::suite::SCENARIOS;
use mdbook_preprocessor::book::{Book, BookItem};
use mdbook_preprocessor::{Preprocessor, PreprocessorContext};
use serde_json::Value;

/// The preprocessor, named `lab` as in book.toml.
pub struct LabFigures;

impl Preprocessor for LabFigures {
    fn name(&self) -> &str {
        "lab"
    }

    fn run(
        &self,
        ctx: &PreprocessorContext,
        mut book: Book,
    ) -> mdbook_preprocessor::errors::Result<Book> {
        let results = Results::read(&ctx.root.join("results.json"))?
            .with_bench_file(&ctx.root.join("bench.json"));
        let structure = book.clone();
        let mut chapters = Vec::new();
        book.for_each_mut(|item| {
            if let BookItem::Chapter(chapter) = item {
                chapters.push(Page {
                    content: std::mem::take(&mut chapter.content),
                    path: chapter.path.clone(),
                    source: chapter.source_path.as_deref().and_then(|p| {
                        std::fs::read_to_string(ctx.root.join(&ctx.config.book.src).join(p)).ok()
                    }),
                    map: chapter
                        .path
                        .as_deref()
                        .map(|path| crate::map::markdown(&structure, path)),
                });
            }
        });
        let mut expanded = expand_pages(&chapters, &results).into_iter();
        let mut failure = None;
        book.for_each_mut(|item| {
            let BookItem::Chapter(chapter) = item else {
                return;
            };
            match expanded.next() {
                Some(Ok(content)) => chapter.content = content,
                Some(Err(err)) if failure.is_none() => failure = Some(err),
                _ => {}
            }
        });
        match failure {
            Some(err) => Err(err),
            None => Ok(book),
        }
    }
}

/// One chapter as the preprocessor reads it.
struct Page {
    content: String,
    path: Option<std::path::PathBuf>,
    source: Option<String>,
    map: Option<String>,
}

/// How many chapters are expanded at once. Their directives mostly wait on the processes they
/// start (a service, `lab check` through its timeouts), so a few at a time save most of a
/// build's wall time on two cores.
const PAGES_AT_ONCE: usize = 4;

/// Every page expanded, in order, by [`PAGES_AT_ONCE`] threads; an error names its chapter.
fn expand_pages(pages: &[Page], results: &Results) -> Vec<Result<String>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, Result<String>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..PAGES_AT_ONCE.min(pages.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(page) = pages.get(at) else {
                            break mine;
                        };
                        mine.push((at, expand_page(page, results)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })
            .collect()
    });
    done.sort_by_key(|(at, _)| *at);
    done.into_iter().map(|(_, expanded)| expanded).collect()
}

fn expand_page(page: &Page, results: &Results) -> Result<String> {
    let content = expand_in(&page.content, results, page.map.as_deref()).map_err(|err| {
        let path = page
            .path
            .as_deref()
            .unwrap_or(Path::new("?"))
            .display()
            .to_string();
        err.context(format!("chapter src/{path}"))
    })?;
    Ok(match (&page.source, &page.path) {
        (Some(source), Some(page)) => crate::listings::caption(&content, source, page),
        _ => content,
    })
}

/// results.json, both typed (so a malformed file is rejected) and as JSON (for paths); and
/// bench.json, read when a chapter asks for it.
pub struct Results {
    evidence: Evidence,
    value: Value,
    bench_path: Option<std::path::PathBuf>,
    bench: std::sync::OnceLock<Value>,
}

impl Results {
    /// Reads and validates an evidence file.
    pub fn read(path: &Path) -> Result<Results> {
        let evidence = Evidence::read(path)?;
        let value = serde_json::to_value(&evidence)?;
        Ok(Results {
            evidence,
            value,
            bench_path: None,
            bench: std::sync::OnceLock::new(),
        })
    }

    /// Where `{{#lab-bench}}` and `{{#lab-plot}}` read their figures.
    pub fn with_bench_file(self, path: &Path) -> Results {
        Results {
            bench_path: Some(path.to_owned()),
            ..self
        }
    }

    fn bench(&self) -> Result<&Value> {
        if let Some(value) = self.bench.get() {
            return Ok(value);
        }
        let path = self
            .bench_path
            .as_deref()
            .context("no bench.json was given to the preprocessor")?;
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading {} (run `cargo xtask bench` to make it)",
                path.display()
            )
        })?;
        let value: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", path.display()))?;
        Ok(self.bench.get_or_init(|| value))
    }

    fn bench_value(&self, path: &str) -> Result<String> {
        match lookup(self.bench()?, path)? {
            Value::String(text) => Ok(text.clone()),
            Value::Number(number) => Ok(match number.as_f64() {
                Some(float) if number.is_f64() => format_number(float),
                _ => number.to_string(),
            }),
            other => Ok(sorted_json(other, Separators::SPACED)),
        }
    }

    fn bench_ratio(&self, expression: &str) -> Result<String> {
        let (a, b) = expression
            .split_once('/')
            .context("lab-bench-ratio takes `PATH / PATH`")?;
        let number = |path: &str| -> Result<f64> {
            lookup(self.bench()?, path.trim())?
                .as_f64()
                .with_context(|| format!("`{}` in bench.json is not a number", path.trim()))
        };
        Ok(format!("{:.2}", number(a)? / number(b)?))
    }

    fn output(&self) -> String {
        let mut lines = self.evidence.scenarios.lines();
        lines.push(format!("PASS: {} scenarios", SCENARIOS.len()));
        format!("```text\n{}\n```", lines.join("\n"))
    }

    fn value(&self, path: &str) -> Result<String> {
        let pointer = format!("/{}", path.replace('.', "/"));
        match self.value.pointer(&pointer) {
            Some(Value::String(text)) => Ok(text.clone()),
            Some(Value::Object(_)) => bail!("`{path}` in results.json is an object, not a value"),
            Some(value) => Ok(sorted_json(value, Separators::SPACED)),
            None => bail!("results.json has no value at `{path}`"),
        }
    }
}

/// The value at a dot-separated path. Array elements are picked by index (`runs.0.callers`) or by
/// their fields (`runs[callers=64,one_key=true].elapsed_ms`, `read_floor_ms[0=64].1`), so that a
/// sentence names the measurement it quotes rather than its place in the file.
fn lookup<'v>(value: &'v Value, path: &str) -> Result<&'v Value> {
    let missing = || anyhow::anyhow!("bench.json has no value at `{path}`");
    let mut here = value;
    for segment in path.split('.') {
        let (name, filter) = match segment.split_once('[') {
            Some((name, rest)) => (
                name,
                Some(
                    rest.strip_suffix(']')
                        .with_context(|| format!("`{segment}` in `{path}` lacks its `]`"))?,
                ),
            ),
            None => (segment, None),
        };
        here = child(here, name).ok_or_else(missing)?;
        if let Some(filter) = filter {
            let conditions = filter
                .split(',')
                .map(|condition| {
                    let (field, wanted) = condition
                        .split_once('=')
                        .with_context(|| format!("`{condition}` in `{path}` is not FIELD=VALUE"))?;
                    let wanted = serde_json::from_str(wanted)
                        .unwrap_or_else(|_| Value::String(wanted.to_owned()));
                    Ok((field, wanted))
                })
                .collect::<Result<Vec<_>>>()?;
            here = here
                .as_array()
                .and_then(|items| {
                    items.iter().find(|item| {
                        conditions
                            .iter()
                            .all(|(field, wanted)| child(item, field) == Some(wanted))
                    })
                })
                .ok_or_else(missing)?;
        }
    }
    if here.is_object() {
        bail!("`{path}` in bench.json is an object, not a value");
    }
    Ok(here)
}

/// A field of an object, or an element of an array by its index.
fn child<'v>(value: &'v Value, name: &str) -> Option<&'v Value> {
    match value {
        Value::Object(fields) => fields.get(name),
        Value::Array(items) => name.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    }
}

/// Measurements read best with three significant figures.
fn format_number(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

impl Results {}

/// Replaces every directive in `text` (outside a book build, so without `{{#lab-map}}`).
#[cfg(test)]
pub fn expand(text: &str, results: &Results) -> Result<String> {
    expand_in(text, results, None)
}

/// Replaces every directive in `text`, with `map` for `{{#lab-map}}` (the book's map as seen from
/// this chapter).
fn expand_in(text: &str, results: &Results, map: Option<&str>) -> Result<String> {
    const OPEN: &str = "{{#lab-";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let (before, from) = rest.split_at(start);
        if let Some(literal) = before.strip_suffix('\\') {
            out.push_str(literal);
            out.push_str(OPEN);
            rest = &from[OPEN.len()..];
            continue;
        }
        out.push_str(before);
        let end = from
            .find("}}")
            .ok_or_else(|| anyhow!("unclosed directive `{}`", first_line(from)))?;
        let directive = from[OPEN.len()..end].trim();
        let replacement = match directive.split_once(char::is_whitespace) {
            None if directive == "output" => results.output(),
            Some(("value", path)) => results.value(path.trim())?,
            Some(("bench", path)) => results.bench_value(path.trim())?,
            Some(("bench-ratio", expression)) => results.bench_ratio(expression)?,
            Some(("plot", name)) => crate::plots::draw(name.trim(), results.bench()?)?,
            Some(("table", name)) => crate::plots::table(name.trim(), results.bench()?)?,
            Some(("timeline", name)) => crate::timeline::draw(name.trim())?,
            Some(("model", arguments)) => crate::model::directive(arguments)?,
            Some(("conformance", name)) => crate::conformance::report(name.trim())?,
            Some(("contract", name)) => crate::contract::expand(name.trim())?,
            None if directive == "check-findings" => crate::check_findings::table(&crate::root())?,
            Some(("grader", name)) => crate::grader::expand(name.trim())?,
            Some(("shell", command)) => crate::shell::run(command)?,
            Some(("check-report", name)) => crate::check_report::report(name.trim())?,
            Some(("session", name)) => {
                crate::session::indented(&crate::session::run(name.trim())?, &out)
            }
            Some(("outside", quoted)) => outside(quoted)?,
            None if directive == "schemathesis-baseline" => {
                crate::facts::schemathesis_baseline(&crate::root())?
            }
            None if directive == "conformance-bugs" => {
                crate::facts::conformance_bugs(&crate::root())?
            }
            None if directive == "rust-version" => rust_version(&crate::root())?,
            None if directive == "map" => map
                .context("{{#lab-map}} needs the book's structure (it works in a book build)")?
                .to_owned(),
            _ => bail!(
                "unknown directive `{{{{#lab-{directive}}}}}` (known: lab-output, lab-value PATH, \
                 lab-bench PATH, lab-bench-ratio A / B, lab-plot NAME, lab-table NAME, lab-timeline NAME, \
                 lab-conformance NAME, lab-contract promises|matrix|points|renamed, lab-grader NAME, lab-model KIND VARIANT, \
                 lab-shell [status=N] lab ARGS, lab-session NAME, lab-check-report NAME, lab-check-findings, \
                 lab-outside TEXT | SOURCE, lab-rust-version, lab-map, lab-schemathesis-baseline, \
                 lab-conformance-bugs)"
            ),
        };
        out.push_str(&replacement);
        rest = &from[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// An outside figure and its source: `TEXT | https://...` becomes `TEXT ([source](https://...))`.
fn outside(quoted: &str) -> Result<String> {
    let (text, source) = quoted
        .split_once('|')
        .context("lab-outside takes `TEXT | SOURCE`")?;
    let (text, source) = (text.trim(), source.trim());
    if text.is_empty() {
        bail!("lab-outside has no TEXT before its `|`");
    }
    if !source.starts_with("https://") || source.contains(char::is_whitespace) {
        bail!("lab-outside's SOURCE must be one https:// address, not `{source}`");
    }
    Ok(format!("{text} ([source]({source}))"))
}

/// The workspace's `rust-version`, read from its Cargo.toml.
fn rust_version(root: &Path) -> Result<String> {
    let path = root.join("Cargo.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("rust-version"))
        .filter_map(|rest| rest.trim().strip_prefix('='))
        .map(|value| value.trim().trim_matches('"').to_owned())
        .next()
        .with_context(|| format!("{} declares no rust-version", path.display()))
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}

/// The preprocessor protocol of the `mdbook` command line: the book as JSON on standard input, the
/// processed book as JSON on standard output.
pub fn run_as_command() -> Result<()> {
    let (ctx, book) = mdbook_preprocessor::parse_input(std::io::stdin().lock())?;
    let book = LabFigures.run(&ctx, book)?;
    serde_json::to_writer(std::io::stdout().lock(), &book).context("writing the processed book")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results() -> Results {
        Results::read(&crate::root().join("results.json")).unwrap()
    }

    #[test]
    fn values_and_output_come_from_the_results_file() {
        let results = results();
        let text = "Tickets: {{#lab-value scenarios.naive_retry.tickets}}; ids {{#lab-value scenarios.concurrent_same_key.returned_ticket_ids}}.\n\n{{#lab-output}}\n";
        let expanded = expand(text, &results).unwrap();
        let tickets = results.evidence.scenarios.naive_retry.tickets;
        assert!(
            expanded.starts_with(&format!("Tickets: {tickets}; ids [")),
            "{expanded}"
        );
        assert!(expanded.contains("```text\nnaive_retry: {\"attempts\": "));
        assert!(expanded.contains("PASS: 7 scenarios\n```"));
    }

    #[test]
    fn a_changed_observation_changes_the_figure() {
        let mut results = results();
        results.value["scenarios"]["naive_retry"]["tickets"] = serde_json::json!(99);
        results.evidence.scenarios.naive_retry.tickets = 99;
        let expanded = expand(
            "{{#lab-value scenarios.naive_retry.tickets}} {{#lab-output}}",
            &results,
        )
        .unwrap();
        assert!(expanded.starts_with("99 "));
        assert!(expanded.contains(r#"naive_retry: {"attempts": 2, "tickets": 99}"#));
    }

    #[test]
    fn bench_paths_pick_array_elements_by_index_or_by_their_fields() {
        let bench = serde_json::json!({"bursts": {
            "read_floor_ms": [[8, 0.5], [64, 2.5]],
            "runs": [
                {"callers": 64, "one_key": true, "coordination": "busy_handler", "elapsed_ms": 80.0},
                {"callers": 64, "one_key": true, "coordination": "group_commit", "elapsed_ms": 4.0},
                {"callers": 64, "one_key": false, "coordination": "group_commit", "elapsed_ms": 6.0}
            ]
        }});
        let at = |path: &str| lookup(&bench, path).map(|v| v.as_f64().unwrap());
        assert_eq!(at("bursts.runs.1.elapsed_ms").unwrap(), 4.0);
        assert_eq!(
            at("bursts.runs[callers=64,one_key=true,coordination=group_commit].elapsed_ms")
                .unwrap(),
            4.0
        );
        assert_eq!(at("bursts.runs[one_key=false].elapsed_ms").unwrap(), 6.0);
        assert_eq!(at("bursts.read_floor_ms[0=64].1").unwrap(), 2.5);
        for wrong in [
            "bursts.runs[callers=65].elapsed_ms",
            "bursts.runs[callers].elapsed_ms",
            "bursts.runs[callers=64.elapsed_ms",
            "bursts.runs.9.elapsed_ms",
            "bursts",
        ] {
            assert!(at(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn outside_figures_carry_their_source_and_the_rust_version_is_read() {
        let results = results();
        assert_eq!(
            expand(
                "{{#lab-outside 24 hours | https://docs.stripe.com/x}}",
                &results
            )
            .unwrap(),
            "24 hours ([source](https://docs.stripe.com/x))"
        );
        for wrong in [
            "{{#lab-outside 24 hours}}",
            "{{#lab-outside 24 hours | docs.stripe.com}}",
            "{{#lab-outside | https://docs.stripe.com/x}}",
        ] {
            assert!(expand(wrong, &results).is_err(), "{wrong}");
        }
        let version = expand("{{#lab-rust-version}}", &results).unwrap();
        assert!(
            version.split('.').all(|p| p.parse::<u32>().is_ok()),
            "{version}"
        );
    }

    #[test]
    fn escaped_directives_stay_text() {
        assert_eq!(
            expand(r"\{{#lab-output}}", &results()).unwrap(),
            "{{#lab-output}}"
        );
    }

    #[test]
    fn unknown_paths_and_directives_are_errors() {
        let results = results();
        let err = expand("{{#lab-value scenarios.nope}}", &results).unwrap_err();
        assert_eq!(
            err.to_string(),
            "results.json has no value at `scenarios.nope`"
        );
        let err = expand("{{#lab-table}}", &results).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown directive `{{#lab-table}}`"),
            "{err}"
        );
        assert!(expand("{{#lab-output", &results).is_err());
    }
}
