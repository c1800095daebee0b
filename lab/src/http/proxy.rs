//! `lab proxy`: a fault-injecting proxy that loses replies on the wire. It forwards each request
//! to the service, reads the whole response, and for the first N requests closes the caller's
//! connection instead of passing the response on. The service committed; the caller saw its
//! connection close. That is a lost reply made by the transport, not by the handler.
//!
//! Every caller's connection is its own task on a small tokio runtime, so an idle or slow caller
//! holds up nobody else. Requests are numbered in the order their bodies are complete, with one
//! atomic counter, so "the first N requests" means the same under concurrency as one at a time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};

use super::blocking;
use crate::error::{Error, Result};

/// The most header bytes the proxy reads from one request (hyper's read buffer).
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The most body bytes the proxy forwards in one request or response.
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How long a caller has to send a request's head, counted from the moment the proxy starts
/// waiting for it (so an idle kept-alive connection is closed after this too).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a caller has to send a request's body once its head is in.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the service has to answer one forwarded request, connecting included.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// The most caller connections served at once; more wait in the listen backlog, so a flood of
/// idle connections costs a bounded number of tasks.
const MAX_CONNECTIONS: usize = 1024;

/// The `error` codes of the proxy's own answers, `{"error": CODE, "message": TEXT}`, in the shape
/// of the service's error bodies.
pub mod code {
    /// 400: the caller's request body could not be read.
    pub const BAD_BODY: &str = "unreadable_body";
    /// 408: the caller did not send its body within the proxy's time limit.
    pub const BODY_TIMEOUT: &str = "body_timeout";
    /// 413: the request body is larger than the proxy forwards.
    pub const TOO_LARGE: &str = "body_too_large";
    /// 502: the service could not be reached, or its answer could not be read.
    pub const UPSTREAM_FAILED: &str = "upstream_failed";
    /// 504: the service did not answer within the proxy's time limit.
    pub const UPSTREAM_TIMEOUT: &str = "upstream_timeout";
}

/// A running `lab proxy`.
pub struct DroppingProxy {
    address: SocketAddr,
    counts: Arc<Counts>,
    /// Tells the accepting task to stop; taken when the proxy is dropped.
    stop: Option<oneshot::Sender<()>>,
    /// The thread that runs the tokio runtime; it ends when the accepting task stops.
    runtime: Option<JoinHandle<()>>,
}

/// How many requests the proxy forwarded and how many replies it dropped.
#[derive(Default)]
struct Counts {
    to_drop: u32,
    forwarded: AtomicU32,
    dropped: AtomicU32,
    tap: Option<Arc<dyn Tap>>,
}

/// What a [`Tap`] has the proxy do with one complete request.
#[derive(Clone, Debug)]
pub enum Decision {
    /// Forward it and pass the answer on.
    Forward,
    /// Forward it, read the whole answer (so whatever the service committed is committed), then
    /// close the caller's connection without a byte of it.
    LoseReply,
    /// Forward it, read the whole answer, and pass it on only when the [`Hold`] ends: a service
    /// that did the work and answers late, past the caller's own timeout or while other calls
    /// are in flight.
    Late(Hold),
    /// Answer it without forwarding: the service never sees it.
    Answer {
        /// The status.
        status: u16,
        /// The headers, in order.
        headers: Vec<(String, String)>,
        /// The body.
        body: Bytes,
    },
}

/// How long a [`Decision::Late`] answer is held: until the tap releases it (or drops the sender
/// of `release`), which it does on an event it observes, and at most `bound`, a guard for an
/// event that never comes.
#[derive(Clone, Debug)]
pub struct Hold {
    /// Becomes `true` when the answer may go.
    pub release: tokio::sync::watch::Receiver<bool>,
    /// The longest the answer is held.
    pub bound: Duration,
}

impl Hold {
    /// Waits until the hold is released, its sender is gone, or `bound` has passed.
    async fn end(mut self) {
        let _ = tokio::time::timeout(self.bound, self.release.wait_for(|released| *released)).await;
    }
}

/// Settles a held request as [`Fate::Abandoned`] when it is dropped before [`Abandoned::defuse`]:
/// hyper drops a request's future when its caller closes the connection mid-request, and the tap
/// must still hear what became of it.
struct Abandoned<'a> {
    tap: &'a dyn Tap,
    number: usize,
    fate: Option<Fate>,
}

impl Abandoned<'_> {
    fn defuse(mut self) {
        self.fate = None;
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if let Some(fate) = self.fate.take() {
            self.tap.settled(self.number, fate);
        }
    }
}

