//! Where the PostgreSQL tests find a server: `LAB_POSTGRES_URL`, or a throwaway cluster started
//! from the installed server binaries, or nowhere (a loud skip, or a failure under
//! `LAB_REQUIRE_POSTGRES=1`).
//!
//! The throwaway cluster is started once per test binary run, in a fresh temporary folder, listening
//! only on 127.0.0.1 on a free port, with its Unix socket in that folder. It is stopped
//! (`pg_ctl stop -m immediate`) and its folder deleted when the test binary exits, whether tests
//! passed, failed or panicked. If the binary dies without running its exit handlers (killed, or an
//! abort), a watcher process started with the cluster notices its pipe close and does the same.

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Names the variable that points the tests at an existing server.
pub const URL_VARIABLE: &str = "LAB_POSTGRES_URL";
/// Names the variable that turns a missing server into a failure.
pub const REQUIRE_VARIABLE: &str = "LAB_REQUIRE_POSTGRES";

/// A server for one test, held for the test's whole run: the PostgreSQL tests run one at a time,
/// so connection counts stay within a shared server's limit and timings are not skewed by each
/// other.
pub struct Server {
    /// A connection URL for the server.
    pub url: &'static str,
    _one_at_a_time: MutexGuard<'static, ()>,
}

/// The server for `test`, or `None` after printing a loud skip line.
///
/// # Panics
/// When `LAB_REQUIRE_POSTGRES=1` and there is no server, or when the server binaries exist but
/// the cluster does not start: both are failures, not skips.
pub fn server(test: &str) -> Option<Server> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let url = match url() {
        Ok(Some(url)) => url,
        Ok(None) if std::env::var(REQUIRE_VARIABLE).as_deref() == Ok("1") => panic!(
            "{REQUIRE_VARIABLE}=1, but there is no PostgreSQL server: set {URL_VARIABLE} to a \
             connection URL, or install the server binaries (Debian: apt-get install postgresql)"
        ),
        Ok(None) => {
            // Straight to the process's stderr: libtest captures eprintln! and shows it only for
            // failing tests, and a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED: {test}: no PostgreSQL server. Set {URL_VARIABLE}=postgresql://... \
                 or install the server binaries (initdb, pg_ctl) so the tests can start one; \
                 {REQUIRE_VARIABLE}=1 makes this a failure ***\n"
            );
            return None;
        }
        Err(problem) => panic!("{problem}"),
    };
    // A test that panicked while holding the lock leaves nothing behind that the next one needs.
    let guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Some(Server {
        url,
        _one_at_a_time: guard,
    })
}

/// The URL to test against: the variable's, or the throwaway cluster's (started on first use).
fn url() -> Result<Option<&'static str>, &'static str> {
    static URL: OnceLock<Result<Option<String>, String>> = OnceLock::new();
    let found = URL.get_or_init(|| {
        if let Ok(url) = std::env::var(URL_VARIABLE)
            && !url.trim().is_empty()
        {
            return Ok(Some(url));
        }
        let Some(bin) = server_binaries() else {
            return Ok(None);
        };
        Cluster::start(&bin).map(|cluster| {
            let url = cluster.url.clone();
            // Stays set until the exit handler takes it.
            *CLUSTER.lock().unwrap_or_else(|p| p.into_inner()) = Some(cluster);
            // SAFETY: `stop_cluster_at_exit` is an `extern "C" fn()` that never unwinds (it only
            // runs commands and ignores their errors), as atexit requires.
            unsafe {
                libc::atexit(stop_cluster_at_exit);
            }
            Some(url)
        })
    });
    match found {
        Ok(url) => Ok(url.as_deref()),
        Err(problem) => Err(problem.as_str()),
    }
}

static CLUSTER: Mutex<Option<Cluster>> = Mutex::new(None);

extern "C" fn stop_cluster_at_exit() {
    let taken = CLUSTER.lock().map(|mut slot| slot.take());
    if let Ok(Some(cluster)) = taken {
        drop(cluster);
    }
}

/// The folder holding `initdb` and `pg_ctl`: the newest `/usr/lib/postgresql/*/bin` (Debian's
/// layout), else the folder of an `initdb` on the `PATH`.
fn server_binaries() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
    })
}

/// A running throwaway cluster. Dropping it stops the server and deletes its folder.
struct Cluster {
    url: String,
    bin: PathBuf,
    folder: PathBuf,
    /// initdb refuses to run as root, so as root the server runs as the `postgres` user.
    as_postgres: bool,
    /// Holds the write end of the watcher's pipe; the watcher acts when it closes.
    _watcher: Option<Child>,
}

