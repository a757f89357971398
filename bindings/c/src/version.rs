//! Versions (hybrid logical clock values: a key's version, a fencing token) and the values
//! GET returns.

use std::cmp::Ordering;
use std::ffi::{c_char, c_int};

use bytes::Bytes;
use mqstate::Hlc;

use crate::boundary::{FfiError, Out, arg_ref, arg_str, free_handle, into_handle, mqstate_status};

/// A version: a hybrid logical clock value `{ms}:{counter}:{node id}`, the version of a key
/// or a fencing token (docs/protocol.md sections 4 and 5). Immutable; safe to read from any
/// thread. Owned ones (from `mqstate_version_parse`, `mqstate_version_new`,
/// `mqstate_version_clone`, `mqstate_client_set`) are freed with `mqstate_version_free`;
/// borrowed ones (`const mqstate_version *` from a value or a notification) live as long as
/// their owner and are never freed by the caller.
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug, Clone)]
pub struct mqstate_version {
    hlc: Hlc,
    /// The canonical string form (milliseconds padded to 15 digits, counter to 5) followed
    /// by a NUL; the node id is its suffix.
    text: Box<[u8]>,
}

impl mqstate_version {
    pub(crate) fn new(hlc: Hlc) -> Self {
        let mut text = hlc.to_string().into_bytes();
        text.push(0);
        mqstate_version {
            hlc,
            text: text.into_boxed_slice(),
        }
    }

    pub(crate) fn hlc(&self) -> &Hlc {
        &self.hlc
    }

    /// The string form, without the NUL.
    fn text_len(&self) -> usize {
        self.text.len() - 1
    }
}

/// The parts of a version, a view into a `mqstate_version`: `node_id` points into the
/// version's own storage (NUL-terminated, `node_id_len` bytes without the NUL) and is valid
/// as long as that version is.
#[allow(non_camel_case_types, reason = "C type name")]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mqstate_hlc {
    /// Wall-clock milliseconds since the Unix epoch, as the producing node saw them.
    pub ms: u64,
    /// Logical counter within the millisecond.
    pub counter: u64,
    /// The node that produced it (a client id, or the server's id), NUL-terminated.
    pub node_id: *const c_char,
    /// Length of `node_id` in bytes, without the NUL.
    pub node_id_len: usize,
}

/// Parses the string form `{ms}:{counter}:{node id}` (any zero padding; exactly three
/// `:`-separated parts; unsigned decimal 64-bit numbers) into a new version.
/// `MQSTATE_INVALID_ARGUMENT` for a malformed string (the message says what is wrong).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_version_parse(
    text: *const c_char,
    version_out: *mut *mut mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY (all blocks below): the C contract: pointers are NULL or valid.
        let text = unsafe { arg_str(text, "text") }?;
        let out = unsafe { Out::new(version_out, "version_out") }?;
        let hlc: Hlc = text.parse().map_err(|e| FfiError::invalid(format!("{e}")))?;
        out.write(into_handle(mqstate_version::new(hlc)));
        Ok(())
    }
}

/// Builds a version from its parts. `node_id` may be empty but may not contain `:` (the
/// string form could not be parsed back).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_version_new(
    ms: u64,
    counter: u64,
    node_id: *const c_char,
    version_out: *mut *mut mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let node_id = unsafe { arg_str(node_id, "node_id") }?;
        let out = unsafe { Out::new(version_out, "version_out") }?;
        let version = Hlc::try_new(ms, counter, node_id).map_err(mqstate::Error::from)?;
        out.write(into_handle(mqstate_version::new(version)));
        Ok(())
    }
}

/// A new, owned copy of a version (for example to keep a notification's version after the
/// callback returns).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_version_clone(
    version: *const mqstate_version,
    version_out: *mut *mut mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let version = unsafe { arg_ref(version, "version") }?;
        let out = unsafe { Out::new(version_out, "version_out") }?;
        out.write(into_handle(version.clone()));
        Ok(())
    }
}

