//! What the IoT Hub throughput examples (`iothub_throughput`, `iothub_amqp_throughput`) share:
//! the queue they fill, the wait for it to drain, and the report of their rounds' ratios
//! (docs/performance.md's protocol: the median and the range).

use std::time::Duration;

use mqstate_server::iothub::{C2dMessage, IotHub};

/// The device every round receives as.
pub const DEVICE: &str = "bench";

/// Queues `n` messages of 64 bytes with a message id and one property for [`DEVICE`].
pub fn fill(hub: &IotHub, n: usize) {
    for i in 0..n {
        hub.send(
            DEVICE,
            C2dMessage::new(vec![b'x'; 64])
                .message_id(format!("m{i}"))
                .property("seq", Some(&i.to_string())),
        )
        .unwrap();
    }
}

/// Returns once [`DEVICE`]'s queue is empty (every message settled).
pub async fn drained(hub: &IotHub) {
    while hub.queue(DEVICE).unwrap().depth > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Prints the median of `ratios` (named `what`) and their range.
pub fn print_median(what: &str, mut ratios: Vec<f64>, n: usize) {
    ratios.sort_by(f64::total_cmp);
    println!(
        "median {what} {:.2} (range {:.2}-{:.2}) over {} rounds of {n} messages",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1],
        ratios.len()
    );
}
