//! Leases, locks and leader election (docs/protocol.md section 5), over
//! `mqstate::lock::blocking`: every rule (SET NEX PX, VDEL, the fencing token, renewal,
//! waiting on the release) is the core's; this module only converts arguments and results.
//!
//! Each handle keeps a clone of its client's Rust client, so the library's runtime stays up
//! while it lives; after `mqstate_client_close` / `_free` its calls fail with
//! `MQSTATE_DISCONNECTED`. Free leases, locks, guards and elections before or after their
//! client, in any order.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use mqstate::blocking::Client;
use mqstate::lock::FencingToken;
use mqstate::lock::blocking::{LeaderElection, Lease, Lock, LockGuard};

use crate::boundary::{
    FfiError, Out, arg_bytes, arg_ref, free_handle, into_handle, mqstate_status, mqstate_status::*,
};
use crate::client::mqstate_client;
use crate::version::{mqstate_value, mqstate_version};

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

/// Writes an owned token to an optional `mqstate_version **` output.
fn write_token(out: Option<Out<*mut mqstate_version>>, token: FencingToken) {
    if let Some(out) = out {
        out.write(into_handle(mqstate_version::new(token)));
    }
}

/// Writes the holder bytes (`None`: `MQSTATE_NOT_FOUND`, nobody holds it).
fn write_holder(
    out: Out<*mut mqstate_value>,
    holder: Option<bytes::Bytes>,
    what: &str,
) -> Result<(), FfiError> {
    match holder {
        Some(bytes) => {
            out.write(into_handle(mqstate_value {
                bytes,
                version: None,
            }));
            Ok(())
        }
        None => Err(FfiError::new(
            MQSTATE_NOT_FOUND,
            format!("{what}: nobody holds it"),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Leases
// ---------------------------------------------------------------------------------------------

/// A lease: one key that holds its holder's name while the lease is held (`SET name holder
/// NEX PX ttl`), released with `VDEL name holder`. The version of the acquiring SET is the
/// fencing token to pass to `mqstate_client_set` / `_del` for the keys the lease protects.
/// Thread-safe (every function takes a `const mqstate_lease *`); free with
/// `mqstate_lease_free`, which does not release it (call `mqstate_lease_release` first, or
/// the key expires after its ttl).
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_lease {
    pub(crate) lease: Lease,
    /// Keeps the client's runtime alive as long as the lease.
    pub(crate) client: Client,
}

/// Creates a lease on key `name`, held as `holder` (bytes; empty not allowed). Nothing is
/// sent until `mqstate_lease_acquire`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_new(
    client: *const mqstate_client,
    name: *const u8,
    name_len: usize,
    holder: *const u8,
    holder_len: usize,
    lease_out: *mut *mut mqstate_lease,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY (all blocks below): the C contract: pointers are NULL or valid.
        let client = unsafe { arg_ref(client, "client") }?;
        let name = unsafe { arg_bytes(name, name_len, "name", false) }?;
        let holder = unsafe { arg_bytes(holder, holder_len, "holder", false) }?;
        let out = unsafe { Out::new(lease_out, "lease_out") }?;
        let lease = Lease::new(&client.client, name, holder)?;
        out.write(into_handle(mqstate_lease { lease, client: client.client.clone() }));
        Ok(())
    }
}

/// Like `mqstate_lease_new`, held as `holder:session` (the core's `Lease::with_session_id`),
/// so that two processes with the same holder name exclude each other. `session` may be
/// NULL when `session_len` is 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_new_with_session(
    client: *const mqstate_client,
    name: *const u8,
    name_len: usize,
    holder: *const u8,
    holder_len: usize,
    session: *const u8,
    session_len: usize,
    lease_out: *mut *mut mqstate_lease,
) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        let name = unsafe { arg_bytes(name, name_len, "name", false) }?;
        let holder = unsafe { arg_bytes(holder, holder_len, "holder", false) }?;
        let session = unsafe { arg_bytes(session, session_len, "session", true) }?;
        let out = unsafe { Out::new(lease_out, "lease_out") }?;
        let lease = Lease::new(&client.client, name, holder)?.with_session_id(session);
        out.write(into_handle(mqstate_lease { lease, client: client.client.clone() }));
        Ok(())
    }
}

