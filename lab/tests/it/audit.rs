//! `lab audit` over recordings built here, one finding at a time: each test holds the audit to
//! what the recording shows, so a finding missed fails it and a finding invented fails its twin
//! (the same traffic made safe). Recordings of third-party software are in `audit_har.rs` and `audit_otlp.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lab::serde_json::{Value, json};

const LAB: &str = env!("CARGO_BIN_EXE_lab");

/// The target file of these tests: `POST /tickets`, `Idempotency-Key` read as the draft's
/// sf-string, the ticket at `/id`, two callers by their bearer tokens.
const TARGET: &str = r#"
[create]
method = "POST"
path = "/tickets"

[key]
header = "Idempotency-Key"

[identity]
json_pointer = "/id"

[[callers]]
name = "alice"
headers = { Authorization = "Bearer token-a" }

[[callers]]
name = "bob"
headers = { Authorization = "Bearer token-b" }
"#;

/// One recorded create for a HAR.
struct Call {
    /// Seconds after the recording's start.
    at: f64,
    /// Milliseconds it took.
    took: f64,
    token: &'static str,
    key: Option<&'static str>,
    title: &'static str,
    /// The status and the id the reply named; `None`: no reply reached the caller.
    reply: Option<(u16, Option<&'static str>)>,
}

fn call(at: f64, key: Option<&'static str>, title: &'static str) -> Call {
    Call {
        at,
        took: 20.0,
        token: "token-a",
        key,
        title,
        reply: None,
    }
}

impl Call {
    fn answered(mut self, status: u16, id: Option<&'static str>) -> Call {
        self.reply = Some((status, id));
        self
    }
    fn by(mut self, token: &'static str) -> Call {
        self.token = token;
        self
    }
    fn took(mut self, ms: f64) -> Call {
        self.took = ms;
        self
    }
}

fn har(calls: &[Call]) -> Value {
    let entries: Vec<Value> = calls
        .iter()
        .map(|c| {
            let mut headers = vec![
                json!({"name": "Content-Type", "value": "application/json"}),
                json!({"name": "Authorization", "value": format!("Bearer {}", c.token)}),
            ];
            if let Some(key) = c.key {
                headers.push(json!({"name": "Idempotency-Key", "value": format!("\"{key}\"")}));
            }
            let millis = (c.at * 1000.0).round() as u64;
            let response = match c.reply {
                None => json!({"status": 0, "statusText": "", "headers": [], "content": {"size": 0, "mimeType": "x-unknown"}, "_error": "net::ERR_EMPTY_RESPONSE"}),
                Some((status, id)) => {
                    let body = match id {
                        Some(id) => json!({"id": id, "title": c.title}),
                        None => json!({"error": "refused"}),
                    };
                    json!({"status": status, "statusText": "", "headers": [{"name": "Content-Type", "value": "application/json"}],
                           "content": {"size": 10, "mimeType": "application/json", "text": body.to_string()}})
                }
            };
            json!({
                "startedDateTime": format!("2026-12-07T10:{:02}:{:02}.{:03}Z", millis / 60_000, millis / 1000 % 60, millis % 1000),
                "time": c.took,
                "request": {"method": "POST", "url": "http://127.0.0.1:8000/tickets", "httpVersion": "HTTP/1.1",
                            "headers": headers, "queryString": [], "cookies": [], "headersSize": -1, "bodySize": 20,
                            "postData": {"mimeType": "application/json", "text": json!({"title": c.title}).to_string()}},
                "response": response,
                "cache": {}, "timings": {"send": 0, "wait": c.took, "receive": 0}
            })
        })
        .collect();
    json!({"log": {"version": "1.2", "creator": {"name": "tests", "version": "1"}, "entries": entries}})
}

struct Audit {
    output: Output,
    report: Value,
}

impl Audit {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    /// The verdict of `point`.
    fn verdict(&self, point: &str) -> String {
        self.report["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == point)
            .unwrap_or_else(|| panic!("no point {point}: {}", self.report))["verdict"]
            .as_str()
            .unwrap()
            .to_owned()
    }
    /// The exchanges the failed sub-checks of `point` cite, as the recording places them.
    fn cited(&self, point: &str) -> Vec<String> {
        let point = self.report["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == point)
            .unwrap();
        let mut places = Vec::new();
        for check in point["checks"].as_array().unwrap() {
            if check["passed"] == false && check["not_covered"].is_null() {
                for id in check["exchanges"].as_array().unwrap() {
                    let exchange = self.report["history"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|e| e["id"] == *id)
                        .unwrap();
                    places.push(exchange["step"].as_str().unwrap().to_owned());
                }
            }
        }
        places
    }
}

fn audit_files(
    target: &str,
    files: &[(&str, String)],
    extra: &[&str],
) -> (Audit, tempfile::TempDir) {
    let folder = tempfile::tempdir().unwrap();
    let target_path = folder.path().join("target.toml");
    std::fs::write(&target_path, target).unwrap();
    let mut command = Command::new(LAB);
    command
        .arg("audit")
        .arg("--target")
        .arg(&target_path)
        .arg("--json");
    for arg in extra {
        command.arg(arg.replace("{dir}", &folder.path().display().to_string()));
    }
    for (name, content) in files {
        let path = folder.path().join(name);
        std::fs::write(&path, content).unwrap();
        command.arg(path);
    }
    let output = command.output().unwrap();
    let report = lab::serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (Audit { output, report }, folder)
}

fn audit(calls: &[Call]) -> Audit {
    audit_files(TARGET, &[("traffic.har", har(calls).to_string())], &[]).0
}

fn assert_exit(audit: &Audit, code: i32) {
    assert_eq!(
        audit.output.status.code(),
        Some(code),
        "{}\n{}",
        audit.text(),
        String::from_utf8_lossy(&audit.output.stderr)
    );
}

/// A `lab proxy --record` file of `calls`: a call without a `reply` is one whose reply the proxy
/// lost after the service answered it `lost_as` (the status and id the service gave).
fn proxy_record(calls: &[(Call, Option<(u16, &'static str)>)]) -> String {
    let mut lines = vec![
        json!({"format": "lab-proxy-record", "version": 1, "upstream": "http://127.0.0.1:8000"})
            .to_string(),
    ];
    for (n, (c, lost_as)) in calls.iter().enumerate() {
        let mut headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            (
                "authorization".to_owned(),
                lab::http::record::redacted(&format!("Bearer {}", c.token)),
            ),
        ];
        if let Some(key) = c.key {
            headers.push(("idempotency-key".to_owned(), format!("\"{key}\"")));
        }
        let (fate, (status, id)) = match (c.reply, lost_as) {
            (Some((status, id)), _) => ("answered", (status, id)),
            (None, Some((status, id))) => ("lost", (*status, Some(*id))),
            (None, None) => ("failed", (502, None)),
        };
        let millis = (c.at * 1000.0).round() as u64;
        lines.push(
            json!({
                "n": n + 1,
                "started": format!("2026-12-07T10:{:02}:{:02}.{:03}000Z", millis / 60_000, millis / 1000 % 60, millis % 1000),
                "took_ms": c.took as u64,
                "method": "POST", "target": "/tickets",
                "request_headers": headers,
                "request_body": json!({"title": c.title}).to_string(),
                "fate": fate,
                "status": (fate != "failed").then_some(status),
                "response_headers": [["content-type", "application/json"]],
                "response_body": id.map(|id| json!({"id": id}).to_string()),
            })
            .to_string(),
        );
    }
    lines.join("\n") + "\n"
}

fn audit_record(calls: &[(Call, Option<(u16, &'static str)>)]) -> Audit {
    audit_files(TARGET, &[("proxy.jsonl", proxy_record(calls))], &[]).0
}

#[test]
fn a_retry_without_a_key_after_a_reply_the_proxy_lost_is_two_effects() {
    // The service made t-1 and the proxy lost its reply; the caller sent it again without a key.
    let found = audit_record(&[
        (call(0.0, None, "Printer jams"), Some((201, "t-1"))),
        (
            call(1.0, None, "Printer jams").answered(201, Some("t-2")),
            None,
        ),
    ]);
    assert_exit(&found, 1);
    assert_eq!(found.verdict("retry-without-key"), "FAIL");
    assert_eq!(
        found.cited("retry-without-key"),
        [
            "proxy.jsonl line 2 (request 1)",
            "proxy.jsonl line 3 (request 2)"
        ]
    );
    // The same two requests, the second sent after the first reply arrived: two intentions.
    let apart = audit_record(&[
        (
            call(0.0, None, "Printer jams").answered(201, Some("t-1")),
            None,
        ),
        (
            call(1.0, None, "Printer jams").answered(201, Some("t-2")),
            None,
        ),
    ]);
    assert_exit(&apart, 0);
    assert_eq!(apart.verdict("retry-without-key"), "NOT_COVERED");
}

#[test]
fn a_request_sent_again_while_the_first_was_in_flight_is_undecided_in_a_recording_that_marks_no_lost_reply()
 {
    // A HAR shows both replies: the first came back 400 ms after the second was sent. A retry
    // whose client gave up, or a second ticket sent in parallel: the HAR does not say which.
    let undecided = audit(&[
        call(0.0, None, "Printer jams")
            .took(1500.0)
            .answered(201, Some("t-1")),
        call(1.1, None, "Printer jams").answered(201, Some("t-2")),
    ]);
    assert_exit(&undecided, 0);
    assert_eq!(undecided.verdict("retry-without-key"), "NOT_COVERED");
    assert!(
        undecided
            .text()
            .contains("the recording does not mark a reply the caller never got")
            || undecided.report["points"][0]["checks"][0]["not_covered"]
                .as_str()
                .is_some_and(|why| why.contains("does not mark a reply the caller never got")),
        "{}",
        undecided.report
    );
    // Under two keys the caller said it meant two tickets: no question to ask.
    let two_keys = audit(&[
        call(0.0, Some("k-1"), "Printer jams")
            .took(1500.0)
            .answered(201, Some("t-1")),
        call(1.1, Some("k-2"), "Printer jams").answered(201, Some("t-2")),
    ]);
    assert_exit(&two_keys, 0);
    assert_eq!(two_keys.verdict("new-key-after-lost-reply"), "NOT_COVERED");
    assert_eq!(two_keys.verdict("retry-without-key"), "NOT_COVERED");
}

#[test]
fn a_retry_that_keeps_its_key_and_gets_the_replay_is_no_finding() {
    let kept = audit(&[
        call(0.0, Some("k-1"), "Disk full")
            .took(1500.0)
            .answered(201, Some("t-1")),
        call(1.1, Some("k-1"), "Disk full").answered(200, Some("t-1")),
    ]);
    assert_exit(&kept, 0);
    assert_eq!(kept.verdict("one-key-one-effect"), "PASS");
    assert_eq!(kept.verdict("retry-without-key"), "NOT_COVERED");
    assert_eq!(kept.verdict("new-key-after-lost-reply"), "NOT_COVERED");
}

#[test]
fn a_new_key_after_a_reply_the_proxy_lost_is_a_second_effect_and_after_a_reply_that_came_none() {
    let found = audit_record(&[
        (call(0.0, Some("k-1"), "Disk full"), Some((201, "t-1"))),
        (
            call(2.0, Some("k-2"), "Disk full").answered(201, Some("t-2")),
            None,
        ),
    ]);
    assert_exit(&found, 1);
    assert_eq!(found.verdict("new-key-after-lost-reply"), "FAIL");
    assert_eq!(found.verdict("retry-without-key"), "NOT_COVERED");
    // After the first reply arrived, a new key is a new intention (the check's new-key point).
    let new_intention = audit_record(&[
        (
            call(0.0, Some("k-1"), "Disk full").answered(201, Some("t-1")),
            None,
        ),
        (
            call(2.0, Some("k-2"), "Disk full").answered(201, Some("t-2")),
            None,
        ),
    ]);
    assert_exit(&new_intention, 0);
    // A server error is a failed reply: a new key after it, with the service's answer naming no
    // ticket, is undecided.
    let after_500 = audit_record(&[
        (
            call(0.0, Some("k-1"), "Disk full").answered(500, None),
            None,
        ),
        (
            call(2.0, Some("k-2"), "Disk full").answered(201, Some("t-2")),
            None,
        ),
    ]);
    assert_exit(&after_500, 0);
    assert_eq!(after_500.verdict("new-key-after-lost-reply"), "NOT_COVERED");
}

#[test]
fn a_lost_reply_whose_effect_the_recording_does_not_show_is_not_covered_never_a_guess() {
    // A client's HAR: the first reply never came, so the recording cannot say whether the
    // first request made a ticket. Two tickets may exist, or one: the audit says so.
    let unknown = audit(&[
        call(0.0, Some("k-1"), "Disk full"),
        call(2.0, Some("k-2"), "Disk full").answered(201, Some("t-2")),
    ]);
    assert_exit(&unknown, 0);
    assert_eq!(unknown.verdict("new-key-after-lost-reply"), "NOT_COVERED");
    let text = &unknown.report["points"][1]["checks"][0]["not_covered"];
    assert!(
        text.as_str().unwrap().contains("whether it made an effect"),
        "{text}"
    );
}

#[test]
fn a_key_reused_with_another_payload_is_a_finding_when_accepted_and_none_when_refused() {
    let accepted = audit(&[
        call(0.0, Some("k-1"), "Disk full").answered(201, Some("t-1")),
        call(1.0, Some("k-1"), "Disk nearly full").answered(201, Some("t-1")),
    ]);
    assert_exit(&accepted, 1);
    assert_eq!(accepted.verdict("changed-payload"), "FAIL");
    assert_eq!(
        accepted.cited("changed-payload"),
        ["traffic.har entries[0]", "traffic.har entries[1]"]
    );
    assert_eq!(accepted.verdict("one-key-one-effect"), "PASS");
    let refused = audit(&[
        call(0.0, Some("k-1"), "Disk full").answered(201, Some("t-1")),
        call(1.0, Some("k-1"), "Disk nearly full").answered(422, None),
    ]);
    assert_exit(&refused, 0);
    assert_eq!(refused.verdict("changed-payload"), "PASS");
}

#[test]
fn one_key_answered_with_two_identities_is_a_finding_but_two_callers_keys_never_meet() {
    let two = audit(&[
        call(0.0, Some("k-1"), "Disk full").answered(201, Some("t-1")),
        call(1.0, Some("k-1"), "Disk full").answered(201, Some("t-2")),
    ]);
    assert_exit(&two, 1);
    assert_eq!(two.verdict("one-key-one-effect"), "FAIL");
    // Alice's and bob's keys are theirs: one key string, two callers, two intentions.
    let apart = audit(&[
        call(0.0, Some("k-1"), "Disk full").answered(201, Some("t-1")),
        call(1.0, Some("k-1"), "Disk full")
            .by("token-b")
            .answered(201, Some("t-2")),
    ]);
    assert_exit(&apart, 0);
    assert_eq!(apart.verdict("one-key-one-effect"), "PASS");
}

#[test]
fn a_reply_never_received_and_never_asked_for_again_is_unresolved() {
    let left = audit(&[
        call(0.0, Some("k-1"), "Disk full").answered(201, Some("t-1")),
        call(1.0, Some("k-2"), "Printer jams"),
    ]);
    assert_exit(&left, 1);
    assert_eq!(left.verdict("unresolved-intention"), "FAIL");
    assert_eq!(
        left.cited("unresolved-intention"),
        ["traffic.har entries[1]"]
    );
    let resolved = audit(&[
        call(0.0, Some("k-1"), "Disk full").answered(201, Some("t-1")),
        call(1.0, Some("k-2"), "Printer jams"),
        call(2.0, Some("k-2"), "Printer jams").answered(201, Some("t-2")),
    ]);
    assert_exit(&resolved, 0);
    assert_eq!(resolved.verdict("unresolved-intention"), "PASS");

    // The same client sent it again under a token it refreshed, which the file does not name:
    // with its key, or (without one) with its payload. Told apart as another caller, the
    // request is no proof the first was never asked for again.
    for (key, again) in [(Some("k-2"), Some("k-2")), (None, None)] {
        let refreshed = audit(&[
            call(0.0, Some("k-1"), "Disk full").answered(201, Some("t-1")),
            call(1.0, key, "Printer jams"),
            call(2.0, again, "Printer jams")
                .by("token-a-refreshed")
                .answered(201, Some("t-2")),
        ]);
        assert_exit(&refreshed, 0);
        assert_eq!(
            refreshed.verdict("unresolved-intention"),
            "NOT_COVERED",
            "key {key:?}: {}",
            refreshed.text()
        );
        assert!(
            refreshed.text().contains("a token refreshed"),
            "{}",
            refreshed.text()
        );
    }
    // Another caller's request before the lost one is no retry of it.
    let before = audit(&[
        call(0.0, Some("k-2"), "Printer jams")
            .by("token-b")
            .answered(201, Some("t-1")),
        call(1.0, Some("k-2"), "Printer jams"),
    ]);
    assert_exit(&before, 1);
    assert_eq!(before.verdict("unresolved-intention"), "FAIL");
}

/// An OTLP JSON trace of tool calls under the attribute names an agent framework emits.
fn tool_trace(calls: &[(u64, &str, Option<&str>, bool)], names: [&str; 3]) -> String {
    let spans: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (at_ms, key, result_id, failed))| {
            let start = 1_765_000_000_000_000_000u64 + at_ms * 1_000_000;
            let arguments = json!({"title": "Disk full", "idempotency_key": key});
            let mut attributes = vec![
                json!({"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}),
                json!({"key": names[0], "value": {"stringValue": "create_ticket"}}),
                json!({"key": names[1], "value": {"stringValue": arguments.to_string()}}),
                json!({"key": "gen_ai.tool.call.id", "value": {"stringValue": format!("call_{i}")}}),
            ];
            if let Some(id) = result_id {
                attributes.push(json!({"key": names[2], "value": {"stringValue": json!({"ticket_id": id}).to_string()}}));
            }
            json!({
                "traceId": "5b8efff798038103d269b633813fc60c", "spanId": format!("{:016x}", i + 1),
                "name": "execute_tool create_ticket", "kind": 1,
                "startTimeUnixNano": start.to_string(), "endTimeUnixNano": (start + 5_000_000).to_string(),
                "attributes": attributes,
                "status": if *failed { json!({"code": 2, "message": "timed out"}) } else { json!({}) }
            })
        })
        .collect();
    json!({"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent"}}]},
            "scopeSpans": [{"scope": {"name": "tests"}, "spans": spans}]}]})
    .to_string()
}

const MCP_TARGET: &str = r#"
[mcp]
transport = "stdio"
command = ["unused"]

[mcp.tool]
name = "create_ticket"
key_argument = "idempotency_key"
arguments = { title = "{{title}}" }
fields = { title = "Disk full" }

[mcp.identity]
structured_pointer = "/ticket_id"
"#;

#[test]
fn tool_calls_in_an_agent_frameworks_trace_are_judged_under_each_attribute_naming() {
    for names in [
        [
            "gen_ai.tool.name",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ],
        ["gen_ai.tool.name", "tool_arguments", "tool_response"],
        ["tool.name", "input.value", "output.value"],
    ] {
        // The same key answered with two tickets: the server did not keep its key.
        let trace = tool_trace(
            &[(0, "k-1", Some("7"), false), (100, "k-1", Some("8"), false)],
            names,
        );
        let (found, _dir) = audit_files(MCP_TARGET, &[("trace.json", trace)], &[]);
        assert_exit(&found, 1);
        assert_eq!(found.verdict("one-key-one-effect"), "FAIL", "{names:?}");
        let trace = tool_trace(
            &[(0, "k-1", Some("7"), false), (100, "k-1", Some("7"), false)],
            names,
        );
        let (kept, _dir) = audit_files(MCP_TARGET, &[("trace.json", trace)], &[]);
        assert_exit(&kept, 0);
        assert_eq!(kept.verdict("one-key-one-effect"), "PASS", "{names:?}");
    }
}

#[test]
fn a_tool_call_that_failed_and_was_re_planned_under_a_new_key_cannot_be_judged_from_the_trace() {
    // The agent's first call ended in an exception with no result: whether the server made a
    // ticket is not in the trace, so the re-plan is NOT COVERED, and named.
    let trace = tool_trace(
        &[(0, "k-1", None, true), (100, "k-2", Some("8"), false)],
        ["gen_ai.tool.name", "tool_arguments", "tool_response"],
    );
    let (audit, _dir) = audit_files(
        MCP_TARGET,
        &[("trace.jsonl", trace.clone() + "\n" + &trace)],
        &[],
    );
    assert_exit(&audit, 0);
    assert_eq!(audit.verdict("new-key-after-lost-reply"), "NOT_COVERED");
}

#[test]
fn a_finding_is_in_every_report_form_with_the_recordings_read_first() {
    let calls = [
        call(0.0, Some("k-1"), "Disk full").answered(201, Some("t-1")),
        call(1.0, Some("k-2"), "Printer jams"),
    ];
    let (json, folder) = audit_files(
        TARGET,
        &[("traffic.har", har(&calls).to_string())],
        &["--junit", "{dir}/report.xml", "--html", "{dir}/report.html"],
    );
    assert_exit(&json, 1);
    assert_eq!(json.verdict("unresolved-intention"), "FAIL");
    let junit = std::fs::read_to_string(folder.path().join("report.xml")).unwrap();
    let suites: Vec<&str> = junit
        .match_indices("<testsuite name=\"")
        .map(|(at, m)| {
            let name = &junit[at + m.len()..];
            &name[..name.find('"').unwrap()]
        })
        .collect();
    assert_eq!(suites[0], "recordings", "{junit}");
    assert!(suites.contains(&"unresolved-intention"), "{junit}");
    assert!(!junit.contains("calibration"), "{junit}");
    assert_eq!(junit.matches("<failure").count(), 1, "{junit}");
    // The failure cites the lost request, drawn and placed in the recording, with no count of
    // a service (an audit reads none).
    assert!(
        junit.contains("recorded at: #2 traffic.har entries[1]"),
        "{junit}"
    );
    assert!(
        junit.contains("exchanges:\n  #2 alice · traffic.har entries[1]: POST /tickets, key k-2"),
        "{junit}"
    );
    assert!(!junit.contains("count before"), "{junit}");
    let html = std::fs::read_to_string(folder.path().join("report.html")).unwrap();
    assert!(html.contains("What was read") && html.contains("unresolved-intention"));
    assert!(html.contains("recorded at: #2 traffic.har entries[1]"));
    assert!(!html.contains("count before"));
    let plain = Command::new(LAB)
        .arg("audit")
        .arg("--target")
        .arg(folder.path().join("target.toml"))
        .arg(folder.path().join("traffic.har"))
        .output()
        .unwrap();
    assert_eq!(plain.status.code(), Some(1));
    let plain = String::from_utf8_lossy(&plain.stdout);
    assert!(plain.contains("recordings: read in one pass"), "{plain}");
    assert!(plain.contains("FAIL unresolved-intention"), "{plain}");
}

#[test]
fn a_recording_that_is_not_one_the_audit_reads_is_refused_naming_the_file_and_the_place() {
    let truncated = {
        let text = har(&[call(0.0, Some("k"), "x").answered(201, Some("t"))]).to_string();
        text[..text.len() / 2].to_owned()
    };
    let cases: [(&str, String, &str); 6] = [
        ("notes.har", "hello".to_owned(), "not a JSON object"),
        ("cut.har", truncated, "truncated"),
        (
            "new.har",
            json!({"log": {"version": "2.0", "entries": []}}).to_string(),
            "log.version \\\"2.0\\\"",
        ),
        ("list.json", "[1, 2]".to_owned(), "not a JSON object"),
        (
            "logs.json",
            json!({"resourceLogs": []}).to_string(),
            "\\\"resourceLogs\\\"",
        ),
        (
            "spans.json",
            r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 7}]}]}]}"#.to_owned(),
            "line 1 column",
        ),
    ];
    for (name, content, says) in cases {
        let (audit, folder) =
            audit_files(TARGET, &[(name, content)], &["--junit", "{dir}/report.xml"]);
        let stderr = String::from_utf8_lossy(&audit.output.stderr);
        assert_eq!(audit.output.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(name), "{name}: {stderr}");
        assert!(
            stderr.replace('"', "\\\"").contains(says) || stderr.contains(says),
            "{name}: expected {says:?} in {stderr}"
        );
        assert!(
            audit.output.stdout.is_empty(),
            "{name}: a report was printed"
        );
        let leftovers: Vec<PathBuf> = std::fs::read_dir(folder.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("report"))
            .collect();
        assert!(leftovers.is_empty(), "{name}: {leftovers:?}");
    }
}

