//! `{{#lab-session NAME}}`: a reader's terminal session against a service, run while the book
//! builds: a service started in the background (`... &`), the commands the chapter tells the
//! reader to type, each followed by what it printed, and `kill %1`.
//!
//! The sessions are listed here by name, with the exact words of each command and the exit status
//! it must end with; another status fails the build, as with `{{#lab-shell}}`. Each runs in a
//! fresh temporary folder, with no `LAB_*` variables of the builder's shell. The commands name
//! port 8080, as a reader's would; the build starts the service on a free port instead, sends
//! the commands to that port, and shows the port as 8080 again. A command of the lab is shown
//! as `lab ...` (the installed command) and run as the workspace's build of it; the team
//! exercise's example service is shown as the `cargo run` that starts it and run as its build,
//! with cargo's own compile lines, which depend on the machine, left out.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long one command may run before the build fails.
const LIMIT: Duration = Duration::from_secs(120);

/// The port the chapters' commands name.
const SHOWN_PORT: &str = "8080";

/// What a command runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Program {
    /// The `lab` command.
    Lab,
    /// The team exercise's starting service, `cargo run -p lab --example team_endpoint --`.
    TeamEndpoint,
}

/// One command: what it runs, its words, and the exit status it must end with.
type Line = (Program, &'static [&'static str], i32);

/// A session: the service in the background, then the commands.
struct Session {
    name: &'static str,
    service: (Program, &'static [&'static str]),
    commands: &'static [Line],
}

const SESSIONS: &[Session] = &[
    Session {
        name: "http-suite",
        service: (
            Program::Lab,
            &[
                "serve",
                "--port",
                "8080",
                "--caller",
                "support-agent=token-a",
                "--admin-token",
                "admin-1",
                "--faults",
            ],
        ),
        commands: &[(
            Program::Lab,
            &[
                "--backend",
                "http",
                "--url",
                "http://127.0.0.1:8080",
                "--token",
                "token-a",
                "--admin-token",
                "admin-1",
            ],
            0,
        )],
    },
    Session {
        name: "runner-held",
        service: (
            Program::Lab,
            &[
                "serve",
                "--port",
                "8080",
                "--caller",
                "support-agent=token-a",
            ],
        ),
        commands: &[
            (
                Program::Lab,
                &[
                    "runner",
                    "--database",
                    "runner.sqlite",
                    "--url",
                    "http://127.0.0.1:8080",
                    "--token",
                    "wrong",
                    "--caller",
                    "support-agent",
                    "--key",
                    "approved-ticket-001",
                    "--payload",
                    r#"{"title": "Investigate a synthetic queue backlog"}"#,
                ],
                5,
            ),
            (
                Program::Lab,
                &[
                    "runner",
                    "--database",
                    "runner.sqlite",
                    "--url",
                    "http://127.0.0.1:8080",
                    "--token",
                    "token-a",
                    "--caller",
                    "support-agent",
                ],
                0,
            ),
        ],
    },
    Session {
        name: "team-endpoint",
        service: (Program::TeamEndpoint, &["--port", "8080"]),
        commands: &[
            (
                Program::Lab,
                &[
                    "check",
                    "--init",
                    "http://127.0.0.1:8080",
                    "--target",
                    "team.toml",
                ],
                0,
            ),
            (Program::Lab, &["check", "--target", "team.toml"], 1),
        ],
    },
];

/// Kills the background service when the session ends, however it ends.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A word as a shell must be given it: quoted when it holds a space or a quote.
fn shell_word(word: &str) -> String {
    if word
        .chars()
        .any(|c| c.is_whitespace() || "\"'{}$`\\|;&*?".contains(c))
    {
        format!("'{}'", word.replace('\'', r"'\''"))
    } else {
        word.to_owned()
    }
}

