//! Shared access policies: what back ends authenticate with, as on IoT Hub.
//!
//! A hub has five policies, each with a primary and a secondary key and a set of rights
//! (IoT Hub's defaults): `iothubowner` (RegistryWrite, ServiceConnect, DeviceConnect),
//! `service` (ServiceConnect), `device` (DeviceConnect), `registryRead` (RegistryRead) and
//! `registryReadWrite` (RegistryWrite). RegistryWrite includes RegistryRead.
//!
//! A back end signs a service token with a policy key: `SharedAccessSignature
//! sr={host}&sig=...&se=...&skn={policy}` (the same HMAC-SHA256 as device tokens, see
//! [`super::sas`]). The REST registry API, the AMQP endpoint and the admin API check it with
//! [`Policies::authenticate`], then the right the operation needs with
//! [`ServiceGrant::require`].
//!
//! The keys are generated at start, or read from `--iothub-policies-file`; with a data dir
//! they are kept in `DIR/iothub-policies.json` (mode 0600), so connection strings survive a
//! restart. The file is a JSON array of policies:
//!
//! ```json
//! [{"keyName": "iothubowner", "rights": ["RegistryWrite", "ServiceConnect", "DeviceConnect"],
//!   "primaryKey": "base64...", "secondaryKey": "base64..."}]
//! ```

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::error::IotHubError;
use super::registry::generate_key;
use super::sas::{self, SasToken};
use crate::untrusted::cut;

/// The file of the policies in a data dir.
pub const POLICIES_FILE: &str = "iothub-policies.json";

/// The policy `mqstate iothub connection-string` uses by default (all rights).
pub const OWNER_POLICY: &str = "iothubowner";

/// A permission of a shared access policy (IoT Hub's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Right {
    /// Read the device registry.
    RegistryRead,
    /// Read and write the device registry.
    RegistryWrite,
    /// Send cloud-to-device messages, receive feedback, purge queues.
    ServiceConnect,
    /// Connect as any device (tokens for `{host}/devices/{id}`).
    DeviceConnect,
}

impl Right {
    /// Whether holding `self` grants `wanted` (RegistryWrite includes RegistryRead).
    fn grants(self, wanted: Right) -> bool {
        self == wanted || (self == Right::RegistryWrite && wanted == Right::RegistryRead)
    }
}

/// One shared access policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SharedAccessPolicy {
    /// Its name (`skn` of the tokens signed with it).
    pub key_name: String,
    /// What tokens signed with it may do.
    pub rights: Vec<Right>,
    /// Primary key (base64 of 16 to 64 bytes).
    pub primary_key: String,
    /// Secondary key (base64).
    pub secondary_key: String,
}

/// What a valid service token may do, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceGrant {
    /// The policy that signed it.
    pub policy: String,
    /// The policy's rights.
    pub rights: Vec<Right>,
    /// The token's expiry.
    pub expires_at: SystemTime,
}

impl ServiceGrant {
    /// Checks that the token's policy has `right`.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use mqstate_server::iothub::policies::{Right, ServiceGrant};
    ///
    /// let grant = ServiceGrant {
    ///     policy: "registryReadWrite".into(),
    ///     rights: vec![Right::RegistryWrite],
    ///     expires_at: SystemTime::now(),
    /// };
    /// assert!(grant.require(Right::RegistryRead).is_ok());
    /// assert!(grant.require(Right::ServiceConnect).is_err());
    /// ```
    pub fn require(&self, right: Right) -> Result<(), IotHubError> {
        if self.rights.iter().any(|r| r.grants(right)) {
            Ok(())
        } else {
            Err(IotHubError::Unauthorized(format!(
                "shared access policy {:?} does not have the {right:?} right",
                self.policy
            )))
        }
    }
}

/// The policies of a hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policies {
    policies: Vec<SharedAccessPolicy>,
}

