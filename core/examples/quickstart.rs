//! Quick start: connect, set / get / del, and observe a key while another task writes it.
//!
//! Start a local state store first (`mqstate serve`, which listens on 127.0.0.1:1883), then:
//!
//! ```text
//! cargo run -p mqstate --example quickstart [mqtt://127.0.0.1:1883]
//! ```

use std::time::Duration;

use mqstate::{Client, ConnectOptions, NotifyOperation, SetOptions};

#[tokio::main]
async fn main() -> Result<(), mqstate::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "mqtt://127.0.0.1:1883".to_owned());
    let client = Client::connect(ConnectOptions::from_url(&url)?).await?;
    println!("connected to {url} as {}", client.client_id());

    // Set, get, delete.
    let outcome = client
        .set("quickstart/greeting", "hello", SetOptions::default())
        .await?;
    println!(
        "SET applied={} version={}",
        outcome.applied, outcome.version
    );
    if let Some(got) = client.get("quickstart/greeting").await? {
        println!(
            "GET {:?} version={}",
            String::from_utf8_lossy(&got.value),
            got.version
        );
    }
    println!(
        "DEL removed {} key(s)",
        client.del("quickstart/greeting", None).await?
    );

    // Conditional writes: NX only sets a key that does not exist.
    let first = client
        .set(
            "quickstart/once",
            "first",
            SetOptions::default().nx().expiry(Duration::from_secs(5)),
        )
        .await?;
    let second = client
        .set("quickstart/once", "second", SetOptions::default().nx())
        .await?;
    println!(
        "NX: first applied={}, second applied={}",
        first.applied, second.applied
    );

    // Observe a key while another task (sharing the same connection) writes it.
    let mut changes = client.observe("quickstart/door").await?;
    let writer = client.clone();
    let task = tokio::spawn(async move {
        for state in ["open", "closed", "open"] {
            writer
                .set("quickstart/door", state, SetOptions::default())
                .await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        writer.del("quickstart/door", None).await?;
        Ok::<(), mqstate::Error>(())
    });
    while let Some(change) = changes.recv().await {
        let change = change?;
        match &change.operation {
            NotifyOperation::Set(value) => {
                println!(
                    "door -> {} ({:?})",
                    String::from_utf8_lossy(value),
                    change.version
                )
            }
            NotifyOperation::Delete => {
                println!("door deleted");
                break;
            }
        }
    }
    task.await
        .map_err(|e| mqstate::Error::Disconnected(e.to_string()))??;
    drop(changes);
    client.close().await;
    Ok(())
}
