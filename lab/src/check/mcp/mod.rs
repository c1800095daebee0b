//! `lab check --target FILE` on an MCP server: a file with an `[mcp]` section names a server
//! reached over stdio (a command the check starts) or Streamable HTTP (a loopback URL), its
//! create tool and the argument that carries the key (or none), and how identities, errors and
//! effects are read from outside. The points are the HTTP check's where they apply to a tool
//! call, and MCP's own: a lost result, a cancelled call, a reconnect, the tool's annotations.
//!
//! - [`target`]: the `[mcp]` section and its validation.
//! - [`http`]: the Streamable HTTP client (JSON answers and event streams).
//! - [`probe`]: sessions, recorded calls, a cancelled call, counting.
//! - [`points`]: the points.

pub mod http;
pub mod points;
pub mod probe;
pub mod target;

use std::sync::Arc;

use super::report::{DRAFT, Report};
use crate::error::{Error, Result};
pub use target::McpTarget;

/// What the MCP check's grades rest on, as its report's second line says it.
pub const GRADED_AGAINST: &str = "draft-ietf-httpapi-idempotency-key-header-06 (MUST, SHOULD: \
its rules carried from the header to the tool's key argument), the MCP specification 2025-11-25 \
(MCP), and the lab's contract (LAB)";

/// Runs every MCP point and returns the report. Call it only with a validated [`McpTarget`].
///
/// # Errors
/// [`Error::Io`] when the runtime cannot start; [`Error::Http`] when the server cannot be
/// started or reached, or the first count fails (nothing is judged then).
pub fn run(target: McpTarget) -> Result<Report> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            action: "starting the check's runtime".to_owned(),
            source,
        })?;
    let file = target.path.display().to_string();
    let place = target.describe();
    let unreachable = |problem: String| Error::Http {
        method: "MCP",
        url: place.clone(),
        status: None,
        problem,
    };
    let (points, elapsed, history) = runtime.block_on(async {
        let probe = Arc::new(probe::McpProbe::start(target).await.map_err(&unreachable)?);
        probe.count().await.map_err(&unreachable)?;
        let points = points::all(&probe).await;
        let elapsed = probe.history.elapsed();
        let history = probe.history.exchanges();
        if let Ok(probe) = Arc::try_unwrap(probe) {
            probe.finish().await;
        }
        Ok::<_, Error>((points, elapsed, history))
    })?;
    let mut report = Report::new(file, place, points, elapsed, history);
    report.graded_against = GRADED_AGAINST.to_owned();
    report.name_promises(crate::contract::Checker::Mcp);
    debug_assert!(report.draft == DRAFT);
    Ok(report)
}