impl Policies {
    /// IoT Hub's five default policies with random keys.
    pub fn generate() -> Result<Policies, IotHubError> {
        use Right::*;
        let defaults: [(&str, &[Right]); 5] = [
            (
                OWNER_POLICY,
                &[RegistryWrite, ServiceConnect, DeviceConnect],
            ),
            ("service", &[ServiceConnect]),
            ("device", &[DeviceConnect]),
            ("registryRead", &[RegistryRead]),
            ("registryReadWrite", &[RegistryWrite]),
        ];
        let policies = defaults
            .iter()
            .map(|(name, rights)| {
                Ok(SharedAccessPolicy {
                    key_name: (*name).to_owned(),
                    rights: rights.to_vec(),
                    primary_key: generate_key()?,
                    secondary_key: generate_key()?,
                })
            })
            .collect::<Result<_, IotHubError>>()?;
        Ok(Policies { policies })
    }

    /// Parses and checks a policies file's JSON: names unique and non-empty, keys valid, at
    /// least one right each.
    ///
    /// ```
    /// use mqstate_server::iothub::policies::Policies;
    /// let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    /// let json = format!(r#"[{{"keyName":"ops","rights":["ServiceConnect"],
    ///     "primaryKey":"{key}","secondaryKey":"{key}"}}]"#);
    /// assert_eq!(Policies::parse(&json).unwrap().get("ops").unwrap().rights.len(), 1);
    /// assert!(Policies::parse("[]").is_err());
    /// ```
    pub fn parse(json: &str) -> Result<Policies, IotHubError> {
        check(json)
            .map(|policies| Policies { policies })
            .map_err(|e| IotHubError::Config(format!("shared access policies: {e}")))
    }

    /// The policies the hub starts with: from `file` when given (it must exist; a warning
    /// when users other than its owner can read it, as for password files), else from
    /// `data_dir`'s [`POLICIES_FILE`] (written, mode 0600, with generated keys the first
    /// time; made 0600 if an older version left it readable by others), else generated.
    pub fn load(file: Option<&Path>, data_dir: Option<&Path>) -> Result<Policies, IotHubError> {
        let fail = |path: &Path, e: &dyn std::fmt::Display| {
            IotHubError::Config(format!("shared access policies {}: {e}", path.display()))
        };
        let parse = |path: &Path, text: &str| -> Result<Policies, IotHubError> {
            check(text)
                .map(|policies| Policies { policies })
                .map_err(|e| fail(path, &e))
        };
        if let Some(file) = file {
            let text = std::fs::read_to_string(file).map_err(|e| fail(file, &e))?;
            if let Some(warning) = crate::security::loose_permissions(file) {
                tracing::warn!("shared access policies file {warning}");
            }
            return parse(file, &text);
        }
        let Some(dir) = data_dir else {
            return Policies::generate();
        };
        // The hub may open its data dir before the store does (or without it): created
        // private here too.
        crate::persist::private::create_data_dir(dir)?;
        let path: PathBuf = dir.join(POLICIES_FILE);
        match std::fs::File::open(&path) {
            Ok(mut opened) => {
                crate::persist::private::tighten_file(&opened, &path)
                    .map_err(|e| fail(&path, &e))?;
                let mut text = String::new();
                std::io::Read::read_to_string(&mut opened, &mut text)
                    .map_err(|e| fail(&path, &e))?;
                return parse(&path, &text);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(&path, &e)),
        }
        let policies = Policies::generate()?;
        let json = serde_json::to_string_pretty(&policies.policies)
            .map_err(|e| IotHubError::io("shared access policies", e))?;
        crate::security::write_private_file(&path, json.as_bytes()).map_err(|e| {
            let message = format!("shared access policies {}: {e}", path.display());
            IotHubError::DataDir(crate::persist::PersistError::caused(message, e))
        })?;
        Ok(policies)
    }

    /// The policy named `name`.
    pub fn get(&self, name: &str) -> Option<&SharedAccessPolicy> {
        self.policies.iter().find(|p| p.key_name == name)
    }

    /// Every policy, in file order.
    pub fn iter(&self) -> impl Iterator<Item = &SharedAccessPolicy> {
        self.policies.iter()
    }

