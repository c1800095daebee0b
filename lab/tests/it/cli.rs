//! The `lab` command as a user runs it: output, exit codes, and what happens to files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::repository_root;

pub const REFERENCE_LINES: &str = r#"naive_retry: {"attempts": 2, "tickets": 2}
stable_key_retry: {"attempts": 3, "replay_ticket_id": 1, "tickets": 1}
changed_payload: {"rejected": true, "tickets": 1}
failure_before_commit: {"tickets_after_retry": 1, "tickets_before_retry": 0}
concurrent_same_key: {"attempts": 8, "returned_ticket_ids": [1], "tickets": 1}
new_key_same_payload: {"tickets": 2}
deleted_replay_record: {"tickets": 2}
PASS: 7 scenarios
"#;

fn lab(args: &[&str], folder: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(args)
        .current_dir(folder)
        .output()
        .expect("the lab binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// The reference lab's `scenarios` object, as its results.json records it.
fn reference_scenarios() -> lab::serde_json::Value {
    lab::serde_json::json!({
        "naive_retry": {"attempts": 2, "tickets": 2},
        "stable_key_retry": {"attempts": 3, "tickets": 1, "replay_ticket_id": 1},
        "changed_payload": {"rejected": true, "tickets": 1},
        "failure_before_commit": {"tickets_before_retry": 0, "tickets_after_retry": 1},
        "concurrent_same_key": {"attempts": 8, "tickets": 1, "returned_ticket_ids": [1]},
        "new_key_same_payload": {"tickets": 2},
        "deleted_replay_record": {"tickets": 2}
    })
}

#[test]
fn a_run_from_another_folder_prints_the_reference_lines_and_writes_the_evidence() {
    let folder = tempfile::tempdir().unwrap();
    let output = lab(&["--output", "r.json"], folder.path());
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), REFERENCE_LINES);
    let written: lab::serde_json::Value =
        lab::serde_json::from_slice(&std::fs::read(folder.path().join("r.json")).unwrap()).unwrap();
    assert_eq!(written["scenarios"], reference_scenarios());
    assert_eq!(written["passed"], true);
    assert_eq!(written["sqlite"], lab::sqlite::sqlite_version());
    // Only the output file is left behind: no temporary file, no database.
    let names: Vec<_> = std::fs::read_dir(folder.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["r.json"]);
}

#[test]
fn another_fixture_gives_the_same_values() {
    let folder = tempfile::tempdir().unwrap();
    let fixture = folder.path().join("other.json");
    std::fs::write(
        &fixture,
        r#"{
          "payload": {"z": {"y": [3, {"é": "ü"}], "x": 1.5}, "title": "Überprüfung 🚦", "priority": "urgent"},
          "scope": {"operation": "open_incident", "caller": "night-shift-bot"},
          "operation_key": "incident/2026-11-29/key #7 \"night\""
        }"#,
    )
    .unwrap();
    let output = lab(&["--fixture", fixture.to_str().unwrap()], folder.path());
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), REFERENCE_LINES);
}

