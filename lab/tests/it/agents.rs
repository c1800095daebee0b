//! Real agent frameworks against `lab mcp --grade-client`: each framework's own MCP client,
//! driven by a scripted model through the framework's own test or function model facility (no
//! hosted model, no network), under a lost reply, a late one, an `in_progress` answer and a
//! dropped connection, with the framework's default
//! retry behaviour and its documented retry option. The scripts and their pins are in
//! `lab/tests/agents/NAME/` (see its README); every run's findings (how the run ended, what the
//! model saw, the recorded calls, the verdicts) are compared with `lab/tests/agents/NAME/findings.json`.
//!
//! The grader judges a late reply by what the client did (a reply sent after the client
//! cancelled, left its session or called again for the intention is not received; one sent into
//! a session that gave no sign either way is received only when a later request names its
//! ticket, and otherwise its receipt is unknown), so the late runs' verdicts rest on how each
//! framework times out. After a deliberate change to a framework's
//! pin or to the grader, rerun with `LAB_WRITE_FINDINGS=1` and review the diff.
//!
//! A framework that is not installed (`LAB_AGENTS_VENV_PYDANTIC_AI`, `LAB_AGENTS_VENV_OPENAI_AGENTS`
//! naming a venv from the folder's requirements.txt; `npm ci` in the JavaScript folders) is a loud
//! skip, and a failure under `LAB_REQUIRE_AGENTS=1` (as `.ci/run` sets it).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lab::serde_json::{self, Value, json};

use crate::repository_root;

const LAB: &str = env!("CARGO_BIN_EXE_lab");

/// The client-side timeout of the short setting, in seconds.
const SHORT_TIMEOUT: &str = "2";
/// The late reply's schedule. The grader holds it until the client gives a sign: a
/// cancellation (it is never sent), the session's next request (it goes out then, after the
/// client gave up), or leaving (never sent). Every framework here gives one of those after its
/// 2 s timeout, so the events decide, never which of two timers fires first; the 30 s is only
/// the hold's end for a client that gives no sign at all, far past any run's own end.
const LATE: &str = "first@30s";
/// How long a long-lived host keeps the session open after the run, in seconds. The Vercel AI
/// SDK's host lists the tools as it starts to hold (see its agent.mjs), which releases the held
/// reply into the live session; the close comes after that by the order of the host's own steps.
const HOLD: &str = "1";
/// The bound on a run with a short timeout: only a guard against a hang. Every such run ends by
/// itself, in seconds on a quiet machine (a late reply's within its hold of 30 s), and no pinned
/// finding is a run the test ended; so the bound sits far past any run's own end. At 60 s, two
/// CI runs side by side with a load on every core and more (a load average of 15 to 25 on two
/// cores) saw runs of 45 to 60 s cut at the bound, and their findings drift from the pins.
const BOUND: Duration = Duration::from_secs(300);
/// How long a run with the framework's default timeout may go on once the grader has recorded
/// its lost reply: longer than the shortest default (openai-agents' 5 s), far shorter than the
/// minutes (or for ever) the others wait. Counted from that record, not from the start, so a
/// slow start on a loaded machine never changes how the run ends.
const DEFAULT_TIMEOUT_BOUND: Duration = Duration::from_secs(20);
/// How long the grader may take to write its report once the client is gone: a guard against a
/// grader that never writes one, which the test polls for. At 30 s, one of two loaded CI runs
/// side by side (a load average of 15 to 25 on two cores) failed here with the report on its way.
const REPORT_WAIT: Duration = Duration::from_secs(120);

