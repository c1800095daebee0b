//! How `lab audit` reads a recorded exchange, from the same target file `lab check` reads: which
//! requests are creates, the key each carries, the payload it asks for, the caller who sent it,
//! and the effect its reply names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::record::{Delivery, Recorded, Reply};
use crate::check::target::{Caller, Identity, KeyForm, Target};
use crate::error::Result;
use crate::http::record::redacted;

/// Which requests are creates.
#[derive(Clone, Debug)]
pub enum Create {
    /// An HTTP route (`create.method`, `create.path`).
    Http {
        /// `POST`.
        method: String,
        /// `/tickets`.
        path: String,
    },
    /// A tool (`mcp.tool.name`).
    Tool(String),
}

/// Where a create carries its key.
#[derive(Clone, Debug)]
pub enum KeyPlace {
    /// A header (`key.header`, lower case), read in the file's form.
    Header(String, KeyForm),
    /// An argument of the tool (`mcp.tool.key_argument`).
    Argument(String),
    /// Nowhere: the tool takes none (`no_key = true`).
    Nowhere,
}

/// Where a success names its effect.
#[derive(Clone, Debug)]
pub enum Named {
    /// A JSON pointer into the reply's body (`identity.json_pointer`).
    Pointer(String),
    /// A header of the reply (`identity.header`, lower case).
    Header(String),
    /// A JSON pointer into a tool result's `structuredContent` (or into the result, where the
    /// recorder kept the structured value alone).
    #[cfg(feature = "mcp")]
    Structured(String),
    /// A regex over a tool result's text.
    #[cfg(feature = "mcp")]
    Text(regex::Regex),
}

/// What the target file tells the audit.
#[derive(Clone, Debug)]
pub struct Rules {
    /// The target file, for the report.
    pub path: PathBuf,
    /// Which requests are creates.
    pub create: Create,
    /// Where the key is.
    pub key: KeyPlace,
    /// Where a success names its effect.
    pub named: Named,
    /// The statuses that mean success (empty: any 2xx).
    pub success: Vec<u16>,
    /// The callers the file names, each by the headers that say who it is.
    pub callers: Vec<Caller>,
}

/// What a create's reply says of its effect: the effect's name as text, or (as the audit
/// keeps it) where that text is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect<S = String> {
    /// A success naming this effect.
    Made(S),
    /// A success whose effect the recording does not name (no body recorded, or nothing at the
    /// file's identity).
    Unnamed,
    /// A refusal (a status that is neither a success nor a server error): no effect.
    Refused,
    /// Unknown: no reply in the recording, a server error, a tool call that failed.
    Unknown,
}

impl<S> Effect<S> {
    /// The same outcome, the effect's name turned into what `keep` makes of it.
    pub fn map<T>(self, keep: impl FnOnce(S) -> T) -> Effect<T> {
        match self {
            Effect::Made(name) => Effect::Made(keep(name)),
            Effect::Unnamed => Effect::Unnamed,
            Effect::Refused => Effect::Refused,
            Effect::Unknown => Effect::Unknown,
        }
    }
}

