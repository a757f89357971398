//! The hub's state in the data dir (`mqstate serve --data-dir DIR`): `DIR/iothub.redb`, next
//! to the store's `store.redb`, opened and written by the same code
//! ([`crate::persist::redb_file`]: the same lock, format check, error texts and retry after a
//! failed write), and as private: created 0600 in a data dir created 0700, whatever the umask
//! (it holds every device's keys).
//!
//! What is kept: the device registry (ids, keys, generation ids), every message of every
//! device queue (properties, body, state, delivery count, lock end and expiry as absolute
//! times), the finished messages the queue view shows, the pending feedback records and the
//! feedback batches (with their locks). Sessions, connections and telemetry are not kept: a
//! device connects and subscribes again after a restart, as after any lost connection.
//!
//! The hub records which items changed (`Key`); its committer resolves them to their state
//! now ([`Write`]) and commits them in one transaction (group commit; see `hub.rs`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::error::IotHubError;
use super::feedback::StoredBatch;
use super::message::{Ack, C2dMessage, Expiry, FeedbackRecord, FeedbackStatus};
use super::queue::{Finished, Item, Now, Stored};
use super::registry::Device;
use crate::persist::PersistError;
use crate::persist::redb_file::{CommitFailed, RedbFile, meta_get, meta_raise};

/// The hub's database file inside the data dir.
///
/// ```
/// use mqstate_server::iothub::HUB_FILE;
/// let data_dir = std::path::Path::new("/var/lib/mqstate");
/// assert_eq!(data_dir.join(HUB_FILE), std::path::Path::new("/var/lib/mqstate/iothub.redb"));
/// ```
pub const HUB_FILE: &str = "iothub.redb";
/// The on-disk format of the hub's file this version reads and writes (the `iothub_format`
/// entry of its `meta` table; another number is refused, nothing changed).
///
/// ```
/// assert_eq!(mqstate_server::iothub::HUB_FORMAT, 1);
/// ```
pub const HUB_FORMAT: u64 = 1;

const META_FORMAT: &str = "iothub_format";
const META_NEXT_SEQUENCE: &str = "next_sequence";
/// Device id → its JSON [`Device`].
const DEVICES: TableDefinition<&str, &[u8]> = TableDefinition::new("devices");
/// (device id, sequence number) → its JSON [`MessageRecord`].
const MESSAGES: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("messages");
/// 0 → the JSON pending records; batch number → its JSON [`BatchRecord`].
const FEEDBACK: TableDefinition<u64, &[u8]> = TableDefinition::new("feedback");

/// An item of the hub's state that changed, named (its state is read when it is written).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// A device was added or its keys changed.
    Device(String),
    /// A device was deleted: its record and its messages go.
    Removed(String),
    /// A message of a device.
    Message(String, u64),
    /// The pending feedback records (0) or a batch.
    Feedback(u64),
}

/// One change to write.
#[derive(Debug)]
pub(crate) enum Write {
    PutDevice(String, Vec<u8>),
    RemoveDevice(String),
    PutMessage(String, u64, Vec<u8>),
    DeleteMessage(String, u64),
    PutFeedback(u64, Vec<u8>),
    DeleteFeedback(u64),
}

/// A message as stored.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MessageRecord {
    body_base64: String,
    message_id: Option<String>,
    correlation_id: Option<String>,
    user_id: Option<String>,
    content_type: Option<String>,
    content_encoding: Option<String>,
    properties: Vec<(String, Option<String>)>,
    ack: Ack,
    enqueued_unix_ns: u64,
    expiry_unix_ns: u64,
    delivery_count: u32,
    /// Set while the message is Invisible: when its lock ends.
    lock_until_unix_ns: Option<u64>,
    /// Set once it finished: how, and when.
    finished: Option<(FeedbackStatus, u64)>,
}

/// A feedback batch as stored.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BatchRecord {
    enqueued_unix_ns: u64,
    expiry_unix_ns: u64,
    records: Vec<FeedbackRecord>,
    lock: Option<(String, u64)>,
    delivery_count: u32,
}

/// What the hub's file held when it was opened.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub devices: Vec<Device>,
    /// Per device (in id order), its messages in sequence order.
    pub messages: Vec<(String, u64, MessageRecord)>,
    pub pending: Vec<FeedbackRecord>,
    pub batches: Vec<(u64, BatchRecord)>,
    pub next_sequence: u64,
}

/// The hub's open database file (locked while open).
#[derive(Debug)]
pub(crate) struct HubFile {
    file: RedbFile,
}

