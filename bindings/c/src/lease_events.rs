//! A lease's events (acquired, renewed, lost, released: the core's `LeaseEvent`), read one
//! at a time with a timeout, the C counterpart of the event streams of the other bindings.
//! The event names are the core's (`LeaseEvent::name`); this module only converts.

use std::ffi::{CString, c_char};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use mqstate::blocking::Client;
use mqstate::lock::blocking::Lease;
use mqstate::lock::{LeaseEvent, LeaseEvents};

use crate::boundary::{
    FfiError, Out, arg_ref, free_handle, into_handle, mqstate_status, mqstate_status::*,
};
use crate::lock::mqstate_lease;
use crate::version::mqstate_version;

/// The events of one lease from the moment it was made (`mqstate_lease_events_new`; events
/// before that are not seen). Read them with `mqstate_lease_events_next`; free with
/// `mqstate_lease_events_free`. Several streams of one lease each see every event. A reader
/// more than 64 events behind skips the oldest ones. Thread-safe (reads are serialised).
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_lease_events {
    events: Mutex<LeaseEvents>,
    /// Runs the waits on the client's runtime (and keeps the stream open).
    lease: Lease,
    _client: Client,
}

/// One lease event, from `mqstate_lease_events_next`; free with `mqstate_lease_event_free`.
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_lease_event {
    name: CString,
    token: Option<mqstate_version>,
    reason: Option<CString>,
}

impl mqstate_lease_event {
    fn new(event: &LeaseEvent) -> Result<Self, FfiError> {
        let text = |s: &str| {
            CString::new(s.replace('\0', "\\0"))
                .map_err(|e| FfiError::new(MQSTATE_UNKNOWN_ERROR, e.to_string()))
        };
        Ok(mqstate_lease_event {
            name: text(event.name())?,
            token: event.token().cloned().map(mqstate_version::new),
            reason: match event {
                LeaseEvent::Lost { reason } => Some(text(reason)?),
                _ => None,
            },
        })
    }
}

/// Starts reading `lease`'s events: `*events_out` receives a new stream, which sees the
/// events that happen from now on (make it before `mqstate_lease_auto_renew` to see every
/// renewal).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_events_new(
    lease: *const mqstate_lease,
    events_out: *mut *mut mqstate_lease_events,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY (both): the C contract: pointers are NULL or valid.
        let lease = unsafe { arg_ref(lease, "lease") }?;
        let out = unsafe { Out::new(events_out, "events_out") }?;
        out.write(into_handle(mqstate_lease_events {
            events: Mutex::new(lease.lease.events()),
            lease: lease.lease.clone(),
            _client: lease.client.clone(),
        }));
        Ok(())
    }
}

/// Waits up to `timeout_ms` for the next event. `MQSTATE_OK`: `*event_out` is a new event
/// (`mqstate_lease_event_name` says which); `MQSTATE_TIMEOUT`: none came in time (nothing is
/// written; call again). Must not be called from inside a callback of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_events_next(
    events: *const mqstate_lease_events,
    timeout_ms: u64,
    event_out: *mut *mut mqstate_lease_event,
) -> mqstate_status {
    ffi_boundary! {
        let events = unsafe { arg_ref(events, "events") }?;
        let out = unsafe { Out::new(event_out, "event_out") }?;
        let mut stream = events.events.lock().unwrap_or_else(PoisonError::into_inner);
        let event = events
            .lease
            .next_event(&mut stream, Duration::from_millis(timeout_ms))?
            .ok_or_else(|| {
                FfiError::new(MQSTATE_TIMEOUT, format!("no lease event within {timeout_ms} ms"))
            })?;
        out.write(into_handle(mqstate_lease_event::new(&event)?));
        Ok(())
    }
}

/// Frees a stream of lease events. NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_events_free(events: *mut mqstate_lease_events) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(events) }
    })
}

/// The event's name, the same in every language: `"acquired"`, `"renewed"`, `"lost"` or
/// `"released"` (new names may be added). NUL-terminated, borrowed from the event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_event_name(
    event: *const mqstate_lease_event,
    name_out: *mut *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let event = unsafe { arg_ref(event, "event") }?;
        let out = unsafe { Out::new(name_out, "name_out") }?;
        out.write(event.name.as_ptr());
        Ok(())
    }
}

/// The fencing token of an `acquired` or `renewed` event, borrowed from the event
/// (`mqstate_version_clone` keeps it); `MQSTATE_NOT_FOUND` for the other events.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_event_token(
    event: *const mqstate_lease_event,
    token_out: *mut *const mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let event = unsafe { arg_ref(event, "event") }?;
        let out = unsafe { Out::new(token_out, "token_out") }?;
        let token = event.token.as_ref().ok_or_else(|| {
            FfiError::new(MQSTATE_NOT_FOUND, "this lease event carries no token")
        })?;
        out.write(token);
        Ok(())
    }
}

/// Why the lease was lost, for a `lost` event (NUL-terminated, borrowed from the event);
/// `MQSTATE_NOT_FOUND` for the other events.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_event_reason(
    event: *const mqstate_lease_event,
    reason_out: *mut *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let event = unsafe { arg_ref(event, "event") }?;
        let out = unsafe { Out::new(reason_out, "reason_out") }?;
        let reason = event.reason.as_ref().ok_or_else(|| {
            FfiError::new(MQSTATE_NOT_FOUND, "only a lost event has a reason")
        })?;
        out.write(reason.as_ptr());
        Ok(())
    }
}

/// Frees a lease event. NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_event_free(event: *mut mqstate_lease_event) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(event) }
    })
}