#[test]
fn init_writes_a_target_file_the_audit_reads_from_a_recording_and_never_replaces_one() {
    let folder = tempfile::tempdir().unwrap();
    let recording = folder.path().join("traffic.har");
    std::fs::write(
        &recording,
        har(&[
            call(0.0, Some("k-1"), "Disk full").answered(201, Some("t-1")),
            call(1.0, Some("k-2"), "Printer jams").answered(201, Some("t-2")),
        ])
        .to_string(),
    )
    .unwrap();
    let target = folder.path().join("audit.toml");
    let init = |target: &Path| {
        Command::new(LAB)
            .args(["audit", "--init", "--target"])
            .arg(target)
            .arg(&recording)
            .output()
            .unwrap()
    };
    let output = init(&target);
    assert!(output.status.success(), "{output:?}");
    let text = std::fs::read_to_string(&target).unwrap();
    for line in [
        "path = \"/tickets\"",
        "header = \"idempotency-key\"",
        "json_pointer = \"/id\"",
        "form = \"sf-string\"",
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    assert!(
        !text.contains("token-a"),
        "a credential was copied:\n{text}"
    );
    let audited = Command::new(LAB)
        .args(["audit", "--target"])
        .arg(&target)
        .arg(&recording)
        .output()
        .unwrap();
    assert!(audited.status.success(), "{audited:?}");
    let again = init(&target);
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), text);
}

