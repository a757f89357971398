//! `Scan`: the keys matching a glob pattern, a page at a time (the core's `mqstate::Scan`,
//! docs/protocol.md, "Listing keys: SCAN"). Kotlin also lists them as a Flow:
//! `client.scan(pattern)` (kotlin/README.md, "Listing keys"). No doc comment here may hold a
//! slash followed by a star: uniffi copies them into Kotlin and Swift block comments.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;

use crate::client::Client;
use crate::errors::MqstateError;
use crate::runtime::call;

/// A listing of the keys that match a glob pattern (`SCAN`), read a page at a time with
/// `nextPage()` (null after the last page). Creating it sends nothing. In Kotlin,
/// `client.scan(pattern)` lists the same keys as a Flow. Kotlin:
///
/// ```kotlin
/// val scan = Scan(client, "config*".encodeToByteArray())
/// while (true) {
///     val keys = scan.nextPage() ?: break
///     keys.forEach { println(it.decodeToString()) }
/// }
/// ```
#[derive(Debug, uniffi::Object)]
pub struct Scan {
    /// The core's scan; a page request holds it (so pages are asked for one at a time).
    inner: Arc<Mutex<mqstate::Scan>>,
    /// Whether the last page has been received (read without waiting for a page in flight).
    done: Arc<AtomicBool>,
    pattern: Vec<u8>,
}

#[uniffi::export]
impl Scan {
    /// A scan of the keys matching `pattern` (Redis `MATCH` globs over bytes: `*`, `?`,
    /// `[...]`, `\` escapes). Sends nothing; an empty pattern is `InvalidArgument` (the core's
    /// rule). Each page is one request with `timeout` (default: the client's).
    #[uniffi::constructor(default(timeout = None))]
    pub fn new(
        client: &Client,
        pattern: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Arc<Scan>, MqstateError> {
        let inner = client.with_timeout(timeout).scan(&pattern)?;
        Ok(Arc::new(Scan {
            inner: Arc::new(Mutex::new(inner)),
            done: Arc::new(AtomicBool::new(false)),
            pattern,
        }))
    }

    /// Asks for the next page: its keys (possibly none: a page may be empty and not the last),
    /// or null once the last page has been received. After an error (a timeout, a lost
    /// connection, the server refusing the pattern) the scan is where it was: calling again
    /// asks for the same page.
    pub async fn next_page(&self) -> Result<Option<Vec<Vec<u8>>>, MqstateError> {
        let scan = self.inner.clone();
        let done = self.done.clone();
        let page = call(async move {
            let mut scan = scan.lock_owned().await;
            let page = scan.next_page().await?;
            done.store(scan.is_done(), Ordering::Release);
            Ok::<_, mqstate::Error>(page)
        })
        .await?;
        Ok(page.map(|keys| keys.into_iter().map(|k| k.to_vec()).collect()))
    }

    /// Whether the last page has been received (then `nextPage()` returns null).
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The pattern being listed.
    pub fn pattern(&self) -> Vec<u8> {
        self.pattern.clone()
    }
}
