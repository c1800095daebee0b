//! Recordings as `lab audit` reads them: HAR 1.1 and 1.2 (`log.entries`), OpenTelemetry traces
//! as OTLP JSON (one `{"resourceSpans": …}` object, or one per line as the collector's file
//! exporter writes them), and the JSON Lines `lab proxy --record` writes. Each is read in one
//! pass: a HAR entry or a span is parsed, handed on as one [`Recorded`] exchange and dropped, so
//! memory does not grow with the file, only with what the caller of [`read`] keeps. (An MCP
//! client's span of a tool call waits for the end of its file, with the ids of the tool-call
//! spans around it: one call is one exchange, however many layers recorded it.)
//!
//! A recording says what it holds and no more: a body not recorded is `None`, never an empty
//! body; a reply the caller never received is [`Delivery::Lost`], and a server's span, which
//! cannot say whether its reply arrived, is [`Delivery::Unknown`].

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::split::{self, Step, Wanted};

use crate::error::{Error, Result};

/// The kinds of recording [`read`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// HAR (`{"log": {"version": "1.2", "entries": [...]}}`).
    Har,
    /// OTLP JSON traces (`{"resourceSpans": [...]}`, one object or one per line).
    Otlp,
    /// `lab proxy --record`: a header line, then one exchange per line.
    ProxyRecord,
}

impl Format {
    /// The format's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Format::Har => "HAR",
            Format::Otlp => "OTLP JSON traces",
            Format::ProxyRecord => "lab proxy record",
        }
    }
}

pub use crate::http::record::FORMAT as PROXY_RECORD;
use crate::http::record::{Header, Line};

/// Whether the caller got the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The caller got it (a client's record, a proxy that passed it on).
    Received,
    /// The caller never got it: no response in a client's record, or a proxy that closed the
    /// connection instead (the service's answer, if the recorder saw one, is kept).
    Lost,
    /// The recorder cannot say (a server's span).
    Unknown,
}

/// What the service answered, as far as the recording shows it.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// An HTTP response.
    Http {
        /// The status.
        status: u16,
        /// The headers recorded, names in lower case.
        headers: Vec<(String, String)>,
        /// The body, when it was recorded.
        body: Option<String>,
    },
    /// A tool call's result.
    Tool {
        /// Whether the call ended in an error (the span's status, or the result's `isError`).
        is_error: bool,
        /// The result, when it was recorded.
        result: Option<String>,
    },
    /// Nothing from the service in the recording.
    None,
}

/// One recorded request and its outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// Where it is: `entries[12]`, `line 7`, `span 5b8efff798038103`.
    pub place: String,
    /// When it started, in nanoseconds since the Unix epoch, when the recording says.
    pub start_ns: Option<i128>,
    /// How long it took, in milliseconds, when the recording says (in a mitmproxy HAR, until
    /// the reply can have been passed on: see `PassedOn`).
    pub took_ms: Option<u64>,
    /// `POST`, or `tool` for a tool call.
    pub method: String,
    /// The path without the query (or the tool's name).
    pub path: String,
    /// The request's headers as recorded, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The request's body (a tool call's arguments), when it was recorded.
    pub body: Option<String>,
    /// The service's reply.
    pub reply: Reply,
    /// Whether the caller got it.
    pub delivery: Delivery,
    /// Who made it, as a trace's resource says (`service.name`, `service.instance.id`); the
    /// caller when no header tells.
    pub origin: Option<String>,
    /// For a span: whether it is the client's side (`true`) or the server's.
    pub client_side: bool,
    /// Whether `headers` holds every request header (HAR, a proxy record), so a header not
    /// there was not sent; a span records only the headers its instrumentation was told to.
    pub headers_complete: bool,
}

/// Bytes read so far, for progress on a long read.
struct Counted<'p, R> {
    inner: R,
    read: u64,
    total: u64,
    next_report: u64,
    report: &'p mut dyn FnMut(u64, u64),
}

/// How often progress is reported: every this many bytes.
const PROGRESS_EVERY: u64 = 64 << 20;

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read >= self.next_report {
            (self.report)(self.read, self.total);
            self.next_report = self.read + PROGRESS_EVERY;
        }
        Ok(n)
    }
}

