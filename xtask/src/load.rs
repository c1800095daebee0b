//! `cargo xtask test --loaded`: the test command with the machine kept busy beside it, so that a
//! test whose verdict or pinned text depends on how fast a process runs fails here, where its
//! author can see it, and not on a loaded CI runner.
//!
//! The load is what once made such a test fail in CI: every core busy computing, a disk busy
//! with synchronous writes, and processes starting all the time. Each part runs in a process of
//! its own (this binary again, with the hidden `load-hog` subcommand) at the tests' priority, and
//! ends when the test command ends or, should xtask itself be killed, within a tenth of a second of
//! noticing that its parent is gone.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The kinds of load, as `load-hog KIND` takes them.
const CPU: &str = "cpu";
const DISK: &str = "disk";
const SPAWN: &str = "spawn";

/// The hog processes, killed when dropped.
pub struct Load(Vec<Child>);

impl Drop for Load {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts one CPU hog per core, one disk hog writing in `scratch`, and one process starter.
///
/// # Errors
/// When this binary cannot be started again or the scratch folder cannot be made.
pub fn start(scratch: &Path) -> Result<Load> {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    std::fs::create_dir_all(scratch)
        .with_context(|| format!("making the load's scratch folder {}", scratch.display()))?;
    let me = std::env::current_exe().context("finding the xtask binary to start its load")?;
    let mut kinds = vec![CPU; cores];
    kinds.extend([DISK, SPAWN]);
    let mut load = Load(Vec::new());
    for kind in kinds {
        let child = Command::new(&me)
            .args(["load-hog", kind])
            .arg(scratch)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting the {kind} load"))?;
        load.0.push(child);
    }
    eprintln!(
        "load: {cores} CPU hog(s), a disk writer with fsync in {}, a process starter; \
         they stop with the tests",
        scratch.display()
    );
    Ok(load)
}

/// The conformance tests that count catches run the whole suite ten times per adapter
/// (`LAB_CONFORMANCE_RUNS`). Its stress point needs two callers on two cores at once, round after
/// round; with every core computing beside it, each round waits for the scheduler, so a run takes
/// seconds instead of hundreds of milliseconds and those tests took over twenty minutes. Loaded,
/// they run three times unless the variable says otherwise: the verdicts they assert are the same,
/// and the plain test command still counts ten.
pub fn fewer_conformance_runs() {
    const RUNS: &str = "LAB_CONFORMANCE_RUNS";
    if std::env::var_os(RUNS).is_none() {
        // SAFETY: xtask is single-threaded here; the test binaries it starts inherit the variable.
        unsafe { std::env::set_var(RUNS, "3") };
    }
    eprintln!(
        "load: {RUNS}={}: the conformance tests that count catches run the suite that many times \
         per adapter (ten in the plain test command)",
        std::env::var(RUNS).unwrap_or_default()
    );
}

/// The hidden `load-hog KIND SCRATCH`: runs one kind of load until its parent is gone.
///
/// # Errors
/// An unknown kind, or the disk hog's file cannot be written.
pub fn hog(kind: &str, scratch: &Path) -> Result<()> {
    let parent = std::os::unix::process::parent_id();
    let orphaned = || std::os::unix::process::parent_id() != parent;
    match kind {
        CPU => {
            let mut x: u64 = 1;
            while !orphaned() {
                let until = Instant::now() + Duration::from_millis(100);
                while Instant::now() < until {
                    x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005) ^ 1);
                }
            }
        }
        DISK => {
            let path = scratch.join(format!("disk-hog-{}", std::process::id()));
            let block = vec![0x5a_u8; 1 << 20];
            while !orphaned() {
                // Rewritten from the start each round, so it never holds more than 16 MiB.
                let mut file = std::fs::File::create(&path)
                    .with_context(|| format!("writing {}", path.display()))?;
                for _ in 0..16 {
                    file.write_all(&block)?;
                    file.sync_data()?;
                }
            }
            let _ = std::fs::remove_file(&path);
        }
        SPAWN => {
            while !orphaned() {
                let _ = Command::new("true").status();
            }
        }
        other => bail!("load-hog: unknown kind `{other}` (cpu, disk or spawn)"),
    }
    Ok(())
}
