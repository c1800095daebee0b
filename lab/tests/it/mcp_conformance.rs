//! The Model Context Protocol's own conformance suite (`@modelcontextprotocol/conformance`,
//! pinned with the Node 22 it needs in `lab/tests/mcp-conformance/`) against `lab mcp` over
//! Streamable HTTP. Every scenario the suite has must pass, except those `baseline.yml` lists,
//! each with its reason; a listed scenario that passes, or one the suite does not have, fails the
//! test, so the baseline cannot rot. The suite's own verdict on the baseline (its exit status)
//! must agree with the test's, so a change in its output format cannot pass unnoticed.
//!
//! Without `npm ci` in that folder the test is a loud skip, and a failure under
//! `LAB_REQUIRE_MCP_CONFORMANCE=1` (as `.ci/run` sets it).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use lab::serde_json::{self, Value};

use crate::repository_root;

const REQUIRE_VARIABLE: &str = "LAB_REQUIRE_MCP_CONFORMANCE";
/// The token of a caller the shared `lab mcp` fixture knows (`check_mcp::HttpMcp`);
/// `bearer.mjs` sends it, which the suite cannot.
const TOKEN: &str = "alice-token";
/// The bound on one run of the suite's command line. The whole suite takes a few seconds; this
/// only keeps a scenario that waits for ever (on a stream that never ends) from hanging the test.
const RUN_BOUND: Duration = Duration::from_secs(240);
/// The bound on the suite's quick commands (`--version`, `list`).
const QUICK_BOUND: Duration = Duration::from_secs(60);

