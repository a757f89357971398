//! A device over AMQP that completes, rejects and abandons cloud-to-device messages, against a
//! local IoT Hub started in this process (docs/iothub-device.md, "Complete, reject, abandon").
//!
//! ```sh
//! cargo run -p mqstate --example iothub_amqp_device
//! ```
//!
//! It sends three messages asking for full feedback, settles them three ways (the abandoned one
//! comes again with its delivery count one higher and is then completed), and prints the
//! feedback the service side gets: `Success`, `Rejected`, `Success`.

use std::time::Duration;

use mqstate::TlsOptions;
use mqstate::iothub::{DeviceClient, DeviceOptions, Transport};
use mqstate_server::iothub::{Ack, C2dMessage, DeviceSpec, IotHubConfig, IotHubServer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The local hub: AMQP over TLS with a certificate generated at start, feedback at once.
    let server = IotHubServer::start(IotHubConfig {
        admin_port: None,
        feedback_batch_size: 1,
        ..IotHubConfig::default()
    })
    .await?;
    let hub = server.hub();
    hub.add_device(&DeviceSpec::parse("dev1")?)?;
    let ca = std::env::temp_dir().join(format!("mqstate-hub-ca-{}.pem", std::process::id()));
    std::fs::write(
        &ca,
        hub.ca_certificate_pem().ok_or("no generated certificate")?,
    )?;
    let amqp_port = hub
        .endpoints()
        .amqp_endpoint
        .ok_or("no AMQP endpoint")?
        .port();

    // The device: its connection string, the AMQP transport, the local endpoint.
    let options = DeviceOptions::from_connection_string(&hub.connection_string("dev1")?)?
        .with_transport(Transport::Amqp)
        .with_endpoint(
            "127.0.0.1",
            amqp_port,
            TlsOptions::default().with_ca_file(&ca),
        );
    let client = DeviceClient::connect(options).await?;

    for (id, body) in [("ok", "fine"), ("bad", "garbage"), ("later", "busy now")] {
        hub.send("dev1", C2dMessage::new(body).message_id(id).ack(Ack::Full))?;
    }
    let mut settled = 0;
    while settled < 3 {
        let msg = client.receive().await?;
        println!(
            "{:?}: {:?}, delivery count {:?}",
            msg.message_id,
            String::from_utf8_lossy(&msg.payload),
            msg.delivery_count()
        );
        match (msg.message_id.as_deref(), msg.delivery_count()) {
            (Some("bad"), _) => msg.reject()?, // dead-lettered: `Rejected` feedback
            (Some("later"), Some(0)) => {
                msg.abandon()?; // back to the queue: delivered again, count 1
                continue;
            }
            _ => msg.complete()?,
        }
        settled += 1;
    }

    // What the service side sees.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while hub.recent_feedback().len() < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for record in hub.recent_feedback() {
        println!(
            "feedback: {:?} {:?}",
            record.original_message_id, record.status_code
        );
    }
    println!("{:?}", client.stats());
    client.close().await;
    server.shutdown().await;
    let _ = std::fs::remove_file(&ca);
    Ok(())
}
