//! The committed results.json is a run's output, not a hand-edited file.

use lab::{Evidence, SqliteStore, fixture, suite};

use crate::repository_root;

#[test]
fn committed_results_match_a_fresh_run() {
    let path = repository_root().join("results.json");
    let committed = Evidence::read(&path).unwrap();
    let operation = fixture::built_in().unwrap();
    let fresh = suite::run(&operation, |_| SqliteStore::temporary()).unwrap();
    assert_eq!(
        committed.scenarios, fresh,
        "results.json disagrees with a fresh run: regenerate it with `cargo run -p lab -- --output results.json`"
    );
    assert!(committed.passed);
    assert_eq!(committed.experiment, lab::evidence::EXPERIMENT);
    assert_eq!(committed.backend, "sqlite");
}

#[test]
fn committed_results_are_byte_for_byte_what_the_lab_writes() {
    // Re-serialising the parsed file must give the file back: nobody re-indented or edited it.
    let path = repository_root().join("results.json");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(Evidence::read(&path).unwrap().to_json(), text);
}

#[test]
fn an_evidence_file_with_a_wrong_field_is_rejected_with_its_name() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("results.json");
    let mut value: lab::serde_json::Value = lab::serde_json::from_str(
        &std::fs::read_to_string(repository_root().join("results.json")).unwrap(),
    )
    .unwrap();
    value["scenarios"]["naive_retry"]["tickets"] = lab::serde_json::json!("two");
    std::fs::write(&path, value.to_string()).unwrap();
    let err = Evidence::read(&path).unwrap_err().to_string();
    assert!(
        err.contains("results.json") && err.contains("not an evidence file"),
        "{err}"
    );
}
