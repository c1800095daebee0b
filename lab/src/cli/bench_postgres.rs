//! `lab bench-postgres`: keyed create against plain insert, replay against plain select and the
//! same-key race on PostgreSQL, at several client counts.

use std::path::PathBuf;

use clap::Args;
use lab::evidence::AtomicFile;
use lab::throughput::ThroughputPlan;

use super::bad_arguments;
use super::run::{BackendName, store_backend};

/// `lab bench-postgres`'s arguments.
#[derive(Args)]
pub struct BenchPostgresArgs {
    /// PostgreSQL connection URL (e.g. postgresql://user@127.0.0.1:5432/db)
    #[arg(long, value_name = "URL")]
    pub database_url: String,
    /// Creates per measurement, shared among the clients
    #[arg(long, default_value_t = ThroughputPlan::default().calls)]
    pub calls: u32,
    /// Numbers of concurrent clients, one table row each
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    pub clients: Vec<usize>,
    /// Also write the measurements as JSON here (atomically)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Measures and prints the table. `lock_timeout_ms` is the top level's `--lock-timeout-ms`.
///
/// # Errors
/// Bad input; PostgreSQL support not built in; a server that fails.
pub fn exec(args: BenchPostgresArgs, lock_timeout_ms: u64) -> lab::Result<()> {
    let backend = store_backend(
        BackendName::Postgres,
        Some(args.database_url),
        lock_timeout_ms,
    )?;
    if args.calls == 0 || args.clients.is_empty() || args.clients.contains(&0) {
        return Err(bad_arguments(
            "--calls and every number in --clients must be at least 1",
        ));
    }
    let output = args.json.as_deref().map(AtomicFile::create).transpose()?;
    let plan = ThroughputPlan {
        clients: args.clients,
        calls: args.calls,
    };
    let report = backend.compare_throughput(&plan)?;
    println!("{report}");
    if let Some(output) = output {
        let text = format!("{:#}\n", report.to_json());
        output.commit(text.as_bytes())?;
    }
    Ok(())
}
