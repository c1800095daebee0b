//! `lab audit --target FILE RECORDING...`: the retry contract checked over recorded traffic
//! (`lab::audit`). Exit status 1 on a finding, 2 on bad input (a recording that is neither HAR,
//! OTLP JSON nor a proxy record, truncated JSON, a HAR of another version), naming the file and
//! the place; report files are claimed before the first byte is read and written whole.

use std::path::{Path, PathBuf};

use clap::Args;
use lab::audit::rules::Rules;

use super::Finished;
use super::check_reports::ReportFiles;

/// `lab audit`'s arguments.
#[derive(Args)]
pub struct AuditArgs {
    /// The recordings: HAR 1.1 or 1.2 files, OpenTelemetry traces as OTLP JSON (one object, or
    /// one per line), and records of `lab proxy --record`; each read in one pass
    #[arg(value_name = "RECORDING", required = true)]
    pub recordings: Vec<PathBuf>,

    /// The target file `lab check` reads: its [create] route (or [mcp.tool]), [key], [identity]
    /// and [[callers]] say which requests are creates, where the key is, what a success names
    /// and who sent it ([service] and [count] may be left out)
    #[arg(long = "target", value_name = "FILE")]
    pub target: PathBuf,

    /// Write a commented starting target file to FILE (--target) from the recordings, never
    /// replacing a file, and judge nothing
    #[arg(long)]
    pub init: bool,

    /// Print the report, with every exchange it cites, as JSON
    #[arg(long)]
    pub json: bool,

    /// Also write the report as JUnit XML to PATH
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,

    /// Also write the report as one self-contained HTML page to PATH
    #[arg(long, value_name = "PATH")]
    pub html: Option<PathBuf>,
}

/// Reads the recordings, judges them, prints the report.
///
/// # Errors
/// Bad input before anything is judged; [`Error::ScenarioFailed`] (exit status 1) on a finding.
pub fn exec(args: &AuditArgs) -> lab::Result<Finished> {
    if args.init {
        if args.json || args.junit.is_some() || args.html.is_some() {
            return Err(super::bad_arguments(
                "--init writes a target file and judges nothing: no --json, --junit or --html",
            ));
        }
        let wrote = lab::audit::init::write(&args.target, &args.recordings, &progress)?;
        eprintln!(
            "wrote {}: {}; fit it, then run lab audit --target {} RECORDING...",
            args.target.display(),
            wrote,
            args.target.display()
        );
        return Ok(Finished::Succeeded);
    }
    let reports = ReportFiles::claim(args.junit.as_deref(), args.html.as_deref())?;
    let rules = Rules::from_file(&args.target)?;
    let report = lab::audit::audit(&rules, &args.recordings, &progress)?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        println!("{report}");
    }
    reports.write(&report)?;
    super::check_reports::finished(&report, "audit", "no finding in the recordings")
}

/// Progress on stderr for a long read: called every 64 MiB read.
fn progress(path: &Path, read: u64, total: u64) {
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    eprintln!(
        "lab audit: {} read {:.0} MiB of {:.0} MiB ({:.0}%)",
        path.display(),
        mib(read),
        mib(total),
        if total == 0 {
            100.0
        } else {
            read as f64 * 100.0 / total as f64
        }
    );
}
