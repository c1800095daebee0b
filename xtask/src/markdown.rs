//! Markdown reading for the checks, with pulldown-cmark (the parser mdBook uses): the book's
//! files, their code blocks, code spans and comments.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// One Markdown file of the book.
pub struct Chapter {
    /// The path relative to the repository root, such as `src/lost-reply.md`.
    pub path: PathBuf,
    /// The file's text.
    pub text: String,
    /// Its fenced code blocks, in order.
    pub fences: Vec<Fence>,
}

/// A code block: fenced, or indented by four spaces.
pub struct Fence {
    /// The 1-based line of the opening fence, or of an indented block's first line (the line
    /// rustdoc names in its test names).
    pub line: usize,
    /// The byte offset of the start of the block's first line (before any indentation).
    pub line_start: usize,
    /// The 1-based line the block ends on: its closing fence, or its last line.
    pub end_line: usize,
    /// The info string after the fence characters, trimmed; empty for an indented block.
    pub info: String,
    /// An indented code block (no fence, so no label can be given).
    pub indented: bool,
    /// The code, line by line.
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

/// The parser mdBook renders and tests the book with (`mdbook_markdown::new_cmark_parser`): the
/// same extensions, so a block is code here exactly when it is code there.
fn parser(text: &str) -> Parser<'_> {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES
        | Options::ENABLE_DEFINITION_LIST
        | Options::ENABLE_GFM;
    Parser::new_ext(text, options)
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The code blocks of a Markdown text, as CommonMark reads them: fenced ones (backticks or
/// tildes, also inside list items and block quotes) and indented ones, which rustdoc compiles
/// as Rust like an unlabelled fence. The body is the code as the parser gives it, with a list
/// item's indentation removed.
pub fn fences(text: &str) -> Vec<Fence> {
    let mut found = Vec::new();
    let mut open: Option<Fence> = None;
    for (event, range) in parser(text).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let (info, indented) = match kind {
                    CodeBlockKind::Fenced(info) => (info.trim().to_owned(), false),
                    CodeBlockKind::Indented => (String::new(), true),
                };
                // The block's range ends after its closing fence's line break, if it has one.
                let end = text[..range.end].trim_end_matches('\n').len();
                open = Some(Fence {
                    line: line_of(text, range.start),
                    line_start: text[..range.start].rfind('\n').map_or(0, |at| at + 1),
                    end_line: line_of(text, end),
                    info,
                    indented,
                    body: Vec::new(),
                });
            }
            Event::Text(code) => {
                if let Some(fence) = &mut open {
                    fence.body.extend(code.lines().map(str::to_owned));
                }
            }
            Event::End(TagEnd::CodeBlock) => found.extend(open.take()),
            _ => {}
        }
    }
    found
}

/// The inline code spans of a Markdown text with their 1-based lines (code blocks are not code
/// spans).
pub fn code_spans(text: &str) -> Vec<(usize, String)> {
    parser(text)
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Code(code) => Some((line_of(text, range.start), code.into_string())),
            _ => None,
        })
        .collect()
}

/// The 1-based line ranges (first, last) of the HTML comments of a Markdown text, outside code.
pub fn comment_lines(text: &str) -> Vec<(usize, usize)> {
    parser(text)
        .into_offset_iter()
        .filter(|(event, range)| {
            matches!(event, Event::Start(Tag::HtmlBlock) | Event::InlineHtml(_))
                && text[range.clone()].trim_start().starts_with("<!--")
        })
        .map(|(_, range)| {
            let end = text[..range.end].trim_end_matches('\n').len();
            (line_of(text, range.start), line_of(text, end))
        })
        .collect()
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
        assert_eq!((found[0].end_line, found[1].end_line), (5, 11));
    }

    #[test]
    fn an_indented_code_block_is_code_with_no_label() {
        let text = "Text.\n\n    let x = \"42\";\n    x\n\nMore text, 7 words.\n";
        let found = fences(text);
        assert_eq!(found.len(), 1);
        assert!(found[0].indented);
        assert_eq!(
            (found[0].line, found[0].end_line, found[0].language()),
            (3, 4, "")
        );
        assert_eq!(found[0].body, ["let x = \"42\";", "x"]);
    }

    #[test]
    fn a_fence_inside_a_list_item_is_found_with_its_indentation_removed() {
        let text = "1. Run it:\n\n   ```rust\n   # extern crate lab;\n   fn main() {}\n   ```\n\n- and\n  ~~~text\n  out\n  ~~~\n";
        let found = fences(text);
        assert_eq!(found.len(), 2);
        assert_eq!(
            (found[0].line, found[0].end_line, found[0].language()),
            (3, 6, "rust")
        );
        assert_eq!(found[0].body, ["# extern crate lab;", "fn main() {}"]);
        assert_eq!((found[1].line, found[1].language()), (9, "text"));
        assert_eq!(found[1].body, ["out"]);
    }

    #[test]
    fn a_fence_marker_inside_an_indented_block_or_a_code_span_opens_nothing() {
        let text = "Use `` ```rust `` to start.\n\n    ```rust\n    not a fence\n";
        let found = fences(text);
        assert_eq!(found.len(), 1);
        assert!(found[0].indented);
        assert_eq!(found[0].body, ["```rust", "not a fence"]);
    }

    #[test]
    fn code_spans_and_comments_are_found_by_line_and_code_blocks_are_not_spans() {
        let text = "See `a.rs::b`.\n\n```text\n`c.rs::d`\n```\n\n<!-- one\ntwo -->\n\nEnd.\n";
        assert_eq!(code_spans(text), [(1, "a.rs::b".to_owned())]);
        assert_eq!(comment_lines(text), [(7, 8)]);
    }
}
