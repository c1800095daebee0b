//! `{{#lab-check-report NAME}}`: the report of `lab check --target` against a service started for
//! it, made while the book builds.
//!
//! `lab-serve` starts the built `lab serve` on a free loopback port (its database in a temporary folder, with
//! the two callers and the fault switch that `lab/targets/lab-serve.toml` expects), runs `lab check
//! --target lab/targets/lab-serve.toml --url URL` against it, stops the server, and shows both
//! commands and what the check printed. `lab-mcp-http` does the same with `lab mcp --transport
//! http` and `lab/targets/lab-mcp-http.toml`; `lab-mcp-stdio` starts nothing, since the check
//! starts the server its target file names (`lab`, this build, first on `PATH`). `NAME summary`
//! keeps the summary table and the closing line. `your-service` is `lab serve` checked with the
//! file "Check your own tool" ends with (`src/check-your-own-tool/service.toml`), as the reader
//! runs it: only `lab check --target service.toml` is shown, on a copy of the file that names the
//! server the build started. The check must pass (exit 0), or the build
//! fails: the book cannot show a passing report the lab did not produce.
//!
//! `planted-bug` is the failing report of the same chapter: `cargo run -p lab --example
//! planted_bug` (the team endpoint with keys and one planted bug) checked with
//! `src/check-your-own-tool/planted.toml`, both commands shown. It must exit 1 with the verdicts
//! the chapter explains (a FAIL, a WARN, a NOT COVERED), or the build fails. `NAME summary POINT...`
//! adds the named points' sub-checks, from the same run, to the summary.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long the check may run before the build fails.
const LIMIT: Duration = Duration::from_secs(120);

/// The port the shown commands name; the build serves on a free one and shows it as this.
const SHOWN_PORT: &str = "8080";

