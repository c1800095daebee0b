//! SVG charts drawn from `bench.json` at build time, so the performance chapter shows a real run.
//!
//! The charts are plain inline SVG: no script, text in `currentColor` so they follow mdBook's light
//! and dark themes, and a `<title>` plus `aria-label` as their text alternative.

use std::fmt::Write;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// A bar of a grouped chart.
struct Bar {
    label: &'static str,
    value: f64,
    colour: &'static str,
}

/// A group of bars under one caption.
struct Group {
    caption: String,
    bars: Vec<Bar>,
}

const BUSY: &str = "#d0603a";
const GROUP: &str = "#2f7fc1";
const FLOOR: &str = "#8a8a8a";
const READS: &str = "#7a6fb0";
const CREATE: &str = "#2f7fc1";
const REPLAY: &str = "#3a9a5b";

/// The chart called `name` (`bursts` or `retained`), drawn from the bench report.
pub fn draw(name: &str, bench: &Value) -> Result<String> {
    match name {
        "bursts" => bursts(bench),
        "retained" => retained(bench),
        other => bail!("unknown plot `{other}` (known: bursts, retained)"),
    }
}

fn number(value: &Value, what: &str) -> Result<f64> {
    value
        .as_f64()
        .with_context(|| format!("bench.json has no number for {what}"))
}

/// One of the bursts' floors (`idle_floor_ms` or `read_floor_ms` of the `lab` report) for a number
/// of threads; NaN if that size was not measured.
pub fn burst_floor(lab: &Value, name: &str, threads: u64) -> Result<f64> {
    let floors = lab["bursts"][name]
        .as_array()
        .with_context(|| format!("bench.json has no lab.bursts.{name}"))?;
    floors
        .iter()
        .find(|pair| pair[0].as_u64() == Some(threads))
        .map_or(Ok(f64::NAN), |pair| number(&pair[1], "a floor"))
}

fn bursts(bench: &Value) -> Result<String> {
    let runs = bench["lab"]["bursts"]["runs"]
        .as_array()
        .context("bench.json has no lab.bursts.runs")?;
    let mut groups = Vec::new();
    let mut sizes: Vec<u64> = runs.iter().filter_map(|r| r["callers"].as_u64()).collect();
    sizes.dedup();
    for callers in sizes {
        let idle = burst_floor(&bench["lab"], "idle_floor_ms", callers)?;
        let reads = burst_floor(&bench["lab"], "read_floor_ms", callers)?;
        for one_key in [true, false] {
            let find = |coordination: &str| {
                runs.iter().find(|r| {
                    r["callers"].as_u64() == Some(callers)
                        && r["one_key"] == one_key
                        && r["coordination"] == coordination
                })
            };
            let (Some(busy), Some(group)) = (find("busy_handler"), find("group_commit")) else {
                continue;
            };
            groups.push(Group {
                caption: format!(
                    "{callers}, {}",
                    if one_key { "one key" } else { "distinct keys" }
                ),
                bars: vec![
                    Bar {
                        label: "busy handler",
                        value: number(&busy["elapsed_ms"], "a burst")?,
                        colour: BUSY,
                    },
                    Bar {
                        label: "group commit",
                        value: number(&group["elapsed_ms"], "a burst")?,
                        colour: GROUP,
                    },
                    Bar {
                        label: "one read each",
                        value: reads,
                        colour: READS,
                    },
                    Bar {
                        label: "idle threads",
                        value: idle,
                        colour: FLOOR,
                    },
                ],
            });
        }
    }
    Ok(chart(
        "Time until every caller of a burst has its answer (milliseconds, log scale)",
        "Bursts of callers released together: for each size and key shape, the median time with SQLite's busy handler alone, with group commit, for the same number of threads reading one record each, and for as many idle threads",
        &groups,
        true,
        "ms",
    ))
}

