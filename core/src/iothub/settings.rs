//! [`DeviceSettings`]: a device's connection settings given field by field (Python keyword
//! arguments, a Node options object, a C options handle, a Kotlin record, command-line flags)
//! laid over its connection string. This is the one merge: every binding fills a
//! `DeviceSettings` and calls [`resolve`](DeviceSettings::resolve), so that the rules (which
//! value wins, when TLS is on, what a certificate needs) are the same in every language.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::options::{DeviceAuth, DeviceOptions, Transport};
use crate::protocol::errors::Error;

/// A device's connection string and the settings given one by one over it; every field but
/// the connection string is optional (`None`: not given, the connection string's or the
/// default value holds).
///
/// [`resolve`](DeviceSettings::resolve) parses the connection string
/// ([`DeviceOptions::from_connection_string`]) and lays every given field over it. Its rules:
///
/// - `transport` is applied first, so the port follows it (8883 for MQTT, 5671 for AMQP)
///   unless `port` is given.
/// - `tls: Some(false)` is plain TCP (a local hub only), and an error together with a TLS
///   file (`ca_file`, `cert_file`, `key_file`).
/// - A client certificate needs both `cert_file` and `key_file`, and a connection string that
///   says `x509=true` (a certificate next to a shared access key or a SAS token is refused
///   rather than half used); `x509=true` needs the certificate.
/// - The result is checked as [`super::DeviceClient::connect`] checks it, so a mistake is
///   reported before any connection is tried.
///
/// ```
/// use mqstate::iothub::{DeviceSettings, Transport};
///
/// let mut s = DeviceSettings::new("HostName=myhub.azure-devices.net;DeviceId=dev1;SharedAccessKey=c2VjcmV0");
/// s.transport = Some("amqp".parse()?);
/// let o = s.resolve()?;
/// assert_eq!((o.transport, o.port), (Transport::Amqp, 5671));
///
/// let mut s = DeviceSettings::new("HostName=myhub.azure-devices.net;DeviceId=dev1;x509=true");
/// s.cert_file = Some("dev1.pem".into());
/// let e = s.resolve().unwrap_err();
/// assert!(e.to_string().contains("key_file"));
/// # Ok::<(), mqstate::Error>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceSettings {
    /// `HostName=...;DeviceId=...;SharedAccessKey=...` (or `SharedAccessSignature=...`, or
    /// `x509=true`).
    pub connection_string: String,
    /// MQTT (the default) or AMQP.
    pub transport: Option<Transport>,
    /// Where to connect, when it is not the connection string's host (a local hub).
    pub host: Option<String>,
    /// The port (default: the transport's, 8883 or 5671).
    pub port: Option<u16>,
    /// TLS on (`true`, the default) or off (`false`: plain TCP, a local hub only).
    pub tls: Option<bool>,
    /// PEM file of the CAs to trust instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain of the device, for X.509 authentication.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Lifetime of each generated SAS token (default one hour, at least 10 s).
    pub token_lifetime: Option<Duration>,
    /// MQTT keep-alive, or the AMQP idle timeout (default 60 s).
    pub keep_alive: Option<Duration>,
    /// How long a connection attempt may take (default 30 s).
    pub connect_timeout: Option<Duration>,
    /// How long sending an event waits for the hub (default 30 s).
    pub operation_timeout: Option<Duration>,
    /// Messages received and not settled before the client stops reading (default 64).
    pub receive_buffer: Option<usize>,
}

impl fmt::Debug for DeviceSettings {
    /// The connection string (it holds the key) is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceSettings")
            .field("connection_string", &"<redacted>")
            .field("transport", &self.transport)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("cert_file", &self.cert_file)
            .finish_non_exhaustive()
    }
}

impl DeviceSettings {
    /// Settings with only a connection string.
    ///
    /// ```
    /// use mqstate::iothub::DeviceSettings;
    /// let o = DeviceSettings::new("HostName=h;DeviceId=d;SharedAccessKey=c2VjcmV0").resolve()?;
    /// assert_eq!(o.port, 8883);
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn new(connection_string: impl Into<String>) -> Self {
        DeviceSettings {
            connection_string: connection_string.into(),
            ..DeviceSettings::default()
        }
    }

