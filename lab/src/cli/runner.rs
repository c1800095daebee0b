//! `lab runner`: the durable caller, against a ticket service over HTTP (`--url`), or against
//! the ticket tools over MCP's Streamable HTTP (`--mcp-url`, such as `lab mcp --transport
//! http`). Both carry the same guarantees: the runner and its checks do not depend on the
//! transport, only the tool and the configuration check do.
//!
//! Everything is checked before the runner's file is opened: the options by clap (see
//! [`super::value`]), the pause point, then the file itself. Only then does it resume what is
//! unfinished and run the new operation. Its last lines (on stderr) say which operations need a
//! person and what to look at; its exit status says how they ended (see [`Finished`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use lab::http::blocking::{BlockingClient, Request};
use lab::http::{HttpTarget, HttpTool, wire};
use lab::mcp::{HttpEndpoint, McpTool};
use lab::runner::{PausePoint, RetryPolicy, Runner, SavedOperation, ServiceCheck, State};
use lab::{Error, Operation, OperationKey, Payload, Scope, TicketTool};

use super::value;
use super::{Finished, file_option};
use lab::BaseUrl;

/// How long the runner waits to connect to the service, or for its answer to a check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// `--deadline-ms` when not given.
const DEFAULT_DEADLINE_MS: u64 = 30_000;

/// `lab runner`'s arguments.
#[derive(Args)]
#[command(after_help = super::EXIT_STATUSES)]
pub struct RunnerArgs {
    /// The runner's own SQLite file
    #[arg(long, value_name = "FILE")]
    pub database: PathBuf,
    /// The ticket service's base URL on loopback; required unless --mcp-url is given
    #[arg(
        long,
        value_name = "URL",
        value_parser = value::loopback_url,
        required_unless_present = "mcp_url",
        conflicts_with = "mcp_url"
    )]
    pub url: Option<BaseUrl>,
    /// Instead of --url: an MCP server's Streamable HTTP endpoint on loopback (such as the URL
    /// `lab mcp --transport http` prints); the runner calls its create_ticket tool
    #[arg(long, value_name = "URL", value_parser = value::loopback_url)]
    pub mcp_url: Option<BaseUrl>,
    /// The caller's bearer token
    #[arg(long, value_name = "TOKEN", value_parser = value::token)]
    pub token: String,
    /// The caller's name, saved with each operation as its scope
    #[arg(long, value_name = "NAME", value_parser = value::caller)]
    pub caller: String,
    /// A new operation's key; without it, the runner only resumes unfinished operations
    #[arg(long, value_name = "KEY", requires = "payload", value_parser = value::operation_key)]
    pub key: Option<OperationKey>,
    /// A new operation's payload, a JSON object
    #[arg(long, value_name = "JSON", requires = "key", value_parser = value::payload)]
    pub payload: Option<Payload>,
    /// Send again, with its saved key, an operation in review (after a person looked on the
    /// service and found no ticket); repeat for more
    #[arg(long, value_name = "KEY", value_parser = value::operation_key)]
    pub resend: Vec<OperationKey>,
    /// Sends per operation and run, the first included
    #[arg(
        long,
        default_value_t = RetryPolicy::default().attempts,
        value_parser = value::at_least_one,
        allow_negative_numbers = true
    )]
    pub attempts: u32,
    /// No send starts later than this many milliseconds after the operation's run began
    #[arg(
        long,
        value_name = "MS",
        default_value_t = DEFAULT_DEADLINE_MS,
        allow_negative_numbers = true
    )]
    pub deadline_ms: u64,
}

/// Resumes unfinished operations, then runs the new one, and says how they ended.
///
/// # Errors
/// Bad input, naming the option (nothing is created, changed or sent); the runner's file failing
/// while it runs.
pub fn exec(args: RunnerArgs) -> lab::Result<Finished> {
    let policy = RetryPolicy {
        attempts: args.attempts,
        deadline: Duration::from_millis(args.deadline_ms),
        ..RetryPolicy::default()
    };
    let pause = PausePoint::from_environment()?;
    let first_send_fault = lab::runner::first_send_fault_from_environment()?;
    let new_operation = match args.key.clone().zip(args.payload.clone()) {
        Some((operation_key, payload)) => Some(Operation {
            scope: Scope::new(args.caller.as_str(), wire::CREATE_TICKET)?,
            operation_key,
            payload,
        }),
        None => None,
    };
    if !args.resend.is_empty() && !args.database.exists() {
        return Err(Error::InputInvalid {
            subject: "--resend".to_owned(),
            problem: format!(
                "{} does not exist, so it holds no operation to send again",
                args.database.display()
            ),
        });
    }
    let (tool, check) = tool_and_check(&args)?;
    let runner = Runner::open(&args.database, tool, policy)
        .map_err(|err| file_option("--database", &args.database, err))?
        .with_pause(pause)
        .with_first_send_fault(first_send_fault)
        .with_check(check);
    if let Some(operation) = &new_operation {
        refuse_another_payload(&runner, operation, &args.database)?;
    }
    if !args.resend.is_empty() {
        let scope = Scope::new(args.caller.as_str(), wire::CREATE_TICKET)?;
        runner.reopen(&scope, &args.resend)?;
    }
    run_and_report(&runner, new_operation.as_ref(), &again_command(&args))
}

