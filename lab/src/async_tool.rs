//! Async adapters: the suite and the conformance check against a tool whose calls are `async`.
//!
//! Most Rust services and their clients are async; the suite and the conformance check call a
//! synchronous [`TicketTool`] from plain threads, several at once in the concurrent points. An
//! async adapter implements [`AsyncTicketTool`], the same five calls as futures, and
//! [`Blocking`] makes it a [`TicketTool`]: each call blocks the calling thread on a tokio runtime
//! until its future is done, so the concurrent points still send from several threads at once
//! and the runtime's workers drive every connection.
//!
//! [`AsyncRemote`] is [`Remote`](crate::remote::Remote) for an async HTTP client: it speaks the
//! contract of `lab serve` through an [`AsyncTransport`] the author writes (the book's
//! acceptance chapter has one on hyper).
//!
//! Run the check from a plain `#[test]` (or `main`), not from inside a runtime
//! (`#[tokio::test]`): a thread that is already running async code cannot block on more, and
//! [`Blocking`] then refuses the call with [`Error::Unsupported`] instead of panicking.
//!
//! ```
//! use lab::async_tool::{AsyncTicketTool, Blocking};
//! use lab::{CreateRequest, OperationKey, Outcome, Scope, SqliteStore, TicketId, TicketTool};
//! use lab::conformance;
//!
//! /// The lab's store behind async calls, standing in for an async client.
//! struct Later(SqliteStore);
//!
//! impl AsyncTicketTool for Later {
//!     async fn create(&self, request: CreateRequest<'_>) -> lab::Result<Outcome> {
//!         tokio::task::yield_now().await;
//!         self.0.create(request)
//!     }
//!     async fn ticket_ids(&self) -> lab::Result<Vec<TicketId>> {
//!         self.0.ticket_ids()
//!     }
//!     async fn count_records(&self) -> lab::Result<u64> {
//!         self.0.count_records()
//!     }
//!     async fn forget_record(&self, scope: &Scope, key: &OperationKey) -> lab::Result<bool> {
//!         self.0.forget_record(scope, key)
//!     }
//!     async fn connect(&self) -> lab::Result<Later> {
//!         Ok(Later(self.0.connect()?))
//!     }
//! }
//!
//! let report = conformance::run(|| Ok(Blocking::new(Later(SqliteStore::temporary()?))));
//! report.assert_passed();
//! # Ok::<(), lab::Error>(())
//! ```

/// The async crates the lab is built on, re-exported so that the book's example, which may name
/// only `lab`, uses the same versions; a crate of your own depends on its client directly.
pub mod deps {
    pub use bytes;
    pub use http_body_util;
    pub use hyper;
    pub use hyper_util;
    pub use tokio;
}

use std::future::Future;
use std::sync::{Arc, OnceLock};

use tokio::runtime::{Builder, Handle, Runtime};

use crate::error::{Error, Result};
use crate::key::{OperationKey, Scope};
use crate::remote::{self, Answer, Next, Request};
use crate::tool::{CreateRequest, Outcome, OwnScope, TicketId, TicketTool};

// ANCHOR: trait
/// [`TicketTool`] with async calls: what an async adapter implements (with `async fn`).
/// [`Blocking`] runs the suite and the conformance check against it.
pub trait AsyncTicketTool: Send + 'static {
    /// Creates a ticket, or replays the saved result; see [`TicketTool::create`].
    fn create(&self, request: CreateRequest<'_>) -> impl Future<Output = Result<Outcome>>;

    /// Every ticket's identifier; see [`TicketTool::ticket_ids`].
    fn ticket_ids(&self) -> impl Future<Output = Result<Vec<TicketId>>>;

    /// How many operation records exist; see [`TicketTool::count_records`].
    fn count_records(&self) -> impl Future<Output = Result<u64>>;

    /// Forgets one key's record; see [`TicketTool::forget_record`].
    fn forget_record(
        &self,
        scope: &Scope,
        key: &OperationKey,
    ) -> impl Future<Output = Result<bool>>;

    /// Another connection, as a second caller's; see [`TicketTool::connect`].
    fn connect(&self) -> impl Future<Output = Result<Self>>
    where
        Self: Sized;
}
// ANCHOR_END: trait

/// The runtime [`Blocking::new`] uses: two workers, started on first use, for the process.
fn shared_runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lab-async-tool")
            .enable_all()
            .build()
            .expect("a tokio runtime starts")
    })
}

/// An [`AsyncTicketTool`] as a [`TicketTool`]: each call blocks its thread on a tokio runtime
/// until the call's future is done.
pub struct Blocking<T> {
    tool: T,
    runtime: Handle,
}

