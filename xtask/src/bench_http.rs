//! The HTTP part of `cargo xtask bench`: keyed creates against unkeyed creates through `lab serve`
//! (release build), at 8 and 64 connections, side by side in one run.
//!
//! Two load generators, each for what it measures well:
//! - the key's cost (answers per second, and the server's CPU time per answer) comes from
//!   [wrk](https://github.com/wg/wrk) on one thread: written in C, it takes about a fifth of a core
//!   for what `lab serve` answers on this machine, so the server has the rest;
//! - each connection's share and the latency come from a generator of our own, because wrk's Lua
//!   sees threads, not connections. `cargo xtask` runs it as a debug build of tokio and hyper, so
//!   it takes more than half a core: its own rate is lower than wrk's, and is not used for the
//!   key's cost. Without wrk, the cost falls back to this generator's figures, loudly.
//!
//! Every measurement gets a fresh server and store. Keyed and unkeyed runs take turns, in the
//! opposite order each round, so a drift of the machine falls on both. Each round gives its own
//! keyed-to-unkeyed ratio, by answers per second and by the server's CPU time per answer, and the
//! section keeps them all, so the spread over rounds is shown beside the median. The CPU time each
//! side used is recorded beside the figures, so a reader can see which side was saturated.
//! Nothing here asserts on a number: the targets are printed beside the ratios.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// Connection counts measured, as the issue states its targets.
const CONNECTIONS: [usize; 2] = [8, 64];

/// The body of every create.
const PAYLOAD: &str = r#"{"title": "Bench", "priority": "normal"}"#;

/// How long and how often to measure.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Answers that arrive in this time after the start are not counted.
    warmup: Duration,
    /// The counted part of each measurement.
    measured: Duration,
    /// Rounds; each measures every (connections, keyed) pair once.
    rounds: u32,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                warmup: Duration::from_millis(300),
                measured: Duration::from_secs(1),
                rounds: 1,
            }
        } else {
            Plan {
                warmup: Duration::from_millis(500),
                measured: Duration::from_secs(4),
                rounds: 3,
            }
        }
    }
}

/// What one connection saw in one measurement.
#[derive(Debug, Default)]
struct ConnectionCounts {
    /// 2xx answers that arrived inside the counted window, whenever their request was sent.
    answered: u64,
    /// Other answers inside the window.
    other_status: u64,
    /// Transport errors (the task stops at the first).
    errors: u64,
    /// 2xx answers at any time, warm-up and drain included: the work the server's CPU time of the
    /// whole measurement paid for.
    answered_all: u64,
    /// Latency of every counted 2xx answer, in microseconds.
    latencies_us: Vec<u32>,
}

/// The sums over every round for one (connections, keyed) pair.
#[derive(Debug, Default)]
struct Totals {
    /// Answers per connection, summed over rounds (connection i of every round adds to slot i).
    per_connection: Vec<u64>,
    other_status: u64,
    errors: u64,
    latencies_us: Vec<u32>,
    measured_seconds: f64,
    client_cpu_seconds: f64,
    server_cpu_seconds: f64,
    /// Every 2xx answer, warm-up and drain included, summed over rounds.
    answered_all: u64,
    /// Wall time from the first connection to the last answer, summed over rounds.
    wall_seconds: f64,
    /// Each round's figures, in the order measured.
    rounds: Vec<Value>,
}

