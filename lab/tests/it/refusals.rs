//! Every command refuses bad input before it acts (issue #15): exit status 2, one line on stderr
//! naming the option, file, field or value, nothing on stdout, and the folder it ran in exactly as
//! it was: no file created, changed or replaced, no request sent.

use std::collections::BTreeMap;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use proptest::prelude::*;

/// What a folder holds: each entry's name, its kind and, for a file, its bytes; for a link, its
/// target.
type Listing = BTreeMap<PathBuf, String>;

fn listing(folder: &Path) -> Listing {
    let mut entries = Listing::new();
    for entry in std::fs::read_dir(folder).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let what = if meta.file_type().is_symlink() {
            format!("link to {}", std::fs::read_link(&path).unwrap().display())
        } else if meta.is_file() {
            format!("file {:?}", std::fs::read(&path).unwrap())
        } else if meta.is_dir() {
            format!("folder {:?}", listing(&path))
        } else {
            format!("node {:?}", meta.file_type())
        };
        entries.insert(path.file_name().unwrap().into(), what);
    }
    entries
}

fn lab(folder: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(args)
        .current_dir(folder)
        .output()
        .expect("the lab binary runs")
}

/// A port on 127.0.0.1 that counts the connections made to it, so a test can tell that nothing
/// was sent.
struct Listener {
    listener: TcpListener,
    url: String,
}

impl Listener {
    fn new() -> Listener {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        Listener { listener, url }
    }

    fn connections(&self) -> usize {
        std::iter::from_fn(|| self.listener.accept().ok()).count()
    }
}

/// Runs `lab ARGS` in `folder` and checks that it refused: status 2, one line containing
/// `expected`, nothing on stdout, the folder unchanged, and no connection to `listener`.
fn refuses_in(folder: &Path, args: &[&str], expected: &str, listener: Option<&Listener>) {
    let before = listing(folder);
    let output = lab(folder, args);
    let message = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{args:?}: {message}");
    assert!(
        message.contains(expected),
        "{args:?}: expected {expected:?} in {message:?}"
    );
    assert_eq!(
        message.lines().count(),
        1,
        "{args:?}: one line: {message:?}"
    );
    assert!(output.stdout.is_empty(), "{args:?}: {output:?}");
    assert_eq!(listing(folder), before, "{args:?}: the folder changed");
    if let Some(listener) = listener {
        assert_eq!(listener.connections(), 0, "{args:?}: something was sent");
    }
}

/// As [`refuses_in`], in a fresh folder holding `files`.
fn refuses(files: &[(&str, &[u8])], args: &[&str], expected: &str) {
    let folder = tempfile::tempdir().unwrap();
    for (name, content) in files {
        std::fs::write(folder.path().join(name), content).unwrap();
    }
    refuses_in(folder.path(), args, expected, None);
}

const GOOD_FIXTURE: &str =
    r#"{"operation_key": "k-1", "scope": {"caller": "c", "operation": "o"}, "payload": {"a": 1}}"#;

const PRECIOUS: &[u8] = b"{\"precious\": true}\n";

fn runner_args<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["runner", "--database", "runner.sqlite", "--url", url];
    args.extend(["--token", "token-a", "--caller", "alice"]);
    args.extend(extra);
    args
}

// ---- lab runner: every option, before the file is created or anything is sent ----

#[test]
fn a_runner_url_with_a_port_that_is_not_a_number_is_refused_before_anything_exists() {
    let listener = Listener::new();
    let folder = tempfile::tempdir().unwrap();
    for (url, expected) in [
        (
            "http://127.0.0.1:abc",
            "port \"abc\" is not a number from 1 to 65535",
        ),
        ("http://127.0.0.1:0", "port \"0\""),
        ("http://127.0.0.1:99999", "port \"99999\""),
        ("http://example.com:80", "is not loopback"),
        ("https://127.0.0.1:80", "expected http://"),
        ("http://127.0.0.1:80?x=1", "'?'"),
    ] {
        let args = runner_args(url, &["--key", "k", "--payload", "{}"]);
        refuses_in(folder.path(), &args, "--url", Some(&listener));
        refuses_in(folder.path(), &args, expected, Some(&listener));
    }
}

