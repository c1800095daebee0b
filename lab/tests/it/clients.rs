//! Real clients nobody here wrote, against `lab serve` and `lab proxy` as processes: Python
//! `requests` retrying with urllib3's `Retry`, `curl --retry`, `wrk` under load, and Schemathesis
//! against the OpenAPI description.
//!
//! A missing client prints `SKIPPED` and passes locally; CI sets `LAB_REQUIRE_CLIENTS=1`, so there
//! a missing client fails. The Python tools come from the virtual environment named by
//! `LAB_CLIENTS_VENV` (`.ci/run` makes it from `lab/tests/clients/requirements.txt`), else from
//! `PATH`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lab::serde_json::{self, Value};

use crate::http::LabServer;
use crate::http_hostile::GUARD;
use crate::runner::service_tickets;

const PAYLOAD: &str = r#"{"title": "Disk full", "priority": "normal"}"#;

/// A file of `lab/tests/clients/`.
fn client_file(name: &str) -> PathBuf {
    crate::repository_root()
        .join("lab/tests/clients")
        .join(name)
}

/// The program `name` from the clients' virtual environment when `LAB_CLIENTS_VENV` is set,
/// else from `PATH`.
fn venv_program(name: &str) -> PathBuf {
    match std::env::var_os("LAB_CLIENTS_VENV") {
        Some(venv) => PathBuf::from(venv).join("bin").join(name),
        None => PathBuf::from(name),
    }
}

/// Whether `program ARGS` runs and exits 0; when it does not, says so loudly, or fails the test
/// when `LAB_REQUIRE_CLIENTS` is set (as CI sets it).
fn client_available(test: &str, program: &Path, args: &[&str]) -> bool {
    let runs = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    report_missing(test, program, runs)
}

/// Whether wrk is installed. It has no option that exits 0 without a URL (`-v` prints its version
/// and exits 1), so here found means it started.
fn wrk_available(test: &str) -> bool {
    let program = PathBuf::from("wrk");
    let starts = Command::new(&program)
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    report_missing(test, &program, starts)
}

/// Passes `found` through; when false, fails under `LAB_REQUIRE_CLIENTS`, or prints `SKIPPED`.
fn report_missing(test: &str, program: &Path, found: bool) -> bool {
    if !found {
        assert!(
            std::env::var_os("LAB_REQUIRE_CLIENTS").is_none(),
            "{test}: {} is required (LAB_REQUIRE_CLIENTS is set) but does not run",
            program.display(),
        );
        // Printed past libtest's capture, so a skip is seen.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!(
                "SKIPPED {test}: {} not found (run .ci/run's client set-up, or set LAB_CLIENTS_VENV)\n",
                program.display()
            )
            .as_bytes(),
        );
    }
    found
}

fn dropping_proxy(server: &LabServer, drop_first: u32) -> LabServer {
    LabServer::spawn(&[
        "proxy",
        "--upstream",
        &server.url,
        "--drop-first",
        &drop_first.to_string(),
    ])
}

fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn python_requests_retrying_post_through_a_dropping_proxy_leaves_one_ticket() {
    let test = "python_requests_retrying_post_through_a_dropping_proxy_leaves_one_ticket";
    let python = venv_program("python3");
    if !client_available(test, &python, &["-c", "import requests, urllib3"]) {
        return;
    }
    let server = LabServer::start(&[]);
    let proxy = dropping_proxy(&server, 1);
    let output = Command::new(&python)
        .arg(client_file("retry_post.py"))
        .args([&proxy.url, "token-a", "python-retry-1", PAYLOAD])
        .output()
        .unwrap();
    let answer: Value = serde_json::from_str(succeeded(&output).trim()).unwrap();
    // The first reply was lost on the wire; urllib3 sent again, and the key made it a replay.
    assert_eq!(answer["status"], 201, "{answer}");
    assert_eq!(answer["replayed"], "true", "{answer}");
    assert_eq!(answer["body"]["ticket_id"], 1, "{answer}");
    assert_eq!(service_tickets(&server), [1]);
}

