//! Reading the fixture: the one approved operation the scenarios replay.
//!
//! Every problem is reported with the file and the field at fault, so a user can fix the input
//! without reading code.

use std::io::Read;
use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::{Payload, json_type};
use crate::suite::Operation;

/// The largest fixture read, in bytes. A fixture holds one operation; the HTTP service takes
/// request bodies of 64 KiB, so a fixture far beyond that could not be sent anyway, and the bound
/// keeps a wrong file (a log, a disk image) from being read whole into memory.
pub const MAX_FIXTURE_BYTES: u64 = 1024 * 1024;

/// The deepest nesting of arrays and objects a fixture may have, its own object included.
/// `serde_json` stops at 128 levels with a recursion error; this bound is checked first, with a
/// message that says what the limit is.
pub const MAX_FIXTURE_DEPTH: usize = 64;

/// The repository's `fixture.json`, built into the binary so `lab` finds it from any folder.
pub const BUILT_IN: &str = include_str!("../../fixture.json");

/// How the built-in fixture is named in messages.
pub const BUILT_IN_NAME: &str = "fixture.json (built in)";

/// Reads and validates a fixture file, reading at most [`MAX_FIXTURE_BYTES`] and one byte more.
///
/// # Errors
/// [`Error::InputUnreadable`] if the file cannot be read (a folder included);
/// [`Error::InputInvalid`] naming the field at fault if its content is wrong, or when it is a
/// pipe or a device, larger than [`MAX_FIXTURE_BYTES`] or not UTF-8.
pub fn load(path: &Path) -> Result<Operation> {
    let unreadable = |source| Error::InputUnreadable {
        path: path.to_owned(),
        source,
    };
    let invalid = |problem: String| Error::InputInvalid {
        subject: path.display().to_string(),
        problem,
    };
    // A pipe or a device could block the read forever or never end: only files are read.
    let metadata = std::fs::metadata(path).map_err(unreadable)?;
    if !metadata.is_file() && !metadata.is_dir() {
        return Err(invalid(
            "not a regular file (a pipe, a device or a socket); give a file".to_owned(),
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FIXTURE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_FIXTURE_BYTES {
        return Err(invalid(format!(
            "larger than {MAX_FIXTURE_BYTES} bytes (1 MiB), the most a fixture may be; it holds one operation"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|err| {
        invalid(format!(
            "not UTF-8 text (invalid byte at offset {})",
            err.utf8_error().valid_up_to()
        ))
    })?;
    parse(&text, path)
}

/// The built-in fixture.
///
/// # Errors
/// [`Error::InputInvalid`] if the committed `fixture.json` was broken when the lab was built.
pub fn built_in() -> Result<Operation> {
    parse(BUILT_IN, Path::new(BUILT_IN_NAME))
}

/// Validates fixture text; `origin` names it in errors.
///
/// The text is read by the same strict parser as a payload arriving over HTTP
/// ([`Payload::from_json_text`]): a member named twice in one object (`operation_key`, a payload
/// field) is refused rather than letting the last one win.
///
/// # Errors
/// [`Error::InputInvalid`] naming the field at fault, a repeated member, or nesting deeper than
/// [`MAX_FIXTURE_DEPTH`].
///
/// ```
/// use std::path::Path;
///
/// let text = r#"{"operation_key": "k-1", "scope": {"caller": "bot", "operation": "create_ticket"},
///               "payload": {"title": "Disk full"}}"#;
/// let operation = lab::fixture::parse(text, Path::new("inline"))?;
/// assert_eq!(operation.operation_key.as_str(), "k-1");
///
/// let err = lab::fixture::parse(r#"{"operation_key": "k-1"}"#, Path::new("inline")).unwrap_err();
/// assert_eq!(err.to_string(), "inline: missing field `scope`");
///
/// let twice = r#"{"operation_key": "k-1", "operation_key": "k-2"}"#;
/// let err = lab::fixture::parse(twice, Path::new("inline")).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     r#"inline: invalid JSON: key "operation_key" appears twice in one object at line 1 column 40"#
/// );
/// # Ok::<(), lab::Error>(())
/// ```
pub fn parse(text: &str, origin: &Path) -> Result<Operation> {
    parse_fields(text).map_err(|problem| Error::InputInvalid {
        subject: origin.display().to_string(),
        problem,
    })
}

/// The parse itself; its error is the problem's description, without the file name.
fn parse_fields(text: &str) -> Result<Operation, String> {
    if let Some((line, column)) = deeper_than(text, MAX_FIXTURE_DEPTH) {
        return Err(format!(
            "nested deeper than {MAX_FIXTURE_DEPTH} levels at line {line} column {column}"
        ));
    }
    let whole = Payload::from_json_text(text).map_err(|err| match err {
        Error::PayloadText { source } => format!("invalid JSON: {source}"),
        Error::PayloadNotObject { found } => format!("must be a JSON object, found {found}"),
        other => other.to_string(),
    })?;
    let top = whole.as_object();
    if let Some(name) = top.keys().find(|name| !FIELDS.contains(&name.as_str())) {
        return Err(format!(
            "unknown field `{name}` (expected operation_key, scope, payload)"
        ));
    }
    let operation_key = OperationKey::try_from(string_field(top, "operation_key")?)
        .map_err(|err| format!("field `operation_key`: {err}"))?;
    let scope = object_field(top, "scope")?;
    let scope = Scope::new(
        string_field(scope, "scope.caller")?,
        string_field(scope, "scope.operation")?,
    )
    .map_err(|err| format!("field `scope`: {err}"))?;
    let payload = Payload::new(Value::Object(object_field(top, "payload")?.clone()))
        .map_err(|err| format!("field `payload`: {err}"))?;
    Ok(Operation {
        scope,
        operation_key,
        payload,
    })
}

const FIELDS: [&str; 3] = ["operation_key", "scope", "payload"];

/// Where JSON `text` first opens its `limit + 1`th level of arrays and objects (line and column,
/// from 1), or `None`. Brackets inside strings do not count; the text need not be valid JSON.
fn deeper_than(text: &str, limit: usize) -> Option<(usize, usize)> {
    let (mut depth, mut line, mut column) = (0usize, 1, 0);
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        column += 1;
        match c {
            '\n' => {
                line += 1;
                column = 0;
            }
            _ if in_string => match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            },
            '"' => in_string = true,
            '[' | '{' => {
                depth += 1;
                if depth > limit {
                    return Some((line, column));
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// The field `path` names (its last dot-separated part is looked up in `object`).
fn field<'v>(object: &'v Map<String, Value>, path: &str) -> Result<&'v Value, String> {
    let name = path.rsplit('.').next().unwrap_or(path);
    object
        .get(name)
        .ok_or_else(|| format!("missing field `{path}`"))
}

fn string_field(object: &Map<String, Value>, path: &str) -> Result<String, String> {
    match field(object, path)? {
        Value::String(text) => Ok(text.clone()),
        other => Err(format!(
            "field `{path}` must be a string, found {}",
            json_type(other)
        )),
    }
}

fn object_field<'v>(
    object: &'v Map<String, Value>,
    path: &str,
) -> Result<&'v Map<String, Value>, String> {
    match field(object, path)? {
        Value::Object(inner) => Ok(inner),
        other => Err(format!(
            "field `{path}` must be a JSON object, found {}",
            json_type(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_measured_outside_strings_only() {
        assert_eq!(deeper_than(r#"{"a": [[1]]}"#, 3), None);
        assert_eq!(deeper_than(r#"{"a": [[1]]}"#, 2), Some((1, 8)));
        assert_eq!(deeper_than(r#"{"a": "[[[[\"[["}"#, 1), None);
        assert_eq!(deeper_than("{\n [\n  [", 2), Some((3, 3)));
    }
}
