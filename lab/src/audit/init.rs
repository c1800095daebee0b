//! `lab audit --init`: a starting target file from recordings, read in one pass each. The
//! create is the route (or tool) whose requests most often carry a key-like header (or
//! argument), else the most frequent write; the identity is the member of its successes that
//! names a different value each time. Credentials are never copied: the file says which headers
//! tell callers apart, and the user names them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::record::{self, Recorded, Reply};
use crate::check::calibration::id_pointers;
use crate::error::{Error, Result};

/// What the recordings showed of one route or tool.
#[derive(Default)]
struct Seen {
    count: usize,
    successes: usize,
    /// Key-like header (or argument) names, and how often each was sent.
    keys: BTreeMap<String, usize>,
    /// Whether every key value seen was quoted (an sf-string).
    quoted: Option<bool>,
    /// Id-like pointers of the successes, and a few values each held.
    pointers: BTreeMap<String, BTreeSet<String>>,
    /// Successes with a `Location` header.
    located: usize,
}

/// Whether a header or argument name says it carries an operation key.
fn key_like(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.contains("idempoten")
        || name.contains("dedup")
        || name.replace(['-', '_'], "").contains("operationkey")
}

const CREDENTIALS: [&str; 4] = [
    "authorization",
    "x-api-key",
    "proxy-authorization",
    "cookie",
];

/// Everything `--init` gathers.
#[derive(Default)]
struct Survey {
    routes: BTreeMap<(String, String), Seen>,
    tools: BTreeMap<String, Seen>,
    credentials: BTreeSet<String>,
}

impl Survey {
    fn add(&mut self, exchange: Recorded) {
        let tool = exchange.method == "tool";
        if !tool && matches!(exchange.method.as_str(), "GET" | "HEAD" | "OPTIONS") {
            return;
        }
        for (name, _) in &exchange.headers {
            if CREDENTIALS.contains(&name.as_str()) {
                self.credentials.insert(name.clone());
            }
        }
        let seen = if tool {
            self.tools.entry(exchange.path.clone()).or_default()
        } else {
            self.routes
                .entry((exchange.method.clone(), exchange.path.clone()))
                .or_default()
        };
        seen.count += 1;
        if tool {
            let arguments = exchange
                .body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok());
            if let Some(Value::Object(map)) = arguments {
                for name in map.keys().filter(|n| key_like(n)) {
                    *seen.keys.entry(name.clone()).or_default() += 1;
                }
            }
        } else {
            for (name, value) in exchange.headers.iter().filter(|(n, _)| key_like(n)) {
                *seen.keys.entry(name.clone()).or_default() += 1;
                let quoted = value.trim().starts_with('"');
                seen.quoted = Some(seen.quoted.unwrap_or(true) && quoted);
            }
        }
        let body = match &exchange.reply {
            Reply::Http {
                status: 200..=299,
                headers,
                body,
            } => {
                if headers.iter().any(|(n, _)| n == "location") {
                    seen.located += 1;
                }
                body.clone()
            }
            Reply::Tool {
                is_error: false,
                result,
            } => result.clone(),
            _ => return,
        };
        seen.successes += 1;
        let Some(json) = body.and_then(|b| serde_json::from_str::<Value>(&b).ok()) else {
            return;
        };
        let json = json.get("structuredContent").cloned().unwrap_or(json);
        for pointer in id_pointers(&json) {
            let values = seen.pointers.entry(pointer.clone()).or_default();
            if values.len() < 50
                && let Some(value) = json.pointer(&pointer)
            {
                values.insert(value.to_string());
            }
        }
    }
}

/// The most likely create among `seen`: keyed most often, then succeeded most often.
fn pick<K: Clone>(seen: &BTreeMap<K, Seen>) -> Option<(K, &Seen)> {
    seen.iter()
        .max_by_key(|(_, s)| (s.keys.values().sum::<usize>(), s.successes, s.count))
        .map(|(k, s)| (k.clone(), s))
}

/// The pointer whose values differ most across successes (an identity names each effect).
fn identity_pointer(seen: &Seen) -> Option<&String> {
    seen.pointers
        .iter()
        .max_by_key(|(p, values)| (values.len(), p.len() == 3))
        .map(|(p, _)| p)
}

fn most_used(keys: &BTreeMap<String, usize>) -> Option<&String> {
    keys.iter().max_by_key(|(_, n)| **n).map(|(k, _)| k)
}

/// Writes the starting file to `path` (never replacing a file) from `recordings`; returns what
/// it chose, in words.
///
/// # Errors
/// [`Error::InputInvalid`] when `path` exists or a recording is not one `lab audit` reads, or
/// when no recording holds a write to start from; [`Error::OutputUnwritable`] when it cannot be
/// written.
pub fn write(
    path: &Path,
    recordings: &[PathBuf],
    progress: &dyn Fn(&Path, u64, u64),
) -> Result<String> {
    if path.exists() {
        return Err(exists(path));
    }
    let mut survey = Survey::default();
    for recording in recordings {
        record::read(
            recording,
            &mut |read, total| progress(recording, read, total),
            &mut |exchange| survey.add(exchange),
        )?;
    }
    let (text, chose) = starting_file(&survey, recordings).ok_or_else(|| Error::InputInvalid {
        subject: "--init".to_owned(),
        problem: "the recordings hold no write (no POST, PUT, PATCH or DELETE, no tool call) \
                  to start a target file from"
            .to_owned(),
    })?;
    crate::check::init::write_new(path, &text, "--init")?;
    Ok(chose)
}

