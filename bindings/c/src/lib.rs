//! # mqstate-ffi: the C ABI of the mqstate state store client
//!
//! A thin layer over [`mqstate::blocking::Client`]: every protocol rule lives in `core/`; this
//! crate only turns C arguments into Rust ones and results into status codes. The header
//! `include/mqstate.h` is generated from these sources by cbindgen (`cbindgen.toml`) and
//! checked in; `scripts/test-c` regenerates it and fails when it is stale.
//!
//! The C contract (ownership, threads, NULL, callbacks, errors) is in the header's preamble
//! and in `README.md` ("C API conventions"). In short: every exported function runs inside
//! `ffi_boundary!` (a panic becomes `MQSTATE_PANIC`), returns an `mqstate_status`, checks
//! its pointers (NULL is `MQSTATE_NULL_PARAMETER`) and writes its outputs only on success.

#![allow(
    clippy::missing_safety_doc,
    reason = "the C contract (pointers are NULL or valid, handles are freed once) is written \
              once, in the header preamble and README.md, not on each function"
)]

/// Runs an exported function's body inside the panic boundary.
///
/// `ffi_boundary! { ... }`: the body evaluates to `Result<(), FfiError>` (so `?` works);
/// `Ok(())` returns `MQSTATE_OK`, an error becomes the thread's last error and its status, a
/// panic becomes `MQSTATE_PANIC`.
///
/// `ffi_boundary!(raw T => { ... })`: the body evaluates to `T` (a `_free` function's `()`,
/// a static string, or a status the body chose itself); a panic returns `T`'s "panicked"
/// value (see `boundary::BoundaryOutput`).
///
/// A test (`tests::every_export_runs_in_the_boundary`) checks that every `extern "C"`
/// function's body is exactly one such macro call.
macro_rules! ffi_boundary {
    (raw $ty:ty => $body:block) => {
        $crate::boundary::finish(::std::panic::catch_unwind(
            ::std::panic::AssertUnwindSafe(|| -> $ty { $body }),
        ))
    };
    ($($body:tt)*) => {
        $crate::boundary::finish(::std::panic::catch_unwind(
            ::std::panic::AssertUnwindSafe(
                || -> ::std::result::Result<(), $crate::boundary::FfiError> { $($body)* },
            ),
        ))
    };
}

pub mod boundary;
pub mod client;
pub mod errors;
pub mod hex;
pub mod iothub;
pub mod iothub_options;
pub mod lease_events;
pub mod lock;
pub mod observe;
mod observers;
pub mod options;
pub mod scan;
pub mod version;

#[cfg(test)]
mod tests;
