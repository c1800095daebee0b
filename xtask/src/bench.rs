//! `cargo xtask bench`: every measurement of the performance chapter in one run, written to
//! `bench.json`.
//!
//! 1. `lab bench` (release build): sequential costs, bursts, retained records.
//! 2. Instruction counts with `valgrind --tool=callgrind`, where valgrind is installed: each probe
//!    runs twice with different call counts, and the difference divided by the extra calls is the
//!    cost of one call, free of start-up and set-up.
//! 3. The seven-scenario run against the reference Python lab: both timed in one loop that takes
//!    turns (Python, lab, Python, lab, ...), so a neighbour's load falls on both alike; and the
//!    fsync-family calls of each counted with `strace -f`, where strace is installed. The Python
//!    lab is extracted from the seed document into a temporary folder at bench time, never into
//!    the repository.
//! 5. Keyed create against plain insert, replay against plain select and the same-key race on
//!    PostgreSQL (`lab bench-postgres`), on the server the PostgreSQL tests use: `LAB_POSTGRES_URL`,
//!    or a throwaway cluster ([`crate::postgres`]).
//! 4. Keyed against unkeyed creates over HTTP through `lab serve` ([`crate::bench_http`]);
//!    `cargo xtask bench --http` runs only this part and replaces only the `http` section.
//!
//! Nothing here asserts on a number: the targets are printed beside the ratios.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

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

/// Builds the lab in release mode, with PostgreSQL support, and returns the binary's path.
fn release_lab(root: &Path) -> Result<PathBuf> {
    let status = crate::cargo()
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "lab",
            "--features",
            "postgres",
        ])
        .current_dir(root)
        .status()?;
    if !status.success() {
        bail!("building the lab in release mode failed");
    }
    Ok(root.join("target/release/lab"))
}

/// The sources whose code `bench.json` measures: the stores, the service over them, the HTTP
/// server, the key and payload they keep, and the benchmarks themselves. A change to any of them
/// makes the figures stale until `cargo xtask bench` runs again ([`stale`]).
pub const MEASURED: [&str; 9] = [
    "lab/src/sqlite.rs",
    "lab/src/sqlite",
    "lab/src/service",
    "lab/src/postgres.rs",
    "lab/src/http/server",
    "lab/src/key.rs",
    "lab/src/payload.rs",
    "lab/src/bench.rs",
    "lab/src/bench",
];

/// A digest of the [`MEASURED`] sources: FNV-1a (64 bits, stable across Rust versions) over
/// each file's path from the root and its bytes, in path order.
pub fn sources_digest(root: &Path) -> Result<String> {
    let mut files = Vec::new();
    for source in MEASURED {
        collect_files(&root.join(source), &mut files)?;
    }
    files.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for byte in bytes {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for file in &files {
        let relative = file.strip_prefix(root).unwrap_or(file);
        feed(relative.to_string_lossy().as_bytes());
        feed(&[0]);
        feed(&std::fs::read(file).with_context(|| format!("reading {}", file.display()))?);
        feed(&[0]);
    }
    Ok(format!("{hash:016x}"))
}

/// Every file under `path` (or `path` itself), recursively.
fn collect_files(path: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    if path.is_dir() {
        for entry in
            std::fs::read_dir(path).with_context(|| format!("reading {}", path.display()))?
        {
            collect_files(&entry?.path(), files)?;
        }
    } else if path.is_file() {
        files.push(path.to_path_buf());
    } else {
        bail!(
            "{}: a measured source that is not there (bench::MEASURED)",
            path.display()
        );
    }
    Ok(())
}

/// A problem when `bench.json` was measured on other sources than the tree's: the book's
/// performance figures would then describe code that is gone.
pub fn stale(root: &Path) -> Result<Option<String>> {
    let path = root.join("bench.json");
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("parsing {}", path.display()))?;
    let now = sources_digest(root)?;
    Ok(match report["sources"]["digest"].as_str() {
        Some(digest) if digest == now => None,
        Some(digest) => Some(format!(
            "bench.json: measured on sources with digest {digest}, and the measured sources \
             ({}) now give {now}: run `cargo xtask bench` so the book's figures describe the \
             code as it is",
            MEASURED.join(", ")
        )),
        None => Some(
            "bench.json: no sources.digest, so nothing says which code it measured: run \
             `cargo xtask bench`"
                .to_owned(),
        ),
    })
}

