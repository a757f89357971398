//! X.509 device identities, as the registry keeps them and as a connection presents them: a
//! device's [`Authentication`] (`sas`, `selfSigned` thumbprints, `certificateAuthority`), the
//! [`ClientCert`] a transport read from its TLS handshake, and the one check that decides
//! whether that certificate is the device's ([`ClientCert::authenticates`]). No TLS here:
//! the transports parse and verify certificates (`iothub::client_cert`); this module only
//! compares what they found with the registry (docs/iothub.md, "X.509 devices").

use serde::{Deserialize, Serialize};

use super::error::IotHubError;

/// How a device authenticates: IoT Hub's `authentication.type`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Authentication {
    /// Symmetric keys: SAS tokens signed with the device's primary or secondary key.
    #[default]
    Sas,
    /// A self-signed (or any) certificate, known by its thumbprint: the SHA-1 or SHA-256 of
    /// its DER, upper-case hex (IoT Hub accepts either length).
    #[serde(rename_all = "camelCase")]
    SelfSigned {
        /// The primary thumbprint.
        primary_thumbprint: String,
        /// The secondary thumbprint, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secondary_thumbprint: Option<String>,
    },
    /// A certificate that chains to a CA the operator gave (`--iothub-ca-file`), whose
    /// subject CN is the device id.
    CertificateAuthority,
}

impl Authentication {
    /// IoT Hub's name of the type: `sas`, `selfSigned` or `certificateAuthority`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Authentication::Sas => "sas",
            Authentication::SelfSigned { .. } => "selfSigned",
            Authentication::CertificateAuthority => "certificateAuthority",
        }
    }

    /// Whether the device authenticates with SAS keys (the default).
    pub fn is_sas(&self) -> bool {
        *self == Authentication::Sas
    }

    /// Whether the device authenticates with a TLS client certificate.
    pub fn is_x509(&self) -> bool {
        !self.is_sas()
    }

    /// A self-signed authentication from the REST body's thumbprints: the primary one is
    /// required (IoT Hub answers 400 without it); both are checked as SHA-1 (40 hex digits) or
    /// SHA-256 (64) and stored upper-case without separators.
    pub fn self_signed(
        primary: Option<&str>,
        secondary: Option<&str>,
    ) -> Result<Authentication, IotHubError> {
        fn given(t: Option<&str>) -> Option<&str> {
            t.map(str::trim).filter(|t| !t.is_empty())
        }
        let primary = given(primary).ok_or_else(|| {
            IotHubError::invalid(
                "authentication type \"selfSigned\" needs x509Thumbprint.primaryThumbprint",
            )
        })?;
        Ok(Authentication::SelfSigned {
            primary_thumbprint: normalize_thumbprint(primary)?,
            secondary_thumbprint: given(secondary).map(normalize_thumbprint).transpose()?,
        })
    }
}

/// A thumbprint as stored: upper-case hex, `:` and spaces removed; 40 (SHA-1) or 64 (SHA-256)
/// digits.
///
/// ```
/// use mqstate_server::iothub::x509::normalize_thumbprint;
/// assert!(normalize_thumbprint(&"a".repeat(40)).is_ok());
/// assert_eq!(normalize_thumbprint(&"a".repeat(64)).unwrap(), "A".repeat(64));
/// assert!(normalize_thumbprint("abc").is_err());
/// assert!(normalize_thumbprint(&"g".repeat(40)).is_err());
/// ```
pub fn normalize_thumbprint(text: &str) -> Result<String, IotHubError> {
    let hex: String = text
        .chars()
        .filter(|c| *c != ':' && !c.is_whitespace())
        .collect::<String>()
        .to_ascii_uppercase();
    if !(hex.len() == 40 || hex.len() == 64) || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(IotHubError::invalid(format!(
            "thumbprint {:?} is not the hex of a SHA-1 (40 digits) or SHA-256 (64 digits)",
            crate::untrusted::cut(text)
        )));
    }
    Ok(hex)
}