/// Tries once to acquire (or, if this holder already holds it, renew) the lease for
/// `ttl_ms`. `MQSTATE_OK`: held; `*token_out` (if `token_out` is not NULL) is the new fencing
/// token, owned by the caller. `MQSTATE_NOT_APPLIED`: someone else holds it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_acquire(
    lease: *const mqstate_lease,
    ttl_ms: u64,
    token_out: *mut *mut mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let lease = unsafe { arg_ref(lease, "lease") }?;
        let out = unsafe { Out::optional(token_out) };
        let token = lease.lease.acquire(ms(ttl_ms))?.ok_or_else(|| {
            FfiError::new(MQSTATE_NOT_APPLIED, "lease not acquired: someone else holds it")
        })?;
        write_token(out, token);
        Ok(())
    }
}

/// Acquires the lease for `ttl_ms`, waiting up to `timeout_ms` for the current holder to
/// release it or for its ttl to pass (woken by the key's DELETE notification, no polling).
/// `MQSTATE_OK` with the token as in `mqstate_lease_acquire`; `MQSTATE_TIMEOUT` if it could
/// not be had in time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_acquire_wait(
    lease: *const mqstate_lease,
    ttl_ms: u64,
    timeout_ms: u64,
    token_out: *mut *mut mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let lease = unsafe { arg_ref(lease, "lease") }?;
        let out = unsafe { Out::optional(token_out) };
        let token = lease.lease.acquire_wait(ms(ttl_ms), ms(timeout_ms))?;
        write_token(out, token);
        Ok(())
    }
}

/// Renews the lease with the ttl of the last acquire. `MQSTATE_OK`: still held, with a new
/// (strictly greater) token in `*token_out` (optional). `MQSTATE_NOT_APPLIED`: it was lost
/// to someone else. `MQSTATE_INVALID_ARGUMENT` if it was never acquired.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_renew(
    lease: *const mqstate_lease,
    token_out: *mut *mut mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let lease = unsafe { arg_ref(lease, "lease") }?;
        let out = unsafe { Out::optional(token_out) };
        let token = lease.lease.renew()?.ok_or_else(|| {
            FfiError::new(MQSTATE_NOT_APPLIED, "lease not renewed: someone else holds it")
        })?;
        write_token(out, token);
        Ok(())
    }
}

/// Renews the lease in the background every `fraction` x ttl (0 < fraction < 1; 0.5 is
/// usual) until `mqstate_lease_release`, `mqstate_lease_free`, or the first failed renewal
/// (then `mqstate_lease_current_token` returns `MQSTATE_NOT_FOUND`). Needs an acquired lease.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_auto_renew(
    lease: *const mqstate_lease,
    fraction: f64,
) -> mqstate_status {
    ffi_boundary! {
        let lease = unsafe { arg_ref(lease, "lease") }?;
        lease.lease.auto_renew(fraction)?;
        Ok(())
    }
}

/// Gives the lease up: stops the automatic renewal and deletes the key if it holds this
/// holder (`VDEL`). `MQSTATE_OK`: it was held and is released. `MQSTATE_NOT_FOUND`: this
/// holder did not hold it (expired, or someone else's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_release(lease: *const mqstate_lease) -> mqstate_status {
    ffi_boundary! {
        let lease = unsafe { arg_ref(lease, "lease") }?;
        if lease.lease.release()? {
            Ok(())
        } else {
            Err(FfiError::new(MQSTATE_NOT_FOUND, "lease release: this holder did not hold it"))
        }
    }
}

/// Who holds the lease now (a GET of its key): `MQSTATE_OK` and `*holder_out` a new value
/// holding the holder's bytes (it has no version: `mqstate_value_version` returns
/// `MQSTATE_NOT_FOUND`; free it with `mqstate_value_free`), or `MQSTATE_NOT_FOUND` if nobody.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_holder(
    lease: *const mqstate_lease,
    holder_out: *mut *mut mqstate_value,
) -> mqstate_status {
    ffi_boundary! {
        let lease = unsafe { arg_ref(lease, "lease") }?;
        let out = unsafe { Out::new(holder_out, "holder_out") }?;
        write_holder(out, lease.lease.holder()?, "lease holder")
    }
}

/// The token of the last successful acquire or renewal while the lease is believed held
/// (no request is sent): `MQSTATE_OK` and an owned copy in `*token_out`, or
/// `MQSTATE_NOT_FOUND` when it is not held (never acquired, released, or lost).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_current_token(
    lease: *const mqstate_lease,
    token_out: *mut *mut mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let lease = unsafe { arg_ref(lease, "lease") }?;
        let out = unsafe { Out::new(token_out, "token_out") }?;
        let token = lease.lease.current_token().ok_or_else(|| {
            FfiError::new(MQSTATE_NOT_FOUND, "the lease is not held: no current token")
        })?;
        write_token(Some(out), token);
        Ok(())
    }
}