/// How a named report reaches what it checks.
enum Started {
    /// A server `lab ARGS` started in a temporary folder, which prints its URL first (after
    /// `listening on `, or alone); the check gets `--url URL`.
    Server(&'static [&'static str]),
    /// Nothing: the target file's stdio command is started by the check itself, with the lab's
    /// binary first on `PATH` so the file's `lab` is this build.
    ByTheCheck,
    /// One of the lab's examples, `cargo run -p lab --example NAME -- ARGS`, run as its build
    /// (cargo's compile lines, which depend on the machine, are not shown); it prints its URL
    /// first, as a server does.
    Example(&'static str, &'static [&'static str]),
}

/// What a run must end with, or the build fails: its exit status, and the verdict of each
/// point the chapter names (a chapter that explains a FAIL, a WARN and a NOT COVERED line
/// cannot go on explaining them once the run stops printing them).
struct Expected {
    exit: i32,
    verdicts: &'static [(&'static str, &'static str)],
}

/// A run that passes: exit status 0, whatever its verdicts.
const PASSES: Expected = Expected {
    exit: 0,
    verdicts: &[],
};

/// A service the directive can check: its name, how it is reached, the folder (from the
/// repository's root) the check runs in, and the target file, relative to that folder.
struct Service {
    name: &'static str,
    started: Started,
    folder: &'static str,
    target: &'static str,
    /// The reader's own file, checked as the reader checks it: the server is the one the reader
    /// already runs, so the block shows only `lab check --target FILE`, run on a copy of the file
    /// whose `base_url` (the shown port) names the server the build started.
    readers_file: bool,
    /// How the run must end.
    expected: Expected,
}

/// The services the directive can start, by name.
const SERVICES: &[Service] = &[
    Service {
        name: "lab-serve",
        started: Started::Server(&[
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
        ]),
        folder: "",
        target: "lab/targets/lab-serve.toml",
        readers_file: false,
        expected: PASSES,
    },
    // The reader's file, as "Check your own tool" ends it: `--init`'s file with the three fields
    // its calibration named, fixed (written by `lab/tests/it/calibration.rs`).
    Service {
        name: "your-service",
        started: Started::Server(&[
            "serve",
            "--port",
            SHOWN_PORT,
            "--caller",
            "alice=alice-token",
            "--caller",
            "bob=bob-token",
            "--database",
            "serve.sqlite",
        ]),
        folder: "src/check-your-own-tool",
        target: "service.toml",
        readers_file: true,
        expected: PASSES,
    },
    // "Check your own tool"'s failing report: the team endpoint with keys and one planted bug
    // (`lab/examples/planted_bug.rs`), checked with its own file as a reader would.
    Service {
        name: "planted-bug",
        started: Started::Example("planted_bug", &["--port", SHOWN_PORT]),
        folder: "src/check-your-own-tool",
        target: "planted.toml",
        readers_file: true,
        expected: Expected {
            exit: 1,
            verdicts: &[
                ("changed-payload", "FAIL"),
                ("key-forms", "WARN"),
                ("fault-between-effect-and-record", "NOT COVERED"),
            ],
        },
    },
    Service {
        name: "lab-mcp-stdio",
        started: Started::ByTheCheck,
        folder: "",
        target: "lab/targets/lab-mcp-stdio.toml",
        readers_file: false,
        expected: PASSES,
    },
    Service {
        name: "lab-mcp-http",
        started: Started::Server(&[
            "mcp",
            "--transport",
            "http",
            "--port",
            SHOWN_PORT,
            "--caller",
            "alice=alice-token",
            "--caller",
            "bob=bob-token",
            "--database",
            "mcp.sqlite",
        ]),
        folder: "",
        target: "lab/targets/lab-mcp-http.toml",
        readers_file: false,
        expected: PASSES,
    },
];

/// Stops the server when the directive ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The block for `NAME` (or `NAME summary`: the summary table and the last line only; `NAME
/// summary POINT...` adds those points' sub-checks, from the same run): the commands and the
/// report.
pub fn report(arguments: &str) -> Result<String> {
    let mut words = arguments.split_whitespace();
    let name = words.next().unwrap_or_default();
    let summary = match words.next() {
        None => false,
        Some("summary") => true,
        Some(other) => bail!("lab-check-report {name}: {other:?}: expected nothing or summary"),
    };
    let points: Vec<&str> = words.collect();
    let Some(service) = SERVICES.iter().find(|known| known.name == name) else {
        let known: Vec<&str> = SERVICES.iter().map(|known| known.name).collect();
        bail!(
            "lab-check-report: no service {name:?} (known: {})",
            known.join(", ")
        );
    };
    let folder = tempfile::tempdir().context("lab-check-report: making a temporary folder")?;
    let mut lines = Vec::new();
    let mut check_args = vec!["check", "--target", service.target];
    let mut server = None;
    let mut url = String::new();
    if let Some((shown, child, first_line)) = start(&service.started, folder.path())? {
        server = Some(child);
        url = first_line
            .strip_prefix("listening on ")
            .unwrap_or(&first_line)
            .to_owned();
        if !service.readers_file || matches!(service.started, Started::Example(..)) {
            lines.push(shown);
            lines.push(first_line);
        }
    }
    let mut run_in = crate::root().join(service.folder);
    if service.readers_file {
        run_in = readers_copy(&run_in, service.target, &url, folder.path())?;
    } else if !url.is_empty() {
        check_args.extend(["--url", url.as_str()]);
    }
    let binary = crate::shell::lab_binary()?;
    let (status, out, err) = run_bounded(binary, &check_args, &run_in)?;
    drop(server);
    expected(service, &check_args, status, &out, &err)?;
    lines.push(format!("$ lab {}", check_args.join(" ")));
    lines.extend(report_lines(&out, summary));
    if !points.is_empty() {
        // After the summary's `...`, before its closing line.
        let closing = lines.pop();
        lines.extend(point_lines(&out, &points)?);
        lines.extend(closing);
    }
    if service.expected.exit != 0 {
        lines.push("$ echo $?".to_owned());
        lines.push(service.expected.exit.to_string());
    }
    if !url.is_empty() && (!service.readers_file || matches!(service.started, Started::Example(..)))
    {
        lines.push("$ kill %1".to_owned());
    }
    let lines = shown_port(lines, &url);
    Ok(format!("```console\n{}\n```", lines.join("\n").trim_end()))
}

/// Starts what the service needs in `folder`: the command as shown, the running server, and the
/// first line it printed; `None` when the check starts it itself.
fn start(started: &Started, folder: &Path) -> Result<Option<(String, Server, String)>> {
    let (binary, args, shown) = match started {
        Started::ByTheCheck => return Ok(None),
        Started::Server(args) => (
            crate::shell::lab_binary()?.to_owned(),
            *args,
            format!("$ lab {} &", args.join(" ")),
        ),
        Started::Example(example, args) => (
            crate::shell::build_debug(
                &["--example", example],
                &format!("examples/{example}"),
                "the example service",
            )?,
            *args,
            format!(
                "$ cargo run -p lab --example {example} -- {} &",
                args.join(" ")
            ),
        ),
    };
    let (child, first_line) = start_server(&binary, args, folder)?;
    Ok(Some((shown, child, first_line)))
}

/// Fails unless the run ended as the service's [`Expected`] says.
fn expected(
    service: &Service,
    check_args: &[&str],
    status: Option<i32>,
    out: &str,
    err: &str,
) -> Result<()> {
    let command = format!("lab {}", check_args.join(" "));
    if status != Some(service.expected.exit) {
        bail!(
            "lab-check-report: `{command}` exited with {status:?}, not {}:\n{out}{err}",
            service.expected.exit
        );
    }
    for (point, verdict) in service.expected.verdicts {
        let row = out
            .lines()
            .find(|line| line.split_whitespace().next() == Some(point) && !line.contains(':'));
        let shown = row.map(|row| row[point.len()..].trim_start());
        if !shown.is_some_and(|rest| rest.starts_with(&format!("{verdict}  "))) {
            bail!(
                "lab-check-report {}: `{command}` no longer reports {point} as {verdict} \
                 (its summary row: {row:?}), and the chapter explains that verdict:\n{out}",
                service.name
            );
        }
    }
    Ok(())
}

/// The lines of each of `points` in the full report `out` (its verdict line and every
/// sub-check), each block followed by a `...` line.
fn point_lines(out: &str, points: &[&str]) -> Result<Vec<String>> {
    let all: Vec<&str> = out.lines().collect();
    let mut lines = Vec::new();
    for point in points {
        let heading = format!(" {point}: ");
        let Some(at) = all
            .iter()
            .position(|line| !line.starts_with(' ') && line.contains(&heading))
        else {
            bail!("lab-check-report: the report has no point {point:?}:\n{out}");
        };
        lines.push(all[at].to_owned());
        lines.extend(
            all[at + 1..]
                .iter()
                .take_while(|line| line.starts_with(' '))
                .map(|line| (*line).to_owned()),
        );
        lines.push("...".to_owned());
    }
    Ok(lines)
}

/// A copy of the reader's file `target` (from `folder`) in `into`, its shown address replaced by
/// `url`, the server the build started; returns `into`, where the check then runs.
fn readers_copy(folder: &Path, target: &str, url: &str, into: &Path) -> Result<std::path::PathBuf> {
    let path = folder.join(target);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("lab-check-report: reading {}", path.display()))?;
    let shown = format!("\"http://127.0.0.1:{SHOWN_PORT}\"");
    if !text.contains(&shown) {
        bail!(
            "lab-check-report: {} has no base_url {shown}, the address its chapter shows",
            path.display()
        );
    }
    std::fs::write(into.join(target), text.replace(&shown, &format!("{url:?}")))
        .context("lab-check-report: writing the copy of the reader's file")?;
    Ok(into.to_owned())
}

