//! Counting as the target file says, and reading identities where it says: the primitives the
//! calibration's steps ([`super`]) and the naming step ([`super::naming`]) rest on.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::check::excerpt::{one_line, quoted};
use crate::check::history::{Answer, Sent};
use crate::check::http::{Outgoing, Wire};
use crate::check::probe::{Call, Probe, Seen};
use crate::check::report::{Calibration, Callers, POINT, Proved, Stop};
use crate::check::target::{Count, CountCallers, Identity};

/// The JSON pointers in `value` that hold a scalar whose name says it is an identity (`id`,
/// `ticket_id`, `ticketId`, `uuid`); or, when none does, every scalar's pointer. At most eight.
pub fn id_pointers(value: &Value) -> Vec<String> {
    let mut all = Vec::new();
    scalars(value, String::new(), 0, &mut all);
    let ids: Vec<String> = all.iter().filter(|p| id_like(p)).cloned().collect();
    let mut found = if ids.is_empty() { all } else { ids };
    found.truncate(8);
    found
}

/// Whether a pointer's last name says it holds an identity (`id`, `ticket_id`, `ticketId`,
/// `uuid`).
pub(super) fn id_like(pointer: &str) -> bool {
    let name = pointer.rsplit('/').next().unwrap_or_default();
    let lower = name.to_ascii_lowercase();
    lower == "id"
        || lower.ends_with("_id")
        || lower.ends_with("-id")
        || lower.contains("uuid")
        || (name.ends_with("Id") && name.len() > 2)
}

/// The pointers of `value`'s scalars (a list's first item standing for its items).
pub(super) fn scalars(value: &Value, at: String, depth: usize, out: &mut Vec<String>) {
    if depth > 6 {
        return;
    }
    match value {
        Value::Object(map) => {
            for (name, inner) in map {
                let escaped = name.replace('~', "~0").replace('/', "~1");
                scalars(inner, format!("{at}/{escaped}"), depth + 1, out);
            }
        }
        // The first item stands for a list's items.
        Value::Array(items) => {
            if let Some(first) = items.first() {
                scalars(first, format!("{at}/0"), depth + 1, out);
            }
        }
        Value::String(_) | Value::Number(_) if !at.is_empty() => out.push(at),
        _ => {}
    }
}

