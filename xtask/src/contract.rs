//! `{{#lab-contract promises}}` and `{{#lab-contract matrix}}`: the retry contract's promises and
//! the matrix of which checker covers each, drawn from `lab::contract`, the same data every
//! report names its promise ids from. The chapter's list and the checks cannot drift apart.

use anyhow::{Result, bail};

/// The Markdown for `{{#lab-contract NAME}}`.
///
/// # Errors
/// A NAME other than `promises` or `matrix`.
pub fn expand(name: &str) -> Result<String> {
    match name {
        "promises" => Ok(lab::contract::promises_markdown()),
        "matrix" => Ok(lab::contract::matrix_markdown()),
        "points" => Ok(lab::contract::points_markdown()),
        "renamed" => Ok(lab::contract::renamed_markdown()),
        other => {
            bail!("lab-contract takes `promises`, `matrix`, `points` or `renamed`, not `{other}`")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_and_the_matrix_name_every_promise_and_an_unknown_name_is_refused() {
        let list = expand("promises").unwrap();
        let matrix = expand("matrix").unwrap();
        for promise in lab::contract::PROMISES {
            assert!(
                list.contains(promise.statement),
                "{} not in the list",
                promise.id
            );
            assert!(
                matrix.contains(&format!("`{}`", promise.id)),
                "{} not in the matrix",
                promise.id
            );
        }
        let points = expand("points").unwrap();
        for point in lab::contract::points::ALL {
            assert!(
                points.contains(&format!("| `{}` |", point.id)),
                "{}",
                point.id
            );
        }
        let renamed = expand("renamed").unwrap();
        assert!(
            renamed.contains("| `lost-result` | MCP | `reply-dropped` |"),
            "{renamed}"
        );
        let err = expand("table").unwrap_err().to_string();
        assert!(err.contains("`table`"), "{err}");
    }

    #[test]
    fn the_contract_chapter_and_the_testing_chapter_draw_both_from_the_data() {
        for (chapter, directive) in [
            ("src/idempotency.md", "{{#lab-contract promises}}"),
            ("src/testing.md", "{{#lab-contract matrix}}"),
        ] {
            let text = std::fs::read_to_string(crate::root().join(chapter)).unwrap();
            assert!(text.contains(directive), "{chapter} lacks {directive}");
        }
    }
}
