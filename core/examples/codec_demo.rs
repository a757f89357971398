//! Shows the wire bytes of every state store request and how replies decode, with no
//! network: `cargo run -p mqstate --example codec_demo`.

use bytes::{Bytes, BytesMut};
use mqstate::protocol::resp3::{self, SetCondition};
use mqstate::{Hlc, HlcClock};

fn show(label: &str, bytes: &[u8]) {
    println!("{label:<34} {}", resp3::escape_excerpt(bytes, 120));
}

fn main() -> Result<(), mqstate::Error> {
    println!("requests (client -> state store):");
    let mut buf = BytesMut::new();
    resp3::encode_set(&mut buf, b"SETKEY2", b"VALUE5", SetCondition::Always, None);
    show("SET SETKEY2 VALUE5", &buf.split());
    resp3::encode_set(
        &mut buf,
        b"LockName",
        b"Client1",
        SetCondition::NotExistsOrEqual,
        Some(10_000),
    );
    show("SET LockName Client1 NEX PX 10000", &buf.split());
    resp3::encode_get(&mut buf, b"SETKEY2");
    show("GET SETKEY2", &buf.split());
    resp3::encode_vdel(&mut buf, b"SETKEY2", b"ABC");
    show("VDEL SETKEY2 ABC", &buf.split());
    resp3::encode_keynotify(&mut buf, b"SOMEKEY", false);
    show("KEYNOTIFY SOMEKEY", &buf.split());

    println!("\nreplies (state store -> client):");
    let get = resp3::decode_get_reply(&Bytes::from_static(b"$6\r\nVALUE5\r\n"))?;
    println!("{:<34} {get:?}", "GET hit");
    let set = resp3::decode_set_reply(&Bytes::from_static(b":-1\r\n"))?;
    println!("{:<34} {set:?}", "SET with NX on an existing key");
    if let Err(err) = resp3::decode_set_reply(&Bytes::from_static(b"-ERR missing timestamp\r\n")) {
        println!("{:<34} {err} (kind {})", "SET without __ts", err.kind());
    }
    if let Err(err) = resp3::decode_get_reply(&Bytes::from_static(b"$5\r\nab\r\n")) {
        println!("{:<34} {err} (kind {})", "truncated GET reply", err.kind());
    }

    println!("\nversions (hybrid logical clocks):");
    let clock = HlcClock::new("demo-client");
    let sent = clock.send_update()?;
    println!("{:<34} {sent}", "__ts of the next request");
    let server: Hlc = "001696374425000:00003:StateStore".parse()?;
    println!(
        "{:<34} {server} (ms {}, counter {})",
        "a version from the server", server.ms, server.counter
    );
    Ok(())
}
