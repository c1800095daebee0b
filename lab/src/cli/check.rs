//! `lab check`: every contract point of the conformance run against a store or a service, with
//! what each expects, what the tool did and the likely cause; or, with `--target FILE`, the
//! black-box check of any HTTP service that takes an operation key, or of an MCP server when the
//! file has an `[mcp]` section (`lab::check`, `lab::check::mcp`).

use std::path::PathBuf;

use clap::Args;
use lab::Error;
use lab::check::{Overrides, Selection, TargetFile};
use lab::conformance::Options;
use lab::contract::points::Selector;

use super::check_reports::ReportFiles;
use super::run::{BackendArgs, BackendName, backend};
use super::value;
use super::{Finished, bad_arguments};
use lab::BaseUrl;

/// `lab check`'s arguments.
#[derive(Args)]
pub struct CheckArgs {
    /// Which store or service to check.
    #[command(flatten)]
    pub target: BackendArgs,

    /// Rounds on new keys in the concurrent points (four fifths with two callers racing, the
    /// rest with all of them)
    #[arg(long, value_name = "N", default_value_t = Options::default().fresh_key_rounds as u32,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rounds: u32,

    /// Callers released together in the crowded rounds
    #[arg(long, value_name = "N", default_value_t = Options::default().callers as u32,
          value_parser = clap::value_parser!(u32).range(2..=256))]
    pub callers: u32,

    /// Seeds the callers' jitter, to repeat a run
    #[arg(long, default_value_t = Options::default().seed)]
    pub seed: u64,

    /// Check any HTTP service that takes an operation key, as a black box, as the TOML target
    /// FILE describes it (with --url: at that base URL instead of the file's). A FILE with an
    /// [mcp] section checks an MCP server instead: over stdio (mcp.command, which the check
    /// starts; each reconnect is a new process) or Streamable HTTP (mcp.url, or --url; each
    /// reconnect a new session), the create tool and its key argument (or no_key = true). An
    /// [upstream] section says the MCP server, or the HTTP service (a gateway), wraps an HTTP
    /// API: the lab serves that API on loopback ({{upstream}} in the file is its URL, in
    /// mcp.command, mcp.env or a caller's args or env over stdio, in service.command or
    /// service.env for a gateway the check starts; over Streamable HTTP, or for a gateway you
    /// start, upstream.port or --upstream-port names where it is), records what reaches it, and
    /// grades the key across the hop. {{dir}} is a folder the check makes for the run (in the
    /// same places, and in mcp.count's sql and command)
    #[arg(long = "target", value_name = "FILE")]
    pub target_file: Option<PathBuf>,

    /// With --target FILE: write a commented starting file for the service at URL to FILE
    /// (never replacing a file), and check nothing
    #[arg(long, value_name = "URL", requires = "target_file")]
    pub init: Option<String>,

    /// With --target FILE: write a commented [mcp] starting file to FILE from the tools/list of
    /// SERVER, an http:// URL (Streamable HTTP) or a command line (stdio), never replacing a
    /// file, and check nothing
    #[arg(
        long,
        value_name = "SERVER",
        requires = "target_file",
        conflicts_with = "init"
    )]
    pub init_mcp: Option<String>,

    /// With --target: print the report, with every exchange, as JSON
    #[arg(long, requires = "target_file")]
    pub json: bool,

    /// With --target: run only the points ID names, a point's name or a promise's id (every
    /// point that covers that promise); may be given more than once. The calibration always runs
    #[arg(long, value_name = "ID", requires = "target_file", value_parser = value::selector)]
    pub only: Vec<Selector>,

    /// With --target: leave out the points ID names, a point's name or a promise's id; may be
    /// given more than once
    #[arg(long, value_name = "ID", requires = "target_file", value_parser = value::selector)]
    pub skip: Vec<Selector>,

    /// With --target: also write the report as JUnit XML to PATH, for a CI system's test tab (a
    /// test suite per point, a test case per sub-check); written whole, even when a point fails
    #[arg(long, value_name = "PATH", requires = "target_file")]
    pub junit: Option<PathBuf>,

    /// With --target: also write the report as one self-contained HTML page to PATH, each
    /// failed point drawn as the sequence of its exchanges; written whole, even when a point fails
    #[arg(long, value_name = "PATH", requires = "target_file")]
    pub html: Option<PathBuf>,

    /// With --target: allow a service (or an MCP URL) that is not on loopback (the check
    /// creates real effects)
    #[arg(long, requires = "target_file")]
    pub allow_remote: bool,

    /// With --target FILE and an [upstream] section: serve the API on this loopback PORT
    /// instead of the file's upstream.port (a wrapper you start, over Streamable HTTP or as a
    /// gateway, is pointed at http://127.0.0.1:PORT), so a CI that picks free ports need not
    /// rewrite the file
    #[arg(long, value_name = "PORT", requires = "target_file",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub upstream_port: Option<u16>,
}

