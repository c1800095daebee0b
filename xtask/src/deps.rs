//! The library folder `mdbook test -L` reads: exactly one build of the lab and of each crate it
//! depends on.
//!
//! `target/debug/deps` will not do. It collects every build ever made (other features, other
//! versions), and rustdoc then fails with E0464, "multiple candidates for `rlib` dependency". So
//! the folder is refilled from the artifacts one `cargo build -p lab` reports.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result, bail};

/// Builds the lab library and fills `target/book-deps` with its artifacts; returns the folder.
pub fn library_folder(root: &Path) -> Result<PathBuf> {
    let output = crate::cargo()
        // Every feature, so the PostgreSQL chapter's example finds the backend it runs against.
        .args([
            "build",
            "-p",
            "lab",
            "--lib",
            "--all-features",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build for the book's library folder")?;
    if !output.status.success() {
        bail!("cargo build -p lab failed ({})", output.status);
    }
    let artifacts = library_artifacts(&String::from_utf8_lossy(&output.stdout))?;
    if !artifacts.iter().any(|p| file_name(p).starts_with("liblab")) {
        bail!("cargo build -p lab reported no lab library among its artifacts");
    }
    let folder = root.join("target").join("book-deps");
    if folder.exists() {
        std::fs::remove_dir_all(&folder)
            .with_context(|| format!("emptying {}", folder.display()))?;
    }
    std::fs::create_dir_all(&folder)?;
    for artifact in &artifacts {
        let destination = folder.join(file_name(artifact));
        std::fs::hard_link(artifact, &destination)
            .or_else(|_| std::fs::copy(artifact, &destination).map(drop))
            .with_context(|| format!("copying {} to {}", artifact.display(), folder.display()))?;
    }
    Ok(folder)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The library files (`.rlib`, and proc-macro shared objects) among cargo's JSON messages.
fn library_artifacts(messages: &str) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for line in messages.lines().filter(|l| l.starts_with('{')) {
        let message: serde_json::Value =
            serde_json::from_str(line).context("reading cargo's JSON messages")?;
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        let kinds = message["target"]["kind"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !kinds
            .iter()
            .any(|k| k == "lib" || k == "rlib" || k == "proc-macro")
        {
            continue;
        }
        let names: Vec<PathBuf> = message["filenames"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| PathBuf::from(f.as_str().unwrap_or_default()))
            .collect();
        // For a workspace crate cargo names the copy it lifts to target/debug (liblab.rlib),
        // which the last build of *any* feature set overwrote. The build this message is about
        // sits in deps/ beside its .rmeta, under the same hashed name: take that one.
        let in_deps = names
            .iter()
            .find(|f| f.extension().is_some_and(|e| e == "rmeta"))
            .map(|rmeta| rmeta.with_extension("rlib"))
            .filter(|rlib| rlib.exists());
        for file in names {
            let wanted = file
                .extension()
                .is_some_and(|e| e == "rlib" || e == "so" || e == "dylib" || e == "dll");
            if wanted {
                let is_rlib = file.extension().is_some_and(|e| e == "rlib");
                files.push(match (&in_deps, is_rlib) {
                    (Some(rlib), true) => rlib.clone(),
                    _ => file,
                });
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_library_files_are_collected() {
        let messages = r#"{"reason":"compiler-artifact","target":{"kind":["lib"]},"filenames":["/t/libserde-1.rlib","/t/libserde-1.rmeta"]}
{"reason":"compiler-artifact","target":{"kind":["proc-macro"]},"filenames":["/t/libserde_derive-2.so"]}
{"reason":"compiler-artifact","target":{"kind":["custom-build"]},"filenames":["/t/build-script-build"]}
{"reason":"build-finished","success":true}"#;
        let files = library_artifacts(messages).unwrap();
        assert_eq!(
            files,
            [
                PathBuf::from("/t/libserde-1.rlib"),
                PathBuf::from("/t/libserde_derive-2.so")
            ]
        );
    }
}
