//! Persistence: `mqstate serve --data-dir DIR` keeps keys in a redb database so that they
//! survive a restart or a crash, with nothing acknowledged lost.
//!
//! - [`DataDir`]: the database file (`DIR/store.redb`): open with clear errors, read every
//!   key, commit a batch with one fsync.
//! - `redb_file`: opening, checking and writing one redb file of the data dir, shared by
//!   the store's file and the local IoT Hub's (`iothub.redb`, [`crate::iothub`]).
//! - [`record`]: how one key is stored (value, version, fencing token, absolute deadline).
//! - [`FloorClock`]: the server's clock never issues a version lower than one stored.
//! - [`Persistence`]: what the store task uses: which SETs persist ([`PersistMode`]),
//!   restoring the [`Store`], and the group commit of the store's journal.
//!
//! **Durability contract.** A SET, DEL or VDEL (or an expiry) that changes a persisted key is
//! answered only after the transaction holding it is on disk. The store task keeps handling
//! requests in memory while nothing is pending; once a change needs the disk, every later
//! answer (of any request, so that no reader sees a value that could still be lost) waits in
//! an outbox. The task then takes every request already queued (up to [`MAX_BATCH`]), handles
//! them too, and commits all their changes in one transaction: a burst of 64 SETs costs one
//! fsync, not 64. If the commit fails (disk full, I/O error), the changes are undone in memory
//! and the writes in the batch are answered `-ERR` [`mqstate::ServiceError::PersistenceFailed`];
//! reads in the batch are answered again from the restored state.
//!
//! ```
//! use std::time::Instant;
//! use bytes::Bytes;
//! use mqstate::Hlc;
//! use mqstate_server::persist::{PersistMode, Persistence};
//! use mqstate_server::statestore::store::{SetArgs, Store};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let tmp = tempfile::tempdir().unwrap();
//! let p = Persistence::open(tmp.path(), PersistMode::All).unwrap();
//! let mut store = Store::new(None);
//! p.restore(&mut store).unwrap();
//! let set = SetArgs::new(Bytes::from_static(b"k"), Bytes::from_static(b"v")).persist(true);
//! store.set(set, Hlc::new(9, 0, "StateStore"), Instant::now()).unwrap();
//! assert!(p.needs_disk(&store));
//! assert_eq!(p.commit(&mut store, 9).await, Ok(1));
//! drop(p);
//!
//! let p = Persistence::open(tmp.path(), PersistMode::All).unwrap();
//! let mut store = Store::new(None);
//! p.restore(&mut store).unwrap();
//! assert_eq!(store.get(b"k").unwrap().version, Hlc::new(9, 0, "StateStore"));
//! # });
//! ```

mod clock;
mod data_dir;
mod error;
pub(crate) mod private;
pub mod record;
pub(crate) mod redb_file;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use mqstate::protocol::hlc::{SystemClock, WallClock};

pub use clock::FloorClock;
pub use data_dir::{BROKER_DIR, CommitFailed, DataDir, FORMAT, Restored, STORE_FILE};
pub use error::PersistError;
use record::Record;

use crate::statestore::handler::{Handler, HandlerConfig};
use crate::statestore::store::{Entry, Store};

/// A handler for `config`; with a data dir, restored from it and with its clock floored
/// past every stored version.
pub fn handler(
    mut config: HandlerConfig,
    persistence: Option<&Persistence>,
) -> Result<Handler, PersistError> {
    let Some(p) = persistence else {
        return Ok(Handler::new(config));
    };
    config.wall_clock = Some(p.floor_clock(config.wall_clock.take()));
    let mut handler = Handler::new(config);
    let restored = p.restore(handler.store_mut())?;
    tracing::info!(restored, "keys restored from the data dir");
    Ok(handler)
}

/// The most requests handled into one group commit (bounds the latency a commit adds to
/// the first request of a batch).
pub const MAX_BATCH: usize = 1024;

/// Which keys a server with a data dir keeps on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PersistMode {
    /// Every key (the default of `--data-dir`).
    #[default]
    All,
    /// Only keys whose last SET carried `aio-persistence: true` (`SetOptions::persist`).
    Requested,
}