/// What a framework's script runs on.
enum Runtime {
    /// The python of the venv this variable names.
    Venv(&'static str),
    /// Node, with `node_modules` in the framework's folder (npm ci).
    Node,
}

struct Framework {
    /// The folder in `lab/tests/agents/`, and the framework's name in the findings.
    name: &'static str,
    runtime: Runtime,
    /// The script in the folder.
    script: &'static str,
    /// The framework's documented retry option, as the script's SETTING takes it.
    retry_option: &'static str,
    /// The package whose version names the framework in the book's table.
    package: &'static str,
}

const PYDANTIC_AI: Framework = Framework {
    name: "pydantic-ai",
    runtime: Runtime::Venv("LAB_AGENTS_VENV_PYDANTIC_AI"),
    script: "agent.py",
    retry_option: "max_retries=0",
    package: "pydantic-ai-slim",
};

const OPENAI_AGENTS: Framework = Framework {
    name: "openai-agents",
    runtime: Runtime::Venv("LAB_AGENTS_VENV_OPENAI_AGENTS"),
    script: "agent.py",
    retry_option: "max_retry_attempts=1",
    package: "openai-agents",
};

const VERCEL_AI: Framework = Framework {
    name: "vercel-ai",
    runtime: Runtime::Node,
    script: "agent.mjs",
    retry_option: "maxRetries=2",
    package: "ai",
};

const LANGCHAIN_JS: Framework = Framework {
    name: "langchain-js",
    runtime: Runtime::Node,
    script: "agent.mjs",
    retry_option: "toolRetryMiddleware:maxRetries=1",
    package: "langchain",
};

/// Which replies the grader loses or holds back, and what the host does after the run.
#[derive(Clone, Copy)]
enum Schedule {
    /// The first call's reply is lost.
    Lost,
    /// The first call's reply is held until the client gives a sign; the host keeps the session
    /// open a while after the run.
    LateHeld,
    /// The first call's reply is held until the client gives a sign; the host closes the
    /// session when the run ends.
    LateClosed,
    /// The first call makes its ticket and is answered `in_progress`.
    InProgress,
    /// The first call makes its ticket, then the grader's process exits (over stdio, the
    /// connection drops).
    Dropped,
}

impl Schedule {
    fn name(self) -> &'static str {
        match self {
            Schedule::Lost => "lost reply",
            Schedule::LateHeld => "late reply, session kept open",
            Schedule::LateClosed => "late reply, session closed after the run",
            Schedule::InProgress => "in_progress answer",
            Schedule::Dropped => "connection dropped",
        }
    }

    fn grader_args(self) -> &'static [&'static str] {
        match self {
            Schedule::Lost => &["--lose-replies", "first"],
            Schedule::LateHeld | Schedule::LateClosed => {
                &["--lose-replies", "none", "--delay-replies", LATE]
            }
            Schedule::InProgress => &["--in-progress", "first"],
            Schedule::Dropped => &["--drop-connection", "first"],
        }
    }

    fn hold(self) -> &'static str {
        match self {
            Schedule::LateHeld => HOLD,
            Schedule::Lost | Schedule::LateClosed | Schedule::InProgress | Schedule::Dropped => "0",
        }
    }
}

const SCENARIOS: [&str; 3] = ["retry-same-key", "replan-new-key", "give-up"];

/// One run: the framework's setting, the client timeout, the schedule and the model's scenario.
struct Run {
    setting: &'static str,
    timeout: &'static str,
    schedule: Schedule,
    scenario: &'static str,
}

/// The schedules every scenario runs under, with the short timeout, in both settings.
const SCHEDULES: [Schedule; 4] = [
    Schedule::Lost,
    Schedule::LateHeld,
    Schedule::InProgress,
    Schedule::Dropped,
];

/// Every run of a framework: every schedule and every scenario with the short timeout, under
/// the default setting and the retry option; a late reply cut off by the close (give-up); and
/// the framework's default timeout under a lost reply.
fn runs(framework: &Framework) -> Vec<Run> {
    let mut runs = Vec::new();
    for setting in ["default", framework.retry_option] {
        for schedule in SCHEDULES {
            for scenario in SCENARIOS {
                runs.push(Run {
                    setting,
                    timeout: SHORT_TIMEOUT,
                    schedule,
                    scenario,
                });
            }
        }
    }
    runs.push(Run {
        setting: "default",
        timeout: SHORT_TIMEOUT,
        schedule: Schedule::LateClosed,
        scenario: "give-up",
    });
    runs.push(Run {
        setting: "default",
        timeout: "default",
        schedule: Schedule::Lost,
        scenario: "retry-same-key",
    });
    runs
}

