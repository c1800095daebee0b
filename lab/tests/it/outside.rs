//! The chapter "Checking a tool in detail" tells a reader to make a crate outside the lab, depend on
//! their clone of it, save the chapter's adapter as `tests/acceptance.rs` and run `cargo test`.
//! This test does that, with the chapter's own text: the commands are read from its `sh` blocks,
//! the listing from the file its `rs` block includes, and the service is started with the
//! chapter's `lab serve` line. The outputs it saw are the ones the chapter shows
//! (`src/check-your-own-tool/*.txt`, rewritten with `LAB_BLESS=1`).
//!
//! The registry is read twice. First the chapter's commands run once in a scratch crate with the
//! network allowed, and `cargo fetch` downloads what the crate needs: that fills the cargo home,
//! even an empty one, with exactly what the chapter uses. Then they run again, offline, in the
//! crate the test checks, so the transcript holds no download lines. Versions are compared up to
//! semver compatibility, and the lists that follow the registry's newest releases (the features
//! of a version, the packages a lock adds) are shown but not compared: the chapter's text must
//! not break because a dependency published a patch.
//!
//! The cargo home is the one of the build that runs this test, or, with
//! `LAB_OUTSIDE_CARGO_HOME=DIR`, a fresh one at DIR, emptied first (the toolchain stays where it
//! is). CI sets it, so a step that works only because something was cached earlier fails there.
//! The target folder is one of its own under the workspace's `target/`, reused by later runs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::http::LabServer;
use crate::repository_root;

const CHAPTER: &str = "src/check-details.md";
/// The chapter that tells the reader to clone and install the lab, in its first `sh` block.
const INTRODUCTION: &str = "src/introduction.md";
/// The file the chapter's listing includes, relative to the chapter.
const LISTING: &str = "../lab/tests/outside/acceptance.rs";
/// The folder the reader clones the lab into, as the chapter names it.
const CLONE: &str = "tool-retries-lab";
/// The port the chapter's commands use; the test's server takes a free one instead.
const CHAPTER_PORT: &str = "8080";
/// The first build of the outside crate compiles the lab's core and SQLite: bounded, but generous.
const LIMIT: Duration = Duration::from_secs(30 * 60);

/// The bodies of the chapter's fences labelled `language`, in order.
fn fences(chapter: &str, language: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in chapter.lines() {
        match (&mut current, line.trim_end()) {
            (None, fence) if fence == format!("```{language}") => current = Some(Vec::new()),
            (Some(_), "```") => found.extend(current.take()),
            (Some(body), text) => body.push(text.to_owned()),
            (None, _) => {}
        }
    }
    found
}

/// One step of the chapter's instructions, as the test carries it out.
#[derive(Debug, PartialEq)]
enum Step {
    /// `git clone ADDRESS DIR`: the test links DIR to this repository (there is no network).
    Clone(String),
    /// `cargo install --locked --path lab`, from the clone: the test uses the workspace's `lab`
    /// binary instead (the same sources, built by the test run).
    Install,
    /// `cd DIR`.
    Cd(String),
    /// `mkdir DIR`.
    Mkdir(String),
    /// `cargo ARGS`.
    Cargo(Vec<String>),
}

/// Reads one command line of the chapter; anything else fails the test, so the chapter cannot
/// tell the reader to type a command this test does not carry out.
fn step(line: &str) -> Step {
    let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    match words
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["git", "clone", _, dir] => Step::Clone((*dir).to_owned()),
        ["cargo", "install", "--locked", "--path", "lab"] => Step::Install,
        ["cd", dir] => Step::Cd((*dir).to_owned()),
        ["mkdir", dir] => Step::Mkdir((*dir).to_owned()),
        ["cargo", ..] => Step::Cargo(words[1..].to_vec()),
        _ => panic!("{CHAPTER}: this test does not know how to run `{line}`"),
    }
}

/// Replaces every form of `folder`'s path in `text` with `~` and the server's port with the
/// chapter's, so the output reads as the reader's would.
fn tidy(text: &str, folder: &Path, port: &str) -> String {
    let mut text = text.to_owned();
    for form in [folder.canonicalize().unwrap(), folder.to_owned()] {
        text = text.replace(&form.display().to_string(), "~");
    }
    text.replace(
        &format!("127.0.0.1:{port}"),
        &format!("127.0.0.1:{CHAPTER_PORT}"),
    )
}

