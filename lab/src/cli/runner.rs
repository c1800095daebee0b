//! `lab runner`: the durable caller, against a ticket service over HTTP.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use lab::http::{HttpTarget, HttpTool, contract};
use lab::runner::{PausePoint, RetryPolicy, Runner};
use lab::{Operation, OperationKey, Payload, Scope};

/// `lab runner`'s arguments.
#[derive(Args)]
pub struct RunnerArgs {
    /// The runner's own SQLite file
    #[arg(long, value_name = "FILE")]
    pub database: PathBuf,
    /// The ticket service's base URL on loopback
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// The caller's bearer token
    #[arg(long, value_name = "TOKEN")]
    pub token: String,
    /// The caller's name, saved with each operation as its scope
    #[arg(long, value_name = "NAME")]
    pub caller: String,
    /// A new operation's key; without it, the runner only resumes unfinished operations
    #[arg(long, value_name = "KEY", requires = "payload")]
    pub key: Option<String>,
    /// A new operation's payload, a JSON object
    #[arg(long, value_name = "JSON", requires = "key")]
    pub payload: Option<String>,
    /// Sends per operation and run, the first included
    #[arg(long, default_value_t = RetryPolicy::default().attempts)]
    pub attempts: u32,
    /// No send starts later than this many milliseconds after the operation's run began
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub deadline_ms: u64,
}

/// Resumes unfinished operations, then runs the new one.
///
/// # Errors
/// Bad input; the runner's file failing.
pub fn exec(args: RunnerArgs) -> lab::Result<()> {
    let policy = RetryPolicy {
        attempts: args.attempts,
        deadline: Duration::from_millis(args.deadline_ms),
        ..RetryPolicy::default()
    };
    let tool = HttpTool::new(HttpTarget::new(&args.url, &args.token, None)?);
    let pause = PausePoint::from_environment()?;
    let runner = Runner::open(&args.database, tool, policy)?.with_pause(pause);
    // Unfinished operations first, each with its saved key.
    for saved in runner.resume()? {
        println!("resumed {saved}");
    }
    if let Some((key, payload)) = args.key.zip(args.payload) {
        let operation = Operation {
            scope: Scope::new(args.caller, contract::CREATE_TICKET)?,
            operation_key: OperationKey::try_from(key)?,
            payload: Payload::from_json_text(&payload)?,
        };
        println!("{}", runner.submit(&operation)?);
    }
    Ok(())
}
