//! Concurrency under stress: many rounds of callers released together, with jitter, on fresh keys
//! and on keys that already exist.
//!
//! A race between a lookup and an insert needs a second caller inside a window that may be a few
//! nanoseconds wide: an adapter that gives up its lock between the two and takes it straight back.
//! A caller gets there only when the scheduler switches threads inside that window. One release
//! of eight callers finds it now and then; hundreds of rounds of more callers than cores, which
//! yield their cores while they wait, find it in practically every run, while a correct tool pays
//! one commit per round.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::error::Error;
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::tool::{CreateRequest, Outcome, TicketId, TicketTool};

use super::Options;
use super::points::distinct;
use super::probe::{Check, Fresh, Probe, caller, key, payload_of, unexpected_error};
use super::report::Failure;

/// How often a caller sends again after an unknown outcome (a wait that ran out, a key still in
/// progress), which the contract allows under contention, before the point fails.
const RETRIES_AFTER_UNKNOWN: u32 = 50;

/// Fresh keys: in every round exactly one caller creates and every caller gets that ticket.
pub fn callers_released_together_converge_on_fresh_keys<T: TicketTool + Send>(
    fresh: &mut Fresh<'_, T>,
    options: &Options,
) -> Check {
    let tool = fresh.tool()?;
    let mut callers = connect_all(&tool, options.callers)?;
    let scope = caller();
    let operations = round_operations("stress-fresh", options.fresh_key_rounds);
    let requests = requests(&scope, &operations);
    // Most rounds with two callers, one per core of a small machine, racing in true parallel;
    // the rest with every caller, more than the cores, which makes the scheduler switch threads
    // inside a tool's create.
    let (pairs, crowds) = requests.split_at(requests.len() * 4 / 5);
    let mut crowd = callers.split_off(2.min(callers.len()));
    let mut rounds = release_together(&mut callers, pairs, options.seed);
    crowd.append(&mut callers);
    rounds.extend(release_together(
        &mut crowd,
        crowds,
        options.seed.rotate_left(13),
    ));
    let mut expected_tickets = Vec::new();
    for (round, answers) in rounds.iter().enumerate() {
        expected_tickets.push(converged(answers, round, true)?);
    }
    if distinct(&expected_tickets) != expected_tickets.len() {
        return Err(Failure::new(
            "a different ticket for every key",
            format!(
                "{} different tickets for {} keys",
                distinct(&expected_tickets),
                expected_tickets.len()
            ),
            "two keys were given one ticket id: ids handed out per connection, or a replay \
             found another key's record",
        ));
    }
    Probe::new(&tool).stored(
        &expected_tickets,
        options.fresh_key_rounds as u64,
        "callers released together wrote more than one ticket or record for one key",
    )
}

/// Completed keys: every caller of every round replays the ticket, and nothing new is written.
pub fn callers_released_together_replay_completed_keys<T: TicketTool + Send>(
    fresh: &mut Fresh<'_, T>,
    options: &Options,
) -> Check {
    let tool = fresh.tool()?;
    let probe = Probe::new(&tool);
    let scope = caller();
    let operations = round_operations("stress-done", options.completed_key_rounds);
    let mut ids = Vec::new();
    for (key, payload) in &operations {
        ids.push(probe.created(
            CreateRequest::keyed(&scope, key, payload),
            &format!("the first create of {key}"),
            "a new key replayed another key's ticket",
        )?);
    }
    let mut callers = connect_all(&tool, options.callers)?;
    let requests = requests(&scope, &operations);
    let rounds = release_together(&mut callers, &requests, options.seed.rotate_left(7));
    for (round, (answers, id)) in rounds.iter().zip(&ids).enumerate() {
        let got = converged(answers, round, false)?;
        if got != *id {
            return Err(Failure::new(
                format!("round {round}: every caller to replay ticket {id}"),
                format!("ticket {got}"),
                "concurrent retries of a completed key are answered from something other than \
                 its record",
            ));
        }
    }
    probe.stored(
        &ids,
        options.completed_key_rounds as u64,
        "concurrent retries of completed keys wrote tickets or records",
    )
}

