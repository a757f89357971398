//! The fuzz targets of `core/fuzz` on stable Rust: the same checks (`core/fuzz/checks.rs`),
//! driven by proptest for a fixed number of inputs per target, so that a decoder that panics
//! on some input fails the test command without nightly or cargo-fuzz. Inputs mix random
//! bytes with valid RESP3 frames that are truncated, extended or have a byte flipped (random
//! bytes alone rarely get past the first type byte).

#![allow(dead_code)]

#[path = "../../fuzz/checks.rs"]
mod checks;

use proptest::prelude::*;

/// How many inputs each target gets per run of the test suite.
const CASES: u32 = 20_000;

/// Valid frames of every shape the decoders know, as seeds for mutation.
const SEEDS: &[&[u8]] = &[
    b"+OK\r\n",
    b"-ERR syntax error\r\n",
    b":1\r\n",
    b":-1\r\n",
    b"$-1\r\n",
    b"$5\r\nhello\r\n",
    b"$0\r\n\r\n",
    b"*3\r\n$3\r\nSET\r\n$7\r\nSETKEY2\r\n$6\r\nVALUE5\r\n",
    b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
    b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n",
    b"*3\r\n$4\r\nVDEL\r\n$1\r\nk\r\n$1\r\nv\r\n",
    b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$3\r\nNEX\r\n$2\r\nPX\r\n",
    b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n$4\r\n1000\r\n$2\r\nNX\r\n",
    b"*3\r\n$9\r\nKEYNOTIFY\r\n$1\r\nk\r\n$4\r\nSTOP\r\n",
    b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n",
    b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\nabc\r\n",
];

fn input() -> impl Strategy<Value = Vec<u8>> {
    let seed = prop::sample::select(SEEDS);
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        // A seed with one byte replaced.
        (seed.clone(), any::<prop::sample::Index>(), any::<u8>()).prop_map(|(s, i, b)| {
            let mut v = s.to_vec();
            let at = i.index(v.len());
            v[at] = b;
            v
        }),
        // A seed cut short.
        (seed.clone(), any::<prop::sample::Index>())
            .prop_map(|(s, i)| s[..i.index(s.len())].to_vec()),
        // A seed with random bytes after it, or a length field changed.
        (seed.clone(), prop::collection::vec(any::<u8>(), 0..16)).prop_map(|(s, tail)| {
            let mut v = s.to_vec();
            v.extend(tail);
            v
        }),
        (seed, any::<u32>()).prop_map(|(s, n)| {
            let text = String::from_utf8_lossy(s).into_owned();
            text.replacen(|c: char| c.is_ascii_digit(), &n.to_string(), 1)
                .into_bytes()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_decode_reply(data in input()) {
        checks::decode_reply(&data);
    }

    #[test]
    fn fuzz_decode_request(data in input()) {
        checks::decode_request(&data);
    }

    #[test]
    fn fuzz_decode_notification(data in input()) {
        checks::decode_notification(&data);
    }
}
