//! An HTTP gateway in front of an API (`[service]` with `[upstream]`): the check can start it
//! (`service.command`, pointed at the API the lab serves with `{{upstream}}`), restart it for
//! the restart point, and stop it at the end; and the hop points ([`super::hop`]) send its
//! create route as an agent's tool would, then read what reached the API.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::history::{Answer, History};
use super::hop::{Fields, Front, Told};
use super::probe::{BodyForm, Call, Change, KeyWire, Probe, render};
use super::target::{Service, program_in};
use super::upstream::{UPSTREAM_PLACEHOLDER, UpstreamApi};

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
            address: format!("{}:{}", service.host, service.port),
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
    pub async fn start(&self) -> Result<(), String> {
        if tokio::net::TcpStream::connect(&self.address).await.is_ok() {
            return Err(format!(
                "service.base_url: something already listens on {}, before service.command \
                 started; stop it, or leave service.command out to check it as it runs",
                self.address
            ));
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|err| format!("service.command: its log {}: {err}", self.log.display()))?;
        let err_log = log
            .try_clone()
            .map_err(|err| format!("service.command: its log: {err}"))?;
        let child = Command::new(program_in(&self.folder, &self.argv[0]))
            .args(&self.argv[1..])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.folder)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(|err| format!("service.command: {:?}: {err}", self.argv[0]))?;
        *self.child() = Some(child);
        let started = Instant::now();
        while started.elapsed() < START_WITHIN {
            if tokio::net::TcpStream::connect(&self.address).await.is_ok() {
                return Ok(());
            }
            if !self.running() {
                let status = self.child().take().and_then(|mut child| child.wait().ok());
                return Err(format!(
                    "service.command: the gateway ended ({}) before it listened on {}; its \
                     output ends: {}",
                    status.map_or_else(|| "no status".to_owned(), |s| s.to_string()),
                    self.address,
                    self.tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.stop().await;
        Err(format!(
            "service.command: the gateway did not listen on {} within {} s; its output ends: {}",
            self.address,
            START_WITHIN.as_secs(),
            self.tail()
        ))
    }

    /// Starts the gateway when it is not running.
    ///
    /// # Errors
    /// As [`Gateway::start`].
    pub async fn ensure(&self) -> Result<(), String> {
        if self.running() {
            return Ok(());
        }
        self.start().await
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

impl Front for Probe {
    type Call = Call;
    /// The gateway's process is the check's own; a session is nothing more.
    type Session = ();

    fn api(&self) -> Option<&UpstreamApi> {
        self.upstream.as_ref()
    }

    fn history(&self) -> &History {
        &self.history
    }

    fn keyed(&self) -> bool {
        true
    }

    fn create_name(&self) -> String {
        format!("{} {}", self.target.create.method, self.target.create.path)
    }

    fn subject(&self) -> &'static str {
        "the route"
    }

    fn call_word(&self) -> &'static str {
        "request"
    }

    fn result_word(&self) -> &'static str {
        "a success reply"
    }

    fn key_place(&self) -> String {
        format!("the key header {} (key.header)", self.target.key.header)
    }

    fn vary_field(&self) -> &'static str {
        "create.vary"
    }

    fn count_section(&self) -> &'static str {
        "[count]"
    }

    fn together(&self) -> usize {
        self.target.load.callers
    }

    fn call_timeout(&self) -> Duration {
        self.target.service.timeout
    }

    fn key_listed(&self) -> Option<(String, bool, String, String)> {
        None
    }

    fn fresh_fields(&self) -> Fields {
        Probe::fresh_fields(self, false)
    }

    fn changes(&self, fields: &Fields) -> Vec<Change> {
        Probe::changes(self, fields)
    }

    fn keyed_call(&self, step: &str, fields: &Fields) -> Call {
        self.call(step, KeyWire::Normal(self.fresh_key()), fields)
    }

    fn unkeyed_call(&self, step: &str, fields: &Fields) -> Call {
        self.call(step, KeyWire::Absent, fields)
    }

    fn again(&self, call: &Call, step: &str, fields: Option<Fields>) -> Call {
        let mut again = call.clone();
        step.clone_into(&mut again.step);
        if let Some(fields) = fields {
            again.body = BodyForm::Compact(fields);
        }
        again
    }

    fn key_of(&self, call: &Call) -> String {
        self.key_value(&call.key).unwrap_or_default()
    }

    fn sent_body(&self, call: &Call) -> Value {
        match (&call.body, &self.target.create.body) {
            (BodyForm::Compact(fields) | BodyForm::Reordered(fields), Some(template)) => {
                render(template, fields)
            }
            (BodyForm::Text(text), _) => serde_json::from_str(text).unwrap_or(Value::Null),
            (_, None) => Value::Null,
        }
    }

    async fn send(&self, point: &'static str, _session: Option<&()>, call: &Call) -> Told {
        let seen = Probe::send(self, point, call).await;
        let read = self.read(&seen.answer, false);
        let text = match &seen.answer {
            Answer::Reply { body, .. } => body.clone(),
            other => other.summary(),
        };
        Told {
            id: seen.id,
            refused: !read.success && seen.answer.status().is_some_and(|s| s >= 400),
            success: read.success,
            identity: read.identity,
            text,
            described: self.describe(&seen.answer),
            answer: seen.answer,
        }
    }

    fn restarts_process(&self) -> bool {
        true
    }

    fn cannot_restart(&self) -> Option<String> {
        self.gateway.is_none().then(|| {
            "the check does not start this gateway (the file has no service.command), so it \
             cannot restart it between a call and its retry"
                .to_owned()
        })
    }

    async fn open(&self) -> Result<(), String> {
        match &self.gateway {
            Some(gateway) => gateway.ensure().await,
            None => Ok(()),
        }
    }

    async fn close(&self, (): ()) -> String {
        match &self.gateway {
            Some(gateway) => gateway.stop().await,
            None => "the gateway is still running".to_owned(),
        }
    }

    async fn count(&self) -> Result<i64, String> {
        Probe::count(self).await
    }
}
