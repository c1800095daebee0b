//! `lab check --target` against ticket services on real third-party idempotency middlewares
//! (`lab/tests/blackbox/*/`: a service of a few dozen lines each, its pins, its target file and
//! the hand reproduction of every bug it has).
//!
//! Each test starts its service on a free loopback port, runs the check with `--json`, and holds
//! the report to two things: the verdicts confirmed by hand (the `confirmed` lists below, one
//! line per probe of the service's `REPRODUCTION.md`), and the service's committed
//! `findings.json`, every point's verdict and every failed sub-check's grade, which the book's
//! findings table is drawn from. A change in the check that flips a verdict fails here; after a
//! deliberate change, `LAB_WRITE_FINDINGS=1` rewrites the files from the run (the confirmed
//! verdicts still hold it).
//!
//! The Python services run from the virtual environment `LAB_BLACKBOX_VENV`, the Node ones from
//! their `node_modules` (`npm ci`); `.ci/run` makes both. Missing, a test prints `SKIPPED`, and
//! fails when `LAB_REQUIRE_BLACKBOX=1` (CI sets it).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use lab::serde_json::{self, Value, json};

/// How a service runs.
#[derive(Clone, Copy)]
enum Runtime {
    /// `python service.py DATABASE PORT` from the black-box virtual environment.
    Python,
    /// `node service.js PORT`, with the folder's own `node_modules`.
    Node,
}

/// One service of `lab/tests/blackbox/`.
pub(crate) struct Service {
    /// Its folder.
    name: &'static str,
    runtime: Runtime,
    /// A module the runtime must find for the service to start (checked before it starts).
    module: &'static str,
    /// The package under test and its pinned version, as the book names it.
    package: &'static str,
    /// What it runs on, pinned.
    framework: &'static str,
    /// The verdicts the hand reproduction confirmed: (point, verdict).
    confirmed: &'static [(&'static str, &'static str)],
}

pub(crate) const ASGI: Service = Service {
    name: "asgi-idempotency-header",
    runtime: Runtime::Python,
    module: "idempotency_header_middleware",
    package: "asgi-idempotency-header 0.2.0 (PyPI)",
    framework: "FastAPI 0.165.0",
    confirmed: &[
        ("retry-replays", "PASS"),                   // probe 8
        ("other-caller", "FAIL"),                    // probe 1: the data leak
        ("changed-payload", "FAIL"),                 // probe 2
        ("reordered-fields", "PASS"),                // probe 3
        ("concurrent-fresh-key", "PASS"),            // probe 4
        ("error-then-corrected", "FAIL"),            // probe 6: the 422 is replayed
        ("server-error-then-corrected", "FAIL"),     // probe 7: the 503 is replayed
        ("other-endpoint", "FAIL"),                  // probe 10: the ticket replayed to /comments
        ("fault-between-effect-and-record", "FAIL"), // probe 11
        ("hang-up", "FAIL"),                         // probe 12: the key stays in progress
        ("key-forms", "FAIL"),                       // probes 9, 13, 14
    ],
};

const DJANGO: Service = Service {
    name: "django-idempotency-key",
    runtime: Runtime::Python,
    module: "idempotency_key",
    package: "django-idempotency-key 1.3.0 (PyPI)",
    framework: "Django 4.2.30",
    confirmed: &[
        ("retry-replays", "FAIL"),        // probe 8: the replay is answered 409
        ("changed-payload", "FAIL"),      // probe 2: a second ticket
        ("reordered-fields", "FAIL"),     // probe 3: a second ticket
        ("concurrent-fresh-key", "FAIL"), // probe 4: several tickets for one key
        ("fault-between-effect-and-record", "FAIL"), // probe 11: two tickets
        ("key-forms", "FAIL"),            // probes 13, 14
    ],
};

