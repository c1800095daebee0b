//! `cargo xtask bench`: every measurement of the performance chapter in one run, written to
//! `bench.json`.
//!
//! 1. `lab bench` (release build): sequential costs, bursts, retained records.
//! 2. Instruction counts with `valgrind --tool=callgrind`, where valgrind is installed: each probe
//!    runs twice with different call counts, and the difference divided by the extra calls is the
//!    cost of one call, free of start-up and set-up.
//! 3. The seven-scenario run against the reference Python lab, timed by `hyperfine` where it is
//!    installed. The Python lab is extracted from the seed document into a temporary folder at
//!    bench time, never into the repository.
//! 4. Keyed against unkeyed creates over HTTP through `lab serve` ([`crate::bench_http`]);
//!    `cargo xtask bench --http` runs only this part and replaces only the `http` section.
//!
//! Nothing here asserts on a number: the targets are printed beside the ratios.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// Operations measured with callgrind, and the probe calls of the two runs.
const PROBES: [&str; 7] = [
    "plain-insert",
    "naive-create",
    "keyed-create",
    "keyed-create-busy-handler",
    "ticket-and-record",
    "plain-select",
    "replay",
];
const FEWER_CALLS: u32 = 1_000;
const MORE_CALLS: u32 = 3_000;

/// Builds the lab in release mode and returns the binary's path.
fn release_lab(root: &Path) -> Result<PathBuf> {
    let status = crate::cargo()
        .args(["build", "--release", "-q", "-p", "lab"])
        .current_dir(root)
        .status()?;
    if !status.success() {
        bail!("building the lab in release mode failed");
    }
    Ok(root.join("target/release/lab"))
}

/// Runs only the HTTP measurements and replaces the `http` section of `bench.json`, keeping the
/// other sections of the run that wrote them; `quick` uses the small plan.
pub fn run_http(root: &Path, quick: bool) -> Result<()> {
    let lab = release_lab(root)?;
    let scratch = tempfile_dir("lab-bench-http-")?;
    let path = root.join("bench.json");
    let mut report: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("parsing {}", path.display()))?;
    report["http"] = crate::bench_http::run(&lab, &scratch, quick)?;
    let text = format!("{}\n", serde_json::to_string_pretty(&report)?);
    lab::evidence::AtomicFile::create(&path)?.commit(text.as_bytes())?;
    std::fs::remove_dir_all(&scratch).ok();
    crate::bench_http::print_targets(&report["http"]);
    println!("wrote the http section of {}", path.display());
    Ok(())
}

/// Runs the benchmarks and writes `bench.json`; `quick` uses the small plan.
pub fn run(root: &Path, quick: bool) -> Result<()> {
    let lab = release_lab(root)?;
    let scratch = tempfile_dir("lab-bench-")?;

    let lab_json = scratch.join("lab.json");
    let mut command = Command::new(&lab);
    command.arg("bench").arg("--json").arg(&lab_json);
    if quick {
        command.arg("--quick");
    }
    if !command.status().context("running lab bench")?.success() {
        bail!("lab bench failed");
    }
    let lab_report: Value = serde_json::from_str(&std::fs::read_to_string(&lab_json)?)?;

    let instructions = instruction_counts(&lab)?;
    let python = python_comparison(root, &lab, &scratch, quick)?;
    let http = crate::bench_http::run(&lab, &scratch, quick)?;

    let report = json!({
        "lab": lab_report,
        "instructions": instructions,
        "python": python,
        "http": http,
    });
    let text = format!("{}\n", serde_json::to_string_pretty(&report)?);
    lab::evidence::AtomicFile::create(&root.join("bench.json"))?.commit(text.as_bytes())?;
    std::fs::remove_dir_all(&scratch).ok();
    print_targets(&report);
    println!("wrote {}", root.join("bench.json").display());
    Ok(())
}