    /// Checks a service token for the hub `hostname`: well-formed, naming a policy (`skn`)
    /// of this hub, for the hub's host name (`sr`, compared case-insensitively; a token
    /// scoped to a path below it, like `{host}/devices/d1`, does not cover the service
    /// endpoints), not expired at `now`, signed with the policy's primary or secondary key.
    /// Every refusal is [`IotHubError::Unauthorized`] with the reason.
    pub fn authenticate(
        &self,
        token: &str,
        hostname: &str,
        now: SystemTime,
    ) -> Result<ServiceGrant, IotHubError> {
        self.authenticate_for(token, hostname, now)
    }

    /// [`Policies::authenticate`] for a token that must be for `resource` exactly: the hub's
    /// host name (service tokens) or `{host}/devices/{id}` (a policy token a device connects
    /// with, which needs DeviceConnect).
    pub fn authenticate_for(
        &self,
        token: &str,
        resource: &str,
        now: SystemTime,
    ) -> Result<ServiceGrant, IotHubError> {
        let unauthorized = |why: String| IotHubError::Unauthorized(why);
        let parsed = SasToken::parse(token).map_err(|e| unauthorized(e.to_string()))?;
        let Some(name) = parsed.key_name.as_deref() else {
            return Err(unauthorized(
                "the SAS token names no shared access policy (skn); service tokens are \
                 signed with a policy key"
                    .into(),
            ));
        };
        let Some(policy) = self.get(name) else {
            return Err(unauthorized(format!(
                "no shared access policy named {:?}",
                cut(name)
            )));
        };
        let scope = parsed
            .resource
            .trim_start_matches("https://")
            .trim_end_matches('/');
        if !scope.eq_ignore_ascii_case(resource) {
            return Err(unauthorized(format!(
                "the SAS token is for {:?}, not {:?}",
                cut(&parsed.resource),
                cut(resource)
            )));
        }
        if parsed.expires_at() <= now {
            return Err(unauthorized(format!(
                "the SAS token expired at {}",
                humantime::format_rfc3339(parsed.expires_at())
            )));
        }
        if !sas::signed_with(&parsed, &[&policy.primary_key, &policy.secondary_key])? {
            return Err(unauthorized(format!(
                "the SAS token's signature does not match the keys of policy {name:?}"
            )));
        }
        Ok(ServiceGrant {
            policy: policy.key_name.clone(),
            rights: policy.rights.clone(),
            expires_at: parsed.expires_at(),
        })
    }
}

/// Parses a policies file's JSON and checks it; the error says what is wrong.
fn check(json: &str) -> Result<Vec<SharedAccessPolicy>, String> {
    let policies: Vec<SharedAccessPolicy> =
        serde_json::from_str(json).map_err(|e| e.to_string())?;
    if policies.is_empty() {
        return Err("the file lists no policy".into());
    }
    for (n, p) in policies.iter().enumerate() {
        let name = &p.key_name;
        if name.is_empty() || name.contains(['&', '=', ';', ' ']) {
            return Err(format!("{name:?} is not a valid policy name"));
        }
        if policies.iter().take(n).any(|q| &q.key_name == name) {
            return Err(format!("policy {name:?} appears twice"));
        }
        if p.rights.is_empty() {
            return Err(format!("policy {name:?} has no rights"));
        }
        for key in [&p.primary_key, &p.secondary_key] {
            sas::decode_key(key).map_err(|e| format!("policy {name:?}: {e}"))?;
        }
    }
    Ok(policies)
}

/// A service token for `hostname` signed with `policy`'s primary key, valid until `expiry`:
/// what the SDKs build from a connection string.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use mqstate_server::iothub::policies::{service_token, Policies, Right};
///
/// let policies = Policies::generate().unwrap();
/// let owner = policies.get("iothubowner").unwrap();
/// let token = service_token("localhost", owner, SystemTime::now() + Duration::from_secs(60)).unwrap();
/// let grant = policies.authenticate(&token, "localhost", SystemTime::now()).unwrap();
/// grant.require(Right::ServiceConnect).unwrap();
/// ```
pub fn service_token(
    hostname: &str,
    policy: &SharedAccessPolicy,
    expiry: SystemTime,
) -> Result<String, IotHubError> {
    let token = sas::generate(hostname, &policy.primary_key, expiry)?;
    Ok(format!("{token}&skn={}", policy.key_name))
}