/// The command that resumes this run's pending operations: this run's own options, without a
/// new operation or a resend, each quoted for a POSIX shell where it needs it, so that the line
/// the runner prints works when pasted.
fn again_command(args: &RunnerArgs) -> String {
    let mut words: Vec<String> = vec!["lab".into(), "runner".into(), "--database".into()];
    words.push(args.database.to_string_lossy().into_owned());
    match (&args.url, &args.mcp_url) {
        (Some(url), _) => words.extend(["--url".into(), url.text().to_owned()]),
        (None, Some(url)) => words.extend(["--mcp-url".into(), url.text().to_owned()]),
        (None, None) => {}
    }
    words.extend(["--token".into(), args.token.clone()]);
    words.extend(["--caller".into(), args.caller.clone()]);
    let default = RetryPolicy::default().attempts;
    if args.attempts != default {
        words.extend(["--attempts".into(), args.attempts.to_string()]);
    }
    if args.deadline_ms != DEFAULT_DEADLINE_MS {
        words.extend(["--deadline-ms".into(), args.deadline_ms.to_string()]);
    }
    let quoted: Vec<String> = words.iter().map(|word| shell_word(word)).collect();
    quoted.join(" ")
}

/// `word` as a POSIX shell reads it back: as it is when every character is safe, else in
/// single quotes (a quote inside written as `'\''`).
fn shell_word(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The tool that sends, and the check that tells a configuration error from an unknown outcome.
fn tool_and_check(args: &RunnerArgs) -> lab::Result<(Box<dyn TicketTool + Send>, ServiceAt)> {
    let (url, protocol) = match (&args.url, &args.mcp_url) {
        (Some(url), _) => (url.clone(), Protocol::Http),
        (None, Some(url)) => (url.clone(), Protocol::Mcp),
        // clap requires one of the two.
        (None, None) => return Err(super::bad_arguments("--url or --mcp-url is needed")),
    };
    let tool: Box<dyn TicketTool + Send> = match protocol {
        Protocol::Http => Box::new(HttpTool::new(HttpTarget::new(
            url.text(),
            &args.token,
            None,
        )?)),
        Protocol::Mcp => Box::new(McpTool::over_http(&HttpEndpoint {
            url: url.text().to_owned(),
            token: args.token.clone(),
            admin_token: None,
        })?),
    };
    Ok((tool, ServiceAt::new(url, args.token.clone(), protocol)?))
}

/// Refuses a new operation whose key the runner's file holds with another payload.
fn refuse_another_payload(
    runner: &Runner<Box<dyn TicketTool + Send>>,
    operation: &Operation,
    database: &Path,
) -> lab::Result<()> {
    match runner.saved(&operation.scope, &operation.operation_key)? {
        Some(saved) if saved.payload != operation.payload => Err(Error::InputInvalid {
            subject: "--key".to_owned(),
            problem: format!(
                "{:?}: {} already holds this key with another payload ({}); nothing was sent",
                operation.operation_key.as_str(),
                database.display(),
                saved.payload.canonical()
            ),
        }),
        _ => Ok(()),
    }
}

/// Resumes what is unfinished, runs the new operation, and prints what a person must do.
fn run_and_report(
    runner: &Runner<Box<dyn TicketTool + Send>>,
    new_operation: Option<&Operation>,
    again: &str,
) -> lab::Result<Finished> {
    let mut ended = Vec::new();
    // Unfinished operations first, each with its saved key.
    for saved in runner.resume()? {
        println!("resumed {saved}");
        ended.push(saved);
    }
    if let Some(operation) = new_operation {
        let saved = runner.submit(operation)?;
        println!("{saved}");
        ended.push(saved);
    }
    for saved in &ended {
        if let Some(line) = what_to_do(saved, again) {
            eprintln!("{line}");
        }
    }
    // Earlier runs' operations in review still need a person, though this run did not touch them.
    for saved in runner.operations()? {
        let this_run = ended
            .iter()
            .any(|e| e.scope == saved.scope && e.key == saved.key);
        if !this_run
            && matches!(saved.state, State::NeedsReview { .. })
            && let Some(line) = what_to_do(&saved, again)
        {
            eprintln!("still {line}");
        }
    }
    Ok(Finished::of(ended.iter().map(|saved| &saved.state)))
}

/// The line that tells a person what to look at, for an operation that did not succeed;
/// `again` is the command that resumes it.
fn what_to_do(saved: &SavedOperation, again: &str) -> Option<String> {
    let key = saved.key.as_str();
    let caller = saved.scope.caller();
    match &saved.state {
        State::Succeeded { .. } | State::Pending => None,
        State::NeedsReview { .. } => Some(format!(
            "needs review: {key}: the runner cannot tell whether the service created the ticket. \
             Look on the service for a ticket of caller {caller} with key {key}; the runner will \
             not send it again unless told to with --resend {key}."
        )),
        State::Rejected { .. } => Some(format!(
            "rejected: {key}: the service holds this key with another payload and created \
             nothing for this one; a new intention needs a new key."
        )),
        State::Held { reason } => Some(format!(
            "held: {key}: {reason}. Nothing this run sent took effect. Fix that and run `{again}` \
             again (with the fix, where it is one of these options): the operation is still \
             pending and goes out with the same key."
        )),
    }
}

/// What the runner calls: the HTTP contract, or the ticket tools over MCP.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http,
    Mcp,
}