/// The command as the reader types it, wrapped with `\` before 76 characters.
fn shown(program: Program, args: &[&str], background: bool) -> String {
    let mut words: Vec<String> = match program {
        Program::Lab => vec!["lab".into()],
        Program::TeamEndpoint => [
            "cargo",
            "run",
            "-p",
            "lab",
            "--example",
            "team_endpoint",
            "--",
        ]
        .map(String::from)
        .to_vec(),
    };
    words.extend(args.iter().map(|w| shell_word(w)));
    if background {
        words.push("&".into());
    }
    let mut lines = vec![format!("$ {}", words[0])];
    for word in &words[1..] {
        let last = lines.last_mut().expect("one line");
        if last.len() + word.len() + 3 > 76 {
            last.push_str(" \\");
            lines.push(format!("    {word}"));
        } else {
            last.push(' ');
            last.push_str(word);
        }
    }
    lines.join("\n")
}

/// The program's binary, built once.
fn binary(program: Program) -> Result<PathBuf> {
    match program {
        Program::Lab => Ok(crate::shell::lab_binary()?.to_owned()),
        Program::TeamEndpoint => crate::shell::build_debug(
            &["--example", "team_endpoint"],
            "examples/team_endpoint",
            "the team endpoint",
        ),
    }
}

fn command(binary: &Path, args: &[String], folder: &Path) -> Command {
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
    command
}

/// The session's block.
pub fn run(name: &str) -> Result<String> {
    let Some(session) = SESSIONS.iter().find(|s| s.name == name) else {
        let known: Vec<&str> = SESSIONS.iter().map(|s| s.name).collect();
        bail!(
            "lab-session: no session {name:?} (known: {})",
            known.join(", ")
        );
    };
    run_session(session)
}

fn run_session(session: &Session) -> Result<String> {
    let name = session.name;
    let folder = tempfile::tempdir().context("lab-session: making a temporary folder")?;
    let (program, args) = session.service;
    let mut serve_args: Vec<String> = args.iter().map(|w| (*w).to_owned()).collect();
    let port_at = serve_args
        .iter()
        .position(|w| w == "--port")
        .context("lab-session: the service is started with --port")?;
    serve_args[port_at + 1] = "0".to_owned();
    let mut child = command(&binary(program)?, &serve_args, folder.path())
        .stderr(Stdio::null())
        .spawn()
        .context("lab-session: starting the service")?;
    let stdout = child.stdout.take().context("the service's output")?;
    let service = Background(child);
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .context("lab-session: reading the service's first line")?;
    let port = first
        .trim()
        .strip_prefix("listening on http://127.0.0.1:")
        .with_context(|| format!("lab-session: the service printed {first:?} first"))?
        .to_owned();
    let to_reader = |text: &str| {
        let mut text = text.replace(
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{SHOWN_PORT}"),
        );
        for form in [
            folder.path().to_owned(),
            folder.path().canonicalize().unwrap_or_default(),
        ] {
            let form = form.display().to_string();
            if !form.is_empty() {
                text = text.replace(&form, ".");
            }
        }
        text
    };
    let mut lines = vec![shown(program, args, true), to_reader(first.trim_end())];
    for (program, args, expected) in session.commands {
        let real: Vec<String> = args
            .iter()
            .map(|w| {
                w.replace(
                    &format!("127.0.0.1:{SHOWN_PORT}"),
                    &format!("127.0.0.1:{port}"),
                )
            })
            .collect();
        let (status, out, err) = bounded(command(&binary(*program)?, &real, folder.path()))?;
        if status != *expected {
            bail!(
                "lab-session {name}: `{}` exited with status {status}, not {expected}:\n{out}{err}",
                args.join(" ")
            );
        }
        lines.push(shown(*program, args, false));
        lines.extend(to_reader(&out).lines().map(str::to_owned));
        lines.extend(to_reader(&err).lines().map(str::to_owned));
        if status != 0 {
            lines.push("$ echo $?".to_owned());
            lines.push(status.to_string());
        }
    }
    drop(service);
    lines.push("$ kill %1".to_owned());
    Ok(format!("```console\n{}\n```", lines.join("\n")))
}

