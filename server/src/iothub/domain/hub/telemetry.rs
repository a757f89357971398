//! Device-to-cloud telemetry kept for the service side: read it, or wait for it.

use super::*;

impl IotHub {
    /// Telemetry the device sent, with sequence numbers above `since` (oldest first; at most
    /// the configured capacity per device is kept).
    pub fn telemetry(
        &self,
        device_id: &str,
        since: u64,
    ) -> Result<Vec<TelemetryMessage>, IotHubError> {
        let state = self.state();
        let device = state.device(device_id)?;
        Ok(device
            .telemetry
            .iter()
            .filter(|t| t.sequence_number > since)
            .cloned()
            .collect())
    }

    /// Like [`IotHub::telemetry`], waiting up to `wait` for at least one message.
    pub async fn wait_telemetry(
        &self,
        device_id: &str,
        since: u64,
        wait: Duration,
    ) -> Result<Vec<TelemetryMessage>, IotHubError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.inner.telemetry_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let found = self.telemetry(device_id, since)?;
            if !found.is_empty() {
                return Ok(found);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(found);
            }
        }
    }

    // ----- the device endpoint's calls -----
}
