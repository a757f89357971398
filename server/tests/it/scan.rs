//! `SCAN` on the local server over raw MQTT5 (docs/protocol.md section 8): exact reply bytes,
//! pages bounded by bytes with 64 KiB keys, expired keys absent, continuation tokens treated
//! as untrusted input, and a scan that goes on across a restart on the same data dir. The
//! client-side API is tested by every language's suite and by the shared scenarios.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{Harness, RawClient, resp};
use bytes::Bytes;
use mqstate::protocol::resp3::{ScanPage, decode_scan_reply};
use mqstate_server::persist::PersistMode;
use mqstate_server::{LocalServer, ServerConfig};

/// One SCAN over the raw client: the decoded page (the reply must carry no `__ts`).
async fn scan(c: &mut RawClient, pattern: &[u8], token: Option<&[u8]>) -> ScanPage {
    let payload = match token {
        Some(t) => resp(&[b"SCAN", pattern, t]),
        None => resp(&[b"SCAN", pattern]),
    };
    let reply = c.call(payload).await;
    assert_eq!(reply.prop("__stat"), Some("200"));
    assert_eq!(reply.prop("__ts"), None, "a SCAN reply carries no __ts");
    decode_scan_reply(&reply.payload).unwrap_or_else(|e| panic!("{e}"))
}

/// The `-ERR` text of a SCAN that must be refused.
async fn refused(c: &mut RawClient, parts: &[&[u8]]) -> String {
    let reply = c.call(resp(parts)).await;
    let text = String::from_utf8_lossy(&reply.payload).into_owned();
    assert!(
        text.starts_with("-ERR ") && text.ends_with("\r\n"),
        "{text}"
    );
    text
}

/// Every page of a scan; the keys and the tokens seen.
async fn scan_all(c: &mut RawClient, pattern: &[u8]) -> (Vec<Bytes>, Vec<Bytes>) {
    let (mut keys, mut tokens) = (Vec::new(), Vec::new());
    let mut token: Option<Bytes> = None;
    loop {
        let page = scan(c, pattern, token.as_deref()).await;
        keys.extend(page.keys);
        match page.token {
            Some(t) => {
                tokens.push(t.clone());
                token = Some(t);
            }
            None => return (keys, tokens),
        }
    }
}

async fn set(c: &mut RawClient, key: &[u8], value: &[u8]) {
    let reply = c.call(resp(&[b"SET", key, value])).await;
    assert_eq!(&reply.payload[..], b"+OK\r\n");
}

async fn exact_replies_tokens_and_errors(h: &Harness) {
    let mut c = h.client("scan-client").await;
    set(&mut c, b"scan/a", b"1").await;
    set(&mut c, b"scan/b", b"2").await;
    set(&mut c, b"other", b"3").await;
    let reply = c.call(resp(&[b"SCAN", b"scan/*"])).await;
    reply.check(b"*1\r\n*2\r\n$6\r\nscan/a\r\n$6\r\nscan/b\r\n", false);
    let reply = c.call(resp(&[b"scan", b"nothing*"])).await;
    reply.check(b"*1\r\n*0\r\n", false);

    // An expired key is gone at once, even before the expiry timer runs.
    let reply = c.call(resp(&[b"SET", b"scan/c", b"v", b"PX", b"1"])).await;
    assert_eq!(&reply.payload[..], b"+OK\r\n");
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(scan(&mut c, b"scan/*", None).await.keys.len(), 2);

    // 64 KiB keys: a page is bounded by bytes (256 KiB of keys), so five keys take two pages,
    // and the reply, which repeats the last key in its token, fits the packet.
    let long: Vec<Vec<u8>> = (0..5u8)
        .map(|i| {
            let mut k = b"long/".to_vec();
            k.extend(std::iter::repeat_n(b'a' + i, 64 * 1024));
            k
        })
        .collect();
    for k in &long {
        set(&mut c, k, b"v").await;
    }
    let (keys, tokens) = scan_all(&mut c, b"long/*").await;
    assert_eq!(keys.len(), 5);
    assert_eq!(keys.iter().collect::<BTreeSet<_>>().len(), 5);
    assert!(!tokens.is_empty(), "more than one page");

    // Tokens are untrusted: each of these is a clear -ERR, never a page.
    let token = tokens[0].clone();
    let invalid = "-ERR the scan continuation token is not valid";
    for (why, bad) in [
        ("empty", Bytes::new()),
        (
            "not a token this server wrote",
            Bytes::from_static(b"forged"),
        ),
        ("too short", token.slice(..4)),
        ("changed or cut short", token.slice(..token.len() - 1)),
    ] {
        let text = refused(&mut c, &[b"SCAN", b"long/*", &bad]).await;
        assert!(
            text.starts_with(invalid) && text.contains(why),
            "{why}: {text}"
        );
    }
    let text = refused(&mut c, &[b"SCAN", b"long*", &token]).await;
    assert!(text.contains("another pattern"), "{text}");

    // The pattern and the arity.
    assert_eq!(
        refused(&mut c, &[b"SCAN", b"scan/["]).await,
        "-ERR the scan pattern \"scan/[\" has a '[' at byte 5 with no closing ']'\r\n"
    );
    assert_eq!(
        refused(&mut c, &[b"SCAN", b""]).await,
        "-ERR the scan pattern is empty\r\n"
    );
    assert_eq!(
        refused(&mut c, &[b"SCAN"]).await,
        "-ERR wrong number of arguments\r\n"
    );
    c.disconnect().await;
}
both_backends!(exact_replies_tokens_and_errors);

/// A token is a position in the ordered keys: a scan started before a restart goes on after
/// it over the keys restored from the data dir, and lists each key exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_goes_on_across_a_restart_on_the_same_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let config = || ServerConfig::default().with_data_dir(dir.path(), PersistMode::All);
    let server = LocalServer::start_with(config()).await.unwrap();
    let mut c = RawClient::connect(server.host(), server.port(), "restart-scanner").await;
    for i in 0..1200 {
        set(&mut c, format!("r/{i:04}").as_bytes(), b"v").await;
    }
    let first = scan(&mut c, b"r/*", None).await;
    assert!(!first.keys.is_empty());
    let token = first.token.expect("1,200 keys take more than one page");
    c.disconnect().await;
    server.shutdown().await;

    let server = LocalServer::start_with(config()).await.unwrap();
    let mut c = RawClient::connect(server.host(), server.port(), "restart-scanner").await;
    let mut keys = first.keys;
    let mut token = Some(token);
    while let Some(t) = token {
        let page = scan(&mut c, b"r/*", Some(&t)).await;
        keys.extend(page.keys);
        token = page.token;
    }
    let expected: Vec<Bytes> = (0..1200)
        .map(|i| Bytes::from(format!("r/{i:04}")))
        .collect();
    keys.sort();
    assert_eq!(keys, expected, "every key once across the restart");
    c.disconnect().await;
    server.shutdown().await;
}
