//! Listings labelled with their file, as the Rust book labels its listings: every `rs` block of
//! a chapter (which holds only `{{#include ../lab/...}}` lines, checked in `checks.rs`) gets a
//! caption naming the lab file it shows, linked to a copy of that file in the rendered book, so
//! the link works offline and the browser check follows it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The lab files a chapter's `rs` blocks include, one list per block, in order.
pub fn included_files(source: &str) -> Vec<Vec<String>> {
    crate::markdown::fences(source)
        .iter()
        .filter(|f| f.language() == "rs")
        .map(|fence| {
            let mut files: Vec<String> = fence
                .body
                .iter()
                .filter_map(|line| {
                    let inner = line.trim().strip_prefix("{{#")?.strip_suffix("}}")?;
                    let target = inner
                        .strip_prefix("include ")
                        .or_else(|| inner.strip_prefix("rustdoc_include "))?;
                    let path = target.trim().split(':').next()?;
                    Some(path.strip_prefix("../")?.to_owned())
                })
                .collect();
            files.dedup();
            files
        })
        .collect()
}

/// Puts a caption before each `rs` block of `content` (the chapter after mdBook's includes),
/// naming the files of the matching block of `source` (the chapter as written). `page` is the
/// chapter's path inside the book, for relative links.
pub fn caption(content: &str, source: &str, page: &Path) -> String {
    let files = included_files(source);
    if files.is_empty() {
        return content.to_owned();
    }
    let up = "../".repeat(page.parent().map_or(0, |p| p.components().count()));
    let blocks = crate::markdown::fences(content);
    let rs_blocks = blocks.iter().filter(|f| f.language() == "rs");
    let mut out = String::with_capacity(content.len() + 200 * files.len());
    let mut copied = 0;
    for (block, files) in rs_blocks.zip(&files).filter(|(_, f)| !f.is_empty()) {
        let links: Vec<String> = files
            .iter()
            .map(|f| format!("<a href=\"{up}{f}\"><code>{f}</code></a>"))
            .collect();
        // The caption takes the fence's indentation, so a listing inside a list item stays there.
        let line = &content[block.line_start..];
        let indent = &line[..line.len() - line.trim_start_matches([' ', '\t']).len()];
        out.push_str(&content[copied..block.line_start]);
        out.push_str(&format!(
            "{indent}<p class=\"lab-listing\">Listing from {}</p>\n\n",
            links.join(", ")
        ));
        copied = block.line_start;
    }
    out.push_str(&content[copied..]);
    out
}

/// Copies every lab file a chapter includes into the rendered book at `output`, under the same
/// path (`lab/src/suite.rs`), so the captions' links resolve. Returns how many files it copied.
pub fn copy_sources(root: &Path, output: &Path) -> Result<usize> {
    let mut files: Vec<PathBuf> = Vec::new();
    for chapter in crate::markdown::chapters(root)? {
        for block in included_files(&chapter.text) {
            files.extend(block.into_iter().map(PathBuf::from));
        }
    }
    files.sort();
    files.dedup();
    for file in &files {
        let destination = output.join(file);
        if let Some(parent) = destination.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(root.join(file), &destination)
            .with_context(|| format!("copying {} into the book", file.display()))?;
    }
    Ok(files.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rs_block_is_captioned_with_its_files_and_other_blocks_are_not() {
        let source = "# T\n\n```rs\n{{#include ../lab/src/suite.rs:naive_retry}}\n```\n\n```text\nout\n```\n\n```rs\n{{#include ../lab/src/sqlite.rs:create}}\n{{#include ../lab/src/sqlite.rs:dispatch}}\n```\n";
        let content = "# T\n\n```rs\nfn naive_retry() {}\n```\n\n```text\nout\n```\n\n```rs\nfn create() {}\nfn dispatch() {}\n```\n";
        let captioned = caption(content, source, Path::new("ch.md"));
        assert_eq!(
            captioned.matches("class=\"lab-listing\"").count(),
            2,
            "{captioned}"
        );
        assert!(captioned.contains(
            "Listing from <a href=\"lab/src/suite.rs\"><code>lab/src/suite.rs</code></a></p>\n\n```rs\nfn naive_retry"
        ));
        assert!(captioned.contains("<code>lab/src/sqlite.rs</code></a></p>\n\n```rs\nfn create"));
        let nested = caption(content, source, Path::new("part/ch.md"));
        assert!(nested.contains("href=\"../lab/src/suite.rs\""), "{nested}");
    }

    #[test]
    fn an_rs_block_inside_a_list_item_is_captioned_in_the_item_and_later_blocks_keep_their_files() {
        let source = "1. First:\n\n   ```rs\n   {{#include ../lab/src/suite.rs:a}}\n   ```\n\n```rs\n{{#include ../lab/src/sqlite.rs:b}}\n```\n";
        let content = "1. First:\n\n   ```rs\n   fn a() {}\n   ```\n\n```rs\nfn b() {}\n```\n";
        let captioned = caption(content, source, Path::new("ch.md"));
        assert!(
            captioned.contains("\n   <p class=\"lab-listing\">Listing from <a href=\"lab/src/suite.rs\"><code>lab/src/suite.rs</code></a></p>\n\n   ```rs\n   fn a"),
            "{captioned}"
        );
        assert!(
            captioned.contains("<code>lab/src/sqlite.rs</code></a></p>\n\n```rs\nfn b"),
            "{captioned}"
        );
    }
}
