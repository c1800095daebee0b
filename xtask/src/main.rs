//! Project automation that plain `cargo build` and `cargo test` cannot express, reached through the
//! `cargo xtask` alias.
//!
//! - `cargo xtask book`: run the seven scenarios, write `results.json`, render the book into `book/`.
//! - `cargo xtask checks`: only the checks of the book's sources that `book` and `test` run.
//! - `cargo xtask test`: `cargo test --workspace`, a check that every Rust block in the book ran as
//!   a doctest, then the book test (`mdbook test` through mdBook's library). `cargo xtask test
//!   --loaded` (or `LAB_TEST_LOADED=1`, for a script that runs the plain command) runs the same
//!   with every core, a disk and the process table kept busy beside it (see `load.rs`), to show
//!   that no test depends on how fast the machine is.
//! - `cargo xtask book-test`: the book test alone.
//! - `cargo xtask bench [--quick]`: every measurement of the performance chapter, into
//!   `bench.json`; `cargo xtask bench --http [--quick]` only the HTTP one, into its section.
//! - `cargo xtask copy-check`: what the copy button copies from every Rust block, compiled and run
//!   as a complete program against the lab (see `copyable.rs`); `cargo xtask test` runs it too.
//! - `cargo xtask book-deps`: fill `target/book-deps` for a plain `mdbook test -L target/book-deps`.
//! - `cargo xtask browser-check`: build the book, serve it on 127.0.0.1 and check every page in
//!   Chromium (see `browser.rs`); screenshots go to `target/browser-screenshots/`. With `--built`,
//!   the book `cargo xtask book` last rendered into `book/`, without building it again (CI runs it
//!   beside the test command, which rebuilds the lab with other features).
//! - `cargo xtask report-check`: the HTML reports of `lab check --target --html` the book shows,
//!   in Chromium at both widths and colour schemes (see `report_check.rs`); `browser-check` runs it
//!   too.
//! - `cargo xtask overflow-control REV`: the browser check's overflow measurement on the book of
//!   another revision (the first edition: `6570236`), for the negative control's record.
//! - `cargo xtask function-lengths [N]`: the N (default ten) longest functions in `lab/src` and
//!   `xtask/src`; the repository checks refuse one over `lengths::LIMIT` lines.
//! - `cargo xtask layers`: the check's layers (`lab/src/check/`), each with its invariant and
//!   files, and any import that climbs a layer or closes a circle in `lab/src`; the repository
//!   checks of `cargo xtask test` refuse one (see `layers.rs`). `cargo xtask layers DIR` reads
//!   another checkout's `lab/src` instead.
//! - `cargo xtask model-depth`: `lab model` at each bound the book names, on a release build,
//!   into `model-depth.json` (see `model_depth.rs`).
//! - `cargo xtask words`: each chapter's length in words as rendered (from `book/`), and the
//!   main path's against its targets (see `words.rs`); and that the book uses no glossary term
//!   before it is explained (see `terms.rs`).
//! - `cargo xtask preprocess`: the `lab` preprocessor, as the `mdbook` command line calls it.

mod bench;
mod bench_audit;
mod bench_http;
mod browser;
mod check_findings;
mod check_report;
mod checks;
mod claims;
mod conformance;
mod contract;
mod copyable;
mod deps;
mod diagram;
mod doctests;
mod facts;
mod figures;
mod grader;
mod layers;
mod lengths;
mod listings;
mod load;
mod map;
mod markdown;
mod model;
mod model_depth;
mod numbers;
mod plots;
mod postgres;
mod report_check;
mod sentences;
mod serve;
mod session;
mod shell;
mod terms;
mod timeline;
mod words;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use mdbook_driver::MDBook;
use mdbook_driver::config::Config;

const USAGE: &str = "usage: cargo xtask <book | checks | test [--loaded] | book-test | copy-check | book-deps | bench [--http | --audit] [--quick] | browser-check [--built] | report-check | overflow-control REV | model-depth | layers [DIR] | words | function-lengths [N] | preprocess [supports RENDERER]>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["book"] => book(),
        ["checks"] => checks::all(&root()).map(|()| println!("the book's sources: no problem")),
        ["test"] => test(std::env::var("LAB_TEST_LOADED").as_deref() == Ok("1")),
        ["test", "--loaded"] => test(true),
        ["load-hog", kind, scratch] => load::hog(kind, Path::new(scratch)),
        ["book-test"] => book_test(postgres::for_the_book().as_deref())
            .map(|blocks| println!("book: {blocks} passed, 0 failed")),
        ["copy-check"] => copyable::run(&root(), postgres::for_the_book().as_deref())
            .map(|blocks| println!("copy check: {blocks} passed, 0 failed")),
        ["bench"] => bench::run(&root(), false),
        ["bench", "--quick"] => bench::run(&root(), true),
        ["bench", "--http"] => bench::run_http(&root(), false),
        ["bench", "--http", "--quick"] => bench::run_http(&root(), true),
        ["bench", "--audit"] => bench::run_audit(&root(), false),
        ["bench", "--audit", "--quick"] => bench::run_audit(&root(), true),
        ["browser-check"] => browser::run(&root(), true),
        ["browser-check", "--built"] => browser::run(&root(), false),
        ["report-check"] => report_check::run(&root(), &browser::chromium()),
        ["overflow-control", revision] => browser::overflow_control(&root(), revision),
        ["book-deps"] => {
            deps::library_folder(&root()).map(|folder| println!("{}", folder.display()))
        }
        ["model-depth"] => model_depth::run(&root()),
        ["layers"] => layers::run(&root()),
        ["layers", other] => layers::run(Path::new(other)),
        ["words"] => terms::problems(&root()).and_then(|terms| words::run(&root(), &terms)),
        ["function-lengths"] => lengths::run(&root(), 10),
        ["function-lengths", most] => match most.parse() {
            Ok(most) => lengths::run(&root(), most),
            Err(_) => Err(anyhow::anyhow!(
                "function-lengths: `{most}` is not a count of functions"
            )),
        },
        ["preprocess", "supports", _renderer] => Ok(()),
        ["preprocess"] => figures::run_as_command(),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The repository root: the workspace folder above this crate.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits inside the workspace")
        .to_owned()
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The main job: a fresh lab run, then the book rendered from it.
fn book() -> Result<()> {
    let root = root();
    let status = cargo()
        .args(["run", "-q", "-p", "lab", "--", "--output", "results.json"])
        .current_dir(&root)
        .status()
        .context("running the lab")?;
    if !status.success() {
        bail!("the lab run failed ({status}); results.json and book/ are unchanged");
    }
    checks::all(&root)?;
    let index = build_book(&root)?;
    println!("The book is ready: open {}", index.display());
    Ok(())
}