/// A child process, killed and reaped when dropped, on every path out of the test.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `command` with its output in files (so a chatty child never blocks on a full pipe) and
/// waits at most `bound`; a child still running then is killed and the test fails naming `what`.
fn run_bounded(mut command: Command, bound: Duration, what: &str) -> (ExitStatus, String) {
    let folder = tempfile::tempdir().unwrap();
    let output = folder.path().join("output");
    let file = std::fs::File::create(&output).unwrap();
    let mut child = Reaped(
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{what} did not start: {e}")),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > bound {
            let _ = child.0.kill();
            let text = std::fs::read_to_string(&output).unwrap_or_default();
            panic!("{what} did not end within {bound:?}; its output:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, std::fs::read_to_string(&output).unwrap_or_default())
}

/// The suite's folder once `npm ci` has run in it: its Node 22 and its command line.
struct Suite {
    folder: PathBuf,
    node: PathBuf,
    cli: PathBuf,
}

/// The installed suite; `None` after a loud skip, a failure when `LAB_REQUIRE_MCP_CONFORMANCE=1`.
fn installed(test: &str) -> Option<Suite> {
    let folder = repository_root().join("lab/tests/mcp-conformance");
    let node = folder.join("node_modules/.bin/node");
    let cli = folder.join("node_modules/.bin/conformance");
    if node.exists() && cli.exists() {
        return Some(Suite { folder, node, cli });
    }
    if std::env::var(REQUIRE_VARIABLE).as_deref() == Ok("1") {
        panic!(
            "{REQUIRE_VARIABLE}=1, but {} or {} is missing: run npm ci --ignore-scripts in \
             lab/tests/mcp-conformance (.ci/run does; its Node 22 is for linux-x64 only)",
            node.display(),
            cli.display()
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: {test}: no npm ci in lab/tests/mcp-conformance (the MCP conformance \
         suite and its Node 22, linux-x64); {REQUIRE_VARIABLE}=1 makes this a failure ***\n"
    );
    None
}

impl Suite {
    /// `node CLI args...` in the suite's folder.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.node);
        command.current_dir(&self.folder).arg(&self.cli).args(args);
        command
    }

    /// Fails unless `node_modules` holds what `package.json` pins: the baseline is written for
    /// one version of the suite, and a folder installed before a pin moved would test another.
    fn holds_its_pins(&self) {
        let (status, version) = run_bounded(
            {
                let mut node = Command::new(&self.node);
                node.arg("--version");
                node
            },
            QUICK_BOUND,
            "node --version",
        );
        assert!(
            status.success() && version.trim().starts_with("v22."),
            "{} is not Node 22 ({status}: {version}): run npm ci in lab/tests/mcp-conformance",
            self.node.display()
        );
        let manifest: Value = serde_json::from_str(
            &std::fs::read_to_string(self.folder.join("package.json")).unwrap(),
        )
        .unwrap();
        let pinned = manifest["dependencies"]["@modelcontextprotocol/conformance"]
            .as_str()
            .expect("package.json pins @modelcontextprotocol/conformance");
        let (status, version) = run_bounded(
            self.command(&["--version"]),
            QUICK_BOUND,
            "conformance --version",
        );
        assert!(
            status.success() && version.trim() == pinned,
            "node_modules holds conformance {version:?} ({status}), package.json pins {pinned}: \
             run npm ci in lab/tests/mcp-conformance"
        );
    }

    /// Every server scenario the suite has, from `conformance list --server`.
    fn scenarios(&self) -> BTreeSet<String> {
        let (status, listed) = run_bounded(
            self.command(&["list", "--server"]),
            QUICK_BOUND,
            "conformance list --server",
        );
        assert!(
            status.success(),
            "conformance list --server: {status}\n{listed}"
        );
        // Lines read `  - NAME [SPEC VERSIONS]`, under a heading.
        let scenarios: BTreeSet<String> = listed
            .lines()
            .filter_map(|line| line.trim_start().strip_prefix("- "))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
            .collect();
        assert!(
            scenarios.contains("server-initialize"),
            "no scenarios read from conformance list --server:\n{listed}"
        );
        scenarios
    }

    /// Runs every scenario (`--suite all`) against `url` with the baseline, each scenario's
    /// checks written under `out`; the suite's exit status and output.
    fn run(&self, url: &str, out: &Path) -> (ExitStatus, String) {
        let mut command = Command::new(&self.node);
        command
            .current_dir(&self.folder)
            .env("LAB_MCP_BEARER_TOKEN", TOKEN)
            .env("LAB_MCP_URL", url)
            .args(["--import", "./bearer.mjs"])
            .arg(&self.cli)
            .args(["server", "--url", url, "--suite", "all"])
            .args(["--expected-failures", "baseline.yml", "--output-dir"])
            .arg(out);
        run_bounded(command, RUN_BOUND, "the conformance suite")
    }
}

/// `baseline.yml`: each listed scenario and its reason. Read strictly: the suite's format allows
/// more, but this file keeps to a `server:` list of `- NAME # REASON` lines, so that every entry
/// has its reason where the suite's own reader ignores it.
fn baseline(file: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut entries = BTreeMap::new();
    let mut in_server = false;
    for (number, line) in text.lines().enumerate() {
        let at = || format!("{}:{}: {line:?}", file.display(), number + 1);
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if trimmed == "server:" && !in_server {
            in_server = true;
            continue;
        }
        let entry = trimmed
            .strip_prefix("- ")
            .filter(|_| in_server)
            .unwrap_or_else(|| {
                panic!(
                    "{}: expected `server:` once, then `  - SCENARIO # REASON` lines",
                    at()
                )
            });
        let (name, reason) = entry
            .split_once(" #")
            .map(|(name, reason)| (name.trim(), reason.trim()))
            .filter(|(name, reason)| !name.is_empty() && !reason.is_empty())
            .unwrap_or_else(|| panic!("{}: every entry needs its reason after `#`", at()));
        let earlier = entries.insert(name.to_owned(), reason.to_owned());
        assert!(earlier.is_none(), "{}: {name} is listed twice", at());
    }
    entries
}

/// Each scenario's checks, from the folders the suite writes under `out`:
/// `server-SCENARIO-TIME/checks.json`, TIME as `2026-12-06T18-45-38-516Z` (24 characters).
fn results(out: &Path) -> BTreeMap<String, Vec<Value>> {
    const TIME: usize = "2026-12-06T18-45-38-516Z".len();
    let mut results = BTreeMap::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let folder = entry.unwrap().path();
        let name = folder.file_name().unwrap().to_str().unwrap().to_owned();
        let scenario = name
            .strip_prefix("server-")
            .and_then(|rest| {
                rest.len()
                    .checked_sub(TIME + 1)
                    .map(|end| rest.split_at(end))
            })
            .filter(|(_, time)| time.starts_with('-') && time.ends_with('Z'))
            .map(|(scenario, _)| scenario.to_owned())
            .unwrap_or_else(|| panic!("{}: not a scenario's folder", folder.display()));
        let checks: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(folder.join("checks.json")).unwrap())
                .unwrap_or_else(|e| panic!("{}/checks.json: {e}", folder.display()));
        let earlier = results.insert(scenario, checks);
        assert!(
            earlier.is_none(),
            "{name}: a second folder for one scenario"
        );
    }
    results
}