impl std::str::FromStr for PersistMode {
    type Err = String;

    /// `all` or `requested`.
    ///
    /// ```
    /// use mqstate_server::persist::PersistMode;
    /// assert_eq!("requested".parse::<PersistMode>(), Ok(PersistMode::Requested));
    /// assert!("some".parse::<PersistMode>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all" => Ok(PersistMode::All),
            "requested" => Ok(PersistMode::Requested),
            other => Err(format!(
                "unknown persist mode {other:?} (expected all or requested)"
            )),
        }
    }
}

impl std::fmt::Display for PersistMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PersistMode::All => "all",
            PersistMode::Requested => "requested",
        })
    }
}

/// An open data dir and its mode; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Persistence {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: DataDir,
    mode: PersistMode,
    /// What was read at open, until [`Persistence::restore`] takes it.
    restored: Mutex<Option<Restored>>,
}

impl Persistence {
    /// Opens the data dir (see [`DataDir::open`] for the errors) and reads it.
    pub fn open(dir: &Path, mode: PersistMode) -> Result<Persistence, PersistError> {
        let (dir, restored) = DataDir::open(dir)?;
        tracing::info!(
            data_dir = %dir.path().display(),
            keys = restored.records.len(),
            %mode,
            "data dir opened"
        );
        Ok(Persistence {
            inner: Arc::new(Inner {
                dir,
                mode,
                restored: Mutex::new(Some(restored)),
            }),
        })
    }

    /// The mode.
    pub fn mode(&self) -> PersistMode {
        self.inner.mode
    }

    /// The data dir.
    pub fn path(&self) -> &Path {
        self.inner.dir.path()
    }

    /// Where the embedded broker keeps its sessions, created (mode 0700) if missing and made
    /// private if an older version left it readable by others. The broker's storage creates
    /// its files with the umask's modes; this directory keeps other users out of them (and
    /// `mqstate serve` runs with a umask that keeps them 0600).
    pub fn broker_dir(&self) -> Result<PathBuf, PersistError> {
        let dir = self.inner.dir.path().join(BROKER_DIR);
        private::create_own_dir(&dir)?;
        Ok(dir)
    }

    /// Whether a SET is kept on disk: always in [`PersistMode::All`], else when it asked.
    pub fn persists(&self, requested: bool) -> bool {
        self.inner.mode == PersistMode::All || requested
    }

    /// The highest HLC millisecond found on disk (the clock's floor), before
    /// [`Persistence::restore`] runs.
    pub fn clock_floor_ms(&self) -> u64 {
        let restored = self.lock_restored();
        restored.as_ref().map_or(0, |r| {
            r.records
                .iter()
                .flat_map(|(_, rec)| {
                    std::iter::once(rec.version.ms).chain(rec.fencing_token.as_ref().map(|t| t.ms))
                })
                .fold(r.clock_ms, u64::max)
        })
    }

    /// A wall clock for the server's HLC that reads past every stored version (see
    /// [`FloorClock`]); `inner` is the configured clock (the system clock if `None`).
    pub fn floor_clock(&self, inner: Option<Arc<dyn WallClock>>) -> Arc<dyn WallClock> {
        let inner = inner.unwrap_or_else(|| Arc::new(SystemClock));
        let clock = FloorClock::new(inner, self.clock_floor_ms());
        if clock.offset_ms() > 0 {
            tracing::warn!(
                ahead_ms = clock.offset_ms(),
                "the wall clock is behind versions already stored: the server's clock runs ahead of it by this much"
            );
        }
        Arc::new(clock)
    }

