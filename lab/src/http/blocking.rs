//! The lab's one HTTP client stack, on hyper: a blocking client for the synchronous callers (the
//! HTTP adapter [`super::HttpTool`], the runner's service check), and the one-connection
//! exchange the proxy and the MCP client also use.
//!
//! Blocking because [`crate::TicketTool`] is synchronous: each client owns a small
//! current-thread tokio runtime and drives hyper on it while a call is in progress. It keeps one
//! connection alive between calls, as a caller with a pool would, and opens another when that
//! one was closed before the request went out, which hyper tells apart from a request that was
//! sent (then nothing is sent again: the service may have acted).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use axum::http::{self, HeaderMap};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::{Error, Result};

/// The request and URI types the client takes, re-exported for callers outside the crate.
pub use axum::http::{Request, Uri};
/// The request body the client sends.
pub type Body = Full<Bytes>;

/// The longest the client waits for a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most a client waits before it sends a request again after a 409 or 503, whatever the
/// server's `Retry-After` asks: a longer wait is cut to this. A caller with a deadline (the
/// runner's, the suite's) would rather ask again than sleep past it.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);

/// The largest answer read, in bytes.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// A whole answer: status, headers, body.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, read in full (at most [`MAX_ANSWER_BYTES`]).
    pub body: Bytes,
}

impl Answer {
    /// The header `name` as text, if present and visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The wait a `Retry-After` header asks for, within [`MAX_RETRY_AFTER`]; `None` without one
    /// (or with one that is neither seconds nor an HTTP date).
    pub fn retry_after(&self) -> Option<Duration> {
        self.header("retry-after")
            .and_then(|value| retry_after(value, SystemTime::now()))
    }
}

/// Reads a `Retry-After` value (RFC 9110, section 10.2.3): delay-seconds or an HTTP date, the
/// wait until it from `now`; bounded by [`MAX_RETRY_AFTER`]. A date in the past is no wait.
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Digits beyond u64 are a very long wait: the bound below cuts it.
        Duration::from_secs(value.parse().unwrap_or(u64::MAX))
    } else {
        let date = httpdate::parse_http_date(value).ok()?;
        date.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// Why an exchange got no answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NoAnswer {
    /// Nothing accepted the connection.
    #[error("connecting to {address}: {source}")]
    Connect {
        /// `host:port`.
        address: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The request or its answer took longer than the client waits.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// hyper failed: the connection closed or broke before the whole answer.
    #[error("{0}")]
    Http(#[from] hyper::Error),
    /// The answer's body was larger than the client reads, or broke off.
    #[error("reading the answer: {0}")]
    Body(String),
    /// The request was never sent: the client could not start or build it.
    #[error("the request was not sent: {0}")]
    Unsent(String),
    /// The connection closed before the request was written (a server that answered 503 and
    /// closed on accepting it, say): the service cannot have acted on it.
    #[error("the connection closed before the request was sent: {0}")]
    NotSent(hyper::Error),
}

/// Connects to `address` within [`CONNECT_TIMEOUT`] and starts HTTP/1.1 on the connection; its
/// task runs on the current runtime.
///
/// # Errors
/// [`NoAnswer::Connect`] or [`NoAnswer::Http`].
pub(crate) async fn connect(
    address: &str,
) -> std::result::Result<SendRequest<Full<Bytes>>, NoAnswer> {
    let connect_error = |source| NoAnswer::Connect {
        address: address.to_owned(),
        source,
    };
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address))
        .await
        .map_err(|_| connect_error(std::io::ErrorKind::TimedOut.into()))?
        .map_err(connect_error)?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    // The connection's task ends with the connection; its error, if any, reaches the request.
    tokio::spawn(connection);
    Ok(sender)
}

/// Reads a whole response of at most `limit` bytes.
///
/// # Errors
/// [`NoAnswer::Body`] when it is larger or breaks off.
pub(crate) async fn read_whole(
    response: http::Response<hyper::body::Incoming>,
    limit: usize,
) -> std::result::Result<Answer, NoAnswer> {
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, limit)
        .collect()
        .await
        .map_err(|err| NoAnswer::Body(err.to_string()))?
        .to_bytes();
    Ok(Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    })
}

/// A blocking HTTP/1.1 client for one `host:port`.
pub struct BlockingClient {
    address: String,
    timeout: Duration,
    runtime: tokio::runtime::Runtime,
    idle: Mutex<Option<SendRequest<Full<Bytes>>>>,
}