/// What became of one request a [`Tap`] saw.
#[derive(Clone, Debug)]
pub enum Fate {
    /// The caller got this answer (the service's, or the tap's own).
    Answered {
        /// The status.
        status: u16,
        /// The headers, names in lower case.
        headers: Vec<(String, String)>,
        /// The body.
        body: Bytes,
    },
    /// The service answered this, and the caller's connection was closed instead.
    Lost {
        /// The status the service answered.
        status: u16,
        /// The headers it answered with, names in lower case.
        headers: Vec<(String, String)>,
        /// The body it answered.
        body: Bytes,
    },
    /// The service answered this, and the caller closed its connection while the answer was
    /// held ([`Decision::Late`]): the caller gave up on it.
    Abandoned {
        /// The status the service answered.
        status: u16,
        /// The headers it answered with, names in lower case.
        headers: Vec<(String, String)>,
        /// The body it answered.
        body: Bytes,
    },
    /// The proxy answered 4xx or 5xx itself: the body could not be read, or the service could
    /// not be reached or did not answer in time.
    Failed(String),
}

/// Sees every request the proxy receives, decides its fault, and hears its fate: the recorder of
/// `lab check`'s hop points. Called on the proxy's runtime; keep both calls quick.
pub trait Tap: Send + Sync + 'static {
    /// A request whose body is complete: its method, its target (path and query), its headers
    /// and its body. Returns a number for [`Tap::settled`] and what to do.
    fn arrived(
        &self,
        method: &str,
        target: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> (usize, Decision);
    /// What became of request `number`.
    fn settled(&self, number: usize, fate: Fate);
    /// Rewrites forwarded request `number` just before it is sent (its path, its headers): for a
    /// tap that plays another API than the service's. By default, nothing.
    fn rewrite(&self, _number: usize, _request: &mut Request<Full<Bytes>>) {}
    /// What the caller gets instead of the service's answer to request `number` (a status and a
    /// JSON body), or `None` to pass the service's on. By default, `None`.
    fn reply(&self, _number: usize, _status: u16, _body: &Bytes) -> Option<(u16, Bytes)> {
        None
    }
}

impl DroppingProxy {
    /// Listens on 127.0.0.1:`port` (0 picks a free one) and forwards to `upstream`, losing the
    /// replies of the first `drop_first` requests.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] when `upstream` is not on loopback; [`Error::Io`] when the port
    /// cannot be bound or the runtime or its thread cannot start.
    pub fn start(upstream: SocketAddr, port: u16, drop_first: u32) -> Result<DroppingProxy> {
        DroppingProxy::start_with(upstream, port, drop_first, None)
    }

    /// Like [`DroppingProxy::start`], losing no reply by count: `tap` sees every request and
    /// decides what becomes of it.
    ///
    /// # Errors
    /// As [`DroppingProxy::start`].
    pub fn start_tapped(
        upstream: SocketAddr,
        port: u16,
        tap: Arc<dyn Tap>,
    ) -> Result<DroppingProxy> {
        DroppingProxy::start_with(upstream, port, 0, Some(tap))
    }