/// Runs `lab` with bad input next to an existing output file and checks: exit 2, a message that
/// contains `expected`, nothing on stdout, and the output file byte-for-byte unchanged.
fn rejects(fixture_text: Option<&str>, output_name: &str, expected: &str) {
    let folder = tempfile::tempdir().unwrap();
    let existing = folder.path().join("existing.json");
    std::fs::write(&existing, b"{\"precious\": true}\n").unwrap();
    let mut args = vec![];
    let fixture = folder.path().join("fixture.json");
    if let Some(text) = fixture_text {
        std::fs::write(&fixture, text).unwrap();
        args.extend(["--fixture", "fixture.json"]);
    } else {
        args.extend(["--fixture", "missing.json"]);
    }
    args.extend(["--output", output_name]);
    let output = lab(&args, folder.path());
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(
        message.contains(expected),
        "expected {expected:?} in {message:?}"
    );
    assert_eq!(message.lines().count(), 1, "one line: {message:?}");
    assert!(output.stdout.is_empty());
    assert_eq!(std::fs::read(&existing).unwrap(), b"{\"precious\": true}\n");
    let mut names: Vec<PathBuf> = std::fs::read_dir(folder.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let mut expected_names = vec![existing.clone()];
    if fixture_text.is_some() {
        expected_names.push(fixture.clone());
    }
    expected_names.sort();
    assert_eq!(names, expected_names, "no file was added");
}

const GOOD: &str =
    r#"{"operation_key": "k-1", "scope": {"caller": "c", "operation": "o"}, "payload": {"a": 1}}"#;

#[test]
fn a_missing_fixture_is_named() {
    rejects(None, "existing.json", "cannot read missing.json");
}

#[test]
fn invalid_json_is_named_with_its_position() {
    rejects(
        Some("{\"operation_key\": "),
        "existing.json",
        "fixture.json: invalid JSON: EOF while parsing a value at line 1 column 18",
    );
}

#[test]
fn a_missing_operation_key_is_named() {
    rejects(
        Some(r#"{"scope": {"caller": "c", "operation": "o"}, "payload": {}}"#),
        "existing.json",
        "fixture.json: missing field `operation_key`",
    );
}

#[test]
fn a_missing_payload_is_named() {
    rejects(
        Some(r#"{"operation_key": "k", "scope": {"caller": "c", "operation": "o"}}"#),
        "existing.json",
        "fixture.json: missing field `payload`",
    );
}

#[test]
fn a_payload_that_is_not_an_object_is_named() {
    rejects(
        Some(
            r#"{"operation_key": "k", "scope": {"caller": "c", "operation": "o"}, "payload": [1]}"#,
        ),
        "existing.json",
        "field `payload` must be a JSON object, found array",
    );
}

#[test]
fn an_invalid_key_is_named() {
    rejects(
        Some(r#"{"operation_key": "", "scope": {"caller": "c", "operation": "o"}, "payload": {}}"#),
        "existing.json",
        "field `operation_key`: invalid operation key \"\": must not be empty",
    );
    rejects(
        Some(r#"{"operation_key": 7, "scope": {"caller": "c", "operation": "o"}, "payload": {}}"#),
        "existing.json",
        "field `operation_key` must be a string, found number",
    );
}

#[test]
fn an_invalid_scope_is_named() {
    rejects(
        Some(r#"{"operation_key": "k", "scope": {"caller": "c"}, "payload": {}}"#),
        "existing.json",
        "missing field `scope.operation`",
    );
    rejects(
        Some(
            r#"{"operation_key": "k", "scope": {"caller": "c\u0007", "operation": "o"}, "payload": {}}"#,
        ),
        "existing.json",
        "invalid caller",
    );
}

#[test]
fn an_unknown_fixture_field_is_named() {
    rejects(
        Some(
            r#"{"operation_key": "k", "scope": {"caller": "c", "operation": "o"}, "payload": {}, "paylod": {}}"#,
        ),
        "existing.json",
        "unknown field `paylod`",
    );
}

#[test]
fn an_output_in_a_missing_folder_is_named() {
    rejects(
        Some(GOOD),
        "no/such/folder/out.json",
        "cannot write output no/such/folder/out.json",
    );
}

#[test]
fn an_output_that_is_a_folder_is_named() {
    rejects(Some(GOOD), ".", "cannot write output .");
}

#[test]
fn a_read_only_output_folder_leaves_the_existing_file_unchanged() {
    let folder = tempfile::tempdir().unwrap();
    let inner = folder.path().join("locked");
    std::fs::create_dir(&inner).unwrap();
    let existing = inner.join("results.json");
    std::fs::write(&existing, b"old\n").unwrap();
    set_mode(&inner, 0o555);
    // root ignores directory permissions; then the write succeeds and there is nothing to check.
    let probe = inner.join("probe");
    if std::fs::write(&probe, b"").is_ok() {
        std::fs::remove_file(&probe).unwrap();
        set_mode(&inner, 0o755);
        eprintln!(
            "NOTE: running as a user who can write a read-only folder (root); the unwritable-output case is covered by the missing-folder and folder-as-output tests"
        );
        return;
    }
    let output = lab(&["--output", existing.to_str().unwrap()], folder.path());
    set_mode(&inner, 0o755);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("cannot write output"));
    assert_eq!(std::fs::read(&existing).unwrap(), b"old\n");
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn the_default_fixture_is_the_repository_one() {
    let built_in = lab::fixture::built_in().unwrap();
    let on_disk = lab::fixture::load(&repository_root().join("fixture.json")).unwrap();
    assert_eq!(built_in, on_disk);
}

#[test]
fn bench_rejects_zero_iterations() {
    let folder = tempfile::tempdir().unwrap();
    let output = lab(&["bench", "--iterations", "0"], folder.path());
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output)
            .contains("--iterations, --repeats, --bursts and --retained must be at least 1")
    );
}
