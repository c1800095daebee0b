//! Parsers for option values, run by clap while it reads the arguments, so a bad value is refused
//! (exit status 2, one line naming the option) before a command opens a file or sends anything.

use lab::http::wire;
use lab::{BaseUrl, OperationKey, Payload, Scope};

/// Parses `--url` and `--upstream`: a base URL on loopback, by the lab's one set of rules
/// ([`BaseUrl`]).
///
/// # Errors
/// What is wrong with the URL, for clap to print after the option's name.
pub fn loopback_url(text: &str) -> Result<BaseUrl, String> {
    BaseUrl::loopback(text)
}

/// A point's name or a promise's id, for `--only` and `--skip`.
///
/// # Errors
/// Neither, naming the ids there are (or an old point name's new one).
pub fn selector(text: &str) -> Result<lab::contract::points::Selector, String> {
    lab::contract::points::Selector::parse(text)
}

/// Parses a bearer token by the service's one token rule ([`lab::http::check_token`]).
///
/// # Errors
/// The rule the token broke.
pub fn token(text: &str) -> Result<String, String> {
    match lab::http::check_token("the token", text) {
        Ok(()) => Ok(text.to_owned()),
        Err(lab::Error::InputInvalid { problem, .. }) => Err(problem),
        Err(other) => Err(other.to_string()),
    }
}

/// Parses `--caller`: a caller's name by the same rules as every scope's.
///
/// # Errors
/// The rule the name broke.
pub fn caller(text: &str) -> Result<String, String> {
    Scope::new(text, wire::CREATE_TICKET)
        .map(|scope| scope.caller().to_owned())
        .map_err(|err| err.to_string())
}

/// Parses `--key`: an operation key.
///
/// # Errors
/// The rule the key broke.
pub fn operation_key(text: &str) -> Result<OperationKey, String> {
    OperationKey::try_from(text).map_err(|err| err.to_string())
}

/// Parses `--payload`: a JSON object, read as strictly as the HTTP body, that fits the body bound.
///
/// # Errors
/// What is wrong with the text, with its line and column.
pub fn payload(text: &str) -> Result<Payload, String> {
    let payload = Payload::from_json_text(text).map_err(|err| err.to_string())?;
    let length = payload.canonical().len() as u64;
    if length > wire::MAX_BODY_BYTES {
        return Err(format!(
            "{length} bytes in canonical form; the service takes at most {}",
            wire::MAX_BODY_BYTES
        ));
    }
    Ok(payload)
}

/// Parses a count that must be at least 1.
///
/// # Errors
/// For 0 or a value that is not a number.
pub fn at_least_one(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(number) => Ok(number),
        Err(err) => Err(err.to_string()),
    }
}

/// Parses `--lock-timeout-ms`: 1 to 2147483647, PostgreSQL's range for `lock_timeout`. Zero would
/// not mean "at once" but "wait forever", so it is refused.
///
/// # Errors
/// For a number outside that range.
pub fn lock_timeout_ms(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1 (PostgreSQL reads 0 as: wait forever)".to_owned()),
        Ok(number @ 1..=2_147_483_647) => Ok(number),
        Ok(_) => Err("must be at most 2147483647, PostgreSQL's largest lock_timeout".to_owned()),
        Err(err) => Err(err.to_string()),
    }
}

/// Parses `lab serve --workers`: 1 to 1024 threads.
///
/// # Errors
/// For a number outside that range.
pub fn workers(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(number @ 1..=1024) => Ok(number),
        Ok(_) => Err("must be from 1 to 1024".to_owned()),
        Err(err) => Err(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_options_take_loopback_base_urls_only() {
        assert_eq!(
            loopback_url("http://127.0.0.1:8080/").unwrap().authority(),
            "127.0.0.1:8080"
        );
        let err = loopback_url("http://example.com:80").unwrap_err();
        assert!(err.contains("not loopback"), "{err}");
        let err = loopback_url("http://127.0.0.1:+80").unwrap_err();
        assert!(err.contains("port \"+80\""), "{err}");
    }

    #[test]
    fn tokens_are_printable_ascii_without_spaces() {
        assert_eq!(token("token-a").unwrap(), "token-a");
        for bad in ["", "a b", "tök", "a\n"] {
            assert!(token(bad).is_err(), "{bad:?}");
        }
    }
}
