//! `{{#lab-shell [status=N] lab ARGS}}`: a command a reader types, followed by what it really
//! printed, made while the book builds.
//!
//! The build runs the workspace's `lab` binary (built once per build with `cargo build -p lab`, the
//! binary `cargo run -p lab` runs) with ARGS, in a fresh temporary folder, with no input and no
//! `LAB_*` variables of the builder's shell. The block shows the command as the reader types it
//! (`lab ARGS`, the command `cargo install --path lab` puts on the reader's `PATH`), then standard
//! output, then standard error.
//!
//! The command must exit with status N (0 when `status=` is not given); any other status fails the
//! build, so a chapter cannot show a failure it did not mean to, nor hide one. A non-zero status is
//! shown after the output, as a shell prints it with `echo $?`. The temporary folder's path is
//! shown as `.`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// How long one command may run before the build fails.
const LIMIT: Duration = Duration::from_secs(120);

/// One `{{#lab-shell ...}}` directive, parsed.
#[derive(Debug, PartialEq, Eq)]
struct Invocation {
    status: i32,
    args: Vec<String>,
}

/// Reads `[status=N] lab ARGS`. Arguments are split at whitespace; a reader's shell would split
/// them the same way, so quotes are refused rather than interpreted.
fn parse(text: &str) -> Result<Invocation> {
    let mut words = text.split_whitespace().peekable();
    let mut status = 0;
    if let Some(value) = words.peek().and_then(|w| w.strip_prefix("status=")) {
        status = value
            .parse()
            .with_context(|| format!("lab-shell: `status={value}` is not an exit status"))?;
        words.next();
    }
    match words.next() {
        Some("lab") => {}
        other => bail!(
            "lab-shell runs the lab: write `{{{{#lab-shell lab ARGS}}}}`, not `{}`",
            other.unwrap_or("")
        ),
    }
    let args: Vec<String> = words.map(str::to_owned).collect();
    if let Some(quoted) = args
        .iter()
        .find(|a| a.contains(['"', '\'', '`', '$', '|', ';']))
    {
        bail!(
            "lab-shell: `{quoted}` needs a shell to mean what it says; the directive passes words as they are"
        );
    }
    Ok(Invocation { status, args })
}

/// The block for `text`: the command, then its output.
pub fn run(text: &str) -> Result<String> {
    let invocation = parse(text)?;
    let binary = lab_binary()?;
    let folder = tempfile::tempdir().context("lab-shell: making a temporary folder")?;
    let (status, stdout, stderr) = execute(binary, &invocation.args, folder.path())?;
    if status != invocation.status {
        bail!(
            "lab-shell: `lab {}` exited with status {status}, not {} as the chapter says:\n{stdout}{stderr}",
            invocation.args.join(" "),
            invocation.status
        );
    }
    let shown = |output: &str| tidy(output, folder.path());
    Ok(block(&invocation, &shown(&stdout), &shown(&stderr), status))
}

fn block(invocation: &Invocation, stdout: &str, stderr: &str, status: i32) -> String {
    let mut command = String::from("$ lab");
    if !invocation.args.is_empty() {
        command = format!("{command} {}", invocation.args.join(" "));
    }
    let mut lines = vec![command];
    lines.extend(stdout.lines().map(str::to_owned));
    lines.extend(stderr.lines().map(str::to_owned));
    if status != 0 {
        lines.push("$ echo $?".to_owned());
        lines.push(status.to_string());
    }
    format!("```console\n{}\n```", lines.join("\n").trim_end())
}

/// The output as the reader would see it: the temporary folder is the reader's `.`.
fn tidy(output: &str, folder: &Path) -> String {
    let mut text = output.to_owned();
    for form in [folder.to_owned(), folder.canonicalize().unwrap_or_default()] {
        let form = form.display().to_string();
        if !form.is_empty() {
            text = text.replace(&form, ".");
        }
    }
    text
}

/// Runs `binary ARGS` in `folder`, bounded by [`LIMIT`]; returns the status and both outputs.
fn execute(binary: &Path, args: &[String], folder: &Path) -> Result<(i32, String, String)> {
    let mut command = Command::new(binary);
    command
        .args(args)
        .current_dir(folder)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LAB_") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("lab-shell: starting {}", binary.display()))?;
    let started = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "lab-shell: `lab {}` ran longer than {} s",
                args.join(" "),
                LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output()?;
    let status = output
        .status
        .code()
        .ok_or_else(|| anyhow!("lab-shell: `lab {}` was ended by a signal", args.join(" ")))?;
    Ok((
        status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// The `lab` binary `cargo run -p lab` runs, built once per process.
pub(crate) fn lab_binary() -> Result<&'static Path> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| build().map_err(|err| format!("{err:#}")))
        .as_deref()
        .map_err(|err| anyhow!("lab-shell: {err}"))
}

fn build() -> Result<PathBuf> {
    build_debug(&["--bin", "lab"], "lab", "the lab binary")
}

/// Builds `-p lab TARGET_ARGS` in debug and returns the binary at `target/debug/PATH`; `what`
/// names it in errors. Output goes to standard error: in `cargo xtask preprocess`, standard
/// output is the book.
pub(crate) fn build_debug(target_args: &[&str], path: &str, what: &str) -> Result<PathBuf> {
    let root = crate::root();
    let status = crate::cargo()
        .args(["build", "-q", "-p", "lab"])
        .args(target_args)
        .current_dir(&root)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("building {what}"))?;
    if !status.success() {
        bail!("building {what} failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let binary = target.join("debug").join(path);
    if !binary.exists() {
        bail!("no {what} at {} after the build", binary.display());
    }
    Ok(binary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directive_names_the_lab_its_arguments_and_the_status_it_expects() {
        assert_eq!(
            parse("lab --fixture f.json").unwrap(),
            Invocation {
                status: 0,
                args: vec!["--fixture".into(), "f.json".into()]
            }
        );
        assert_eq!(parse("status=2 lab x").unwrap().status, 2);
        for wrong in [
            "ls -l",
            "",
            "status=two lab",
            "lab --title 'a b'",
            "lab | tee x",
        ] {
            assert!(parse(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn the_block_shows_the_command_the_output_and_a_failing_status() {
        let invocation = parse("status=2 lab --fixture missing.json").unwrap();
        let text = block(&invocation, "", "error: no file\n", 2);
        assert_eq!(
            text,
            "```console\n$ lab --fixture missing.json\nerror: no file\n$ echo $?\n2\n```"
        );
        let ok = block(&parse("lab").unwrap(), "a\nb\n", "", 0);
        assert_eq!(ok, "```console\n$ lab\na\nb\n```");
    }

    #[test]
    fn a_real_run_is_shown_and_an_unexpected_status_fails_the_build() {
        let text = run("lab --output results.json").unwrap();
        let pass = format!("\nPASS: {} scenarios\n```", lab::suite::SCENARIOS.len());
        assert!(text.contains(&pass), "{text}");
        let err = run("lab --fixture missing.json").unwrap_err().to_string();
        assert!(err.contains("exited with status 2, not 0"), "{err}");
        let shown = run("status=2 lab --fixture missing.json").unwrap();
        assert!(shown.ends_with("$ echo $?\n2\n```"), "{shown}");
        assert!(!shown.contains("/tmp/"), "{shown}");
    }
}
