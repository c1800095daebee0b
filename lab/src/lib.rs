//! # Tool Retries Lab
//!
//! A tool call that creates something can succeed while its reply is lost. A caller that retries
//! blindly then creates a duplicate. This crate shows the failure and the fix: an operation key
//! that names one intended action, stored in the same transaction as the action's effect, so that a
//! retry replays the saved result, a changed payload under the same key is rejected, and concurrent
//! callers converge on one effect.
//!
//! ```
//! use lab::{CreateRequest, Error, Fault, OperationKey, Outcome, Payload, Scope, SqliteStore, TicketTool};
//! use serde_json::json;
//!
//! let store = SqliteStore::temporary()?;
//! let scope = Scope::new("support-agent", "create_ticket")?;
//! let key = OperationKey::try_from("approved-ticket-001")?;
//! let payload = Payload::new(json!({"title": "Investigate a queue backlog", "priority": "normal"}))?;
//! let request = CreateRequest::keyed(&scope, &key, &payload);
//!
//! // The ticket is committed, but the reply never arrives.
//! let lost = store.create(request.with_fault(Fault::LoseReply));
//! assert!(matches!(lost, Err(Error::OutcomeUnknown { .. })));
//!
//! // The retry carries the same key and gets the same ticket back; nothing new is written.
//! assert_eq!(store.create(request)?, Outcome::Replayed(1.into()));
//! assert_eq!(store.count_tickets()?, 1);
//!
//! // The same key with another payload is a different intention: rejected, nothing written.
//! let changed = payload.with_field("priority", json!("urgent"));
//! let conflict = store.create(CreateRequest::keyed(&scope, &key, &changed));
//! assert!(matches!(conflict, Err(Error::PayloadConflict { .. })));
//! assert_eq!(store.count_tickets()?, 1);
//! # Ok::<(), lab::Error>(())
//! ```
//!
//! ## Where things are
//!
//! - [`key`]: [`OperationKey`] and [`Scope`], the identity of one intended operation.
//! - [`payload`]: [`Payload`], canonical JSON and how two payloads are compared.
//! - [`tool`]: [`TicketTool`], the one trait every backend and adapter implements; [`Outcome`] and
//!   [`Fault`].
//! - [`sqlite`]: [`SqliteStore`], the embedded store.
//! - `postgres` (feature `postgres`): `PostgresStore`, the same tables on a PostgreSQL server.
//! - [`suite`]: the seven scenarios, written once against [`TicketTool`].
//! - [`remote`]: [`Remote`](remote::Remote), a [`TicketTool`] that speaks the lab's HTTP contract
//!   through any HTTP client (a [`Transport`](remote::Transport) the adapter's author writes).
//! - `async_tool` (feature `http`): `AsyncTicketTool`, the trait for an async adapter, and
//!   `Blocking`, the bridge that runs the suite and the conformance check against one.
//! - [`sim`]: `lab simulate`, seeded histories with faults, the invariant checker, the
//!   anti-patterns it catches, and the fail-at-step-N sweep.
//! - `model` (feature `model`, on by default through `cli`): `lab model`, the runner and the
//!   service as a Stateright model, every interleaving explored to a bound.
//! - `trace` (feature `bench`): `Traced`, a tool adapter that records each call's moments for
//!   the book's timelines.
//! - [`fixture`] and [`evidence`]: the input operation and the `results.json` a run writes.
//! - `bench` (feature `bench`): `lab bench`, side-by-side measurements, and `bench::percentile`.
//! - `throughput` (feature `bench`): keyed create against plain insert at several numbers of
//!   clients, for any tool.
//! - `http` (feature `http`, on by default through `cli`): `lab serve`, the store behind HTTP on
//!   loopback, and `HttpTool`, the client adapter that runs the suite against it.
//! - `mcp` (feature `mcp`, on by default through `cli`): `lab mcp`, the ticket tools over the
//!   Model Context Protocol (stdio and Streamable HTTP), and `McpTool`, its client adapter.
//! - `check` (feature `http`): `lab check --target FILE`, a black-box check of any HTTP service
//!   that takes an operation key, graded by the IETF draft and the lab's contract; with feature
//!   `mcp`, a file with an `[mcp]` section checks an MCP server instead (over stdio, a command
//!   the check starts; over Streamable HTTP, a loopback URL), with MCP's own points: a lost
//!   result, a cancelled call, a reconnect, the tool's annotations.
//! - [`runner`]: `lab runner`, a durable caller that saves each operation before sending it and
//!   resumes what is unfinished.
//! - [`backend`]: which store the `lab` command runs against; [`database_file`]: whether a path
//!   can be the SQLite file a command opens.
//! - [`contract`]: the retry contract as data: every promise with a stable id, and which point of
//!   which checker covers it; every report names the ids beside its own point names.
//! - [`Error`]: the one error type.
//!
//! ## Features
//!
//! `lab = { default-features = false }` is the core an adapter author needs: [`key`],
//! [`payload`], [`tool`], the store ([`sqlite`]), [`suite`], [`conformance`] and the simulator
//! ([`sim`]), with the runner, fixture, evidence and backend choice beside them; no argument
//! parser, no HTTP crate, no PostgreSQL client, no benchmark code. Each feature adds one part:
//!
//! | feature | adds |
//! | --- | --- |
//! | `cli` (default) | the `lab` binary (clap), and with it `bench`, `http`, `mcp` and `model` |
//! | `bench` | `bench`, `throughput` and `trace`: `lab bench` and the book's traces (no new crate) |
//! | `http` | `http` (server, client, proxy) and `check` (the black-box check) |
//! | `mcp` | `mcp`: the ticket tools over MCP and their client adapter; implies `http` |
//! | `model` | `model`: the Stateright model of the runner and the service |
//! | `postgres` | `postgres`: the PostgreSQL store |

#[cfg(feature = "http")]
pub mod async_tool;
#[cfg(feature = "http")]
pub mod audit;
pub mod backend;
pub mod base_url;
#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "http")]
pub mod check;
pub mod conformance;
pub mod contract;
pub mod database_file;
pub mod error;
pub mod evidence;
pub mod fixture;
#[cfg(feature = "http")]
pub mod http;
pub mod key;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "model")]
pub mod model;
pub mod payload;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod remote;
pub mod runner;
#[cfg(feature = "http")]
pub(crate) mod service;
pub mod sim;
pub mod sqlite;
pub mod suite;
#[cfg(feature = "bench")]
pub mod throughput;
pub mod tool;
#[cfg(feature = "bench")]
pub mod trace;

#[cfg(doctest)]
mod book;

#[cfg(feature = "postgres")]
pub use self::postgres::{PostgresOptions, PostgresStore};
pub use base_url::BaseUrl;
pub use error::{Error, FieldError, Result};
pub use evidence::Evidence;
pub use key::{OperationKey, Scope};
pub use payload::Payload;
/// Re-exported so examples and adapters use the same JSON types as the lab.
pub use serde_json;
pub use sqlite::{Coordination, SqliteStore, StoreOptions, Synchronous};
pub use suite::{Observations, Operation};
pub use tool::{CreateRequest, Fault, Outcome, Step, TicketId, TicketTool};