/// Tells the runner whether the service it was given can be reached, and whether it takes the
/// token, without sending anything that could create a ticket.
struct ServiceAt {
    url: BaseUrl,
    token: String,
    protocol: Protocol,
    /// The lab's HTTP client, for the checks only (the tool has its own connections).
    client: BlockingClient,
}

/// An MCP `initialize`: the probe that tells an MCP server that takes the token (200) from one
/// that refuses it (401) or something else at the address. It creates nothing.
const MCP_PROBE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"lab-runner-check","version":"0"}}}"#;

impl ServiceCheck for ServiceAt {
    fn unreachable(&self) -> Option<String> {
        // A connection without a request: nothing for the service (or a proxy) to act on.
        let why = self.client.accepts_connections().err()?;
        Some(format!(
            "nothing accepts connections at {} ({why}): start the service, or fix {}",
            self.url.text(),
            self.url_option()
        ))
    }

    fn refused_configuration(&self, answer: &Error) -> Option<String> {
        // Only an answer that turned the send away before the service could act: its token
        // refused, no such route, or an MCP handshake that failed before any tool was called.
        // Any other answer (a 409, a 5xx, a body the runner cannot read) may follow an effect.
        let turned_away = match answer {
            Error::Http { status, .. } => {
                status.is_none_or(|status| matches!(status, 401 | 403 | 404 | 405))
            }
            _ => false,
        };
        if !turned_away {
            return None;
        }
        match self.protocol {
            Protocol::Http => self.http_refusal(),
            Protocol::Mcp => self.mcp_refusal(),
        }
    }
}

impl ServiceAt {
    fn new(url: BaseUrl, token: String, protocol: Protocol) -> lab::Result<ServiceAt> {
        let client = BlockingClient::new(&url.authority(), CHECK_TIMEOUT)?;
        Ok(ServiceAt {
            url,
            token,
            protocol,
            client,
        })
    }

    fn url_option(&self) -> &'static str {
        match self.protocol {
            Protocol::Http => "--url",
            Protocol::Mcp => "--mcp-url",
        }
    }

    fn token_refused(&self, status: u16) -> Option<String> {
        matches!(status, 401 | 403).then(|| {
            format!(
                "the service at {} refuses the token given with --token (status {status}): fix \
                 --token",
                self.url.text()
            )
        })
    }

    fn http_refusal(&self) -> Option<String> {
        // Ask for ticket 0, which never exists: a known token gets 404, an unknown one 401.
        let tickets = format!("{}/tickets/0", self.url.path());
        let status = self.status_of("GET", &tickets, "")?;
        if let Some(reason) = self.token_refused(status) {
            return Some(reason);
        }
        // A ticket service serves its contract; anything else at --url is the wrong address
        // (such as a path before /tickets that the service does not have).
        let contract = format!("{}/openapi.json", self.url.path());
        match self.status_of("GET", &contract, "")? {
            200 => None,
            status => Some(format!(
                "no ticket service answers at {} (GET {contract} got status {status}): fix --url",
                self.url.text()
            )),
        }
    }

    fn mcp_refusal(&self) -> Option<String> {
        let path = if self.url.path().is_empty() {
            "/"
        } else {
            self.url.path()
        };
        let Some(status) = self.status_of("POST", path, MCP_PROBE) else {
            return Some(format!(
                "the MCP server at {} did not answer an initialize: start it, or fix --mcp-url",
                self.url.text()
            ));
        };
        if let Some(reason) = self.token_refused(status) {
            return Some(reason);
        }
        match status {
            // An MCP server that takes the token: what it answered goes to a person.
            200 => None,
            status => Some(format!(
                "no MCP server answers at {} (an initialize got status {status}): fix --mcp-url",
                self.url.text()
            )),
        }
    }

    /// The status of `method path` with the caller's token and `body` (JSON), or `None` when
    /// there is no answer.
    fn status_of(&self, method: &str, path: &str, body: &str) -> Option<u16> {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.url.authority())
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("connection", "close")
            .body(body.to_owned().into())
            .ok()?;
        self.client
            .send(request, false)
            .ok()
            .map(|answer| answer.status)
    }
}
