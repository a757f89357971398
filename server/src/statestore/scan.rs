//! `SCAN pattern [token]` on the local server (docs/protocol.md, "Listing keys: SCAN"): the
//! continuation token, and one page from the [`Store`].
//!
//! The store keeps its keys in byte order, so a scan is a walk in that order and a token is
//! a position in it: the last key the previous page examined. A page then starts right after
//! that key, whatever was written or deleted since, which gives the guarantees the docs
//! promise: every key that exists for the whole scan is returned exactly once, a key created
//! or deleted during the scan may or may not be, and a page costs what it examines, not
//! where it is. A position needs no server state, so a token stays good across a restart
//! (with `--data-dir` the scan goes on over the restored keys).
//!
//! The token is untrusted input. Its layout: a format byte (`1`), an 8-byte check (the first
//! bytes of SHA-256 over the pattern and the position), then the position. A token that
//! was changed, cut short, made up, or taken from a scan of another pattern fails the check
//! and is answered `-ERR` with a text that says so; it never selects a page. The check is
//! not a secret: a position is not a capability (any client may scan from anywhere by
//! choosing its pattern), so the token only has to be recognisably ours and intact.

use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use mqstate::ServiceError;
use mqstate::protocol::glob::Pattern;
use mqstate::protocol::resp3::ScanPage;

use crate::statestore::store::{ScanLimits, Store};

/// The first byte of every token this server writes (its layout's version).
const FORMAT: u8 = 1;
/// The length of the check that follows it.
const CHECK_LEN: usize = 8;

/// Answers one `SCAN`: the page after `token` (from the start without one), or the error to
/// answer with (a malformed pattern, a token that is not one of ours for this pattern).
pub(crate) fn page(
    store: &Store,
    pattern: &[u8],
    token: Option<&[u8]>,
    limits: ScanLimits,
    now: Instant,
) -> Result<ScanPage, ServiceError> {
    let parsed = Pattern::parse(pattern).map_err(|e| ServiceError::Unknown(e.to_string()))?;
    let after = token.map(|t| position(pattern, t)).transpose()?;
    let step = store.scan(&parsed, after, limits, now);
    let page = ScanPage {
        keys: step.keys,
        token: step.resume_after.map(|key| encode_token(pattern, &key)),
    };
    if page.encoded_len() > limits.max_reply {
        // Only a key near the packet size can do this (see `limits_for_packet`): an error
        // that says so beats a reply the broker would drop, leaving the client to time out.
        let longest = page.keys.iter().map(Bytes::len).max().unwrap_or(0);
        return Err(ServiceError::Unknown(format!(
            "the scan reached a key of {longest} bytes, too long to be listed within the maximum packet size"
        )));
    }
    Ok(page)
}

/// Room left in a packet for the reply's topic and properties.
const REPLY_HEADROOM: usize = 4096;

/// The bytes a page's reply adds around its keys and token, at most (array headers, and a
/// bulk header per key or token): what [`limits_for_packet`] keeps free.
const OVERHEAD_PER_ELEMENT: usize = 16;

/// Page limits that keep every reply within `max_packet_size` bytes of payload, with room
/// for the MQTT header and properties of the response: the defaults, with the key bytes
/// capped at a quarter of the packet. The token repeats the page's last key, so a page is at
/// most its key bytes, one more key (the last may pass the budget when a page holds only
/// it) and the token. A key longer than about a third of the maximum packet size therefore
/// cannot be listed (docs/protocol.md says so); the broker refuses such a SET anyway when it
/// arrives as one packet with its value.
pub(crate) fn limits_for_packet(max_packet_size: usize) -> ScanLimits {
    let defaults = ScanLimits::default();
    let budget = max_packet_size / 4;
    ScanLimits {
        max_bytes: defaults
            .max_bytes
            .min(budget.saturating_sub(defaults.max_keys * OVERHEAD_PER_ELEMENT))
            .max(1),
        max_reply: max_packet_size.saturating_sub(REPLY_HEADROOM),
        ..defaults
    }
}

