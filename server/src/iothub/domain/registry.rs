//! The device registry: device ids, their symmetric keys, generation ids, ETags and status.
//!
//! A [`Device`] is what IoT Hub's registry keeps for a device identity; its JSON is also its
//! stored form in the data dir. Records written by earlier versions (without ETag, status,
//! capabilities) still load: the missing fields take IoT Hub's defaults (`DeviceRecord`).

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use super::error::IotHubError;
use super::sas;
use super::x509::Authentication;

/// A device to register: its id and, optionally, its primary key (base64; generated if absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// The device id.
    pub id: String,
    /// Primary key (base64 of 16 to 64 bytes); a random 32-byte key when `None`.
    pub primary_key: Option<String>,
    /// Secondary key (base64); a random one when `None`.
    pub secondary_key: Option<String>,
}

impl DeviceSpec {
    /// Parses `ID` or `ID:KEY` (the form of `--iothub-device` and of device files).
    ///
    /// ```
    /// use mqstate_server::iothub::DeviceSpec;
    /// let d = DeviceSpec::parse("sensor-1:AAECAwQFBgcICQoLDA0ODw==").unwrap();
    /// assert_eq!(d.id, "sensor-1");
    /// assert_eq!(d.primary_key.as_deref(), Some("AAECAwQFBgcICQoLDA0ODw=="));
    /// assert!(DeviceSpec::parse("bad/id").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<DeviceSpec, IotHubError> {
        let text = text.trim();
        let (id, key) = match text.split_once(':') {
            Some((id, key)) => (id, Some(key.to_owned())),
            None => (text, None),
        };
        check_device_id(id)?;
        if let Some(key) = &key {
            sas::decode_key(key)
                .map_err(|e| IotHubError::invalid(format!("device {id:?}: {e}")))?;
        }
        Ok(DeviceSpec {
            id: id.to_owned(),
            primary_key: key,
            secondary_key: None,
        })
    }

    /// Parses a device file: one `ID[:KEY]` per line; blank lines and `#` comments ignored.
    pub fn parse_file(text: &str) -> Result<Vec<DeviceSpec>, IotHubError> {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|(n, l)| {
                DeviceSpec::parse(l)
                    .map_err(|e| IotHubError::invalid(format!("line {}: {e}", n + 1)))
            })
            .collect()
    }
}

/// Whether a device may connect (IoT Hub's `status`): a disabled device is refused at
/// CONNECT, and its connection is closed when it is disabled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceStatus {
    /// It may connect (the default).
    #[default]
    Enabled,
    /// It may not connect.
    Disabled,
}

impl DeviceStatus {
    /// IoT Hub's name: `enabled` or `disabled`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceStatus::Enabled => "enabled",
            DeviceStatus::Disabled => "disabled",
        }
    }
}

/// A registered device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", from = "DeviceRecord")]
pub struct Device {
    /// The device id.
    pub device_id: String,
    /// Changes each time a device with this id is created, so that feedback and messages of a
    /// deleted device cannot be mistaken for those of a new one with the same id.
    pub generation_id: String,
    /// Primary symmetric key (base64).
    pub primary_key: String,
    /// Secondary symmetric key (base64).
    pub secondary_key: String,
    /// IoT Hub's weak ETag of the identity: a new one with every change, so that a back end
    /// can update or delete only the version it read (`If-Match`).
    pub etag: String,
    /// Enabled or disabled.
    pub status: DeviceStatus,
    /// Why the status was set (free text from the back end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// When the status last changed (RFC 3339); `None` while it never did, as on IoT Hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_updated_time: Option<String>,
    /// Whether it is an IoT Edge device (`capabilities.iotEdge`): kept and reported only.
    #[serde(default)]
    pub iot_edge: bool,
    /// SAS keys (the default) or an X.509 certificate; the keys are kept either way (unused
    /// by an X.509 device), so that the stored form of SAS devices does not change.
    #[serde(default, skip_serializing_if = "Authentication::is_sas")]
    pub authentication: Authentication,
}

/// A device as stored, with defaults for what earlier versions did not store: records written
/// before ETags and status existed load as enabled devices whose ETag derives from their
/// generation id (stable across restarts until the device changes).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeviceRecord {
    device_id: String,
    generation_id: String,
    primary_key: String,
    secondary_key: String,
    #[serde(default)]
    etag: Option<String>,
    #[serde(default)]
    status: DeviceStatus,
    #[serde(default)]
    status_reason: Option<String>,
    #[serde(default)]
    status_updated_time: Option<String>,
    #[serde(default)]
    iot_edge: bool,
    #[serde(default)]
    authentication: Authentication,
}