/// Durations (`12.34s`, `0.5 s`) masked, to compare two runs' outputs.
fn without_durations(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts_number =
            chars[i].is_ascii_digit() && (i == 0 || !chars[i - 1].is_alphanumeric());
        if starts_number {
            let mut j = i;
            while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.') {
                j += 1;
            }
            let unit = if chars.get(j) == Some(&' ') { j + 1 } else { j };
            let is_duration = matches!(chars.get(unit), Some('s' | 'm'))
                && !chars
                    .get(unit + 1)
                    .is_some_and(|c| c.is_alphabetic() && *c != 's');
            if is_duration {
                out.push('#');
                i = unit;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// Runs `command` to its end, killed after [`LIMIT`].
fn bounded(mut command: Command) -> Output {
    let mut child: Child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cargo starts");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > LIMIT {
            child.kill().unwrap();
            panic!("{command:?} did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    child.wait_with_output().unwrap()
}

/// `version` (`3.5.2`, `0.23.1-rc.1`) up to semver compatibility: `3.x`, `0.23.x`.
fn compatible(version: &str) -> String {
    let parts: Vec<&str> = version.split(['.', '-', '+']).collect();
    match parts.as_slice() {
        ["0", minor, ..] => format!("0.{minor}.x"),
        [major, ..] => format!("{major}.x"),
        [] => String::new(),
    }
}

/// What of cargo's output the chapter must match: durations masked, every `vX.Y.Z` up to semver
/// compatibility, the count of locked packages masked, and the lines that list what the
/// registry's newest releases hold (a version's features, the packages a lock adds) left out.
fn comparable(text: &str) -> String {
    let mut out = String::new();
    for line in without_durations(text).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let listed_feature = words.len() == 2 && words[0] == "-";
        let locked_package = words.len() == 3
            && words[0] == "Adding"
            && words[2].starts_with('v')
            && words[2][1..].starts_with(|c: char| c.is_ascii_digit());
        if listed_feature || locked_package {
            continue;
        }
        let masked: Vec<String> = words
            .iter()
            .enumerate()
            .map(|(at, word)| {
                let version = word.strip_prefix('v').unwrap_or("");
                let counted = at > 0 && words[at - 1] == "Locking";
                if counted && word.parse::<u64>().is_ok() {
                    "#".to_owned()
                } else if version.starts_with(|c: char| c.is_ascii_digit()) {
                    let bare = version.trim_end_matches(':');
                    format!("v{}{}", compatible(bare), &version[bare.len()..])
                } else {
                    (*word).to_owned()
                }
            })
            .collect();
        out.push_str(&masked.join(" "));
        out.push('\n');
    }
    out
}

/// Compares `shown` with the chapter's file `name` (as [`comparable`] reads both);
/// `LAB_BLESS=1` rewrites it.
fn compare_with_the_chapter(shown: &str, name: &str) {
    let path = repository_root().join("src/check-your-own-tool").join(name);
    if std::env::var("LAB_BLESS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, shown).unwrap();
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        comparable(&written),
        comparable(shown),
        "{} differs from the run; rerun with LAB_BLESS=1 and review the diff",
        path.display()
    );
}

/// The block a chapter shows for a command and what it printed.
fn console(command: &str, output: &str) -> String {
    format!("```console\n$ {command}\n{}\n```\n", output.trim_end())
}

/// Whether a cargo command may reach the registry.
#[derive(Clone, Copy, PartialEq)]
enum Network {
    /// It may: the scratch run that fills the cargo home.
    Allowed,
    /// It may not: the checked run, whose transcript the chapter shows.
    Offline,
}

/// The cargo that the reader's crate is built with: the toolchain's own, a target folder under
/// the workspace's `target/`, and the cargo home the module's documentation describes.
struct OutsideCargo {
    cargo: std::ffi::OsString,
    target: PathBuf,
    home: Option<PathBuf>,
}

impl OutsideCargo {
    fn new(root: &Path) -> OutsideCargo {
        let home = std::env::var_os("LAB_OUTSIDE_CARGO_HOME").map(PathBuf::from);
        if let Some(home) = &home {
            // Fresh and empty: whatever the crate needs must be fetched by this test.
            if home.exists() {
                std::fs::remove_dir_all(home).unwrap();
            }
            std::fs::create_dir_all(home).unwrap();
        }
        OutsideCargo {
            cargo: std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
            target: root.join("target").join("outside-crate"),
            home,
        }
    }

    fn command(&self, args: &[&str], here: &Path, network: Network) -> Command {
        let mut command = Command::new(&self.cargo);
        command
            .args(args)
            .current_dir(here)
            .env("CARGO_TARGET_DIR", &self.target)
            .env_remove("CARGO_MANIFEST_DIR")
            .env_remove("CARGO_NET_OFFLINE");
        if network == Network::Offline {
            command.env("CARGO_NET_OFFLINE", "true");
        }
        if let Some(home) = &self.home {
            command.env("CARGO_HOME", home);
        }
        command
    }

    /// Carries out the introduction's `setup` from `folder` (the reader's), then the chapter's
    /// `steps` from `folder` again ("in the folder that holds tool-retries-lab"). Returns the
    /// folder the last step left the reader in, and the transcript of every cargo command.
    fn walk(
        &self,
        root: &Path,
        folder: &Path,
        setup: &[Step],
        steps: &[Step],
        network: Network,
    ) -> (PathBuf, String) {
        let mut here: PathBuf = folder.to_owned();
        let mut transcript = String::new();
        for (at, step) in setup.iter().chain(steps).enumerate() {
            if at == setup.len() {
                here = folder.to_owned();
            }
            match step {
                Step::Clone(dir) => std::os::unix::fs::symlink(root, here.join(dir)).unwrap(),
                Step::Install => assert!(here.ends_with(CLONE), "the install runs from the clone"),
                Step::Cd(dir) => here = here.join(dir),
                Step::Mkdir(dir) => std::fs::create_dir(here.join(dir)).unwrap(),
                Step::Cargo(args) => {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let output = bounded(self.command(&args, &here, network));
                    let printed: String = format!(
                        "{}{}",
                        String::from_utf8_lossy(&output.stdout),
                        String::from_utf8_lossy(&output.stderr)
                    )
                    .lines()
                    // Another cargo on the machine, not something the reader's would print.
                    .filter(|line| !line.contains("Blocking waiting for file lock"))
                    .map(|line| format!("{line}\n"))
                    .collect();
                    assert!(output.status.success(), "cargo {args:?} failed:\n{printed}");
                    transcript.push_str(&console(&format!("cargo {}", args.join(" ")), &printed));
                }
            }
        }
        (here, transcript)
    }
}

#[test]
fn the_chapters_adapter_passes_in_a_crate_outside_the_repository() {
    let root = repository_root();
    let chapter = std::fs::read_to_string(root.join(CHAPTER)).unwrap();
    let rs_blocks = fences(&chapter, "rs");
    assert_eq!(
        rs_blocks,
        vec![vec![format!("{{{{#include {LISTING}}}}}")]],
        "{CHAPTER} must show the whole adapter file as its one listing"
    );
    let listing = std::fs::read_to_string(root.join("src").join(LISTING)).unwrap();
    let shell = fences(&chapter, "sh");
    let serve_line = shell
        .iter()
        .flatten()
        .find(|line| line.starts_with("lab serve "))
        .expect("the chapter starts a service with `lab serve`")
        .clone();
    let introduction = std::fs::read_to_string(root.join(INTRODUCTION)).unwrap();
    let setup: Vec<Step> = fences(&introduction, "sh")
        .first()
        .expect("the introduction has a `sh` block that gets the lab")
        .iter()
        .map(|line| step(line))
        .collect();
    assert!(
        matches!(setup.first(), Some(Step::Clone(dir)) if dir == CLONE),
        "{INTRODUCTION}: the first `sh` block clones the lab as {CLONE}: {setup:?}"
    );
    assert!(
        setup.contains(&Step::Install),
        "{INTRODUCTION}: the lab is installed once"
    );
    let steps: Vec<Step> = shell
        .iter()
        .flatten()
        .filter(|line| !line.starts_with("lab serve ") && !line.starts_with("cargo test"))
        .map(|line| step(line))
        .collect();
    let test_line = shell
        .iter()
        .flatten()
        .find(|line| line.starts_with("cargo test"))
        .expect("the chapter runs `cargo test`")
        .clone();

    // The service, as the chapter starts it, on a free port and a database the test owns.
    let data = tempfile::tempdir().unwrap();
    let database = data.path().join("tickets.sqlite");
    let mut serve: Vec<String> = serve_line
        .split_whitespace()
        .skip(1)
        .map(str::to_owned)
        .collect();
    let port_at = serve.iter().position(|w| w == "--port").unwrap() + 1;
    assert_eq!(serve[port_at], CHAPTER_PORT);
    serve[port_at] = "0".to_owned();
    serve.extend(["--database".to_owned(), database.display().to_string()]);
    let serve: Vec<&str> = serve.iter().map(String::as_str).collect();
    let server = LabServer::spawn(&serve);
    let port = server.url.rsplit(':').next().unwrap().to_owned();

    // Outside the repository: folders of the system's temporary area.
    let cargo = OutsideCargo::new(&root);
    // First with the network, in a scratch folder: this fills the cargo home with what the
    // chapter's crate needs, so the checked run below can be offline.
    let scratch = tempfile::tempdir().unwrap();
    let crate_folder = cargo
        .walk(&root, scratch.path(), &setup, &steps, Network::Allowed)
        .0;
    let fetched = bounded(cargo.command(&["fetch"], &crate_folder, Network::Allowed));
    assert!(
        fetched.status.success(),
        "cargo fetch in the scratch crate failed:\n{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    let home = tempfile::tempdir().unwrap();
    assert!(!home.path().starts_with(&root));
    let (here, transcript) = cargo.walk(&root, home.path(), &setup, &steps, Network::Offline);
    assert!(
        here.join("Cargo.toml").exists(),
        "the chapter's commands made no crate"
    );
    compare_with_the_chapter(&tidy(&transcript, home.path(), &port), "setup.txt");
    assert!(
        home.path().join(CLONE).exists(),
        "the chapter clones the lab as {CLONE}"
    );
    std::fs::write(here.join("tests").join("acceptance.rs"), &listing).unwrap();

    let test_args: Vec<&str> = test_line.split_whitespace().skip(1).collect();
    let mut command = cargo.command(&test_args, &here, Network::Offline);
    command.env("TICKETS_URL", &server.url);
    let output = bounded(command);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "cargo test in the outside crate failed:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The run checked every point, and declared the one a single token cannot reach.
    for name in lab::conformance::point_names() {
        assert!(stdout.contains(name), "{name} missing:\n{stdout}");
    }
    assert!(
        stdout.contains("NOT COVERED keys_are_scoped_by_caller_and_operation"),
        "{stdout}"
    );
    assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");

    let served = format!("listening on {}", server.url);
    compare_with_the_chapter(
        &console(&serve_line, &tidy(&served, home.path(), &port)),
        "serve.txt",
    );
    // libtest's note on a slow test depends on the machine's load, not on the adapter.
    let stdout: String = stdout
        .lines()
        .filter(|line| !line.ends_with("has been running for over 60 seconds"))
        .map(|line| format!("{line}\n"))
        .collect();
    compare_with_the_chapter(
        &console(&test_line, &tidy(&stdout, home.path(), &port)),
        "cargo-test.txt",
    );
}

#[test]
fn a_command_the_test_cannot_carry_out_fails_it() {
    assert_eq!(step("cd my-tool-check"), Step::Cd("my-tool-check".into()));
    assert_eq!(
        step("cargo add --dev ureq@3"),
        Step::Cargo(vec!["add".into(), "--dev".into(), "ureq@3".into()])
    );
    let refused = std::panic::catch_unwind(|| step("curl -sS http://127.0.0.1:8080"));
    assert!(refused.is_err());
}

#[test]
fn durations_are_masked_and_nothing_else() {
    assert_eq!(
        without_durations("finished in 12.34s; 17 passed in 0.5 s; port 8080"),
        "finished in #s; 17 passed in #s; port 8080"
    );
}

#[test]
fn versions_are_compared_up_to_semver_compatibility_and_registry_lists_are_left_out() {
    let day_one = "      Adding ureq v3 to dev-dependencies\n             Features as of v3.0.0:\n             - gzip\n     Locking 9 packages to latest Rust 1.95.0 compatible versions\n      Adding base64 v0.23.1\n";
    let day_two = "      Adding ureq v3 to dev-dependencies\n             Features as of v3.5.2:\n             - brotli\n             - gzip\n     Locking 11 packages to latest Rust 1.95.0 compatible versions\n      Adding base64 v0.23.4\n      Adding bytes v1.12.2\n";
    assert_eq!(comparable(day_one), comparable(day_two));
    // Another major version, or another command's outcome, is a difference.
    let other_major = day_one.replace("Features as of v3.0.0", "Features as of v2.12.1");
    assert_ne!(comparable(day_one), comparable(&other_major));
    let other_client = day_one.replace("Adding ureq v3", "Adding reqwest v3");
    assert_ne!(comparable(day_one), comparable(&other_client));
    assert_eq!(compatible("0.23.1-rc.1"), "0.23.x");
    assert_eq!(compatible("12.0.3"), "12.x");
}
