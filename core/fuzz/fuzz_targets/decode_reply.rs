#![no_main]
//! Every per-command reply decoder on arbitrary bytes: no panic, no read past the input.

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mqstate::resp3;

fuzz_target!(|data: &[u8]| {
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
});
