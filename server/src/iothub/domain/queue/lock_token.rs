//! Lock tokens: the GUIDs that lock a message for AMQP and HTTPS deliveries (the AMQP
//! delivery tag, the HTTPS `ETag`), kept as their 128 bits and written as IoT Hub writes them.

/// A GUID's text form (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lower case), as IoT Hub writes
/// lock tokens.
pub(super) fn format_token(token: u128) -> String {
    mqstate::iothub::guid_text(&token.to_be_bytes())
}

/// A lock token back (hyphens optional, any case, and the quotes of an HTTP `ETag` header
/// value tolerated); `None` when it is no GUID, which no lock can have.
pub(super) fn parse_token(text: &str) -> Option<u128> {
    let text = text.trim().trim_matches('"');
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok()
}

/// A new random GUID in text form (the tracking ids of error answers).
pub(crate) fn new_guid() -> String {
    format_token(new_token())
}

/// A random (version 4) GUID: unguessable, and never the token of an earlier lock, so that a
/// stale token cannot settle a later delivery of the same message.
pub(super) fn new_token() -> u128 {
    let random = fastrand::u128(..);
    (random & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62)
}
