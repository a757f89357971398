//! The protocol's hex encoding (RFC 4648 base16, upper case), as notification topics use it.

use std::ffi::c_char;

use mqstate::protocol::topics;

use crate::boundary::{FfiError, Out, arg_bytes, arg_str, mqstate_status, mqstate_status::*};

/// Checks that `buf` (NULL allowed only when `len` is 0) can take `needed` bytes.
///
/// # Safety
/// `buf` is NULL or valid for writing `len` bytes.
unsafe fn out_buffer<'a>(
    buf: *mut u8,
    len: usize,
    needed: usize,
    what: &str,
) -> Result<&'a mut [u8], FfiError> {
    if buf.is_null() && len > 0 {
        return Err(FfiError::null("buf"));
    }
    if len < needed {
        return Err(FfiError::new(
            MQSTATE_BUFFER_TOO_SMALL,
            format!("{what} needs a buffer of {needed} bytes, buf_len is {len}"),
        ));
    }
    if needed == 0 {
        return Ok(&mut []);
    }
    // SAFETY: non-NULL (len >= needed > 0) and writable for len bytes by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf, len) })
}

/// Writes the upper-case hex form of `bytes` (NULL allowed when `len` is 0) into `buf`,
/// NUL-terminated: `buf_len` must be at least `2 * len + 1` (else
/// `MQSTATE_BUFFER_TOO_SMALL` and nothing is written). `*written_out` receives `2 * len`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_hex_encode(
    bytes: *const u8,
    len: usize,
    buf: *mut c_char,
    buf_len: usize,
    written_out: *mut usize,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY (all blocks below): the C contract: pointers are NULL or valid for their lengths.
        let bytes = unsafe { arg_bytes(bytes, len, "bytes", true) }?;
        let written = unsafe { Out::new(written_out, "written_out") }?;
        let hex = topics::hex_encode(bytes);
        let needed = hex.len() + 1;
        let out = unsafe { out_buffer(buf.cast(), buf_len, needed, "hex encoding") }?;
        let (text, nul) = out.split_at_mut(hex.len());
        text.copy_from_slice(hex.as_bytes());
        if let Some(nul) = nul.first_mut() {
            *nul = 0;
        }
        written.write(hex.len());
        Ok(())
    }
}

/// Decodes hex text (either case; NUL-terminated) into `buf` (NULL allowed when `buf_len`
/// is 0): `buf_len` must be at least `strlen(text) / 2`. `*written_out` receives the number
/// of bytes. `MQSTATE_INVALID_ARGUMENT` for an odd length or a character that is not a hex
/// digit (the message gives its byte offset); nothing is written then.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_hex_decode(
    text: *const c_char,
    buf: *mut u8,
    buf_len: usize,
    written_out: *mut usize,
) -> mqstate_status {
    ffi_boundary! {
        let text = unsafe { arg_str(text, "text") }?;
        let written = unsafe { Out::new(written_out, "written_out") }?;
        let decoded = topics::hex_decode(text).map_err(|e| FfiError::invalid(e.to_string()))?;
        let out = unsafe { out_buffer(buf, buf_len, decoded.len(), "hex decoding") }?;
        let dest = out
            .get_mut(..decoded.len())
            .ok_or_else(|| FfiError::new(MQSTATE_BUFFER_TOO_SMALL, "buffer too small"))?;
        dest.copy_from_slice(&decoded);
        written.write(decoded.len());
        Ok(())
    }
}
