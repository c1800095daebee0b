//! An effect's content, read back by `[read]`, for the sub-checks whose truth a count cannot
//! show. A later call under the same key that changes the first effect in place (an overwrite
//! by a changed payload, a retry that writes again) leaves the count as it was: such a
//! sub-check holds only when the count saw no new effect and the first effect reads as it did.
//! Where the effect cannot be read back (no `[read]`), the sub-check is not covered, never ok
//! on the count alone.

use std::collections::BTreeMap;

use serde_json::Value;

use super::report::{Checks, Grade};

/// Why content cannot be compared without a `[read]`.
pub(crate) const NO_READ: &str = "the target file declares no [read], and a count cannot see an effect \
                       changed in place under the same key (an overwrite, a retry that writes \
                       again). Declare [read], a request or a query that reads one effect by its \
                       identity, to compare the effect's content";

/// What reads one effect back by its identity (the HTTP check's `[read]`); every front of the
/// shared points is one, and says why where it cannot read.
#[allow(async_fn_in_trait)]
pub(crate) trait ReadBack {
    /// The effect `identity` names, as JSON; why not, where it cannot be read.
    async fn content(&self, identity: &str) -> Result<Value, String>;
}

/// The first effect as `[read]` read it, with what changed between two reads that had nothing
/// sent between them (a time, a view counter), which no comparison counts.
pub(crate) struct Content {
    identity: String,
    before: BTreeMap<String, Value>,
    restless: Vec<String>,
}

/// What the check can say of the first effect after the later calls.
pub(crate) enum Since {
    /// It reads as it did.
    Unchanged,
    /// It changed: how, in a few pointers.
    Changed(String),
    /// It cannot be compared: why.
    Unknown(String),
}

/// The first effect's content, read twice; why not, when it cannot be read (no `[read]`, no
/// identity, a read that fails).
pub(crate) async fn content_of<F: ReadBack>(
    front: &F,
    identity: Option<&str>,
) -> Result<Content, String> {
    let Some(identity) = identity.map(str::to_owned) else {
        return Err("the first answer named no effect to read back".to_owned());
    };
    let one = read(front, &identity).await?;
    let two = read(front, &identity).await?;
    let restless = one
        .keys()
        .chain(two.keys())
        .filter(|k| one.get(*k) != two.get(*k))
        .cloned()
        .collect();
    Ok(Content {
        identity,
        before: two,
        restless,
    })
}

async fn read<F: ReadBack>(front: &F, identity: &str) -> Result<BTreeMap<String, Value>, String> {
    let value = front.content(identity).await?;
    let mut flat = BTreeMap::new();
    flatten(&value, String::new(), &mut flat);
    Ok(flat)
}

/// Every scalar of `value` by its JSON pointer.
fn flatten(value: &Value, at: String, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) => {
            for (name, inner) in map {
                let escaped = name.replace('~', "~0").replace('/', "~1");
                flatten(inner, format!("{at}/{escaped}"), out);
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                flatten(inner, format!("{at}/{i}"), out);
            }
        }
        scalar => {
            out.insert(at, scalar.clone());
        }
    }
}

/// How the first effect changed since `content` was read.
pub(crate) async fn since<F: ReadBack>(front: &F, content: &Result<Content, String>) -> Since {
    let content = match content {
        Ok(content) => content,
        Err(why) => return Since::Unknown(why.clone()),
    };
    let after = match read(front, &content.identity).await {
        Ok(after) => after,
        Err(why) => return Since::Unknown(why),
    };
    let shown = |value: Option<&Value>| value.map_or("nothing".to_owned(), Value::to_string);
    let mut names: Vec<&String> = content.before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    let changed: Vec<String> = names
        .into_iter()
        .filter(|k| !content.restless.contains(k))
        .filter(|k| content.before.get(*k) != after.get(*k))
        .take(3)
        .map(|k| {
            format!(
                "{k}: {} → {}",
                shown(content.before.get(k)),
                shown(after.get(k))
            )
        })
        .collect();
    if changed.is_empty() {
        Since::Unchanged
    } else {
        Since::Changed(changed.join(", "))
    }
}

/// What several rounds' reads say together: the first round whose effect changed, else the
/// first that could not be compared, else unchanged.
pub(crate) fn over_rounds(rounds: &[(usize, Since)]) -> Since {
    let changed = rounds.iter().find_map(|(round, since)| match since {
        Since::Changed(how) => Some(Since::Changed(format!("round {round}: {how}"))),
        _ => None,
    });
    let unknown = || {
        rounds.iter().find_map(|(_, since)| match since {
            Since::Unknown(why) => Some(Since::Unknown(why.clone())),
            _ => None,
        })
    };
    changed.or_else(unknown).unwrap_or(Since::Unchanged)
}

/// A sub-check that calls under a key left its first effect alone: first the count
/// (`counted`: whether it held, and what it saw), then the content `since` shows. Failed when
/// either shows a change; not covered when the count saw none and the content cannot be
/// compared; ok only when both held.
pub(crate) fn judged(
    checks: &mut Checks,
    (grade, what, expected): (Grade, String, &str),
    counted: (bool, String),
    since: Since,
    exchanges: &[usize],
) {
    let (held, saw) = counted;
    match since {
        _ if !held => {
            checks.add(grade, what, false, expected, saw, exchanges);
        }
        Since::Unchanged => {
            checks.add(
                grade,
                what,
                true,
                expected,
                format!("{saw}, and [read] reads the first effect as it was"),
                exchanges,
            );
        }
        Since::Changed(how) => {
            checks.add(
                grade,
                what,
                false,
                expected,
                format!(
                    "{saw}, but the first effect was changed in place (an overwrite, read back \
                     by [read]): {how}"
                ),
                exchanges,
            );
        }
        Since::Unknown(why) => {
            checks.not_covered(
                grade,
                what,
                expected,
                format!("{saw}, but {why}"),
                exchanges,
            );
        }
    }
}