impl HubFile {
    /// Opens (creating it) `DIR/iothub.redb` and reads it. A locked, damaged, foreign or
    /// newer-format file is [`IotHubError::DataDir`], with the store's texts.
    pub(crate) fn open(dir: &std::path::Path) -> Result<(HubFile, Loaded), IotHubError> {
        let file = RedbFile::open(dir, HUB_FILE)?;
        let new = file.check_format(META_FORMAT, HUB_FORMAT, |txn| {
            txn.open_table(DEVICES)?;
            txn.open_table(MESSAGES)?;
            txn.open_table(FEEDBACK)?;
            Ok(())
        })?;
        let hub = HubFile { file };
        let loaded = if new {
            Loaded {
                next_sequence: 1,
                ..Loaded::default()
            }
        } else {
            hub.load()?
        };
        Ok((hub, loaded))
    }

    /// Releases the file (the hub stopped).
    pub(crate) fn close(&self) {
        self.file.close();
    }

    /// The database file.
    pub(crate) fn path(&self) -> &std::path::Path {
        self.file.file()
    }

    fn load(&self) -> Result<Loaded, PersistError> {
        let f = &self.file;
        f.read(|read| {
            let damaged = |what: String| f.fail("damaged", what);
            let mut loaded = Loaded {
                next_sequence: meta_get(read, META_NEXT_SEQUENCE, f)?.unwrap_or(1),
                ..Loaded::default()
            };
            let table = read
                .open_table(DEVICES)
                .map_err(|e| f.fail("damaged (no device table)", e))?;
            for item in table.iter().map_err(|e| f.fail("cannot read", e))? {
                let (id, value) = item.map_err(|e| f.fail("damaged", e))?;
                let device: Device = serde_json::from_slice(value.value())
                    .map_err(|e| damaged(format!("device {:?}: {e}", id.value())))?;
                loaded.devices.push(device);
            }
            let table = read
                .open_table(MESSAGES)
                .map_err(|e| f.fail("damaged (no message table)", e))?;
            for item in table.iter().map_err(|e| f.fail("cannot read", e))? {
                let (key, value) = item.map_err(|e| f.fail("damaged", e))?;
                let (id, seq) = key.value();
                let record: MessageRecord = serde_json::from_slice(value.value())
                    .map_err(|e| damaged(format!("message {seq} of device {id:?}: {e}")))?;
                loaded.next_sequence = loaded.next_sequence.max(seq + 1);
                loaded.messages.push((id.to_owned(), seq, record));
            }
            let table = read
                .open_table(FEEDBACK)
                .map_err(|e| f.fail("damaged (no feedback table)", e))?;
            for item in table.iter().map_err(|e| f.fail("cannot read", e))? {
                let (key, value) = item.map_err(|e| f.fail("damaged", e))?;
                let id = key.value();
                if id == super::feedback::PENDING {
                    loaded.pending = serde_json::from_slice(value.value())
                        .map_err(|e| damaged(format!("pending feedback: {e}")))?;
                } else {
                    let batch = serde_json::from_slice(value.value())
                        .map_err(|e| damaged(format!("feedback batch {id}: {e}")))?;
                    loaded.batches.push((id, batch));
                }
            }
            Ok(loaded)
        })
    }

    /// Writes a batch of changes and the sequence counter in one transaction, on disk when
    /// this returns (one fsync).
    pub(crate) fn commit(&self, writes: &[Write], next_sequence: u64) -> Result<(), CommitFailed> {
        self.file.write(|txn| {
            let mut devices = txn.open_table(DEVICES)?;
            let mut messages = txn.open_table(MESSAGES)?;
            let mut feedback = txn.open_table(FEEDBACK)?;
            for w in writes {
                match w {
                    Write::PutDevice(id, bytes) => {
                        devices.insert(id.as_str(), &bytes[..])?;
                    }
                    Write::RemoveDevice(id) => {
                        devices.remove(id.as_str())?;
                        messages
                            .retain_in((id.as_str(), 0)..=(id.as_str(), u64::MAX), |_, _| false)?;
                    }
                    Write::PutMessage(id, seq, bytes) => {
                        messages.insert((id.as_str(), *seq), &bytes[..])?;
                    }
                    Write::DeleteMessage(id, seq) => {
                        messages.remove((id.as_str(), *seq))?;
                    }
                    Write::PutFeedback(id, bytes) => {
                        feedback.insert(*id, &bytes[..])?;
                    }
                    Write::DeleteFeedback(id) => {
                        feedback.remove(*id)?;
                    }
                }
            }
            drop((devices, messages, feedback));
            meta_raise(txn, META_NEXT_SEQUENCE, next_sequence)
        })
    }
}