fn retained(bench: &Value) -> Result<String> {
    let rows = bench["lab"]["retained"]
        .as_array()
        .context("bench.json has no lab.retained")?;
    let groups = rows
        .iter()
        .map(|row| {
            Ok(Group {
                caption: format!("{} records", number(&row["records"], "records")?),
                bars: vec![
                    Bar {
                        label: "create",
                        value: number(&row["create_ns"], "create")? / 1000.0,
                        colour: CREATE,
                    },
                    Bar {
                        label: "replay",
                        value: number(&row["replay_ns"], "replay")? / 1000.0,
                        colour: REPLAY,
                    },
                ],
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(chart(
        "Cost of one call by number of retained records (microseconds, CPU-bound)",
        "Keyed create and replay cost with few and with many operation records kept",
        &groups,
        false,
        "µs",
    ))
}

/// A grouped bar chart with a legend, values printed above the bars.
fn chart(title: &str, description: &str, groups: &[Group], log: bool, unit: &str) -> String {
    let bars_per_group = groups.iter().map(|g| g.bars.len()).max().unwrap_or(1);
    let (bar, gap, left, top, plot_height) = (26.0, 34.0, 20.0, 56.0, 220.0);
    let group_width = bar * bars_per_group as f64 + gap;
    // Wide enough for the bars, the bold title (about 7.5 px a character at 13 px) and the legend
    // (the same advance as the legend loop below), so neither is cut off at the right edge.
    let legend_width: f64 = groups.first().map_or(0.0, |first| {
        first
            .bars
            .iter()
            .map(|entry| 20.0 + 7.0 * entry.label.len() as f64 + 16.0)
            .sum()
    });
    let title_width = 7.5 * title.chars().count() as f64;
    let width = (left * 2.0 + group_width * groups.len().max(1) as f64)
        .max(left * 2.0 + title_width)
        .max(left * 2.0 + legend_width);
    let height = top + plot_height + 70.0;
    let scale = scale(groups, log, plot_height);
    let mut svg = String::new();
    let label = escape(&format!("{title}. {description}."));
    let _ = write!(
        svg,
        r#"<svg class="lab-plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0} {height:.0}" width="100%" style="max-width: {width:.0}px" role="img" aria-label="{label}" font-family="sans-serif" font-size="12" fill="currentColor">"#
    );
    let _ = write!(
        svg,
        "<title>{}</title><desc>{}</desc>",
        escape(title),
        escape(description)
    );
    let _ = write!(
        svg,
        r#"<text x="{left}" y="18" font-size="13" font-weight="bold">{}</text>"#,
        escape(title)
    );
    legend(&mut svg, groups, left);
    let base = top + plot_height;
    let _ = write!(
        svg,
        r#"<line x1="{left}" y1="{base}" x2="{}" y2="{base}" stroke="currentColor" stroke-width="1"/>"#,
        width - left
    );
    for (index, group) in groups.iter().enumerate() {
        let x0 = left + gap / 2.0 + group_width * index as f64;
        for (j, entry) in group.bars.iter().enumerate() {
            let h = scale(entry.value);
            let x = x0 + bar * j as f64;
            let _ = write!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}: {} {unit}</title></rect>"#,
                base - h,
                bar - 3.0,
                entry.colour,
                escape(entry.label),
                format_value(entry.value)
            );
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">{}</text>"#,
                x + (bar - 3.0) / 2.0,
                base - h - 4.0,
                format_value(entry.value)
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x0 + bar * group.bars.len() as f64 / 2.0,
            base + 18.0,
            escape(&group.caption)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The bar height of a value: linear from zero, or logarithmic from half the smallest value;
/// at least 2 so a small bar stays visible, 0 for a missing value.
fn scale(groups: &[Group], log: bool, plot_height: f64) -> impl Fn(f64) -> f64 {
    let values: Vec<f64> = groups
        .iter()
        .flat_map(|g| g.bars.iter().map(|b| b.value))
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let max = values.iter().copied().fold(f64::MIN_POSITIVE, f64::max);
    let min = values.iter().copied().fold(max, f64::min);
    move |value: f64| -> f64 {
        if !(value.is_finite() && value > 0.0) {
            return 0.0;
        }
        if log {
            let low = (min / 2.0).log10();
            let span = (max.log10() - low).max(f64::MIN_POSITIVE);
            ((value.log10() - low) / span * plot_height).max(2.0)
        } else {
            (value / max * plot_height).max(2.0)
        }
    }
}

/// The legend, from the first group's bars.
fn legend(svg: &mut String, groups: &[Group], left: f64) {
    if let Some(first) = groups.first() {
        let mut x = left;
        for entry in &first.bars {
            let _ = write!(
                svg,
                r#"<rect x="{x}" y="28" width="12" height="12" fill="{}"/><text x="{}" y="38">{}</text>"#,
                entry.colour,
                x + 16.0,
                escape(entry.label)
            );
            x += 20.0 + 7.0 * entry.label.len() as f64 + 16.0;
        }
    }
}

/// A Markdown table of the performance chapter: its name in the `{{#lab-table NAME}}`
/// directive, its header, and how its rows are read from `bench.json`.
struct Table {
    name: &'static str,
    header: &'static [&'static str],
    rows: fn(&Value) -> Result<Vec<Vec<String>>>,
}

const TABLES: &[Table] = &[
    Table {
        name: "sequential",
        header: &["call", "durable µs", "ratio", "CPU-bound µs", "ratio"],
        rows: sequential_rows,
    },
    Table {
        name: "instructions",
        header: &["call", "instructions per call", "ratio"],
        rows: instructions_rows,
    },
    Table {
        name: "bursts",
        header: &[
            "callers",
            "keys",
            "one read each ms",
            "busy handler ms",
            "group commit ms",
            "speed-up",
            "tickets",
            "× fdatasync rate",
            "transactions",
        ],
        rows: bursts_rows,
    },
    Table {
        name: "retained",
        header: &[
            "records kept",
            "create µs",
            "speed",
            "replay µs",
            "speed",
            "first pass µs",
            "plain select µs",
            "speed",
        ],
        rows: retained_rows,
    },
    Table {
        name: "http",
        header: &[
            "connections",
            "creates",
            "answers/s",
            "p50 ms",
            "p99 ms",
            "p99 ÷ p50",
            "least-served ÷ median",
            "most-served ÷ median",
            "errors",
        ],
        rows: http_rows,
    },
    Table {
        name: "http-cost",
        header: &[
            "connections",
            "creates",
            "answers/s",
            "keyed ÷ unkeyed: median (rounds)",
            "server CPU µs per answer",
            "unkeyed ÷ keyed: median (rounds)",
            "server's cores",
            "load generator's cores",
        ],
        rows: http_cost_rows,
    },
    Table {
        name: "keyed-create-profile",
        header: &["part", "instructions per call", "share of the keyed create"],
        rows: keyed_create_profile_rows,
    },
    Table {
        name: "postgres",
        header: &[
            "clients",
            "plain inserts/s",
            "keyed creates/s",
            "keyed ÷ plain",
            "plain selects/s",
            "replays/s",
            "replay ÷ select",
        ],
        rows: postgres_rows,
    },
    Table {
        name: "postgres-race",
        header: &[
            "clients",
            "rounds",
            "race, median ms",
            "race, slowest ms",
            "plain inserts, median ms",
            "race ÷ plain",
        ],
        rows: postgres_race_rows,
    },
    Table {
        name: "syncs",
        header: &[
            "program",
            "fsync + fdatasync",
            "WAL",
            "rollback journal",
            "database file",
            "folder",
            "other",
        ],
        rows: syncs_rows,
    },
];

/// The Markdown table called `name`, built from the bench report, with the ratios the
/// performance targets are stated in.
pub fn table(name: &str, bench: &Value) -> Result<String> {
    let Some(table) = TABLES.iter().find(|t| t.name == name) else {
        let known: Vec<&str> = TABLES.iter().map(|t| t.name).collect();
        bail!("unknown table `{name}` (known: {})", known.join(", "));
    };
    let rows = (table.rows)(bench)?;
    let mut out = format!(
        "| {} |\n|{}|\n",
        table.header.join(" | "),
        vec![" --- "; table.header.len()].join("|")
    );
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    Ok(out)
}

/// One caller, plain against keyed, durable and CPU-bound.
fn sequential_rows(bench: &Value) -> Result<Vec<Vec<String>>> {
    let lab = &bench["lab"];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let costs = |mode: &str, field: &str| number(&lab["sequential"][mode][field], field);
    let lines = [
        ("plain insert", "plain_insert_ns", "plain_insert_ns"),
        (
            "keyed create, group commit",
            "keyed_create_group_commit_ns",
            "plain_insert_ns",
        ),
        (
            "keyed create, busy handler",
            "keyed_create_busy_handler_ns",
            "plain_insert_ns",
        ),
        ("plain select by key", "plain_select_ns", "plain_select_ns"),
        ("replay", "replay_ns", "plain_select_ns"),
    ];
    for (label, field, base) in lines {
        let mut row = vec![label.to_owned()];
        for mode in ["durable", "cpu_bound"] {
            let value = costs(mode, field)?;
            row.push(format_value(value / 1000.0));
            row.push(format!("{:.2}", value / costs(mode, base)?));
        }
        rows.push(row);
    }
    Ok(rows)
}

/// Instructions per call, from valgrind.
fn instructions_rows(bench: &Value) -> Result<Vec<Vec<String>>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let per_call = &bench["instructions"]["per_call"];
    if !per_call.is_object() {
        bail!("bench.json has no instruction counts (valgrind was not installed for that run)");
    }
    let lines = [
        ("plain insert", "plain-insert", "plain-insert"),
        ("naive create (no key)", "naive-create", "plain-insert"),
        ("keyed create, group commit", "keyed-create", "plain-insert"),
        (
            "keyed create, busy handler",
            "keyed-create-busy-handler",
            "plain-insert",
        ),
        (
            "ticket and record inserts alone, one transaction",
            "ticket-and-record",
            "plain-insert",
        ),
        ("plain select by key", "plain-select", "plain-select"),
        ("replay", "replay", "plain-select"),
    ];
    for (label, field, base) in lines {
        let value = number(&per_call[field], field)?;
        rows.push(vec![
            label.to_owned(),
            format!("{value:.0}"),
            format!("{:.2}", value / number(&per_call[base], base)?),
        ]);
    }
    Ok(rows)
}

/// Bursts of callers released together, busy handler against group commit.
fn bursts_rows(bench: &Value) -> Result<Vec<Vec<String>>> {
    let lab = &bench["lab"];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let runs = lab["bursts"]["runs"]
        .as_array()
        .context("bench.json has no bursts")?;
    let fsync = number(&lab["bursts"]["fdatasync_per_second"], "the fdatasync rate")?;
    let mut sizes: Vec<u64> = runs.iter().filter_map(|r| r["callers"].as_u64()).collect();
    sizes.dedup();
    for callers in sizes {
        for one_key in [true, false] {
            let find = |c: &str| {
                runs.iter().find(|r| {
                    r["callers"].as_u64() == Some(callers)
                        && r["one_key"] == one_key
                        && r["coordination"] == c
                })
            };
            let (Some(busy), Some(group)) = (find("busy_handler"), find("group_commit")) else {
                continue;
            };
            let (busy_ms, group_ms) = (
                number(&busy["elapsed_ms"], "a burst")?,
                number(&group["elapsed_ms"], "a burst")?,
            );
            let reads_ms = burst_floor(lab, "read_floor_ms", callers)?;
            rows.push(vec![
                callers.to_string(),
                if one_key {
                    "one".to_owned()
                } else {
                    "distinct".to_owned()
                },
                format_value(reads_ms),
                format_value(busy_ms),
                format_value(group_ms),
                format!("{:.1}", busy_ms / group_ms),
                group["tickets"].to_string(),
                format!(
                    "{:.2}",
                    number(&group["creates_per_second"], "a rate")? / fsync
                ),
                group["transactions"].to_string(),
            ]);
        }
    }
    Ok(rows)
}

/// Create and replay with few and with many records kept.
fn retained_rows(bench: &Value) -> Result<Vec<Vec<String>>> {
    let lab = &bench["lab"];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let all = lab["retained"]
        .as_array()
        .context("bench.json has no retained records")?;
    let first = all.first().context("bench.json has no retained records")?;
    for row in all {
        rows.push(vec![
            number(&row["records"], "records")?.to_string(),
            format_value(number(&row["create_ns"], "create")? / 1000.0),
            format!(
                "{:.2}",
                number(&first["create_ns"], "create")? / number(&row["create_ns"], "create")?
            ),
            format_value(number(&row["replay_ns"], "replay")? / 1000.0),
            format!(
                "{:.2}",
                number(&first["replay_ns"], "replay")? / number(&row["replay_ns"], "replay")?
            ),
            format_value(number(&row["replay_cold_ns"], "a first-pass replay")? / 1000.0),
            format_value(number(&row["select_ns"], "a plain select")? / 1000.0),
            format!(
                "{:.2}",
                number(&first["select_ns"], "a plain select")?
                    / number(&row["select_ns"], "a plain select")?
            ),
        ]);
    }
    Ok(rows)
}

/// Keyed against unkeyed creates over HTTP, by connections.
fn http_rows(bench: &Value) -> Result<Vec<Vec<String>>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    // A share is missing (null) when the median connection got no answer at all.
    let shown = |value: &Value| value.as_f64().map_or("n/a".to_owned(), format_value);
    for run in http_runs(bench)? {
        rows.push(vec![
            run["connections"].to_string(),
            creates(run).to_owned(),
            format_value(number(&run["requests_per_second"], "a rate")?),
            format_value(number(&run["p50_ms"], "p50")?),
            format_value(number(&run["p99_ms"], "p99")?),
            format!(
                "{:.2}",
                number(&run["p99_ms"], "p99")? / number(&run["p50_ms"], "p50")?
            ),
            shown(&run["least_served_share"]),
            shown(&run["most_served_share"]),
            run["errors"].to_string(),
        ]);
    }
    Ok(rows)
}

/// What the key costs over HTTP: rates, the server's CPU per answer, and how much of the machine
/// each side took, with the keyed-to-unkeyed ratios over rounds.
fn http_cost_rows(bench: &Value) -> Result<Vec<Vec<String>>> {
    bench["http"]["cost_runs"]
        .as_array()
        .context("bench.json has no http cost_runs (run cargo xtask bench --http)")?
        .iter()
        .map(|run| {
            Ok(vec![
                run["connections"].to_string(),
                creates(run).to_owned(),
                format_value(number(&run["requests_per_second"], "a rate")?),
                http_ratio(bench, run, "rate")?,
                format_value(number(&run["server_cpu_us_per_answer"], "server CPU")?),
                http_ratio(bench, run, "server_cpu")?,
                format!("{:.2}", number(&run["server_cores"], "server's cores")?),
                format!("{:.2}", number(&run["client_cores"], "generator's cores")?),
            ])
        })
        .collect()
}

fn http_runs(bench: &Value) -> Result<&Vec<Value>> {
    bench["http"]["runs"]
        .as_array()
        .context("bench.json has no http section (run cargo xtask bench --http)")
}

fn creates(run: &Value) -> &'static str {
    if run["keyed"] == true {
        "keyed"
    } else {
        "unkeyed"
    }
}

/// A keyed run's ratio to the unkeyed run (`which`: `rate` or `server_cpu`), as its median over
/// rounds and their range; empty on an unkeyed run's row.
fn http_ratio(bench: &Value, run: &Value, which: &str) -> Result<String> {
    if run["keyed"] != true {
        return Ok(String::new());
    }
    let part = bench["http"]["ratios"]
        .as_array()
        .and_then(|all| all.iter().find(|r| r["connections"] == run["connections"]))
        .map(|r| &r[which])
        .with_context(|| {
            format!(
                "bench.json has no http ratio at {} connections (run cargo xtask bench --http)",
                run["connections"]
            )
        })?;
    Ok(format!(
        "{:.2} ({:.2} to {:.2})",
        number(&part["median"], "a median ratio")?,
        number(&part["min"], "a least ratio")?,
        number(&part["max"], "a greatest ratio")?,
    ))
}

/// Where the keyed create spends its instructions.
fn keyed_create_profile_rows(bench: &Value) -> Result<Vec<Vec<String>>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let profile = &bench["instructions"]["keyed_create_profile"]["per_call"];
    if !profile.is_object() {
        bail!("bench.json has no keyed-create profile (valgrind was not installed for that run)");
    }
    let part = |name: &str| number(&profile[name], name);
    let create = part("create")?;
    let rest = create - part("lookup")? - part("inserts")? - part("begin_and_commit")?;
    let floor = number(
        &bench["instructions"]["per_call"]["ticket-and-record"],
        "ticket-and-record",
    )?;
    for (label, value) in [
        ("the whole keyed create (`TicketTool::create`)", create),
        ("the lookup (`lookup`)", part("lookup")?),
        (
            "the ticket's and the record's inserts (`insert_new`)",
            part("inserts")?,
        ),
        (
            "`BEGIN` and `COMMIT` (`writer::run`)",
            part("begin_and_commit")?,
        ),
        ("the rest: queue, locks, outcome", rest),
        (
            "for comparison: the two inserts alone, bare SQL in one transaction",
            floor,
        ),
    ] {
        rows.push(vec![
            label.to_owned(),
            format!("{value:.0}"),
            format!("{:.2}", value / create),
        ]);
    }
    Ok(rows)
}

