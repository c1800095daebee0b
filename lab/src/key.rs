//! Operation identity: the key that names one intended action, and the scope it lives in.
//!
//! A key only identifies. It never authorises: a store looks a key up inside the caller's scope, so
//! the same key under two callers names two unrelated operations.

use std::fmt;

use crate::error::{Error, Result};

/// The longest identifier accepted, in bytes of UTF-8. Stripe uses the same bound for its keys,
/// and it keeps index entries small.
pub const MAX_IDENTIFIER_BYTES: usize = 255;

/// Checks the rules every identifier shares: not empty, bounded, no control characters.
fn validate(field: &'static str, value: &str) -> Result<()> {
    validate_with(
        field,
        value,
        MAX_IDENTIFIER_BYTES,
        "must be at most 255 bytes of UTF-8",
    )
}

/// The same rules with another length bound, and the reason to give when it is passed.
pub(crate) fn validate_with(
    field: &'static str,
    value: &str,
    max_bytes: usize,
    too_long: &'static str,
) -> Result<()> {
    let reason = if value.is_empty() {
        Some("must not be empty")
    } else if value.len() > max_bytes {
        Some(too_long)
    } else if value.chars().any(char::is_control) {
        Some("must not contain control characters")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidIdentifier {
            field,
            value: shorten(value),
            reason,
        }),
    }
}

/// Keeps error messages readable when someone passes a megabyte as a key.
fn shorten(value: &str) -> String {
    const SHOWN: usize = 64;
    match value.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}...", &value[..end]),
        None => value.to_owned(),
    }
}

/// A key that names one intended operation.
///
/// A key is printable ASCII (space to `~`), with no space at either end, so that it travels
/// unchanged in an HTTP header as an RFC 8941 string, in a JSON field and in a command-line
/// argument. A value outside that rule is refused where it enters, never trimmed or re-encoded:
/// ` deploy-7` and `deploy-7` are different intentions, and a rule that stripped the space would
/// merge them.
///
/// Create it once, when the operation is accepted, persist it with the arguments, and reuse it for
/// every retry of that operation. A genuinely new operation gets a new key, even when its payload is
/// identical.
///
/// ```
/// use lab::OperationKey;
///
/// let key = OperationKey::try_from("approved-ticket-001")?;
/// assert_eq!(key.as_str(), "approved-ticket-001");
/// assert!(OperationKey::try_from("").is_err());
/// assert!(OperationKey::try_from("tab\there").is_err());
/// assert!(OperationKey::try_from(" padded").is_err());
/// assert!(OperationKey::try_from("approuvé").is_err());
/// # Ok::<(), lab::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OperationKey(String);

impl OperationKey {
    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A different key built from this one and a suffix, still within the length bound. The suite
    /// uses it to stand for a second, separate intention.
    ///
    /// # Errors
    /// [`Error::InvalidIdentifier`] if the suffix itself breaks a rule or is too long to fit.
    pub fn with_suffix(&self, suffix: &str) -> Result<OperationKey> {
        let room = MAX_IDENTIFIER_BYTES.saturating_sub(suffix.len());
        let mut end = room.min(self.0.len());
        while !self.0.is_char_boundary(end) {
            end -= 1;
        }
        OperationKey::try_from(format!("{}{}", &self.0[..end], suffix))
    }
}

impl TryFrom<String> for OperationKey {
    type Error = Error;

    fn try_from(value: String) -> Result<Self> {
        validate("operation key", &value)?;
        let reason = if !value.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            Some("must be printable ASCII (space to '~'), so a header carries it unchanged")
        } else if value.starts_with(' ') || value.ends_with(' ') {
            Some("must not start or end with a space, which a header would not carry")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::InvalidIdentifier {
                field: "operation key",
                value: shorten(&value),
                reason,
            });
        }
        Ok(OperationKey(value))
    }
}

impl TryFrom<&str> for OperationKey {
    type Error = Error;

    fn try_from(value: &str) -> Result<Self> {
        OperationKey::try_from(value.to_owned())
    }
}

impl std::str::FromStr for OperationKey {
    type Err = Error;

