//! Durability against the neighbours a real deployment has: other processes that read the
//! server's SQLite file, back it up, checkpoint it or serve it too, while `lab serve` takes creates,
//! and SIGKILL of the server at random moments. After each, every create the service acknowledged
//! is in the file with its record, no ticket exists twice, and a fresh process finds them all.
//!
//! The neighbours are real programs nobody here wrote: Python's `sqlite3` module and the `sqlite3`
//! command line. Missing, a test says SKIPPED loudly; with `LAB_REQUIRE_NEIGHBOURS=1` (set by
//! `.ci/run`) it fails instead. Every loop is bounded in count and in time.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lab::http::{HttpTarget, HttpTool};
use lab::{CreateRequest, OperationKey, Payload, Scope, SqliteStore, TicketId, TicketTool};

use crate::http::LabServer;

/// A Python program that counts the tickets in a file and closes its connection, as any
/// reporting script would.
const PYTHON_COUNT: &str = r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(c.execute('SELECT COUNT(*) FROM tickets').fetchone()[0])
c.close()
"#;

/// A Python reader that opens, reads and closes in a loop until its stdin closes, at most
/// `argv[2]` times and for at most `argv[3]` seconds, and prints how many reads it made. It
/// waits for the file to exist rather than create it.
const PYTHON_READ_LOOP: &str = r#"
import os, select, sqlite3, sys, time
path, limit, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.monotonic() + seconds
reads = 0
while reads < limit and time.monotonic() < end:
    if select.select([sys.stdin], [], [], 0.005)[0]:
        break
    if not os.path.exists(path):
        continue
    c = sqlite3.connect(path, timeout=10)
    c.execute('SELECT COUNT(*) FROM sqlite_schema').fetchone()
    c.close()
    reads += 1
    if reads == 1:
        # The test waits for this line, so the creates start only once the loop reads.
        print('reading', flush=True)
print(reads)
"#;

/// Whether `program` runs here; says so loudly when it does not. `LAB_REQUIRE_NEIGHBOURS=1`
/// turns a missing program into a failure.
fn neighbour_available(program: &str, test: &str) -> bool {
    let found = Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        assert!(
            std::env::var_os("LAB_REQUIRE_NEIGHBOURS").is_none(),
            "{test}: {program} is required (LAB_REQUIRE_NEIGHBOURS is set) but not found"
        );
        say(&format!("SKIPPED {test}: {program} not found"));
    }
    found
}

