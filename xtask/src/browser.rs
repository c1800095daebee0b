//! `cargo xtask browser-check`: the rendered book as readers meet it, in a real browser.
//!
//! Builds the book, checks every external link by its syntax against a list of allowed hosts (never
//! fetched: there is no network here), serves `book/` on 127.0.0.1, and runs
//! `xtask/browser/check.mjs`, which drives Debian's Chromium through `playwright-core`: every page
//! without console errors or failed requests, every internal link and anchor resolving, every
//! diagram visible, search, the dark themes, previous/next order, the print view, and a screenshot
//! of every chapter in both themes in `target/browser-screenshots/`.
//!
//! Then a negative control: the same check on a copy of the book with one chapter removed and one
//! anchor broken must fail and name the pages. A check that cannot fail proves nothing.
//!
//! Without Chromium (or without `npm ci` in `xtask/browser`) the check prints a SKIPPED line, and
//! fails when `LAB_REQUIRE_BROWSER=1`, as CI sets it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::serve::Server;

/// Hosts the book may link to. A link elsewhere is a mistake until someone adds the host here and
/// the source to SOURCES.md.
const ALLOWED_HOSTS: &[&str] = &[
    "apple.github.io",
    "aws.amazon.com",
    "datatracker.ietf.org",
    "doc.rust-lang.org",
    "docs.rs",
    "docs.stripe.com",
    "github.com",
    "modelcontextprotocol.io",
    "rosettacode.org",
    "rust-lang.github.io",
    "www.postgresql.org",
    "www.rfc-editor.org",
    "www.sqlite.org",
];

/// Where Debian's `chromium` package puts the browser.
const CHROMIUM: &str = "/usr/bin/chromium";

/// The browser the checks drive: `LAB_CHROMIUM`, or Debian's.
pub fn chromium() -> PathBuf {
    std::env::var_os("LAB_CHROMIUM").map_or_else(|| PathBuf::from(CHROMIUM), Into::into)
}

/// The chapter the negative control removes, and the broken anchor it adds to another page.
const REMOVED_CHAPTER: &str = "operation-key.html";
const BROKEN_ON: &str = "glossary.html";
const BROKEN_LINK: &str = "idempotency.html#no-such-anchor";
/// The synthetic page of the overflow control: a copy of a chapter with a block and a table that
/// cannot fit.
const WIDE_FROM: &str = "glossary.html";
const WIDE_PAGE: &str = "overflow-control.html";

/// The overflow check on another revision's book (`cargo xtask overflow-control REV`): its
/// sources are taken with `git archive` into a scratch folder under `target/` (removed when
/// done, on an error too), rendered with this build's mdBook and preprocessor, served, and
/// measured; screenshots go to `target/overflow-control-shots/`. Prints the FAIL lines and their
/// count; fails only when the book cannot be built or measured.
pub fn overflow_control(root: &Path, revision: &str) -> Result<()> {
    let scratch = scratch_folder(root, "overflow-control-")?;
    let folder = scratch.path();
    let archive = Command::new("git")
        .current_dir(root)
        .args(["archive", "--format=tar", revision])
        .args([
            "book.toml",
            "src",
            "theme",
            "lab",
            "results.json",
            "bench.json",
            "fixture.json",
            "Cargo.toml",
        ])
        .output()
        .context("running git archive")?;
    if !archive.status.success() {
        bail!(
            "git archive {revision} failed: {}",
            String::from_utf8_lossy(&archive.stderr)
        );
    }
    let mut tar = Command::new("tar")
        .current_dir(folder)
        .arg("-x")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .context("running tar")?;
    tar.stdin
        .take()
        .context("tar's input")?
        .write_all(&archive.stdout)?;
    if !tar.wait()?.success() {
        bail!("tar could not unpack the archive of {revision}");
    }
    let mut book = crate::load_book(folder)?;
    let rendered = folder.join("book");
    book.config.build.build_dir = rendered.clone();
    book.build()
        .context("rendering the other revision's book")?;
    let chromium = chromium();
    let server = Server::start(&rendered)?;
    let (_, output) = node_check(
        &root.join("xtask").join("browser"),
        &chromium,
        &server,
        &rendered,
        &root.join("target").join("overflow-control-shots"),
        &["--overflow-only".as_ref()],
    )?;
    drop(server);
    print!("{output}");
    if !output.lines().any(|l| l.starts_with("overflow: ")) {
        bail!("the overflow measurement did not finish (its output is above)");
    }
    let fails: Vec<&str> = output.lines().filter(|l| l.starts_with("FAIL ")).collect();
    let at = |width: &str| {
        fails
            .iter()
            .filter(|l| l.contains(&format!("overflow at {width} px")))
            .count()
    };
    let pages: std::collections::BTreeSet<&str> = fails
        .iter()
        .filter_map(|l| l.strip_prefix("FAIL ")?.split(':').next())
        .collect();
    println!(
        "overflow control on {revision}: {} overflowing elements ({} at 1280 px, {} at 390 px, both themes) on {} pages",
        fails.len(),
        at("1280"),
        at("390"),
        pages.len()
    );
    Ok(())
}