/// Nanoseconds since the Unix epoch (0 before it).
pub(crate) fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn from_unix_ns(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

/// A monotonic deadline as a wall-clock time (what survives a restart).
fn instant_to_unix(at: Instant, now: Now) -> u64 {
    let t = if at >= now.instant {
        now.utc + (at - now.instant)
    } else {
        now.utc.checked_sub(now.instant - at).unwrap_or(UNIX_EPOCH)
    };
    unix_ns(t)
}

/// A wall-clock deadline as a monotonic one (now if it has passed).
pub(crate) fn unix_to_instant(ns: u64, now: Now) -> Instant {
    let left = from_unix_ns(ns).duration_since(now.utc).unwrap_or_default();
    now.instant + left
}

fn json<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail (no maps with non-string keys).
    serde_json::to_vec(value).unwrap_or_default()
}

/// The stored form of a device.
pub(crate) fn encode_device(device: &Device) -> Vec<u8> {
    json(device)
}

/// The stored form of a message, live or finished.
pub(crate) fn encode_message(item: &Item<'_>, now: Now) -> Vec<u8> {
    let (stored, delivery_count, lock_until, finished) = match item {
        Item::Live {
            stored,
            delivery_count,
            lock_until,
        } => (*stored, *delivery_count, *lock_until, None),
        Item::Finished(f) => (
            &*f.stored,
            f.delivery_count,
            None,
            Some((f.status, unix_ns(f.at))),
        ),
    };
    let m = &stored.message;
    json(&MessageRecord {
        body_base64: STANDARD.encode(&m.payload),
        message_id: m.message_id.clone(),
        correlation_id: m.correlation_id.clone(),
        user_id: m.user_id.clone(),
        content_type: m.content_type.clone(),
        content_encoding: m.content_encoding.clone(),
        properties: m.properties.clone(),
        ack: m.ack,
        enqueued_unix_ns: unix_ns(stored.enqueued_utc),
        expiry_unix_ns: unix_ns(stored.expiry_utc),
        delivery_count,
        lock_until_unix_ns: lock_until.map(|at| instant_to_unix(at, now)),
        finished,
    })
}

/// A stored message, back: live (with whether it was locked) or finished.
pub(crate) enum Restored {
    Live {
        stored: Box<Stored>,
        delivery_count: u32,
        was_locked: bool,
    },
    Finished(Finished),
}

/// Decodes a stored message of `device_id`.
pub(crate) fn decode_message(
    device_id: &str,
    sequence_number: u64,
    record: MessageRecord,
    now: Now,
) -> Result<Restored, IotHubError> {
    let payload = STANDARD.decode(&record.body_base64).map_err(|e| {
        let message =
            format!("{HUB_FILE}: damaged: message {sequence_number} of device {device_id:?}: {e}");
        IotHubError::DataDir(PersistError::caused(message, e))
    })?;
    let expiry_utc = from_unix_ns(record.expiry_unix_ns);
    let message = C2dMessage {
        payload: payload.into(),
        message_id: record.message_id,
        correlation_id: record.correlation_id,
        user_id: record.user_id,
        content_type: record.content_type,
        content_encoding: record.content_encoding,
        properties: record.properties,
        expiry: Some(Expiry::At(expiry_utc)),
        ack: record.ack,
    };
    let stored = Stored::restored(
        message,
        sequence_number,
        from_unix_ns(record.enqueued_unix_ns),
        expiry_utc,
        now,
    );
    Ok(match record.finished {
        Some((status, at)) => Restored::Finished(Finished {
            stored: std::sync::Arc::new(stored),
            delivery_count: record.delivery_count,
            status,
            at: from_unix_ns(at),
        }),
        None => Restored::Live {
            stored: Box::new(stored),
            delivery_count: record.delivery_count,
            was_locked: record.lock_until_unix_ns.is_some(),
        },
    })
}

/// The stored form of the pending feedback records.
pub(crate) fn encode_pending(records: &[FeedbackRecord]) -> Vec<u8> {
    json(&records)
}

/// The stored form of a feedback batch.
pub(crate) fn encode_batch(batch: &StoredBatch, now: Now) -> Vec<u8> {
    json(&BatchRecord {
        enqueued_unix_ns: unix_ns(batch.enqueued_utc),
        expiry_unix_ns: instant_to_unix(batch.expires_at, now),
        records: batch.records.clone(),
        lock: batch
            .lock
            .as_ref()
            .map(|(token, until)| (token.clone(), instant_to_unix(*until, now))),
        delivery_count: batch.delivery_count,
    })
}

/// A stored feedback batch, back (its lock kept until its end: the service that holds its
/// token can still complete it).
pub(crate) fn decode_batch(id: u64, record: BatchRecord, now: Now) -> StoredBatch {
    StoredBatch {
        id,
        enqueued_utc: from_unix_ns(record.enqueued_unix_ns),
        expires_at: unix_to_instant(record.expiry_unix_ns, now),
        records: record.records,
        lock: record
            .lock
            .map(|(token, until)| (token, unix_to_instant(until, now))),
        delivery_count: record.delivery_count,
    }
}
