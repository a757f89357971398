//! The test tooling of the native module, compiled with the `testing` cargo feature only (off
//! in the released wheel: scripts/test-python builds with it, scripts/dist without). Nothing
//! of the client depends on it; `mqstate/testing.py` reports its absence.
//!
//! - `LocalServer` (here): the local state store (embedded broker + store) in-process, on the
//!   library's runtime; and `_SilentBroker`, a broker without a store.
//! - `LocalIotHub` (`iothub`): the local IoT Hub in-process.
//! - `_FaultProxy` (`fault_proxy`): the fault-injection proxy of every language's suite.
//! - `_bench_rust_get`, `_bench_rust_blocking_get`, `_panicking_call` (`bench`): the benchmark's
//!   Rust figures and the panic test hook.

mod bench;
mod fault_proxy;
mod iothub;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use mqstate_server::broker::{EmbeddedBroker, EmbeddedBrokerConfig};
use mqstate_server::persist::PersistMode;
use mqstate_server::{LocalServer as Server, ServerConfig};
use mqstate_testing::SecuredFiles;

use crate::errors;
use crate::runtime::{runtime, wait};

/// Adds the test classes and functions to the native module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<LocalServer>()?;
    m.add_class::<SilentBroker>()?;
    m.add_class::<iothub::LocalIotHub>()?;
    m.add_class::<fault_proxy::FaultProxy>()?;
    m.add_function(wrap_pyfunction!(bench::_bench_rust_get, m)?)?;
    m.add_function(wrap_pyfunction!(bench::_bench_rust_blocking_get, m)?)?;
    m.add_function(wrap_pyfunction!(bench::_panicking_call, m)?)?;
    Ok(())
}

/// A local state store on 127.0.0.1 and a free port (or `port`), running in this process.
#[pyclass(module = "mqstate.testing", name = "LocalServer", frozen)]
#[derive(Debug)]
pub(crate) struct LocalServer {
    server: Mutex<Option<Server>>,
    host: String,
    port: u16,
    url: String,
    /// With `username`/`password`: the TLS port and the generated files (the CA clients
    /// trust must outlive the server).
    secured: Option<(u16, SecuredFiles)>,
}

#[pymethods]
impl LocalServer {
    #[new]
    #[pyo3(signature = (*, port = 0, max_keys = None, data_dir = None, persist = "all", username = None, password = None))]
    fn new(
        py: Python<'_>,
        port: u16,
        max_keys: Option<usize>,
        data_dir: Option<std::path::PathBuf>,
        persist: &str,
        username: Option<String>,
        password: Option<String>,
    ) -> PyResult<Self> {
        let mode = persist
            .parse::<PersistMode>()
            .map_err(|e| errors::invalid_argument(py, format!("persist: {e}")))?;
        let mut config = ServerConfig::default()
            .with_port(port)
            .with_max_keys(max_keys);
        if let Some(dir) = data_dir {
            config = config.with_data_dir(dir, mode);
        }
        // Secured: a TLS listener with a generated CA and certificate, and this one user.
        let files = match (&username, &password) {
            (Some(user), Some(password)) => Some(
                SecuredFiles::generate(user, password)
                    .map_err(|e| errors::invalid_argument(py, e.to_string()))?,
            ),
            (None, None) => None,
            _ => {
                return Err(errors::invalid_argument(
                    py,
                    "username and password go together",
                ));
            }
        };
        if let Some(files) = &files {
            config.security = files.security_config();
        }
        let server = wait(py, async move {
            // Spawned so that the server's tasks start from a runtime worker.
            runtime()
                .spawn(Server::start_with(config))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
        })?
        .map_err(|e| {
            errors::exception(
                py,
                "connection",
                &format!("the local state store did not start: {e}"),
                py.None(),
            )
        })?;
        Ok(LocalServer {
            host: server.host().to_owned(),
            port: server.port(),
            url: server.url(),
            secured: server.tls_port().zip(files),
            server: Mutex::new(Some(server)),
        })
    }

    #[getter]
    fn host(&self) -> &str {
        &self.host
    }

    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// `mqtt://127.0.0.1:PORT`, for `Client(url)`.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    /// The TLS listener's port (secured servers only, else None).
    #[getter]
    fn tls_port(&self) -> Option<u16> {
        self.secured.as_ref().map(|(port, _)| *port)
    }

    /// `mqtts://localhost:TLS_PORT` (secured servers only, else None).
    #[getter]
    fn tls_url(&self) -> Option<String> {
        self.tls_port().map(|p| format!("mqtts://localhost:{p}"))
    }

    /// The generated CA certificate (PEM file) clients must trust (secured servers only).
    #[getter]
    fn ca_file(&self) -> Option<String> {
        self.secured
            .as_ref()
            .map(|(_, f)| f.ca_file().display().to_string())
    }

    /// Whether the server is running (not stopped yet).
    #[getter]
    fn running(&self) -> bool {
        self.server.lock().map(|s| s.is_some()).unwrap_or(false)
    }

    /// Stops the server and waits for it (idempotent). Connected clients lose their
    /// connection and try to reconnect.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let server = self.server.lock().ok().and_then(|mut s| s.take());
        if let Some(server) = server {
            wait(py, server.shutdown())?;
        }
        Ok(())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc_info))]
    fn __exit__(&self, py: Python<'_>, _exc_info: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.stop(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<mqstate.testing.LocalServer {}{}>",
            self.url,
            if self.running() { "" } else { " stopped" }
        )
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        if let Some(server) = self.server.get_mut().ok().and_then(Option::take) {
            // Stops in the background: a garbage-collected server must not block the caller.
            runtime().spawn(server.shutdown());
        }
    }
}

/// Test-only: an MQTT broker with no state store behind it, so requests stay unanswered (to
/// test timeouts and cancellation).
#[pyclass(module = "mqstate._native", name = "_SilentBroker", frozen)]
#[derive(Debug)]
pub(crate) struct SilentBroker {
    broker: Mutex<Option<EmbeddedBroker>>,
    url: String,
}

#[pymethods]
impl SilentBroker {
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        let config = EmbeddedBrokerConfig {
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            max_packet_size: 1 << 20,
        };
        let broker = wait(py, async move {
            runtime()
                .spawn(async move {
                    let (events, mut rx) = tokio::sync::mpsc::unbounded_channel();
                    // Nobody listens to connection events here; drain them.
                    tokio::spawn(async move { while rx.recv().await.is_some() {} });
                    EmbeddedBroker::start(&config, events).await
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
        })?
        .map_err(|e| errors::exception(py, "connection", &e, py.None()))?;
        let url = format!("mqtt://{}", broker.local_addr());
        Ok(SilentBroker {
            broker: Mutex::new(Some(broker)),
            url,
        })
    }

    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let broker = self.broker.lock().ok().and_then(|mut b| b.take());
        if let Some(broker) = broker {
            wait(py, broker.shutdown())?;
        }
        Ok(())
    }
}

impl Drop for SilentBroker {
    fn drop(&mut self) {
        if let Some(broker) = self.broker.get_mut().ok().and_then(Option::take) {
            runtime().spawn(broker.shutdown());
        }
    }
}
