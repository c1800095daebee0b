//! The copy check: what a reader gets from a Rust block's copy button must compile and run as it
//! is, as a complete program against the `lab` crate.
//!
//! mdBook 0.5.4 (`mdbook-html`, `src/html/hide_lines.rs`) wraps every line of a Rust block that
//! matches `^(\s*)#(.?)(.*)$` with a second character of nothing or a space in a
//! `<span class="boring">`, hidden by `.hide-boring .boring { display: none }`; a line starting
//! `##` is shown with one `#` removed. Its copy button (`book.js`, `clipboard()`) copies
//! `playground_text(pre, false)`, the code element's `innerText`, which leaves hidden spans out.
//! So the copied text is the block without its hidden lines. [`copied_text`] computes it that way,
//! and the browser check compares it with what the rendered page's own `playground_text` returns
//! for every block (`target/browser-copied/copied.json`, which the browser check writes).
//!
//! Each copied text is compiled by rustc as a binary crate (the book's edition, `--extern lab`
//! against `target/book-deps`, as a Cargo project depending on `lab` would see it), then run.
//! The only hidden line allowed is `# extern crate lab;`: `mdbook test` needs it, and a program
//! compiled with `--extern lab` does not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::markdown::{self, Chapter};

/// The one hidden line a block may have.
pub const ALLOWED_HIDDEN: &str = "extern crate lab;";

/// How long one copied program may run before it counts as failed.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The widest visible line: wider lines scroll sideways in the text column at phone width.
pub const MAX_LINE: usize = 76;

/// Programs compiled at once (the machine is shared; rustc is the slow part).
const WORKERS: usize = 2;

/// Chapters whose blocks are still written for the first edition and are being converted on
/// another branch. Their problems are printed, loudly, and do not fail the check; a chapter on
/// this list whose blocks all pass fails it, so the list only shrinks.
pub const PENDING: &[&str] = &[];

/// One Rust block as the copy button gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    /// The chapter, relative to the repository root (`src/lost-reply.md`).
    pub chapter: PathBuf,
    /// The line of the opening fence.
    pub line: usize,
    /// The copied text, lines joined by `\n`.
    pub text: String,
}

/// How mdBook shows one line of a Rust block.
#[derive(Debug, PartialEq, Eq)]
enum Shown {
    /// Visible, with this text.
    Visible(String),
    /// Hidden; this is the line without its `#` marker.
    Hidden(String),
}

/// mdBook's rule for one line (`BORING_LINES_REGEX` in `hide_lines.rs`).
fn shown(line: &str) -> Shown {
    let indent_end = line.len() - line.trim_start().len();
    let (indent, rest) = line.split_at(indent_end);
    let Some(after) = rest.strip_prefix('#') else {
        return Shown::Visible(line.to_owned());
    };
    let mut chars = after.chars();
    match chars.next() {
        None => Shown::Hidden(indent.to_owned()),
        Some(' ') => Shown::Hidden(format!("{indent}{}", chars.as_str())),
        Some('#') => Shown::Visible(format!("{indent}#{}", chars.as_str())),
        Some(_) => Shown::Visible(line.to_owned()),
    }
}

/// The copied text of a block whose body starts on line `first_line`, or the problems that make
/// it not copyable: a hidden line other than [`ALLOWED_HIDDEN`], or no `fn main`.
pub fn copied_text(
    chapter: &Path,
    fence_line: usize,
    body: &[String],
) -> Result<Copied, Vec<String>> {
    let mut problems = Vec::new();
    let mut visible = Vec::new();
    for (index, line) in body.iter().enumerate() {
        let at = format!("{}:{}", chapter.display(), fence_line + 1 + index);
        match shown(line) {
            Shown::Visible(text) => {
                let width = text.chars().count();
                if width > MAX_LINE {
                    problems.push(format!(
                        "{at}: a visible line of {width} characters (at most {MAX_LINE}, so \
                         nobody scrolls sideways)"
                    ));
                }
                visible.push(text);
            }
            Shown::Hidden(text) if text.trim() == ALLOWED_HIDDEN => {}
            Shown::Hidden(text) => problems.push(format!(
                "{at}: hidden line `{}`: the copy button leaves it out, so the copied program lacks it \
                 (make it visible; only `# {ALLOWED_HIDDEN}` may be hidden)",
                text.trim()
            )),
        }
    }
    let text = visible.join("\n");
    if !text.contains("fn main") {
        problems.push(format!(
            "{}:{fence_line}: the copied block has no visible `fn main`, so it is not a complete \
             program (wrap it in `fn main() -> Result<(), lab::Error> {{ ... Ok(()) }}`)",
            chapter.display()
        ));
    }
    if problems.is_empty() {
        Ok(Copied {
            chapter: chapter.to_owned(),
            line: fence_line,
            text,
        })
    } else {
        Err(problems)
    }
}

