//! A throwaway SQLite database for adapters that keep their own schema.

use std::path::PathBuf;
use std::sync::Arc;

use rusqlite::Connection;

use crate::error::{Error, Result};

/// A connection to a database file in a temporary folder, removed when the last connection to it
/// is dropped. Commits are not synced to disk: the simulator checks coordination, not durability.
pub struct Scratch {
    connection: Connection,
    path: PathBuf,
    folder: Arc<tempfile::TempDir>,
}

impl Scratch {
    /// A fresh database with `schema` applied.
    ///
    /// # Errors
    /// [`Error::TemporaryFolder`] or [`Error::Store`] if the folder or the database cannot be
    /// created.
    pub fn create(schema: &str) -> Result<Scratch> {
        let folder = tempfile::Builder::new()
            .prefix("tool-retries-sim-")
            .tempdir()
            .map_err(|source| Error::TemporaryFolder { source })?;
        let path = folder.path().join("tickets.sqlite");
        let scratch = Scratch::open(path, Arc::new(folder))?;
        scratch.connection.execute_batch(schema)?;
        Ok(scratch)
    }

    /// Another connection to the same database.
    ///
    /// # Errors
    /// [`Error::Store`] if the database cannot be opened.
    pub fn connect(&self) -> Result<Scratch> {
        Scratch::open(self.path.clone(), Arc::clone(&self.folder))
    }

    fn open(path: PathBuf, folder: Arc<tempfile::TempDir>) -> Result<Scratch> {
        let connection = Connection::open(&path)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "OFF")?;
        Ok(Scratch {
            connection,
            path,
            folder,
        })
    }

    /// The connection.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }
}
