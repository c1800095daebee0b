//! The runner's side of a replay: each real runner on a thread of its own, its tool a [`Wire`]
//! that hands every request to the replay and waits for what the path does with it.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::model::Variant;
use crate::payload::Payload;
use crate::runner::{Jitter, RetryPolicy, Runner, ServiceCheck};
use crate::suite::Operation;
use crate::tool::{CreateRequest, Outcome, TicketId, TicketTool};

use super::service::RealRequest;

/// How long the replay waits for a runner to reach its next send or to finish.
pub(super) const SETTLE: Duration = Duration::from_secs(20);

/// What the path does with a runner stopped between two sends, or in a call.
pub(super) enum Delivery {
    /// Between two sends: go on and send.
    Go,
    /// In a call: the answer the runner's tool returns.
    Answer(Result<Outcome>),
    /// The runner's process dies there.
    Crash,
}

/// Where a runner stopped.
#[derive(Clone, Debug)]
pub(super) enum Point {
    /// Between two sends, before it counts the next (the model's `Ready`).
    Ready,
    /// In its tool with this request, not yet taken by the replay.
    Sending(RealRequest),
    /// In its tool, its request taken, waiting for an answer.
    Waiting,
}

/// How a runner's thread ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// Its call returned.
    Returned,
    /// Its call failed: the error.
    Failed(String),
    /// It was crashed.
    Crashed,
}

/// Where one runner stands, as its wire and thread tell it.
#[derive(Default)]
pub(super) struct Slot {
    /// Where it stopped, if it is stopped.
    pub at: Option<Point>,
    /// What the replay gives the stopped runner.
    pub delivery: Option<Delivery>,
    /// How its last thread ended, once it has.
    pub ended: Option<Ended>,
}

/// What the replay and the runners' threads share.
pub(super) struct Hub {
    slots: Mutex<Vec<Slot>>,
    changed: Condvar,
    /// Whether the service is up, as the runners' checks see it.
    pub up: AtomicBool,
}

impl Hub {
    pub(super) fn new(runners: usize) -> Arc<Hub> {
        Arc::new(Hub {
            slots: Mutex::new((0..runners).map(|_| Slot::default()).collect()),
            changed: Condvar::new(),
            up: AtomicBool::new(true),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `done` holds for the slots, or [`SETTLE`] passes: whether it held.
    pub(super) fn wait_for(&self, done: impl Fn(&[Slot]) -> bool) -> bool {
        let slots = self.lock();
        let (slots, _) = self
            .changed
            .wait_timeout_while(slots, SETTLE, |s| !done(s))
            .unwrap_or_else(PoisonError::into_inner);
        done(&slots)
    }

    pub(super) fn notify(&self) {
        self.changed.notify_all();
    }
}

/// The payload of a crash's unwinding.
struct Crashed;

/// How a runner's client makes the key it sends: the lab's, or a client-side mistake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Client {
    /// The runner's saved key, every send.
    Saved,
    /// A new key on every send (`k1`, `k1~2`, ...), numbered by the runner's count of sends.
    FreshPerSend,
    /// A key made when the process starts, from the count of sends: a restart makes another.
    MemoryPerProcess,
    /// The saved key, but every send counted as refused in the runner's file as it goes out.
    CountsSendsRefused,
}

impl Client {
    pub(super) fn of(variant: Variant) -> Client {
        match variant {
            Variant::FreshKey => Client::FreshPerSend,
            Variant::MemoryKey => Client::MemoryPerProcess,
            Variant::HeldAfterSend => Client::CountsSendsRefused,
            _ => Client::Saved,
        }
    }
}

/// A runner's tool in a replay.
pub(super) struct Wire {
    hub: Arc<Hub>,
    runner: usize,
    file: PathBuf,
    client: Client,
    /// The memory-key client's key generation for this process.
    generation: Mutex<Option<u32>>,
}

/// The key `base` of generation `generation`, as the model names it (`k1`, `k1~2`, ...).
pub(super) fn generation_key(base: &OperationKey, generation: u32) -> Result<OperationKey> {
    if generation <= 1 {
        return Ok(base.clone());
    }
    OperationKey::try_from(format!("{}~{generation}", base.as_str()))
}

/// The payload's fields in reverse key order: the same object, spelled otherwise.
pub(super) fn respelled(payload: &Payload) -> Result<Payload> {
    let fields: Vec<String> = payload
        .as_object()
        .iter()
        .rev()
        .map(|(name, value)| format!("{}:{value}", serde_json::Value::from(name.as_str())))
        .collect();
    Payload::from_json_text(&format!("{{{}}}", fields.join(",")))
}

impl Wire {
    /// The runner's count of sends of this operation, as its file holds it (counted before the
    /// send, so this send included).
    fn sends(&self, scope: &Scope, key: &OperationKey) -> Result<Option<u32>> {
        let db = Connection::open_with_flags(&self.file, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        let sends: Option<u32> = db
            .query_row(
                "SELECT attempts FROM operations WHERE caller = ?1 AND operation = ?2 AND key = ?3",
                params![scope.caller(), scope.operation(), key.as_str()],
                |row| row.get(0),
            )
            .optional()?;
        if self.client == Client::CountsSendsRefused {
            db.execute(
                "UPDATE operations SET refused_sends = attempts
                 WHERE caller = ?1 AND operation = ?2 AND key = ?3",
                params![scope.caller(), scope.operation(), key.as_str()],
            )?;
        }
        Ok(sends)
    }

    fn request(&self, request: &CreateRequest<'_>) -> Result<RealRequest> {
        let base = request.key.ok_or_else(|| Error::Unsupported {
            what: "an unkeyed create in a replay".to_owned(),
        })?;
        let saved = self.sends(request.scope, base)?;
        let sends = saved.unwrap_or(1);
        let key = match self.client {
            Client::Saved | Client::CountsSendsRefused => base.clone(),
            Client::FreshPerSend => generation_key(base, sends)?,
            Client::MemoryPerProcess => {
                let mut generation = self
                    .generation
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                generation_key(base, *generation.get_or_insert(sends))?
            }
        };
        // The model's sends alternate between two spellings of the same object; so do these.
        let payload = if sends % 2 == 0 {
            respelled(request.payload)?
        } else {
            request.payload.clone()
        };
        Ok(RealRequest {
            scope: request.scope.clone(),
            key,
            payload,
            sends: saved,
        })
    }
}

impl TicketTool for Wire {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        let real = self.request(&request)?;
        match stop(&self.hub, self.runner, Point::Sending(real)) {
            Some(Delivery::Answer(answer)) => answer,
            _ => Err(Error::OutcomeUnknown {
                key: Some(real_key(&request)),
                reason: "the replay gave no answer".to_owned(),
            }),
        }
    }

    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        Err(unsupported())
    }

    fn count_records(&self) -> Result<u64> {
        Err(unsupported())
    }

    fn forget_record(&self, _: &Scope, _: &OperationKey) -> Result<bool> {
        Err(unsupported())
    }

    fn connect(&self) -> Result<Wire> {
        Err(unsupported())
    }
}

/// Stops runner `runner` at `point` until the replay delivers something; a crash unwinds.
fn stop(hub: &Hub, runner: usize, point: Point) -> Option<Delivery> {
    let mut slots = hub.lock();
    slots[runner].at = Some(point);
    hub.notify();
    let (mut slots, _) = hub
        .changed
        .wait_timeout_while(slots, SETTLE * 3, |s| s[runner].delivery.is_none())
        .unwrap_or_else(PoisonError::into_inner);
    slots[runner].at = None;
    let delivery = slots[runner].delivery.take();
    drop(slots);
    hub.notify();
    if matches!(delivery, Some(Delivery::Crash)) {
        resume_unwind(Box::new(Crashed));
    }
    delivery
}

fn real_key(request: &CreateRequest<'_>) -> String {
    request.key.map(ToString::to_string).unwrap_or_default()
}

fn unsupported() -> Error {
    Error::Unsupported {
        what: "inspection through a replay's wire".to_owned(),
    }
}

/// The runner's check before each run: the service is unreachable while it is down.
struct UpCheck(Arc<Hub>);

impl ServiceCheck for UpCheck {
    fn unreachable(&self) -> Option<String> {
        (!self.0.up.load(Ordering::SeqCst))
            .then(|| "the service refused the connection (replay)".to_owned())
    }

