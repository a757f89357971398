//! [`ConnectOptions::from_env`]: the Azure IoT Operations environment variables.

use std::path::PathBuf;
use std::time::Duration;

use super::{ConnectOptions, DEFAULT_PORT, DEFAULT_TLS_PORT, TlsOptions};
use crate::protocol::errors::Error;

/// Every `AIO_*` variable [`ConnectOptions::from_env`] reads.
///
/// ```
/// assert!(mqstate::client::options::ENV_VARS.contains(&"AIO_SAT_FILE"));
/// ```
pub const ENV_VARS: &[&str] = &[
    "AIO_BROKER_HOSTNAME",
    "AIO_BROKER_TCP_PORT",
    "AIO_MQTT_USE_TLS",
    "AIO_TLS_CA_FILE",
    "AIO_TLS_CERT_FILE",
    "AIO_TLS_KEY_FILE",
    "AIO_SAT_FILE",
    "AIO_MQTT_CLIENT_ID",
    "AIO_MQTT_USERNAME",
    "AIO_MQTT_PASSWORD_FILE",
    "AIO_MQTT_KEEP_ALIVE",
    "AIO_MQTT_SESSION_EXPIRY",
];

impl ConnectOptions {
    /// Reads the Azure IoT Operations environment variables:
    ///
    /// | variable | meaning |
    /// |---|---|
    /// | `AIO_BROKER_HOSTNAME` | broker host (required) |
    /// | `AIO_BROKER_TCP_PORT` | port (default 8883 with TLS, 1883 without) |
    /// | `AIO_MQTT_USE_TLS` | `true` / `false` (default `true`) |
    /// | `AIO_TLS_CA_FILE` | CA certificate PEM file |
    /// | `AIO_TLS_CERT_FILE`, `AIO_TLS_KEY_FILE` | client certificate and key (mutual TLS) |
    /// | `AIO_SAT_FILE` | service account token file (enhanced authentication `K8S-SAT`) |
    /// | `AIO_MQTT_CLIENT_ID` | client id (generated if unset) |
    /// | `AIO_MQTT_USERNAME` | user name |
    /// | `AIO_MQTT_PASSWORD_FILE` | file holding the password |
    /// | `AIO_MQTT_KEEP_ALIVE` | keep-alive, seconds |
    /// | `AIO_MQTT_SESSION_EXPIRY` | session expiry, seconds |
    ///
    /// An empty variable counts as unset. A malformed value is an [`Error::InvalidArgument`]
    /// that names the variable and the value.
    ///
    /// ```no_run
    /// let options = mqstate::ConnectOptions::from_env()?;
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn from_env() -> Result<Self, Error> {
        Self::from_env_with(|name| std::env::var_os(name))
    }

