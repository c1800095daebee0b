//! What the check sent and what came back, in order, including "no answer" and the requests it
//! hung up on. Verdicts name the exchanges they rest on by number, so a reader can see exactly
//! which request broke which rule.
//!
//! A record holds text, not HTTP types, so another transport (MCP) can record the same way.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// One request and its outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Exchange {
    /// Its number in the run, from 1.
    pub id: usize,
    /// The point that sent it.
    pub point: &'static str,
    /// What the point meant by it ("first create", "retry").
    pub step: String,
    /// The caller it was sent as, by name.
    pub caller: Option<String>,
    /// The key as it was written in the request, or `None` when none was sent.
    pub key: Option<String>,
    /// The method (or tool name).
    pub method: String,
    /// The path (or tool).
    pub path: String,
    /// The body as sent, cut to a readable length.
    pub body: String,
    /// What came back.
    pub answer: Answer,
    /// Milliseconds from the run's start to the request.
    pub at_ms: u64,
    /// Milliseconds the request took.
    pub took_ms: u64,
}

/// What came back for one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Answer {
    /// A reply: its status, the headers the check looks at, and its body.
    Reply {
        /// The status.
        status: u16,
        /// The reply's headers, names in lower case.
        headers: Vec<(String, String)>,
        /// The body as text (lossy UTF-8), cut to a readable length.
        body: String,
    },
    /// No reply: the connection failed, closed, or the time ran out.
    NoAnswer {
        /// Why.
        reason: String,
    },
    /// The check itself hung up before the reply, on purpose.
    HungUp {
        /// At which moment.
        moment: String,
    },
    /// An MCP tool result: `isError`, the code the file's pointer found, and the result as JSON.
    ToolResult {
        /// `isError: true`.
        is_error: bool,
        /// The refusal code, where the file says a result holds one (an error result's
        /// structured content, or any result's text).
        code: Option<String>,
        /// The result (content and `structuredContent`) as JSON text, cut to a readable length.
        body: String,
    },
    /// An MCP JSON-RPC error instead of a tool result.
    RpcError {
        /// The JSON-RPC error code (`-32602`, invalid params).
        code: i32,
        /// Its message.
        message: String,
    },
}

impl Answer {
    /// Whether both are replies with the same body (as JSON, where both are).
    pub fn same_body(&self, other: &Answer) -> bool {
        match (self, other) {
            (Answer::Reply { body: x, .. }, Answer::Reply { body: y, .. }) => {
                match (
                    serde_json::from_str::<serde_json::Value>(x),
                    serde_json::from_str::<serde_json::Value>(y),
                ) {
                    (Ok(x), Ok(y)) => x == y,
                    _ => x == y,
                }
            }
            _ => false,
        }
    }

    /// The status, when there was a reply.
    pub fn status(&self) -> Option<u16> {
        match self {
            Answer::Reply { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// A reply's header value (the first), by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        match self {
            Answer::Reply { headers, .. } => headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str()),
            _ => None,
        }
    }

    /// A short description for a report line: `201`, `no answer (timed out)`.
    pub fn summary(&self) -> String {
        match self {
            Answer::Reply { status, .. } => status.to_string(),
            Answer::NoAnswer { reason } => format!("no answer ({reason})"),
            Answer::HungUp { moment } => format!("hung up {moment}"),
            Answer::ToolResult {
                is_error: false,
                code: Some(code),
                ..
            } => format!("a refusal (code {code:?}) in a result not marked isError"),
            Answer::ToolResult {
                is_error: false, ..
            } => "a tool result".to_owned(),
            Answer::ToolResult {
                is_error: true,
                code: Some(code),
                ..
            } => format!("an error result (code {code:?})"),
            Answer::ToolResult { is_error: true, .. } => "an error result".to_owned(),
            Answer::RpcError { code, message } => {
                format!("JSON-RPC error {code} ({})", cut_short(message))
            }
        }
    }
}