/// The checks that fail a scenario, one line each. The suite's own baseline check counts a
/// WARNING as a failure (a scenario that could only warn checked nothing), and so does this.
fn faults(checks: &[Value]) -> Vec<String> {
    checks
        .iter()
        .filter(|check| matches!(check["status"].as_str(), Some("FAILURE" | "WARNING")))
        .map(|check| {
            let why = check["errorMessage"]
                .as_str()
                .or_else(|| check["details"]["message"].as_str())
                .unwrap_or("(no message)");
            let field = |name: &str| check[name].as_str().unwrap_or("?").to_owned();
            format!("{} {}: {why}", field("status"), field("id"))
        })
        .collect()
}

#[test]
fn lab_mcp_over_streamable_http_passes_the_official_conformance_suite_but_its_baseline() {
    let test =
        "lab_mcp_over_streamable_http_passes_the_official_conformance_suite_but_its_baseline";
    let Some(suite) = installed(test) else {
        return;
    };
    suite.holds_its_pins();
    let scenarios = suite.scenarios();
    let baseline_file = suite.folder.join("baseline.yml");
    let baseline = baseline(&baseline_file);
    let mut problems = Vec::new();
    for name in baseline.keys().filter(|name| !scenarios.contains(*name)) {
        problems.push(format!(
            "baseline.yml lists {name}, which the suite does not have: remove it"
        ));
    }
    // Without the handshake, no other scenario's result would mean anything.
    if baseline.contains_key("server-initialize") {
        problems.push("baseline.yml lists server-initialize: the handshake must pass".to_owned());
    }

    let server = crate::check_mcp::HttpMcp::start();
    let out = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let (status, output) = suite.run(&server.url, out.path());
    let took = started.elapsed();
    let results = results(out.path());

    // What the suite's own baseline check judges: unexpected failures, stale entries, and (which
    // it cannot see) a scenario it never finished.
    let mut run_problems = Vec::new();
    let mut summary = Vec::new();
    for name in &scenarios {
        let Some(checks) = results.get(name) else {
            run_problems.push(format!(
                "{name}: the suite wrote no checks (it stopped on it)"
            ));
            continue;
        };
        let faults = faults(checks);
        match (faults.is_empty(), baseline.get(name)) {
            (true, None) => summary.push(format!("PASS      {name}")),
            (false, Some(reason)) => summary.push(format!("BASELINE  {name}: {reason}")),
            (false, None) => run_problems.push(format!(
                "{name} failed and is not in the baseline:\n    {}",
                faults.join("\n    ")
            )),
            (true, Some(_)) => run_problems.push(format!(
                "{name} passes now: remove it from lab/tests/mcp-conformance/baseline.yml"
            )),
        }
    }
    for name in results.keys().filter(|name| !scenarios.contains(*name)) {
        run_problems.push(format!("{name}: run, but not in conformance list --server"));
    }
    eprintln!(
        "the conformance suite against {} took {took:.1?}, {status}:\n  {}",
        server.url,
        summary.join("\n  ")
    );
    assert_eq!(
        status.success(),
        run_problems.is_empty(),
        "the suite's own baseline check ({status}) disagrees with this test's ({run_problems:#?}); \
         its output:\n{output}"
    );
    problems.extend(run_problems);
    // The suite prints every check of every scenario; its summary and baseline verdict suffice.
    let summary_onwards = output
        .find("=== SUMMARY ===")
        .map_or(&output[..], |at| &output[at..]);
    assert!(
        problems.is_empty(),
        "the MCP conformance suite against lab mcp ({}):\n{}\n\nthe suite's output:\n{summary_onwards}",
        baseline_file.display(),
        problems.join("\n")
    );
}