impl<T: AsyncTicketTool> Blocking<T> {
    /// The tool on a runtime of the lab's (two workers, shared by every `Blocking` of the process).
    pub fn new(tool: T) -> Blocking<T> {
        Blocking::on(shared_runtime().handle().clone(), tool)
    }

    /// The tool on a runtime of yours. It must be a multi-thread runtime with its drivers
    /// enabled: its workers, not the blocked thread, drive the connections.
    pub fn on(runtime: Handle, tool: T) -> Blocking<T> {
        Blocking { tool, runtime }
    }

    /// The async tool itself.
    pub fn tool(&self) -> &T {
        &self.tool
    }

    /// Runs any future on the tool's runtime (a reset before a point, say) and waits for it.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when called from inside an async runtime.
    pub fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        if Handle::try_current().is_ok() {
            return Err(Error::Unsupported {
                what: "an async tool called from inside an async runtime: it cannot block there; \
                       run the check from a plain #[test] or main, not #[tokio::test]"
                    .to_owned(),
            });
        }
        Ok(self.runtime.block_on(future))
    }
}

impl<T: AsyncTicketTool> TicketTool for Blocking<T> {
    fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        self.block_on(self.tool.create(request))?
    }

    fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        self.block_on(self.tool.ticket_ids())?
    }

    fn count_records(&self) -> Result<u64> {
        self.block_on(self.tool.count_records())?
    }

    fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        self.block_on(self.tool.forget_record(scope, key))?
    }

    fn connect(&self) -> Result<Blocking<T>> {
        let tool = self.block_on(self.tool.connect())??;
        Ok(Blocking::on(self.runtime.clone(), tool))
    }
}

/// Sends one request with an async HTTP client: `Ok` for any answer, `Err` with the reason when
/// none came. The async twin of [`remote::Transport`].
pub trait AsyncTransport: Clone + Send + Sync + 'static {
    /// Sends `request` and waits for its answer.
    fn send(&self, request: &Request) -> impl Future<Output = std::result::Result<Answer, String>>;
}

/// An [`AsyncTicketTool`] over an [`AsyncTransport`]: the contract of `lab serve`, the same as
/// [`Remote`](remote::Remote), sent by an async client. One `AsyncRemote` speaks for one caller.
#[derive(Clone)]
pub struct AsyncRemote<T> {
    transport: T,
    own: Arc<OwnScope>,
}

impl<T: AsyncTransport> AsyncRemote<T> {
    /// An adapter that sends through `transport`.
    pub fn new(transport: T) -> AsyncRemote<T> {
        AsyncRemote {
            transport,
            own: Arc::default(),
        }
    }

    /// `POST /admin/reset`: empties the service, so a contract point starts from nothing.
    ///
    /// # Errors
    /// [`Error::Http`] when the hook did not answer 200.
    pub async fn reset(&self) -> Result<()> {
        let request = remote::admin_request("POST", "/admin/reset", None);
        match self.transport.send(&request).await {
            Ok(answer) if answer.status == 200 => Ok(()),
            other => Err(Error::Http {
                method: "POST",
                url: "/admin/reset".to_owned(),
                status: other.as_ref().ok().map(|answer| answer.status),
                problem: format!("{other:?}"),
            }),
        }
    }

    async fn hook(
        &self,
        method: &'static str,
        path: &'static str,
        key: Option<&OperationKey>,
    ) -> std::result::Result<Answer, String> {
        let request = remote::admin_request(method, path, key);
        self.transport.send(&request).await
    }
}

