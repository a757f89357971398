//! Change notifications: observe / unobserve with a C callback, run on a library thread.

use std::ffi::{c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use bytes::Bytes;
use mqstate::NotifyOperation;
use mqstate::blocking::KeyObservation;

use crate::boundary::{
    FfiError, Out, arg_bytes, arg_ref, mqstate_status, mqstate_status::*, status_of,
};
use crate::client::mqstate_client;
use crate::observers::{Observer, join_observers, take_key};
use crate::version::mqstate_version;

/// What a notification reports.
#[allow(
    non_camel_case_types,
    reason = "C names: the header shows the Rust names as they are"
)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mqstate_notification_kind {
    /// The key was set; `mqstate_notification_value` gives the new value.
    MQSTATE_NOTIFICATION_SET = 1,
    /// The key was deleted (DEL, VDEL) or expired.
    MQSTATE_NOTIFICATION_DELETE = 2,
    /// A problem, not a change: notifications were dropped because the observation's buffer
    /// was full (`MQSTATE_LAGGED`: read the key again), a notification could not be decoded,
    /// or the observation could not be restored after a reconnect. The observation goes on.
    /// `mqstate_notification_error` says which.
    MQSTATE_NOTIFICATION_ERROR = 3,
}

use mqstate_notification_kind::*;

/// One notification, passed to the callback; valid only during the callback (copy what you
/// need, or `mqstate_version_clone` its version).
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_notification {
    key: Bytes,
    kind: mqstate_notification_kind,
    value: Option<Bytes>,
    version: Option<mqstate_version>,
    synthesized: bool,
    /// The status and the NUL-terminated message of an `MQSTATE_NOTIFICATION_ERROR`.
    error: Option<(mqstate_status, Box<[u8]>)>,
    /// How many notifications were dropped, for an `MQSTATE_LAGGED` error (the core's
    /// `Error::missed`).
    missed: Option<u64>,
}

impl mqstate_notification {
    fn new(key: &Bytes, item: Result<mqstate::KeyNotification, mqstate::Error>) -> Self {
        match item {
            Ok(n) => {
                let (kind, value) = match n.operation {
                    NotifyOperation::Set(v) => (MQSTATE_NOTIFICATION_SET, Some(v)),
                    NotifyOperation::Delete => (MQSTATE_NOTIFICATION_DELETE, None),
                };
                mqstate_notification {
                    key: n.key,
                    kind,
                    value,
                    version: n.version.map(mqstate_version::new),
                    synthesized: n.synthesized,
                    error: None,
                    missed: None,
                }
            }
            Err(e) => {
                let mut message = e.to_string().replace('\0', "\\0").into_bytes();
                message.push(0);
                mqstate_notification {
                    key: key.clone(),
                    kind: MQSTATE_NOTIFICATION_ERROR,
                    value: None,
                    version: None,
                    synthesized: false,
                    error: Some((status_of(&e), message.into_boxed_slice())),
                    missed: e.missed(),
                }
            }
        }
    }
}

/// Called with each notification of an observed key, on a library thread (one thread per
/// observation: one observation's callbacks never overlap and come in order). It may call
/// any function of this library, including on the same client, except `mqstate_client_free`
/// of that client. It must return (it holds up that observation's later notifications, and
/// `mqstate_client_unobserve` / `_close` / `_free` wait for it) and must not unwind (no C++
/// exception, no longjmp) out of the callback.
#[allow(non_camel_case_types, reason = "C type name")]
pub type mqstate_notification_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, notification: *const mqstate_notification)>;

/// Called once when an observation ends (after its last callback, on the observation's
/// thread), to release `user_data`.
#[allow(non_camel_case_types, reason = "C type name")]
pub type mqstate_destroy_callback = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// The caller's context pointer, handed to the observation's thread.
struct UserData(*mut c_void);

// SAFETY: the C contract (mqstate_client_observe) says `user_data` is used from the library's
// callback thread; the library never dereferences it.
unsafe impl Send for UserData {}

