//! Heap bytes per key of each part of the local server's state: the store, its deadline
//! index, and the duplicate-request cache (docs/architecture.md, "Memory per key").
//!
//! A counting global allocator tracks the bytes and blocks live at any time; each part is
//! filled the way the service fills it (keys and values arrive as slices of a larger
//! received buffer, answers come from the real [`Handler`]) and the live bytes before and
//! after are compared. Requested bytes are counted; the allocator adds about 8 to 16 bytes
//! per block on top, so the blocks per key are printed too. `mqstate bench --memory`
//! measures the whole server from outside (its RSS); this splits that figure by part.
//!
//! Run: `cargo bench -p mqstate-server --bench memory` (prints figures, asserts nothing).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use mqstate::Hlc;
use mqstate::protocol::resp3::{self, SetCondition};
use mqstate_server::statestore::dedup::{CachedAnswer, DedupCache, DedupLimits};
use mqstate_server::statestore::handler::{Handler, HandlerConfig, RequestContext};
use mqstate_server::statestore::store::{SetArgs, Store};

struct Counting;

static BYTES: AtomicIsize = AtomicIsize::new(0);
static BLOCKS: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only counters move.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> (isize, isize) {
    (
        BYTES.load(Ordering::Relaxed),
        BLOCKS.load(Ordering::Relaxed),
    )
}

const KEY_LEN: usize = 12;

fn key(i: usize) -> Vec<u8> {
    format!("{i:0KEY_LEN$}").into_bytes()
}

/// A received request as the service sees it: key and value are slices of one larger buffer
/// (the packet), as rumqttc hands them out.
fn packet(i: usize, value_size: usize) -> (Bytes, Bytes) {
    let mut buf = BytesMut::with_capacity(256 + value_size);
    buf.extend_from_slice(&[0u8; 200]); // topic, properties, correlation data
    buf.extend_from_slice(&key(i));
    buf.extend_from_slice(&vec![b'x'; value_size]);
    let buf = buf.freeze();
    (buf.slice(200..200 + KEY_LEN), buf.slice(200 + KEY_LEN..))
}

/// Heap bytes and blocks per key of a store of `n` keys (with `PX` if `expiry`).
fn store_per_key(n: usize, value_size: usize, expiry: bool) -> (f64, f64) {
    let now = Instant::now();
    let before = live();
    let mut store = Store::new(None);
    for i in 0..n {
        let (k, v) = packet(i, value_size);
        let args = SetArgs::new(k, v).expiry(expiry.then_some(Duration::from_secs(3600)));
        let version = Hlc::new(1_700_000_000_000, i as u64, "StateStore");
        if store.set(args, version, now).is_err() {
            eprintln!("SET refused");
        }
    }
    let after = live();
    let per_key = (
        (after.0 - before.0) as f64 / n as f64,
        (after.1 - before.1) as f64 / n as f64,
    );
    drop(store);
    per_key
}

/// Heap bytes and blocks per entry of a duplicate-request cache holding the answers to `n`
/// SETs (the service's client ids are ~30 characters, correlation data 16 bytes).
fn dedup_per_entry(n: usize) -> (f64, f64) {
    let mut handler = Handler::new(HandlerConfig::default());
    let node: Arc<str> = Arc::from(handler.clock().node_id());
    let client = "mqstate-7f3a9c2e41b8d605a1c3e9f2";
    let ts = Hlc::new(1, 0, client).to_string();
    let ctx = RequestContext {
        client_id: Some(client),
        timestamp: Some(&ts),
        fencing_token: None,
        persist: false,
    };
    let now = Instant::now();
    let set = |i: usize| {
        let mut payload = BytesMut::new();
        resp3::encode_set(
            &mut payload,
            &key(i % 1000),
            b"v",
            SetCondition::Always,
            None,
        );
        payload.freeze()
    };
    // The store behind stays at 1,000 keys, written once before counting.
    for i in 0..1000 {
        handler.handle(&ctx, &set(i), now);
    }
    let limits = DedupLimits {
        max_entries: n,
        ..DedupLimits::default()
    };
    let before = live();
    let mut cache = DedupCache::new(limits);
    for i in 0..n {
        let answer = handler.handle(&ctx, &set(i), now).answer;
        let mut buf = BytesMut::with_capacity(256);
        buf.extend_from_slice(&[0u8; 100]);
        buf.extend_from_slice(&(i as u128).to_le_bytes());
        let correlation = buf.freeze().slice(100..116);
        let size = DedupCache::<CachedAnswer>::entry_size(&correlation, answer.payload.len());
        cache.insert(
            client,
            correlation,
            CachedAnswer::of(answer, &node),
            size,
            now,
        );
    }
    let after = live();
    let per_entry = (
        (after.0 - before.0) as f64 / n as f64,
        (after.1 - before.1) as f64 / n as f64,
    );
    drop(cache);
    per_entry
}

fn main() {
    println!(
        "{:>9} {:>8} {:>11} {:>13} {:>15} {:>13}",
        "keys", "value B", "data B/key", "store B/key", "+ PX index B/key", "blocks/key"
    );
    // 1,000,000 x 10 KB (10 GB of values) is not run: it does not fit a shared machine; the
    // per-key overhead does not depend on the value size beyond rounding.
    for (n, value_size) in [
        (100_000, 10),
        (1_000_000, 10),
        (100_000, 100),
        (1_000_000, 100),
        (100_000, 10_240),
    ] {
        let (plain, blocks) = store_per_key(n, value_size, false);
        let (with_px, _) = store_per_key(n, value_size, true);
        println!(
            "{n:>9} {value_size:>8} {:>11} {plain:>13.1} {:>15.1} {blocks:>13.2}",
            KEY_LEN + value_size,
            with_px - plain,
        );
    }
    let (dedup, blocks) = dedup_per_entry(100_000);
    println!(
        "duplicate-request cache, 100000 SET answers: {dedup:.1} B/entry, {blocks:.2} blocks/entry"
    );
}
