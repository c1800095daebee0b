//! `lab check --target` with `[upstream]` over Streamable HTTP, end to end: the check does not
//! start the wrapper there, so the test does. FastMCP 4.2.3 (`lab/tests/wrappers/fastmcp/`)
//! serves MCP on one free loopback port and is pointed at another, which `--upstream-port` names
//! (in place of the file's `upstream.port`) and the lab serves its API on once the check runs; the hop points must all run and keep the
//! verdicts the stdio run pinned, and the history must show the agent's key at the API.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::check::history::WRAPPER_TO_API;
use lab::serde_json::{self, Value};

use crate::check_hop::{HOP_POINTS, venv_python};
use crate::check_mcp::{check_json, findings, verdicts};
use crate::repository_root;

/// The one caller of `target-http.toml`, and the token the wrapper is started with.
const CALLER: &str = "alice";
const TOKEN: &str = "alice-token";

/// Two free loopback ports, both bound until both are known, so they differ.
fn two_free_ports() -> (u16, u16) {
    let first = TcpListener::bind("127.0.0.1:0").unwrap();
    let second = TcpListener::bind("127.0.0.1:0").unwrap();
    (
        first.local_addr().unwrap().port(),
        second.local_addr().unwrap().port(),
    )
}

/// The OpenAPI document as the lab's API publishes it at `GET /openapi.json` (without the
/// test-only `Lab-Fault` header and `/unkeyed-tickets`, which the file in `lab/src/http/` holds):
/// what the stdio wrapper fetches at start, read from a short-lived server of the lab's and
/// written to `folder`, since this wrapper starts before the check serves the API.
fn published_openapi(folder: &Path) -> PathBuf {
    use lab::http::{CallerToken, ServeOptions, TicketServer};
    let server = TicketServer::start(ServeOptions {
        callers: vec![format!("{CALLER}={TOKEN}").parse::<CallerToken>().unwrap()],
        workers: 1,
        ..ServeOptions::default()
    })
    .unwrap();
    let mut stream = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    stream
        .write_all(b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let spec: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(
        spec["paths"]["/tickets"]["post"]["operationId"],
        "createTicket"
    );
    let path = folder.join("openapi.json");
    std::fs::write(&path, body).unwrap();
    path
}

/// `server.py --transport http`, killed and reaped when dropped, on every path out of the test.
struct HttpWrapper {
    child: Child,
    stderr: PathBuf,
}

impl HttpWrapper {
    fn start(python: &Path, mcp_port: u16, api_port: u16, spec: &Path, folder: &Path) -> Self {
        let stderr = folder.join("wrapper.stderr");
        let child = Command::new(python)
            .current_dir(repository_root().join("lab/tests/wrappers/fastmcp"))
            .arg("server.py")
            .args(["--transport", "http", "--port", &mcp_port.to_string()])
            .args(["--api", &format!("http://127.0.0.1:{api_port}")])
            .args(["--token", TOKEN, "--spec"])
            .arg(spec)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("the venv's python starts");
        let mut wrapper = HttpWrapper { child, stderr };
        // Up when its port accepts a connection; bounded, and not past its own exit.
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", mcp_port)).is_err() {
            let exited = wrapper.child.try_wait().unwrap();
            assert!(
                exited.is_none() && started.elapsed() < Duration::from_secs(30),
                "server.py did not listen on {mcp_port} ({}): {}",
                exited.map_or("within 30 s".to_owned(), |s| s.to_string()),
                wrapper.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        wrapper
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for HttpWrapper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The hop points of a findings value (`check_mcp::findings`): each one's name, verdict and
/// failed sub-checks.
fn hop_findings(found: &Value) -> Vec<Value> {
    found["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"].as_str().is_some_and(|n| n.starts_with("hop-")))
        .cloned()
        .collect()
}

/// The history's exchanges of one point: (caller, key) of each.
fn keys_of(report: &Value, point: &str) -> Vec<(String, Option<String>)> {
    report["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["point"] == point)
        .map(|e| {
            (
                e["caller"].as_str().unwrap_or_default().to_owned(),
                e["key"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[test]
fn fastmcp_over_streamable_http_runs_every_hop_point_with_the_verdicts_of_its_stdio_run() {
    let test = "check_hop_streamable::fastmcp_over_streamable_http_runs_every_hop_point_with_the_verdicts_of_its_stdio_run";
    let Some(python) = venv_python(test, "fastmcp", "LAB_WRAPPERS_VENV_MCP2") else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let (mcp_port, api_port) = two_free_ports();
    let spec = published_openapi(scratch.path());
    // The shipped file as it is: its MCP URL and its API's port are replaced on the command line
    // (--url, --upstream-port), as a CI that picks free ports does, without rewriting the file.
    let file = repository_root().join("lab/tests/wrappers/fastmcp/target-http.toml");
    let wrapper = HttpWrapper::start(&python, mcp_port, api_port, &spec, scratch.path());
    let started = Instant::now();
    let url = format!("http://127.0.0.1:{mcp_port}/mcp");
    let report = check_json(
        &file,
        &["--url", &url, "--upstream-port", &api_port.to_string()],
    );
    let elapsed = started.elapsed().as_millis();
    let _ = writeln!(
        std::io::stderr(),
        "fastmcp over Streamable HTTP: lab check --target took {elapsed} ms; {:?}",
        verdicts(&report)
    );
    let context = || format!("{report:#}\nthe wrapper's stderr:\n{}", wrapper.stderr());

    // Every hop point ran: none is missing or reported not covered.
    for point in HOP_POINTS {
        let found = report["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == point);
        assert!(
            found.is_some_and(|p| p["verdict"] != "NOT_COVERED"),
            "{point} did not run: {}",
            context()
        );
    }

    // The hop points keep the stdio run's verdicts, failed sub-checks included.
    let pinned: Value = serde_json::from_str(
        &std::fs::read_to_string(
            repository_root().join("lab/tests/wrappers/fastmcp/findings.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(pinned["transport"], "stdio");
    let pinned = hop_findings(&pinned);
    assert_eq!(pinned.len(), HOP_POINTS.len());
    let found = hop_findings(&findings(&report, "fastmcp", "fastmcp 4.2.3 (PyPI)"));
    assert_eq!(found, pinned, "{}", context());

    restart_was_a_new_session(&report, &context);
    the_agents_keys_reached_the_api(&report, &context);
    drop(wrapper);
}

/// hop-restart over HTTP keeps the stdio run's verdict, but it is not a restart: the check did
/// not start this wrapper and cannot end its process, so it closes the session and opens a new
/// one on the same process, and says so in its sub-checks (over stdio they say the wrapper ended
/// and the retry went to the restarted wrapper). Whatever a wrapper keeps in its process survives here, so this
/// PASS says that a new session keeps the key, not that a restart does.
fn restart_was_a_new_session(report: &Value, context: &dyn Fn() -> String) {
    let restart = report["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "hop-restart")
        .unwrap();
    let ended = restart["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["what"]
                .as_str()
                .is_some_and(|w| w.starts_with("the fault fired"))
        })
        .and_then(|c| c["observed"].as_str())
        .unwrap_or_default();
    assert!(
        ended.contains("the session was closed") && !ended.contains("exited"),
        "{ended}: {}",
        context()
    );
    // The title is the registry's, which names both ways; the sub-checks say which it was.
    let said: Vec<&str> = restart["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["what"].as_str())
        .collect();
    assert!(
        said.iter().any(|w| w.contains("on the new session"))
            && !said.iter().any(|w| w.contains("restarted wrapper")),
        "the point says it reconnected, not restarted: {said:?}"
    );
}

/// The history holds the wrapper's requests to the API, and in the points that retry, each
/// create carries a key the agent passed in the same point: a wrapper that dropped or replaced
/// the key fails here as well as at hop-key.
fn the_agents_keys_reached_the_api(report: &Value, context: &dyn Fn() -> String) {
    let upstream = report["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["caller"] == WRAPPER_TO_API)
        .count();
    assert!(upstream > 0, "no upstream request recorded: {}", context());
    for point in ["hop-key", "hop-retry", "hop-restart"] {
        let exchanges = keys_of(report, point);
        let agent: Vec<&Option<String>> = exchanges
            .iter()
            .filter(|(caller, _)| caller == CALLER)
            .map(|(_, key)| key)
            .collect();
        let at_api: Vec<&Option<String>> = exchanges
            .iter()
            .filter(|(caller, _)| caller == WRAPPER_TO_API)
            .map(|(_, key)| key)
            .collect();
        assert!(
            !agent.is_empty() && !at_api.is_empty(),
            "{point}: {exchanges:#?}"
        );
        for key in &at_api {
            assert!(
                key.is_some() && agent.contains(key),
                "{point}: a create reached the API without one of the agent's keys: \
                 {exchanges:#?}"
            );
        }
    }
}