/// Runs every measurement and returns the `http` section of `bench.json`.
///
/// # Errors
/// When `lab serve` cannot be started or does not print its URL, the client's runtime cannot
/// start, or wrk fails or prints no rate.
pub fn run(lab: &Path, scratch: &Path, quick: bool) -> Result<Value> {
    let plan = Plan::new(quick);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the load generator's runtime")?;
    let wrk = Wrk::find(scratch)?;
    let pairs: Vec<(usize, bool)> = CONNECTIONS
        .iter()
        .flat_map(|&c| [(c, true), (c, false)])
        .collect();
    let (totals, wrk_rounds) = measure_all(lab, scratch, &runtime, wrk.as_ref(), &pairs, plan)?;
    let runs: Vec<Value> = pairs
        .iter()
        .zip(totals)
        .map(|(&(connections, keyed), total)| summarise(connections, keyed, total))
        .collect();
    // The key's cost: wrk's rounds, or this generator's own where wrk is missing.
    let cost_runs: Vec<Value> = match &wrk {
        Some(_) => pairs
            .iter()
            .zip(wrk_rounds)
            .map(|(&(connections, keyed), rounds)| cost_run(connections, keyed, rounds))
            .collect(),
        None => pairs
            .iter()
            .zip(&runs)
            .map(|(&(connections, keyed), run)| {
                let rounds = run["rounds"].as_array().cloned().unwrap_or_default();
                cost_run(connections, keyed, rounds)
            })
            .collect(),
    };
    let ratios: Vec<Value> = CONNECTIONS
        .iter()
        .map(|&connections| {
            let rounds = |keyed: bool| {
                cost_runs
                    .iter()
                    .find(|run| run["connections"] == connections && run["keyed"] == keyed)
                    .and_then(|run| run["rounds"].as_array())
                    .map_or(&[][..], Vec::as_slice)
            };
            ratios(connections, rounds(true), rounds(false))
        })
        .collect();
    Ok(json!({
        "measured": true,
        "server": "lab serve --faults (release build), 8 workers, a fresh store per measurement",
        "client": "xtask's load generator: tokio (one thread) and hyper 1 (a debug build), one task per connection: each connection's share and the latency",
        "cost_client": match &wrk {
            Some(wrk) => format!("{} on one thread, one key per request from a Lua script: the rate and the server's CPU per answer", wrk.version),
            None => "xtask's load generator (wrk was not installed): the rate and the server's CPU per answer".to_owned(),
        },
        "plan": {
            "warmup_s": plan.warmup.as_secs_f64(),
            "measured_s": plan.measured.as_secs_f64(),
            "rounds": plan.rounds,
        },
        "runs": runs,
        "cost_runs": cost_runs,
        "ratios": ratios,
    }))
}

/// Every measurement of the plan, in its order: each pair's totals from xtask's generator, and
/// each pair's rounds measured with wrk (empty without wrk).
fn measure_all(
    lab: &Path,
    scratch: &Path,
    runtime: &tokio::runtime::Runtime,
    wrk: Option<&Wrk>,
    pairs: &[(usize, bool)],
    plan: Plan,
) -> Result<(Vec<Totals>, Vec<Vec<Value>>)> {
    let mut totals: Vec<Totals> = pairs.iter().map(|_| Totals::default()).collect();
    let mut wrk_rounds: Vec<Vec<Value>> = pairs.iter().map(|_| Vec::new()).collect();
    let mut serial = 0;
    for round in 0..plan.rounds {
        for &connections in &CONNECTIONS {
            let order = if round % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for keyed in order {
                let slot = pairs
                    .iter()
                    .position(|&pair| pair == (connections, keyed))
                    .context("every measured pair has its totals")?;
                let side = if keyed { "keyed" } else { "unkeyed" };
                eprintln!(
                    "bench: http round {}/{}, {connections} connections, {side}",
                    round + 1,
                    plan.rounds,
                );
                serial += 1;
                let server = Server::start(lab, &scratch.join(format!("http-{serial}.sqlite")))?;
                let seen = measure(runtime, &server, connections, keyed, plan);
                drop(server);
                totals[slot].add(round + 1, connections, seen, plan);
                if let Some(wrk) = wrk {
                    serial += 1;
                    let server =
                        Server::start(lab, &scratch.join(format!("http-{serial}.sqlite")))?;
                    wrk_rounds[slot].push(wrk.measure(
                        &server,
                        round + 1,
                        connections,
                        keyed,
                        plan,
                    )?);
                }
            }
        }
    }
    Ok((totals, wrk_rounds))
}

