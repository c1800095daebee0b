//! `cargo xtask bench --audit`: `lab audit` over a large recording, its peak memory and its
//! rate, beside the rate at which the same file is merely read. The recordings are made here:
//! a HAR and an OTLP JSON trace of a ticket service's traffic (reads, creates with keys and
//! their retries, lost replies, a few unkeyed retries), about 2.4 KB an entry as a browser or
//! proxy records it (a dozen headers each way, timings, bodies of a few hundred bytes).
//!
//! Peak memory is the child's own maximum resident set (`wait4`'s `ru_maxrss`), so nothing else
//! on the machine counts; the rate is the file's size over the audit's wall time. The bare read
//! of the file in the same run says how much of that time is the disk's. Nothing asserts: the
//! targets (at most 200 MB, at least 50 MB/s) are printed beside the figures.

use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// The recording's size: 1 GiB, or 64 MiB for `--quick`.
fn size(quick: bool) -> u64 {
    if quick { 64 << 20 } else { 1 << 30 }
}

/// The target file the audit reads.
const TARGET: &str = r#"[create]
method = "POST"
path = "/tickets"

[key]
header = "Idempotency-Key"

[identity]
json_pointer = "/ticket_id"
"#;

/// The headers a browser or client library sends with each request.
fn request_headers(key: Option<&str>, token: usize) -> Value {
    let mut headers = vec![
        json!({"name": "Host", "value": "tickets.internal.example:8443"}),
        json!({"name": "User-Agent", "value": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"}),
        json!({"name": "Accept", "value": "application/json, text/plain, */*"}),
        json!({"name": "Accept-Language", "value": "en-GB,en;q=0.9,de;q=0.8"}),
        json!({"name": "Accept-Encoding", "value": "gzip, deflate, br, zstd"}),
        json!({"name": "Authorization", "value": format!("Bearer caller-{token}-2b7e151628aed2a6abf7158809cf4f3c")}),
        json!({"name": "Content-Type", "value": "application/json"}),
        json!({"name": "Origin", "value": "https://tickets.internal.example"}),
        json!({"name": "Referer", "value": "https://tickets.internal.example/board/queue?view=open&sort=priority"}),
        json!({"name": "Sec-Fetch-Mode", "value": "cors"}),
        json!({"name": "Sec-Fetch-Site", "value": "same-origin"}),
        json!({"name": "traceparent", "value": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
    ];
    if let Some(key) = key {
        headers.push(json!({"name": "Idempotency-Key", "value": format!("\"{key}\"")}));
    }
    Value::Array(headers)
}

fn response_headers() -> Value {
    json!([
        {"name": "Content-Type", "value": "application/json; charset=utf-8"},
        {"name": "Date", "value": "Mon, 07 Dec 2026 10:00:00 GMT"},
        {"name": "Server", "value": "envoy"},
        {"name": "Cache-Control", "value": "no-store"},
        {"name": "Strict-Transport-Security", "value": "max-age=63072000; includeSubDomains"},
        {"name": "X-Request-Id", "value": "7f3c2d1e-0b9a-4c8d-9e7f-6a5b4c3d2e1f"},
        {"name": "X-Envoy-Upstream-Service-Time", "value": "12"},
        {"name": "Vary", "value": "Accept-Encoding, Origin"}
    ])
}

/// One HAR entry: a read of ticket `n`, or a create (of intention `n`, with `key`), answered
/// with ticket `id` or lost.
fn entry(at_ms: u64, n: u64, create: Option<(Option<&str>, Option<u64>)>) -> Value {
    let started = format!(
        "2026-12-07T{:02}:{:02}:{:02}.{:03}Z",
        at_ms / 3_600_000 % 24,
        at_ms / 60_000 % 60,
        at_ms / 1000 % 60,
        at_ms % 1000
    );
    let ticket = json!({"ticket_id": n, "title": format!("Printer on floor {} jams on duplex jobs", n % 9), "priority": "high", "queue": "facilities", "status": "open", "reporter": format!("user-{}", n % 1000), "created_at": "2026-12-07T10:00:00Z", "labels": ["hardware", "printing"]});
    let (method, url, key, body, status, text) = match create {
        None => (
            "GET",
            format!("https://tickets.internal.example/api/tickets/{n}"),
            None,
            None,
            200,
            Some(ticket.to_string()),
        ),
        Some((key, id)) => {
            let body = json!({"title": format!("Printer on floor {} jams on duplex jobs", n % 9), "priority": "high", "queue": "facilities", "description": format!("Intention {n}: the printer by the lifts stops on every duplex job and shows error 13.2; single-sided jobs print.")});
            let text = id.map(|id| json!({"ticket_id": id, "status": "open"}).to_string());
            (
                "POST",
                "https://tickets.internal.example/api/tickets".to_owned(),
                key,
                Some(body.to_string()),
                if id.is_some() { 201 } else { 0 },
                text,
            )
        }
    };
    json!({
        "startedDateTime": started,
        "time": 38.4,
        "request": {"method": method, "url": url, "httpVersion": "HTTP/2", "headers": request_headers(key, (n % 7) as usize),
                    "queryString": [], "cookies": [], "headersSize": -1, "bodySize": body.as_ref().map_or(0, String::len),
                    "postData": body.map(|text| json!({"mimeType": "application/json", "text": text}))},
        "response": {"status": status, "statusText": "", "httpVersion": "HTTP/2", "headers": if status == 0 { json!([]) } else { response_headers() },
                     "cookies": [], "content": {"size": text.as_ref().map_or(0, String::len), "mimeType": "application/json", "text": text},
                     "redirectURL": "", "headersSize": -1, "bodySize": -1},
        "cache": {},
        "timings": {"blocked": 0.4, "dns": -1, "connect": -1, "ssl": -1, "send": 0.1, "wait": 36.2, "receive": 1.7},
        "serverIPAddress": "10.0.12.7", "connection": "443", "_priority": "High", "_resourceType": "fetch"
    })
}

/// The traffic, entry by entry, until `size` bytes are written by `write`: each intention is a
/// read and a create; one in fifty creates loses its reply and is retried with its key, one in
/// five hundred is sent again without one while the first is in flight.
fn traffic(size: u64, mut write: impl FnMut(&Value) -> Result<u64>) -> Result<u64> {
    let (mut written, mut n, mut at, mut ticket, mut entries) = (0, 0u64, 0u64, 0u64, 0);
    while written < size {
        n += 1;
        at += 37;
        written += write(&entry(at, n, None))?;
        let key = format!("op-{n:012}");
        let unkeyed = n % 500 == 0;
        let lost = n % 50 == 0;
        ticket += 1;
        let first_key = (!unkeyed).then_some(key.as_str());
        written += write(&entry(
            at + 5,
            n,
            Some((first_key, (!lost).then_some(ticket))),
        ))?;
        entries += 2;
        if lost || unkeyed {
            if unkeyed {
                ticket += 1;
            }
            // A lost reply is retried after a pause; an unkeyed retry goes out before the first
            // reply is back (the client gave up on it), so its two tickets are one intention's.
            let after = if unkeyed { 20 } else { 900 };
            written += write(&entry(at + 5 + after, n, Some((first_key, Some(ticket)))))?;
            entries += 1;
        }
    }
    Ok(entries)
}

fn har(path: &Path, size: u64) -> Result<u64> {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    out.write_all(br#"{"log": {"version": "1.2", "creator": {"name": "xtask bench", "version": "1"}, "pages": [], "entries": ["#)?;
    let mut first = true;
    let entries = traffic(size, |entry| {
        let text = entry.to_string();
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        out.write_all(text.as_bytes())?;
        Ok(text.len() as u64 + 2)
    })?;
    out.write_all(b"]}}\n")?;
    out.flush()?;
    Ok(entries)
}

/// The same traffic as OTLP JSON lines, as the collector's file exporter writes them: a batch of
/// 512 HTTP client spans per line.
fn otlp(path: &Path, size: u64) -> Result<u64> {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut batch: Vec<Value> = Vec::new();
    let flush = |batch: &mut Vec<Value>, out: &mut BufWriter<std::fs::File>| -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let line = json!({"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "ticket-web"}}]},
                          "scopeSpans": [{"scope": {"name": "opentelemetry.instrumentation.requests", "version": "0.51b0"}, "spans": std::mem::take(batch)}]}]});
        out.write_all(line.to_string().as_bytes())?;
        out.write_all(b"\n")?;
        Ok(())
    };
    let mut count = 0u64;
    let entries = traffic(size, |entry| {
        count += 1;
        let request = &entry["request"];
        let start = 1_765_101_600_000_000_000u64 + count * 37_000_000;
        let mut attributes = vec![
            json!({"key": "http.request.method", "value": {"stringValue": request["method"]}}),
            json!({"key": "url.full", "value": {"stringValue": request["url"]}}),
            json!({"key": "server.address", "value": {"stringValue": "tickets.internal.example"}}),
            json!({"key": "network.protocol.version", "value": {"stringValue": "2"}}),
            json!({"key": "http.request.body", "value": {"stringValue": request["postData"]["text"]}}),
            json!({"key": "http.response.body", "value": {"stringValue": entry["response"]["content"]["text"]}}),
        ];
        for header in request["headers"].as_array().into_iter().flatten() {
            let name = header["name"]
                .as_str()
                .unwrap_or_default()
                .to_ascii_lowercase();
            attributes.push(json!({"key": format!("http.request.header.{name}"), "value": {"arrayValue": {"values": [{"stringValue": header["value"]}]}}}));
        }
        let status = entry["response"]["status"].as_u64().unwrap_or(0);
        if status > 0 {
            attributes.push(json!({"key": "http.response.status_code", "value": {"intValue": status.to_string()}}));
        } else {
            attributes.push(json!({"key": "error.type", "value": {"stringValue": "ReadTimeout"}}));
        }
        let span = json!({"traceId": format!("{count:032x}"), "spanId": format!("{count:016x}"), "name": request["method"], "kind": 3,
                          "startTimeUnixNano": start.to_string(), "endTimeUnixNano": (start + 38_000_000).to_string(),
                          "attributes": attributes, "status": if status > 0 { json!({}) } else { json!({"code": 2}) }});
        let bytes = span.to_string().len() as u64;
        batch.push(span);
        if batch.len() == 512 {
            flush(&mut batch, &mut out)?;
        }
        Ok(bytes)
    })?;
    flush(&mut batch, &mut out)?;
    out.flush()?;
    Ok(entries)
}

/// Runs `lab audit` over `recording`: its wall seconds, peak resident set in bytes, and exit
/// status.
fn audit(lab: &Path, target: &Path, recording: &Path) -> Result<(f64, u64, i32)> {
    let started = Instant::now();
    let child = Command::new(lab)
        .arg("audit")
        .arg("--json")
        .arg("--target")
        .arg(target)
        .arg(recording)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting lab audit")?;
    let pid = i32::try_from(child.id()).context("a pid")?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, with pointers to live locals.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if waited != pid {
        bail!("waiting for lab audit: {}", std::io::Error::last_os_error());
    }
    let seconds = started.elapsed().as_secs_f64();
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    // Linux gives ru_maxrss in KiB.
    Ok((
        seconds,
        u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
        code,
    ))
}

/// How long reading the file through takes, with nothing done to its bytes.
fn bare_read(path: &Path) -> Result<f64> {
    let started = Instant::now();
    let mut file = std::fs::File::open(path)?;
    let mut buffer = vec![0u8; 1 << 20];
    while file.read(&mut buffer)? > 0 {}
    Ok(started.elapsed().as_secs_f64())
}

/// Measures both recordings and returns the `audit` section of `bench.json`.
pub fn run(lab: &Path, scratch: &Path, quick: bool) -> Result<Value> {
    let target = scratch.join("audit.toml");
    std::fs::write(&target, TARGET)?;
    let mut runs = Vec::new();
    for (format, file) in [
        ("HAR", "traffic.har"),
        ("OTLP JSON lines", "traffic.otlp.jsonl"),
    ] {
        let path = scratch.join(file);
        let entries = if file.ends_with(".har") {
            har(&path, size(quick))?
        } else {
            otlp(&path, size(quick))?
        };
        let bytes = std::fs::metadata(&path)?.len();
        // The file is read once before either timing, so both find it in the page cache alike.
        bare_read(&path)?;
        let read_seconds = bare_read(&path)?;
        let (seconds, peak, code) = audit(lab, &target, &path)?;
        // 0 or 1 (a finding): the rate and memory are the same; 2 would be a reader's error.
        if !matches!(code, 0 | 1) {
            bail!("lab audit over {file} exited {code}: it did not read the recording");
        }
        std::fs::remove_file(&path)?;
        let mb = bytes as f64 / 1e6;
        // Whole megabytes and megabytes a second: the book quotes them as they are here.
        runs.push(json!({
            "format": format, "bytes": bytes, "mb": mb.round() as u64, "entries": entries,
            "seconds": (seconds * 10.0).round() / 10.0,
            "mb_per_s": (mb / seconds).round() as u64,
            "peak_rss_bytes": peak, "peak_rss_mb": (peak as f64 / 1e6).round() as u64,
            "bare_read_mb_per_s": (mb / read_seconds).round() as u64,
        }));
    }
    Ok(
        json!({"runs": runs, "targets": {"peak_rss_bytes_at_most": 200_000_000u64, "mb_per_s_at_least": 50}}),
    )
}

/// The figures beside their targets.
pub fn print_targets(audit: &Value) {
    println!("\nlab audit over a large recording (measured in this run)");
    for run in audit["runs"].as_array().into_iter().flatten() {
        let number = |field: &str| run[field].as_f64().unwrap_or(f64::NAN);
        println!(
            "  {}: {:.0} MB, {} entries: {:.1} s, {:.0} MB/s (target >= 50; a bare read of the file {:.0} MB/s, audit ÷ read {:.2}); peak RSS {:.0} MB (target <= 200; ÷ file size {:.3})",
            run["format"].as_str().unwrap_or("?"),
            number("bytes") / 1e6,
            run["entries"],
            number("seconds"),
            number("mb_per_s"),
            number("bare_read_mb_per_s"),
            number("mb_per_s") / number("bare_read_mb_per_s"),
            number("peak_rss_bytes") / 1e6,
            number("peak_rss_bytes") / number("bytes"),
        );
    }
}
