//! The lab across a real boundary: `lab serve` (the store behind HTTP on loopback), the client
//! adapter that runs the suite against it, and the contract they share.

pub mod client;
pub mod contract;
pub mod server;

pub use client::{HttpTarget, HttpTool};
pub use server::{CallerToken, ServeOptions, TicketServer};
