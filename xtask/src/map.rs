//! The introduction's map of the book (`{{#lab-map}}`), generated from the book's structure as
//! mdBook read it from `src/SUMMARY.md`: its parts, and each numbered chapter with the number the
//! sidebar gives it. A chapter added, moved or renamed in SUMMARY.md moves in the map too.

use std::path::Path;

use mdbook_preprocessor::book::{Book, BookItem};

/// The map as Markdown: a bold line per part, then its chapters as a numbered list, then the
/// chapters outside the numbering (the appendices). Links are relative to `from`, the chapter
/// that holds the map.
pub fn markdown(book: &Book, from: &Path) -> String {
    let depth = from.parent().map_or(0, |p| p.components().count());
    let up = "../".repeat(depth);
    let mut out = String::new();
    let mut appendices = Vec::new();
    let mut seen_numbered = false;
    for item in &book.items {
        match item {
            BookItem::PartTitle(title) => out.push_str(&format!("\n**{title}**\n\n")),
            BookItem::Chapter(chapter) => {
                let Some(path) = chapter.path.as_deref() else {
                    continue; // a draft chapter has no page to link to
                };
                let link = format!("[{}]({up}{})", chapter.name, path.display());
                match &chapter.number {
                    Some(number) => {
                        seen_numbered = true;
                        // mdBook writes "3."; a Markdown list item wants "3. ".
                        out.push_str(&format!("{number} {link}\n"));
                    }
                    None if seen_numbered => appendices.push(link),
                    None => {} // the prefix chapters, such as the introduction itself
                }
            }
            BookItem::Separator => {}
        }
    }
    if !appendices.is_empty() {
        out.push_str(&format!("\nAfter the parts: {}.\n", appendices.join(", ")));
    }
    out.trim_start().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdbook_preprocessor::book::{Chapter, SectionNumber};

    fn chapter(name: &str, file: &str, number: Option<u32>) -> BookItem {
        let mut chapter = Chapter::new(name, String::new(), file, Vec::new());
        chapter.number = number.map(|n| SectionNumber::new(vec![n]));
        BookItem::Chapter(chapter)
    }

    #[test]
    fn parts_and_numbers_follow_the_summary() {
        let mut book = Book::new();
        book.items = vec![
            chapter("Introduction", "introduction.md", None),
            BookItem::PartTitle("Part I: One".into()),
            chapter("First", "first.md", Some(1)),
            chapter("Second", "second.md", Some(2)),
            BookItem::PartTitle("Part II: Two".into()),
            chapter("Third", "third.md", Some(3)),
            BookItem::Separator,
            chapter("Glossary", "glossary.md", None),
        ];
        assert_eq!(
            markdown(&book, Path::new("introduction.md")),
            "**Part I: One**\n\n1. [First](first.md)\n2. [Second](second.md)\n\n\
             **Part II: Two**\n\n3. [Third](third.md)\n\nAfter the parts: [Glossary](glossary.md).\n"
        );
        assert!(markdown(&book, Path::new("sub/page.md")).contains("(../first.md)"));
    }
}