fn exists(path: &Path) -> Error {
    crate::check::init::exists(path, "--init")
}

fn toml_string(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// The file's text and a sentence of what it chose; `None` without a write to start from.
fn starting_file(survey: &Survey, recordings: &[PathBuf]) -> Option<(String, String)> {
    let names: Vec<String> = recordings.iter().map(|r| r.display().to_string()).collect();
    let mut out = format!(
        "# A starting target file for lab audit, written by --init from {}.\n# Fit it, then \
         run: lab audit --target THIS_FILE RECORDING...\n# lab check reads the same file once \
         it has [service] and [count] (see the book's \"Checking your service\").\n\n",
        names.join(", ")
    );
    let http = pick(&survey.routes);
    let tool = pick(&survey.tools);
    let use_tool = match (&http, &tool) {
        (Some((_, h)), Some((_, t))) => {
            t.keys.values().sum::<usize>() > h.keys.values().sum::<usize>()
                || (h.successes == 0 && t.successes > 0)
        }
        (None, Some(_)) => true,
        _ => false,
    };
    if use_tool {
        let (name, seen) = tool?;
        let chose = tool_sections(&mut out, &name, seen);
        return Some((out, chose));
    }
    let ((method, path), seen) = http?;
    let chose = http_sections(&mut out, (&method, &path), seen, &survey.credentials);
    Some((out, chose))
}

/// `[mcp.tool]` and `[mcp.identity]` for tool `name`; returns what was chosen.
fn tool_sections(out: &mut String, name: &str, seen: &Seen) -> String {
    let key = most_used(&seen.keys);
    out.push_str(&format!(
        "[mcp.tool]\n# {} call{} of this tool in the recordings, {} succeeded.\nname = {}\n",
        seen.count,
        if seen.count == 1 { "" } else { "s" },
        seen.successes,
        toml_string(name)
    ));
    match key {
        Some(key) => out.push_str(&format!("key_argument = {}\n", toml_string(key))),
        None => out.push_str(
            "# No argument looked like an operation key: name it, or keep no_key.\nno_key = true\n",
        ),
    }
    out.push_str("# The arguments lab check sends; lab audit reads the recorded ones.\narguments = {}\n\n[mcp.identity]\n");
    match identity_pointer(seen) {
        Some(pointer) => out.push_str(&format!(
            "# The member of the results (structuredContent) whose value differed most.\nstructured_pointer = {}\n",
            toml_string(pointer)
        )),
        None => out.push_str(
            "# No result held an id-like member: fit a regex to the result's text.\ntext_regex = \"id[\\\"': ]+([A-Za-z0-9_-]+)\"\n",
        ),
    }
    let chose = format!(
        "the tool {name}, key argument {}",
        key.map_or("none", String::as_str)
    );
    chose
}

/// `[create]`, `[key]`, `[identity]` and a note on callers for route `method path`; returns
/// what was chosen.
fn http_sections(
    out: &mut String,
    (method, path): (&str, &str),
    seen: &Seen,
    credentials: &BTreeSet<String>,
) -> String {
    let key = most_used(&seen.keys);
    out.push_str(&format!(
        "[create]\n# {} request{} to this route in the recordings, {} succeeded.\nmethod = {}\npath = {}\n\n[key]\n",
        seen.count,
        if seen.count == 1 { "" } else { "s" },
        seen.successes,
        toml_string(method),
        toml_string(path)
    ));
    match key {
        Some(key) => {
            let form = if seen.quoted == Some(true) { "sf-string" } else { "opaque" };
            out.push_str(&format!(
                "header = {}\n# The keys were sent {}.\nform = \"{form}\"\n\n",
                toml_string(key),
                if form == "sf-string" { "quoted, as sf-strings" } else { "bare" }
            ));
        }
        None => out.push_str(
            "# No request header looked like an operation key: name the one your clients send.\nheader = \"Idempotency-Key\"\n\n",
        ),
    }
    out.push_str("[identity]\n");
    if seen.located * 2 > seen.successes && seen.successes > 0 {
        out.push_str("# Most successes carried a Location header.\nheader = \"Location\"\n");
    } else if let Some(pointer) = identity_pointer(seen) {
        out.push_str(&format!(
            "# The member of the successes' bodies whose value differed most.\njson_pointer = {}\n",
            toml_string(pointer)
        ));
    } else {
        out.push_str("# No success body was recorded with an id-like member: name where a success names its effect.\njson_pointer = \"/id\"\n");
    }
    if !credentials.is_empty() {
        let headers: Vec<&str> = credentials.iter().map(String::as_str).collect();
        out.push_str(&format!(
            "\n# The requests carry {}: name each caller by its value (never copied here), e.g.\n\
             # [[callers]]\n# name = \"web\"\n# headers = {{ {} = \"…\" }}\n",
            headers.join(", "),
            headers[0]
        ));
    }
    let chose = format!(
        "the create {method} {path}, key header {}",
        key.map_or("none seen", String::as_str)
    );
    chose
}