#[test]
fn a_runner_key_payload_caller_or_token_that_breaks_a_rule_is_refused_before_the_file_exists() {
    let listener = Listener::new();
    let url = listener.url.clone();
    let folder = tempfile::tempdir().unwrap();
    let big = format!(r#"{{"a": "{}"}}"#, "x".repeat(70_000));
    for (extra, expected) in [
        (vec!["--key", " k", "--payload", "{}"], "'--key <KEY>'"),
        (
            vec!["--key", "k ", "--payload", "{}"],
            "must not start or end with a space",
        ),
        (vec!["--key", "clé", "--payload", "{}"], "printable ASCII"),
        (vec!["--key", "", "--payload", "{}"], "'--key <KEY>'"),
        (vec!["--key", "k", "--payload", "{"], "'--payload <JSON>'"),
        (
            vec!["--key", "k", "--payload", "[1]"],
            "payload must be a JSON object",
        ),
        (
            vec!["--key", "k", "--payload", r#"{"a": 1, "a": 2}"#],
            "key \"a\" appears twice in one object",
        ),
        (
            vec!["--key", "k", "--payload", &big],
            "the service takes at most 65536",
        ),
        (vec!["--key", "k"], "--payload"),
        (
            vec!["--attempts", "0"],
            "'--attempts <ATTEMPTS>': must be at least 1",
        ),
        (vec!["--deadline-ms", "-1"], "--deadline-ms"),
    ] {
        let args = runner_args(&url, &extra);
        refuses_in(folder.path(), &args, expected, Some(&listener));
    }
    for (option, value, expected) in [
        ("--caller", "ali\u{7}ce", "invalid caller"),
        ("--caller", "", "invalid caller"),
        (
            "--token",
            "token a",
            "the token must be printable ASCII without spaces",
        ),
        ("--token", "", "the token must not be empty"),
    ] {
        let mut args = vec!["runner", "--database", "runner.sqlite", "--url", &url];
        let other = if option == "--caller" {
            ["--token", "token-a"]
        } else {
            ["--caller", "alice"]
        };
        args.extend(other);
        args.extend([option, value]);
        refuses_in(folder.path(), &args, expected, Some(&listener));
    }
}

#[test]
fn a_bad_pause_point_is_refused_before_the_runner_file_exists() {
    let folder = tempfile::tempdir().unwrap();
    let listener = Listener::new();
    let before = listing(folder.path());
    let output = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(runner_args(
            &listener.url,
            &["--key", "k", "--payload", "{}"],
        ))
        .env(lab::runner::PAUSE_VARIABLE, "after-lunch")
        .current_dir(folder.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("LAB_RUNNER_PAUSE_AT"));
    assert_eq!(listing(folder.path()), before);
    assert_eq!(listener.connections(), 0);
}

#[test]
fn a_runner_database_that_is_a_folder_a_stranger_or_nowhere_is_refused_naming_the_option() {
    let folder = tempfile::tempdir().unwrap();
    std::fs::create_dir(folder.path().join("a-folder")).unwrap();
    std::fs::write(folder.path().join("notes.txt"), PRECIOUS).unwrap();
    // A SQLite database of another program: the runner must not add its table to it.
    let other = folder.path().join("other.sqlite");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch(
            "CREATE TABLE invoices (id INTEGER PRIMARY KEY); INSERT INTO invoices DEFAULT VALUES;",
        )
        .unwrap();
    let listener = Listener::new();
    for (database, expected) in [
        ("a-folder", "--database: a-folder: a folder, not a file"),
        ("notes.txt", "--database: notes.txt: not a SQLite database"),
        (
            "other.sqlite",
            "--database: other.sqlite: a SQLite database of something else (tables: invoices)",
        ),
        (
            "missing/runner.sqlite",
            "--database: missing/runner.sqlite: the folder missing does not exist",
        ),
        (
            "notes.txt/runner.sqlite",
            "--database: notes.txt/runner.sqlite",
        ),
        ("", "a value is required for '--database <FILE>'"),
    ] {
        let args = [
            "runner",
            "--database",
            database,
            "--url",
            &listener.url,
            "--token",
            "token-a",
            "--caller",
            "alice",
            "--key",
            "k",
            "--payload",
            "{}",
        ];
        refuses_in(folder.path(), &args, expected, Some(&listener));
    }
}

#[test]
fn a_runner_database_in_a_folder_it_cannot_write_is_refused_naming_the_option() {
    use std::os::unix::fs::PermissionsExt;
    let folder = tempfile::tempdir().unwrap();
    let locked = folder.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(locked.join("probe"), b"").is_ok() {
        // root ignores folder permissions: there is no unwritable folder to try.
        std::fs::remove_file(locked.join("probe")).unwrap();
        eprintln!("NOTE: running as root; the unwritable --database folder case cannot be made");
        return;
    }
    let listener = Listener::new();
    let args = [
        "runner",
        "--database",
        "locked/runner.sqlite",
        "--url",
        &listener.url,
        "--token",
        "token-a",
        "--caller",
        "alice",
        "--key",
        "k",
        "--payload",
        "{}",
    ];
    refuses_in(
        folder.path(),
        &args,
        "--database: locked/runner.sqlite",
        Some(&listener),
    );
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Leaves `runner.sqlite` in `folder` with operation `held-1` pending: the first run found
/// nothing listening on the port.
fn runner_file_with_a_pending_operation(folder: &Path) {
    let unused = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", unused.local_addr().unwrap());
    drop(unused);
    let output = lab(
        folder,
        &runner_args(&url, &["--key", "held-1", "--payload", r#"{"title": "t"}"#]),
    );
    assert_eq!(output.status.code(), Some(5), "{output:?}");
}

#[test]
fn a_malformed_new_payload_sends_nothing_not_even_the_pending_operation() {
    let folder = tempfile::tempdir().unwrap();
    runner_file_with_a_pending_operation(folder.path());
    let listener = Listener::new();
    for extra in [
        ["--key", "new-1", "--payload", "{not json"],
        ["--key", " new-1", "--payload", "{}"],
    ] {
        refuses_in(
            folder.path(),
            &runner_args(&listener.url, &extra),
            "error: invalid value",
            Some(&listener),
        );
    }
}

#[test]
fn a_runner_file_in_another_journal_mode_is_left_byte_for_byte_when_its_key_is_refused() {
    let folder = tempfile::tempdir().unwrap();
    // A runner file that is not in WAL mode (made by hand, or copied with its journal mode
    // reset): the refusal must not switch it.
    let db = rusqlite::Connection::open(folder.path().join("runner.sqlite")).unwrap();
    db.execute_batch(lab::runner::RUNNER_SCHEMA).unwrap();
    db.execute(
        "INSERT INTO operations (caller, operation, key, payload, state)
         VALUES ('alice', 'create_ticket', 'review-1', '{}', 'pending')",
        [],
    )
    .unwrap();
    drop(db);
    let listener = Listener::new();
    let args = runner_args(&listener.url, &["--resend", "review-1"]);
    refuses_in(
        folder.path(),
        &args,
        "only an operation in review is sent again",
        Some(&listener),
    );
    let args = runner_args(
        &listener.url,
        &["--key", "review-1", "--payload", r#"{"a": 1}"#],
    );
    refuses_in(
        folder.path(),
        &args,
        "already holds this key with another payload",
        Some(&listener),
    );
}

#[test]
fn a_saved_key_with_another_payload_is_refused_and_the_pending_operation_is_not_sent() {
    let folder = tempfile::tempdir().unwrap();
    runner_file_with_a_pending_operation(folder.path());
    let listener = Listener::new();
    let args = runner_args(
        &listener.url,
        &["--key", "held-1", "--payload", r#"{"title": "other"}"#],
    );
    refuses_in(
        folder.path(),
        &args,
        "--key: \"held-1\": runner.sqlite already holds this key with another payload",
        Some(&listener),
    );
}

#[test]
fn resending_a_key_that_is_not_in_review_is_refused_and_nothing_is_sent() {
    let folder = tempfile::tempdir().unwrap();
    runner_file_with_a_pending_operation(folder.path());
    let listener = Listener::new();
    for (key, expected) in [
        (
            "held-1",
            "--resend: \"held-1\": only an operation in review is sent again",
        ),
        (
            "never-seen",
            "--resend: \"never-seen\": runner.sqlite holds no operation of caller alice",
        ),
        (" bad", "'--resend <KEY>'"),
    ] {
        let args = runner_args(&listener.url, &["--resend", key]);
        refuses_in(folder.path(), &args, expected, Some(&listener));
    }
    // Without a runner file there is nothing to resend, and none is created.
    let empty = tempfile::tempdir().unwrap();
    let args = runner_args(&listener.url, &["--resend", "held-1"]);
    refuses_in(
        empty.path(),
        &args,
        "--resend: runner.sqlite does not exist",
        Some(&listener),
    );
}

// ---- the scenario run: the fixture and --output ----

fn fixture_refused(text: &[u8], expected: &str) {
    refuses(
        &[("fixture.json", text), ("results.json", PRECIOUS)],
        &["--fixture", "fixture.json", "--output", "results.json"],
        expected,
    );
}

#[test]
fn a_fixture_member_named_twice_is_refused_as_the_http_body_is() {
    fixture_refused(
        br#"{"operation_key": "k-1", "operation_key": "k-2", "scope": {"caller": "c", "operation": "o"}, "payload": {}}"#,
        "fixture.json: invalid JSON: key \"operation_key\" appears twice in one object at line 1 column 40",
    );
    fixture_refused(
        br#"{"operation_key": "k", "scope": {"caller": "c", "operation": "o"}, "payload": {"priority": "low", "priority": "urgent"}}"#,
        "key \"priority\" appears twice in one object",
    );
    fixture_refused(
        br#"{"operation_key": "k", "scope": {"caller": "c", "caller": "d", "operation": "o"}, "payload": {}}"#,
        "key \"caller\" appears twice in one object",
    );
}

#[test]
fn a_fixture_larger_than_the_bound_is_refused_without_reading_it_whole() {
    let mut text =
        br#"{"operation_key": "k", "scope": {"caller": "c", "operation": "o"}, "payload": {"a": ""#
            .to_vec();
    text.resize(3 * 1024 * 1024, b'x');
    text.extend_from_slice(b"\"}}");
    fixture_refused(&text, "fixture.json: larger than 1048576 bytes (1 MiB)");
}

#[test]
fn a_fixture_nested_deeper_than_the_bound_is_refused_with_the_place() {
    let deep = format!(
        r#"{{"operation_key": "k", "scope": {{"caller": "c", "operation": "o"}}, "payload": {{"a": {}1{}}}}}"#,
        "[".repeat(63),
        "]".repeat(63)
    );
    fixture_refused(
        deep.as_bytes(),
        "fixture.json: nested deeper than 64 levels at line 1 column 147",
    );
    let very_deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    fixture_refused(
        very_deep.as_bytes(),
        "nested deeper than 64 levels at line 1 column 65",
    );
}

#[test]
fn a_fixture_key_with_a_space_at_either_end_is_refused_naming_the_field() {
    for key in [" k-1", "k-1 "] {
        let text = GOOD_FIXTURE.replace("\"k-1\"", &format!("{key:?}"));
        fixture_refused(
            text.as_bytes(),
            "fixture.json: field `operation_key`: invalid operation key",
        );
    }
}

#[test]
fn a_fixture_that_is_not_text_or_not_a_file_is_refused() {
    fixture_refused(
        b"{\"operation_key\": \"\xff\"}",
        "fixture.json: not UTF-8 text (invalid byte at offset 19)",
    );
    refuses(
        &[("results.json", PRECIOUS)],
        &["--fixture", ".", "--output", "results.json"],
        "cannot read .",
    );
    // A pipe with no writer would block the read forever.
    let folder = tempfile::tempdir().unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(folder.path().join("fixture.json"))
            .status()
            .unwrap()
            .success()
    );
    refuses_in(
        folder.path(),
        &["--fixture", "fixture.json"],
        "fixture.json: not a regular file (a pipe, a device or a socket)",
        None,
    );
}

#[test]
fn an_output_that_is_a_pipe_a_socket_or_a_link_is_left_as_it_was() {
    let folder = tempfile::tempdir().unwrap();
    let fifo = folder.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let _socket = std::os::unix::net::UnixListener::bind(folder.path().join("socket")).unwrap();
    std::fs::write(folder.path().join("target.json"), PRECIOUS).unwrap();
    std::os::unix::fs::symlink("target.json", folder.path().join("link.json")).unwrap();
    std::os::unix::fs::symlink("/dev/null", folder.path().join("null")).unwrap();
    for (output, expected) in [
        ("fifo", "cannot write output fifo: it is not a regular file"),
        (
            "socket",
            "cannot write output socket: it is not a regular file",
        ),
        (
            "link.json",
            "cannot write output link.json: it is a symbolic link",
        ),
        ("null", "cannot write output null: it is a symbolic link"),
    ] {
        refuses_in(folder.path(), &["--output", output], expected, None);
    }
}

#[test]
fn an_http_run_with_a_bad_url_is_refused_before_the_fixture_or_output_is_touched() {
    refuses(
        &[("results.json", PRECIOUS)],
        &[
            "--backend",
            "http",
            "--url",
            "http://127.0.0.1:abc",
            "--token",
            "t",
            "--output",
            "results.json",
        ],
        "'--url <URL>': port \"abc\"",
    );
}

// ---- the other subcommands ----

#[test]
fn serve_proxy_simulate_and_bench_refuse_bad_options_before_they_start() {
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("notes.txt"), PRECIOUS).unwrap();
    std::fs::create_dir(folder.path().join("a-folder")).unwrap();
    let fifo = folder.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for (args, expected) in [
        (
            &["serve", "--caller", "a=t", "--database", "a-folder"][..],
            "--database: a-folder: a folder, not a file",
        ),
        (
            &["serve", "--caller", "a=t", "--database", "notes.txt"],
            "--database: notes.txt: not a SQLite database",
        ),
        (
            &["serve", "--caller", "a=t", "--workers", "0"],
            "'--workers <WORKERS>': must be from 1 to 1024",
        ),
        (
            &["serve", "--caller", "a=t", "--workers", "100000000"],
            "must be from 1 to 1024",
        ),
        (
            &["serve", "--caller", "a=t", "--admin-token", "a b"],
            "'--admin-token <TOKEN>'",
        ),
        (&["serve", "--caller", "a"], "expected NAME=TOKEN"),
        (
            &["serve", "--caller", "a=t", "--port", "70000"],
            "'--port <PORT>'",
        ),
        (
            &["proxy", "--upstream", "http://127.0.0.1:abc"],
            "'--upstream <URL>': port \"abc\"",
        ),
        (
            &["proxy", "--upstream", "http://10.0.0.1:80"],
            "is not loopback",
        ),
        (
            &["simulate", "--examples", "missing", "--histories", "1"],
            "--examples: missing: not a folder",
        ),
        (
            &["simulate", "--histories", "0"],
            "--histories must be at least 1",
        ),
        (
            &["simulate", "--variant", "nonsense"],
            "'--variant <VARIANT>'",
        ),
        (
            &["bench", "--quick", "--json", "fifo"],
            "cannot write output fifo",
        ),
        (
            &["bench", "--quick", "--json", "missing/bench.json"],
            "cannot write output missing/bench.json",
        ),
        (
            &["bench-probe", "nonsense", "1"],
            "unknown probe operation \"nonsense\"",
        ),
        (
            &["--lock-timeout-ms", "0"],
            "'--lock-timeout-ms <MS>': must be at least 1",
        ),
        (
            &["--lock-timeout-ms", "2147483648"],
            "must be at most 2147483647",
        ),
        (
            &[
                "--output",
                "x.json",
                "runner",
                "--database",
                "r.sqlite",
                "--url",
                "http://127.0.0.1:1",
                "--token",
                "t",
                "--caller",
                "c",
            ],
            "--output is for the scenario run",
        ),
        (
            &["--fixture", "notes.txt", "serve", "--caller", "a=t"],
            "--fixture is for the scenario run",
        ),
        (
            &[
                "--url",
                "http://127.0.0.1:1",
                "proxy",
                "--upstream",
                "http://127.0.0.1:1",
            ],
            "--url is for the scenario run",
        ),
    ] {
        refuses_in(folder.path(), args, expected, None);
    }
}

#[test]
fn serve_or_proxy_on_a_port_in_use_or_a_store_sqlite_cannot_open_is_refused_before_a_file_is_made()
{
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let folder = tempfile::tempdir().unwrap();
    let args = [
        "serve",
        "--caller",
        "a=t",
        "--port",
        &port,
        "--database",
        "tickets.sqlite",
    ];
    refuses_in(
        folder.path(),
        &args,
        &format!("--port: {port}: cannot listen on"),
        None,
    );
    let args = ["proxy", "--upstream", "http://127.0.0.1:1", "--port", &port];
    refuses_in(
        folder.path(),
        &args,
        &format!("--port: {port}: cannot listen on"),
        None,
    );
    // /proc takes no new files, whoever runs the test.
    let args = [
        "serve",
        "--caller",
        "a=t",
        "--database",
        "/proc/lab-tickets.sqlite",
    ];
    refuses_in(
        folder.path(),
        &args,
        "--database: /proc/lab-tickets.sqlite: SQLite cannot use it",
        None,
    );
    assert!(!Path::new("/proc/lab-tickets.sqlite").exists());
}

#[test]
fn a_runner_database_sqlite_cannot_create_is_refused_naming_the_option() {
    let folder = tempfile::tempdir().unwrap();
    let listener = Listener::new();
    let args = runner_args(&listener.url, &["--key", "k", "--payload", "{}"]);
    let args: Vec<&str> = args
        .iter()
        .map(|arg| {
            if *arg == "runner.sqlite" {
                "/proc/lab-runner.sqlite"
            } else {
                arg
            }
        })
        .collect();
    refuses_in(
        folder.path(),
        &args,
        "--database: /proc/lab-runner.sqlite: SQLite cannot use it",
        Some(&listener),
    );
}

// ---- generated input: no panic, exit 2, nothing written ----

/// A value that breaks one rule of the option it is given to.
fn bad_runner_option() -> impl Strategy<Value = (&'static str, String)> {
    prop_oneof![
        "( |[^\\x00 -~])[ -~]{0,8}".prop_map(|key| ("--key", key)),
        "[ -~]{0,8} ".prop_map(|key| ("--key", key)),
        "[^{\\x00]\\PC{0,12}".prop_map(|payload| ("--payload", payload)),
        "\\{\"[a-z]{1,3}\":1,\"[a-z]{1,3}\":2".prop_map(|payload| ("--payload", payload)),
        "[a-z]{0,3}[\\x01-\\x1f][a-z]{0,3}".prop_map(|caller| ("--caller", caller)),
        "[a-z]{0,3}[ \\x01-\\x1f\\u{80}-\\u{10ffff}][a-z]{0,3}"
            .prop_map(|token| ("--token", token)),
        "http://(127\\.0\\.0\\.1|localhost):([a-z]{1,4}|0|[7-9][0-9]{4})"
            .prop_map(|url| ("--url", url)),
        "(ftp|https)://127\\.0\\.0\\.1:[0-9]{2,4}".prop_map(|url| ("--url", url)),
        "0|-[0-9]{1,3}|[a-z]{1,3}".prop_map(|attempts| ("--attempts", attempts)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_runner_given_one_bad_option_exits_2_and_writes_and_sends_nothing(
        (option, value) in bad_runner_option(),
    ) {
        let listener = Listener::new();
        let folder = tempfile::tempdir().unwrap();
        let mut values: BTreeMap<&str, String> = [
            ("--url", listener.url.clone()),
            ("--token", "token-a".to_owned()),
            ("--caller", "alice".to_owned()),
            ("--key", "k-1".to_owned()),
            ("--payload", "{}".to_owned()),
            ("--attempts", "1".to_owned()),
        ]
        .into();
        values.insert(option, value.clone());
        let mut args = vec!["runner".to_owned(), "--database".to_owned(), "runner.sqlite".to_owned()];
        for (name, value) in &values {
            // `--name=value`, so a value that starts with `-` is not read as an option.
            args.push(format!("{name}={value}"));
        }
        let output = Command::new(env!("CARGO_BIN_EXE_lab"))
            .args(&args)
            .current_dir(folder.path())
            .output()
            .unwrap();
        let message = String::from_utf8_lossy(&output.stderr);
        prop_assert_eq!(output.status.code(), Some(2), "{:?}: {}", args, message);
        prop_assert_eq!(message.lines().count(), 1, "{}", message);
        prop_assert!(message.contains(option), "{:?}: {}", args, message);
        prop_assert!(listing(folder.path()).is_empty(), "{:?}", args);
        prop_assert_eq!(listener.connections(), 0);
    }

    #[test]
    fn any_fixture_text_is_run_or_refused_on_one_line_with_the_output_untouched(
        text in prop_oneof![
            any::<Vec<u8>>(),
            "\\{(\"(operation_key|scope|payload|caller|operation)\":(\"[ -~]{0,4}\"|\\{|\\}|\\[|1|null),?){0,8}\\}?"
                .prop_map(String::into_bytes),
        ],
    ) {
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("fixture.json"), &text).unwrap();
        std::fs::write(folder.path().join("results.json"), PRECIOUS).unwrap();
        let before = listing(folder.path());
        let output = lab(folder.path(), &["--fixture", "fixture.json", "--output", "results.json"]);
        let message = String::from_utf8_lossy(&output.stderr);
        match output.status.code() {
            Some(0) => prop_assert!(message.is_empty(), "{}", message),
            Some(2) => {
                prop_assert_eq!(message.lines().count(), 1, "{}", message);
                prop_assert!(message.starts_with("error: fixture.json"), "{}", message);
                prop_assert_eq!(listing(folder.path()), before);
            }
            other => prop_assert!(false, "exit status {:?}: {}", other, message),
        }
    }
}

#[test]
fn help_lists_every_exit_status() {
    let folder = tempfile::tempdir().unwrap();
    for args in [&["--help"][..], &["runner", "--help"]] {
        let output = lab(folder.path(), args);
        assert!(output.status.success());
        let help = String::from_utf8(output.stdout).unwrap();
        for line in [
            "  0  every check passed",
            "  1  a check failed",
            "  2  bad input",
            "  3  lab runner: an operation was rejected",
            "  4  lab runner: an operation needs review",
            "  5  lab runner: an operation was held",
        ] {
            assert!(
                help.contains(line),
                "{args:?}: {line:?} missing from\n{help}"
            );
        }
    }
}