const EXPRESS: Service = Service {
    name: "express-idempotency",
    runtime: Runtime::Node,
    module: "express-idempotency",
    package: "express-idempotency 1.0.6 (npm)",
    framework: "Express 4.21.2",
    confirmed: &[
        ("retry-replays", "PASS"),                   // probe 8
        ("other-caller", "FAIL"),                    // probe 1: the data leak
        ("changed-payload", "PASS_WITH_WARNINGS"),   // probe 2: refused, with 417 not 422
        ("reordered-fields", "PASS"),                // probe 3
        ("concurrent-fresh-key", "PASS"),            // probe 4
        ("error-then-corrected", "PASS"),            // probe 6
        ("server-error-then-corrected", "PASS"),     // probe 7
        ("other-endpoint", "FAIL"),                  // probe 10: refused with 417
        ("fault-between-effect-and-record", "FAIL"), // probe 15: the record lost after the 201
        ("hang-up", "PASS"),                         // probe 12
        ("key-forms", "FAIL"),                       // probes 9, 13, 14
    ],
};

const NESTJS: Service = Service {
    name: "node-idempotency-nestjs",
    runtime: Runtime::Node,
    module: "@node-idempotency/nestjs",
    package: "@node-idempotency/nestjs 1.0.4 (npm)",
    framework: "NestJS 10.4.9",
    confirmed: &[
        ("retry-replays", "PASS"),                   // probe 8
        ("other-caller", "FAIL"),                    // probe 1: the data leak
        ("changed-payload", "PASS"),                 // probe 2
        ("reordered-fields", "FAIL"),                // probe 3: refused as a changed payload
        ("concurrent-fresh-key", "PASS"),            // probe 4
        ("error-then-corrected", "FAIL"),            // probe 6: the key is burned
        ("server-error-then-corrected", "FAIL"),     // probe 7: the 503 is saved
        ("other-endpoint", "PASS"),                  // probe 10
        ("fault-between-effect-and-record", "FAIL"), // probe 11
        ("hang-up", "PASS"),                         // probe 12
        ("key-forms", "FAIL"),                       // probes 9, 13, 14
    ],
};

/// The middleware that takes only UUID keys (any other key is answered 500).
const DRF: Service = Service {
    name: "djangorestframework-idempotency-key",
    runtime: Runtime::Python,
    module: "rest_framework_idempotency_key",
    package: "djangorestframework-idempotency-key 1.0.3 (PyPI)",
    framework: "Django REST Framework 3.17.2",
    confirmed: &[
        ("retry-replays", "PASS"),                          // probe 8
        ("other-caller", "FAIL"),                           // probe 1: the data leak
        ("changed-payload", "PASS_WITH_WARNINGS"),          // probe 2: refused with 409
        ("reordered-fields", "FAIL"),                       // probe 3: refused with 409
        ("concurrent-fresh-key", "PASS"),                   // probe 4, race.sh
        ("error-then-corrected", "FAIL"),                   // probe 6: the 422 is saved
        ("server-error-then-corrected", "FAIL"),            // probe 7: the 503 is saved
        ("other-endpoint", "FAIL"),                         // probe 10: refused with 409
        ("hang-up", "FAIL"),                                // probe 12: the partial body kept
        ("key-forms", "FAIL"),                              // probes 13, 14: 500
        ("fault-between-effect-and-record", "NOT_COVERED"), // probe 11: no window
    ],
};

