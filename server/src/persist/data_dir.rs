//! The data dir: one redb database file, `store.redb`, holding every persisted key and the
//! highest HLC millisecond the server has used; and `broker/`, the embedded broker's session
//! storage.
//!
//! Opening never changes or wipes anything it does not understand: a directory that cannot
//! be written, a file locked by another server, a file from another format or program, or a
//! damaged file is a [`ServerError::DataDir`] naming the file, and the server does not start.
//!
//! ```
//! use bytes::Bytes;
//! use mqstate::Hlc;
//! use mqstate_server::persist::DataDir;
//! use mqstate_server::persist::record::Record;
//!
//! let tmp = tempfile::tempdir().unwrap();
//! let (dir, restored) = DataDir::open(tmp.path()).unwrap();
//! assert!(restored.records.is_empty());
//! let record = Record {
//!     value: Bytes::from_static(b"v"),
//!     version: Hlc::new(7, 0, "StateStore"),
//!     fencing_token: None,
//!     deadline_unix_ms: None,
//! };
//! dir.commit(&[(Bytes::from_static(b"k"), Some(record.clone()))], 7).unwrap();
//! drop(dir);
//! let (_dir, restored) = DataDir::open(tmp.path()).unwrap();
//! assert_eq!(restored.records, vec![(Bytes::from_static(b"k"), record)]);
//! assert_eq!(restored.clock_ms, 7);
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use redb::{
    Database, DatabaseError, Durability, ReadableDatabase, ReadableTable, StorageError,
    TableDefinition, TableError,
};

use super::record::{self, Record};
use crate::error::ServerError;

/// The database file inside the data dir.
pub const STORE_FILE: &str = "store.redb";
/// The embedded broker's session storage inside the data dir.
pub const BROKER_DIR: &str = "broker";
/// The on-disk format this version reads and writes.
pub const FORMAT: u64 = 1;

const KEYS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("keys");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const META_FORMAT: &str = "format";
const META_CLOCK_MS: &str = "clock_ms";

/// What was on disk when the data dir was opened.
#[derive(Debug, Default)]
pub struct Restored {
    /// Every stored key (expired ones included: the caller drops them).
    pub records: Vec<(Bytes, Record)>,
    /// The highest HLC millisecond the server had used (0 for a new data dir).
    pub clock_ms: u64,
}

/// An open data dir (the database file is locked while it is open).
#[derive(Debug)]
pub struct DataDir {
    dir: PathBuf,
    file: PathBuf,
    /// `None` after a failed commit: redb refuses every write after an I/O error until the
    /// file is opened again, which the next commit does (so writes work again once the disk
    /// has room).
    db: Mutex<Option<Database>>,
}

/// Why a commit failed (the disk is full, an I/O error): nothing of it was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot write {file}: {reason}")]
pub struct CommitFailed {
    /// The database file.
    pub file: String,
    /// What the database said.
    pub reason: String,
}

