//! The `Idempotency-Key` field value as the IETF httpapi draft writes it: one RFC 8941 Structured
//! Field string (`"8e03978e-40d5"`, with `\"` and `\\` escapes, printable ASCII only).
//!
//! The characters an sf-string may hold (space to `~`) are exactly the characters an
//! [`OperationKey`] may hold, so every key has one wire form and every accepted wire form is one
//! key. The value is handed to [`OperationKey::try_from`] unchanged after unescaping: the rule is
//! the key's, not a second one kept here.
//!
//! A bare value shaped like an sf-token (`curl-key-1`: a letter or `*`, then token characters,
//! `:` or `/`) is read as the same key as its quoted form, so the `curl` examples written before
//! the draft's form keep working. Anything else that is not quoted is refused.
//!
//! ```
//! use lab::OperationKey;
//! use lab::http::sf;
//!
//! let key = OperationKey::try_from(r#"say "hi" \ bye"#)?;
//! let wire = sf::serialize_key(&key);
//! assert_eq!(wire, r#""say \"hi\" \\ bye""#);
//! assert_eq!(sf::parse_key(&wire).unwrap(), key);
//! assert_eq!(sf::parse_key("curl-key-1").unwrap(), OperationKey::try_from("curl-key-1")?);
//! assert!(sf::parse_key("\"abc").is_err());
//! assert!(sf::parse_key("\"k\";a=1").is_err());
//! # Ok::<(), lab::Error>(())
//! ```

use std::fmt;

use crate::key::OperationKey;

/// Why an `Idempotency-Key` field value is not one key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyFieldError {
    /// The field value is empty.
    Empty,
    /// A byte outside printable ASCII (space to `~`), at this position.
    NotPrintableAscii {
        /// Byte offset in the field value.
        at: usize,
    },
    /// A quoted string with no closing `"`.
    Unterminated,
    /// A `\` followed by something other than `"` or `\`, at this position.
    BadEscape {
        /// Byte offset of the backslash.
        at: usize,
    },
    /// Parameters (`;name=value`) after the key; the contract defines none.
    Parameters,
    /// More than one member (`"a", "b"`): one request has one key.
    List,
    /// Text after the closing quote that is neither parameters nor a list.
    TrailingText {
        /// Byte offset of the first unexpected character.
        at: usize,
    },
    /// Not quoted, and not shaped like an sf-token either (it starts with a digit, say).
    NotAString,
    /// The unescaped value breaks the operation-key rule.
    Key {
        /// The rule's message.
        reason: String,
    },
}

impl fmt::Display for KeyFieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyFieldError::Empty => f.write_str("the value is empty"),
            KeyFieldError::NotPrintableAscii { at } => {
                write!(f, "byte {at} is not printable ASCII (space to '~')")
            }
            KeyFieldError::Unterminated => f.write_str("the quoted string has no closing '\"'"),
            KeyFieldError::BadEscape { at } => {
                write!(f, "the '\\' at byte {at} escapes neither '\"' nor '\\'")
            }
            KeyFieldError::Parameters => {
                f.write_str("parameters (;name=value) are not supported on the key")
            }
            KeyFieldError::List => f.write_str("one request carries one key, not a list"),
            KeyFieldError::TrailingText { at } => {
                write!(f, "unexpected text at byte {at} after the closing '\"'")
            }
            KeyFieldError::NotAString => f.write_str(
                "expected a quoted Structured Field string such as \"8e03978e-40d5\" \
                 (a bare value must start with a letter or '*')",
            ),
            KeyFieldError::Key { reason } => f.write_str(reason),
        }
    }
}

impl std::error::Error for KeyFieldError {}

/// The sf-string form of `key`: quoted, with `"` and `\` escaped.
pub fn serialize_key(key: &OperationKey) -> String {
    let mut wire = String::with_capacity(key.as_str().len() + 2);
    wire.push('"');
    for c in key.as_str().chars() {
        if matches!(c, '"' | '\\') {
            wire.push('\\');
        }
        wire.push(c);
    }
    wire.push('"');
    wire
}