/// Starts `lab ARGS` in `folder` on a free port (for [`SHOWN_PORT`]), and reads the first line it
/// prints, which names its URL. The database is a file of the folder, named relative to it, so
/// the command shown is the command run.
fn start_server(binary: &Path, serve_args: &[&str], folder: &Path) -> Result<(Server, String)> {
    let real_args: Vec<&str> = serve_args
        .iter()
        .map(|arg| if *arg == SHOWN_PORT { "0" } else { arg })
        .collect();
    let mut child = Command::new(binary)
        .args(&real_args)
        .current_dir(folder)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("lab-check-report: starting the server")?;
    let stdout = child.stdout.take().context("the server's stdout")?;
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .context("lab-check-report: reading the server's first line")?;
    let line = line.trim().to_owned();
    if !line
        .trim_start_matches("listening on ")
        .starts_with("http://")
    {
        bail!("lab-check-report: the server printed {line:?} first");
    }
    Ok((server, line))
}

/// The report's lines: all of them, or for a summary the heading lines, the calibration's
/// heading (its steps left out) and the table, then the closing line.
fn report_lines(out: &str, summary: bool) -> Vec<String> {
    let all: Vec<&str> = out.lines().collect();
    if !summary {
        return all.iter().map(|line| (*line).to_owned()).collect();
    }
    let table_start = all
        .iter()
        .position(|line| line.starts_with("point "))
        .unwrap_or(all.len().min(3));
    let table_end = all
        .iter()
        .enumerate()
        .skip(table_start)
        .find(|(_, line)| line.is_empty())
        .map_or(all.len(), |(i, _)| i);
    let mut lines: Vec<String> = all[..all.len().min(3)]
        .iter()
        .map(|l| (*l).to_owned())
        .collect();
    if let Some(calibration) = all.iter().find(|line| line.starts_with("calibration: ")) {
        lines.push((*calibration).to_owned());
        lines.push(String::new());
    }
    lines.extend(all[table_start..table_end].iter().map(|l| (*l).to_owned()));
    lines.push("...".to_owned());
    lines.extend(all.last().map(|l| (*l).to_owned()));
    lines
}

