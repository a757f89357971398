//! Shared access signature (SAS) tokens as IoT Hub devices use them:
//! `SharedAccessSignature sr={URL-encoded resource}&sig={URL-encoded base64 signature}&se={expiry}`
//! where the signature is HMAC-SHA256, keyed with the base64-decoded device key, of the
//! URL-encoded resource, a newline and the expiry (seconds since the Unix epoch). The device
//! SDKs (C, Python, Node) sign the `sr` text exactly as they put it in the token, so that is what
//! is verified, after checking that it decodes to the expected resource.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use percent_encoding::percent_decode_str;
use ring::hmac;

use super::error::IotHubError;
use crate::untrusted::cut;

/// The fields of a parsed token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SasToken {
    /// The `sr` field as written (URL-encoded resource URI).
    pub resource_encoded: String,
    /// The decoded resource URI (`{host}/devices/{deviceId}`).
    pub resource: String,
    /// The signature bytes (decoded from URL-encoded base64).
    pub signature: Vec<u8>,
    /// Expiry, seconds since the Unix epoch.
    pub expiry: u64,
    /// The `skn` field (a shared access policy name), if present.
    pub key_name: Option<String>,
}

/// The resource URI of a device: `{hostname}/devices/{deviceId}`.
pub fn device_resource(hostname: &str, device_id: &str) -> String {
    format!("{hostname}/devices/{device_id}")
}

/// Builds a token for `resource` signed with `key_base64`, valid until `expiry`.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use mqstate_server::iothub::sas;
///
/// let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="; // base64 of 0..32
/// let expiry = SystemTime::now() + Duration::from_secs(3600);
/// let token = sas::generate("localhost/devices/d1", key, expiry).unwrap();
/// assert!(token.starts_with("SharedAccessSignature sr=localhost%2Fdevices%2Fd1&sig="));
/// sas::validate(&token, "localhost/devices/d1", &[key], SystemTime::now()).unwrap();
/// ```
pub fn generate(
    resource: &str,
    key_base64: &str,
    expiry: SystemTime,
) -> Result<String, IotHubError> {
    decode_key(key_base64)?;
    let se = expiry
        .duration_since(UNIX_EPOCH)
        .map_err(|_| IotHubError::invalid("the token expiry is before 1970"))?
        .as_secs();
    // Signed by the core's token code, the same that the device client uses.
    mqstate::iothub::sas::token(resource, key_base64, se, None)
        .map_err(|e| IotHubError::invalid(e.to_string()))
}

/// Decodes a base64 device key; it must be 16 to 64 bytes long, as IoT Hub requires.
pub fn decode_key(key_base64: &str) -> Result<Vec<u8>, IotHubError> {
    let key = STANDARD
        .decode(key_base64.trim())
        .map_err(|e| IotHubError::invalid(format!("the key is not valid base64: {e}")))?;
    if !(16..=64).contains(&key.len()) {
        return Err(IotHubError::invalid(format!(
            "the key is {} bytes long; IoT Hub keys are 16 to 64 bytes (base64-encoded)",
            key.len()
        )));
    }
    Ok(key)
}

/// Parses a token; fields may come in any order.
///
/// ```
/// use mqstate_server::iothub::sas::SasToken;
/// let t = SasToken::parse("SharedAccessSignature se=10&sr=h%2Fdevices%2Fd&sig=AAAA").unwrap();
/// assert_eq!((t.resource.as_str(), t.expiry), ("h/devices/d", 10));
/// assert!(SasToken::parse("Bearer x").is_err());
/// ```
pub fn parse_token(token: &str) -> Result<SasToken, IotHubError> {
    SasToken::parse(token)
}

