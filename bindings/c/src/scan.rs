//! Listing keys (`SCAN`, docs/protocol.md section 8): a scan handle read a page at a time,
//! over `mqstate::blocking::Scan`. Every rule (the empty pattern refused before sending, the
//! continuation token kept inside, a failed page repeated by the next call) is the core's;
//! this module only converts arguments, pages and errors.

use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use mqstate::blocking::Scan;

use crate::boundary::{
    FfiError, Out, arg_bytes, arg_ref, free_handle, into_handle, mqstate_status, mqstate_status::*,
};
use crate::client::mqstate_client;

/// A listing of the keys that match a glob pattern (`mqstate_scan_new`), read a page at a
/// time with `mqstate_scan_next_page`; free it with `mqstate_scan_free`.
///
/// Thread-safe: every function taking a `const mqstate_scan *` may be called from any thread,
/// and calls on one scan are serialised (a second caller waits for the page under way).
/// `mqstate_scan_free` must not race with other calls on it. A scan keeps its client's
/// runtime alive and may be freed before or after the client; once the client is closed its
/// page calls return `MQSTATE_DISCONNECTED`. Each page is one request, with the client's
/// request timeout as it was when the scan was made (`mqstate_client_set_timeout_ms`).
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_scan {
    scan: Mutex<Scan>,
}

impl mqstate_scan {
    fn lock(&self) -> MutexGuard<'_, Scan> {
        self.scan.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One page of a scan (`mqstate_scan_next_page`): its keys, read with
/// `mqstate_scan_page_count` and `mqstate_scan_page_key`. Owned by the caller, who frees it
/// with `mqstate_scan_page_free`; it does not depend on its scan or client (either may be
/// freed first). Immutable: may be read from any thread.
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_scan_page {
    keys: Vec<Bytes>,
}

/// Starts listing the keys that match `pattern` (bytes: a Redis `MATCH` glob, `*`, `?`,
/// `[a-z]`, `[^...]`, `\` escapes; docs/protocol.md section 8). Sends nothing: the first
/// request is the first `mqstate_scan_next_page`. On `MQSTATE_OK`, `*scan_out` is a new scan
/// owned by the caller (`mqstate_scan_free`). An empty pattern (`pattern_len` 0) is
/// `MQSTATE_INVALID_ARGUMENT`; a NULL `pattern` is `MQSTATE_NULL_PARAMETER`. A malformed
/// pattern is refused by the server, on the first page.
///
/// ```c
/// mqstate_scan *scan = NULL;
/// mqstate_scan_page *page = NULL;
/// mqstate_status s = mqstate_scan_new(client, (const uint8_t *)"sensor-*", 8, &scan);
/// while (s == MQSTATE_OK && (s = mqstate_scan_next_page(scan, &page)) == MQSTATE_OK) {
///     size_t n = 0;
///     mqstate_scan_page_count(page, &n);
///     for (size_t i = 0; i < n; i++) {
///         const uint8_t *key; size_t key_len;
///         mqstate_scan_page_key(page, i, &key, &key_len);   // borrowed from page
///     }
///     mqstate_scan_page_free(page);
/// }
/// if (s != MQSTATE_NOT_FOUND) {
///     // an error, of mqstate_scan_new or of a page: mqstate_error_message(...)
/// }
/// mqstate_scan_free(scan);
/// ```
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_scan_new(
    client: *const mqstate_client,
    pattern: *const u8,
    pattern_len: usize,
    scan_out: *mut *mut mqstate_scan,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY (all blocks below): the C contract: pointers are NULL or valid.
        let client = unsafe { arg_ref(client, "client") }?;
        let pattern = unsafe { arg_bytes(pattern, pattern_len, "pattern", false) }?;
        let out = unsafe { Out::new(scan_out, "scan_out") }?;
        let scan = client.call(|c| c.scan(pattern))?;
        out.write(into_handle(mqstate_scan { scan: Mutex::new(scan) }));
        Ok(())
    }
}

/// Asks for the next page (blocking: one request, up to the request timeout; the loop is
/// shown at `mqstate_scan_new`).
/// `MQSTATE_OK`: `*page_out` is a new page owned by the caller (`mqstate_scan_page_free`); it
/// may hold no key and still not be the last (`mqstate_scan_is_done` says whether it was).
/// `MQSTATE_NOT_FOUND`: the last page was returned already, nothing is sent or written (the
/// end of the listing, not a failure). Any other status is an error (`MQSTATE_SERVICE_ERROR`
/// for a pattern the server refuses, `MQSTATE_TIMEOUT`, `MQSTATE_DISCONNECTED`...); the scan
/// stays where it was, and calling again asks for the same page. Every key that exists from
/// the first page to the last is listed exactly once; a key created or deleted meanwhile may
/// or may not be; the order is unspecified.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_scan_next_page(
    scan: *const mqstate_scan,
    page_out: *mut *mut mqstate_scan_page,
) -> mqstate_status {
    ffi_boundary! {
        let scan = unsafe { arg_ref(scan, "scan") }?;
        let out = unsafe { Out::new(page_out, "page_out") }?;
        let keys = scan.lock().next_page()?.ok_or_else(|| {
            FfiError::new(
                MQSTATE_NOT_FOUND,
                "the scan is done: its last page was returned already",
            )
        })?;
        out.write(into_handle(mqstate_scan_page { keys }));
        Ok(())
    }
}

/// Whether the last page has been received: then `mqstate_scan_next_page` returns
/// `MQSTATE_NOT_FOUND` without sending anything.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_scan_is_done(
    scan: *const mqstate_scan,
    done_out: *mut bool,
) -> mqstate_status {
    ffi_boundary! {
        let scan = unsafe { arg_ref(scan, "scan") }?;
        let out = unsafe { Out::new(done_out, "done_out") }?;
        out.write(scan.lock().is_done());
        Ok(())
    }
}

/// Frees a scan (pages already returned stay valid). NULL is a no-op. No other call on this
/// scan may run or start during or after it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_scan_free(scan: *mut mqstate_scan) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(scan) }
    })
}

/// How many keys the page holds (may be 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_scan_page_count(
    page: *const mqstate_scan_page,
    count_out: *mut usize,
) -> mqstate_status {
    ffi_boundary! {
        let page = unsafe { arg_ref(page, "page") }?;
        let out = unsafe { Out::new(count_out, "count_out") }?;
        out.write(page.keys.len());
        Ok(())
    }
}

/// The key at `index` (0 to count - 1): its bytes (any byte, NUL included; never empty),
/// borrowed from the page until `mqstate_scan_page_free`. An index out of range is
/// `MQSTATE_INVALID_ARGUMENT`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_scan_page_key(
    page: *const mqstate_scan_page,
    index: usize,
    key_out: *mut *const u8,
    len_out: *mut usize,
) -> mqstate_status {
    ffi_boundary! {
        let page = unsafe { arg_ref(page, "page") }?;
        let key_out = unsafe { Out::new(key_out, "key_out") }?;
        let len_out = unsafe { Out::new(len_out, "len_out") }?;
        let key = page.keys.get(index).ok_or_else(|| {
            FfiError::invalid(format!(
                "key index {index} is out of range (the page has {} keys)",
                page.keys.len()
            ))
        })?;
        key_out.write(key.as_ptr());
        len_out.write(key.len());
        Ok(())
    }
}

/// Frees a page (and the keys borrowed from it). NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_scan_page_free(page: *mut mqstate_scan_page) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(page) }
    })
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
