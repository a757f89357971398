//! Connect from the Azure IoT Operations environment variables (`AIO_BROKER_HOSTNAME`,
//! `AIO_BROKER_TCP_PORT`, `AIO_MQTT_USE_TLS`, `AIO_TLS_CA_FILE`, `AIO_SAT_FILE`,
//! `AIO_MQTT_CLIENT_ID`, ...), as a workload deployed next to an Azure IoT Operations broker
//! does.
//!
//! Without `AIO_BROKER_HOSTNAME` it falls back to the local server of `mqstate serve`
//! (`mqtt://127.0.0.1:1883`), so it runs on a laptop too:
//!
//! ```text
//! AIO_BROKER_HOSTNAME=127.0.0.1 AIO_BROKER_TCP_PORT=1883 AIO_MQTT_USE_TLS=false \
//!     cargo run -p mqstate --example from_env
//! ```

use mqstate::{Client, ConnectOptions, SetOptions};

#[tokio::main]
async fn main() -> Result<(), mqstate::Error> {
    let options = if std::env::var_os("AIO_BROKER_HOSTNAME").is_some() {
        // A malformed variable is an error naming it, e.g.
        // "invalid argument: environment variable AIO_MQTT_USE_TLS=\"maybe\": expected true or false".
        ConnectOptions::from_env()?
    } else {
        println!("AIO_BROKER_HOSTNAME is not set: using mqtt://127.0.0.1:1883");
        ConnectOptions::from_url("mqtt://127.0.0.1:1883")?
    };
    println!(
        "connecting to {}:{} (TLS: {}, SAT: {})",
        options.host,
        options.port,
        options.tls.is_some(),
        options.sat_file.is_some()
    );
    let client = Client::connect(options).await?;
    let outcome = client
        .set(
            "from_env/heartbeat",
            client.client_id(),
            SetOptions::default(),
        )
        .await?;
    println!("wrote from_env/heartbeat at version {}", outcome.version);
    let value = client.get("from_env/heartbeat").await?;
    println!("read back: {:?}", value.map(|v| v.value));
    client.close().await;
    Ok(())
}
