//! The check's own HTTP client, on hyper: one connection per request (`Connection: close`),
//! so a lost reply or a hang-up touches one request alone, and the moments a client can hang
//! up are the check's to choose. A reply the check reads and throws away is the client-side lost
//! reply; no proxy or server cooperation is needed.
//!
//! The hang-ups write the request's bytes by hand on a plain socket: hyper would not stop after
//! the headers on request.

use std::time::Duration;

use axum::http::{self, HeaderName, HeaderValue, Method, Request};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::history::{Answer, cut};

/// The largest reply body read, in bytes.
const MAX_REPLY_BYTES: usize = 8 * 1024 * 1024;

/// One request, ready to send.
#[derive(Clone, Debug)]
pub struct Outgoing {
    /// The method.
    pub method: String,
    /// The path, after the base URL's prefix.
    pub path: String,
    /// The headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body (empty for none).
    pub body: Vec<u8>,
}

/// The moment a client hangs up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HangUp {
    /// After the request's head, before any byte of its body.
    AfterHeaders,
    /// After half of the body.
    PartOfBody,
    /// Right after the whole request, before any byte of the reply.
    AfterRequest,
}

impl HangUp {
    /// Every moment, in the order a request passes them.
    pub const ALL: [HangUp; 3] = [
        HangUp::AfterHeaders,
        HangUp::PartOfBody,
        HangUp::AfterRequest,
    ];

    /// The moment in words.
    pub fn describe(self) -> &'static str {
        match self {
            HangUp::AfterHeaders => "after sending the headers",
            HangUp::PartOfBody => "after part of the body",
            HangUp::AfterRequest => "right after the full request",
        }
    }
}

/// Where the service is.
#[derive(Clone, Debug)]
pub struct Wire {
    /// `host:port` to connect to (IPv6 hosts in brackets).
    address: String,
    /// The `Host` header.
    host_header: String,
    /// The base URL's path prefix.
    prefix: String,
    /// How long one request may take.
    timeout: Duration,
}

/// A connection opened ahead of its request, so concurrent callers can be released together
/// once they are all connected.
pub struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Wire {
    /// A client for `host:port/prefix`.
    pub fn new(host: &str, port: u16, prefix: &str, timeout: Duration) -> Wire {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        Wire {
            address: format!("{host}:{port}"),
            host_header: if port == 80 {
                host
            } else {
                format!("{host}:{port}")
            },
            prefix: prefix.to_owned(),
            timeout,
        }
    }

    /// Opens a connection and does hyper's handshake.
    ///
    /// # Errors
    /// The reason, as text, when the connection fails.
    pub async fn connect(&self) -> Result<Connection, String> {
        let opened = tokio::time::timeout(self.timeout, async {
            let stream = TcpStream::connect(&self.address).await?;
            stream.set_nodelay(true)?;
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(std::io::Error::other)?;
            // The connection task ends with its one exchange; a failure shows in the answer.
            tokio::spawn(connection);
            Ok::<_, std::io::Error>(sender)
        })
        .await;
        match opened {
            Ok(Ok(sender)) => Ok(Connection { sender }),
            Ok(Err(err)) => Err(format!("cannot connect to {}: {err}", self.address)),
            Err(_) => Err(format!("connecting to {} timed out", self.address)),
        }
    }

    /// Sends one request on a new connection and reads the whole reply.
    pub async fn send(&self, outgoing: &Outgoing) -> Answer {
        match self.connect().await {
            Ok(connection) => self.send_on(connection, outgoing).await,
            Err(reason) => Answer::NoAnswer { reason },
        }
    }

    /// Sends one request on an open connection and reads the whole reply.
    pub async fn send_on(&self, mut connection: Connection, outgoing: &Outgoing) -> Answer {
        let request = match self.request(outgoing) {
            Ok(request) => request,
            Err(err) => {
                return Answer::NoAnswer {
                    reason: format!("the request could not be built: {err}"),
                };
            }
        };
        let exchange = async {
            let response = connection
                .sender
                .send_request(request)
                .await
                .map_err(|err| format!("{err}"))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_REPLY_BYTES)
                .collect()
                .await
                .map_err(|err| format!("the body broke off: {err}"))?
                .to_bytes();
            let headers = parts
                .headers
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_owned(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
                .collect();
            Ok::<_, String>(Answer::Reply {
                status: parts.status.as_u16(),
                headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            })
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(reason)) => Answer::NoAnswer { reason },
            Err(_) => Answer::NoAnswer {
                reason: format!("no reply within {} ms", self.timeout.as_millis()),
            },
        }
    }

    fn request(&self, outgoing: &Outgoing) -> Result<Request<Full<Bytes>>, http::Error> {
        let mut builder = Request::builder()
            .method(Method::from_bytes(outgoing.method.as_bytes()).map_err(http::Error::from)?)
            .uri(format!("{}{}", self.prefix, outgoing.path))
            .header(http::header::HOST, &self.host_header)
            .header(http::header::CONNECTION, "close");
        for (name, value) in &outgoing.headers {
            builder = builder.header(
                HeaderName::from_bytes(name.as_bytes()).map_err(http::Error::from)?,
                HeaderValue::from_str(value).map_err(http::Error::from)?,
            );
        }
        builder.body(Full::new(Bytes::from(outgoing.body.clone())))
    }

    /// Writes the request up to `moment` on a plain socket and closes it without reading.
    ///
    /// # Errors
    /// The reason, as text, when the connection or the write fails.
    pub async fn hang_up(&self, outgoing: &Outgoing, moment: HangUp) -> Result<(), String> {
        let mut head = format!(
            "{} {}{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            outgoing.method,
            self.prefix,
            outgoing.path,
            self.host_header,
            outgoing.body.len()
        );
        for (name, value) in &outgoing.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let body = &outgoing.body;
        let written = match moment {
            HangUp::AfterHeaders => 0,
            HangUp::PartOfBody => body.len() / 2,
            HangUp::AfterRequest => body.len(),
        };
        let write = async {
            let mut stream = TcpStream::connect(&self.address).await?;
            stream.set_nodelay(true)?;
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(&body[..written]).await?;
            stream.flush().await?;
            // Dropping the socket closes it: the service sees the end of the stream (or a
            // reset) with the request cut where the moment says.
            Ok::<_, std::io::Error>(())
        };
        match tokio::time::timeout(self.timeout, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(format!("{}: {err}", self.address)),
            Err(_) => Err(format!("writing to {} timed out", self.address)),
        }
    }
}

/// The reply body as text, cut for the history.
pub fn recorded(answer: Answer) -> Answer {
    match answer {
        Answer::Reply {
            status,
            headers,
            body,
        } => Answer::Reply {
            status,
            headers,
            body: cut(&body),
        },
        other => other,
    }
}
