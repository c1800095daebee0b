//! A service's base URL, read once by one set of rules wherever the lab takes one: `--url` and
//! `--upstream` on the command line, a target file's `service.base_url` and `mcp.url`, and
//! `--init-mcp`. Before there was one type, three readers disagreed: one took `127.0.0.2` for
//! loopback and another did not, one took the port `+80`, one took any port at all.
//!
//! The rules: `http://` (the lab speaks no TLS), a host (a name of letters, digits, `-` and `.`,
//! an IPv4 address, or an IPv6 address in brackets), an optional port from 1 to 65535 in digits
//! (80 without one), an optional path; no user, query, fragment, space or control character.
//! The host is loopback when it is `localhost` or a loopback address (127.0.0.0/8, `::1`).

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// A base URL by the lab's rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseUrl {
    text: String,
    host: String,
    port: u16,
    path: String,
}

/// What to write instead, in every refusal.
const EXPECTED: &str = "expected http://HOST[:PORT][/PATH]";

impl BaseUrl {
    /// Reads `text` by the rules of the module.
    ///
    /// # Errors
    /// What is wrong, naming the character, the port or the host at fault.
    pub fn parse(text: &str) -> Result<BaseUrl, String> {
        if let Some(bad) = text
            .chars()
            .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '?' | '#' | '@'))
        {
            return Err(format!(
                "{bad:?} has no place in a base URL ({EXPECTED}: no user, query or fragment)"
            ));
        }
        let rest = text
            .strip_prefix("http://")
            .ok_or_else(|| format!("{text:?}: {EXPECTED} (only http: the lab speaks no TLS)"))?;
        let (authority, path) = rest.find('/').map_or((rest, ""), |at| rest.split_at(at));
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (host, after) = v6
                    .split_once(']')
                    .ok_or_else(|| format!("{text:?}: an unclosed [ in the host"))?;
                if host.parse::<Ipv6Addr>().is_err() {
                    return Err(format!("host [{host}] is not an IPv6 address"));
                }
                match after {
                    "" => (host, None),
                    _ => (
                        host,
                        Some(after.strip_prefix(':').ok_or_else(|| {
                            format!("{text:?}: after ] comes the port, as ]:PORT")
                        })?),
                    ),
                }
            }
            None => match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            },
        };
        if host.is_empty() {
            return Err(format!("{text:?}: no host ({EXPECTED})"));
        }
        if !authority.starts_with('[')
            && !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
        {
            return Err(format!(
                "host {host:?} is not a name, an IPv4 address or an IPv6 address in brackets"
            ));
        }
        let port = match port {
            None => 80,
            Some(port) => match port.parse::<u16>() {
                Ok(number) if number > 0 && port.bytes().all(|b| b.is_ascii_digit()) => number,
                _ => return Err(format!("port {port:?} is not a number from 1 to 65535")),
            },
        };
        Ok(BaseUrl {
            text: text.trim_end_matches('/').to_owned(),
            host: host.to_owned(),
            port,
            path: path.trim_end_matches('/').to_owned(),
        })
    }

    /// Reads `text`, and refuses a host that is not loopback.
    ///
    /// # Errors
    /// As [`BaseUrl::parse`], or the host that is not loopback.
    pub fn loopback(text: &str) -> Result<BaseUrl, String> {
        let url = BaseUrl::parse(text)?;
        if url.is_loopback() {
            Ok(url)
        } else {
            Err(format!(
                "host {:?} is not loopback (expected localhost, 127.0.0.1 or another 127.x.x.x, \
                 or [::1])",
                url.host
            ))
        }
    }

    /// Whether the host is `localhost` or a loopback address.
    pub fn is_loopback(&self) -> bool {
        self.host.eq_ignore_ascii_case("localhost")
            || self.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// The URL as given, without a trailing `/`.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The host, an IPv6 address without its brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port (80 when the URL gives none).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The path before the service's own paths: `""` or `/prefix`, without a trailing `/`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `host:port` as a socket address is written: an IPv6 host in brackets.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_splits_into_host_port_and_path() {
        let url = BaseUrl::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(
            (url.text(), url.host(), url.port(), url.path()),
            ("http://127.0.0.1:8080", "127.0.0.1", 8080, "")
        );
        let v6 = BaseUrl::parse("http://[::1]:81/api/").unwrap();
        assert_eq!(
            (v6.host(), v6.path(), v6.authority()),
            ("::1", "/api", "[::1]:81".to_owned())
        );
        let named = BaseUrl::parse("http://localhost").unwrap();
        assert_eq!(
            (named.port(), named.authority()),
            (80, "localhost:80".to_owned())
        );
        assert_eq!(BaseUrl::parse("http://[::1]").unwrap().port(), 80);
    }

    #[test]
    fn one_loopback_rule() {
        for loopback in [
            "http://127.0.0.1:1",
            "http://127.0.0.2:1",
            "http://127.255.255.254",
            "http://localhost:9",
            "http://LOCALHOST:9",
            "http://[::1]:9",
        ] {
            assert!(BaseUrl::loopback(loopback).is_ok(), "{loopback}");
        }
        for remote in [
            "http://10.0.0.1:80",
            "http://example.com",
            "http://[::2]:80",
            "http://0.0.0.0:80",
            "http://localhost.example.com",
        ] {
            let url = BaseUrl::parse(remote).unwrap();
            assert!(!url.is_loopback(), "{remote}");
            let err = BaseUrl::loopback(remote).unwrap_err();
            assert!(err.contains("is not loopback"), "{remote}: {err}");
        }
    }

    #[test]
    fn a_bad_base_url_is_refused_with_the_part_at_fault() {
        for (bad, why) in [
            ("http://127.0.0.1:abc", "port \"abc\""),
            ("http://127.0.0.1:0", "port \"0\""),
            ("http://127.0.0.1:65536", "port \"65536\""),
            ("http://127.0.0.1:+80", "port \"+80\""),
            ("http://127.0.0.1:", "port \"\""),
            ("http://127.0.0.1:80:81", "port \"80:81\""),
            ("https://127.0.0.1:80", "expected http://"),
            ("127.0.0.1:80", "expected http://"),
            ("http://127.0.0.1:80?x", "'?'"),
            ("http://127.0.0.1:80/#x", "'#'"),
            ("http://u@127.0.0.1:80", "'@'"),
            ("http://127.0.0.1:80 ", "' '"),
            ("http://:80", "no host"),
            ("http://", "no host"),
            ("http://[::1:80", "unclosed ["),
            ("http://[::1]80", "]:PORT"),
            ("http://[zz]:80", "not an IPv6 address"),
            ("http://a_b:80", "host \"a_b\""),
        ] {
            let err = BaseUrl::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
