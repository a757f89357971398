//! The fields of a message that `mqstate iothub send` (a cloud-to-device message, through the
//! admin API) and `mqstate iothub send-event` (telemetry, as the device) share: the body, the
//! ids, the content type and encoding, and the application properties (`-P`).

use clap::Args;

/// A message's body and properties on the command line.
#[derive(Debug, Clone, Default, Args)]
pub struct MessageArgs {
    /// The body (UTF-8 text).
    pub payload: String,
    /// Message id (`$.mid`; set it so feedback can be correlated).
    #[arg(long)]
    pub message_id: Option<String>,
    /// Correlation id (`$.cid`).
    #[arg(long)]
    pub correlation_id: Option<String>,
    /// Content type (`$.ct`).
    #[arg(long)]
    pub content_type: Option<String>,
    /// Content encoding (`$.ce`).
    #[arg(long)]
    pub content_encoding: Option<String>,
    /// Application property: `key=value`, `key=` (empty) or `key` (null); repeatable.
    #[arg(short = 'P', long = "property", value_name = "KEY[=VALUE]")]
    pub properties: Vec<String>,
}

impl MessageArgs {
    /// The `-P` properties in the order given, a null value for a bare `key`; a name given
    /// twice is refused (a property bag holds each name once).
    pub fn properties(&self) -> Result<Vec<(String, Option<String>)>, String> {
        let mut out: Vec<(String, Option<String>)> = Vec::with_capacity(self.properties.len());
        for p in &self.properties {
            let (key, value) = match p.split_once('=') {
                Some((k, v)) => (k, Some(v.to_owned())),
                None => (p.as_str(), None),
            };
            if out.iter().any(|(k, _)| k == key) {
                return Err(format!("-P {key}: property given twice"));
            }
            out.push((key.to_owned(), value));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn properties_value_empty_null_and_twice() {
        let mut m = MessageArgs {
            properties: vec!["a=1".into(), "n".into(), "e=".into(), "u=x=y".into()],
            ..MessageArgs::default()
        };
        assert_eq!(
            m.properties().unwrap(),
            [
                ("a".to_owned(), Some("1".to_owned())),
                ("n".to_owned(), None),
                ("e".to_owned(), Some(String::new())),
                ("u".to_owned(), Some("x=y".to_owned())),
            ]
        );
        m.properties.push("a=2".into());
        assert_eq!(m.properties().unwrap_err(), "-P a: property given twice");
    }
}
