//! `lab check --target FILE` on an MCP server (issue #25): `lab mcp` passes every point over
//! stdio and over Streamable HTTP with its shipped target files; a server on the official Python
//! SDK with a planted bug fails the point that should catch it (and passes them all without the
//! bug); the official memory server from npm keeps its pinned verdicts; bad target files are
//! refused naming the field, with nothing started or sent.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use lab::serde_json::{self, Value, json};

use crate::repository_root;

const LAB: &str = env!("CARGO_BIN_EXE_lab");

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `lab check --target FILE --json [extra]` from the repository root and returns the
/// report, holding the exit status to the report's `passed`.
pub(crate) fn check_json(file: &Path, extra: &[&str]) -> Value {
    let output = Command::new(LAB)
        .current_dir(repository_root())
        .args(["check", "--target"])
        .arg(file)
        .arg("--json")
        .args(extra)
        .output()
        .expect("the lab binary runs");
    let stdout = text(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|err| {
        panic!(
            "not a JSON report ({err}); exit {:?}\nstdout: {stdout}\nstderr: {}",
            output.status.code(),
            text(&output.stderr)
        )
    });
    let expected = if report["passed"] == true { 0 } else { 1 };
    assert_eq!(
        output.status.code(),
        Some(expected),
        "{}",
        text(&output.stderr)
    );
    // Issue 46: every run's passed sub-checks say nothing a reader takes for a failure.
    crate::reports::assert_passed_observed_says_no_failure(&report);
    report
}

fn check_text(file: &Path, extra: &[&str]) -> Output {
    Command::new(LAB)
        .current_dir(repository_root())
        .args(["check", "--target"])
        .arg(file)
        .args(extra)
        .output()
        .expect("the lab binary runs")
}

pub(crate) fn verdicts(report: &Value) -> Vec<(String, String)> {
    report["points"]
        .as_array()
        .expect("the report lists its points")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_owned(),
                p["verdict"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

pub(crate) fn verdict<'r>(report: &'r Value, point: &str) -> &'r str {
    report["points"]
        .as_array()
        .and_then(|points| points.iter().find(|p| p["name"] == point))
        .and_then(|p| p["verdict"].as_str())
        .unwrap_or_else(|| panic!("no point {point:?} in the report"))
}

/// The points the MCP check runs, in order.
const POINTS: [&str; 13] = [
    "key-required",
    "annotations",
    "retry-replays",
    "reply-dropped",
    "cancelled",
    "reconnect",
    "changed-payload",
    "new-key-same-payload",
    "concurrent-fresh-key",
    "concurrent-distinct",
    "other-caller",
    "key-forms",
    "error-then-corrected",
];

fn assert_every_point_passes(report: &Value) {
    let names: Vec<String> = verdicts(report).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, POINTS, "the points, in order");
    // And they are the registry's MCP points, no more and no fewer, in its order (the shipped
    // files have no [upstream], so no hop point runs).
    let registry: Vec<&str> = lab::contract::points::on(lab::contract::points::Front::Mcp)
        .filter(|point| !point.hop)
        .map(|point| point.id)
        .collect();
    assert_eq!(names, registry, "the registry's MCP points");
    for (name, verdict) in verdicts(report) {
        assert_eq!(verdict, "PASS", "{name}: {report:#}");
    }
    assert_eq!(report["passed"], true);
}

/// A shipped target file with its program replaced (the file says `lab`, which may not be on
/// PATH here), written to a folder the caller keeps.
pub(crate) fn fitted(shipped: &str, replace: &[(&str, &str)], folder: &Path) -> PathBuf {
    let mut file = std::fs::read_to_string(repository_root().join(shipped)).unwrap();
    for (from, to) in replace {
        assert!(file.contains(from), "{shipped} has no {from:?}");
        file = file.replace(from, to);
    }
    let path = folder.join(Path::new(shipped).file_name().unwrap());
    std::fs::write(&path, file).unwrap();
    path
}

