//! `lab check --target FILE` on an MCP server: a file with an `[mcp]` section names a server
//! reached over stdio (a command the check starts) or Streamable HTTP (a loopback URL), its
//! create tool and the argument that carries the key (or none), and how identities, errors and
//! effects are read from outside. The points are the HTTP check's where they apply to a tool
//! call, and MCP's own: a cancelled call, a reconnect, the tool's annotations.
//!
//! - [`target`]: the `[mcp]` section and its validation.
//! - The Streamable HTTP client is the lab's one, [`crate::mcp::http_client`] (JSON answers and
//!   event streams), shared with the MCP adapter.
//! - [`init`]: the commented `[mcp]` starting file `--init-mcp` writes from `tools/list`.
//! - [`probe`]: sessions, recorded calls, a cancelled call, counting.
//! - [`points`]: the points.
//! - [`upstream`]: the API behind a wrapper (`[upstream]`), served, recorded and faulted by
//!   the lab.
//! - [`calibration`]: before any point, the proof that the `[mcp]` section describes the
//!   server; a mismatch stops the check with exit status 2, naming the field at fault.

pub mod calibration;
pub mod hop;
pub mod init;
pub mod points;
pub mod probe;
pub mod target;

use std::sync::Arc;

use super::Selection;
use super::report::Stop;
use super::report::{DRAFT, Report};
use crate::error::{Error, Result};
pub use target::McpTarget;

/// What the MCP check's grades rest on, as its report's second line says it.
pub const GRADED_AGAINST: &str = "draft-ietf-httpapi-idempotency-key-header-06 (MUST, SHOULD: \
its rules carried from the header to the tool's key argument), the MCP specification 2025-11-25 \
(MCP), and the lab's contract (LAB)";

/// Runs every MCP point and returns the report. Call it only with a validated [`McpTarget`].
/// The calibration runs first; a file that does not describe the server stops there.
///
/// # Errors
/// [`Error::Io`] when the runtime cannot start; [`Error::TargetMismatch`] when the file names a
/// command that cannot be started, or the calibration shows that it does not describe the
/// server (nothing is graded then); [`Error::Mcp`] when the server cannot be reached.
pub fn run(target: McpTarget) -> Result<Report> {
    run_selected(target, &Selection::default())
}

/// As [`run`], with only the points `selection` keeps.
///
/// # Errors
/// As [`run`].
pub fn run_selected(target: McpTarget, selection: &Selection) -> Result<Report> {
    let runtime = super::runtime()?;
    let file = target.path.display().to_string();
    let place = target.describe();
    let (points, elapsed, (history, counts), calibration) = runtime.block_on(async {
        let probe = probe::McpProbe::start(target)
            .await
            .map_err(|stop| mcp_error(stop, &file, &place))?;
        let probe = Arc::new(probe);
        let calibrated = calibration::calibrate(&probe)
            .await
            .map_err(|stop| super::upstream::blame_stop(probe.upstream.as_ref(), stop));
        let calibration = match calibrated {
            Ok(calibration) => calibration,
            // The API refused the wrapper's creates: the hop points show whether its key or
            // body is at fault, unless the key was found where the file does not look (then the
            // file names the wrong place, and says so).
            Err(Stop::Mismatch { field, problem })
                if probe.upstream.is_some() && !field.starts_with("upstream.key_") =>
            {
                let Some((calibration, points)) =
                    super::hop::when_refused(probe.as_ref(), &problem, selection).await
                else {
                    if let Ok(probe) = Arc::try_unwrap(probe) {
                        probe.finish().await;
                    }
                    return Err(mcp_error(Stop::Mismatch { field, problem }, &file, &place));
                };
                let elapsed = probe.history.elapsed();
                let history = (probe.history.exchanges(), probe.history.counts());
                if let Ok(probe) = Arc::try_unwrap(probe) {
                    probe.finish().await;
                }
                return Ok((points, elapsed, history, calibration));
            }
            Err(stop) => {
                if let Ok(probe) = Arc::try_unwrap(probe) {
                    probe.finish().await;
                }
                return Err(mcp_error(stop, &file, &place));
            }
        };
        let mut points = points::all(&probe, &calibration, selection).await;
        points.extend(super::hop::all(probe.as_ref(), selection).await);
        let elapsed = probe.history.elapsed();
        let history = (probe.history.exchanges(), probe.history.counts());
        if let Ok(probe) = Arc::try_unwrap(probe) {
            probe.finish().await;
        }
        Ok::<_, Error>((points, elapsed, history, calibration))
    })?;
    let mut report = Report::new(file, place, points, elapsed, history);
    report.graded_against = GRADED_AGAINST.to_owned();
    report.calibration = calibration;
    report.name_promises(crate::contract::Checker::Mcp);
    report.counts = counts;
    debug_assert!(report.draft == DRAFT);
    Ok(report)
}

/// A stop as the error the command line prints: a server that could not be reached is named by
/// its transport (`MCP stdio: ...`), never as HTTP.
fn mcp_error(stop: Stop, file: &str, place: &str) -> Error {
    match stop {
        Stop::Unreachable { problem, .. } => Error::Mcp {
            place: place.to_owned(),
            problem,
        },
        mismatch => mismatch.into_error(file, place),
    }
}
