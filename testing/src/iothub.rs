//! Waits on the local IoT Hub (`mqstate_server::iothub`) that the Rust suites of the core and
//! the server share.

use std::time::Duration;

use mqstate_server::iothub::{FeedbackStatus, IotHub};

/// How long [`feedback`] waits.
pub const FEEDBACK_WAIT: Duration = Duration::from_secs(30);

/// Waits for the first feedback record of `message_id` and returns its status; panics after
/// [`FEEDBACK_WAIT`] without one (a test's failure).
///
/// ```no_run
/// # async fn demo(hub: mqstate_server::iothub::IotHub) {
/// let status = mqstate_testing::iothub::feedback(&hub, "m1").await;
/// # }
/// ```
pub async fn feedback(hub: &IotHub, message_id: &str) -> FeedbackStatus {
    let deadline = tokio::time::Instant::now() + FEEDBACK_WAIT;
    loop {
        if let Some(r) = hub
            .recent_feedback()
            .into_iter()
            .find(|r| r.original_message_id.as_deref() == Some(message_id))
        {
            return r.status_code;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no feedback for {message_id} in {FEEDBACK_WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
