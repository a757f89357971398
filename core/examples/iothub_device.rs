//! A device that prints each cloud-to-device message and completes it.
//!
//! ```sh
//! mqstate serve --iothub-device dev1          # prints the device's connection string
//! cargo run -p mqstate --example iothub_device -- "HostName=...;DeviceId=dev1;SharedAccessKey=..." 127.0.0.1 8883 plain
//! mqstate iothub send dev1 "hello" -P colour=blue
//! ```
//!
//! Arguments: the device connection string, then optionally the host and port to connect to
//! and `plain` for plain TCP (the local hub's default endpoint).

use mqstate::iothub::{DeviceClient, DeviceOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let cs = args
        .next()
        .ok_or("usage: iothub_device CONNECTION_STRING [HOST PORT [plain]]")?;
    let mut options = DeviceOptions::from_connection_string(&cs)?;
    if let (Some(host), Some(port)) = (args.next(), args.next()) {
        let port: u16 = port.parse()?;
        options = if args.next().as_deref() == Some("plain") {
            options.with_plain_tcp(host, port)
        } else {
            let tls = options.tls.clone().unwrap_or_default();
            options.with_endpoint(host, port, tls)
        };
    }
    let client = DeviceClient::connect(options).await?;
    println!("connected as {}; waiting for messages", client.device_id());
    loop {
        let msg = client.receive().await?;
        println!(
            "message {:?}{}: {:?} properties {:?}",
            msg.message_id,
            if msg.is_redelivery() {
                " (redelivery)"
            } else {
                ""
            },
            String::from_utf8_lossy(&msg.payload),
            msg.properties
        );
        msg.complete()?;
    }
}