/// One key and payload per round, named after the point.
fn round_operations(name: &str, rounds: usize) -> Vec<(OperationKey, Payload)> {
    (0..rounds)
        .map(|round| {
            let payload = payload_of(serde_json::json!({"title": name, "round": round}));
            (key(&format!("{name}-{round}")), payload)
        })
        .collect()
}

/// The keyed requests for `operations`, in order.
fn requests<'a>(
    scope: &'a Scope,
    operations: &'a [(OperationKey, Payload)],
) -> Vec<CreateRequest<'a>> {
    operations
        .iter()
        .map(|(key, payload)| CreateRequest::keyed(scope, key, payload))
        .collect()
}

fn connect_all<T: TicketTool>(tool: &T, callers: usize) -> std::result::Result<Vec<T>, Failure> {
    (0..callers)
        .map(|_| {
            tool.connect().map_err(|err| {
                Failure::new(
                    "a connection per concurrent caller",
                    format!("error: {err}"),
                    "TicketTool::connect failed",
                )
            })
        })
        .collect()
}

/// What one caller ended with.
type Answer = crate::Result<Outcome>;

/// Runs one round per request: every caller waits at the release, then sends the round's
/// request (after a seeded jitter in some rounds), and sends again with the same key after an
/// unknown outcome. The callers' threads live for all rounds, so a round costs a release, not
/// sixteen thread starts. Returns each round's answers.
fn release_together<T: TicketTool + Send>(
    callers: &mut Vec<T>,
    requests: &[CreateRequest<'_>],
    seed: u64,
) -> Vec<Vec<Answer>> {
    let release = Release::new(callers.len());
    let (returned, per_caller): (Vec<T>, Vec<Vec<Answer>>) = std::thread::scope(|threads| {
        let handles: Vec<_> = callers
            .drain(..)
            .enumerate()
            .map(|(n, caller)| {
                let release = &release;
                threads.spawn(move || {
                    let mut answers = Vec::with_capacity(requests.len());
                    for (round, request) in requests.iter().enumerate() {
                        if !release.wait(round) {
                            break; // another caller's tool panicked
                        }
                        for _ in 0..jitter(seed, round as u64, n as u64) {
                            std::thread::yield_now();
                        }
                        match catch_unwind(AssertUnwindSafe(|| send(&caller, *request))) {
                            Ok(answer) => answers.push(answer),
                            Err(panic) => {
                                release.abandon();
                                resume_unwind(panic);
                            }
                        }
                    }
                    (caller, answers)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(done) => done,
                // The tool under test panicked in a caller's thread; the run reports it.
                Err(panic) => resume_unwind(panic),
            })
            .unzip()
    });
    *callers = returned;
    let mut rounds: Vec<Vec<Answer>> = requests.iter().map(|_| Vec::new()).collect();
    for answers in per_caller {
        for (round, answer) in answers.into_iter().enumerate() {
            rounds[round].push(answer);
        }
    }
    rounds
}

/// Lets every caller of a round go at once. Waiting callers yield their core instead of
/// sleeping: with more callers than cores, the scheduler then switches between them often,
/// also between a tool's lookup and its insert, which is where a race hides. After a while
/// (a slow round: a commit waiting for the disk) they sleep briefly, to leave the cores to the
/// tool.
///
/// Two callers do more: after the release each spins until the other is spinning too, so both
/// are on a core at the same moment when they send. On a busy machine a released thread may
/// not run for milliseconds, and a race between two callers that never overlap is never seen.
struct Release {
    callers: usize,
    arrived: AtomicUsize,
    round: AtomicUsize,
    abandoned: AtomicBool,
    /// Callers of this round spinning in the rendezvous, and whether it completed.
    spinning: AtomicUsize,
    go: AtomicBool,
}

/// How long a caller spins in the rendezvous before it steps out and yields its core, in spins.
const RENDEZVOUS_SPINS: u32 = 20_000;

impl Release {
    fn new(callers: usize) -> Release {
        Release {
            callers,
            arrived: AtomicUsize::new(0),
            round: AtomicUsize::new(0),
            abandoned: AtomicBool::new(false),
            spinning: AtomicUsize::new(0),
            go: AtomicBool::new(false),
        }
    }

    /// Waits until every caller reached `round` (and, for two callers, until both are running);
    /// false when the run was abandoned.
    fn wait(&self, round: usize) -> bool {
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.callers * (round + 1) {
            // Everyone else waits for the store below, so the rendezvous can start afresh.
            self.spinning.store(0, Ordering::Release);
            self.go.store(false, Ordering::Release);
            self.round.store(round + 1, Ordering::Release);
        }
        if !self.released(round) {
            return false;
        }
        self.callers > 2 || self.rendezvous()
    }

    /// Spins until the other caller spins too. A caller that spun long alone steps out (unless
    /// the other has just arrived), yields, and comes back.
    fn rendezvous(&self) -> bool {
        loop {
            if self.spinning.fetch_add(1, Ordering::AcqRel) + 1 == self.callers {
                self.go.store(true, Ordering::Release);
                return true;
            }
            let mut spins = 0;
            while !self.go.load(Ordering::Acquire) && spins < RENDEZVOUS_SPINS {
                std::hint::spin_loop();
                spins += 1;
            }
            if self.go.load(Ordering::Acquire) {
                return true;
            }
            // Step out, unless the other caller arrived meanwhile (then it is setting `go`).
            let mut seen = self.spinning.load(Ordering::Acquire);
            loop {
                if seen >= self.callers {
                    while !self.go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    return true;
                }
                match self.spinning.compare_exchange(
                    seen,
                    seen - 1,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(now) => seen = now,
                }
            }
            if self.abandoned.load(Ordering::Acquire) {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// Waits, yielding, until the round is released.
    fn released(&self, round: usize) -> bool {
        let mut spins = 0u32;
        while self.round.load(Ordering::Acquire) <= round {
            if self.abandoned.load(Ordering::Acquire) {
                return false;
            }
            spins += 1;
            if spins < 2_000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        true
    }

    fn abandon(&self) {
        self.abandoned.store(true, Ordering::Release);
    }
}

/// One caller's send, repeated with the same key while the outcome is unknown.
fn send<T: TicketTool>(caller: &T, request: CreateRequest<'_>) -> Answer {
    let mut result = caller.create(request);
    for attempt in 0..RETRIES_AFTER_UNKNOWN {
        if !matches!(result, Err(Error::OutcomeUnknown { .. })) {
            break;
        }
        std::thread::sleep(Duration::from_millis(u64::from(attempt.min(20)) + 1));
        result = caller.create(request);
    }
    result
}

/// The callers' answers name one ticket; with `fresh`, exactly one of them created it.
fn converged(
    answers: &[Answer],
    round: usize,
    fresh: bool,
) -> std::result::Result<TicketId, Failure> {
    let mut ids = Vec::new();
    let mut created = 0;
    for answer in answers {
        match answer {
            Ok(outcome) => {
                created += usize::from(!outcome.is_replay());
                ids.push(outcome.ticket_id().clone());
            }
            Err(err) => {
                return Err(unexpected_error(
                    format!("round {round}: every concurrent caller to get the ticket"),
                    err,
                ));
            }
        }
    }
    let race = "the lookup and the insert are not one atomic step: a second caller looked the key \
                up after the first had looked and before it wrote (check, unlock, insert); hold \
                one lock or transaction (BEGIN IMMEDIATE, a unique index) across both";
    let want_created = usize::from(fresh);
    if created != want_created || distinct(&ids) != 1 {
        let outcomes: Vec<String> = answers
            .iter()
            .filter_map(|a| a.as_ref().ok().map(|o| format!("{o:?}")))
            .collect();
        return Err(Failure::new(
            format!(
                "round {round}: {want_created} caller(s) of {} to create and all to report one ticket",
                answers.len()
            ),
            format!("{created} created; answers {}", outcomes.join(", ")),
            race,
        ));
    }
    Ok(ids.swap_remove(0))
}

/// How many times a caller yields after the release: none in three rounds of four, and zero to
/// two, drawn from the seed, in the fourth, so that callers meet the tool in varying orders.
fn jitter(seed: u64, round: u64, caller: u64) -> u64 {
    let mut z = seed
        .wrapping_add(round.wrapping_mul(0xD1B5_4A32_D192_ED03))
        .wrapping_add(caller.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    if round % 4 == 3 { z % 3 } else { 0 }
}