/// The JSON pointers in `value` that hold a list or a whole number: what a count pointer may
/// name. At most eight.
pub fn count_pointers(value: &Value) -> Vec<String> {
    pub(super) fn walk(value: &Value, at: String, depth: usize, out: &mut Vec<String>) {
        if depth > 6 {
            return;
        }
        match value {
            Value::Array(_) if !at.is_empty() => out.push(at),
            Value::Number(n) if n.is_i64() && !at.is_empty() => out.push(at),
            Value::Object(map) => {
                for (name, inner) in map {
                    let escaped = name.replace('~', "~0").replace('/', "~1");
                    walk(inner, format!("{at}/{escaped}"), depth + 1, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), 0, &mut out);
    if value.is_array() {
        out.insert(0, "\"\" (the whole body)".to_owned());
    }
    out.truncate(8);
    out
}

/// Pointers in words: `/a, /b`, or a sentence saying there are none.
pub(super) fn listed(pointers: &[String]) -> String {
    if pointers.is_empty() {
        "none".to_owned()
    } else {
        pointers.join(", ")
    }
}

/// A create as it went: the call, the exchange and the identity read from it.
pub(super) struct Created {
    pub(super) call: Call,
    pub(super) seen: Seen,
    pub(super) identity: String,
}

pub(super) fn describe_call(probe: &Probe, call: &Call, seen: &Seen) -> String {
    let endpoint = probe.endpoint(call.other_endpoint);
    let caller = &probe.target.callers[call.caller].name;
    format!(
        "#{} {} {} as {caller} answered {}",
        seen.id,
        endpoint.method,
        endpoint.path,
        quoted(&seen.answer)
    )
}

/// The field the identity is read by.
pub(super) fn identity_field(probe: &Probe) -> &'static str {
    match probe.target.identity {
        Identity::Pointer(_) => "identity.json_pointer",
        Identity::Header(_) => "identity.header",
    }
}

pub(super) fn describe_path(probe: &Probe, counting: bool) -> String {
    let endpoint = probe.endpoint(!counting);
    format!("{} {}", endpoint.method, endpoint.path)
}

/// Counting as the file says, with the calibration's own requests recorded.
pub(super) struct Counter<'p> {
    probe: &'p Probe,
    wire: Wire,
    /// The effects the last count by request listed, when its pointer names a list: then the
    /// listing holds every effect counted.
    listed: std::sync::Mutex<Option<Value>>,
    /// Each caller's own count at the last read, when the count is read as each caller
    /// (`count.request.caller = "each"`); empty otherwise.
    parts: std::sync::Mutex<Vec<i64>>,
}

impl<'p> Counter<'p> {
    /// Counting as the file says, over another connection (`wire`).
    pub(super) fn over(probe: &'p Probe, wire: Wire) -> Counter<'p> {
        Counter {
            wire,
            ..Counter::new(probe)
        }
    }

    pub(super) fn new(probe: &'p Probe) -> Counter<'p> {
        let service = &probe.target.service;
        Counter {
            probe,
            wire: Wire::new(
                service.url.host(),
                service.url.port(),
                service.url.path(),
                service.timeout,
            ),
            listed: std::sync::Mutex::new(None),
            parts: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// What the last count by request listed (every caller's lists, in one list); `None` when
    /// the count is not a listing.
    /// Each caller's own count at the last read (`count.request.caller = "each"`); empty
    /// otherwise.
    pub(super) fn parts(&self) -> Vec<i64> {
        self.parts.lock().map(|p| p.clone()).unwrap_or_default()
    }

    pub(super) fn listing(&self) -> Option<Value> {
        self.listed.lock().ok()?.clone()
    }

    /// The count once `done` holds of it, read again a few times within a second while it does
    /// not (a count that lags); the last count read.
    pub(super) async fn settled(&self, before: i64, done: impl Fn(i64) -> bool) -> Proved<i64> {
        let mut now = before;
        for attempt in 0..4 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            now = self.count().await?.0;
            if done(now) {
                break;
            }
        }
        Ok(now)
    }

    /// The count now, as a calibration step.
    pub(super) async fn read(
        &mut self,
        calibration: &mut Calibration,
        name: &'static str,
    ) -> Proved<i64> {
        let (n, field, exchanges) = self.count().await?;
        calibration.held(name, field, format!("the count reads {n}"), &exchanges);
        Ok(n)
    }

    /// The count after `created` (by `caller`) rose by exactly one from `before`; a count that
    /// lags is read again, a few times within a second.
    pub(super) async fn rose(
        &mut self,
        calibration: &mut Calibration,
        before: i64,
        caller: usize,
        created: &Created,
    ) -> Proved<i64> {
        let parts_before = self.parts();
        let mut seen = Vec::new();
        let mut after = before;
        for attempt in 0..4 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let (n, _, exchanges) = self.count().await?;
            seen.extend(exchanges);
            after = n;
            if after != before {
                break;
            }
        }
        self.apart_or_one(calibration, caller, &parts_before, created)?;
        let (field, _) = self.field();
        let name = &self.probe.target.callers[caller].name;
        if after - before != 1 {
            return Err(Stop::mismatch(
                field,
                self.not_one(name, before, after, created),
            ));
        }
        let mut exchanges = vec![created.seen.id];
        exchanges.extend(seen);
        calibration.held(
            "count-rises",
            field,
            format!("{name}'s create raised the count by one: {before} to {after}"),
            &exchanges,
        );
        Ok(after)
    }

    /// With a count read as each caller, each list showing a caller its own effects: a create
    /// that shows in its own caller's list alone proves that the service tells that caller from
    /// the others; one that shows in another caller's list as well proves that the service takes
    /// the two for one caller, and every count of the run would count its effects twice.
    pub(super) fn apart_or_one(
        &self,
        calibration: &mut Calibration,
        caller: usize,
        before: &[i64],
        created: &Created,
    ) -> Proved<()> {
        let after = &self.parts();
        if before.len() != after.len() || after.get(caller).is_none_or(|n| *n <= before[caller]) {
            return Ok(());
        }
        let callers = &self.probe.target.callers;
        let name = &callers[caller].name;
        let id = created.seen.id;
        if let Some(other) = (0..after.len()).find(|&i| i != caller && after[i] > before[i]) {
            let other_name = &callers[other].name;
            return Err(Stop::mismatch(
                format!("callers[{}].headers", other.max(caller)),
                format!(
                    "{name}'s create (#{id}, naming {}) shows in {other_name}'s list as well as \
                     in {name}'s (count.request.caller = \"each\" reads each caller's own \
                     list): to the service, {name} and {other_name} are one caller. Give each \
                     caller in [[callers]] credentials of its own that the service tells apart \
                     (its own token, in the header the service reads); if the service has no \
                     callers of its own, count as one caller (count.request.caller = \
                     \"{name}\"), and the other-caller point is not covered",
                    created.identity
                ),
            ));
        }
        if caller == 0 && !matches!(calibration.callers, Callers::Apart(_)) {
            let others: Vec<&str> = callers[1..].iter().map(|c| c.name.as_str()).collect();
            let how = format!(
                "{name}'s create (#{id}) shows in {name}'s own list and not in {}'s \
                 (count.request.caller = \"each\"): the service tells them apart",
                others.join("'s or ")
            );
            calibration.held("callers-apart", "[[callers]]", how.clone(), &[id]);
            calibration.callers = Callers::Apart(how);
        }
        Ok(())
    }

    pub(super) fn not_one(&self, name: &str, before: i64, after: i64, created: &Created) -> String {
        let why = match (&self.probe.target.count, after - before) {
            (
                Count::Request {
                    callers: CountCallers::One(Some(one)),
                    ..
                },
                0,
            ) if self.probe.target.callers[*one].name != name => format!(
                " The count is read as {} only, and may list only that caller's effects: \
                 count.request.caller = \"each\" sums every caller's",
                self.probe.target.callers[*one].name
            ),
            (_, 0) => " The count does not see the created thing: does it count what the \
                       create makes?"
                .to_owned(),
            _ => " The count holds more than the created things: it must count them, one \
                  each"
                .to_owned(),
        };
        format!(
            "{name}'s create (#{}, naming {}) changed the count from {before} to {after}, not by \
             exactly one.{why}",
            created.seen.id, created.identity
        )
    }

    /// The field the count is read by, and its kind in words.
    pub(super) fn field(&self) -> (&'static str, &'static str) {
        match &self.probe.target.count {
            Count::Request { .. } => ("count.request", "request"),
            Count::Sqlite { .. } => ("count.sql.sqlite", "SQLite query"),
            Count::Postgres { .. } => ("count.sql.postgres", "PostgreSQL query"),
            Count::Command(_) => ("count.command", "command"),
            Count::Upstream => (
                "[upstream]",
                "count of the tickets in the API the lab serves",
            ),
        }
    }

    /// The count, the field it proves, and the exchanges it took.
    pub(super) async fn count(&self) -> Proved<(i64, &'static str, Vec<usize>)> {
        let (field, _) = self.field();
        match &self.probe.target.count {
            Count::Request { .. } => {
                let (n, exchanges) = self.by_request().await?;
                Ok((n, field, exchanges))
            }
            Count::Sqlite { file, .. } if !file.exists() => {
                let cwd = std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default();
                let from = if file.is_relative() {
                    format!(" (a relative path, read from the working folder {cwd})")
                } else {
                    format!(
                        " (a relative path in the file is read from the file's folder, {})",
                        self.probe.target.folder.display()
                    )
                };
                Err(Stop::mismatch(
                    "count.sql.sqlite",
                    format!(
                        "no file at {}{from}: name the service's database file. If the \
                         service makes it on its first write, count with count.command, \
                         printing 0 while the file is missing",
                        file.display()
                    ),
                ))
            }
            _ => self
                .probe
                .count()
                .await
                .map(|n| (n, field, Vec::new()))
                .map_err(Stop::from),
        }
    }

    /// The count by the file's request, sent as each caller it names, recorded.
    pub(super) async fn by_request(&self) -> Proved<(i64, Vec<usize>)> {
        let Count::Request {
            request,
            pointer,
            callers,
        } = &self.probe.target.count
        else {
            return Ok((0, Vec::new()));
        };
        let as_callers: Vec<Option<usize>> = match callers {
            CountCallers::Each => (0..self.probe.target.callers.len()).map(Some).collect(),
            CountCallers::One(one) => vec![*one],
        };
        let (mut total, mut exchanges, mut parts) = (0, Vec::new(), Vec::new());
        let mut listed = Some(Vec::new());
        for caller in as_callers {
            let mut headers = request.headers.clone();
            let who = caller.map(|i| &self.probe.target.callers[i]);
            if let Some(who) = who {
                crate::check::probe::lay_over(&mut headers, &who.headers);
            }
            let outgoing = Outgoing {
                method: request.method.clone(),
                path: request.path.clone(),
                headers,
                body: Vec::new(),
            };
            let sent = Sent {
                point: POINT,
                step: "calibration: the count".to_owned(),
                caller: who.map(|w| w.name.clone()),
                key: None,
                method: request.method.clone(),
                path: request.path.clone(),
                body: String::new(),
            };
            let at = Instant::now();
            let answer = self.wire.send(&outgoing).await;
            let id =
                self.probe
                    .history
                    .record(sent, crate::check::http::recorded(answer.clone()), at);
            exchanges.push(id);
            let exchange = format!(
                "#{id} {} {}{}",
                request.method,
                request.path,
                who.map(|w| format!(" as {}", w.name)).unwrap_or_default()
            );
            let part = counted(&answer, pointer, &exchange, caller)?;
            parts.push(part);
            total += part;
            let items = match &answer {
                Answer::Reply { body, .. } => serde_json::from_str::<Value>(body)
                    .ok()
                    .and_then(|json| json.pointer(pointer).and_then(Value::as_array).cloned()),
                _ => None,
            };
            listed = listed.zip(items).map(|(mut all, items)| {
                all.extend(items);
                all
            });
        }
        if let Ok(mut last) = self.listed.lock() {
            *last = listed.map(Value::Array);
        }
        if *callers == CountCallers::Each
            && let Ok(mut last) = self.parts.lock()
        {
            *last = parts;
        }
        Ok((total, exchanges))
    }
}

/// The count a counting reply holds, or the field at fault.
pub(super) fn counted(
    answer: &Answer,
    pointer: &str,
    exchange: &str,
    caller: Option<usize>,
) -> Proved<i64> {
    let Answer::Reply { status, body, .. } = answer else {
        return Err(Stop::Unreachable {
            asked: "count",
            problem: format!("{exchange}: {}", answer.summary()),
        });
    };
    let said = format!("{exchange} answered {}", quoted(answer));
    match status {
        200..=299 => {}
        401 | 403 => {
            let field = caller.map_or("count.request.headers".to_owned(), |i| {
                format!("callers[{i}].headers")
            });
            return Err(Stop::mismatch(
                field,
                format!("{said}: the count request is not let in with these credentials"),
            ));
        }
        400..=499 => {
            return Err(Stop::mismatch(
                "count.request.path",
                format!("{said}: is count.request.method and count.request.path a listing?"),
            ));
        }
        _ => {
            return Err(Stop::Unreachable {
                asked: "count",
                problem: said,
            });
        }
    }
    let Ok(json) = serde_json::from_str::<Value>(body) else {
        return Err(Stop::mismatch(
            "count.request.path",
            format!("{said}: not JSON; name a listing that answers JSON"),
        ));
    };
    let found = json.pointer(pointer);
    match found {
        Some(Value::Array(items)) => return Ok(items.len() as i64),
        Some(Value::Number(n)) if n.is_i64() => return Ok(n.as_i64().unwrap_or_default()),
        Some(Value::String(text)) if text.parse::<i64>().is_ok() => {
            return Ok(text.parse().unwrap_or_default());
        }
        _ => {}
    }
    let held = match found {
        None => "finds nothing".to_owned(),
        Some(Value::Object(_)) => "holds an object, not a list or a number".to_owned(),
        Some(other) => format!(
            "holds {}, not a list or a number",
            one_line(&other.to_string())
        ),
    };
    Err(Stop::mismatch(
        "count.request.json_pointer",
        format!(
            "{pointer:?} {held} ({said}); the pointers in the body that hold a list or a \
             number: {}",
            listed(&count_pointers(&json))
        ),
    ))
}
