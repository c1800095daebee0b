//! Who a request acts for: the callers and their bearer tokens, one token rule for every place a
//! token enters (`--caller NAME=TOKEN`, `--admin-token`, over HTTP and over MCP), compared in
//! constant time.

use std::collections::HashSet;
use std::str::FromStr;

use subtle::ConstantTimeEq;

use crate::error::{Error, Result};
use crate::key::Scope;

/// The operation every caller's keys are scoped to: the one create of the contract.
pub(crate) const CREATE_TICKET: &str = "create_ticket";

/// The longest token the service accepts, in bytes. Tokens are compared padded to this length,
/// so the comparison takes the same time whatever the presented token's length.
pub const MAX_TOKEN_BYTES: usize = 256;

/// One caller the service accepts: its name (the scope of its keys) and its bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallerToken {
    /// The caller's name; keys are looked up only within it.
    pub caller: String,
    /// The bearer token that authenticates the caller.
    pub token: String,
}

impl FromStr for CallerToken {
    type Err = Error;

    /// Reads `NAME=TOKEN`, as `--caller` takes it.
    fn from_str(text: &str) -> Result<CallerToken> {
        let invalid = |problem: &str| Error::InputInvalid {
            subject: "--caller".to_owned(),
            problem: format!("{text:?}: {problem}"),
        };
        let (caller, token) = text
            .split_once('=')
            .ok_or_else(|| invalid("expected NAME=TOKEN"))?;
        // Validate the name by the same rules as every scope's caller.
        Scope::new(caller, CREATE_TICKET)?;
        check_token("--caller", token).map_err(|err| match err {
            Error::InputInvalid { problem, .. } => invalid(&problem),
            other => other,
        })?;
        Ok(CallerToken {
            caller: caller.to_owned(),
            token: token.to_owned(),
        })
    }
}

/// The token rule, the one for every place a token enters (`--caller NAME=TOKEN`,
/// `--admin-token`, `lab runner --token`, over HTTP and MCP): printable ASCII without spaces, as
/// an `Authorization` header carries it unchanged, at most [`MAX_TOKEN_BYTES`].
///
/// # Errors
/// [`Error::InputInvalid`] naming `option` and the rule the token broke.
pub fn check_token(option: &str, token: &str) -> Result<()> {
    let problem = if token.is_empty() {
        Some("the token must not be empty")
    } else if !token.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        Some("the token must be printable ASCII without spaces")
    } else if token.len() > MAX_TOKEN_BYTES {
        Some("the token must be at most 256 bytes")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Error::InputInvalid {
            subject: option.to_owned(),
            problem: problem.to_owned(),
        }),
        None => Ok(()),
    }
}

/// A token, kept padded so comparing it reveals neither its content nor its length.
pub(crate) struct Secret {
    padded: [u8; MAX_TOKEN_BYTES],
    length: u64,
}

impl Secret {
    /// A secret from `token`; `option` names where it came from in the refusal.
    ///
    /// # Errors
    /// As [`check_token`].
    pub(crate) fn new(option: &str, token: &str) -> Result<Secret> {
        check_token(option, token)?;
        let mut padded = [0; MAX_TOKEN_BYTES];
        padded[..token.len()].copy_from_slice(token.as_bytes());
        Ok(Secret {
            padded,
            length: token.len() as u64,
        })
    }

    /// Whether `presented` is this token, in time that depends on neither.
    pub(crate) fn matches(&self, presented: &[u8]) -> bool {
        let mut padded = [0; MAX_TOKEN_BYTES];
        let length = presented.len().min(MAX_TOKEN_BYTES);
        padded[..length].copy_from_slice(&presented[..length]);
        let same_bytes = self.padded.ct_eq(&padded);
        let same_length = self.length.ct_eq(&(presented.len() as u64));
        (same_bytes & same_length).into()
    }
}

/// The callers a service knows, each with its secret.
pub(crate) struct Callers(Vec<(Secret, Scope)>);

