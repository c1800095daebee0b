//! `lab audit FILE...`: the retry contract checked over traffic a team already records: HAR
//! files, OpenTelemetry traces as OTLP JSON, and what passed through `lab proxy --record`.
//!
//! - [`record`]: each format read in one pass, as [`record::Recorded`] exchanges; `split`
//!   cuts the bytes into the values read, each parsed from memory.
//! - [`rules`]: what the target file (the one `lab check` reads) says of an exchange: whether
//!   it is a create, its key, its canonical payload, its caller, the effect its reply names.
//! - [`judge`]: the creates grouped into intentions, and the findings, each with the
//!   exchanges it rests on; what the recording cannot decide is NOT COVERED, with why.
//!
//! The report is `lab check`'s ([`crate::check::Report`]): text, JSON, JUnit and HTML, its
//! exchanges the recorded ones each finding cites, named by file and place.

pub mod init;
pub mod judge;
pub mod record;
pub mod rules;
mod split;
mod texts;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::check::history::{Answer, Exchange};
use crate::check::report::{AUDIT, Calibration, Report};
use crate::error::Result;
use judge::Attempt;
use record::{Delivery, Recorded, Reply};
use rules::{Effect, Rules};
use texts::{Text, Texts};

/// How much of a body or reply the report shows.
const EXCERPT: usize = 80;

/// What the report shows of one create, kept beside its [`Attempt`] (which holds its caller,
/// key and times): small, as there is one per create.
struct Brief {
    place: Text,
    /// An excerpt of the body, when it was recorded.
    body: Option<Text>,
    reply: Kept,
    /// `METHOD path`, by its number in [`Gathered::routes_of_creates`].
    route: u32,
    file: u16,
}

/// What the report shows of a create's reply: [`Reply`] with its texts kept in [`Texts`].
enum Kept {
    Http {
        status: u16,
        /// The headers the report shows (`Location`, and any of idempotency or replay).
        headers: Box<[(String, String)]>,
        body: Option<Text>,
    },
    Tool {
        is_error: bool,
        result: Option<Text>,
    },
    None,
}

/// What one file held, for the report's first lines.
struct Read {
    format: record::Format,
    exchanges: usize,
    creates: usize,
    /// Server-side spans of the create left out because the file has the client's side too.
    server_side_dropped: usize,
}

/// The audit's state while it reads: every create, small.
#[derive(Default)]
struct Gathered {
    attempts: Vec<Attempt>,
    briefs: Vec<Brief>,
    texts: Texts,
    callers: Vec<String>,
    caller_index: HashMap<String, u32>,
    /// The creates' routes (`POST /tickets`), each once.
    routes_of_creates: Vec<(String, String)>,
    /// The routes seen that are not the create's (the first thousand), for a file whose
    /// create matches nothing.
    routes: HashMap<String, usize>,
}

impl Gathered {
    fn caller(&mut self, name: String) -> u32 {
        if let Some(&i) = self.caller_index.get(&name) {
            return i;
        }
        let i = u32::try_from(self.callers.len()).unwrap_or(u32::MAX);
        self.callers.push(name.clone());
        self.caller_index.insert(name, i);
        i
    }

    fn route(&mut self, method: String, path: String) -> u32 {
        let found = self
            .routes_of_creates
            .iter()
            .position(|(m, p)| *m == method && *p == path);
        let at = found.unwrap_or_else(|| {
            self.routes_of_creates.push((method, path));
            self.routes_of_creates.len() - 1
        });
        u32::try_from(at).unwrap_or(u32::MAX)
    }

