//! Just enough Markdown reading for the checks: the book's files and their fenced code blocks.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// One Markdown file of the book.
pub struct Chapter {
    /// The path relative to the repository root, such as `src/lost-reply.md`.
    pub path: PathBuf,
    /// The file's text.
    pub text: String,
    /// Its fenced code blocks, in order.
    pub fences: Vec<Fence>,
}

/// A fenced code block.
pub struct Fence {
    /// The 1-based line of the opening fence (the line rustdoc names in its test names).
    pub line: usize,
    /// The info string after the fence characters, trimmed.
    pub info: String,
    /// The lines between the fences.
    pub body: Vec<String>,
}

impl Fence {
    /// The first word of the info string: the block's language.
    pub fn language(&self) -> &str {
        self.info.split([',', ' ']).next().unwrap_or("")
    }

    /// The info string's attributes after the language (`should_panic`, `noplayground`, ...).
    pub fn attributes(&self) -> impl Iterator<Item = &str> {
        self.info
            .split([',', ' '])
            .skip(1)
            .filter(|a| !a.is_empty())
    }
}

impl Chapter {
    /// The blocks rustdoc and `mdbook test` compile as Rust.
    pub fn rust_blocks(&self) -> impl Iterator<Item = &Fence> {
        self.fences.iter().filter(|f| f.language() == "rust")
    }
}

/// Every Markdown file in `src/`, sorted by name.
pub fn chapters(root: &Path) -> Result<Vec<Chapter>> {
    let folder = root.join("src");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&folder)
        .with_context(|| format!("reading {}", folder.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    paths.retain(|p| p.extension().is_some_and(|e| e == "md"));
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let relative = path.strip_prefix(root).unwrap_or(&path).to_owned();
            Ok(Chapter {
                fences: fences(&text),
                path: relative,
                text,
            })
        })
        .collect()
}

/// The fenced blocks of a Markdown text (backtick or tilde fences of three or more; a block closes
/// at a fence of the same character at least as long, as CommonMark says).
pub fn fences(text: &str) -> Vec<Fence> {
    let mut found = Vec::new();
    let mut open: Option<(char, usize, Fence)> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence_char = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = fence_char.map_or(0, |c| trimmed.chars().take_while(|x| *x == c).count());
        match (&mut open, fence_char) {
            (Some((c, len, _)), Some(fc))
                if fc == *c && run >= *len && trimmed[run..].trim().is_empty() =>
            {
                let (_, _, fence) = open.take().expect("matched Some");
                found.push(fence);
            }
            (Some((_, _, fence)), _) => fence.body.push(line.to_owned()),
            (None, Some(c)) if run >= 3 => {
                open = Some((
                    c,
                    run,
                    Fence {
                        line: index + 1,
                        info: trimmed[run..].trim().to_owned(),
                        body: Vec::new(),
                    },
                ));
            }
            (None, _) => {}
        }
    }
    if let Some((_, _, fence)) = open {
        found.push(fence); // an unclosed fence runs to the end, as in CommonMark
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_report_their_opening_line_info_and_body() {
        let text =
            "# T\n\n```rust,should_panic\nlet x = 1;\n```\n\n````md\n```rust\ninner\n```\n````\n";
        let found = fences(text);
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].line, found[0].language()), (3, "rust"));
        assert_eq!(found[0].attributes().collect::<Vec<_>>(), ["should_panic"]);
        assert_eq!(found[0].body, ["let x = 1;"]);
        assert_eq!((found[1].line, found[1].language()), (7, "md"));
        assert_eq!(found[1].body.len(), 3);
    }
}
