//! `lab check --target` and the target-file vocabulary of issue 32: keys and fields as the
//! service needs them, conventions a real service has, and sub-check lines that are true.
//!
//! The service is `check_vocab.py` (Python's standard library only), written into a fresh
//! folder per test and started there; each flag makes it a service the vocabulary must describe
//! (UUID-only keys, an enum field, a replay answered 409, an optional key) or plants one bug (an
//! overwrite in place, a loose payload comparison, a malformed key taken as a key).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use lab::serde_json::{self, Value};

const SERVICE: &str = include_str!("check_vocab.py");

/// The target file every test starts from; `{extra}` is appended.
const TARGET: &str = r#"
[service]
base_url = "http://127.0.0.1:9"
timeout_ms = 5000

[create]
path = "/tickets"
headers = { "Content-Type" = "application/json" }
body = { title = "{{title}}", priority = "{{priority}}", n = "{{n}}" }
fields = { title = "Printer jammed", priority = "high", n = 1024 }
vary = { title = "text" }
success = [201]

[key]
form = "sf-string"

[identity]
json_pointer = "/id"

[[callers]]
name = "alice"
headers = { Authorization = "Bearer alice" }

[[callers]]
name = "bob"
headers = { Authorization = "Bearer bob" }

[count]
request = { path = "/count", json_pointer = "/count", caller = "none" }

[errors]
validation = { fields = { title = "" } }

[load]
fresh_rounds = 3
completed_rounds = 2
callers = 4
"#;

/// The service, running in its own folder until dropped.
struct Service {
    child: Child,
    url: String,
    folder: tempfile::TempDir,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python() -> Option<PathBuf> {
    let found = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(PathBuf::from("python3"));
    }
    assert!(
        std::env::var_os("LAB_REQUIRE_BLACKBOX").is_none(),
        "LAB_REQUIRE_BLACKBOX is set but python3 is not on PATH"
    );
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        b"SKIPPED check_vocab: python3 is not on PATH\n",
    );
    None
}

fn start(flags: &[&str]) -> Option<Service> {
    let python = python()?;
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("service.py"), SERVICE).unwrap();
    let mut child = Command::new(python)
        .arg("service.py")
        .args(flags)
        .current_dir(folder.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = crate::http::listening_url(&mut child);
    Some(Service { child, url, folder })
}

