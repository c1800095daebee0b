//! The book's claims about its own tests: every test that `src/testing.md` names as
//! `` `path/to/file.rs::test_name` `` must exist in that file as a function under `#[test]`,
//! `#[tokio::test]` or a proptest `#[test]`, so a limit the book says is tested cannot lose its
//! test without the build failing.

use std::path::Path;

use anyhow::{Context, Result};

/// The chapter whose test names are checked.
const CLAIMS_CHAPTER: &str = "src/testing.md";

/// One test the chapter names: the file (from the repository root) and the function.
#[derive(Debug, PartialEq, Eq)]
pub struct NamedTest {
    /// The line of the chapter that names it.
    pub line: usize,
    /// The test file, relative to the repository root.
    pub file: String,
    /// The test function's name.
    pub function: String,
}

/// Every problem with the tests `src/testing.md` names under `root`.
///
/// # Errors
/// The chapter cannot be read.
pub fn problems(root: &Path) -> Result<Vec<String>> {
    let path = root.join(CLAIMS_CHAPTER);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let named = named_tests(&text);
    if named.is_empty() {
        return Ok(vec![format!(
            "{CLAIMS_CHAPTER}: names no test as `file.rs::test_name`; its claims would go unchecked"
        )]);
    }
    let mut problems = Vec::new();
    for test in named {
        let at = format!("{CLAIMS_CHAPTER}:{}", test.line);
        match std::fs::read_to_string(root.join(&test.file)) {
            Err(_) => problems.push(format!("{at}: names `{}`, which does not exist", test.file)),
            Ok(source) if !has_test(&source, &test.function) => problems.push(format!(
                "{at}: names `{}::{}`, but {} has no test function of that name",
                test.file, test.function, test.file
            )),
            Ok(_) => {}
        }
    }
    Ok(problems)
}

/// The `file.rs::function` names in code spans of `text`, with their lines.
pub fn named_tests(text: &str) -> Vec<NamedTest> {
    let mut found = Vec::new();
    for (line, span) in crate::markdown::code_spans(text) {
        let Some((file, function)) = span.split_once("::") else {
            continue;
        };
        let is_file = file.ends_with(".rs")
            && !file.is_empty()
            && file
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/_-.".contains(c));
        let is_name = function
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase())
            && function
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if is_file && is_name {
            found.push(NamedTest {
                line,
                file: file.to_owned(),
                function: function.to_owned(),
            });
        }
    }
    found
}

/// Whether `source` defines `fn function` with a test attribute among the attribute and
/// comment lines right above it.
pub fn has_test(source: &str, function: &str) -> bool {
    let lines: Vec<&str> = source.lines().collect();
    lines.iter().enumerate().any(|(index, line)| {
        let line = line.trim_start();
        let rest = line
            .strip_prefix("async fn ")
            .or_else(|| line.strip_prefix("fn "));
        let Some(rest) = rest else {
            return false;
        };
        let Some(name) = rest.strip_prefix(function) else {
            return false;
        };
        if !name.starts_with(['(', '<', ' ']) {
            return false;
        }
        lines[..index]
            .iter()
            .rev()
            .map(|l| l.trim())
            .take_while(|l| l.starts_with("#[") || l.starts_with("//") || l.ends_with(")]"))
            .any(|l| l == "#[test]" || l.starts_with("#[tokio::test"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "\
#[test]
fn a_real_test() {}

/// Documented, and on tokio.
#[tokio::test(flavor = \"current_thread\")]
async fn an_async_test() {}

fn a_helper() {}

proptest! {
    #[test]
    fn a_property(x in 0..3u8) { assert!(x < 3); }
}
";

    #[test]
    fn names_are_read_from_code_spans_only() {
        let text = "Backed by `lab/tests/it/crash.rs::a_real_test` and\n\
                    `lab::sim::run` (a path, not a file) and crash.rs::bare_text.\n";
        let named = named_tests(text);
        assert_eq!(
            named,
            [NamedTest {
                line: 1,
                file: "lab/tests/it/crash.rs".to_owned(),
                function: "a_real_test".to_owned(),
            }]
        );
    }

    #[test]
    fn test_functions_are_found_under_each_kind_of_test_attribute() {
        assert!(has_test(SOURCE, "a_real_test"));
        assert!(has_test(SOURCE, "an_async_test"));
        assert!(has_test(SOURCE, "a_property"));
    }

    #[test]
    fn a_helper_a_prefix_and_a_missing_name_are_not_tests() {
        // Negative controls: each of these must make the check fail.
        assert!(!has_test(SOURCE, "a_helper"));
        assert!(!has_test(SOURCE, "a_real"));
        assert!(!has_test(SOURCE, "no_such_test"));
    }

    #[test]
    fn a_chapter_naming_a_missing_test_fails_and_names_the_line() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("src")).unwrap();
        std::fs::create_dir_all(root.path().join("lab/tests")).unwrap();
        std::fs::write(root.path().join("lab/tests/t.rs"), SOURCE).unwrap();
        let chapter = root.path().join(CLAIMS_CHAPTER);

        std::fs::write(&chapter, "Tested: `lab/tests/t.rs::a_real_test`.\n").unwrap();
        assert_eq!(problems(root.path()).unwrap(), Vec::<String>::new());

        std::fs::write(
            &chapter,
            "Tested: `lab/tests/t.rs::a_real_test`.\n\
             Also: `lab/tests/t.rs::a_helper` and `lab/tests/gone.rs::x`.\n",
        )
        .unwrap();
        let found = problems(root.path()).unwrap();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("src/testing.md:2: names `lab/tests/t.rs::a_helper`"));
        assert!(found[1].contains("`lab/tests/gone.rs`, which does not exist"));

        std::fs::write(&chapter, "No test named here.\n").unwrap();
        assert_eq!(problems(root.path()).unwrap().len(), 1);
    }

    #[test]
    fn every_test_the_books_testing_chapter_names_exists() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let found = problems(&root).unwrap();
        assert!(found.is_empty(), "{}", found.join("\n"));
        assert!(
            named_tests(&std::fs::read_to_string(root.join(CLAIMS_CHAPTER)).unwrap()).len() > 10
        );
    }
}
