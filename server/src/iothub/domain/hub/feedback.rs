//! Feedback batches for the service side: the recent records, receive, complete, abandon.

use super::*;

impl IotHub {
    /// The last 100 feedback records made (oldest first), whether or not a back-end has
    /// received them yet: a view for the dashboard, which must not take batches away.
    pub fn recent_feedback(&self) -> Vec<FeedbackRecord> {
        self.state().recent_feedback.iter().cloned().collect()
    }

    /// Receives the next feedback batch, waiting up to `wait` for one; the batch is locked for
    /// the feedback lock duration: complete it with [`IotHub::complete_feedback`], or it is
    /// received again later (up to the feedback max delivery count).
    pub async fn receive_feedback(&self, wait: Duration) -> Option<FeedbackBatch> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.inner.feedback_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let name = self.hub_name().to_owned();
            let received = self.state().feedback.receive(Now::current(), &name);
            if let Some(batch) = received {
                self.changed();
                // Its lock, and the outcomes its records tell of, are on disk first.
                if let Err(e) = self.persisted().await {
                    tracing::warn!(error = %e, "iothub: a feedback batch was not handed out");
                    return None;
                }
                return Some(batch);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Completes a received feedback batch (it is not delivered again).
    pub fn complete_feedback(&self, lock_token: &str) -> Result<(), IotHubError> {
        if self.state().feedback.complete(lock_token) {
            self.changed();
            Ok(())
        } else {
            Err(IotHubError::FeedbackLockLost(lock_token.to_owned()))
        }
    }

    /// Abandons a received feedback batch: it can be received again at once.
    pub fn abandon_feedback(&self, lock_token: &str) -> Result<(), IotHubError> {
        if self.state().feedback.abandon(lock_token) {
            self.changed();
            self.inner.feedback_ready.notify_waiters();
            Ok(())
        } else {
            Err(IotHubError::FeedbackLockLost(lock_token.to_owned()))
        }
    }

    // ----- telemetry -----
}
