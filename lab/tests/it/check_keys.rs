//! `lab check --target`, keys as the service takes them (issue 46): the target file says how
//! the service reads its key (`key.form`: "opaque", "sf-string" or "token"; `key.pattern`), the
//! `key-forms` point grades what the file says, and `--init` guesses the form from a probe.

use std::path::Path;
use std::process::Output;

use lab::check::report::{Level, Verdict};
use lab::check::{Overrides, Report, Target};

use crate::check_target::{Bugs, Listener, SHOP_TARGET, start_shop};

/// The shop's file with its `[key]` table's `form = "sf-string"` line replaced by `key`.
fn shop_file(key: &str) -> String {
    assert!(SHOP_TARGET.contains("[key]\nform = \"sf-string\"\n"));
    SHOP_TARGET.replace("[key]\nform = \"sf-string\"\n", &format!("[key]\n{key}"))
}

fn run_lab(folder: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_lab"))
        .current_dir(folder)
        .args(args)
        .output()
        .expect("the lab binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `lab check --target` with `file` against `url`: the exit status and the report's text.
fn check_cli(file: &str, url: &str) -> (Option<i32>, String) {
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("shop.toml"), file).unwrap();
    let output = run_lab(
        folder.path(),
        &["check", "--target", "shop.toml", "--url", url],
    );
    let shown = format!("{}\n{}", text(&output.stdout), text(&output.stderr));
    (output.status.code(), shown)
}

/// The check of `file` against the shop with `bugs`, in process.
fn check_report(file: &str, bugs: Bugs) -> Report {
    let overrides = Overrides {
        base_url: Some(start_shop(bugs)),
        allow_remote: false,
        upstream_port: None,
    };
    let target = Target::parse(file, Path::new("shop.toml"), &overrides).unwrap();
    lab::check::run(target).unwrap()
}

fn point<'r>(report: &'r Report, name: &str) -> &'r lab::check::report::PointReport {
    report.points.iter().find(|p| p.name == name).unwrap()
}

fn failed_checks(report: &Report, name: &str) -> Vec<String> {
    point(report, name)
        .checks
        .iter()
        .filter(|c| !c.passed && c.grade.required())
        .map(|c| c.what.clone())
        .collect()
}

/// Every UUID, any version, either case: what `--init` writes for a service that takes only
/// UUIDs (`lab::check::init::UUID_PATTERN`).
const UUIDS: &str = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";

const OPAQUE: Bugs = Bugs {
    opaque_keys: true,
    unscoped: false,
    accept_changed: false,
    burn_on_4xx: false,
    conflict_on_replay: false,
    no_key: false,
    operation_blind: false,
    uuid_keys_only: false,
};

#[test]
fn a_service_with_opaque_keys_and_no_other_bug_exits_zero_once_its_file_says_form_opaque() {
    // Without key.form the check holds the service to the draft's sf-string: the quoted key and
    // the bare key are two keys there, and an unclosed quote is a key of its own. That fails
    // key-forms alone, and the report says how to declare an opaque key.
    let url = start_shop(OPAQUE);
    let (code, shown) = check_cli(&shop_file(""), &url);
    assert_eq!(code, Some(1), "{shown}");
    assert!(shown.contains("FAIL key-forms"), "{shown}");
    assert!(shown.contains("failed: key-forms\n"), "{shown}");
    assert!(shown.contains("the file names no key.form"), "{shown}");
    assert!(shown.contains("declare key.form = \"opaque\""), "{shown}");

    let (code, shown) = check_cli(&shop_file("form = \"opaque\"\n"), &url);
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        shown.contains("every MUST and LAB sub-check passed"),
        "{shown}"
    );
    // What the draft asks of sf-strings is still said, as a SHOULD line.
    assert!(shown.contains("WARN key-forms"), "{shown}");
    assert!(
        shown.contains(
            "FAIL SHOULD §2.1 — the key as the draft's quoted String names the same effect"
        ),
        "{shown}"
    );
}

#[test]
fn a_service_whose_file_claims_the_drafts_form_still_fails_when_it_reads_keys_opaquely() {
    let report = check_report(&shop_file("form = \"sf-string\"\n"), OPAQUE);
    assert_eq!(
        point(&report, "key-forms").verdict,
        Verdict::Fail,
        "{report}"
    );
    let failed = failed_checks(&report, "key-forms");
    assert!(
        failed.contains(
            &"the key as a bare token is refused or names the same effect, never a second"
                .to_owned()
        ),
        "{failed:?}"
    );
    assert!(
        failed.contains(&"the request with a malformed key made no effect".to_owned()),
        "{failed:?}"
    );
    // The advice names the declaration without calling the claim the check's default.
    let text = report.to_string();
    assert!(
        text.contains("key.form = \"sf-string\" says that"),
        "{text}"
    );
    assert!(!text.contains("the file names no key.form"), "{text}");
    // The same service right by its claim passes the same point.
    let right = check_report(&shop_file("form = \"sf-string\"\n"), Bugs::default());
    assert_eq!(point(&right, "key-forms").verdict, Verdict::Pass, "{right}");
}

