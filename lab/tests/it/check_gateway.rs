//! `lab check --target FILE` with `[service]` and `[upstream]` (issue #34): an HTTP gateway in
//! front of an API. The check starts the gateway (`service.command`, pointed at the API the lab
//! serves with `{{upstream}}`), runs the HTTP points against gateway and API together, then the
//! hop points, which read what reached the API. A planted-bug gateway of our own (Python's
//! standard library only) fails the hop point that should catch each bug and passes without one;
//! a gateway the user started is checked on the port the file names, without the restart point;
//! bad files are refused naming the field, with nothing started.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::serde_json::Value;

use crate::check_hop::{HOP_POINTS, PLANTED};
use crate::check_mcp::{check_json, fitted, verdicts};
use crate::repository_root;

const LAB: &str = env!("CARGO_BIN_EXE_lab");

/// The port the shipped file names; each run replaces it with a free one.
const SHIPPED_PORT: &str = "18431";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn gateway_py() -> PathBuf {
    repository_root().join("lab/tests/wrappers/gateway/gateway.py")
}

/// The shipped target file with a free port, the gateway's full path and `bug`.
fn fitted_target(bug: &str, folder: &Path) -> PathBuf {
    let port = free_port().to_string();
    let gateway = format!("{:?}", gateway_py().to_str().unwrap());
    fitted(
        "lab/tests/wrappers/gateway/target.toml",
        &[
            (SHIPPED_PORT, &port),
            ("\"gateway.py\"", &gateway),
            ("\"--bug\", \"none\"", &format!("\"--bug\", \"{bug}\"")),
        ],
        folder,
    )
}

fn hop_points_with(report: &Value, verdict: &str) -> Vec<String> {
    verdicts(report)
        .into_iter()
        .filter(|(name, v)| name.starts_with("hop-") && v == verdict)
        .map(|(name, _)| name)
        .collect()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn each_planted_gateway_bug_fails_the_hop_point_that_catches_it_and_the_gateway_without_one_passes()
{
    let folder = tempfile::tempdir().unwrap();
    for &(bug, failing, warning, blamed) in PLANTED.iter().filter(|c| c.0 != "unlisted-key") {
        let file = fitted_target(bug, folder.path());
        let started = Instant::now();
        let report = check_json(&file, &[]);
        let _ = writeln!(
            std::io::stderr(),
            "planted gateway bug {bug}: {} ms, {:?}",
            started.elapsed().as_millis(),
            verdicts(&report)
        );
        assert_eq!(
            (
                hop_points_with(&report, "FAIL"),
                hop_points_with(&report, "PASS_WITH_WARNINGS"),
                report["calibration"]["wrapper_at_fault"].is_string(),
            ),
            (strings(failing), strings(warning), blamed),
            "{bug}: {report:#}"
        );
        if bug == "none" {
            assert_eq!(report["passed"], true, "{report:#}");
            let names: Vec<String> = verdicts(&report).into_iter().map(|(n, _)| n).collect();
            assert!(
                names.ends_with(&HOP_POINTS.map(str::to_owned)),
                "the hop points run after the HTTP points, in order: {names:?}"
            );
            assert!(
                names.contains(&"concurrent-fresh-key".to_owned()),
                "the HTTP points run against gateway and API together: {names:?}"
            );
            // The restart point killed the gateway the check started and started it again.
            let restart = point(&report, "hop-restart");
            assert!(
                restart["checks"][0]["observed"]
                    .as_str()
                    .unwrap()
                    .contains("was killed"),
                "{restart:#}"
            );
        }
        if bug == "drops-key" {
            // The evidence: creates at the API without the key, in the wrapper-to-API lane.
            let lane: Vec<&Value> = report["history"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["caller"] == "wrapper → API")
                .collect();
            assert!(!lane.is_empty(), "{report:#}");
            assert!(lane.iter().all(|e| e["key"].is_null()), "{lane:#?}");
        }
    }
}

fn point<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no point {name}"))
}