#[test]
fn lab_mcp_over_stdio_passes_every_point_of_its_shipped_target_file() {
    let folder = tempfile::tempdir().unwrap();
    let file = fitted(
        "lab/targets/lab-mcp-stdio.toml",
        &[("\"lab\", \"mcp\"", &format!("{LAB:?}, \"mcp\""))],
        folder.path(),
    );
    let report = check_json(&file, &[]);
    assert_every_point_passes(&report);
    // Each MCP fault was sent, not assumed: the cancellation and the reconnect are in the history.
    let history = report["history"].as_array().unwrap();
    assert!(history.iter().any(|e| {
        e["answer"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("notifications/cancelled for request"))
    }));
    assert!(history.iter().any(|e| {
        e["step"]
            .as_str()
            .is_some_and(|s| s.starts_with("the retry on a new process"))
    }));
    let output = check_text(&file, &[]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("every MUST and LAB sub-check passed"),
        "{stdout}"
    );
    assert!(
        stdout.contains("SHOULD (MCP tools: annotations are hints"),
        "{stdout}"
    );
}

/// `lab mcp --transport http` with two callers, and the URL it printed.
pub(crate) struct HttpMcp {
    child: Child,
    pub(crate) url: String,
    _folder: tempfile::TempDir,
}

impl HttpMcp {
    pub(crate) fn start() -> HttpMcp {
        let folder = tempfile::tempdir().unwrap();
        let mut child = Command::new(LAB)
            .args(["mcp", "--transport", "http", "--database"])
            .arg(folder.path().join("lab.sqlite"))
            .args(["--caller", "alice=alice-token", "--caller", "bob=bob-token"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("lab mcp starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        HttpMcp {
            child,
            url: line.trim().to_owned(),
            _folder: folder,
        }
    }
}

impl Drop for HttpMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn lab_mcp_over_streamable_http_passes_every_point_of_its_shipped_target_file() {
    let server = HttpMcp::start();
    assert!(
        server.url.starts_with("http://127.0.0.1:"),
        "{}",
        server.url
    );
    let file = repository_root().join("lab/targets/lab-mcp-http.toml");
    let report = check_json(&file, &["--url", &server.url]);
    assert_every_point_passes(&report);
    assert!(
        report["base_url"]
            .as_str()
            .is_some_and(|u| u.contains(&server.url)),
        "{}",
        report["base_url"]
    );
    assert!(report["history"].as_array().unwrap().iter().any(|e| {
        e["step"]
            .as_str()
            .is_some_and(|s| s == "the retry on a new session")
    }));
}

#[test]
fn a_file_that_calls_a_keyed_tool_without_its_key_stops_at_calibration_naming_key_argument() {
    // The lab's own create_ticket, described as if it took no key: the server refuses every
    // call without one. Before issue #32 the check graded that as the tool's findings (no key,
    // a failed replay, ...); the file is at fault, and calibration says so before any point.
    // (A tool that really takes no key is graded by the server-memory test below.)
    let folder = tempfile::tempdir().unwrap();
    let file = fitted(
        "lab/targets/lab-mcp-stdio.toml",
        &[
            ("\"lab\", \"mcp\"", &format!("{LAB:?}, \"mcp\"")),
            ("key_argument = \"operation_key\"", "no_key = true"),
        ],
        folder.path(),
    );
    let output = check_text(&file, &["--json"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(output.stdout.is_empty(), "{}", text(&output.stdout));
    assert!(stderr.contains("does not describe the service"), "{stderr}");
    assert!(stderr.contains("mcp.tool.key_argument"), "{stderr}");
    assert!(stderr.contains("\"operation_key\""), "{stderr}");
}

/// The clients' venv python (the official MCP SDK), or `None` after a loud skip; a failure when
/// CI requires it (`LAB_REQUIRE_CLIENTS=1`).
pub(crate) fn python(test: &str) -> Option<PathBuf> {
    let named = std::env::var_os("LAB_MCP_PYTHON")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("LAB_CLIENTS_VENV")
                .filter(|p| !p.is_empty())
                .map(|venv| PathBuf::from(venv).join("bin/python"))
        });
    let required = ["LAB_REQUIRE_MCP_CLIENT", "LAB_REQUIRE_CLIENTS"]
        .iter()
        .any(|v| std::env::var(v).as_deref() == Ok("1"));
    match named {
        Some(path) => Some(path),
        None if required => panic!(
            "LAB_REQUIRE_CLIENTS=1, but neither LAB_MCP_PYTHON nor LAB_CLIENTS_VENV names a python \
             with the `mcp` package (lab/tests/clients/requirements.txt)"
        ),
        None => {
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED: {test}: no MCP Python SDK. Set LAB_CLIENTS_VENV to a venv made from \
                 lab/tests/clients/requirements.txt; LAB_REQUIRE_CLIENTS=1 makes this a failure ***\n"
            );
            None
        }
    }
}

fn planted(python: &Path, bug: &str, folder: &Path) -> Value {
    let python = python.to_str().unwrap();
    let server = repository_root().join("lab/tests/mcp-servers/planted/server.py");
    let server = server.to_str().unwrap();
    let file = fitted(
        "lab/tests/mcp-servers/planted/target.toml",
        &[
            ("\"python3\"", &format!("{python:?}")),
            // The copy lives in another folder than the server, which the file names relative
            // to its own folder.
            ("\"server.py\"", &format!("{server:?}")),
            ("\"--bug\", \"none\"", &format!("\"--bug\", \"{bug}\"")),
        ],
        folder,
    );
    let report = check_json(&file, &[]);
    let _ = writeln!(
        std::io::stderr(),
        "planted bug {bug}: {:?}",
        verdicts(&report)
    );
    report
}

/// Issue 46: an identity read at a value each result has of its own (a request id, new on a
/// replay too) is refused before any point, from `structuredContent` or from the text, naming
/// the field and the pointer that held still; while a server whose replay names another ticket,
/// the same one each time, is graded (`replays-other-id` above fails the retry-replays point).
#[test]
fn an_mcp_identity_at_a_request_id_is_refused_before_any_point() {
    let Some(python) =
        python("check_mcp::an_mcp_identity_at_a_request_id_is_refused_before_any_point")
    else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let server = repository_root().join("lab/tests/mcp-servers/planted/server.py");
    for (identity, advice) in [
        ("structured_pointer = \"/request_id\"", "\"/ticket_id\""),
        ("text_regex = '\"request_id\": \"(req-[0-9a-f]+)\"'", ""),
    ] {
        let file = fitted(
            "lab/tests/mcp-servers/planted/target.toml",
            &[
                ("\"python3\"", &format!("{:?}", python.to_str().unwrap())),
                ("\"server.py\"", &format!("{:?}", server.to_str().unwrap())),
                (
                    "\"--bug\", \"none\"",
                    "\"--bug\", \"none\", \"--request-ids\"",
                ),
                ("structured_pointer = \"/ticket_id\"", identity),
            ],
            folder.path(),
        );
        let output = Command::new(LAB)
            .args(["check", "--target"])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{identity}: {stderr}");
        let field = identity.split(' ').next().unwrap();
        assert!(
            stderr.contains(&format!("mcp.identity.{field}"))
                && stderr.contains("a value each result has of its own")
                && stderr.contains(advice),
            "{identity}: {stderr}"
        );
    }
}

/// Compares `text` with the book's `src/mcp/NAME`, which the MCP chapter includes; the test
/// fails when a fresh run says otherwise. `LAB_BLESS=1` rewrites it.
pub(crate) fn compare_with_the_book(text: &str, name: &str) {
    compare_with_the_book_at("src/mcp", text, name);
}

/// [`compare_with_the_book`] for a file in another folder of the book's sources.
pub(crate) fn compare_with_the_book_at(folder: &str, text: &str, name: &str) {
    let path = repository_root().join(folder).join(name);
    if std::env::var("LAB_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, text).unwrap();
    }
    let shown = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        shown,
        text,
        "{} differs from the run; rerun with LAB_BLESS=1 and review the diff",
        path.display()
    );
}

