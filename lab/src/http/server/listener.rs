//! The accept loop: bounded connections, HTTP/1.1 and 1.0 keep-alive on hyper, timeouts on
//! reading headers, an accept that survives running out of file descriptors, and a graceful end.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

use super::Limits;
use crate::http::wire::problem;
use crate::service::LostReply;

/// Accepts connections until `stop` turns true, then waits (at most `limits.shutdown_grace`) for
/// the requests in progress to be answered.
pub(crate) async fn accept_until_stopped(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(limits.header_read)
        .max_headers(limits.headers)
        .max_header_size(limits.header_bytes)
        .max_buf_size(limits.header_bytes.max(64 * 1024));
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) if is_per_connection(&err) => continue,
            Err(err) => {
                // Out of file descriptors (EMFILE, ENFILE) or memory: the listener is fine and
                // the condition passes as connections close. Wait a moment instead of spinning.
                eprintln!("lab serve: accept failed, retrying shortly: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // A reply on a kept-alive connection must not wait for Nagle's timer.
        let _ = stream.set_nodelay(true);
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(shed(stream));
            continue;
        };
        let switch = LostReply::default();
        let io = TokioIo::new(LosableStream {
            stream,
            lost: switch.clone(),
        });
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
            request.extensions_mut().insert(switch.clone());
            router.clone().oneshot(request.map(axum::body::Body::new))
        });
        let connection = graceful.watch(http.serve_connection(io, service));
        tokio::spawn(async move {
            // A connection that ends in an error (a reset, a timeout) has nobody to tell.
            let _ = connection.await;
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        eprintln!(
            "lab serve: connections still open after {:?}; stopping anyway",
            limits.shutdown_grace
        );
    }
}

/// Errors that concern only the connection being accepted; the next accept is fine.
fn is_per_connection(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// Answers 503 on a connection over the limit and closes it, without reading the request.
async fn shed(mut stream: TcpStream) {
    let kind = problem::OVERLOADED;
    let body = serde_json::json!({
        "type": kind.uri(),
        "title": kind.title,
        "status": kind.status,
        "detail": "the service holds as many connections as it allows; retry shortly",
    })
    .to_string();
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {}\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        crate::http::wire::PROBLEM_JSON,
        body.len()
    );
    // Bounded, so a peer that never reads cannot hold the task. After the answer, only the
    // sending half is closed and what the client is still sending is read and dropped for a
    // moment: closing both at once would turn the client's unsent request into a reset, and a
    // reset can destroy the 503 before the client reads it.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(reply.as_bytes()).await;
        let _ = stream.shutdown().await;
        let mut sink = [0; 4096];
        let mut drained = 0;
        while drained < 64 * 1024 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(read) => drained += read,
            }
        }
    })
    .await;
}

/// A connection whose writes fail once a handler asked to lose the reply, so hyper closes it
/// without sending a byte of the response.
struct LosableStream {
    stream: TcpStream,
    lost: LostReply,
}

impl LosableStream {
    fn lost_error() -> io::Error {
        io::Error::new(io::ErrorKind::ConnectionAborted, "reply lost on purpose")
    }
}

impl AsyncRead for LosableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for LosableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.lost.is_lost() {
            return Poll::Ready(Err(LosableStream::lost_error()));
        }
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.lost.is_lost() {
            return Poll::Ready(Err(LosableStream::lost_error()));
        }
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
