//! The client handle and the key-value operations.

use std::ffi::{CString, c_char};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mqstate::blocking::Client;
use mqstate::{ConnectOptions, SetCondition, SetOptions, VdelOutcome};

use crate::boundary::{
    FfiError, Out, arg_bytes, arg_ref, into_handle, mqstate_status, mqstate_status::*,
};
use crate::observers::{Observer, join_observers};
use crate::options::mqstate_connect_options;
use crate::version::{mqstate_value, mqstate_version};

/// A SET condition (`mqstate_client_set`): one of `MQSTATE_SET_ALWAYS`, `_NX`, `_NEX`,
/// optionally or-ed with `MQSTATE_SET_PERSIST`. `_NX | _NEX` is `MQSTATE_INVALID_ARGUMENT`
/// (the core's "nx and nex exclude each other", as in every language).
#[allow(non_camel_case_types, reason = "C type name")]
pub type mqstate_set_condition = u32;

/// Always set.
pub const MQSTATE_SET_ALWAYS: mqstate_set_condition = 0;
/// `NX`: set only if the key does not exist.
pub const MQSTATE_SET_NX: mqstate_set_condition = 1;
/// `NEX`: set only if the key does not exist or already holds this value (how a lease is
/// acquired and renewed).
pub const MQSTATE_SET_NEX: mqstate_set_condition = 2;
/// A flag to or with the condition: ask the service to persist the key (the request carries
/// `aio-persistence: true`; `mqstate serve --data-dir DIR --persist requested` keeps only such
/// keys across a restart).
pub const MQSTATE_SET_PERSIST: mqstate_set_condition = 0x100;

/// A connected state store client. Thread-safe: every function taking a
/// `const mqstate_client *` (and `mqstate_client_set_timeout_ms`) may be called from any
/// number of threads at once; `mqstate_client_free` must not race with them. It owns its own
/// runtime threads (it never uses the caller's) and one thread per observation, on which
/// the callbacks run.
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_client {
    pub(crate) client: Client,
    client_id: CString,
    /// 0: the connect options' request timeout.
    timeout_ms: AtomicU64,
    /// The observation threads; held across the core's observe / unobserve calls (never
    /// while a callback runs or a thread is joined).
    pub(crate) observers: Mutex<Vec<Observer>>,
}

impl mqstate_client {
    fn new(client: Client) -> Result<Self, FfiError> {
        let client_id = CString::new(client.client_id())
            .map_err(|_| FfiError::invalid("the client id contains NUL"))?;
        Ok(mqstate_client {
            client,
            client_id,
            timeout_ms: AtomicU64::new(0),
            observers: Mutex::new(Vec::new()),
        })
    }

    /// Runs `f` with the client, using the timeout set by `mqstate_client_set_timeout_ms`.
    pub(crate) fn call<T>(
        &self,
        f: impl FnOnce(&Client) -> Result<T, mqstate::Error>,
    ) -> Result<T, FfiError> {
        let result = match self.timeout_ms.load(Ordering::Relaxed) {
            0 => f(&self.client),
            ms => f(&self.client.with_timeout(Duration::from_millis(ms))),
        };
        result.map_err(FfiError::from)
    }

    pub(crate) fn observers(&self) -> MutexGuard<'_, Vec<Observer>> {
        self.observers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the connection, which ends every observation, and waits for their threads
    /// (each calls its `destroy` after its last callback). Skips the calling thread's own
    /// observation when called from a callback.
    fn shutdown(&self) {
        self.client.close();
        let observers = std::mem::take(&mut *self.observers());
        join_observers(observers);
    }
}

fn connect(options: ConnectOptions, out: Out<*mut mqstate_client>) -> Result<(), FfiError> {
    let client = mqstate_client::new(Client::connect(options)?)?;
    out.write(into_handle(client));
    Ok(())
}

/// Connects (blocking, up to the connect timeout) and returns a new client. The options are
/// copied, not consumed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_new(
    options: *const mqstate_connect_options,
    client_out: *mut *mut mqstate_client,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY (all blocks below): the C contract: pointers are NULL or valid.
        let options = unsafe { arg_ref(options, "options") }?;
        let out = unsafe { Out::new(client_out, "client_out") }?;
        connect(options.inner.clone(), out)
    }
}

/// Connects with the options `mqstate_connect_options_from_env` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_new_from_env(
    client_out: *mut *mut mqstate_client,
) -> mqstate_status {
    ffi_boundary! {
        let out = unsafe { Out::new(client_out, "client_out") }?;
        connect(ConnectOptions::from_env()?, out)
    }
}

/// The MQTT client id, NUL-terminated, borrowed from the client.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_id(
    client: *const mqstate_client,
    client_id_out: *mut *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        let out = unsafe { Out::new(client_id_out, "client_id_out") }?;
        out.write(client.client_id.as_ptr());
        Ok(())
    }
}

/// Sets the timeout of this client's later requests, in milliseconds (0: back to the connect
/// options' request timeout). Safe to call while other threads use the client; their calls
/// already under way keep the timeout they started with.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_set_timeout_ms(
    client: *mut mqstate_client,
    timeout_ms: u64,
) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        client.timeout_ms.store(timeout_ms, Ordering::Relaxed);
        Ok(())
    }
}

/// `GET key`: on `MQSTATE_OK`, `*value_out` is a new value (bytes + version; free it with
/// `mqstate_value_free`). `MQSTATE_NOT_FOUND` when there is no such key (`*value_out` is
/// not written).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_get(
    client: *const mqstate_client,
    key: *const u8,
    key_len: usize,
    value_out: *mut *mut mqstate_value,
) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        let key = unsafe { arg_bytes(key, key_len, "key", false) }?;
        let out = unsafe { Out::new(value_out, "value_out") }?;
        match client.call(|c| c.get(key))? {
            Some(v) => {
                out.write(into_handle(mqstate_value {
                    bytes: v.value,
                    version: Some(mqstate_version::new(v.version)),
                }));
                Ok(())
            }
            None => Err(FfiError::new(MQSTATE_NOT_FOUND, "GET: no such key")),
        }
    }
}

