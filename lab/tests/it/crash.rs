//! `lab runner` killed with SIGKILL at each dangerous point, then started again: the service holds
//! exactly one ticket per operation and the runner's record converges on its id. The same kills
//! run against `lab serve` over HTTP and against `lab mcp` over Streamable HTTP.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::http::LabServer;
use crate::mcp::HttpServer as McpHttpServer;
use crate::runner::{runner_record, service_tickets};

const REPETITIONS: usize = 20;

/// The service a crash test's runner calls: its options, and how the test reads its tickets.
struct Service<'a> {
    /// `--url URL` or `--mcp-url URL`, the token and the caller.
    options: Vec<String>,
    /// Every ticket on the service, read behind the runner's back.
    tickets: Box<dyn Fn() -> Vec<lab::TicketId> + 'a>,
}

impl Service<'_> {
    fn over_http(server: &LabServer) -> Service<'_> {
        Service {
            options: [
                "--url",
                &server.url,
                "--token",
                "token-a",
                "--caller",
                "alice",
            ]
            .map(str::to_owned)
            .to_vec(),
            tickets: Box::new(|| service_tickets(server)),
        }
    }

    fn over_mcp(server: &McpHttpServer) -> Service<'_> {
        Service {
            options: [
                "--mcp-url",
                &server.url,
                "--token",
                "token-a",
                "--caller",
                "support-agent",
            ]
            .map(str::to_owned)
            .to_vec(),
            tickets: Box::new(|| server.ticket_ids()),
        }
    }

    fn runner_command(&self, database: &Path) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lab"));
        command
            .args(["runner", "--database"])
            .arg(database)
            .args(&self.options);
        command
    }
}

/// Where the runner is killed, and what the service has done by then.
struct Kill {
    /// The pause point (`LAB_RUNNER_PAUSE_AT`).
    point: &'static str,
    /// A fault asked for on the first send (`LAB_RUNNER_FIRST_SEND_FAULT`), if any.
    first_send_fault: Option<&'static str>,
    /// Sends the runner made before it paused.
    sends_before_kill: u32,
    /// Tickets the service committed before the kill.
    committed_before_kill: usize,
}

/// Starts the runner on a new operation with `LAB_RUNNER_PAUSE_AT=point`, waits until it says it
/// paused there, and kills it with SIGKILL.
fn kill_at(service: &Service<'_>, kill: &Kill, database: &Path, key: &str) {
    let mut command = service.runner_command(database);
    command
        .args(["--key", key, "--payload", r#"{"title": "Crash test"}"#])
        .env(lab::runner::PAUSE_VARIABLE, kill.point)
        .stdout(Stdio::piped());
    if let Some(fault) = kill.first_send_fault {
        command.env(lab::runner::FAULT_VARIABLE, fault);
    }
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    let read = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
    // Killed before any check, so a failing check never leaves a paused runner behind.
    child.kill().unwrap(); // SIGKILL on Unix: no destructor, no flush, no goodbye
    child.wait().unwrap();
    read.unwrap();
    assert_eq!(line.trim(), format!("paused at {} for {key}", kill.point));
}

/// Kills the runner [`REPETITIONS`] times at `kill` and restarts it; returns the line that says
/// how many kills converged.
fn crash_and_restart(service: &Service<'_>, kill: &Kill) -> String {
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("runner.sqlite");
    let mut converged = 0;
    for repetition in 0..REPETITIONS {
        let key = match kill.first_send_fault {
            Some(fault) => format!("{}-{fault}-{repetition}", kill.point),
            None => format!("{}-{repetition}", kill.point),
        };
        let before = (service.tickets)().len();
        kill_at(service, kill, &database, &key);
        assert_eq!(runner_record(&database, &key), ("pending".to_owned(), None));
        let committed = (service.tickets)().len() - before;
        assert_eq!(
            committed, kill.committed_before_kill,
            "{key}: tickets at the kill"
        );

        // Started again without a new operation, it resumes the pending one with its saved key.
        let output = service.runner_command(&database).output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let tickets = (service.tickets)();
        assert_eq!(tickets.len(), before + 1, "{key}: exactly one ticket");
        let id = tickets.last().unwrap().clone();
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            format!(
                "resumed {key}: succeeded, ticket {id}, after {} send(s)",
                kill.sends_before_kill + 1
            )
        );
        assert_eq!(
            runner_record(&database, &key),
            ("succeeded".to_owned(), Some(id))
        );
        converged += 1;
    }
    let line = format!(
        "{converged} of {REPETITIONS} SIGKILLs at {}{}: one ticket, one id, runner succeeded",
        kill.point,
        kill.first_send_fault
            .map(|fault| format!(" (first reply: {fault})"))
            .unwrap_or_default(),
    );
    println!("{line}");
    line
}

const AFTER_SAVE: Kill = Kill {
    point: "after-save",
    first_send_fault: None,
    sends_before_kill: 0,
    committed_before_kill: 0,
};

const AFTER_COMMIT: Kill = Kill {
    point: "after-reply",
    first_send_fault: None,
    sends_before_kill: 1,
    committed_before_kill: 1,
};

/// The first reply lost (the service committed, the runner heard nothing), the retry with the
/// same key replayed, and the runner killed before it recorded the replay.
const AFTER_A_LOST_REPLY: Kill = Kill {
    point: "after-reply",
    first_send_fault: Some("lose-reply"),
    sends_before_kill: 2,
    committed_before_kill: 1,
};

#[test]
fn killed_after_saving_and_before_sending_the_restart_creates_the_one_ticket() {
    let server = LabServer::start(&[]);
    crash_and_restart(&Service::over_http(&server), &AFTER_SAVE);
}

#[test]
fn killed_after_the_service_committed_and_before_recording_the_restart_replays_it() {
    let server = LabServer::start(&[]);
    crash_and_restart(&Service::over_http(&server), &AFTER_COMMIT);
}

/// The three kills against `lab mcp --transport http`; their figures are the book's
/// (`src/mcp/crash-over-mcp.txt`, rewritten with `LAB_BLESS=1`).
#[test]
fn over_mcp_killed_after_save_after_commit_and_after_a_lost_reply_the_runner_converges() {
    let folder = tempfile::tempdir().unwrap();
    let server = McpHttpServer::start(&folder.path().join("tickets.db"));
    let service = Service::over_mcp(&server);
    let mut figures = String::new();
    for kill in [&AFTER_SAVE, &AFTER_COMMIT, &AFTER_A_LOST_REPLY] {
        figures.push_str(&crash_and_restart(&service, kill));
        figures.push('\n');
    }
    assert_eq!(server.ticket_ids().len(), 3 * REPETITIONS);
    crate::mcp::compare_with_the_book(&figures, "crash-over-mcp.txt");
}