impl SasToken {
    /// Parses `SharedAccessSignature sr=...&sig=...&se=...[&skn=...]`.
    pub fn parse(token: &str) -> Result<SasToken, IotHubError> {
        let bad = |why: &str| Err(IotHubError::invalid(format!("SAS token: {why}")));
        let Some(fields) = token.trim().strip_prefix("SharedAccessSignature ") else {
            return bad("does not start with \"SharedAccessSignature \"");
        };
        let (mut sr, mut sig, mut se, mut skn) = (None, None, None, None);
        for field in fields.split('&') {
            let Some((name, value)) = field.split_once('=') else {
                return bad(&format!("field {:?} has no '='", cut(field)));
            };
            let slot = match name {
                "sr" => &mut sr,
                "sig" => &mut sig,
                "se" => &mut se,
                "skn" => &mut skn,
                _ => return bad(&format!("unknown field {:?}", cut(name))),
            };
            if slot.replace(value).is_some() {
                return bad(&format!("field {name:?} appears twice"));
            }
        }
        let (Some(sr), Some(sig), Some(se)) = (sr, sig, se) else {
            return bad("sr, sig and se are all required");
        };
        let decode = |text: &str| {
            percent_decode_str(text)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| {
                    IotHubError::invalid(format!(
                        "SAS token: {:?} is not URL-encoded UTF-8",
                        cut(text)
                    ))
                })
        };
        let resource = decode(sr)?;
        let signature = STANDARD
            .decode(decode(sig)?)
            .map_err(|_| IotHubError::invalid("SAS token: sig is not base64"))?;
        let Ok(expiry) = se.parse::<u64>() else {
            return bad(&format!("se {:?} is not a number of seconds", cut(se)));
        };
        if super::time::from_unix_secs(expiry).is_none() {
            return bad(&format!("se {expiry} is after the year 9999"));
        }
        Ok(SasToken {
            resource_encoded: sr.to_owned(),
            resource,
            signature,
            expiry,
            key_name: skn.map(decode).transpose()?,
        })
    }

    /// When the token expires: [`SasToken::parse`] refuses an expiry after the year 9999, and a
    /// token built by hand with a later one expires then.
    pub fn expires_at(&self) -> SystemTime {
        super::time::from_unix_secs(self.expiry).unwrap_or_else(super::time::latest)
    }
}

/// Validates a device token: well-formed, for `resource` (compared case-insensitively, like
/// host names), not expired at `now`, signed with one of `keys_base64`. Returns the parsed token.
pub fn validate(
    token: &str,
    resource: &str,
    keys_base64: &[&str],
    now: SystemTime,
) -> Result<SasToken, IotHubError> {
    let parsed = SasToken::parse(token)?;
    if !parsed.resource.eq_ignore_ascii_case(resource) {
        return Err(IotHubError::invalid(format!(
            "SAS token is for {:?}, not {:?}",
            cut(&parsed.resource),
            cut(resource)
        )));
    }
    if parsed.key_name.is_some() {
        return Err(IotHubError::invalid(
            "SAS token names a shared access policy (skn); devices sign with their own key",
        ));
    }
    if parsed.expires_at() <= now {
        return Err(IotHubError::invalid(format!(
            "SAS token expired at {}",
            humantime::format_rfc3339(parsed.expires_at())
        )));
    }
    if signed_with(&parsed, keys_base64)? {
        return Ok(parsed);
    }
    Err(IotHubError::invalid(
        "SAS token signature does not match the device's keys",
    ))
}

/// Whether `token` is signed with one of `keys_base64` (HMAC-SHA256 of the `sr` text as
/// written, a newline and `se`; constant-time comparison). Only the signature is checked.
pub(crate) fn signed_with(token: &SasToken, keys_base64: &[&str]) -> Result<bool, IotHubError> {
    let message = format!("{}\n{}", token.resource_encoded, token.expiry);
    for key in keys_base64 {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &decode_key(key)?);
        if hmac::verify(&key, message.as_bytes(), &token.signature).is_ok() {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    #[test]
    fn known_signature() {
        // Computed independently: printf 'h%%2Fdevices%%2Fd\n1700000000' |
        //   openssl dgst -sha256 -mac HMAC -macopt hexkey:000102...1f -binary | base64
        let token = generate(
            "h/devices/d",
            KEY,
            UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        )
        .unwrap();
        let parsed = SasToken::parse(&token).unwrap();
        assert_eq!(parsed.resource_encoded, "h%2Fdevices%2Fd");
        assert_eq!(parsed.expiry, 1_700_000_000);
        assert_eq!(
            STANDARD.encode(&parsed.signature),
            "dgiFOjYTedppDJb0qQ//32vwY3uKzPWn1DZN/13zZac="
        );
        assert!(token.contains("&sig=dgiFOjYTedppDJb0qQ%2F%2F32vwY3uKzPWn1DZN%2F13zZac%3D&"));
    }

    #[test]
    fn refusals_say_why() {
        let now = SystemTime::now();
        let token = generate("h/devices/d", KEY, now + Duration::from_secs(60)).unwrap();
        let other = "AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let e = validate(&token, "h/devices/d", &[other], now).unwrap_err();
        assert!(e.to_string().contains("signature"), "{e}");
        let e = validate(&token, "h/devices/x", &[KEY], now).unwrap_err();
        assert!(e.to_string().contains("not \"h/devices/x\""), "{e}");
        let e = validate(&token, "h/devices/d", &[KEY], now + Duration::from_secs(61)).unwrap_err();
        assert!(e.to_string().contains("expired"), "{e}");
        assert!(validate(&token, "H/devices/d", &[other, KEY], now).is_ok());
        assert!(decode_key("c2hvcnQ=").is_err());
    }
}