/// Reads `path` in one pass, handing each exchange to `sink`; returns the format it read.
/// `progress` hears the bytes read and the file's size every 64 MiB.
///
/// # Errors
/// [`Error::InputUnreadable`] when the file cannot be opened; [`Error::InputInvalid`] naming the
/// file and the place (line and column) when it is neither HAR, OTLP JSON nor a proxy record, is
/// truncated, or is a HAR of another version.
pub fn read(
    path: &Path,
    progress: &mut dyn FnMut(u64, u64),
    sink: &mut dyn FnMut(Recorded),
) -> Result<Format> {
    let unreadable = |source| Error::InputUnreadable {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(unreadable)?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let counted = Counted {
        inner: file,
        read: 0,
        total,
        next_report: PROGRESS_EVERY,
        report: progress,
    };
    let mut reader = BufReader::with_capacity(256 << 10, counted);
    let invalid = |problem: String| Error::InputInvalid {
        subject: path.display().to_string(),
        problem,
    };
    let (format, first_key) = sniff(&mut reader).map_err(unreadable)?;
    let Some(format) = format else {
        return Err(invalid(match first_key {
            None => "empty, or not a JSON object: expected HAR (an object with \"log\"), OTLP \
                     JSON traces (an object with \"resourceSpans\") or a lab proxy record"
                .to_owned(),
            Some(key) => format!(
                "a JSON object whose first member is {key:?}: expected HAR (\"log\"), OTLP JSON \
                 traces (\"resourceSpans\") or a lab proxy record ({{\"format\": \
                 \"{PROXY_RECORD}\"}} on its first line)"
            ),
        }));
    };
    let mut read = Reading {
        sink,
        format,
        version: None,
        in_completion_order: false,
        passed_on: PassedOn::default(),
        entries: 0,
        origin: None,
        otlp: Otlp {
            tool_spans: HashMap::new(),
            held: HashMap::new(),
        },
    };
    let wanted: &[Wanted] = match format {
        Format::Har => &HAR_WANTED,
        Format::Otlp => &OTLP_WANTED,
        Format::ProxyRecord => &[Wanted { path: &[], kind: 0 }],
    };
    split::split(&mut reader, wanted, &mut |found| read.take(found))
        .map_err(|stopped| invalid(describe_stop(format, &stopped)))?;
    read.finish().map_err(invalid)?;
    Ok(format)
}

/// Why a read stopped, in the reader's words: where, and what.
fn describe_stop(format: Format, stopped: &split::Stopped) -> String {
    let place = format!("line {} column {}", stopped.at.line, stopped.at.column);
    if stopped.truncated {
        return format!(
            "{place}: the file ends inside a JSON value (truncated?): a {} file must be whole",
            format.name()
        );
    }
    format!("{place}: {}", stopped.problem)
}

/// A value's parse error, placed in the file: serde_json counts from the value's start.
fn placed(format: Format, err: &serde_json::Error, at: split::Place) -> String {
    use serde_json::error::Category;
    let line = at.line + err.line() as u64 - 1;
    let column = if err.line() <= 1 {
        at.column + err.column() as u64 - 1
    } else {
        err.column() as u64
    };
    let text = err.to_string();
    let what = text
        .rfind(" at line ")
        .map_or(text.as_str(), |cut| &text[..cut]);
    let kind = match err.classify() {
        Category::Eof => "the value ends early",
        Category::Syntax => "not JSON",
        Category::Io | Category::Data => {
            return format!("line {line} column {column}: not {}: {what}", format.name());
        }
    };
    format!("line {line} column {column}: {kind}: {what}")
}

/// Where HAR's values are.
const HAR_WANTED: [Wanted; 3] = [
    Wanted {
        path: &[Step::Key(&["log"]), Step::Key(&["version"])],
        kind: 0,
    },
    Wanted {
        path: &[Step::Key(&["log"]), Step::Key(&["creator"])],
        kind: 1,
    },
    Wanted {
        path: &[Step::Key(&["log"]), Step::Key(&["entries"]), Step::Each],
        kind: 2,
    },
];

const RESOURCE_SPANS: Step = Step::Key(&["resourceSpans", "resource_spans"]);

/// Where OTLP's values are.
const OTLP_WANTED: [Wanted; 2] = [
    Wanted {
        path: &[RESOURCE_SPANS, Step::Each, Step::Key(&["resource"])],
        kind: 0,
    },
    Wanted {
        path: &[
            RESOURCE_SPANS,
            Step::Each,
            // `instrumentationLibrarySpans`: OTLP before 0.15, still written by older
            // collectors and exporters.
            Step::Key(&[
                "scopeSpans",
                "scope_spans",
                "instrumentationLibrarySpans",
                "instrumentation_library_spans",
            ]),
            Step::Each,
            Step::Key(&["spans"]),
            Step::Each,
        ],
        kind: 1,
    },
];

/// A read under way: each value the split hands on, parsed and judged in turn.
struct Reading<'s> {
    sink: &'s mut dyn FnMut(Recorded),
    format: Format,
    /// HAR's `log.version`, once read.
    version: Option<String>,
    /// Whether the HAR lists each entry once its recorder was done with it (mitmproxy's;
    /// `creator` comes before `entries` in its files).
    in_completion_order: bool,
    passed_on: PassedOn,
    entries: usize,
    /// The resource of the `resourceSpans` element being read: its place and its origin.
    origin: Option<((usize, usize), Option<String>)>,
    otlp: Otlp,
}

