//! `lab serve` against hostile and careless clients, byte by byte over raw `TcpStream`s: every
//! read has a timeout, so a hang is a failure and never a hung test.
//!
//! No verdict here depends on how fast the machine is: an event orders each step (a reply, a
//! 100 Continue, a refused connect, a line the server prints), the server's own limits are set
//! far above what a healthy run needs, and [`GUARD`] only ends a broken run.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lab::http::wire::{self, problem};
use lab::http::{CallerToken, Limits, ServeOptions, TicketServer};
use lab::serde_json::{self, Value};

use crate::http::LabServer;

const TICKET: &str = r#"{"title": "Disk full", "priority": "normal"}"#;

/// How long a test waits for something that a healthy server does at once: it only ends a broken
/// run (a hang is a failure, never a hung test), so it is generous enough for a busy CI machine.
pub const GUARD: Duration = Duration::from_secs(60);

/// One HTTP response read off a raw connection.
#[derive(Debug)]
pub struct RawReply {
    pub status: u16,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// A raw connection to the server, with a read timeout.
pub struct Raw {
    reader: BufReader<TcpStream>,
}

impl Raw {
    pub fn connect(url: &str) -> Raw {
        let address = url.strip_prefix("http://").unwrap();
        let stream = TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(GUARD)).unwrap();
        stream.set_write_timeout(Some(GUARD)).unwrap();
        Raw {
            reader: BufReader::new(stream),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) -> &mut Raw {
        self.reader.get_mut().write_all(bytes).unwrap();
        self
    }

    /// The next response, or `None` if the server closed the connection before a byte of one.
    /// Panics on a read timeout: the server hung.
    pub fn reply(&mut self, head_only: bool) -> Option<RawReply> {
        let mut status_line = String::new();
        match self.reader.read_line(&mut status_line) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(err) => panic!("no response within the timeout: {err}"),
        }
        let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap();
            headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
        }
        let mut reply = RawReply {
            status,
            headers,
            body: Vec::new(),
        };
        let length: usize = reply
            .header("content-length")
            .map_or(0, |length| length.parse().unwrap());
        if !head_only {
            reply.body = vec![0; length];
            self.reader.read_exact(&mut reply.body).unwrap();
        }
        Some(reply)
    }

    /// Whether the server has neither answered nor closed the connection yet; does not wait.
    pub fn is_silent(&self) -> bool {
        self.reader.buffer().is_empty() && is_silent(self.reader.get_ref())
    }

    /// Whether the server closed the connection (EOF) without sending anything more.
    pub fn is_closed(&mut self) -> bool {
        let mut byte = [0];
        match self.reader.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => true,
            Err(err) => panic!("neither closed nor answered within the timeout: {err}"),
        }
    }
}

/// Whether nothing has arrived on `stream` yet, neither a byte nor its end; does not wait. It
/// orders two events without a clock: a peer that has not answered or closed by now did so later.
pub fn is_silent(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let peeked = stream.peek(&mut [0]);
    stream.set_nonblocking(false).unwrap();
    matches!(peeked, Err(err) if err.kind() == std::io::ErrorKind::WouldBlock)
}

/// One request on a fresh connection and its reply.
pub fn exchange(url: &str, request: &str) -> RawReply {
    Raw::connect(url)
        .send(request.as_bytes())
        .reply(false)
        .expect("a response")
}

fn post_ticket(key_line: &str, body: &str) -> String {
    format!(
        "POST /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\n{key_line}\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn get(path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\nConnection: close\r\n\r\n"
    )
}

fn assert_alive(url: &str) {
    let reply = exchange(url, &get("/tickets"));
    assert_eq!(reply.status, 200, "{reply:?}");
}

/// The listing, once the server has let go of the connections the test closed: until it notices
/// them closed it may still shed a new one (503, `Retry-After`), so wait as that answer asks.
fn listing_once_a_slot_is_free(url: &str) -> RawReply {
    let deadline = Instant::now() + GUARD;
    loop {
        let reply = exchange(url, &get("/tickets"));
        if reply.status != 503 || Instant::now() > deadline {
            return reply;
        }
        assert_eq!(reply.json()["type"], problem::OVERLOADED.uri(), "{reply:?}");
        let seconds = reply.header("retry-after").unwrap().parse().unwrap();
        std::thread::sleep(Duration::from_secs(seconds));
    }
}

