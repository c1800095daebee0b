//! A PostgreSQL server for the book's PostgreSQL chapter, whose example runs against a real server.
//!
//! The server is found or started by the same code the lab's PostgreSQL tests use, compiled here
//! from its one source file rather than copied: `LAB_POSTGRES_URL` if set, else a throwaway
//! cluster from the installed server binaries, stopped and removed when this process exits; else a
//! loud skip (a failure under `LAB_REQUIRE_POSTGRES=1`).

#[allow(dead_code)] // the tests use more of the module than the book does
#[path = "../../lab/tests/it/postgres/server.rs"]
mod server;

pub use server::URL_VARIABLE;

/// A connection URL for the book's PostgreSQL example, or `None` after a loud skip line.
pub fn for_the_book() -> Option<String> {
    server::server("the book's PostgreSQL chapter").map(|server| server.url.to_owned())
}
