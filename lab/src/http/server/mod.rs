//! `lab serve`: the ticket store behind HTTP on loopback, on axum and hyper.
//!
//! A tokio runtime with two threads runs the connections; the synchronous store runs on its own
//! threads, each owning one connection ([`store_threads`]). The limits that hold for every
//! request, authenticated or not, are hyper settings and tower layers around the router, set in
//! one place ([`Limits`]); the handlers only speak the contract ([`super::wire`]), which is
//! also served, for machines, as OpenAPI at `GET /openapi.json`.

mod listener;
mod routes;

pub(crate) use listener::accept_until_stopped;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;

use super::wire;
use crate::error::{Error, Result};
use crate::service::retention::{Clock, Pruned, Retention};
use crate::service::{ServiceOptions, ServiceStore, StoreThreads, TicketService};
use crate::tool::TicketTool;

pub use crate::service::{CallerToken, MAX_TOKEN_BYTES, check_token};

/// The machine-readable contract as written, with the test-only parts; the server publishes it
/// at `GET /openapi.json` without them unless started with `--faults`.
pub const OPENAPI: &str = include_str!("../openapi.json");

/// The limits that hold for every connection and request, with or without a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; one more is answered 503 and closed.
    pub connections: usize,
    /// How long a connection may take to send a request's headers (also the idle time allowed
    /// between requests on a kept-alive connection); then it is closed.
    pub header_read: Duration,
    /// How long a body may pause between two pieces; then the request gets 408.
    pub body_idle: Duration,
    /// How long one request may take from its headers to its answer; then it gets 408.
    pub request: Duration,
    /// The most header lines a request may carry; more get 431.
    pub headers: usize,
    /// The most bytes the request line and headers may take; more get 431.
    pub header_bytes: usize,
    /// How long a stopping server waits for the requests in progress.
    pub shutdown_grace: Duration,
    /// How long a request whose key's first request is still in progress waits for it (then
    /// replays its record) before it is answered 409. It holds a store thread meanwhile.
    pub in_progress_wait: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 256,
            header_read: Duration::from_secs(10),
            body_idle: Duration::from_secs(5),
            request: Duration::from_secs(30),
            headers: 64,
            header_bytes: 16 * 1024,
            shutdown_grace: Duration::from_secs(10),
            in_progress_wait: Duration::from_secs(1),
        }
    }
}

/// How to start a [`TicketServer`].
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// The port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The SQLite file; `None` uses a temporary store, removed when the [`TicketServer`] is
    /// dropped (not when the process is killed).
    pub database: Option<PathBuf>,
    /// The callers and their tokens.
    pub callers: Vec<CallerToken>,
    /// The token of the `/admin/...` endpoints; `None` turns them off (404).
    pub admin_token: Option<String>,
    /// Honour the test-only `Lab-Fault` header and serve `POST /unkeyed-tickets`.
    pub faults: bool,
    /// Store threads, each with its own store connection (at least 1).
    pub workers: usize,
    /// Prune replay records after this window, leaving tombstones; `None` keeps them forever.
    pub retention: Option<Retention>,
    /// Where retention reads the time; `None` is the system clock.
    pub clock: Option<Arc<dyn Clock>>,
    /// Connection and request limits; `None` is [`Limits::default`].
    pub limits: Option<Limits>,
    /// Serve a PostgreSQL store instead of SQLite (`database` is then unused). Several servers
    /// may serve one schema; a key's claim is then the database's unique index.
    #[cfg(feature = "postgres")]
    pub postgres: Option<ServePostgres>,
}

/// Where a server finds its PostgreSQL store.
#[cfg(feature = "postgres")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServePostgres {
    /// The connection URL, such as `postgresql://lab@127.0.0.1:5432/tickets`.
    pub url: String,
    /// The schema that holds the tables, created if missing.
    pub schema: String,
}

/// A running `lab serve`. Dropping it stops the server after the requests in progress.
pub struct TicketServer {
    runtime: Option<tokio::runtime::Runtime>,
    stop: watch::Sender<bool>,
    accepting: Option<tokio::task::JoinHandle<()>>,
    stores: Arc<StoreThreads>,
    pruner: Option<JoinHandle<()>>,
    pruner_stopping: Arc<AtomicBool>,
    port: u16,
    service: Arc<TicketService>,
}

