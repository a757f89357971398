//! The device registry: device ids, their symmetric keys and generation ids.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use super::error::IotHubError;
use super::sas;

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

/// A registered device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
        .map_err(|_| IotHubError::Io("the system random generator failed".into()))?;
    Ok(STANDARD.encode(key))
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
    }
}
