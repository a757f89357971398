//! The calling thread's last error, and status names.

use std::ffi::c_char;

use crate::boundary::{mqstate_service_error, mqstate_status, mqstate_status::*, with_last_error};

/// Copies the message of the calling thread's last error (the most recent call on this
/// thread that returned a status other than `MQSTATE_OK`) into `buf`, NUL-terminated.
///
/// A message longer than `len - 1` bytes is truncated at a UTF-8 character boundary (this
/// is not an error; `mqstate_error_message_len` gives the full length). `*written_out`
/// receives the number of bytes copied, without the NUL. With no error yet on this thread,
/// the message is empty. This function and the other error accessors never change the last
/// error: a NULL `buf` or `written_out` returns `MQSTATE_NULL_PARAMETER` and leaves it as it
/// was. `len` 0 writes nothing and returns `MQSTATE_BUFFER_TOO_SMALL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_error_message(
    buf: *mut c_char,
    len: usize,
    written_out: *mut usize,
) -> mqstate_status {
    ffi_boundary!(raw mqstate_status => {
        if buf.is_null() || written_out.is_null() {
            return MQSTATE_NULL_PARAMETER;
        }
        if len == 0 {
            return MQSTATE_BUFFER_TOO_SMALL;
        }
        with_last_error(|e| {
            let message = e.map_or("", |e| e.message.as_str());
            let mut n = message.len().min(len - 1);
            while !message.is_char_boundary(n) {
                n -= 1;
            }
            // SAFETY: `buf` is valid for `len` bytes (the caller's contract) and n < len.
            unsafe {
                std::ptr::copy_nonoverlapping(message.as_ptr(), buf.cast::<u8>(), n);
                buf.add(n).write(0);
                written_out.write(n);
            }
        });
        MQSTATE_OK
    })
}

/// The length in bytes (without the NUL) of the calling thread's last error message, so
/// that a buffer of `*len_out + 1` bytes holds it whole. Never changes the last error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_error_message_len(len_out: *mut usize) -> mqstate_status {
    ffi_boundary!(raw mqstate_status => {
        if len_out.is_null() {
            return MQSTATE_NULL_PARAMETER;
        }
        let len = with_last_error(|e| e.map_or(0, |e| e.message.len()));
        // SAFETY: non-NULL; writable by the caller's contract.
        unsafe { len_out.write(len) };
        MQSTATE_OK
    })
}

/// The service error kind of the calling thread's last error: which error the state store
/// reported when the last status was `MQSTATE_SERVICE_ERROR`, `MQSTATE_SERVICE_ERROR_NONE`
/// otherwise. Never changes the last error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_error_service_kind(
    kind_out: *mut mqstate_service_error,
) -> mqstate_status {
    ffi_boundary!(raw mqstate_status => {
        if kind_out.is_null() {
            return MQSTATE_NULL_PARAMETER;
        }
        let kind = with_last_error(|e| {
            e.map_or(mqstate_service_error::MQSTATE_SERVICE_ERROR_NONE, |e| e.service)
        });
        // SAFETY: non-NULL; writable by the caller's contract.
        unsafe { kind_out.write(kind) };
        MQSTATE_OK
    })
}

/// The name of a status (`"MQSTATE_NOT_FOUND"`...), a static NUL-terminated string, or
/// `"MQSTATE_UNKNOWN_STATUS"` for a value that is not a status. Never NULL, never fails.
#[unsafe(no_mangle)]
pub extern "C" fn mqstate_status_name(status: u32) -> *const c_char {
    ffi_boundary!(raw *const c_char => {
        crate::boundary::all_statuses()
            .iter()
            .find(|s| **s as u32 == status)
            .map_or(c"MQSTATE_UNKNOWN_STATUS", |s| s.name())
            .as_ptr()
    })
}

/// A test hook: panics inside the panic boundary, so that tests in every language can check
/// that a panic becomes `MQSTATE_PANIC` with a message (and does not abort the process).
/// Always returns `MQSTATE_PANIC`. Not for use in programs.
#[allow(clippy::panic, reason = "the point of this function is to panic")]
#[unsafe(no_mangle)]
pub extern "C" fn mqstate_test_panic() -> mqstate_status {
    ffi_boundary! {
        panic!("mqstate_test_panic was called (this panic is on purpose)")
    }
}