/// Runs only the HTTP measurements and replaces the `http` section of `bench.json`, keeping the
/// other sections of the run that wrote them, and the digest of the sources they measured (a
/// change to the store still needs the whole run); `quick` uses the small plan.
pub fn run_http(root: &Path, quick: bool) -> Result<()> {
    let lab = release_lab(root)?;
    let scratch = scratch_folder("lab-bench-http-")?;
    let scratch = scratch.path();
    let path = root.join("bench.json");
    let mut report: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("parsing {}", path.display()))?;
    report["http"] = crate::bench_http::run(&lab, scratch, quick)?;
    let text = format!("{}\n", serde_json::to_string_pretty(&report)?);
    lab::evidence::AtomicFile::create(&path)?.commit(text.as_bytes())?;
    crate::bench_http::print_targets(&report["http"]);
    println!("wrote the http section of {}", path.display());
    Ok(())
}

/// Runs only `lab audit` over a large recording ([`crate::bench_audit`]) and replaces the
/// `audit` section of `bench.json`, keeping the others; `quick` uses a 64 MiB recording.
pub fn run_audit(root: &Path, quick: bool) -> Result<()> {
    let lab = release_lab(root)?;
    let scratch = scratch_folder("lab-bench-audit-")?;
    let path = root.join("bench.json");
    let mut report: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("parsing {}", path.display()))?;
    report["audit"] = crate::bench_audit::run(&lab, scratch.path(), quick)?;
    let text = format!("{}\n", serde_json::to_string_pretty(&report)?);
    lab::evidence::AtomicFile::create(&path)?.commit(text.as_bytes())?;
    crate::bench_audit::print_targets(&report["audit"]);
    println!("wrote the audit section of {}", path.display());
    Ok(())
}

/// Runs the benchmarks and writes `bench.json`; `quick` uses the small plan.
pub fn run(root: &Path, quick: bool) -> Result<()> {
    let lab = release_lab(root)?;
    let scratch = scratch_folder("lab-bench-")?;
    let scratch = scratch.path();

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

    let instructions = instruction_counts(&lab, scratch)?;
    let python = python_comparison(root, &lab, scratch, quick)?;
    let postgres = postgres_comparison(&lab, scratch, quick)?;
    let http = crate::bench_http::run(&lab, scratch, quick)?;
    let audit = crate::bench_audit::run(&lab, scratch, quick)?;

    let report = json!({
        "lab": lab_report,
        "instructions": instructions,
        "python": python,
        "postgres": postgres,
        "http": http,
        "audit": audit,
        "sources": {"digest": sources_digest(root)?, "measured": MEASURED},
    });
    let text = format!("{}\n", serde_json::to_string_pretty(&report)?);
    lab::evidence::AtomicFile::create(&root.join("bench.json"))?.commit(text.as_bytes())?;
    print_targets(&report);
    println!("wrote {}", root.join("bench.json").display());
    Ok(())
}

/// A scratch folder that is removed when it is dropped, on an error as on success.
fn scratch_folder(prefix: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .with_context(|| format!("making a scratch folder {prefix}..."))
}

