//! rumqttc's connection errors, as ours: a refusal of the credentials is an
//! [`Error::Authentication`] (retrying cannot help, so the client gives up), a connect that
//! timed out an [`Error::Timeout`], anything else an [`Error::Connection`] that keeps
//! rumqttc's error as its source.

use rumqttc::{ConnectReturnCode, ConnectionError};

use super::options::{DeviceAuth, DeviceOptions};
use crate::protocol::errors::Error;

/// Turns rumqttc's connection error into ours. `now` is the Unix time in seconds, to say
/// when a refused fixed SAS token (`token_expiry`) has expired.
pub(super) fn classify(
    e: ConnectionError,
    options: &DeviceOptions,
    token_expiry: Option<u64>,
    now: u64,
) -> Error {
    match e {
        ConnectionError::ConnectionRefused(code) => match code {
            ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized => {
                if matches!(options.auth, DeviceAuth::SasToken(_))
                    && token_expiry.is_some_and(|x| x <= now)
                {
                    Error::Authentication(format!(
                        "the hub refused the connection ({code:?}): the SAS token expired and a fixed token cannot be renewed"
                    ))
                } else {
                    Error::Authentication(format!(
                        "the hub refused device {:?} ({code:?}): wrong key, token, certificate or device id",
                        options.device_id
                    ))
                }
            }
            other => Error::connection_caused_by(
                format!("the hub refused the connection: {other:?}"),
                ConnectionError::ConnectionRefused(other),
            ),
        },
        ConnectionError::NetworkTimeout => Error::Timeout(options.connect_timeout),
        other => Error::connection_caused_by(other.to_string(), other),
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::ErrorKind;

    fn key_options() -> DeviceOptions {
        DeviceOptions::from_connection_string(
            "HostName=hub.example;DeviceId=dev1;SharedAccessKey=c2VjcmV0",
        )
        .unwrap()
    }

    fn token_options() -> DeviceOptions {
        DeviceOptions::from_connection_string(
            "HostName=hub.example;DeviceId=dev1;SharedAccessSignature=SharedAccessSignature sr=hub.example%2Fdevices%2Fdev1&sig=x&se=100",
        )
        .unwrap()
    }

    #[test]
    fn refused_credentials_are_an_authentication_error() {
        let refused = || ConnectionError::ConnectionRefused(ConnectReturnCode::NotAuthorized);
        let e = classify(refused(), &key_options(), Some(100), 50);
        assert_eq!(e.kind(), ErrorKind::Authentication);
        assert!(e.to_string().contains(r#"refused device "dev1""#), "{e}");
        // A fixed token past its expiry: say that renewing is what is missing.
        let e = classify(refused(), &token_options(), Some(100), 100);
        assert!(e.to_string().contains("the SAS token expired"), "{e}");
        // Still valid: the credentials themselves are wrong.
        let e = classify(refused(), &token_options(), Some(100), 99);
        assert!(e.to_string().contains("wrong key"), "{e}");
    }

    #[test]
    fn other_refusals_and_io_errors_are_connection_errors_with_their_source() {
        let e = classify(
            ConnectionError::ConnectionRefused(ConnectReturnCode::ServiceUnavailable),
            &key_options(),
            None,
            0,
        );
        assert_eq!(e.kind(), ErrorKind::Connection);
        assert_eq!(
            e.to_string(),
            "connection error: the hub refused the connection: ServiceUnavailable"
        );
        assert!(matches!(
            e.source().and_then(|s| s.downcast_ref::<ConnectionError>()),
            Some(ConnectionError::ConnectionRefused(
                ConnectReturnCode::ServiceUnavailable
            ))
        ));

        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = classify(ConnectionError::Io(io), &key_options(), None, 0);
        assert_eq!(e.kind(), ErrorKind::Connection);
        let source = e.source().and_then(|s| s.downcast_ref::<ConnectionError>());
        assert!(
            matches!(source, Some(ConnectionError::Io(io)) if io.kind() == std::io::ErrorKind::ConnectionRefused),
            "{source:?}"
        );
    }

    #[test]
    fn a_network_timeout_is_the_connect_timeout() {
        let e = classify(ConnectionError::NetworkTimeout, &key_options(), None, 0);
        assert_eq!(e.kind(), ErrorKind::Timeout);
    }
}
