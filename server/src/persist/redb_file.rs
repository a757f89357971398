//! One redb database file of the data dir, opened with clear errors and written with one
//! fsync per transaction. The store's file (`store.redb`, [`super::DataDir`]) and the local IoT
//! Hub's (`iothub.redb`) both use it, so that a locked, damaged, foreign or newer-format file
//! gives the same errors for both, and a failed write is retried the same way.
//!
//! The directory and the file are private to the server's user (0700, 0600), see
//! [`super::private`].
//!
//! Opening never changes or wipes anything it does not understand: a directory that cannot be
//! written, a file locked by another server, a file from another format or program, or a
//! damaged file is a [`PersistError`] naming the file.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use redb::{
    Database, DatabaseError, Durability, ReadTransaction, ReadableDatabase, ReadableTable,
    StorageError, TableDefinition, TableError, WriteTransaction,
};

use super::PersistError;

/// The table of format markers and counters (`&str` → `u64`), in every file.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Why a commit failed (the disk is full, an I/O error): nothing of it was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot write {file}: {reason}")]
pub struct CommitFailed {
    /// The database file.
    pub file: String,
    /// What the database said.
    pub reason: String,
}

/// An open database file (locked while it is open).
#[derive(Debug)]
pub(crate) struct RedbFile {
    dir: PathBuf,
    file: PathBuf,
    /// `None` after a failed commit: redb refuses every write after an I/O error until the
    /// file is opened again, which the next commit does (so writes work again once the disk
    /// has room).
    db: Mutex<Option<Database>>,
    /// Set by [`RedbFile::close`]: the file is released and not opened again.
    closed: std::sync::atomic::AtomicBool,
}