/// The whole check. Prints its final line last: `browser: N passed, 0 failed`.
pub fn run(root: &Path, rebuild: bool) -> Result<()> {
    let book = root.join("book");
    if rebuild {
        crate::book()?;
    } else if !book.join("index.html").is_file() {
        bail!(
            "browser-check --built: no rendered book at {} (run `cargo xtask book` first)",
            book.display()
        );
    }
    let external = external_links(&book, &std::fs::read_to_string(root.join("SOURCES.md"))?)?;
    println!("external links: {external} checked by syntax and host (not fetched)");

    let required = std::env::var("LAB_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
    let chromium = chromium();
    let script_dir = root.join("xtask").join("browser");
    let missing = if !chromium.exists() {
        Some(format!(
            "no Chromium at {} (apt-get install chromium)",
            chromium.display()
        ))
    } else if !script_dir
        .join("node_modules")
        .join("playwright-core")
        .exists()
    {
        Some("no playwright-core (run `npm ci` in xtask/browser)".to_owned())
    } else {
        None
    };
    if let Some(why) = missing {
        println!("!!!!!!!! SKIPPED: the browser check did not run: {why} !!!!!!!!");
        if required {
            bail!("LAB_REQUIRE_BROWSER=1, and the browser check could not run: {why}");
        }
        return Ok(());
    }

    let shots = root.join("target").join("browser-screenshots");
    if shots.exists() {
        std::fs::remove_dir_all(&shots).with_context(|| format!("removing {}", shots.display()))?;
    }
    std::fs::create_dir_all(&shots)?;
    // A folder of its own: the copy check of `cargo xtask test`, which CI runs beside this one,
    // empties its own.
    let copied = crate::copyable::write_for_browser(root, &root.join("target/browser-copied"))?;
    let server = Server::start(&book)?;
    let (ok, output) = node_check(
        &script_dir,
        &chromium,
        &server,
        &book,
        &shots,
        &["--copied".as_ref(), copied.as_os_str()],
    )?;
    drop(server);
    print!("{output}");
    if !ok {
        bail!("the browser check found problems (FAIL lines above)");
    }

    negative_control(root, &book, &script_dir, &chromium)?;
    // The report pages the book shows, which the chapter checks above leave to their own check.
    crate::report_check::run(root, &chromium)?;
    let pages = html_files(&book)?.len();
    println!("browser: {} passed, 0 failed", pages + external + 1);
    Ok(())
}

/// Runs check.mjs against a served book. Returns whether it passed, and what it printed.
fn node_check(
    script_dir: &Path,
    chromium: &Path,
    server: &Server,
    book: &Path,
    shots: &Path,
    extra: &[&std::ffi::OsStr],
) -> Result<(bool, String)> {
    let mut command = Command::new("node");
    command
        .current_dir(script_dir)
        .arg("check.mjs")
        .arg("--base")
        .arg(format!("http://{}/", server.address))
        .arg("--book")
        .arg(book)
        .arg("--out")
        .arg(shots)
        .arg("--chromium")
        .arg(chromium);
    command.args(extra);
    let output = command
        .output()
        .context("running node (is Node.js installed?)")?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Ok((output.status.success(), text))
}

/// The control's damage to a copy of the book: a broken link on [`BROKEN_ON`], and a page
/// ([`WIDE_PAGE`]) with a block, a table, a listing and a chart that cannot fit.
fn damage(copy: &Path) -> Result<()> {
    let page = copy.join(BROKEN_ON);
    let html = std::fs::read_to_string(&page)?;
    let broken = html.replacen(
        "</main>",
        &format!("<p><a href=\"{BROKEN_LINK}\">broken</a></p></main>"),
        1,
    );
    if broken == html {
        bail!("{BROKEN_ON} has no </main> to add the control's broken link to");
    }
    std::fs::write(&page, broken)?;
    // A chapter whose code block and table are wider than any column, as the first edition's were.
    let overflowing = std::fs::read_to_string(copy.join(WIDE_FROM))?.replacen(
        "</main>",
        &format!(
            "<pre><code style=\"white-space: pre\">{}</code></pre>\
             <table><tr><td style=\"white-space: nowrap\">{}</td></tr></table>\
             <pre><code class=\"language-rs\">{}</code></pre>\
             <svg class=\"lab-system\" viewBox=\"0 0 3000 100\" width=\"100%\" \
             style=\"max-width: 3000px\"><text x=\"10\" y=\"50\" font-size=\"12\">tiny</text>\
             </svg></main>",
            "let wide = 1;".repeat(30),
            "a_cell_that_never_breaks ".repeat(20),
            "let wraps = 1; ".repeat(20)
        ),
        1,
    );
    std::fs::write(copy.join(WIDE_PAGE), overflowing)?;
    Ok(())
}

/// The same check on a damaged copy of the book must fail, naming the pages.
fn negative_control(root: &Path, book: &Path, script_dir: &Path, chromium: &Path) -> Result<()> {
    let scratch = scratch_folder(root, "browser-control-")?;
    let copy = scratch.path().join("book");
    copy_dir(book, &copy)?;
    std::fs::remove_file(copy.join(REMOVED_CHAPTER))
        .with_context(|| format!("the control expects {REMOVED_CHAPTER} in the book"))?;
    damage(&copy)?;
    let server = Server::start(&copy)?;
    let shots = root.join("target").join("browser-control-shots");
    let (ok, output) = node_check(
        script_dir,
        chromium,
        &server,
        &copy,
        &shots,
        &["--links-only".as_ref()],
    )?;
    drop(server);
    let overflow_named = |what: &str| {
        output.lines().any(|l| {
            l.starts_with(&format!("FAIL {WIDE_PAGE}: overflow at 390 px")) && l.contains(what)
        })
    };
    // The wrapped listing at the laptop width, and the chart's tiny text at phone width.
    let listing_wraps = output.lines().any(|l| {
        l.starts_with(&format!("FAIL {WIDE_PAGE}: overflow at 1280 px")) && l.contains("wraps")
    });
    let small_text = output.lines().any(|l| {
        l.starts_with(&format!("FAIL {WIDE_PAGE}: overflow at 390 px"))
            && l.contains("draws text at")
    });
    let removed_named = output
        .lines()
        .any(|l| l.starts_with("FAIL ") && l.contains(&format!("links to {REMOVED_CHAPTER}")));
    let anchor_named = output
        .lines()
        .any(|l| l.starts_with(&format!("FAIL {BROKEN_ON}: links to {BROKEN_LINK}")));
    if ok
        || !removed_named
        || !anchor_named
        || !overflow_named("pre 1")
        || !overflow_named("table 1")
        || !listing_wraps
        || !small_text
    {
        bail!(
            "negative control: the check should have failed on a book without {REMOVED_CHAPTER}, \
             with a broken anchor on {BROKEN_ON} and an overflowing code block and table, a \
             wrapping listing and a chart with tiny text on {WIDE_PAGE}, naming them; it \
             printed:\n{output}"
        );
    }
    println!(
        "negative control: removing {REMOVED_CHAPTER}, breaking a link on {BROKEN_ON} and an overflowing block and table, a wrapping listing and tiny chart text on {WIDE_PAGE} fail the check, naming the pages"
    );
    Ok(())
}

/// A scratch folder under `target/`, removed when it is dropped, on an error as on success.
fn scratch_folder(root: &Path, prefix: &str) -> Result<tempfile::TempDir> {
    let target = root.join("target");
    std::fs::create_dir_all(&target)?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&target)
        .with_context(|| format!("making a scratch folder in {}", target.display()))
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

fn html_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            found.extend(html_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "html") {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Checks every `href` and `src` with a scheme in the rendered book: `https`, an allowed host, and
/// listed in SOURCES.md (inline `data:` links fetch nothing and pass). Returns how many links it checked.
///
/// # Errors
/// The first page with a bad link, naming the page and the link.
pub fn external_links(book: &Path, sources: &str) -> Result<usize> {
    let mut checked = 0;
    for page in html_files(book)? {
        let html = std::fs::read_to_string(&page)?;
        let name = page
            .strip_prefix(book)
            .unwrap_or(&page)
            .display()
            .to_string();
        for link in attribute_values(&html) {
            // Relative links and fragments are the browser check's job.
            let Some((scheme, _)) = link.split_once(':') else {
                continue;
            };
            if scheme.contains('/') || scheme.contains('#') || scheme.contains('?') {
                continue;
            }
            check_external(link, sources).with_context(|| format!("book/{name}"))?;
            checked += 1;
        }
    }
    Ok(checked)
}

/// One external link: syntax, host, and presence in SOURCES.md.
fn check_external(link: &str, sources: &str) -> Result<()> {
    // Inline data (a report page's empty icon, `data:,`) is part of the page: nothing is fetched.
    if link.starts_with("data:") {
        return Ok(());
    }
    let Some(rest) = link.strip_prefix("https://") else {
        bail!("`{link}` is not an https link");
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let valid_host = !host.is_empty()
        && host.contains('.')
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    if !valid_host || link.contains(char::is_whitespace) {
        bail!("`{link}` is not a well-formed URL");
    }
    if !ALLOWED_HOSTS.contains(&host) {
        bail!("`{link}` points at {host}, which is not on the list of allowed hosts");
    }
    // The fragment may name a section of a listed page.
    let page = link.split('#').next().unwrap_or(link);
    if !sources.contains(page) {
        bail!("`{link}` is not listed in SOURCES.md");
    }
    Ok(())
}

/// The values of every `href="..."` and `src="..."` in a page, entity `&amp;` decoded.
fn attribute_values(html: &str) -> Vec<&str> {
    let mut values = Vec::new();
    for attribute in [" href=\"", " src=\""] {
        let mut rest = html;
        while let Some(start) = rest.find(attribute) {
            rest = &rest[start + attribute.len()..];
            let Some(end) = rest.find('"') else { break };
            values.push(&rest[..end]);
            rest = &rest[end..];
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_links_must_be_https_on_an_allowed_host_and_listed_in_sources() {
        let sources = "- URL: <https://www.sqlite.org/lang_transaction.html>";
        assert!(
            check_external(
                "https://www.sqlite.org/lang_transaction.html#immediate",
                sources
            )
            .is_ok()
        );
        assert!(check_external("data:,", sources).is_ok());
        for (link, why) in [
            (
                "http://www.sqlite.org/lang_transaction.html",
                "not an https link",
            ),
            (
                "https://github.com/example/made-up",
                "not listed in SOURCES.md",
            ),
            (
                "https://example.com/lang_transaction.html",
                "not on the list of allowed hosts",
            ),
            ("https:///nohost", "not a well-formed URL"),
            ("mailto:someone@example.com", "not an https link"),
        ] {
            let err = check_external(link, sources).unwrap_err().to_string();
            assert!(err.contains(why), "{link}: {err}");
        }
    }

    #[test]
    fn attribute_values_finds_links_and_sources() {
        let html = r#"<a href="a.html#x">a</a><img src="https://docs.rs/x.png"><link rel="icon" href="f.svg">"#;
        assert_eq!(
            attribute_values(html),
            vec!["a.html#x", "f.svg", "https://docs.rs/x.png"]
        );
    }

    #[test]
    fn every_external_link_in_the_sources_of_the_book_is_allowed() {
        let root = crate::root();
        let sources = std::fs::read_to_string(root.join("SOURCES.md")).unwrap();
        let mut count = 0;
        for entry in std::fs::read_dir(root.join("src")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "md") {
                continue; // src/simulation/ holds generated text the chapters include
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let inline = text.match_indices("](http").map(|(i, _)| {
                let link = &text[i + 2..];
                &link[..link.find(')').unwrap()]
            });
            // Reference-style definitions too: `[name]: https://...` on a line of its own.
            let defined = text.lines().filter_map(|line| {
                let (label, link) = line.split_once("]: ")?;
                label.starts_with('[').then_some(link.trim())
            });
            for link in inline.chain(defined) {
                if !link.starts_with("https:") && !link.starts_with("http:") {
                    continue; // a chapter whose file name starts with "http", such as http-boundary.md
                }
                check_external(link, &sources)
                    .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
                count += 1;
            }
        }
        assert!(count > 0, "the book cites no sources at all");
    }
}
