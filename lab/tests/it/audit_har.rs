//! `lab audit` over a recording made by software nobody here wrote. Python `requests`, retrying
//! with urllib3's own `Retry`, creates tickets through mitmproxy 11.0.2 (`mitmdump` as a reverse
//! proxy, with its HAR export) in front of the express-idempotency ticket service of
//! `lab/tests/blackbox/`. A mitmproxy addon holds the first reply to one create until the
//! client's next try has been answered: the client gives up on a reply the service sent and the
//! recorder recorded, and urllib3 (or the application) sends the create again.
//!
//! Each test then reads the service's store (`GET /tickets` per caller, straight from the
//! service) and holds the audit to it: an intention with one ticket is never cited by a finding
//! or a doubt; every finding cites exactly the HAR entries of one intention that has two
//! tickets; and each intention's fate is the one pinned below, including the one the audit
//! cannot see in a HAR, which is said as such.
//!
//! The client, the addon and the pins are in `lab/tests/audit/har/`. `.ci/run` makes the venv
//! `LAB_AUDIT_VENV_HAR` from its requirements.txt, and the service's `node_modules` with
//! `npm ci`. Missing, a test prints `SKIPPED`, and fails when `LAB_REQUIRE_AUDIT=1` (CI sets it).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use lab::audit::record::{self, Recorded};
use lab::serde_json::{self, Value, json};

const LAB: &str = env!("CARGO_BIN_EXE_lab");

/// The express-idempotency service as the audit reads it (the parts of its
/// `lab/tests/blackbox/express-idempotency/target.toml` the audit takes).
const TARGET: &str = r#"
[create]
method = "POST"
path = "/tickets"
success = [201]

[key]
header = "Idempotency-Key"
form = "sf-string"

[identity]
json_pointer = "/ticket_id"

[[callers]]
name = "alice"
headers = { Authorization = "Bearer alice-token" }

[[callers]]
name = "bob"
headers = { Authorization = "Bearer bob-token" }
"#;

/// The guard on a wait that a healthy run ends within seconds: it only ends a broken run.
const GUARD: Duration = Duration::from_secs(60);

fn har_folder() -> PathBuf {
    crate::repository_root().join("lab/tests/audit/har")
}

fn service_folder() -> PathBuf {
    crate::repository_root().join("lab/tests/blackbox/express-idempotency")
}

/// The programs a run needs: the venv's Python (requests, urllib3) and mitmdump.
struct Tools {
    python: PathBuf,
    mitmdump: PathBuf,
}

/// The tools, or `None` after a loud skip; a failure under `LAB_REQUIRE_AUDIT=1`.
fn tools(test: &str) -> Option<Tools> {
    match find_tools() {
        Ok(tools) => Some(tools),
        Err(why) => {
            assert!(
                std::env::var("LAB_REQUIRE_AUDIT").as_deref() != Ok("1"),
                "{test}: LAB_REQUIRE_AUDIT=1, but {why}"
            );
            // Past libtest's capture, so a skip is seen.
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED {test}: {why}; LAB_REQUIRE_AUDIT=1 makes this a failure ***\n"
            );
            None
        }
    }
}