/// Frees a lease (and stops its automatic renewal; the key itself stays until its ttl
/// passes unless `mqstate_lease_release` was called). NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lease_free(lease: *mut mqstate_lease) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(lease) }
    })
}

// ---------------------------------------------------------------------------------------------
// Locks
// ---------------------------------------------------------------------------------------------

/// A lock: a lease used as a mutex. `mqstate_lock_lock` waits for it and returns a guard
/// with the fencing token. Thread-safe; free with `mqstate_lock_free`.
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_lock {
    lock: Lock,
    _client: Client,
}

/// A held lock, from `mqstate_lock_lock`: its fencing token, and `mqstate_lock_unlock`.
/// Free it with `mqstate_lock_guard_free` (after unlocking; a guard freed while still locked
/// releases the lock in the background).
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_lock_guard {
    guard: Mutex<Option<LockGuard>>,
    token: mqstate_version,
    _client: Client,
}

/// Creates a lock named `name` (its key), taken as `holder` (bytes, non-empty).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lock_new(
    client: *const mqstate_client,
    name: *const u8,
    name_len: usize,
    holder: *const u8,
    holder_len: usize,
    lock_out: *mut *mut mqstate_lock,
) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        let name = unsafe { arg_bytes(name, name_len, "name", false) }?;
        let holder = unsafe { arg_bytes(holder, holder_len, "holder", false) }?;
        let out = unsafe { Out::new(lock_out, "lock_out") }?;
        let lock = Lock::new(&client.client, name, holder)?;
        out.write(into_handle(mqstate_lock { lock, _client: client.client.clone() }));
        Ok(())
    }
}

/// Like `mqstate_lock_new`, taken as `holder:session` (the core's `Lock::with_session_id`),
/// so that two processes with the same holder name exclude each other. `session` may be
/// NULL when `session_len` is 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lock_new_with_session(
    client: *const mqstate_client,
    name: *const u8,
    name_len: usize,
    holder: *const u8,
    holder_len: usize,
    session: *const u8,
    session_len: usize,
    lock_out: *mut *mut mqstate_lock,
) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        let name = unsafe { arg_bytes(name, name_len, "name", false) }?;
        let holder = unsafe { arg_bytes(holder, holder_len, "holder", false) }?;
        let session = unsafe { arg_bytes(session, session_len, "session", true) }?;
        let out = unsafe { Out::new(lock_out, "lock_out") }?;
        let lock = Lock::new(&client.client, name, holder)?.with_session_id(session);
        out.write(into_handle(mqstate_lock { lock, _client: client.client.clone() }));
        Ok(())
    }
}

/// The callback of `mqstate_lock_edit`, called once, on the calling thread, while the lock
/// is held. `old_value` / `old_len`: the key's value (`old_value` is NULL when the key does
/// not exist). Set `*new_value` / `*new_len` to the value to write (the bytes are copied
/// right after the callback returns, so they must stay valid until then), or leave
/// `*new_value` NULL to delete the key. Return `true` to write, `false` to abandon the edit
/// (nothing is written; `mqstate_lock_edit` returns `MQSTATE_NOT_APPLIED`).
#[allow(non_camel_case_types, reason = "C type name")]
pub type mqstate_edit_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut std::ffi::c_void,
        old_value: *const u8,
        old_len: usize,
        new_value: *mut *const u8,
        new_len: *mut usize,
    ) -> bool,
>;