impl From<DeviceRecord> for Device {
    fn from(r: DeviceRecord) -> Device {
        let etag = r
            .etag
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| STANDARD.encode(&r.generation_id));
        Device {
            device_id: r.device_id,
            generation_id: r.generation_id,
            primary_key: r.primary_key,
            secondary_key: r.secondary_key,
            etag,
            status: r.status,
            status_reason: r.status_reason,
            status_updated_time: r.status_updated_time,
            iot_edge: r.iot_edge,
            authentication: r.authentication,
        }
    }
}

/// What a back end sets on a device identity through IoT Hub's REST registry API (`PUT
/// /devices/{id}`): the rest (generation id, ETag, times) is the hub's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceUpdate {
    /// Primary key (base64); `None` generates one at creation and keeps the current one on
    /// update.
    pub primary_key: Option<String>,
    /// Secondary key, as `primary_key`.
    pub secondary_key: Option<String>,
    /// Enabled or disabled.
    pub status: DeviceStatus,
    /// Why.
    pub status_reason: Option<String>,
    /// `capabilities.iotEdge`.
    pub iot_edge: bool,
    /// `authentication.type` and thumbprints; `None` keeps the current one on update (SAS at
    /// creation).
    pub authentication: Option<Authentication>,
}

/// A device with what the hub knows of it at run time: what IoT Hub's REST API reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub device: Device,
    pub connected: bool,
    /// When it last connected or disconnected (since the hub started).
    pub connection_state_updated: Option<SystemTime>,
    /// When it last connected or sent something (since the hub started).
    pub last_activity: Option<SystemTime>,
    /// Messages in its cloud-to-device queue.
    pub queue_depth: usize,
}

/// Checks a device id as IoT Hub does: 1 to 128 ASCII characters, letters, digits and
/// `-.%_*?!(),:=@$'`.
///
/// ```
/// use mqstate_server::iothub::registry::check_device_id;
/// assert!(check_device_id("dev-1@site:a").is_ok());
/// assert!(check_device_id("").is_err());
/// assert!(check_device_id("a/b").is_err());
/// ```
pub fn check_device_id(id: &str) -> Result<(), IotHubError> {
    if id.is_empty() || id.len() > 128 {
        return Err(IotHubError::invalid(format!(
            "device id {id:?} must be 1 to 128 characters long"
        )));
    }
    if let Some(c) = id
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || "-.%_*?!(),:=@$'".contains(c)))
    {
        return Err(IotHubError::invalid(format!(
            "device id {id:?} contains {c:?}; ids are letters, digits and -.%_*?!(),:=@$'"
        )));
    }
    Ok(())
}

/// A random 32-byte key, base64-encoded.
pub fn generate_key() -> Result<String, IotHubError> {
    let mut key = [0u8; 32];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| IotHubError::io_message("the system random generator failed"))?;
    Ok(STANDARD.encode(key))
}

/// A new ETag: like IoT Hub's, the base64 of a number (here a unique tick count), which the
/// SDKs send back quoted in `If-Match`.
pub(crate) fn new_etag() -> String {
    STANDARD.encode(new_generation_id())
}

/// A new generation id: the creation time in ticks (100 ns since 0001-01-01, the form IoT Hub
/// uses) made unique with a counter.
pub(crate) fn new_generation_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // 0001-01-01 to 1970-01-01 in 100 ns ticks.
    const EPOCH_TICKS: u64 = 621_355_968_000_000_000;
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let ticks = EPOCH_TICKS
        .saturating_add(since.as_secs().saturating_mul(10_000_000))
        .saturating_add(u64::from(since.subsec_nanos() / 100))
        .saturating_add(COUNTER.fetch_add(1, Ordering::Relaxed));
    ticks.to_string()
}

impl Device {
    /// Creates a device from a spec, generating missing keys and a generation id.
    pub(crate) fn create(spec: &DeviceSpec) -> Result<Device, IotHubError> {
        check_device_id(&spec.id)?;
        let key = |k: &Option<String>| -> Result<String, IotHubError> {
            match k {
                Some(k) => {
                    sas::decode_key(k)
                        .map_err(|e| IotHubError::invalid(format!("device {:?}: {e}", spec.id)))?;
                    Ok(k.trim().to_owned())
                }
                None => generate_key(),
            }
        };
        Ok(Device {
            device_id: spec.id.clone(),
            generation_id: new_generation_id(),
            primary_key: key(&spec.primary_key)?,
            secondary_key: key(&spec.secondary_key)?,
            etag: new_etag(),
            status: DeviceStatus::Enabled,
            status_reason: None,
            status_updated_time: None,
            iot_edge: false,
            authentication: Authentication::Sas,
        })
    }

    /// Creates a device as IoT Hub's REST API does: keys generated when absent, the status
    /// and capabilities given.
    pub(crate) fn create_with(id: &str, update: &DeviceUpdate) -> Result<Device, IotHubError> {
        let mut device = Device::create(&DeviceSpec {
            id: id.to_owned(),
            primary_key: update.primary_key.clone(),
            secondary_key: update.secondary_key.clone(),
        })?;
        device.status = update.status;
        device.status_reason = update.status_reason.clone();
        device.iot_edge = update.iot_edge;
        device.authentication = update.authentication.clone().unwrap_or_default();
        Ok(device)
    }

