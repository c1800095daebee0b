//! Parsers for option values, run by clap while it reads the arguments, so a bad value is refused
//! (exit status 2, one line naming the option) before a command opens a file or sends anything.

use axum::http::Uri;
use lab::http::contract;
use lab::{OperationKey, Payload, Scope};

/// A service's base URL: `http://`, a loopback host (127.0.0.1, localhost, [::1]), an optional
/// port from 1 to 65535, an optional path; no user, query or fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopbackUrl {
    /// The URL as given, without a trailing `/`.
    pub text: String,
    /// `host:port`, as a socket address resolves it.
    pub authority: String,
    /// The path before the service's own paths (`""` or `/prefix`).
    pub path: String,
}

/// Parses `--url` and `--upstream` with `http::Uri`, then holds the URL to the lab's rules.
///
/// # Errors
/// What is wrong with the URL, for clap to print after the option's name.
pub fn loopback_url(text: &str) -> Result<LoopbackUrl, String> {
    const EXPECTED: &str = "expected http://127.0.0.1:PORT (only http, on loopback)";
    if let Some(bad) = text
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '?' | '#' | '@'))
    {
        return Err(format!(
            "{bad:?} has no place in the service's base URL (expected http://127.0.0.1:PORT)"
        ));
    }
    let uri: Uri = text.parse().map_err(|err| why_unreadable(text, &err))?;
    if uri.scheme_str() != Some("http") {
        return Err(EXPECTED.to_owned());
    }
    let authority = uri.authority().ok_or(EXPECTED)?;
    let host = authority.host();
    if !matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
        return Err(format!(
            "host {host:?} is not loopback (expected 127.0.0.1, localhost or [::1])"
        ));
    }
    // `http::Uri` keeps a port it cannot read as a number (`:abc`, `:70000`) in the authority
    // and reports no port: the text after the host's last colon is the port as given.
    let port = match authority.as_str().rsplit_once(':') {
        Some((_, port)) if !port.contains(']') => match port.parse::<u16>() {
            Ok(number) if number > 0 && port.bytes().all(|b| b.is_ascii_digit()) => number,
            _ => return Err(port_problem(port)),
        },
        _ => 80,
    };
    Ok(LoopbackUrl {
        text: text.trim_end_matches('/').to_owned(),
        authority: format!("{host}:{port}"),
        path: uri.path().trim_end_matches('/').to_owned(),
    })
}

fn port_problem(port: &str) -> String {
    format!("port {port:?} is not a number from 1 to 65535")
}

/// Why `http::Uri` could not read `text`: its port, when that is what it stumbled on, since a
/// person fixes a port sooner than they decode "invalid port".
fn why_unreadable(text: &str, err: &axum::http::uri::InvalidUri) -> String {
    let authority = text
        .split_once("://")
        .map_or(text, |(_, rest)| rest.split('/').next().unwrap_or(rest));
    match authority.rsplit_once(':') {
        Some((_, port))
            if !port.contains(']')
                && (port.parse::<u16>().is_err() || !port.bytes().all(|b| b.is_ascii_digit())) =>
        {
            port_problem(port)
        }
        _ => format!("not a URL ({err}); {}", "expected http://127.0.0.1:PORT"),
    }
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
    Scope::new(text, contract::CREATE_TICKET)
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
    if length > contract::MAX_BODY_BYTES {
        return Err(format!(
            "{length} bytes in canonical form; the service takes at most {}",
            contract::MAX_BODY_BYTES
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
    fn loopback_urls_are_read_or_refused_with_the_reason() {
        let url = loopback_url("http://127.0.0.1:8080/").unwrap();
        assert_eq!(
            (url.text.as_str(), url.authority.as_str(), url.path.as_str()),
            ("http://127.0.0.1:8080", "127.0.0.1:8080", "")
        );
        assert_eq!(loopback_url("http://[::1]:81/api").unwrap().path, "/api");
        assert_eq!(
            loopback_url("http://localhost").unwrap().authority,
            "localhost:80"
        );
        for (bad, why) in [
            ("http://127.0.0.1:abc", "port \"abc\""),
            ("http://127.0.0.1:0", "port \"0\""),
            ("http://127.0.0.1:65536", "port \"65536\""),
            ("http://127.0.0.1:+80", "port \"+80\""),
            ("http://127.0.0.1:", "port \"\""),
            ("https://127.0.0.1:80", "expected http://"),
            ("http://example.com:80", "not loopback"),
            ("http://127.0.0.1:80?x", "'?'"),
            ("http://u@127.0.0.1:80", "'@'"),
            ("http://127.0.0.1:80 ", "' '"),
        ] {
            let err = loopback_url(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn tokens_are_printable_ascii_without_spaces() {
        assert_eq!(token("token-a").unwrap(), "token-a");
        for bad in ["", "a b", "tök", "a\n"] {
            assert!(token(bad).is_err(), "{bad:?}");
        }
    }
}