/// Reads one `Idempotency-Key` field value (already stripped of the spaces around it, as HTTP
/// does) as an operation key.
///
/// # Errors
/// A [`KeyFieldError`] naming what is wrong: a malformed string, parameters, a list, a bare value
/// that is not token-shaped, or a value that breaks the [`OperationKey`] rule.
pub fn parse_key(field: &str) -> Result<OperationKey, KeyFieldError> {
    let bytes = field.as_bytes();
    if let Some(at) = bytes.iter().position(|b| !(0x20..=0x7e).contains(b)) {
        return Err(KeyFieldError::NotPrintableAscii { at });
    }
    let (text, rest, rest_at) = match bytes.first() {
        None => return Err(KeyFieldError::Empty),
        Some(b'"') => {
            let (text, end) = unquote(field)?;
            (text, &field[end..], end)
        }
        Some(first) if first.is_ascii_alphabetic() || *first == b'*' => {
            let end = bytes
                .iter()
                .position(|b| !is_token_char(*b))
                .unwrap_or(bytes.len());
            (field[..end].to_owned(), &field[end..], end)
        }
        Some(_) => return Err(KeyFieldError::NotAString),
    };
    check_nothing_follows(rest, rest_at)?;
    OperationKey::try_from(text).map_err(|err| KeyFieldError::Key {
        reason: err.to_string(),
    })
}

/// The unescaped text of the sf-string at the start of `field`, and the offset just past it.
fn unquote(field: &str) -> Result<(String, usize), KeyFieldError> {
    let mut text = String::new();
    let mut chars = field.char_indices().skip(1);
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Ok((text, at + 1)),
            '\\' => match chars.next() {
                Some((_, escaped @ ('"' | '\\'))) => text.push(escaped),
                _ => return Err(KeyFieldError::BadEscape { at }),
            },
            other => text.push(other),
        }
    }
    Err(KeyFieldError::Unterminated)
}

/// After the one item only spaces may follow (RFC 8941 ignores them); a `;` starts parameters and
/// a `,` another member, both refused.
fn check_nothing_follows(rest: &str, offset: usize) -> Result<(), KeyFieldError> {
    let trimmed = rest.trim_start_matches(' ');
    match trimmed.bytes().next() {
        None => Ok(()),
        Some(b';') => Err(KeyFieldError::Parameters),
        Some(b',') => Err(KeyFieldError::List),
        Some(_) => Err(KeyFieldError::TrailingText {
            at: offset + rest.len() - trimmed.len(),
        }),
    }
}

/// RFC 9110's tchar, plus the `:` and `/` an sf-token allows.
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_survives_the_wire_round_trip() {
        for text in [
            "a",
            "8e03978e-40d5-43e8",
            "with space",
            r#"q"uo\te"#,
            "~!@#$%^&*()",
        ] {
            let key = OperationKey::try_from(text).unwrap();
            assert_eq!(parse_key(&serialize_key(&key)).unwrap(), key, "{text:?}");
        }
    }

    #[test]
    fn malformed_values_are_refused_with_their_fault_named() {
        let cases = [
            ("", KeyFieldError::Empty),
            ("\"abc", KeyFieldError::Unterminated),
            (r#""a\b""#, KeyFieldError::BadEscape { at: 2 }),
            ("\"k\";a=1", KeyFieldError::Parameters),
            ("\"a\", \"b\"", KeyFieldError::List),
            ("\"a\"b", KeyFieldError::TrailingText { at: 3 }),
            ("8e03978e", KeyFieldError::NotAString),
            ("\"caf\u{e9}\"", KeyFieldError::NotPrintableAscii { at: 4 }),
        ];
        for (field, expected) in cases {
            assert_eq!(parse_key(field), Err(expected), "{field:?}");
        }
        assert!(matches!(
            parse_key("\" padded\""),
            Err(KeyFieldError::Key { .. })
        ));
        assert!(matches!(parse_key("\"\""), Err(KeyFieldError::Key { .. })));
    }

    proptest::proptest! {
        #[test]
        fn any_key_round_trips_and_any_accepted_field_is_a_key(text in "[ -~]{0,40}") {
            if let Ok(key) = OperationKey::try_from(text.as_str()) {
                proptest::prop_assert_eq!(parse_key(&serialize_key(&key)), Ok(key));
            }
            // Whatever the parser accepts is a key by OperationKey's own rule, and its wire form
            // reads back as the same key.
            if let Ok(key) = parse_key(&text) {
                proptest::prop_assert!(OperationKey::try_from(key.as_str()).is_ok());
                proptest::prop_assert_eq!(parse_key(&serialize_key(&key)), Ok(key));
            }
        }
    }

    #[test]
    fn a_bare_token_is_the_same_key_as_its_quoted_form() {
        assert_eq!(parse_key("curl-key-1"), parse_key("\"curl-key-1\""));
        assert_eq!(parse_key("a/b:c"), parse_key("\"a/b:c\""));
    }
}