    /// This device with `update` applied and a new ETag (the status time moves when the
    /// status changes). Keys not given are kept.
    pub(crate) fn updated(&self, update: &DeviceUpdate) -> Result<Device, IotHubError> {
        let mut device = self.clone();
        for (given, key) in [
            (&update.primary_key, &mut device.primary_key),
            (&update.secondary_key, &mut device.secondary_key),
        ] {
            if let Some(k) = given {
                sas::decode_key(k).map_err(|e| {
                    IotHubError::invalid(format!("device {:?}: {e}", self.device_id))
                })?;
                k.trim().clone_into(key);
            }
        }
        if device.status != update.status {
            device.status = update.status;
            device.status_updated_time = Some(super::message::format_time(SystemTime::now()));
        }
        device.status_reason = update.status_reason.clone();
        device.iot_edge = update.iot_edge;
        if let Some(auth) = &update.authentication {
            device.authentication = auth.clone();
        }
        device.etag = new_etag();
        Ok(device)
    }

    /// Whether an `If-Match` header allows changing this device: absent, `*` (quoted or
    /// not, as the SDKs send it) or this device's ETag (quoted, possibly weak `W/"..."`, one
    /// of a comma-separated list).
    pub(crate) fn etag_matches(&self, if_match: Option<&str>) -> bool {
        let Some(header) = if_match else {
            return true;
        };
        header.split(',').any(|tag| {
            let tag = tag.trim();
            let tag = tag.strip_prefix("W/").unwrap_or(tag);
            let tag = tag
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(tag);
            tag == "*" || tag == self.etag
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn device_files() {
        let devices = DeviceSpec::parse_file("# lab\n\na\nb:AAECAwQFBgcICQoLDA0ODw==\n").unwrap();
        assert_eq!(devices.len(), 2);
        let e = DeviceSpec::parse_file("a\nb:notbase64!\n").unwrap_err();
        assert!(e.to_string().starts_with("line 2: device \"b\""), "{e}");
    }

    #[test]
    fn generation_ids_differ() {
        let spec = DeviceSpec::parse("d").unwrap();
        let (a, b) = (
            Device::create(&spec).unwrap(),
            Device::create(&spec).unwrap(),
        );
        assert_ne!(a.generation_id, b.generation_id);
        assert_ne!(a.primary_key, b.primary_key);
        assert_ne!(a.etag, b.etag);
    }

    #[test]
    fn records_without_etag_or_status_load_with_defaults() {
        let old = r#"{"deviceId":"d","generationId":"638000000000000000",
            "primaryKey":"AAECAwQFBgcICQoLDA0ODw==","secondaryKey":"AAECAwQFBgcICQoLDA0ODw=="}"#;
        let device: Device = serde_json::from_str(old).unwrap();
        assert_eq!(device.status, DeviceStatus::Enabled);
        assert!(!device.etag.is_empty());
        let again: Device = serde_json::from_str(old).unwrap();
        assert_eq!(device.etag, again.etag, "stable across loads");
        let round: Device = serde_json::from_str(&serde_json::to_string(&device).unwrap()).unwrap();
        assert_eq!(round, device);
    }

    #[test]
    fn updates_change_the_etag_and_keep_keys_not_given() {
        let d = Device::create(&DeviceSpec::parse("d").unwrap()).unwrap();
        let update = DeviceUpdate {
            status: DeviceStatus::Disabled,
            status_reason: Some("maintenance".into()),
            ..DeviceUpdate::default()
        };
        let u = d.updated(&update).unwrap();
        assert_ne!(u.etag, d.etag);
        assert_eq!(
            (u.primary_key.as_str(), u.status),
            (d.primary_key.as_str(), DeviceStatus::Disabled)
        );
        assert!(u.status_updated_time.is_some());
        let bad = DeviceUpdate {
            primary_key: Some("short".into()),
            ..DeviceUpdate::default()
        };
        assert!(d.updated(&bad).is_err());
    }

    #[test]
    fn if_match_forms() {
        let d = Device::create(&DeviceSpec::parse("d").unwrap()).unwrap();
        let quoted = format!("\"{}\"", d.etag);
        for ok in [
            None,
            Some("*"),
            Some("\"*\""),
            Some(quoted.as_str()),
            Some(d.etag.as_str()),
        ] {
            assert!(d.etag_matches(ok), "{ok:?}");
        }
        let weak = format!("W/{quoted}");
        assert!(d.etag_matches(Some(&weak)));
        assert!(!d.etag_matches(Some("\"AAAA\"")));
    }
}
