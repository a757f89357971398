//! Connection settings from Python: a URL, keyword arguments, or the Azure IoT Operations
//! environment variables, with keyword arguments overriding the other two.

use std::path::PathBuf;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use mqstate::{ConnectOptions, ConnectSettings};

use crate::convert::duration_arg;
use crate::errors::{self, OrRaise};

/// Every keyword argument a client constructor accepts (also the stub's list).
const KNOWN: &[&str] = &[
    "host",
    "port",
    "client_id",
    "username",
    "password",
    "password_file",
    "tls",
    "ca_file",
    "cert_file",
    "key_file",
    "server_name",
    "sat_file",
    "keep_alive",
    "session_expiry",
    "request_timeout",
    "connect_timeout",
];

/// Where the settings start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Base {
    /// A URL if given, else `mqtt://127.0.0.1:1883` (`host` / `port` override it).
    UrlOrDefault,
    /// The `AIO_*` environment variables.
    Environment,
}

/// Builds the options from `url` (or the environment) and the keyword arguments: the
/// keyword arguments are converted here and merged by the core
/// ([`ConnectSettings::resolve`], which owns every rule of the merge).
pub(crate) fn connect_options(
    py: Python<'_>,
    base: Base,
    url: Option<&str>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<ConnectOptions> {
    let mut settings = ConnectSettings::default();
    match base {
        Base::Environment => settings.from_env = true,
        Base::UrlOrDefault => settings.url = url.map(str::to_owned),
    }
    if let Some(kwargs) = kwargs {
        for (name, value) in kwargs.iter() {
            let name = name.cast::<PyString>()?.to_str()?.to_owned();
            if !KNOWN.contains(&name.as_str()) {
                return Err(PyTypeError::new_err(format!(
                    "unexpected keyword argument '{name}' (expected one of: {})",
                    KNOWN.join(", ")
                )));
            }
            if value.is_none() {
                continue; // None means "not given": keep the URL's / environment's value
            }
            let text = |v: &Bound<'_, PyAny>| -> PyResult<String> {
                v.extract::<String>()
                    .map_err(|_| PyTypeError::new_err(format!("{name} must be a str")))
            };
            let path = |v: &Bound<'_, PyAny>| -> PyResult<PathBuf> {
                v.extract::<PathBuf>().map_err(|_| {
                    PyTypeError::new_err(format!("{name} must be a str or an os.PathLike"))
                })
            };
            match name.as_str() {
                "host" => settings.host = Some(text(&value)?),
                "port" => {
                    settings.port = Some(value.extract::<u16>().map_err(|_| {
                        errors::invalid_argument(
                            py,
                            format!("port must be an int from 1 to 65535, not {value}"),
                        )
                    })?);
                }
                "client_id" => settings.client_id = Some(text(&value)?),
                "username" => settings.username = Some(text(&value)?),
                "password" => settings.password = Some(text(&value)?),
                "password_file" => settings.password_file = Some(path(&value)?),
                "tls" => {
                    settings.tls = Some(
                        value
                            .extract::<bool>()
                            .map_err(|_| PyTypeError::new_err("tls must be a bool"))?,
                    );
                }
                "ca_file" => settings.ca_file = Some(path(&value)?),
                "cert_file" => settings.cert_file = Some(path(&value)?),
                "key_file" => settings.key_file = Some(path(&value)?),
                "server_name" => settings.server_name = Some(text(&value)?),
                "sat_file" => settings.sat_file = Some(path(&value)?),
                "keep_alive" => settings.keep_alive = Some(duration_arg(&value, &name)?),
                "session_expiry" => settings.session_expiry = Some(duration_arg(&value, &name)?),
                "request_timeout" => {
                    settings.request_timeout = Some(duration_arg(&value, &name)?);
                }
                "connect_timeout" => {
                    settings.connect_timeout = Some(duration_arg(&value, &name)?);
                }
                _ => {}
            }
        }
    }
    settings.resolve().or_raise(py)
}
