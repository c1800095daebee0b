//! Canonical JSON payloads and how two of them are compared.
//!
//! A retry is recognised by its key, but a key reused with *different* arguments is a different
//! intention and must be rejected. To tell the two apart the store keeps a canonical text of the
//! first payload and compares the new one against it byte for byte.
//!
//! The canonical form is compact JSON with object keys sorted (by their UTF-8 bytes) at every depth.
//! Key order and white space therefore never matter; any change of a value does.
//!
//! Numbers are compared as serde_json parses them, which keeps integers and floats apart:
//! `1` and `1.0` are different payloads, while `1.0`, `1.00` and `10e-1` are the same float and so
//! the same payload. An integer too large for 64 bits is read as the nearest float, and `-0` is read
//! as the float `-0.0`, which keeps its sign and so differs from `0`. This is a small,
//! strict contract on purpose, not a general notion of semantic equality.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// A JSON object together with its canonical text.
///
/// ```
/// use lab::Payload;
/// use serde_json::json;
///
/// let a = Payload::new(json!({"title": "Disk full", "priority": "normal"}))?;
/// let b = Payload::new(json!({"priority": "normal", "title": "Disk full"}))?;
/// assert_eq!(a, b);
/// assert_eq!(a.canonical(), r#"{"priority":"normal","title":"Disk full"}"#);
/// assert_ne!(a, a.with_field("priority", json!("urgent")));
/// # Ok::<(), lab::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Payload {
    object: Map<String, Value>,
    canonical: String,
    /// The text this payload was parsed from, kept only by [`Payload::from_json_text`].
    received: Option<String>,
}

impl Payload {
    /// Wraps a JSON value, which must be an object.
    ///
    /// # Errors
    /// [`Error::PayloadNotObject`] naming the JSON type found instead.
    pub fn new(value: Value) -> Result<Payload> {
        match value {
            Value::Object(object) => Ok(Payload::from_object(object)),
            other => Err(Error::PayloadNotObject {
                found: json_type(&other),
            }),
        }
    }

    fn from_object(object: Map<String, Value>) -> Payload {
        let mut canonical = String::new();
        write_object(&object, &mut canonical, Separators::COMPACT);
        Payload {
            object,
            canonical,
            received: None,
        }
    }

    // ANCHOR: from_json_text
    /// Parses payload text as it arrives over the wire, more strictly than `serde_json` does.
    ///
    /// `serde_json` keeps the last value when one object names a key twice, so
    /// `{"priority": "low", "priority": "urgent"}` would quietly become an urgent ticket. Other
    /// parsers keep the first value, so two services could read the same text as two different
    /// payloads. This function refuses such text instead. Nesting 128 levels deep or more is
    /// refused too (`serde_json`'s limit), as is anything after the object.
    ///
    /// The text is kept, unchanged, for [`Payload::as_received`]; equality still uses the canonical
    /// form.
    ///
    /// ```
    /// use lab::{Error, Payload};
    ///
    /// let a = Payload::from_json_text(r#"{"title": "Disk full", "priority": "normal"}"#)?;
    /// let b = Payload::from_json_text(r#"{"priority":"normal","title":"Disk full"}"#)?;
    /// assert_eq!(a, b);
    ///
    /// let twice = Payload::from_json_text(r#"{"priority": "low", "priority": "urgent"}"#);
    /// let Err(Error::PayloadText { source }) = twice else { panic!("accepted {twice:?}") };
    /// assert!(source.to_string().starts_with(r#"key "priority" appears twice in one object"#));
    /// # Ok::<(), lab::Error>(())
    /// ```
    ///
    /// # Errors
    /// - [`Error::PayloadText`] when the text is not JSON, repeats a key within one object, nests
    ///   too deeply or has trailing characters; the message gives the line and column.
    /// - [`Error::PayloadNotObject`] when the JSON is not an object.
    pub fn from_json_text(text: &str) -> Result<Payload> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let value = serde::Deserialize::deserialize(&mut deserializer)
            .and_then(|StrictValue(value)| deserializer.end().map(|()| value))
            .map_err(|source| Error::PayloadText { source })?;
        let mut payload = Payload::new(value)?;
        payload.received = Some(text.to_owned());
        Ok(payload)
    }
    // ANCHOR_END: from_json_text

    /// The text this payload was parsed from, byte for byte, when it came from
    /// [`Payload::from_json_text`]; `None` otherwise.
    ///
    /// Two texts of one payload can differ in key order and white space, so comparing these texts
    /// is the wrong way to tell a retry from a changed request. The simulator's `raw-payload`
    /// anti-pattern does exactly that, to show what goes wrong.
    pub fn as_received(&self) -> Option<&str> {
        self.received.as_deref()
    }

    /// The canonical text: compact, keys sorted at every depth.
    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// The payload as a JSON object.
    pub fn as_object(&self) -> &Map<String, Value> {
        &self.object
    }

    /// A copy with one top-level field set to a new value.
    pub fn with_field(&self, name: &str, value: Value) -> Payload {
        let mut object = self.object.clone();
        object.insert(name.to_owned(), value);
        Payload::from_object(object)
    }
}

/// Two payloads are equal when their canonical texts are.
impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.canonical == other.canonical
    }
}

impl Eq for Payload {}

