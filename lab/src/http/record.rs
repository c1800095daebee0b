//! `lab proxy --record FILE`: what passed through the proxy, as JSON Lines that `lab audit`
//! reads. The first line says what the file is:
//!
//! ```json
//! {"format":"lab-proxy-record","version":1,"upstream":"http://127.0.0.1:8000"}
//! ```
//!
//! Then one line per request, written when its fate is known ([`Line`]): the request as it
//! arrived (method, target, headers, body) and what became of it: `answered` (the caller got
//! the service's reply), `lost` (the service answered and the proxy closed the caller's
//! connection instead, `--drop-first`), `failed` (the proxy answered 502 or 504 itself, or the
//! caller left before the service answered). A lost line keeps the service's answer: the
//! effect a caller never heard of is in the record. Each line is written whole and flushed, so
//! a proxy that is stopped leaves whole lines; a request still in flight then is not recorded.
//! Credentials (`authorization`, `cookie`, ...) are recorded as their SHA-256 digest
//! ([`redacted`]): the record tells callers apart without holding their tokens.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::header::HeaderMap;
use serde::{Deserialize, Serialize};

use super::proxy::{Decision, Fate, Tap, header_pairs};
use crate::error::{Error, Result};

/// The `format` of the first line.
pub const FORMAT: &str = "lab-proxy-record";

/// The first line.
#[derive(Serialize, Deserialize, Debug)]
pub struct Header {
    /// [`FORMAT`].
    pub format: String,
    /// The format's version: 1.
    pub version: u32,
    /// The service the proxy forwarded to.
    pub upstream: String,
}

/// One request and its fate.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Line {
    /// The request's number at the proxy, from 1, in the order its body was complete.
    pub n: u64,
    /// When its body was complete, RFC 3339 in UTC (`2026-12-07T10:00:00.123456Z`).
    pub started: String,
    /// Milliseconds from then until its fate.
    pub took_ms: u64,
    /// The method.
    pub method: String,
    /// The path and query.
    pub target: String,
    /// The request's headers, names in lower case, in order.
    pub request_headers: Vec<(String, String)>,
    /// The request's body as text (lossy UTF-8).
    pub request_body: String,
    /// `answered`, `lost`, `abandoned` or `failed`.
    pub fate: String,
    /// The service's status (none for `failed`).
    pub status: Option<u16>,
    /// The reply's headers, names in lower case.
    #[serde(default)]
    pub response_headers: Vec<(String, String)>,
    /// The reply's body as text (lossy UTF-8), when there was one; for `failed`, why.
    pub response_body: Option<String>,
}

/// The headers that say who a caller is: recorded as [`redacted`], never as sent.
pub const CREDENTIALS: [&str; 5] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
];

/// A credential as the record keeps it: `sha256:` and the digest of the value, so a reader who
/// knows a caller's token can tell its requests, and one who does not learns nothing.
pub fn redacted(value: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(value.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `headers` with each credential [`redacted`].
fn recorded(headers: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    headers
        .map(|(name, value)| {
            if CREDENTIALS.contains(&name.as_str()) {
                let value = redacted(&value);
                (name, value)
            } else {
                (name, value)
            }
        })
        .collect()
}

/// A request whose fate is not yet known.
struct Arrived {
    started: String,
    at: Instant,
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// The [`Tap`] that records: losing the replies of the first `drop_first` requests as
/// `lab proxy` does, forwarding the rest.
pub struct Recorder {
    out: Mutex<BufWriter<File>>,
    pending: Mutex<std::collections::HashMap<usize, Arrived>>,
    next: AtomicUsize,
    drop_first: usize,
}

impl Recorder {
    /// Creates `path` (never replacing a file) and writes the first line.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] naming `--record` when the file exists or cannot be created.
    pub fn create(path: &Path, upstream: &str, drop_first: u32) -> Result<Recorder> {
        let refused = |problem: String| Error::InputInvalid {
            subject: "--record".to_owned(),
            problem: format!("{}: {problem}", path.display()),
        };
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|err| match err.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    refused("exists; the proxy writes a new record and never replaces one".into())
                }
                _ => refused(format!("cannot be created: {err}")),
            })?;
        let recorder = Recorder {
            out: Mutex::new(BufWriter::new(file)),
            pending: Mutex::new(std::collections::HashMap::new()),
            next: AtomicUsize::new(0),
            drop_first: drop_first as usize,
        };
        let header = Header {
            format: FORMAT.to_owned(),
            version: 1,
            upstream: upstream.to_owned(),
        };
        recorder
            .write(&serde_json::to_string(&header).unwrap_or_default())
            .map_err(|err| refused(format!("cannot be written: {err}")))?;
        Ok(recorder)
    }

    fn write(&self, line: &str) -> std::io::Result<()> {
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")?;
        out.flush()
    }
}

impl Tap for Recorder {
    fn arrived(
        &self,
        method: &str,
        target: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> (usize, Decision) {
        let number = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let arrived = Arrived {
            started: rfc3339(SystemTime::now()),
            at: Instant::now(),
            method: method.to_owned(),
            target: target.to_owned(),
            headers: recorded(header_pairs(headers).into_iter()),
            body: String::from_utf8_lossy(body).into_owned(),
        };
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(number, arrived);
        let decision = if number <= self.drop_first {
            Decision::LoseReply
        } else {
            Decision::Forward
        };
        (number, decision)
    }

    fn settled(&self, number: usize, fate: Fate) {
        let Some(arrived) = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&number)
        else {
            return;
        };
        let text = |body: &Bytes| Some(String::from_utf8_lossy(body).into_owned());
        let (fate, status, response_headers, response_body) = match fate {
            Fate::Answered {
                status,
                headers,
                body,
            } => ("answered", Some(status), headers, text(&body)),
            Fate::Lost {
                status,
                headers,
                body,
            } => ("lost", Some(status), headers, text(&body)),
            Fate::Abandoned {
                status,
                headers,
                body,
            } => ("abandoned", Some(status), headers, text(&body)),
            Fate::Failed(why) => ("failed", None, Vec::new(), Some(why)),
        };
        let line = Line {
            n: number as u64,
            started: arrived.started,
            took_ms: u64::try_from(arrived.at.elapsed().as_millis()).unwrap_or(u64::MAX),
            method: arrived.method,
            target: arrived.target,
            request_headers: arrived.headers,
            request_body: arrived.body,
            fate: fate.to_owned(),
            status,
            response_headers: recorded(response_headers.into_iter()),
            response_body,
        };
        if let Ok(line) = serde_json::to_string(&line) {
            // A record that can no longer be written is reported once by the next write's
            // error on stderr; the proxy goes on forwarding.
            if let Err(err) = self.write(&line) {
                eprintln!("lab proxy --record: cannot write request {number}: {err}");
            }
        }
    }
}

/// `time` in RFC 3339, UTC, with microseconds.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // The civil date of a day count (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_micros()
    )
}