impl Reading<'_> {
    fn take(&mut self, found: split::Found<'_>) -> std::result::Result<(), String> {
        let parse_error = |err: serde_json::Error| placed(self.format, &err, found.at);
        match (self.format, found.kind) {
            (Format::Har, 0) => {
                let version: String = serde_json::from_slice(found.bytes).map_err(parse_error)?;
                if version != "1.2" && version != "1.1" {
                    return Err(format!(
                        "log.version {version:?}: this reader knows HAR 1.1 and 1.2"
                    ));
                }
                self.version = Some(version);
            }
            (Format::Har, 1) => {
                let creator: Value = serde_json::from_slice(found.bytes).map_err(parse_error)?;
                self.in_completion_order =
                    creator.get("name").and_then(Value::as_str) == Some("mitmproxy");
            }
            (Format::Har, _) => {
                let entry: HarEntry = serde_json::from_slice(found.bytes).map_err(parse_error)?;
                let place = format!("entries[{}]", self.entries);
                self.entries += 1;
                let span = entry.span_ns();
                let mut recorded = entry.recorded(place);
                if let (true, Some((start, end))) = (self.in_completion_order, span) {
                    let end = self.passed_on.reached(start, end, &mut recorded.took_ms);
                    self.passed_on.add(start, end);
                }
                (self.sink)(recorded);
            }
            (Format::Otlp, 0) => {
                let resource: Resource =
                    serde_json::from_slice(found.bytes).map_err(parse_error)?;
                let at = (found.indices[0], found.indices.get(1).copied().unwrap_or(0));
                self.origin = Some((at, resource.origin()));
            }
            (Format::Otlp, _) => {
                let span: Span = serde_json::from_slice(found.bytes).map_err(parse_error)?;
                let at = (found.indices[0], found.indices.get(1).copied().unwrap_or(0));
                let origin = match &self.origin {
                    Some((of, origin)) if *of == at => origin.clone(),
                    _ => None,
                };
                self.otlp.take(span, origin, &mut *self.sink);
            }
            (Format::ProxyRecord, _) if found.indices[0] == 0 => {
                let header: Header = serde_json::from_slice(found.bytes).map_err(parse_error)?;
                if header.format != PROXY_RECORD || header.version != 1 {
                    return Err(format!(
                        "a {:?} record of version {}: this reader knows {PROXY_RECORD} version 1",
                        header.format, header.version
                    ));
                }
            }
            (Format::ProxyRecord, _) => {
                let line: Line = serde_json::from_slice(found.bytes).map_err(parse_error)?;
                (self.sink)(proxy_exchange(line, found.at.line));
            }
        }
        Ok(())
    }

    /// What is owed once the file is read: HAR's version, OTLP's spans held back.
    fn finish(mut self) -> std::result::Result<(), String> {
        match self.format {
            Format::Har if self.version.is_none() => {
                Err("log.version missing: a HAR file says its version".to_owned())
            }
            Format::Otlp => {
                self.otlp.finish(&mut *self.sink);
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// The format, from the first member's name of the first object (and, for a proxy record,
/// its value); the reader is left where it was.
fn sniff<R: BufRead>(reader: &mut R) -> std::io::Result<(Option<Format>, Option<String>)> {
    let head = reader.fill_buf()?;
    let mut text = head;
    if text.starts_with(&[0xef, 0xbb, 0xbf]) {
        text = &text[3..];
    }
    let skip = |t: &[u8]| -> usize { t.iter().take_while(|b| b.is_ascii_whitespace()).count() };
    let mut at = skip(text);
    if text.get(at) != Some(&b'{') {
        return Ok((None, None));
    }
    at += 1;
    at += skip(&text[at..]);
    if text.get(at) != Some(&b'"') {
        return Ok((None, None));
    }
    let rest = &text[at + 1..];
    let Some(end) = rest.iter().position(|b| *b == b'"') else {
        return Ok((None, None));
    };
    let key = String::from_utf8_lossy(&rest[..end]).into_owned();
    let format = match key.as_str() {
        "log" => Some(Format::Har),
        "resourceSpans" | "resource_spans" => Some(Format::Otlp),
        "format"
            if rest[end..]
                .windows(PROXY_RECORD.len())
                .take(64)
                .any(|w| w == PROXY_RECORD.as_bytes()) =>
        {
            Some(Format::ProxyRecord)
        }
        _ => None,
    };
    if text.len() < head.len() {
        // The byte-order mark is not JSON: consume it.
        reader.consume(3);
    }
    Ok((format, Some(key)))
}

/// How many entries [`PassedOn`] keeps at most: past that it forgets the earliest, and so
/// infers less, never more.
const PASSED_ON_KEPT: usize = 4096;

/// The order of a mitmproxy HAR, read as time. mitmproxy's HAR export (`hardump`; its
/// addons/savehar.py) adds a flow to its list when the flow's `response` hook has run, or its
/// `error` hook, and passes the reply on to the client only after that hook. Its `time` ends
/// earlier: when mitmproxy had read the service's answer, before any addon held it. So an
/// entry listed after one that started later was passed on after that one was done: its reply
/// had not come back when that later request was sent, whatever its `time` says. A file sorted
/// by start (mitmproxy's `save.har` of its view in its default order, a browser's) never lists
/// an entry after a later one, so nothing is inferred there; a view sorted otherwise (by size,
/// by URL) and saved is read as if in completion order, which it is not.
#[derive(Default)]
struct PassedOn {
    /// `(start, passed on no earlier than)` of the entries listed so far that no other listed
    /// entry both started and was passed on later than: starts ascending, ends descending.
    steps: Vec<(i128, i128)>,
}

impl PassedOn {
    /// The earliest the entry that started at `start` and ended at `end` can have been passed
    /// on; `took_ms` is stretched to it when that is later than the file's `time`.
    fn reached(&self, start: i128, end: i128, took_ms: &mut Option<u64>) -> i128 {
        let later = self.steps.partition_point(|&(s, _)| s <= start);
        let Some(&(_, done)) = self.steps.get(later) else {
            return end;
        };
        if done <= end {
            return end;
        }
        let waited = u64::try_from((done - start + 999_999) / 1_000_000).unwrap_or(u64::MAX);
        *took_ms = Some(took_ms.map_or(waited, |t| t.max(waited)));
        done
    }

    fn add(&mut self, start: i128, end: i128) {
        let at = self.steps.partition_point(|&(s, _)| s < start);
        if self.steps.get(at).is_some_and(|&(_, e)| e >= end) {
            return;
        }
        let mut from = at;
        while from > 0 && self.steps[from - 1].1 <= end {
            from -= 1;
        }
        self.steps.splice(from..at, [(start, end)]);
        if self.steps.len() > PASSED_ON_KEPT {
            self.steps.remove(0);
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HarEntry {
    started_date_time: Option<String>,
    time: Option<f64>,
    request: HarRequest,
    response: Option<HarResponse>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HarRequest {
    method: String,
    url: String,
    #[serde(default)]
    headers: Vec<HarHeader>,
    post_data: Option<HarPostData>,
}

#[derive(Deserialize)]
struct HarHeader {
    name: String,
    value: String,
}

#[derive(Deserialize)]
struct HarPostData {
    text: Option<String>,
}

#[derive(Deserialize)]
struct HarResponse {
    status: Option<i64>,
    #[serde(default)]
    headers: Vec<HarHeader>,
    content: Option<HarContent>,
}

#[derive(Deserialize)]
struct HarContent {
    text: Option<String>,
    encoding: Option<String>,
}

fn lowered(headers: Vec<HarHeader>) -> Vec<(String, String)> {
    headers
        .into_iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value))
        .collect()
}

impl HarEntry {
    /// When it started and when its `time` ends, in nanoseconds since the epoch; the end is
    /// at least a nanosecond after the start, as any reply is.
    fn span_ns(&self) -> Option<(i128, i128)> {
        let start = self.started_date_time.as_deref().and_then(rfc3339_ns)?;
        let took = self
            .time
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map_or(0, |t| (t * 1e6) as i128);
        Some((start, start + took.max(1)))
    }

    fn recorded(self, place: String) -> Recorded {
        let (reply, delivery) = match self.response {
            Some(HarResponse {
                status: Some(status @ 100..=599),
                headers,
                content,
            }) => {
                let body = content.and_then(|c| match (c.text, c.encoding.as_deref()) {
                    (Some(text), Some("base64")) => base64_text(&text),
                    (text, _) => text,
                });
                let status = u16::try_from(status).unwrap_or(0);
                let headers = lowered(headers);
                (
                    Reply::Http {
                        status,
                        headers,
                        body,
                    },
                    Delivery::Received,
                )
            }
            // Status 0 (browsers) or -1 (Playwright), or no response: nothing came back.
            _ => (Reply::None, Delivery::Lost),
        };
        Recorded {
            place,
            start_ns: self.started_date_time.as_deref().and_then(rfc3339_ns),
            took_ms: self
                .time
                .filter(|t| t.is_finite() && *t >= 0.0)
                .map(|t| t as u64),
            method: self.request.method.to_ascii_uppercase(),
            path: path_of(&self.request.url),
            headers: lowered(self.request.headers),
            body: self.request.post_data.and_then(|p| p.text),
            reply,
            delivery,
            origin: None,
            client_side: true,
            headers_complete: true,
        }
    }
}

fn base64_text(text: &str) -> Option<String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The path of a URL (absolute or not), without its query or fragment.
pub fn path_of(url: &str) -> String {
    let rest = match url.find("://") {
        Some(scheme) => {
            let after = &url[scheme + 3..];
            after.find('/').map_or("/", |slash| &after[slash..])
        }
        None => url,
    };
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let path = &rest[..end];
    if path.is_empty() {
        "/".to_owned()
    } else {
        path.to_owned()
    }
}

/// An RFC 3339 (ISO 8601) time, `2026-12-07T10:00:00.123+01:00`, in nanoseconds since the
/// Unix epoch; `None` when it is not one.
pub fn rfc3339_ns(text: &str) -> Option<i128> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let s = text.get(from..from + len)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
    {
        return None;
    }
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let mut at = 19;
    let mut nanos: i128 = 0;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let digits = b[at..].iter().take_while(|c| c.is_ascii_digit()).count();
        let frac = &text[at..at + digits];
        let padded = format!("{:0<9}", &frac[..digits.min(9)]);
        nanos = padded.parse().ok()?;
        at += digits;
    }
    let offset_s: i64 = match b.get(at) {
        Some(b'Z' | b'z') => 0,
        Some(sign @ (b'+' | b'-')) => {
            let (h, m) = (num(at + 1, 2)?, num(at + 4, 2)?);
            let s = h * 3600 + m * 60;
            if *sign == b'-' { -s } else { s }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    Some(i128::from(secs) * 1_000_000_000 + nanos)
}

/// OTLP's `{"resourceSpans": [...]}`.
struct Otlp {
    /// Tool-call spans handed on, by span id: the tool each called (the most recent
    /// [`RECENT_TOOL_SPANS`], for an MCP client's span read after its parent's).
    tool_spans: HashMap<String, String>,
    /// MCP clients' spans of tool calls, by their parent's span id, until the parent is read:
    /// each with whether it says the call timed out.
    held: HashMap<String, (Recorded, bool)>,
}

/// How many tool-call spans [`Otlp::tool_spans`] keeps: a parent's span is written after its
/// children's, so one read long before a child's is rare, and the map stays small.
const RECENT_TOOL_SPANS: usize = 1 << 16;

/// Whether an MCP client span's `error.type` says the request timed out: the MCP SDKs' request
/// timeout code, or an exception type that names a timeout.
fn timed_out(error_type: &str) -> bool {
    error_type == "-32001" || error_type.to_ascii_lowercase().contains("timeout")
}

impl Otlp {
    /// Hands a span on as an exchange, or holds it. An agent framework runs its MCP client
    /// inside its own span of the tool call, and the client (fastmcp, for one) writes a span of
    /// its own under it, with the tool's name but neither the arguments nor the result: the same
    /// call one layer down, not a second call. Spans end children first, so the client's span
    /// waits for its parent; when the parent is the framework's span of the same tool, the
    /// client's is dropped, and what it says of a timeout is kept: the framework turns a timeout
    /// into an error with a result text of its own, which alone cannot tell it from a reply.
    fn take(&mut self, span: Span, origin: Option<String>, sink: &mut dyn FnMut(Recorded)) {
        let id = span.span_id.clone();
        let parent = span.parent_span_id.clone();
        let mcp_client = span.attribute(&["mcp.method.name"]).is_some();
        let timeout = span.failed()
            && span
                .attribute(&["error.type"])
                .is_some_and(|t| timed_out(&t));
        let Some(mut recorded) = span.recorded(origin) else {
            return;
        };
        if recorded.method == "tool" {
            if mcp_client {
                if self.tool_spans.get(&parent) != Some(&recorded.path) {
                    self.held.insert(parent, (recorded, timeout));
                }
                return;
            }
            if let Some((child, timeout)) = self.held.remove(&id) {
                if child.path != recorded.path {
                    sink(child);
                } else if timeout {
                    recorded.delivery = Delivery::Lost;
                    recorded.reply = Reply::None;
                }
            }
            if !id.is_empty() {
                if self.tool_spans.len() >= RECENT_TOOL_SPANS {
                    self.tool_spans.clear();
                }
                self.tool_spans.insert(id, recorded.path.clone());
            }
        }
        sink(recorded);
    }

    /// Hands on the MCP clients' spans whose parent was never read: each the only record of
    /// its call.
    fn finish(&mut self, sink: &mut dyn FnMut(Recorded)) {
        for (_, (recorded, _)) in std::mem::take(&mut self.held) {
            sink(recorded);
        }
    }
}

#[derive(Deserialize)]
struct Resource {
    #[serde(default)]
    attributes: Vec<Attribute>,
}

impl Resource {
    fn origin(&self) -> Option<String> {
        let find = |name: &str| {
            self.attributes
                .iter()
                .find(|a| a.key == name)
                .and_then(|a| a.value.text())
        };
        match (find("service.name"), find("service.instance.id")) {
            (Some(name), Some(instance)) => Some(format!("{name} ({instance})")),
            (name, instance) => name.or(instance),
        }
    }
}

#[derive(Deserialize)]
struct Attribute {
    key: String,
    #[serde(default)]
    value: AnyValue,
}

/// OTLP's `AnyValue`, as JSON: one member naming its type.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct AnyValue {
    #[serde(alias = "string_value")]
    string_value: Option<String>,
    #[serde(alias = "int_value")]
    int_value: Option<Value>,
    #[serde(alias = "double_value")]
    double_value: Option<f64>,
    #[serde(alias = "bool_value")]
    bool_value: Option<bool>,
    #[serde(alias = "array_value")]
    array_value: Option<ArrayValue>,
}

#[derive(Deserialize, Default)]
struct ArrayValue {
    #[serde(default)]
    values: Vec<AnyValue>,
}

impl AnyValue {
    /// The value as text: a string as it is, a number written out, an array's first element
    /// (HTTP header attributes are arrays of strings).
    fn text(&self) -> Option<String> {
        if let Some(s) = &self.string_value {
            return Some(s.clone());
        }
        if let Some(i) = &self.int_value {
            return Some(match i {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        }
        if let Some(d) = self.double_value {
            return Some(d.to_string());
        }
        if let Some(b) = self.bool_value {
            return Some(b.to_string());
        }
        self.array_value
            .as_ref()
            .and_then(|a| a.values.first())
            .and_then(AnyValue::text)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Span {
    #[serde(default, alias = "span_id")]
    span_id: String,
    #[serde(default, alias = "parent_span_id")]
    parent_span_id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    kind: Value,
    #[serde(default, alias = "start_time_unix_nano")]
    start_time_unix_nano: Value,
    #[serde(default, alias = "end_time_unix_nano")]
    end_time_unix_nano: Value,
    #[serde(default)]
    attributes: Vec<Attribute>,
    #[serde(default)]
    status: Option<SpanStatus>,
    #[serde(default)]
    events: Vec<SpanEvent>,
}

/// A span's event: some frameworks (Strands Agents, for one) record a tool call's arguments
/// and result as events of its span rather than as attributes.
#[derive(Deserialize)]
struct SpanEvent {
    #[serde(default)]
    name: String,
    #[serde(default)]
    attributes: Vec<Attribute>,
}

#[derive(Deserialize)]
struct SpanStatus {
    #[serde(default)]
    code: Value,
}

/// The attribute names a tool call's parts go by: the GenAI semantic conventions' first, then
/// those agent frameworks emit today (Pydantic AI and Logfire, OpenInference, the Vercel AI
/// SDK, OpenLLMetry).
pub const TOOL_NAME: [&str; 4] = [
    "gen_ai.tool.name",
    "tool.name",
    "ai.toolCall.name",
    "traceloop.entity.name",
];
/// A tool call's arguments.
pub const TOOL_ARGUMENTS: [&str; 6] = [
    "gen_ai.tool.call.arguments",
    "tool_arguments",
    "input.value",
    "tool.parameters",
    "ai.toolCall.args",
    "traceloop.entity.input",
];
/// The events of a tool call's span, and their attribute, that hold its arguments and its
/// result when no attribute of the span does (the GenAI conventions' event form).
const TOOL_ARGUMENTS_EVENT: (&str, &str) = ("gen_ai.tool.message", "content");
const TOOL_RESULT_EVENT: (&str, &str) = ("gen_ai.choice", "message");
/// A tool call's result.
pub const TOOL_RESULT: [&str; 5] = [
    "gen_ai.tool.call.result",
    "tool_response",
    "output.value",
    "ai.toolCall.result",
    "traceloop.entity.output",
];

fn nanos(value: &Value) -> Option<i128> {
    match value {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64().map(i128::from),
        _ => None,
    }
}

impl Span {
    fn attribute(&self, names: &[&str]) -> Option<String> {
        names.iter().find_map(|name| {
            self.attributes
                .iter()
                .find(|a| a.key == *name)
                .and_then(|a| a.value.text())
        })
    }

    /// The attribute `name` of the span's first event called `event`.
    fn event_attribute(&self, (event, name): (&str, &str)) -> Option<String> {
        self.events
            .iter()
            .filter(|e| e.name == event)
            .find_map(|e| e.attributes.iter().find(|a| a.key == name))
            .and_then(|a| a.value.text())
    }

    /// Whether the span's status is an error (`2`, `STATUS_CODE_ERROR`).
    fn failed(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.code == 2 || s.code.as_str() == Some("STATUS_CODE_ERROR"))
    }

    /// The span as an exchange: an HTTP client or server span, or a tool call; `None` for any
    /// other span.
    fn recorded(self, origin: Option<String>) -> Option<Recorded> {
        let start_ns = nanos(&self.start_time_unix_nano);
        let took_ms = match (start_ns, nanos(&self.end_time_unix_nano)) {
            (Some(a), Some(b)) if b >= a => u64::try_from((b - a) / 1_000_000).ok(),
            _ => None,
        };
        let id = if self.span_id.is_empty() {
            &self.name
        } else {
            &self.span_id
        };
        let skeleton = Recorded {
            place: format!("span {id}"),
            start_ns,
            took_ms,
            method: String::new(),
            path: String::new(),
            headers: Vec::new(),
            body: None,
            reply: Reply::None,
            delivery: Delivery::Unknown,
            origin,
            client_side: true,
            headers_complete: false,
        };
        let tool = self.attribute(&TOOL_NAME).or_else(|| {
            (self.attribute(&["gen_ai.operation.name"]).as_deref() == Some("execute_tool"))
                .then(|| self.name.trim_start_matches("execute_tool ").to_owned())
        });
        match tool {
            Some(tool) => Some(self.tool_call(tool, skeleton)),
            None => self.http(skeleton),
        }
    }

    /// A tool call's span: its arguments, and its result or the exception that ended it.
    fn tool_call(&self, tool: String, skeleton: Recorded) -> Recorded {
        let failed = self.failed();
        let result = self
            .attribute(&TOOL_RESULT)
            .or_else(|| self.event_attribute(TOOL_RESULT_EVENT));
        let is_error = failed
            || result
                .as_deref()
                .and_then(|r| serde_json::from_str::<Value>(r).ok())
                .is_some_and(|r| r.get("isError") == Some(&Value::Bool(true)));
        // A tool call that ended in an exception without a result: the agent got no result.
        // One that ended in an exception with a result the framework wrote (its own message
        // for a timeout, or the server's error): whether a reply came is not said, unless the
        // result is the tool's own error result.
        let tool_error = result
            .as_deref()
            .and_then(|r| serde_json::from_str::<Value>(r).ok())
            .is_some_and(|r| r.get("isError") == Some(&Value::Bool(true)));
        let delivery = match (failed, &result) {
            (true, None) => Delivery::Lost,
            (true, Some(_)) if !tool_error => Delivery::Unknown,
            _ => Delivery::Received,
        };
        Recorded {
            method: "tool".to_owned(),
            path: tool,
            body: self
                .attribute(&TOOL_ARGUMENTS)
                .or_else(|| self.event_attribute(TOOL_ARGUMENTS_EVENT)),
            reply: if delivery == Delivery::Lost {
                Reply::None
            } else {
                Reply::Tool { is_error, result }
            },
            delivery,
            ..skeleton
        }
    }

    /// An HTTP client or server span, by the HTTP semantic conventions (old names too); `None`
    /// for a span that is neither a tool call nor HTTP.
    fn http(&self, skeleton: Recorded) -> Option<Recorded> {
        let method = self.attribute(&["http.request.method", "http.method"])?;
        let url = self.attribute(&["url.full", "http.url", "url.path", "http.target"])?;
        // A span of kind unset or internal is a client's when it records the full URL (a
        // server's span records the path it was asked for).
        let client_side = match (self.kind.as_u64(), self.kind.as_str()) {
            (Some(3), _) | (_, Some("SPAN_KIND_CLIENT")) => true,
            (Some(2), _) | (_, Some("SPAN_KIND_SERVER")) => false,
            _ => self.attribute(&["url.full", "http.url"]).is_some(),
        };
        let status = self
            .attribute(&["http.response.status_code", "http.status_code"])
            .and_then(|s| s.parse::<u16>().ok());
        let prefixed = |prefix: &str| -> Vec<(String, String)> {
            self.attributes
                .iter()
                .filter_map(|a| {
                    let name = a.key.strip_prefix(prefix)?;
                    Some((name.to_ascii_lowercase(), a.value.text()?))
                })
                .collect()
        };
        let (reply, delivery) = match status {
            Some(status) => (
                Reply::Http {
                    status,
                    headers: prefixed("http.response.header."),
                    body: self.attribute(&["http.response.body"]),
                },
                if client_side {
                    Delivery::Received
                } else {
                    Delivery::Unknown
                },
            ),
            None if client_side => (Reply::None, Delivery::Lost),
            None => (Reply::None, Delivery::Unknown),
        };
        Some(Recorded {
            method: method.to_ascii_uppercase(),
            path: path_of(&url),
            headers: prefixed("http.request.header."),
            body: self.attribute(&["http.request.body"]),
            reply,
            delivery,
            client_side,
            ..skeleton
        })
    }
}

/// One line of a `lab proxy --record` file as an exchange; `line` is where it is.
fn proxy_exchange(exchange: Line, line: u64) -> Recorded {
    let delivery = match exchange.fate.as_str() {
        "answered" | "failed" => Delivery::Received,
        _ => Delivery::Lost,
    };
    let reply = match exchange.status {
        Some(status) => Reply::Http {
            status,
            headers: exchange.response_headers,
            body: exchange.response_body,
        },
        None => Reply::None,
    };
    Recorded {
        place: format!("line {line} (request {})", exchange.n),
        start_ns: rfc3339_ns(&exchange.started),
        took_ms: Some(exchange.took_ms),
        method: exchange.method.to_ascii_uppercase(),
        path: path_of(&exchange.target),
        headers: exchange.request_headers,
        body: Some(exchange.request_body),
        reply,
        delivery,
        origin: None,
        client_side: true,
        headers_complete: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A tool-call span for `create_ticket`: `layer` is `framework` (an agent framework's span,
    /// with arguments and result) or `mcp` (its MCP client's, with neither, ended in an error).
    fn tool_span(id: &str, parent: &str, layer: &str) -> Value {
        let mut attributes = vec![
            json!({"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}),
            json!({"key": "gen_ai.tool.name", "value": {"stringValue": "create_ticket"}}),
        ];
        let (kind, status) = if layer == "framework" {
            attributes.push(json!({"key": "gen_ai.tool.call.arguments", "value": {"stringValue": "{\"operation_key\":\"k-1\",\"title\":\"Disk full\"}"}}));
            attributes.push(json!({"key": "gen_ai.tool.call.result", "value": {"stringValue": "{\"ticket_id\":1}"}}));
            (1, json!({}))
        } else {
            attributes
                .push(json!({"key": "mcp.method.name", "value": {"stringValue": "tools/call"}}));
            (
                3,
                json!({"code": 2, "message": "Request 'tools/call' timed out"}),
            )
        };
        json!({"traceId": "5b8efff798038103d269b633813fc60c", "spanId": id, "parentSpanId": parent,
               "name": "execute_tool create_ticket", "kind": kind, "attributes": attributes, "status": status})
    }

    /// The places of the exchanges `read` hands on from `spans`, one span per line (children
    /// first, as a span processor exports them).
    fn places(spans: &[Value]) -> Vec<String> {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("trace.jsonl");
        let lines: Vec<String> = spans
            .iter()
            .map(|span| json!({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).to_string())
            .collect();
        std::fs::write(&path, lines.join("\n")).unwrap();
        let mut places = Vec::new();
        let format = read(&path, &mut |_, _| {}, &mut |r| places.push(r.place)).unwrap();
        assert_eq!(format, Format::Otlp);
        places.sort();
        places
    }

    #[test]
    fn an_mcp_clients_span_inside_a_frameworks_span_of_the_same_call_is_not_a_second_call() {
        // The MCP client's span ends (and is exported) before the framework's around it.
        let nested = places(&[
            tool_span("00000000000000b2", "00000000000000a1", "mcp"),
            tool_span("00000000000000a1", "00000000000000c0", "framework"),
        ]);
        assert_eq!(nested, ["span 00000000000000a1"]);
        // An MCP client's span with no tool-call span around it is the only record of its call.
        let alone = places(&[
            tool_span("00000000000000b2", "00000000000000c0", "mcp"),
            tool_span("00000000000000a1", "00000000000000c0", "framework"),
        ]);
        assert_eq!(alone, ["span 00000000000000a1", "span 00000000000000b2"]);
    }
}