/// The service connection string of `policy` for `hostname`.
pub fn connection_string(hostname: &str, policy: &SharedAccessPolicy) -> String {
    format!(
        "HostName={hostname};SharedAccessKeyName={};SharedAccessKey={}",
        policy.key_name, policy.primary_key
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::*;

    #[test]
    fn tokens_are_checked_for_policy_host_expiry_and_signature() {
        let policies = Policies::generate().unwrap();
        let now = SystemTime::now();
        let later = now + Duration::from_secs(60);
        let owner = policies.get(OWNER_POLICY).unwrap().clone();
        let token = service_token("hub.local", &owner, later).unwrap();
        assert!(policies.authenticate(&token, "HUB.local", now).is_ok());
        let refused = |token: &str, host: &str, at: SystemTime| {
            policies
                .authenticate(token, host, at)
                .unwrap_err()
                .to_string()
        };
        assert!(refused(&token, "other", now).contains("not \"other\""));
        assert!(refused(&token, "hub.local", later).contains("expired"));
        let mut wrong = owner.clone();
        wrong.primary_key = generate_key().unwrap();
        let forged = service_token("hub.local", &wrong, later).unwrap();
        assert!(refused(&forged, "hub.local", now).contains("signature"));
        let device = sas::generate("hub.local/devices/d", &owner.primary_key, later).unwrap();
        assert!(refused(&device, "hub.local", now).contains("skn"));
        let unknown = format!(
            "{}&skn=nobody",
            sas::generate("hub.local", &owner.primary_key, later).unwrap()
        );
        assert!(refused(&unknown, "hub.local", now).contains("no shared access policy"));
        // The secondary key signs too.
        let mut secondary = owner.clone();
        secondary.primary_key = owner.secondary_key.clone();
        let token = service_token("hub.local", &secondary, later).unwrap();
        assert!(policies.authenticate(&token, "hub.local", now).is_ok());
    }

    #[test]
    fn rights_follow_iot_hub() {
        let policies = Policies::generate().unwrap();
        let now = SystemTime::now();
        let grant = |name: &str| {
            let token = service_token(
                "h",
                policies.get(name).unwrap(),
                now + Duration::from_secs(9),
            )
            .unwrap();
            policies.authenticate(&token, "h", now).unwrap()
        };
        assert!(grant("registryRead").require(Right::RegistryWrite).is_err());
        assert!(
            grant("registryReadWrite")
                .require(Right::RegistryRead)
                .is_ok()
        );
        assert!(grant("service").require(Right::RegistryRead).is_err());
        let e = grant("registryRead")
            .require(Right::ServiceConnect)
            .unwrap_err();
        assert!(e.to_string().contains("ServiceConnect"), "{e}");
        for right in [
            Right::RegistryRead,
            Right::RegistryWrite,
            Right::ServiceConnect,
            Right::DeviceConnect,
        ] {
            assert!(grant(OWNER_POLICY).require(right).is_ok());
        }
    }

    #[test]
    fn a_data_dir_keeps_the_keys() {
        let dir = tempfile::tempdir().unwrap();
        let first = Policies::load(None, Some(dir.path())).unwrap();
        let again = Policies::load(None, Some(dir.path())).unwrap();
        assert_eq!(first, again);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(POLICIES_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(dir.path().join(POLICIES_FILE), "[{\"keyName\":\"x\"}]").unwrap();
        let e = Policies::load(None, Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(e.contains(POLICIES_FILE), "{e}");
        let e = Policies::load(Some(&dir.path().join("missing.json")), None).unwrap_err();
        assert!(e.to_string().contains("missing.json"), "{e}");
    }
}