/// One (connections, keyed) pair's cost figures: each its median over the rounds, and the rounds.
fn cost_run(connections: usize, keyed: bool, rounds: Vec<Value>) -> Value {
    let sum = |field: &str| -> u64 {
        rounds
            .iter()
            .map(|round| round[field].as_u64().unwrap_or(0))
            .sum()
    };
    let median = |field: &str| {
        lab::bench::median_f64(
            rounds
                .iter()
                .map(|round| round[field].as_f64().unwrap_or(f64::NAN))
                .collect(),
        )
    };
    json!({
        "connections": connections,
        "keyed": keyed,
        "requests_per_second": median("requests_per_second"),
        "server_cpu_us_per_answer": median("server_cpu_us_per_answer"),
        "server_cores": median("server_cores"),
        "client_cores": median("client_cores"),
        "other_status": sum("other_status"),
        "errors": sum("errors"),
        "rounds": rounds,
    })
}

/// wrk, found on the PATH, with the Lua script that gives each keyed create a key of its own.
struct Wrk {
    version: String,
    script: PathBuf,
}

impl Wrk {
    /// wrk if it is installed (`None`, said loudly, if not), its script written into `scratch`.
    fn find(scratch: &Path) -> Result<Option<Wrk>> {
        // `wrk -v` prints its version and its usage, and exits with 1.
        let Ok(output) = Command::new("wrk").arg("-v").output() else {
            eprintln!(
                "\n*** wrk is not installed: the key's cost over HTTP is measured with xtask's own \
                 generator, a debug build that takes more than half a core beside the server ***\n"
            );
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let version = text
            .lines()
            .next()
            .and_then(|line| line.split(" [").next())
            .filter(|line| line.starts_with("wrk "))
            .with_context(|| format!("`wrk -v` printed {text:?}, not its version"))?
            .to_owned();
        let script = scratch.join("bench.lua");
        std::fs::write(&script, wrk_script())
            .with_context(|| format!("writing {}", script.display()))?;
        Ok(Some(Wrk { version, script }))
    }

    /// One measurement against a started server: wrk's rate, and both sides' CPU time over it.
    fn measure(
        &self,
        server: &Server,
        round: u32,
        connections: usize,
        keyed: bool,
        plan: Plan,
    ) -> Result<Value> {
        let seconds = plan.measured.as_secs().max(1);
        let server_before = server.cpu_seconds();
        let client_before = children_cpu_seconds();
        let started = Instant::now();
        let output = Command::new("wrk")
            .args(["-t1", &format!("-c{connections}"), &format!("-d{seconds}s")])
            .arg("-s")
            .arg(&self.script)
            .arg(format!("http://{}", server.address))
            .env(
                "LAB_BENCH_PATH",
                if keyed {
                    "/tickets"
                } else {
                    "/unkeyed-tickets"
                },
            )
            .stderr(Stdio::inherit())
            .output()
            .context("running wrk")?;
        let wall_s = started.elapsed().as_secs_f64();
        let client_cpu_s = children_cpu_seconds() - client_before;
        let server_cpu_s = match (server_before, server.cpu_seconds()) {
            (Some(before), Some(after)) => after - before,
            _ => f64::NAN,
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let counts = WrkCounts::read(&text)
            .with_context(|| format!("wrk printed no rate ({}):\n{text}", output.status))?;
        Ok(json!({
            "round": round,
            "requests_per_second": counts.rate,
            "server_cpu_us_per_answer": per_answer_us(server_cpu_s, counts.answered - counts.other_status),
            "server_cores": server_cpu_s / wall_s,
            "client_cores": client_cpu_s / wall_s,
            "other_status": counts.other_status,
            "errors": counts.errors,
        }))
    }
}

/// The Lua script wrk runs: every request a create, keyed ones with a key no other request has.
fn wrk_script() -> String {
    format!(
        r#"-- Written by cargo xtask bench: one create per request, keyed with a fresh key on /tickets.
local path = os.getenv("LAB_BENCH_PATH")
local sent = 0
request = function()
  sent = sent + 1
  local headers = {{["Authorization"] = "Bearer token-a", ["Content-Type"] = "application/json"}}
  if path == "/tickets" then headers["Idempotency-Key"] = "bench-wrk-" .. sent end
  return wrk.format("POST", path, headers, '{PAYLOAD}')
end
"#
    )
}

/// What wrk's summary says: answers, the rate, and what went wrong.
#[derive(Debug, PartialEq)]
struct WrkCounts {
    answered: u64,
    rate: f64,
    other_status: u64,
    errors: u64,
}

impl WrkCounts {
    /// Reads wrk's summary; `None` without its "requests in" and "Requests/sec" lines.
    fn read(text: &str) -> Option<WrkCounts> {
        let mut answered = None;
        let mut rate = None;
        let mut other_status = 0;
        let mut errors = 0;
        for line in text.lines().map(str::trim) {
            if let Some((count, _)) = line.split_once(" requests in ") {
                answered = count.parse().ok();
            } else if let Some(value) = line.strip_prefix("Requests/sec:") {
                rate = value.trim().parse().ok();
            } else if let Some(value) = line.strip_prefix("Non-2xx or 3xx responses:") {
                other_status = value.trim().parse().ok()?;
            } else if let Some(value) = line.strip_prefix("Socket errors:") {
                // "connect 0, read 0, write 0, timeout 0"
                for part in value.split(',') {
                    errors += part.split_whitespace().last()?.parse::<u64>().ok()?;
                }
            }
        }
        Some(WrkCounts {
            answered: answered?,
            rate: rate?,
            other_status,
            errors,
        })
    }
}

/// What one measurement saw: each connection's counts, and the CPU and wall time of the load.
struct Seen {
    counts: Vec<ConnectionCounts>,
    client_cpu_s: f64,
    server_cpu_s: f64,
    wall_s: f64,
}

/// One measurement against a started server. The CPU times are read just before the first
/// connection and just after the last answer, so the server's start-up is not counted.
fn measure(
    runtime: &tokio::runtime::Runtime,
    server: &Server,
    connections: usize,
    keyed: bool,
    plan: Plan,
) -> Seen {
    let server_before = server.cpu_seconds();
    let client_before = own_cpu_seconds();
    let started = std::time::Instant::now();
    let counts = runtime.block_on(load(server.address, connections, keyed, plan));
    let wall_s = started.elapsed().as_secs_f64();
    let client_cpu_s = own_cpu_seconds() - client_before;
    let server_cpu_s = match (server_before, server.cpu_seconds()) {
        (Some(before), Some(after)) => after - before,
        _ => f64::NAN,
    };
    Seen {
        counts,
        client_cpu_s,
        server_cpu_s,
        wall_s,
    }
}

impl Totals {
    /// Adds one round's measurement, and keeps that round's own figures.
    fn add(&mut self, round: u32, connections: usize, seen: Seen, plan: Plan) {
        self.per_connection.resize(connections, 0);
        for (slot, connection) in self.per_connection.iter_mut().zip(&seen.counts) {
            *slot += connection.answered;
        }
        let counted: u64 = seen.counts.iter().map(|c| c.answered).sum();
        let all: u64 = seen.counts.iter().map(|c| c.answered_all).sum();
        let other_status: u64 = seen.counts.iter().map(|c| c.other_status).sum();
        let errors: u64 = seen.counts.iter().map(|c| c.errors).sum();
        for connection in seen.counts {
            self.other_status += connection.other_status;
            self.errors += connection.errors;
            self.answered_all += connection.answered_all;
            self.latencies_us.extend(connection.latencies_us);
        }
        let measured = plan.measured.as_secs_f64();
        self.measured_seconds += measured;
        self.client_cpu_seconds += seen.client_cpu_s;
        self.server_cpu_seconds += seen.server_cpu_s;
        self.wall_seconds += seen.wall_s;
        self.rounds.push(json!({
            "round": round,
            "requests_per_second": counted as f64 / measured,
            "server_cpu_us_per_answer": per_answer_us(seen.server_cpu_s, all),
            "server_cores": seen.server_cpu_s / seen.wall_s,
            "client_cores": seen.client_cpu_s / seen.wall_s,
            "other_status": other_status,
            "errors": errors,
        }));
    }
}

/// CPU seconds spent per answer, in microseconds; NaN without answers.
fn per_answer_us(cpu_seconds: f64, answers: u64) -> f64 {
    if answers == 0 {
        f64::NAN
    } else {
        cpu_seconds * 1e6 / answers as f64
    }
}

/// The keyed-to-unkeyed ratios of each round at one connection count: answers per second
/// (keyed ÷ unkeyed, so below 1 is the key's cost) and server CPU per answer (unkeyed ÷ keyed,
/// the same direction), each with its median and range over rounds.
fn ratios(connections: usize, keyed: &[Value], unkeyed: &[Value]) -> Value {
    let per_round = |field: &str, keyed_over_unkeyed: bool| -> Vec<f64> {
        keyed
            .iter()
            .zip(unkeyed)
            .map(|(k, u)| {
                let (k, u) = (
                    k[field].as_f64().unwrap_or(f64::NAN),
                    u[field].as_f64().unwrap_or(f64::NAN),
                );
                if keyed_over_unkeyed { k / u } else { u / k }
            })
            .collect()
    };
    json!({
        "connections": connections,
        "rate": spread(per_round("requests_per_second", true)),
        "server_cpu": spread(per_round("server_cpu_us_per_answer", false)),
    })
}

/// Values with their median, least and greatest.
fn spread(values: Vec<f64>) -> Value {
    let least = values.iter().copied().fold(f64::INFINITY, f64::min);
    let greatest = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    json!({
        "median": lab::bench::median_f64(values.clone()),
        "min": least,
        "max": greatest,
        "per_round": values,
    })
}

fn summarise(connections: usize, keyed: bool, total: Totals) -> Value {
    let percentile = |p: u32| {
        lab::bench::percentile(total.latencies_us.clone(), p, Ord::cmp)
            .map_or(f64::NAN, |us| f64::from(us) / 1000.0)
    };
    let answered: u64 = total.per_connection.iter().sum();
    let median =
        lab::bench::percentile(total.per_connection.clone(), 50, Ord::cmp).unwrap_or(0) as f64;
    let share = |count: Option<&u64>| count.map_or(f64::NAN, |&c| c as f64 / median);
    json!({
        "connections": connections,
        "keyed": keyed,
        "answered": answered,
        "other_status": total.other_status,
        "errors": total.errors,
        "requests_per_second": answered as f64 / total.measured_seconds,
        "p50_ms": percentile(50),
        "p99_ms": percentile(99),
        "max_ms": percentile(100),
        "least_served_share": share(total.per_connection.iter().min()),
        "most_served_share": share(total.per_connection.iter().max()),
        "per_connection_answered": total.per_connection,
        "client_cpu_s": total.client_cpu_seconds,
        "server_cpu_s": total.server_cpu_seconds,
        "server_cpu_us_per_answer": per_answer_us(total.server_cpu_seconds, total.answered_all),
        "server_cores": total.server_cpu_seconds / total.wall_seconds,
        "client_cores": total.client_cpu_seconds / total.wall_seconds,
        "measured_s": total.measured_seconds,
        "rounds": total.rounds,
    })
}

/// Drives `connections` connections for the plan's time and returns what each saw.
async fn load(
    address: SocketAddr,
    connections: usize,
    keyed: bool,
    plan: Plan,
) -> Vec<ConnectionCounts> {
    let start = tokio::time::Instant::now();
    let counted_from = start + plan.warmup;
    let end = counted_from + plan.measured;
    let tasks: Vec<_> = (0..connections)
        .map(|number| tokio::spawn(connection(address, number, keyed, counted_from, end)))
        .collect();
    let mut counts = Vec::with_capacity(connections);
    for task in tasks {
        counts.push(task.await.unwrap_or_else(|_| ConnectionCounts {
            errors: 1,
            ..ConnectionCounts::default()
        }));
    }
    counts
}

/// One connection: creates one after another until `end`, each answer read in full.
async fn connection(
    address: SocketAddr,
    number: usize,
    keyed: bool,
    counted_from: tokio::time::Instant,
    end: tokio::time::Instant,
) -> ConnectionCounts {
    let mut counts = ConnectionCounts::default();
    let Ok(stream) = tokio::net::TcpStream::connect(address).await else {
        counts.errors += 1;
        return counts;
    };
    let _ = stream.set_nodelay(true);
    let Ok((mut sender, driver)) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        counts.errors += 1;
        return counts;
    };
    tokio::spawn(driver);
    let path = if keyed {
        "/tickets"
    } else {
        "/unkeyed-tickets"
    };
    let body = Bytes::from_static(PAYLOAD.as_bytes());
    let mut sent: u64 = 0;
    // A request still unanswered a while after the end is abandoned, so a stuck server cannot
    // keep the bench running.
    let give_up = end + Duration::from_secs(5);
    while tokio::time::Instant::now() < end {
        let mut request = Request::post(path)
            .header(HOST, "127.0.0.1")
            .header(AUTHORIZATION, "Bearer token-a")
            .header(CONTENT_TYPE, "application/json");
        if keyed {
            request = request.header("Idempotency-Key", format!("bench-{number}-{sent}"));
        }
        sent += 1;
        let Ok(request) = request.body(Full::new(body.clone())) else {
            counts.errors += 1;
            return counts;
        };
        let started = tokio::time::Instant::now();
        let answer = tokio::time::timeout_at(give_up, async {
            let response = sender.send_request(request).await?;
            let status = response.status();
            response.into_body().collect().await?;
            Ok::<_, hyper::Error>(status)
        })
        .await;
        let finished = tokio::time::Instant::now();
        let Ok(Ok(status)) = answer else {
            counts.errors += 1;
            return counts;
        };
        if status.is_success() {
            counts.answered_all += 1;
        }
        // Counted by when the answer came: a slow answer that began in the warm-up still counts,
        // so the window does not hide the tail.
        if finished < counted_from || finished > end {
            continue;
        }
        if status.is_success() {
            counts.answered += 1;
            let micros = (finished - started).as_micros();
            counts
                .latencies_us
                .push(u32::try_from(micros).unwrap_or(u32::MAX));
        } else {
            counts.other_status += 1;
        }
    }
    counts
}

/// The CPU time (user and system) this process has used, in seconds.
fn own_cpu_seconds() -> f64 {
    cpu_seconds(libc::RUSAGE_SELF)
}

/// The CPU time (user and system) of this process's children that have ended, in seconds.
fn children_cpu_seconds() -> f64 {
    cpu_seconds(libc::RUSAGE_CHILDREN)
}

/// The CPU time (user and system) `getrusage` gives for `who`, in seconds.
fn cpu_seconds(who: libc::c_int) -> f64 {
    // SAFETY: getrusage writes into the struct it is given and reads nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage; `who` is RUSAGE_SELF or RUSAGE_CHILDREN.
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return f64::NAN;
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// A `lab serve` child process, killed when dropped.
struct Server {
    child: Child,
    address: SocketAddr,
}

impl Server {
    fn start(lab: &Path, database: &Path) -> Result<Server> {
        let mut child = Command::new(lab)
            .args([
                "serve",
                "--port",
                "0",
                "--faults",
                "--caller",
                "alice=token-a",
            ])
            .arg("--database")
            .arg(database)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting lab serve")?;
        let mut line = String::new();
        let read = child
            .stdout
            .take()
            .map(|stdout| BufReader::new(stdout).read_line(&mut line));
        let address = line
            .trim()
            .strip_prefix("listening on http://")
            .and_then(|address| address.parse().ok());
        match (read, address) {
            (Some(Ok(_)), Some(address)) => Ok(Server { child, address }),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("lab serve printed {line:?}, not its URL")
            }
        }
    }

    /// The CPU time the server has used so far, from `/proc` (Linux only).
    fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: f64 =
            fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        // SAFETY: sysconf only reads a configuration value.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (per_second > 0).then(|| ticks / per_second as f64)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The run of `list` (`runs` or `cost_runs`) at `connections`, keyed or not.
fn run_of<'h>(http: &'h Value, list: &str, connections: u64, keyed: bool) -> Option<&'h Value> {
    http[list]
        .as_array()?
        .iter()
        .find(|run| run["connections"] == connections && run["keyed"] == keyed)
}