fn records(url: &str) -> Value {
    let request = "GET /admin/records HTTP/1.1\r\nHost: lab\r\nLab-Admin-Token: admin-token\r\n\
                   Connection: close\r\n\r\n";
    exchange(url, request).json()["records"].clone()
}

fn stored_keys(database: &Path) -> Vec<String> {
    let db = rusqlite::Connection::open(database).unwrap();
    let mut statement = db
        .prepare("SELECT key FROM operation_records ORDER BY key")
        .unwrap();
    statement
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn in_process(limits: Limits) -> TicketServer {
    TicketServer::start(in_process_options(limits)).unwrap()
}

/// A server in this process, for limits `lab serve` has no option for: alice's token, the admin
/// token of [`records`], two store threads and a temporary store.
fn in_process_options(limits: Limits) -> ServeOptions {
    ServeOptions {
        callers: vec!["alice=token-a".parse::<CallerToken>().unwrap()],
        admin_token: Some("admin-token".to_owned()),
        workers: 2,
        limits: Some(limits),
        ..ServeOptions::default()
    }
}

#[test]
fn a_content_length_of_a_petabyte_is_answered_413_without_reading_and_the_server_lives() {
    let server = LabServer::start(&[]);
    let request = "POST /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\n\
                   Idempotency-Key: \"huge\"\r\nContent-Length: 1099511627776000\r\n\r\n";
    let reply = exchange(&server.url, request);
    assert_eq!(reply.status, 413, "{reply:?}");
    assert_eq!(reply.header("content-type"), Some(wire::PROBLEM_JSON));
    assert_eq!(reply.json()["type"], problem::TOO_LARGE.uri());
    assert_alive(&server.url);
    assert_eq!(records(&server.url), 0);
}

#[test]
fn eight_requests_with_the_largest_content_length_are_refused_and_the_server_lives() {
    let server = LabServer::start(&[]);
    for _ in 0..8 {
        let request = "POST /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\n\
                       Idempotency-Key: \"max\"\r\nContent-Length: 18446744073709551615\r\n\r\n";
        let reply = exchange(&server.url, request);
        // hyper refuses a length above u64::MAX - 2 while parsing the head, before the service
        // sees the request, and answers 431 itself; anything under it reaches the 413 layer.
        assert_eq!(reply.status, 431, "{reply:?}");
    }
    assert_alive(&server.url);
    assert_eq!(records(&server.url), 0);
}

#[test]
fn sixteen_connections_that_never_send_their_body_do_not_keep_a_get_from_its_answer() {
    // Stalled bodies wait out the body timeout, set far above any healthy answer: a GET that had
    // to wait for a store thread they hold would come after their 408s, not before.
    let server = in_process(Limits {
        body_idle: GUARD,
        request: GUARD,
        ..Limits::default()
    });
    let url = server.url();
    let stalled: Vec<Raw> = (0..16)
        .map(|n| {
            let head = format!(
                "POST /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\n\
                 Idempotency-Key: \"stalled-{n}\"\r\nContent-Length: 100\r\n\r\n"
            );
            let mut raw = Raw::connect(&url);
            raw.send(head.as_bytes());
            raw
        })
        .collect();
    assert_alive(&url);
    // Answered while every stalled request is still waiting for its body: none answered yet.
    assert!(stalled.iter().all(Raw::is_silent));
    drop(stalled);
    assert_eq!(records(&url), 0);
}

#[test]
fn a_body_that_stops_arriving_gets_408_and_writes_nothing() {
    let server = in_process(Limits {
        body_idle: Duration::from_millis(300),
        ..Limits::default()
    });
    let mut raw = Raw::connect(&server.url());
    raw.send(
        b"POST /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\n\
          Idempotency-Key: \"slow\"\r\nContent-Length: 100\r\n\r\n{\"title\":",
    );
    let reply = raw.reply(false).expect("a 408, not a closed connection");
    assert_eq!(reply.status, 408, "{reply:?}");
    assert_eq!(reply.json()["type"], problem::REQUEST_TIMEOUT.uri());
    let listed = exchange(&server.url(), &get("/tickets"));
    assert_eq!(listed.json()["tickets"], serde_json::json!([]));
}

#[test]
fn connections_over_the_limit_are_answered_503_and_the_rest_are_served() {
    let server = in_process(Limits {
        connections: 4,
        header_read: GUARD,
        ..Limits::default()
    });
    // Four idle connections hold every slot, until the header timeout (set beyond the test). The
    // server accepts connections in the order they were made, so they hold them before the fifth.
    let held: Vec<Raw> = (0..4).map(|_| Raw::connect(&server.url())).collect();
    let shed = exchange(&server.url(), &get("/tickets"));
    assert_eq!(shed.status, 503, "{shed:?}");
    assert_eq!(shed.json()["type"], problem::OVERLOADED.uri());
    assert_eq!(shed.header("retry-after"), Some("1"));
    drop(held);
    let listed = listing_once_a_slot_is_free(&server.url());
    assert_eq!(listed.status, 200, "{listed:?}");
}

#[test]
fn after_running_out_of_file_descriptors_the_server_accepts_again() {
    // A server limited to 64 open files, and 120 connections held open against it.
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("tickets.sqlite");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_lab"))
        .args(["serve", "--port", "0", "--workers", "2", "--database"])
        .arg(&database)
        .args(["--caller", "alice=token-a"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = crate::http::listening_url(&mut child);
    // Every line the server logs, read all along so it never blocks on a full pipe.
    let (logged, log) = std::sync::mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = logged.send(line);
        }
    });
    let address = url.strip_prefix("http://").unwrap().to_owned();
    let held: Vec<TcpStream> = (0..120)
        .filter_map(|_| TcpStream::connect(&address).ok())
        .collect();
    // The server says when an accept failed for want of descriptors: only then are they let go.
    let ran_out = loop {
        match log.recv_timeout(GUARD) {
            Ok(line) if line.contains("accept failed") => break Some(line),
            Ok(_) => continue,
            Err(_) => break None,
        }
    };
    let Some(ran_out) = ran_out else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the server never ran out of descriptors");
    };
    eprintln!("{ran_out}");
    drop(held);
    // Once the descriptors are free again, a normal request is answered.
    let deadline = Instant::now() + GUARD;
    let answered = loop {
        let mut raw = Raw::connect(&url);
        raw.send(get("/tickets").as_bytes());
        match raw.reply(false) {
            Some(reply) if reply.status == 200 => break true,
            _ if Instant::now() > deadline => break false,
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(answered, "the accept loop did not recover");
}

#[test]
fn gets_on_a_kept_alive_connection_are_answered_without_waiting_for_nagle() {
    // In this process, so the test can look at the server's end of the connection: the same
    // accept loop as `lab serve`'s.
    let server = in_process(Limits::default());
    let mut raw = Raw::connect(&server.url());
    let request = "GET /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\n\r\n";
    let mut times = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        raw.send(request.as_bytes());
        let reply = raw.reply(false).expect("the connection is kept");
        assert_eq!(reply.status, 200);
        times.push(started.elapsed());
    }
    times.sort();
    // Delayed ACK against Nagle costs about 40 ms a reply. How long a reply takes depends on the
    // machine, so the times are only shown; the verdict is the mechanism: the server's end of
    // the connection sends without Nagle's wait for an ACK (TCP_NODELAY).
    eprintln!("kept-alive GETs, fastest to slowest: {times:?}");
    let client = raw.reader.get_ref();
    let accepted = server_end(client).expect("the server's end of the connection");
    assert!(accepted.nodelay().unwrap(), "Nagle is on for {client:?}");
}