    fn add(&mut self, rules: &Rules, file: usize, exchange: Recorded) {
        let payload = rules.payload(&exchange).map(|p| rules::digest(&p));
        let effect = rules.effect(&exchange).map(|name| self.texts.add(&name));
        let caller = self.caller(rules.caller(&exchange));
        let key = rules.key(&exchange).map(|key| self.texts.add(&key));
        let failed = match &exchange.reply {
            Reply::Http { status, .. } => *status >= 500,
            Reply::Tool { is_error, .. } => *is_error,
            Reply::None => false,
        };
        self.attempts.push(Attempt {
            start_ns: exchange.start_ns.and_then(|t| i64::try_from(t).ok()),
            took_ms: exchange.took_ms,
            caller,
            key,
            key_unknown: rules.key_unknown(&exchange),
            payload,
            effect,
            delivery: exchange.delivery,
            failed,
            server_side: !exchange.client_side,
        });
        let route = self.route(exchange.method, exchange.path);
        let texts = &mut self.texts;
        let mut keep = |text: Option<String>| text.map(|t| texts.add(&excerpt(&t)));
        let body = keep(exchange.body);
        let reply = match exchange.reply {
            Reply::Http {
                status,
                headers,
                body,
            } => Kept::Http {
                status,
                // Collected afresh: a filter of the vector in place would keep its capacity,
                // a dozen headers' room for each create.
                headers: headers
                    .into_iter()
                    .filter(|(n, _)| {
                        n == "location" || n.contains("idempotent") || n.contains("replay")
                    })
                    .collect::<Vec<_>>()
                    .into_boxed_slice(),
                body: keep(body),
            },
            Reply::Tool { is_error, result } => Kept::Tool {
                is_error,
                result: keep(result),
            },
            Reply::None => Kept::None,
        };
        self.briefs.push(Brief {
            place: self.texts.add(&exchange.place),
            body,
            reply,
            route,
            file: u16::try_from(file).unwrap_or(u16::MAX),
        });
    }

    /// Leaves out the creates numbered in `dropped` (in order), and the callers only they had.
    fn drop_creates(&mut self, dropped: &[usize]) {
        leave_out(&mut self.attempts, dropped);
        leave_out(&mut self.briefs, dropped);
        let mut used = vec![false; self.callers.len()];
        for attempt in &self.attempts {
            used[attempt.caller as usize] = true;
        }
        let mut renumbered = vec![0; self.callers.len()];
        let mut kept = Vec::new();
        for (i, name) in std::mem::take(&mut self.callers).into_iter().enumerate() {
            if used[i] {
                renumbered[i] = u32::try_from(kept.len()).unwrap_or(u32::MAX);
                kept.push(name);
            }
        }
        for attempt in &mut self.attempts {
            attempt.caller = renumbered[attempt.caller as usize];
        }
        self.caller_index = kept.iter().cloned().zip(0..).collect();
        self.callers = kept;
    }
}

/// Leaves out of `items` those numbered in `dropped` (in order).
fn leave_out<T>(items: &mut Vec<T>, dropped: &[usize]) {
    let mut at = 0;
    items.retain(|_| {
        at += 1;
        dropped.binary_search(&(at - 1)).is_err()
    });
}

/// The first [`EXCERPT`] characters of `text`, and `…` where it goes on.
fn excerpt(text: &str) -> Cow<'_, str> {
    let text = text.trim();
    match text.char_indices().nth(EXCERPT) {
        Some((at, _)) => Cow::Owned(format!("{}…", &text[..at])),
        None => Cow::Borrowed(text),
    }
}

/// A kept body or reply as the report shows it, or that the recording has none.
fn shown(texts: &Texts, text: Option<Text>) -> String {
    text.map_or("(body not recorded)", |t| texts.get(t))
        .to_owned()
}

/// The answer the report shows for a create's `reply`, as its caller got it.
fn answer_of(reply: &Kept, delivery: Delivery, texts: &Texts) -> Answer {
    let excerpt = |text: &Option<Text>| shown(texts, *text);
    let answer = match reply {
        Kept::None => {
            return Answer::NoAnswer {
                reason: "no reply in the recording".to_owned(),
            };
        }
        Kept::Http {
            status,
            headers,
            body,
        } => Answer::Reply {
            status: *status,
            headers: headers.to_vec(),
            body: excerpt(body),
        },
        Kept::Tool { is_error, result } => Answer::ToolResult {
            is_error: *is_error,
            code: None,
            body: excerpt(result),
        },
    };
    if delivery == Delivery::Lost {
        return Answer::NoAnswer {
            reason: format!(
                "the caller got no reply; the service answered {}",
                answer.summary()
            ),
        };
    }
    answer
}

