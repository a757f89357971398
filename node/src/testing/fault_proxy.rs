//! Test-only: `FaultProxy`, the Rust fault-injection proxy (`mqstate_testing::fault_proxy`,
//! the one the Rust and Python suites use) for the Node suite, so that every language's fault
//! scenarios go through one proxy implementation.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use mqstate::Error;
use mqstate_testing::fault_proxy::{Direction, FaultProxy as Proxy, PacketKind};
use napi::Env;
use napi::bindgen_prelude::PromiseRaw;
use napi_derive::napi;

use crate::error::js_error;
use crate::util::{millis, rejected, spawn, whole};

/// A TCP proxy on 127.0.0.1 (a free port) to `127.0.0.1:upstreamPort` that forwards whole
/// MQTT packets and breaks connections on demand (for fault tests).
#[napi]
#[derive(Debug)]
pub struct FaultProxy {
    proxy: Arc<Mutex<Option<Proxy>>>,
    port: u16,
}

fn kind(name: &str) -> Result<PacketKind, Error> {
    Ok(match name {
        "connect" => PacketKind::Connect,
        "connack" => PacketKind::ConnAck,
        "publish" => PacketKind::Publish,
        "puback" => PacketKind::PubAck,
        "subscribe" => PacketKind::Subscribe,
        "suback" => PacketKind::SubAck,
        other => {
            return Err(Error::InvalidArgument(format!(
                "unknown packet kind {other:?} (connect, connack, publish, puback, subscribe, suback)"
            )));
        }
    })
}

impl FaultProxy {
    fn with<T>(&self, env: &Env, f: impl FnOnce(&Proxy) -> T) -> napi::Result<T> {
        let guard = self.proxy.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref() {
            Some(p) => Ok(f(p)),
            None => Err(js_error(
                env,
                &Error::Disconnected("the proxy is stopped".into()),
                &[],
            )),
        }
    }
}

#[napi]
impl FaultProxy {
    /// Starts a proxy to `127.0.0.1:upstreamPort` (a local server's port).
    #[napi]
    pub fn start(env: &Env, upstream_port: f64) -> napi::Result<PromiseRaw<'_, FaultProxy>> {
        let port: u16 = match whole("upstreamPort", upstream_port) {
            Ok(p) => p,
            Err(e) => return rejected(env, e),
        };
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        spawn(
            env,
            None,
            async move {
                Proxy::start(upstream)
                    .await
                    .map_err(|e| Error::connection(format!("the fault proxy did not start: {e}")))
            },
            |_, proxy| {
                Ok(FaultProxy {
                    port: proxy.port(),
                    proxy: Arc::new(Mutex::new(Some(proxy))),
                })
            },
        )
    }

    /// The port clients connect to.
    #[napi(getter)]
    pub fn port(&self) -> u32 {
        u32::from(self.port)
    }

    /// `mqtt://127.0.0.1:PORT`, for `Client.connect`.
    #[napi(getter)]
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// Closes every open connection now (new ones are accepted).
    #[napi]
    pub fn drop_connections(&self, env: Env) -> napi::Result<()> {
        self.with(&env, Proxy::drop_connections)
    }

    /// While set, new connections are closed as soon as they are accepted.
    #[napi]
    pub fn set_refusing(&self, env: Env, refusing: bool) -> napi::Result<()> {
        self.with(&env, |p| p.set_refusing(refusing))
    }

    /// While set, nothing is forwarded (connections stay open: a stalled broker).
    #[napi]
    pub fn set_stalled(&self, env: Env, stalled: bool) -> napi::Result<()> {
        self.with(&env, |p| p.set_stalled(stalled))
    }

    /// Delays every packet by `ms` (0: none).
    #[napi]
    pub fn set_delay(&self, env: Env, ms: f64) -> napi::Result<()> {
        let delay = millis("ms", Some(ms))
            .map_err(|e| js_error(&env, &e, &[]))?
            .unwrap_or_default();
        self.with(&env, |p| p.set_delay(delay))
    }

    /// The next packet is forwarded only in part, then its connection is closed.
    #[napi]
    pub fn cut_next_packet(&self, env: Env) -> napi::Result<()> {
        self.with(&env, Proxy::cut_next_packet)
    }

    /// The next packet of `kind` (`publish`, `puback`, `subscribe`...) travelling in
    /// `direction` (`to_broker` or `to_client`) closes its connection instead of passing.
    #[napi]
    pub fn disconnect_on(
        &self,
        env: Env,
        kind_name: String,
        direction: String,
    ) -> napi::Result<()> {
        let kind = kind(&kind_name).map_err(|e| js_error(&env, &e, &[]))?;
        let direction = match direction.as_str() {
            "to_broker" => Direction::ToBroker,
            "to_client" => Direction::ToClient,
            other => {
                let e = Error::InvalidArgument(format!(
                    "unknown direction {other:?} (to_broker, to_client)"
                ));
                return Err(js_error(&env, &e, &[]));
            }
        };
        self.with(&env, |p| p.disconnect_on(kind, direction))
    }

    /// The next CONNACK, SUBACK or PUBACK from the broker is rewritten to a failure.
    #[napi]
    pub fn reject_next(&self, env: Env, kind_name: String) -> napi::Result<()> {
        let kind = kind(&kind_name).map_err(|e| js_error(&env, &e, &[]))?;
        self.with(&env, |p| p.reject_next(kind))
    }

    /// How many one-shot faults (cut, disconnect on, reject) took effect so far.
    #[napi(getter)]
    pub fn faults_applied(&self, env: Env) -> napi::Result<u32> {
        self.with(&env, |p| p.faults_applied() as u32)
    }

    /// Stops the proxy and closes its connections (idempotent).
    #[napi]
    pub fn stop(&self) {
        let proxy = self.proxy.lock().ok().and_then(|mut p| p.take());
        drop(proxy);
    }
}