/// What a connection's TLS client certificate says, as the transport read it: its
/// thumbprints, its subject CN, and whether it is valid now and chains to the operator's CAs.
/// The handshake already proved the peer holds the certificate's private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// SHA-1 of the DER, upper-case hex.
    pub sha1: String,
    /// SHA-256 of the DER, upper-case hex.
    pub sha256: String,
    /// The subject's common name, if it has one.
    pub common_name: Option<String>,
    /// `Ok` when the certificate is within its validity period; else why not.
    pub valid_now: Result<(), String>,
    /// `Ok` when it chains to a CA of `--iothub-ca-file` (signatures, validity, usage); else
    /// why not (including "no CA file was given").
    pub chains_to_ca: Result<(), String>,
}

impl ClientCert {
    /// Whether this certificate authenticates `device_id`, registered with `auth`; the error
    /// says why not, for the refusal (IoT Hub's 401 / CONNACK 5 / `amqp:unauthorized-access`).
    pub fn authenticates(&self, device_id: &str, auth: &Authentication) -> Result<(), String> {
        match auth {
            Authentication::Sas => Err(format!(
                "device {device_id:?} authenticates with SAS keys, not a certificate"
            )),
            Authentication::SelfSigned {
                primary_thumbprint,
                secondary_thumbprint,
            } => {
                self.valid_now
                    .clone()
                    .map_err(|e| format!("client certificate: {e}"))?;
                let matches = |t: &String| *t == self.sha1 || *t == self.sha256;
                if matches(primary_thumbprint) || secondary_thumbprint.as_ref().is_some_and(matches)
                {
                    Ok(())
                } else {
                    Err(format!(
                        "the client certificate (SHA-1 {}, SHA-256 {}) matches neither thumbprint of device {device_id:?}",
                        self.sha1, self.sha256
                    ))
                }
            }
            Authentication::CertificateAuthority => {
                self.chains_to_ca
                    .clone()
                    .map_err(|e| format!("client certificate: {e}"))?;
                match self.common_name.as_deref() {
                    Some(cn) if cn == device_id => Ok(()),
                    Some(cn) => Err(format!(
                        "the client certificate's subject CN {:?} is not the device id {device_id:?}",
                        crate::untrusted::cut(cn)
                    )),
                    None => Err("the client certificate's subject has no CN".to_owned()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cert(cn: &str) -> ClientCert {
        ClientCert {
            sha1: "A".repeat(40),
            sha256: "B".repeat(64),
            common_name: Some(cn.to_owned()),
            valid_now: Ok(()),
            chains_to_ca: Err("no CA file was given".into()),
        }
    }

    #[test]
    fn self_signed_by_either_thumbprint_and_either_digest() {
        let c = cert("d");
        let by = |p: &str, s: Option<&str>| Authentication::self_signed(Some(p), s).unwrap();
        assert!(c.authenticates("d", &by(&"a".repeat(40), None)).is_ok());
        assert!(c.authenticates("d", &by(&"b".repeat(64), None)).is_ok());
        assert!(
            c.authenticates("d", &by(&"C".repeat(40), Some(&"b".repeat(64))))
                .is_ok()
        );
        assert!(c.authenticates("d", &by(&"C".repeat(40), None)).is_err());
        assert!(c.authenticates("d", &Authentication::Sas).is_err());
        let expired = ClientCert {
            valid_now: Err("expired".into()),
            ..cert("d")
        };
        assert!(
            expired
                .authenticates("d", &by(&"a".repeat(40), None))
                .is_err()
        );
        assert!(Authentication::self_signed(None, None).is_err());
    }

    #[test]
    fn certificate_authority_needs_the_chain_and_the_cn() {
        let auth = Authentication::CertificateAuthority;
        assert!(cert("d").authenticates("d", &auth).is_err(), "no CA");
        let chained = ClientCert {
            chains_to_ca: Ok(()),
            ..cert("d")
        };
        assert!(chained.authenticates("d", &auth).is_ok());
        assert!(chained.authenticates("e", &auth).is_err());
    }

    #[test]
    fn stored_form() {
        let auth = Authentication::self_signed(Some(&"ab".repeat(20)), None).unwrap();
        let json = serde_json::to_string(&auth).unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"type":"selfSigned","primaryThumbprint":"{}"}}"#,
                "AB".repeat(20)
            )
        );
        assert_eq!(serde_json::from_str::<Authentication>(&json).unwrap(), auth);
    }
}