/// Audits `files` by `rules`: reads each in one pass, judges every create, and returns the
/// report. `progress` hears each file's bytes read and size during long reads.
///
/// # Errors
/// A file that cannot be read, or is neither HAR, OTLP JSON nor a proxy record, or is
/// truncated: [`crate::Error::InputUnreadable`] or [`crate::Error::InputInvalid`] naming the
/// file and the place. Nothing is judged then.
pub fn audit(
    rules: &Rules,
    files: &[PathBuf],
    progress: &dyn Fn(&Path, u64, u64),
) -> Result<Report> {
    let started = Instant::now();
    let mut gathered = Gathered::default();
    let mut reads = Vec::new();
    for (file, path) in files.iter().enumerate() {
        reads.push(read_one(rules, file, path, progress, &mut gathered)?);
    }
    let (points, cited) = judge::judge(&gathered.attempts, &gathered.texts);
    let earliest = gathered.attempts.iter().filter_map(|a| a.start_ns).min();
    let history = cited
        .iter()
        .filter_map(|&id| Some(exchange(id, id.checked_sub(1)?, files, &gathered, earliest)))
        .collect();
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let mut report = Report::new(
        rules.path.display().to_string(),
        names.join(", "),
        points,
        started.elapsed(),
        history,
    );
    report.name_promises(crate::contract::Checker::Audit);
    report.command = AUDIT;
    report.graded_against = format!(
        "{} (MUST, SHOULD) and the lab's contract (LAB), over the creates the recordings hold \
         ({})",
        crate::check::report::DRAFT,
        rules.describe_create()
    );
    report.calibration = what_was_read(rules, files, &reads, &gathered);
    Ok(report)
}

fn read_one(
    rules: &Rules,
    file: usize,
    path: &Path,
    progress: &dyn Fn(&Path, u64, u64),
    gathered: &mut Gathered,
) -> Result<Read> {
    let mut exchanges = 0;
    // The server's spans of the create, gathered as they come (each as small as a client's)
    // and left out at the end if the file has the client's side too.
    let mut server = Vec::new();
    let before = gathered.attempts.len();
    let mut any_client_create = false;
    let mut sink = |exchange: Recorded| {
        exchanges += 1;
        if !rules.is_create(&exchange) {
            let route = format!("{} {}", exchange.method, exchange.path);
            if gathered.routes.len() < 1000 || gathered.routes.contains_key(&route) {
                *gathered.routes.entry(route).or_default() += 1;
            }
            return;
        }
        if exchange.client_side {
            any_client_create = true;
        } else {
            server.push(gathered.attempts.len());
        }
        gathered.add(rules, file, exchange);
    };
    let format = record::read(
        path,
        &mut |read, total| progress(path, read, total),
        &mut sink,
    )?;
    // A trace with both sides of a create: the client's says whether the reply arrived, so
    // the server's spans of it are left out; a trace of the server's side alone is read as it
    // is, and says it cannot tell.
    let server_side_dropped = if any_client_create {
        gathered.drop_creates(&server);
        server.len()
    } else {
        0
    };
    Ok(Read {
        format,
        exchanges,
        creates: gathered.attempts.len() - before,
        server_side_dropped,
    })
}