impl serde::Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.object.serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Payload {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Payload::new(Value::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// A JSON value read by [`Payload::from_json_text`]: the same value `serde_json` builds, except
/// that a key repeated within one object is an error instead of a silent overwrite.
struct StrictValue(Value);

impl<'de> serde::Deserialize<'de> for StrictValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = StrictValue;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::Bool(value)))
    }

    fn visit_i64<E>(self, value: i64) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::from(value)))
    }

    fn visit_u64<E>(self, value: u64) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::from(value)))
    }

    fn visit_f64<E>(self, value: f64) -> Result<StrictValue, E> {
        // Exactly what serde_json's own Value does; JSON text cannot spell NaN or infinity.
        Ok(StrictValue(
            serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number),
        ))
    }

    fn visit_str<E>(self, value: &str) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::String(value.to_owned())))
    }

    fn visit_string<E>(self, value: String) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::String(value)))
    }

    fn visit_unit<E>(self) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::Null))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<StrictValue, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(StrictValue(Value::Array(items)))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<StrictValue, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "key {key:?} appears twice in one object"
                )));
            }
            let StrictValue(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(StrictValue(Value::Object(object)))
    }
}

/// The name of a JSON value's type, for error messages.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The strings written between items and between a key and its value.
#[derive(Clone, Copy, Debug)]
pub struct Separators {
    item: &'static str,
    key: &'static str,
}

impl Separators {
    /// `,` and `:`: the canonical payload form.
    pub const COMPACT: Separators = Separators {
        item: ",",
        key: ":",
    };
    /// `, ` and `: `: the form the report lines use, as Python's `json.dumps` prints by default.
    pub const SPACED: Separators = Separators {
        item: ", ",
        key: ": ",
    };
}

/// Writes `value` as JSON with object keys sorted at every depth, whatever order the map keeps them
/// in (serde_json's `preserve_order` feature may be switched on by another crate in the build).
///
/// ```
/// use lab::payload::{sorted_json, Separators};
/// use serde_json::json;
///
/// let value = json!({"tickets": 1, "attempts": [3, 4]});
/// assert_eq!(sorted_json(&value, Separators::SPACED), r#"{"attempts": [3, 4], "tickets": 1}"#);
/// ```
pub fn sorted_json(value: &Value, separators: Separators) -> String {
    let mut out = String::new();
    write_value(value, &mut out, separators);
    out
}

fn write_value(value: &Value, out: &mut String, separators: Separators) {
    match value {
        Value::Object(object) => write_object(object, out, separators),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push_str(separators.item);
                }
                write_value(item, out, separators);
            }
            out.push(']');
        }
        // Scalars have one serde_json form each; strings get its escaping.
        scalar => out.push_str(&scalar.to_string()),
    }
}

// ANCHOR: write_object
fn write_object(object: &Map<String, Value>, out: &mut String, separators: Separators) {
    let mut entries: Vec<(&String, &Value)> = object.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (index, (key, value)) in entries.into_iter().enumerate() {
        if index > 0 {
            out.push_str(separators.item);
        }
        out.push_str(&Value::String(key.clone()).to_string());
        out.push_str(separators.key);
        write_value(value, out, separators);
    }
    out.push('}');
}
// ANCHOR_END: write_object

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Payload {
        Payload::new(serde_json::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn key_order_does_not_change_the_canonical_form_at_any_depth() {
        let a = parse(r#"{"b": {"y": [1, {"q": 1, "p": 2}], "x": null}, "a": "é"}"#);
        let b = parse(r#"{"a":"é","b":{"x":null,"y":[1,{"p":2,"q":1}]}}"#);
        assert_eq!(a.canonical(), b.canonical());
        assert_eq!(
            a.canonical(),
            r#"{"a":"é","b":{"x":null,"y":[1,{"p":2,"q":1}]}}"#
        );
    }

    #[test]
    fn any_value_change_makes_a_different_payload() {
        let base = parse(r#"{"title": "t", "tags": ["a", "b"], "n": 1}"#);
        for changed in [
            r#"{"title": "T", "tags": ["a", "b"], "n": 1}"#,
            r#"{"title": "t", "tags": ["b", "a"], "n": 1}"#,
            r#"{"title": "t", "tags": ["a", "b"], "n": 2}"#,
            r#"{"title": "t", "tags": ["a", "b"], "n": 1, "extra": null}"#,
        ] {
            assert_ne!(base, parse(changed), "{changed}");
        }
    }

    #[test]
    fn integers_and_floats_never_match_but_float_spellings_do() {
        assert_ne!(parse(r#"{"n": 1}"#), parse(r#"{"n": 1.0}"#));
        assert_eq!(parse(r#"{"n": 1.0}"#), parse(r#"{"n": 1.00}"#));
        assert_eq!(parse(r#"{"n": 1.0}"#), parse(r#"{"n": 10e-1}"#));
        // serde_json reads `-0` as the float -0.0, which keeps its sign.
        assert_eq!(parse(r#"{"n": -0}"#).canonical(), r#"{"n":-0.0}"#);
        assert_ne!(parse(r#"{"n": -0}"#), parse(r#"{"n": 0}"#));
    }

    #[test]
    fn payloads_that_are_not_objects_are_rejected_with_their_type() {
        for (text, found) in [
            ("[1]", "array"),
            ("\"x\"", "string"),
            ("null", "null"),
            ("3", "number"),
        ] {
            let err = Payload::new(serde_json::from_str(text).unwrap()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("payload must be a JSON object, found {found}")
            );
        }
    }

    #[test]
    fn strings_are_escaped_as_json() {
        let p = parse(r#"{"q": "say \"hi\"\n\u0001"}"#);
        assert_eq!(p.canonical(), r#"{"q":"say \"hi\"\n\u0001"}"#);
    }
}