/// The server's end of `client`'s connection to a server in this process, found among this
/// process's open descriptors. Borrowed: it is never closed here.
fn server_end(client: &TcpStream) -> Option<std::mem::ManuallyDrop<TcpStream>> {
    use std::os::fd::FromRawFd;
    let (near, far) = (client.local_addr().unwrap(), client.peer_addr().unwrap());
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .find_map(|entry| {
            let fd: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            // SAFETY: ManuallyDrop never closes the descriptor, and a descriptor that is not a
            // socket (or was closed meanwhile) only makes the address calls below fail.
            let socket = std::mem::ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) });
            let matches = socket.local_addr().ok()? == far && socket.peer_addr().ok()? == near;
            matches.then_some(socket)
        })
}

#[test]
fn an_http_1_0_client_that_asks_for_keep_alive_gets_two_answers_on_one_connection() {
    let server = LabServer::start(&[]);
    let mut raw = Raw::connect(&server.url);
    let request = "GET /tickets HTTP/1.0\r\nAuthorization: Bearer token-a\r\n\
                   Connection: keep-alive\r\n\r\n";
    for _ in 0..2 {
        raw.send(request.as_bytes());
        let reply = raw.reply(false).expect("kept alive");
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.header("connection"), Some("keep-alive"), "{reply:?}");
    }
}