/// The canonical string form (`001696374425000:00000:CLIENT`: milliseconds padded to 15
/// digits, counter to 5), NUL-terminated, borrowed from the version. `len_out` (may be NULL)
/// receives its length without the NUL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_version_string(
    version: *const mqstate_version,
    text_out: *mut *const c_char,
    len_out: *mut usize,
) -> mqstate_status {
    ffi_boundary! {
        let version = unsafe { arg_ref(version, "version") }?;
        let out = unsafe { Out::new(text_out, "text_out") }?;
        let len = unsafe { Out::optional(len_out) };
        out.write(version.text.as_ptr().cast());
        if let Some(len) = len {
            len.write(version.text_len());
        }
        Ok(())
    }
}

/// The parts of a version (see `mqstate_hlc`; its `node_id` is borrowed from `version`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_version_parts(
    version: *const mqstate_version,
    parts_out: *mut mqstate_hlc,
) -> mqstate_status {
    ffi_boundary! {
        let version = unsafe { arg_ref(version, "version") }?;
        let out = unsafe { Out::new(parts_out, "parts_out") }?;
        let node_len = version.hlc.node_id.len();
        let node_start = version.text_len() - node_len;
        let node = version
            .text
            .get(node_start..)
            .ok_or_else(|| FfiError::invalid("version text is shorter than its node id"))?;
        out.write(mqstate_hlc {
            ms: version.hlc.ms,
            counter: version.hlc.counter,
            node_id: node.as_ptr().cast(),
            node_id_len: node_len,
        });
        Ok(())
    }
}

/// Compares two versions in the protocol's order (milliseconds, then counter, then node id
/// byte-wise): `*order_out` is -1 if `a < b`, 0 if equal, 1 if `a > b`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_version_compare(
    a: *const mqstate_version,
    b: *const mqstate_version,
    order_out: *mut c_int,
) -> mqstate_status {
    ffi_boundary! {
        let a = unsafe { arg_ref(a, "a") }?;
        let b = unsafe { arg_ref(b, "b") }?;
        let out = unsafe { Out::new(order_out, "order_out") }?;
        out.write(match a.hlc.cmp(&b.hlc) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        });
        Ok(())
    }
}

/// Frees an owned version. NULL is a no-op. Never pass a borrowed (`const`) version.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_version_free(version: *mut mqstate_version) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(version) }
    })
}

/// A value read by `mqstate_client_get` (its bytes and its version), or the holder of a
/// lease / the leader of an election (bytes only). Immutable; safe to read from any thread;
/// freed with `mqstate_value_free`.
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_value {
    pub(crate) bytes: Bytes,
    /// `None` for the holder / leader values of leases and elections.
    pub(crate) version: Option<mqstate_version>,
}

/// The value's bytes (may be empty; may hold any byte, NUL included), borrowed from the
/// value. `*data_out` is never NULL, even for an empty value.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_value_bytes(
    value: *const mqstate_value,
    data_out: *mut *const u8,
    len_out: *mut usize,
) -> mqstate_status {
    ffi_boundary! {
        let value = unsafe { arg_ref(value, "value") }?;
        let data = unsafe { Out::new(data_out, "data_out") }?;
        let len = unsafe { Out::new(len_out, "len_out") }?;
        data.write(value.bytes.as_ptr());
        len.write(value.bytes.len());
        Ok(())
    }
}

/// The value's version, borrowed from the value (do not free it; `mqstate_version_clone`
/// makes an owned copy). `MQSTATE_NOT_FOUND` for the values of `mqstate_lease_holder` and
/// `mqstate_election_leader`, which have none.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_value_version(
    value: *const mqstate_value,
    version_out: *mut *const mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let value = unsafe { arg_ref(value, "value") }?;
        let out = unsafe { Out::new(version_out, "version_out") }?;
        let version = value.version.as_ref().ok_or_else(|| {
            FfiError::new(
                crate::boundary::mqstate_status::MQSTATE_NOT_FOUND,
                "this value (a lease holder or an election leader) has no version",
            )
        })?;
        out.write(version);
        Ok(())
    }
}

/// Frees a value (and its borrowed bytes and version). NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_value_free(value: *mut mqstate_value) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(value) }
    })
}
