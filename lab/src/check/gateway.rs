//! An HTTP gateway in front of an API (`[service]` with `[upstream]`): the check can start it
//! (`service.command`, pointed at the API the lab serves with `{{upstream}}`), restart it for
//! the restart point, and stop it at the end; and the hop points ([`super::hop`]) send its
//! create route as an agent's tool would, then read what reached the API.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::target::UPSTREAM_PLACEHOLDER;
use super::target::{FieldError, Service, program_in};

/// How long a started gateway may take to accept connections on its port.
pub const START_WITHIN: Duration = Duration::from_secs(30);

/// A gateway process the check starts, and starts again.
pub struct Gateway {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    folder: PathBuf,
    address: String,
    log: PathBuf,
    child: Mutex<Option<Child>>,
}

impl Gateway {
    /// The gateway `service.command` describes, its `{{upstream}}` replaced by `upstream` and
    /// its `{{dir}}` by `dir`, the run's folder (removed at the end); its output goes to a log
    /// there.
    pub fn new(service: &Service, folder: PathBuf, upstream: Option<&str>, dir: &Path) -> Self {
        let fill = |word: &String| {
            let word = word.replace("{{dir}}", &dir.display().to_string());
            match upstream {
                Some(url) => word.replace(UPSTREAM_PLACEHOLDER, url),
                None => word,
            }
        };
        Gateway {
            argv: service.command.iter().flatten().map(fill).collect(),
            env: service
                .env
                .iter()
                .map(|(name, value)| (name.clone(), fill(value)))
                .collect(),
            folder,
            address: service.url.authority(),
            log: dir.join("service.log"),
            child: Mutex::new(None),
        }
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the process the check started is still running.
    pub fn running(&self) -> bool {
        self.child()
            .as_mut()
            .is_some_and(|child| child.try_wait().is_ok_and(|status| status.is_none()))
    }

    /// Starts the gateway and waits until its port accepts a connection. Refuses to start when
    /// something else already answers there: the check would grade that instead.
    ///
    /// # Errors
    /// The reason, naming `service.command` (with the end of the gateway's output) or
    /// `service.base_url`.
    pub async fn start(&self) -> Result<(), FieldError> {
        let command = |problem: String| FieldError::new("service.command", problem);
        if tokio::net::TcpStream::connect(&self.address).await.is_ok() {
            return Err(FieldError::new(
                "service.base_url",
                format!(
                    "something already listens on {}, before service.command started",
                    self.address
                ),
            )
            .fix("stop it, or leave service.command out to check it as it runs"));
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|err| command(format!("its log {}: {err}", self.log.display())))?;
        let err_log = log
            .try_clone()
            .map_err(|err| command(format!("its log: {err}")))?;
        let child = Command::new(program_in(&self.folder, &self.argv[0]))
            .args(&self.argv[1..])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.folder)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(|err| command(format!("{:?}: {err}", self.argv[0])))?;
        *self.child() = Some(child);
        let started = Instant::now();
        while started.elapsed() < START_WITHIN {
            if tokio::net::TcpStream::connect(&self.address).await.is_ok() {
                return Ok(());
            }
            if !self.running() {
                let status = self.child().take().and_then(|mut child| child.wait().ok());
                return Err(command(format!(
                    "the gateway ended ({}) before it listened on {}; its output ends: {}",
                    status.map_or_else(|| "no status".to_owned(), |s| s.to_string()),
                    self.address,
                    self.tail()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.stop().await;
        Err(command(format!(
            "the gateway did not listen on {} within {} s; its output ends: {}",
            self.address,
            START_WITHIN.as_secs(),
            self.tail()
        )))
    }

    /// Starts the gateway when it is not running.
    ///
    /// # Errors
    /// As [`Gateway::start`], as its message (a point records it as the call's missing answer).
    pub async fn ensure(&self) -> Result<(), String> {
        if self.running() {
            return Ok(());
        }
        self.start().await.map_err(|err| err.to_string())
    }

    /// Stops the gateway (SIGKILL, as a crash would) and says how it ended.
    pub async fn stop(&self) -> String {
        let Some(mut child) = self.child().take() else {
            return "the gateway was not running".to_owned();
        };
        let pid = child.id();
        let _ = child.kill();
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .ok()
            .and_then(Result::ok);
        // Its port is free before the next start looks at it.
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5)
            && tokio::net::TcpStream::connect(&self.address).await.is_ok()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        match status {
            Some(status) => format!("the gateway (process {pid}) was killed: {status}"),
            None => format!("the gateway (process {pid}) is still running"),
        }
    }

    /// The last lines of the gateway's output, for a message.
    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(5).collect();
        if lines.is_empty() {
            return "(nothing)".to_owned();
        }
        lines.into_iter().rev().collect::<Vec<_>>().join(" / ")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut child) = self.child().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::target::{Overrides, Target};

    #[test]
    fn a_gateway_on_an_ipv6_loopback_is_dialled_with_brackets() {
        let text = crate::check::target::tests::GOOD.replace(
            "base_url = \"http://127.0.0.1:8000\"",
            "base_url = \"http://[::1]:8000/api\"\ncommand = [\"gateway\"]",
        );
        let target = Target::parse(&text, Path::new("t.toml"), &Overrides::default()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let gateway = Gateway::new(&target.service, dir.path().to_owned(), None, dir.path());
        assert_eq!(gateway.address, "[::1]:8000");
        let target = Target::parse(
            &text.replace("[::1]", "127.0.0.1"),
            Path::new("t.toml"),
            &Overrides::default(),
        )
        .unwrap();
        let gateway = Gateway::new(&target.service, dir.path().to_owned(), None, dir.path());
        assert_eq!(gateway.address, "127.0.0.1:8000");
    }
}
