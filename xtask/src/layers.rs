//! `cargo xtask layers`, and a check of `cargo xtask test`: the lab crate's files import each
//! other without a circle, and the check's files (`lab/src/check/`) keep to their layers, each
//! importing only from its own layer or one below it (issue 47).
//!
//! Imports are read from the source text, not from the compiler: a path that starts with
//! `crate::`, `super::` or the name of a module the file declares (`mod count;`) names a file of
//! the crate, and a name a file only re-exports is followed to the file that defines it. A file
//! naming a folder it is in (its `mod.rs`, which holds what the folder's files share) is not an
//! import. Test modules (`#[cfg(test)] mod tests`) are left out: a test may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// One layer of the check: the invariant it keeps, and its files (paths under
/// `lab/src/check/` without `.rs`; a folder's name takes every file in it).
pub struct Layer {
    pub name: &'static str,
    pub invariant: &'static str,
    pub modules: &'static [&'static str],
}

/// The check's layers, from the bottom up.
pub const CHECK_LAYERS: [Layer; 4] = [
    Layer {
        name: "description",
        invariant: "the target file, the history and the report as data: it opens no socket \
                    and no file, starts no process and runs no point",
        modules: &[
            "fields", "history", "target", "report", "excerpt", "junit", "html",
        ],
    },
    Layer {
        name: "wire",
        invariant: "the processes and sockets a run talks through: it knows the target file, \
                    not the points",
        modules: &["http", "gateway", "upstream"],
    },
    Layer {
        name: "run",
        invariant: "the probe, the calibration and the points: what is sent, and how it is \
                    judged, written once against a front where the fronts share it",
        modules: &[
            "probe",
            "both",
            "content",
            "calibration",
            "points",
            "hop",
            "http_front",
            "init",
        ],
    },
    Layer {
        name: "fronts",
        invariant: "a front's own target, probe and points (MCP), and the command's entry",
        modules: &["mcp", "mod"],
    },
];

/// What the description layer may not name: it does no I/O of its own.
const NO_IO: [&str; 8] = [
    "std::net::TcpStream",
    "std::net::TcpListener",
    "std::net::UdpSocket",
    "std::process",
    "std::fs",
    "tokio::",
    "hyper::",
    "rusqlite::",
];

/// A file of the crate, by its module path (`check::calibration::count`).
type Module = String;

/// Every file under `src` (a crate's `src/`), by module path, with its text outside tests.
fn modules(src: &Path) -> Result<BTreeMap<Module, String>> {
    let mut found = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                found.insert(module_of(src, &path), without_tests(&text));
            }
        }
    }
    Ok(found)
}