/// Renders the book into a temporary folder, then swaps it into `book/`, so a failed build never
/// leaves a half-written book behind.
fn build_book(root: &Path) -> Result<PathBuf> {
    let mut book = load_book(root)?;
    let destination = root.join(&book.config.build.build_dir);
    // Scratch folders in target/ (the same file system as book/, so the moves are renames),
    // removed when dropped: a failed build leaves neither a half-written book nor a stray copy.
    let target = root.join("target");
    std::fs::create_dir_all(&target)?;
    let scratch = tempfile::Builder::new()
        .prefix("book-staging-")
        .tempdir_in(&target)
        .with_context(|| format!("making a scratch folder in {}", target.display()))?;
    let staging = scratch.path().join("book");
    let previous = scratch.path().join("previous");
    book.config.build.build_dir = staging.clone();
    book.build().context("rendering the book")?;
    // The listings' captions link to the lab files they show; the copies make those links work.
    listings::copy_sources(root, &staging)?;
    if destination.exists() {
        std::fs::rename(&destination, &previous)?;
    }
    std::fs::rename(&staging, &destination)
        .with_context(|| format!("moving the rendered book to {}", destination.display()))?;
    Ok(destination.join("index.html"))
}

/// The book as book.toml describes it, with the `lab` preprocessor run in this process instead of
/// through `cargo run`.
fn load_book(root: &Path) -> Result<MDBook> {
    let mut book = MDBook::load(root).context("loading the book")?;
    book.with_preprocessor(figures::LabFigures);
    Ok(book)
}

/// `cargo test --workspace`, the doctest coverage check, the repository checks, the book test and
/// the copy check; with `loaded`, beside a load on every core (see `load.rs`).
fn test(loaded: bool) -> Result<()> {
    let root = root();
    // Held to the end of the function: dropping it stops the load.
    let _load = if loaded {
        load::fewer_conformance_runs();
        Some(load::start(&root.join("target/load"))?)
    } else {
        None
    };
    let postgres = postgres::for_the_book();
    let cargo_counts = doctests::cargo_test(&root, postgres.as_deref())?;
    checks::all(&root)?;
    let blocks = book_test(postgres.as_deref())?;
    let copied = copyable::run(&root, postgres.as_deref())?;
    println!(
        "tests: {} passed, {} failed, {} ignored (cargo test) + {blocks} book blocks under mdbook test + {copied} copied blocks compiled and run",
        cargo_counts.passed, cargo_counts.failed, cargo_counts.ignored
    );
    println!("{} passed, 0 failed", cargo_counts.passed + blocks + copied);
    Ok(())
}

/// Runs every Rust block of the book through rustdoc, as `mdbook test` does, against a folder that
/// holds exactly one build of the lab and each of its dependencies. Returns how many blocks ran.
/// With `postgres_url`, the PostgreSQL chapter's example runs against that server.
fn book_test(postgres_url: Option<&str>) -> Result<usize> {
    let root = root();
    if let Some(url) = postgres_url {
        // SAFETY: xtask is single-threaded here; rustdoc, started next, inherits the variable.
        unsafe { std::env::set_var(postgres::URL_VARIABLE, url) };
    }
    let folder = deps::library_folder(&root)?;
    let folder = folder
        .to_str()
        .context("the library folder's path is not UTF-8")?;
    // rustdoc names a failing block by its line in the file it is given. Without preprocessors that
    // file is the chapter as written, so the line is the source line. Nothing is lost: the checks
    // forbid directives inside Rust blocks, so preprocessing never changes what a block compiles.
    let mut config = Config::from_disk(root.join("book.toml")).context("reading book.toml")?;
    config.build.use_default_preprocessors = false;
    let mut book = MDBook::load_with_config(&root, config).context("loading the book")?;
    book.test(vec![folder])
        .context("the book test failed (see the rustdoc output above)")?;
    let blocks = markdown::chapters(&root)?
        .iter()
        .map(|chapter| chapter.rust_blocks().count())
        .sum();
    Ok(blocks)
}
