//! `lab check --target FILE --junit PATH --html PATH` (issue #33): the JUnit XML and the HTML
//! page of a real failing run say what the JSON report says, a real consumer of JUnit XML
//! (junitparser, from PyPI) reads the file as the check meant it, and a path that cannot be
//! written stops the check before the service sees a request.
//!
//! junitparser runs from `LAB_REPORTS_VENV` (a venv made from lab/tests/reports/requirements.txt);
//! without it the test prints SKIPPED loudly and passes, unless `LAB_REQUIRE_REPORTS` is set (as
//! CI sets it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use lab::serde_json::{self, Value};

use crate::check_target::{Bugs, Listener, SHOP_TARGET, start_shop};

fn lab_in(folder: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(args)
        .current_dir(folder)
        .stdin(Stdio::null())
        .output()
        .expect("the lab binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A shop that leaks keys across callers and accepts a changed payload: two points fail.
fn leaky_shop() -> String {
    start_shop(Bugs {
        unscoped: true,
        accept_changed: true,
        ..Bugs::default()
    })
}

/// A folder with the shop's target file in it.
fn shop_folder() -> tempfile::TempDir {
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("shop.toml"), SHOP_TARGET).unwrap();
    folder
}

/// Runs the check against `url` with `--json --junit report.xml --html report.html`; returns
/// the JSON report, the XML and the page.
fn check_with_reports(folder: &Path, url: &str) -> (Value, String, String) {
    let output = lab_in(
        folder,
        &[
            "check",
            "--target",
            "shop.toml",
            "--url",
            url,
            "--json",
            "--junit",
            "report.xml",
            "--html",
            "report.html",
        ],
    );
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&output.stderr)));
    let expected = if report["passed"] == true { 0 } else { 1 };
    assert_eq!(
        output.status.code(),
        Some(expected),
        "{}",
        text(&output.stderr)
    );
    let xml = std::fs::read_to_string(folder.join("report.xml")).unwrap();
    let page = std::fs::read_to_string(folder.join("report.html")).unwrap();
    (report, xml, page)
}

/// Every suite name in `xml` once, every case name once within its suite, and every property
/// once within its suite (issue 46: a step made once per caller repeated its case name; readers
/// key cases by name, and a strict one stops at a repeat while another folds it into the first).
pub(crate) fn assert_junit_names_unique(xml: &str) {
    let attribute = |element: &str, name: &str| -> Option<String> {
        Some(
            element
                .split(&format!(" {name}=\""))
                .nth(1)?
                .split('"')
                .next()?
                .to_owned(),
        )
    };
    let mut suites = Vec::new();
    for suite in xml.split("<testsuite ").skip(1) {
        let suite = suite.split("</testsuite>").next().unwrap();
        suites.push(attribute(&format!(" {suite}"), "name").unwrap());
        for (element, key) in [("<testcase ", "name"), ("<property ", "name")] {
            let mut names: Vec<String> = suite
                .split(element)
                .skip(1)
                .map(|item| attribute(&format!(" {item}"), key).unwrap())
                .collect();
            names.sort();
            let repeated: Vec<&String> = names
                .windows(2)
                .filter(|w| w[0] == w[1])
                .map(|w| &w[0])
                .collect();
            assert!(
                repeated.is_empty(),
                "{element}names repeated in a suite: {repeated:?}\n{suite}"
            );
        }
    }
    let count = suites.len();
    suites.sort();
    suites.dedup();
    assert_eq!(suites.len(), count, "suite names repeated: {xml}");
}