impl Callers {
    /// The callers of `tokens`, checked: at least one, no token given twice, each by the token
    /// rule.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] naming `--caller`; [`Error::InvalidIdentifier`] for a bad name.
    pub(crate) fn new(tokens: &[CallerToken]) -> Result<Callers> {
        let invalid = |problem: String| Error::InputInvalid {
            subject: "--caller".to_owned(),
            problem,
        };
        if tokens.is_empty() {
            return Err(invalid(
                "at least one NAME=TOKEN is needed, e.g. --caller support-agent=secret-token"
                    .into(),
            ));
        }
        let mut callers = Vec::new();
        let mut seen = HashSet::new();
        for caller in tokens {
            let scope = Scope::new(caller.caller.as_str(), CREATE_TICKET)?;
            if !seen.insert(caller.token.as_str()) {
                return Err(invalid(format!(
                    "the token of {:?} is given twice",
                    caller.caller
                )));
            }
            callers.push((Secret::new("--caller", &caller.token)?, scope));
        }
        Ok(Callers(callers))
    }

    /// The caller whose token is `token`. Every caller's token is compared, each in constant
    /// time, so the answer's timing names none of them.
    pub(crate) fn find(&self, token: &[u8]) -> Option<Scope> {
        let mut found = None;
        for (secret, scope) in &self.0 {
            if secret.matches(token) {
                found = Some(scope);
            }
        }
        found.cloned()
    }
}

/// The token of an `Authorization` header value: `Bearer TOKEN`, the scheme matched without
/// regard to case (RFC 9110, section 11.1), one or more spaces after it.
pub(crate) fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer";
    if value.len() <= SCHEME.len() || !value[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let rest = &value[SCHEME.len()..];
    let token_start = rest.iter().position(|b| *b != b' ')?;
    (token_start > 0).then(|| &rest[token_start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_matched_whatever_its_case() {
        for header in ["Bearer abc", "bearer abc", "BEARER abc", "bEaReR  abc"] {
            assert_eq!(
                bearer_token(header.as_bytes()),
                Some(&b"abc"[..]),
                "{header}"
            );
        }
    }

    #[test]
    fn a_header_that_is_not_a_bearer_token_names_no_token() {
        for header in [
            "Basic abc",
            "Bearer",
            "Bearer ",
            "Bearerabc",
            "Bearer\tabc",
            "",
        ] {
            assert_eq!(bearer_token(header.as_bytes()), None, "{header:?}");
        }
    }

    #[test]
    fn a_token_matches_only_itself_whatever_the_lengths() {
        let secret = Secret::new("--caller", "token-a").unwrap();
        assert!(secret.matches(b"token-a"));
        assert!(!secret.matches(b"token-b"));
        assert!(!secret.matches(b"token-a-and-more"));
        assert!(!secret.matches(b"token"));
        assert!(!secret.matches(&[b'x'; 300]));
    }

    #[test]
    fn the_token_rule_names_the_option_it_refuses() {
        for bad in [
            "",
            "  ",
            "a b",
            "a\u{7}",
            "caf\u{e9}",
            &"x".repeat(MAX_TOKEN_BYTES + 1),
        ] {
            let err = Secret::new("--admin-token", bad).err().unwrap();
            assert!(err.to_string().starts_with("--admin-token: "), "{err}");
        }
    }

    #[test]
    fn callers_refuse_none_and_a_token_given_twice() {
        assert!(Callers::new(&[]).is_err());
        let twice: Vec<CallerToken> = ["a=same", "b=same"]
            .iter()
            .map(|text| text.parse().unwrap())
            .collect();
        let err = Callers::new(&twice).err().unwrap();
        assert!(err.to_string().contains("given twice"), "{err}");
        let callers = Callers::new(&twice[..1]).unwrap();
        assert_eq!(callers.find(b"same").unwrap().caller(), "a");
        assert!(callers.find(b"other").is_none());
    }
}
