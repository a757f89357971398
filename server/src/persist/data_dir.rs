//! The data dir: one redb database file, `store.redb`, holding every persisted key and the
//! highest HLC millisecond the server has used; and `broker/`, the embedded broker's session
//! storage. The directory is created 0700 and every file the server writes in it 0600,
//! whatever the umask (see `private`).
//!
//! Opening never changes or wipes anything it does not understand: a directory that cannot
//! be written, a file locked by another server, a file from another format or program, or a
//! damaged file is a [`PersistError`] naming the file, and the server does not start.
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

use std::path::Path;

use bytes::Bytes;
use redb::{ReadableTable, TableDefinition};

use super::PersistError;
use super::record::{self, Record};
pub use super::redb_file::CommitFailed;
use super::redb_file::{RedbFile, meta_get, meta_raise};

/// The database file inside the data dir.
pub const STORE_FILE: &str = "store.redb";
/// The embedded broker's session storage inside the data dir.
pub const BROKER_DIR: &str = "broker";
/// The on-disk format this version reads and writes.
pub const FORMAT: u64 = 1;

const KEYS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("keys");
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
    file: RedbFile,
}

impl DataDir {
    /// Opens (creating it if needed) the data dir and reads every stored key.
    pub fn open(dir: &Path) -> Result<(DataDir, Restored), PersistError> {
        let file = RedbFile::open(dir, STORE_FILE)?;
        let new = file.check_format(META_FORMAT, FORMAT, |txn| {
            txn.open_table(super::redb_file::META)?
                .insert(META_CLOCK_MS, 0)?;
            txn.open_table(KEYS)?;
            Ok(())
        })?;
        let data_dir = DataDir { file };
        let restored = if new {
            Restored::default()
        } else {
            data_dir.load()?
        };
        Ok((data_dir, restored))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.file.dir()
    }

    /// The database file.
    pub fn file(&self) -> &Path {
        self.file.file()
    }

    /// Reads every key.
    fn load(&self) -> Result<Restored, PersistError> {
        let f = &self.file;
        f.read(|read| {
            let clock_ms = meta_get(read, META_CLOCK_MS, f)?.unwrap_or(0);
            let keys = read
                .open_table(KEYS)
                .map_err(|e| f.fail("damaged (no key table)", e))?;
            let mut records = Vec::new();
            for item in keys.iter().map_err(|e| f.fail("cannot read", e))? {
                let (key, value) = item.map_err(|e| f.fail("damaged", e))?;
                let key = Bytes::copy_from_slice(key.value());
                let record = record::decode(value.value()).map_err(|e| {
                    f.fail(
                        "damaged",
                        format!("key {:?}: {e}", String::from_utf8_lossy(&key)),
                    )
                })?;
                records.push((key, record));
            }
            Ok(Restored { records, clock_ms })
        })
    }

    /// Writes one batch (key → its record, or `None` to delete it) and the clock's
    /// milliseconds, in one transaction that is on disk when this returns (one fsync).
    pub fn commit(
        &self,
        writes: &[(Bytes, Option<Record>)],
        clock_ms: u64,
    ) -> Result<(), CommitFailed> {
        self.file.write(|txn| {
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
            meta_raise(txn, META_CLOCK_MS, clock_ms)
        })
    }
}