impl RedbFile {
    /// Opens (creating them if needed, private: see [`super::private`]) the directory and
    /// the file `name` in it.
    pub fn open(dir: &Path, name: &str) -> Result<RedbFile, PersistError> {
        super::private::create_data_dir(dir)?;
        let file = dir.join(name);
        let db = open_database(&file).map_err(|e| open_error(&file, e))?;
        Ok(RedbFile {
            dir: dir.to_owned(),
            file,
            db: Mutex::new(Some(db)),
            closed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The database file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// A data dir error naming the file.
    pub fn fail(
        &self,
        what: &str,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> PersistError {
        let cause = e.into();
        PersistError::caused(format!("{}: {what}: {cause}", self.file.display()), cause)
    }

    fn lock_db(&self) -> std::sync::MutexGuard<'_, Option<Database>> {
        self.db.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks the format marker `format_key` of the meta table: a new (empty) file is
    /// initialised by `init` (which creates the file's tables) and the marker written, and
    /// `Ok(true)` returned; a file of this format gives `Ok(false)`; anything else (another
    /// format, another program's tables, no marker) is an error and nothing is changed.
    pub fn check_format(
        &self,
        format_key: &str,
        format: u64,
        init: impl FnOnce(&WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<bool, PersistError> {
        let found = self.read(|read| {
            let meta = match read.open_table(META) {
                Ok(meta) => meta,
                Err(TableError::TableDoesNotExist(_)) => {
                    let tables = read
                        .list_tables()
                        .map_err(|e| self.fail("cannot read", e))?
                        .count();
                    if tables > 0 {
                        return Err(self.fail(
                            "not an mqstate data file",
                            format!(
                                "it holds {tables} tables of another program; nothing was changed"
                            ),
                        ));
                    }
                    return Ok(None);
                }
                Err(e) => {
                    return Err(self.fail(
                        "not an mqstate data file (or from an incompatible version)",
                        e,
                    ));
                }
            };
            let marker = meta
                .get(format_key)
                .map_err(|e| self.fail("cannot read", e))?
                .map(|v| v.value());
            Ok(Some(marker))
        })?;
        match found {
            None => {
                self.write(|txn| {
                    txn.open_table(META)?.insert(format_key, format)?;
                    init(txn)
                })
                .map_err(|e| self.fail("cannot initialise", e.reason))?;
                Ok(true)
            }
            Some(Some(f)) if f == format => Ok(false),
            Some(Some(other)) => Err(self.fail(
                "incompatible version",
                format!(
                    "written in format {other}, this mqstate reads format {format}; use the mqstate version that wrote it (nothing was changed)"
                ),
            )),
            Some(None) => Err(self.fail("not an mqstate data file", "no format marker")),
        }
    }

    /// Closes the file (releasing its lock, so that a new server can open it while handles
    /// to this one still exist); every later write fails.
    pub fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        *self.lock_db() = None;
    }

    /// Runs `f` in a read transaction.
    pub fn read<T>(
        &self,
        f: impl FnOnce(&ReadTransaction) -> Result<T, PersistError>,
    ) -> Result<T, PersistError> {
        let guard = self.lock_db();
        let db = guard
            .as_ref()
            .ok_or_else(|| self.fail("cannot read", "the database is not open"))?;
        let read = db.begin_read().map_err(|e| self.fail("cannot read", e))?;
        f(&read)
    }

    /// Runs `f` in a write transaction that is on disk when this returns (one fsync); on
    /// failure nothing of it was written, and the file is opened again by the next write.
    pub fn write(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), CommitFailed> {
        let mut guard = self.lock_db();
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(CommitFailed {
                file: self.file.display().to_string(),
                reason: "the file was closed (the server stopped)".into(),
            });
        }
        if guard.is_none() {
            let db = open_database(&self.file).map_err(|e| CommitFailed {
                file: self.file.display().to_string(),
                reason: format!("cannot open it again after a failed write: {e}"),
            })?;
            *guard = Some(db);
        }
        let Some(db) = guard.as_ref() else {
            return Err(CommitFailed {
                file: self.file.display().to_string(),
                reason: "the database is not open".into(),
            });
        };
        let run = || -> Result<(), redb::Error> {
            let mut txn = db.begin_write()?;
            txn.set_durability(Durability::Immediate)?;
            f(&txn)?;
            txn.commit()?;
            Ok(())
        };
        run().map_err(|e| {
            // Closed now, opened again by the next commit.
            *guard = None;
            CommitFailed {
                file: self.file.display().to_string(),
                reason: e.to_string(),
            }
        })
    }
}

/// Reads a `u64` of the meta table (`None` when absent).
pub(crate) fn meta_get(
    read: &ReadTransaction,
    key: &str,
    file: &RedbFile,
) -> Result<Option<u64>, PersistError> {
    let meta = read
        .open_table(META)
        .map_err(|e| file.fail("cannot read", e))?;
    Ok(meta
        .get(key)
        .map_err(|e| file.fail("cannot read", e))?
        .map(|v| v.value()))
}

/// Raises a `u64` of the meta table to at least `value`.
pub(crate) fn meta_raise(txn: &WriteTransaction, key: &str, value: u64) -> Result<(), redb::Error> {
    let mut meta = txn.open_table(META)?;
    let stored = meta.get(key)?.map_or(0, |v| v.value());
    meta.insert(key, stored.max(value))?;
    Ok(())
}

/// Opens (creating it) the database file. The file is opened here, not by redb, so that a new
/// one is created with mode 0600 at once (redb's own `create` leaves the mode to the umask);
/// redb keeps everything in this one file (no journal or temporary file beside it). An older
/// file others can read is tightened once redb has opened it: a file that is not a database
/// is left exactly as it was.
fn open_database(file: &Path) -> Result<Database, DatabaseError> {
    let opened = super::private::create_file(file)?;
    let handle = opened.try_clone()?;
    let db = Database::builder().create_file(opened)?;
    super::private::tighten_file(&handle, file)?;
    Ok(db)
}

/// A clear message for each way the database file can fail to open.
fn open_error(file: &Path, e: DatabaseError) -> PersistError {
    let shown = file.display();
    let text = match &e {
        DatabaseError::DatabaseAlreadyOpen => format!(
            "{shown} is locked: another mqstate serve (or another program) uses this data dir"
        ),
        DatabaseError::UpgradeRequired(v) => format!(
            "{shown} is in an old database format ({v}) this mqstate cannot read; nothing was changed"
        ),
        DatabaseError::Storage(StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            format!("{shown} is not writable: {io}")
        }
        DatabaseError::Storage(StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::StorageFull =>
        {
            format!("cannot open {shown}: the disk is full: {io}")
        }
        DatabaseError::Storage(StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::InvalidData =>
        {
            format!(
                "{shown} is damaged or not an mqstate data file ({io}); nothing was changed (move it away to start empty)"
            )
        }
        DatabaseError::Storage(StorageError::Io(io)) => {
            format!("cannot open {shown}: {io}; nothing was changed")
        }
        other => format!(
            "{shown} is damaged or not an mqstate data file: {other}; nothing was changed (move it away to start empty)"
        ),
    };
    PersistError::caused(text, e)
}
