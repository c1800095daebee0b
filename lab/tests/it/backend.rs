//! Choosing the store on the command line: mistakes are bad input (exit status 2, one line that
//! says what to do), with or without PostgreSQL support built in. None of these needs a server.

use std::process::{Command, Output};

fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(args)
        .output()
        .expect("the lab binary runs")
}

/// Checks exit status 2, nothing on stdout, and one line on stderr containing `expected`.
fn rejects(args: &[&str], expected: &str) {
    let output = lab(args);
    let message = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(output.stdout.is_empty());
    assert!(
        message.contains(expected),
        "expected {expected:?} in {message:?}"
    );
    assert_eq!(message.lines().count(), 1, "one line: {message:?}");
}

#[test]
fn postgres_without_a_database_url_is_bad_input() {
    rejects(
        &["--backend", "postgres"],
        "PostgreSQL needs --database-url URL",
    );
}

#[test]
fn a_database_url_without_the_postgres_backend_is_bad_input() {
    rejects(
        &["--database-url", "postgresql://127.0.0.1/x"],
        "--database-url is for --backend postgres",
    );
}

#[test]
fn the_throughput_comparison_needs_at_least_one_client_and_call() {
    rejects(
        &[
            "bench-postgres",
            "--database-url",
            "postgresql://127.0.0.1/x",
            "--clients",
            "1,0",
        ],
        "--calls and every number in --clients must be at least 1",
    );
}

#[cfg(not(feature = "postgres"))]
#[test]
fn a_lab_built_without_postgres_says_how_to_get_it() {
    rejects(
        &[
            "--backend",
            "postgres",
            "--database-url",
            "postgresql://127.0.0.1/x",
        ],
        "built without PostgreSQL support; rebuild it with the `postgres` feature",
    );
}

#[cfg(feature = "postgres")]
#[test]
fn an_unreadable_database_url_is_bad_input_named_without_its_password() {
    let url = "postgresql://lab:s3cret@127.0.0.1:notaport/tickets";
    rejects(
        &["--backend", "postgres", "--database-url", url],
        "invalid PostgreSQL URL \"postgresql://lab:***@127.0.0.1:notaport/tickets\"",
    );
    let output = lab(&["--backend", "postgres", "--database-url", url]);
    assert!(!String::from_utf8_lossy(&output.stderr).contains("s3cret"));
}

#[cfg(feature = "postgres")]
#[test]
fn an_unreachable_server_is_named_and_is_a_run_failure() {
    // Port 1 on the loopback address: nothing listens there, so the connection is refused at once.
    let output = lab(&[
        "--backend",
        "postgres",
        "--database-url",
        "postgresql://lab:s3cret@127.0.0.1:1/tickets",
    ]);
    let message = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(
        message.contains("cannot connect to PostgreSQL at 127.0.0.1:1/tickets as lab"),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");
}
