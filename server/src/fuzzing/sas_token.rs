//! SAS token parsing, expiry, its RFC 3339 form, device and policy checks ([`sas_token`]).

use super::*;

/// What the hub made of one token text.
#[derive(Debug)]
pub struct SasChecks {
    /// `SasToken::parse`.
    pub parsed: Result<SasToken, IotHubError>,
    /// The parsed token's `expires_at()` in RFC 3339 (`time::format_rfc3339_millis`).
    pub expiry_text: Option<String>,
    /// `sas::validate` for `{HOSTNAME}/devices/{DEVICE_ID}` with [`DEVICE_KEY`].
    pub validated: Result<SasToken, IotHubError>,
    /// `Policies::authenticate` for [`HOSTNAME`] (a service token).
    pub service: Result<ServiceGrant, IotHubError>,
    /// `Policies::authenticate_for` the device's resource (a device connecting with a policy
    /// token).
    pub device_policy: Result<ServiceGrant, IotHubError>,
    /// Each error's text (formatting one must not panic either).
    pub errors: Vec<String>,
}

/// A token built from the input and signed with a known key, so that signatures match.
#[derive(Debug)]
pub struct DerivedToken {
    /// The resource it is for.
    pub resource: String,
    /// Its `se`.
    pub expiry: u64,
    /// The key it is signed with.
    pub key: &'static str,
    /// Its `skn`.
    pub key_name: Option<&'static str>,
    /// The token, from the core's signer (the device client's).
    pub token: Result<String, String>,
    /// What the hub made of it.
    pub checks: Option<SasChecks>,
}

/// What [`sas_token`] saw.
#[derive(Debug)]
pub struct SasOutcome {
    /// The time every check used.
    pub now: SystemTime,
    /// The input's text, checked as a token.
    pub raw: Result<SasChecks, String>,
    /// A token built by hand with the input's first 8 bytes as `se`: its expiry, formatted.
    pub hand_built: (u64, String),
    /// The token derived from the input.
    pub derived: DerivedToken,
}

fn sas_checks(policies: &Policies, token: &str, now: SystemTime) -> SasChecks {
    let device = sas::device_resource(HOSTNAME, DEVICE_ID);
    let parsed = SasToken::parse(token);
    let expiry_text = parsed
        .as_ref()
        .ok()
        .map(|t| time::format_rfc3339_millis(t.expires_at()));
    let validated = sas::validate(token, &device, &[DEVICE_KEY], now);
    let service = policies.authenticate(token, HOSTNAME, now);
    let device_policy = policies.authenticate_for(token, &device, now);
    let mut errors = Vec::new();
    for e in [
        parsed.as_ref().err(),
        validated.as_ref().err(),
        service.as_ref().err(),
        device_policy.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    {
        errors.push(e.to_string());
    }
    if let Ok(grant) = &service {
        for right in [
            policies::Right::RegistryRead,
            policies::Right::RegistryWrite,
            policies::Right::ServiceConnect,
            policies::Right::DeviceConnect,
        ] {
            if let Err(e) = grant.require(right) {
                errors.push(e.to_string());
            }
        }
    }
    SasChecks {
        parsed,
        expiry_text,
        validated,
        service,
        device_policy,
        errors,
    }
}

/// SAS tokens. The input: 8 bytes (little-endian `se`), a flags byte, then text. The text is
/// checked as a token as is; a token is also derived and signed with a known key: flags bits
/// 0-1 pick its resource (the device's, the hub's, `https://LOCALHOST/`, or the text), bits
/// 2-3 its key and `skn` (device key; `iothubowner`; `device` policy; an unknown key), bit 4
/// puts `se` within a day of now (else `se` is the 8 bytes as they are).
pub fn sas_token(data: &[u8]) -> SasOutcome {
    let now = SystemTime::now();
    let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let se = le_u64(data);
    let flags = data.get(8).copied().unwrap_or(0);
    let text = String::from_utf8_lossy(data.get(9..).unwrap_or_default()).into_owned();
    let policies = fixed_policies().map_err(|e| format!("policies: {e}"));
    let raw = policies
        .as_ref()
        .map(|p| sas_checks(p, &text, now))
        .map_err(Clone::clone);
    let hand = SasToken {
        resource_encoded: String::new(),
        resource: String::new(),
        signature: Vec::new(),
        expiry: se,
        key_name: None,
    };
    let hand_built = (se, time::format_rfc3339_millis(hand.expires_at()));
    let device = sas::device_resource(HOSTNAME, DEVICE_ID);
    let resource = match flags & 3 {
        0 => device,
        1 => HOSTNAME.to_owned(),
        2 => "https://LOCALHOST/".to_owned(),
        _ => text,
    };
    let (key, key_name) = match (flags >> 2) & 3 {
        0 => (DEVICE_KEY, None),
        1 => (OWNER_KEY, Some("iothubowner")),
        2 => (DEVICE_POLICY_KEY, Some("device")),
        _ => (OTHER_KEY, None),
    };
    let expiry = if flags & 0x10 != 0 {
        (now_secs + se % 172_800).saturating_sub(86_400)
    } else {
        se
    };
    let token =
        mqstate::iothub::sas::token(&resource, key, expiry, key_name).map_err(|e| e.to_string());
    let checks = match (&token, &policies) {
        (Ok(t), Ok(p)) => Some(sas_checks(p, t, now)),
        _ => None,
    };
    SasOutcome {
        now,
        raw,
        hand_built,
        derived: DerivedToken {
            resource,
            expiry,
            key,
            key_name,
            token,
            checks,
        },
    }
}
