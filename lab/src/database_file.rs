//! Whether a path can be the SQLite file a command opens, checked before anything opens it: a
//! file that does not exist yet (in a folder that does), an empty file, or a SQLite database.
//! Never a folder, a device, a pipe or a file in another format, which SQLite would report only
//! later and as a store error.

use std::path::Path;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::error::{Error, Result};

/// The first 16 bytes of every SQLite database file.
pub const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Checks `path` without creating, opening for writing or changing anything.
///
/// ```
/// let folder = tempfile::tempdir()?;
/// let path = folder.path().join("runner.sqlite");
/// lab::database_file::check(&path)?; // not there yet: SQLite creates it
///
/// std::fs::write(&path, "hello")?;
/// let err = lab::database_file::check(&path).unwrap_err();
/// assert!(err.to_string().ends_with("not a SQLite database (it does not start with \"SQLite format 3\")"), "{err}");
/// let err = lab::database_file::check(folder.path()).unwrap_err();
/// assert!(err.to_string().ends_with("a folder, not a file"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`Error::InputInvalid`] naming the path and what it is instead; [`Error::InputUnreadable`]
/// when an existing file cannot be read.
pub fn check(path: &Path) -> Result<()> {
    let invalid = |problem: &str| Error::InputInvalid {
        subject: path.display().to_string(),
        problem: problem.to_owned(),
    };
    if path.as_os_str().is_empty() {
        // SQLite would open a private temporary database, gone when the command ends.
        return Err(invalid("the path is empty"));
    }
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let folder = match path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            };
            return match std::fs::metadata(folder) {
                Ok(folder) if folder.is_dir() => Ok(()),
                Ok(_) => Err(invalid("its folder is not a folder")),
                Err(_) => Err(invalid(&format!(
                    "the folder {} does not exist",
                    folder.display()
                ))),
            };
        }
        Err(source) => {
            return Err(Error::InputUnreadable {
                path: path.to_owned(),
                source,
            });
        }
    };
    if metadata.is_dir() {
        return Err(invalid("a folder, not a file"));
    }
    if !metadata.is_file() {
        return Err(invalid("not a regular file (a device, a pipe or a socket)"));
    }
    if metadata.len() == 0 {
        // SQLite treats an empty file as a new database.
        return Ok(());
    }
    check_header(path)
}

/// A file of some length must be a SQLite database that SQLite can read the schema of.
fn check_header(path: &Path) -> Result<()> {
    let invalid = |problem: &str| Error::InputInvalid {
        subject: path.display().to_string(),
        problem: problem.to_owned(),
    };
    // SQLite reads the header itself, never another API: this check may run while a connection
    // to the file is open in this process, and closing any other descriptor of the file would
    // drop every POSIX lock the process holds on it, SQLite's included. A read-only connection
    // creates nothing, and SQLite keeps its descriptor open while other connections hold locks.
    let unreadable = |source: rusqlite::Error| Error::InputUnreadable {
        path: path.to_owned(),
        source: std::io::Error::other(source),
    };
    let connection = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(unreadable)?;
    connection
        .busy_timeout(std::time::Duration::from_secs(10))
        .map_err(unreadable)?;
    let read = connection.query_row("SELECT COUNT(*) FROM sqlite_schema", [], |row| {
        row.get::<_, i64>(0)
    });
    match read {
        Ok(_) => {}
        Err(rusqlite::Error::SqliteFailure(failure, _))
            if failure.code == ErrorCode::NotADatabase =>
        {
            return Err(invalid(
                "not a SQLite database (it does not start with \"SQLite format 3\")",
            ));
        }
        Err(rusqlite::Error::SqliteFailure(failure, _))
            if failure.code == ErrorCode::DatabaseCorrupt =>
        {
            return Err(invalid(
                "a damaged SQLite database (SQLite cannot read its schema)",
            ));
        }
        Err(other) => return Err(unreadable(other)),
    }
    Ok(())
}
