//! The C contract's machinery: status codes, the thread's last error, the panic boundary every
//! exported function runs in, and checked access to the caller's pointers.

use std::cell::RefCell;
use std::ffi::{CStr, c_char};
use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;

use mqstate::{Error, ErrorKind, ServiceError};

/// What a call did. Every function returns one (except the `_free` functions and
/// `mqstate_status_name`). The values are stable: new ones may be added, existing ones never
/// change. `MQSTATE_NOT_FOUND` and `MQSTATE_NOT_APPLIED` are outcomes, not failures; every
/// status other than `MQSTATE_OK` sets the calling thread's last error
/// (`mqstate_error_message`).
#[allow(
    non_camel_case_types,
    reason = "C names: the header shows the Rust names as they are"
)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mqstate_status {
    /// Success; the outputs were written.
    MQSTATE_OK = 0,
    /// GET: no such key. DEL / VDEL: there was no such key. `mqstate_scan_next_page`: the
    /// scan is done (its last page was returned already). Notification accessors: the
    /// notification has no such part.
    MQSTATE_NOT_FOUND = 1,
    /// SET: the NX / NEX condition failed. VDEL: the key holds another value.
    MQSTATE_NOT_APPLIED = 2,
    /// An argument the protocol cannot carry (an empty key, a malformed version, an unknown
    /// condition, a bad URL...). Nothing was sent.
    MQSTATE_INVALID_ARGUMENT = 100,
    /// A required pointer argument was NULL; the message names it.
    MQSTATE_NULL_PARAMETER = 101,
    /// The caller's buffer is too small; nothing was written; the message says how many
    /// bytes are needed.
    MQSTATE_BUFFER_TOO_SMALL = 102,
    /// The operation does not exist for this protocol (IoT Hub's reject/abandon over MQTT).
    MQSTATE_NOT_SUPPORTED = 103,
    /// No response arrived within the request timeout.
    MQSTATE_TIMEOUT = 200,
    /// The connection is down or was closed (`mqstate_client_close`).
    MQSTATE_DISCONNECTED = 201,
    /// The connection could not be configured or established (refused, TLS files...).
    MQSTATE_CONNECTION_ERROR = 202,
    /// The server refused the credentials (wrong key or token, expired token, unknown device).
    MQSTATE_AUTHENTICATION_FAILED = 203,
    /// An IoT Hub message can no longer be settled: the connection or link it arrived on
    /// closed, or the hub delivered it again after its lock timed out (it comes again).
    MQSTATE_LOCK_LOST = 204,
    /// The state store answered with an error; `mqstate_error_service_kind` says which.
    MQSTATE_SERVICE_ERROR = 300,
    /// The reply was not one of the forms the protocol allows for the request.
    MQSTATE_UNEXPECTED_PAYLOAD = 301,
    /// The clock would drift too far from the wall clock (or its counter overflowed).
    MQSTATE_CLOCK_DRIFT = 302,
    /// An observation's buffer was full and notifications were dropped (in notifications of
    /// kind `MQSTATE_NOTIFICATION_ERROR` only).
    MQSTATE_LAGGED = 303,
    /// A bug: the library panicked. The call had no effect that can be relied on.
    MQSTATE_PANIC = 900,
    /// An error of a kind this version of the C API does not know.
    MQSTATE_UNKNOWN_ERROR = 999,
}

use mqstate_status::*;