fn available(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Instructions per call of each probe, or a note saying why there are none.
fn instruction_counts(lab: &Path, scratch: &Path) -> Result<Value> {
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
    eprintln!("bench: callgrind profile of keyed-create...");
    let profile = keyed_create_profile(lab, scratch)?;
    Ok(json!({
        "measured": true,
        "tool": "valgrind --tool=callgrind",
        "fewer_calls": FEWER_CALLS,
        "more_calls": MORE_CALLS,
        "per_call": per_call,
        "keyed_create_profile": profile,
    }))
}

/// The functions of the store's create path whose inclusive instructions per keyed create the
/// profile reports, by the name the chapter's table gives them.
const PROFILED: [(&str, &str); 5] = [
    (
        "create",
        "<lab::sqlite::SqliteStore as lab::tool::TicketTool>::create",
    ),
    ("transaction", "lab::sqlite::writer::transaction"),
    ("lookup", "lab::sqlite::lookup"),
    ("inserts", "lab::sqlite::insert_new"),
    ("begin_and_commit", "lab::sqlite::writer::run"),
];

/// Inclusive instructions per keyed create of each function in [`PROFILED`], from two callgrind
/// runs (as for the totals) read by `callgrind_annotate --inclusive=yes`.
fn keyed_create_profile(lab: &Path, scratch: &Path) -> Result<Value> {
    let mut runs = Vec::new();
    for calls in [FEWER_CALLS, MORE_CALLS] {
        let out = scratch.join(format!("callgrind-keyed-create-{calls}.out"));
        let output = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(format!(
                "--toggle-collect=*{}*",
                lab::bench::probe::MEASURED_FUNCTION
            ))
            .arg(lab)
            .args(["bench-probe", "keyed-create", &calls.to_string()])
            .output()
            .context("running valgrind")?;
        if !output.status.success() {
            bail!(
                "valgrind keyed-create {calls} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let annotated = Command::new("callgrind_annotate")
            .arg("--inclusive=yes")
            .arg(&out)
            .output()
            .context("running callgrind_annotate")?;
        if !annotated.status.success() {
            bail!("callgrind_annotate failed on {}", out.display());
        }
        runs.push(inclusive_counts(&String::from_utf8_lossy(
            &annotated.stdout,
        ))?);
    }
    let mut per_call = serde_json::Map::new();
    for (name, _) in PROFILED {
        let more = runs[1][name];
        let fewer = runs[0][name];
        let each = more.saturating_sub(fewer) as f64 / f64::from(MORE_CALLS - FEWER_CALLS);
        per_call.insert(name.to_owned(), json!(each.round()));
    }
    Ok(json!({
        "tool": "callgrind_annotate --inclusive=yes",
        "functions": PROFILED.iter().map(|(name, function)| (name.to_string(), json!(function))).collect::<serde_json::Map<_, _>>(),
        "per_call": per_call,
    }))
}

/// The inclusive count of each function in [`PROFILED`] in `callgrind_annotate` output, whose
/// lines read `11,324,670 (100.0%)  ???:name [binary]`.
fn inclusive_counts(annotated: &str) -> Result<std::collections::HashMap<&'static str, u64>> {
    let mut counts = std::collections::HashMap::new();
    for (name, function) in PROFILED {
        let count = annotated
            .lines()
            .find_map(|line| {
                let (number, rest) = line.trim_start().split_once(' ')?;
                let symbol = rest.split_once(":")?.1;
                let symbol = symbol.rsplit_once(" [").map_or(symbol, |(s, _)| s);
                (symbol.trim() == function)
                    .then(|| number.replace(',', "").parse::<u64>().ok())
                    .flatten()
            })
            .with_context(|| format!("callgrind_annotate did not list {function}"))?;
        counts.insert(name, count);
    }
    Ok(counts)
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

/// The seven-scenario run of `lab` against the reference Python lab: wall time, taking turns,
/// and the fsync-family calls each makes.
fn python_comparison(root: &Path, lab: &Path, scratch: &Path, quick: bool) -> Result<Value> {
    let extractor = root.join("../shared/tools/seed-lab");
    if !extractor.exists() {
        eprintln!(
            "\n*** Python comparison SKIPPED: no seed-lab tool at {} ***\n",
            extractor.display()
        );
        return Ok(json!({"measured": false, "reason": "the seed-lab tool was not found"}));
    }
    if !available("python3") {
        eprintln!("\n*** Python comparison SKIPPED: python3 is not installed ***\n");
        return Ok(json!({"measured": false, "reason": "python3 is not installed"}));
    }
    let reference = scratch.join("reference");
    let status = Command::new("python3")
        .arg(&extractor)
        .arg(&reference)
        .status()?;
    if !status.success() {
        bail!("extracting the reference lab failed");
    }
    // Both run in a folder of their own, so neither finds the other's files.
    let work = scratch.join("seven-scenarios");
    std::fs::create_dir_all(&work)?;
    let python = || {
        let mut command = Command::new("python3");
        command.arg(reference.join("lab.py")).current_dir(&work);
        command
    };
    let ours = || {
        let mut command = Command::new(lab);
        command.current_dir(&work);
        command
    };
    let runs: u32 = if quick { 5 } else { 30 };
    eprintln!(
        "bench: the seven scenarios, reference Python lab and lab taking turns ({runs} each)..."
    );
    let (python_s, lab_s) = take_turns(&python, &ours, runs)?;
    let python_version = Command::new("python3")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let syncs = if available("strace") {
        json!({
            "measured": true,
            "tool": "strace -f -y -e trace=fsync,fdatasync",
            "lab": count_syncs(&mut ours(), scratch, "lab")?,
            "python": count_syncs(&mut python(), scratch, "python")?,
        })
    } else {
        eprintln!(
            "\n*** fsync count SKIPPED: strace is not installed (apt-get install strace) ***\n"
        );
        json!({"measured": false, "reason": "strace is not installed"})
    };
    Ok(json!({
        "measured": true,
        "tool": "xtask: one loop that runs the two in turn, after one warm-up run each",
        "runs": runs,
        "python": python_version,
        "python_median_s": median(&python_s),
        "lab_median_s": median(&lab_s),
        "python_min_s": python_s.iter().copied().fold(f64::INFINITY, f64::min),
        "lab_min_s": lab_s.iter().copied().fold(f64::INFINITY, f64::min),
        "syncs": syncs,
    }))
}

/// Wall times in seconds of `runs` runs of each command, in turns, after one warm-up run each.
fn take_turns(
    first: &dyn Fn() -> Command,
    second: &dyn Fn() -> Command,
    runs: u32,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let timed = |make: &dyn Fn() -> Command| -> Result<f64> {
        let mut command = make();
        command.stdout(Stdio::null());
        let started = Instant::now();
        let status = command
            .status()
            .with_context(|| format!("running {:?}", command.get_program()))?;
        let elapsed = started.elapsed().as_secs_f64();
        if !status.success() {
            bail!("{:?} failed: {status}", command.get_program());
        }
        Ok(elapsed)
    };
    timed(first)?;
    timed(second)?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        a.push(timed(first)?);
        b.push(timed(second)?);
    }
    Ok((a, b))
}

fn median(values: &[f64]) -> f64 {
    lab::bench::median_f64(values.to_vec())
}

/// The fsync and fdatasync calls of one run of `command`, in total and by the kind of file synced.
fn count_syncs(command: &mut Command, scratch: &Path, name: &str) -> Result<Value> {
    let log = scratch.join(format!("strace-{name}.txt"));
    let mut traced = Command::new("strace");
    traced
        .args(["-f", "-y", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&log)
        .arg(command.get_program())
        .args(command.get_args())
        .stdout(Stdio::null());
    if let Some(folder) = command.get_current_dir() {
        traced.current_dir(folder);
    }
    let status = traced.status().context("running strace")?;
    if !status.success() {
        bail!("strace of the {name} run failed: {status}");
    }
    let text = std::fs::read_to_string(&log)?;
    let counts = classify_syncs(&text);
    Ok(json!({
        "total": counts.iter().filter_map(|(_, n)| n.as_u64()).sum::<u64>(),
        "by_file": counts.into_iter().collect::<serde_json::Map<String, Value>>(),
    }))
}

/// Counts strace's `fsync(` and `fdatasync(` calls (a call split by another thread's line shows
/// once as `fsync(...unfinished` and once as `<... fsync resumed>`; only the first is counted) by
/// what the descriptor named: a WAL, a rollback journal, a database or a folder.
fn classify_syncs(log: &str) -> Vec<(String, Value)> {
    let mut counts = std::collections::BTreeMap::<&str, u64>::new();
    for line in log.lines() {
        let Some(call) = ["fsync(", "fdatasync("]
            .into_iter()
            .find_map(|name| line.find(name).map(|at| &line[at + name.len()..]))
        else {
            continue;
        };
        let file = call
            .split_once('<')
            .and_then(|(_, rest)| rest.split_once('>'))
            .map_or("", |(path, _)| path);
        let kind = if file.ends_with("-wal") {
            "wal"
        } else if file.ends_with("-journal") {
            "rollback_journal"
        } else if file.ends_with(".sqlite") || file.ends_with(".db") || file.ends_with(".sqlite3") {
            "database"
        } else if Path::new(file).is_dir() || !file.contains('.') {
            "folder"
        } else {
            "other"
        };
        *counts.entry(kind).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(kind, n)| (kind.to_owned(), json!(n)))
        .collect()
}

/// `lab bench-postgres` on the PostgreSQL tests' server, or a note saying why there is none.
fn postgres_comparison(lab: &Path, scratch: &Path, quick: bool) -> Result<Value> {
    let Some(server) = crate::postgres::for_the_bench() else {
        return Ok(
            json!({"measured": false, "reason": "no PostgreSQL server (see the line above)"}),
        );
    };
    let output = scratch.join("postgres.json");
    let calls = if quick { "1000" } else { "10000" };
    eprintln!("bench: PostgreSQL, {calls} calls per measurement at 1, 8 and 64 clients...");
    let status = Command::new(lab)
        .args([
            "bench-postgres",
            "--database-url",
            &server.url,
            "--calls",
            calls,
        ])
        .arg("--json")
        .arg(&output)
        .status()
        .context("running lab bench-postgres")?;
    if !status.success() {
        bail!("lab bench-postgres failed: {status}");
    }
    let mut report: Value = serde_json::from_str(&std::fs::read_to_string(&output)?)?;
    report["measured"] = json!(true);
    report["server"] = json!(server.described);
    Ok(report)
}

/// Prints each target of the performance issue beside the measured ratio.
fn print_targets(report: &Value) {
    let lab = &report["lab"];
    println!("\ntargets (measured in this run)");
    print_burst_targets(lab);
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
            "  seven scenarios: {:.3}x the reference Python lab's wall time (target <= 0.1)",
            ratio(&python["lab_median_s"], &python["python_median_s"])
        );
    }
    let syncs = &python["syncs"];
    if syncs["measured"] == true {
        println!(
            "  seven scenarios: {} fsync-family calls (target <= 30); the reference Python lab {}",
            syncs["lab"]["total"], syncs["python"]["total"]
        );
    }
    print_postgres_targets(report);
    crate::bench_http::print_targets(&report["http"]);
    crate::bench_audit::print_targets(&report["audit"]);
}

/// `a / b`, NaN where either is not a number.
fn ratio(a: &Value, b: &Value) -> f64 {
    a.as_f64().unwrap_or(f64::NAN) / b.as_f64().unwrap_or(f64::NAN)
}

/// The bursts' targets: group commit against the busy handler, and against the fdatasync rate.
fn print_burst_targets(lab: &Value) {
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
}

/// The PostgreSQL targets, one line per number of clients.
fn print_postgres_targets(report: &Value) {
    if let Some(rows) = report["postgres"]["rows"].as_array() {
        for row in rows {
            println!(
                "  PostgreSQL, {} clients: keyed/plain {:.2} (target >= 0.7 at 8 and 64), replay/select {:.2}",
                row["clients"],
                row["keyed_over_plain"].as_f64().unwrap_or(f64::NAN),
                row["replay_over_select"].as_f64().unwrap_or(f64::NAN),
            );
            if row["race"].is_object() {
                println!(
                    "    same-key race: median {:.2} ms, {:.2}x a round of plain inserts",
                    row["race"]["median_ms"].as_f64().unwrap_or(f64::NAN),
                    row["race"]["median_over_plain_round"]
                        .as_f64()
                        .unwrap_or(f64::NAN),
                );
            }
        }
    }
}

fn burst<'v>(lab: &'v Value, callers: u64, one_key: bool, coordination: &str) -> Option<&'v Value> {
    lab["bursts"]["runs"].as_array()?.iter().find(|run| {
        run["callers"] == callers
            && run["one_key"] == one_key
            && run["coordination"] == coordination
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_reads_each_function_s_inclusive_count() {
        let annotated = "\
--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
11,324,670 (100.0%)  PROGRAM TOTALS
11,312,914 (99.90%)  ???:<lab::sqlite::SqliteStore as lab::tool::TicketTool>::create [/tmp/lab]
11,181,214 (98.73%)  ???:lab::sqlite::writer::transaction [/tmp/lab]
 5,006,149 (44.21%)  ???:lab::sqlite::insert_new [/tmp/lab]
 3,699,692 (32.67%)  ???:lab::sqlite::writer::run [/tmp/lab]
 2,415,073 (21.33%)  ???:lab::sqlite::lookup [/tmp/lab]
 2,000,000 (17.00%)  ???:lab::sqlite::lookup_other [/tmp/lab]
";
        let counts = inclusive_counts(annotated).unwrap();
        assert_eq!(counts["create"], 11_312_914);
        assert_eq!(counts["lookup"], 2_415_073);
        assert_eq!(counts["begin_and_commit"], 3_699_692);
        assert!(inclusive_counts("no such lines").is_err());
    }

    #[test]
    fn syncs_are_counted_once_each_by_the_kind_of_file() {
        let log = "\
12 fsync(5</tmp/tool-retries-ab/tickets.sqlite-wal> <unfinished ...>
13 fdatasync(6</tmp/x/t.sqlite-journal>) = 0
12 <... fsync resumed>)              = 0
14 fsync(7</tmp/tool-retries-ab/tickets.sqlite>) = 0
14 fsync(8</tmp/tool-retries-ab>) = 0
14 fsync(9</tmp/tool-retries-ab/tickets.sqlite-wal>) = 0
15 +++ exited with 0 +++
";
        let counts: serde_json::Map<String, Value> = classify_syncs(log).into_iter().collect();
        assert_eq!(
            Value::Object(counts),
            json!({"wal": 2, "rollback_journal": 1, "database": 1, "folder": 1})
        );
    }
}