/// The middleware that answers a repeated key with 429 and a fixed body.
const DUPLICATE: Service = Service {
    name: "duplicate-requests",
    runtime: Runtime::Node,
    module: "duplicate-requests",
    package: "duplicate-requests 1.1.2 (npm)",
    framework: "Express 4.21.2",
    confirmed: &[
        ("retry-replays", "FAIL"),               // probe 8: 429, no ticket in it
        ("reply-dropped", "FAIL"),               // probe 8
        ("hang-up", "FAIL"),                     // probe 12: the next retry 429
        ("changed-payload", "FAIL"),             // probes 2, 8: 429, then 429
        ("reordered-fields", "FAIL"),            // probe 3
        ("new-key-same-payload", "PASS"),        // every probe's first request
        ("concurrent-fresh-key", "FAIL"),        // probes 4, 8: its retry 429
        ("concurrent-completed-key", "FAIL"),    // probe 8
        ("other-caller", "FAIL"),                // probe 1: bob refused
        ("other-endpoint", "FAIL"),              // probe 10: refused with 429
        ("key-forms", "FAIL"),                   // probes 9, 13, 14
        ("error-then-corrected", "FAIL"),        // probe 6: the key is burned
        ("server-error-then-corrected", "FAIL"), // probe 7
        ("fault-between-effect-and-record", "FAIL"), // probe 11
    ],
};

fn blackbox_folder() -> PathBuf {
    crate::repository_root().join("lab/tests/blackbox")
}

/// The program that runs `service`, or why it cannot run here.
fn runtime_program(service: &Service) -> Result<PathBuf, String> {
    let (program, probe): (PathBuf, Vec<String>) = match service.runtime {
        Runtime::Python => {
            let Some(venv) = std::env::var_os("LAB_BLACKBOX_VENV") else {
                return Err("LAB_BLACKBOX_VENV is not set (run .ci/run's black-box set-up)".into());
            };
            let python = PathBuf::from(venv).join("bin/python");
            let import = format!("import {}", service.module);
            (python, vec!["-c".into(), import])
        }
        Runtime::Node => {
            let resolve = format!("require.resolve({:?})", service.module);
            (PathBuf::from("node"), vec!["-e".into(), resolve])
        }
    };
    let runs = Command::new(&program)
        .args(&probe)
        .current_dir(blackbox_folder().join(service.name))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if runs {
        Ok(program)
    } else {
        Err(format!(
            "{} cannot load {} (run .ci/run's black-box set-up: pip install -r, npm ci)",
            program.display(),
            service.module
        ))
    }
}

/// Whether `service` can run; says so loudly when not, or fails under `LAB_REQUIRE_BLACKBOX`.
pub(crate) fn available(test: &str, service: &Service) -> Option<PathBuf> {
    match runtime_program(service) {
        Ok(program) => Some(program),
        Err(why) => {
            assert!(
                std::env::var_os("LAB_REQUIRE_BLACKBOX").is_none(),
                "{test}: LAB_REQUIRE_BLACKBOX is set but {why}"
            );
            // Printed past libtest's capture, so a skip is seen.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("SKIPPED {test}: {why}\n").as_bytes(),
            );
            None
        }
    }
}

/// A running service, killed when dropped; its folder holds the target file, the database and
/// the service's log.
pub(crate) struct Running {
    child: Child,
    pub(crate) url: String,
    pub(crate) folder: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.folder.path().join("service.log")).unwrap_or_default()
    }
}

/// Starts `service` with `program` and `env`, in a fresh folder with a copy of its target file.
pub(crate) fn start(service: &Service, program: &Path, env: &[(&str, &str)]) -> Running {
    let source = blackbox_folder().join(service.name);
    let folder = tempfile::tempdir().unwrap();
    std::fs::copy(
        source.join("target.toml"),
        folder.path().join("target.toml"),
    )
    .unwrap();
    let mut command = Command::new(program);
    match service.runtime {
        Runtime::Python => command
            .arg(source.join("service.py"))
            .args(["tickets.sqlite", "0"]),
        Runtime::Node => command.arg(source.join("service.js")).arg("0"),
    };
    let log = File::create(folder.path().join("service.log")).unwrap();
    let mut child = command
        .envs(env.iter().copied())
        .current_dir(folder.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{} starts: {e}", service.name));
    let url = crate::http::listening_url(&mut child);
    Running { child, url, folder }
}

/// Runs `lab check --target` against `running` and returns its JSON report.
fn check(running: &Running) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args([
            "check",
            "--target",
            "target.toml",
            "--url",
            &running.url,
            "--json",
        ])
        .current_dir(running.folder.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "the check's --json output is not JSON ({e}); exit {}\nstderr: {stderr}\nservice log:\n{}",
            output.status,
            running.log()
        )
    });
    // Exit 0 when every required point passed, 1 when one failed; 2 (bad input) never here.
    let expected_status = if report["passed"] == true { 0 } else { 1 };
    assert_eq!(
        output.status.code(),
        Some(expected_status),
        "exit status against the report's `passed`\nstderr: {stderr}"
    );
    // Issue 46: every run's passed sub-checks say nothing a reader takes for a failure.
    crate::reports::assert_passed_observed_says_no_failure(&report);
    report
}

