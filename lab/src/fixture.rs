//! Reading the fixture: the one approved operation the scenarios replay.
//!
//! Every problem is reported with the file and the field at fault, so a user can fix the input
//! without reading code.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::payload::{Payload, json_type};
use crate::suite::Operation;

/// The repository's `fixture.json`, built into the binary so `lab` finds it from any folder.
pub const BUILT_IN: &str = include_str!("../../fixture.json");

/// How the built-in fixture is named in messages.
pub const BUILT_IN_NAME: &str = "fixture.json (built in)";

/// Reads and validates a fixture file.
///
/// # Errors
/// [`Error::InputUnreadable`] if the file cannot be read; [`Error::InputInvalid`] naming the
/// field at fault if its content is wrong.
pub fn load(path: &Path) -> Result<Operation> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::InputUnreadable {
        path: path.to_owned(),
        source,
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
/// # Errors
/// [`Error::InputInvalid`] naming the field at fault.
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
/// # Ok::<(), lab::Error>(())
/// ```
pub fn parse(text: &str, origin: &Path) -> Result<Operation> {
    parse_fields(text).map_err(|problem| Error::InputInvalid {
        path: origin.to_owned(),
        problem,
    })
}

/// The parse itself; its error is the problem's description, without the file name.
fn parse_fields(text: &str) -> Result<Operation, String> {
    let value: Value = serde_json::from_str(text).map_err(|err| format!("invalid JSON: {err}"))?;
    let Value::Object(top) = value else {
        return Err(format!(
            "must be a JSON object, found {}",
            json_type(&value)
        ));
    };
    if let Some(name) = top.keys().find(|name| !FIELDS.contains(&name.as_str())) {
        return Err(format!(
            "unknown field `{name}` (expected operation_key, scope, payload)"
        ));
    }
    let operation_key = OperationKey::try_from(string_field(&top, "operation_key")?)
        .map_err(|err| format!("field `operation_key`: {err}"))?;
    let scope = object_field(&top, "scope")?;
    let scope = Scope::new(
        string_field(scope, "scope.caller")?,
        string_field(scope, "scope.operation")?,
    )
    .map_err(|err| format!("field `scope`: {err}"))?;
    let payload = Payload::new(Value::Object(object_field(&top, "payload")?.clone()))
        .map_err(|err| format!("field `payload`: {err}"))?;
    Ok(Operation {
        scope,
        operation_key,
        payload,
    })
}

const FIELDS: [&str; 3] = ["operation_key", "scope", "payload"];

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