#[test]
fn curl_retrying_all_errors_through_a_dropping_proxy_leaves_one_ticket() {
    let test = "curl_retrying_all_errors_through_a_dropping_proxy_leaves_one_ticket";
    if !crate::http::curl_available(test) {
        return;
    }
    let server = LabServer::start(&[]);
    let proxy = dropping_proxy(&server, 1);
    let output = Command::new("curl")
        .args(["-s", "-i", "--max-time", "20", "--retry", "3"])
        .args(["--retry-all-errors", "--retry-delay", "1"])
        .args(["-H", "Authorization: Bearer token-a"])
        .args(["-H", "Idempotency-Key: curl-retry-1"])
        .args(["-H", "Content-Type: application/json"])
        .args(["--data-binary", PAYLOAD])
        .arg(format!("{}/tickets", proxy.url))
        .output()
        .unwrap();
    let text = succeeded(&output);
    assert!(text.starts_with("HTTP/1.1 201"), "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("idempotent-replayed: true"),
        "the retry is a replay: {text}"
    );
    assert!(text.contains(r#""ticket_id":1"#), "{text}");
    assert_eq!(service_tickets(&server), [1]);
}

/// What `creates.lua` reports at the end of a wrk run.
#[derive(Debug)]
struct WrkCounts {
    answered_2xx: u64,
    answered_other: u64,
    /// Socket errors (connect, read, write) and timeouts, as wrk counts them.
    socket_errors_and_timeouts: u64,
    /// The connections that had [`ANSWERS_EACH`] answers before the run ended.
    connections_answered: u32,
}

/// How many answers every connection gets before a wrk run ends.
const ANSWERS_EACH: u32 = 5;

/// The least a wrk run lasts, for load: a busy machine sends fewer requests in it, which changes
/// no verdict.
const LEAST_RUN: Duration = Duration::from_secs(3);

/// Runs wrk with `connections` connections, one per thread, against `path`, keys as `keys` says
/// (see `creates.lua`), until every connection has had [`ANSWERS_EACH`] answers, and at least
/// [`LEAST_RUN`]. The run ends on that event, not at a deadline: a busy machine makes it longer,
/// never different. A connection the server leaves unanswered keeps it going until wrk's own
/// end, [`GUARD`] later, and is counted as missing.
fn wrk(server: &LabServer, connections: u32, path: &str, keys: &str) -> WrkCounts {
    let connections_text = connections.to_string();
    let guard = format!("{}s", GUARD.as_secs());
    let mut child = Command::new("wrk")
        .args(["-t", &connections_text, "-c", &connections_text])
        // A request still unanswered at the end is not a timeout: timeouts would be a time
        // limit deciding the verdict, so wrk's is set beyond the run.
        .args([
            "-d",
            &guard,
            "--timeout",
            &format!("{}s", 2 * GUARD.as_secs()),
        ])
        .arg("-s")
        .arg(client_file("creates.lua"))
        .arg(&server.url)
        .env("LAB_WRK_PATH", path)
        .env("LAB_WRK_KEYS", keys)
        .env("LAB_WRK_TOKEN", "token-a")
        .env("LAB_WRK_EACH", ANSWERS_EACH.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut connections_answered = 0;
    let mut errors = String::new();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    for line in stderr.lines().map_while(Result::ok) {
        if line != "lab-wrk-connection-answered" {
            errors.push_str(&line);
            errors.push('\n');
            continue;
        }
        connections_answered += 1;
        if connections_answered == connections {
            std::thread::sleep(LEAST_RUN.saturating_sub(started.elapsed()));
            // wrk ends its run on SIGINT as at its deadline: it prints its counts and exits 0.
            // SAFETY: a plain kill(2) on the child this test started and has not waited for.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        }
    }
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}\n{text}\n{errors}",
        output.status
    );
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("lab-wrk: "))
        .unwrap_or_else(|| panic!("no lab-wrk line in {text}"));
    let counts: Value = serde_json::from_str(line).unwrap();
    let count = |name: &str| counts[name].as_u64().unwrap();
    eprintln!("wrk -c {connections} {path} {keys}: {line}");
    WrkCounts {
        answered_2xx: count("answered_2xx"),
        answered_other: count("answered_other"),
        socket_errors_and_timeouts: ["connect", "read", "write", "timeout"]
            .into_iter()
            .map(count)
            .sum(),
        connections_answered,
    }
}

/// Checks a run of creates with distinct keys (or none): every connection answered, every answer
/// a 2xx, and the store holds one ticket per 2xx, give or take the requests wrk abandoned in
/// flight when its run ended.
fn check_one_ticket_per_answer(connections: u32, path: &str, keys: &str) {
    let server = LabServer::start(&["--faults"]);
    let counts = wrk(&server, connections, path, keys);
    assert_eq!(counts.connections_answered, connections, "{counts:?}");
    assert_eq!(counts.socket_errors_and_timeouts, 0, "{counts:?}");
    assert_eq!(counts.answered_other, 0, "{counts:?}");
    assert!(counts.answered_2xx > 0, "{counts:?}");
    let tickets = service_tickets(&server).len() as u64;
    // wrk stops at the end without reading the answers still on their way, so up to one
    // request per connection may have committed unanswered; never fewer tickets than 2xx.
    assert!(
        (counts.answered_2xx..=counts.answered_2xx + u64::from(connections)).contains(&tickets),
        "{tickets} tickets for {counts:?}"
    );
}

#[test]
fn wrk_keyed_creates_with_distinct_keys_at_8_and_64_connections_make_one_ticket_per_answer() {
    let test =
        "wrk_keyed_creates_with_distinct_keys_at_8_and_64_connections_make_one_ticket_per_answer";
    if !wrk_available(test) {
        return;
    }
    for connections in [8, 64] {
        check_one_ticket_per_answer(connections, "/tickets", "distinct");
    }
}

#[test]
fn wrk_unkeyed_creates_at_8_and_64_connections_make_one_ticket_per_answer() {
    let test = "wrk_unkeyed_creates_at_8_and_64_connections_make_one_ticket_per_answer";
    if !wrk_available(test) {
        return;
    }
    for connections in [8, 64] {
        check_one_ticket_per_answer(connections, "/unkeyed-tickets", "none");
    }
}

#[test]
fn wrk_with_64_connections_sharing_20_keys_makes_exactly_20_tickets() {
    let test = "wrk_with_64_connections_sharing_20_keys_makes_exactly_20_tickets";
    if !wrk_available(test) {
        return;
    }
    let server = LabServer::start(&[]);
    let counts = wrk(&server, 64, "/tickets", "fixed:20");
    assert_eq!(counts.connections_answered, 64, "{counts:?}");
    assert_eq!(counts.socket_errors_and_timeouts, 0, "{counts:?}");
    // The connections start at 64 different places in the cycle of 20 keys, so every key is
    // sent: exactly one ticket per key, however the run ended. A key in flight on another
    // connection is a 409, the only non-2xx allowed.
    assert!(counts.answered_2xx >= 20, "{counts:?}");
    assert_eq!(service_tickets(&server).len(), 20, "{counts:?}");
}

/// The failures Schemathesis finds in today's `lab serve` and the project has accepted for now,
/// each named in [`KNOWN_FAILURES`]. The file is Schemathesis's own baseline format.
const BASELINE: &str = "schemathesis-baseline.json";

/// Why each baseline entry is there, printed on every run so an accepted failure is never silent.
/// Empty since the server runs on hyper: it answers 405 for a method a path does not have and
/// keeps the test-only `Lab-Fault` header out of the public description.
const KNOWN_FAILURES: &[&str] = &[];

#[test]
fn schemathesis_with_every_check_finds_no_failure_in_the_openapi_contract_beyond_the_baseline() {
    let test = "schemathesis_with_every_check_finds_no_failure_in_the_openapi_contract_beyond_the_baseline";
    let schemathesis = venv_program("schemathesis");
    if !client_available(test, &schemathesis, &["--version"]) {
        return;
    }
    let baseline: Value =
        serde_json::from_str(&std::fs::read_to_string(client_file(BASELINE)).unwrap()).unwrap();
    let accepted = baseline["entries"].as_array().unwrap().len();
    assert_eq!(
        accepted,
        KNOWN_FAILURES.len(),
        "every baseline entry says why"
    );
    let server = LabServer::start(&[]);
    let report = tempfile::tempdir().unwrap();
    let output = Command::new(&schemathesis)
        .arg("--config-file")
        .arg(client_file("schemathesis.toml"))
        .args(["run", &format!("{}/openapi.json", server.url)])
        .args(["--checks", "all", "--url", &server.url])
        .args(["-H", "Authorization: Bearer token-a"])
        // Bounded: a fixed seed, few examples per operation, one worker. No --max-time: with it,
        // Schemathesis repeats fuzzing until the budget is spent.
        .args(["--seed", "14", "--max-examples", "30", "--workers", "1"])
        .args(["--request-timeout", "5", "--baseline"])
        .arg(client_file(BASELINE))
        .args(["--report-dir"])
        .arg(report.path())
        .env("NO_COLOR", "1")
        .current_dir(report.path())
        .output()
        .unwrap();
    let text = succeeded(&output);
    // A known failure that no longer happens must leave the baseline, or it would hide its return.
    let known = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Known failures: "))
        .map_or(0, |count| count.trim().parse::<usize>().unwrap());
    assert_eq!(
        known, accepted,
        "Schemathesis met {known} of the {accepted} accepted failures: remove the fixed ones from \
         lab/tests/clients/{BASELINE} and KNOWN_FAILURES\n{text}"
    );
    let mut loud =
        format!("KNOWN FAILURES {test}: {accepted} accepted by lab/tests/clients/{BASELINE}\n");
    for why in KNOWN_FAILURES {
        loud.push_str(&format!("  - {why}\n"));
    }
    // Printed past libtest's capture, like a skip.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), loud.as_bytes());
}
