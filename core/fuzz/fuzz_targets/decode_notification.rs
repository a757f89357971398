#![no_main]
//! The notification decoder on arbitrary bytes.

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use mqstate::resp3::{self, NotifyOperation};

fuzz_target!(|data: &[u8]| {
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
});