impl<T: AsyncTransport> AsyncTicketTool for AsyncRemote<T> {
    async fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
        self.own
            .check(request.scope, "the transport's token names one caller")?;
        let sent = remote::create_request(&request);
        for _ in 0..remote::SENDS {
            match remote::classify(&request, self.transport.send(&sent).await) {
                Next::Done(answer) => return answer,
                Next::SendAgain => tokio::time::sleep(remote::WAIT).await,
            }
        }
        Err(remote::still_in_flight(&request))
    }

    async fn ticket_ids(&self) -> Result<Vec<TicketId>> {
        remote::ticket_ids(self.hook("GET", "/admin/tickets", None).await)
    }

    async fn count_records(&self) -> Result<u64> {
        remote::records(self.hook("GET", "/admin/records", None).await)
    }

    async fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
        self.own
            .check(scope, "the transport's token names one caller")?;
        remote::forgotten(self.hook("DELETE", "/admin/records", Some(key)).await)
    }

    async fn connect(&self) -> Result<AsyncRemote<T>> {
        Ok(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;
    use crate::suite::{self, Operation};
    use crate::{SqliteStore, TicketTool};

    /// The lab's store behind async calls; with `ignore_keys`, an async adapter with a bug.
    struct Later {
        store: SqliteStore,
        ignore_keys: bool,
    }

    impl AsyncTicketTool for Later {
        async fn create(&self, request: CreateRequest<'_>) -> Result<Outcome> {
            tokio::task::yield_now().await;
            let request = if self.ignore_keys {
                CreateRequest::unkeyed(request.scope, request.payload).with_fault(request.fault)
            } else {
                request
            };
            self.store.create(request)
        }
        async fn ticket_ids(&self) -> Result<Vec<TicketId>> {
            self.store.ticket_ids()
        }
        async fn count_records(&self) -> Result<u64> {
            self.store.count_records()
        }
        async fn forget_record(&self, scope: &Scope, key: &OperationKey) -> Result<bool> {
            self.store.forget_record(scope, key)
        }
        async fn connect(&self) -> Result<Later> {
            Ok(Later {
                store: self.store.connect()?,
                ignore_keys: self.ignore_keys,
            })
        }
    }

    fn later(ignore_keys: bool) -> Result<Blocking<Later>> {
        Ok(Blocking::new(Later {
            store: SqliteStore::temporary()?,
            ignore_keys,
        }))
    }

    #[test]
    fn an_async_tool_passes_the_conformance_check_through_the_bridge() {
        let report = conformance::run(|| later(false));
        assert!(report.passed(), "{report}");
    }

    #[test]
    fn an_async_tool_with_a_bug_fails_it() {
        let report = conformance::run(|| later(true));
        assert!(!report.passed(), "{report}");
    }

    #[test]
    fn the_suite_sees_the_same_as_on_the_store_itself() {
        let op = Operation::example();
        let through = suite::run(&op, |_| later(false)).unwrap();
        let direct = suite::run(&op, |_| SqliteStore::temporary()).unwrap();
        assert_eq!(through.lines(), direct.lines());
    }

    #[test]
    fn a_call_from_inside_a_runtime_is_refused_not_a_panic() {
        let tool = later(false).unwrap();
        let runtime = Builder::new_current_thread().build().unwrap();
        let err = runtime
            .block_on(async { tool.count_records() })
            .unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
        assert!(err.to_string().contains("#[tokio::test]"), "{err}");
    }

    /// A transport over a plain tokio socket: one HTTP/1.1 request per connection.
    #[derive(Clone)]
    struct Socket {
        address: std::net::SocketAddr,
        token: &'static str,
    }

    impl AsyncTransport for Socket {
        async fn send(&self, request: &Request) -> std::result::Result<Answer, String> {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream = tokio::net::TcpStream::connect(self.address)
                .await
                .map_err(|e| e.to_string())?;
            let mut head = format!(
                "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\
                 Lab-Admin-Token: admin-1\r\nContent-Length: {}\r\n",
                request.method,
                request.path,
                self.address,
                self.token,
                request.body.len()
            );
            for (name, value) in &request.headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            head.push_str(&request.body);
            stream
                .write_all(head.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut text = String::new();
            stream
                .read_to_string(&mut text)
                .await
                .map_err(|e| e.to_string())?;
            let (head, body) = text.split_once("\r\n\r\n").ok_or("no answer")?;
            let status = head
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or("no status")?;
            let replayed = head
                .to_ascii_lowercase()
                .contains("\r\nidempotent-replayed: true");
            Ok(Answer::new(status, replayed, body))
        }
    }

    #[test]
    fn the_async_remote_keeps_the_contract_against_lab_serve() {
        use crate::http::{ServeOptions, TicketServer};
        let server = TicketServer::start(ServeOptions {
            callers: vec!["alice=token-a".parse().unwrap()],
            admin_token: Some("admin-1".to_owned()),
            faults: true,
            workers: 8,
            ..ServeOptions::default()
        })
        .unwrap();
        let address = server.url().trim_start_matches("http://").parse().unwrap();
        let transport = Socket {
            address,
            token: "token-a",
        };
        let report = conformance::run(|| {
            let tool = Blocking::new(AsyncRemote::new(transport.clone()));
            tool.block_on(tool.tool().reset())??;
            Ok(tool)
        });
        assert!(report.passed(), "{report}");
        assert_eq!(report.not_covered().count(), 1, "{report}");
        let wrong = Socket {
            address,
            token: "not-a-token",
        };
        let tool = Blocking::new(AsyncRemote::new(wrong));
        let err = tool.create(Operation::example().request()).unwrap_err();
        assert!(matches!(err, Error::OutcomeUnknown { .. }), "{err}");
        assert!(err.to_string().contains("401"), "{err}");
    }
}
