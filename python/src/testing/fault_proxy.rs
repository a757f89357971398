//! Test-only: `mqstate._native._FaultProxy`, the Rust fault-injection proxy
//! (`mqstate_testing::fault_proxy`) for the Python suite, so that every language's fault
//! scenarios use one proxy implementation.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use mqstate_testing::fault_proxy::{Direction, FaultProxy as Proxy, PacketKind};
use pyo3::prelude::*;

use crate::errors;
use crate::runtime::{runtime, wait};

/// A TCP proxy on 127.0.0.1 (a free port) to `127.0.0.1:upstream_port` that breaks
/// connections on demand.
#[pyclass(module = "mqstate._native", name = "_FaultProxy", frozen)]
#[derive(Debug)]
pub(crate) struct FaultProxy {
    proxy: Mutex<Option<Proxy>>,
    port: u16,
}

fn kind(py: Python<'_>, name: &str) -> PyResult<PacketKind> {
    Ok(match name {
        "connect" => PacketKind::Connect,
        "connack" => PacketKind::ConnAck,
        "publish" => PacketKind::Publish,
        "puback" => PacketKind::PubAck,
        "subscribe" => PacketKind::Subscribe,
        "suback" => PacketKind::SubAck,
        other => {
            return Err(errors::exception(
                py,
                "invalid_argument",
                &format!(
                    "unknown packet kind {other:?} (connect, connack, publish, puback, subscribe, suback)"
                ),
                py.None(),
            ));
        }
    })
}

impl FaultProxy {
    fn with<T>(&self, py: Python<'_>, f: impl FnOnce(&Proxy) -> T) -> PyResult<T> {
        let guard = self.proxy.lock().map_err(|_| {
            errors::exception(py, "connection", "the proxy's lock is poisoned", py.None())
        })?;
        match guard.as_ref() {
            Some(p) => Ok(f(p)),
            None => Err(errors::exception(
                py,
                "disconnected",
                "the proxy is stopped",
                py.None(),
            )),
        }
    }
}

#[pymethods]
impl FaultProxy {
    #[new]
    fn new(py: Python<'_>, upstream_port: u16) -> PyResult<Self> {
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port));
        let proxy = wait(py, async move {
            runtime()
                .spawn(Proxy::start(upstream))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
        })?
        .map_err(|e| errors::exception(py, "connection", &e, py.None()))?;
        Ok(FaultProxy {
            port: proxy.port(),
            proxy: Mutex::new(Some(proxy)),
        })
    }

    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    fn drop_connections(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, Proxy::drop_connections)
    }

    fn set_refusing(&self, py: Python<'_>, refusing: bool) -> PyResult<()> {
        self.with(py, |p| p.set_refusing(refusing))
    }

    fn set_stalled(&self, py: Python<'_>, stalled: bool) -> PyResult<()> {
        self.with(py, |p| p.set_stalled(stalled))
    }

    fn set_delay(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let delay = Duration::try_from_secs_f64(seconds).map_err(|e| {
            errors::exception(
                py,
                "invalid_argument",
                &format!("delay {seconds}: {e}"),
                py.None(),
            )
        })?;
        self.with(py, |p| p.set_delay(delay))
    }

    fn cut_next_packet(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, Proxy::cut_next_packet)
    }

    /// `direction`: "to_broker" or "to_client".
    fn disconnect_on(&self, py: Python<'_>, kind_name: &str, direction: &str) -> PyResult<()> {
        let kind = kind(py, kind_name)?;
        let direction = match direction {
            "to_broker" => Direction::ToBroker,
            "to_client" => Direction::ToClient,
            other => {
                return Err(errors::exception(
                    py,
                    "invalid_argument",
                    &format!("unknown direction {other:?} (to_broker, to_client)"),
                    py.None(),
                ));
            }
        };
        self.with(py, |p| p.disconnect_on(kind, direction))
    }

    fn reject_next(&self, py: Python<'_>, kind_name: &str) -> PyResult<()> {
        let kind = kind(py, kind_name)?;
        self.with(py, |p| p.reject_next(kind))
    }

    #[getter]
    fn faults_applied(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, Proxy::faults_applied)
    }

    fn stop(&self) {
        if let Some(proxy) = self.proxy.lock().ok().and_then(|mut p| p.take()) {
            drop(proxy);
        }
    }
}