impl DataDir {
    /// Opens (creating it if needed) the data dir and reads every stored key.
    pub fn open(dir: &Path) -> Result<(DataDir, Restored), ServerError> {
        let shown = dir.display();
        if dir.exists() && !dir.is_dir() {
            return Err(ServerError::DataDir(format!(
                "{shown} exists and is not a directory"
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| {
            ServerError::DataDir(format!("cannot create the directory {shown}: {e}"))
        })?;
        let file = dir.join(STORE_FILE);
        let db = Database::builder()
            .create(&file)
            .map_err(|e| open_error(&file, e))?;
        let data_dir = DataDir {
            dir: dir.to_owned(),
            file,
            db: Mutex::new(None),
        };
        let restored = data_dir.check_and_load(&db)?;
        *data_dir.lock_db() = Some(db);
        Ok((data_dir, restored))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The database file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    fn fail(&self, what: &str, e: impl std::fmt::Display) -> ServerError {
        ServerError::DataDir(format!("{}: {what}: {e}", self.file.display()))
    }

    /// Checks the format (initialising a new file) and reads every key.
    fn lock_db(&self) -> std::sync::MutexGuard<'_, Option<Database>> {
        self.db.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check_and_load(&self, db: &Database) -> Result<Restored, ServerError> {
        let read = db.begin_read().map_err(|e| self.fail("cannot read", e))?;
        let meta = match read.open_table(META) {
            Ok(meta) => Some(meta),
            Err(TableError::TableDoesNotExist(_)) => None,
            Err(e) => {
                return Err(self.fail(
                    "not an mqstate data file (or from an incompatible version)",
                    e,
                ));
            }
        };
        let Some(meta) = meta else {
            let tables = read
                .list_tables()
                .map_err(|e| self.fail("cannot read", e))?
                .count();
            if tables > 0 {
                return Err(self.fail(
                    "not an mqstate data file",
                    format!("it holds {tables} tables of another program; nothing was changed"),
                ));
            }
            drop(read);
            self.initialise(db)?;
            return Ok(Restored::default());
        };
        let get = |name: &str| -> Result<Option<u64>, ServerError> {
            Ok(meta
                .get(name)
                .map_err(|e| self.fail("cannot read", e))?
                .map(|v| v.value()))
        };
        match get(META_FORMAT)? {
            Some(FORMAT) => {}
            Some(other) => {
                return Err(self.fail(
                    "incompatible version",
                    format!(
                        "written in format {other}, this mqstate reads format {FORMAT}; use the mqstate version that wrote it (nothing was changed)"
                    ),
                ));
            }
            None => return Err(self.fail("not an mqstate data file", "no format marker")),
        }
        let clock_ms = get(META_CLOCK_MS)?.unwrap_or(0);
        let keys = read
            .open_table(KEYS)
            .map_err(|e| self.fail("damaged (no key table)", e))?;
        let mut records = Vec::new();
        for item in keys.iter().map_err(|e| self.fail("cannot read", e))? {
            let (key, value) = item.map_err(|e| self.fail("damaged", e))?;
            let key = Bytes::copy_from_slice(key.value());
            let record = record::decode(value.value()).map_err(|e| {
                self.fail(
                    "damaged",
                    format!("key {:?}: {e}", String::from_utf8_lossy(&key)),
                )
            })?;
            records.push((key, record));
        }
        Ok(Restored { records, clock_ms })
    }

    fn initialise(&self, db: &Database) -> Result<(), ServerError> {
        let write = || -> Result<(), redb::Error> {
            let txn = db.begin_write()?;
            {
                let mut meta = txn.open_table(META)?;
                meta.insert(META_FORMAT, FORMAT)?;
                meta.insert(META_CLOCK_MS, 0)?;
                txn.open_table(KEYS)?;
            }
            txn.commit()?;
            Ok(())
        };
        write().map_err(|e| self.fail("cannot initialise", e))
    }

    /// Writes one batch (key → its record, or `None` to delete it) and the clock's
    /// milliseconds, in one transaction that is on disk when this returns (one fsync).
    pub fn commit(
        &self,
        writes: &[(Bytes, Option<Record>)],
        clock_ms: u64,
    ) -> Result<(), CommitFailed> {
        let mut guard = self.lock_db();
        if guard.is_none() {
            let db = Database::builder()
                .create(&self.file)
                .map_err(|e| CommitFailed {
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
            {
                let mut keys = txn.open_table(KEYS)?;
                for (key, record) in writes {
                    match record {
                        Some(r) => {
                            keys.insert(&key[..], &record::encode(r)[..])?;
                        }
                        None => {
                            keys.remove(&key[..])?;
                        }
                    }
                }
                let mut meta = txn.open_table(META)?;
                let stored = meta.get(META_CLOCK_MS)?.map_or(0, |v| v.value());
                meta.insert(META_CLOCK_MS, stored.max(clock_ms))?;
            }
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

/// A clear message for each way the database file can fail to open.
fn open_error(file: &Path, e: DatabaseError) -> ServerError {
    let shown = file.display();
    let text = match e {
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
    ServerError::DataDir(text)
}