/// Keyed create against plain insert on PostgreSQL, by clients.
fn postgres_rows(bench: &Value) -> Result<Vec<Vec<String>>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let runs = bench["postgres"]["rows"]
        .as_array()
        .context("bench.json has no postgres section (no PostgreSQL server in that run)")?;
    for run in runs {
        rows.push(vec![
            run["clients"].to_string(),
            format_value(number(&run["plain_insert_per_second"], "a rate")?),
            format_value(number(&run["keyed_create_per_second"], "a rate")?),
            format!("{:.2}", number(&run["keyed_over_plain"], "a ratio")?),
            format_value(number(&run["plain_select_per_second"], "a rate")?),
            format_value(number(&run["replay_per_second"], "a rate")?),
            format!("{:.2}", number(&run["replay_over_select"], "a ratio")?),
        ]);
    }
    Ok(rows)
}

/// The same-key race on PostgreSQL against a round of plain inserts.
fn postgres_race_rows(bench: &Value) -> Result<Vec<Vec<String>>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let runs = bench["postgres"]["rows"]
        .as_array()
        .context("bench.json has no postgres section (no PostgreSQL server in that run)")?;
    for run in runs.iter().filter(|run| run["race"].is_object()) {
        let race = &run["race"];
        rows.push(vec![
            run["clients"].to_string(),
            race["rounds"].to_string(),
            format_value(number(&race["median_ms"], "a time")?),
            format_value(number(&race["max_ms"], "a time")?),
            format_value(number(&race["plain_round_median_ms"], "a time")?),
            format!(
                "{:.2}",
                number(&race["median_over_plain_round"], "a ratio")?
            ),
        ]);
    }
    Ok(rows)
}