/// `check/calibration/mod.rs` is `check::calibration`; `lib.rs` and `main.rs` are the root, ``.
fn module_of(src: &Path, path: &Path) -> Module {
    let relative: PathBuf = path.strip_prefix(src).unwrap_or(path).with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The code of `text` without its test module, comments, and the insides of string and
/// character literals (a `'{'` would throw the count of braces).
fn without_tests(text: &str) -> String {
    let test_module = text.match_indices("#[cfg(test)]\n").find(|(at, marker)| {
        text[at + marker.len()..]
            .lines()
            .next()
            .is_some_and(|line| line.contains("mod ") && line.trim_end().ends_with('{'))
    });
    code_only(test_module.map_or(text, |(at, _)| &text[..at]))
}

/// `text` with comments and the insides of literals left out.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let rest = |n: usize| chars.get(i + n).copied();
        match chars[i] {
            '/' if rest(1) == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if rest(1) == Some('*') => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            'r' if matches!(rest(1), Some('"' | '#'))
                && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')) =>
            {
                let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
                if rest(1 + hashes) != Some('"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                i += 2 + hashes;
                let closing: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                while i < chars.len()
                    && !chars[i..].starts_with(&closing.chars().collect::<Vec<_>>())
                {
                    i += 1;
                }
                i += closing.len();
                out.push_str("\"\"");
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            '\'' if rest(2) == Some('\'') || (rest(1) == Some('\\') && rest(3) == Some('\'')) => {
                i += if rest(1) == Some('\\') { 4 } else { 3 };
                out.push_str("' '");
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The modules `module` names in `text`, resolved to files of `all`: a name a module only
/// re-exports (`pub use report::Report;`) is followed to the file that defines it, and a path in
/// an inline module (`mod section { ... }`) starts from that module.
fn imports(module: &str, text: &str, all: &BTreeMap<Module, String>) -> BTreeSet<Module> {
    inline_parts(module, text)
        .iter()
        .flat_map(|(inside, part)| paths(part).into_iter().map(move |path| (inside, path)))
        .filter_map(|(inside, path)| resolve(inside, &path, all, 0))
        .filter(|target| target != module && !is_ancestor(target, module))
        .collect()
}

/// Whether `ancestor` is a folder `module` is in (`check` of `check::calibration::count`): a
/// folder's `mod.rs` holds what its files share, so a file naming it is not an import of it.
fn is_ancestor(ancestor: &str, module: &str) -> bool {
    ancestor.is_empty()
        || module
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with("::"))
}

/// `text` cut where an inline module opens or closes, each part with the module it is in.
fn inline_parts(module: &str, text: &str) -> Vec<(Module, String)> {
    let mut parts = Vec::new();
    let mut stack: Vec<(String, usize)> = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    let name_of = |stack: &[(String, usize)]| {
        std::iter::once(module.to_owned())
            .chain(stack.iter().map(|(name, _)| name.clone()))
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("::")
    };
    for (at, c) in text.char_indices() {
        match c {
            '{' => {
                depth += 1;
                let before = text[start..at].trim_end();
                let opened = before
                    .rsplit_once("mod ")
                    .map(|(_, name)| name.trim())
                    .filter(|name| {
                        !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_')
                    });
                if let Some(name) = opened {
                    parts.push((name_of(&stack), text[start..at].to_owned()));
                    stack.push((name.to_owned(), depth));
                    start = at + 1;
                }
            }
            '}' => {
                if stack.last().is_some_and(|(_, opened)| *opened == depth) {
                    parts.push((name_of(&stack), text[start..at].to_owned()));
                    stack.pop();
                    start = at + 1;
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
    }
    parts.push((name_of(&stack), text[start..].to_owned()));
    parts
}

/// The modules a file declares (`mod count;`).
fn children(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub(crate) mod ")
                .or_else(|| line.strip_prefix("pub(super) mod "))
                .or_else(|| line.strip_prefix("pub mod "))
                .or_else(|| line.strip_prefix("mod "))?;
            rest.strip_suffix(';')
        })
        .collect()
}

/// The file `path`, written in `module`, names; `None` for a path outside the crate.
fn resolve(
    module: &str,
    path: &str,
    all: &BTreeMap<Module, String>,
    depth: usize,
) -> Option<Module> {
    let here: Vec<&str> = module.split("::").filter(|p| !p.is_empty()).collect();
    let mut words: Vec<&str> = path.split("::").collect();
    let mut base: Vec<&str> = match words.first().copied() {
        Some("crate") => {
            words.remove(0);
            Vec::new()
        }
        Some("super") => {
            let mut base = here.clone();
            while words.first() == Some(&"super") {
                words.remove(0);
                base.pop();
            }
            base
        }
        Some("self") => {
            words.remove(0);
            here.clone()
        }
        Some(first) if children(all.get(module).map_or("", String::as_str)).contains(&first) => {
            here.clone()
        }
        _ => return None,
    };
    // The longest prefix that is a file of the crate, and the name after it.
    let mut rest = words.into_iter();
    let mut item = None;
    for word in rest.by_ref() {
        base.push(word);
        if !all.contains_key(&base.join("::")) {
            base.pop();
            item = Some(word);
            break;
        }
    }
    let target = base.join("::");
    let text = all.get(&target)?;
    match item {
        Some(item) if depth < 8 && !defines(text, item) => re_export(text, item)
            .and_then(|from| resolve(&target, &from, all, depth + 1))
            .or(Some(target)),
        _ => Some(target),
    }
}

/// Whether `text` defines `item` itself.
fn defines(text: &str, item: &str) -> bool {
    [
        "fn",
        "struct",
        "enum",
        "const",
        "static",
        "type",
        "trait",
        "mod",
        "macro_rules!",
    ]
    .iter()
    .any(|kind| {
        text.match_indices(&format!("{kind} {item}"))
            .any(|(at, found)| {
                let after = text[at + found.len()..].chars().next();
                !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
    })
}

/// The path `text` re-exports `item` from (`pub use a::b::{Item, ...};` gives `a::b::Item`).
fn re_export(text: &str, item: &str) -> Option<String> {
    ["pub use ", "pub(crate) use "]
        .iter()
        .flat_map(|opening| text.match_indices(opening))
        .filter_map(|(at, opening)| {
            let start = at + opening.len();
            text[start..].find(';').map(|end| &text[start..start + end])
        })
        .flat_map(paths)
        .find(|path| path.rsplit("::").next() == Some(item))
}

/// Every path in `text` that starts with a module word, braces of a `use` expanded:
/// `use super::{a::B, c}` gives `super::a::B` and `super::c`.
fn paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        if starts_word && (bytes[i].is_ascii_alphabetic() || bytes[i] == b'_') {
            let (path, end) = path_at(text, i);
            out.extend(path);
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The path that starts at `at`, expanded, and where it ends.
fn path_at(text: &str, at: usize) -> (Vec<String>, usize) {
    let bytes = text.as_bytes();
    let mut end = at;
    while end < bytes.len()
        && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_' || bytes[end] == b':')
    {
        end += 1;
    }
    let head = &text[at..end];
    if !head.contains("::") {
        return (Vec::new(), end);
    }
    if head.ends_with("::") && bytes.get(end) == Some(&b'{') {
        let close = matching_brace(text, end);
        let inner = &text[end + 1..close];
        let prefix = head.to_owned();
        let expanded = split_top(inner)
            .into_iter()
            .flat_map(|part| {
                let part = part.trim();
                let (inner_paths, _) = if part.contains('{') || part.contains("::") {
                    path_at(&format!("{prefix}{part}"), 0)
                } else {
                    (vec![format!("{prefix}{part}")], 0)
                };
                inner_paths
            })
            .collect();
        return (expanded, close + 1);
    }
    (vec![head.trim_end_matches(':').to_owned()], end)
}

fn matching_brace(text: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i;
                }
            }
            _ => {}
        }
    }
    text.len() - 1
}

/// `a, b::{c, d}, e` split at its top-level commas.
fn split_top(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// The crate's import graph: each file and the files it names.
pub fn graph(src: &Path) -> Result<BTreeMap<Module, BTreeSet<Module>>> {
    let all = modules(src)?;
    Ok(all
        .iter()
        .map(|(module, text)| (module.clone(), imports(module, text, &all)))
        .collect())
}

/// Every circle of `graph` (its strongly connected parts of more than one file), each sorted.
pub fn circles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    // Two files are in one circle when each reaches the other.
    let reach = |from: &Module| -> BTreeSet<Module> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(next) = stack.pop() {
            for to in graph.get(&next).into_iter().flatten() {
                if seen.insert(to.clone()) {
                    stack.push(to.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&Module, BTreeSet<Module>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut circles: Vec<Vec<Module>> = Vec::new();
    for (module, reached) in &reaches {
        if !reached.contains(*module) || circles.iter().any(|c| c.contains(module)) {
            continue;
        }
        let circle: Vec<Module> = reached
            .iter()
            .filter(|other| reaches.get(other).is_some_and(|r| r.contains(*module)))
            .cloned()
            .collect();
        if circle.len() > 1 {
            circles.push(circle);
        }
    }
    circles
}

/// The layer of a module of the check (`check::calibration::count` is in `calibration`'s).
fn layer_of(module: &str) -> Option<usize> {
    let rest = module.strip_prefix("check")?;
    let first = rest
        .strip_prefix("::")
        .map_or("mod", |r| r.split("::").next().unwrap_or("mod"));
    CHECK_LAYERS
        .iter()
        .position(|layer| layer.modules.contains(&first))
}

/// Every problem: a circle anywhere in the crate, a file of the check in no layer, an import
/// from a higher layer, I/O in the description layer.
pub fn problems(root: &Path) -> Result<Vec<String>> {
    let src = root.join("lab/src");
    let graph = graph(&src)?;
    let all = modules(&src)?;
    let mut problems: Vec<String> = circles(&graph)
        .into_iter()
        .map(|circle| {
            let ties: Vec<String> = circle
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| circle.contains(to))
                        .map(move |to| format!("{from} -> {to}"))
                })
                .collect();
            format!(
                "lab/src: a circle of imports between {} ({})",
                circle.join(", "),
                ties.join("; ")
            )
        })
        .collect();
    for (module, imported) in &graph {
        if module != "check" && !module.starts_with("check::") {
            continue;
        }
        let Some(layer) = layer_of(module) else {
            problems.push(format!(
                "lab/src: {module} is in no layer of the check (xtask/src/layers.rs)"
            ));
            continue;
        };
        for to in imported {
            if let Some(theirs) = layer_of(to).filter(|&theirs| theirs > layer) {
                problems.push(format!(
                    "lab/src: {module} ({}) imports {to} ({}), a layer above it",
                    CHECK_LAYERS[layer].name, CHECK_LAYERS[theirs].name
                ));
            }
        }
        if layer == 0 {
            let text = &all[module];
            for word in NO_IO.iter().filter(|w| text.contains(**w)) {
                problems.push(format!(
                    "lab/src: {module} (description) names {word}: the description does no I/O"
                ));
            }
        }
    }
    Ok(problems)
}

/// `cargo xtask layers`: each layer with its invariant and files, then any problem.
pub fn run(root: &Path) -> Result<()> {
    let graph = graph(&root.join("lab/src"))?;
    for (n, layer) in CHECK_LAYERS.iter().enumerate().rev() {
        println!("{} {}: {}", n + 1, layer.name, layer.invariant);
        for module in graph.keys().filter(|m| layer_of(m) == Some(n)) {
            println!("    {module}");
        }
    }
    let problems = problems(root)?;
    if problems.is_empty() {
        println!(
            "layers: no circle in lab/src, every import of the check within its layer or below"
        );
        Ok(())
    } else {
        anyhow::bail!(
            "{} layer problem(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join("lab/src").join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn paths_are_read_through_braces_and_children() {
        let text = "mod d;\nuse super::{a::X, b};\nuse d::Y;\nfn f() { crate::check::a::g(); }\n\
                    mod inner { use super::super::e::Z; }\nfn g() { let _ = \"super::f::W\"; }";
        let all: BTreeMap<Module, String> = [
            ("check", ""),
            ("check::a", ""),
            ("check::b", ""),
            ("check::c", text),
            ("check::c::d", ""),
            ("check::e", ""),
            ("check::f", ""),
        ]
        .iter()
        .map(|(m, t)| ((*m).to_owned(), code_only(t)))
        .collect();
        let found = imports("check::c", &all["check::c"], &all);
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            ["check::a", "check::b", "check::c::d", "check::e"]
        );
    }

    #[test]
    fn a_circle_a_climb_and_io_below_are_each_named() {
        let dir = tree(&[
            ("lib.rs", "pub mod check;\npub mod other;\npub mod more;"),
            ("other.rs", "use crate::more::X;"),
            ("more.rs", "pub struct X;\nfn f() { super::other::g(); }"),
            ("check/mod.rs", "mod report;\nmod probe;"),
            (
                "check/report.rs",
                "use super::probe::Probe;\nfn f() { std::fs::read(\"x\"); }",
            ),
            ("check/probe.rs", "pub struct Probe;"),
            ("check/stray.rs", ""),
        ]);
        let problems = problems(dir.path()).unwrap();
        let all = problems.join("\n");
        assert!(
            all.contains("a circle of imports between more, other"),
            "{all}"
        );
        assert!(
            all.contains("check::report (description) imports check::probe (run)"),
            "{all}"
        );
        assert!(
            all.contains("check::report (description) names std::fs:"),
            "{all}"
        );
        assert!(all.contains("check::stray is in no layer"), "{all}");
        assert_eq!(problems.len(), 4, "{all}");
    }

    #[test]
    fn the_lab_keeps_its_layers() {
        let root = crate::root();
        assert_eq!(problems(&root).unwrap(), Vec::<String>::new());
        // The graph is read: the check's entry imports its layers.
        let graph = graph(&root.join("lab/src")).unwrap();
        assert!(
            graph["check"].contains("check::report"),
            "{:?}",
            graph["check"]
        );
    }
}
