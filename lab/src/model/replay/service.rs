//! The real service a replay drives: `lab serve`, or the simulator's store of a service-side
//! mistake.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::http::{
    CallerToken, HttpTarget, HttpTool, ManualClock, Retention, ServeOptions, TicketServer,
};
use crate::key::{OperationKey, Scope};
use crate::model::Variant;
use crate::payload::Payload;
use crate::sim::{CheckThenWrite, Progress, RawPayloadText, Subject, Unclaimed};
use crate::tool::{CreateRequest, Outcome, TicketTool};

/// Which real service a variant's replay runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// `lab serve` on a SQLite file (the design, and every runner-side mistake).
    LabServe,
    /// The simulator's check-then-write store: the lookup and the write in two transactions.
    CheckThenWrite,
    /// The simulator's store that compares payloads as the text received.
    RawPayload,
}

impl Served {
    /// The service `variant`'s mistake needs.
    pub fn of(variant: Variant) -> Served {
        match variant {
            Variant::CheckThenWrite => Served::CheckThenWrite,
            Variant::RawPayload => Served::RawPayload,
            _ => Served::LabServe,
        }
    }
}

/// One create as a runner sent it, in real terms.
#[derive(Clone, Debug)]
pub struct RealRequest {
    /// The caller's scope.
    pub scope: Scope,
    /// The key sent.
    pub key: OperationKey,
    /// The payload, as the text sent.
    pub payload: Payload,
    /// The runner's count of sends as its file held it when it sent, or `None` when its file
    /// held no row for the operation.
    pub sends: Option<u32>,
}

impl RealRequest {
    fn create(&self) -> CreateRequest<'_> {
        CreateRequest::keyed(&self.scope, &self.key, &self.payload)
    }
}

const HOUR: Duration = Duration::from_secs(3600);
const ADMIN: &str = "replay-admin";

/// The token of scope `c1` or `c2`.
fn token(scope: &Scope) -> String {
    format!("replay-token-{}", scope.caller())
}

/// The real service of a replay.
pub(super) enum Service {
    /// `lab serve`, stopped while crashed.
    Lab {
        /// Its database file, kept across restarts.
        database: PathBuf,
        /// The clock retention reads.
        clock: ManualClock,
        /// The running server.
        server: Option<TicketServer>,
        /// The last URL it served, where a send while it is down is refused.
        url: String,
    },
    /// The two-step store; its looked-up creates are its memory.
    CheckThenWrite(CheckThenWrite),
    /// The raw-text store.
    Raw(RawPayloadText),
}

impl Service {
    pub(super) fn start(served: Served, folder: &std::path::Path) -> Result<Service> {
        Ok(match served {
            Served::LabServe => {
                let database = folder.join("service.sqlite3");
                let clock = ManualClock::at(1_000_000);
                let server = serve(&database, &clock)?;
                let url = server.url();
                Service::Lab {
                    database,
                    clock,
                    server: Some(server),
                    url,
                }
            }
            Served::CheckThenWrite => Service::CheckThenWrite(CheckThenWrite::temporary()?),
            Served::RawPayload => Service::Raw(RawPayloadText::temporary()?),
        })
    }

    fn tool(url: &str, scope: &Scope) -> Result<HttpTool> {
        Ok(HttpTool::new(HttpTarget::new(
            url,
            &token(scope),
            Some(ADMIN),
        )?))
    }

    /// A delivered create: its answer, or `None` for a lookup that found nothing and waits to
    /// write.
    pub(super) fn deliver(&self, request: &RealRequest) -> Result<Option<Result<Outcome>>> {
        Ok(match self {
            Service::Lab { url, .. } => {
                Some(Service::tool(url, &request.scope)?.create(request.create()))
            }
            Service::CheckThenWrite(store) => match store.start(request.create()) {
                Progress::Done(answer) => Some(answer),
                Progress::Pending { .. } => None,
            },
            Service::Raw(store) => Some(store.create(request.create())),
        })
    }

    /// The write of a looked-up create (check-then-write only).
    pub(super) fn write(&self, request: &RealRequest) -> Result<Result<Outcome>> {
        match self {
            Service::CheckThenWrite(store) => match store.resume(request.create(), Unclaimed) {
                Progress::Done(answer) => Ok(answer),
                Progress::Pending { did, .. } => Err(Error::ScenarioFailed {
                    scenario: "replay",
                    expected: "the write to finish the create".to_owned(),
                    observed: did,
                }),
            },
            _ => Err(Error::ScenarioFailed {
                scenario: "replay",
                expected: "a write step only for check-then-write".to_owned(),
                observed: "a write on a one-transaction service".to_owned(),
            }),
        }
    }

    /// What a send gets while the service is down: the real error of a refused connection.
    pub(super) fn refused(&self, request: &RealRequest) -> Result<Outcome> {
        match self {
            Service::Lab { url, .. } => {
                Service::tool(url, &request.scope)?.create(request.create())
            }
            _ => Err(Error::OutcomeUnknown {
                key: Some(request.key.to_string()),
                reason: "connection refused".to_owned(),
            }),
        }
    }

    /// Stops the service abruptly; its database stays.
    pub(super) fn crash(&mut self) {
        if let Service::Lab { server, .. } = self {
            *server = None;
        }
    }

    /// Starts it again on the same database.
    pub(super) fn restart(&mut self) -> Result<()> {
        if let Service::Lab {
            database,
            clock,
            server,
            url,
        } = self
        {
            let started = serve(database, clock)?;
            *url = started.url();
            *server = Some(started);
        }
        Ok(())
    }

    /// Prunes the record of `scope` and `key`: a real pruning pass once it has aged past the
    /// retention window, or (`tombstone` false) the admin endpoint's delete, which leaves none.
    pub(super) fn prune(&self, scope: &Scope, key: &OperationKey, tombstone: bool) -> Result<u64> {
        match self {
            Service::Lab {
                clock, server, url, ..
            } => {
                if tombstone {
                    clock.advance(HOUR * 2);
                    let pruned = server.as_ref().map(TicketServer::prune).transpose()?;
                    Ok(pruned.map_or(0, |p| p.records))
                } else {
                    Ok(u64::from(
                        Service::tool(url, scope)?.forget_record(scope, key)?,
                    ))
                }
            }
            Service::CheckThenWrite(store) => Ok(u64::from(store.forget_record(scope, key)?)),
            Service::Raw(store) => Ok(u64::from(store.forget_record(scope, key)?)),
        }
    }

    /// How many tickets the service holds (read through a caller of scope `c1`).
    pub(super) fn tickets(&self, c1: &Scope) -> Result<u64> {
        match self {
            Service::Lab { url, .. } => Service::tool(url, c1)?.count_tickets(),
            Service::CheckThenWrite(store) => store.count_tickets(),
            Service::Raw(store) => store.count_tickets(),
        }
    }
}

fn serve(database: &std::path::Path, clock: &ManualClock) -> Result<TicketServer> {
    let callers = ["c1", "c2"]
        .iter()
        .map(|c| format!("{c}=replay-token-{c}").parse::<CallerToken>())
        .collect::<Result<Vec<_>>>()?;
    TicketServer::start(ServeOptions {
        database: Some(database.to_owned()),
        callers,
        admin_token: Some(ADMIN.to_owned()),
        workers: 1,
        retention: Some(Retention {
            records: HOUR,
            tombstones: HOUR * 24 * 365,
        }),
        clock: Some(Arc::new(clock.clone())),
        ..ServeOptions::default()
    })
}