#[cfg(test)]
mod sources_tests {
    use super::*;

    /// A root holding every measured source: a file for a `.rs` path, a folder with one file
    /// otherwise.
    fn measured_tree() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for source in MEASURED {
            let path = root.path().join(source);
            if source.ends_with(".rs") {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, source).unwrap();
            } else {
                std::fs::create_dir_all(&path).unwrap();
                std::fs::write(path.join("mod.rs"), source).unwrap();
            }
        }
        root
    }

    #[test]
    fn bench_json_is_stale_once_a_measured_source_changes_and_current_while_none_does() {
        let root = measured_tree();
        let digest = sources_digest(root.path()).unwrap();
        let bench = |digest: &str| {
            let text = json!({"sources": {"digest": digest}}).to_string();
            std::fs::write(root.path().join("bench.json"), text).unwrap();
        };
        bench(&digest);
        assert_eq!(stale(root.path()).unwrap(), None);
        std::fs::write(root.path().join("lab/src/service/mod.rs"), "changed").unwrap();
        let problem = stale(root.path())
            .unwrap()
            .expect("a changed store is stale");
        assert!(
            problem.contains("cargo xtask bench") && problem.contains(&digest),
            "{problem}"
        );
        std::fs::write(root.path().join("bench.json"), "{}").unwrap();
        assert!(
            stale(root.path())
                .unwrap()
                .unwrap()
                .contains("no sources.digest")
        );
        std::fs::remove_file(root.path().join("lab/src/key.rs")).unwrap();
        let err = sources_digest(root.path()).unwrap_err().to_string();
        assert!(err.contains("key.rs"), "{err}");
    }
}
