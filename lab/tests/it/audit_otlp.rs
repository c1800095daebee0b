//! `lab audit` over a real agent framework's OpenTelemetry trace, held to what the grader's store
//! says happened. pydantic-ai, with its instrumentation on and the OpenTelemetry SDK exporting
//! OTLP JSON lines, drives `lab mcp --grade-client` (a scripted model, no network) under a lost
//! reply and an `in_progress` answer; its trace is then audited with an `[mcp]` target file. An
//! intention the store shows with two tickets must be a finding that cites its spans, or NOT
//! COVERED naming them with the reason the trace cannot decide it; an intention with one ticket
//! must never be a finding. The script and its pins are in `lab/tests/audit/otlp/` (see its
//! README).
//!
//! Without `LAB_AUDIT_VENV_OTLP` (a venv from that folder's requirements.txt) the tests are a loud
//! skip, and a failure under `LAB_REQUIRE_AUDIT=1` (as `.ci/run` sets it).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::serde_json::{self, Value};

use crate::repository_root;

const LAB: &str = env!("CARGO_BIN_EXE_lab");

/// The client's timeout per tool call, in seconds: short, so a lost reply is a failed call soon.
const CLIENT_TIMEOUT: &str = "2";

/// The bound on one run of the script: only a guard against a hang. A run ends by itself in a
/// few seconds (one timeout of 2 s and two quick calls); the bound sits far past that, as in
/// `agents.rs`, so a loaded machine never reaches it.
const BOUND: Duration = Duration::from_secs(300);

/// The audit's target file for `lab mcp`'s tool: the key in `operation_key`, the ticket at
/// `/ticket_id` of the structured result. The audit reads only the tool, its key argument and
/// the identity; the command is never started.
const TARGET: &str = r#"
[mcp]
transport = "stdio"
command = ["lab", "mcp"]

[mcp.tool]
name = "create_ticket"
key_argument = "operation_key"
arguments = { title = "{{title}}", priority = "{{priority}}" }
fields = { title = "Printer on fire", priority = "urgent" }

[mcp.identity]
structured_pointer = "/ticket_id"
"#;

/// The faults each scenario runs under: the first call's ticket is made, then its reply is lost
/// (the client times out), or it is answered `in_progress` (an error result).
const FAULTS: [(&str, &[&str]); 2] = [
    ("lost reply", &["--lose-replies", "first"]),
    ("in_progress answer", &["--in-progress", "first"]),
];

/// Why the audit cannot decide a re-plan whose first call's reply never brought a ticket (the
/// judgement's own words).
const FIRST_EFFECT_UNREADABLE: &str = "the first request's reply is not in the recording (or was a \
                                       server error): whether it made an effect cannot be read";

/// The venv's python, or `None` after a loud skip; a failure under `LAB_REQUIRE_AUDIT=1`.
fn python(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("LAB_AUDIT_VENV_OTLP")
        .filter(|venv| !venv.is_empty())
        .map(|venv| PathBuf::from(venv).join("bin/python"))
        .filter(|python| python.exists());
    if found.is_none() {
        let what = "LAB_AUDIT_VENV_OTLP (a venv from lab/tests/audit/otlp/requirements.txt)";
        if std::env::var("LAB_REQUIRE_AUDIT").as_deref() == Ok("1") {
            panic!("LAB_REQUIRE_AUDIT=1, but {what} is missing (.ci/run installs it)");
        }
        // Past libtest's capture, so the skip is seen.
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: {test}: no {what}; LAB_REQUIRE_AUDIT=1 makes this a failure ***\n"
        );
    }
    found
}

/// The script's process, killed if the test ends first (a panic, the bound).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// A span of pydantic-ai's for one `create_ticket` call, read from the trace by this test (not
/// by the audit's reader).
struct ToolSpan {
    id: String,
    start: u128,
    arguments: Value,
    /// The result recorded on the span, if any.
    result: Option<String>,
    /// Whether the span's status is an error.
    failed: bool,
}

impl ToolSpan {
    fn key(&self) -> &str {
        self.arguments["operation_key"].as_str().unwrap_or_default()
    }

    /// The ticket the span's result names, if it names one.
    fn ticket(&self) -> Option<String> {
        let result: Value = serde_json::from_str(self.result.as_deref()?).ok()?;
        Some(result.get("ticket_id")?.to_string())
    }
}

