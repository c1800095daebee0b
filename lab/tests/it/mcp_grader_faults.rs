//! `lab mcp --grade-client` under its two other fault schedules, an answer of `in_progress`
//! after the ticket was made (`--in-progress`) and a connection that ends instead of a reply
//! (`--drop-connection`), and the signs of a client that stopped waiting over HTTP (a closed
//! response stream): the official Python SDK's loops over stdio and Streamable HTTP, and raw
//! sessions where the exact bytes matter.

use std::io::Write;

use serde_json::Value;

use crate::mcp_grader::{
    CREATE, INITIALIZE, INITIALIZED, http_grader, python_loop_with, raw_grader, refused, verdicts,
    wait_for_call,
};

/// The roles the report gave the recorded calls, in arrival order.
fn roles(report: &Value) -> Vec<&str> {
    report["recorded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["role"].as_str().unwrap())
        .collect()
}

fn line(report: &Value) -> String {
    format!(
        "{} ({:?}, roles {:?}, {} session(s), {} in the store)",
        report["verdict"],
        verdicts(report),
        roles(report),
        report["sessions"],
        report["tickets_in_store"]
    )
}

#[test]
fn an_in_progress_answer_is_passed_by_the_loop_that_resends_its_key_and_failed_by_the_one_that_mints_another()
 {
    let test = "mcp_grader_faults::an_in_progress_answer";
    for transport in [&[][..], &["http"][..]] {
        // No --lose-replies: losing the first replies is the default only when no other
        // schedule takes them.
        let Some(keep) = python_loop_with(test, "keep-key", transport, "--in-progress first")
        else {
            return;
        };
        let _ = writeln!(std::io::stderr(), "keep-key {transport:?}: {}", line(&keep));
        assert_eq!(verdicts(&keep), ["PASS", "PASS"], "{keep:#}");
        assert_eq!(keep["tickets_in_store"], 2);
        // The SDK loop sends the same call again at once: a resend, word for word.
        assert_eq!(roles(&keep), ["first", "resend", "first", "resend"]);
        for intention in keep["intentions"].as_array().unwrap() {
            assert_eq!(intention["in_progress"], 1, "{intention:#}");
            assert_eq!(intention["lost"], 0);
            assert_eq!(intention["tickets_never_told"], Value::Array(vec![]));
            assert_eq!(intention["rests_on"].as_array().unwrap().len(), 2);
        }
        let recorded = keep["recorded"].as_array().unwrap();
        assert_eq!(recorded[0]["fate"], "in progress");
        assert_eq!(
            recorded[0]["answer"], "created",
            "the ticket was made first"
        );
        assert_eq!(recorded[0]["received"], false);
        assert_eq!(recorded[1]["answer"], "replayed");
        assert_eq!(recorded[1]["received"], true);

        let Some(mint) = python_loop_with(test, "new-key", transport, "--in-progress first") else {
            return;
        };
        let _ = writeln!(std::io::stderr(), "new-key {transport:?}: {}", line(&mint));
        assert_eq!(verdicts(&mint), ["FAIL", "FAIL"], "{mint:#}");
        assert_eq!(mint["tickets_in_store"], 4);
        assert_eq!(roles(&mint), ["first", "re-plan", "first", "re-plan"]);
        for intention in mint["intentions"].as_array().unwrap() {
            // The first ticket of each was answered in_progress and never named again.
            let never_told = intention["tickets_never_told"].as_array().unwrap();
            assert_eq!(never_told.len(), 1, "{intention:#}");
            assert_eq!(never_told[0], intention["tickets"][0]);
        }
    }
}

#[test]
fn a_dropped_connection_is_passed_by_the_loop_that_reconnects_with_its_key_and_unresolved_by_one_that_stays()
 {
    let test = "mcp_grader_faults::a_dropped_connection";
    for transport in [&[][..], &["http"][..]] {
        let Some(back) =
            python_loop_with(test, "reconnect-keep", transport, "--drop-connection first")
        else {
            return;
        };
        let _ = writeln!(
            std::io::stderr(),
            "reconnect-keep {transport:?}: {}",
            line(&back)
        );
        assert_eq!(verdicts(&back), ["PASS"], "{back:#}");
        assert_eq!(
            back["sessions"], 2,
            "a new process or session after the drop"
        );
        assert_eq!(back["tickets_in_store"], 1);
        assert_eq!(roles(&back), ["first", "retry"]);
        let recorded = back["recorded"].as_array().unwrap();
        assert_eq!(recorded[0]["fate"], "dropped");
        assert_eq!(recorded[0]["received"], false);
        assert_eq!(recorded[1]["answer"], "replayed");
        assert_eq!(back["intentions"][0]["dropped"], 1);

        let Some(stay) = python_loop_with(test, "keep-key", transport, "--drop-connection first")
        else {
            return;
        };
        let _ = writeln!(std::io::stderr(), "keep-key {transport:?}: {}", line(&stay));
        // Its session is gone and it never opens another: one call, its ticket untold.
        assert_eq!(verdicts(&stay), ["UNRESOLVED"], "{stay:#}");
        let reason = stay["intentions"][0]["reason"].as_str().unwrap();
        assert!(
            reason.contains("the connection dropped after call 1"),
            "{reason}"
        );
        assert_eq!(
            stay["intentions"][0]["tickets_never_told"],
            serde_json::json!(["1"])
        );
    }
}

#[test]
fn over_stdio_a_dropped_connection_ends_the_process_with_its_report_and_no_reply() {
    let (report, exited, answers) = raw_grader(
        &["--drop-connection", "1"],
        &[INITIALIZE, INITIALIZED, CREATE],
    );
    assert!(exited, "the grader ends by itself: {report}");
    assert!(
        !answers.contains("\"id\":7"),
        "nothing answers the call: {answers}"
    );
    assert!(report.contains("connection dropped: 1"), "{report}");
    assert!(report.contains("\nverdict: UNRESOLVED"), "{report}");
    assert!(
        report.contains("rests on call 1 (first): created ticket 1, connection dropped"),
        "{report}"
    );
}

#[test]
fn an_in_progress_schedule_alone_takes_the_first_calls_and_answers_the_contracts_code() {
    let (report, exited, answers) = raw_grader(
        &["--in-progress", "first", "--calls", "1"],
        &[INITIALIZE, INITIALIZED, CREATE],
    );
    assert!(exited, "{report}");
    assert!(answers.contains("\"code\":\"in_progress\""), "{answers}");
    assert!(
        report.contains("replies lost: none; delayed: none; answered in progress: first"),
        "{report}"
    );
    assert!(report.contains("answered in_progress: 1"), "{report}");
    assert!(
        report.contains("call 1 was answered in_progress and the client never asked again"),
        "{report}"
    );
    assert!(
        report.contains("tickets the client was never told of: 1"),
        "{report}"
    );
}

#[test]
fn schedules_that_name_one_call_twice_or_a_bad_call_are_refused_naming_both_options() {
    let err = refused(&[
        "--grade-client",
        "--lose-replies",
        "first",
        "--in-progress",
        "first",
    ]);
    assert!(
        err.contains("--lose-replies and --in-progress both name first"),
        "{err}"
    );
    let err = refused(&[
        "--grade-client",
        "--in-progress",
        "2",
        "--drop-connection",
        "1-3",
    ]);
    assert!(
        err.contains("call 2 is in both --in-progress and --drop-connection"),
        "{err}"
    );
    let err = refused(&["--grade-client", "--drop-connection", "soon"]);
    assert!(
        err.contains("--drop-connection") && err.contains("\"soon\""),
        "{err}"
    );
    let err = refused(&["--in-progress", "first"]);
    assert!(err.contains("--grade-client"), "{err}");
}

/// Over Streamable HTTP, a client that closes the response stream of a call whose reply is
/// held has stopped waiting for it, as one that cancels: the reply is not received.
#[test]
fn over_http_a_client_that_closes_a_held_calls_stream_did_not_receive_its_reply() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("report.json");
    let database = folder.path().join("graded.sqlite");
    let (mut child, address, session) = http_grader(
        &[
            "--lose-replies",
            "none",
            "--delay-replies",
            "1@60s",
            "--json",
            "--database",
            database.to_str().unwrap(),
        ],
        &file,
    );
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n\
         Mcp-Session-Id: {session}\r\nContent-Length: {}\r\n\r\n{CREATE}",
        CREATE.len()
    )
    .unwrap();
    // The client gives up once the grader holds the reply (its journal says so), well inside
    // the minute's hold: it closes the connection.
    assert!(wait_for_call(&database, 1, |fate, _| fate.starts_with("delayed")));
    drop(stream);
    // The grader's record of the close; had it not seen it, the reply would be held on, and
    // the stop below would end the hold without a cancellation.
    wait_for_call(&database, 1, |_, cancelled| cancelled);
    child.stop();
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let call = &report["recorded"][0];
    assert_eq!(call["cancelled"], true, "{report:#}");
    assert_eq!(call["received"], false, "{report:#}");
    assert_eq!(report["verdict"], "UNRESOLVED", "{report:#}");
    // And a call answered at once over HTTP is received, its stream read to the end.
    let (mut child, address, session) = http_grader(&["--lose-replies", "none", "--json"], &file);
    let answered = crate::mcp_grader::http(&address, "POST", Some(&session), CREATE);
    assert!(answered.contains("ticket_id"), "{answered}");
    child.stop();
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(report["recorded"][0]["cancelled"], false, "{report:#}");
    assert_eq!(report["recorded"][0]["received"], true, "{report:#}");
}