/// Prints the HTTP targets of issues #14 and #48 beside the measured figures.
pub fn print_targets(http: &Value) {
    let number = |run: &Value, field: &str| run[field].as_f64().unwrap_or(f64::NAN);
    let ratio = |connections: u64, which: &str| {
        let found = http["ratios"]
            .as_array()
            .and_then(|all| all.iter().find(|r| r["connections"] == connections));
        found.map_or("n/a".to_owned(), |r| {
            let part = &r[which];
            format!(
                "{:.2} (rounds {:.2} to {:.2})",
                number(part, "median"),
                number(part, "min"),
                number(part, "max")
            )
        })
    };
    println!("\nHTTP targets (measured in this run)");
    println!(
        "  the key's cost, by {}",
        http["cost_client"].as_str().unwrap_or("?")
    );
    for connections in CONNECTIONS {
        let connections = connections as u64;
        let (Some(keyed), Some(unkeyed)) = (
            run_of(http, "cost_runs", connections, true),
            run_of(http, "cost_runs", connections, false),
        ) else {
            continue;
        };
        println!(
            "  {connections} connections: keyed {:.0}/s, unkeyed {:.0}/s; keyed ÷ unkeyed by rate {}, by server CPU per answer {} (target >= 0.9)",
            number(keyed, "requests_per_second"),
            number(unkeyed, "requests_per_second"),
            ratio(connections, "rate"),
            ratio(connections, "server_cpu"),
        );
        for (label, run) in [("keyed", keyed), ("unkeyed", unkeyed)] {
            println!(
                "    {label}: server {:.1} µs CPU per answer, {:.2} of a core; load generator {:.2} of a core; {} other statuses, {} errors",
                number(run, "server_cpu_us_per_answer"),
                number(run, "server_cores"),
                number(run, "client_cores"),
                run["other_status"],
                run["errors"],
            );
        }
    }
    print_latency(http);
}