/// pydantic-ai's spans of `create_ticket` calls in the trace, in the order they started: the
/// spans with `gen_ai.tool.name` and no `mcp.method.name` (the MCP client's own spans of the
/// same calls have that, inside them). Every span and trace id is checked to be hex, as OTLP
/// JSON has them.
fn tool_spans(trace: &Path) -> Vec<ToolSpan> {
    let text = std::fs::read_to_string(trace).unwrap();
    let mut spans = Vec::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let request: Value = serde_json::from_str(line).unwrap();
        for resource in request["resourceSpans"].as_array().unwrap() {
            for scope in resource["scopeSpans"].as_array().unwrap() {
                for span in scope["spans"].as_array().unwrap() {
                    for (field, length) in [("traceId", 32), ("spanId", 16)] {
                        let id = span[field].as_str().unwrap_or_default();
                        assert!(
                            id.len() == length && id.bytes().all(|b| b.is_ascii_hexdigit()),
                            "{field} {id:?} is not hex: {span}"
                        );
                    }
                    let attribute = |name: &str| {
                        span["attributes"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|a| a["key"] == name)
                            .and_then(|a| a["value"]["stringValue"].as_str())
                            .map(str::to_owned)
                    };
                    if attribute("gen_ai.tool.name").as_deref() != Some("create_ticket")
                        || attribute("mcp.method.name").is_some()
                    {
                        continue;
                    }
                    let arguments = attribute("gen_ai.tool.call.arguments")
                        .unwrap_or_else(|| panic!("a tool span without its arguments: {span}"));
                    spans.push(ToolSpan {
                        id: span["spanId"].as_str().unwrap().to_owned(),
                        start: span["startTimeUnixNano"].as_str().unwrap().parse().unwrap(),
                        arguments: serde_json::from_str(&arguments).unwrap(),
                        result: attribute("gen_ai.tool.call.result"),
                        failed: span["status"]["code"] == 2,
                    });
                }
            }
        }
    }
    spans.sort_by_key(|span| span.start);
    spans
}

/// One run: the grader's report (the store), the trace's tool spans, and the audit of the trace.
struct Run {
    context: String,
    store: Value,
    spans: Vec<ToolSpan>,
    audit: Value,
    audit_exit: Option<i32>,
    _scratch: tempfile::TempDir,
}

impl Run {
    fn point(&self, name: &str) -> &Value {
        self.audit["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{}: no point {name}", self.context))
    }

    /// The span id a cited exchange names (its step is `trace.jsonl span ID`).
    fn cited_span(&self, exchange: &Value) -> String {
        let step = self.audit["history"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == *exchange)
            .and_then(|e| e["step"].as_str())
            .unwrap_or_else(|| panic!("{}: exchange {exchange} not in the history", self.context));
        step.strip_prefix("trace.jsonl span ")
            .unwrap_or_else(|| panic!("{}: a step that is no span: {step}", self.context))
            .to_owned()
    }

    /// Every check of every point with the spans it cites: (point, check, spans).
    fn checks(&self) -> Vec<(String, Value, BTreeSet<String>)> {
        let mut checks = Vec::new();
        for point in self.audit["points"].as_array().unwrap() {
            for check in point["checks"].as_array().unwrap() {
                let spans = check["exchanges"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| self.cited_span(e))
                    .collect();
                checks.push((
                    point["name"].as_str().unwrap().to_owned(),
                    check.clone(),
                    spans,
                ));
            }
        }
        checks
    }

    /// The span of the grader's call `number` (1 is the first): the agent's calls and the
    /// grader's are one sequence, checked in [`Run::spans_are_the_graders_calls`].
    fn span_of_call(&self, number: &Value) -> &str {
        let index = usize::try_from(number.as_u64().unwrap() - 1).unwrap();
        &self.spans[index].id
    }
}

