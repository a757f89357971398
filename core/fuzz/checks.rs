//! The checks of the fuzz targets, shared by `cargo fuzz` (nightly, `fuzz_targets/`) and by
//! the stable test suite (`core/tests/it/fuzz_decoders.rs`, a proptest-driven run of the same
//! checks for a fixed number of inputs), so that both exercise exactly the same code.
//! Each function panics (the finding) if a decoder misbehaves on `data`.

use bytes::{Bytes, BytesMut};
use mqstate::protocol::resp3::{self, NotifyOperation};

/// Every per-command reply decoder on arbitrary bytes: no panic, no read past the input.
pub fn decode_reply(data: &[u8]) {
    let payload = Bytes::copy_from_slice(data);
    if let Ok(resp3::Reply::Bulk(v)) = resp3::decode_reply(&payload) {
        assert!(v.len() <= payload.len());
    }
    let _ = resp3::decode_set_reply(&payload);
    let _ = resp3::decode_get_reply(&payload);
    let _ = resp3::decode_del_reply(&payload);
    let _ = resp3::decode_keynotify_reply(&payload, false);
    if let Err(e) = resp3::decode_keynotify_reply(&payload, true) {
        // Formatting the error escapes the payload: it must not panic either.
        let _ = e.to_string();
    }
}

/// The server's request decoder; what decodes must re-encode and decode to the same request.
pub fn decode_request(data: &[u8]) {
    let payload = Bytes::copy_from_slice(data);
    match resp3::decode_request(&payload) {
        Ok(request) => {
            let mut buf = BytesMut::new();
            request.encode(&mut buf);
            assert_eq!(resp3::decode_request(&buf.freeze()).ok(), Some(request));
        }
        Err(e) => {
            let _ = e.to_string();
            let _ = e.service_error();
        }
    }
}

/// The notification decoder; a decoded SET re-encodes to the same notification.
pub fn decode_notification(data: &[u8]) {
    let payload = Bytes::copy_from_slice(data);
    match resp3::decode_notification(&payload) {
        Ok(NotifyOperation::Set(value)) => {
            let mut buf = BytesMut::new();
            resp3::encode_notify_set(&mut buf, &value);
            assert_eq!(
                resp3::decode_notification(&buf.freeze()).ok(),
                Some(NotifyOperation::Set(value))
            );
        }
        Ok(NotifyOperation::Delete) => {}
        Err(e) => {
            let _ = e.to_string();
        }
    }
}
