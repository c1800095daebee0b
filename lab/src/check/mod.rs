//! `lab check --target FILE`: a black-box acceptance check of any HTTP service that takes an
//! operation key. The service needs no code of ours and no admin endpoints: a target file says
//! how to call it and how to count its effects, and the check records every exchange and grades
//! each observation by the IETF draft (MUST, SHOULD) or the lab's stricter contract (LAB).
//!
//! - [`target`]: the file and its validation (every refusal names its field).
//! - [`fields`]: every field the parser accepts, read from the parser (the book's reference).
//! - [`calibration`]: before any point, the proof that the file describes the service; a
//!   mismatch stops the check with exit status 2, naming the field at fault.
//! - [`http`]: the check's own client on hyper, with client-side lost replies and hang-ups.
//! - [`probe`]: fresh keys and fields, sending, reading replies, counting effects.
//! - [`points`]: the points, each reporting every sub-check it made.
//! - [`history`]: what was sent and what came back, "no answer" included.
//! - [`report`]: the graded report, as text and JSON.
//! - [`junit`], [`html`]: the report as JUnit XML for a CI system, and as one page for a person,
//!   each failed point drawn from [`excerpt`]: its exchanges and the counts around them.
//! - [`init`]: the commented starting file `--init` writes.
//! - [`mcp`] (feature `mcp`): the same check against an MCP server, from a file with an `[mcp]`
//!   section.

mod both;
pub mod calibration;
mod content;
pub mod excerpt;
pub mod fields;
pub mod gateway;
pub mod history;
pub mod hop;
pub mod html;
pub mod http;
mod http_front;
pub mod init;
pub mod junit;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod points;
pub mod probe;
pub mod report;
pub mod target;
pub mod upstream;

use std::sync::Arc;

pub use crate::contract::points::Selection;
use crate::error::{Error, Result};
pub use report::Report;
pub use target::{FieldError, Overrides, Target};

/// A target file of either kind: an HTTP service (`[service]`), or an MCP server (`[mcp]`).
#[derive(Debug)]
pub enum TargetFile {
    /// `[service]` and the HTTP sections.
    Http(Box<Target>),
    /// `[mcp]`.
    #[cfg(feature = "mcp")]
    Mcp(Box<mcp::McpTarget>),
}

impl TargetFile {
    /// Reads a target file and validates it as the kind its sections say.
    ///
    /// # Errors
    /// [`Error::InputUnreadable`] when the file cannot be read; [`Error::TargetInvalid`] naming
    /// the field at fault, or [`Error::InputInvalid`] for TOML that does not parse.
    pub fn from_file(path: &std::path::Path, overrides: &Overrides) -> Result<TargetFile> {
        let (text, has_mcp) = TargetFile::read(path)?;
        if has_mcp {
            #[cfg(feature = "mcp")]
            return mcp::McpTarget::parse(&text, path, overrides)
                .map(|t| TargetFile::Mcp(Box::new(t)));
            #[cfg(not(feature = "mcp"))]
            return Err(Error::InputInvalid {
                subject: path.display().to_string(),
                problem: "[mcp]: this lab was built without the mcp feature".to_owned(),
            });
        }
        Target::parse(&text, path, overrides).map(|t| TargetFile::Http(Box::new(t)))
    }