/// Runs the conformance checks and prints the report.
///
/// # Errors
/// Bad input before anything connects; a store or service that cannot be reached; and
/// [`Error::ScenarioFailed`] (exit status 1) when a contract point failed.
pub fn exec(args: &CheckArgs) -> lab::Result<Finished> {
    if let Some(file) = &args.target_file {
        return check_target(args, file);
    }
    if args.target.backend == BackendName::Http && args.target.admin_token.is_none() {
        return Err(bad_arguments(
            "lab check --backend http needs --admin-token: each contract point starts from an \
             empty service, emptied through its admin endpoint",
        ));
    }
    let backend = backend(&args.target)?;
    let options = Options::default()
        .with_rounds(
            args.rounds as usize,
            Options::default().completed_key_rounds,
        )
        .with_callers(args.callers as usize)
        .with_seed(args.seed);
    let report = backend.check(&options)?;
    println!("{report}");
    if report.passed() {
        return Ok(Finished::Succeeded);
    }
    let failed: Vec<&str> = report.failures().map(|(point, _)| point.name).collect();
    Err(Error::ScenarioFailed {
        scenario: "conformance",
        expected: format!("all {} contract points to pass", report.points.len()),
        observed: format!("{} failed: {}", failed.len(), failed.join(", ")),
    })
}

/// `--init URL`: the starting file, written from the service's answers to a probe of its own.
fn init(args: &CheckArgs, file: &std::path::Path, url: &str) -> lab::Result<Finished> {
    if args.json
        || args.target.url.is_some()
        || args.upstream_port.is_some()
        || reports(args)
        || selects(args)
    {
        return Err(bad_arguments(
            "--init writes a file and checks nothing: no --json, --url, --junit, --html, --only, --skip or \
             --upstream-port",
        ));
    }
    if !args.allow_remote {
        value::loopback_url(url).map_err(|problem| Error::InputInvalid {
            subject: "--init".to_owned(),
            problem: format!("{url}: {problem} (another host needs --allow-remote)"),
        })?;
    }
    let key = lab::check::init::write(file, url)?;
    eprintln!(
        "wrote {}: fit it to your service, then run lab check --target {}",
        file.display(),
        file.display()
    );
    eprintln!(
        "key.form = \"{}\" from --init's probe: {}",
        key.form, key.why
    );
    Ok(Finished::Succeeded)
}

/// `lab check --target FILE`: validates the file (and the options) before anything is sent,
/// runs every point, prints the report.
fn check_target(args: &CheckArgs, file: &std::path::Path) -> lab::Result<Finished> {
    let defaults = Options::default();
    let adapter_only = [
        (args.target.backend != BackendName::Sqlite, "--adapter"),
        (args.target.token.is_some(), "--token"),
        (args.target.admin_token.is_some(), "--admin-token"),
        (args.target.database_url.is_some(), "--database-url"),
        (
            args.rounds as usize != defaults.fresh_key_rounds,
            "--rounds",
        ),
        (args.callers as usize != defaults.callers, "--callers"),
        (args.seed != defaults.seed, "--seed"),
    ];
    if let Some((_, option)) = adapter_only.iter().find(|(given, _)| *given) {
        return Err(bad_arguments(&format!(
            "{option} is for `lab check --backend ...`; with --target, the target file says \
             how to reach the service ([load] sets the concurrent rounds)"
        )));
    }
    if let Some(url) = &args.init {
        return init(args, file, url);
    }
    if let Some(server) = &args.init_mcp {
        return init_mcp(args, file, server);
    }
    let overrides = Overrides {
        base_url: args
            .target
            .url
            .as_ref()
            .map(|url: &BaseUrl| url.text().to_owned()),
        allow_remote: args.allow_remote,
        upstream_port: args.upstream_port,
    };
    // Claimed before anything is sent: an unwritable path stops the check first.
    let reports = ReportFiles::claim(args.junit.as_deref(), args.html.as_deref())?;
    let selection = Selection {
        only: args.only.clone(),
        skip: args.skip.clone(),
    };
    let report = TargetFile::from_file(file, &overrides)?.run_selected(&selection)?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        println!("{report}");
    }
    reports.write(&report)?;
    super::check_reports::finished(
        &report,
        "check --target",
        "every MUST and LAB sub-check to pass",
    )
}

/// Whether `--only` or `--skip` is given.
fn selects(args: &CheckArgs) -> bool {
    !args.only.is_empty() || !args.skip.is_empty()
}

/// Whether a report file (`--junit`, `--html`) is asked for.
fn reports(args: &CheckArgs) -> bool {
    args.junit.is_some() || args.html.is_some()
}

/// `--init-mcp SERVER`: the `[mcp]` starting file from the server's `tools/list`.
fn init_mcp(args: &CheckArgs, file: &std::path::Path, server: &str) -> lab::Result<Finished> {
    if args.json || args.target.url.is_some() || args.upstream_port.is_some() || selects(args) {
        return Err(bad_arguments(
            "--init-mcp writes a file and checks nothing: no --json, no --url, no \
             --upstream-port, no --only or --skip",
        ));
    }
    let server =
        lab::check::mcp::init::Server::parse(server, args.allow_remote).map_err(|problem| {
            Error::InputInvalid {
                subject: "--init-mcp".to_owned(),
                problem,
            }
        })?;
    lab::check::mcp::init::write(file, &server)?;
    eprintln!(
        "wrote {}: fit it to your server, then run lab check --target {}",
        file.display(),
        file.display()
    );
    Ok(Finished::Succeeded)
}
