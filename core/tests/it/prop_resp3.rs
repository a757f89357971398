//! Property tests: whatever the key and value bytes, encoding then decoding is the identity,
//! and no input makes a decoder panic.

use bytes::{Bytes, BytesMut};
use mqstate::protocol::resp3::{self, NotifyOperation, Reply, Request, SetCondition};
use proptest::prelude::*;

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 1..64)
}

/// Values, biased towards the interesting ones: empty, containing CRLF, and 64 KiB.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        Just(b"\r\n".to_vec()),
        prop::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), any::<u8>()], 0..256),
        (any::<u8>(), Just(64 * 1024)).prop_map(|(b, n)| vec![b; n]),
    ]
}

fn condition() -> impl Strategy<Value = SetCondition> {
    prop_oneof![
        Just(SetCondition::Always),
        Just(SetCondition::NotExists),
        Just(SetCondition::NotExistsOrEqual),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (key(), value(), condition(), prop::option::of(1..=u64::MAX)).prop_map(
            |(k, v, condition, expiry_ms)| Request::Set {
                key: k.into(),
                value: v.into(),
                condition,
                expiry_ms,
            }
        ),
        key().prop_map(|k| Request::Get { key: k.into() }),
        key().prop_map(|k| Request::Del { key: k.into() }),
        (key(), value()).prop_map(|(k, v)| Request::Vdel {
            key: k.into(),
            value: v.into()
        }),
        (key(), any::<bool>()).prop_map(|(k, stop)| Request::KeyNotify {
            key: k.into(),
            stop
        }),
    ]
}

proptest! {
    #![proptest_config(crate::common::proptest_config(256))]

    #[test]
    fn request_encode_decode_is_identity(request in request()) {
        let mut buf = BytesMut::new();
        request.encode(&mut buf);
        prop_assert_eq!(resp3::decode_request(&buf.freeze()).unwrap(), request);
    }

    #[test]
    fn bulk_reply_round_trips(v in value()) {
        let mut buf = BytesMut::new();
        Reply::Bulk(Bytes::from(v.clone())).encode(&mut buf);
        let got = resp3::decode_get_reply(&buf.freeze()).unwrap().unwrap();
        prop_assert_eq!(&got[..], &v[..]);
    }

    #[test]
    fn integer_reply_round_trips(n in any::<i64>()) {
        let mut buf = BytesMut::new();
        Reply::Integer(n).encode(&mut buf);
        prop_assert_eq!(resp3::decode_reply(&buf.freeze()).unwrap(), Reply::Integer(n));
    }

    #[test]
    fn notify_set_round_trips(v in value()) {
        let mut buf = BytesMut::new();
        resp3::encode_notify_set(&mut buf, &v);
        let op = resp3::decode_notification(&buf.freeze()).unwrap();
        prop_assert_eq!(op, NotifyOperation::Set(Bytes::from(v)));
    }

    /// Arbitrary bytes, and valid payloads cut short or extended: never a panic, and a
    /// successful decode never returns more bytes than it was given.
    #[test]
    fn decoders_never_panic(data in prop::collection::vec(any::<u8>(), 0..128), request in request(), cut in any::<prop::sample::Index>()) {
        let mut buf = BytesMut::new();
        request.encode(&mut buf);
        let whole = buf.freeze();
        let truncated = whole.slice(..cut.index(whole.len()));
        for payload in [Bytes::from(data), truncated] {
            let _ = resp3::decode_request(&payload);
            let _ = resp3::decode_notification(&payload);
            if let Ok(Some(v)) = resp3::decode_get_reply(&payload) {
                prop_assert!(v.len() <= payload.len());
            }
            let _ = resp3::decode_set_reply(&payload);
            let _ = resp3::decode_del_reply(&payload);
            let _ = resp3::decode_keynotify_reply(&payload, true);
        }
    }
}