impl Cluster {
    fn start(bin: &Path) -> Result<Cluster, String> {
        let as_postgres = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        let folder = tempfile::Builder::new()
            .prefix("lab-postgres-")
            .tempdir()
            .map_err(|err| format!("cannot create a folder for the test cluster: {err}"))?
            .keep();
        let mut cluster = Cluster {
            url: String::new(),
            bin: bin.to_owned(),
            folder,
            as_postgres,
            _watcher: None,
        };
        // From here on, dropping `cluster` on an error removes the folder again.
        if as_postgres {
            let (uid, gid) = postgres_user()?;
            std::os::unix::fs::chown(&cluster.folder, Some(uid), Some(gid)).map_err(|err| {
                format!(
                    "cannot hand {} to postgres: {err}",
                    cluster.folder.display()
                )
            })?;
        }
        cluster._watcher = Some(cluster.watch()?);
        let data = cluster.folder.join("data");
        cluster.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "--auth=trust".as_ref(),
                "--encoding=UTF8".as_ref(),
                "--locale=C".as_ref(),
                // The data is thrown away; skipping fsync saves seconds per run.
                "--no-sync".as_ref(),
            ],
        )?;
        let mut last = String::new();
        // A port found free can be taken before the server binds it; then try another.
        for _ in 0..5 {
            let port = free_port()?;
            let settings = format!(
                "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={} \
                 -c max_connections=300 -c fsync=off -c synchronous_commit=off \
                 -c full_page_writes=off",
                cluster.folder.display()
            );
            let log = cluster.folder.join("server.log");
            match cluster.run(
                "pg_ctl",
                &[
                    "start".as_ref(),
                    "-w".as_ref(),
                    "-t".as_ref(),
                    "60".as_ref(),
                    "-D".as_ref(),
                    data.as_os_str(),
                    "-l".as_ref(),
                    log.as_os_str(),
                    "-o".as_ref(),
                    settings.as_ref(),
                ],
            ) {
                Ok(()) => {
                    cluster.url = format!("postgresql://postgres@127.0.0.1:{port}/postgres");
                    return Ok(cluster);
                }
                Err(problem) => {
                    last = format!(
                        "{problem}\nserver log:\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                    let _ = std::fs::remove_file(&log);
                }
            }
        }
        Err(format!("the test cluster did not start:\n{last}"))
    }

    /// Runs one of the server's programs, as `postgres` when we are root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        };
        // The postgres user may not be allowed into the current folder.
        command.current_dir(&self.folder);
        command
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<(), String> {
        let output = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|err| format!("cannot run {program}: {err}"))?;
        if output.status.success() {
            return Ok(());
        }
        Err(format!(
            "{program} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }

    /// Starts the watcher: a shell in its own process group (so Ctrl-C reaches only the tests) that
    /// waits for its standard input to close, which happens when this process ends in any way,
    /// then stops the server and removes the folder. After a normal exit there is nothing left
    /// for it to do.
    fn watch(&self) -> Result<Child, String> {
        let stop = self.command("pg_ctl");
        let mut stop_line: Vec<String> = vec![stop.get_program().to_string_lossy().into_owned()];
        stop_line.extend(stop.get_args().map(|a| a.to_string_lossy().into_owned()));
        let data = self.folder.join("data");
        stop_line.extend([
            "stop".to_owned(),
            "-m".to_owned(),
            "immediate".to_owned(),
            "-D".to_owned(),
            data.display().to_string(),
        ]);
        let script = format!(
            "cat >/dev/null; {} >/dev/null 2>&1; rm -rf '{}'",
            stop_line.join(" "),
            self.folder.display()
        );
        Command::new("sh")
            .args(["-c", &script])
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|err| format!("cannot start the cluster's watcher: {err}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.folder.join("data");
        if data.join("postmaster.pid").exists() {
            let stopped = self
                .command("pg_ctl")
                .args(["stop", "-w", "-m", "immediate", "-D"])
                .arg(&data)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if !matches!(stopped, Ok(status) if status.success()) {
                eprintln!(
                    "warning: pg_ctl stop failed for the test cluster in {}",
                    self.folder.display()
                );
            }
        }
        if let Err(err) = std::fs::remove_dir_all(&self.folder) {
            eprintln!(
                "warning: cannot remove the test cluster's folder {}: {err}",
                self.folder.display()
            );
        }
        // Closing the pipe lets the watcher finish now; it finds nothing left to do.
        if let Some(mut watcher) = self._watcher.take() {
            drop(watcher.stdin.take());
            let _ = watcher.wait();
        }
    }
}

/// The uid and gid of the `postgres` user, from /etc/passwd.
fn postgres_user() -> Result<(u32, u32), String> {
    let passwd = std::fs::read_to_string("/etc/passwd")
        .map_err(|err| format!("cannot read /etc/passwd: {err}"))?;
    passwd
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.first() == Some(&"postgres"))
        .and_then(|fields| Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?)))
        .ok_or_else(|| {
            "running as root, and there is no `postgres` user to run the test cluster as (initdb \
             refuses root)"
                .to_owned()
        })
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|err| format!("cannot find a free port on 127.0.0.1: {err}"))
}
