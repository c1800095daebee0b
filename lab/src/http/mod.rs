//! The lab across a real boundary: `lab serve` (the store behind HTTP on loopback), the client
//! adapter that runs the suite against it, the contract they share, and a proxy that loses
//! replies on the wire.

pub mod blocking;
pub mod client;
pub mod problem;
pub mod proxy;
pub mod record;
pub mod server;
pub mod sf;
pub mod wire;

pub use crate::service::retention;
pub use client::{HttpTarget, HttpTool};
pub use proxy::DroppingProxy;
pub use retention::{Clock, ManualClock, Retention, SystemClock};
#[cfg(feature = "postgres")]
pub use server::ServePostgres;
pub use server::{CallerToken, Limits, ServeOptions, StopSignals, TicketServer, check_token};