impl TicketServer {
    /// Checks the options, opens the store, binds 127.0.0.1 and starts serving.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] without callers, with a token given twice, or with an empty,
    /// blank or malformed caller or admin token (naming the option); [`Error::Store`] or
    /// [`Error::TemporaryFolder`] if the store cannot be opened; [`Error::Listen`] if the port
    /// cannot be bound; [`Error::Io`] if a thread or the runtime cannot start.
    pub fn start(options: ServeOptions) -> Result<TicketServer> {
        let limits = options.limits.unwrap_or_default();
        let service = Arc::new(TicketService::new(&ServiceOptions {
            callers: Some(&options.callers),
            admin_token: options.admin_token.as_deref(),
            faults: options.faults,
            in_progress_wait: limits.in_progress_wait,
            retention: options.retention,
            dated: false,
            clock: options.clock.clone(),
        })?);
        let stores = Arc::new(StoreThreads::start(open_connections(&options, &service)?)?);

        let (listener, address) = bind_loopback(options.port)?;
        let port = address.port();
        let address = address.to_string();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lab-serve")
            .enable_all()
            .build()
            .map_err(|source| Error::Io {
                action: "starting the server's runtime".to_owned(),
                source,
            })?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(|source| Error::Listen {
                address,
                source: Box::new(source),
            })?
        };
        let app = routes::App {
            service: service.clone(),
            stores: stores.clone(),
            openapi: published_openapi(options.faults).into(),
        };
        let router = routes::router(app, &limits);
        let (stop, stopped) = watch::channel(false);
        let accepting = runtime.spawn(listener::accept_until_stopped(
            listener, router, limits, stopped,
        ));