    fn start_with(
        upstream: SocketAddr,
        port: u16,
        drop_first: u32,
        tap: Option<Arc<dyn Tap>>,
    ) -> Result<DroppingProxy> {
        if !upstream.ip().is_loopback() {
            return Err(Error::InputInvalid {
                subject: "--upstream".to_owned(),
                problem: format!("{upstream}: only loopback addresses"),
            });
        }
        let io_error = |action: String| move |source| Error::Io { action, source };
        // Bound here, before any thread starts, so a taken port is an error of `start`.
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))
            .map_err(io_error(format!("binding the proxy to 127.0.0.1:{port}")))?;
        let address = listener
            .local_addr()
            .map_err(io_error("reading the proxy's address".to_owned()))?;
        listener.set_nonblocking(true).map_err(io_error(
            "making the proxy's socket non-blocking".to_owned(),
        ))?;
        // Two workers: the proxy waits on sockets, it does not compute.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lab-proxy")
            .enable_all()
            .build()
            .map_err(io_error("starting the proxy's runtime".to_owned()))?;
        let listener = {
            let _inside = runtime.enter();
            TcpListener::from_std(listener)
                .map_err(io_error("registering the proxy's socket".to_owned()))?
        };
        let counts = Arc::new(Counts {
            to_drop: drop_first,
            tap,
            ..Counts::default()
        });
        let (stop, stopped) = oneshot::channel();
        let thread = {
            let counts = counts.clone();
            std::thread::Builder::new()
                .name("lab-proxy-accept".to_owned())
                .spawn(move || runtime.block_on(accept(listener, upstream, counts, stopped)))
                .map_err(io_error("starting the proxy thread".to_owned()))?
        };
        Ok(DroppingProxy {
            address,
            counts,
            stop: Some(stop),
            runtime: Some(thread),
        })
    }

    /// The socket address of an `http://127.0.0.1:PORT` URL, as `lab proxy --upstream` takes it.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] naming the URL when it is not `http://` on a loopback IP and port.
    pub fn upstream_address(url: &str) -> Result<SocketAddr> {
        let uri: Option<axum::http::Uri> = url.parse().ok();
        uri.filter(|uri| uri.scheme_str() == Some("http") && matches!(uri.path(), "" | "/"))
            .and_then(|uri| uri.authority()?.as_str().parse::<SocketAddr>().ok())
            .filter(|address| address.ip().is_loopback())
            .ok_or_else(|| Error::InputInvalid {
                subject: "--upstream".to_owned(),
                problem: format!("{url:?}: expected http://127.0.0.1:PORT"),
            })
    }

    /// The base URL callers use, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// How many replies the proxy has dropped so far.
    pub fn dropped(&self) -> u32 {
        self.counts.dropped.load(Ordering::SeqCst)
    }

    /// How many requests the proxy has forwarded to the service so far, dropped replies included.
    pub fn forwarded(&self) -> u32 {
        self.counts.forwarded.load(Ordering::SeqCst)
    }

    /// Serves until the process is stopped.
    pub fn wait(mut self) {
        if let Some(thread) = self.runtime.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for DroppingProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // The runtime is dropped at the end of its thread, which cancels every connection task.
        if let Some(thread) = self.runtime.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts callers until told to stop; each connection is served by its own task.
async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    counts: Arc<Counts>,
    mut stopped: oneshot::Receiver<()>,
) {
    let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        // A permit first, so past the limit the proxy stops accepting rather than accepting and
        // closing at once.
        let permit = tokio::select! {
            _ = &mut stopped => return,
            permit = open.clone().acquire_owned() => permit,
        };
        let Ok(permit) = permit else { return }; // the semaphore is never closed
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((caller, _)) => {
                let counts = counts.clone();
                tokio::spawn(async move {
                    serve(caller, upstream, counts).await;
                    drop(permit);
                });
            }
            // Out of file descriptors, or a connection reset before it was accepted: wait a
            // little rather than spin, then go on.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Serves one caller's connection: its requests one after another, as HTTP/1.1 keep-alive allows.
async fn serve(caller: TcpStream, upstream: SocketAddr, counts: Arc<Counts>) {
    let service = hyper::service::service_fn(move |request| {
        let counts = counts.clone();
        async move { forward(request, upstream, &counts).await }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(caller), service)
        .await;
}

/// Why the proxy closed a caller's connection without an answer.
#[derive(Debug, thiserror::Error)]
enum Unanswered {
    /// On purpose: one of the first N requests, whose reply is lost on the wire.
    #[error("reply dropped on purpose")]
    LostReply,
    /// The caller's connection broke while its body was being read.
    #[error("the caller's body could not be read: {0}")]
    CallerBroke(hyper::Error),
}

// ANCHOR: proxy_forward
/// Forwards one request and either passes the response on or closes the connection unanswered.
/// Returning an error from a hyper HTTP/1 service closes the connection without writing a byte.
async fn forward(
    request: Request<Incoming>,
    upstream: SocketAddr,
    counts: &Counts,
) -> std::result::Result<Response<Full<Bytes>>, Unanswered> {
    let (parts, body) = request.into_parts();
    let body = match whole_body(body).await {
        Ok(body) => body,
        Err(instead) => return instead,
    };
    if let Some(tap) = &counts.tap {
        return forward_tapped(parts, body, upstream, counts, tap.as_ref()).await;
    }
    let mut outgoing = Request::from_parts(parts, Full::new(body));
    prepare_upstream_request(&mut outgoing, upstream);
    // Numbered when complete, in one atomic step: the first N are the first N to be forwarded.
    let number = counts.forwarded.fetch_add(1, Ordering::SeqCst);
    let (response, _) = match send_in_time(outgoing, upstream).await {
        Ok(sent) => sent,
        Err((instead, _)) => return Ok(instead),
    };
    // The service has answered in full, so whatever it committed is committed.
    if number < counts.to_drop {
        counts.dropped.fetch_add(1, Ordering::SeqCst);
        return Err(Unanswered::LostReply); // not a byte of the response
    }
    Ok(response)
}
// ANCHOR_END: proxy_forward

/// [`forward`] for a proxy with a [`Tap`]: the tap sees the request, decides its fault, may
/// rewrite it and its answer, and hears what became of it.
async fn forward_tapped(
    parts: hyper::http::request::Parts,
    body: Bytes,
    upstream: SocketAddr,
    counts: &Counts,
    tap: &dyn Tap,
) -> std::result::Result<Response<Full<Bytes>>, Unanswered> {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let (number, decision) = tap.arrived(parts.method.as_str(), target, &parts.headers, &body);
    if let Decision::Answer {
        status,
        headers,
        body,
    } = &decision
    {
        let fate = Fate::Answered {
            status: *status,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
                .collect(),
            body: body.clone(),
        };
        tap.settled(number, fate);
        return Ok(own_answer(*status, headers, body.clone()));
    }
    let mut outgoing = Request::from_parts(parts, Full::new(body));
    prepare_upstream_request(&mut outgoing, upstream);
    tap.rewrite(number, &mut outgoing);
    counts.forwarded.fetch_add(1, Ordering::SeqCst);
    // A caller that closes its connection while the service works: hyper drops this future,
    // and the tap still hears of the request.
    let gone = Abandoned {
        tap,
        number,
        fate: Some(Fate::Failed(
            "the caller closed its connection before the service answered".to_owned(),
        )),
    };
    let (response, answered) = match send_in_time(outgoing, upstream).await {
        Ok(sent) => sent,
        Err((instead, problem)) => {
            gone.defuse();
            tap.settled(number, Fate::Failed(problem));
            return Ok(instead);
        }
    };
    gone.defuse();
    deliver(response, answered, decision, (tap, number), counts).await
}

/// The service's answer to tapped request `number`, held, lost or passed on as `decision` says,
/// and its fate told to the tap.
async fn deliver(
    response: Response<Full<Bytes>>,
    answered: Bytes,
    decision: Decision,
    (tap, number): (&dyn Tap, usize),
    counts: &Counts,
) -> std::result::Result<Response<Full<Bytes>>, Unanswered> {
    let status = response.status().as_u16();
    let headers = header_pairs(response.headers());
    match decision {
        Decision::Late(hold) => {
            let abandoned = Abandoned {
                tap,
                number,
                fate: Some(Fate::Abandoned {
                    status,
                    headers: headers.clone(),
                    body: answered.clone(),
                }),
            };
            hold.end().await;
            abandoned.defuse();
        }
        Decision::LoseReply => {
            counts.dropped.fetch_add(1, Ordering::SeqCst);
            tap.settled(
                number,
                Fate::Lost {
                    status,
                    headers,
                    body: answered,
                },
            );
            return Err(Unanswered::LostReply);
        }
        Decision::Forward | Decision::Answer { .. } => {}
    }
    let replaced = tap.reply(number, status, &answered);
    tap.settled(
        number,
        Fate::Answered {
            status,
            headers,
            body: answered,
        },
    );
    Ok(match replaced {
        Some((status, body)) => own_answer(
            status,
            &[("content-type".to_owned(), "application/json".to_owned())],
            body,
        ),
        None => response,
    })
}

/// Headers as (name, value) text pairs, names in lower case (as hyper keeps them), values as
/// lossy UTF-8: what a [`Tap`] records.
pub fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The caller's whole body, chunked or not, before anything is sent: the service gets one
/// request with a Content-Length, and a caller that stops sending is timed out here. `Err` holds
/// what replaces the request: the proxy's own answer, or a hang-up.
async fn whole_body(
    body: Incoming,
) -> std::result::Result<Bytes, std::result::Result<Response<Full<Bytes>>, Unanswered>> {
    match tokio::time::timeout(
        BODY_READ_TIMEOUT,
        Limited::new(body, MAX_BODY_BYTES).collect(),
    )
    .await
    {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) => Err(match error.downcast::<hyper::Error>() {
            Ok(broken) => Err(Unanswered::CallerBroke(*broken)),
            Err(_) => Ok(answer(
                StatusCode::PAYLOAD_TOO_LARGE,
                code::TOO_LARGE,
                &format!("the proxy forwards bodies of at most {MAX_BODY_BYTES} bytes"),
            )),
        }),
        Err(_) => Err(Ok(answer(
            StatusCode::REQUEST_TIMEOUT,
            code::BODY_TIMEOUT,
            &format!("the body did not arrive within {BODY_READ_TIMEOUT:?}"),
        ))),
    }
}

/// Sends the request within [`UPSTREAM_TIMEOUT`]: the service's answer and its body, or the
/// proxy's own `502` or `504` and why.
async fn send_in_time(
    outgoing: Request<Full<Bytes>>,
    upstream: SocketAddr,
) -> std::result::Result<(Response<Full<Bytes>>, Bytes), (Response<Full<Bytes>>, String)> {
    match tokio::time::timeout(UPSTREAM_TIMEOUT, send(outgoing, upstream)).await {
        Ok(Ok(sent)) => Ok(sent),
        Ok(Err(problem)) => Err((
            answer(StatusCode::BAD_GATEWAY, code::UPSTREAM_FAILED, &problem),
            problem,
        )),
        Err(_) => {
            let problem = format!("the service did not answer within {UPSTREAM_TIMEOUT:?}");
            Err((
                answer(
                    StatusCode::GATEWAY_TIMEOUT,
                    code::UPSTREAM_TIMEOUT,
                    &problem,
                ),
                problem,
            ))
        }
    }
}

/// A [`Decision::Answer`] as a response.
fn own_answer(status: u16, headers: &[(String, String)], body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// Sends one request to the service on a connection of its own and reads the whole answer. One
/// connection per request keeps each forwarded request a single attempt: a pooled connection the
/// service had just closed could fail after the service read it, and nothing here may resend.
async fn send(
    request: Request<Full<Bytes>>,
    upstream: SocketAddr,
) -> std::result::Result<(Response<Full<Bytes>>, Bytes), String> {
    let mut sender = blocking::connect(&upstream.to_string())
        .await
        .map_err(|error| format!("connecting to {upstream}: {error}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|error| format!("sending to {upstream}: {error}"))?;
    let mut answer = blocking::read_whole(response, MAX_BODY_BYTES)
        .await
        .map_err(|error| format!("reading the answer of {upstream}: {error}"))?;
    remove_hop_by_hop(&mut answer.headers);
    let mut response = Response::new(Full::new(answer.body.clone()));
    *response.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    *response.headers_mut() = answer.headers;
    Ok((response, answer.body))
}

/// Rewrites a caller's request for the service: HTTP/1.1, `Host` the service's address, the
/// body's exact length, no `Expect`, and `Connection: close`, so the service ends its side after
/// answering.
fn prepare_upstream_request(request: &mut Request<Full<Bytes>>, upstream: SocketAddr) {
    *request.version_mut() = Version::HTTP_11;
    let headers = request.headers_mut();
    remove_hop_by_hop(headers);
    headers.remove(header::CONTENT_LENGTH); // hyper writes the length of the full body
    // The caller's body is already here: the service has nothing to agree to before it is sent.
    headers.remove(header::EXPECT);
    if let Ok(host) = HeaderValue::from_str(&upstream.to_string()) {
        headers.insert(header::HOST, host);
    }
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
}

/// Removes the headers that describe one hop (RFC 9110, section 7.6.1) rather than the message,
/// including any the `Connection` header names.
fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::PROXY_AUTHORIZATION,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
}

/// One of the proxy's own answers, in the shape of the service's error bodies.
fn answer(status: StatusCode, error: &str, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({"error": error, "message": message}).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_not_sent_to_the_service() {
        let mut request = Request::new(Full::new(Bytes::from_static(b"{}")));
        let headers = request.headers_mut();
        for (name, value) in [
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("expect", "100-continue"),
            ("content-length", "999"),
            ("host", "caller.example"),
            ("idempotency-key", "kept-1"),
            ("authorization", "Bearer token-a"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        let upstream: SocketAddr = ([127, 0, 0, 1], 8080).into();
        prepare_upstream_request(&mut request, upstream);
        let headers = request.headers();
        for gone in [
            "x-hop",
            "keep-alive",
            "transfer-encoding",
            "expect",
            "content-length",
        ] {
            assert!(!headers.contains_key(gone), "{gone} was forwarded");
        }
        assert_eq!(headers["connection"], "close");
        assert_eq!(headers["host"], "127.0.0.1:8080");
        assert_eq!(headers["idempotency-key"], "kept-1");
        assert_eq!(headers["authorization"], "Bearer token-a");
        assert_eq!(request.version(), Version::HTTP_11);
    }
}
