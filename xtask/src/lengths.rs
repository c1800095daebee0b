//! Functions a reader can hold: every function in `lab/src` and `xtask/src`, measured from its
//! `fn` line to its closing brace (doc comments and attributes not counted), must fit in
//! [`LIMIT`] lines. The sources are parsed with `syn`, so braces in strings, comments and macros
//! cannot fool the count. `cargo xtask function-lengths [N]` lists the N longest.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use syn::visit::Visit;

/// The longest a function may be, in lines.
pub const LIMIT: usize = 80;

/// The folders whose functions are measured, relative to the repository root.
pub const FOLDERS: &[&str] = &["lab/src", "xtask/src"];

/// One function and its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// The file, relative to the repository root.
    pub file: PathBuf,
    /// The function's name, with its `impl` or `trait` type in front for a method (`Type::name`).
    pub name: String,
    /// The 1-based line of its `fn` keyword.
    pub line: usize,
    /// Lines from the `fn` keyword to the closing brace, both included.
    pub lines: usize,
}

/// Every function with a body in one Rust source text, nested ones included.
///
/// # Errors
/// The text is not Rust that `syn` can parse.
pub fn functions(file: &Path, source: &str) -> Result<Vec<Function>> {
    let parsed = syn::parse_file(source).with_context(|| format!("parsing {}", file.display()))?;
    let mut visitor = Measure {
        file,
        owner: Vec::new(),
        found: Vec::new(),
    };
    visitor.visit_file(&parsed);
    Ok(visitor.found)
}

/// Every function under [`FOLDERS`], longest first.
///
/// # Errors
/// A folder or file cannot be read, or a file cannot be parsed.
pub fn measure(root: &Path) -> Result<Vec<Function>> {
    let mut all = Vec::new();
    for folder in FOLDERS {
        for path in rust_files(&root.join(folder))? {
            let source = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let relative = path.strip_prefix(root).unwrap_or(&path);
            all.extend(functions(relative, &source)?);
        }
    }
    all.sort_by(|a, b| b.lines.cmp(&a.lines).then_with(|| a.file.cmp(&b.file)));
    Ok(all)
}

/// One line per function over [`LIMIT`]: no file is exempt.
pub fn problems(functions: &[Function]) -> Vec<String> {
    functions
        .iter()
        .filter(|f| f.lines > LIMIT)
        .map(|f| {
            format!(
                "{}:{}: `{}` runs {} lines; split it to at most {LIMIT} (a reader must hold a function at once)",
                f.file.display(),
                f.line,
                f.name,
                f.lines
            )
        })
        .collect()
}

/// `cargo xtask function-lengths [N]`: the N longest functions of the whole tree.
pub fn run(root: &Path, most: usize) -> Result<()> {
    for f in measure(root)?.iter().take(most) {
        println!(
            "{:>4}  {}:{}  {}",
            f.lines,
            f.file.display(),
            f.line,
            f.name
        );
    }
    Ok(())
}

/// Every `.rs` file under `folder`, sorted.
pub fn rust_files(folder: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let entries =
        std::fs::read_dir(folder).with_context(|| format!("reading {}", folder.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(rust_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

struct Measure<'f> {
    file: &'f Path,
    /// The `impl` or `trait` types around the function being visited.
    owner: Vec<String>,
    found: Vec<Function>,
}

impl Measure<'_> {
    fn record(&mut self, name: &syn::Ident, sig: &syn::Signature, block: &syn::Block) {
        let start = sig.fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        let name = match self.owner.last() {
            Some(owner) => format!("{owner}::{name}"),
            None => name.to_string(),
        };
        self.found.push(Function {
            file: self.file.to_owned(),
            name,
            line: start,
            lines: end + 1 - start,
        });
    }
}

fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(path) => path
            .path
            .segments
            .last()
            .map_or_else(|| "_".to_owned(), |s| s.ident.to_string()),
        syn::Type::Reference(reference) => type_name(&reference.elem),
        _ => "_".to_owned(),
    }
}

impl<'ast> Visit<'ast> for Measure<'_> {
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.record(&item.sig.ident, &item.sig, &item.block);
        syn::visit::visit_item_fn(self, item);
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        self.owner.push(type_name(&item.self_ty));
        syn::visit::visit_item_impl(self, item);
        self.owner.pop();
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        self.owner.push(item.ident.to_string());
        syn::visit::visit_item_trait(self, item);
        self.owner.pop();
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        self.record(&item.sig.ident, &item.sig, &item.block);
        syn::visit::visit_impl_item_fn(self, item);
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(block) = &item.default {
            self.record(&item.sig.ident, &item.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long_function(name: &str, lines: usize) -> String {
        let body: String = (0..lines - 2)
            .map(|i| format!("    let _x{i} = \"}}\";\n"))
            .collect();
        format!("/// Doc.\n#[inline]\nfn {name}() {{\n{body}}}\n")
    }

    #[test]
    fn a_function_is_measured_from_fn_to_its_brace_and_braces_in_strings_do_not_count() {
        let source = format!(
            "{}\nstruct S;\nimpl S {{\n    fn short(&self) {{}}\n}}\ntrait T {{ fn d(&self) {{\n}} }}\n",
            long_function("long", LIMIT + 1)
        );
        let found = functions(Path::new("x.rs"), &source).unwrap();
        let lengths: Vec<(&str, usize, usize)> = found
            .iter()
            .map(|f| (f.name.as_str(), f.line, f.lines))
            .collect();
        assert_eq!(
            lengths,
            [("long", 3, LIMIT + 1), ("S::short", 87, 1), ("T::d", 89, 2)]
        );
    }

    #[test]
    fn a_function_over_the_limit_is_refused_and_one_at_the_limit_is_not() {
        let source = format!(
            "{}{}",
            long_function("too_long", LIMIT + 1),
            long_function("just_fits", LIMIT)
        );
        let found = functions(Path::new("xtask/src/x.rs"), &source).unwrap();
        let problems = problems(&found);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("xtask/src/x.rs:3: `too_long` runs 81 lines"));
    }

    #[test]
    fn a_boundary_file_is_refused_like_any_other() {
        let source = long_function("too_long", LIMIT + 1);
        let found = functions(Path::new("lab/src/http/x.rs"), &source).unwrap();
        assert_eq!(found[0].lines, LIMIT + 1);
        assert_eq!(problems(&found).len(), 1);
    }
}