/// A fenced read-modify-write under the lock (the core's `Lock::edit`): takes the lock for
/// `ttl_ms` (waiting up to `timeout_ms`), GETs `key`, calls `edit`, then SETs what it
/// returned (or DELs the key) with the lock's fencing token, and unlocks, also when the
/// write fails. `MQSTATE_OK`: written; `*value_out` (if not NULL) is the new value, or NULL
/// when the key was deleted. `MQSTATE_NOT_APPLIED`: the callback abandoned the edit.
/// `MQSTATE_TIMEOUT`: the lock was not had in time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lock_edit(
    lock: *const mqstate_lock,
    key: *const u8,
    key_len: usize,
    ttl_ms: u64,
    timeout_ms: u64,
    edit: mqstate_edit_fn,
    user_data: *mut std::ffi::c_void,
    value_out: *mut *mut mqstate_value,
) -> mqstate_status {
    ffi_boundary! {
        let lock = unsafe { arg_ref(lock, "lock") }?;
        let key = unsafe { arg_bytes(key, key_len, "key", false) }?;
        let edit = edit.ok_or_else(|| FfiError::null("edit"))?;
        let out = unsafe { Out::optional(value_out) };
        let new = lock.lock.try_edit(key, ms(ttl_ms), ms(timeout_ms), |old| {
            let (old_ptr, old_len) = match &old {
                Some(v) => (v.as_ptr(), v.len()),
                None => (std::ptr::null(), 0),
            };
            let mut new_ptr: *const u8 = std::ptr::null();
            let mut new_len: usize = 0;
            // SAFETY: the C contract: `edit` is a valid function; the pointers passed are
            // valid for the call.
            let write = unsafe { edit(user_data, old_ptr, old_len, &mut new_ptr, &mut new_len) };
            if !write {
                return Err(FfiError::new(
                    MQSTATE_NOT_APPLIED,
                    "edit abandoned by the callback: nothing was written",
                ));
            }
            if new_ptr.is_null() {
                return Ok(None);
            }
            // SAFETY: the callback's contract: `new_len` bytes at `new_ptr`, valid until now.
            let bytes = unsafe { arg_bytes(new_ptr, new_len, "new_value", true) }?;
            Ok(Some(bytes::Bytes::copy_from_slice(bytes)))
        })?;
        if let Some(out) = out {
            let value = new.map(|bytes| into_handle(mqstate_value { bytes, version: None }));
            out.write(value.unwrap_or(std::ptr::null_mut()));
        }
        Ok(())
    }
}

/// Takes the lock for `ttl_ms`, waiting up to `timeout_ms` for it. `MQSTATE_OK`:
/// `*guard_out` is a new guard (`mqstate_lock_guard_token`, `mqstate_lock_unlock`,
/// `mqstate_lock_guard_free`). `MQSTATE_TIMEOUT`: not had in time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lock_lock(
    lock: *const mqstate_lock,
    ttl_ms: u64,
    timeout_ms: u64,
    guard_out: *mut *mut mqstate_lock_guard,
) -> mqstate_status {
    ffi_boundary! {
        let lock = unsafe { arg_ref(lock, "lock") }?;
        let out = unsafe { Out::new(guard_out, "guard_out") }?;
        let guard = lock.lock.lock(ms(ttl_ms), ms(timeout_ms))?;
        let token = guard
            .token()
            .cloned()
            .ok_or_else(|| FfiError::new(MQSTATE_UNKNOWN_ERROR, "a new lock guard has no token"))?;
        out.write(into_handle(mqstate_lock_guard {
            guard: Mutex::new(Some(guard)),
            token: mqstate_version::new(token),
            _client: lock._client.clone(),
        }));
        Ok(())
    }
}

/// The fencing token of a held lock, borrowed from the guard: pass it to `mqstate_client_set`
/// / `_del` / `_vdel` for the keys the lock protects.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lock_guard_token(
    guard: *const mqstate_lock_guard,
    token_out: *mut *const mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let guard = unsafe { arg_ref(guard, "guard") }?;
        let out = unsafe { Out::new(token_out, "token_out") }?;
        out.write(&guard.token);
        Ok(())
    }
}

/// Releases the lock. `MQSTATE_OK`: it was still held by us and is released.
/// `MQSTATE_NOT_FOUND`: it was no longer ours (its ttl passed). `MQSTATE_INVALID_ARGUMENT`:
/// this guard was unlocked already. The guard must still be freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lock_unlock(guard: *const mqstate_lock_guard) -> mqstate_status {
    ffi_boundary! {
        let guard = unsafe { arg_ref(guard, "guard") }?;
        let held = guard
            .guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or_else(|| FfiError::invalid("this lock guard was unlocked already"))?;
        if held.unlock()? {
            Ok(())
        } else {
            Err(FfiError::new(MQSTATE_NOT_FOUND, "unlock: the lock was no longer held by us"))
        }
    }
}

/// Frees a guard; if it was not unlocked, the lock is released in the background (best
/// effort: otherwise it expires after its ttl). NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lock_guard_free(guard: *mut mqstate_lock_guard) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(guard) }
    })
}

/// Frees a lock (guards taken from it stay valid). NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_lock_free(lock: *mut mqstate_lock) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(lock) }
    })
}

// ---------------------------------------------------------------------------------------------
// Leader election
// ---------------------------------------------------------------------------------------------

/// One candidate in a leader election: the leader holds the election's key (a lease) and
/// the library renews its term in the background (every half term) until it resigns or
/// loses. Thread-safe; free with `mqstate_election_free` (resign first: freeing stops the
/// renewal but leaves the key until the term passes).
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_election {
    election: LeaderElection,
    _client: Client,
}

