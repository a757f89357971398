//! Device sessions, as any transport opens them: connect (token check, take-over), subscriptions, acknowledgements, disconnect, telemetry received, and the timer that expires locks and messages.

use super::*;

impl IotHub {
    /// Checks a CONNECT; on success the device's previous connection is closed and this one
    /// registered. Returns (connection id, session present, token expiry, receiver).
    pub(crate) fn connect(
        &self,
        client_id: &str,
        username: Option<&str>,
        password: Option<&str>,
        client_cert: Option<&ClientCert>,
        clean_session: bool,
    ) -> Result<Connected, ConnectRefusal> {
        let now = Now::current();
        let hostname = &self.inner.config.hostname;
        let not_registered = || {
            ConnectRefusal::NotAuthorized(format!("device {:?} is not registered", cut(client_id)))
        };
        // The credentials are the peer's text: they are checked on a copy of the device,
        // with no lock held, so that nothing a peer sends runs under the state lock.
        let device = self.device(client_id).map_err(|_| not_registered())?;
        if device.status == DeviceStatus::Disabled {
            return Err(ConnectRefusal::NotAuthorized(format!(
                "device {client_id:?} is disabled"
            )));
        }
        let username =
            username.ok_or_else(|| ConnectRefusal::NotAuthorized("no user name".into()))?;
        let expected = format!("{hostname}/{client_id}/");
        let query = username
            .strip_prefix(&expected)
            .and_then(|rest| rest.strip_prefix('?'));
        match query {
            Some(q) if q.split('&').any(|p| p.starts_with("api-version=")) => {}
            _ => {
                return Err(ConnectRefusal::BadUsername(format!(
                    "user name {:?} is not \"{expected}?api-version=...\"",
                    cut(username)
                )));
            }
        }
        let token_expires = match (password, client_cert) {
            // An X.509 device sends no password: its TLS client certificate authenticates it
            // for as long as the connection lasts (docs/iothub.md, "X.509 devices").
            (None, Some(cert)) if device.authentication.is_x509() => {
                cert.authenticates(client_id, &device.authentication)
                    .map_err(ConnectRefusal::NotAuthorized)?;
                // Nothing expires during the connection (a certificate's own end is checked
                // when it connects); about a century on.
                now.utc + Duration::from_secs(100 * 365 * 24 * 3600)
            }
            (None, None) if device.authentication.is_x509() => {
                return Err(ConnectRefusal::NotAuthorized(format!(
                    "device {client_id:?} authenticates with an X.509 certificate and the connection presented none"
                )));
            }
            (password, _) => {
                let password = password.ok_or_else(|| {
                    ConnectRefusal::NotAuthorized("no password (SAS token)".into())
                })?;
                self.check_device_token(&device, password, now.utc)
                    .map_err(|e| ConnectRefusal::NotAuthorized(e.to_string()))?
            }
        };
        let mut state = self.state();
        let id = state.next_connection;
        state.next_connection += 1;
        let Some(device) = state.devices.get_mut(client_id).filter(|d| {
            // Deleted, re-created, disabled or given new keys since the check: check again.
            d.device.generation_id == device.generation_id && d.device.etag == device.etag
        }) else {
            return Err(ConnectRefusal::NotAuthorized(format!(
                "device {client_id:?} changed while it connected; connect again"
            )));
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let connection = Connection {
            id,
            tx,
            clean_session,
            by_lock_token: false,
        };
        let outcomes = self.take_over(device, connection, now);
        let session_present = !clean_session && device.session.is_some();
        if clean_session || device.session.is_none() {
            device.session = Some(Subscription::None);
        }
        let generation = device.device.generation_id.clone();
        self.record_outcomes(&mut state, client_id, &generation, outcomes, now);
        // With a kept subscription, queued messages flow right after the CONNACK.
        self.pump(&mut state, client_id, now);
        drop(state);
        self.changed();
        Ok(Connected {
            id,
            session_present,
            token_expires,
            rx,
        })
    }

    /// Makes `connection` the device's one connection, whatever the transport (IoT Hub allows
    /// one per device id): the previous one is told to close and the locks of its packet ids
    /// end (their outcomes are returned, to be recorded).
    pub(super) fn take_over(
        &self,
        device: &mut DeviceState,
        connection: Connection,
        now: Now,
    ) -> Vec<Outcome> {
        let previous = device.connection.replace(connection);
        device.connection_changed = Some(now.utc);
        device.last_activity = Some(now.utc);
        let Some(old) = previous else {
            return Vec::new();
        };
        let _ = old.tx.send(ToConnection::Close(
            "a new connection with the same device id took over".into(),
        ));
        device
            .queue
            .release_connection(old.id, now, self.inner.config.max_delivery_count)
    }

    /// A device opened its first link over AMQP (its token was checked on `$cbs`): registers
    /// the connection as the device's one connection, closing the previous one, MQTT or AMQP,
    /// as IoT Hub allows one connection per device id across transports. The AMQP links take
    /// messages with [`IotHub::receive_locked`]; a kept MQTT session stays for a later MQTT
    /// connection. End it with [`IotHub::disconnected`]; the receiver gets
    /// [`ToConnection::Close`] when another connection takes over.
    pub(crate) fn connect_by_lock_token(
        &self,
        device_id: &str,
    ) -> Result<(u64, mpsc::UnboundedReceiver<ToConnection>), IotHubError> {
        let now = Now::current();
        let mut state = self.state();
        let id = state.next_connection;
        let device = state.device_mut(device_id)?;
        if device.device.status == DeviceStatus::Disabled {
            return Err(IotHubError::Unauthorized(format!(
                "device {device_id:?} is disabled"
            )));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let connection = Connection {
            id,
            tx,
            clean_session: false,
            by_lock_token: true,
        };
        let outcomes = self.take_over(device, connection, now);
        let generation = device.device.generation_id.clone();
        state.next_connection += 1;
        self.record_outcomes(&mut state, device_id, &generation, outcomes, now);
        drop(state);
        self.changed();
        Ok((id, rx))
    }

    /// The device subscribed to its device-bound topic, granted `subscription`.
    pub(crate) fn subscribed(&self, device_id: &str, connection: u64, subscription: Subscription) {
        let mut state = self.state();
        if let Some(d) = state.devices.get_mut(device_id)
            && d.connection.as_ref().is_some_and(|c| c.id == connection)
        {
            d.session = Some(subscription);
            self.pump(&mut state, device_id, Now::current());
        }
        drop(state);
        self.changed();
    }

    /// The device unsubscribed from its device-bound topic.
    pub(crate) fn unsubscribed(&self, device_id: &str, connection: u64) {
        let mut state = self.state();
        if let Some(d) = state.devices.get_mut(device_id)
            && d.connection.as_ref().is_some_and(|c| c.id == connection)
        {
            d.session = Some(Subscription::None);
        }
    }

    /// A PUBACK for a C2D delivery made on `connection` under `lock`
    /// ([`ToConnection::Deliver`]).
    pub(crate) fn puback(&self, device_id: &str, connection: u64, lock: u128) {
        let now = Now::current();
        let mut state = self.state();
        let Some(device) = state.devices.get_mut(device_id) else {
            return;
        };
        match device.queue.complete(connection, lock, now) {
            Some(outcome) => {
                let generation = device.device.generation_id.clone();
                self.record_outcomes(&mut state, device_id, &generation, vec![outcome], now);
            }
            None => tracing::debug!(device = %device_id,
                "iothub: PUBACK for no locked message (its lock had timed out)"),
        }
        drop(state);
        self.changed();
    }

    /// The connection ended: its locks end, and a clean session is forgotten.
    pub(crate) fn disconnected(&self, device_id: &str, connection: u64) {
        let now = Now::current();
        let mut state = self.state();
        let Some(device) = state.devices.get_mut(device_id) else {
            return;
        };
        if device
            .connection
            .as_ref()
            .is_none_or(|c| c.id != connection)
        {
            return; // Already replaced by a newer connection.
        }
        let clean = device.connection.take().is_some_and(|c| c.clean_session);
        device.connection_changed = Some(now.utc);
        if clean {
            device.session = None;
        }
        let outcomes =
            device
                .queue
                .release_connection(connection, now, self.inner.config.max_delivery_count);
        let generation = device.device.generation_id.clone();
        self.record_outcomes(&mut state, device_id, &generation, outcomes, now);
        drop(state);
        self.changed();
    }

    /// A device-to-cloud message.
    pub(crate) fn telemetry_received(&self, device_id: &str, bag: Vec<Property>, payload: Bytes) {
        let (system, application): (Vec<Property>, Vec<Property>) =
            bag.into_iter().partition(|(k, _)| k.starts_with("$."));
        let mut state = self.state();
        let sequence_number = state.next_sequence;
        state.next_sequence += 1;
        let capacity = self.inner.config.telemetry_capacity;
        let Some(device) = state.devices.get_mut(device_id) else {
            return;
        };
        device.last_activity = Some(SystemTime::now());
        if device.telemetry.len() >= capacity {
            device.telemetry.pop_front();
        }
        device.telemetry.push_back(TelemetryMessage {
            sequence_number,
            device_id: device_id.to_owned(),
            enqueued_time_utc: format_time(SystemTime::now()),
            system_properties: system.into_iter().collect(),
            properties: application.into_iter().collect(),
            body: std::str::from_utf8(&payload).ok().map(str::to_owned),
            body_base64: STANDARD.encode(&payload),
        });
        drop(state);
        self.inner.telemetry_ready.notify_waiters();
    }

    // ----- time -----

    /// Applies every due expiry, lock timeout and feedback batch; returns the next deadline.
    pub(crate) fn tick(&self) -> Option<Instant> {
        let now = Now::current();
        let mut state = self.state();
        let ids: Vec<String> = state.devices.keys().cloned().collect();
        for id in &ids {
            let Some(device) = state.devices.get_mut(id) else {
                continue;
            };
            let outcomes = device.queue.tick(now, self.inner.config.max_delivery_count);
            let generation = device.device.generation_id.clone();
            self.record_outcomes(&mut state, id, &generation, outcomes, now);
            self.pump(&mut state, id, now);
        }
        if state.feedback.tick(now) {
            self.inner.feedback_ready.notify_waiters();
        }
        state
            .devices
            .values()
            .filter_map(|d| d.queue.next_deadline())
            .chain(state.feedback.next_deadline())
            .min()
    }

    /// Runs [`IotHub::tick`] at every deadline until `stop` fires.
    pub(crate) async fn run_timer(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let next = self.tick();
            // Deadlines move when something happens; wake for that too. A long idle sleep is
            // capped so a missed notification could never stall the hub for long.
            let cap = Instant::now() + Duration::from_secs(1);
            let until = next.map_or(cap, |n| n.min(cap));
            tokio::select! {
                () = tokio::time::sleep_until(until.into()) => {}
                () = self.inner.timer.notified() => {}
                _ = stop.changed() => return,
            }
        }
    }
}

/// A connection accepted by [`IotHub::connect`].
#[derive(Debug)]
pub(crate) struct Connected {
    pub id: u64,
    pub session_present: bool,
    pub token_expires: SystemTime,
    pub rx: mpsc::UnboundedReceiver<ToConnection>,
}

/// Why a CONNECT was refused (mapped to CONNACK return codes by the endpoint).
#[derive(Debug, Clone)]
pub(crate) enum ConnectRefusal {
    /// Return code 4.
    BadUsername(String),
    /// Return code 5.
    NotAuthorized(String),
}
