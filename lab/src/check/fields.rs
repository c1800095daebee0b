//! Every field a target file's parser accepts, read from the parser itself: each table of the
//! file is given an unknown field, and serde's refusal (`unknown field `zzz`, expected one of
//! ...`) lists the fields its struct declares. The book's reference table is compared with this
//! list by a test, so the two cannot drift apart.

use serde::de::DeserializeOwned;

/// The unknown field each table is given.
const PROBE: &str = "zzz_not_a_field";

/// How deep tables nest in a target file, with room to spare; the walk stops there.
const MAX_DEPTH: usize = 6;

/// Every field `T` accepts, as dotted paths (`create.path`, `callers[].headers`): a field that
/// is a table of known fields is given by its fields, a list of such tables with `[]`. A field
/// that takes any value, or any names (`create.fields`), is one entry.
pub fn accepted<T: DeserializeOwned>() -> Vec<String> {
    let mut found = Vec::new();
    walk::<T>(&[], &mut found, 0);
    found.sort();
    found
}

/// One step of a path: a table's field, or the item of a list of tables.
#[derive(Clone)]
enum Segment {
    Field(String),
    Item,
}

fn walk<T: DeserializeOwned>(path: &[Segment], found: &mut Vec<String>, depth: usize) {
    let Some(names) = fields_at::<T>(path) else {
        return;
    };
    for name in names {
        let mut inner = path.to_vec();
        inner.push(Segment::Field(name));
        if depth < MAX_DEPTH && fields_at::<T>(&inner).is_some() {
            walk::<T>(&inner, found, depth + 1);
            continue;
        }
        inner.push(Segment::Item);
        if depth < MAX_DEPTH && fields_at::<T>(&inner).is_some() {
            walk::<T>(&inner, found, depth + 1);
            continue;
        }
        inner.pop();
        found.push(dotted(&inner));
    }
}

fn dotted(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Field(name) if out.is_empty() => out.push_str(name),
            Segment::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            Segment::Item => out.push_str("[]"),
        }
    }
    out
}

/// The fields the table at `path` declares, or `None` when it is not a table of known fields.
fn fields_at<T: DeserializeOwned>(path: &[Segment]) -> Option<Vec<String>> {
    let mut value = format!("{{ {PROBE} = 1 }}");
    for segment in path.iter().rev() {
        value = match segment {
            Segment::Field(name) => format!("{{ {name} = {value} }}"),
            Segment::Item => format!("[{value}]"),
        };
    }
    let text = format!("root = {value}");
    let table: toml::Table = toml::from_str(&text).ok()?;
    let root = table.get("root")?.clone();
    let message = match root.try_into::<T>() {
        Ok(_) => return None,
        Err(err) => err.to_string(),
    };
    let unknown = format!("unknown field `{PROBE}`");
    let (_, expected) = message.split_once(&unknown)?;
    // toml adds where the table is (`in `create``) after the list.
    let expected = expected.split(['\n']).next().unwrap_or_default();
    let expected = expected.split(" in `").next().unwrap_or_default();
    let names: Vec<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[allow(dead_code)]
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        name: Option<String>,
        inner: Option<Inner>,
        #[serde(default)]
        items: Vec<Inner>,
        any: Option<toml::Value>,
    }

    #[allow(dead_code)]
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        a: Option<u8>,
    }

    #[test]
    fn nested_tables_lists_of_tables_and_leaves_are_each_named() {
        assert_eq!(accepted::<Outer>(), ["any", "inner.a", "items[].a", "name"]);
    }
}