/// What the findings file keeps of a report: every point's verdict and each failed sub-check's
/// sentence and grade (never the observed values, which hold ports and identities). In the
/// concurrent points a SHOULD sub-check rests on how a race fell (which status a losing racer
/// got), so there only the required sub-checks are kept; the verdict still is.
fn findings(service: &Service, report: &Value) -> Value {
    let draft = report["draft"]
        .as_str()
        .expect("the report names its draft");
    let points: Vec<Value> = report["points"]
        .as_array()
        .expect("the report lists its points")
        .iter()
        .map(|point| {
            let racy = point["name"]
                .as_str()
                .is_some_and(|name| name.starts_with("concurrent-"));
            let failed: Vec<Value> = point["checks"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter(|check| check["passed"] == false && check.get("not_covered").is_none())
                .filter(|check| !racy || check["grade"]["level"] != "SHOULD")
                .map(|check| {
                    json!({
                        "what": check["what"],
                        "level": check["grade"]["level"],
                        "section": check["grade"]["section"],
                        "draft_level": check["grade"]["draft_level"],
                    })
                })
                .collect();
            json!({
                "name": point["name"],
                "verdict": point["verdict"],
                "failed": failed,
            })
        })
        .collect();
    json!({
        "service": service.name,
        "package": service.package,
        "framework": service.framework,
        "draft": draft,
        "draft_url": format!("https://datatracker.ietf.org/doc/html/{draft}"),
        "passed": report["passed"],
        "points": points,
    })
}

fn verdict_of<'r>(report: &'r Value, point: &str) -> &'r str {
    report["points"]
        .as_array()
        .and_then(|points| points.iter().find(|p| p["name"] == point))
        .and_then(|p| p["verdict"].as_str())
        .unwrap_or_else(|| panic!("the report has no point {point:?}"))
}

/// Checks `service` and holds the report to its confirmed verdicts and its findings file.
fn check_against_the_pinned_findings(test: &str, service: &Service) {
    let Some(program) = available(test, service) else {
        return;
    };
    let running = start(service, &program, &[]);
    let report = check(&running);
    // The figure (the slowest middleware in under three minutes), printed past libtest's
    // capture for the closing note; never asserted, the machine is noisy.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "{test}: lab check --target took {} ms\n",
            report["elapsed_ms"]
        )
        .as_bytes(),
    );
    for (point, verdict) in service.confirmed {
        assert_eq!(
            verdict_of(&report, point),
            *verdict,
            "{}: point {point}, confirmed by hand in REPRODUCTION.md\n{}",
            service.name,
            serde_json::to_string_pretty(&report["points"]).unwrap()
        );
    }
    let found = findings(service, &report);
    let path = blackbox_folder().join(service.name).join("findings.json");
    if std::env::var_os("LAB_WRITE_FINDINGS").is_some_and(|v| v == "1") {
        let text = serde_json::to_string_pretty(&found).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
        return;
    }
    let committed: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (write it with LAB_WRITE_FINDINGS=1)",
                path.display()
            )
        }))
        .unwrap();
    assert_eq!(
        found,
        committed,
        "{}: this run's findings differ from the committed {} (after a deliberate change to the \
         check, rewrite it with LAB_WRITE_FINDINGS=1 and review the diff)",
        service.name,
        path.display()
    );
}