/// `SET key value [NX|NEX] [PX expiry_ms]`. `value` may be NULL when `value_len` is 0 (an
/// empty value). `condition`: `MQSTATE_SET_ALWAYS`, `_NX` or `_NEX`, or-ed with
/// `MQSTATE_SET_PERSIST` to persist the key. `expiry_ms`: NULL for no expiry, or a pointer to
/// the expiry in milliseconds, which must be > 0 (0 is `MQSTATE_INVALID_ARGUMENT`, as in every
/// language; a literal `0` argument is NULL).
/// `fencing_token`: NULL, or the token protecting the key (docs/protocol.md section 5).
/// `MQSTATE_OK`: applied, and `*version_out` (if `version_out` is not NULL) is the key's new
/// version, owned by the caller (`mqstate_version_free`). `MQSTATE_NOT_APPLIED`: the
/// condition failed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_set(
    client: *const mqstate_client,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    condition: mqstate_set_condition,
    expiry_ms: *const u64,
    fencing_token: *const mqstate_version,
    version_out: *mut *mut mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        let key = unsafe { arg_bytes(key, key_len, "key", false) }?;
        let value = unsafe { arg_bytes(value, value_len, "value", true) }?;
        let token = unsafe { fencing_token.as_ref() };
        let out = unsafe { Out::optional(version_out) };
        let persist = condition & MQSTATE_SET_PERSIST != 0;
        let flags = condition & !MQSTATE_SET_PERSIST;
        if flags & !(MQSTATE_SET_NX | MQSTATE_SET_NEX) != 0 {
            return Err(FfiError::invalid(format!(
                "unknown SET condition {flags} (expected MQSTATE_SET_ALWAYS, _NX or _NEX, optionally | MQSTATE_SET_PERSIST)"
            )));
        }
        let mut options = SetOptions::default();
        // NX together with NEX is refused by the core, with the message of every language.
        options.condition = SetCondition::from_flags(
            flags & MQSTATE_SET_NX != 0,
            flags & MQSTATE_SET_NEX != 0,
        )?;
        if persist {
            options = options.persist();
        }
        // SAFETY: the C contract: NULL or a valid pointer.
        if let Some(&expiry_ms) = unsafe { expiry_ms.as_ref() } {
            options = options.expiry(Duration::from_millis(expiry_ms));
        }
        if let Some(token) = token {
            options = options.fencing_token(token.hlc().clone());
        }
        let outcome = client.call(|c| c.set(key, value, options))?;
        if !outcome.applied {
            return Err(FfiError::new(
                MQSTATE_NOT_APPLIED,
                "SET not applied: the NX / NEX condition failed",
            ));
        }
        if let Some(out) = out {
            out.write(into_handle(mqstate_version::new(outcome.version)));
        }
        Ok(())
    }
}

/// `DEL key` (with `fencing_token` unless NULL). `MQSTATE_OK`: deleted.
/// `MQSTATE_NOT_FOUND`: there was no such key.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_del(
    client: *const mqstate_client,
    key: *const u8,
    key_len: usize,
    fencing_token: *const mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        let key = unsafe { arg_bytes(key, key_len, "key", false) }?;
        let token = unsafe { fencing_token.as_ref() }.map(|t| t.hlc());
        match client.call(|c| c.del(key, token))? {
            0 => Err(FfiError::new(MQSTATE_NOT_FOUND, "DEL: no such key")),
            _ => Ok(()),
        }
    }
}

/// `VDEL key value`: deletes the key only if it holds `value` (NULL allowed when
/// `value_len` is 0). `MQSTATE_OK`: deleted. `MQSTATE_NOT_FOUND`: no such key.
/// `MQSTATE_NOT_APPLIED`: the key holds another value and was kept.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_vdel(
    client: *const mqstate_client,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    fencing_token: *const mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        let key = unsafe { arg_bytes(key, key_len, "key", false) }?;
        let value = unsafe { arg_bytes(value, value_len, "value", true) }?;
        let token = unsafe { fencing_token.as_ref() }.map(|t| t.hlc());
        match client.call(|c| c.vdel(key, value, token))? {
            VdelOutcome::Deleted => Ok(()),
            VdelOutcome::NotFound => Err(FfiError::new(MQSTATE_NOT_FOUND, "VDEL: no such key")),
            VdelOutcome::ValueMismatch => Err(FfiError::new(
                MQSTATE_NOT_APPLIED,
                "VDEL not applied: the key holds another value",
            )),
        }
    }
}

/// Closes the connection gracefully and ends every observation: returns after each
/// observation's last callback and its `destroy` (except the calling thread's own
/// observation, when called from a callback: that one ends when the callback returns).
/// Later calls fail with `MQSTATE_DISCONNECTED`. Idempotent. The handle must still be freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_close(client: *const mqstate_client) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        client.shutdown();
        Ok(())
    }
}

/// Closes the client (as `mqstate_client_close`) and frees it. NULL is a no-op. No other
/// call on this client may run or start during or after it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_free(client: *mut mqstate_client) {
    ffi_boundary!(raw () => {
        if !client.is_null() {
            // SAFETY: a handle from `mqstate_client_new*`, freed once (the C contract).
            let client = unsafe { Box::from_raw(client) };
            client.shutdown();
        }
    })
}