/// The points a report failed, comma-separated, or a line saying none did.
pub(crate) fn failed_points(report: &Value) -> String {
    let failed: Vec<String> = verdicts(report)
        .into_iter()
        .filter(|(_, verdict)| verdict == "FAIL")
        .map(|(name, _)| name)
        .collect();
    if failed.is_empty() {
        "none: every point passes".to_owned()
    } else {
        failed.join(", ")
    }
}

pub(crate) fn failed_observations(report: &Value, point: &str) -> String {
    report["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == point)
        .unwrap()["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["passed"] == false)
        .map(|c| format!("{}: {}", c["what"], c["observed"]))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn each_planted_bug_fails_the_point_that_should_catch_it_and_the_server_without_one_passes() {
    let Some(python) = python(
        "check_mcp::each_planted_bug_fails_the_point_that_should_catch_it_and_the_server_without_one_passes",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let mut table = format!("{:25}  points that fail\n", "planted bug");

    let report = planted(&python, "ignores-key", folder.path());
    table.push_str(&format!(
        "{:25}  {}\n",
        "ignores-key",
        failed_points(&report)
    ));
    for point in [
        "retry-replays",
        "reply-dropped",
        "reconnect",
        "concurrent-fresh-key",
        "changed-payload",
    ] {
        assert_eq!(verdict(&report, point), "FAIL", "ignores-key: {point}");
    }
    assert!(failed_observations(&report, "retry-replays").contains("another effect"));
    // Two retries, an immediate one and one after a pause, each a new effect.
    assert!(failed_observations(&report, "retry-replays").contains("2 new effects"));
    // A new key is a new ticket either way: that point cannot tell this bug.
    assert_eq!(verdict(&report, "new-key-same-payload"), "PASS");

    let report = planted(&python, "replays-other-id", folder.path());
    table.push_str(&format!(
        "{:25}  {}\n",
        "replays-other-id",
        failed_points(&report)
    ));
    assert_eq!(verdict(&report, "retry-replays"), "FAIL");
    let replay = failed_observations(&report, "retry-replays");
    assert!(replay.contains("another effect than the first"), "{replay}");
    // It creates nothing on a replay: the count holds, only the identity is wrong.
    assert!(!replay.contains("2 new effects"), "{replay}");

    let report = planted(&python, "accepts-changed-payload", folder.path());
    table.push_str(&format!(
        "{:25}  {}\n",
        "accepts-changed-payload",
        failed_points(&report)
    ));
    assert_eq!(verdict(&report, "changed-payload"), "FAIL");
    assert!(
        failed_observations(&report, "changed-payload")
            .contains("the changed payload was answered as a replay of the first tool call")
    );
    for (point, verdict) in verdicts(&report) {
        if point != "changed-payload" {
            assert_eq!(verdict, "PASS", "accepts-changed-payload: {point}");
        }
    }
    let report = planted(&python, "none", folder.path());
    assert_every_point_passes(&report);
    table.push_str(&format!(
        "{:25}  {}\n",
        "none (the control)",
        failed_points(&report)
    ));
    compare_with_the_book(&table, "check-planted.txt");
}

/// The planted server over Streamable HTTP on a free port, and its URL.
struct PlantedHttp {
    child: Child,
    url: String,
    _folder: tempfile::TempDir,
}

impl PlantedHttp {
    fn start(python: &Path, bug: &str) -> PlantedHttp {
        let folder = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(python)
            .arg(repository_root().join("lab/tests/mcp-servers/planted/server.py"))
            .arg("--state")
            .arg(folder.path().join("state.json"))
            .args([
                "--caller",
                "alice",
                "--bug",
                bug,
                "--http",
                &port.to_string(),
            ])
            .stderr(Stdio::null())
            .spawn()
            .expect("the planted server starts");
        // Up when it accepts a connection; bounded.
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "the planted server did not listen on {port}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        PlantedHttp {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            _folder: folder,
        }
    }
}

impl Drop for PlantedHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn over_streamable_http_with_event_streams_the_sdk_server_passes_and_its_planted_bug_fails() {
    let test = "check_mcp::over_streamable_http_with_event_streams";
    let Some(python) = python(test) else {
        return;
    };
    let file = repository_root().join("lab/tests/mcp-servers/planted/target-http.toml");
    let server = PlantedHttp::start(&python, "none");
    let report = check_json(&file, &["--url", &server.url]);
    drop(server);
    for (name, verdict) in verdicts(&report) {
        // One caller: the server acts for the one it was started for.
        let expected = if name == "other-caller" {
            "NOT_COVERED"
        } else {
            "PASS"
        };
        assert_eq!(verdict, expected, "{name}: {report:#}");
    }
    let server = PlantedHttp::start(&python, "ignores-key");
    let report = check_json(&file, &["--url", &server.url]);
    assert_eq!(verdict(&report, "retry-replays"), "FAIL");
    assert_eq!(verdict(&report, "reconnect"), "FAIL");
}

/// The memory server's folder, with its `node_modules` from `npm ci`; `None` after a loud skip,
/// a failure when `LAB_REQUIRE_MCP_SERVERS=1` (CI sets it).
fn memory_server(test: &str) -> Option<PathBuf> {
    npm_server(
        test,
        "server-memory",
        "node_modules/@modelcontextprotocol/server-memory/dist/index.js",
    )
}

/// The folder `lab/tests/mcp-servers/NAME`, when its server's `entry` (from `npm ci`) is there
/// and node runs; `None` after a loud skip, a failure when `LAB_REQUIRE_MCP_SERVERS=1`.
fn npm_server(test: &str, name: &str, entry: &str) -> Option<PathBuf> {
    let folder = repository_root().join("lab/tests/mcp-servers").join(name);
    let entry = folder.join(entry);
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if entry.exists() && node {
        return Some(folder);
    }
    if std::env::var("LAB_REQUIRE_MCP_SERVERS").as_deref() == Ok("1") {
        panic!(
            "LAB_REQUIRE_MCP_SERVERS=1, but {} is missing or node is not on PATH: run npm ci in \
             lab/tests/mcp-servers/{name} (.ci/run does)",
            entry.display()
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: {test}: no node, or no npm ci in lab/tests/mcp-servers/{name}; \
         LAB_REQUIRE_MCP_SERVERS=1 makes this a failure ***\n"
    );
    None
}

/// What a findings file keeps of a report: each point's verdict and each failed sub-check's
/// sentence and grade, never the observed values (they hold names and run tags).
pub(crate) fn findings(report: &Value, server: &str, package: &str) -> Value {
    let points: Vec<Value> = report["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|point| {
            let failed: Vec<Value> = point["checks"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter(|c| c["passed"] == false && c.get("not_covered").is_none())
                .map(|c| {
                    json!({
                        "what": c["what"],
                        "level": c["grade"]["level"],
                        "section": c["grade"]["section"],
                        "mcp_rule": c["grade"]["mcp_rule"],
                    })
                })
                .collect();
            json!({"name": point["name"], "verdict": point["verdict"], "failed": failed})
        })
        .collect();
    json!({
        "server": server,
        "package": package,
        "transport": "stdio",
        "passed": report["passed"],
        "points": points,
    })
}

#[test]
fn the_official_memory_server_keeps_its_pinned_verdicts() {
    let Some(folder) =
        memory_server("check_mcp::the_official_memory_server_keeps_its_pinned_verdicts")
    else {
        return;
    };
    let report = check_json(&folder.join("target.toml"), &[]);
    let _ = writeln!(
        std::io::stderr(),
        "server-memory: {} ms, {:?}",
        report["elapsed_ms"],
        verdicts(&report)
    );
    // Confirmed by hand (REPRODUCTION.md): no key, so the first finding; a retry with the same
    // arguments makes no second entity but names none either.
    assert_eq!(verdict(&report, "key-required"), "FAIL");
    assert_eq!(verdict(&report, "reply-dropped"), "FAIL");
    assert!(failed_observations(&report, "reply-dropped").contains("naming no effect"));
    // Two creates in flight together: both acknowledged, one kept (by_hand.py pipelined).
    assert_eq!(verdict(&report, "concurrent-distinct"), "FAIL");
    assert!(failed_observations(&report, "concurrent-distinct").contains("acknowledged lost"));
    let mut table = format!(
        "{:20}  {:7}  the first failed sub-check\n",
        "point", "verdict"
    );
    for point in report["points"].as_array().unwrap() {
        let first_failed = point["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["passed"] == false)
            .map_or(String::new(), |c| {
                c["what"].as_str().unwrap_or_default().to_owned()
            });
        let verdict = point["verdict"]
            .as_str()
            .unwrap()
            .replace("PASS_WITH_WARNINGS", "WARN");
        table.push_str(
            format!(
                "{:20}  {verdict:7}  {first_failed}",
                point["name"].as_str().unwrap()
            )
            .trim_end(),
        );
        table.push('\n');
    }
    compare_with_the_book(&table, "check-server-memory.txt");
    let found = findings(
        &report,
        "server-memory",
        "@modelcontextprotocol/server-memory 2026.8.31 (npm)",
    );
    compare_with_the_pinned_findings(&found, &folder.join("findings.json"));
}

/// Compares `found` with the findings file at `pinned_path`; `LAB_WRITE_FINDINGS=1` rewrites it
/// first.
/// The pinned findings at `pinned_path`, rewritten from `found` first under
/// `LAB_WRITE_FINDINGS=1`.
pub(crate) fn pinned_findings(found: &Value, pinned_path: &Path) -> Value {
    if std::env::var("LAB_WRITE_FINDINGS").as_deref() == Ok("1") {
        std::fs::write(
            pinned_path,
            serde_json::to_string_pretty(found).unwrap() + "\n",
        )
        .unwrap();
    }
    serde_json::from_str(
        &std::fs::read_to_string(pinned_path)
            .unwrap_or_else(|e| panic!("{}: {e}", pinned_path.display())),
    )
    .unwrap()
}

pub(crate) fn compare_with_the_pinned_findings(found: &Value, pinned_path: &Path) {
    let pinned = pinned_findings(found, pinned_path);
    assert_eq!(
        found,
        &pinned,
        "{}: this run's verdicts drifted from {}; after a deliberate change rerun with \
         LAB_WRITE_FINDINGS=1",
        found["server"],
        pinned_path.display()
    );
}

/// The Shrimp Task Manager (`mcp-shrimp-task-manager` from npm): its create tool refuses inside
/// plain results, never marked `isError`; the target file reads the refusal from the text
/// (`mcp.errors.text_code_pattern`) and the identity with a regex.
#[test]
fn the_shrimp_task_manager_keeps_its_pinned_verdicts() {
    let test = "check_mcp::the_shrimp_task_manager_keeps_its_pinned_verdicts";
    let Some(folder) = npm_server(
        test,
        "shrimp-task-manager",
        "node_modules/mcp-shrimp-task-manager/dist/index.js",
    ) else {
        return;
    };
    let report = check_json(&folder.join("target.toml"), &[]);
    let _ = writeln!(
        std::io::stderr(),
        "shrimp-task-manager: {} ms, {:?}",
        report["elapsed_ms"],
        verdicts(&report)
    );
    // Confirmed by hand (REPRODUCTION.md): no key (probe 1); a retry with the same arguments
    // makes a second task and names it (probe 3).
    assert_eq!(verdict(&report, "key-required"), "FAIL");
    assert_eq!(verdict(&report, "reply-dropped"), "FAIL");
    // Calls in flight together race on tasks.json, with one of two outcomes, each pinned: the
    // rewrites that overlap leave one task of six (probe 4), or, when rewrites of different
    // lengths overlap, a file that is no longer JSON, which every later read fails on (probe
    // 4b: the count, and the server's own reads of the next point).
    assert_eq!(verdict(&report, "concurrent-distinct"), "FAIL");
    let race = failed_observations(&report, "concurrent-distinct");
    let torn = race.contains("tasks.json is still not JSON");
    let pinned = if torn {
        assert_eq!(verdict(&report, "error-then-corrected"), "FAIL", "{race}");
        "findings-torn.json"
    } else {
        assert!(race.contains("acknowledged lost"), "{race}");
        // The refusal in a plain result (probe 2) is read as a refusal, which told the agent its
        // call succeeded (issue 46): the point fails on that alone, and the corrected call
        // succeeds.
        assert_eq!(verdict(&report, "error-then-corrected"), "FAIL");
        "findings.json"
    };
    let found = findings(
        &report,
        "shrimp-task-manager",
        "mcp-shrimp-task-manager 1.0.21 (npm)",
    );
    compare_with_the_pinned_findings(&found, &folder.join(pinned));

    // The same file without the text pattern no longer describes the server: its refusal is a
    // plain result, so the calibration stops the run (exit 2, the field named) before any point
    // reads that refusal as a success.
    let scratch = tempfile::tempdir().unwrap();
    let entry = folder.join("node_modules/mcp-shrimp-task-manager/dist/index.js");
    let without = fitted(
        "lab/tests/mcp-servers/shrimp-task-manager/target.toml",
        &[
            (
                "\"node_modules/mcp-shrimp-task-manager/dist/index.js\"",
                &format!("{:?}", entry.display().to_string()),
            ),
            (
                "\"count.js\"",
                &format!("{:?}", folder.join("count.js").display().to_string()),
            ),
            (
                "text_code_pattern = '^(Error occurred|tasks 參數格式錯誤|tasksRaw 參數格式錯誤)'\n",
                "",
            ),
        ],
        scratch.path(),
    );
    let output = check_text(&without, &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("does not describe the service")
            && stderr.contains("mcp.errors.validation"),
        "{stderr}"
    );
    assert!(
        !text(&output.stdout).contains("error-then-corrected"),
        "no point is graded: {}",
        text(&output.stdout)
    );
}

/// A TOML file in `folder` from `text`.
fn write(folder: &Path, name: &str, text: &str) -> PathBuf {
    let path = folder.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn bad_mcp_target_files_are_refused_naming_the_field_with_nothing_started_or_sent() {
    let folder = tempfile::tempdir().unwrap();
    let marker = folder.path().join("started");
    // Over stdio the command would leave a marker if it ran; over HTTP a listener counts
    // connections.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let stdio = std::fs::read_to_string(repository_root().join("lab/targets/lab-mcp-stdio.toml"))
        .unwrap()
        .replace(
            "command = [\"lab\", \"mcp\", \"--database\", \"{{dir}}/lab.sqlite\"]",
            &format!("command = [\"touch\", {:?}]", marker.display().to_string()),
        );
    let http = std::fs::read_to_string(repository_root().join("lab/targets/lab-mcp-http.toml"))
        .unwrap()
        .replace("127.0.0.1:8000", &format!("127.0.0.1:{port}"));
    let cases: Vec<(String, &str)> = vec![
        (stdio.replace("transport = \"stdio\"", "transport = \"sse\""), "mcp.transport"),
        (
            stdio.replace("key_argument = \"operation_key\"", "key_argument = \"\""),
            "mcp.tool.key_argument",
        ),
        (stdio.replace("{{priority}}\"", "{{urgency}}\""), "mcp.tool.arguments"),
        (
            stdio.replace("structured_pointer = \"/ticket_id\"", "structured_pointer = \"ticket_id\""),
            "mcp.identity.structured_pointer",
        ),
        (
            stdio.replace("args = [\"--stdio-caller\", \"bob\"]", "args = [\"--stdio-caller\", \"alice\"]"),
            "mcp.callers[1]",
        ),
        (stdio.replace("calls = 6", "calls = 500"), "mcp.load.calls"),
        (stdio.replace("validation = { title = 7 }", "validation = { colour = 7 }"), "mcp.errors.validation.colour"),
        (stdio.replace("timeout_ms = 10000", "timeout_ms = 10000\ntimeout = 3"), "timeout"),
        (
            http.replace("127.0.0.1:", "192.0.2.1:"),
            "mcp.url",
        ),
        (
            http.replace("headers = { Authorization = \"Bearer bob-token\" }", "headers = { Accept = \"text/plain\" }"),
            "mcp.callers[1].headers",
        ),
        (
            http.replace("tool = { name = \"list_tickets\", structured_pointer = \"/tickets\", caller = \"each\" }", "tool = { name = \"list_tickets\", structured_pointer = \"/tickets\", caller = \"carol\" }"),
            "mcp.count.tool.caller",
        ),
    ];
    for (i, (body, field)) in cases.iter().enumerate() {
        let file = write(folder.path(), &format!("bad-{i}.toml"), body);
        let output = check_text(&file, &[]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{field}: {stderr}");
        assert!(stderr.contains(field), "expected {field} in: {stderr}");
    }
    assert!(!marker.exists(), "a refused file started its command");
    assert!(
        listener.accept().is_err(),
        "a refused file connected to the server"
    );
}

#[test]
fn init_mcp_writes_a_starting_file_from_the_servers_tools_list_that_validates() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("mine.toml");
    let server = format!("{LAB} mcp --database {{{{dir}}}}/init.sqlite");
    let output = Command::new(LAB)
        .args([
            "check",
            "--target",
            file.to_str().unwrap(),
            "--init-mcp",
            &server,
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let written = std::fs::read_to_string(&file).unwrap();
    let target =
        lab::check::mcp::McpTarget::parse(&written, &file, &lab::check::Overrides::default())
            .unwrap_or_else(|err| panic!("{err}\n{written}"));
    assert_eq!(target.tool.name, "create_ticket");
    assert_eq!(target.tool.key_argument.as_deref(), Some("operation_key"));
    assert!(written.contains("#   list_tickets()"), "{written}");
    // A second time: refused, the file unchanged, exit 2.
    let again = Command::new(LAB)
        .args([
            "check",
            "--target",
            file.to_str().unwrap(),
            "--init-mcp",
            &server,
        ])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("never replaces"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), written);
}

#[test]
fn a_stdio_server_that_cannot_start_is_named_by_its_transport_not_as_http() {
    let folder = tempfile::tempdir().unwrap();
    let file = fitted(
        "lab/targets/lab-mcp-stdio.toml",
        &[(
            "[\"lab\", \"mcp\", \"--database\", \"{{dir}}/lab.sqlite\"]",
            "[\"sh\", \"-c\", \"exit 3\"]",
        )],
        folder.path(),
    );
    let output = check_text(&file, &[]);
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("error: MCP stdio: sh -c exit 3"),
        "{stderr}"
    );
    assert!(!stderr.contains("HTTP"), "{stderr}");
    // A program that is not there is the file's fault (exit 2), its field named once.
    let missing = fitted(
        "lab/targets/lab-mcp-stdio.toml",
        &[(
            "[\"lab\", \"mcp\", \"--database\", \"{{dir}}/lab.sqlite\"]",
            "[\"/nonexistent/mcp-server\"]",
        )],
        folder.path(),
    );
    let output = check_text(&missing, &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .contains("does not describe the service: mcp.command: \"/nonexistent/mcp-server\": "),
        "{stderr}"
    );
}

/// The planted server with `bug`, refusing in `form` (its `--refusals`), in a fresh folder, the
/// file's `code_pointer` line replaced by `errors`: the check's JSON report.
fn planted_refusing(python: &Path, bug: &str, form: &str, errors: &str) -> Value {
    let server = repository_root().join("lab/tests/mcp-servers/planted/server.py");
    let folder = tempfile::tempdir().unwrap();
    let file = fitted(
        "lab/tests/mcp-servers/planted/target.toml",
        &[
            ("\"python3\"", &format!("{python:?}")),
            ("\"server.py\"", &format!("{server:?}")),
            (
                "\"--bug\", \"none\"",
                &format!("\"--bug\", \"{bug}\", \"--refusals\", \"{form}\""),
            ),
            ("code_pointer = \"/code\"", errors),
        ],
        folder.path(),
    );
    check_json(&file, &[])
}

/// A server that refuses inside results not marked isError (its text JSON, or "Error [CODE]"
/// plain text) is described by mcp.errors.text_code_pointer or text_code_pattern: it calibrates
/// and is graded, but each refusal told the agent its call succeeded, so the points that ask
/// whether the agent was told of a refusal fail, whatever the code reader finds (issue 46), and
/// every other point passes as the structured one does; described by code_pointer alone, its
/// refusals are not seen.
#[test]
fn refusals_in_results_not_marked_as_errors_are_read_where_the_file_says() {
    let Some(python) =
        python("check_mcp::refusals_in_results_not_marked_as_errors_are_read_where_the_file_says")
    else {
        return;
    };
    let run = |form: &str, errors: &str| planted_refusing(&python, "none", form, errors);
    let told = |report: &Value| -> Vec<String> {
        verdicts(report)
            .into_iter()
            .filter(|(_, v)| v != "PASS")
            .map(|(name, v)| format!("{name} {v}"))
            .collect()
    };
    let json = run("json-text", "text_code_pointer = \"/error/code\"");
    let plain = run("plain-text", r#"text_code_pattern = '^Error \[(\w+)\]'"#);
    for report in [&json, &plain] {
        // (error-then-corrected passes: its refusal, a title that is not text, is the SDK's own
        // error result.)
        assert_eq!(
            told(report),
            ["changed-payload FAIL", "key-forms FAIL"],
            "{report:#}"
        );
    }
    let unseen = run("plain-text", "code_pointer = \"/code\"");
    assert_eq!(verdict(&unseen, "changed-payload"), "FAIL");
}

/// A server that refuses a key another caller used (a lock on the bare key) fails other-caller
/// however the refusal comes back: as an error result, and as a plain result the file's code
/// reader finds, which told the agent its call succeeded and so is no success of the server's
/// either. The second run failed to fail while the shared points read a refusal in a plain
/// result as the agent does.
#[test]
fn a_key_another_caller_used_and_refused_fails_other_caller_however_the_refusal_comes_back() {
    let Some(python) = python(
        "check_mcp::a_key_another_caller_used_and_refused_fails_other_caller_however_the_refusal_comes_back",
    ) else {
        return;
    };
    let run =
        |form: &str, errors: &str| planted_refusing(&python, "blocks-other-caller", form, errors);
    let structured = run("structured", "code_pointer = \"/code\"");
    let plain = run("plain-text", r#"text_code_pattern = '^Error \[(\w+)\]'"#);
    for report in [&structured, &plain] {
        assert_eq!(verdict(report, "other-caller"), "FAIL", "{report:#}");
        let failed = failed_observations(report, "other-caller");
        assert!(
            failed.contains("bob's tool call succeeds as a tool call of its own"),
            "{failed}"
        );
    }
    assert!(
        failed_observations(&structured, "other-caller").contains("alice's key blocked bob"),
        "{structured:#}"
    );
}