/// Writes the target file (with `replace` applied, then `extra` appended) into the service's
/// folder and runs `lab check --json` on it from `cwd` (the repository root unless given).
fn check_in(service: &Service, replace: &[(&str, &str)], extra: &str, cwd: &Path) -> Value {
    let mut text = TARGET.to_owned();
    for (from, to) in replace {
        assert!(text.contains(from), "the target has no {from:?}");
        text = text.replace(from, to);
    }
    text.push_str(extra);
    let file = service.folder.path().join("target.toml");
    std::fs::write(&file, text).unwrap();
    let output = lab(&file, &service.url, cwd);
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(&stdout).unwrap_or_else(|err| {
        panic!(
            "not a JSON report ({err}); exit {}\nstderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Writes the target file as [`check_in`] does and runs the check from the repository root,
/// expecting the calibration to stop it: exit status 2, nothing graded. Returns the message.
fn mismatch(service: &Service, replace: &[(&str, &str)], extra: &str) -> String {
    let mut text = TARGET.to_owned();
    for (from, to) in replace {
        assert!(text.contains(from), "the target has no {from:?}");
        text = text.replace(from, to);
    }
    text.push_str(extra);
    let file = service.folder.path().join("target.toml");
    std::fs::write(&file, text).unwrap();
    let output = lab(&file, &service.url, &crate::repository_root());
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(output.stdout.is_empty(), "a point was graded");
    assert!(stderr.contains("does not describe the service"), "{stderr}");
    assert!(!stderr.contains("DATA LEAK"), "{stderr}");
    stderr
}

fn lab(file: &Path, url: &str, cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["check", "--target", file.to_str().unwrap(), "--url", url])
        .arg("--json")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn check(service: &Service, replace: &[(&str, &str)], extra: &str) -> Value {
    check_in(service, replace, extra, &crate::repository_root())
}

fn point<'r>(report: &'r Value, name: &str) -> &'r Value {
    report["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no point {name}"))
}

fn checks(report: &Value, name: &str) -> Vec<Value> {
    point(report, name)["checks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn failed_points(report: &Value) -> Vec<String> {
    report["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["verdict"] == "FAIL")
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Every body the check sent that is a JSON object (the provoked ones aside, which are not).
fn bodies(report: &Value) -> Vec<Value> {
    report["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e["body"].as_str()?).ok())
        .filter(Value::is_object)
        .collect()
}

/// Lowercase, hyphenated, version 4, RFC 4122 variant.
fn is_uuid_v4(key: &str) -> bool {
    let groups: Vec<&str> = key.split('-').collect();
    let hex = |g: &str| {
        g.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| hex(g))
        && groups[2].starts_with('4')
        && groups[3].starts_with(['8', '9', 'a', 'b'])
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap()
}

#[test]
fn a_service_with_an_enum_field_and_uuid_only_keys_passes_when_only_the_title_varies() {
    let Some(service) = start(&["--enum", "--uuid-only"]) else {
        return;
    };
    let report = check(&service, &[], "");
    assert!(
        failed_points(&report).is_empty(),
        "{:?}\n{}",
        failed_points(&report),
        pretty(&report["points"])
    );
    // Every well-formed key the check sent is a fresh UUID, each exchange carrying its own.
    let history = report["history"].as_array().unwrap();
    let keys: Vec<&str> = history
        .iter()
        .filter(|e| !e["step"].as_str().unwrap().contains("malformed"))
        .filter_map(|e| e["key"].as_str())
        .collect();
    assert!(keys.len() > 20);
    assert!(
        keys.iter().all(|k| is_uuid_v4(k.trim_matches('"'))),
        "{keys:?}"
    );
    // The priority, not named in vary, was sent as the file gives it, every time.
    let sent = bodies(&report);
    assert!(sent.len() > 20);
    assert!(
        sent.iter().all(|b| b["priority"] == "high"),
        "a priority was altered"
    );
}

#[test]
fn keys_in_text_shape_are_refused_by_a_uuid_only_service_and_the_report_shows_them() {
    let Some(service) = start(&["--uuid-only"]) else {
        return;
    };
    // Since the calibration (issue 32), a key shape the service refuses stops the check before
    // any point, naming key.shape and showing the key it sent.
    let message = mismatch(
        &service,
        &[(
            "form = \"sf-string\"",
            "form = \"sf-string\"\nshape = \"text\"",
        )],
        "",
    );
    assert!(message.contains("key.shape"), "{message}");
    assert!(message.contains("\"chk-"), "{message}");
}

#[test]
fn an_overwrite_in_place_fails_made_no_effect_when_the_file_reads_the_effect_back() {
    let Some(service) = start(&["--overwrite"]) else {
        return;
    };
    let read = "\n[read]\nrequest = { path = \"/tickets/{{id}}\", json_pointer = \"/ticket\" }\n";
    let report = check(&service, &[], read);
    let made_no_effect = checks(&report, "changed-payload")
        .into_iter()
        .find(|c| c["what"] == "the changed payload made no effect")
        .expect("the sub-check is made");
    assert_eq!(
        made_no_effect["passed"],
        false,
        "{}",
        pretty(&made_no_effect)
    );
    assert!(
        made_no_effect["observed"]
            .as_str()
            .unwrap()
            .contains("changed in place"),
        "{}",
        pretty(&made_no_effect)
    );
    // The same service read by SQL: the same finding.
    let sql = "\n[read]\nsql = { sqlite = \"tickets.sqlite\", query = \"SELECT title FROM tickets WHERE id = ?1\" }\n";
    let report = check(&service, &[], sql);
    let by_sql = checks(&report, "changed-payload")
        .into_iter()
        .find(|c| c["what"] == "the changed payload made no effect")
        .unwrap();
    assert_eq!(by_sql["passed"], false, "{}", pretty(&by_sql));
}

#[test]
fn a_correct_service_read_back_by_the_file_passes_changed_payload() {
    let Some(service) = start(&[]) else {
        return;
    };
    let read = "\n[read]\nrequest = { path = \"/tickets/{{id}}\" }\n";
    let report = check(&service, &[], read);
    assert_eq!(
        point(&report, "changed-payload")["verdict"],
        "PASS",
        "{}",
        pretty(point(&report, "changed-payload"))
    );
}

#[test]
fn a_loose_comparison_of_payloads_fails_the_pair_it_merges_and_only_that_pair() {
    let Some(service) = start(&["--loose"]) else {
        return;
    };
    let vary = (
        "vary = { title = \"text\" }",
        "vary = { n = [1024, \"1024\", 2048] }",
    );
    let report = check(&service, &[vary], "");
    let changed = checks(&report, "changed-payload");
    let failed: Vec<&str> = changed
        .iter()
        .filter(|c| c["passed"] == false && c.get("not_covered").is_none())
        .map(|c| c["what"].as_str().unwrap())
        .collect();
    assert!(
        !failed.is_empty(),
        "{}",
        pretty(&Value::from(changed.clone()))
    );
    assert!(
        failed.iter().all(|w| w.contains("n: 1024 → \"1024\"")),
        "{failed:?}"
    );
    // The plain change (1024 to 2048) is refused as it should be.
    assert!(
        changed
            .iter()
            .any(|c| c["what"] == "the changed payload is refused" && c["passed"] == true)
    );
    // The same file against a strict service: every pair refused.
    let Some(strict) = start(&[]) else { return };
    let report = check(&strict, &[vary], "");
    assert_eq!(point(&report, "changed-payload")["verdict"], "PASS");
}

#[test]
fn without_a_varied_field_changed_payload_is_not_covered_naming_create_vary() {
    let Some(service) = start(&[]) else {
        return;
    };
    let report = check(&service, &[("vary = { title = \"text\" }\n", "")], "");
    let changed = point(&report, "changed-payload");
    assert_eq!(changed["verdict"], "NOT_COVERED");
    assert!(
        changed["reason"].as_str().unwrap().contains("create.vary"),
        "{}",
        pretty(changed)
    );
    // Nothing was varied: every body holds the title exactly as the file gives it.
    let sent = bodies(&report);
    assert!(sent.len() > 20);
    assert!(
        sent.iter()
            .all(|b| b["title"] == "Printer jammed" || b["title"] == ""),
        "a title was altered"
    );
}

#[test]
fn a_replay_answered_409_with_the_stored_body_is_described_by_replay_status() {
    let Some(service) = start(&["--replay-status", "409"]) else {
        return;
    };
    let report = check(&service, &[], "\n[replay]\nstatus = 409\n");
    assert!(
        failed_points(&report).is_empty(),
        "{:?}\n{}",
        failed_points(&report),
        pretty(&report["points"])
    );
    assert_eq!(point(&report, "retry-replays")["verdict"], "PASS");
}

#[test]
fn an_optional_key_is_graded_as_a_plain_request() {
    let Some(service) = start(&["--key-optional"]) else {
        return;
    };
    let optional = (
        "form = \"sf-string\"",
        "form = \"sf-string\"\nrequired = false",
    );
    let report = check(&service, &[optional], "\n[statuses]\nmissing_key = []\n");
    let forms = point(&report, "key-forms");
    assert_eq!(forms["verdict"], "PASS", "{}", pretty(forms));
    assert!(checks(&report, "key-forms").iter().any(|c| {
        c["what"]
            .as_str()
            .unwrap()
            .contains("processed as a plain request")
    }));
    // The same service described as requiring a key fails that SHOULD, as before.
    let report = check(&service, &[], "");
    let missing = checks(&report, "key-forms")
        .into_iter()
        .find(|c| c["what"] == "a request with no key is refused with statuses.missing_key")
        .unwrap();
    assert_eq!(missing["passed"], false);
}

#[test]
fn a_malformed_key_is_fresh_in_every_run_so_a_second_run_reads_the_same() {
    let Some(service) = start(&["--accept-malformed"]) else {
        return;
    };
    let malformed = |report: &Value| -> (String, Vec<bool>) {
        let key = report["history"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["step"].as_str().unwrap().contains("malformed"))
            .and_then(|e| e["key"].as_str())
            .unwrap()
            .to_owned();
        let passed = checks(report, "key-forms")
            .iter()
            .map(|c| c["passed"] == true)
            .collect();
        (key, passed)
    };
    let (first_key, first) = malformed(&check(&service, &[], ""));
    let (second_key, second) = malformed(&check(&service, &[], ""));
    assert_ne!(first_key, second_key);
    assert_eq!(first, second, "a sub-check flipped between two runs");
}

#[test]
fn absent_identities_never_read_as_a_data_leak() {
    let Some(service) = start(&[]) else {
        return;
    };
    // Since the calibration (issue 32), an identity pointer that finds nothing stops the check
    // before any point: no scope sub-check ever compares two absent identities.
    let message = mismatch(
        &service,
        &[("json_pointer = \"/id\"", "json_pointer = \"/nope\"")],
        "",
    );
    assert!(message.contains("identity.json_pointer"), "{message}");
}

#[test]
fn several_server_error_provocations_are_graded_each_on_its_own() {
    let Some(service) = start(&[]) else {
        return;
    };
    let server = "server = [{ headers = { X-Fail = \"1\" } }, { headers = { X-Fail = \"2\" } }]\n";
    let report = check(
        &service,
        &[("[errors]\n", &format!("[errors]\n{server}"))],
        "",
    );
    let point = point(&report, "server-error-then-corrected");
    assert_eq!(point["verdict"], "PASS", "{}", pretty(point));
    let whats: Vec<String> = checks(&report, "server-error-then-corrected")
        .iter()
        .map(|c| c["what"].as_str().unwrap().to_owned())
        .collect();
    for i in 0..2 {
        assert!(
            whats
                .iter()
                .any(|w| w.contains(&format!("errors.server[{i}]"))),
            "{whats:?}"
        );
    }
}

#[test]
fn a_relative_sqlite_path_is_read_from_the_target_files_folder() {
    let Some(service) = start(&[]) else {
        return;
    };
    let count = (
        "request = { path = \"/count\", json_pointer = \"/count\", caller = \"none\" }",
        "sql = { sqlite = \"tickets.sqlite\", query = \"SELECT COUNT(*) FROM tickets\" }",
    );
    // Run from another folder than the file's: the repository root holds no tickets.sqlite.
    let report = check_in(&service, &[count], "", &crate::repository_root());
    assert!(
        failed_points(&report).is_empty(),
        "{:?}\n{}",
        failed_points(&report),
        pretty(&report["points"])
    );
}

#[test]
fn a_fault_hook_the_service_ignores_is_refused_because_its_retry_replays() {
    let Some(service) = start(&[]) else {
        return;
    };
    // The service answers the hooked request 201, as any create, and the same request sent
    // again under its key is replayed: the key's record was kept, so the hook provably did
    // not make it fail, and the check stops before any point, naming the hook (issue 46).
    let hook = "\n[faults]\nbetween_effect_and_record = { headers = { X-Ignored = \"1\" } }\n";
    let message = mismatch(&service, &[], hook);
    assert!(
        message.contains("faults.between_effect_and_record") && message.contains("replayed"),
        "{message}"
    );
}

#[test]
fn a_fault_hook_that_answers_201_and_loses_the_record_is_graded_and_its_second_effect_fails() {
    let Some(service) = start(&[]) else {
        return;
    };
    // The middleware's record is lost after the answer went out (as a middleware that saves it
    // after the response does): the hook answers 201, and the retry makes a second ticket.
    let hook = "\n[faults]\nbetween_effect_and_record = { headers = { X-Record-Fails = \"1\" } }\n";
    let report = check(&service, &[], hook);
    let point = point(&report, "fault-between-effect-and-record");
    assert_eq!(point["verdict"], "FAIL", "{}", pretty(point));
    let found = checks(&report, "fault-between-effect-and-record");
    let made = |what: &str| {
        found
            .iter()
            .find(|c| c["what"].as_str().is_some_and(|w| w.contains(what)))
            .unwrap_or_else(|| panic!("no sub-check {what:?}: {}", pretty(point)))["passed"]
            .clone()
    };
    assert_eq!(made("fault hook fired"), true, "{}", pretty(point));
    assert_eq!(made("exactly one effect"), false, "{}", pretty(point));
}

#[test]
fn a_fault_hook_that_answers_201_where_no_key_is_kept_is_not_covered() {
    let Some(service) = start(&["--no-records"]) else {
        return;
    };
    // Every retry makes a new ticket, with the hook or without: whether the hook did anything
    // cannot be told, so its point grades nothing (the retry-replays point has the duplicate).
    let hook = "\n[faults]\nbetween_effect_and_record = { headers = { X-Record-Fails = \"1\" } }\n";
    let report = check(&service, &[], hook);
    let point = point(&report, "fault-between-effect-and-record");
    assert_eq!(point["verdict"], "NOT_COVERED", "{}", pretty(point));
    assert!(
        point["reason"]
            .as_str()
            .is_some_and(|r| r.contains("cannot be told")),
        "{}",
        pretty(point)
    );
    assert_eq!(self::point(&report, "retry-replays")["verdict"], "FAIL");
}

#[test]
fn a_misspelt_key_header_is_named_as_key_header_with_the_name_the_service_asked_for() {
    let Some(service) = start(&[]) else {
        return;
    };
    // The service answers 400 "an Idempotency-Key is required": the file's header is misspelt.
    let message = mismatch(
        &service,
        &[("[key]\n", "[key]\nheader = \"Idempotency-Kee\"\n")],
        "",
    );
    assert!(
        message.contains("does not describe the service: key.header:")
            && message.contains("key.header = \"Idempotency-Key\""),
        "{message}"
    );
}

#[test]
fn a_base_url_with_a_wrong_prefix_is_named_as_service_base_url() {
    let Some(service) = start(&[]) else {
        return;
    };
    // Every path 404s under /v1: the prefix is the fault, not the count's path or the create's.
    let sql = (
        "request = { path = \"/count\", json_pointer = \"/count\", caller = \"none\" }",
        "sql = { sqlite = \"tickets.sqlite\", query = \"SELECT COUNT(*) FROM tickets\" }",
    );
    for replace in [vec![], vec![sql]] {
        let mut text = TARGET.to_owned();
        for (from, to) in &replace {
            text = text.replace(from, to);
        }
        let file = service.folder.path().join("target.toml");
        std::fs::write(&file, text).unwrap();
        let output = lab(&file, &format!("{}/v1", service.url), service.folder.path());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("does not describe the service: service.base_url:")
                && stderr.contains("/v1"),
            "{stderr}"
        );
    }
}

#[test]
fn a_replay_header_no_answer_carried_is_reported_as_the_target_files_fault() {
    let Some(service) = start(&[]) else {
        return;
    };
    // The service replays without that mark: the calibration's own replay lacks it, so the
    // mark can only be the file's mistake, and nothing is graded (exit 2).
    let message = mismatch(&service, &[], "\n[replay]\nheader = \"X-Replayed-Here\"\n");
    assert!(
        message.contains("replay.header")
            && message.contains("X-Replayed-Here")
            && message.contains("was replayed"),
        "{message}"
    );
}