        let pruner_stopping = Arc::new(AtomicBool::new(false));
        let pruner = match options.retention {
            Some(retention) => Some(start_pruner(&service, retention, &pruner_stopping)?),
            None => None,
        };
        Ok(TicketServer {
            runtime: Some(runtime),
            stop,
            accepting: Some(accepting),
            stores,
            pruner,
            pruner_stopping,
            port,
            service,
        })
    }

    /// Runs one pruning pass now, at the clock's time (the periodic pass does the same).
    ///
    /// # Errors
    /// [`Error::InputInvalid`] when the server was started without retention;
    /// [`Error::Store`] on a database error.
    pub fn prune(&self) -> Result<Pruned> {
        self.service.prune()
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Serves until SIGTERM or SIGINT (Ctrl-C), then stops: no new connections, the requests in
    /// progress are answered, the store's connections close.
    ///
    /// # Errors
    /// [`Error::Io`] if the signal handlers cannot be installed.
    pub fn wait(self) -> Result<()> {
        self.wait_until(StopSignals::install()?)
    }

    /// Like [`TicketServer::wait`], with handlers installed earlier: a program that announces
    /// its address installs them first, so a SIGTERM sent as soon as the address is read stops
    /// the server cleanly instead of killing the process.
    ///
    /// # Errors
    /// [`Error::Io`] if waiting for the signals fails.
    pub fn wait_until(mut self, signals: StopSignals) -> Result<()> {
        signals.wait()?;
        self.shut_down();
        Ok(())
    }

    fn shut_down(&mut self) {
        let _ = self.stop.send(true);
        if let (Some(runtime), Some(accepting)) = (&self.runtime, self.accepting.take()) {
            // The accept loop ends after the requests in progress, bounded by the grace period.
            let _ = runtime.block_on(accepting);
        }
        // Queued store work finishes before the threads end and close their connections.
        self.stores.stop();
        self.pruner_stopping.store(true, Ordering::SeqCst);
        if let Some(pruner) = self.pruner.take() {
            let _ = pruner.join();
        }
        self.service.close_pruner();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

impl Drop for TicketServer {
    /// Stops the server after the requests in progress.
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// One store connection per store thread.
fn open_connections(
    options: &ServeOptions,
    service: &TicketService,
) -> Result<Vec<Box<dyn ServiceStore>>> {
    let threads = options.workers.max(1);
    #[cfg(feature = "postgres")]
    if let Some(postgres) = &options.postgres {
        if options.retention.is_some() {
            return Err(Error::InputInvalid {
                subject: "--retention-seconds".to_owned(),
                problem: "retention is kept in the SQLite file; not with --backend postgres"
                    .to_owned(),
            });
        }
        return (0..threads)
            .map(|_| {
                crate::service::PostgresServed::open(&postgres.url, &postgres.schema)
                    .map(|store| Box::new(store) as Box<dyn ServiceStore>)
            })
            .collect();
    }
    let store = service.open_sqlite(options.database.as_deref())?;
    // The store threads hold their own connections, and through them the temporary folder.
    (0..threads)
        .map(|_| {
            store
                .connect()
                .map(|store| Box::new(store) as Box<dyn ServiceStore>)
        })
        .collect()
}

/// SIGTERM and SIGINT, caught from the moment [`StopSignals::install`] returns: from then on
/// neither kills the process, and [`StopSignals::wait`] returns once either has arrived (also
/// when it arrived before the wait began).
pub struct StopSignals {
    runtime: tokio::runtime::Runtime,
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Installs the handlers.
    ///
    /// # Errors
    /// [`Error::Io`] if the runtime or the handlers cannot be set up.
    pub fn install() -> Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        let io = |source| Error::Io {
            action: "installing the SIGTERM and SIGINT handlers".to_owned(),
            source,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(io)?;
        let (terminate, interrupt) = {
            let _entered = runtime.enter();
            (
                signal(SignalKind::terminate()).map_err(io)?,
                signal(SignalKind::interrupt()).map_err(io)?,
            )
        };
        Ok(StopSignals {
            runtime,
            terminate,
            interrupt,
        })
    }

    /// Waits until SIGTERM or SIGINT has arrived.
    ///
    /// # Errors
    /// None today; the signature leaves room for a platform that can fail here.
    pub fn wait(mut self) -> Result<()> {
        let (terminate, interrupt) = (&mut self.terminate, &mut self.interrupt);
        self.runtime.block_on(async {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
        });
        Ok(())
    }
}

/// The OpenAPI description as published: without `--faults`, the test-only header and endpoint
/// are taken out, so a reader of the public contract never sees them.
fn published_openapi(faults: bool) -> String {
    if faults {
        return OPENAPI.to_owned();
    }
    let Ok(mut spec) = serde_json::from_str::<serde_json::Value>(OPENAPI) else {
        // The file is part of this crate and a test parses it; serve it as written if not.
        return OPENAPI.to_owned();
    };
    if let Some(paths) = spec["paths"].as_object_mut() {
        paths.remove("/unkeyed-tickets");
        for operation in paths.values_mut().filter_map(|path| path.as_object_mut()) {
            for details in operation.values_mut() {
                // `get_mut`, not indexing: `details["parameters"]` would insert a null where an
                // operation has none, and the published document would stop being valid OpenAPI.
                if let Some(parameters) = details
                    .get_mut("parameters")
                    .and_then(serde_json::Value::as_array_mut)
                {
                    parameters.retain(|parameter| {
                        parameter["name"] != wire::FAULT_HEADER
                            && parameter["$ref"] != "#/components/parameters/LabFault"
                    });
                }
            }
        }
    }
    if let Some(parameters) = spec["components"]["parameters"].as_object_mut() {
        parameters.remove("LabFault");
    }
    spec.to_string()
}

/// Binds `127.0.0.1:port`, non-blocking for tokio, and says where it is bound (0 picks a port).
///
/// # Errors
/// [`Error::Listen`] when the address cannot be bound.
pub(crate) fn bind_loopback(port: u16) -> Result<(std::net::TcpListener, std::net::SocketAddr)> {
    let address = format!("127.0.0.1:{port}");
    std::net::TcpListener::bind(&address)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .and_then(|listener| listener.local_addr().map(|bound| (listener, bound)))
        .map_err(|source| Error::Listen {
            address,
            source: Box::new(source),
        })
}

/// Starts the thread that prunes periodically until `stopping`.
fn start_pruner(
    service: &Arc<TicketService>,
    retention: Retention,
    stopping: &Arc<AtomicBool>,
) -> Result<JoinHandle<()>> {
    let (service, stopping) = (service.clone(), stopping.clone());
    std::thread::Builder::new()
        .name("lab-serve-pruner".to_owned())
        .spawn(move || prune_periodically(&service, retention, &stopping))
        .map_err(|source| Error::Io {
            action: "starting the pruning thread".to_owned(),
            source,
        })
}

/// Prunes every half window (at most every minute), checking for the stop once a second.
fn prune_periodically(service: &TicketService, retention: Retention, stopping: &AtomicBool) {
    let every = (retention.records / 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut waited = Duration::ZERO;
    while !stopping.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
        waited += Duration::from_millis(200);
        if waited >= every {
            waited = Duration::ZERO;
            if let Err(err) = service.prune() {
                eprintln!("lab serve: pruning failed: {err}");
            }
        }
    }
}