    /// A target file's text, and whether it describes an MCP server (an `[mcp]` table).
    ///
    /// # Errors
    /// [`Error::InputUnreadable`] when the file cannot be read.
    pub fn read(path: &std::path::Path) -> Result<(String, bool)> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::InputUnreadable {
            path: path.to_owned(),
            source,
        })?;
        let has_mcp = text
            .parse::<toml::Table>()
            .is_ok_and(|t| t.contains_key("mcp"));
        Ok((text, has_mcp))
    }

    /// Runs the check the file describes.
    ///
    /// # Errors
    /// As [`run`] (or [`mcp::run`]).
    pub fn run(self) -> Result<Report> {
        self.run_selected(&Selection::default())
    }

    /// Runs the points `selection` keeps (`--only`, `--skip`); the calibration always runs.
    ///
    /// # Errors
    /// As [`run`] (or [`mcp::run`]).
    pub fn run_selected(self, selection: &Selection) -> Result<Report> {
        self.refuse_an_empty_selection(selection)?;
        match self {
            TargetFile::Http(target) => run_selected(*target, selection),
            #[cfg(feature = "mcp")]
            TargetFile::Mcp(target) => mcp::run_selected(*target, selection),
        }
    }

    /// Refuses, before anything is sent, a selection that keeps no point this file runs: a
    /// report with no point in it would read as a pass.
    fn refuse_an_empty_selection(&self, selection: &Selection) -> Result<()> {
        use crate::contract::points::{self, Front};
        let (front, path, upstream) = match self {
            TargetFile::Http(target) => (Front::Http, &target.path, target.upstream.is_some()),
            #[cfg(feature = "mcp")]
            TargetFile::Mcp(target) => (Front::Mcp, &target.path, target.upstream.is_some()),
        };
        let runnable: Vec<&str> = points::on(front)
            .filter(|point| upstream || !point.hop)
            .map(|point| point.id)
            .collect();
        if points::on(front).any(|point| runnable.contains(&point.id) && selection.runs(point)) {
            return Ok(());
        }
        Err(Error::InputInvalid {
            subject: "command line".to_owned(),
            problem: format!(
                "--only and --skip leave no point of {} to run; its points are: {}",
                path.display(),
                runnable.join(", ")
            ),
        })
    }
}

/// Runs every point against the target and returns the report. Call it only with a validated
/// [`Target`]: validation is where bad input is refused, before anything is sent. The file's
/// reset runs first, then the calibration; a file that does not describe the service stops
/// there, before any point.
///
/// The runtime a check runs on: two worker threads, timers and sockets.
///
/// # Errors
/// [`Error::Io`] when it cannot start.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            action: "starting the check's runtime".to_owned(),
            source,
        })
}

/// # Errors
/// [`Error::Io`] when the check's own runtime cannot start; [`Error::TargetMismatch`] when the
/// reset, the calibration or the whole run shows that the file does not describe the service
/// (nothing is graded then: [`points::file_at_fault`]); [`Error::Http`] when the service does not answer them.
pub fn run(target: Target) -> Result<Report> {
    run_selected(target, &Selection::default())
}

/// As [`run`], with only the points `selection` keeps.
///
/// # Errors
/// As [`run`].
pub fn run_selected(target: Target, selection: &Selection) -> Result<Report> {
    let runtime = runtime()?;
    let file = target.path.display().to_string();
    let base_url = target.service.base_url.clone();
    let (probe, points, calibration) = runtime.block_on(async {
        let probe = probe::Probe::start(target)
            .await
            .map_err(|stop| stop.into_error(&file, &base_url))?;
        let probe = Arc::new(probe);
        probe
            .reset()
            .await
            .map_err(|stop| stop.into_error(&file, &base_url))?;
        let calibrated = calibration::calibrate(&probe)
            .await
            .map_err(|stop| upstream::blame_stop(probe.upstream.as_ref(), stop));
        let calibration = match calibrated {
            Ok(calibration) => calibration,
            Err(report::Stop::Mismatch { field, problem }) if probe.upstream.is_some() => {
                // The API refused the gateway's creates: the hop points show whether the
                // gateway's key or body is at fault, before the file is blamed.
                let Some((calibration, points)) =
                    hop::when_refused(probe.as_ref(), &problem, selection).await
                else {
                    let stop = report::Stop::Mismatch { field, problem };
                    return Err(stop.into_error(&file, &base_url));
                };
                return Ok((probe, points, calibration));
            }
            Err(stop) => return Err(stop.into_error(&file, &base_url)),
        };
        let mut points = points::all(&probe, &calibration, selection).await;
        if let Some(stop) = points::file_at_fault(&probe, &points) {
            return Err(stop.into_error(&file, &base_url));
        }
        points.extend(hop::all(probe.as_ref(), selection).await);
        Ok::<_, Error>((probe, points, calibration))
    })?;
    let elapsed = probe.history.elapsed();
    let mut report = Report::new(file, base_url, points, elapsed, probe.history.exchanges());
    report.calibration = calibration;
    report.counts = probe.history.counts();
    Ok(report)
}
