//! `NativeScan`: the keys matching a glob pattern, a page per call (`SCAN`; the wrapper turns
//! it into an async iterator of keys, see `Scan` in `index.ts`).
//!
//! Pull-based, like the observations: nothing is sent until `nextPage()` asks, and a scan
//! nobody pages holds nothing on Node's side. The core's [`Scan`] sits behind an async mutex
//! so that the pages of one scan are asked for one at a time; the mutex is held only inside
//! the page's future, never while JavaScript runs (the Promise is settled once the future
//! has returned, and `done` reads a flag of its own).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use mqstate::Scan;
use napi::Env;
use napi::bindgen_prelude::{Buffer, BufferSlice, PromiseRaw};
use napi_derive::napi;
use tokio::sync::Mutex;

use crate::cancel::{CancelToken, receiver};
use crate::util::spawn;

/// One listing of the keys that match a pattern (made by `NativeClient.scan`).
#[napi]
#[derive(Debug)]
pub struct NativeScan {
    scan: Arc<Mutex<Scan>>,
    done: Arc<AtomicBool>,
    pattern: Bytes,
}

impl NativeScan {
    pub(crate) fn new(scan: Scan) -> Self {
        NativeScan {
            pattern: scan.pattern().clone(),
            done: Arc::new(AtomicBool::new(scan.is_done())),
            scan: Arc::new(Mutex::new(scan)),
        }
    }
}

#[napi]
impl NativeScan {
    /// The next page's keys (possibly none: a page may be empty and not the last), or null
    /// once the last page has been received. Calls are served one at a time. After an error
    /// (or a cancellation) the scan is where it was: calling again asks for the same page.
    #[napi(ts_return_type = "Promise<Buffer[] | null>")]
    pub fn next_page<'env>(
        &self,
        env: &'env Env,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, Option<Vec<BufferSlice<'env>>>>> {
        let scan = self.scan.clone();
        let done = self.done.clone();
        spawn(
            env,
            receiver(cancel),
            async move {
                let mut scan = scan.lock().await;
                let page = scan.next_page().await?;
                done.store(scan.is_done(), Ordering::Release);
                Ok(page)
            },
            |env, page| {
                page.map(|keys| {
                    keys.iter()
                        .map(|k| BufferSlice::copy_from(env, k))
                        .collect::<napi::Result<Vec<_>>>()
                })
                .transpose()
            },
        )
    }

    /// True once the last page has been received (`nextPage()` then resolves with null).
    #[napi(getter)]
    pub fn done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The pattern being listed.
    #[napi(getter)]
    pub fn pattern(&self) -> Buffer {
        Buffer::from(self.pattern.to_vec())
    }
}
