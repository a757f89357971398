//! Shared access signature (SAS) tokens, as IoT Hub expects them in the MQTT password.
//!
//! `SharedAccessSignature sr={URL-encoded resource URI}&sig={URL-encoded base64 signature}&se={expiry}`
//! where the signature is HMAC-SHA256, keyed with the base64-decoded device key, of the
//! URL-encoded resource URI, a newline and the expiry (seconds since the Unix epoch).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::properties::encode_component;
use crate::protocol::errors::Error;

/// Decodes a device key (base64), with an error that does not print the key.
pub(crate) fn decode_key(key: &str) -> Result<Vec<u8>, Error> {
    let bytes = STANDARD.decode(key.trim()).map_err(|e| {
        Error::InvalidArgument(format!("the shared access key is not valid base64: {e}"))
    })?;
    if bytes.is_empty() {
        return Err(Error::InvalidArgument(
            "the shared access key is empty".into(),
        ));
    }
    Ok(bytes)
}

/// A SAS token for `resource_uri` (for a device: `{host}/devices/{deviceId}`) valid until
/// `expiry` seconds since the Unix epoch, signed with `key` (base64, as in a connection
/// string). `policy` adds `&skn=` for shared access policies.
///
/// ```
/// use mqstate::iothub::sas::token;
/// let t = token("myhub.azure-devices.net/devices/dev1", "c2VjcmV0", 1700000000, None).unwrap();
/// assert!(t.starts_with("SharedAccessSignature sr=myhub.azure-devices.net%2Fdevices%2Fdev1&sig="));
/// assert!(t.ends_with("&se=1700000000"));
/// ```
pub fn token(
    resource_uri: &str,
    key: &str,
    expiry: u64,
    policy: Option<&str>,
) -> Result<String, Error> {
    let key = decode_key(key)?;
    let sr = encode_component(resource_uri);
    let signed = format!("{sr}\n{expiry}");
    let mac = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key),
        signed.as_bytes(),
    );
    let sig = encode_component(&STANDARD.encode(mac.as_ref()));
    let mut out = format!("SharedAccessSignature sr={sr}&sig={sig}&se={expiry}");
    if let Some(policy) = policy {
        out.push_str("&skn=");
        out.push_str(&encode_component(policy));
    }
    Ok(out)
}

/// The expiry (seconds since the Unix epoch) of a token made now with `lifetime`.
#[cfg_attr(
    not(feature = "client"),
    allow(dead_code, reason = "used by the device client only")
)]
pub(crate) fn expiry_after(lifetime: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    now.saturating_add(lifetime).as_secs().max(1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The worked example of Microsoft's "Control access to IoT Hub with SAS" page is not
    /// reproducible (its key is elided), so the expected signature is computed independently
    /// with OpenSSL:
    /// `printf 'myhub.azure-devices.net%%2Fdevices%%2Fdev1\n1700000000' |
    ///  openssl dgst -sha256 -mac HMAC -macopt hexkey:$(printf secret | xxd -p) -binary | base64`
    #[test]
    fn signature_matches_an_independent_computation() {
        let t = token(
            "myhub.azure-devices.net/devices/dev1",
            &STANDARD.encode("secret"),
            1_700_000_000,
            None,
        )
        .unwrap();
        let sig = t
            .split('&')
            .find_map(|p| p.strip_prefix("sig="))
            .unwrap()
            .to_owned();
        let expected = {
            let mac = ring::hmac::sign(
                &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"secret"),
                b"myhub.azure-devices.net%2Fdevices%2Fdev1\n1700000000",
            );
            encode_component(&STANDARD.encode(mac.as_ref()))
        };
        assert_eq!(sig, expected);
        assert_eq!(sig, OPENSSL_SIG);
    }

    /// Filled in from the OpenSSL command above.
    const OPENSSL_SIG: &str = "lyZTrGw%2BlnYse5XnZK1FuHvRECjYRAUJKhUEcCB7k3k%3D";

    #[test]
    fn policy_name_is_appended() {
        let t = token("h/devices/d", "c2VjcmV0", 5, Some("device")).unwrap();
        assert!(t.ends_with("&se=5&skn=device"), "{t}");
    }

    #[test]
    fn bad_keys_are_typed_errors_without_the_key() {
        let e = token("h", "not base64!!", 1, None).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(!e.to_string().contains("not base64!!"));
        assert!(token("h", "", 1, None).is_err());
    }
}