#[test]
fn a_key_outside_key_pattern_must_be_refused_and_make_no_effect() {
    let file = shop_file(&format!("form = \"opaque\"\npattern = \"{}\"\n", UUIDS));
    let enforced = check_report(
        &file,
        Bugs {
            uuid_keys_only: true,
            ..OPAQUE
        },
    );
    assert!(enforced.passed, "{enforced}");
    let checks = &point(&enforced, "key-forms").checks;
    let outside: Vec<_> = checks
        .iter()
        .filter(|c| c.what.contains("outside key.pattern"))
        .collect();
    assert_eq!(outside.len(), 2, "{enforced}");
    assert!(
        outside
            .iter()
            .all(|c| c.passed && c.grade.level == Level::Lab)
    );

    // The file says so, the service takes any string: the key outside the pattern made an
    // effect.
    let ignored = check_report(&file, OPAQUE);
    assert_eq!(
        failed_checks(&ignored, "key-forms"),
        [
            "a key outside key.pattern is refused with statuses.bad_key",
            "the request with a key outside key.pattern made no effect"
        ],
        "{ignored}"
    );
    assert_eq!(failed_of(&ignored), ["key-forms"], "{ignored}");
}

fn failed_of(report: &Report) -> Vec<&'static str> {
    report.failed().map(|p| p.name).collect()
}

/// `--init` against the shop with `bugs`: the file it wrote, parsed, and its text.
fn init_against(bugs: Bugs) -> (Target, String, String) {
    let folder = tempfile::tempdir().unwrap();
    let output = run_lab(
        folder.path(),
        &["check", "--target", "new.toml", "--init", &start_shop(bugs)],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let written = std::fs::read_to_string(folder.path().join("new.toml")).unwrap();
    let target = Target::parse(&written, Path::new("new.toml"), &Overrides::default()).unwrap();
    (target, written, text(&output.stderr))
}

#[test]
fn init_writes_the_key_form_its_own_probe_found() {
    let (_, opaque, said) = init_against(OPAQUE);
    assert!(opaque.contains("\nform = \"opaque\"\n"), "{opaque}");
    assert!(opaque.contains("# --init's probe: "), "{opaque}");
    assert!(!opaque.contains("\npattern = "), "{opaque}");
    assert!(said.contains("key.form = \"opaque\""), "{said}");

    let (_, draft, _) = init_against(Bugs::default());
    assert!(draft.contains("\nform = \"sf-string\"\n"), "{draft}");

    let (_, uuids, _) = init_against(Bugs {
        uuid_keys_only: true,
        ..OPAQUE
    });
    assert!(uuids.contains("\nform = \"opaque\"\n"), "{uuids}");
    assert!(
        uuids.contains(&format!("\npattern = \"{UUIDS}\"\n")),
        "{uuids}"
    );
}

#[test]
fn a_key_form_or_pattern_the_check_cannot_use_exits_two_naming_the_field() {
    let listener = Listener::new();
    let cases = [
        ("form = \"opaque-ish\"\n", "key.form", "\"opaque\""),
        (
            "pattern = \"[0-9a-f\"\n",
            "key.pattern",
            "regular expression",
        ),
        // UUID keys and a pattern of digits only: no key the check makes would match.
        ("pattern = \"[0-9]+\"\n", "key.pattern", "key.shape"),
        // A pattern the text shape's keys match and UUIDs do not: the fix is the shape.
        (
            "pattern = \"chk-.*\"\n",
            "key.pattern",
            "key.shape = \"text\"",
        ),
        ("pattern = \".*\"\n", "key.pattern", "leave it out"),
    ];
    let folder = tempfile::tempdir().unwrap();
    for (key, field, fix) in cases {
        let file = shop_file(key).replace("http://127.0.0.1:9", &listener.url);
        std::fs::write(folder.path().join("shop.toml"), file).unwrap();
        let output = run_lab(folder.path(), &["check", "--target", "shop.toml"]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{key}: {stderr}");
        assert!(stderr.contains(field), "{field} in: {stderr}");
        assert!(stderr.contains(fix), "{fix} in: {stderr}");
        assert!(output.stdout.is_empty());
    }
    assert_eq!(listener.connections(), 0, "something was sent");
    // A pattern the keys of the file's shape match is taken.
    let taken =
        shop_file("form = \"opaque\"\nshape = \"text\"\npattern = \"chk-[0-9a-f]+-[0-9]+\"\n");
    Target::parse(&taken, Path::new("shop.toml"), &Overrides::default()).unwrap();
}
