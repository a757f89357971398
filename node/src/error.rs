//! The one place where library errors become JavaScript `Error` objects.
//!
//! `code` is `ERR_` + the core's stable [`ErrorKind::as_str`] in upper case (`ERR_TIMEOUT`,
//! `ERR_SERVICE`, ...), so a new kind in the core gets its JS code with no change here. A
//! service error also carries `serviceKind` (the core's [`ServiceError::kind_str`]:
//! `quota_exceeded`, `fencing_token_required`, ..., `unknown`) and `serviceText` (the server's
//! text, verbatim). A lagged observation's error (`ERR_LAGGED`) carries `missed`, the number
//! of notifications dropped (the core's [`Error::missed`]). A cancelled call is an `AbortError` with code `ABORT_ERR`, as in Node's
//! own APIs.

use mqstate::{Error, ErrorKind};
use napi::bindgen_prelude::Object;
use napi::{Env, JsValue, Status};

/// The JavaScript `code` of an error kind.
pub(crate) fn error_code(kind: ErrorKind) -> String {
    format!("ERR_{}", kind.as_str().to_ascii_uppercase())
}

/// The code of a call cancelled through its `AbortSignal`.
pub(crate) const ABORT_CODE: &str = "ABORT_ERR";

/// Builds the JS error for `error`, with `extra` string properties, as a `napi::Error` that
/// rejects a promise (or throws) with exactly that object.
pub(crate) fn js_error(env: &Env, error: &Error, extra: &[(&str, &str)]) -> napi::Error {
    let mut props: Vec<(&str, &str)> = Vec::with_capacity(2 + extra.len());
    let service = error.service_error();
    if let Some(service) = service {
        props.push(("serviceKind", service.kind_str()));
        props.push(("serviceText", service.text()));
    }
    props.extend_from_slice(extra);
    build(
        env,
        &error_code(error.kind()),
        None,
        &error.to_string(),
        &props,
        error.missed(),
    )
}

/// The error of a call cancelled by its `AbortSignal`.
pub(crate) fn abort_error(env: &Env) -> napi::Error {
    build(
        env,
        ABORT_CODE,
        Some("AbortError"),
        "The operation was aborted",
        &[],
        None,
    )
}

/// An `ERR_INVALID_ARGUMENT` error with `message` (for the wrapper's own argument checks, so
/// that every error is built here).
#[napi_derive::napi(ts_return_type = "Error")]
pub fn invalid_argument_error(env: &Env, message: String) -> Object<'_> {
    let error = js_error(env, &Error::InvalidArgument(message), &[]);
    match env.create_error(error) {
        Ok(object) => object,
        // Unreachable in practice (only while the environment is torn down).
        Err(_) => Object::from_raw(env.raw(), std::ptr::null_mut()),
    }
}

fn build(
    env: &Env,
    code: &str,
    name: Option<&str>,
    message: &str,
    props: &[(&str, &str)],
    missed: Option<u64>,
) -> napi::Error {
    let made = (|| -> napi::Result<Object<'_>> {
        let mut object = env.create_error(napi::Error::new(Status::GenericFailure, message))?;
        object.set("code", code)?;
        if let Some(name) = name {
            object.set("name", name)?;
        }
        for (key, value) in props {
            object.set(key, *value)?;
        }
        if let Some(missed) = missed {
            // A JS number: exact up to 2^53, far beyond any count of dropped notifications.
            object.set("missed", missed as f64)?;
        }
        Ok(object)
    })();
    match made {
        Ok(object) => napi::Error::from(object.to_unknown()),
        // Only when the environment is going away: a plain error still says what happened.
        Err(_) => napi::Error::new(Status::GenericFailure, format!("{code}: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_derived_from_the_core_kinds() {
        assert_eq!(error_code(ErrorKind::Timeout), "ERR_TIMEOUT");
        assert_eq!(error_code(ErrorKind::Service), "ERR_SERVICE");
        assert_eq!(
            error_code(ErrorKind::InvalidArgument),
            "ERR_INVALID_ARGUMENT"
        );
        assert_eq!(
            error_code(ErrorKind::UnexpectedPayload),
            "ERR_UNEXPECTED_PAYLOAD"
        );
    }
}
