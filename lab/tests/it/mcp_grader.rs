//! `lab mcp --grade-client`: the grader's report for loops that need no model: the official
//! Python SDK in four retrying loops, the lab's scripted loops (the decisions chapter's two and
//! one per key design), a raw session for the `--calls` bound and a late reply, and the
//! refusals of bad schedules.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use lab::mcp::grader::loops::{self, ScriptedLoop};
use lab::mcp::grader::{Report, Verdict};
use lab::sim::AgentLoop;
use serde_json::Value;

use crate::repository_root;

const LAB: &str = env!("CARGO_BIN_EXE_lab");

/// The venv's python, or `None` after a loud skip; a failure when CI requires the clients
/// (`LAB_REQUIRE_CLIENTS=1` or `LAB_REQUIRE_MCP_CLIENT=1`), as in `mcp.rs`.
fn python(test: &str) -> Option<PathBuf> {
    let named = std::env::var_os("LAB_MCP_PYTHON")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("LAB_CLIENTS_VENV")
                .filter(|path| !path.is_empty())
                .map(|venv| PathBuf::from(venv).join("bin/python"))
        });
    let required = ["LAB_REQUIRE_MCP_CLIENT", "LAB_REQUIRE_CLIENTS"]
        .iter()
        .any(|variable| std::env::var(variable).as_deref() == Ok("1"));
    match named {
        Some(path) => Some(path),
        None if required => panic!(
            "LAB_REQUIRE_CLIENTS=1, but neither LAB_MCP_PYTHON nor LAB_CLIENTS_VENV names a \
             python with the `mcp` package (lab/tests/clients/requirements.txt)"
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

/// Runs one Python loop against the grader and returns the grader's JSON report.
fn python_loop(test: &str, name: &str) -> Option<Value> {
    python_loop_over(test, name, &[])
}

/// As [`python_loop`], with the script's transport argument (`["http"]`: one grader over
/// Streamable HTTP, a session per connection).
fn python_loop_over(test: &str, name: &str, transport: &[&str]) -> Option<Value> {
    python_loop_with(test, name, transport, "")
}

/// As [`python_loop_over`], the grader given `schedule` too (options such as `--in-progress
/// first`, as the script's GRADER_SCHEDULE takes them).
pub(crate) fn python_loop_with(
    test: &str,
    name: &str,
    transport: &[&str],
    schedule: &str,
) -> Option<Value> {
    let python = python(test)?;
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("graded.sqlite");
    let report = folder.path().join("report.json");
    let output = Command::new(python)
        .arg(repository_root().join("lab/tests/clients/mcp_grader_loops.py"))
        .args([name, LAB])
        .arg(&database)
        .arg(&report)
        .args(transport)
        .env("GRADER_SCHEDULE", schedule)
        .output()
        .unwrap();
    let transcript = String::from_utf8_lossy(&output.stdout);
    println!("{transcript}");
    assert!(
        output.status.success() && transcript.ends_with("DONE\n"),
        "the {name} loop failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&report).unwrap();
    Some(serde_json::from_str(&text).unwrap())
}

/// The report in the words the book shows (`src/mcp/grader-python-LOOP.txt`), without the
/// random keys; the test fails when a fresh run says otherwise. `LAB_BLESS=1` rewrites it.
fn compare_summary_with_the_book(report: &Value, name: &str) {
    let mut text = format!("loop: {name}, on the MCP Python SDK\n");
    for intention in report["intentions"].as_array().unwrap() {
        let replan = match intention["possible_replan_of"].as_u64() {
            Some(earlier) => format!(", possibly a re-plan of intention {earlier}"),
            None => String::new(),
        };
        text.push_str(&format!(
            "intention {}: {} call(s), {} reply lost, {} key(s), arguments {}, {} ticket(s){replan}\n  {}: {}\n",
            intention["number"],
            intention["calls"].as_array().unwrap().len(),
            intention["lost"],
            intention["keys"].as_array().unwrap().len(),
            if intention["same_arguments"] == true { "the same" } else { "changed" },
            intention["tickets"].as_array().unwrap().len(),
            intention["verdict"].as_str().unwrap().replace('_', " "),
            intention["reason"].as_str().unwrap().split(':').next().unwrap(),
        ));
    }
    text.push_str(&format!(
        "sessions: {}; tickets in the store: {}; verdict: {}\n",
        report["sessions"],
        report["tickets_in_store"],
        report["verdict"].as_str().unwrap().replace('_', " ")
    ));
    let path = repository_root().join(format!("src/mcp/grader-python-{name}.txt"));
    if std::env::var("LAB_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, &text).unwrap();
    }
    let shown = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        shown,
        text,
        "{} differs from the run; rerun with LAB_BLESS=1 and review the diff",
        path.display()
    );
}

pub(crate) fn verdicts(report: &Value) -> Vec<&str> {
    report["intentions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|intention| intention["verdict"].as_str().unwrap())
        .collect()
}

fn tickets_per_intention(report: &Value) -> Vec<usize> {
    report["intentions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|intention| intention["tickets"].as_array().unwrap().len())
        .collect()
}

#[test]
fn the_python_sdk_loop_that_keeps_its_key_passes_with_one_ticket_per_intention() {
    let test = "mcp_grader::the_python_sdk_loop_that_keeps_its_key_passes";
    let Some(report) = python_loop(test, "keep-key") else {
        return;
    };
    compare_summary_with_the_book(&report, "keep-key");
    assert_eq!(verdicts(&report), ["PASS", "PASS"], "{report:#}");
    assert_eq!(tickets_per_intention(&report), [1, 1]);
    assert_eq!(report["tickets_in_store"], 2);
    assert_eq!(report["verdict"], "PASS");
    for intention in report["intentions"].as_array().unwrap() {
        assert_eq!(intention["lost"], 1);
        assert_eq!(intention["keys"].as_array().unwrap().len(), 1);
        assert_eq!(intention["same_arguments"], true);
    }
    // The lost call was cancelled by the SDK when it timed out, and the journal saw it.
    let recorded = report["recorded"].as_array().unwrap();
    assert!(
        recorded
            .iter()
            .any(|call| call["fate"] == "lost" && call["cancelled"] == true)
    );
    assert!(recorded[0]["client"].as_str().unwrap().contains("mcp"));
}

#[test]
fn the_python_sdk_loop_that_mints_a_key_per_attempt_fails_and_names_the_duplicates() {
    let test = "mcp_grader::the_python_sdk_loop_that_mints_a_key_per_attempt_fails";
    let Some(report) = python_loop(test, "new-key") else {
        return;
    };
    compare_summary_with_the_book(&report, "new-key");
    assert_eq!(verdicts(&report), ["FAIL", "FAIL"], "{report:#}");
    assert_eq!(tickets_per_intention(&report), [2, 2]);
    assert_eq!(report["tickets_in_store"], 4);
    for intention in report["intentions"].as_array().unwrap() {
        let reason = intention["reason"].as_str().unwrap();
        let tickets = intention["tickets"].as_array().unwrap();
        assert!(reason.starts_with("duplicate"), "{reason}");
        for ticket in tickets {
            assert!(reason.contains(ticket.as_str().unwrap()), "{reason}");
        }
    }
}

#[test]
fn a_python_loop_that_reconnects_with_its_key_passes_across_two_server_processes() {
    let test = "mcp_grader::a_python_loop_that_reconnects_with_its_key_passes";
    let Some(report) = python_loop(test, "reconnect-keep") else {
        return;
    };
    compare_summary_with_the_book(&report, "reconnect-keep");
    assert_eq!(verdicts(&report), ["PASS"], "{report:#}");
    assert_eq!(report["sessions"], 2);
    assert_eq!(report["tickets_in_store"], 1);
}

#[test]
fn a_python_loop_that_reconnects_and_replans_leaves_its_first_ticket_unresolved_and_fails() {
    let test = "mcp_grader::a_python_loop_that_reconnects_and_replans";
    let Some(report) = python_loop(test, "reconnect-replan") else {
        return;
    };
    compare_summary_with_the_book(&report, "reconnect-replan");
    let verdicts = verdicts(&report);
    assert_eq!(verdicts[0], "UNRESOLVED", "{report:#}");
    assert_eq!(report["verdict"], "FAIL");
    assert_eq!(report["intentions"][1]["possible_replan_of"], 1);
    assert!(report["tickets_in_store"].as_u64().unwrap() >= 2);
}

#[test]
fn the_python_sdk_loops_over_streamable_http_get_the_verdicts_they_get_over_stdio() {
    let test = "mcp_grader::the_python_sdk_loops_over_streamable_http";
    // (loop, verdicts, tickets per intention, sessions, tickets in the store)
    type Expected = (
        &'static str,
        &'static [&'static str],
        &'static [usize],
        u64,
        u64,
    );
    let expected: [Expected; 4] = [
        ("keep-key", &["PASS", "PASS"], &[1, 1], 1, 2),
        ("new-key", &["FAIL", "FAIL"], &[2, 2], 1, 4),
        ("reconnect-keep", &["PASS"], &[1], 2, 1),
        ("reconnect-replan", &["UNRESOLVED", "FAIL"], &[1, 2], 3, 3),
    ];
    for (name, verdicts_expected, tickets, sessions, in_store) in expected {
        let Some(report) = python_loop_over(test, name, &["http"]) else {
            return;
        };
        let _ = writeln!(
            std::io::stderr(),
            "over http, {name}: {} ({:?}, tickets {:?}, {} session(s), {} in the store)",
            report["verdict"],
            verdicts(&report),
            tickets_per_intention(&report),
            report["sessions"],
            report["tickets_in_store"]
        );
        assert_eq!(verdicts(&report), verdicts_expected, "{name}: {report:#}");
        assert_eq!(tickets_per_intention(&report), tickets, "{name}");
        assert_eq!(
            report["sessions"], sessions,
            "{name}: sessions are MCP sessions"
        );
        assert_eq!(report["tickets_in_store"], in_store, "{name}");
        let recorded = report["recorded"].as_array().unwrap();
        assert!(
            recorded.iter().all(|call| call["session"]
                .as_str()
                .unwrap()
                .starts_with("http session ")),
            "{name}: each call names its Mcp-Session-Id"
        );
        // The SDK's notifications/cancelled for a timed-out call reaches the grader over HTTP.
        // A loop that reconnects closes the session right after the timeout, and the SDK may
        // drop the notification's POST when it does (CI saw it): then the session's DELETE,
        // before the retry arrives, is what tells the grader the client gave up.
        let reconnects = name.starts_with("reconnect");
        for lost in recorded.iter().filter(|call| call["fate"] == "lost") {
            let retry = recorded
                .iter()
                .find(|call| call["number"].as_u64() > lost["number"].as_u64());
            let left_before_retry = match (lost["left_ms"].as_u64(), retry) {
                (Some(left), Some(retry)) => left <= retry["started_ms"].as_u64().unwrap(),
                _ => false,
            };
            assert!(
                lost["cancelled"] == true || (reconnects && left_before_retry),
                "{name}: {recorded:#?}"
            );
        }
    }
}

fn scripted(name: &str) -> Report {
    let scripted = ScriptedLoop::named(name).unwrap();
    let report = loops::run(scripted).unwrap();
    println!("{}\n{report}", scripted.describe());
    report
}

#[test]
fn the_decisions_chapter_loops_over_mcp_the_fresh_call_fails_and_the_saved_key_passes() {
    let fresh = scripted("fresh-call");
    assert_eq!(fresh.verdict, Verdict::Fail);
    assert_eq!(fresh.intentions.len(), 1);
    assert!(fresh.intentions[0].tickets.len() >= 2);
    assert_eq!(fresh.intentions[0].keys[..2], ["call-1", "call-2"]);
    let saved = scripted("saved-key");
    assert_eq!(saved.verdict, Verdict::Pass);
    assert_eq!(saved.tickets_in_store, 1);
    assert_eq!(
        ScriptedLoop::named("saved-key"),
        Some(ScriptedLoop::Agent(AgentLoop::SavedKeyOnTimeout))
    );
}

#[test]
fn under_a_replan_the_host_key_keeps_one_ticket_and_the_derived_and_prepared_keys_duplicate() {
    let host = scripted("host-key-replan");
    assert_eq!(host.key_source, "host");
    assert_eq!(host.verdict, Verdict::Pass, "{host}");
    assert_eq!(host.tickets_in_store, 1);
    assert_eq!(host.sessions, 2);
    assert!(!host.intentions[0].same_arguments);
    assert!(
        host.recorded
            .iter()
            .any(|call| call.answer == "error conflict")
    );
    for name in ["task-id-replan", "prepare-replan"] {
        let report = scripted(name);
        assert_eq!(report.verdict, Verdict::Fail, "{report}");
        assert_eq!(report.intentions.len(), 1);
        assert_eq!(report.intentions[0].tickets.len(), 2);
        assert_eq!(report.tickets_in_store, 2);
    }
}

/// Sends `lines` to a grader over raw stdio and returns its stderr and whether it exited 0 by
/// itself, with stdin still open.
pub(crate) fn raw_grader(args: &[&str], lines: &[&str]) -> (String, bool, String) {
    let mut child = Command::new(LAB)
        .args(["mcp", "--grade-client"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let mut answers = String::new();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    for line in stdout.lines() {
        answers.push_str(&line.unwrap());
        answers.push('\n');
    }
    // stdout closed: the process ended by itself, stdin is still ours.
    let status = child.wait().unwrap();
    drop(stdin);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (stderr, status.success(), answers)
}

pub(crate) const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw-test","version":"1"}}}"#;
pub(crate) const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
pub(crate) const CREATE: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_ticket","arguments":{"operation_key":"raw-1","title":"Late"}}}"#;

#[test]
fn with_calls_one_the_grader_stops_by_itself_and_reports_the_late_reply_it_sent() {
    let (report, exited, answers) = raw_grader(
        &[
            "--lose-replies",
            "none",
            "--delay-replies",
            "1@200ms",
            "--calls",
            "1",
        ],
        &[INITIALIZE, INITIALIZED, CREATE],
    );
    assert!(exited, "{report}");
    assert!(
        answers.contains(r#""id":7"#) && answers.contains(r#""ticket_id":1"#),
        "{answers}"
    );
    assert!(
        report.contains("1 create_ticket call(s) in 1 session(s)"),
        "{report}"
    );
    assert!(report.contains("replies lost: 0, late: 1"), "{report}");
    assert!(report.contains("clients: raw-test 1"), "{report}");
    // Nothing after the late reply shows the client read it (issue 46).
    assert!(report.contains("verdict: UNRESOLVED"), "{report}");
    assert!(report.contains("cannot be known"), "{report}");
    assert!(report.contains("what this run cannot know:"), "{report}");
}

/// The fate and cancellation the grader's journal in `database` holds for call `number`, read
/// from another process as SQLite allows (opened without creating it, closed at once); `None`
/// while there is no such call yet.
pub(crate) fn journal_call(database: &Path, number: u64) -> Option<(String, bool)> {
    rusqlite::Connection::open_with_flags(database, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
        .and_then(|db| {
            db.query_row(
                "SELECT fate, cancelled FROM lab_grader_calls WHERE number = ?1",
                [i64::try_from(number).unwrap()],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
        })
        .ok()
}

/// Waits until the journal's record of call `number` satisfies `done`: the event that orders
/// a test's next step, never a sleep. Returns whether it came; the bound only ends a broken run
/// (on a loaded machine the record comes late, never differently).
pub(crate) fn wait_for_call(
    database: &Path,
    number: u64,
    done: impl Fn(&str, bool) -> bool,
) -> bool {
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_secs(120) {
        if journal_call(database, number).is_some_and(|(fate, cancelled)| done(&fate, cancelled)) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

/// A grader over raw stdio with `schedule` and its journal in `database`, after a create whose
/// reply it lost or holds (its record in the journal, not a sleep, says so).
fn grader_holding_a_reply(
    schedule: &[&str],
    database: &Path,
    report: &Path,
) -> std::process::Child {
    let mut child = Command::new(LAB)
        .args(["mcp", "--grade-client", "--database"])
        .arg(database)
        .args(schedule)
        .arg("--report")
        .arg(report)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.as_mut().unwrap();
    for line in [INITIALIZE, INITIALIZED, CREATE] {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let held = wait_for_call(database, 1, |fate, _| {
        fate == "lost" || fate.starts_with("delayed")
    });
    if !held {
        let _ = child.kill();
        panic!("the grader recorded no lost or held call 1 in 120 s");
    }
    child
}

/// The report of a grader with `schedule` whose client closes stdin, without a cancellation,
/// once the grader has lost or holds its first reply.
fn report_after_leaving(schedule: &[&str]) -> String {
    let folder = tempfile::tempdir().unwrap();
    let report_path = folder.path().join("report.txt");
    let mut child =
        grader_holding_a_reply(schedule, &folder.path().join("graded.sqlite"), &report_path);
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    std::fs::read_to_string(&report_path).unwrap()
}

/// The issue #35 report: a reply held past the client's own timeout was counted as received
/// when the client went away without a cancellation, and the run said PASS. The client closes
/// stdin once the grader holds the reply (its journal says so), well inside the minute's hold.
#[test]
fn a_held_reply_is_not_received_by_a_client_that_closed_stdin_before_it_was_sent() {
    let report = report_after_leaving(&["--lose-replies", "none", "--delay-replies", "1@60s"]);
    assert!(report.contains("replies lost: 0, late: 1"), "{report}");
    assert!(
        report.contains("ticket 1 exists and the client was never told of it"),
        "{report}"
    );
    assert!(report.contains("\nverdict: UNRESOLVED"), "{report}");
}

/// The report of a grader over raw stdio that holds call 1's reply for a second, after its
/// client has read that reply and then sent `after` (each answered before the next), ended by
/// SIGTERM: the client never cancels and never leaves, as a client that times out without a
/// cancellation and keeps its session open.
fn report_after_a_late_reply(after: impl Fn(&str) -> Vec<String>) -> String {
    let folder = tempfile::tempdir().unwrap();
    let report_path = folder.path().join("report.txt");
    let mut child = Command::new(LAB)
        .args(["mcp", "--grade-client", "--database"])
        .arg(folder.path().join("graded.sqlite"))
        .args([
            "--lose-replies",
            "none",
            "--delay-replies",
            "1@1s",
            "--report",
        ])
        .arg(&report_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut read_until = |id: &str| {
        let mut line = String::new();
        while !line.contains(&format!(r#""id":{id}"#)) {
            line.clear();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "the grader ended early"
            );
        }
        line
    };
    for line in [INITIALIZE, INITIALIZED, CREATE] {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let reply = read_until("7");
    for (index, line) in after(&reply).iter().enumerate() {
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        read_until(&(100 + index).to_string());
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(child.wait().unwrap().success());
    drop(stdin);
    std::fs::read_to_string(&report_path).unwrap()
}

/// Issue 46: a reply held past a client's timeout, written into a session that sent no
/// cancellation, was reported as "the client waited for the late reply" and PASS (the Vercel
/// AI SDK's give-up run: its model had said it could not create the ticket). Nothing on the
/// wire shows it was read: UNRESOLVED, saying why. A client that then acts on the reply, naming
/// its ticket in a later request, shows it did read it: PASS, saying so.
#[test]
fn a_late_reply_is_received_only_when_a_later_request_names_its_ticket() {
    let silent = report_after_a_late_reply(|_| Vec::new());
    assert!(!silent.contains("the client waited"), "{silent}");
    assert!(
        silent.contains(
            "call 1's reply was held back and sent late into its session, which had sent no \
             cancellation; no later request named ticket 1, so whether the client still waited \
             for the reply or had timed out and moved on cannot be known"
        ),
        "{silent}"
    );
    assert!(silent.contains("receipt unknown"), "{silent}");
    assert!(silent.contains("\nverdict: UNRESOLVED"), "{silent}");
    // A later request that lists tickets names none: still unknown.
    let listed = report_after_a_late_reply(|_| {
        vec![r#"{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{"name":"list_tickets","arguments":{}}}"#.to_owned()]
    });
    assert!(listed.contains("\nverdict: UNRESOLVED"), "{listed}");
    // The client reads the ticket the late reply named: it had that reply.
    let acted = report_after_a_late_reply(|reply| {
        let reply: Value = serde_json::from_str(reply).unwrap();
        let ticket = &reply["result"]["structuredContent"]["ticket_id"];
        vec![format!(
            r#"{{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{{"name":"get_ticket","arguments":{{"ticket_id":{ticket}}}}}}}"#
        )]
    });
    assert!(
        acted.contains(
            "the client waited for the late reply instead of sending again: a later request of \
             its session named ticket 1; one ticket"
        ),
        "{acted}"
    );
    assert!(acted.contains("\nverdict: PASS"), "{acted}");
}

/// The order a loaded CI machine once produced (issue 45): the client goes away (its stdin
/// closes) while its call waits for a reply the grader lost. It gave no cancellation, but it
/// did leave: the report says so, and never that it timed out or that it gave no sign.
#[test]
fn a_client_that_closes_stdin_while_its_lost_reply_waits_is_said_to_have_left() {
    let report = report_after_leaving(&["--lose-replies", "first"]);
    assert!(
        report.contains(
            "ticket 1 exists and the client was never told of it; \
             the client left its session while call 1 waited, without a word"
        ),
        "{report}"
    );
    assert!(
        report.contains("call 1 (first): created ticket 1, reply lost, not received: the client had left its session"),
        "{report}"
    );
    assert!(report.contains("\nverdict: UNRESOLVED"), "{report}");
}

/// The other order (issue 45): the grader is stopped by SIGTERM while the client, still
/// connected, waits for a reply the grader lost. The stop cancels every request the grader
/// holds; that is not the client cancelling, and the report must not say it timed out.
#[test]
fn a_grader_stopped_while_a_lost_reply_waits_does_not_say_the_client_cancelled() {
    let folder = tempfile::tempdir().unwrap();
    let report_path = folder.path().join("report.txt");
    let mut child = grader_holding_a_reply(
        &["--lose-replies", "first"],
        &folder.path().join("graded.sqlite"),
        &report_path,
    );
    // `Child::wait` closes a stdin it still holds before waiting, which is the client leaving:
    // the client keeps its side open until the grader has exited.
    let stdin = child.stdin.take();
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(child.wait().unwrap().success());
    drop(stdin);
    let report = std::fs::read_to_string(&report_path).unwrap();
    assert!(
        report.contains(
            "the client was never told of it; call 1 still waited for its reply when the \
             grader was stopped (by a signal, as a host closes a stdio server, or by its --calls \
             bound); the client had not cancelled it or left before"
        ),
        "{report}"
    );
    assert!(
        report.contains("call 1 (first): created ticket 1, reply lost, not received\n"),
        "{report}"
    );
    assert!(!report.contains("timed out at the client"), "{report}");
    assert!(!report.contains("the client cancelled it"), "{report}");
}

/// A re-plan sent while the first reply is still held (the same fields, a new key) is that
/// intention's retry, and it made a second ticket.
#[test]
fn a_new_key_with_the_same_fields_while_a_reply_is_held_fails_as_one_intention() {
    const REPLAN: &str = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"create_ticket","arguments":{"operation_key":"raw-2","title":"Late"}}}"#;
    let (report, exited, _) = raw_grader(
        &[
            "--lose-replies",
            "none",
            "--delay-replies",
            "1@1s",
            "--calls",
            "2",
        ],
        &[INITIALIZE, INITIALIZED, CREATE, REPLAN],
    );
    assert!(exited, "{report}");
    assert!(report.contains("intention 1:"), "{report}");
    assert!(!report.contains("intention 2:"), "{report}");
    // The two calls are handled together, so either may arrive first and be the one held.
    assert!(
        report.contains("keys: \"raw-1\", \"raw-2\"")
            || report.contains("keys: \"raw-2\", \"raw-1\""),
        "{report}"
    );
    // Each call made a ticket; the store numbers them in the order the two creates committed,
    // which is not always the order the calls are listed in.
    assert!(
        report.contains("tickets created: 2 (1, 2)")
            || report.contains("tickets created: 2 (2, 1)"),
        "{report}"
    );
    assert!(report.contains("\nverdict: FAIL"), "{report}");
}

/// A client on the protocol version without `initialize` (FastMCP 4, the Python SDK 2) names
/// itself in each request's `_meta`: the report's `clients:` line reads it there.
#[test]
fn a_client_that_names_itself_only_in_a_requests_meta_is_named_in_the_report() {
    const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"fastmcp","version":"4.2.3"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let discover =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{{{META}}}}}"#);
    let create = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"create_ticket","arguments":{{"operation_key":"m-1","title":"Meta"}},{META}}}}}"#
    );
    let (report, exited, _) = raw_grader(
        &["--lose-replies", "none", "--calls", "1"],
        &[&discover, &create],
    );
    assert!(exited, "{report}");
    assert!(report.contains("clients: fastmcp 4.2.3"), "{report}");
}

#[test]
fn a_reply_that_is_never_lost_or_late_is_reported_as_not_exercised() {
    let (report, exited, _) = raw_grader(
        &["--lose-replies", "none", "--calls", "1"],
        &[INITIALIZE, INITIALIZED, CREATE],
    );
    assert!(exited, "{report}");
    assert!(report.contains("verdict: NOT EXERCISED"), "{report}");
}

pub(crate) fn refused(args: &[&str]) -> String {
    let output = Command::new(LAB).arg("mcp").args(args).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "lab mcp {args:?}");
    assert!(output.stdout.is_empty());
    String::from_utf8(output.stderr).unwrap()
}

#[test]
fn bad_grader_options_are_refused_with_exit_2_naming_the_option_and_value() {
    let err = refused(&["--grade-client", "--lose-replies", "0"]);
    assert!(
        err.contains("--lose-replies") && err.contains("\"0\""),
        "{err}"
    );
    let err = refused(&["--grade-client", "--delay-replies", "2@5m"]);
    assert!(
        err.contains("--delay-replies") && err.contains("\"5m\""),
        "{err}"
    );
    let err = refused(&[
        "--grade-client",
        "--lose-replies",
        "1",
        "--delay-replies",
        "1@1s",
    ]);
    assert!(err.contains("call 1"), "{err}");
    let err = refused(&["--grade-client", "--key-source", "model"]);
    assert!(
        err.contains("--key-source") && err.contains("\"model\""),
        "{err}"
    );
    let err = refused(&["--lose-replies", "first"]);
    assert!(err.contains("--grade-client"), "{err}");
    let err = refused(&["--grade-client", "--transport", "http", "--caller", "a=b"]);
    assert!(err.contains("stdio"), "{err}");
    let err = refused(&["--grade-client", "--faults"]);
    assert!(err.contains("--faults"), "{err}");
}

#[test]
fn the_report_file_is_json_and_a_missing_folder_is_refused_before_serving() {
    let folder = tempfile::tempdir().unwrap();
    let missing = folder.path().join("no/such/report.json");
    let err = refused(&["--grade-client", "--report", missing.to_str().unwrap()]);
    assert!(err.contains("report.json"), "{err}");
    let file = folder.path().join("report.json");
    let (_, exited, _) = raw_grader(
        &[
            "--calls",
            "1",
            "--lose-replies",
            "none",
            "--json",
            "--report",
            file.to_str().unwrap(),
        ],
        &[INITIALIZE, INITIALIZED, CREATE],
    );
    assert!(exited);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(report["calls"], 1);
    assert_eq!(report["recorded"][0]["request_id"], "7");
    assert_eq!(report["recorded"][0]["operation_key"], "raw-1");
    assert!(Path::new(&file).exists());
}

#[test]
fn on_sigterm_the_grader_stops_and_writes_the_report_of_the_calls_it_saw() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("report.txt");
    let mut child = Command::new(LAB)
        .args([
            "mcp",
            "--grade-client",
            "--lose-replies",
            "none",
            "--report",
        ])
        .arg(&file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in [INITIALIZE, INITIALIZED, CREATE] {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut answer = String::new();
    // The initialize answer, then the create's.
    while !answer.contains(r#""id":7"#) {
        answer.clear();
        assert!(
            stdout.read_line(&mut answer).unwrap() > 0,
            "the grader closed stdout"
        );
    }
    assert!(
        !file.exists(),
        "the report is written at the end, not before"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(child.wait().unwrap().success());
    let report = std::fs::read_to_string(&file).unwrap();
    assert!(report.contains("1 create_ticket call(s)"), "{report}");
    assert!(report.contains("verdict: NOT EXERCISED"), "{report}");
    drop(stdin);
}

/// One HTTP/1.1 request to the grader on loopback: the status line and the whole answer.
pub(crate) fn http(address: &str, method: &str, session: Option<&str>, body: &str) -> String {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let session = session.map_or_else(String::new, |id| format!("Mcp-Session-Id: {id}\r\n"));
    write!(
        stream,
        "{method} /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n\
         {session}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

/// Kills the grader when the test ends early (a failed assertion), so no server is left.
pub(crate) struct HttpGrader(pub(crate) std::process::Child);

impl Drop for HttpGrader {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl HttpGrader {
    /// Stops the grader with SIGTERM, as a user would, and waits for it to exit 0.
    pub(crate) fn stop(&mut self) {
        assert!(
            Command::new("kill")
                .args(["-TERM", &self.0.id().to_string()])
                .status()
                .unwrap()
                .success()
        );
        assert!(self.0.wait().unwrap().success());
    }
}

/// A grader over Streamable HTTP on loopback with `args`, writing its report to `report`, and
/// one session opened on it by hand: the grader, its address and the session's id.
pub(crate) fn http_grader(args: &[&str], report: &Path) -> (HttpGrader, String, String) {
    let mut child = HttpGrader(
        Command::new(LAB)
            .args([
                "mcp",
                "--grade-client",
                "--transport",
                "http",
                "--port",
                "0",
            ])
            .args(args)
            .arg("--report")
            .arg(report)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut url = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    let address = url
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let opened = http(&address, "POST", None, INITIALIZE);
    let session = opened
        .lines()
        .find_map(|line| {
            line.to_ascii_lowercase()
                .starts_with("mcp-session-id:")
                .then(|| line.split_once(':').unwrap().1.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id: {opened}"));
    http(&address, "POST", Some(&session), INITIALIZED);
    (child, address, session)
}

/// Over Streamable HTTP, a session's DELETE is its client leaving: a reply held for it then is
/// never received, and the DELETE is answered 200 (the Python SDK logs a 202 as a failed
/// termination).
#[test]
fn over_http_a_delete_while_a_reply_is_held_is_the_client_leaving_and_is_answered_200() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("report.txt");
    let database = folder.path().join("graded.sqlite");
    let (mut child, address, session) = http_grader(
        &[
            "--lose-replies",
            "none",
            "--delay-replies",
            "1@60s",
            "--database",
            database.to_str().unwrap(),
        ],
        &file,
    );
    let held = {
        let (address, session) = (address.clone(), session.clone());
        std::thread::spawn(move || http(&address, "POST", Some(&session), CREATE))
    };
    // The DELETE once the grader holds the reply, well inside the minute's hold.
    assert!(wait_for_call(&database, 1, |fate, _| fate.starts_with("delayed")));
    let deleted = http(&address, "DELETE", Some(&session), "");
    assert!(deleted.starts_with("HTTP/1.1 200"), "{deleted}");
    let _ = held.join();
    child.stop();
    let report = std::fs::read_to_string(&file).unwrap();
    assert!(report.contains("replies lost: 0, late: 1"), "{report}");
    assert!(
        report.contains("ticket 1 exists and the client was never told of it"),
        "{report}"
    );
    assert!(report.contains("\nverdict: UNRESOLVED"), "{report}");
}
