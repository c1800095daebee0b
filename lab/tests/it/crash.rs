//! `lab runner` killed with SIGKILL at each dangerous point, then started again: the service holds
//! exactly one ticket per operation and the runner's record converges on its id.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::http::LabServer;
use crate::runner::{runner_record, service_tickets};

const REPETITIONS: usize = 20;

fn runner_command(database: &Path, url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lab"));
    command
        .args(["runner", "--database"])
        .arg(database)
        .args(["--url", url, "--token", "token-a", "--caller", "alice"]);
    command
}

/// Starts the runner on a new operation with `LAB_RUNNER_PAUSE_AT=point`, waits until it says it
/// paused there, and kills it with SIGKILL.
fn kill_at(point: &str, database: &Path, url: &str, key: &str) {
    let mut child = runner_command(database, url)
        .args(["--key", key, "--payload", r#"{"title": "Crash test"}"#])
        .env("LAB_RUNNER_PAUSE_AT", point)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let read = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
    // Killed before any check, so a failing check never leaves a paused runner behind.
    child.kill().unwrap(); // SIGKILL on Unix: no destructor, no flush, no goodbye
    child.wait().unwrap();
    read.unwrap();
    assert_eq!(line.trim(), format!("paused at {point} for {key}"));
}

fn crash_and_restart(point: &str, sends_before_kill: u32) {
    let server = LabServer::start(&[]);
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    for repetition in 0..REPETITIONS {
        let key = format!("{point}-{repetition}");
        let before = service_tickets(&server).len();
        kill_at(point, &database, &server.url, &key);
        assert_eq!(runner_record(&database, &key), ("pending".to_owned(), None));
        let committed = service_tickets(&server).len() - before;
        assert_eq!(
            committed, sends_before_kill as usize,
            "{key}: tickets at the kill"
        );

        // Started again without a new operation, it resumes the pending one with its saved key.
        let output = runner_command(&database, &server.url).output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let tickets = service_tickets(&server);
        assert_eq!(tickets.len(), before + 1, "{key}: exactly one ticket");
        let id = tickets.last().unwrap().clone();
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            format!(
                "resumed {key}: succeeded, ticket {id}, after {} send(s)",
                sends_before_kill + 1
            )
        );
        assert_eq!(
            runner_record(&database, &key),
            ("succeeded".to_owned(), Some(id))
        );
    }
}

#[test]
fn killed_after_saving_and_before_sending_the_restart_creates_the_one_ticket() {
    crash_and_restart("after-save", 0);
}

#[test]
fn killed_after_the_service_committed_and_before_recording_the_restart_replays_it() {
    crash_and_restart("after-reply", 1);
}