impl mqstate_status {
    /// The enumerator's name, as a static NUL-terminated string.
    pub(crate) fn name(self) -> &'static CStr {
        match self {
            MQSTATE_OK => c"MQSTATE_OK",
            MQSTATE_NOT_FOUND => c"MQSTATE_NOT_FOUND",
            MQSTATE_NOT_APPLIED => c"MQSTATE_NOT_APPLIED",
            MQSTATE_INVALID_ARGUMENT => c"MQSTATE_INVALID_ARGUMENT",
            MQSTATE_NULL_PARAMETER => c"MQSTATE_NULL_PARAMETER",
            MQSTATE_BUFFER_TOO_SMALL => c"MQSTATE_BUFFER_TOO_SMALL",
            MQSTATE_NOT_SUPPORTED => c"MQSTATE_NOT_SUPPORTED",
            MQSTATE_AUTHENTICATION_FAILED => c"MQSTATE_AUTHENTICATION_FAILED",
            MQSTATE_LOCK_LOST => c"MQSTATE_LOCK_LOST",
            MQSTATE_TIMEOUT => c"MQSTATE_TIMEOUT",
            MQSTATE_DISCONNECTED => c"MQSTATE_DISCONNECTED",
            MQSTATE_CONNECTION_ERROR => c"MQSTATE_CONNECTION_ERROR",
            MQSTATE_SERVICE_ERROR => c"MQSTATE_SERVICE_ERROR",
            MQSTATE_UNEXPECTED_PAYLOAD => c"MQSTATE_UNEXPECTED_PAYLOAD",
            MQSTATE_CLOCK_DRIFT => c"MQSTATE_CLOCK_DRIFT",
            MQSTATE_LAGGED => c"MQSTATE_LAGGED",
            MQSTATE_PANIC => c"MQSTATE_PANIC",
            MQSTATE_UNKNOWN_ERROR => c"MQSTATE_UNKNOWN_ERROR",
        }
    }
}

/// Every status, for `mqstate_status_name` and the tests.
pub(crate) fn all_statuses() -> [mqstate_status; 18] {
    [
        MQSTATE_OK,
        MQSTATE_NOT_FOUND,
        MQSTATE_NOT_APPLIED,
        MQSTATE_INVALID_ARGUMENT,
        MQSTATE_NULL_PARAMETER,
        MQSTATE_BUFFER_TOO_SMALL,
        MQSTATE_NOT_SUPPORTED,
        MQSTATE_TIMEOUT,
        MQSTATE_DISCONNECTED,
        MQSTATE_CONNECTION_ERROR,
        MQSTATE_AUTHENTICATION_FAILED,
        MQSTATE_LOCK_LOST,
        MQSTATE_SERVICE_ERROR,
        MQSTATE_UNEXPECTED_PAYLOAD,
        MQSTATE_CLOCK_DRIFT,
        MQSTATE_LAGGED,
        MQSTATE_PANIC,
        MQSTATE_UNKNOWN_ERROR,
    ]
}

/// Which error the state store reported, for `MQSTATE_SERVICE_ERROR` (the exact texts are in
/// docs/protocol.md section 3). Stable values; new ones may be added.
#[allow(
    non_camel_case_types,
    reason = "C names: the header shows the Rust names as they are"
)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mqstate_service_error {
    /// The last error was not a service error.
    MQSTATE_SERVICE_ERROR_NONE = 0,
    /// "the request timestamp is too far in the future; ..."
    MQSTATE_SERVICE_ERROR_TIMESTAMP_SKEW = 1,
    /// "a fencing token is required for this request"
    MQSTATE_SERVICE_ERROR_FENCING_TOKEN_REQUIRED = 2,
    /// "the request fencing token timestamp is too far in the future; ..."
    MQSTATE_SERVICE_ERROR_FENCING_TOKEN_SKEW = 3,
    /// "the request fencing token is a lower version than the fencing token protecting the
    /// resource"
    MQSTATE_SERVICE_ERROR_FENCING_TOKEN_LOWER_VERSION = 4,
    /// "the quota has been exceeded"
    MQSTATE_SERVICE_ERROR_QUOTA_EXCEEDED = 5,
    /// "syntax error"
    MQSTATE_SERVICE_ERROR_SYNTAX_ERROR = 6,
    /// "not authorized"
    MQSTATE_SERVICE_ERROR_NOT_AUTHORIZED = 7,
    /// "unknown command"
    MQSTATE_SERVICE_ERROR_UNKNOWN_COMMAND = 8,
    /// "wrong number of arguments"
    MQSTATE_SERVICE_ERROR_WRONG_NUMBER_OF_ARGUMENTS = 9,
    /// "missing timestamp"
    MQSTATE_SERVICE_ERROR_MISSING_TIMESTAMP = 10,
    /// "malformed timestamp"
    MQSTATE_SERVICE_ERROR_MALFORMED_TIMESTAMP = 11,
    /// "the key length is zero"
    MQSTATE_SERVICE_ERROR_KEY_LENGTH_ZERO = 12,
    /// "the request could not be persisted; the state store's disk is full or failing"
    /// (`mqstate serve --data-dir`; nothing changed)
    MQSTATE_SERVICE_ERROR_PERSISTENCE_FAILED = 13,
    /// A text this version does not know (the message holds it verbatim).
    MQSTATE_SERVICE_ERROR_UNKNOWN = 999,
}