/// The build serves on a free port; the block shows the port its commands name.
fn shown_port(lines: Vec<String>, url: &str) -> Vec<String> {
    let authority = url.trim_start_matches("http://").split('/').next();
    let Some((_, port)) = authority.and_then(|authority| authority.rsplit_once(':')) else {
        return lines;
    };
    let (real, shown) = (
        format!("127.0.0.1:{port}"),
        format!("127.0.0.1:{SHOWN_PORT}"),
    );
    lines
        .iter()
        .map(|line| line.replace(&real, &shown))
        .collect()
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
    // A target file's stdio command names `lab`: this build's, first on PATH.
    if let Some(bin) = binary.parent() {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![bin.to_owned()];
        paths.extend(std::env::split_paths(&path));
        command.env("PATH", std::env::join_paths(paths)?);
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

    /// Asserts that `block` holds each of `parts`, showing the block when one is missing.
    fn holds_all(block: &str, parts: &[&str]) {
        for part in parts {
            assert!(block.contains(part), "no {part:?} in:\n{block}");
        }
    }

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
        holds_all(
            &block,
            &[
                "\nlistening on http://127.0.0.1:8080\n",
                "\n$ lab check --target lab/targets/lab-serve.toml --url http://127.0.0.1:8080\n",
                "every MUST and LAB sub-check passed",
                "\ncalibration: the file describes the service (",
            ],
        );
        assert!(block.ends_with("\n$ kill %1\n```"), "{block}");
        assert!(!block.contains("\nFAIL "), "{block}");
    }

    #[test]
    fn the_lab_mcp_reports_pass_over_stdio_and_http_and_a_summary_keeps_the_table() {
        let stdio = report("lab-mcp-stdio summary").unwrap();
        assert!(
            stdio.starts_with("```console\n$ lab check --target lab/targets/lab-mcp-stdio.toml\n"),
            "{stdio}"
        );
        holds_all(
            &stdio,
            &[
                "\nreconnect ",
                "\ncalibration: the file describes the service (",
                "every MUST and LAB sub-check passed",
            ],
        );
        assert!(!stdio.contains("count-rises"), "{stdio}");
        assert!(!stdio.contains("PASS reconnect:"), "{stdio}");
        let http = report("lab-mcp-http").unwrap();
        assert!(http.contains("\nhttp://127.0.0.1:8080"), "{http}");
        assert!(!stdio.contains("kill %1"), "{stdio}");
        assert!(http.contains("PASS cancelled:"), "{http}");
        assert!(report("lab-mcp-http all").is_err());
    }

    /// The reader's file covers fewer points than the lab's own (no fault hook, no server error,
    /// no other endpoint), and the summary says so; it still passes, run from its own folder.
    #[test]
    fn the_readers_file_is_checked_from_its_folder_and_its_summary_shows_what_it_leaves_out() {
        let block = report("your-service summary").unwrap();
        // The reader's server is already running: only the check is shown, as the reader types it.
        assert!(
            block.starts_with("```console\n$ lab check --target service.toml\n"),
            "{block}"
        );
        holds_all(
            &block,
            &[
                "\nlab check --target service.toml (http://127.0.0.1:8080)\n",
                "\nfault-between-effect-and-record  NOT COVERED",
                "\nretry-replays  ",
                "every MUST and LAB sub-check passed",
            ],
        );
        assert!(!block.contains("kill %1"), "{block}");
        assert!(!block.contains("PASS retry-replays:"), "{block}");
    }

    /// "Check your own tool" explains a FAIL, a WARN and a NOT COVERED line of this run, from a
    /// real run of the planted bug: the block shows both commands, the exit status, the summary
    /// and the failed point's sub-checks (a SHOULD among them, as a WARN's are marked).
    #[test]
    fn the_planted_bug_fails_warns_and_leaves_a_point_not_covered() {
        let block = report("planted-bug summary changed-payload").unwrap();
        assert!(
            block.starts_with(
                "```console\n$ cargo run -p lab --example planted_bug -- --port 8080 &\n\
                 listening on http://127.0.0.1:8080\n$ lab check --target planted.toml\n"
            ),
            "{block}"
        );
        holds_all(
            &block,
            &[
                "\nFAIL changed-payload: ",
                "answered as a replay of the first request",
                "\n  FAIL SHOULD §2.7 — ",
                "\nfault-between-effect-and-record  NOT COVERED  ",
                "\nkey-forms ",
                "failed: changed-payload",
            ],
        );
        let warned = block
            .lines()
            .find(|line| line.starts_with("key-forms "))
            .unwrap();
        assert!(warned.contains(" WARN "), "{block}");
        assert!(block.ends_with("\n$ echo $?\n1\n$ kill %1\n```"), "{block}");
    }

    /// A run that stops printing a verdict the chapter explains fails the build: each of the
    /// three rows changed in turn is caught, and so is another exit status.
    #[test]
    fn a_run_that_stops_showing_an_explained_verdict_fails_the_build() {
        let service = SERVICES.iter().find(|s| s.name == "planted-bug").unwrap();
        let row = |point: &str, verdict: &str| format!("{point:31}  {verdict:11}  3/4  0/1\n");
        let table = [
            ("changed-payload", "FAIL"),
            ("key-forms", "WARN"),
            ("fault-between-effect-and-record", "NOT COVERED"),
        ];
        let out: String = table.iter().map(|(p, v)| row(p, v)).collect();
        expected(service, &["check"], Some(1), &out, "").unwrap();
        let err = expected(service, &["check"], Some(0), &out, "").unwrap_err();
        assert!(err.to_string().contains("not 1"), "{err}");
        for (point, verdict) in table {
            let changed = out.replace(&row(point, verdict), &row(point, "PASS"));
            let err = expected(service, &["check"], Some(1), &changed, "").unwrap_err();
            assert!(
                err.to_string().contains(&format!("{point} as {verdict}")),
                "{err}"
            );
        }
    }

    #[test]
    fn every_service_names_a_target_file_that_exists() {
        for service in SERVICES {
            let file = crate::root().join(service.folder).join(service.target);
            assert!(file.is_file(), "{}: {}", service.name, file.display());
        }
    }
}