fn cut_short(text: &str) -> String {
    let mut out: String = text.chars().take(120).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// The longest body text kept in a record.
pub const MAX_RECORDED_BODY: usize = 2048;

/// Cuts `text` to [`MAX_RECORDED_BODY`] bytes at a character boundary, marking the cut.
pub fn cut(text: &str) -> String {
    if text.len() <= MAX_RECORDED_BODY {
        return text.to_owned();
    }
    let mut end = MAX_RECORDED_BODY;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// One reading of the effect count, placed among the exchanges: the reports draw a point's
/// count before its first exchange and after its last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CountRead {
    /// How many exchanges were recorded when the count was read (it was read after exchange
    /// `after`, and before exchange `after + 1`).
    pub after: usize,
    /// The count.
    pub value: i64,
}

/// The run's history, shared by the points and their concurrent callers.
#[derive(Debug)]
pub struct History {
    started: Instant,
    exchanges: Mutex<Vec<Exchange>>,
    counts: Mutex<Vec<CountRead>>,
}

impl Default for History {
    fn default() -> History {
        History::new()
    }
}

/// The caller name of an exchange the check did not make but saw: a wrapper's request to the
/// API the lab serves it (`[upstream]`). Reports draw these on the wrapper's side.
pub const WRAPPER_TO_API: &str = "wrapper → API";

/// What a point is about to send, before it knows the answer.
#[derive(Clone, Debug)]
pub struct Sent {
    /// The point.
    pub point: &'static str,
    /// What the point meant by it.
    pub step: String,
    /// The caller's name.
    pub caller: Option<String>,
    /// The key as written.
    pub key: Option<String>,
    /// The method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The body text.
    pub body: String,
}

impl History {
    /// An empty history starting now.
    pub fn new() -> History {
        History {
            started: Instant::now(),
            exchanges: Mutex::new(Vec::new()),
            counts: Mutex::new(Vec::new()),
        }
    }

    /// The time since the run started.
    pub fn elapsed(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    /// Records one exchange that started at `at`; returns its number.
    pub fn record(&self, sent: Sent, answer: Answer, at: Instant) -> usize {
        self.record_timed(sent, answer, at, at.elapsed())
    }

    /// Records an exchange that took `took` from `at` (one seen by someone else, such as the
    /// API behind a wrapper), and returns its number.
    pub fn record_timed(&self, sent: Sent, answer: Answer, at: Instant, took: Duration) -> usize {
        let at_ms = at.saturating_duration_since(self.started).as_millis() as u64;
        let took_ms = took.as_millis() as u64;
        // A poisoned lock means a point panicked while recording; the records are still whole.
        let mut exchanges = self
            .exchanges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = exchanges.len() + 1;
        exchanges.push(Exchange {
            id,
            point: sent.point,
            step: sent.step,
            caller: sent.caller,
            key: sent.key,
            method: sent.method,
            path: sent.path,
            body: cut(&sent.body),
            answer,
            at_ms,
            took_ms,
        });
        id
    }

    /// Records a count read now, after the exchanges recorded so far (a count that could not
    /// be read is passed on, unrecorded).
    pub fn record_count<E>(&self, counted: Result<i64, E>) -> Result<i64, E> {
        let Ok(value) = counted else {
            return counted;
        };
        let after = self
            .exchanges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(CountRead { after, value });
        counted
    }

    /// Every count read so far, in order.
    pub fn counts(&self) -> Vec<CountRead> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Every exchange so far, in order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchanges_are_numbered_in_order_and_long_bodies_are_cut() {
        let history = History::new();
        let sent = |step: &str, body: &str| Sent {
            point: "replay",
            step: step.to_owned(),
            caller: Some("alice".to_owned()),
            key: Some("\"k\"".to_owned()),
            method: "POST".to_owned(),
            path: "/tickets".to_owned(),
            body: body.to_owned(),
        };
        let long = "é".repeat(MAX_RECORDED_BODY);
        let first = history.record(
            sent("first", "{}"),
            Answer::NoAnswer { reason: "x".into() },
            Instant::now(),
        );
        let second = history.record(
            sent("second", &long),
            Answer::HungUp {
                moment: "after the headers".into(),
            },
            Instant::now(),
        );
        assert_eq!((first, second), (1, 2));
        let all = history.exchanges();
        assert_eq!(all[0].step, "first");
        assert!(all[1].body.len() < long.len());
        assert!(all[1].body.ends_with("bytes in all)"));
        assert_eq!(all[1].answer.summary(), "hung up after the headers");
    }
}