/// The token for a scan of `pattern` that goes on after `key`.
fn encode_token(pattern: &[u8], key: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(1 + CHECK_LEN + key.len());
    buf.put_u8(FORMAT);
    buf.put_slice(&check(pattern, key));
    buf.put_slice(key);
    buf.freeze()
}

/// The position a token names, if it is intact and was given for this pattern.
fn position<'t>(pattern: &[u8], token: &'t [u8]) -> Result<&'t [u8], ServiceError> {
    let invalid = |why: &str| {
        ServiceError::Unknown(format!(
            "the scan continuation token is not valid ({why}); start the scan again without one"
        ))
    };
    let Some((&format, rest)) = token.split_first() else {
        return Err(invalid("it is empty"));
    };
    if format != FORMAT {
        return Err(invalid("it is not a token this server wrote"));
    }
    let (Some(given), Some(key)) = (rest.get(..CHECK_LEN), rest.get(CHECK_LEN..)) else {
        return Err(invalid("it is too short"));
    };
    if given != check(pattern, key) {
        return Err(invalid(
            "it was changed or cut short, or it belongs to a scan of another pattern",
        ));
    }
    Ok(key)
}

fn check(pattern: &[u8], key: &[u8]) -> [u8; CHECK_LEN] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"mqstate scan token v1\0");
    ctx.update(&(pattern.len() as u64).to_be_bytes());
    ctx.update(pattern);
    ctx.update(key);
    let digest = ctx.finish();
    let mut out = [0u8; CHECK_LEN];
    for (o, d) in out.iter_mut().zip(digest.as_ref()) {
        *o = *d;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statestore::store::SetArgs;
    use mqstate::Hlc;
    use std::collections::BTreeSet;
    use std::time::Duration;

    fn store_with(keys: impl IntoIterator<Item = Vec<u8>>, now: Instant) -> Store {
        let mut store = Store::new(None);
        for key in keys {
            let args = SetArgs::new(Bytes::from(key), Bytes::from_static(b"v"));
            store.set(args, Hlc::new(1, 0, "StateStore"), now).unwrap();
        }
        store
    }

    /// Every key of a whole scan, checking that no page is over its limits.
    fn scan_all(store: &Store, pattern: &[u8], limits: ScanLimits, now: Instant) -> Vec<Bytes> {
        let (mut keys, mut token) = (Vec::new(), None::<Bytes>);
        for _ in 0..100_000 {
            let page = page(store, pattern, token.as_deref(), limits, now).unwrap();
            assert!(page.keys.len() <= limits.max_keys);
            keys.extend(page.keys);
            match page.token {
                Some(t) => token = Some(t),
                None => return keys,
            }
        }
        panic!("the scan did not end");
    }

    #[test]
    fn three_thousand_keys_are_listed_exactly_once_across_pages() {
        let now = Instant::now();
        let store = store_with((0..3000).map(|i| format!("k/{i}").into_bytes()), now);
        let limits = ScanLimits {
            max_keys: 7,
            ..ScanLimits::default()
        };
        let keys = scan_all(&store, b"k/*", limits, now);
        assert_eq!(keys.len(), 3000);
        assert_eq!(keys.iter().collect::<BTreeSet<_>>().len(), 3000);
    }

    #[test]
    fn a_page_costs_what_it_examines_and_sparse_matches_give_short_pages() {
        let now = Instant::now();
        let store = store_with((0..1000).map(|i| format!("{i:04}").into_bytes()), now);
        let limits = ScanLimits {
            max_examined: 10,
            ..ScanLimits::default()
        };
        // "*7" matches 100 keys spread over 1000: at most 10 examined per page, so at
        // least 100 pages, some of them empty but still with a token.
        let first = page(&store, b"*7", None, limits, now).unwrap();
        assert_eq!(first.keys, vec![Bytes::from("0007")]);
        assert!(first.token.is_some());
        assert_eq!(scan_all(&store, b"*7", limits, now).len(), 100);
    }

    #[test]
    fn byte_budget_bounds_a_page_but_a_long_key_still_comes_alone() {
        let now = Instant::now();
        let long = |c: u8| vec![c; 64 * 1024];
        let store = store_with([long(b'a'), long(b'b'), long(b'c')], now);
        let limits = limits_for_packet(256 * 1024);
        let first = page(&store, b"*", None, limits, now).unwrap();
        assert_eq!(first.keys.len(), 1, "one 64 KiB key fills a 64 KiB budget");
        assert!(
            first.encoded_len() <= 256 * 1024,
            "the reply fits the packet"
        );
        assert_eq!(scan_all(&store, b"*", limits, now).len(), 3);
    }

    #[test]
    fn binary_keys_and_escaped_metacharacters() {
        let now = Instant::now();
        let keys: Vec<Vec<u8>> = vec![
            b"\xff\x00*[x]".to_vec(),
            b"\xff\x00abc".to_vec(),
            b"\xfe".to_vec(),
        ];
        let store = store_with(keys, now);
        let all = scan_all(&store, b"\xff*", ScanLimits::default(), now);
        assert_eq!(all.len(), 2);
        let literal = scan_all(&store, b"\xff\x00\\*\\[x]", ScanLimits::default(), now);
        assert_eq!(literal, vec![Bytes::from_static(b"\xff\x00*[x]")]);
    }

    #[test]
    fn expired_keys_are_not_listed() {
        let now = Instant::now();
        let mut store = store_with([b"live".to_vec()], now);
        let args = SetArgs::new(Bytes::from("gone"), Bytes::from("v"))
            .expiry(Some(Duration::from_millis(5)));
        store.set(args, Hlc::new(1, 0, "n"), now).unwrap();
        let later = now + Duration::from_millis(5);
        assert_eq!(
            scan_all(&store, b"*", ScanLimits::default(), later),
            vec![Bytes::from("live")]
        );
    }

    #[test]
    fn keys_written_and_deleted_between_pages() {
        let now = Instant::now();
        let mut store = store_with((0..100).map(|i| format!("k{i:03}").into_bytes()), now);
        let limits = ScanLimits {
            max_keys: 10,
            ..ScanLimits::default()
        };
        let first = page(&store, b"k*", None, limits, now).unwrap();
        let mut seen: Vec<Bytes> = first.keys.clone();
        // Delete keys on both sides of the position, and add some on both sides.
        for i in [0, 5, 50, 99] {
            store.del(format!("k{i:03}").as_bytes(), None).unwrap();
        }
        for key in ["k000a", "k055a", "k999"] {
            let args = SetArgs::new(Bytes::from(key), Bytes::from("v"));
            store.set(args, Hlc::new(2, 0, "n"), now).unwrap();
        }
        let mut token = first.token;
        while let Some(t) = token {
            let next = page(&store, b"k*", Some(&t), limits, now).unwrap();
            seen.extend(next.keys);
            token = next.token;
        }
        let unique: BTreeSet<_> = seen.iter().collect();
        assert_eq!(unique.len(), seen.len(), "no key twice");
        for i in (0..100).filter(|i| ![0, 5, 50, 99].contains(i)) {
            let key = Bytes::from(format!("k{i:03}"));
            assert!(unique.contains(&key), "{key:?} existed throughout");
        }
        assert!(!unique.contains(&Bytes::from("k050")), "deleted ahead");
        assert!(unique.contains(&Bytes::from("k055a")), "created ahead");
        assert!(!unique.contains(&Bytes::from("k000a")), "created behind");
    }

    #[test]
    fn forged_truncated_and_foreign_tokens_are_refused() {
        let now = Instant::now();
        let store = store_with((0..20).map(|i| format!("k{i:02}").into_bytes()), now);
        let limits = ScanLimits {
            max_keys: 5,
            ..ScanLimits::default()
        };
        let token = page(&store, b"k*", None, limits, now)
            .unwrap()
            .token
            .unwrap();
        let refused = |pattern: &[u8], token: &[u8]| {
            let err = page(&store, pattern, Some(token), limits, now).unwrap_err();
            let text = err.text().to_owned();
            assert!(
                text.starts_with("the scan continuation token is not valid"),
                "{text}"
            );
            text
        };
        assert!(refused(b"k*", b"").contains("empty"));
        assert!(refused(b"k*", b"garbage").contains("not a token this server wrote"));
        assert!(refused(b"k*", &token[..5]).contains("too short"));
        assert!(refused(b"k*", &token[..token.len() - 1]).contains("changed or cut short"));
        let mut flipped = token.to_vec();
        if let Some(last) = flipped.last_mut() {
            *last ^= 1;
        }
        refused(b"k*", &flipped);
        assert!(refused(b"x*", &token).contains("another pattern"));
        // Random bytes never panic and never select a page.
        let mut seed = 7u64;
        for len in 0..200 {
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (seed >> 33) as u8
                })
                .collect();
            assert!(page(&store, b"k*", Some(&junk), limits, now).is_err());
        }
    }

    #[test]
    fn a_key_too_long_for_the_packet_is_a_clear_error_not_a_dropped_reply() {
        let now = Instant::now();
        let long = vec![b'm'; 70 * 1024];
        let store = store_with([b"a".to_vec(), long, b"z".to_vec()], now);
        // 128 KiB packets: the 70 KiB key fits a SET, but its page, whose token repeats it
        // because "z" follows, would not fit a reply.
        let limits = limits_for_packet(128 * 1024);
        let first = page(&store, b"*", None, limits, now).unwrap();
        assert_eq!(first.keys, vec![Bytes::from("a")]);
        let err = page(&store, b"*", first.token.as_deref(), limits, now).unwrap_err();
        assert!(
            err.text().contains("71680 bytes, too long"),
            "{}",
            err.text()
        );
        // Within larger packets, every key is listed.
        let limits = limits_for_packet(1 << 20);
        assert_eq!(scan_all(&store, b"*", limits, now).len(), 3);
    }

    #[test]
    fn malformed_patterns_are_errors() {
        let now = Instant::now();
        let store = store_with([b"k".to_vec()], now);
        let err = page(&store, b"k[", None, ScanLimits::default(), now).unwrap_err();
        assert!(err.text().contains("no closing ']'"), "{}", err.text());
    }

    /// The example that was in this module's documentation.
    #[test]
    fn pages_follow_their_tokens() {
        use crate::statestore::scan;
        use crate::statestore::store::{ScanLimits, SetArgs, Store};
        use bytes::Bytes;
        use mqstate::Hlc;
        use mqstate::protocol::resp3::ScanPage;
        use std::time::Instant;

        let (mut store, now) = (Store::new(None), Instant::now());
        for key in ["k1", "k2", "other"] {
            let args = SetArgs::new(Bytes::from(key), Bytes::from_static(b"v"));
            store.set(args, Hlc::new(1, 0, "StateStore"), now).unwrap();
        }
        let limits = ScanLimits {
            max_keys: 1,
            ..ScanLimits::default()
        };
        let first: ScanPage = scan::page(&store, b"k*", None, limits, now).unwrap();
        assert_eq!(first.keys, vec![Bytes::from("k1")]);
        let second = scan::page(&store, b"k*", first.token.as_deref(), limits, now).unwrap();
        assert_eq!((second.keys, second.token), (vec![Bytes::from("k2")], None));
        assert!(scan::page(&store, b"k*", Some(b"forged"), limits, now).is_err());
    }
}