use mqstate_service_error::*;

impl From<&ServiceError> for mqstate_service_error {
    fn from(e: &ServiceError) -> Self {
        match e {
            ServiceError::TimestampSkew => MQSTATE_SERVICE_ERROR_TIMESTAMP_SKEW,
            ServiceError::FencingTokenRequired => MQSTATE_SERVICE_ERROR_FENCING_TOKEN_REQUIRED,
            ServiceError::FencingTokenSkew => MQSTATE_SERVICE_ERROR_FENCING_TOKEN_SKEW,
            ServiceError::FencingTokenLowerVersion => {
                MQSTATE_SERVICE_ERROR_FENCING_TOKEN_LOWER_VERSION
            }
            ServiceError::QuotaExceeded => MQSTATE_SERVICE_ERROR_QUOTA_EXCEEDED,
            ServiceError::SyntaxError => MQSTATE_SERVICE_ERROR_SYNTAX_ERROR,
            ServiceError::NotAuthorized => MQSTATE_SERVICE_ERROR_NOT_AUTHORIZED,
            ServiceError::UnknownCommand => MQSTATE_SERVICE_ERROR_UNKNOWN_COMMAND,
            ServiceError::WrongNumberOfArguments => MQSTATE_SERVICE_ERROR_WRONG_NUMBER_OF_ARGUMENTS,
            ServiceError::MissingTimestamp => MQSTATE_SERVICE_ERROR_MISSING_TIMESTAMP,
            ServiceError::MalformedTimestamp => MQSTATE_SERVICE_ERROR_MALFORMED_TIMESTAMP,
            ServiceError::KeyLengthZero => MQSTATE_SERVICE_ERROR_KEY_LENGTH_ZERO,
            ServiceError::PersistenceFailed => MQSTATE_SERVICE_ERROR_PERSISTENCE_FAILED,
            _ => MQSTATE_SERVICE_ERROR_UNKNOWN,
        }
    }
}

/// The status of a library error.
pub(crate) fn status_of(e: &Error) -> mqstate_status {
    match e.kind() {
        ErrorKind::InvalidArgument => MQSTATE_INVALID_ARGUMENT,
        ErrorKind::Timeout => MQSTATE_TIMEOUT,
        ErrorKind::Disconnected => MQSTATE_DISCONNECTED,
        ErrorKind::Service => MQSTATE_SERVICE_ERROR,
        ErrorKind::UnexpectedPayload => MQSTATE_UNEXPECTED_PAYLOAD,
        ErrorKind::ClockDrift => MQSTATE_CLOCK_DRIFT,
        ErrorKind::Connection => MQSTATE_CONNECTION_ERROR,
        ErrorKind::Lagged => MQSTATE_LAGGED,
        ErrorKind::Authentication => MQSTATE_AUTHENTICATION_FAILED,
        ErrorKind::NotSupported => MQSTATE_NOT_SUPPORTED,
        ErrorKind::LockLost => MQSTATE_LOCK_LOST,
        _ => MQSTATE_UNKNOWN_ERROR,
    }
}

