//! `{{#lab-check-report NAME}}`: the report of `lab check --target` against a service started for
//! it, made while the book builds.
//!
//! `lab-serve` starts the built `lab serve` on a free loopback port (its database in a temporary folder, with
//! the two callers and the fault switch that `lab/targets/lab-serve.toml` expects), runs `lab check
//! --target lab/targets/lab-serve.toml --url URL` against it, stops the server, and shows both
//! commands and what the check printed. The check must pass (exit 0), or the build fails: the
//! book cannot show a passing report the lab did not produce.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long the check may run before the build fails.
const LIMIT: Duration = Duration::from_secs(120);

/// The port the shown commands name; the build serves on a free one and shows it as this.
const SHOWN_PORT: &str = "8080";

/// The services the directive can start, by name: the `lab serve` arguments and the target file.
const SERVICES: &[(&str, &[&str], &str)] = &[(
    "lab-serve",
    &[
        "serve",
        "--port",
        SHOWN_PORT,
        "--caller",
        "alice=alice-token",
        "--caller",
        "bob=bob-token",
        "--faults",
        "--database",
        "serve.sqlite",
    ],
    "lab/targets/lab-serve.toml",
)];

/// Stops the server when the directive ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The block for `name`: the two commands and the report.
pub fn report(name: &str) -> Result<String> {
    let Some((_, serve_args, target)) = SERVICES.iter().find(|(known, _, _)| *known == name) else {
        let known: Vec<&str> = SERVICES.iter().map(|(known, _, _)| *known).collect();
        bail!(
            "lab-check-report: no service {name:?} (known: {})",
            known.join(", ")
        );
    };
    let binary = crate::shell::lab_binary()?;
    let folder = tempfile::tempdir().context("lab-check-report: making a temporary folder")?;
    // The database is a file of the temporary folder, named relative to it, so the command
    // shown is the command run.
    let real_args: Vec<&str> = serve_args
        .iter()
        .map(|arg| if *arg == SHOWN_PORT { "0" } else { arg })
        .collect();
    let mut child = Command::new(binary)
        .args(&real_args)
        .current_dir(folder.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("lab-check-report: starting lab serve")?;
    let stdout = child.stdout.take().context("lab serve's stdout")?;
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .context("lab-check-report: reading lab serve's first line")?;
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .with_context(|| format!("lab-check-report: lab serve printed {line:?} first"))?
        .to_owned();
    let root = crate::root();
    let check_args = ["check", "--target", target, "--url", &url];
    let (status, out, err) = run_bounded(binary, &check_args, &root)?;
    drop(server);
    if status != Some(0) {
        bail!(
            "lab-check-report: `lab {}` exited with {status:?}:\n{out}{err}",
            check_args.join(" ")
        );
    }
    let port = url.rsplit(':').next().unwrap_or_default();
    let shown = |text: &str| {
        text.replace(
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{SHOWN_PORT}"),
        )
    };
    let mut lines = vec![format!("$ lab {} &", serve_args.join(" "))];
    lines.push(shown(line.trim()));
    lines.push(shown(&format!("$ lab {}", check_args.join(" "))));
    lines.extend(out.lines().map(shown));
    lines.push("$ kill %1".to_owned());
    Ok(format!("```console\n{}\n```", lines.join("\n").trim_end()))
}

/// Runs `binary ARGS` in `folder`, bounded by [`LIMIT`].
fn run_bounded(
    binary: &Path,
    args: &[&str],
    folder: &Path,
) -> Result<(Option<i32>, String, String)> {
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
    let child = command
        .spawn()
        .context("lab-check-report: starting lab check")?;
    let started = Instant::now();
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    while !waiter.is_finished() {
        if started.elapsed() > LIMIT {
            // The check is this directive's own child, ended by its id.
            let _ = Command::new("kill").arg(pid.to_string()).status();
            bail!(
                "lab-check-report: `lab {}` ran longer than {} s",
                args.join(" "),
                LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = waiter
        .join()
        .map_err(|_| anyhow::anyhow!("lab-check-report: the waiting thread panicked"))??;
    Ok((
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_service_is_refused_with_the_known_names() {
        let err = report("nginx").unwrap_err().to_string();
        assert!(err.contains("lab-serve"), "{err}");
    }

    #[test]
    fn the_lab_serve_report_is_a_real_passing_run_with_both_commands() {
        let block = report("lab-serve").unwrap();
        assert!(
            block.starts_with("```console\n$ lab serve --port 8080 --caller"),
            "{block}"
        );
        assert!(
            block.contains("\nlistening on http://127.0.0.1:8080\n"),
            "{block}"
        );
        assert!(
            block.contains(
                "\n$ lab check --target lab/targets/lab-serve.toml --url http://127.0.0.1:8080\n"
            ),
            "{block}"
        );
        assert!(
            block.contains("every MUST and LAB sub-check passed"),
            "{block}"
        );
        assert!(!block.contains("\nFAIL "), "{block}");
    }

    #[test]
    fn every_service_names_a_target_file_that_exists() {
        for (name, _, target) in SERVICES {
            assert!(crate::root().join(target).is_file(), "{name}: {target}");
        }
    }
}
