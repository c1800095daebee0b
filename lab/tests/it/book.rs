//! The book's chapters are all compiled as doctests.

use crate::repository_root;

/// The chapter files SUMMARY.md links to, in order.
fn summary_chapters() -> Vec<String> {
    let summary = std::fs::read_to_string(repository_root().join("src/SUMMARY.md")).unwrap();
    summary
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|target| target.ends_with(".md"))
        .map(str::to_owned)
        .collect()
}

/// The chapter files lab/src/book.rs includes as doctests.
fn doctest_chapters() -> Vec<String> {
    let book = std::fs::read_to_string(repository_root().join("lab/src/book.rs")).unwrap();
    book.lines()
        .filter_map(|line| line.split_once("=> \""))
        .filter_map(|(_, rest)| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_chapter_in_the_summary_is_compiled_as_doctests() {
    let summary = summary_chapters();
    let included = doctest_chapters();
    assert!(
        summary.len() >= 10,
        "SUMMARY.md lists too few chapters: {summary:?}"
    );
    let missing: Vec<_> = summary.iter().filter(|c| !included.contains(c)).collect();
    assert!(
        missing.is_empty(),
        "chapters in SUMMARY.md that lab/src/book.rs does not include: {missing:?}"
    );
    let stale: Vec<_> = included.iter().filter(|c| !summary.contains(c)).collect();
    assert!(
        stale.is_empty(),
        "lab/src/book.rs includes files SUMMARY.md does not list: {stale:?}"
    );
}