impl Rules {
    /// Reads the target file: an HTTP file's `[create]`, `[key]`, `[identity]` and
    /// `[[callers]]`, or an `[mcp]` file's tool and identity.
    ///
    /// # Errors
    /// [`Error::InputUnreadable`], [`Error::InputInvalid`] or [`Error::TargetInvalid`] naming the
    /// file and the field at fault.
    pub fn from_file(path: &Path) -> Result<Rules> {
        let (text, has_mcp) = crate::check::TargetFile::read(path)?;
        if has_mcp {
            #[cfg(feature = "mcp")]
            {
                use crate::check::mcp::target::{McpIdentity, McpTarget};
                let (tool, identity) = McpTarget::audit_parts(&text, path)?;
                return Ok(Rules {
                    path: path.to_owned(),
                    create: Create::Tool(tool.name),
                    key: tool
                        .key_argument
                        .map_or(KeyPlace::Nowhere, KeyPlace::Argument),
                    named: match identity {
                        McpIdentity::Structured(pointer) => Named::Structured(pointer),
                        McpIdentity::Text(regex) => Named::Text(regex),
                    },
                    success: Vec::new(),
                    callers: Vec::new(),
                });
            }
            #[cfg(not(feature = "mcp"))]
            return Err(crate::error::Error::InputInvalid {
                subject: path.display().to_string(),
                problem: "[mcp]: this lab was built without the mcp feature".to_owned(),
            });
        }
        let parts = Target::audit_parts(&text, path)?;
        Ok(Rules {
            path: path.to_owned(),
            create: Create::Http {
                method: parts.create.method.to_ascii_uppercase(),
                path: parts.create.path,
            },
            key: KeyPlace::Header(parts.key.header.to_ascii_lowercase(), parts.key.form),
            named: match parts.identity {
                Identity::Pointer(pointer) => Named::Pointer(pointer),
                Identity::Header(name) => Named::Header(name.to_ascii_lowercase()),
            },
            success: parts.create.success,
            callers: parts.callers,
        })
    }

    /// The create as a reader names it: `POST /tickets`, or `the tool create_ticket`.
    pub fn describe_create(&self) -> String {
        match &self.create {
            Create::Http { method, path } => format!("{method} {path}"),
            Create::Tool(name) => format!("the tool {name}"),
        }
    }

    /// Whether `exchange` is a create.
    pub fn is_create(&self, exchange: &Recorded) -> bool {
        match &self.create {
            Create::Http { method, path } => {
                exchange.method == *method && same_route(&exchange.path, path)
            }
            Create::Tool(name) => exchange.method == "tool" && exchange.path == *name,
        }
    }

    /// Whether the recording cannot say which key `exchange` carried: a key header absent from
    /// a span (which records only the headers it was told to), or a tool call whose arguments
    /// were not recorded.
    pub fn key_unknown(&self, exchange: &Recorded) -> bool {
        match &self.key {
            KeyPlace::Header(name, _) => {
                !exchange.headers_complete && header(&exchange.headers, name).is_none()
            }
            KeyPlace::Argument(_) => exchange
                .body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
                .is_none_or(|json| !json.is_object()),
            KeyPlace::Nowhere => false,
        }
    }

    /// The key a create carries, as the service reads it; `None` without one.
    pub fn key(&self, exchange: &Recorded) -> Option<String> {
        match &self.key {
            KeyPlace::Header(name, form) => {
                let value = header(&exchange.headers, name)?;
                Some(match form {
                    KeyForm::SfString | KeyForm::Token => sf_string(value),
                    KeyForm::Opaque => value.to_owned(),
                })
            }
            KeyPlace::Argument(name) => {
                let arguments: Value = serde_json::from_str(exchange.body.as_deref()?).ok()?;
                match unwrapped(&arguments, name).get(name)? {
                    Value::String(key) => Some(key.clone()),
                    Value::Null => None,
                    other => Some(other.to_string()),
                }
            }
            KeyPlace::Nowhere => None,
        }
    }

    /// The canonical payload, as one text: JSON with its members sorted and no spaces (a tool
    /// call's arguments without the key); the body as recorded when it is not JSON; `None`
    /// when no body was recorded.
    pub fn payload(&self, exchange: &Recorded) -> Option<String> {
        let body = exchange.body.as_deref()?;
        match serde_json::from_str::<Value>(body) {
            Ok(json) => {
                let mut json = match &self.key {
                    KeyPlace::Argument(name) => unwrapped(&json, name).clone(),
                    _ => json,
                };
                if let (KeyPlace::Argument(name), Value::Object(map)) = (&self.key, &mut json) {
                    map.remove(name);
                }
                let mut out = String::new();
                canonical(&json, &mut out);
                Some(out)
            }
            Err(_) => Some(body.trim().to_owned()),
        }
    }