fn stderr_line(line: &str) {
    // Past libtest's capture, so skips and per-run lines are seen.
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The program that runs the framework's script, or `None` after a loud skip; a failure under
/// `LAB_REQUIRE_AGENTS=1`.
fn program(test: &str, framework: &Framework, folder: &Path) -> Option<PathBuf> {
    let found = match framework.runtime {
        Runtime::Venv(variable) => std::env::var_os(variable)
            .filter(|venv| !venv.is_empty())
            .map(|venv| PathBuf::from(venv).join("bin/python"))
            .filter(|python| python.exists()),
        Runtime::Node => {
            let node = Command::new("node")
                .arg("--version")
                .output()
                .is_ok_and(|output| output.status.success());
            (node && folder.join("node_modules").is_dir()).then(|| PathBuf::from("node"))
        }
    };
    if found.is_some() {
        return found;
    }
    let what = match framework.runtime {
        Runtime::Venv(variable) => format!(
            "{variable} (a venv from lab/tests/agents/{}/requirements.txt)",
            framework.name
        ),
        Runtime::Node => format!("node, or npm ci in lab/tests/agents/{}", framework.name),
    };
    if std::env::var("LAB_REQUIRE_AGENTS").as_deref() == Ok("1") {
        panic!("LAB_REQUIRE_AGENTS=1, but {what} is missing (.ci/run installs it)");
    }
    stderr_line(&format!(
        "\n*** SKIPPED: {test}: no {what}; LAB_REQUIRE_AGENTS=1 makes this a failure ***\n"
    ));
    None
}

/// The grader's JSON report at `path`, once the grader has written it whole.
pub(crate) fn wait_for_report(path: &Path) -> Value {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(report) = serde_json::from_str::<Value>(&text)
        {
            return report;
        }
        assert!(
            started.elapsed() < REPORT_WAIT,
            "the grader wrote no report to {} within {REPORT_WAIT:?} of the client's end",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the script said on stdout: its versions, what the model saw, how many create_ticket
/// calls the model asked for, how the run ended.
struct Said {
    versions: Value,
    saw: Vec<String>,
    model_calls: usize,
    ended: Option<String>,
}

fn read_events(stdout: &str) -> Said {
    let mut said = Said {
        versions: Value::Null,
        saw: Vec::new(),
        model_calls: 0,
        ended: None,
    };
    for line in stdout.lines().filter(|line| line.starts_with('{')) {
        let event: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        match event["event"].as_str() {
            Some("start") => said.versions = event["versions"].clone(),
            Some("saw") => said.saw.push(event["what"].as_str().unwrap().to_owned()),
            Some("call") => said.model_calls += 1,
            Some("ended") => said.ended = Some(event["ended"].as_str().unwrap().to_owned()),
            _ => panic!("an event the test does not know: {line}"),
        }
    }
    said
}

/// Waits for the script to end by itself, or ends it: at [`BOUND`] from the start, or, where
/// `journal` is given, at [`DEFAULT_TIMEOUT_BOUND`] from the moment the grader recorded the
/// lost reply there. Only the script is signalled (SIGTERM, then SIGKILL 3 s later): the grader
/// it started sees its stdin close, as it would if the host died, and never a signal of its own,
/// so its report does not depend on which of the two it noticed first. Returns the exit status
/// and whether the test ended the run.
fn wait_or_end(
    child: &mut std::process::Child,
    journal: Option<&Path>,
) -> (std::process::ExitStatus, bool) {
    let started = Instant::now();
    let mut deadline = started + BOUND;
    let mut lost_at = None;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, false);
        }
        if let Some(journal) = journal
            && lost_at.is_none()
            && crate::mcp_grader::journal_call(journal, 1).is_some_and(|(fate, _)| fate == "lost")
        {
            let now = Instant::now();
            lost_at = Some(now);
            deadline = now + DEFAULT_TIMEOUT_BOUND;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let terminated = Instant::now();
    while terminated.elapsed() < Duration::from_secs(3) {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, true);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    (child.wait().unwrap(), true)
}

/// Runs one scenario and returns the script's versions and the run's findings record.
fn run_one(framework: &Framework, program: &Path, folder: &Path, run: &Run) -> (Value, Value) {
    let scratch = tempfile::tempdir().unwrap();
    let report_path = scratch.path().join("report.json");
    // A run with the framework's default timeout is ended by the test, so its grader keeps its
    // journal in a file the test reads: the lost reply's record starts that run's bound.
    let journal = (run.timeout == "default").then(|| scratch.path().join("journal.sqlite"));
    let started = Instant::now();
    let mut command = Command::new(program);
    command
        .arg(folder.join(framework.script))
        .args([LAB, run.scenario, run.timeout, run.setting])
        .args(run.schedule.grader_args());
    if let Some(journal) = &journal {
        command.arg("--database").arg(journal);
    }
    let mut child = command
        .arg("--json")
        .arg("--report")
        .arg(&report_path)
        .env("AGENT_HOLD_SECONDS", run.schedule.hold())
        .current_dir(scratch.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read on threads of their own, so that a full pipe never stalls the script.
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let (status, killed) = wait_or_end(&mut child, journal.as_deref());
    let elapsed = started.elapsed();
    // The grader may still hold the pipes until it has seen stdin close and written its report.
    let stdout = stdout.join().unwrap();
    let stderr = stderr.join().unwrap();
    assert!(
        status.success() || killed,
        "{} {} {}: the script failed ({status}):\n{stderr}",
        framework.name,
        run.setting,
        run.scenario,
    );
    let said = read_events(&stdout);
    let ended = match (&said.ended, killed) {
        (Some(ended), false) => ended.clone(),
        (_, true) if journal.is_some() => format!(
            "no answer: the test ended the run {} s after the grader lost the reply",
            DEFAULT_TIMEOUT_BOUND.as_secs()
        ),
        (_, true) => format!(
            "no answer: the test ended the run at its bound of {} s",
            BOUND.as_secs()
        ),
        (None, false) => panic!("the script exited 0 without an `ended` event:\n{stderr}"),
    };
    let report = wait_for_report(&report_path);
    let finding = finding(run, &ended, &said, &report);
    roles_agree_with_the_model(framework, run, &said, &report);
    stderr_line(&format!(
        "{} | {} | timeout {} | {} | {} | {:.1} s | {} | {}",
        framework.name,
        run.setting,
        run.timeout,
        run.schedule.name(),
        run.scenario,
        elapsed.as_secs_f64(),
        finding["verdict"].as_str().unwrap_or_default(),
        ended
    ));
    // The model's observations: captured by libtest, shown when the test fails.
    for line in stderr.lines() {
        println!("    {line}");
    }
    (said.versions, finding)
}

/// The findings record of one run: what the client did and what the grader made of it, a line
/// per recorded call and per intention, so that a drift reads as a short diff.
fn finding(run: &Run, ended: &str, said: &Said, report: &Value) -> Value {
    let saw = &said.saw;
    let text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        Value::Null => "none".to_owned(),
        other => other.to_string(),
    };
    let yes = |value: &Value| if value == true { "yes" } else { "no" };
    let received = |call: &Value| {
        if call["receipt_unknown"] == true {
            "unknown"
        } else {
            yes(&call["received"])
        }
    };
    let list = |value: &Value| {
        let items: Vec<String> = value.as_array().unwrap().iter().map(text).collect();
        if items.is_empty() {
            "none".to_owned()
        } else {
            items.join(", ")
        }
    };
    let recorded = report["recorded"].as_array().unwrap();
    let calls: Vec<String> = recorded
        .iter()
        .map(|call| {
            format!(
                "call {} ({}): key {}, reply {}, answer {} (ticket {}), received: {}, cancelled: {}",
                call["number"],
                text(&call["role"]),
                text(&call["operation_key"]),
                text(&call["fate"]),
                text(&call["answer"]),
                text(&call["ticket_id"]),
                received(call),
                yes(&call["cancelled"]),
            )
        })
        .collect();
    let same_arguments = recorded
        .windows(2)
        .all(|w| w[0]["fields"] == w[1]["fields"]);
    let intentions: Vec<String> = report["intentions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|intention| {
            let replan = match intention["possible_replan_of"].as_u64() {
                Some(earlier) => format!(" (possibly a re-plan of intention {earlier})"),
                None => String::new(),
            };
            format!(
                "intention {}{replan}: calls {}; keys {}; arguments {}; tickets {}; {}: {}",
                intention["number"],
                list(&intention["calls"]),
                list(&intention["keys"]),
                if intention["same_arguments"] == true {
                    "the same"
                } else {
                    "changed"
                },
                list(&intention["tickets"]),
                text(&intention["verdict"]),
                text(&intention["reason"]),
            )
        })
        .collect();
    // What the model was told, by kind; the texts are in the test's stderr and the README (some
    // carry a timer's wording that races between two equal timeouts).
    let model_saw: Vec<&str> = saw
        .iter()
        .map(|what| what.split(':').next().unwrap_or_default())
        .collect();
    json!({
        "setting": run.setting,
        "client_timeout": if run.timeout == "default" { "default".to_owned() } else { format!("{} s", run.timeout) },
        "schedule": run.schedule.name(),
        "grader_args": run.schedule.grader_args().join(" "),
        "scenario": run.scenario,
        "ended": ended,
        "model_saw": model_saw.join(", "),
        "model_asked_for": said.model_calls,
        "calls": calls,
        "same_arguments": same_arguments,
        "sessions": report["sessions"],
        "clients": list(&report["clients"]),
        "tickets_in_store": report["tickets_in_store"],
        "intentions": intentions,
        "verdict": report["verdict"],
    })
}

/// The grader's roles, held against what the scripted model knows: every call the framework
/// sent beyond the ones the model asked for is its own resend, and the grader, seeing the
/// same bytes again with nothing between, must say `resend` (never `retry` or `re-plan`);
/// a call the model asked for with a new key is a `re-plan`. (The other way does not hold,
/// and the report says so: a model that repeats a call word for word with no request between
/// looks like a resend.)
fn roles_agree_with_the_model(framework: &Framework, run: &Run, said: &Said, report: &Value) {
    let recorded = report["recorded"].as_array().unwrap();
    let roles: Vec<&str> = recorded
        .iter()
        .map(|call| call["role"].as_str().unwrap())
        .collect();
    let count = |role: &str| roles.iter().filter(|r| **r == role).count();
    let by_framework = recorded.len().saturating_sub(said.model_calls);
    let context = format!(
        "{} {} {} {}: the model asked for {} call(s), the grader saw {roles:?}",
        framework.name,
        run.setting,
        run.schedule.name(),
        run.scenario,
        said.model_calls
    );
    assert!(count("resend") >= by_framework, "{context}");
    let new_keys = recorded
        .iter()
        .filter_map(|call| call["operation_key"].as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert_eq!(count("re-plan"), new_keys.saturating_sub(1), "{context}");
}

/// Runs every scenario of `framework` and compares the findings with its `findings.json`;
/// `LAB_WRITE_FINDINGS=1` rewrites that file first.
fn check_framework(test: &str, framework: &Framework) {
    let folder = repository_root()
        .join("lab/tests/agents")
        .join(framework.name);
    let Some(program) = program(test, framework, &folder) else {
        return;
    };
    let mut versions = Value::Null;
    let mut found_runs = Vec::new();
    for run in runs(framework) {
        let (said, finding) = run_one(framework, &program, &folder, &run);
        assert!(
            !finding["calls"].as_array().unwrap().is_empty(),
            "{}: the scripted model never reached create_ticket: {finding:#}",
            framework.name
        );
        if versions.is_null() {
            versions = said;
        }
        found_runs.push(finding);
    }
    let found = json!({
        "framework": framework.name,
        "versions": versions,
        "runs": found_runs,
    });
    compare_with_the_pinned_findings(&found, &folder.join("findings.json"));
    compare_with_the_book(&book_rows(framework, &found), framework.name);
}

/// The framework's rows of the book's table "Which agent loops keep the key", from its runs:
/// for each setting and client timeout, the verdicts under each of [`SCHEDULES`] (a lost reply,
/// a late one with the session kept open, an `in_progress` answer, a dropped connection), for
/// the model's three scenarios in order (retry with the key,
/// re-plan with a new key, give up); a scenario a setting did not run is "not run".
fn book_rows(framework: &Framework, found: &Value) -> String {
    let version = found["versions"][framework.package]
        .as_str()
        .unwrap_or("(no version)");
    let runs = found["runs"].as_array().unwrap();
    let mut settings: Vec<(String, String)> = Vec::new();
    for run in runs {
        let setting = (
            run["setting"].as_str().unwrap().to_owned(),
            run["client_timeout"].as_str().unwrap().to_owned(),
        );
        if !settings.contains(&setting) {
            settings.push(setting);
        }
    }
    let verdicts = |(setting, timeout): &(String, String), schedule: Schedule| {
        let cells: Vec<String> = SCENARIOS
            .iter()
            .map(|scenario| {
                runs.iter()
                    .find(|r| {
                        r["setting"] == setting.as_str()
                            && r["client_timeout"] == timeout.as_str()
                            && r["schedule"] == schedule.name()
                            && r["scenario"] == *scenario
                    })
                    .map_or("not run".to_owned(), |r| {
                        r["verdict"].as_str().unwrap().replace('_', " ")
                    })
            })
            .collect();
        if cells.iter().all(|c| c == "not run") {
            "not run".to_owned()
        } else {
            cells.join(" / ")
        }
    };
    let rows: Vec<String> = settings
        .iter()
        .enumerate()
        .map(|(index, setting)| {
            // The framework and its version head its first row only.
            let named = if index == 0 {
                format!("{} {version}", framework.name)
            } else {
                String::new()
            };
            let timeout = if setting.1 == "default" {
                "its default timeout".to_owned()
            } else {
                format!("a {} timeout", setting.1)
            };
            let cells: Vec<String> = SCHEDULES
                .iter()
                .map(|schedule| verdicts(setting, *schedule))
                .collect();
            format!(
                "| {named} | `{}`, {timeout} | {} |",
                setting.0,
                cells.join(" | ")
            )
        })
        .collect();
    // No line break at the end: the chapter includes the files one under another, and a blank
    // line would end its table.
    rows.join("\n")
}

/// Compares the framework's rows with `src/mcp/agents-NAME.md`; `LAB_BLESS=1` rewrites it.
fn compare_with_the_book(rows: &str, name: &str) {
    let path = repository_root().join(format!("src/mcp/agents-{name}.md"));
    if std::env::var("LAB_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, rows).unwrap();
    }
    let shown = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        shown,
        rows,
        "{} differs from the run; rerun with LAB_BLESS=1 and review the diff",
        path.display()
    );
}

/// Compares `found` with the pinned file run by run, naming the first run that drifted.
fn compare_with_the_pinned_findings(found: &Value, pinned_path: &Path) {
    let pinned = crate::check_mcp::pinned_findings(found, pinned_path);
    let advice = format!(
        "this run drifted from {}; after a deliberate change (a new version, a grader change) \
         rerun with LAB_WRITE_FINDINGS=1 and review the diff",
        pinned_path.display()
    );
    assert_eq!(found["versions"], pinned["versions"], "{advice}");
    let (runs, pinned_runs) = (
        found["runs"].as_array().unwrap(),
        pinned["runs"].as_array().unwrap(),
    );
    let pretty = |value: &Value| serde_json::to_string_pretty(value).unwrap();
    for (run, pinned_run) in runs.iter().zip(pinned_runs) {
        assert!(
            run == pinned_run,
            "{}, {}, {}, {}: {advice}\nthis run:\n{}\npinned:\n{}",
            run["setting"],
            run["client_timeout"],
            run["schedule"],
            run["scenario"],
            pretty(run),
            pretty(pinned_run)
        );
    }
    assert!(
        found == &pinned,
        "{advice}\nthis run:\n{}\npinned:\n{}",
        pretty(found),
        pretty(&pinned)
    );
}

#[test]
fn pydantic_ai_keeps_its_pinned_findings_under_every_fault_schedule() {
    check_framework(
        "agents::pydantic_ai_keeps_its_pinned_findings",
        &PYDANTIC_AI,
    );
}

#[test]
fn openai_agents_keeps_its_pinned_findings_under_every_fault_schedule() {
    check_framework(
        "agents::openai_agents_keeps_its_pinned_findings",
        &OPENAI_AGENTS,
    );
}

#[test]
fn the_vercel_ai_sdk_keeps_its_pinned_findings_under_every_fault_schedule() {
    check_framework(
        "agents::the_vercel_ai_sdk_keeps_its_pinned_findings",
        &VERCEL_AI,
    );
}

#[test]
fn langchain_js_keeps_its_pinned_findings_under_every_fault_schedule() {
    check_framework(
        "agents::langchain_js_keeps_its_pinned_findings",
        &LANGCHAIN_JS,
    );
}
