//! `cargo xtask report-check` (also the last step of `cargo xtask browser-check`): the HTML
//! reports of `lab check --target --html` in a real browser.
//!
//! The pages are the book's copies in `src/check-report/`, each written by a test from a real
//! failing run against a middleware service (`lab/tests/it/reports.rs`). `xtask/browser/report.mjs`
//! loads each at 1280 and 390 px in the light and dark colour schemes: no console error, no
//! request but the page, no sideways scrolling, every failed point drawn, the dark scheme dark.
//! Screenshots go to `target/report-screenshots/`.
//!
//! Then a negative control: a damaged copy of a page (one diagram removed, a line that cannot
//! wrap, an image from another host) must fail, naming each fault.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::serve::Server;

/// The folder of the report pages the book shows.
pub const PAGES: &str = "src/check-report";

/// Runs the check on every page in [`PAGES`], then the negative control.
pub fn run(root: &Path, chromium: &Path) -> Result<()> {
    let folder = root.join(PAGES);
    let pages = pages_in(&folder)?;
    if pages.is_empty() {
        bail!("{} holds no report page", folder.display());
    }
    let shots = root.join("target").join("report-screenshots");
    let (ok, output) = node_report(root, chromium, &folder, &pages, &shots)?;
    print!("{output}");
    if !ok {
        bail!("the report pages failed the browser check (FAIL lines above)");
    }
    negative_control(root, chromium, &folder, &pages[0])
}

fn pages_in(folder: &Path) -> Result<Vec<String>> {
    let mut pages = Vec::new();
    for entry in
        std::fs::read_dir(folder).with_context(|| format!("reading {}", folder.display()))?
    {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".html") {
            pages.push(name);
        }
    }
    pages.sort();
    Ok(pages)
}

/// Serves `folder` and runs report.mjs on `pages`; returns whether it passed and its output.
fn node_report(
    root: &Path,
    chromium: &Path,
    folder: &Path,
    pages: &[String],
    shots: &Path,
) -> Result<(bool, String)> {
    let server = Server::start(folder)?;
    let output = Command::new("node")
        .current_dir(root.join("xtask").join("browser"))
        .arg("report.mjs")
        .arg("--base")
        .arg(format!("http://{}/", server.address))
        .arg("--pages")
        .arg(pages.join(","))
        .arg("--out")
        .arg(shots)
        .arg("--chromium")
        .arg(chromium)
        .output()
        .context("running node (is Node.js installed?)")?;
    drop(server);
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Ok((output.status.success(), text))
}

/// A copy of `page` with three faults must fail, each named.
fn negative_control(root: &Path, chromium: &Path, folder: &Path, page: &str) -> Result<()> {
    let html = std::fs::read_to_string(folder.join(page))?;
    let start = html
        .find("<figure class=\"seq\"")
        .context("the report page has no sequence diagram to remove")?;
    let end = start
        + html[start..]
            .find("</figure>")
            .context("an unclosed figure")?
        + "</figure>".len();
    let damaged = format!(
        "{}{}",
        &html[..start],
        &html[end..].replacen(
            "</main>",
            "<p style=\"white-space: nowrap\">a line that cannot wrap a line that cannot wrap a \
             line that cannot wrap a line that cannot wrap a line that cannot wrap</p>\
             <img src=\"https://example.com/tracker.png\" alt=\"\"></main>",
            1
        )
    );
    let scratch = tempfile::Builder::new()
        .prefix("report-control-")
        .tempdir_in(root.join("target"))?;
    std::fs::write(scratch.path().join(page), damaged)?;
    let shots: PathBuf = scratch.path().join("shots");
    let (ok, output) = node_report(root, chromium, scratch.path(), &[page.to_owned()], &shots)?;
    let named = |what: &str| {
        output
            .lines()
            .any(|l| l.starts_with("FAIL ") && l.contains(what))
    };
    if ok
        || !named("sequence diagrams for")
        || !named("has no sequence diagram")
        || !named("scrolls sideways")
        || !named("loads https://example.com/tracker.png")
    {
        bail!(
            "negative control: a report page with a diagram removed, a line that cannot wrap \
             and an outside image should fail, naming each; the check printed:\n{output}"
        );
    }
    println!(
        "report negative control: a removed diagram, a line that cannot wrap and an outside image fail the check, each named"
    );
    Ok(())
}