    /// The caller: the file's caller whose every header the request carries with its value; or,
    /// when none does, the credentials the file's callers are told apart by (`authorization`
    /// by default), shown as a short digest, never the token; or the trace's resource; or one
    /// caller for the whole recording.
    pub fn caller(&self, exchange: &Recorded) -> String {
        // A recorder that keeps credentials as digests (`lab proxy --record`) is matched by
        // the digest of the file's value.
        let sent = |name: &str, value: &str| {
            header(&exchange.headers, &name.to_ascii_lowercase())
                .is_some_and(|sent| sent == value || sent == redacted(value))
        };
        if let Some(caller) = self
            .callers
            .iter()
            .find(|c| !c.headers.is_empty() && c.headers.iter().all(|(n, v)| sent(n, v)))
        {
            return caller.name.clone();
        }
        let mut names: Vec<String> = self
            .callers
            .iter()
            .flat_map(|c| c.headers.iter().map(|(n, _)| n.to_ascii_lowercase()))
            .collect();
        if names.is_empty() {
            names.push("authorization".to_owned());
        }
        names.sort();
        names.dedup();
        let credentials: Vec<String> = names
            .iter()
            .filter_map(|n| header(&exchange.headers, n).map(|v| format!("{n}={v}")))
            .collect();
        if !credentials.is_empty() {
            let seen = redacted(&credentials.join("\n"));
            return format!(
                "a caller the file does not name ({} {})",
                names.join("+"),
                &seen[..15]
            );
        }
        exchange
            .origin
            .clone()
            .unwrap_or_else(|| "the one caller the recording shows".to_owned())
    }

    /// What the reply says of the effect.
    pub fn effect(&self, exchange: &Recorded) -> Effect {
        match &exchange.reply {
            Reply::None => Effect::Unknown,
            Reply::Http {
                status,
                headers,
                body,
            } => {
                let success = if self.success.is_empty() {
                    (200..300).contains(status)
                } else {
                    self.success.contains(status)
                };
                if !success {
                    return if *status >= 500 || exchange.delivery == Delivery::Lost {
                        Effect::Unknown
                    } else {
                        Effect::Refused
                    };
                }
                let named = match &self.named {
                    Named::Header(name) => header(headers, name).map(str::to_owned),
                    Named::Pointer(pointer) => body
                        .as_deref()
                        .and_then(|b| serde_json::from_str::<Value>(b).ok())
                        .and_then(|json| scalar(json.pointer(pointer)?)),
                    #[cfg(feature = "mcp")]
                    _ => None,
                };
                named.map_or(Effect::Unnamed, Effect::Made)
            }
            Reply::Tool { is_error, result } => {
                if *is_error {
                    return Effect::Unknown;
                }
                let Some(result) = result else {
                    return Effect::Unnamed;
                };
                self.tool_identity(result)
                    .map_or(Effect::Unnamed, Effect::Made)
            }
        }
    }

    #[cfg(feature = "mcp")]
    fn tool_identity(&self, result: &str) -> Option<String> {
        // A framework records the result as the MCP result, its content list, its text, or
        // that text encoded once more as a JSON string: then the text, and what it holds.
        let (text, json) = match serde_json::from_str::<Value>(result).ok() {
            Some(Value::String(inner)) => {
                let json = serde_json::from_str(&inner).ok();
                (inner, json)
            }
            json => (result.to_owned(), json),
        };
        let texts = json.as_ref().map(content_texts).unwrap_or_default();
        match &self.named {
            Named::Structured(pointer) => {
                let found = |json: &Value| {
                    let structured = json.get("structuredContent").unwrap_or(json);
                    scalar(structured.pointer(pointer)?)
                };
                json.as_ref().and_then(found).or_else(|| {
                    texts
                        .iter()
                        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
                        .find_map(|j| found(&j))
                })
            }
            Named::Text(regex) => {
                let text = if texts.is_empty() {
                    text
                } else {
                    texts.join("\n")
                };
                let found = regex.captures(&text)?;
                Some(found.get(1).or_else(|| found.get(0))?.as_str().to_owned())
            }
            _ => None,
        }
    }