#[test]
fn head_on_a_get_resource_is_answered_and_other_methods_get_405_with_allow() {
    let server = LabServer::start(&[]);
    let mut raw = Raw::connect(&server.url);
    raw.send(b"HEAD /openapi.json HTTP/1.1\r\nHost: lab\r\n\r\n");
    let head = raw.reply(true).unwrap();
    assert_eq!(head.status, 200, "{head:?}");
    // Nothing follows the head: the next reply on the connection is the next request's.
    raw.send(b"GET /openapi.json HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n");
    assert_eq!(raw.reply(false).unwrap().status, 200);

    let put = exchange(
        &server.url,
        "PUT /tickets HTTP/1.1\r\nHost: lab\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(put.status, 405, "{put:?}");
    let allow = put.header("allow").unwrap();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    assert_eq!(put.json()["type"], problem::METHOD_NOT_ALLOWED.uri());
}

#[test]
fn a_non_ascii_header_byte_is_answered_400_not_a_closed_connection() {
    let server = LabServer::start(&[]);
    let mut raw = Raw::connect(&server.url);
    raw.send(b"GET /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\n");
    raw.send(b"X-Note: caf\xc3\xa9\r\nConnection: close\r\n\r\n");
    let reply = raw.reply(false).expect("an answer");
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(reply.json()["type"], problem::INVALID_REQUEST.uri());
    assert!(reply.json()["detail"].as_str().unwrap().contains("x-note"));
}

#[test]
fn an_endless_header_line_and_too_many_header_lines_are_answered_431() {
    let server = LabServer::start(&[]);
    let long = format!(
        "GET /tickets HTTP/1.1\r\nHost: lab\r\nX-Long: {}\r\n\r\n",
        "a".repeat(100_000)
    );
    let mut raw = Raw::connect(&server.url);
    // The server may answer before reading it all; a reset from the unread rest is fine.
    let _ = raw.reader.get_mut().write_all(long.as_bytes());
    assert_eq!(raw.reply(false).expect("an answer").status, 431);
    let many: String = (0..200).map(|n| format!("X-Line-{n}: {n}\r\n")).collect();
    let request = format!("GET /tickets HTTP/1.1\r\nHost: lab\r\n{many}\r\n");
    assert_eq!(exchange(&server.url, &request).status, 431);
    assert_alive(&server.url);
}

#[test]
fn a_quoted_key_is_the_key_without_its_quotes_and_a_bare_token_is_the_same_key() {
    let server = LabServer::start(&[]);
    let quoted = exchange(
        &server.url,
        &post_ticket("Idempotency-Key: \"8e03978e-40d5-43e8\"\r\n", TICKET),
    );
    assert_eq!(quoted.status, 201, "{quoted:?}");
    assert_eq!(quoted.header("idempotent-replayed"), None);
    let escaped = exchange(
        &server.url,
        &post_ticket("Idempotency-Key: \"say \\\"hi\\\"\"\r\n", TICKET),
    );
    assert_eq!(escaped.status, 201, "{escaped:?}");
    let bare = exchange(
        &server.url,
        &post_ticket("Idempotency-Key: curl-key-1\r\n", TICKET),
    );
    assert_eq!(bare.status, 201);
    let requoted = exchange(
        &server.url,
        &post_ticket("Idempotency-Key: \"curl-key-1\"\r\n", TICKET),
    );
    assert_eq!(requoted.status, 201);
    assert_eq!(requoted.header("idempotent-replayed"), Some("true"));
    assert_eq!(requoted.json(), bare.json());
    assert_eq!(
        stored_keys(server.database.as_ref().unwrap()),
        ["8e03978e-40d5-43e8", "curl-key-1", "say \"hi\""]
    );
}

#[test]
fn malformed_repeated_or_listed_keys_get_400_naming_the_fault_and_write_nothing() {
    let server = LabServer::start(&[]);
    let cases = [
        ("Idempotency-Key: \"abc\r\n", "closing"),
        ("Idempotency-Key: \"a\\b\"\r\n", "escapes"),
        ("Idempotency-Key: \"k\";a=1\r\n", "parameters"),
        ("Idempotency-Key: \"a\", \"b\"\r\n", "list"),
        (
            "Idempotency-Key: \"a\"\r\nIdempotency-Key: \"b\"\r\n",
            "more than once",
        ),
        ("Idempotency-Key: \" padded\"\r\n", "space"),
        ("Idempotency-Key: \"padded \"\r\n", "space"),
        ("Idempotency-Key: 8e03978e-40d5\r\n", "quoted"),
    ];
    for (line, named) in cases {
        let reply = exchange(&server.url, &post_ticket(line, TICKET));
        assert_eq!(reply.status, 400, "{line:?}: {reply:?}");
        let body = reply.json();
        assert_eq!(body["type"], problem::INVALID_KEY.uri(), "{line:?}");
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains(named), "{line:?}: {detail}");
        let link = reply.header("link").unwrap();
        assert_eq!(
            link,
            format!("<{}>; rel=\"describedby\"", problem::INVALID_KEY.uri())
        );
    }
    assert_eq!(records(&server.url), 0);
    let listed = exchange(&server.url, &get("/tickets"));
    assert_eq!(listed.json()["tickets"], serde_json::json!([]));
}