/// The text the copy button copies from a block, whatever problems it has.
pub fn visible_text(body: &[String]) -> String {
    body.iter()
        .filter_map(|line| match shown(line) {
            Shown::Visible(text) => Some(text),
            Shown::Hidden(_) => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Writes `FOLDER/copied.json`, every Rust block's copied text by page, for the
/// browser check to compare with what the rendered page copies. Returns the file.
pub fn write_for_browser(root: &Path, folder: &Path) -> Result<PathBuf> {
    let chapters = markdown::chapters(root)?;
    let blocks: Vec<Copied> = chapters
        .iter()
        .flat_map(|chapter| {
            chapter.rust_blocks().map(|fence| Copied {
                chapter: chapter.path.clone(),
                line: fence.line,
                text: visible_text(&fence.body),
            })
        })
        .collect();
    std::fs::create_dir_all(folder)?;
    let file = folder.join("copied.json");
    write_copied_json(&file, &blocks)?;
    Ok(file)
}

/// The copied text of every Rust block of the given chapters, and the problems of those that have
/// none.
pub fn all_copied(chapters: &[Chapter]) -> (Vec<Copied>, Vec<String>) {
    let mut copied = Vec::new();
    let mut problems = Vec::new();
    for chapter in chapters {
        for fence in chapter.rust_blocks() {
            match copied_text(&chapter.path, fence.line, &fence.body) {
                Ok(block) => copied.push(block),
                Err(found) => problems.extend(found),
            }
        }
    }
    (copied, problems)
}

/// How to compile a copied program: rustc, the edition, and the `--extern` crates.
pub struct Compiler {
    pub rustc: PathBuf,
    pub edition: String,
    /// `-L dependency=` folders.
    pub library_folders: Vec<PathBuf>,
    /// `--extern name=path`.
    pub externs: Vec<(String, PathBuf)>,
    /// Environment for the runs (the PostgreSQL chapter's server).
    pub env: Vec<(String, String)>,
}

impl Compiler {
    /// rustc against the lab library in `folder` (filled by [`crate::deps::library_folder`]).
    pub fn for_lab(folder: &Path, edition: &str) -> Result<Compiler> {
        let mut labs = Vec::new();
        for entry in
            std::fs::read_dir(folder).with_context(|| format!("reading {}", folder.display()))?
        {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.starts_with("liblab-") && name.ends_with(".rlib") {
                labs.push(path);
            }
        }
        let [lab] = labs.as_slice() else {
            bail!(
                "expected exactly one liblab-*.rlib in {}, found {}",
                folder.display(),
                labs.len()
            );
        };
        Ok(Compiler {
            rustc: std::env::var_os("RUSTC").map_or_else(|| "rustc".into(), PathBuf::from),
            edition: edition.to_owned(),
            library_folders: vec![folder.to_owned()],
            externs: vec![("lab".to_owned(), lab.clone())],
            env: Vec::new(),
        })
    }

    /// rustc for one copied program named `stem`, built into `binary` against the lab's
    /// libraries; the source file is the last argument, added by the caller.
    fn rustc_command(&self, stem: &str, binary: &Path) -> Command {
        let mut rustc = Command::new(&self.rustc);
        rustc
            .args(["--edition", &self.edition, "--crate-type", "bin"])
            .args([
                "--crate-name",
                stem,
                "-C",
                "debuginfo=0",
                "--color",
                "never",
            ])
            .arg("-o")
            .arg(binary);
        for folder in &self.library_folders {
            rustc
                .arg("-L")
                .arg(format!("dependency={}", folder.display()));
        }
        for (name, path) in &self.externs {
            rustc
                .arg("--extern")
                .arg(format!("{name}={}", path.display()));
        }
        rustc
    }

    /// Compiles and runs one copied program in `work`; `None` when it passed, else why not.
    pub fn check(&self, block: &Copied, work: &Path) -> Result<Option<String>> {
        let at = format!("{}:{}", block.chapter.display(), block.line);
        let stem = format!(
            "{}_{}",
            block
                .chapter
                .file_stem()
                .map(|s| s.to_string_lossy().replace(['-', '.'], "_"))
                .unwrap_or_default(),
            block.line
        );
        let source = work.join(format!("{stem}.rs"));
        let binary = work.join(&stem);
        std::fs::write(&source, format!("{}\n", block.text))
            .with_context(|| format!("writing {}", source.display()))?;
        let mut rustc = self.rustc_command(&stem, &binary);
        let output = rustc
            .arg(&source)
            .output()
            .with_context(|| format!("running {}", self.rustc.display()))?;
        if !output.status.success() {
            return Ok(Some(format!(
                "{at}: the copied block does not compile as a program ({}):\n{}",
                source.display(),
                indent(&String::from_utf8_lossy(&output.stderr))
            )));
        }
        let run_dir = tempfile::tempdir().context("a folder for the copied program to run in")?;
        let mut child = Command::new(&binary)
            .current_dir(run_dir.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if started.elapsed() > RUN_LIMIT {
                child.kill().ok();
                child.wait().ok();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let output = child.wait_with_output()?;
        match status {
            Some(status) if status.success() => Ok(None),
            Some(status) => Ok(Some(format!(
                "{at}: the copied program failed ({status}):\n{}",
                indent(&String::from_utf8_lossy(&output.stderr))
            ))),
            None => Ok(Some(format!(
                "{at}: the copied program ran longer than {} s and was stopped",
                RUN_LIMIT.as_secs()
            ))),
        }
    }

    /// Checks every block, [`WORKERS`] at a time; returns the problems, in the blocks' order.
    pub fn check_all(&self, blocks: &[Copied], work: &Path) -> Result<Vec<String>> {
        std::fs::create_dir_all(work)?;
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results = std::sync::Mutex::new(BTreeMap::new());
        std::thread::scope(|scope| {
            for _ in 0..WORKERS {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(block) = blocks.get(i) else { break };
                        let result = self.check(block, work);
                        results
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .insert(i, result);
                    }
                });
            }
        });
        let mut problems = Vec::new();
        for (_, result) in results
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            problems.extend(result?);
        }
        Ok(problems)
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The check as `cargo xtask test` runs it: every Rust block of the book, copied, compiled, run.
/// Returns how many blocks passed.
pub fn run(root: &Path, postgres_url: Option<&str>) -> Result<usize> {
    let chapters = markdown::chapters(root)?;
    let (copied, mut problems) = all_copied(&chapters);
    let work = root.join("target").join("copied-blocks");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("emptying {}", work.display()))?;
    }
    let folder = crate::deps::library_folder(root)?;
    let config = mdbook_driver::config::Config::from_disk(root.join("book.toml"))
        .context("reading book.toml")?;
    let edition = config
        .rust
        .edition
        .and_then(|e| serde_json::to_value(e).ok())
        .and_then(|e| e.as_str().map(str::to_owned))
        .context("book.toml sets no [rust] edition")?;
    let mut compiler = Compiler::for_lab(&folder, &edition)?;
    if let Some(url) = postgres_url {
        compiler
            .env
            .push((crate::postgres::URL_VARIABLE.to_owned(), url.to_owned()));
    }
    problems.extend(compiler.check_all(&copied, &work)?);
    settle(
        &chapters,
        &copied,
        problems,
        PENDING,
        crate::checks::book_complete_required(),
    )
}

/// Splits problems into failures and pending chapters' problems, printing the pending ones. With
/// `required` (`LAB_REQUIRE_BOOK_COMPLETE=1`, as CI sets it) the pending ones fail too.
fn settle(
    chapters: &[Chapter],
    copied: &[Copied],
    problems: Vec<String>,
    pending_list: &[&str],
    required: bool,
) -> Result<usize> {
    let pending = |problem: &str| {
        pending_list
            .iter()
            .any(|p| problem.starts_with(&format!("{p}:")))
    };
    let (waiting, failing): (Vec<_>, Vec<_>) = problems.iter().partition(|p| pending(p));
    let mut failing: Vec<String> = failing.into_iter().cloned().collect();
    for name in pending_list {
        let has_blocks = chapters
            .iter()
            .any(|c| c.path == Path::new(name) && c.rust_blocks().next().is_some());
        if has_blocks && !waiting.iter().any(|p| p.starts_with(&format!("{name}:"))) {
            failing.push(format!(
                "{name}: every block passes the copy check now: remove it from copyable::PENDING"
            ));
        }
    }
    if !waiting.is_empty() {
        println!(
            "\n!!!!!!!! PENDING: {} copy-check problem(s) in chapters still being converted (copyable::PENDING); {} !!!!!!!!",
            waiting.len(),
            if required {
                "LAB_REQUIRE_BOOK_COMPLETE=1, so they fail this run"
            } else {
                "they do not fail this run (CI sets LAB_REQUIRE_BOOK_COMPLETE=1, and there they fail)"
            }
        );
        for problem in &waiting {
            println!("pending: {}", problem.lines().next().unwrap_or_default());
        }
        if required {
            failing.extend(waiting.iter().map(|p| {
                format!(
                    "{p} (its chapter is on copyable::PENDING, and LAB_REQUIRE_BOOK_COMPLETE=1)"
                )
            }));
        }
    }
    if !failing.is_empty() {
        bail!(
            "{} copy-check problem(s): the copy button's text must compile and run as a program:\n  {}",
            failing.len(),
            failing.join("\n  ")
        );
    }
    let waiting_blocks: std::collections::HashSet<(String, usize)> = waiting
        .iter()
        .filter_map(|p| {
            let mut parts = p.splitn(3, ':');
            Some((parts.next()?.to_owned(), parts.next()?.parse().ok()?))
        })
        .collect();
    Ok(copied
        .iter()
        .filter(|b| !waiting_blocks.contains(&(b.chapter.display().to_string(), b.line)))
        .count())
}

/// `{"lost-reply.html": ["use ...", ...], ...}`: each page's copied texts in order.
fn write_copied_json(path: &Path, copied: &[Copied]) -> Result<()> {
    let mut pages: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for block in copied {
        let page = block
            .chapter
            .strip_prefix("src")
            .unwrap_or(&block.chapter)
            .with_extension("html");
        pages
            .entry(page.display().to_string())
            .or_default()
            .push(block.text.clone());
    }
    std::fs::write(path, serde_json::to_string_pretty(&pages)?)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn hidden_lines_follow_mdbooks_rule() {
        assert_eq!(shown("# let x = 1;"), Shown::Hidden("let x = 1;".into()));
        assert_eq!(shown("    #"), Shown::Hidden("    ".into()));
        assert_eq!(
            shown("#[derive(Debug)]"),
            Shown::Visible("#[derive(Debug)]".into())
        );
        assert_eq!(
            shown("## not hidden"),
            Shown::Visible("# not hidden".into())
        );
        assert_eq!(
            shown("let x = 1; # no"),
            Shown::Visible("let x = 1; # no".into())
        );
    }

    #[test]
    fn a_complete_program_with_the_extern_line_is_copied_without_it() {
        let copied = copied_text(
            Path::new("src/a.md"),
            3,
            &body("# extern crate lab;\nfn main() -> Result<(), lab::Error> {\n    Ok(())\n}"),
        )
        .unwrap();
        assert_eq!(
            copied.text,
            "fn main() -> Result<(), lab::Error> {\n    Ok(())\n}"
        );
    }

    #[test]
    fn a_block_relying_on_a_hidden_line_is_named_by_chapter_and_line() {
        let problems = copied_text(
            Path::new("src/a.md"),
            3,
            &body("# extern crate lab;\nfn main() {\n    let x = lab::Scope::new(\"a\", \"b\")?;\n# Ok::<(), lab::Error>(())\n}"),
        )
        .unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("src/a.md:7: hidden line `Ok::<(), lab::Error>(())`"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_block_without_main_is_named_by_chapter_and_line() {
        let problems = copied_text(
            Path::new("src/b.md"),
            10,
            &body("# extern crate lab;\nlet x = 1;\nassert_eq!(x, 1);"),
        )
        .unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("src/b.md:10: the copied block has no visible `fn main`"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_line_wider_than_the_column_is_named() {
        let wide = format!("    let _ = \"{}\";", "x".repeat(MAX_LINE));
        let text = format!("fn main() {{\n{wide}\n}}");
        let problems = copied_text(Path::new("src/w.md"), 1, &body(&text)).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("src/w.md:3: a visible line of"),
            "{problems:?}"
        );
    }

    fn std_only() -> Compiler {
        Compiler {
            rustc: "rustc".into(),
            edition: "2024".into(),
            library_folders: Vec::new(),
            externs: Vec::new(),
            env: Vec::new(),
        }
    }

    fn block(text: &str) -> Copied {
        Copied {
            chapter: PathBuf::from("src/c.md"),
            line: 5,
            text: text.to_owned(),
        }
    }

    #[test]
    fn copied_programs_that_fail_to_compile_or_to_run_are_named_and_good_ones_pass() {
        let work = tempfile::tempdir().unwrap();
        let compiler = std_only();
        let blocks = [
            block("fn main() {\n    let x: u32 = \"text\";\n}"),
            block("fn main() -> Result<(), String> {\n    Err(\"no\".into())\n}"),
            block(
                "fn main() -> Result<(), std::num::ParseIntError> {\n    let n: u8 = \"7\".parse()?;\n    assert_eq!(n, 7);\n    Ok(())\n}",
            ),
        ];
        let problems: Vec<Option<String>> = blocks
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let dir = work.path().join(i.to_string());
                std::fs::create_dir_all(&dir).unwrap();
                compiler.check(b, &dir).unwrap()
            })
            .collect();
        let compile = problems[0].as_deref().unwrap();
        assert!(
            compile.starts_with("src/c.md:5: the copied block does not compile")
                && compile.contains("E0308"),
            "{compile}"
        );
        let run = problems[1].as_deref().unwrap();
        assert!(
            run.starts_with("src/c.md:5: the copied program failed"),
            "{run}"
        );
        assert_eq!(problems[2], None);
    }

    #[test]
    fn pending_chapters_only_wait_while_they_have_problems() {
        let chapter = |path: &str| Chapter {
            path: PathBuf::from(path),
            text: String::new(),
            fences: markdown::fences("```rust\nfn main() {}\n```\n"),
        };
        let pending = ["src/theirs.md"];
        let chapters = [chapter("src/theirs.md"), chapter("src/mine.md")];
        let waiting = vec!["src/theirs.md:1: the copied block has no visible `fn main`".to_owned()];
        assert!(settle(&chapters, &[], waiting.clone(), &pending, false).is_ok());
        let err = settle(&chapters, &[], waiting, &pending, true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("LAB_REQUIRE_BOOK_COMPLETE=1"), "{err}");
        let err = settle(&chapters, &[], Vec::new(), &pending, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("remove it from copyable::PENDING"), "{err}");
        let mine = vec!["src/mine.md:1: the copied program failed".to_owned()];
        assert!(settle(&chapters, &[], mine, &pending, false).is_err());
    }
}