#[test]
fn asgi_idempotency_header_service_gets_its_pinned_verdicts() {
    check_against_the_pinned_findings(
        "asgi_idempotency_header_service_gets_its_pinned_verdicts",
        &ASGI,
    );
}

#[test]
fn django_idempotency_key_service_gets_its_pinned_verdicts() {
    check_against_the_pinned_findings(
        "django_idempotency_key_service_gets_its_pinned_verdicts",
        &DJANGO,
    );
}

#[test]
fn express_idempotency_service_gets_its_pinned_verdicts() {
    check_against_the_pinned_findings(
        "express_idempotency_service_gets_its_pinned_verdicts",
        &EXPRESS,
    );
}

#[test]
fn node_idempotency_nestjs_service_gets_its_pinned_verdicts() {
    check_against_the_pinned_findings(
        "node_idempotency_nestjs_service_gets_its_pinned_verdicts",
        &NESTJS,
    );
}

#[test]
fn djangorestframework_idempotency_key_service_gets_its_pinned_verdicts() {
    check_against_the_pinned_findings(
        "djangorestframework_idempotency_key_service_gets_its_pinned_verdicts",
        &DRF,
    );
}

#[test]
fn duplicate_requests_service_gets_its_pinned_verdicts() {
    check_against_the_pinned_findings(
        "duplicate_requests_service_gets_its_pinned_verdicts",
        &DUPLICATE,
    );
}

/// The negative control: the Django service, whose keys are scoped by caller, with that scoping
/// switched off (`BLACKBOX_PLANTED_BUG=unscoped-keys`). The other-caller point must fail
/// sub-checks the unswitched service passes (its committed findings do not list them): bob's
/// request is answered with alice's ticket and makes no ticket of bob's.
#[test]
fn a_planted_unscoped_key_in_the_django_service_is_caught_by_the_scope_point() {
    let test = "a_planted_unscoped_key_in_the_django_service_is_caught_by_the_scope_point";
    let Some(program) = available(test, &DJANGO) else {
        return;
    };
    let running = start(
        &DJANGO,
        &program,
        &[("BLACKBOX_PLANTED_BUG", "unscoped-keys")],
    );
    let report = check(&running);
    assert_eq!(report["passed"], false);
    let scope = report["points"]
        .as_array()
        .and_then(|points| points.iter().find(|p| p["name"] == "other-caller"))
        .expect("the report has a other-caller point");
    assert_eq!(scope["verdict"], "FAIL", "{scope:#}");
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(blackbox_folder().join(DJANGO.name).join("findings.json"))
            .unwrap(),
    )
    .unwrap();
    let unplanted_failed: Vec<&Value> = committed["points"]
        .as_array()
        .and_then(|points| points.iter().find(|p| p["name"] == "other-caller"))
        .and_then(|p| p["failed"].as_array())
        .expect("the committed Django findings have a other-caller point")
        .iter()
        .map(|c| &c["what"])
        .collect();
    let caught: Vec<&Value> = scope["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["passed"] == false && c["grade"]["level"] != "SHOULD")
        .filter(|c| !unplanted_failed.contains(&&c["what"]))
        .collect();
    assert!(
        !caught.is_empty(),
        "the planted bug fails no required scope sub-check that the service passes without it:\n{scope:#}"
    );
    let effect_of_its_own = caught.iter().any(|c| {
        c["observed"]
            .as_str()
            .is_some_and(|o| o.contains("0 effects") || o.contains("DATA LEAK"))
    });
    assert!(
        effect_of_its_own,
        "the planted bug shows as bob's missing effect or a data leak:\n{scope:#}"
    );
}
