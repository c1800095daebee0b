//! `lab check --target FILE` with `[upstream]` (issue #34): the lab serves the HTTP API an MCP
//! server wraps, records every request the wrapper sends it, and grades the key across the hop.
//! A planted-bug wrapper of our own fails the hop point that should catch each bug (and passes
//! without one); three third-party wrappers from npm and PyPI, and a negative control that takes
//! no key, keep their pinned verdicts, each backed by a hand reproduction in its folder; bad
//! `[upstream]` sections are refused naming the field, with nothing started.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use lab::serde_json::Value;

use crate::check_mcp::{
    check_json, compare_with_the_book, compare_with_the_pinned_findings, findings, fitted, python,
    verdict, verdicts,
};
use crate::repository_root;

const LAB: &str = env!("CARGO_BIN_EXE_lab");

/// The hop points, in the order they run.
pub(crate) const HOP_POINTS: [&str; 9] = [
    "hop-key",
    "hop-payload",
    "hop-retry",
    "hop-api-lost",
    "hop-restart",
    "hop-new-intention",
    "hop-concurrent",
    "hop-upstream-retry",
    "hop-errors",
];

/// Each planted bug (the MCP wrapper's and the HTTP gateway's, which has all but `unlisted-key`):
/// the hop points that fail, the hop points that only warn, and whether the calibration blames the
/// wrapper rather than the file.
pub(crate) const PLANTED: [(&str, &[&str], &[&str], bool); 11] = [
    ("none", &[], &[], false),
    ("drops-key", &["hop-key", "hop-new-intention"], &[], true),
    ("unlisted-key", &["hop-key"], &[], false),
    ("session-key", &["hop-key", "hop-new-intention"], &[], true),
    (
        "mints-key",
        &[
            "hop-key",
            "hop-retry",
            "hop-api-lost",
            "hop-restart",
            "hop-new-intention",
            "hop-concurrent",
            "hop-upstream-retry",
            "hop-errors",
        ],
        &[],
        false,
    ),
    (
        "retry-new-key",
        &["hop-api-lost", "hop-upstream-retry"],
        &[],
        false,
    ),
    ("conflict-as-success", &["hop-errors"], &[], false),
    ("empty-error", &["hop-api-lost"], &["hop-errors"], false),
    ("rewraps-body", &[], &["hop-payload"], false),
    (
        "reencodes-body",
        &["hop-payload", "hop-retry", "hop-api-lost"],
        &[],
        false,
    ),
    ("in-flight-new-key", &["hop-concurrent"], &[], false),
];

/// The hop points of a report with this verdict.
pub(crate) fn hop_points_with(report: &Value, verdict: &str) -> Vec<String> {
    verdicts(report)
        .into_iter()
        .filter(|(name, v)| name.starts_with("hop-") && v == verdict)
        .map(|(name, _)| name)
        .collect()
}

/// The planted-bug wrapper's target file, fitted to `python` and `bug`, checked.
fn planted(python: &Path, bug: &str, folder: &Path, extra: &[&str]) -> Value {
    planted_with("target.toml", python, bug, folder, extra)
}

/// As [`planted`], with another of the folder's target files.
pub(crate) fn planted_with(
    target: &str,
    python: &Path,
    bug: &str,
    folder: &Path,
    extra: &[&str],
) -> Value {
    let python = python.to_str().unwrap();
    let wrapper = repository_root().join("lab/tests/wrappers/planted/wrapper.py");
    let file = fitted(
        &format!("lab/tests/wrappers/planted/{target}"),
        &[
            ("\"python3\"", &format!("{python:?}")),
            (
                "\"wrapper.py\"",
                &format!("{:?}", wrapper.to_str().unwrap()),
            ),
            ("\"--bug\", \"none\"", &format!("\"--bug\", \"{bug}\"")),
        ],
        folder,
    );
    let report = check_json(&file, extra);
    let _ = writeln!(
        std::io::stderr(),
        "planted wrapper bug {bug}: {:?}",
        verdicts(&report)
    );
    report
}

