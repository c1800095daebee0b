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

/// A server for `cargo xtask bench`, held until the value is dropped.
pub struct BenchServer {
    /// Its connection URL.
    pub url: String,
    /// Which server it is and how it is set up, for `bench.json`.
    pub described: String,
    _server: server::Server,
}

/// The server the PostgreSQL tests use, for the benchmark, or `None` after a loud skip line.
pub fn for_the_bench() -> Option<BenchServer> {
    let given = std::env::var(URL_VARIABLE).is_ok_and(|url| !url.trim().is_empty());
    server::server("cargo xtask bench (PostgreSQL)").map(|server| BenchServer {
        url: server.url.to_owned(),
        described: if given {
            format!("the server named by {URL_VARIABLE}")
        } else {
            "the PostgreSQL tests' throwaway cluster on 127.0.0.1 (lab/tests/it/postgres/server.rs), \
             started with fsync=off, synchronous_commit=off and full_page_writes=off: the figures \
             are the statements' cost, not the disk's"
                .to_owned()
        },
        _server: server,
    })
}
