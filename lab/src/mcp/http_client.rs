//! rmcp's Streamable HTTP client, on the hyper the lab already has rather than on reqwest: the one
//! client of the lab's MCP adapter and of `lab check` over MCP.
//!
//! rmcp's client transport is generic over [`StreamableHttpClient`]; its own implementations use
//! reqwest or a Unix socket. This one opens a loopback TCP connection per POST (one request,
//! one answer, `Connection: close`), so a reply lost on the wire is one closed connection and
//! fails that call alone. It reads both answers the transport allows: a JSON body (what `lab mcp`
//! sends, in its JSON response mode) and an event stream (what most servers built on the
//! official SDKs send for a call). It never opens the stream a server may start on its own: no
//! caller here needs those messages.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use axum::http::{self, HeaderName, HeaderValue, Method, Request, StatusCode};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use http_body_util::{BodyExt, Full, Limited};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, SseError, StreamableHttpClient, StreamableHttpError,
    StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};

/// The largest answer read, in bytes: far above any ticket list the lab's tests make.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// What went wrong below MCP: the connection, or the HTTP exchange.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoopbackHttpError {
    /// Connecting or talking failed (refused, reset, closed before an answer).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// hyper failed (such as a connection closed before the answer's head).
    #[error("{0}")]
    Hyper(#[from] hyper::Error),
    /// The request could not be built (a header value with bytes HTTP forbids).
    #[error("{0}")]
    Request(#[from] http::Error),
    /// The answer's body could not be read in full.
    #[error("reading the answer: {0}")]
    Body(String),
}

/// The client: the endpoint's `host:port`, for the connection and the `Host` header.
#[derive(Clone, Debug)]
pub struct LoopbackHttpClient {
    authority: Arc<str>,
}

impl LoopbackHttpClient {
    /// A client for `url` (`http://127.0.0.1:PORT/mcp`).
    ///
    /// # Errors
    /// A message naming the URL when it is not `http://HOST:PORT/...`.
    pub fn for_url(url: &str) -> Result<LoopbackHttpClient, String> {
        let uri: http::Uri = url.parse().map_err(|err| format!("{url:?}: {err}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("{url:?}: expected an http:// URL"));
        }
        let authority = uri.authority().ok_or_else(|| format!("{url:?}: no host"))?;
        let port = authority.port_u16().unwrap_or(80);
        Ok(LoopbackHttpClient {
            authority: format!("{}:{port}", authority.host()).into(),
        })
    }

    async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, LoopbackHttpError> {
        // The lab's one client stack: the same connect and handshake as the HTTP adapter's.
        let mut sender = crate::http::blocking::connect(&self.authority)
            .await
            .map_err(|err| match err {
                crate::http::blocking::NoAnswer::Connect { source, .. } => {
                    LoopbackHttpError::Io(source)
                }
                crate::http::blocking::NoAnswer::Http(err) => LoopbackHttpError::Hyper(err),
                other => LoopbackHttpError::Body(other.to_string()),
            })?;
        Ok(sender.send_request(request).await?)
    }

    fn request(
        &self,
        method: Method,
        uri: &str,
        auth_token: Option<String>,
        session_id: Option<&str>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> http::request::Builder {
        // The origin form (`/mcp`), as most servers expect from a client that is not a proxy.
        let target = uri
            .parse::<http::Uri>()
            .ok()
            .and_then(|parsed| parsed.path_and_query().map(|p| p.as_str().to_owned()))
            .unwrap_or_else(|| uri.to_owned());
        let mut builder = Request::builder()
            .method(method)
            .uri(target)
            .header(http::header::HOST, self.authority.as_ref())
            .header(http::header::CONNECTION, "close")
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream");
        if let Some(token) = auth_token {
            builder = builder.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(session) = session_id {
            builder = builder.header("mcp-session-id", session);
        }
        for (name, value) in custom_headers {
            builder = builder.header(name, value);
        }
        builder
    }
}

type ClientError = StreamableHttpError<LoopbackHttpError>;

fn client_error(err: impl Into<LoopbackHttpError>) -> ClientError {
    StreamableHttpError::Client(err.into())
}

async fn read_body(response: http::Response<hyper::body::Incoming>) -> Result<Bytes, ClientError> {
    Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .map_err(|err| client_error(LoopbackHttpError::Body(err.to_string())))
}

impl StreamableHttpClient for LoopbackHttpClient {
    type Error = LoopbackHttpError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, ClientError> {
        let body = serde_json::to_vec(&message)?;
        let with_session = session_id.is_some();
        let request = self
            .request(
                Method::POST,
                &uri,
                auth_token,
                session_id.as_deref(),
                custom_headers,
            )
            .body(Full::new(Bytes::from(body)))
            .map_err(client_error)?;
        let response = self.send(request).await.map_err(client_error)?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED {
            let challenge = response
                .headers()
                .get(http::header::WWW_AUTHENTICATE)
                .and_then(|value| value.to_str().ok())
                .unwrap_or("Bearer")
                .to_owned();
            return Err(StreamableHttpError::AuthRequired(AuthRequiredError::new(
                challenge,
            )));
        }
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && with_session {
            return Err(StreamableHttpError::SessionExpired);
        }
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        if content_type.starts_with("text/event-stream") {
            // The connection's task lives as long as this body is read (the whole call).
            let events: BoxStream<'static, Result<Sse, SseError>> =
                SseStream::new(response.into_body()).boxed();
            return Ok(StreamableHttpPostResponse::Sse(events, session));
        }
        let body = read_body(response).await?;
        if !content_type.starts_with("application/json") {
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!(
                    "HTTP {status} with {content_type:?}, neither JSON nor an event stream: {}",
                    String::from_utf8_lossy(&body[..body.len().min(512)])
                ),
            )));
        }
        // A JSON-RPC error comes with an error status as well as a success one.
        let answer: ServerJsonRpcMessage = serde_json::from_slice(&body)?;
        Ok(StreamableHttpPostResponse::Json(answer, session))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), ClientError> {
        let request = self
            .request(
                Method::DELETE,
                &uri,
                auth_token,
                Some(&session_id),
                custom_headers,
            )
            .body(Full::new(Bytes::new()))
            .map_err(client_error)?;
        // A stateless server has no session to end; whatever it answers, the client is done.
        self.send(request).await.map_err(client_error)?;
        Ok(())
    }

    async fn get_stream(
        &self,
        _uri: Arc<str>,
        _session_id: Option<Arc<str>>,
        _last_event_id: Option<String>,
        _auth_token: Option<String>,
        _custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, ClientError> {
        // No caller needs the messages a server starts on its own.
        Err(StreamableHttpError::ServerDoesNotSupportSse)
    }
}
