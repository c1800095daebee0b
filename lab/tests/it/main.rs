//! One integration-test binary, a module per concern.

mod agents;
mod audit;
mod audit_har;
mod audit_otlp;
mod backend;
mod bad_input;
mod bench;
mod book;
mod calibration;
mod check;
mod check_callers;
mod check_effect;
mod check_gateway;
mod check_hop;
mod check_hop_streamable;
mod check_hop_told;
mod check_keys;
mod check_mcp;
mod check_target;
mod check_vocab;
mod cli;
mod clients;
mod conformance;
mod crash;
mod durability;
mod evidence;
mod group_commit;
mod http;
mod http_hostile;
#[cfg(feature = "postgres")]
mod http_postgres;
mod mcp;
mod mcp_conformance;
mod mcp_grader;
mod mcp_grader_faults;
mod middlewares;
#[cfg(feature = "model")]
mod model;
#[cfg(feature = "model")]
mod model_replay;
mod outside;
#[cfg(feature = "postgres")]
mod postgres;
mod proxy;
mod refusals;
mod reports;
mod retention;
mod runner;
mod sim;
mod store;
mod suite;

use lab::{OperationKey, Payload, Scope};

/// A scope, key and payload for tests that do not care which.
pub fn sample() -> (Scope, OperationKey, Payload) {
    (
        Scope::new("tests", "create_ticket").unwrap(),
        OperationKey::try_from("test-key-1").unwrap(),
        Payload::new(lab::serde_json::json!({"title": "Disk full", "priority": "normal"})).unwrap(),
    )
}

/// The repository root (the workspace above the lab crate).
pub fn repository_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the lab crate sits inside the repository")
        .to_owned()
}

/// Waits until `done` holds, looking again every few milliseconds: for tests that must see one
/// event happen before they cause the next. The minute is only a guard that ends a broken run; a
/// healthy run never comes near it, however loaded the machine.
///
/// # Panics
/// When `done` still does not hold after a minute; the message names `what` never happened.
pub fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited a minute and still not: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