/// Prints the latency and fairness figures of xtask's generator beside their targets.
fn print_latency(http: &Value) {
    let number = |run: &Value, field: &str| run[field].as_f64().unwrap_or(f64::NAN);
    println!(
        "  latency and each connection's share, by {}",
        http["client"].as_str().unwrap_or("?")
    );
    for connections in CONNECTIONS {
        let connections = connections as u64;
        for keyed in [true, false] {
            let Some(run) = run_of(http, "runs", connections, keyed) else {
                continue;
            };
            println!(
                "    {connections} connections, {}: {:.0}/s, p50 {:.2} ms, p99 {:.2} ms, p99/p50 {:.2}{}; least-served connection {:.2}x the median, most {:.2}x (target within 2x); {} other statuses, {} errors; generator {:.2} of a core",
                if keyed { "keyed" } else { "unkeyed" },
                number(run, "requests_per_second"),
                number(run, "p50_ms"),
                number(run, "p99_ms"),
                number(run, "p99_ms") / number(run, "p50_ms"),
                if connections == 64 {
                    " (target <= 4)"
                } else {
                    ""
                },
                number(run, "least_served_share"),
                number(run, "most_served_share"),
                run["other_status"],
                run["errors"],
                number(run, "client_cores"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WrkCounts;

    #[test]
    fn wrk_s_summary_gives_its_answers_rate_and_failures() {
        let clean = "Running 4s test @ http://127.0.0.1:4000\n  1 threads and 64 connections\n  \
            Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency     6.51ms    2.10ms  \
            30.12ms   75.00%\n  41838 requests in 4.00s, 9.86MB read\nRequests/sec:  10459.78\n\
            Transfer/sec:      2.46MB\n";
        assert_eq!(
            WrkCounts::read(clean),
            Some(WrkCounts {
                answered: 41838,
                rate: 10459.78,
                other_status: 0,
                errors: 0
            })
        );
        let failing = "  120 requests in 1.00s, 20KB read\n  Socket errors: connect 0, read 2, \
            write 0, timeout 3\n  Non-2xx or 3xx responses: 7\nRequests/sec:    120.00\n";
        assert_eq!(
            WrkCounts::read(failing),
            Some(WrkCounts {
                answered: 120,
                rate: 120.0,
                other_status: 7,
                errors: 5
            })
        );
        // No rate, or an error line it cannot read, is no summary: never a rate of zero.
        assert_eq!(
            WrkCounts::read("unable to connect to 127.0.0.1:4000\n"),
            None
        );
        assert_eq!(
            WrkCounts::read(
                "  5 requests in 1.00s\n  Socket errors: connect x\nRequests/sec: 5.0\n"
            ),
            None
        );
    }
}
