//! The body of every refusal of the web surfaces' checks (the guard's and the credential
//! check's): a JSON object with an `errorCode` and a `message`, as the IoT Hub admin API
//! answers its own errors. A leaf, so that `guard` and `auth` both use it without depending
//! on each other both ways.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// The JSON error every web surface answers with: `{"errorCode": code, "message": message}`.
pub(crate) fn refuse(status: StatusCode, code: &str, message: String) -> Response {
    let body = serde_json::json!({ "errorCode": code, "message": message });
    (status, axum::Json(body)).into_response()
}