/// The report's exchange for cited create `index` (numbered `id`).
fn exchange(
    id: usize,
    index: usize,
    files: &[PathBuf],
    gathered: &Gathered,
    earliest: Option<i64>,
) -> Exchange {
    let (attempt, brief) = (&gathered.attempts[index], &gathered.briefs[index]);
    let file = files
        .get(usize::from(brief.file))
        .and_then(|f| f.file_name())
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let at_ms = match (attempt.start_ns, earliest) {
        (Some(at), Some(first)) => u64::try_from((at - first) / 1_000_000).unwrap_or(0),
        _ => 0,
    };
    let (method, path) = gathered
        .routes_of_creates
        .get(brief.route as usize)
        .cloned()
        .unwrap_or_default();
    let texts = &gathered.texts;
    Exchange {
        id,
        point: "recording",
        step: format!("{file} {}", texts.get(brief.place)),
        caller: gathered.callers.get(attempt.caller as usize).cloned(),
        key: attempt.key.map(|key| texts.get(key).to_owned()),
        method,
        path,
        body: shown(texts, brief.body),
        answer: answer_of(&brief.reply, attempt.delivery, texts),
        at_ms,
        took_ms: attempt.took_ms.unwrap_or(0),
    }
}

/// What each file held, and how callers and effects were told apart: the report's first
/// lines.
fn what_was_read(
    rules: &Rules,
    files: &[PathBuf],
    reads: &[Read],
    gathered: &Gathered,
) -> Calibration {
    let mut calibration = Calibration {
        passed: true,
        ..Calibration::default()
    };
    for (path, read) in files.iter().zip(reads) {
        let dropped = if read.server_side_dropped > 0 {
            format!(
                "; {} server span{} of the create left out (the client's spans say whether \
                 each reply arrived)",
                read.server_side_dropped,
                if read.server_side_dropped == 1 {
                    ""
                } else {
                    "s"
                }
            )
        } else {
            String::new()
        };
        calibration.held(
            "read",
            path.display().to_string(),
            format!(
                "{}: {} exchange{}, {} of them creates ({}){dropped}",
                read.format.name(),
                read.exchanges,
                if read.exchanges == 1 { "" } else { "s" },
                read.creates,
                rules.describe_create()
            ),
            &[],
        );
    }
    if gathered.attempts.is_empty() {
        no_creates(rules, gathered, &mut calibration);
    }
    effects_step(gathered, &mut calibration);
    let callers = &gathered.callers;
    calibration.held(
        "callers",
        "[[callers]]",
        format!(
            "{} caller{}: {}",
            callers.len(),
            if callers.len() == 1 { "" } else { "s" },
            callers
                .iter()
                .take(8)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ),
        &[],
    );
    calibration
}

/// The step that says no exchange was a create, with the routes the recordings did hold.
fn no_creates(rules: &Rules, gathered: &Gathered, calibration: &mut Calibration) {
    let mut routes: Vec<(&String, &usize)> = gathered.routes.iter().collect();
    routes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let seen: Vec<String> = routes
        .iter()
        .take(5)
        .map(|(r, n)| format!("{r} ({n})"))
        .collect();
    calibration.held(
        "creates",
        match rules.create {
            rules::Create::Http { .. } => "create.path",
            rules::Create::Tool(_) => "mcp.tool.name",
        },
        format!(
            "no exchange is {}: nothing to judge. The recordings' most frequent: {}",
            rules.describe_create(),
            if seen.is_empty() {
                "none".to_owned()
            } else {
                seen.join(", ")
            }
        ),
        &[],
    );
}

/// The step that says how many successes name their effect where the file says.
fn effects_step(gathered: &Gathered, calibration: &mut Calibration) {
    let named = gathered
        .attempts
        .iter()
        .filter(|a| matches!(a.effect, Effect::Made(_)))
        .count();
    let unnamed = gathered
        .attempts
        .iter()
        .filter(|a| a.effect == Effect::Unnamed)
        .count();
    calibration.held(
        "effects",
        "identity",
        format!(
            "{named} success{} name{} an effect where the file says; {unnamed} do{} not (no \
             body recorded, or nothing there)",
            if named == 1 { "" } else { "es" },
            if named == 1 { "s" } else { "" },
            if unnamed == 1 { "es" } else { "" },
        ),
        &[],
    );
}