/// Runs the script for `scenario` under `fault`, reads the grader's report and the trace, and
/// audits the trace.
fn run(python: &Path, scenario: &str, (fault, grader_args): (&str, &[&str])) -> Run {
    let context = format!("{scenario} under a {fault}");
    let scratch = tempfile::tempdir().unwrap();
    let trace = scratch.path().join("trace.jsonl");
    let report = scratch.path().join("report.json");
    let stdout = std::fs::File::create(scratch.path().join("stdout")).unwrap();
    let stderr = std::fs::File::create(scratch.path().join("stderr")).unwrap();
    let script = repository_root().join("lab/tests/audit/otlp/agent.py");
    let mut running = Running(
        Command::new(python)
            .arg(&script)
            .arg(&trace)
            .args([LAB, scenario, CLIENT_TIMEOUT])
            .args(grader_args)
            .arg("--json")
            .arg("--report")
            .arg(&report)
            .current_dir(scratch.path())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = running.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < BOUND,
            "{context}: the script still ran after {BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let said = std::fs::read_to_string(scratch.path().join("stdout")).unwrap();
    let observed = std::fs::read_to_string(scratch.path().join("stderr")).unwrap();
    assert!(
        status.success(),
        "{context}: the script failed ({status}):\n{observed}"
    );
    // The model was shown a ticket in the end (or, giving up, none): the run went as scripted.
    let ended = if scenario == "give-up" {
        r#""ended": "answered: "#
    } else {
        r#""ended": "answered: done: the ticket was created""#
    };
    assert!(
        said.contains(ended),
        "{context}: the run did not end as scripted:\n{said}\n{observed}"
    );
    let store = crate::agents::wait_for_report(&report);
    let spans = tool_spans(&trace);
    let target = scratch.path().join("target.toml");
    std::fs::write(&target, TARGET).unwrap();
    let output = Command::new(LAB)
        .current_dir(scratch.path())
        .args(["audit", "--json", "--target"])
        .arg(&target)
        .arg(&trace)
        .output()
        .unwrap();
    let audit: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "{context}: the audit printed no JSON report ({err}):\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    println!("{context}: the model saw:\n{observed}");
    Run {
        context,
        store,
        spans,
        audit,
        audit_exit: output.status.code(),
        _scratch: scratch,
    }
}

/// The trace's tool spans are the grader's calls, one for one and in order: the same key and
/// arguments; a call whose reply the grader says reached the client names its ticket on its
/// span, and one whose reply did not ended in an error naming none. So each span stands for a
/// call whose effect the store knows.
fn spans_are_the_graders_calls(run: &Run) {
    let recorded = run.store["recorded"].as_array().unwrap();
    assert_eq!(
        run.spans.len(),
        recorded.len(),
        "{}: the trace holds {} create_ticket spans, the grader recorded {} calls",
        run.context,
        run.spans.len(),
        recorded.len()
    );
    for (span, call) in run.spans.iter().zip(recorded) {
        let context = format!(
            "{}: span {} and call {}",
            run.context, span.id, call["number"]
        );
        assert_eq!(span.key(), call["operation_key"], "{context}");
        let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(span.arguments, arguments, "{context}");
        if call["received"] == true {
            assert!(!span.failed, "{context}");
            assert_eq!(
                span.ticket().as_deref(),
                call["ticket_id"].as_str(),
                "{context}"
            );
        } else {
            assert!(span.failed, "{context}: {:?}", span.result);
            assert_eq!(span.ticket(), None, "{context}");
        }
    }
    // The audit read the same calls, and nothing else as a create (not the MCP client's spans
    // of the same calls).
    let read = &run.audit["calibration"]["steps"][0]["detail"];
    let expected = format!(
        "{} exchange{}, {} of them creates",
        recorded.len(),
        if recorded.len() == 1 { "" } else { "s" },
        recorded.len()
    );
    assert!(
        read.as_str().unwrap_or_default().contains(&expected),
        "{}: expected {expected:?} in the audit's read step, got {read}",
        run.context
    );
}

/// Holds every finding of the audit to the store: an intention with one ticket is cited by no
/// finding; one with two or more is cited by a finding over its spans (two of them at least) or
/// by a NOT COVERED check naming one of them. Returns, per intention number, whether the audit
/// found it (`Some(true)`), said it cannot decide it (`Some(false)`), or neither (`None`, for
/// one ticket). The exit status says whether anything was found.
fn findings_agree_with_the_store(run: &Run) -> BTreeMap<u64, Option<bool>> {
    let checks = run.checks();
    // A finding over spans that are none of the calls the store recorded is invented outright.
    let calls: BTreeSet<&str> = run.spans.iter().map(|span| span.id.as_str()).collect();
    for (point, check, cited) in &checks {
        assert!(
            cited.iter().all(|span| calls.contains(span.as_str())),
            "{}: {point} cites spans {cited:?}, but the store's calls are {calls:?}: {check:#}",
            run.context
        );
    }
    let mut verdicts = BTreeMap::new();
    for intention in run.store["intentions"].as_array().unwrap() {
        let number = intention["number"].as_u64().unwrap();
        let spans: BTreeSet<String> = intention["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|call| run.span_of_call(call).to_owned())
            .collect();
        let tickets = intention["tickets"].as_array().unwrap().len();
        let context = format!(
            "{}: intention {number} ({tickets} ticket(s) in the store, spans {spans:?})",
            run.context
        );
        let found = checks.iter().any(|(_, check, cited)| {
            check["passed"] == false
                && check["not_covered"].is_null()
                && cited.is_subset(&spans)
                && cited.len() >= 2
        });
        let undecided = checks.iter().any(|(_, check, cited)| {
            check["not_covered"].is_string() && !cited.is_disjoint(&spans)
        });
        let invented: Vec<&(String, Value, BTreeSet<String>)> = checks
            .iter()
            .filter(|(_, check, cited)| {
                check["passed"] == false
                    && check["not_covered"].is_null()
                    && !cited.is_disjoint(&spans)
            })
            .collect();
        if tickets >= 2 {
            assert!(
                found || undecided,
                "{context}: two tickets, and the audit neither found it nor said it cannot \
                 decide it: {:#}",
                run.audit["points"]
            );
            verdicts.insert(number, Some(found));
        } else {
            assert!(
                invented.is_empty(),
                "{context}: one ticket, and the audit found {invented:#?}"
            );
            verdicts.insert(number, None);
        }
    }
    let any_finding = checks
        .iter()
        .any(|(_, check, _)| check["passed"] == false && check["not_covered"].is_null());
    assert_eq!(
        run.audit_exit,
        Some(if any_finding { 1 } else { 0 }),
        "{}",
        run.context
    );
    verdicts
}

#[test]
fn a_pydantic_ai_retry_with_its_key_holds_one_ticket_in_the_store_and_no_finding_in_its_trace() {
    let test = "audit_otlp::a_pydantic_ai_retry_with_its_key_holds_one_ticket";
    let Some(python) = python(test) else { return };
    for fault in FAULTS {
        let run = run(&python, "retry-same-key", fault);
        if fault == FAULTS[0] {
            crate::audit::show_in_the_book(&run.audit, "otlp-retry.txt");
        }
        // The store: one intention, one ticket, and the grader's PASS.
        let intentions = run.store["intentions"].as_array().unwrap();
        assert_eq!(intentions.len(), 1, "{}", run.context);
        assert_eq!(intentions[0]["tickets"].as_array().unwrap().len(), 1);
        assert_eq!(run.store["verdict"], "PASS", "{}", run.context);
        spans_are_the_graders_calls(&run);
        assert_eq!(
            findings_agree_with_the_store(&run),
            BTreeMap::from([(1, None)]),
            "{}",
            run.context
        );
        // The key's one success is judged, and its effect is the store's ticket (the last
        // span's, checked against the store above).
        assert_eq!(run.point("one-key-one-effect")["verdict"], "PASS");
        assert!(run.spans.len() >= 2, "{}: no retry", run.context);
        assert!(
            run.spans
                .iter()
                .all(|span| span.key() == run.spans[0].key()),
            "{}",
            run.context
        );
        // Nothing was re-planned or sent without its key.
        for point in ["retry-without-key", "new-key-after-lost-reply"] {
            assert_eq!(
                run.point(point)["verdict"],
                "NOT_COVERED",
                "{}: {point}",
                run.context
            );
            assert!(run.point(point)["checks"].as_array().unwrap().is_empty());
        }
        assert_eq!(run.audit_exit, Some(0), "{}", run.context);
    }
}

#[test]
fn a_pydantic_ai_re_plan_under_a_new_key_is_two_tickets_in_the_store_and_not_covered_by_its_trace()
{
    let test = "audit_otlp::a_pydantic_ai_re_plan_under_a_new_key_is_two_tickets";
    let Some(python) = python(test) else { return };
    for fault in FAULTS {
        let run = run(&python, "replan-new-key", fault);
        if fault == FAULTS[0] {
            crate::audit::show_in_the_book(&run.audit, "otlp-replan.txt");
        }
        // The store: one intention, two tickets (the first call's, whose reply never brought
        // it, and the re-plan's), and the grader's FAIL.
        let intentions = run.store["intentions"].as_array().unwrap();
        assert_eq!(intentions.len(), 1, "{}", run.context);
        assert_eq!(intentions[0]["tickets"].as_array().unwrap().len(), 2);
        assert_eq!(run.store["verdict"], "FAIL", "{}", run.context);
        spans_are_the_graders_calls(&run);
        // The trace cannot decide it, and the audit says so rather than guess. The first call's
        // ticket is in the store only: its reply never reached the client (lost), or was an
        // error result with no ticket in it (in_progress), so its span holds the text
        // pydantic-ai showed the model (the timeout, or the refusal) and no ticket id. A
        // client's trace cannot show an effect whose reply it never got: from the trace, the
        // re-plan's ticket may be the first or the second. (A recorder between the two that
        // keeps the service's answer to the lost reply, as `lab proxy --record` does, shows
        // both tickets, and then the re-plan is a finding: audit.rs shows that one.)
        assert_eq!(
            findings_agree_with_the_store(&run),
            BTreeMap::from([(1, Some(false))]),
            "{}",
            run.context
        );
        let point = run.point("new-key-after-lost-reply");
        assert_eq!(point["verdict"], "NOT_COVERED", "{}", run.context);
        let checks = point["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 1, "{}: {point:#}", run.context);
        assert_eq!(checks[0]["not_covered"], FIRST_EFFECT_UNREADABLE);
        // It names the re-plan: the grader's call under the new key.
        let recorded = run.store["recorded"].as_array().unwrap();
        let replan = recorded
            .iter()
            .find(|call| call["role"] == "re-plan")
            .unwrap_or_else(|| panic!("{}: no re-plan recorded", run.context));
        let cited: Vec<String> = checks[0]["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| run.cited_span(e))
            .collect();
        assert_eq!(cited, [run.span_of_call(&replan["number"])]);
        assert_ne!(run.spans[0].key(), run.spans[1].key());
        assert_eq!(run.audit_exit, Some(0), "{}", run.context);
    }
}

#[test]
fn a_pydantic_ai_call_whose_reply_never_came_and_that_it_never_asked_again_is_unresolved_as_the_grader_says()
 {
    let test = "audit_otlp::a_pydantic_ai_call_whose_reply_never_came";
    let Some(python) = python(test) else { return };
    // Under the lost reply: the ticket is made, the reply never comes, and the agent answers in
    // text instead of calling again. The store holds a ticket nobody was told of.
    let run = run(&python, "give-up", FAULTS[0]);
    crate::audit::show_in_the_book(&run.audit, "otlp-give-up.txt");
    let intentions = run.store["intentions"].as_array().unwrap();
    assert_eq!(intentions.len(), 1, "{}", run.context);
    assert_eq!(intentions[0]["tickets"].as_array().unwrap().len(), 1);
    assert_eq!(run.store["verdict"], "UNRESOLVED", "{}", run.context);
    spans_are_the_graders_calls(&run);
    assert_eq!(run.spans.len(), 1, "{}", run.context);
    // pydantic-ai's own span of the call ends in an error with the timeout's text as its
    // result, which alone could be a reply; the MCP client's span inside it says the request
    // timed out. So the audit reads a reply that never came, never asked for again.
    let point = run.point("unresolved-intention");
    assert_eq!(point["verdict"], "FAIL", "{}: {point:#}", run.context);
    let failed: Vec<&Value> = point["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|check| check["passed"] == false && check["not_covered"].is_null())
        .collect();
    assert_eq!(failed.len(), 1, "{}: {point:#}", run.context);
    let cited: Vec<String> = failed[0]["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| run.cited_span(e))
        .collect();
    assert_eq!(cited, [run.spans[0].id.clone()], "{}", run.context);
    for other in [
        "retry-without-key",
        "new-key-after-lost-reply",
        "changed-payload",
        "one-key-one-effect",
    ] {
        assert_ne!(
            run.point(other)["verdict"],
            "FAIL",
            "{}: {other}",
            run.context
        );
    }
    assert_eq!(run.audit_exit, Some(1), "{}", run.context);
}
