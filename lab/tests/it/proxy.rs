//! `lab proxy` as a process in front of `lab serve`: callers served side by side, chunked bodies
//! forwarded, the first N replies lost in arrival order, and its own limits.

use std::io::{Read, Write};
use std::net::TcpStream;

use crate::http::LabServer;
use crate::http_hostile::{GUARD, is_silent};
use crate::runner::service_tickets;

const TICKET: &str = r#"{"title": "Disk full", "priority": "normal"}"#;

fn server_and_proxy(drop_first: u32) -> (LabServer, LabServer) {
    let server = LabServer::start(&[]);
    let proxy = LabServer::spawn(&[
        "proxy",
        "--upstream",
        &server.url,
        "--drop-first",
        &drop_first.to_string(),
    ]);
    (server, proxy)
}

fn connect(url: &str) -> TcpStream {
    let address = url.strip_prefix("http://").unwrap();
    let stream = TcpStream::connect(address).unwrap();
    // Only ends a broken run: every verdict here is an order of events, never a time.
    stream.set_read_timeout(Some(GUARD)).unwrap();
    stream.set_write_timeout(Some(GUARD)).unwrap();
    stream
}

/// The head of a keyed create for alice, without the body's framing.
fn create_head(key: &str) -> String {
    format!(
        "POST /tickets HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer token-a\r\n\
         Idempotency-Key: {key}\r\nContent-Type: application/json\r\nConnection: close\r\n"
    )
}

/// Sends `request` and reads until the proxy closes; the status code, or `None` when the
/// connection closed without a byte. A read timeout fails the test.
fn exchange(url: &str, request: &[u8]) -> Option<(u16, String)> {
    let mut stream = connect(url);
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    if let Err(error) = stream.read_to_end(&mut answer) {
        // A reset after the proxy dropped the connection is a lost reply too; a timeout is not.
        assert!(
            !matches!(
                error.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "no answer within {GUARD:?}: {error}"
        );
    }
    if answer.is_empty() {
        return None;
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.split(' ').nth(1).and_then(|code| code.parse().ok());
    Some((status.unwrap_or_else(|| panic!("not HTTP: {text:?}")), text))
}

fn keyed_create(key: &str) -> Vec<u8> {
    format!(
        "{}Content-Length: {}\r\n\r\n{TICKET}",
        create_head(key),
        TICKET.len()
    )
    .into_bytes()
}

#[test]
fn an_idle_connection_to_the_proxy_does_not_delay_another_callers_request() {
    let (server, proxy) = server_and_proxy(0);
    // One caller connects and sends nothing; another sends half a head and stops.
    let idle = connect(&proxy.url);
    let mut half = connect(&proxy.url);
    half.write_all(b"POST /tickets HTTP/1.1\r\nHost: lab\r\n")
        .unwrap();

    let answered = exchange(&proxy.url, &keyed_create("beside-the-idle-one"));
    let (status, text) = answered.expect("an answer, not a dropped connection");
    assert_eq!(status, 201, "{text}");
    // Answered while both are still open: a proxy that served them in turn would have answered
    // only once its header timeout (10 s) had closed them.
    assert!(
        is_silent(&idle) && is_silent(&half),
        "closed before the answer"
    );
    assert_eq!(service_tickets(&server), [1]);
}

#[test]
fn a_chunked_post_through_the_proxy_reaches_the_service_and_creates_one_ticket() {
    let (server, proxy) = server_and_proxy(0);
    let (first, rest) = TICKET.split_at(10);
    let request = format!(
        "{}Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{first}\r\n{:x}\r\n{rest}\r\n0\r\n\r\n",
        create_head("chunked-1"),
        first.len(),
        rest.len()
    );
    let (status, text) = exchange(&proxy.url, request.as_bytes()).expect("an answer");
    assert_eq!(status, 201, "{text}");
    assert!(text.contains(r#""ticket_id":1"#), "{text}");
    assert_eq!(service_tickets(&server), [1]);
}

#[test]
fn under_concurrent_callers_exactly_the_first_n_replies_are_lost_and_every_create_committed() {
    let (server, proxy) = server_and_proxy(3);
    let callers: Vec<_> = (0..12)
        .map(|number| {
            let url = proxy.url.clone();
            std::thread::spawn(move || exchange(&url, &keyed_create(&format!("many-{number}"))))
        })
        .collect();
    let answers: Vec<_> = callers.into_iter().map(|c| c.join().unwrap()).collect();
    let lost = answers.iter().filter(|answer| answer.is_none()).count();
    assert_eq!(lost, 3, "{answers:?}");
    for (status, text) in answers.iter().flatten() {
        assert_eq!(*status, 201, "{text}");
    }
    // The service committed all twelve, the three whose replies were lost included.
    assert_eq!(service_tickets(&server).len(), 12);
    // The counter has passed three: a retry of a lost one is answered.
    let (status, text) = exchange(&proxy.url, &keyed_create("many-0")).expect("an answer");
    assert_eq!(status, 201, "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("idempotent-replayed: true"),
        "{text}"
    );
    assert_eq!(service_tickets(&server).len(), 12);
}

#[test]
fn a_body_over_the_proxys_limit_is_refused_with_413_and_never_forwarded() {
    let (server, proxy) = server_and_proxy(1);
    let huge = format!(r#"{{"title": "{}"}}"#, "x".repeat(2 * 1024 * 1024));
    let request = format!(
        "{}Content-Length: {}\r\n\r\n{huge}",
        create_head("huge"),
        huge.len()
    );
    let mut stream = connect(&proxy.url);
    // The proxy may answer and close before the whole body is written: a broken pipe is fine.
    let _ = stream.write_all(request.as_bytes());
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "{text:?}");
    assert!(text.contains("body_too_large"), "{text}");
    assert!(service_tickets(&server).is_empty());
    // Not forwarded, so not counted: the next request is still the first, and loses its reply.
    assert_eq!(exchange(&proxy.url, &keyed_create("after-huge")), None);
    assert_eq!(service_tickets(&server), [1]);
}

#[test]
fn a_caller_that_expects_100_continue_is_asked_for_its_body_and_gets_the_services_answer() {
    let (server, proxy) = server_and_proxy(0);
    let mut stream = connect(&proxy.url);
    let head = format!(
        "{}Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        create_head("expects-continue"),
        TICKET.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut interim = [0; 25];
    stream.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    stream.write_all(TICKET.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert_eq!(service_tickets(&server), [1]);
}
