#![no_main]
//! The server's request decoder on arbitrary bytes; what decodes must re-encode and decode
//! to the same request.

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use mqstate::resp3;

fuzz_target!(|data: &[u8]| {
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
});
