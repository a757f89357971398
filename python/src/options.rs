//! Connection settings from Python: a URL, keyword arguments, or the Azure IoT Operations
//! environment variables, with keyword arguments overriding the other two.

use std::path::PathBuf;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use mqstate::ConnectOptions;

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

/// Builds the options from `url` (or the environment) and the keyword arguments.
pub(crate) fn connect_options(
    py: Python<'_>,
    base: Base,
    url: Option<&str>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<ConnectOptions> {
    let mut options = match (base, url) {
        (Base::Environment, _) => ConnectOptions::from_env().or_raise(py)?,
        (Base::UrlOrDefault, Some(url)) => ConnectOptions::from_url(url).or_raise(py)?,
        (Base::UrlOrDefault, None) => ConnectOptions::default(),
    };
    let Some(kwargs) = kwargs else {
        return Ok(options);
    };
    let mut tls_wanted: Option<bool> = None;
    let mut tls = options.tls.clone().unwrap_or_default();
    let mut tls_touched = false;
    let mut port_given = false;
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
            "host" => options.host = text(&value)?,
            "port" => {
                port_given = true;
                options.port = value.extract::<u16>().map_err(|_| {
                    errors::invalid_argument(
                        py,
                        format!("port must be an int from 1 to 65535, not {value}"),
                    )
                })?;
            }
            "client_id" => options.client_id = Some(text(&value)?),
            "username" => options.username = Some(text(&value)?),
            "password" => options.password = Some(text(&value)?),
            "password_file" => options.password_file = Some(path(&value)?),
            "tls" => {
                tls_wanted = Some(
                    value
                        .extract::<bool>()
                        .map_err(|_| PyTypeError::new_err("tls must be a bool"))?,
                );
            }
            "ca_file" => {
                tls.ca_file = Some(path(&value)?);
                tls_touched = true;
            }
            "cert_file" => {
                tls.client_cert_file = Some(path(&value)?);
                tls_touched = true;
            }
            "key_file" => {
                tls.client_key_file = Some(path(&value)?);
                tls_touched = true;
            }
            "server_name" => {
                tls.server_name = Some(text(&value)?);
                tls_touched = true;
            }
            "sat_file" => options.sat_file = Some(path(&value)?),
            "keep_alive" => options.keep_alive = duration_arg(&value, &name)?,
            "session_expiry" => options.session_expiry = duration_arg(&value, &name)?,
            "request_timeout" => options.request_timeout = duration_arg(&value, &name)?,
            "connect_timeout" => options.connect_timeout = duration_arg(&value, &name)?,
            _ => {}
        }
    }
    match tls_wanted {
        Some(false) if tls_touched => {
            return Err(errors::invalid_argument(
                py,
                "tls=False contradicts ca_file / cert_file / key_file / server_name",
            ));
        }
        Some(false) => options.tls = None,
        Some(true) => options.tls = Some(tls),
        None if tls_touched || options.tls.is_some() => options.tls = Some(tls),
        None => {}
    }
    // Without a URL or a port, the core decides the port (8883 with TLS, as `mqtts://host`).
    if base == Base::UrlOrDefault && url.is_none() && !port_given {
        options.port = ConnectOptions::default_port(options.tls.is_some());
    }
    options.validate().or_raise(py)?;
    Ok(options)
}