    fn from_str(value: &str) -> Result<Self> {
        OperationKey::try_from(value)
    }
}

impl From<OperationKey> for String {
    fn from(key: OperationKey) -> String {
        key.0
    }
}

impl fmt::Display for OperationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for OperationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OperationKey({:?})", self.0)
    }
}

/// Who is calling and which kind of operation they ask for. Keys are unique only inside a scope.
///
/// ```
/// use lab::Scope;
///
/// let scope = Scope::new("release-bot", "create_ticket")?;
/// assert_eq!(scope.caller(), "release-bot");
/// assert_eq!(scope.operation(), "create_ticket");
/// assert!(Scope::new("", "create_ticket").is_err());
/// # Ok::<(), lab::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "ScopeFields")]
pub struct Scope {
    caller: String,
    operation: String,
}

#[derive(serde::Deserialize)]
struct ScopeFields {
    caller: String,
    operation: String,
}

impl TryFrom<ScopeFields> for Scope {
    type Error = Error;

    fn try_from(fields: ScopeFields) -> Result<Self> {
        Scope::new(fields.caller, fields.operation)
    }
}

impl Scope {
    /// A validated scope.
    ///
    /// # Errors
    /// [`Error::InvalidIdentifier`] naming `caller` or `operation` when either is empty, longer than
    /// 255 bytes, or holds a control character.
    pub fn new(caller: impl Into<String>, operation: impl Into<String>) -> Result<Scope> {
        let (caller, operation) = (caller.into(), operation.into());
        validate("caller", &caller)?;
        validate("operation", &operation)?;
        Ok(Scope { caller, operation })
    }

    /// The authenticated caller the operation belongs to.
    pub fn caller(&self) -> &str {
        &self.caller
    }

    /// The operation type, such as `create_ticket`.
    pub fn operation(&self) -> &str {
        &self.operation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_at_the_length_bound_are_accepted_and_one_byte_more_is_not() {
        assert!(OperationKey::try_from("k".repeat(255)).is_ok());
        let err = OperationKey::try_from("k".repeat(256)).unwrap_err();
        assert!(err.to_string().contains("at most 255 bytes"), "{err}");
    }

    #[test]
    fn control_characters_are_rejected_with_the_field_named() {
        let err = OperationKey::try_from("line\nbreak").unwrap_err();
        assert!(
            err.to_string().starts_with("invalid operation key"),
            "{err}"
        );
        let err = Scope::new("bot", "create\u{7}").unwrap_err();
        assert!(err.to_string().starts_with("invalid operation"), "{err}");
    }

    #[test]
    fn keys_a_header_cannot_carry_unchanged_are_refused_not_altered() {
        for bad in [
            "billet-approuvé",
            "deploy-7 ",
            " deploy-7",
            " ",
            "del\u{7f}",
        ] {
            let err = OperationKey::try_from(bad).unwrap_err();
            assert!(
                err.to_string().starts_with("invalid operation key"),
                "{bad:?}: {err}"
            );
        }
        let inner = OperationKey::try_from("deploy 7 \"quoted\" \\ ~").unwrap();
        assert_eq!(inner.as_str(), "deploy 7 \"quoted\" \\ ~");
    }

    #[test]
    fn a_suffixed_key_differs_and_stays_within_the_bound() {
        let long = OperationKey::try_from("e".repeat(254)).unwrap();
        let other = long.with_suffix("-new-intent").unwrap();
        assert_ne!(other, long);
        assert!(other.as_str().len() <= MAX_IDENTIFIER_BYTES);
        assert!(other.as_str().ends_with("-new-intent"));
    }

    #[test]
    fn long_rejected_values_are_shortened_in_messages() {
        let err = OperationKey::try_from("x".repeat(10_000)).unwrap_err();
        assert!(err.to_string().len() < 200, "{err}");
    }

    #[test]
    fn scope_deserialisation_validates_its_fields() {
        let err = serde_json::from_str::<Scope>(r#"{"caller": "", "operation": "x"}"#).unwrap_err();
        assert!(err.to_string().contains("invalid caller"), "{err}");
    }
}