    #[cfg(not(feature = "mcp"))]
    fn tool_identity(&self, _result: &str) -> Option<String> {
        None
    }
}

/// The texts of a tool result: its content items' `text` (in an MCP result's `content`, or a
/// content list as it is), or the result itself when it is a string.
#[cfg(feature = "mcp")]
fn content_texts(result: &Value) -> Vec<&str> {
    let items = result.get("content").unwrap_or(result);
    match (items.as_array(), result.as_str()) {
        (Some(items), _) => items
            .iter()
            .filter_map(|i| i.get("text").and_then(Value::as_str))
            .collect(),
        (None, Some(text)) => vec![text],
        (None, None) => Vec::new(),
    }
}

/// A tool call's arguments as a tracer recorded them: the object itself, or the one a
/// framework wrapped it in (`{"kwargs": {...}}`, `{"inputs": {...}}`) when only that one holds
/// the key argument `key`.
fn unwrapped<'v>(arguments: &'v Value, key: &str) -> &'v Value {
    if arguments.get(key).is_some() {
        return arguments;
    }
    ["kwargs", "inputs", "input", "arguments", "args"]
        .iter()
        .filter_map(|wrapper| arguments.get(wrapper))
        .find(|inner| inner.get(key).is_some())
        .unwrap_or(arguments)
}

/// Whether a recorded path is the create's route: the same path, or the same under a prefix
/// of whole segments (`/api/tickets` for `/tickets`); a trailing slash is no difference.
pub fn same_route(recorded: &str, route: &str) -> bool {
    let trim = |p: &str| {
        let t = p.trim_end_matches('/');
        if t.is_empty() {
            "/".to_owned()
        } else {
            t.to_owned()
        }
    };
    let (recorded, route) = (trim(recorded), trim(route));
    recorded == route
        || (route != "/"
            && recorded
                .strip_suffix(&route)
                .is_some_and(|prefix| prefix.starts_with('/') && !prefix.ends_with('/')))
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// An sf-string's content (`"abc"` is `abc`, escapes undone); any other value as it is.
fn sf_string(value: &str) -> String {
    let value = value.trim();
    match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) => inner.replace("\\\"", "\"").replace("\\\\", "\\"),
        None => value.to_owned(),
    }
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(_) | Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// JSON written with every object's members sorted by name and no spaces.
pub fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, &Value> = map.iter().collect();
            out.push('{');
            for (i, (name, member)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(name.clone()).to_string());
                out.push(':');
                canonical(member, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A stable 64-bit digest (FNV-1a): the same text gives the same digest in every run.
pub fn digest(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_matches_itself_or_under_a_prefix_of_whole_segments() {
        assert!(same_route("/tickets", "/tickets"));
        assert!(same_route("/tickets/", "/tickets"));
        assert!(same_route("/api/tickets", "/tickets"));
        assert!(!same_route("/mytickets", "/tickets"));
        assert!(!same_route("/tickets/7", "/tickets"));
        assert!(!same_route("/other", "/"));
    }

    #[test]
    fn the_canonical_payload_sorts_members_at_every_depth() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"y": [1, {"d": 2, "c": 3}], "x": "s"}}"#)
                .unwrap();
        let mut out = String::new();
        canonical(&a, &mut out);
        assert_eq!(out, r#"{"a":{"x":"s","y":[1,{"c":3,"d":2}]},"b":1}"#);
    }

    #[test]
    fn an_sf_string_key_is_read_inside_its_quotes() {
        assert_eq!(sf_string("\"k-1\""), "k-1");
        assert_eq!(sf_string("k-1"), "k-1");
        assert_eq!(sf_string(r#""a\"b""#), "a\"b");
    }
}