/// Writes past libtest's capture, so skips and figures show in CI's log.
fn say(line: &str) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// The tickets another process sees in `database`, counted by Python's `sqlite3`.
fn python_count(database: &Path) -> u64 {
    let output = Command::new("python3")
        .args(["-c", PYTHON_COUNT])
        .arg(database)
        .output()
        .unwrap();
    assert!(output.status.success(), "python3 failed: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap()
}

/// Runs the `sqlite3` command line on `database` with `sql`; returns what it printed.
fn sqlite3(database: &Path, sql: &str) -> String {
    let output = Command::new("sqlite3")
        .args(["-cmd", ".timeout 10000"])
        .arg(database)
        .arg(sql)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "sqlite3 {sql:?} failed: {output:?}"
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A reader process looping over the file until it is stopped.
struct ReadLoop {
    child: Child,
}

impl ReadLoop {
    fn start(database: &Path, seconds: u32) -> ReadLoop {
        let child = Command::new("python3")
            .args(["-c", PYTHON_READ_LOOP])
            .arg(database)
            .args(["100000", &seconds.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut loop_ = ReadLoop { child };
        // Under load the interpreter can take longer to start than the creates take to run;
        // a loop that never read would prove nothing, so wait for its first read of a file
        // that exists (a file still to be made is read once it is, without waiting here).
        if database.exists() {
            let stdout = loop_.child.stdout.as_mut().unwrap();
            let mut first = [0u8; 8];
            std::io::Read::read_exact(stdout, &mut first).unwrap();
            assert_eq!(&first, b"reading\n", "the read loop's first line");
        }
        loop_
    }

    /// Stops the loop; returns how many times it opened, read and closed the file.
    fn stop(mut self) -> u64 {
        drop(self.child.stdin.take());
        let output = self.child.wait_with_output().unwrap();
        assert!(output.status.success(), "the read loop failed: {output:?}");
        // The last line is the count (a `reading` line may come before it).
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap()
    }
}

/// `lab serve` on a file the test chose, with the usual callers and admin token.
fn serve_on(database: &Path) -> LabServer {
    let database = database.to_str().unwrap();
    LabServer::spawn(&[
        "serve",
        "--port",
        "0",
        "--database",
        database,
        "--caller",
        "alice=token-a",
        "--caller",
        "bob=token-b",
        "--admin-token",
        "admin-token",
    ])
}

/// Stops a server with SIGTERM and waits for it to exit.
fn stop(mut server: LabServer) {
    // SAFETY: kill(2) with the id of a child this test started and has not yet reaped.
    unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
    let status = server.wait_for_exit(Duration::from_secs(20));
    assert!(status.success(), "lab serve exited with {status:?}");
}

/// Creates acknowledged by the service: key and ticket.
#[derive(Default)]
struct Acknowledged(BTreeMap<String, TicketId>);

impl Acknowledged {
    fn extend(&mut self, other: Acknowledged) {
        for (key, ticket) in other.0 {
            assert!(
                self.0.insert(key.clone(), ticket).is_none(),
                "key {key} used twice by the test"
            );
        }
    }
}

/// `count` keyed creates as caller alice, keys `{prefix}-{n}`; keeps those the service
/// acknowledged. A create that gets no answer (the server was killed) is not acknowledged.
fn create(url: &str, prefix: &str, count: usize) -> Acknowledged {
    let tool = HttpTool::new(HttpTarget::new(url, "token-a", None).unwrap());
    let scope = Scope::new("alice", "create_ticket").unwrap();
    let mut acknowledged = Acknowledged::default();
    for n in 0..count {
        let key = OperationKey::try_from(format!("{prefix}-{n}")).unwrap();
        let payload = Payload::new(lab::serde_json::json!({
            "title": format!("Ticket {prefix} {n}"),
            "priority": "normal",
        }))
        .unwrap();
        if let Ok(outcome) = tool.create(CreateRequest::keyed(&scope, &key, &payload)) {
            acknowledged
                .0
                .insert(key.as_str().to_owned(), outcome.ticket_id().clone());
        }
    }
    acknowledged
}

/// What a fresh process finds in the file for the acknowledged creates.
struct Audit {
    acknowledged: usize,
    found: usize,
    lost: Vec<String>,
    tickets: usize,
    records: usize,
}

impl Audit {
    /// Opens `database` afresh (no server may have it open) and looks for every acknowledged
    /// create's record and ticket.
    fn of(database: &Path, acknowledged: &Acknowledged) -> Audit {
        let db = rusqlite::Connection::open(database).unwrap();
        let records: BTreeMap<String, i64> = db
            .prepare("SELECT key, ticket_id FROM operation_records WHERE caller = 'alice'")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let tickets: BTreeSet<i64> = db
            .prepare("SELECT id FROM tickets")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let all_records: usize = db
            .query_row("SELECT COUNT(*) FROM operation_records", [], |row| {
                row.get::<_, i64>(0)
            })
            .unwrap() as usize;
        let distinct_ids: usize = db
            .query_row(
                "SELECT COUNT(DISTINCT ticket_id) FROM operation_records",
                [],
                |row| row.get::<_, i64>(0),
            )
            .unwrap() as usize;
        assert_eq!(
            distinct_ids,
            all_records,
            "two records name one ticket in {}",
            database.display()
        );
        let mut lost = Vec::new();
        for (key, ticket) in &acknowledged.0 {
            let recorded = records.get(key).map(|id| TicketId::from(*id));
            let stored = recorded
                .as_ref()
                .is_some_and(|id| matches!(id, TicketId::Number(n) if tickets.contains(n)));
            if recorded.as_ref() != Some(ticket) || !stored {
                lost.push(format!(
                    "{key} (acknowledged ticket {ticket}, found {recorded:?})"
                ));
            }
        }
        Audit {
            acknowledged: acknowledged.0.len(),
            found: acknowledged.0.len() - lost.len(),
            lost,
            tickets: tickets.len(),
            records: all_records,
        }
    }

    /// Prints the figures and fails on any lost create, or a ticket without its record.
    fn assert_nothing_lost(&self, neighbour: &str) {
        say(&format!(
            "durability, {neighbour}: {} acknowledged, {} found, {} lost",
            self.acknowledged,
            self.found,
            self.lost.len()
        ));
        assert!(
            self.lost.is_empty(),
            "{neighbour}: acknowledged creates missing from the file: {:?}",
            self.lost
        );
        // Every create here is keyed: a ticket without a record would be a second effect.
        assert_eq!(
            self.tickets, self.records,
            "{neighbour}: tickets and records differ in number"
        );
    }
}

/// The sequence of the bug report: a reader closes its connection, and every later create must
/// still be seen by other processes and survive a stop and a restart.
fn reader_then_creates(neighbour: &str, read: impl Fn(&Path)) {
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("t.sqlite");
    let server = serve_on(&database);
    let mut acknowledged = create(&server.url, "before", 1);
    read(&database);
    acknowledged.extend(create(&server.url, "after", 12));
    // While the server runs, another process must see every acknowledged ticket.
    assert_eq!(
        python_count(&database),
        acknowledged.0.len() as u64,
        "{neighbour}: a process opening the file misses acknowledged tickets"
    );
    stop(server);
    Audit::of(&database, &acknowledged).assert_nothing_lost(neighbour);
    // Restarted on the file, the service replays each one with its ticket.
    let server = serve_on(&database);
    let replayed = create(&server.url, "after", 12);
    for (key, ticket) in &replayed.0 {
        assert_eq!(acknowledged.0.get(key), Some(ticket), "{neighbour}: {key}");
    }
    stop(server);
}

#[test]
fn a_python_reader_that_closes_its_connection_loses_no_later_ticket() {
    let test = "a_python_reader_that_closes_its_connection_loses_no_later_ticket";
    if !neighbour_available("python3", test) {
        return;
    }
    reader_then_creates("a Python sqlite3 reader", |database| {
        python_count(database);
    });
}

#[test]
fn a_sqlite3_command_line_reader_loses_no_later_ticket() {
    let test = "a_sqlite3_command_line_reader_loses_no_later_ticket";
    if !neighbour_available("python3", test) || !neighbour_available("sqlite3", test) {
        return;
    }
    reader_then_creates("a sqlite3 command-line reader", |database| {
        sqlite3(database, "SELECT COUNT(*) FROM tickets");
    });
}

/// `callers` threads making `per_caller` creates each against `url`, keys `{prefix}-{caller}-{n}`.
fn create_concurrently(url: &str, prefix: &str, callers: usize, per_caller: usize) -> Acknowledged {
    let threads: Vec<_> = (0..callers)
        .map(|caller| {
            let url = url.to_owned();
            let prefix = format!("{prefix}-{caller}");
            std::thread::spawn(move || create(&url, &prefix, per_caller))
        })
        .collect();
    let mut acknowledged = Acknowledged::default();
    for thread in threads {
        acknowledged.extend(thread.join().unwrap());
    }
    acknowledged
}

#[test]
fn a_process_reading_the_file_in_a_loop_during_creates_loses_nothing() {
    let test = "a_process_reading_the_file_in_a_loop_during_creates_loses_nothing";
    if !neighbour_available("python3", test) {
        return;
    }
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("t.sqlite");
    let server = serve_on(&database);
    let reader = ReadLoop::start(&database, 60);
    let acknowledged = create_concurrently(&server.url, "loop", 4, 60);
    let reads = reader.stop();
    assert!(reads > 0, "the reader never read");
    assert_eq!(python_count(&database), acknowledged.0.len() as u64);
    stop(server);
    let audit = Audit::of(&database, &acknowledged);
    audit.assert_nothing_lost(&format!("a Python reader in a loop ({reads} reads)"));
}

#[test]
fn backups_and_truncating_checkpoints_from_outside_lose_nothing() {
    let test = "backups_and_truncating_checkpoints_from_outside_lose_nothing";
    if !neighbour_available("python3", test) || !neighbour_available("sqlite3", test) {
        return;
    }
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("t.sqlite");
    let server = serve_on(&database);
    let backup_and_checkpoint = |round: usize| {
        let backup = folder.path().join(format!("backup-{round}.sqlite"));
        sqlite3(&database, &format!(".backup '{}'", backup.display()));
        sqlite3(&database, "PRAGMA wal_checkpoint(TRUNCATE);");
        backup
    };
    // The first backup and checkpoint come between creates for certain, whatever the machine's
    // speed: after the first half is acknowledged and before the second half starts. The server
    // then writes on into the WAL the checkpoint truncated under it.
    let mut acknowledged = create_concurrently(&server.url, "backup-before", 2, 40);
    let between = backup_and_checkpoint(0);
    let tickets_between: u64 = sqlite3(&between, "SELECT COUNT(*) FROM tickets")
        .parse()
        .unwrap();
    assert_eq!(
        tickets_between,
        acknowledged.0.len() as u64,
        "the backup taken between the creates holds those acknowledged before it"
    );
    let mut backups = vec![between];
    // More run while the second half does, as many as fit; how many is up to the machine.
    let done = Arc::new(AtomicBool::new(false));
    let creates = {
        let url = server.url.clone();
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let acknowledged = create_concurrently(&url, "backup-during", 2, 40);
            done.store(true, Ordering::SeqCst);
            acknowledged
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    for round in 1..40 {
        if done.load(Ordering::SeqCst) || Instant::now() > deadline {
            break;
        }
        backups.push(backup_and_checkpoint(round));
    }
    acknowledged.extend(creates.join().unwrap());
    assert_eq!(python_count(&database), acknowledged.0.len() as u64);
    stop(server);
    // Each backup is a consistent database with no more tickets than were acknowledged.
    for backup in &backups {
        let tickets: u64 = sqlite3(backup, "SELECT COUNT(*) FROM tickets")
            .parse()
            .unwrap();
        assert!(
            tickets <= acknowledged.0.len() as u64,
            "{}",
            backup.display()
        );
        assert_eq!(sqlite3(backup, "PRAGMA integrity_check"), "ok");
    }
    let audit = Audit::of(&database, &acknowledged);
    audit.assert_nothing_lost(&format!(
        "{} .backup runs and truncating checkpoints from the sqlite3 command line",
        backups.len()
    ));
}

#[test]
fn a_second_lab_serve_starting_and_stopping_on_the_file_loses_nothing() {
    let test = "a_second_lab_serve_starting_and_stopping_on_the_file_loses_nothing";
    if !neighbour_available("python3", test) {
        return;
    }
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("t.sqlite");
    let first = serve_on(&database);
    let done = Arc::new(AtomicBool::new(false));
    let creates = {
        let url = first.url.clone();
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let acknowledged = create_concurrently(&url, "first", 2, 80);
            done.store(true, Ordering::SeqCst);
            acknowledged
        })
    };
    let mut acknowledged = Acknowledged::default();
    let mut starts = 0;
    for round in 0..8 {
        if round >= 4 && done.load(Ordering::SeqCst) {
            break;
        }
        let second = serve_on(&database);
        acknowledged.extend(create(&second.url, &format!("second-{round}"), 5));
        stop(second);
        starts += 1;
    }
    acknowledged.extend(creates.join().unwrap());
    assert_eq!(python_count(&database), acknowledged.0.len() as u64);
    stop(first);
    let audit = Audit::of(&database, &acknowledged);
    audit.assert_nothing_lost(&format!(
        "a second lab serve started and stopped {starts} times"
    ));
}

/// A small generator for the kill schedule, seeded so a failure can be run again
/// (`LAB_DURABILITY_SEED`).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[test]
fn sigkill_of_the_server_at_random_moments_loses_no_acknowledged_create() {
    let test = "sigkill_of_the_server_at_random_moments_loses_no_acknowledged_create";
    if !neighbour_available("python3", test) {
        return;
    }
    let seed = std::env::var("LAB_DURABILITY_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let mut random = SplitMix(seed);
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("t.sqlite");
    // A reader keeps opening and closing the file the whole time, across every restart.
    let mut reader = None;
    let mut acknowledged = Acknowledged::default();
    let rounds = 8;
    let mut kill_delays = Vec::new();
    let mut startup_kills = 0;
    for round in 0..rounds {
        // Every other round, the first on a file that does not exist yet, a server is killed
        // while it starts: opening the file, making or checking its schema, syncing it.
        if round % 2 == 0 {
            let mut starting = Command::new(env!("CARGO_BIN_EXE_lab"))
                .args(["serve", "--port", "0", "--database"])
                .arg(&database)
                .args(["--caller", "alice=token-a"])
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(random.next() % 30));
            starting.kill().unwrap();
            starting.wait().unwrap();
            startup_kills += 1;
        }
        let server = serve_on(&database);
        if reader.is_none() {
            reader = Some(ReadLoop::start(&database, 120));
        }
        let creates = {
            let url = server.url.clone();
            std::thread::spawn(move || create_concurrently(&url, &format!("kill-{round}"), 3, 200))
        };
        let delay = Duration::from_millis(20 + random.next() % 400);
        kill_delays.push(delay.as_millis());
        std::thread::sleep(delay);
        drop(server); // SIGKILL: no destructor, no checkpoint, no goodbye
        acknowledged.extend(creates.join().unwrap());
    }
    let reads = reader.map_or(0, ReadLoop::stop);
    // A fresh server on the file replays every acknowledged key with its ticket.
    let server = serve_on(&database);
    let mut replayed_wrong = Vec::new();
    for (key, ticket) in &acknowledged.0 {
        let (prefix, n) = key.rsplit_once('-').unwrap();
        let again = create(&server.url, prefix, n.parse::<usize>().unwrap() + 1);
        if again.0.get(key) != Some(ticket) {
            replayed_wrong.push(key.clone());
        }
        if replayed_wrong.len() > 5 {
            break;
        }
    }
    stop(server);
    let audit = Audit::of(&database, &acknowledged);
    audit.assert_nothing_lost(&format!(
        "SIGKILL of lab serve {rounds} times under load (seed {seed}, after {kill_delays:?} ms) \
         and {startup_kills} times while it started, with a Python reader in a loop ({reads} \
         reads)"
    ));
    assert!(
        replayed_wrong.is_empty(),
        "after the kills, these keys did not replay their acknowledged ticket: {replayed_wrong:?}"
    );
}

#[test]
fn the_runners_file_read_by_another_process_while_it_runs_loses_nothing() {
    let test = "the_runners_file_read_by_another_process_while_it_runs_loses_nothing";
    if !neighbour_available("python3", test) {
        return;
    }
    let folder = tempfile::tempdir().unwrap();
    let runner_file = folder.path().join("runner.sqlite");
    let payload = r#"{"title": "Rotate the logs", "priority": "normal"}"#;
    // With no service, each operation is saved and held: many pending operations in one file.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let keys: Vec<String> = (0..12).map(|n| format!("runner-op-{n}")).collect();
    let runner = |url: &str, key: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lab"));
        command
            .args(["runner", "--database"])
            .arg(&runner_file)
            .args(["--url", url, "--token", "token-a", "--caller", "alice"]);
        if let Some(key) = key {
            command.args(["--key", key, "--payload", payload]);
        }
        command.output().unwrap()
    };
    let reader = ReadLoop::start(&runner_file, 120);
    for key in &keys {
        let output = runner(&nowhere, Some(key));
        assert_eq!(output.status.code(), Some(5), "{output:?}");
    }
    // One run resumes them all while the reader keeps opening and closing the runner's file.
    let server = LabServer::start(&[]);
    let output = runner(&server.url, None);
    assert!(output.status.success(), "{output:?}");
    let reads = reader.stop();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut reported = BTreeMap::new();
    for line in stdout.lines() {
        // "resumed KEY: succeeded, ticket N, after 1 send(s)"
        let rest = line.strip_prefix("resumed ").unwrap_or(line);
        if let Some((key, outcome)) = rest.split_once(": succeeded, ticket ") {
            let ticket: i64 = outcome.split(',').next().unwrap().parse().unwrap();
            reported.insert(key.to_owned(), ticket);
        }
    }
    assert_eq!(reported.len(), keys.len(), "{stdout}");
    // A fresh process finds every reported success in the runner's file, and on the service.
    let db = rusqlite::Connection::open(&runner_file).unwrap();
    let mut lost = Vec::new();
    for (key, ticket) in &reported {
        let saved: (String, Option<i64>) = db
            .query_row(
                "SELECT state, ticket_id FROM operations WHERE key = ?1",
                [key],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        if saved != ("succeeded".to_owned(), Some(*ticket)) {
            lost.push(format!("{key}: {saved:?}"));
        }
    }
    let on_service = crate::runner::service_tickets(&server);
    say(&format!(
        "durability, the runner's file read in a loop ({reads} reads): {} reported succeeded, \
         {} found, {} lost; {} tickets on the service",
        reported.len(),
        reported.len() - lost.len(),
        lost.len(),
        on_service.len()
    ));
    assert!(lost.is_empty(), "{lost:?}");
    assert_eq!(on_service.len(), keys.len());
}

/// A second store opened on the file in the same process, and the file checked by
/// [`lab::database_file::check`] while a connection is open, must leave SQLite's locks in place:
/// an outside reader's close must not delete the WAL the store still writes.
#[test]
fn opening_and_checking_the_file_while_a_store_has_it_open_keeps_sqlites_locks() {
    let test = "opening_and_checking_the_file_while_a_store_has_it_open_keeps_sqlites_locks";
    if !neighbour_available("python3", test) {
        return;
    }
    let folder = tempfile::tempdir().unwrap();
    let database: PathBuf = folder.path().join("t.sqlite");
    let store = SqliteStore::open(&database).unwrap();
    let scope = Scope::new("alice", "create_ticket").unwrap();
    let payload = Payload::new(lab::serde_json::json!({"title": "Disk full"})).unwrap();
    let create = |store: &SqliteStore, n: usize| {
        let key = OperationKey::try_from(format!("in-process-{n}")).unwrap();
        store
            .create(CreateRequest::keyed(&scope, &key, &payload))
            .unwrap();
    };
    create(&store, 0);
    // What a second caller in the process does, and what the command line does before it opens.
    let second = SqliteStore::open(&database).unwrap();
    lab::database_file::check(&database).unwrap();
    python_count(&database);
    for n in 1..6 {
        create(&store, n);
        create(&second, n + 100);
    }
    assert_eq!(
        python_count(&database),
        11,
        "another process misses tickets this process committed"
    );
    let wal = PathBuf::from(format!("{}-wal", database.display()));
    assert!(wal.exists(), "the WAL of an open store was deleted");
}