/// `block` indented as the directive was in `before` (the text up to it), so a session inside a
/// list item stays in the item.
pub fn indented(block: &str, before: &str) -> String {
    let line_start = before.rfind('\n').map_or(0, |at| at + 1);
    let indent = &before[line_start..];
    if indent.is_empty() || !indent.chars().all(|c| c == ' ') {
        return block.to_owned();
    }
    block.replace('\n', &format!("\n{indent}"))
}

/// Runs `command` to its end, bounded by [`LIMIT`]: its status and both outputs.
fn bounded(mut command: Command) -> Result<(i32, String, String)> {
    let child = command.spawn().context("lab-session: starting a command")?;
    let started = Instant::now();
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    while !waiter.is_finished() {
        if started.elapsed() > LIMIT {
            // The command is this directive's own child, ended by its id.
            let _ = Command::new("kill").arg(pid.to_string()).status();
            bail!(
                "lab-session: a command ran longer than {} s",
                LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = waiter
        .join()
        .map_err(|_| anyhow::anyhow!("lab-session: the waiting thread panicked"))??;
    let status = output
        .status
        .code()
        .context("lab-session: a command was ended by a signal")?;
    Ok((
        status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_shown_as_typed_quoted_and_wrapped() {
        assert_eq!(
            shown(Program::Lab, &["--payload", r#"{"title": "a"}"#], false),
            r#"$ lab --payload '{"title": "a"}'"#
        );
        let long = shown(Program::TeamEndpoint, &["--port", "8080"], true);
        assert_eq!(
            long,
            "$ cargo run -p lab --example team_endpoint -- --port 8080 &"
        );
        let many = ["--caller"; 20];
        for line in shown(Program::Lab, &many, false).lines() {
            assert!(line.len() <= 76, "{line}");
        }
    }

    #[test]
    fn a_session_in_a_list_item_stays_in_it() {
        assert_eq!(indented("a\nb", "1. x\n   "), "a\n   b");
        assert_eq!(indented("a\nb", "text "), "a\nb");
        assert_eq!(indented("a\nb", ""), "a\nb");
    }

    #[test]
    fn an_unknown_session_is_refused_with_the_known_names() {
        let err = run("nginx").unwrap_err().to_string();
        assert!(
            err.contains("http-suite") && err.contains("team-endpoint"),
            "{err}"
        );
    }

    #[test]
    fn the_team_endpoint_session_is_a_real_failing_check_on_the_shown_port() {
        let block = run("team-endpoint").unwrap();
        assert!(
            block.contains("\nlistening on http://127.0.0.1:8080\n"),
            "{block}"
        );
        assert!(
            block.contains("\n$ lab check --target team.toml\n"),
            "{block}"
        );
        assert!(block.contains("FAIL"), "{block}");
        assert!(block.ends_with("$ echo $?\n1\n$ kill %1\n```"), "{block}");
        assert!(!block.contains("/tmp/"), "{block}");
    }

    #[test]
    fn a_status_other_than_the_sessions_fails_the_build() {
        let wrong = Session {
            name: "wrong",
            service: SESSIONS[0].service,
            commands: &[(
                Program::Lab,
                &[
                    "--backend",
                    "http",
                    "--url",
                    "http://127.0.0.1:8080",
                    "--token",
                    "token-a",
                    "--admin-token",
                    "admin-1",
                ],
                1,
            )],
        };
        let err = run_session(&wrong).unwrap_err().to_string();
        assert!(err.contains("exited with status 0, not 1"), "{err}");
        // The runner's first command must exit 5 (held); the session says so, and a real run
        // agrees, or this fails.
        let block = run("runner-held").unwrap();
        assert!(block.contains("$ echo $?\n5\n"), "{block}");
    }
}
