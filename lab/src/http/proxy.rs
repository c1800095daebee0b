//! `lab proxy`: a fault-injecting proxy that loses replies on the wire. It forwards each request
//! to the service, reads the whole response, and for the first N requests closes the caller's
//! connection instead of passing the response on. The service committed; the caller saw its
//! connection close. That is a lost reply made by the transport, not by the handler.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};

/// The most header bytes the proxy reads from one request or response.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The most body bytes the proxy forwards in one request or response.
const MAX_BODY_BYTES: u64 = 1024 * 1024;

/// How long the proxy waits on either side before giving up on a connection.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `lab proxy`.
pub struct DroppingProxy {
    address: SocketAddr,
    stopping: Arc<AtomicBool>,
    counts: Arc<Counts>,
    acceptor: Option<JoinHandle<()>>,
}

/// How many requests the proxy forwarded and how many replies it dropped.
#[derive(Debug, Default)]
struct Counts {
    to_drop: u32,
    seen: AtomicU32,
    dropped: AtomicU32,
}

impl DroppingProxy {
    /// Listens on 127.0.0.1:`port` (0 picks a free one) and forwards to `upstream`, losing the
    /// replies of the first `drop_first` requests.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] when `upstream` is not on loopback; [`Error::Io`] when the port
    /// cannot be bound or the accepting thread cannot start.
    pub fn start(upstream: SocketAddr, port: u16, drop_first: u32) -> Result<DroppingProxy> {
        if !upstream.ip().is_loopback() {
            return Err(Error::InputInvalid {
                path: "--upstream".into(),
                problem: format!("{upstream}: only loopback addresses"),
            });
        }
        let listener = TcpListener::bind(("127.0.0.1", port)).map_err(|source| Error::Io {
            action: format!("binding the proxy to 127.0.0.1:{port}"),
            source,
        })?;
        let address = listener.local_addr().map_err(|source| Error::Io {
            action: "reading the proxy's address".to_owned(),
            source,
        })?;
        let stopping = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts {
            to_drop: drop_first,
            ..Counts::default()
        });
        let acceptor = {
            let (stopping, counts) = (stopping.clone(), counts.clone());
            std::thread::Builder::new()
                .name("lab-proxy".to_owned())
                .spawn(move || accept(&listener, upstream, &stopping, &counts))
                .map_err(|source| Error::Io {
                    action: "starting the proxy thread".to_owned(),
                    source,
                })?
        };
        Ok(DroppingProxy {
            address,
            stopping,
            counts,
            acceptor: Some(acceptor),
        })
    }

    /// The socket address of an `http://127.0.0.1:PORT` URL, as `lab proxy --upstream` takes it.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] naming the URL when it is not `http://` on a loopback IP and port.
    pub fn upstream_address(url: &str) -> Result<SocketAddr> {
        url.strip_prefix("http://")
            .map(|rest| rest.trim_end_matches('/'))
            .and_then(|rest| rest.parse::<SocketAddr>().ok())
            .filter(|address| address.ip().is_loopback())
            .ok_or_else(|| Error::InputInvalid {
                path: "--upstream".into(),
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

    /// Serves until the process is stopped.
    pub fn wait(mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

impl Drop for DroppingProxy {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the accepting thread with one connection of our own, so it sees the flag.
        let _ = TcpStream::connect(self.address);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept(listener: &TcpListener, upstream: SocketAddr, stopping: &AtomicBool, counts: &Counts) {
    for caller in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        // One connection at a time: the proxy is a test fixture, and one request per connection
        // keeps "the first N requests" well defined.
        if let Ok(caller) = caller {
            let _ = forward(caller, upstream, counts);
        }
    }
}

// ANCHOR: proxy_forward
/// Forwards one request and either passes the response on or closes the connection unanswered.
fn forward(mut caller: TcpStream, upstream: SocketAddr, counts: &Counts) -> std::io::Result<()> {
    caller.set_read_timeout(Some(IO_TIMEOUT))?;
    let request = read_message(&mut caller, true)?;
    let mut service = TcpStream::connect_timeout(&upstream, IO_TIMEOUT)?;
    service.set_read_timeout(Some(IO_TIMEOUT))?;
    service.write_all(&request)?;
    let response = read_message(&mut service, false)?;
    // The service has answered, so whatever it committed is committed.
    let number = counts.seen.fetch_add(1, Ordering::SeqCst);
    if number < counts.to_drop {
        counts.dropped.fetch_add(1, Ordering::SeqCst);
        return caller.shutdown(Shutdown::Both); // not a byte of the response
    }
    caller.write_all(&response)?;
    caller.shutdown(Shutdown::Both)
}
// ANCHOR_END: proxy_forward

/// Reads one HTTP/1.1 message (head and a `Content-Length` body). A request is rewritten to ask
/// for `Connection: close`, so the service ends its response by closing, and the proxy handles
/// one request per connection.
fn read_message(stream: &mut TcpStream, is_request: bool) -> std::io::Result<Vec<u8>> {
    let mut reader = BufReader::new(stream);
    let mut head = Vec::new();
    let mut length: u64 = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if head.len() + line.len() > MAX_HEAD_BYTES {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value
                .trim()
                .parse()
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
        }
        if line == "\r\n" {
            if is_request {
                head.extend_from_slice(b"Connection: close\r\n");
            }
            head.extend_from_slice(b"\r\n");
            break;
        }
        if is_request && lower.starts_with("connection:") {
            continue; // replaced by Connection: close above
        }
        head.extend_from_slice(line.as_bytes());
    }
    if length > MAX_BODY_BYTES {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    let mut body = Vec::new();
    reader.take(length).read_to_end(&mut body)?;
    if (body.len() as u64) < length {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    head.extend_from_slice(&body);
    Ok(head)
}