#[test]
fn thirty_two_concurrent_retries_of_a_completed_create_all_replay_it() {
    let server = LabServer::start(&[]);
    let first = exchange(
        &server.url,
        &post_ticket("Idempotency-Key: \"done-1\"\r\n", TICKET),
    );
    assert_eq!(first.status, 201);
    let url = Arc::new(server.url.clone());
    for round in 0..5 {
        let retries: Vec<_> = (0..32)
            .map(|_| {
                let url = url.clone();
                std::thread::spawn(move || {
                    exchange(
                        &url,
                        &post_ticket("Idempotency-Key: \"done-1\"\r\n", TICKET),
                    )
                })
            })
            .collect();
        for retry in retries {
            let reply = retry.join().unwrap();
            assert_eq!(reply.status, 201, "round {round}: {reply:?}");
            assert_eq!(reply.header("idempotent-replayed"), Some("true"));
            assert_eq!(reply.json(), first.json());
        }
    }
    assert_eq!(records(&server.url), 1);
    let listed = exchange(&server.url, &get("/tickets"));
    assert_eq!(listed.json()["tickets"].as_array().unwrap().len(), 1);
}

#[test]
fn empty_or_blank_tokens_are_refused_at_start_with_status_2_naming_the_option() {
    let cases: [(&[&str], &str); 3] = [
        (
            &["--caller", "alice=token-a", "--admin-token", ""],
            "--admin-token",
        ),
        (
            &["--caller", "alice=token-a", "--admin-token", "  "],
            "--admin-token",
        ),
        (&["--caller", "alice="], "--caller"),
    ];
    for (args, option) in cases {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lab"))
            .args(["serve", "--port", "0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A server that accepted the token would listen forever: bounded, it is a failure.
        let deadline = Instant::now() + GUARD;
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if child.try_wait().unwrap().is_none() {
            let _ = child.kill();
        }
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        assert!(output.stdout.is_empty(), "{args:?}: it must not listen");
        let stderr = String::from_utf8_lossy(&output.stderr);
        // One line says what is wrong and names the option (clap adds a hint after its own).
        let first = stderr.lines().next().unwrap_or("");
        assert!(
            first.starts_with("error: ") && first.contains(option),
            "{args:?}: {stderr}"
        );
        assert!(
            first.contains("empty") || first.contains("spaces"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_fresh_connection_is_answered_while_eight_kept_alive_connections_keep_sending() {
    let server = LabServer::start(&[]);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (answered, first_answers) = std::sync::mpsc::channel();
    let busy: Vec<_> = (0..8)
        .map(|_| {
            let (url, stop) = (server.url.clone(), stop.clone());
            let mut first_answer = Some(answered.clone());
            std::thread::spawn(move || {
                let mut raw = Raw::connect(&url);
                let request =
                    "GET /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\n\r\n";
                let started = Instant::now();
                // Until the fresh connection has been served, so they are busy throughout; the
                // guard only ends a run whose main thread failed.
                while !stop.load(std::sync::atomic::Ordering::SeqCst) && started.elapsed() < GUARD {
                    raw.send(request.as_bytes());
                    assert_eq!(raw.reply(false).unwrap().status, 200);
                    if let Some(told) = first_answer.take() {
                        let _ = told.send(());
                    }
                }
            })
        })
        .collect();
    // Every busy connection has been answered once before the fresh ones come.
    for _ in 0..8 {
        first_answers
            .recv_timeout(GUARD)
            .expect("every busy connection is answered");
    }
    // A server that served only as many connections as it has threads would leave these
    // unanswered while the busy ones keep sending: Raw's read guard would fail the test.
    for _ in 0..5 {
        assert_alive(&server.url);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for thread in busy {
        thread.join().unwrap();
    }
}

#[test]
fn sigterm_lets_the_request_in_progress_finish_and_exits_0() {
    let mut server = LabServer::start(&[]);
    let body = TICKET.as_bytes();
    let mut raw = Raw::connect(&server.url);
    let head = format!(
        "POST /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\n\
         Idempotency-Key: \"during-stop\"\r\nExpect: 100-continue\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    raw.send(head.as_bytes());
    // The server asks for the body once its handler reads it: the request is in progress.
    let interim = raw.reply(true).expect("100 Continue");
    assert_eq!(interim.status, 100, "{interim:?}");
    raw.send(&body[..5]);
    let pid = server.pid().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    // The server has begun to stop once it refuses new connections; only then the rest comes.
    // (`lab serve`'s body timeout, 5 s, is the one bound left on this wait of milliseconds.)
    let address = server.url.strip_prefix("http://").unwrap();
    let deadline = Instant::now() + GUARD;
    loop {
        match TcpStream::connect(address) {
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => break,
            connected => assert!(Instant::now() < deadline, "not stopping: {connected:?}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    raw.send(&body[5..]);
    let reply = raw
        .reply(false)
        .expect("the request in progress is answered");
    assert_eq!(reply.status, 201, "{reply:?}");
    let status = server.wait_for_exit(GUARD);
    assert_eq!(status.code(), Some(0), "{status:?}");
    // SQLite removes the write-ahead log when the last connection closes cleanly.
    let database = server.database.clone().unwrap();
    let wal = database.with_file_name("tickets.sqlite-wal");
    assert!(!wal.exists(), "the store was not closed: {wal:?} is left");
    assert_eq!(stored_keys(&database), ["during-stop"]);
}

#[test]
fn a_store_failure_is_a_500_with_an_opaque_id_that_the_log_also_records() {
    let mut server = LabServer::start_logging(&[]);
    // Take the store's table away under the server's feet.
    let db = rusqlite::Connection::open(server.database.as_ref().unwrap()).unwrap();
    db.execute_batch(
        "PRAGMA foreign_keys = OFF; DROP TABLE operation_records; DROP TABLE tickets;",
    )
    .unwrap();
    let reply = exchange(&server.url, &get("/tickets"));
    assert_eq!(reply.status, 500, "{reply:?}");
    let body = reply.json();
    assert_eq!(body["type"], problem::INTERNAL.uri());
    let id = body["error_id"].as_str().unwrap().to_owned();
    let text = String::from_utf8_lossy(&reply.body).to_lowercase();
    assert!(
        !text.contains("sqlite") && !text.contains("table"),
        "{text}"
    );
    let log = server.stop_and_read_log();
    let logged = log.lines().find(|line| line.contains(&id)).unwrap_or("");
    assert!(logged.contains("no such table"), "{log}");
}

#[test]
fn the_published_openapi_names_the_fault_header_and_unkeyed_endpoint_only_under_faults() {
    for (flags, shown) in [(&[][..], false), (&["--faults"][..], true)] {
        let server = LabServer::start(flags);
        let reply = exchange(&server.url, &get("/openapi.json"));
        let text = String::from_utf8_lossy(&reply.body).to_string();
        assert_eq!(text.contains(wire::FAULT_HEADER), shown, "{flags:?}");
        assert_eq!(text.contains("/unkeyed-tickets"), shown, "{flags:?}");
        assert!(text.contains("/tickets/{id}"));
    }
}

#[test]
fn a_lost_reply_closes_the_connection_without_a_byte_and_the_retry_replays() {
    let server = LabServer::start(&["--faults"]);
    let mut raw = Raw::connect(&server.url);
    let request = post_ticket(
        "Idempotency-Key: \"lost-1\"\r\nLab-Fault: lose-reply\r\n",
        TICKET,
    )
    .replace("Connection: close\r\n", "");
    raw.send(request.as_bytes());
    assert!(raw.is_closed(), "not a byte of response");
    let retry = exchange(
        &server.url,
        &post_ticket("Idempotency-Key: \"lost-1\"\r\n", TICKET),
    );
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(stored_keys(server.database.as_ref().unwrap()), ["lost-1"]);
}

#[test]
fn every_problem_type_has_its_anchor_in_the_contract_chapter() {
    let chapter =
        std::fs::read_to_string(crate::repository_root().join("src/http-boundary.md")).unwrap();
    for kind in problem::ALL {
        let anchor = format!("id=\"{}\"", kind.anchor);
        assert!(
            chapter.contains(&anchor),
            "no {anchor} in src/http-boundary.md"
        );
    }
}

#[test]
fn a_head_that_never_finishes_is_closed_after_the_header_timeout() {
    let unfinished = b"GET /tickets HTTP/1.1\r\nHost: lab\r\nX-Slow: 1";
    // A server whose header timeout is beyond the test, given the same head first: it keeps its
    // connection open while the other server closes its own, so the close comes from the
    // timeout each server was given, not from a default or from the head itself.
    let patient = in_process(Limits {
        header_read: 10 * GUARD,
        ..Limits::default()
    });
    let mut waiting = Raw::connect(&patient.url());
    waiting.send(unfinished);
    let header_read = Duration::from_millis(300);
    let server = in_process(Limits {
        header_read,
        ..Limits::default()
    });
    // Before the connection exists, so before the server's timer starts.
    let started = Instant::now();
    let mut raw = Raw::connect(&server.url());
    raw.send(unfinished);
    assert!(raw.is_closed(), "the connection was answered instead");
    assert!(started.elapsed() >= header_read, "{:?}", started.elapsed());
    assert!(
        waiting.is_silent(),
        "the patient server closed its connection too"
    );
    assert_alive(&server.url());
}

#[test]
fn a_non_ascii_byte_in_a_header_name_is_answered_400_by_hyper() {
    let server = LabServer::start(&[]);
    let mut raw = Raw::connect(&server.url);
    raw.send(b"GET /tickets HTTP/1.1\r\nHost: lab\r\nX-Caf\xc3\xa9: 1\r\n\r\n");
    let reply = raw
        .reply(false)
        .expect("an answer, not a closed connection");
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_alive(&server.url);
}

#[test]
fn the_client_adapter_waits_out_a_503_and_creates_the_one_ticket() {
    use lab::http::{HttpTarget, HttpTool};
    use lab::{CreateRequest, Outcome, TicketTool};
    // The one slot is held by an idle connection until its header timeout. The server accepts
    // connections in the order they were made, so it holds the slot before the adapter comes;
    // the adapter's ten waits of a second each outlast the timeout.
    let header_read = Duration::from_secs(5);
    let server = in_process(Limits {
        connections: 1,
        header_read,
        ..Limits::default()
    });
    // Before the slot is taken: a machine too slow to reach the adapter before the timeout
    // spent that time here too, so this lower bound cannot fail a healthy adapter.
    let started = Instant::now();
    let held = Raw::connect(&server.url());
    let tool = HttpTool::new(HttpTarget::new(&server.url(), "token-a", None).unwrap());
    let (scope, key, payload) = crate::sample();
    let scope = lab::Scope::new("alice", scope.operation()).unwrap();
    let outcome = tool.create(CreateRequest::keyed(&scope, &key, &payload));
    assert_eq!(outcome.unwrap(), Outcome::Created(1.into()));
    // It waited, as the 503's Retry-After asked, instead of failing or sending again at once.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // The adapter's kept-alive connection holds the one slot now; let it go first.
    drop((held, tool));
    let listed = listing_once_a_slot_is_free(&server.url());
    assert_eq!(
        listed.json()["tickets"].as_array().unwrap().len(),
        1,
        "{listed:?}"
    );
}

#[test]
fn thirty_two_requests_released_together_on_a_new_key_all_get_its_one_ticket() {
    // The others wait for the first create however long its commit takes on a busy disk: the
    // wait for a key in progress is set beyond the test, so a 409 here is a server that did not
    // make them wait, never a slow commit. Eight store threads, as `lab serve` has.
    let folder = tempfile::tempdir().unwrap();
    let database = folder.path().join("tickets.sqlite");
    let server = TicketServer::start(ServeOptions {
        database: Some(database.clone()),
        workers: 8,
        ..in_process_options(Limits {
            in_progress_wait: GUARD,
            ..Limits::default()
        })
    })
    .unwrap();
    let url = server.url();
    let release = Arc::new(std::sync::Barrier::new(32));
    let senders: Vec<_> = (0..32)
        .map(|_| {
            let (url, release) = (url.clone(), release.clone());
            std::thread::spawn(move || {
                let mut raw = Raw::connect(&url);
                release.wait();
                raw.send(post_ticket("Idempotency-Key: \"together-1\"\r\n", TICKET).as_bytes());
                raw.reply(false).expect("a response")
            })
        })
        .collect();
    let replies: Vec<RawReply> = senders.into_iter().map(|s| s.join().unwrap()).collect();
    // One creates; the others wait for it and replay.
    assert!(replies.iter().all(|r| r.status == 201), "{replies:?}");
    let created = replies
        .iter()
        .filter(|r| r.header("idempotent-replayed").is_none())
        .count();
    assert_eq!(created, 1, "{replies:?}");
    assert!(replies.iter().all(|r| r.json() == replies[0].json()));
    assert_eq!(records(&url), 1);
    assert_eq!(stored_keys(&database), ["together-1"]);
}

#[test]
fn the_bearer_scheme_is_matched_whatever_its_case_and_another_scheme_is_refused() {
    let server = LabServer::start(&[]);
    for (scheme, status) in [
        ("Bearer", 200),
        ("bearer", 200),
        ("BEARER", 200),
        ("Basic", 401),
    ] {
        let request = format!(
            "GET /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: {scheme} token-a\r\n\
             Connection: close\r\n\r\n"
        );
        let reply = exchange(&server.url, &request);
        assert_eq!(reply.status, status, "{scheme}: {reply:?}");
    }
}

/// A service that answers the first create 409 (key in flight) with `Retry-After: 2`, and the
/// next 201; it returns when the two were sent, and the time between them.
fn in_flight_then_created(
    retry_after: &'static str,
) -> (String, std::thread::JoinHandle<Duration>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let serving = std::thread::spawn(move || {
        let mut first = None;
        for answer in 0..2 {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap();
                }
                if line == "\r\n" {
                    break;
                }
            }
            reader.read_exact(&mut vec![0; length]).unwrap();
            let (status, extra, body) = if answer == 0 {
                first = Some(Instant::now());
                let kind = lab::http::wire::problem::IN_FLIGHT;
                let body = format!(r#"{{"type":"{}","status":409}}"#, kind.uri());
                (
                    "409 Conflict",
                    format!("retry-after: {retry_after}\r\n"),
                    body,
                )
            } else {
                (
                    "201 Created",
                    String::new(),
                    r#"{"ticket_id":1}"#.to_owned(),
                )
            };
            let reply = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            (&stream).write_all(reply.as_bytes()).unwrap();
        }
        first.unwrap().elapsed()
    });
    (url, serving)
}

#[test]
fn the_client_adapter_waits_as_long_as_retry_after_asks_within_its_bound() {
    use lab::http::{HttpTarget, HttpTool};
    use lab::{CreateRequest, Outcome, TicketTool};
    let (scope, key, payload) = crate::sample();
    // Two seconds asked: the adapter waits them (a constant one-second wait would not).
    let (url, serving) = in_flight_then_created("2");
    let tool = HttpTool::new(HttpTarget::new(&url, "token-a", None).unwrap());
    let outcome = tool.create(CreateRequest::keyed(&scope, &key, &payload));
    assert_eq!(outcome.unwrap(), Outcome::Created(1.into()));
    let waited = serving.join().unwrap();
    assert!(waited >= Duration::from_secs(2), "{waited:?}");
    // An hour asked: the adapter waits its bound and no longer. Only lower bounds and a
    // ceiling far from any margin (a minute against an hour) are asserted, since a loaded
    // machine makes every wait longer, never shorter; that "0" means no wait is the parser's
    // unit test (blocking.rs), not a race against the clock here.
    let (url, serving) = in_flight_then_created("3600");
    let tool = HttpTool::new(HttpTarget::new(&url, "token-a", None).unwrap());
    let outcome = tool.create(CreateRequest::keyed(&scope, &key, &payload));
    assert_eq!(outcome.unwrap(), Outcome::Created(1.into()));
    let waited = serving.join().unwrap();
    assert!(waited >= lab::http::blocking::MAX_RETRY_AFTER, "{waited:?}");
    assert!(waited < Duration::from_secs(60), "{waited:?}");
}
