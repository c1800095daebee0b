//! The ticket tools over the Model Context Protocol (feature `mcp`): `lab mcp` serves them over
//! stdio or Streamable HTTP on loopback, on rmcp (the official Rust SDK), and [`McpTool`] is the
//! client adapter that runs the suite through them.

pub mod client;
pub mod grader;
pub mod http_client;
pub mod server;
pub mod wire;

pub use client::{HttpEndpoint, McpTool};
pub use server::{McpOptions, McpServer, Transport};