fn tempfile_dir(prefix: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{prefix}{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn available(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Instructions per call of each probe, or a note saying why there are none.
fn instruction_counts(lab: &Path) -> Result<Value> {
    if !available("valgrind") {
        eprintln!("\n*** instruction counts SKIPPED: valgrind is not installed ***\n");
        return Ok(json!({"measured": false, "reason": "valgrind is not installed"}));
    }
    let mut per_call = serde_json::Map::new();
    for probe in PROBES {
        eprintln!("bench: callgrind {probe}...");
        let fewer = callgrind_total(lab, probe, FEWER_CALLS)?;
        let more = callgrind_total(lab, probe, MORE_CALLS)?;
        let each = (more.saturating_sub(fewer)) as f64 / f64::from(MORE_CALLS - FEWER_CALLS);
        per_call.insert(probe.to_owned(), json!(each.round()));
    }
    Ok(json!({
        "measured": true,
        "tool": "valgrind --tool=callgrind",
        "fewer_calls": FEWER_CALLS,
        "more_calls": MORE_CALLS,
        "per_call": per_call,
    }))
}

/// The total instructions callgrind counted for one probe run.
fn callgrind_total(lab: &Path, probe: &str, calls: u32) -> Result<u64> {
    let output = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        // Count inside the calls only: not the start-up, the store's set-up or the keys' making.
        .arg(format!(
            "--toggle-collect=*{}*",
            lab::bench::probe::MEASURED_FUNCTION
        ))
        .arg(lab)
        .args(["bench-probe", probe, &calls.to_string()])
        .output()
        .context("running valgrind")?;
    if !output.status.success() {
        bail!(
            "valgrind {probe} {calls} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let log = String::from_utf8_lossy(&output.stderr);
    log.lines()
        .find_map(|line| {
            line.split_once("Collected :")
                .map(|(_, n)| n.trim().to_owned())
        })
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no instruction total in valgrind's output for {probe}"))
}

/// The seven-scenario run of `lab` against the reference Python lab, timed by hyperfine.
fn python_comparison(root: &Path, lab: &Path, scratch: &Path, quick: bool) -> Result<Value> {
    let extractor = root.join("../shared/tools/seed-lab");
    if !extractor.exists() {
        eprintln!(
            "\n*** Python comparison SKIPPED: no seed-lab tool at {} ***\n",
            extractor.display()
        );
        return Ok(json!({"measured": false, "reason": "the seed-lab tool was not found"}));
    }
    if !available("hyperfine") || !available("python3") {
        eprintln!(
            "\n*** Python comparison SKIPPED: hyperfine or python3 is not installed (apt-get install hyperfine) ***\n"
        );
        return Ok(json!({"measured": false, "reason": "hyperfine or python3 is not installed"}));
    }
    let reference = scratch.join("reference");
    let status = Command::new("python3")
        .arg(&extractor)
        .arg(&reference)
        .status()?;
    if !status.success() {
        bail!("extracting the reference lab failed");
    }
    let export = scratch.join("hyperfine.json");
    let runs = if quick { "5" } else { "20" };
    let python = format!("python3 {}", reference.join("lab.py").display());
    let ours = lab.display().to_string();
    let status = Command::new("hyperfine")
        .args(["--warmup", "2", "--runs", runs, "--export-json"])
        .arg(&export)
        .args(["--command-name", "reference Python lab", &python])
        .args(["--command-name", "lab (Rust)", &ours])
        .status()
        .context("running hyperfine")?;
    if !status.success() {
        bail!("hyperfine failed");
    }
    let results: Value = serde_json::from_str(&std::fs::read_to_string(&export)?)?;
    let median = |index: usize| {
        results["results"][index]["median"]
            .as_f64()
            .unwrap_or(f64::NAN)
    };
    let python_version = Command::new("python3")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    Ok(json!({
        "measured": true,
        "tool": "hyperfine",
        "runs": runs.parse::<u32>().unwrap_or(0),
        "python": python_version,
        "python_median_s": median(0),
        "lab_median_s": median(1),
    }))
}

/// Prints each target of the performance issue beside the measured ratio.
fn print_targets(report: &Value) {
    let lab = &report["lab"];
    let ratio =
        |a: &Value, b: &Value| a.as_f64().unwrap_or(f64::NAN) / b.as_f64().unwrap_or(f64::NAN);
    println!("\ntargets (measured in this run)");
    if let (Some(group), Some(busy)) = (
        burst(lab, 64, true, "group_commit"),
        burst(lab, 64, true, "busy_handler"),
    ) {
        println!(
            "  64 callers, one key: {:.1}x faster than the busy handler alone (target >= 30); tickets {}",
            ratio(&busy["elapsed_ms"], &group["elapsed_ms"]),
            group["tickets"]
        );
        if let Some(reads) = crate::plots::burst_floor(lab, "read_floor_ms", 64)
            .ok()
            .filter(|ms| ms.is_finite())
        {
            println!(
                "    the burst took {:.2}x the time of 64 callers doing one bare read each ({reads:.2} ms): \
                 the busy handler took {:.1}x that floor",
                group["elapsed_ms"].as_f64().unwrap_or(f64::NAN) / reads,
                busy["elapsed_ms"].as_f64().unwrap_or(f64::NAN) / reads,
            );
        }
    }
    if let Some(group) = burst(lab, 64, false, "group_commit") {
        println!(
            "  64 callers, distinct keys, durable: {:.2}x the raw fdatasync rate (target > 1)",
            ratio(
                &group["creates_per_second"],
                &lab["bursts"]["fdatasync_per_second"]
            )
        );
    }
    let per_call = &report["instructions"]["per_call"];
    if per_call.is_object() {
        println!(
            "  instructions: keyed create {:.2}x a plain insert (target <= 2; {:.2}x a create without a key), replay {:.2}x a plain select (target <= 1.5)",
            ratio(&per_call["keyed-create"], &per_call["plain-insert"]),
            ratio(&per_call["keyed-create"], &per_call["naive-create"]),
            ratio(&per_call["replay"], &per_call["plain-select"])
        );
        println!(
            "    the ticket's and the record's inserts alone, in one transaction: {:.2}x a plain insert",
            ratio(&per_call["ticket-and-record"], &per_call["plain-insert"]),
        );
    }
    if let Some(rows) = lab["retained"].as_array()
        && let (Some(first), Some(last)) = (rows.first(), rows.last())
    {
        println!(
            "  {} records vs {}: create {:.2}x, replay {:.2}x the speed (target >= 0.8)",
            last["records"],
            first["records"],
            ratio(&first["create_ns"], &last["create_ns"]),
            ratio(&first["replay_ns"], &last["replay_ns"])
        );
        println!(
            "    a bare select of the same records: {:.2}x the speed",
            ratio(&first["select_ns"], &last["select_ns"])
        );
    }
    let python = &report["python"];
    if python["measured"] == true {
        println!(
            "  seven scenarios: {:.3}x the reference Python lab's wall time (target <= 0.2)",
            ratio(&python["lab_median_s"], &python["python_median_s"])
        );
    }
    crate::bench_http::print_targets(&report["http"]);
}

fn burst<'v>(lab: &'v Value, callers: u64, one_key: bool, coordination: &str) -> Option<&'v Value> {
    lab["bursts"]["runs"].as_array()?.iter().find(|run| {
        run["callers"] == callers
            && run["one_key"] == one_key
            && run["coordination"] == coordination
    })
}