/// A gateway the user started (no `service.command`), kept alive for one test.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(port: u16) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_gateway_the_user_started_is_checked_on_the_port_the_file_names_without_the_restart_point() {
    let folder = tempfile::tempdir().unwrap();
    let (port, api) = (free_port(), free_port());
    let gateway = Running(
        Command::new("python3")
            .arg(gateway_py())
            .args(["--port", &port.to_string()])
            .args(["--api", &format!("http://127.0.0.1:{api}")])
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 runs the gateway"),
    );
    wait_for(port);
    let shipped =
        std::fs::read_to_string(repository_root().join("lab/tests/wrappers/gateway/target.toml"))
            .unwrap();
    let command = shipped
        .lines()
        .find(|l| l.starts_with("command = "))
        .unwrap();
    let text = shipped
        .replace(&format!("{command}\n"), "")
        .replace(SHIPPED_PORT, &port.to_string())
        .replace("[upstream]\n", &format!("[upstream]\nport = {api}\n"));
    let file = folder.path().join("target.toml");
    std::fs::write(&file, text).unwrap();
    let report = check_json(&file, &[]);
    drop(gateway);
    assert_eq!(report["passed"], true, "{report:#}");
    let restart = point(&report, "hop-restart");
    assert_eq!(restart["verdict"], "NOT_COVERED", "{restart:#}");
    assert!(
        restart["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no service.command")),
        "{restart:#}"
    );
    for name in HOP_POINTS.iter().filter(|n| **n != "hop-restart") {
        assert_eq!(point(&report, name)["verdict"], "PASS", "{name}");
    }
}

fn refused(file: &Path) -> (Option<i32>, String) {
    let output = Command::new(LAB)
        .args(["check", "--target"])
        .arg(file)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn bad_gateway_files_are_refused_naming_the_field_with_nothing_started() {
    let folder = tempfile::tempdir().unwrap();
    let shipped = std::fs::read_to_string(fitted_target("none", folder.path())).unwrap();
    let marker = folder.path().join("started");
    let touch = format!(
        "command = [\"sh\", \"-c\", \"touch {} && exec python3 {}\", \"--api\", \"{{{{upstream}}}}\"]",
        marker.display(),
        gateway_py().display()
    );
    let command = shipped
        .lines()
        .find(|l| l.starts_with("command = "))
        .unwrap()
        .to_owned();
    let with_marker = shipped.replace(&command, &touch);
    let cases = [
        (
            "{{upstream}} without [upstream]",
            with_marker.split("[upstream]\n").next().unwrap().to_owned()
                + "[count]\ncommand = [\"echo\", \"0\"]\n",
            "[upstream]: service.command names {{upstream}}",
        ),
        (
            "a gateway nobody starts, without upstream.port",
            with_marker.replace(&format!("{touch}\n"), ""),
            "upstream.port: the gateway is started by you",
        ),
        (
            "a command that names no API",
            with_marker.replace("\"{{upstream}}\"", "\"http://127.0.0.1:9\""),
            "service.command: names {{upstream}} nowhere",
        ),
        (
            "an empty command",
            with_marker.replace(&touch, "command = []"),
            "service.command: an argv list",
        ),
        (
            "env without a command",
            with_marker.replace(&format!("{touch}\n"), "env = { A = \"b\" }\n"),
            "service.env: only with service.command",
        ),
        (
            "a command for a service on another host",
            with_marker.replace("http://127.0.0.1:", "http://10.1.2.3:"),
            "is not a loopback address",
        ),
        (
            "no [count] and no [upstream]",
            with_marker
                .split("[upstream]\n")
                .next()
                .unwrap()
                .replace(&touch, ""),
            "[count]: missing (required)",
        ),
    ];
    for (what, text, names) in cases {
        let file = folder.path().join("bad.toml");
        std::fs::write(&file, &text).unwrap();
        let (code, stderr) = refused(&file);
        assert_eq!(code, Some(2), "{what}: {stderr}");
        assert!(stderr.contains(names), "{what}: {stderr}");
        assert!(!marker.exists(), "{what}: the gateway was started");
    }
    // A program that is not there: the file's fault, named, with exit 2.
    let file = folder.path().join("missing.toml");
    std::fs::write(
        &file,
        with_marker.replace(
            &touch,
            "command = [\"/nonexistent/gateway\", \"{{upstream}}\"]",
        ),
    )
    .unwrap();
    let (code, stderr) = refused(&file);
    assert_eq!(code, Some(2), "{stderr}");
    // The field is named once, then the program: the error once read
    // "service.command: service.command: ...", the field found by sorting a message by its start.
    assert!(
        stderr
            .contains("does not describe the service: service.command: \"/nonexistent/gateway\": "),
        "{stderr}"
    );
}

#[test]
fn a_port_something_else_listens_on_is_refused_before_the_gateway_starts() {
    let folder = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let file = fitted_target("none", folder.path());
    let text = std::fs::read_to_string(&file).unwrap();
    let base = text
        .lines()
        .find(|l| l.starts_with("base_url = "))
        .unwrap()
        .to_owned();
    let original = base
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('"')
        .to_owned();
    std::fs::write(&file, text.replace(&original, &port.to_string())).unwrap();
    let (code, stderr) = refused(&file);
    drop(taken);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("service.base_url: something already listens on"),
        "{stderr}"
    );
}