    /// The options: the connection string's, with every given field over it, checked.
    /// Errors are [`Error::InvalidArgument`] naming what was wrong (never the key), or
    /// [`Error::NotSupported`] for a combination this client cannot connect with.
    ///
    /// ```
    /// use mqstate::iothub::DeviceSettings;
    /// let mut s = DeviceSettings::new("HostName=h;DeviceId=d;SharedAccessKey=c2VjcmV0");
    /// s.tls = Some(false);
    /// s.ca_file = Some("ca.pem".into());
    /// assert!(s.resolve().unwrap_err().to_string().contains("TLS is turned off"));
    /// ```
    pub fn resolve(self) -> Result<DeviceOptions, Error> {
        let bad = |m: &str| Err(Error::InvalidArgument(m.into()));
        let mut o = DeviceOptions::from_connection_string(&self.connection_string)?;
        if let Some(t) = self.transport {
            o = o.with_transport(t);
        }
        if let Some(h) = self.host {
            o.connect_host = Some(h);
        }
        if let Some(p) = self.port {
            o.port = p;
        }
        let tls_files =
            self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some();
        if self.tls == Some(false) {
            if tls_files {
                return bad(
                    "TLS is turned off (tls false) but a TLS file is given (ca_file, cert_file or key_file)",
                );
            }
            o.tls = None;
        }
        if let Some(ca) = self.ca_file {
            o.tls = Some(o.tls.take().unwrap_or_default().with_ca_file(ca));
        }
        match (self.cert_file, self.key_file) {
            (Some(cert), Some(key)) => {
                if o.auth != DeviceAuth::X509 {
                    return bad(
                        "a client certificate (cert_file, key_file) is for X.509 devices: their connection string says x509=true instead of a SharedAccessKey or SharedAccessSignature",
                    );
                }
                o.tls = Some(o.tls.take().unwrap_or_default().with_client_cert(cert, key));
            }
            (None, None) => {
                if o.auth == DeviceAuth::X509 {
                    return bad(
                        "the connection string says x509=true: give the device's certificate and key (cert_file and key_file)",
                    );
                }
            }
            _ => return bad("an X.509 client certificate needs both cert_file and key_file"),
        }
        if let Some(t) = self.token_lifetime {
            o.token_lifetime = t;
        }
        if let Some(k) = self.keep_alive {
            o.keep_alive = k;
        }
        if let Some(t) = self.connect_timeout {
            o.connect_timeout = t;
        }
        if let Some(t) = self.operation_timeout {
            o.operation_timeout = t;
        }
        if let Some(n) = self.receive_buffer {
            o.receive_buffer = n;
        }
        o.validate()?;
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SAS: &str = "HostName=h.example;DeviceId=d;SharedAccessKey=c2VjcmV0";
    const X509: &str = "HostName=h.example;DeviceId=d;x509=true";

    #[test]
    fn given_fields_win_and_the_port_follows_the_transport() {
        let mut s = DeviceSettings::new(SAS);
        s.transport = Some(Transport::Amqp);
        s.host = Some("127.0.0.1".into());
        s.tls = Some(false);
        s.receive_buffer = Some(3);
        s.token_lifetime = Some(Duration::from_secs(60));
        let o = s.resolve().unwrap();
        assert_eq!(o.port, 5671);
        assert_eq!(o.connect_host(), "127.0.0.1");
        assert!(o.tls.is_none());
        assert_eq!(o.receive_buffer, 3);
        assert_eq!(o.token_lifetime, Duration::from_secs(60));
        assert_eq!(o.hostname, "h.example", "the token's host stays");

        let mut s = DeviceSettings::new(SAS);
        s.transport = Some(Transport::Amqp);
        s.port = Some(15671);
        s.ca_file = Some("ca.pem".into());
        let o = s.resolve().unwrap();
        assert_eq!(o.port, 15671);
        assert_eq!(o.tls.unwrap().ca_file, Some(PathBuf::from("ca.pem")));
    }

    #[test]
    fn a_certificate_goes_with_x509_and_both_files() {
        let mut s = DeviceSettings::new(X509);
        s.cert_file = Some("d.pem".into());
        s.key_file = Some("d.key".into());
        let o = s.resolve().unwrap();
        assert_eq!(o.auth, DeviceAuth::X509);
        let tls = o.tls.unwrap();
        assert_eq!(tls.client_cert_file, Some(PathBuf::from("d.pem")));
        assert_eq!(tls.client_key_file, Some(PathBuf::from("d.key")));

        for (cs, cert, key, tls, why) in [
            (X509, None, None, None, "x509=true"),
            (
                X509,
                Some("d.pem"),
                None,
                None,
                "both cert_file and key_file",
            ),
            (
                X509,
                None,
                Some("d.key"),
                None,
                "both cert_file and key_file",
            ),
            (SAS, Some("d.pem"), Some("d.key"), None, "x509=true instead"),
            (
                X509,
                Some("d.pem"),
                Some("d.key"),
                Some(false),
                "TLS is turned off",
            ),
        ] {
            let mut s = DeviceSettings::new(cs);
            s.cert_file = cert.map(PathBuf::from);
            s.key_file = key.map(PathBuf::from);
            s.tls = tls;
            let e = s.resolve().unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
            assert!(e.to_string().contains(why), "{cs} {cert:?} {key:?}: {e}");
        }
    }

    #[test]
    fn values_are_checked_and_the_key_never_shown() {
        let mut s = DeviceSettings::new(SAS);
        s.port = Some(0);
        assert!(s.resolve().unwrap_err().to_string().contains("port 0"));
        let mut s = DeviceSettings::new(SAS);
        s.receive_buffer = Some(0);
        assert!(s.resolve().is_err());
        let mut s = DeviceSettings::new(SAS);
        s.keep_alive = Some(Duration::from_secs(2000));
        assert!(s.resolve().unwrap_err().to_string().contains("keep-alive"));
        assert!(!format!("{:?}", DeviceSettings::new(SAS)).contains("c2VjcmV0"));
    }
}