    fn refused_configuration(&self, _answer: &Error) -> Option<String> {
        None
    }
}

/// Starts runner `runner`'s process: it submits `operation`, or (`None`) resumes its file.
pub(super) fn start_runner(
    hub: &Arc<Hub>,
    runner: usize,
    file: PathBuf,
    client: Client,
    sends: u8,
    operation: Option<Operation>,
) -> Result<JoinHandle<()>> {
    hub.lock()[runner] = Slot::default();
    let hub = Arc::clone(hub);
    let policy = RetryPolicy {
        attempts: u32::from(sends),
        first_backoff: Duration::ZERO,
        max_backoff: Duration::ZERO,
        deadline: Duration::from_secs(3600),
    };
    std::thread::Builder::new()
        .name(format!("replay-runner-{runner}"))
        .spawn(move || {
            let wire = Wire {
                hub: Arc::clone(&hub),
                runner,
                file: file.clone(),
                client,
                generation: Mutex::new(None),
            };
            let run = catch_unwind(AssertUnwindSafe(|| {
                let between = Arc::clone(&hub);
                let real = Runner::open(&file, wire, policy)?
                    .with_jitter(Jitter::seeded(1))
                    .with_check(UpCheck(Arc::clone(&hub)))
                    .with_before_send(move || {
                        stop(&between, runner, Point::Ready);
                    });
                match &operation {
                    Some(operation) => real.submit(operation).map(|_| ()),
                    None => real.resume().map(|_| ()),
                }
            }));
            let ended = match run {
                Ok(Ok(())) => Ended::Returned,
                Ok(Err(err)) => Ended::Failed(err.to_string()),
                Err(payload) if payload.is::<Crashed>() => Ended::Crashed,
                Err(_) => Ended::Failed("the runner panicked".to_owned()),
            };
            hub.lock()[runner].ended = Some(ended);
            hub.notify();
        })
        .map_err(|source| Error::Io {
            action: "starting a replay's runner thread".to_owned(),
            source,
        })
}