/// fsync and fdatasync calls of the lab and of the reference Python lab.
fn syncs_rows(bench: &Value) -> Result<Vec<Vec<String>>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let syncs = &bench["python"]["syncs"];
    if syncs["measured"] != true {
        bail!("bench.json has no fsync counts (strace was not installed for that run)");
    }
    for (label, program) in [("lab", "lab"), ("reference Python lab", "python")] {
        let by_file = &syncs[program]["by_file"];
        let count = |kind: &str| by_file[kind].as_u64().unwrap_or(0).to_string();
        rows.push(vec![
            label.to_owned(),
            syncs[program]["total"].to_string(),
            count("wal"),
            count("rollback_journal"),
            count("database"),
            count("folder"),
            count("other"),
        ]);
    }
    Ok(rows)
}

fn format_value(value: f64) -> String {
    if !value.is_finite() {
        "n/a".to_owned()
    } else if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bench() -> Value {
        json!({"lab": {
            "bursts": {
                "fdatasync_per_second": 1000.0,
                "idle_floor_ms": [[64, 1.5]],
                "read_floor_ms": [[64, 2.75]],
                "runs": [
                    {"callers": 64, "one_key": true, "coordination": "group_commit", "elapsed_ms": 3.25},
                    {"callers": 64, "one_key": true, "coordination": "busy_handler", "elapsed_ms": 81.0},
                    {"callers": 64, "one_key": false, "coordination": "group_commit", "elapsed_ms": 6.5},
                    {"callers": 64, "one_key": false, "coordination": "busy_handler", "elapsed_ms": 4100.0}
                ]
            },
            "retained": [
                {"records": 1000, "create_ns": 26000.0, "replay_ns": 3500.0, "replay_cold_ns": 5000.0, "select_ns": 1200.0},
                {"records": 1000000, "create_ns": 28000.0, "replay_ns": 4700.0, "replay_cold_ns": 9000.0, "select_ns": 2000.0}
            ]
        }})
    }

    #[test]
    fn the_burst_chart_shows_every_measured_value_with_a_text_alternative() {
        let svg = draw("bursts", &bench()).unwrap();
        for value in ["3.25", "81.0", "6.50", "4100", "1.50", "2.75"] {
            assert!(svg.contains(&format!(">{value}<")), "{value} missing");
        }
        assert!(svg.contains("role=\"img\"") && svg.contains("<title>"));
        assert!(svg.contains("64, one key") && svg.contains("64, distinct keys"));
        assert!(svg.contains("one read each") && svg.contains("idle threads"));
    }

    #[test]
    fn a_chart_is_wide_enough_for_its_title_and_scales_to_the_column() {
        for name in ["bursts", "retained"] {
            let svg = draw(name, &bench()).unwrap();
            let view = svg.split("viewBox=\"0 0 ").nth(1).unwrap();
            let width: f64 = view.split(' ').next().unwrap().parse().unwrap();
            let title = svg.split("<title>").nth(1).unwrap();
            let title = title.split("</title>").next().unwrap();
            let needed = 40.0 + 7.5 * title.chars().count() as f64;
            assert!(width + 1.0 >= needed, "{name}: {width} px for {title:?}");
            assert!(svg.contains("width=\"100%\""), "{name}");
        }
    }

    #[test]
    fn a_changed_measurement_changes_the_chart() {
        let mut changed = bench();
        changed["lab"]["retained"][1]["replay_ns"] = json!(9900.0);
        assert_ne!(
            draw("retained", &bench()).unwrap(),
            draw("retained", &changed).unwrap()
        );
        assert!(draw("retained", &changed).unwrap().contains(">9.90<"));
    }

    #[test]
    fn the_burst_table_states_the_speed_up_from_the_measurements() {
        let mut report = bench();
        for run in report["lab"]["bursts"]["runs"].as_array_mut().unwrap() {
            run["creates_per_second"] = json!(2000.0);
            run["tickets"] = json!(1);
            run["transactions"] = json!(2);
        }
        let table = table("bursts", &report).unwrap();
        // 81.0 / 3.25 = 24.9 for one key; 4100 / 6.5 = 630.8 for distinct keys.
        assert!(
            table.contains("| 64 | one | 2.75 | 81.0 | 3.25 | 24.9 |"),
            "{table}"
        );
        assert!(
            table.contains("| 64 | distinct | 2.75 | 4100 | 6.50 | 630.8 |"),
            "{table}"
        );
        assert!(table.starts_with("| callers | keys |"));
    }

    #[test]
    fn the_retained_table_compares_each_size_with_the_smallest() {
        let table = table("retained", &bench()).unwrap();
        assert!(
            table.contains("| 1000000 | 28.0 | 0.93 | 4.70 | 0.74 | 9.00 | 2.00 | 0.60 |"),
            "{table}"
        );
    }

    #[test]
    fn the_http_tables_show_each_run_and_the_key_s_cost_with_its_spread() {
        let bench = json!({"http": {"runs": [
            {"connections": 8, "keyed": true, "requests_per_second": 800.0, "p50_ms": 1.0,
             "p99_ms": 3.0, "least_served_share": 0.9, "most_served_share": 1.1, "errors": 0},
            {"connections": 8, "keyed": false, "requests_per_second": 1000.0, "p50_ms": 1.0,
             "p99_ms": 2.0, "least_served_share": null, "most_served_share": 7.5, "errors": 0}
        ], "cost_runs": [
            {"connections": 8, "keyed": true, "requests_per_second": 900.0,
             "server_cpu_us_per_answer": 120.0, "server_cores": 0.9, "client_cores": 0.2},
            {"connections": 8, "keyed": false, "requests_per_second": 1100.0,
             "server_cpu_us_per_answer": 100.0, "server_cores": 0.95, "client_cores": 0.25}
        ], "ratios": [
            {"connections": 8, "rate": {"median": 0.8, "min": 0.75, "max": 0.85},
             "server_cpu": {"median": 0.83, "min": 0.8, "max": 0.9}}
        ]}});
        let table = table("http", &bench).unwrap();
        assert!(
            table.contains("| 8 | keyed | 800 | 1.00 | 3.00 | 3.00 | 0.90 | 1.10 | 0 |"),
            "{table}"
        );
        assert!(
            table.contains("| 8 | unkeyed | 1000 | 1.00 | 2.00 | 2.00 | n/a | 7.50 | 0 |"),
            "{table}"
        );
        let cost = super::table("http-cost", &bench).unwrap();
        assert!(
            cost.contains(
                "| 8 | keyed | 900 | 0.80 (0.75 to 0.85) | 120 | 0.83 (0.80 to 0.90) | 0.90 | 0.20 |"
            ),
            "{cost}"
        );
        assert!(
            cost.contains("| 8 | unkeyed | 1100 |  | 100 |  | 0.95 | 0.25 |"),
            "{cost}"
        );
        assert!(super::table("http", &json!({})).is_err());
        // A keyed run without its ratio is an error, not an empty cell.
        let mut without = bench.clone();
        without["http"]["ratios"] = json!([]);
        assert!(super::table("http-cost", &without).is_err());
        without["http"]["cost_runs"] = json!(null);
        assert!(super::table("http-cost", &without).is_err());
    }

    #[test]
    fn the_postgres_tables_show_each_ratio_and_only_the_races_that_ran() {
        let bench = json!({"postgres": {"rows": [
            {"clients": 1, "plain_insert_per_second": 1000.0, "keyed_create_per_second": 800.0,
             "keyed_over_plain": 0.8, "plain_select_per_second": 2000.0,
             "replay_per_second": 1000.0, "replay_over_select": 0.5, "race": null},
            {"clients": 8, "plain_insert_per_second": 4000.0, "keyed_create_per_second": 3000.0,
             "keyed_over_plain": 0.75, "plain_select_per_second": 8000.0,
             "replay_per_second": 5200.0, "replay_over_select": 0.65,
             "race": {"rounds": 50, "median_ms": 1.5, "max_ms": 9.0,
                      "plain_round_median_ms": 1.0, "median_over_plain_round": 1.5}},
        ]}});
        let throughput = table("postgres", &bench).unwrap();
        assert!(
            throughput.contains("| 8 | 4000 | 3000 | 0.75 | 8000 | 5200 | 0.65 |"),
            "{throughput}"
        );
        let race = table("postgres-race", &bench).unwrap();
        assert_eq!(race.lines().count(), 3, "{race}");
        assert!(
            race.contains("| 8 | 50 | 1.50 | 9.00 | 1.00 | 1.50 |"),
            "{race}"
        );
        assert!(table("postgres", &json!({})).is_err());
    }

    #[test]
    fn the_profile_table_splits_the_keyed_create_and_names_what_is_left() {
        let bench = json!({"instructions": {
            "per_call": {"ticket-and-record": 30000.0},
            "keyed_create_profile": {"per_call": {"create": 40000.0, "lookup": 8000.0,
                "inserts": 17000.0, "begin_and_commit": 12000.0}},
        }});
        let profile = table("keyed-create-profile", &bench).unwrap();
        assert!(
            profile.contains("| the lookup (`lookup`) | 8000 | 0.20 |"),
            "{profile}"
        );
        assert!(
            profile.contains("| the rest: queue, locks, outcome | 3000 | 0.07 |"),
            "{profile}"
        );
        assert!(
            profile.contains("one transaction | 30000 | 0.75 |"),
            "{profile}"
        );
        assert!(table("keyed-create-profile", &json!({})).is_err());
    }

    #[test]
    fn the_sync_table_counts_each_kind_of_file_and_needs_a_measurement() {
        let bench = json!({"python": {"syncs": {"measured": true,
            "lab": {"total": 26, "by_file": {"wal": 11, "database": 7, "folder": 8}},
            "python": {"total": 88, "by_file": {"other": 88}}}}});
        let syncs = table("syncs", &bench).unwrap();
        assert!(
            syncs.contains("| lab | 26 | 11 | 0 | 7 | 8 | 0 |"),
            "{syncs}"
        );
        assert!(
            syncs.contains("| reference Python lab | 88 | 0 | 0 | 0 | 0 | 88 |"),
            "{syncs}"
        );
        let skipped = json!({"python": {"syncs": {"measured": false}}});
        assert!(table("syncs", &skipped).is_err());
    }

    #[test]
    fn an_unknown_chart_or_a_missing_section_is_an_error() {
        assert!(table("pie", &bench()).is_err());
        assert!(table("instructions", &bench()).is_err());
        assert!(draw("pie", &bench()).is_err());
        assert!(draw("bursts", &json!({})).is_err());
    }
}
