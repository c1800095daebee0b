//! The evidence file: what a run observed and what produced it, written atomically.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::suite::Observations;

/// The experiment's identifier, unchanged while the scenarios keep their meaning.
pub const EXPERIMENT: &str = "local-sqlite-tool-retries-v1";

/// A run's evidence: the shape of `results.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// The experiment's identifier.
    pub experiment: String,
    /// The tool the scenarios ran against, such as `sqlite`.
    pub backend: String,
    /// The lab crate's version.
    pub lab: String,
    /// The compiler that built the lab, as `rustc --version` prints it.
    pub rustc: String,
    /// The SQLite library linked into the lab.
    pub sqlite: String,
    /// Operating system and architecture, such as `linux-x86_64`.
    pub platform: String,
    /// True: evidence is only written after every check passed.
    pub passed: bool,
    /// What each scenario observed.
    pub scenarios: Observations,
}

impl Evidence {
    /// Evidence of a passed run against `backend`, stamped with this build's versions.
    pub fn new(backend: &str, scenarios: Observations) -> Evidence {
        Evidence {
            experiment: EXPERIMENT.to_owned(),
            backend: backend.to_owned(),
            lab: env!("CARGO_PKG_VERSION").to_owned(),
            rustc: env!("LAB_RUSTC_VERSION").to_owned(),
            sqlite: crate::sqlite::sqlite_version().to_owned(),
            platform: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
            passed: true,
            scenarios,
        }
    }

    /// The evidence as pretty JSON with two-space indents and a final newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("evidence is plain data");
        text.push('\n');
        text
    }

    /// Reads an evidence file, such as the committed `results.json`.
    ///
    /// # Errors
    /// [`Error::InputUnreadable`] or [`Error::InputInvalid`], naming the file and what is wrong.
    pub fn read(path: &Path) -> Result<Evidence> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::InputUnreadable {
            path: path.to_owned(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|err| Error::InputInvalid {
            subject: path.display().to_string(),
            problem: format!("not an evidence file: {err}"),
        })
    }
}

/// A file being written next to its destination, which only replaces the destination when
/// [`AtomicFile::commit`] renames it into place. Dropped without a commit, it leaves nothing behind.
///
/// Create it before the work that produces the content, so an unwritable destination is reported
/// before any time is spent.
///
/// Only a regular file (or nothing) is replaced. A destination that is a folder, a device, a pipe,
/// a socket or a symbolic link is refused: renaming over it would put a regular file where the
/// node was, and a symbolic link would lose its link. (For a link, give the path it points to.)
pub struct AtomicFile {
    destination: PathBuf,
    temporary: tempfile::NamedTempFile,
}

impl AtomicFile {
    /// Prepares to write `destination`, creating a temporary file in the same folder (a rename is
    /// only atomic within one file system).
    ///
    /// # Errors
    /// [`Error::OutputUnwritable`] if the folder does not exist or cannot be written, or the
    /// destination exists and is not a regular file.
    pub fn create(destination: &Path) -> Result<AtomicFile> {
        let unwritable = |source| Error::OutputUnwritable {
            path: destination.to_owned(),
            source,
        };
        refuse_other_than_a_file(destination).map_err(unwritable)?;
        let folder = match destination.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let name = destination
            .file_name()
            .ok_or_else(|| unwritable(std::io::Error::other("the path names no file")))?;
        let temporary = tempfile::Builder::new()
            .prefix(&format!(".{}.", name.to_string_lossy()))
            .suffix(".tmp")
            .tempfile_in(folder)
            .map_err(unwritable)?;
        Ok(AtomicFile {
            destination: destination.to_owned(),
            temporary,
        })
    }

    /// Writes `content`, syncs it, and renames it over the destination.
    ///
    /// # Errors
    /// [`Error::OutputUnwritable`]; the destination is then unchanged.
    pub fn commit(mut self, content: &[u8]) -> Result<()> {
        let unwritable = |source| Error::OutputUnwritable {
            path: self.destination.clone(),
            source,
        };
        // Checked again: the destination may have changed while the content was produced.
        refuse_other_than_a_file(&self.destination).map_err(unwritable)?;
        let file = self.temporary.as_file_mut();
        file.write_all(content).map_err(unwritable)?;
        file.sync_all().map_err(unwritable)?;
        // The temporary file is private (0600); a results file is meant to be read by others.
        let permissions = std::fs::metadata(&self.destination)
            .map(|meta| meta.permissions())
            .unwrap_or_else(|_| default_permissions());
        file.set_permissions(permissions).map_err(unwritable)?;
        let destination = self.destination.clone();
        self.temporary
            .persist(&destination)
            .map_err(|err| unwritable(err.error))?;
        Ok(())
    }
}

/// `Ok` when `destination` does not exist or is a regular file (not a link to one).
fn refuse_other_than_a_file(destination: &Path) -> std::io::Result<()> {
    let kind = match std::fs::symlink_metadata(destination) {
        Ok(metadata) => metadata.file_type(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    let what = if kind.is_file() {
        return Ok(());
    } else if kind.is_dir() {
        "it is a folder"
    } else if kind.is_symlink() {
        "it is a symbolic link; give the path of the file it points to"
    } else {
        "it is not a regular file (a device, a pipe or a socket), which the lab never replaces"
    };
    Err(std::io::Error::other(what))
}

#[cfg(unix)]
fn default_permissions() -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    std::fs::Permissions::from_mode(0o644)
}

#[cfg(not(unix))]
fn default_permissions() -> std::fs::Permissions {
    // Elsewhere a new file's default permissions are already readable.
    std::fs::metadata(".")
        .map(|meta| meta.permissions())
        .expect("the current folder exists")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abandoned_atomic_file_leaves_the_destination_and_folder_as_they_were() {
        let folder = tempfile::tempdir().unwrap();
        let destination = folder.path().join("out.json");
        std::fs::write(&destination, b"old").unwrap();
        drop(AtomicFile::create(&destination).unwrap());
        assert_eq!(std::fs::read(&destination).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(folder.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_committed_atomic_file_replaces_the_destination() {
        let folder = tempfile::tempdir().unwrap();
        let destination = folder.path().join("out.json");
        std::fs::write(&destination, b"old").unwrap();
        AtomicFile::create(&destination)
            .unwrap()
            .commit(b"new")
            .unwrap();
        assert_eq!(std::fs::read(&destination).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(folder.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_missing_folder_is_reported_with_the_path() {
        let err = AtomicFile::create(Path::new("/nonexistent-folder/out.json"))
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("/nonexistent-folder/out.json"),
            "{err}"
        );
    }
}