/// An observation's thread: delivers each notification to the callback, then calls
/// `destroy` once the observation has ended.
fn run_observer(
    observation: KeyObservation,
    callback: unsafe extern "C" fn(*mut c_void, *const mqstate_notification),
    destroy: mqstate_destroy_callback,
    user_data: UserData,
) {
    let key = observation.key().clone();
    while let Some(item) = observation.recv() {
        // Rust code on this thread is contained too: a panic drops this notification only.
        let Ok(notification) =
            catch_unwind(AssertUnwindSafe(|| mqstate_notification::new(&key, item)))
        else {
            continue;
        };
        // SAFETY: the caller of mqstate_client_observe gave a valid callback for this
        // user_data; the notification outlives the call. No lock is held here.
        unsafe { callback(user_data.0, &notification) };
    }
    drop(observation);
    if let Some(destroy) = destroy {
        // SAFETY: as above; called once, after the last callback.
        unsafe { destroy(user_data.0) };
    }
}

/// Observes a key: `callback(user_data, notification)` is called on a library thread for
/// each change of the key from now on (KEYNOTIFY), until `mqstate_client_unobserve` of the
/// key or `mqstate_client_close` / `_free`; then `destroy(user_data)` (if not NULL) is called
/// once, on that thread, after the last callback. Observations survive reconnections (a
/// change made while disconnected is delivered as a notification marked "synthesized").
/// On a status other than `MQSTATE_OK`, neither callback is ever called and `user_data`
/// stays the caller's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_observe(
    client: *const mqstate_client,
    key: *const u8,
    key_len: usize,
    callback: mqstate_notification_callback,
    destroy: mqstate_destroy_callback,
    user_data: *mut c_void,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY (all blocks below): the C contract: pointers are NULL or valid.
        let client = unsafe { arg_ref(client, "client") }?;
        let key = unsafe { arg_bytes(key, key_len, "key", false) }?;
        let callback = callback.ok_or_else(|| FfiError::null("callback"))?;
        let user_data = UserData(user_data);
        // Held across the registration so that an unobserve / close cannot miss this thread;
        // never held while a callback runs.
        let mut observers = client.observers();
        let observation = client.call(|c| c.observe(key))?;
        let observed = observation.key().clone();
        let thread = std::thread::Builder::new()
            .name("mqstate-observe".into())
            .spawn(move || run_observer(observation, callback, destroy, user_data))
            .map_err(|e| {
                FfiError::new(
                    MQSTATE_UNKNOWN_ERROR,
                    format!("could not start the observation's callback thread: {e}"),
                )
            })?;
        observers.push(Observer::new(observed, thread));
        Ok(())
    }
}

/// Stops observing a key: every observation of it ends (KEYNOTIFY STOP). Returns after their
/// last callback and `destroy` have run (except the calling thread's own observation, when
/// called from its callback: its `destroy` runs when the callback returns). Not an error if
/// the key was not observed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_client_unobserve(
    client: *const mqstate_client,
    key: *const u8,
    key_len: usize,
) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        let key = unsafe { arg_bytes(key, key_len, "key", false) }?;
        let (result, ended) = {
            let mut observers = client.observers();
            let result = client.call(|c| c.unobserve(key));
            // The core ends the streams before it tells the server, so they have ended even
            // when the STOP request failed; only an invalid key leaves them running.
            let ended = match &result {
                Err(e) if e.status == MQSTATE_INVALID_ARGUMENT => Vec::new(),
                _ => take_key(&mut observers, key),
            };
            (result, ended)
        };
        join_observers(ended);
        result
    }
}

/// The notification's key, borrowed from the notification.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_notification_key(
    notification: *const mqstate_notification,
    key_out: *mut *const u8,
    len_out: *mut usize,
) -> mqstate_status {
    ffi_boundary! {
        let n = unsafe { arg_ref(notification, "notification") }?;
        let key = unsafe { Out::new(key_out, "key_out") }?;
        let len = unsafe { Out::new(len_out, "len_out") }?;
        key.write(n.key.as_ptr());
        len.write(n.key.len());
        Ok(())
    }
}