    /// [`from_env`](ConnectOptions::from_env) reading variables through `lookup` instead of
    /// the process environment (for tests, and for bindings that pass a mapping).
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use mqstate::ConnectOptions;
    ///
    /// let env = HashMap::from([
    ///     ("AIO_BROKER_HOSTNAME", "aio-broker"),
    ///     ("AIO_MQTT_USE_TLS", "false"),
    ///     ("AIO_MQTT_CLIENT_ID", "pump-1"),
    /// ]);
    /// let o = ConnectOptions::from_env_with(|k| env.get(k).map(Into::into)).unwrap();
    /// assert_eq!((o.host.as_str(), o.port), ("aio-broker", 1883));
    ///
    /// let env = HashMap::from([("AIO_BROKER_HOSTNAME", "b"), ("AIO_MQTT_USE_TLS", "maybe")]);
    /// let err = ConnectOptions::from_env_with(|k| env.get(k).map(Into::into)).unwrap_err();
    /// assert!(err.to_string().contains("AIO_MQTT_USE_TLS"));
    /// ```
    pub fn from_env_with<F>(lookup: F) -> Result<Self, Error>
    where
        F: Fn(&str) -> Option<std::ffi::OsString>,
    {
        let var = |name: &str| -> Result<Option<String>, Error> {
            match lookup(name) {
                None => Ok(None),
                Some(v) if v.is_empty() => Ok(None),
                Some(v) => v.into_string().map(Some).map_err(|v| {
                    Error::InvalidArgument(format!(
                        "environment variable {name}: not valid UTF-8 ({v:?})"
                    ))
                }),
            }
        };
        let invalid = |name: &str, value: &str, expected: &str| {
            Error::InvalidArgument(format!(
                "environment variable {name}={value:?}: expected {expected}"
            ))
        };
        let host = var("AIO_BROKER_HOSTNAME")?.ok_or_else(|| {
            Error::InvalidArgument("environment variable AIO_BROKER_HOSTNAME is not set".into())
        })?;
        let use_tls = match var("AIO_MQTT_USE_TLS")? {
            None => true,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => true,
                "false" | "0" | "no" => false,
                _ => return Err(invalid("AIO_MQTT_USE_TLS", &v, "true or false")),
            },
        };
        let port = match var("AIO_BROKER_TCP_PORT")? {
            None if use_tls => DEFAULT_TLS_PORT,
            None => DEFAULT_PORT,
            Some(v) => match v.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(invalid("AIO_BROKER_TCP_PORT", &v, "a port number 1-65535")),
            },
        };
        let mut options = ConnectOptions::new(host, port);
        let seconds = |name: &str| -> Result<Option<Duration>, Error> {
            match var(name)? {
                None => Ok(None),
                Some(v) => v
                    .parse::<u64>()
                    .map(|s| Some(Duration::from_secs(s)))
                    .map_err(|_| invalid(name, &v, "a whole number of seconds")),
            }
        };
        if let Some(k) = seconds("AIO_MQTT_KEEP_ALIVE")? {
            options.keep_alive = k;
        }
        if let Some(s) = seconds("AIO_MQTT_SESSION_EXPIRY")? {
            options.session_expiry = s;
        }
        options.client_id = var("AIO_MQTT_CLIENT_ID")?;
        options.username = var("AIO_MQTT_USERNAME")?;
        options.password_file = var("AIO_MQTT_PASSWORD_FILE")?.map(PathBuf::from);
        options.sat_file = var("AIO_SAT_FILE")?.map(PathBuf::from);
        let ca = var("AIO_TLS_CA_FILE")?;
        let cert = var("AIO_TLS_CERT_FILE")?;
        let key = var("AIO_TLS_KEY_FILE")?;
        if use_tls {
            options.tls = Some(TlsOptions {
                ca_file: ca.map(PathBuf::from),
                client_cert_file: cert.map(PathBuf::from),
                client_key_file: key.map(PathBuf::from),
                server_name: None,
            });
        } else if let Some((name, _)) = [
            ("AIO_TLS_CA_FILE", &ca),
            ("AIO_TLS_CERT_FILE", &cert),
            ("AIO_TLS_KEY_FILE", &key),
        ]
        .into_iter()
        .find(|(_, v)| v.is_some())
        {
            return Err(Error::InvalidArgument(format!(
                "environment variable {name} is set but AIO_MQTT_USE_TLS is false"
            )));
        }
        options.validate().map_err(|e| match e {
            Error::InvalidArgument(m) => {
                Error::InvalidArgument(format!("from the AIO_* environment: {m}"))
            }
            other => other,
        })?;
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<ConnectOptions, Error> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ConnectOptions::from_env_with(|k| map.get(k).map(Into::into))
    }

    #[test]
    fn env_minimal_defaults_to_tls() {
        let o = env(&[("AIO_BROKER_HOSTNAME", "aio-broker")]).unwrap();
        assert_eq!(o.port, 8883);
        assert!(o.tls.is_some());
        assert!(o.client_id.is_none());
    }

    #[test]
    fn env_all_variables() {
        let o = env(&[
            ("AIO_BROKER_HOSTNAME", "b"),
            ("AIO_BROKER_TCP_PORT", "18883"),
            ("AIO_MQTT_USE_TLS", "TRUE"),
            ("AIO_TLS_CA_FILE", "/ca.pem"),
            ("AIO_TLS_CERT_FILE", "/c.pem"),
            ("AIO_TLS_KEY_FILE", "/k.pem"),
            ("AIO_SAT_FILE", "/sat"),
            ("AIO_MQTT_CLIENT_ID", "id"),
            ("AIO_MQTT_USERNAME", "user"),
            ("AIO_MQTT_PASSWORD_FILE", "/pw"),
            ("AIO_MQTT_KEEP_ALIVE", "15"),
            ("AIO_MQTT_SESSION_EXPIRY", "120"),
        ])
        .unwrap();
        assert_eq!(o.port, 18883);
        let tls = o.tls.clone().unwrap();
        assert_eq!(tls.ca_file, Some(PathBuf::from("/ca.pem")));
        assert_eq!(tls.client_key_file, Some(PathBuf::from("/k.pem")));
        assert_eq!(o.sat_file, Some(PathBuf::from("/sat")));
        assert_eq!(o.client_id.as_deref(), Some("id"));
        assert_eq!(o.username.as_deref(), Some("user"));
        assert_eq!(o.password_file, Some(PathBuf::from("/pw")));
        assert_eq!(o.keep_alive, Duration::from_secs(15));
        assert_eq!(o.session_expiry, Duration::from_secs(120));
    }

    #[test]
    fn env_errors_name_the_variable() {
        for (pairs, needle) in [
            (vec![], "AIO_BROKER_HOSTNAME"),
            (
                vec![
                    ("AIO_BROKER_HOSTNAME", "b"),
                    ("AIO_BROKER_TCP_PORT", "70000"),
                ],
                "AIO_BROKER_TCP_PORT",
            ),
            (
                vec![("AIO_BROKER_HOSTNAME", "b"), ("AIO_BROKER_TCP_PORT", "0")],
                "AIO_BROKER_TCP_PORT",
            ),
            (
                vec![
                    ("AIO_BROKER_HOSTNAME", "b"),
                    ("AIO_MQTT_USE_TLS", "sometimes"),
                ],
                "AIO_MQTT_USE_TLS",
            ),
            (
                vec![("AIO_BROKER_HOSTNAME", "b"), ("AIO_MQTT_KEEP_ALIVE", "1m")],
                "AIO_MQTT_KEEP_ALIVE",
            ),
            (
                vec![
                    ("AIO_BROKER_HOSTNAME", "b"),
                    ("AIO_MQTT_SESSION_EXPIRY", "-1"),
                ],
                "AIO_MQTT_SESSION_EXPIRY",
            ),
            (
                vec![
                    ("AIO_BROKER_HOSTNAME", "b"),
                    ("AIO_MQTT_USE_TLS", "false"),
                    ("AIO_TLS_CA_FILE", "/x"),
                ],
                "AIO_TLS_CA_FILE",
            ),
            (
                vec![("AIO_BROKER_HOSTNAME", "b"), ("AIO_MQTT_KEEP_ALIVE", "2")],
                "keep-alive",
            ),
        ] {
            let err = env(&pairs).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
            assert!(err.to_string().contains(needle), "{needle}: {err}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn env_not_utf8() {
        use std::os::unix::ffi::OsStringExt;
        let err = ConnectOptions::from_env_with(|k| {
            (k == "AIO_BROKER_HOSTNAME").then(|| std::ffi::OsString::from_vec(vec![0xff]))
        })
        .unwrap_err();
        assert!(err.to_string().contains("AIO_BROKER_HOSTNAME"));
    }
}