/// nginx on this machine (Debian's nginx-light in CI): its path, or `None` after a loud skip, a
/// failure under `LAB_REQUIRE_WRAPPERS=1`.
fn nginx(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("nginx"))
        .find(|candidate| candidate.is_file());
    if found.is_some() {
        return found;
    }
    assert!(
        std::env::var("LAB_REQUIRE_WRAPPERS").as_deref() != Ok("1"),
        "LAB_REQUIRE_WRAPPERS=1, but nginx is missing (.ci/run installs nginx-light)"
    );
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: {test}: no nginx (apt-get install nginx-light); LAB_REQUIRE_WRAPPERS=1 \
         makes this a failure ***\n"
    );
    None
}

/// nginx as a stock reverse proxy in front of the API (`proxy_pass`, nothing about keys): it
/// passes the key through unchanged and resends nothing, so every retry replays; but when the
/// API's reply is lost, the agent gets nginx's own `502` page, which never says the create may
/// have been made. Confirmed by hand in `lab/tests/wrappers/nginx/REPRODUCTION.md`.
#[test]
fn nginx_in_front_of_the_api_keeps_its_pinned_hop_verdicts() {
    if nginx("check_gateway::nginx_in_front_of_the_api_keeps_its_pinned_hop_verdicts").is_none() {
        return;
    }
    let folder = tempfile::tempdir().unwrap();
    let run_sh = repository_root().join("lab/tests/wrappers/nginx/run.sh");
    let file = fitted(
        "lab/tests/wrappers/nginx/target.toml",
        &[
            ("18432", &free_port().to_string()),
            ("\"run.sh\"", &format!("{:?}", run_sh.to_str().unwrap())),
        ],
        folder.path(),
    );
    let started = Instant::now();
    let report = check_json(&file, &[]);
    let _ = writeln!(
        std::io::stderr(),
        "nginx: lab check --target took {} ms; {:?}",
        started.elapsed().as_millis(),
        verdicts(&report)
    );
    let package = "nginx 1.22.1 (Debian nginx-light), proxy_pass";
    crate::check_mcp::compare_with_the_pinned_findings(
        &crate::check_mcp::findings(&report, "nginx", package),
        &repository_root().join("lab/tests/wrappers/nginx/findings.json"),
    );
    crate::check_mcp::compare_with_the_book(
        &crate::check_hop::row(&report, package),
        "hop-nginx.md",
    );
    assert_eq!(hop_points_with(&report, "FAIL"), Vec::<String>::new());
    assert_eq!(
        hop_points_with(&report, "PASS_WITH_WARNINGS"),
        ["hop-api-lost"]
    );
    let lost = point(&report, "hop-api-lost");
    let told = lost["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["passed"] == false)
        .unwrap();
    assert!(
        told["observed"]
            .as_str()
            .is_some_and(|o| o.contains("502 Bad Gateway")),
        "{told:#}"
    );
}