/// What the notification reports (`MQSTATE_NOTIFICATION_SET`, `_DELETE` or `_ERROR`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_notification_get_kind(
    notification: *const mqstate_notification,
    kind_out: *mut mqstate_notification_kind,
) -> mqstate_status {
    ffi_boundary! {
        let n = unsafe { arg_ref(notification, "notification") }?;
        let out = unsafe { Out::new(kind_out, "kind_out") }?;
        out.write(n.kind);
        Ok(())
    }
}

/// The new value of a SET notification, borrowed from the notification (never NULL, even
/// when empty). `MQSTATE_NOT_FOUND` for other kinds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_notification_value(
    notification: *const mqstate_notification,
    value_out: *mut *const u8,
    len_out: *mut usize,
) -> mqstate_status {
    ffi_boundary! {
        let n = unsafe { arg_ref(notification, "notification") }?;
        let value_out = unsafe { Out::new(value_out, "value_out") }?;
        let len_out = unsafe { Out::new(len_out, "len_out") }?;
        let value = n.value.as_ref().ok_or_else(|| {
            FfiError::new(MQSTATE_NOT_FOUND, "the notification is not a SET: it has no value")
        })?;
        value_out.write(value.as_ptr());
        len_out.write(value.len());
        Ok(())
    }
}

/// The key's new version, borrowed from the notification. `MQSTATE_NOT_FOUND` when the
/// notification has none (an error, a synthesized delete, or a server that sent none).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_notification_version(
    notification: *const mqstate_notification,
    version_out: *mut *const mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let n = unsafe { arg_ref(notification, "notification") }?;
        let out = unsafe { Out::new(version_out, "version_out") }?;
        let version = n.version.as_ref().ok_or_else(|| {
            FfiError::new(MQSTATE_NOT_FOUND, "the notification carries no version")
        })?;
        out.write(version);
        Ok(())
    }
}

/// True when the library made this notification up after a reconnect (from a GET of the key,
/// because it changed while the client was disconnected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_notification_synthesized(
    notification: *const mqstate_notification,
    synthesized_out: *mut bool,
) -> mqstate_status {
    ffi_boundary! {
        let n = unsafe { arg_ref(notification, "notification") }?;
        let out = unsafe { Out::new(synthesized_out, "synthesized_out") }?;
        out.write(n.synthesized);
        Ok(())
    }
}

/// For an `MQSTATE_NOTIFICATION_ERROR`: its status (`MQSTATE_LAGGED`,
/// `MQSTATE_UNEXPECTED_PAYLOAD`, `MQSTATE_DISCONNECTED`...) and its message, NUL-terminated
/// and borrowed from the notification. `MQSTATE_NOT_FOUND` for other kinds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_notification_error(
    notification: *const mqstate_notification,
    status_out: *mut mqstate_status,
    message_out: *mut *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let n = unsafe { arg_ref(notification, "notification") }?;
        let status_out = unsafe { Out::new(status_out, "status_out") }?;
        let message_out = unsafe { Out::new(message_out, "message_out") }?;
        let (status, message) = n.error.as_ref().ok_or_else(|| {
            FfiError::new(MQSTATE_NOT_FOUND, "the notification is not an error")
        })?;
        status_out.write(*status);
        message_out.write(message.as_ptr().cast());
        Ok(())
    }
}

/// For an `MQSTATE_LAGGED` error notification: how many notifications were dropped before
/// it (the observation goes on after it; read the key again to resynchronise).
/// `MQSTATE_NOT_FOUND` for every other notification.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_notification_missed(
    notification: *const mqstate_notification,
    missed_out: *mut u64,
) -> mqstate_status {
    ffi_boundary! {
        let n = unsafe { arg_ref(notification, "notification") }?;
        let out = unsafe { Out::new(missed_out, "missed_out") }?;
        let missed = n.missed.ok_or_else(|| {
            FfiError::new(MQSTATE_NOT_FOUND, "the notification is not a lagged error")
        })?;
        out.write(missed);
        Ok(())
    }
}