    /// Loads the keys read at open into `store` (once), drops those whose deadline has
    /// passed (deleting them on disk), and turns on the store's journal. Returns how many
    /// keys were restored.
    pub fn restore(&self, store: &mut Store) -> Result<usize, PersistError> {
        let Some(restored) = self.lock_restored().take() else {
            store.enable_journal();
            return Ok(0);
        };
        let (now, now_unix) = now_pair();
        let mut expired = Vec::new();
        let mut count = 0;
        for (key, rec) in restored.records {
            let expires_at = match rec.deadline_unix_ms {
                Some(deadline) if deadline <= now_unix => {
                    expired.push((key, None));
                    continue;
                }
                Some(deadline) => {
                    let left = Duration::from_millis(deadline - now_unix);
                    Some(
                        now.checked_add(left)
                            .unwrap_or(now + Duration::from_secs(1 << 30)),
                    )
                }
                None => None,
            };
            store.put(
                key,
                Some(Entry {
                    value: rec.value,
                    version: rec.version,
                    fencing_token: rec.fencing_token,
                    expires_at,
                    persist: true,
                }),
            );
            count += 1;
        }
        if !expired.is_empty() {
            tracing::info!(
                expired = expired.len(),
                "keys that expired while the server was down are gone"
            );
            self.inner
                .dir
                .commit(&expired, restored.clock_ms)
                .map_err(|e| PersistError::caused(e.to_string(), e))?;
        }
        store.enable_journal();
        Ok(count)
    }

    /// Whether the store's journal holds a change to a key that is (or was) on disk.
    pub fn needs_disk(&self, store: &Store) -> bool {
        store
            .journal()
            .iter()
            .any(|(key, before)| before.as_ref().is_some_and(|e| e.persist) || store.persists(key))
    }

    /// Commits the store's journal: every key it touched that is (or was) on disk is written
    /// as it is now, in one transaction, with `clock_ms` (the server clock's milliseconds).
    /// Returns how many keys were written. On failure the journal's changes are undone in
    /// the store (keys that had expired stay gone) and nothing was written.
    pub async fn commit(&self, store: &mut Store, clock_ms: u64) -> Result<usize, CommitFailed> {
        let changes = store.take_journal();
        let writes = self.writes(&changes, store);
        if writes.is_empty() {
            return Ok(0);
        }
        let count = writes.len();
        let inner = self.inner.clone();
        let result = tokio::task::spawn_blocking(move || inner.dir.commit(&writes, clock_ms))
            .await
            .unwrap_or_else(|e| {
                Err(CommitFailed {
                    file: self.inner.dir.file().display().to_string(),
                    reason: format!("the commit task failed: {e}"),
                })
            });
        match result {
            Ok(()) => Ok(count),
            Err(e) => {
                let now = Instant::now();
                let undo = changes
                    .into_iter()
                    .filter(|(_, before)| {
                        before
                            .as_ref()
                            .is_none_or(|e| e.expires_at.is_none_or(|at| at > now))
                    })
                    .collect();
                store.undo(undo);
                Err(e)
            }
        }
    }

    /// The disk writes for a journal: the current state of each touched key that is or was
    /// persisted (each key once).
    fn writes(
        &self,
        changes: &[(Bytes, Option<Entry>)],
        store: &Store,
    ) -> Vec<(Bytes, Option<Record>)> {
        let (now, now_unix) = now_pair();
        let mut seen = std::collections::HashSet::new();
        let mut writes = Vec::new();
        for (key, before) in changes {
            if !seen.insert(key.clone()) {
                continue;
            }
            // The first change of a key holds its state before the batch: what the disk has.
            let current = store.get(key).filter(|e| e.persist);
            let was_on_disk = before.as_ref().is_some_and(|e| e.persist);
            match current {
                Some(entry) => writes.push((key.clone(), Some(to_record(&entry, now, now_unix)))),
                None if was_on_disk => writes.push((key.clone(), None)),
                None => {}
            }
        }
        writes
    }

    fn lock_restored(&self) -> std::sync::MutexGuard<'_, Option<Restored>> {
        self.inner
            .restored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The monotonic and the Unix time of now, read together.
fn now_pair() -> (Instant, u64) {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    (Instant::now(), unix)
}

fn to_record(entry: &Entry, now: Instant, now_unix: u64) -> Record {
    let deadline_unix_ms = entry.expires_at.map(|at| {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        if at >= now {
            now_unix.saturating_add(ms(at - now))
        } else {
            now_unix.saturating_sub(ms(now - at))
        }
    });
    Record {
        value: entry.value.clone(),
        version: entry.version.clone(),
        fencing_token: entry.fencing_token.clone(),
        deadline_unix_ms,
    }
}