impl BlockingClient {
    /// A client for `address` (`host:port`) whose calls wait at most `timeout` for an answer.
    /// Nothing connects until the first call.
    ///
    /// # Errors
    /// [`Error::Io`] when its runtime cannot start.
    pub fn new(address: &str, timeout: Duration) -> Result<BlockingClient> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| Error::Io {
                action: "starting the HTTP client's runtime".to_owned(),
                source,
            })?;
        Ok(BlockingClient {
            address: address.to_owned(),
            timeout,
            runtime,
            idle: Mutex::new(None),
        })
    }

    /// The `host:port` it calls.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Whether something accepts a connection: nothing is sent on it.
    ///
    /// # Errors
    /// [`NoAnswer::Connect`] saying why not.
    pub fn accepts_connections(&self) -> std::result::Result<(), NoAnswer> {
        self.runtime.block_on(async {
            let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.address));
            match connect.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(source)) => Err(NoAnswer::Connect {
                    address: self.address.clone(),
                    source,
                }),
                Err(_) => Err(NoAnswer::Connect {
                    address: self.address.clone(),
                    source: std::io::ErrorKind::TimedOut.into(),
                }),
            }
        })
    }

    /// Sends `request` and reads its whole answer. `keep`: the connection may be kept for the
    /// next call (not when the request asks the server to close it). A request is sent at most
    /// once: only one that never left (its kept connection had closed) goes out on a new one.
    ///
    /// # Errors
    /// [`NoAnswer`] saying why there is no answer; the service may have acted on the request
    /// all the same unless the connection failed.
    pub fn send(
        &self,
        request: Request<Full<Bytes>>,
        keep: bool,
    ) -> std::result::Result<Answer, NoAnswer> {
        let kept = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let exchange = async {
            let (answer, sender) = self.exchange(kept, request).await?;
            let closes = answer
                .header("connection")
                .is_some_and(|value| value.eq_ignore_ascii_case("close"));
            if keep && !closes {
                *self.idle.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
            }
            Ok(answer)
        };
        self.runtime.block_on(async {
            tokio::time::timeout(self.timeout, exchange)
                .await
                .unwrap_or(Err(NoAnswer::Timeout(self.timeout)))
        })
    }

    async fn exchange(
        &self,
        kept: Option<SendRequest<Full<Bytes>>>,
        request: Request<Full<Bytes>>,
    ) -> std::result::Result<(Answer, SendRequest<Full<Bytes>>), NoAnswer> {
        let mut request = request;
        if let Some(mut sender) = kept {
            // Let the connection's task see a close that arrived while nothing drove it.
            tokio::task::yield_now().await;
            if sender.ready().await.is_ok() {
                match sender.try_send_request(request).await {
                    Ok(response) => {
                        return Ok((read_whole(response, MAX_ANSWER_BYTES).await?, sender));
                    }
                    Err(mut failed) => match failed.take_message() {
                        // Never written: safe to send on a new connection.
                        Some(unsent) => request = unsent,
                        None => return Err(NoAnswer::Http(failed.into_error())),
                    },
                }
            }
        }
        let mut sender = connect(&self.address).await?;
        match sender.try_send_request(request).await {
            Ok(response) => Ok((read_whole(response, MAX_ANSWER_BYTES).await?, sender)),
            Err(mut failed) => match failed.take_message() {
                Some(_) => Err(NoAnswer::NotSent(failed.into_error())),
                None => Err(NoAnswer::Http(failed.into_error())),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates_within_the_bound() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert_eq!(retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(retry_after("3600", now), Some(MAX_RETRY_AFTER));
        assert_eq!(
            retry_after("99999999999999999999999", now),
            Some(MAX_RETRY_AFTER)
        );
        let in_three = httpdate::fmt_http_date(now + Duration::from_secs(3));
        assert_eq!(retry_after(&in_three, now), Some(Duration::from_secs(3)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(retry_after(&past, now), Some(Duration::ZERO));
    }

    #[test]
    fn a_retry_after_that_is_neither_seconds_nor_a_date_is_no_instruction() {
        let now = SystemTime::now();
        for value in ["", "-1", "1.5", "soon", "2 s"] {
            assert_eq!(retry_after(value, now), None, "{value:?}");
        }
    }
}
