//! The hub's device registry operations: add, create, update, delete and read devices, their tokens and connection strings; each change journaled for the data dir.

use super::*;

impl IotHub {
    /// Registers a device; its keys are generated when the spec has none.
    pub fn add_device(&self, spec: &DeviceSpec) -> Result<Device, IotHubError> {
        self.register(Device::create(spec)?)
    }

    /// Registers a device as IoT Hub's REST registry API creates one (`PUT /devices/{id}`
    /// without `If-Match`): keys generated when absent, status and capabilities as given.
    pub fn create_device(&self, id: &str, update: &DeviceUpdate) -> Result<Device, IotHubError> {
        self.register(Device::create_with(id, update)?)
    }

    /// Replaces what a back end sets on a device (keys not given are kept) if `if_match` is
    /// absent, `*` or its current ETag (else [`IotHubError::PreconditionFailed`]); it gets a
    /// new ETag. Disabling a device closes its connection, as on IoT Hub.
    pub fn update_device(
        &self,
        id: &str,
        update: &DeviceUpdate,
        if_match: Option<&str>,
    ) -> Result<Device, IotHubError> {
        let mut state = self.state();
        let track = state.track;
        let d = state
            .devices
            .get_mut(id)
            .ok_or_else(|| IotHubError::DeviceNotFound(id.to_owned()))?;
        if !d.device.etag_matches(if_match) {
            return Err(IotHubError::PreconditionFailed(id.to_owned()));
        }
        let device = d.device.updated(update)?;
        d.device = device.clone();
        if device.status == DeviceStatus::Disabled
            && let Some(c) = &d.connection
        {
            let _ =
                c.tx.send(ToConnection::Close("the device was disabled".into()));
        }
        if track {
            state.journal.push(Key::Device(id.to_owned()));
        }
        drop(state);
        self.changed();
        tracing::info!(device = %id, status = device.status.as_str(), "iothub: device updated");
        Ok(device)
    }

    /// A device with its connection state, activity times and queue depth.
    pub(crate) fn identity(&self, id: &str) -> Result<Identity, IotHubError> {
        self.state()
            .devices
            .get(id)
            .map(DeviceState::identity)
            .ok_or_else(|| IotHubError::DeviceNotFound(id.to_owned()))
    }

    /// The first `top` devices (by id), as [`IotHub::identity`].
    pub(crate) fn identities(&self, top: usize) -> Vec<Identity> {
        self.state()
            .devices
            .values()
            .take(top)
            .map(DeviceState::identity)
            .collect()
    }

    /// Inserts a new device; refused if its id is taken.
    pub(super) fn register(&self, device: Device) -> Result<Device, IotHubError> {
        let mut state = self.state();
        if state.devices.contains_key(&device.device_id) {
            return Err(IotHubError::DeviceAlreadyExists(device.device_id));
        }
        let track = state.track;
        state.devices.insert(
            device.device_id.clone(),
            DeviceState {
                device: device.clone(),
                queue: DeviceQueue::new(track),
                session: None,
                connection: None,
                telemetry: VecDeque::new(),
                connection_changed: None,
                last_activity: None,
            },
        );
        if track {
            state.journal.push(Key::Device(device.device_id.clone()));
        }
        drop(state);
        self.changed();
        tracing::info!(device = %device.device_id, "iothub: device registered");
        Ok(device)
    }

    /// Deletes a device: its queue, its telemetry and its pending feedback go with it, and its
    /// connection is closed.
    pub fn remove_device(&self, id: &str) -> Result<(), IotHubError> {
        self.delete_device(id, None)
    }

    /// [`IotHub::remove_device`] if `if_match` is absent, `*` or the device's current ETag
    /// (else [`IotHubError::PreconditionFailed`], nothing deleted).
    pub fn delete_device(&self, id: &str, if_match: Option<&str>) -> Result<(), IotHubError> {
        let mut state = self.state();
        if let Some(d) = state.devices.get(id)
            && !d.device.etag_matches(if_match)
        {
            return Err(IotHubError::PreconditionFailed(id.to_owned()));
        }
        let removed = state
            .devices
            .remove(id)
            .ok_or_else(|| IotHubError::DeviceNotFound(id.to_owned()))?;
        state.feedback.drop_device(id);
        if state.track {
            state.journal.push(Key::Removed(id.to_owned()));
        }
        drop(state);
        if let Some(c) = removed.connection {
            let _ =
                c.tx.send(ToConnection::Close("the device was deleted".into()));
        }
        tracing::info!(device = %id, "iothub: device deleted");
        self.changed();
        Ok(())
    }

    /// One device, with its keys.
    pub fn device(&self, id: &str) -> Result<Device, IotHubError> {
        self.state()
            .devices
            .get(id)
            .map(|d| d.device.clone())
            .ok_or_else(|| IotHubError::DeviceNotFound(id.to_owned()))
    }

    /// Every device, by id.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.state()
            .devices
            .values()
            .map(|d| DeviceInfo {
                device_id: d.device.device_id.clone(),
                generation_id: d.device.generation_id.clone(),
                connection_state: if d.connection.is_some() {
                    "Connected"
                } else {
                    "Disconnected"
                }
                .to_owned(),
                queue_depth: d.queue.depth(),
                authentication: d.device.authentication.type_name().to_owned(),
            })
            .collect()
    }

    /// A SAS token for the device, signed with its primary key, valid for `ttl`: the MQTT
    /// password of the device.
    pub fn device_token(&self, id: &str, ttl: Duration) -> Result<String, IotHubError> {
        if ttl.is_zero() {
            return Err(IotHubError::invalid("the token TTL must be positive"));
        }
        let device = self.device(id)?;
        sas::generate(
            &sas::device_resource(&self.inner.config.hostname, id),
            &device.primary_key,
            SystemTime::now() + ttl,
        )
    }

    /// The MQTT user name of a device: `{hostname}/{deviceId}/?api-version=2021-04-12`.
    pub fn device_username(&self, id: &str) -> String {
        format!(
            "{}/{id}/?api-version=2021-04-12",
            self.inner.config.hostname
        )
    }

    /// The device's connection string (`HostName=...;DeviceId=...;SharedAccessKey=...`).
    pub fn connection_string(&self, id: &str) -> Result<String, IotHubError> {
        let device = self.device(id)?;
        Ok(format!(
            "HostName={};DeviceId={id};SharedAccessKey={}",
            self.inner.config.hostname, device.primary_key
        ))
    }

    // ----- cloud-to-device -----
}