fn find_tools() -> Result<Tools, String> {
    let venv = std::env::var_os("LAB_AUDIT_VENV_HAR")
        .filter(|venv| !venv.is_empty())
        .map(PathBuf::from)
        .ok_or(
            "LAB_AUDIT_VENV_HAR is not set (a venv from lab/tests/audit/har/requirements.txt)",
        )?;
    let (python, mitmdump) = (venv.join("bin/python"), venv.join("bin/mitmdump"));
    if !mitmdump.is_file() {
        return Err(format!(
            "{} has no bin/mitmdump (pip install -r lab/tests/audit/har/requirements.txt)",
            venv.display()
        ));
    }
    let succeeds = |command: &mut Command| {
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if !succeeds(Command::new(&python).args(["-c", "import requests, urllib3, mitmproxy"])) {
        return Err(format!(
            "{} cannot import requests, urllib3 and mitmproxy",
            python.display()
        ));
    }
    if !succeeds(
        Command::new("node")
            .args(["-e", "require.resolve('express-idempotency')"])
            .current_dir(service_folder()),
    ) {
        return Err("node cannot load express-idempotency \
                    (npm ci in lab/tests/blackbox/express-idempotency)"
            .to_owned());
    }
    Ok(Tools { python, mitmdump })
}

/// A child process, killed when dropped: a test that fails leaves nothing running.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the ticket service on a free loopback port; returns it and its address.
fn start_service(folder: &Path) -> (Running, String) {
    let log = File::create(folder.join("service.log")).unwrap();
    let child = Command::new("node")
        .arg(service_folder().join("service.js"))
        .arg("0")
        .current_dir(folder)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("node starts the service");
    let mut service = Running(child);
    let url = crate::http::listening_url(&mut service.0);
    (service, url)
}

/// Which create's first replies the recorder holds, and how many of them.
struct Held {
    title: &'static str,
    count: u32,
}

/// mitmdump in front of the service, writing its HAR on exit.
struct Recorder {
    process: Running,
    url: String,
    /// What mitmdump has printed so far: its log, for messages.
    log: Arc<Mutex<String>>,
    har: PathBuf,
}

fn start_recorder(tools: &Tools, upstream: &str, folder: &Path, held: &Held) -> Recorder {
    let har = folder.join("traffic.har");
    let child = Command::new(&tools.mitmdump)
        .args(["--mode", &format!("reverse:{upstream}")])
        .args(["--listen-host", "127.0.0.1", "--listen-port", "0"])
        .arg("-s")
        .arg(har_folder().join("slow_first.py"))
        .args(["--set", &format!("slow_first_title={}", held.title)])
        .args(["--set", &format!("slow_first_count={}", held.count)])
        .args(["--set", &format!("hardump={}", har.display())])
        // Its certificates in the test's folder, not the home directory.
        .args([
            "--set",
            &format!("confdir={}", folder.join("mitmproxy").display()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(File::create(folder.join("mitmdump.stderr")).unwrap())
        .spawn()
        .expect("mitmdump starts");
    let mut process = Running(child);
    let stdout = process.0.stdout.take().expect("mitmdump's stdout is piped");
    let log = Arc::new(Mutex::new(String::new()));
    let (address_tx, address_rx) = mpsc::channel();
    let shared = Arc::clone(&log);
    // Reads mitmdump's output until it closes it (it exits): the address, then the log.
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // "reverse proxy to http://127.0.0.1:PORT listening at 127.0.0.1:PORT."
            if let Some((_, address)) = line.split_once(" listening at ") {
                let _ = address_tx.send(address.trim_end_matches('.').to_owned());
            }
            let mut log = shared.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let address = address_rx.recv_timeout(GUARD).unwrap_or_else(|why| {
        panic!(
            "mitmdump printed no address ({why}):\n{}",
            log.lock().unwrap()
        )
    });
    Recorder {
        process,
        url: format!("http://{address}"),
        log,
        har,
    }
}

impl Recorder {
    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Stops mitmdump as Ctrl-C does (its HAR export writes the file on the way out) and
    /// returns the HAR and mitmdump's log.
    fn stop(mut self) -> (Value, String) {
        // SAFETY: kill(2) with the id of a child this test started and has not yet reaped.
        unsafe { libc::kill(self.process.0.id() as i32, libc::SIGINT) };
        let mut status = None;
        crate::eventually("mitmdump exits after SIGINT", || {
            status = self.process.0.try_wait().unwrap();
            status.is_some()
        });
        let log = self.log();
        assert!(
            status.is_some_and(|s| s.success()),
            "mitmdump: {status:?}\n{log}"
        );
        let text = std::fs::read_to_string(&self.har)
            .unwrap_or_else(|e| panic!("{}: {e}\n{log}", self.har.display()));
        (serde_json::from_str(&text).unwrap(), log)
    }
}

/// One intention of the client's plan.
#[derive(Clone, Copy)]
struct Intention {
    caller: &'static str,
    title: &'static str,
    priority: &'static str,
}

const fn intention(caller: &'static str, title: &'static str) -> Intention {
    Intention {
        caller,
        title,
        priority: "high",
    }
}

/// The create whose first reply the recorder holds.
const HELD: &str = "Disk full on the build agent";

/// Runs the client in `mode` through the recorder at `url`; returns its ledger.
fn run_client(tools: &Tools, mode: &str, url: &str, plan: &[Intention]) -> Value {
    let plan: Vec<Value> = plan
        .iter()
        .map(|i| {
            let token = format!("{}-token", i.caller);
            json!({"token": token, "title": i.title, "priority": i.priority})
        })
        .collect();
    let mut client = Running(
        Command::new(&tools.python)
            .arg(har_folder().join("client.py"))
            .args([mode, url, &Value::from(plan).to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Its output is a few kilobytes at most, under a pipe's buffer: waiting first cannot block it.
    let mut status = None;
    crate::eventually("the client exits", || {
        status = client.0.try_wait().unwrap();
        status.is_some()
    });
    let (mut stdout, mut stderr) = (String::new(), String::new());
    client
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    client
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        status.is_some_and(|s| s.success()),
        "client.py {mode}: {status:?}\n{stdout}\n{stderr}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
}

/// The caller's tickets, read from the service itself, not through the recorder.
fn tickets_of(service: &str, caller: &str) -> Vec<Value> {
    let address = service.strip_prefix("http://").expect("an http:// address");
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(GUARD)).unwrap();
    write!(
        stream,
        "GET /tickets HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {caller}-token\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a header block");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let list: Value = serde_json::from_str(body).unwrap();
    list["tickets"]
        .as_array()
        .expect("a list of tickets")
        .clone()
}

/// Runs `lab audit --json` over the HAR in `folder`: its exit status and report.
fn audit(folder: &Path) -> (i32, Value) {
    let target = folder.join("target.toml");
    std::fs::write(&target, TARGET).unwrap();
    let output = Command::new(LAB)
        .args(["audit", "--json", "--target"])
        .arg(&target)
        .arg(folder.join("traffic.har"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("the audit's --json is not JSON ({e}): {stderr}"));
    (output.status.code().expect("the audit exits"), report)
}

/// What the audit says of one intention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// No failed or undecided check cites its entries.
    Clean,
    /// A failed check of this point cites exactly its entries.
    Failed(&'static str),
    /// A check of this point cites its entries as a case the recording cannot decide.
    Undecided(&'static str),
}

/// One intention as the run left it.
#[derive(Debug)]
struct Left {
    /// Its HAR entries, as the report names them (`traffic.har entries[3]`), in sending order.
    entries: Vec<String>,
    /// Its tickets in the service's store.
    tickets: usize,
    fate: Fate,
}

/// A check that did not pass: its point, whether it is a doubt (not covered) rather than a
/// failure, and the entries it cites, sorted.
struct Flagged {
    point: String,
    doubt: bool,
    places: Vec<String>,
}

fn flagged(report: &Value) -> Vec<Flagged> {
    let steps: BTreeMap<u64, String> = report["history"]
        .as_array()
        .expect("a history")
        .iter()
        .map(|e| {
            (
                e["id"].as_u64().unwrap(),
                e["step"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut found = Vec::new();
    for point in report["points"].as_array().expect("points") {
        for check in point["checks"].as_array().expect("checks") {
            if check["passed"] == true {
                continue;
            }
            let mut places: Vec<String> = check["exchanges"]
                .as_array()
                .unwrap()
                .iter()
                .map(|id| steps[&id.as_u64().unwrap()].clone())
                .collect();
            places.sort();
            found.push(Flagged {
                point: point["name"].as_str().unwrap().to_owned(),
                doubt: !check["not_covered"].is_null(),
                places,
            });
        }
    }
    found
}

fn verdict<'r>(report: &'r Value, point: &str) -> &'r str {
    report["points"]
        .as_array()
        .and_then(|points| points.iter().find(|p| p["name"] == point))
        .and_then(|p| p["verdict"].as_str())
        .unwrap_or_else(|| panic!("no point {point} in {report}"))
}

/// One run: the plan, the ledger the client printed, the HAR, the store and the audit.
struct Run {
    plan: Vec<Intention>,
    ledger: Value,
    har: Value,
    recorder_log: String,
    exit: i32,
    report: Value,
    left: Vec<Left>,
}

impl Run {
    /// Everything a failed assertion needs to be understood.
    fn context(&self) -> String {
        format!(
            "ledger: {}\nleft: {:#?}\nreport points: {}\nhistory: {}\nmitmdump:\n{}",
            self.ledger,
            self.left,
            serde_json::to_string_pretty(&self.report["points"]).unwrap(),
            serde_json::to_string_pretty(&self.report["history"]).unwrap(),
            self.recorder_log
        )
    }

    /// Each intention's tickets in the store and what the audit said of it, in plan order.
    fn fates(&self) -> Vec<(usize, Fate)> {
        self.left.iter().map(|l| (l.tickets, l.fate)).collect()
    }

    fn index_of(&self, title: &str) -> usize {
        self.plan.iter().position(|i| i.title == title).unwrap()
    }
}

/// Starts the service and the recorder, runs the client, stops the recorder, audits its HAR,
/// reads the store, and holds the audit to the store in the ways every run must.
fn run(tools: &Tools, mode: &str, held: Held, plan: &[Intention]) -> Run {
    let folder = tempfile::tempdir().unwrap();
    let (_service, service) = start_service(folder.path());
    let recorder = start_recorder(tools, &service, folder.path(), &held);
    let ledger = run_client(tools, mode, &recorder.url, plan);
    let (har, recorder_log) = recorder.stop();
    let (exit, report) = audit(folder.path());
    let store: BTreeMap<&str, Vec<Value>> = ["alice", "bob"]
        .into_iter()
        .map(|caller| (caller, tickets_of(&service, caller)))
        .collect();
    let entries = entries_by_intention(plan, &ledger, &har);
    let tickets = tickets_by_intention(plan, &ledger, &store);
    let flagged = flagged(&report);
    let mut run = Run {
        plan: plan.to_vec(),
        ledger,
        har,
        recorder_log,
        exit,
        report,
        left: Vec::new(),
    };
    for (entries, tickets) in entries.into_iter().zip(tickets) {
        let fate = fate_of(&entries, &flagged, &run);
        run.left.push(Left {
            entries,
            tickets,
            fate,
        });
    }
    for flag in flagged.iter().filter(|f| !f.doubt) {
        // A finding is about one intention, names all of its entries and no other, and that
        // intention made two tickets.
        let whose = run.left.iter().find(|left| {
            let mut mine = left.entries.clone();
            mine.sort();
            mine == flag.places
        });
        assert!(
            whose.is_some_and(|left| left.tickets > 1),
            "a finding of {} cites {:?}, which are not the entries of one intention with two \
             tickets\n{}",
            flag.point,
            flag.places,
            run.context()
        );
    }
    for left in &run.left {
        assert!(
            left.tickets > 1 || left.fate == Fate::Clean,
            "an intention with one ticket is {:?}\n{}",
            left.fate,
            run.context()
        );
    }
    // The audit's exit status is its report's: 1 with a failed point, else 0.
    let failed = run.report["points"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["verdict"] == "FAIL");
    assert_eq!(run.exit, i32::from(failed), "{}", run.context());
    run
}

/// The create entries of the HAR, grouped by intention: an intention's entries are those of
/// its caller, title and priority, in the order they were sent, as many as the ledger says it
/// sent (each plan once, and once more per retry urllib3 logged). Intentions sent alike one
/// after another take their entries in turn.
fn entries_by_intention(plan: &[Intention], ledger: &Value, har: &Value) -> Vec<Vec<String>> {
    let mut sent: BTreeMap<(String, String, String), Vec<(i128, String)>> = BTreeMap::new();
    for (n, entry) in har["log"]["entries"].as_array().unwrap().iter().enumerate() {
        let request = &entry["request"];
        if request["method"] != "POST" || !request["url"].as_str().unwrap().ends_with("/tickets") {
            continue;
        }
        let header = |name: &str| {
            request["headers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|h| h["name"].as_str().unwrap().eq_ignore_ascii_case(name))
                .and_then(|h| h["value"].as_str())
                .unwrap_or_default()
                .to_owned()
        };
        let caller = header("authorization")
            .trim_start_matches("Bearer ")
            .trim_end_matches("-token")
            .to_owned();
        let body: Value =
            serde_json::from_str(request["postData"]["text"].as_str().unwrap()).unwrap();
        let started = record::rfc3339_ns(entry["startedDateTime"].as_str().unwrap()).unwrap();
        sent.entry((
            caller,
            body["title"].as_str().unwrap().to_owned(),
            body["priority"].as_str().unwrap().to_owned(),
        ))
        .or_default()
        .push((started, format!("traffic.har entries[{n}]")));
    }
    for entries in sent.values_mut() {
        entries.sort();
    }
    let ledger = ledger["intentions"].as_array().unwrap();
    let mut grouped = Vec::new();
    for (intention, told) in plan.iter().zip(ledger) {
        let sends: usize = told["plans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| 1 + p["retries"].as_array().unwrap().len())
            .sum();
        let alike = sent
            .get_mut(&(
                intention.caller.to_owned(),
                intention.title.to_owned(),
                intention.priority.to_owned(),
            ))
            .unwrap_or_else(|| panic!("no HAR entry for {:?}: {har}", intention.title));
        assert!(
            alike.len() >= sends,
            "the client sent {:?} {sends} times; the HAR holds {}",
            intention.title,
            alike.len()
        );
        grouped.push(alike.drain(..sends).map(|(_, place)| place).collect());
    }
    let unclaimed: Vec<_> = sent.values().flatten().collect();
    assert!(
        unclaimed.is_empty(),
        "HAR entries no send of the client accounts for: {unclaimed:?}"
    );
    grouped
}

/// Each intention's tickets in the store: those of its caller with its title and priority.
/// Intentions sent alike (the same title twice, one after the other) must have made one each,
/// and each got its own back.
fn tickets_by_intention(
    plan: &[Intention],
    ledger: &Value,
    store: &BTreeMap<&str, Vec<Value>>,
) -> Vec<usize> {
    let ledger = ledger["intentions"].as_array().unwrap();
    plan.iter()
        .zip(ledger)
        .map(|(intention, told)| {
            let alike = plan
                .iter()
                .filter(|i| {
                    (i.caller, i.title, i.priority)
                        == (intention.caller, intention.title, intention.priority)
                })
                .count();
            let made: Vec<&Value> = store[intention.caller]
                .iter()
                .filter(|t| t["title"] == intention.title && t["priority"] == intention.priority)
                .collect();
            if alike == 1 {
                return made.len();
            }
            let got =
                told["plans"].as_array().unwrap().last().unwrap()["outcome"]["body"]["ticket_id"]
                    .clone();
            assert!(
                made.len() == alike && made.iter().any(|t| t["ticket_id"] == got),
                "{alike} intentions {:?} made {made:?}; this one got {got}",
                intention.title
            );
            1
        })
        .collect()
}

/// What the flagged checks say of the intention with `entries`.
fn fate_of(entries: &[String], flagged: &[Flagged], run: &Run) -> Fate {
    let cites = |f: &&Flagged| f.places.iter().any(|p| entries.contains(p));
    let point = |f: &Flagged| {
        point_named(&f.point)
            .unwrap_or_else(|| panic!("unknown point {}\n{}", f.point, run.context()))
    };
    if let Some(failure) = flagged.iter().filter(|f| !f.doubt).find(cites) {
        return Fate::Failed(point(failure));
    }
    match flagged.iter().filter(|f| f.doubt).find(cites) {
        Some(doubt) => Fate::Undecided(point(doubt)),
        None => Fate::Clean,
    }
}

/// The audit's point names, as `'static` strings.
fn point_named(name: &str) -> Option<&'static str> {
    lab::audit::judge::POINTS
        .iter()
        .map(|p| p.id)
        .find(|id| *id == name)
}

/// The plan most runs share: alice's two creates (the second one held) and bob's one.
fn plan() -> Vec<Intention> {
    vec![
        intention("alice", "Printer on floor 3 is jammed"),
        intention("alice", HELD),
        intention("bob", "VPN drops every hour"),
    ]
}

/// The held intention's first send timed out in urllib3 and was retried by it, and the HAR
/// lists that first send after a later one of the same intention: the fault fired, and the
/// recording shows it in the one way it can.
fn assert_the_held_reply_was_given_up_on_and_listed_late(run: &Run, plan: usize) {
    let held = run.index_of(HELD);
    let retries = &run.ledger["intentions"][held]["plans"][plan]["retries"];
    assert!(
        retries.as_array().is_some_and(|r| r
            .iter()
            .any(|line| line.as_str().unwrap().contains("ReadTimeoutError"))),
        "urllib3 did not retry the held create after a read timeout\n{}",
        run.context()
    );
    let position = |place: &String| -> usize {
        place
            .trim_start_matches("traffic.har entries[")
            .trim_end_matches(']')
            .parse()
            .unwrap()
    };
    let entries = &run.left[held].entries;
    assert!(
        entries[1..]
            .iter()
            .any(|later| position(later) < position(&entries[0])),
        "the HAR does not list the held reply after a later send of it: {entries:?}\n{}",
        run.context()
    );
    assert!(
        run.recorder_log.contains("slow_first: holding reply 1"),
        "{}",
        run.context()
    );
    let first = &run.har["log"]["entries"][position(&entries[0])];
    assert_eq!(
        first["response"]["status"],
        201,
        "mitmproxy recorded the service's answer to the held send\n{}",
        run.context()
    );
}

#[test]
fn a_keyed_client_retrying_through_mitmproxy_leaves_one_ticket_and_no_finding() {
    let test = "a_keyed_client_retrying_through_mitmproxy_leaves_one_ticket_and_no_finding";
    let Some(tools) = tools(test) else { return };
    let held = Held {
        title: HELD,
        count: 1,
    };
    let run = run(&tools, "keyed", held, &plan());
    assert_the_held_reply_was_given_up_on_and_listed_late(&run, 0);
    // urllib3 sent the same key again and the middleware replayed the ticket.
    assert_eq!(run.fates(), [(1, Fate::Clean); 3], "{}", run.context());
    assert_eq!(run.exit, 0, "{}", run.context());
    assert_eq!(verdict(&run.report, "one-key-one-effect"), "PASS");
    for point in [
        "retry-without-key",
        "new-key-after-lost-reply",
        "changed-payload",
    ] {
        assert_eq!(
            verdict(&run.report, point),
            "NOT_COVERED",
            "{}",
            run.context()
        );
    }
    crate::audit::show_in_the_book(&run.report, "har-keyed.txt");
}

#[test]
fn a_keyed_retry_after_the_middleware_lost_its_record_is_two_effects_under_one_key() {
    // The service's "record-lost" priority: the ticket is made and answered, then the
    // middleware's store fails to keep the key's record (probe 15 of its REPRODUCTION.md). The
    // reply is held, urllib3 sends the same key again, and the middleware makes a second
    // ticket under it: the HAR names both, so the audit decides it.
    let test = "a_keyed_retry_after_the_middleware_lost_its_record_is_two_effects_under_one_key";
    let Some(tools) = tools(test) else { return };
    let mut plan = plan();
    plan[1].priority = "record-lost";
    let held = Held {
        title: HELD,
        count: 1,
    };
    let run = run(&tools, "keyed", held, &plan);
    assert_the_held_reply_was_given_up_on_and_listed_late(&run, 0);
    assert_eq!(
        run.fates(),
        [
            (1, Fate::Clean),
            (2, Fate::Failed("one-key-one-effect")),
            (1, Fate::Clean)
        ],
        "{}",
        run.context()
    );
    assert_eq!(run.exit, 1, "{}", run.context());
    assert_eq!(verdict(&run.report, "one-key-one-effect"), "FAIL");
    crate::audit::show_in_the_book(&run.report, "har-record-lost.txt");
}

#[test]
fn an_unkeyed_client_retrying_through_mitmproxy_leaves_two_tickets_the_audit_names_undecided() {
    // urllib3 sends the create again without a key: the service makes a second ticket. The
    // HAR holds both answers but marks no reply its caller never got; the held entry is listed
    // after the retry, which the audit reads as a reply not back when the retry was sent. A
    // retry, or a second ticket sent in parallel: the HAR cannot say which, and the audit says
    // so, naming the retry. The same title sent twice, each after the other's reply came
    // back, is two intentions with a ticket each, and is never flagged.
    let test =
        "an_unkeyed_client_retrying_through_mitmproxy_leaves_two_tickets_the_audit_names_undecided";
    let Some(tools) = tools(test) else { return };
    let mut plan = plan();
    plan.push(intention("alice", "Weekly report is due"));
    plan.push(intention("alice", "Weekly report is due"));
    let held = Held {
        title: HELD,
        count: 1,
    };
    let run = run(&tools, "unkeyed", held, &plan);
    assert_the_held_reply_was_given_up_on_and_listed_late(&run, 0);
    assert_eq!(
        run.fates(),
        [
            (1, Fate::Clean),
            (2, Fate::Undecided("retry-without-key")),
            (1, Fate::Clean),
            (1, Fate::Clean),
            (1, Fate::Clean)
        ],
        "{}",
        run.context()
    );
    assert_eq!(run.exit, 0, "{}", run.context());
    assert_eq!(verdict(&run.report, "retry-without-key"), "NOT_COVERED");
    crate::audit::show_in_the_book(&run.report, "har-unkeyed.txt");
}

#[test]
fn a_replan_under_a_new_key_through_mitmproxy_is_undecided_in_a_har_and_never_clean() {
    // urllib3 sends the first key twice (the held reply and its own retry, both held), gives up,
    // and the application re-plans under a new key: the service makes a second ticket. The
    // HAR holds three answers and marks no reply lost, but lists the held ones after the
    // re-plan that overtook them: the re-plan went out while the first key's reply was on its
    // way. A re-plan its client gave up waiting for, or a second ticket sent in parallel: the
    // HAR cannot say which, so the audit says it cannot decide, citing the re-plan, never
    // clean and never a finding. The same title re-sent under a new key after its reply came
    // back is two intentions with a ticket each, and stays clean.
    let test = "a_replan_under_a_new_key_through_mitmproxy_is_undecided_in_a_har_and_never_clean";
    let Some(tools) = tools(test) else { return };
    let mut plan = plan();
    plan.push(intention("alice", "Weekly report is due"));
    plan.push(intention("alice", "Weekly report is due"));
    let held = Held {
        title: HELD,
        count: 2,
    };
    let run = run(&tools, "replan", held, &plan);
    assert_the_held_reply_was_given_up_on_and_listed_late(&run, 0);
    let plans = run.ledger["intentions"][run.index_of(HELD)]["plans"]
        .as_array()
        .unwrap();
    assert!(
        plans.len() == 2
            && plans[0]["outcome"]["error"].is_string()
            && plans[1]["outcome"]["status"] == 201,
        "the application did not re-plan after urllib3 gave up\n{}",
        run.context()
    );
    assert_eq!(
        run.fates(),
        [
            (1, Fate::Clean),
            (2, Fate::Undecided("new-key-after-lost-reply")),
            (1, Fate::Clean),
            (1, Fate::Clean),
            (1, Fate::Clean)
        ],
        "{}",
        run.context()
    );
    assert_eq!(run.exit, 0, "{}", run.context());
    assert_eq!(
        verdict(&run.report, "new-key-after-lost-reply"),
        "NOT_COVERED"
    );
    assert_eq!(verdict(&run.report, "one-key-one-effect"), "PASS");
    crate::audit::show_in_the_book(&run.report, "har-replan.txt");
}

/// A HAR shaped as mitmproxy writes one (`creator` before `entries`, the service's `time`), of
/// alice's keyless creates `(seconds after the start, title, ticket)`, listed in the order given.
fn mitmproxy_har(creator: &str, entries: &[(f64, &str, u32)]) -> String {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(at, title, ticket)| {
            let micros = (at * 1e6).round() as u64;
            let started = format!(
                "2026-12-07T23:36:{:02}.{:06}+00:00",
                micros / 1_000_000,
                micros % 1_000_000
            );
            let asked = json!({"title": title, "priority": "high"}).to_string();
            let answered = json!({"ticket_id": ticket}).to_string();
            json!({
                "startedDateTime": started,
                "time": 10.5,
                "request": {
                    "method": "POST", "url": "http://127.0.0.1:8000/tickets",
                    "httpVersion": "HTTP/1.1",
                    "headers": [{"name": "Authorization", "value": "Bearer alice-token"},
                                {"name": "Content-Type", "value": "application/json"}],
                    "postData": {"mimeType": "application/json", "text": asked}
                },
                "response": {
                    "status": 201, "statusText": "Created", "httpVersion": "HTTP/1.1",
                    "headers": [],
                    "content": {"size": 20, "mimeType": "application/json", "text": answered}
                },
                "cache": {},
                "timings": {"connect": -1.0, "ssl": -1.0, "send": 1.0, "receive": 0.5, "wait": 9.0}
            })
        })
        .collect();
    let creator = json!({"name": creator, "version": "11.0.2", "comment": ""});
    json!({"log": {"version": "1.2", "creator": creator, "pages": [], "entries": entries}})
        .to_string()
}

/// Each exchange's place and `took_ms` as the audit's reader reads `text`.
fn read_har(text: &str) -> Vec<(String, Option<u64>)> {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("traffic.har");
    std::fs::write(&path, text).unwrap();
    let mut read = Vec::new();
    record::read(&path, &mut |_, _| {}, &mut |r: Recorded| {
        read.push((r.place, r.took_ms));
    })
    .unwrap();
    read
}

#[test]
fn a_reply_mitmproxy_lists_after_a_later_request_is_read_as_not_back_when_that_one_was_sent() {
    // As the recorder wrote it above: "Printer" answered, the held "Disk full" (sent at 0.1 s,
    // the service's time 10.5 ms) listed after its retry (sent at 2.1 s).
    let completion_order = [
        (0.0, "Printer", 1),
        (2.1, "Disk full", 3),
        (0.1, "Disk full", 2),
    ];
    let read = read_har(&mitmproxy_har("mitmproxy", &completion_order));
    // The held reply was passed on after the retry was done: 2.1 s + 10.5 ms - 0.1 s, rounded up.
    assert_eq!(
        read,
        [
            ("entries[0]".to_owned(), Some(10)),
            ("entries[1]".to_owned(), Some(10)),
            ("entries[2]".to_owned(), Some(2011)),
        ]
    );
    // Sorted by start, as mitmproxy's view saves them and browsers write them, or from another
    // writer: the file's times as they are.
    let mut by_start = completion_order;
    by_start.sort_by(|a, b| a.0.total_cmp(&b.0));
    for text in [
        mitmproxy_har("mitmproxy", &by_start),
        mitmproxy_har("WebInspector", &completion_order),
    ] {
        let took: Vec<Option<u64>> = read_har(&text).into_iter().map(|(_, t)| t).collect();
        assert_eq!(took, [Some(10); 3]);
    }
    // End to end: in completion order the audit sees the retry sent while the first reply was
    // not back, and flags it; sorted by start, the two are apart and nothing is flagged.
    for (entries, flagged_places) in [
        (completion_order, vec!["traffic.har entries[1]"]),
        (by_start, vec![]),
    ] {
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(
            folder.path().join("traffic.har"),
            mitmproxy_har("mitmproxy", &entries),
        )
        .unwrap();
        let (_, report) = audit(folder.path());
        let cited: Vec<String> = flagged(&report)
            .into_iter()
            .filter(|f| f.point == "retry-without-key")
            .flat_map(|f| f.places)
            .filter(|p| p.ends_with("entries[1]"))
            .collect();
        assert_eq!(cited, flagged_places, "{report:#}");
    }
}