/// Creates candidate `candidate` (bytes, non-empty) in the election whose key is `election`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_election_new(
    client: *const mqstate_client,
    election: *const u8,
    election_len: usize,
    candidate: *const u8,
    candidate_len: usize,
    election_out: *mut *mut mqstate_election,
) -> mqstate_status {
    ffi_boundary! {
        let client = unsafe { arg_ref(client, "client") }?;
        let election = unsafe { arg_bytes(election, election_len, "election", false) }?;
        let candidate = unsafe { arg_bytes(candidate, candidate_len, "candidate", false) }?;
        let out = unsafe { Out::new(election_out, "election_out") }?;
        let election = LeaderElection::new(&client.client, election, candidate)?;
        out.write(into_handle(mqstate_election { election, _client: client.client.clone() }));
        Ok(())
    }
}

/// Campaigns until elected or `timeout_ms` passes. `MQSTATE_OK`: this candidate leads for
/// terms of `term_ms`, renewed automatically; `*token_out` (optional) is its fencing token.
/// `MQSTATE_TIMEOUT`: another candidate kept leading.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_election_campaign(
    election: *const mqstate_election,
    term_ms: u64,
    timeout_ms: u64,
    token_out: *mut *mut mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let election = unsafe { arg_ref(election, "election") }?;
        let out = unsafe { Out::optional(token_out) };
        let token = election
            .election
            .campaign(ms(term_ms), ms(timeout_ms))?;
        write_token(out, token);
        Ok(())
    }
}

/// Tries once. `MQSTATE_OK`: elected (as `mqstate_election_campaign`). `MQSTATE_NOT_APPLIED`:
/// another candidate leads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_election_try_campaign(
    election: *const mqstate_election,
    term_ms: u64,
    token_out: *mut *mut mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let election = unsafe { arg_ref(election, "election") }?;
        let out = unsafe { Out::optional(token_out) };
        let token = election
            .election
            .try_campaign(ms(term_ms))?
            .ok_or_else(|| {
                FfiError::new(MQSTATE_NOT_APPLIED, "not elected: another candidate leads")
            })?;
        write_token(out, token);
        Ok(())
    }
}

/// Steps down: stops renewing and releases the election key. `MQSTATE_OK`: this candidate
/// was leading. `MQSTATE_NOT_FOUND`: it was not.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_election_resign(
    election: *const mqstate_election,
) -> mqstate_status {
    ffi_boundary! {
        let election = unsafe { arg_ref(election, "election") }?;
        if election.election.resign()? {
            Ok(())
        } else {
            Err(FfiError::new(MQSTATE_NOT_FOUND, "resign: this candidate was not leading"))
        }
    }
}

/// The current leader (a GET of the election key): `MQSTATE_OK` and `*leader_out` a new value
/// holding the leader's candidate bytes (no version; free with `mqstate_value_free`), or
/// `MQSTATE_NOT_FOUND` if nobody leads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_election_leader(
    election: *const mqstate_election,
    leader_out: *mut *mut mqstate_value,
) -> mqstate_status {
    ffi_boundary! {
        let election = unsafe { arg_ref(election, "election") }?;
        let out = unsafe { Out::new(leader_out, "leader_out") }?;
        write_holder(out, election.election.leader()?, "election leader")
    }
}

/// Whether this candidate believes it leads (it holds a term that was not lost or resigned;
/// no request is sent).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_election_is_leader(
    election: *const mqstate_election,
    is_leader_out: *mut bool,
) -> mqstate_status {
    ffi_boundary! {
        let election = unsafe { arg_ref(election, "election") }?;
        let out = unsafe { Out::new(is_leader_out, "is_leader_out") }?;
        out.write(election.election.is_leader());
        Ok(())
    }
}

/// The fencing token of the current term while this candidate leads (it grows with every
/// renewal: protected writes should carry the latest one). `MQSTATE_NOT_FOUND` when it does
/// not lead. The caller frees `*token_out` with `mqstate_version_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_election_current_token(
    election: *const mqstate_election,
    token_out: *mut *mut mqstate_version,
) -> mqstate_status {
    ffi_boundary! {
        let election = unsafe { arg_ref(election, "election") }?;
        let out = unsafe { Out::new(token_out, "token_out") }?;
        let token = election.election.current_token().ok_or_else(|| {
            FfiError::new(MQSTATE_NOT_FOUND, "this candidate does not lead: no current token")
        })?;
        write_token(Some(out), token);
        Ok(())
    }
}

/// Frees a candidate (stops the renewal of its term; resign first to hand over at once).
/// NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_election_free(election: *mut mqstate_election) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(election) }
    })
}