/// A failed (or not-OK) call: what the status and the thread's last error become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FfiError {
    pub(crate) status: mqstate_status,
    pub(crate) message: String,
    pub(crate) service: mqstate_service_error,
}

impl FfiError {
    pub(crate) fn new(status: mqstate_status, message: impl Into<String>) -> Self {
        FfiError {
            status,
            message: message.into(),
            service: MQSTATE_SERVICE_ERROR_NONE,
        }
    }

    pub(crate) fn null(parameter: &str) -> Self {
        Self::new(
            MQSTATE_NULL_PARAMETER,
            format!("null parameter: {parameter} is NULL"),
        )
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(MQSTATE_INVALID_ARGUMENT, message)
    }

    /// Makes this the calling thread's last error and returns its status.
    fn record(self) -> mqstate_status {
        let status = self.status;
        set_last_error(self);
        status
    }
}

impl From<Error> for FfiError {
    fn from(e: Error) -> Self {
        FfiError {
            status: status_of(&e),
            service: e
                .service_error()
                .map_or(MQSTATE_SERVICE_ERROR_NONE, Into::into),
            message: e.to_string(),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Option<FfiError>> = const { RefCell::new(None) };
}

/// Replaces the calling thread's last error. Never panics (a thread being torn down simply
/// keeps no error).
pub(crate) fn set_last_error(error: FfiError) {
    let _ = LAST_ERROR.try_with(|cell| {
        if let Ok(mut last) = cell.try_borrow_mut() {
            *last = Some(error);
        }
    });
}

/// Reads the calling thread's last error.
pub(crate) fn with_last_error<T>(f: impl FnOnce(Option<&FfiError>) -> T) -> T {
    match LAST_ERROR.try_with(|cell| cell.try_borrow().ok().map(|e| e.clone())) {
        Ok(Some(e)) => f(e.as_ref()),
        _ => f(None),
    }
}

/// What an exported function's body may evaluate to, and what the function then returns.
pub(crate) trait BoundaryOutput {
    type Ret;
    fn into_ret(self) -> Self::Ret;
    /// What the function returns when its body panicked.
    fn panicked() -> Self::Ret;
}

/// The usual body: `Ok(())` is `MQSTATE_OK`; an error becomes the thread's last error.
impl BoundaryOutput for Result<(), FfiError> {
    type Ret = mqstate_status;
    fn into_ret(self) -> mqstate_status {
        match self {
            Ok(()) => MQSTATE_OK,
            Err(e) => e.record(),
        }
    }
    fn panicked() -> mqstate_status {
        MQSTATE_PANIC
    }
}

/// A body that returns its status itself (the error accessors, which must not replace the
/// error they report).
impl BoundaryOutput for mqstate_status {
    type Ret = mqstate_status;
    fn into_ret(self) -> mqstate_status {
        self
    }
    fn panicked() -> mqstate_status {
        MQSTATE_PANIC
    }
}

/// `_free` functions.
impl BoundaryOutput for () {
    type Ret = ();
    fn into_ret(self) {}
    fn panicked() {}
}

/// Functions returning a static string.
impl BoundaryOutput for *const c_char {
    type Ret = *const c_char;
    fn into_ret(self) -> *const c_char {
        self
    }
    fn panicked() -> *const c_char {
        std::ptr::null()
    }
}

/// Ends the panic boundary: a panic becomes the thread's last error and the function's
/// "panicked" return value. Never panics itself.
pub(crate) fn finish<B: BoundaryOutput>(result: std::thread::Result<B>) -> B::Ret {
    match result {
        Ok(out) => out.into_ret(),
        Err(payload) => {
            set_last_error(FfiError::new(
                MQSTATE_PANIC,
                mqstate::protocol::errors::panic_report(payload.as_ref()),
            ));
            // Dropping a payload can itself panic (a payload with a panicking Drop): contain
            // that too, and forget that second payload rather than risk unwinding out.
            if let Err(again) = std::panic::catch_unwind(AssertUnwindSafe(|| drop(payload))) {
                std::mem::forget(again);
            }
            B::panicked()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The caller's pointers
// ---------------------------------------------------------------------------------------------

/// A required input: NULL is `MQSTATE_NULL_PARAMETER` naming `name`.
///
/// # Safety
/// `ptr` is NULL or valid for reads as a `T` for `'a`.
pub(crate) unsafe fn arg_ref<'a, T>(ptr: *const T, name: &str) -> Result<&'a T, FfiError> {
    // SAFETY: the caller's contract (NULL or valid).
    unsafe { ptr.as_ref() }.ok_or_else(|| FfiError::null(name))
}

/// `(ptr, len)` bytes. `allow_empty_null`: NULL is accepted when `len` is 0 (values may be
/// empty; keys may not, so they pass false and a NULL key is `MQSTATE_NULL_PARAMETER`).
///
/// # Safety
/// `ptr` is NULL or valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn arg_bytes<'a>(
    ptr: *const u8,
    len: usize,
    name: &str,
    allow_empty_null: bool,
) -> Result<&'a [u8], FfiError> {
    if ptr.is_null() {
        return if allow_empty_null && len == 0 {
            Ok(&[])
        } else {
            Err(FfiError::null(name))
        };
    }
    if len > isize::MAX as usize {
        return Err(FfiError::invalid(format!("{name}_len {len} is too large")));
    }
    // SAFETY: non-NULL, and the caller's contract says `len` bytes are readable.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A required NUL-terminated UTF-8 string.
///
/// # Safety
/// `ptr` is NULL or a valid NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn arg_str<'a>(ptr: *const c_char, name: &str) -> Result<&'a str, FfiError> {
    // SAFETY: forwarded contract.
    unsafe { arg_opt_str(ptr, name) }?.ok_or_else(|| FfiError::null(name))
}

/// An optional NUL-terminated UTF-8 string (NULL: `None`).
///
/// # Safety
/// `ptr` is NULL or a valid NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn arg_opt_str<'a>(
    ptr: *const c_char,
    name: &str,
) -> Result<Option<&'a str>, FfiError> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str()
        .map(Some)
        .map_err(|e| FfiError::invalid(format!("{name} is not valid UTF-8: {e}")))
}

/// An output pointer, checked before the call does anything and written only on success.
#[derive(Debug)]
pub(crate) struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// A required output: NULL is `MQSTATE_NULL_PARAMETER` naming `name`.
    ///
    /// # Safety
    /// `ptr` is NULL or valid for writing a `T` until [`Out::write`].
    pub(crate) unsafe fn new(ptr: *mut T, name: &str) -> Result<Self, FfiError> {
        NonNull::new(ptr)
            .map(Out)
            .ok_or_else(|| FfiError::null(name))
    }

    /// An optional output (NULL: the caller does not want it).
    ///
    /// # Safety
    /// As [`Out::new`].
    pub(crate) unsafe fn optional(ptr: *mut T) -> Option<Self> {
        NonNull::new(ptr).map(Out)
    }

    /// Writes the output (without reading or dropping what was there).
    pub(crate) fn write(self, value: T) {
        // SAFETY: checked non-NULL in `new`; writable by the caller's contract.
        unsafe { self.0.as_ptr().write(value) }
    }
}

/// Moves a value to the heap and hands it to C.
pub(crate) fn into_handle<T>(value: T) -> *mut T {
    Box::into_raw(Box::new(value))
}

/// Takes back and drops a handle made by [`into_handle`]; NULL is a no-op.
///
/// # Safety
/// `ptr` is NULL or came from [`into_handle`] and was not freed yet.
pub(crate) unsafe fn free_handle<T>(ptr: *mut T) {
    if !ptr.is_null() {
        // SAFETY: the caller's contract.
        drop(unsafe { Box::from_raw(ptr) });
    }
}