/// Issue 46: the `observed` of a passed sub-check says what happened and nothing a reader takes
/// for a failure: no failure wording, no count of effects above the one it expected (a passed
/// "the fault fired" once printed the wrapper's second effect), no Rust debug form.
pub(crate) fn assert_passed_observed_says_no_failure(report: &Value) {
    const FAILURE_WORDING: [&str; 7] = [
        "second effect",
        "DATA LEAK",
        "duplicate",
        "are two keys",
        "FAIL",
        "was refused",
        "Some(",
    ];
    let more_than_one = |text: &str| {
        text.contains(" effects")
            && text.split(" effects").next().is_some_and(|head| {
                head.rsplit(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| n > 1)
            })
    };
    let mut wrong = Vec::new();
    for point in report["points"].as_array().unwrap() {
        for check in point["checks"].as_array().unwrap() {
            let observed = check["observed"].as_str().unwrap_or_default();
            let expected = check["expected"].as_str().unwrap_or_default();
            let expects_one = expected.contains("one effect") || expected.contains("an effect");
            if check["passed"] == true
                && (FAILURE_WORDING.iter().any(|w| observed.contains(w))
                    || (expects_one && more_than_one(observed)))
            {
                wrong.push(format!(
                    "{} / {}: expected {expected}; observed {observed}",
                    point["name"], check["what"]
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "passed sub-checks observed as failures: {wrong:#?}"
    );
}

fn points_with(report: &Value, verdict: &str) -> Vec<String> {
    report["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["verdict"] == verdict)
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_failing_run_writes_junit_and_html_that_match_its_json_report() {
    let folder = shop_folder();
    let (report, xml, page) = check_with_reports(folder.path(), &leaky_shop());
    assert_junit_names_unique(&xml);
    assert_passed_observed_says_no_failure(&report);
    let failed = points_with(&report, "FAIL");
    assert!(failed.contains(&"other-caller".to_owned()), "{failed:?}");
    assert!(failed.contains(&"changed-payload".to_owned()), "{failed:?}");
    let points = report["points"].as_array().unwrap();
    // A suite per point and one for the calibration.
    assert_eq!(
        xml.matches("<testsuite ").count(),
        points.len() + 1,
        "{xml}"
    );
    let failed_checks: usize = points
        .iter()
        .flat_map(|p| p["checks"].as_array().unwrap())
        .filter(|c| c["passed"] == false && c.get("not_covered").is_none())
        .count();
    assert_eq!(xml.matches("<failure ").count(), failed_checks);
    for name in points_with(&report, "NOT_COVERED") {
        let suite = format!(
            "<testsuite name=\"{name}\" tests=\"1\" failures=\"0\" errors=\"0\" skipped=\"1\">"
        );
        assert!(xml.contains(&suite), "{name}: {xml}");
    }
    // Every failed point drawn, and only those.
    assert_eq!(page.matches("<figure class=\"seq\"").count(), failed.len());
    for name in &failed {
        assert!(
            page.contains(&format!("<figure class=\"seq\" data-point=\"{name}\"")),
            "{name}"
        );
    }
    assert!(page.contains("count before: ") && page.contains("count after: "));
    // Nothing to load: no script, and the one link element is an empty inline icon.
    assert!(!page.contains("<script"));
    assert_eq!(page.matches("<link").count(), 1);
    assert!(page.contains("<link rel=\"icon\" href=\"data:,\">"));
}

#[test]
fn a_passing_run_writes_reports_too_without_json() {
    let folder = shop_folder();
    let output = lab_in(
        folder.path(),
        &[
            "check",
            "--target",
            "shop.toml",
            "--url",
            &start_shop(Bugs::default()),
            "--junit",
            "report.xml",
            "--html",
            "report.html",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("every MUST and LAB sub-check passed"));
    let xml = std::fs::read_to_string(folder.path().join("report.xml")).unwrap();
    let page = std::fs::read_to_string(folder.path().join("report.html")).unwrap();
    assert!(!xml.contains("<failure "), "{xml}");
    assert_junit_names_unique(&xml);
    assert!(!page.contains("<figure"));
    // Written whole: no temporary file is left beside them.
    let names: Vec<String> = std::fs::read_dir(folder.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
}

#[test]
fn an_unwritable_report_path_is_refused_before_anything_is_sent() {
    let folder = shop_folder();
    let listener = Listener::new();
    let target = SHOP_TARGET.replace("http://127.0.0.1:9", &listener.url);
    std::fs::write(folder.path().join("shop.toml"), target).unwrap();
    std::fs::create_dir(folder.path().join("a-folder")).unwrap();
    std::fs::write(folder.path().join("kept.xml"), "earlier").unwrap();
    let cases = [
        ("--junit", "missing/report.xml"),
        ("--html", "missing/report.html"),
        ("--junit", "a-folder"),
        ("--html", "a-folder"),
    ];
    for (option, path) in cases {
        let output = lab_in(
            folder.path(),
            &["check", "--target", "shop.toml", option, path],
        );
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{option} {path}: {stderr}");
        assert!(stderr.contains(option) && stderr.contains(path), "{stderr}");
        assert_eq!(
            listener.connections(),
            0,
            "{option} {path}: the service saw a request"
        );
    }
    let both = lab_in(
        folder.path(),
        &[
            "check",
            "--target",
            "shop.toml",
            "--junit",
            "kept.xml",
            "--html",
            "kept.xml",
        ],
    );
    assert_eq!(both.status.code(), Some(2), "{}", text(&both.stderr));
    assert_eq!(listener.connections(), 0);
    assert_eq!(
        std::fs::read_to_string(folder.path().join("kept.xml")).unwrap(),
        "earlier"
    );
}

/// The python of the reports' venv, or `None` (with a loud SKIPPED) when there is none and CI
/// does not require it.
fn reports_python(test: &str) -> Option<PathBuf> {
    let venv = std::env::var_os("LAB_REPORTS_VENV").map(PathBuf::from);
    let python = venv.map(|v| v.join("bin/python")).filter(|p| p.exists());
    if python.is_none() {
        assert!(
            std::env::var_os("LAB_REQUIRE_REPORTS").is_none(),
            "{test}: LAB_REQUIRE_REPORTS is set but LAB_REPORTS_VENV names no venv with a python"
        );
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!(
                "\n*** SKIPPED: {test}: no junitparser. Set LAB_REPORTS_VENV to a venv made from \
                 lab/tests/reports/requirements.txt; LAB_REQUIRE_REPORTS=1 makes this a failure ***\n"
            )
            .as_bytes(),
        );
    }
    python
}

/// What junitparser read from `xml`.
pub(crate) fn read_with_junitparser(python: &Path, xml: &Path) -> Value {
    let script = crate::repository_root().join("lab/tests/reports/read_junit.py");
    let output = Command::new(python).arg(script).arg(xml).output().unwrap();
    assert!(
        output.status.success(),
        "junitparser: {}",
        text(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Holds what junitparser read against the check's JSON report: a suite per point (and the
/// calibration's), counts that agree with the cases, failures typed by grade, skips with the
/// reason.
pub(crate) fn assert_junitparser_agrees(read: &Value, report: &Value) {
    let suites = read["suites"].as_array().unwrap();
    assert_eq!(suites[0]["name"], "calibration");
    let steps = report["calibration"]["steps"].as_array().unwrap();
    assert_eq!(suites[0]["cases"].as_array().unwrap().len(), steps.len());
    let points = report["points"].as_array().unwrap();
    assert_eq!(suites.len(), points.len() + 1);
    for (suite, point) in suites[1..].iter().zip(points) {
        assert_eq!(suite["name"], point["name"]);
        assert_eq!(suite["declared"], suite["counted"], "{}", suite["name"]);
        let cases = suite["cases"].as_array().unwrap();
        if point["coverage"] == "not_covered" {
            assert_eq!(cases[0]["results"][0]["kind"], "Skipped");
            assert_eq!(cases[0]["results"][0]["message"], point["reason"]);
            continue;
        }
        let checks = point["checks"].as_array().unwrap();
        assert_eq!(cases.len(), checks.len(), "{}", point["name"]);
        for (case, check) in cases.iter().zip(checks) {
            assert_eq!(case["classname"], point["name"]);
            assert_eq!(case["name"], check["what"]);
            assert_eq!(case["passed"], check["passed"], "{}", check["what"]);
            if let Some(why) = check.get("not_covered") {
                assert_eq!(case["results"][0]["kind"], "Skipped");
                assert_eq!(&case["results"][0]["message"], why);
            } else if check["passed"] == false {
                let failure = &case["results"][0];
                assert_eq!(failure["kind"], "Failure");
                assert_eq!(failure["type"], check["grade"]["level"]);
                let body = failure["text"].as_str().unwrap();
                assert!(body.contains(check["observed"].as_str().unwrap()), "{body}");
                assert!(body.contains("count before: "), "{body}");
            }
        }
    }
}

#[test]
fn junitparser_reads_the_junit_file_as_the_check_meant_it() {
    let test = "junitparser_reads_the_junit_file_as_the_check_meant_it";
    let Some(python) = reports_python(test) else {
        return;
    };
    let folder = shop_folder();
    let (report, _, _) = check_with_reports(folder.path(), &leaky_shop());
    let read = read_with_junitparser(&python, &folder.path().join("report.xml"));
    assert_junitparser_agrees(&read, &report);
    let failures: u64 = read["suites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["counted"]["failures"].as_u64().unwrap())
        .sum();
    assert!(failures >= 2, "{read}");
}

/// The page the book shows: a real report of the asgi-idempotency-header service.
const BOOK_PAGE: &str = "src/check-report/asgi-idempotency-header.html";

/// Each point of a page and its verdict, as the page's sections say them.
fn verdicts(page: &str) -> Vec<(String, String)> {
    page.split("<section class=\"point\" id=\"point-")
        .skip(1)
        .map(|rest| {
            let name = rest.split('"').next().unwrap().to_owned();
            let verdict = rest.split("data-verdict=\"").nth(1).unwrap();
            (name, verdict.split('"').next().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn a_middleware_services_junit_is_read_by_junitparser_and_its_page_is_the_books() {
    let test = "a_middleware_services_junit_is_read_by_junitparser_and_its_page_is_the_books";
    let asgi = &crate::middlewares::ASGI;
    let Some(program) = crate::middlewares::available(test, asgi) else {
        return;
    };
    let Some(python) = reports_python(test) else {
        return;
    };
    let running = crate::middlewares::start(asgi, &program, &[]);
    let folder = running.folder.path();
    let output = lab_in(
        folder,
        &[
            "check",
            "--target",
            "target.toml",
            "--url",
            &running.url,
            "--json",
            "--junit",
            "report.xml",
            "--html",
            "report.html",
        ],
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\nservice log:\n{}",
            text(&output.stderr),
            running.log()
        )
    });
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert_junit_names_unique(&std::fs::read_to_string(folder.join("report.xml")).unwrap());
    assert_passed_observed_says_no_failure(&report);
    let read = read_with_junitparser(&python, &folder.join("report.xml"));
    assert_junitparser_agrees(&read, &report);
    let suites = read["suites"].as_array().unwrap();
    let total = |what: &str| -> u64 {
        suites
            .iter()
            .map(|s| s["counted"][what].as_u64().unwrap())
            .sum()
    };
    // Printed past libtest's capture, for the closing note.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "{test}: junitparser read {} suites, {} test cases, {} failures, {} skipped, 0 errors\n",
            suites.len(),
            total("tests"),
            total("failures"),
            total("skipped")
        )
        .as_bytes(),
    );
    let page = std::fs::read_to_string(folder.join("report.html")).unwrap();
    let book_page = crate::repository_root().join(BOOK_PAGE);
    if std::env::var_os("LAB_WRITE_REPORT_PAGE").is_some_and(|v| v == "1") {
        std::fs::write(&book_page, &page).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&book_page).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (write it with LAB_WRITE_REPORT_PAGE=1)",
            book_page.display()
        )
    });
    assert_eq!(
        verdicts(&committed),
        verdicts(&page),
        "{BOOK_PAGE} shows other verdicts than this run (after a deliberate change, rewrite it \
         with LAB_WRITE_REPORT_PAGE=1 and review the diff)"
    );
    assert!(
        committed.contains(lab::check::html::STYLE),
        "{BOOK_PAGE} was drawn by an older writer: rewrite it with LAB_WRITE_REPORT_PAGE=1"
    );
}

/// Stops the service a workflow step started in the background, by the pid it wrote.
struct StopsService(PathBuf);

impl Drop for StopsService {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
    }
}

/// The workflow file as JSON, read by PyYAML.
fn workflow(python: &Path) -> Value {
    let file = crate::repository_root().join("lab/ci/check-service.yml");
    let output = Command::new(python)
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(output.status.success(), "PyYAML: {}", text(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_books_workflow_runs_its_steps_and_keeps_both_reports() {
    let test = "the_books_workflow_runs_its_steps_and_keeps_both_reports";
    let Some(python) = reports_python(test) else {
        return;
    };
    let steps = workflow(&python)["jobs"]["lab-check"]["steps"]
        .as_array()
        .unwrap()
        .clone();
    let folder = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        crate::repository_root().join("lab"),
        folder.path().join("lab"),
    )
    .unwrap();
    let _stop = StopsService(folder.path().join("serve.pid"));
    // Port 8080 may be taken here: the steps get a free one instead.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let lab_folder = Path::new(env!("CARGO_BIN_EXE_lab")).parent().unwrap();
    let path = format!(
        "{}:{}",
        lab_folder.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for step in &steps {
        let Some(run) = step["run"].as_str() else {
            continue;
        };
        if run.trim_start().starts_with("cargo install") {
            // Substituted: this test's own build of the lab is first on PATH.
            assert!(run.contains("--path lab"), "{run}");
            continue;
        }
        let script = run.replace("8080", &port.to_string());
        let output = Command::new("bash")
            .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &script])
            .current_dir(folder.path())
            .env("PATH", &path)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "step {}: {}\n{}\nserve.log:\n{}",
            step["name"],
            text(&output.stdout),
            text(&output.stderr),
            std::fs::read_to_string(folder.path().join("serve.log")).unwrap_or_default()
        );
        ran += 1;
    }
    assert_eq!(ran, 3, "start, check, stop");
    let upload = steps
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/upload-artifact@"))
        })
        .expect("a step keeps the reports as an artifact");
    assert_eq!(
        upload["if"], "always()",
        "the reports are kept when the check fails too"
    );
    let kept: Vec<&str> = upload["with"]["path"].as_str().unwrap().lines().collect();
    assert_eq!(kept, ["lab-check.xml", "lab-check.html"]);
    let xml = std::fs::read_to_string(folder.path().join(kept[0])).unwrap();
    let page = std::fs::read_to_string(folder.path().join(kept[1])).unwrap();
    assert!(xml.contains("<testsuite name=\"calibration\""), "{xml}");
    assert!(!xml.contains("<failure "), "lab serve passes: {xml}");
    assert!(page.contains("every MUST and LAB sub-check passed"));
}

/// Pytest's source distribution, which ships the JUnit schema (`LAB_JUNIT_XSD_SDIST`), or `None`
/// with a loud SKIPPED unless `LAB_REQUIRE_REPORTS` is set.
fn junit_schema_sdist(test: &str) -> Option<PathBuf> {
    let sdist = std::env::var_os("LAB_JUNIT_XSD_SDIST")
        .map(PathBuf::from)
        .filter(|p| p.exists());
    if sdist.is_none() {
        assert!(
            std::env::var_os("LAB_REQUIRE_REPORTS").is_none(),
            "{test}: LAB_REQUIRE_REPORTS is set but LAB_JUNIT_XSD_SDIST names no file"
        );
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!(
                "\n*** SKIPPED: {test}: no JUnit schema. Set LAB_JUNIT_XSD_SDIST to pytest's sdist \
                 (pip download --no-deps --no-binary :all: pytest==8.4.2) ***\n"
            )
            .as_bytes(),
        );
    }
    sdist
}

/// What xmlschema says of `xml` against Jenkins' junit-10.xsd: `valid`, or the reason.
fn validate(python: &Path, xml: &Path, sdist: &Path) -> (bool, String) {
    let script = crate::repository_root().join("lab/tests/reports/validate_junit.py");
    let output = Command::new(python)
        .arg(script)
        .arg(xml)
        .arg(sdist)
        .output()
        .unwrap();
    let said = format!("{}{}", text(&output.stdout), text(&output.stderr));
    (output.status.success(), said)
}

#[test]
fn the_junit_file_is_valid_against_the_junit_schema_ci_systems_read() {
    let test = "the_junit_file_is_valid_against_the_junit_schema_ci_systems_read";
    let (Some(python), Some(sdist)) = (reports_python(test), junit_schema_sdist(test)) else {
        return;
    };
    let folder = shop_folder();
    check_with_reports(folder.path(), &leaky_shop());
    let xml = folder.path().join("report.xml");
    let (valid, said) = validate(&python, &xml, &sdist);
    assert!(valid, "{said}");
    assert_eq!(said.trim(), "valid");
    // The validator can refuse: a test case without its required name is not JUnit.
    // The first test case's name, whichever point it is, becomes a title.
    let original = std::fs::read_to_string(&xml).unwrap();
    let case = original
        .find("<testcase ")
        .expect("a test case in the report");
    let name = case + original[case..].find(" name=").expect("a test case's name");
    let broken = format!(
        "{} title={}",
        &original[..name],
        &original[name + " name=".len()..]
    );
    let broken_file = folder.path().join("broken.xml");
    std::fs::write(&broken_file, broken).unwrap();
    let (valid, said) = validate(&python, &broken_file, &sdist);
    assert!(!valid && said.contains("invalid"), "{said}");
}
