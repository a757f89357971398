//! What the client puts in its CONNECT, checked against a minimal fake MQTT5 broker that
//! records the packets: clean start off with a session expiry, the SAT token as enhanced
//! authentication (`K8S-SAT`), the password from its file, both re-read on reconnect, and
//! the response and notification subscriptions.

use std::time::Duration;

use mqstate::{Client, ConnectOptions, ConnectionState, ReconnectPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// One MQTT packet: (first byte, body).
async fn read_packet(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let first = s.read_u8().await.ok()?;
    let mut len: usize = 0;
    let mut shift = 0;
    loop {
        let b = s.read_u8().await.ok()?;
        len |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 21 {
            return None;
        }
    }
    let mut body = vec![0; len];
    s.read_exact(&mut body).await.ok()?;
    Some((first, body))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn next(seen: &mut mpsc::UnboundedReceiver<(u8, Vec<u8>)>) -> (u8, Vec<u8>) {
    tokio::time::timeout(Duration::from_secs(20), seen.recv())
        .await
        .expect("no packet within 20 s")
        .expect("fake broker gone")
}

/// Serves one connection: CONNACK (no session), SUBACK, PINGRESP; reports CONNECT and
/// SUBSCRIBE bodies; returns when told to drop the connection or the client leaves.
async fn serve_one(
    mut s: TcpStream,
    seen: &mpsc::UnboundedSender<(u8, Vec<u8>)>,
    drop_now: &mut mpsc::UnboundedReceiver<()>,
) {
    loop {
        let packet = tokio::select! {
            p = read_packet(&mut s) => p,
            _ = drop_now.recv() => return,
        };
        let Some((first, body)) = packet else { return };
        let reply: Vec<u8> = match first >> 4 {
            1 => vec![0x20, 0x03, 0x00, 0x00, 0x00],
            8 => vec![0x90, 0x05, body[0], body[1], 0x00, 0x01, 0x01],
            12 => vec![0xD0, 0x00],
            _ => Vec::new(),
        };
        let _ = seen.send((first, body));
        if !reply.is_empty() && s.write_all(&reply).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_carries_session_settings_and_rotating_credentials() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let (drop_tx, mut drop_rx) = mpsc::unbounded_channel();
    let broker = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            serve_one(s, &seen_tx, &mut drop_rx).await;
        }
    });

    let dir = tempfile::tempdir().unwrap();
    let sat = dir.path().join("token");
    let password = dir.path().join("password");
    std::fs::write(&sat, "sat-token-one").unwrap();
    std::fs::write(&password, "password-one").unwrap();
    let mut options = ConnectOptions::new("127.0.0.1", port)
        .with_client_id("connect-packet-test")
        .with_sat_file(&sat)
        .with_session_expiry(Duration::from_secs(600))
        .with_reconnect(ReconnectPolicy::new(
            Duration::from_millis(20),
            Duration::from_millis(50),
        ));
    options.username = Some("app".into());
    options.password_file = Some(password.clone());

    let client = tokio::time::timeout(Duration::from_secs(20), Client::connect(options))
        .await
        .unwrap()
        .unwrap();
    let (first, connect) = next(&mut seen).await;
    assert_eq!(first, 0x10);
    // Protocol name MQTT, version 5, then the flags: user name and password on, clean start
    // off.
    assert_eq!(&connect[..7], b"\x00\x04MQTT\x05");
    let flags = connect[7];
    assert_eq!(flags & 0x02, 0, "clean start must be off");
    assert_eq!(flags & 0xC0, 0xC0, "user name and password flags");
    // Session expiry interval (property 0x11) = 600.
    assert!(contains(&connect, &[0x11, 0x00, 0x00, 0x02, 0x58]));
    // Enhanced authentication: method (0x15) K8S-SAT, data (0x16) the token.
    assert!(contains(&connect, b"\x15\x00\x07K8S-SAT"));
    assert!(contains(&connect, b"\x16\x00\x0dsat-token-one"));
    assert!(contains(&connect, b"password-one"));
    assert!(contains(&connect, b"connect-packet-test"));

    let (first, subscribe) = next(&mut seen).await;
    assert_eq!(first, 0x82);
    assert!(contains(
        &subscribe,
        mqstate::protocol::topics::response_topic("connect-packet-test").as_bytes()
    ));
    assert!(contains(
        &subscribe,
        mqstate::protocol::topics::notification_filter("connect-packet-test").as_bytes()
    ));
    assert_eq!(client.state(), ConnectionState::Connected);

    // The secrets rotate; the broker drops the connection; the reconnect sends the new ones.
    std::fs::write(&sat, "sat-token-two").unwrap();
    std::fs::write(&password, "password-two").unwrap();
    drop_tx.send(()).unwrap();
    let (first, connect) = next(&mut seen).await;
    assert_eq!(first, 0x10);
    assert!(contains(&connect, b"\x16\x00\x0dsat-token-two"));
    assert!(contains(&connect, b"password-two"));
    // No session on the fake broker: the client subscribes again.
    let (first, _) = next(&mut seen).await;
    assert_eq!(first, 0x82);

    client.close().await;
    broker.abort();
}