/// A create sent by hand as bob through `url` with `key`; the status, or `None` when the
/// connection closed without an answer (a lost reply).
fn bob_creates(url: &str, key: &str, body: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let address = url.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    // Only ends a broken run: the proxy answers or closes at once.
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let request = format!(
        "POST /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-b\r\n\
         Idempotency-Key: \"{key}\"\r\nContent-Type: application/json\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
}

/// The target file of `lab serve`'s tickets, as the audit reads a proxy record of them.
const SERVE_TARGET: &str = r#"
[create]
method = "POST"
path = "/tickets"

[key]
header = "Idempotency-Key"

[identity]
json_pointer = "/ticket_id"

[[callers]]
name = "alice"
headers = { Authorization = "Bearer token-a" }

[[callers]]
name = "bob"
headers = { Authorization = "Bearer token-b" }
"#;

#[test]
fn a_proxy_record_shows_the_runner_keeping_its_key_and_a_caller_re_planning_as_the_store_does() {
    use crate::http::LabServer;
    let server = LabServer::start(&[]);
    let folder = tempfile::tempdir().unwrap();
    let record = folder.path().join("proxy.jsonl");
    let proxy = LabServer::spawn(&[
        "proxy",
        "--upstream",
        &server.url,
        "--drop-first",
        "2",
        "--record",
        record.to_str().unwrap(),
    ]);
    // Bob loses his reply, and (after alice's run) sends the same ticket again under a new key.
    let body = r#"{"title": "Disk full", "priority": "high"}"#;
    assert_eq!(bob_creates(&proxy.url, "bob-1", body), None);
    // Alice's runner: its first reply is lost too, and it retries with its key.
    let runner = Command::new(LAB)
        .args(["runner", "--database"])
        .arg(folder.path().join("runner.sqlite"))
        .args([
            "--url", &proxy.url, "--token", "token-a", "--caller", "alice",
        ])
        .args(["--key", "rotate-logs-1", "--payload"])
        .arg(r#"{"title": "Rotate the logs", "priority": "normal"}"#)
        .output()
        .unwrap();
    assert!(runner.status.success(), "{runner:?}");
    assert_eq!(bob_creates(&proxy.url, "bob-2", body), Some(201));
    drop(proxy);
    // The store: alice's intention made one ticket, bob's two.
    let tickets = crate::runner::service_tickets(&server);
    assert_eq!(tickets.len(), 3, "{tickets:?}");

    std::fs::write(folder.path().join("serve.toml"), SERVE_TARGET).unwrap();
    let audit = |json: bool| {
        let mut command = Command::new(LAB);
        command
            .current_dir(folder.path())
            .args(["audit", "--target", "serve.toml", "proxy.jsonl"]);
        if json {
            command.arg("--json");
        }
        command.output().unwrap()
    };
    let output = audit(true);
    let found = Audit {
        report: lab::serde_json::from_slice(&output.stdout).unwrap(),
        output,
    };
    assert_exit(&found, 1);
    assert_eq!(found.verdict("new-key-after-lost-reply"), "FAIL");
    assert_eq!(
        found.cited("new-key-after-lost-reply"),
        [
            "proxy.jsonl line 2 (request 1)",
            "proxy.jsonl line 5 (request 4)"
        ]
    );
    // Alice's lost reply and its replay: one key, one ticket, asked for again.
    assert_eq!(found.verdict("one-key-one-effect"), "PASS");
    assert_eq!(found.verdict("unresolved-intention"), "PASS");
    let text = String::from_utf8_lossy(&audit(false).stdout).into_owned();
    let shown = regex_free_timing(&text);
    crate::check_mcp::compare_with_the_book_at("src/audit", &shown, "proxy-record.txt");
}

/// The report with its run time (the one thing that differs between runs) left out.
fn regex_free_timing(text: &str) -> String {
    text.lines()
        .map(|line| match line.rfind(" in ") {
            Some(at) if line.contains(" exchanges cited in ") => {
                let rest = &line[at + 4..];
                let after = rest.find(';').map_or("", |semi| &rest[semi..]);
                format!("{} in (time){after}", &line[..at])
            }
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn a_recording_without_bodies_or_keys_says_what_it_cannot_match_rather_than_accuse() {
    // A HAR whose recorder kept no request bodies: a request without a key whose reply never
    // came cannot be matched to the one sent after it, so nothing is called unresolved.
    let mut bodiless = har(&[
        call(0.0, None, "Disk full"),
        call(1.0, None, "Disk full").answered(201, Some("t-1")),
    ]);
    for entry in bodiless["log"]["entries"].as_array_mut().unwrap() {
        entry["request"].as_object_mut().unwrap().remove("postData");
    }
    let (audit, _dir) = audit_files(TARGET, &[("bodiless.har", bodiless.to_string())], &[]);
    assert_exit(&audit, 0);
    assert_eq!(audit.verdict("unresolved-intention"), "NOT_COVERED");
    assert_eq!(audit.verdict("retry-without-key"), "NOT_COVERED");
    // The same requests with their bodies: the second is the first sent again.
    let (audit, _dir) = audit_files(
        TARGET,
        &[(
            "bodies.har",
            har(&[
                call(0.0, None, "Disk full"),
                call(1.0, None, "Disk full").answered(201, Some("t-1")),
            ])
            .to_string(),
        )],
        &[],
    );
    assert_exit(&audit, 0);
    assert_eq!(audit.verdict("unresolved-intention"), "PASS");

    // An HTTP client span records only the headers its instrumentation was told to: a span
    // without the key header has a key the trace does not show, never "no key".
    let span = |id: u64, status: Option<u16>| {
        let mut attributes = vec![
            json!({"key": "http.request.method", "value": {"stringValue": "POST"}}),
            json!({"key": "url.full", "value": {"stringValue": "http://127.0.0.1:8000/tickets"}}),
        ];
        match status {
            Some(status) => attributes
                .push(json!({"key": "http.response.status_code", "value": {"intValue": status}})),
            None => attributes
                .push(json!({"key": "error.type", "value": {"stringValue": "ReadTimeout"}})),
        }
        let start = 1_765_000_000_000_000_000u64 + id * 1_000_000_000;
        json!({"traceId": format!("{id:032x}"), "spanId": format!("{id:016x}"), "name": "POST", "kind": 3,
               "startTimeUnixNano": start.to_string(), "endTimeUnixNano": (start + 9_000_000).to_string(),
               "attributes": attributes})
    };
    let trace = json!({"resourceSpans": [{"scopeSpans": [{"spans": [span(1, None), span(2, Some(201))]}]}]});
    let (audit, _dir) = audit_files(TARGET, &[("client.json", trace.to_string())], &[]);
    assert_exit(&audit, 0);
    assert_eq!(audit.verdict("unresolved-intention"), "NOT_COVERED");
}

#[test]
fn a_traces_server_spans_of_the_create_give_way_to_its_client_spans_and_stand_alone_otherwise() {
    // Each create seen from both sides, the sides interleaved: the client's spans say whether
    // the reply arrived, so the server's are left out; alone, the server's are judged and
    // cannot say.
    let span = |id: u64, key: &str, client: bool, status: Option<u16>| {
        let mut attributes = vec![
            json!({"key": "http.request.method", "value": {"stringValue": "POST"}}),
            json!({"key": "url.full", "value": {"stringValue": "http://127.0.0.1:8000/tickets"}}),
            json!({"key": "http.request.header.idempotency-key", "value": {"arrayValue": {"values": [{"stringValue": key}]}}}),
        ];
        // The client's spans record its credentials; the server's, of its own resource, none.
        if client {
            attributes.push(json!({"key": "http.request.header.authorization", "value": {"arrayValue": {"values": [{"stringValue": "Bearer token-a"}]}}}));
        }
        if let Some(status) = status {
            attributes
                .push(json!({"key": "http.response.status_code", "value": {"intValue": status}}));
        }
        // The server's span of a request begins just after the client's.
        let start =
            1_765_000_000_000_000_000u64 + id * 1_000_000_000 + u64::from(!client) * 1_000_000;
        let spans = json!([{"traceId": format!("{id:032x}"), "spanId": format!("{:016x}", id * 10 + u64::from(client)),
               "name": "POST", "kind": if client { 3 } else { 2 },
               "startTimeUnixNano": start.to_string(), "endTimeUnixNano": (start + 9_000_000).to_string(),
               "attributes": attributes}]);
        let service = if client { "agent" } else { "tickets-api" };
        json!({"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
               "scopeSpans": [{"spans": spans}]})
    };
    // k-1's reply never reached the client (the server answered 201); k-2's did.
    let both = json!({"resourceSpans": [
        span(1, "k-1", true, None), span(1, "k-1", false, Some(201)),
        span(2, "k-2", false, Some(201)), span(2, "k-2", true, Some(201)),
    ]});
    let (audit, _dir) = audit_files(TARGET, &[("trace.json", both.to_string())], &[]);
    assert_exit(&audit, 1);
    let read = &audit.report["calibration"]["steps"][0]["detail"];
    assert!(
        read.as_str().unwrap().contains("2 of them creates")
            && read
                .as_str()
                .unwrap()
                .contains("2 server spans of the create left out"),
        "{read}"
    );
    // Only the client's span of k-1 shows the reply lost and never asked for again; had the
    // server's span stayed, it would end k-1 with a reply whose arrival nobody knows.
    assert_eq!(audit.verdict("unresolved-intention"), "FAIL");
    assert_eq!(
        audit.cited("unresolved-intention"),
        ["trace.json span 000000000000000b"]
    );
    // The server is no caller: its spans were left out.
    assert_eq!(
        audit.report["calibration"]["steps"][2]["detail"],
        "1 caller: alice"
    );
    // The server's trace beside the client's HAR: the server's span of the lost request, a
    // caller of its own there, is no retry of it.
    let client = har(&[call(1.0, Some("k-3"), "Disk full")]);
    // Its span begins a millisecond after the HAR's request (2026-12-07T10:00:01Z).
    let server = json!({"resourceSpans": [span(31_637_601, "k-3", false, Some(201))]});
    let (audit, _dir) = audit_files(
        TARGET,
        &[
            ("client.har", client.to_string()),
            ("server.json", server.to_string()),
        ],
        &[],
    );
    assert_eq!(
        audit.verdict("unresolved-intention"),
        "FAIL",
        "{}",
        audit.text()
    );
    assert_eq!(
        audit.cited("unresolved-intention"),
        ["client.har entries[0]"]
    );

    let server_only =
        json!({"resourceSpans": [span(1, "k-1", false, Some(201)), span(2, "k-2", false, None)]});
    let (audit, _dir) = audit_files(TARGET, &[("trace.json", server_only.to_string())], &[]);
    assert_exit(&audit, 0);
    let read = audit.report["calibration"]["steps"][0]["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        read.contains("2 of them creates") && !read.contains("left out"),
        "{read}"
    );
    assert_eq!(audit.verdict("unresolved-intention"), "NOT_COVERED");
}

/// Each point's verdict in `report` (a `--json` report), one line each: the part of a run over
/// a third-party recording the book shows, the same in every run that passes its test.
pub(crate) fn verdict_table(report: &Value) -> String {
    let mut out = format!("{:<26}verdict\n", "point");
    for point in report["points"].as_array().into_iter().flatten() {
        let verdict = point["verdict"].as_str().unwrap_or("?").replace('_', " ");
        let name = point["name"].as_str().unwrap_or("?");
        out.push_str(&format!("{name:<26}{verdict}\n"));
    }
    out
}

/// Compares `report`'s verdicts with the book's `src/audit/NAME` (written with `LAB_BLESS=1`).
pub(crate) fn show_in_the_book(report: &Value, name: &str) {
    crate::check_mcp::compare_with_the_book_at("src/audit", &verdict_table(report), name);
}

#[test]
fn tool_arguments_a_tracer_wrapped_are_read_inside_their_wrapper() {
    // OpenLLMetry records a tool's input as {"args": [], "kwargs": {...}}; the Vercel AI SDK
    // names its attributes ai.toolCall.*.
    let span = |i: u64, id: &str, wrapped: bool| {
        let arguments = json!({"title": "Disk full", "idempotency_key": "k-1"});
        let recorded = if wrapped {
            json!({"args": [], "kwargs": arguments})
        } else {
            arguments
        };
        let start = 1_765_000_000_000_000_000u64 + i * 1_000_000_000;
        json!({"traceId": "5b8efff798038103d269b633813fc60c", "spanId": format!("{i:016x}"), "name": "create_ticket.tool",
        "kind": 1, "startTimeUnixNano": start.to_string(), "endTimeUnixNano": (start + 5_000_000).to_string(),
        "attributes": [
            {"key": "ai.toolCall.name", "value": {"stringValue": "create_ticket"}},
            {"key": if wrapped { "traceloop.entity.input" } else { "ai.toolCall.args" }, "value": {"stringValue": recorded.to_string()}},
            {"key": "ai.toolCall.result", "value": {"stringValue": json!({"ticket_id": id}).to_string()}}
        ]})
    };
    for wrapped in [false, true] {
        let trace = json!({"resourceSpans": [{"scopeSpans": [{"spans": [span(1, "7", wrapped), span(2, "8", wrapped)]}]}]});
        let (found, _dir) = audit_files(MCP_TARGET, &[("trace.json", trace.to_string())], &[]);
        assert_exit(&found, 1);
        // One key, two tickets: the key was read inside the wrapper.
        assert_eq!(
            found.verdict("one-key-one-effect"),
            "FAIL",
            "wrapped: {wrapped}"
        );
        assert_eq!(
            found.verdict("changed-payload"),
            "NOT_COVERED",
            "wrapped: {wrapped}"
        );
    }
}

#[test]
fn tool_calls_recorded_as_span_events_and_results_as_content_lists_are_read() {
    // Strands Agents records a tool call's input as a gen_ai.tool.message event and its
    // result, a list of content items, as a gen_ai.choice event; other frameworks write the
    // result's text, or that text as a JSON string. Each names its ticket.
    let results = [
        json!([{"text": json!({"ticket_id": 7}).to_string()}]).to_string(),
        json!({"content": [{"type": "text", "text": json!({"ticket_id": 8}).to_string()}]})
            .to_string(),
        json!(json!({"ticket_id": 9}).to_string()).to_string(),
    ];
    let span = |i: u64, result: &str| {
        let start = 1_765_000_000_000_000_000u64 + i * 1_000_000_000;
        let event = |name: &str, key: &str, value: String| {
            json!({"timeUnixNano": start.to_string(), "name": name,
                   "attributes": [{"key": key, "value": {"stringValue": value}}]})
        };
        json!({"traceId": "5b8efff798038103d269b633813fc60c", "spanId": format!("{i:016x}"), "name": "execute_tool create_ticket",
        "kind": 1, "startTimeUnixNano": start.to_string(), "endTimeUnixNano": (start + 5_000_000).to_string(),
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
            {"key": "gen_ai.tool.name", "value": {"stringValue": "create_ticket"}},
            {"key": "gen_ai.tool.call.id", "value": {"stringValue": format!("tooluse_{i}")}}
        ],
        "events": [
            event("gen_ai.tool.message", "content", json!({"title": "Disk full", "idempotency_key": "k-1"}).to_string()),
            event("gen_ai.choice", "message", result.to_owned())
        ]})
    };
    for pair in [[0, 1], [1, 2], [2, 0]] {
        let spans: Vec<Value> = pair
            .iter()
            .map(|&r| span(r as u64 + 1, &results[r]))
            .collect();
        let trace = json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]});
        let (found, _dir) = audit_files(MCP_TARGET, &[("trace.json", trace.to_string())], &[]);
        assert_exit(&found, 1);
        // One key (read from the event), two tickets (read from each shape of result).
        assert_eq!(
            found.verdict("one-key-one-effect"),
            "FAIL",
            "{pair:?}: {}",
            found.text()
        );
        assert_eq!(found.verdict("changed-payload"), "NOT_COVERED", "{pair:?}");
    }
}

#[test]
fn a_text_identity_is_read_in_a_result_recorded_as_a_json_string() {
    // A tracer that wrote the tool's return value as a JSON string: the file's pattern reads
    // the text inside it.
    let target = MCP_TARGET.replace(
        "structured_pointer = \"/ticket_id\"",
        "text_regex = '\"ticket\":\"([^\"]+)\"'",
    );
    let trace = tool_trace(
        &[(0, "k-1", None, false), (100, "k-1", None, false)],
        [
            "gen_ai.tool.name",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ],
    );
    let mut trace: Value = lab::serde_json::from_str(&trace).unwrap();
    let spans = trace["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array_mut()
        .unwrap();
    for (n, span) in spans.iter_mut().enumerate() {
        // The JSON string of {"ticket":"T-n"}.
        let inner = json!({"ticket": format!("T-{}", n + 1)}).to_string();
        span["attributes"].as_array_mut().unwrap().push(json!({
            "key": "gen_ai.tool.call.result",
            "value": {"stringValue": Value::String(inner).to_string()}
        }));
    }
    let (found, _dir) = audit_files(&target, &[("trace.json", trace.to_string())], &[]);
    assert_exit(&found, 1);
    assert_eq!(
        found.verdict("one-key-one-effect"),
        "FAIL",
        "{}",
        found.text()
    );
    assert!(found.text().contains("T-1, T-2"), "{}", found.text());
}

#[test]
fn older_otlp_names_and_a_client_span_without_its_kind_are_read() {
    // OTLP before 0.15 named scopeSpans instrumentationLibrarySpans; a span whose kind is
    // unset but records the full URL is a client's, and its reply that never came is lost.
    let span = |id: u64, status: Option<u16>| {
        let mut attributes = vec![
            json!({"key": "http.method", "value": {"stringValue": "POST"}}),
            json!({"key": "http.url", "value": {"stringValue": "http://127.0.0.1:8000/tickets"}}),
            json!({"key": "http.request.header.idempotency-key", "value": {"arrayValue": {"values": [{"stringValue": "k-1"}]}}}),
        ];
        if let Some(status) = status {
            attributes.push(
                json!({"key": "http.status_code", "value": {"intValue": status.to_string()}}),
            );
        }
        let start = 1_765_000_000_000_000_000u64 + id * 1_000_000_000;
        json!({"traceId": format!("{id:032x}"), "spanId": format!("{id:016x}"), "name": "HTTP POST",
               "startTimeUnixNano": start.to_string(), "endTimeUnixNano": (start + 9_000_000).to_string(),
               "attributes": attributes})
    };
    let trace = |spans: Vec<Value>| {
        json!({"resourceSpans": [{"instrumentationLibrarySpans": [{"spans": spans}]}]}).to_string()
    };
    let (lost, _dir) = audit_files(TARGET, &[("old.json", trace(vec![span(1, None)]))], &[]);
    assert_exit(&lost, 1);
    assert_eq!(
        lost.verdict("unresolved-intention"),
        "FAIL",
        "{}",
        lost.text()
    );
    let (retried, _dir) = audit_files(
        TARGET,
        &[("old.json", trace(vec![span(1, None), span(2, Some(201))]))],
        &[],
    );
    assert_exit(&retried, 0);
    assert_eq!(
        retried.verdict("unresolved-intention"),
        "PASS",
        "{}",
        retried.text()
    );
}

#[test]
fn a_long_read_shows_its_progress_on_stderr() {
    // A HAR of some seventy megabytes: entries carrying a large read each, and a few creates.
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("large.har");
    {
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        out.write_all(br#"{"log": {"version": "1.2", "entries": ["#)
            .unwrap();
        let big = "x".repeat(64 * 1024);
        for i in 0..1100 {
            if i > 0 {
                out.write_all(b",").unwrap();
            }
            let entry = json!({"startedDateTime": "2026-12-07T10:00:00.000Z", "time": 1,
                "request": {"method": "GET", "url": format!("http://127.0.0.1:8000/tickets/{i}"), "headers": []},
                "response": {"status": 200, "headers": [], "content": {"text": big}}});
            out.write_all(entry.to_string().as_bytes()).unwrap();
        }
        out.write_all(b"]}}").unwrap();
    }
    let target = folder.path().join("target.toml");
    std::fs::write(&target, TARGET).unwrap();
    let output = Command::new(LAB)
        .args(["audit", "--target"])
        .arg(&target)
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("large.har read 64 MiB of 69 MiB"),
        "no progress line: {stderr}"
    );
    // Nothing in it is a create: every point says so.
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("no exchange is POST /tickets"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}