#[test]
fn each_planted_wrapper_bug_fails_the_hop_point_that_catches_it_and_the_wrapper_without_one_passes()
{
    let Some(python) = python(
        "check_hop::each_planted_wrapper_bug_fails_the_hop_point_that_catches_it_and_the_wrapper_without_one_passes",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    for &(bug, failing, warning, blamed) in &PLANTED {
        let report = planted(&python, bug, folder.path(), &[]);
        assert_eq!(
            (
                hop_points_with(&report, "FAIL"),
                hop_points_with(&report, "PASS_WITH_WARNINGS"),
                report["calibration"]["wrapper_at_fault"].is_string(),
            ),
            (
                failing.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
                warning.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
                blamed,
            ),
            "{bug}: {report:#}"
        );
        if bug == "none" {
            assert_eq!(report["passed"], true, "{report:#}");
            let names: Vec<String> = verdicts(&report).into_iter().map(|(n, _)| n).collect();
            assert!(
                names.ends_with(&HOP_POINTS.map(str::to_owned)),
                "the hop points run after the MCP points, in order: {names:?}"
            );
        }
    }
}

/// Issue 46: behind `[upstream]` the lab serves the API, so it sees whose token each create
/// arrived with. Callers whose creates arrive with two callers' tokens are proved apart and the
/// other-caller point is graded; callers whose creates arrive with one token are one caller to
/// the API, and the other-caller point is NOT COVERED, saying what arrived, never a leak.
#[test]
fn the_api_the_lab_serves_proves_the_callers_apart_by_the_tokens_that_arrive() {
    let Some(python) = python(
        "check_hop::the_api_the_lab_serves_proves_the_callers_apart_by_the_tokens_that_arrive",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let report = planted(&python, "none", folder.path(), &[]);
    assert_eq!(verdict(&report, "other-caller"), "PASS", "{report:#}");
    let steps = report["calibration"]["steps"].as_array().unwrap();
    let apart = steps
        .iter()
        .find(|s| s["name"] == "callers-apart")
        .unwrap_or_else(|| panic!("no callers-apart step: {steps:#?}"));
    assert_eq!(apart["field"], "upstream.tokens", "{apart:#}");
    let detail = apart["detail"].as_str().unwrap();
    assert!(
        detail.contains("alice's token") && detail.contains("bob's"),
        "{detail}"
    );

    let wrapper = repository_root().join("lab/tests/wrappers/planted/wrapper.py");
    let one_token = fitted(
        "lab/tests/wrappers/planted/target.toml",
        &[
            ("\"python3\"", &format!("{:?}", python.to_str().unwrap())),
            (
                "\"wrapper.py\"",
                &format!("{:?}", wrapper.to_str().unwrap()),
            ),
            // Bob differs from alice by an environment variable the wrapper never reads.
            (
                "args = [\"--token\", \"bob-token\"]",
                "args = [\"--token\", \"alice-token\"]\nenv = { UNREAD_BY_THE_WRAPPER = \"bob\" }",
            ),
        ],
        folder.path(),
    );
    let report = check_json(&one_token, &[]);
    let scope = report["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "other-caller")
        .unwrap();
    assert_eq!(scope["verdict"], "NOT_COVERED", "{report:#}");
    let reason = scope["reason"].as_str().unwrap();
    assert!(
        reason.contains("both reached the API with alice's token") && !reason.contains("LEAK"),
        "{reason}"
    );
}

/// With `upstream.wrapper_timeout_ms`, the API does the work and answers past the wrapper's own
/// timeout (the planted wrapper's is five seconds a request): the wrapper that gives up and tells
/// the agent passes, and the one that resends under a key of its own makes a second effect.
#[test]
fn a_late_api_reply_past_the_wrappers_timeout_is_judged_by_what_the_wrapper_sends_next() {
    let Some(python) = python(
        "check_hop::a_late_api_reply_past_the_wrappers_timeout_is_judged_by_what_the_wrapper_sends_next",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let shipped =
        std::fs::read_to_string(repository_root().join("lab/tests/wrappers/planted/target.toml"))
            .unwrap();
    let tokens = "tokens = { alice = \"alice-token\", bob = \"bob-token\" }\n";
    assert!(shipped.contains(tokens));
    let late = shipped.replace(tokens, &format!("{tokens}wrapper_timeout_ms = 5000\n"));
    std::fs::write(folder.path().join("target.toml"), late).unwrap();
    let mut verdicts_by_bug = Vec::new();
    for bug in ["none", "retry-new-key"] {
        let python = python.to_str().unwrap();
        let wrapper = repository_root().join("lab/tests/wrappers/planted/wrapper.py");
        let text = std::fs::read_to_string(folder.path().join("target.toml"))
            .unwrap()
            .replace("\"python3\"", &format!("{python:?}"))
            .replace(
                "\"wrapper.py\"",
                &format!("{:?}", wrapper.to_str().unwrap()),
            )
            .replace("\"--bug\", \"none\"", &format!("\"--bug\", \"{bug}\""));
        let file = write(folder.path(), &format!("{bug}.toml"), &text);
        let report = check_json(&file, &[]);
        let point = report["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "hop-upstream-retry")
            .unwrap()
            .clone();
        let late: Vec<(String, bool)> = point["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| {
                c["what"]
                    .as_str()
                    .is_some_and(|w| w.contains("late") || w.contains("timeout"))
            })
            .map(|c| (c["what"].as_str().unwrap().to_owned(), c["passed"] == true))
            .collect();
        verdicts_by_bug.push((bug, point["verdict"].clone(), late));
    }
    let (_, none_verdict, none_late) = &verdicts_by_bug[0];
    assert_eq!(none_verdict, "PASS", "{verdicts_by_bug:#?}");
    assert!(
        none_late.len() >= 2 && none_late.iter().all(|(_, passed)| *passed),
        "{verdicts_by_bug:#?}"
    );
    let (_, bug_verdict, bug_late) = &verdicts_by_bug[1];
    assert_eq!(bug_verdict, "FAIL", "{verdicts_by_bug:#?}");
    assert!(
        bug_late
            .iter()
            .any(|(what, passed)| what.starts_with("one effect") && !passed),
        "{verdicts_by_bug:#?}"
    );
}

/// A slip in the file's `upstream.key_header`, against a wrapper that sends the key in the
/// header the API reads: the calibration names the field (exit status 2), instead of grading the
/// wrapper as one that loses the key.
#[test]
fn a_key_header_the_wrapper_does_not_use_is_the_files_fault_not_the_wrappers() {
    let Some(python) = python(
        "check_hop::a_key_header_the_wrapper_does_not_use_is_the_files_fault_not_the_wrappers",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let python = python.to_str().unwrap();
    let wrapper = repository_root().join("lab/tests/wrappers/planted/wrapper.py");
    let tokens = "tokens = { alice = \"alice-token\", bob = \"bob-token\" }\n";
    let file = fitted(
        "lab/tests/wrappers/planted/target.toml",
        &[
            ("\"python3\"", &format!("{python:?}")),
            (
                "\"wrapper.py\"",
                &format!("{:?}", wrapper.to_str().unwrap()),
            ),
            (tokens, &format!("{tokens}key_header = \"X-Key\"\n")),
        ],
        folder.path(),
    );
    let output = Command::new(LAB)
        .args(["check", "--target"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("upstream.key_header: #1 reached the API with the agent's key in the header idempotency-key, not in X-Key"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing was graded");
}

/// A wrapper written for another API (`POST /v1/messages`, its token bare in `X-Api-Key`, a bare
/// key in `X-Idempotency-Key`, its id in `message_id`): `[upstream.create]` has the lab play that
/// API on its own store, and the hop points judge the wrapper as they judge one of the lab's.
#[test]
fn a_wrapper_of_another_api_is_checked_on_the_route_its_file_declares() {
    let Some(python) =
        python("check_hop::a_wrapper_of_another_api_is_checked_on_the_route_its_file_declares")
    else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let report = planted_with(
        "target-another-api.toml",
        &python,
        "none",
        folder.path(),
        &[],
    );
    assert_eq!(report["passed"], true, "{report:#}");
    // What the wrapper sent is what the history shows: its own path and header, a bare key.
    let creates: Vec<&Value> = report["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["caller"] == "wrapper → API")
        .collect();
    assert!(!creates.is_empty());
    for create in &creates {
        assert_eq!(create["path"], "/v1/messages", "{create:#}");
        let key = create["key"].as_str().unwrap();
        assert!(
            !key.starts_with('"') && key.len() == 36,
            "a bare key: {key}"
        );
    }
    let report = planted_with(
        "target-another-api.toml",
        &python,
        "mints-key",
        folder.path(),
        &[],
    );
    assert!(
        hop_points_with(&report, "FAIL").contains(&"hop-retry".to_owned()),
        "{:?}",
        verdicts(&report)
    );
}

/// `lab check --json --target FILE`, whatever its exit: the status, the report (when one was
/// printed), and stderr.
pub(crate) fn check_outcome(file: &Path) -> (Option<i32>, Option<Value>, String) {
    let output = Command::new(LAB)
        .args(["check", "--json", "--target"])
        .arg(file)
        .output()
        .unwrap();
    let report = lab::serde_json::from_slice(&output.stdout).ok();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), report, stderr)
}

/// `target-another-api.toml` fitted to `python` and `bug`, the wrapper told `wrapper_place` and
/// the file `file_place` (each a replacement of the shipped text), run: the exit status, the
/// report (when one was printed), and stderr.
fn key_placed(
    python: &Path,
    bug: &str,
    folder: &Path,
    wrapper_place: &str,
    file_place: &str,
) -> (Option<i32>, Option<Value>, String) {
    let wrapper = repository_root().join("lab/tests/wrappers/planted/wrapper.py");
    let python = format!("{:?}", python.to_str().unwrap());
    let wrapper = format!("{:?}", wrapper.to_str().unwrap());
    let bug = format!("\"--bug\", \"{bug}\"");
    let file = fitted(
        "lab/tests/wrappers/planted/target-another-api.toml",
        &[
            ("\"python3\"", &python),
            ("\"wrapper.py\"", &wrapper),
            ("\"--bug\", \"none\"", &bug),
            ("\"--key-header\", \"X-Idempotency-Key\"", wrapper_place),
            ("key_header = \"X-Idempotency-Key\"", file_place),
        ],
        folder,
    );
    check_outcome(&file)
}

#[test]
fn a_wrapper_that_sends_the_key_in_the_body_is_read_where_the_file_says_the_api_reads_it() {
    let Some(python) = python(
        "check_hop::a_wrapper_that_sends_the_key_in_the_body_is_read_where_the_file_says_the_api_reads_it",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let in_body = "\"--key-in-body\", \"idempotency_key\"";
    let in_header = "\"--key-header\", \"X-Idempotency-Key\"";
    let pointer = "key_pointer = \"/idempotency_key\"";
    let header = "key_header = \"X-Idempotency-Key\"";
    let (code, report, stderr) = key_placed(&python, "none", folder.path(), in_body, pointer);
    let report = report.unwrap_or_else(|| panic!("no report: {stderr}"));
    assert_eq!(
        (code, &report["passed"]),
        (Some(0), &Value::Bool(true)),
        "{report:#}"
    );
    // The key was read from the body, and the body the API stored is the payload without it.
    let creates: Vec<&Value> = report["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["caller"] == "wrapper → API")
        .collect();
    assert!(!creates.is_empty());
    for create in &creates {
        let key = create["key"]
            .as_str()
            .unwrap_or_else(|| panic!("{create:#}"));
        let body = create["body"].as_str().unwrap();
        assert!(
            body.contains(&format!("\"idempotency_key\": \"{key}\"")),
            "{create:#}"
        );
    }
    let (_, report, stderr) = key_placed(&python, "mints-key", folder.path(), in_body, pointer);
    let report = report.unwrap_or_else(|| panic!("no report: {stderr}"));
    assert!(
        hop_points_with(&report, "FAIL").contains(&"hop-retry".to_owned()),
        "{:?}",
        verdicts(&report)
    );
    // The key where the file says the API does not read it, in the other kind of place: the
    // wrapper's finding (issue 46), never advice to declare the other place, which would have the
    // check grade an API that reads the key where this one does not. hop-key says where it went.
    for (wrapper_place, file_place, other_field, place) in [
        (
            in_body,
            header,
            "upstream.key_pointer",
            "the body's /idempotency_key",
        ),
        (
            in_header,
            pointer,
            "upstream.key_header",
            "the header x-idempotency-key",
        ),
    ] {
        let (code, report, stderr) =
            key_placed(&python, "none", folder.path(), wrapper_place, file_place);
        let report = report.unwrap_or_else(|| panic!("{place}: exit {code:?}: {stderr}"));
        assert_eq!(code, Some(1), "{place}: {stderr}");
        assert!(!stderr.contains(other_field), "{place}: {stderr}");
        let key = report["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "hop-key")
            .unwrap();
        assert_eq!(key["verdict"], "FAIL", "{key:#}");
        assert!(key.to_string().contains(place), "{place}: {key:#}");
    }
}

/// `target-more-routes.toml` fitted to `python`, with `cut` (a `[[upstream.routes]]` entry's
/// lines) taken out, run: the exit status, the report (when one was printed), and stderr.
fn more_routes(python: &Path, folder: &Path, cut: &[&str]) -> (Option<i32>, Option<Value>, String) {
    let wrapper = repository_root().join("lab/tests/wrappers/planted/wrapper.py");
    let mut replace: Vec<(&str, String)> = vec![
        ("\"python3\"", format!("{:?}", python.to_str().unwrap())),
        ("\"wrapper.py\"", format!("{:?}", wrapper.to_str().unwrap())),
    ];
    for lines in cut {
        replace.push((lines, String::new()));
    }
    let replace: Vec<(&str, &str)> = replace.iter().map(|(a, b)| (*a, b.as_str())).collect();
    let file = fitted(
        "lab/tests/wrappers/planted/target-more-routes.toml",
        &replace,
        folder,
    );
    check_outcome(&file)
}

const ME_ROUTE: &str = "[[upstream.routes]]\nmethod = \"GET\"\npath = \"/v1/me\"\n\
                        answer = { account = \"acct_lab\", name = \"the lab\" }\n";
const READ_ROUTE: &str = "[[upstream.routes]]\nmethod = \"GET\"\npath = \"/v1/messages/{id}\"\n\
                          answer = { message_id = \"{{id}}\", status = \"sent\" }\n";

#[test]
fn a_wrapper_that_calls_more_routes_of_its_api_is_checked_once_the_file_declares_them() {
    let Some(python) = python(
        "check_hop::a_wrapper_that_calls_more_routes_of_its_api_is_checked_once_the_file_declares_them",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    // Declared: the lab answers the token check and each read itself, and grades the wrapper.
    let (code, report, stderr) = more_routes(&python, folder.path(), &[]);
    let report = report.unwrap_or_else(|| panic!("no report: {stderr}"));
    assert_eq!(
        (code, &report["passed"]),
        (Some(0), &Value::Bool(true)),
        "{report:#}"
    );
    assert_eq!(
        hop_points_with(&report, "PASS").len(),
        HOP_POINTS.len(),
        "{:?}",
        verdicts(&report)
    );
    // Not declared: the check stops before it grades, naming the field and the requests the
    // lab's own API does not have; the wrapper is not blamed.
    for (cut, missing) in [
        (vec![ME_ROUTE, READ_ROUTE], "GET /v1/me"),
        (vec![READ_ROUTE], "GET /v1/messages/msg_"),
    ] {
        let (code, report, stderr) = more_routes(&python, folder.path(), &cut);
        assert_eq!(code, Some(2), "{missing}: {stderr}");
        assert!(report.is_none(), "{missing}: nothing is graded: {report:?}");
        assert!(
            stderr.contains("upstream.routes") && stderr.contains(missing),
            "{missing}: {stderr}"
        );
        assert!(stderr.contains("target-more-routes.toml"), "{stderr}");
    }
}

/// The keys the API got for one failed point, and what the agent got, as the report's history
/// holds them: the evidence a person reads.
fn exchanges_of(report: &Value, point: &str) -> Vec<(String, String, String)> {
    report["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["point"] == point)
        .map(|e| {
            (
                e["caller"].as_str().unwrap_or_default().to_owned(),
                e["key"].as_str().unwrap_or("no key").to_owned(),
                e["step"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_wrapper_that_resends_with_a_new_key_shows_both_keys_at_the_api_and_its_page_is_the_books() {
    let Some(python) = python(
        "check_hop::a_wrapper_that_resends_with_a_new_key_shows_both_keys_at_the_api_and_its_page_is_the_books",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let page_path = folder.path().join("report.html");
    // The shipped file beside the wrapper, only its bug changed, and the venv's python first on
    // PATH: the page names the command as a reader would write it, with no path of this machine.
    let planted_folder = repository_root().join("lab/tests/wrappers/planted");
    let shipped = std::fs::read_to_string(planted_folder.join("target.toml")).unwrap();
    let file = planted_folder.join(".target-fitted.toml");
    std::fs::write(
        &file,
        shipped.replace("\"--bug\", \"none\"", "\"--bug\", \"retry-new-key\""),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        python.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new(LAB)
        .current_dir(repository_root())
        .env("PATH", path)
        .args([
            "check",
            "--target",
            "lab/tests/wrappers/planted/.target-fitted.toml",
        ])
        .args(["--json", "--html", page_path.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let report: Value = lab::serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    // The API's reply is lost; the wrapper resends the create under a key of its own; the API
    // creates a second ticket. The history holds the agent's call and both of the wrapper's
    // creates, with their keys.
    let lost = exchanges_of(&report, "hop-api-lost");
    let at_api: Vec<&(String, String, String)> =
        lost.iter().filter(|e| e.0 == "wrapper → API").collect();
    assert!(at_api.len() >= 2, "{lost:#?}");
    assert_ne!(at_api[0].1, at_api[1].1, "two keys at the API: {lost:#?}");
    let agent = lost.iter().find(|e| e.0 == "alice").unwrap();
    assert_eq!(
        agent.1, at_api[0].1,
        "the first create carried the agent's key"
    );
    let page = std::fs::read_to_string(&page_path).unwrap();
    assert!(
        page.contains("wrapper → API"),
        "the page draws the API's side"
    );
    let book_page = repository_root().join("src/check-report/hop-retry-new-key.html");
    if std::env::var_os("LAB_WRITE_REPORT_PAGE").is_some_and(|v| v == "1") {
        std::fs::write(&book_page, &page).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&book_page).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (write it with LAB_WRITE_REPORT_PAGE=1)",
            book_page.display()
        )
    });
    let sections = |page: &str| -> Vec<String> {
        page.split("<section class=\"point\" id=\"point-")
            .skip(1)
            .map(|rest| {
                let name = rest.split('"').next().unwrap().to_owned();
                let verdict = rest.split("data-verdict=\"").nth(1).unwrap();
                format!("{name} {}", verdict.split('"').next().unwrap())
            })
            .collect()
    };
    assert_eq!(
        sections(&committed),
        sections(&page),
        "src/check-report/hop-retry-new-key.html shows other verdicts than this run (after a \
         deliberate change, rewrite it with LAB_WRITE_REPORT_PAGE=1 and review the diff)"
    );
    assert!(
        committed.contains(lab::check::html::STYLE),
        "the book's page was drawn by an older writer: rewrite it with LAB_WRITE_REPORT_PAGE=1"
    );
}

/// A wrapper of `lab/tests/wrappers/NAME`: its folder, when what it runs on is installed; `None`
/// after a loud skip, a failure under `LAB_REQUIRE_WRAPPERS=1`.
enum Runs {
    /// Node, with `node_modules` in the folder (npm ci).
    Node,
    /// The python of the venv this variable names.
    Venv(&'static str),
}

fn wrapper(test: &str, name: &str, runs: &Runs) -> Option<(PathBuf, Vec<(String, String)>)> {
    let folder = repository_root().join("lab/tests/wrappers").join(name);
    let found = match runs {
        Runs::Node => {
            let node = Command::new("node")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            (node && folder.join("node_modules").is_dir()).then(Vec::new)
        }
        Runs::Venv(variable) => std::env::var_os(variable)
            .filter(|v| !v.is_empty())
            .map(|venv| PathBuf::from(venv).join("bin/python"))
            .filter(|python| python.exists())
            .map(|python| {
                vec![(
                    "\"python3\"".to_owned(),
                    format!("{:?}", python.to_str().unwrap()),
                )]
            }),
    };
    if let Some(replace) = found {
        return Some((folder, replace));
    }
    let what = match runs {
        Runs::Node => format!("node, or npm ci in lab/tests/wrappers/{name}"),
        Runs::Venv(variable) => {
            format!("{variable} (a venv from lab/tests/wrappers/{name}/requirements.txt)")
        }
    };
    if std::env::var("LAB_REQUIRE_WRAPPERS").as_deref() == Ok("1") {
        panic!("LAB_REQUIRE_WRAPPERS=1, but {what} is missing (.ci/run installs it)");
    }
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: {test}: no {what}; LAB_REQUIRE_WRAPPERS=1 makes this a failure ***\n"
    );
    None
}

/// The python of the venv `variable` names, for a wrapper in `lab/tests/wrappers/NAME` that the
/// test starts itself (over Streamable HTTP the check does not); `None` after [`wrapper`]'s loud
/// skip, a failure under `LAB_REQUIRE_WRAPPERS=1`.
pub(crate) fn venv_python(test: &str, name: &str, variable: &'static str) -> Option<PathBuf> {
    wrapper(test, name, &Runs::Venv(variable))?;
    std::env::var_os(variable).map(|venv| PathBuf::from(venv).join("bin/python"))
}

/// One point's cell of the book's findings table: its verdict, and for the points whose finding
/// has a short name, that name.
pub(crate) fn cell(report: &Value, point: &str) -> String {
    let Some(found) = report["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == point)
    else {
        return "not run".to_owned();
    };
    let checks = found["checks"].as_array().cloned().unwrap_or_default();
    let failed = |words: &str| {
        checks
            .iter()
            .any(|c| c["passed"] == false && c["what"].as_str().is_some_and(|w| w.contains(words)))
    };
    let verdict = found["verdict"].as_str().unwrap_or_default();
    match (verdict, point) {
        ("NOT_COVERED", _) => "not run".to_owned(),
        ("PASS", "hop-upstream-retry") => {
            let resent = checks
                .iter()
                .any(|c| c["what"].as_str().is_some_and(|w| w.contains("resent the")));
            if resent {
                "PASS: resent under the same key".to_owned()
            } else {
                "PASS: no resend; the agent is told".to_owned()
            }
        }
        ("PASS", _) => "PASS".to_owned(),
        (_, "hop-key") if failed("the tool takes a key") => "FAIL: no key argument".to_owned(),
        (_, "hop-payload") if failed("not re-wrapped") => "WARN: the body is changed".to_owned(),
        (verdict, _) => verdict.replace("PASS_WITH_WARNINGS", "WARN"),
    }
}

/// The wrapper's row of the book's findings table, from its report: the key at the API, the
/// body, the three retries (after a lost result, a lost API reply, a restart) together, calls
/// with one key sent together, the API's `503` and `429`, its `422` and `409`, and the verdict.
pub(crate) fn row(report: &Value, package: &str) -> String {
    let retries: Vec<String> = ["hop-retry", "hop-api-lost", "hop-restart"]
        .iter()
        .map(|p| cell(report, p))
        .collect();
    let retries = if retries.iter().all(|c| c == &retries[0]) {
        retries[0].clone()
    } else {
        retries.join(", ")
    };
    let cells = [
        cell(report, "hop-key"),
        cell(report, "hop-payload"),
        retries,
        cell(report, "hop-concurrent"),
        cell(report, "hop-upstream-retry"),
        cell(report, "hop-errors"),
    ];
    // No line break at the end: the chapter includes the rows one under another, and a blank
    // line would end its table.
    format!(
        "| {package} | {} | {} |",
        cells.join(" | "),
        if report["passed"] == true {
            "PASS"
        } else {
            "FAIL"
        }
    )
}

/// Runs the wrapper's target file, prints the time, and compares its findings with the pinned
/// ones and its row with the book's.
fn check_wrapper(test: &str, name: &str, package: &str, runs: Runs) -> Option<Value> {
    let (folder, replace) = wrapper(test, name, &runs)?;
    let scratch = tempfile::tempdir().unwrap();
    let shipped = format!("lab/tests/wrappers/{name}/target.toml");
    let replace: Vec<(&str, &str)> = replace
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    // The copy runs in the wrapper's folder, as the shipped file does.
    let file = if replace.is_empty() {
        folder.join("target.toml")
    } else {
        let fitted = fitted(&shipped, &replace, scratch.path());
        let beside = folder.join(".target-fitted.toml");
        std::fs::copy(&fitted, &beside).unwrap();
        beside
    };
    let started = Instant::now();
    let report = check_json(&file, &[]);
    let elapsed = started.elapsed().as_millis();
    if file.ends_with(".target-fitted.toml") {
        let _ = std::fs::remove_file(&file);
    }
    let _ = writeln!(
        std::io::stderr(),
        "{name}: lab check --target took {elapsed} ms; {:?}",
        verdicts(&report)
    );
    compare_with_the_pinned_findings(
        &findings(&report, name, package),
        &folder.join("findings.json"),
    );
    compare_with_the_book(&row(&report, package), &format!("hop-{name}.md"));
    Some(report)
}

#[test]
fn the_openapi_mcp_server_from_npm_keeps_its_pinned_hop_verdicts() {
    let Some(report) = check_wrapper(
        "check_hop::the_openapi_mcp_server_from_npm_keeps_its_pinned_hop_verdicts",
        "openapi-mcp-server",
        "@ivotoby/openapi-mcp-server 1.16.1 (npm)",
        Runs::Node,
    ) else {
        return;
    };
    // Confirmed by hand (REPRODUCTION.md): the key argument is sent as the header, unchanged;
    // the body goes out wrapped as {"body": ...}.
    assert_eq!(hop_points_with(&report, "FAIL"), Vec::<String>::new());
    assert_eq!(
        hop_points_with(&report, "PASS_WITH_WARNINGS"),
        ["hop-payload"]
    );
}

#[test]
fn fastmcp_from_openapi_keeps_its_pinned_hop_verdicts() {
    let Some(report) = check_wrapper(
        "check_hop::fastmcp_from_openapi_keeps_its_pinned_hop_verdicts",
        "fastmcp",
        "fastmcp 4.2.3 (PyPI)",
        Runs::Venv("LAB_WRAPPERS_VENV_MCP2"),
    ) else {
        return;
    };
    // Confirmed by hand: the key as the header, the body unwrapped.
    assert_eq!(hop_points_with(&report, "FAIL"), Vec::<String>::new());
    assert_eq!(
        hop_points_with(&report, "PASS_WITH_WARNINGS"),
        Vec::<String>::new()
    );
}

#[test]
fn the_awslabs_openapi_mcp_server_keeps_its_pinned_hop_verdicts() {
    let Some(report) = check_wrapper(
        "check_hop::the_awslabs_openapi_mcp_server_keeps_its_pinned_hop_verdicts",
        "awslabs-openapi",
        "awslabs.openapi-mcp-server 1.1.6 (PyPI)",
        Runs::Venv("LAB_WRAPPERS_VENV_AWSLABS"),
    ) else {
        return;
    };
    // Confirmed by hand: the key as the header; the body wrapped as {"body": ...}.
    assert_eq!(hop_points_with(&report, "FAIL"), Vec::<String>::new());
    assert_eq!(
        hop_points_with(&report, "PASS_WITH_WARNINGS"),
        ["hop-payload"]
    );
}

#[test]
fn mcp_openapi_proxy_which_takes_no_key_is_reported_unsafe_to_retry() {
    let Some(report) = check_wrapper(
        "check_hop::mcp_openapi_proxy_which_takes_no_key_is_reported_unsafe_to_retry",
        "mcp-openapi-proxy",
        "mcp-openapi-proxy 0.4.0 (PyPI)",
        Runs::Venv("LAB_WRAPPERS_VENV_MCP2"),
    ) else {
        return;
    };
    // Confirmed by hand: the tool has no key argument, so the same call twice sends two
    // byte-identical creates without Idempotency-Key (the lab's API refuses both).
    assert_eq!(report["passed"], false);
    let key = report["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "hop-key")
        .unwrap();
    let observed = key["checks"][0]["observed"].as_str().unwrap();
    assert!(
        observed
            .starts_with("unsafe to retry: the same call twice sent two byte-identical creates"),
        "{observed}"
    );
}

fn write(folder: &Path, name: &str, text: &str) -> PathBuf {
    let path = folder.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn bad_upstream_sections_are_refused_naming_the_field_with_nothing_started() {
    let folder = tempfile::tempdir().unwrap();
    let head = "[mcp]\ntransport = \"stdio\"\n\
                command = [\"/nonexistent/wrapper\", \"--api\", \"{{upstream}}\"]\n\
                [mcp.tool]\nname = \"create\"\nkey_argument = \"key\"\n\
                arguments = { title = \"{{title}}\" }\nfields = { title = \"t\" }\n\
                [mcp.identity]\nstructured_pointer = \"/id\"\n\
                [[mcp.callers]]\nname = \"a\"\n";
    let cases = [
        (
            "no [upstream]",
            head.to_owned(),
            "[upstream]: the file names {{upstream}}",
        ),
        (
            "no tokens",
            format!("{head}[upstream]\n"),
            "upstream.tokens: name at least one caller",
        ),
        (
            "another API",
            format!("{head}[upstream]\napi = \"stripe\"\ntokens = {{ a = \"t\" }}\n"),
            "upstream.api: \"stripe\"",
        ),
        (
            "a header name with a space",
            format!("{head}[upstream]\nkey_header = \"X Key\"\ntokens = {{ a = \"t\" }}\n"),
            "upstream.key_header: \"X Key\" is not a header name",
        ),
        (
            "a bad key form",
            format!("{head}[upstream]\nkey_form = \"uuid\"\ntokens = {{ a = \"t\" }}\n"),
            "upstream.key_form: \"uuid\"",
        ),
        (
            "a body argument that is not a pointer",
            format!("{head}[upstream]\nbody_argument = \"body\"\ntokens = {{ a = \"t\" }}\n"),
            "upstream.body_argument: \"body\" is not a JSON pointer",
        ),
        (
            "the placeholder nowhere",
            format!("{head}[upstream]\ntokens = {{ a = \"t\" }}\n").replace(
                "\"--api\", \"{{upstream}}\"",
                "\"--api\", \"http://127.0.0.1:9\"",
            ),
            "mcp.command: names {{upstream}} nowhere",
        ),
        (
            "a caller without a token",
            format!("{head}[upstream]\ntokens = {{ alice = \"t\" }}\n"),
            "upstream.tokens: names no token for the caller \"a\"",
        ),
        (
            "a create route without a path",
            format!(
                "{head}[upstream]\ntokens = {{ a = \"t\" }}\n[upstream.create]\nstatus = 200\n"
            ),
            "upstream.create.path: missing (required)",
        ),
        (
            "a create route with a query",
            format!(
                "{head}[upstream]\ntokens = {{ a = \"t\" }}\n[upstream.create]\npath = \"/v1/m?x=1\"\n"
            ),
            "upstream.create.path: \"/v1/m?x=1\"",
        ),
        (
            "a create route that does not succeed",
            format!(
                "{head}[upstream]\ntokens = {{ a = \"t\" }}\n[upstream.create]\npath = \"/m\"\nstatus = 404\n"
            ),
            "upstream.create.status: 404",
        ),
        (
            "an answer that names no id",
            format!(
                "{head}[upstream]\ntokens = {{ a = \"t\" }}\n[upstream.create]\npath = \"/m\"\nanswer = {{ ok = true }}\n"
            ),
            "upstream.create.answer: names no {{id}}",
        ),
        (
            "a wrapper over HTTP, which the check does not start, without a port",
            head.replace(
                "transport = \"stdio\"\ncommand = [\"/nonexistent/wrapper\", \"--api\", \"{{upstream}}\"]",
                "transport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"",
            ) + "[upstream]\ntokens = { a = \"t\" }\n",
            "upstream.port: a wrapper over HTTP is started by you",
        ),
        (
            "port zero",
            format!("{head}[upstream]\ntokens = {{ a = \"t\" }}\nport = 0\n"),
            "upstream.port: 0",
        ),
        (
            "a wrapper timeout too long to wait out",
            format!("{head}[upstream]\ntokens = {{ a = \"t\" }}\nwrapper_timeout_ms = 600000\n"),
            "upstream.wrapper_timeout_ms: 600000",
        ),
        (
            "an unknown field",
            format!("{head}[upstream]\ntokens = {{ a = \"t\" }}\nbase_url = \"x\"\n"),
            "unknown field `base_url`",
        ),
        (
            "a key both in a header and in the body",
            format!(
                "{head}[upstream]\ntokens = {{ a = \"t\" }}\nkey_header = \"K\"\nkey_pointer = \"/k\"\n"
            ),
            "upstream.key_pointer: the API reads its key from a header",
        ),
        (
            "a key pointer that is not a pointer",
            format!("{head}[upstream]\ntokens = {{ a = \"t\" }}\nkey_pointer = \"k\"\n"),
            "upstream.key_pointer: \"k\" is not a JSON pointer",
        ),
        (
            "a key pointer to the whole body",
            format!("{head}[upstream]\ntokens = {{ a = \"t\" }}\nkey_pointer = \"\"\n"),
            "upstream.key_pointer: \"\": a pointer to a member",
        ),
        (
            "a declared route without a method",
            format!(
                "{head}[upstream]\ntokens = {{ a = \"t\" }}\n[[upstream.routes]]\npath = \"/v1/me\"\n"
            ),
            "upstream.routes[0].method: missing (required)",
        ),
        (
            "a declared route with an unknown method",
            format!(
                "{head}[upstream]\ntokens = {{ a = \"t\" }}\n[[upstream.routes]]\nmethod = \"FETCH\"\npath = \"/v1/me\"\n"
            ),
            "upstream.routes[0].method: \"FETCH\"",
        ),
        (
            "a declared route with a half-open segment",
            format!(
                "{head}[upstream]\ntokens = {{ a = \"t\" }}\n[[upstream.routes]]\nmethod = \"GET\"\npath = \"/v1/me\"\n[[upstream.routes]]\nmethod = \"GET\"\npath = \"/v1/m/{{id\"\n"
            ),
            "upstream.routes[1].path: \"/v1/m/{id\"",
        ),
        (
            "a declared route that is the create route",
            format!(
                "{head}[upstream]\ntokens = {{ a = \"t\" }}\n[[upstream.routes]]\nmethod = \"post\"\npath = \"/tickets\"\n"
            ),
            "upstream.routes[0].path: POST /tickets is the create route",
        ),
        (
            "a declared route with a status out of range",
            format!(
                "{head}[upstream]\ntokens = {{ a = \"t\" }}\n[[upstream.routes]]\nmethod = \"GET\"\npath = \"/v1/me\"\nstatus = 99\n"
            ),
            "upstream.routes[0].status: 99",
        ),
        (
            "a declared route with an unknown field",
            format!(
                "{head}[upstream]\ntokens = {{ a = \"t\" }}\n[[upstream.routes]]\nmethod = \"GET\"\npath = \"/v1/me\"\nbody = \"x\"\n"
            ),
            "unknown field `body`",
        ),
    ];
    for (what, text, expected) in cases {
        let file = write(folder.path(), "target.toml", &text);
        let output = Command::new(LAB)
            .args(["check", "--target"])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{what}: {stderr}");
        assert!(stderr.contains(expected), "{what}: {stderr}");
        assert!(
            stderr.contains("target.toml"),
            "{what}: names the file: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{what}: nothing was graded");
    }
}
