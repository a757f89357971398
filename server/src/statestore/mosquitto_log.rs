//! Connection events of an external Mosquitto, read from its log topic.
//!
//! Mosquitto has no per-client connect/disconnect events on its `$SYS` topics, but when it is
//! configured with `log_dest topic` it publishes every log line on `$SYS/broker/log/{level}`.
//! The lines that matter (Mosquitto 2.0):
//!
//! - `New client connected from {addr}:{port} as {id} (p5, c1, k60).` (notice): a connection;
//! - `Client {id} disconnected.`, `Client {id} closed its connection.`, `Client {id} has
//!   exceeded timeout, disconnecting.`, `Client {id} disconnected due to ...`, and the other
//!   forms of its disconnect function (notice): the end of a connection;
//! - `Client {id} already connected, closing old connection.` (error level): a takeover; the
//!   old connection's end is logged only by this line, before the new connection's.
//!
//! With those, the state store counts connections per client id exactly as it does with the
//! embedded broker's events. Without `log_dest topic`, nothing is detected (registrations
//! then live until `KEYNOTIFY ... STOP` or a server restart).

use crate::broker::BrokerEvent;

/// The log topics the store subscribes to: notices (connects, disconnects) and errors
/// (takeovers).
pub(crate) const LOG_TOPICS: [&str; 2] = ["$SYS/broker/log/N", "$SYS/broker/log/E"];

/// The endings of Mosquitto 2.0's "a connection ended" lines that follow `Client {id}`.
const DISCONNECT_SUFFIXES: &[&str] = &[
    " disconnected.",
    " closed its connection.",
    " has exceeded timeout, disconnecting.",
    " disconnected due to malformed packet.",
    " disconnected due to protocol error.",
    " disconnected, not authorised.",
    " disconnected due to oversize packet.",
    " disconnected due to oversize payload.",
    " disconnected due to out of memory.",
    " disconnected due to QoS too high or retain not supported.",
    " been disconnected by administrative action.",
    " already connected, closing old connection.",
];

/// The line's text without its `{unix time}: ` prefix and line end.
fn text_of(line: &str) -> &str {
    let line = line.trim_end_matches(['\r', '\n']);
    match line.split_once(": ") {
        Some((stamp, rest)) if !stamp.is_empty() && stamp.bytes().all(|b| b.is_ascii_digit()) => {
            rest
        }
        _ => line,
    }
}

/// The client id of a takeover line (`Client {id} already connected, closing old
/// connection.`): another client connected with that id. Mosquitto 2.0.11 closes the old
/// connection without a DISCONNECT "session taken over", so this line (published to the old
/// connection too when it subscribes to the log, just before the close) is how the state
/// store learns that its own id was taken.
pub(crate) fn taken_over(line: &str) -> Option<&str> {
    text_of(line)
        .strip_prefix("Client ")?
        .strip_suffix(" already connected, closing old connection.")
}

/// Reads one log line (with or without its `{unix time}: ` prefix).
pub(crate) fn parse_line(line: &str) -> Option<BrokerEvent> {
    let text = text_of(line);
    if let Some(rest) = text.strip_prefix("New client connected from ") {
        // `{addr}:{port} as {id} (p5, c1, k60)` or `... (p5, c1, k60, u'user')`.
        let (_, after) = rest.split_once(" as ")?;
        let end = after.rfind(" (p")?;
        let id = after.get(..end)?;
        return Some(BrokerEvent::Connected(id.to_owned()));
    }
    if let Some(rest) = text.strip_prefix("Client ") {
        for suffix in DISCONNECT_SUFFIXES {
            if let Some(id) = rest.strip_suffix(suffix) {
                return Some(BrokerEvent::Disconnected(id.to_owned()));
            }
        }
        // `Client {id} disconnected: {error text}.`
        if let Some(pos) = rest.rfind(" disconnected: ") {
            return Some(BrokerEvent::Disconnected(rest.get(..pos)?.to_owned()));
        }
        return None;
    }
    if let Some(rest) = text.strip_prefix("Bad socket read/write on client ") {
        let pos = rest.rfind(": ")?;
        return Some(BrokerEvent::Disconnected(rest.get(..pos)?.to_owned()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(id: &str) -> Option<BrokerEvent> {
        Some(BrokerEvent::Connected(id.to_owned()))
    }

    fn disc(id: &str) -> Option<BrokerEvent> {
        Some(BrokerEvent::Disconnected(id.to_owned()))
    }

    #[test]
    fn lines_seen_from_mosquitto_2_0() {
        let cases = [
            (
                "1795289501: New client connected from 127.0.0.1:40982 as client one (p5, c1, k60).",
                conn("client one"),
            ),
            (
                "1795289501: New client connected from ::1:40982 as c (p2, c0, k60, u'bob').",
                conn("c"),
            ),
            (
                "1795289501: Client client one disconnected.",
                disc("client one"),
            ),
            (
                "1795289502: Client c3 already connected, closing old connection.",
                disc("c3"),
            ),
            ("1: Client x closed its connection.", disc("x")),
            (
                "1: Client x has exceeded timeout, disconnecting.",
                disc("x"),
            ),
            (
                "1: Client x disconnected: Connection reset by peer.",
                disc("x"),
            ),
            ("1: Client x disconnected due to protocol error.", disc("x")),
            (
                "1: Bad socket read/write on client x: broken pipe",
                disc("x"),
            ),
            (
                "1795289501: New connection from 127.0.0.1:40982 on port 18999.",
                None,
            ),
            ("1: Expiring client x due to timeout.", None),
            ("1: Outgoing messages are being dropped for client x.", None),
            ("garbage", None),
            ("", None),
        ];
        for (line, expected) in cases {
            assert_eq!(parse_line(line), expected, "{line}");
        }
    }

    /// The example that was in this module's documentation.
    #[test]
    fn connect_and_disconnect_lines() {
        use crate::broker::BrokerEvent;
        use crate::statestore::mosquitto_log::parse_line;

        assert_eq!(
            parse_line(
                "1700000000: New client connected from 127.0.0.1:5 as my client (p5, c1, k60)."
            ),
            Some(BrokerEvent::Connected("my client".into()))
        );
        assert_eq!(
            parse_line("1700000000: Client my client closed its connection."),
            Some(BrokerEvent::Disconnected("my client".into()))
        );
        assert_eq!(
            parse_line("1700000000: New connection from 127.0.0.1:5 on port 1883."),
            None
        );
    }

    /// The example that was in this module's documentation.
    #[test]
    fn takeover_lines() {
        use crate::statestore::mosquitto_log::taken_over;

        assert_eq!(
            taken_over("1: Client my store already connected, closing old connection."),
            Some("my store")
        );
        assert_eq!(taken_over("1: Client my store disconnected."), None);
    }
}
