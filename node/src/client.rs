//! `NativeClient`: the async client, one Promise per call.

use std::collections::HashMap;
use std::ffi::OsString;
use std::time::Duration;

use mqstate::{
    Client, ConnectOptions, ConnectSettings, Error, SetCondition, SetOptions, VdelOutcome,
};
use napi::Env;
use napi::bindgen_prelude::{BufferSlice, Either, PromiseRaw, Uint8ArraySlice};
use napi_derive::napi;

use crate::cancel::{CancelToken, receiver};
use crate::error::js_error;
use crate::hlc::Hlc;
use crate::observe::NativeObservation;
use crate::scan::NativeScan;
use crate::util::{bytes, millis, rejected, spawn, whole};

/// TLS settings (`tls: true` uses the platform's roots).
#[napi(object)]
#[derive(Debug, Default)]
pub struct TlsConfig {
    /// PEM file with the CA certificate(s) of the broker.
    pub ca_file: Option<String>,
    /// PEM file with the client certificate chain (mutual TLS).
    pub cert_file: Option<String>,
    /// PEM file with the client's private key (mutual TLS).
    pub key_file: Option<String>,
    /// The name the broker's certificate must be valid for, if not the host.
    pub server_name: Option<String>,
}

/// Reconnection backoff.
#[napi(object)]
#[derive(Debug, Default)]
pub struct ReconnectConfig {
    /// Delay before the first reconnection attempt, in ms (default 100).
    pub initial_delay_ms: Option<f64>,
    /// Longest delay between attempts, in ms (default 10,000); also how long a connection
    /// must last for the backoff to start again from the first delay.
    pub max_delay_ms: Option<f64>,
}

/// Where to connect and how. `url` (`mqtt://host:port?client_id=...`, `mqtts://...`) is read
/// first; the other fields override it.
#[napi(object)]
#[derive(Debug, Default)]
pub struct ClientOptions {
    /// A broker URL, as `ConnectOptions::from_url` reads it.
    pub url: Option<String>,
    /// Broker host (default 127.0.0.1).
    pub host: Option<String>,
    /// Broker port (default 1883, or 8883 with TLS).
    pub port: Option<f64>,
    /// MQTT client id (generated when absent).
    pub client_id: Option<String>,
    /// Default timeout of every request, in ms (default 10,000).
    pub timeout_ms: Option<f64>,
    /// How long connecting may take, in ms (default 10,000).
    pub connect_timeout_ms: Option<f64>,
    /// MQTT keep-alive, in seconds (default 60).
    pub keep_alive_seconds: Option<f64>,
    /// How long the broker keeps the session after a disconnection, in seconds (default 3600).
    pub session_expiry_seconds: Option<f64>,
    /// MQTT user name.
    pub username: Option<String>,
    /// MQTT password.
    pub password: Option<String>,
    /// A file holding the password, read at every connection.
    pub password_file: Option<String>,
    /// A Kubernetes service account token file (`K8S-SAT` enhanced authentication).
    pub sat_file: Option<String>,
    /// TLS: `true` for the platform's roots, or settings.
    pub tls: Option<Either<bool, TlsConfig>>,
    /// Reconnection backoff.
    pub reconnect: Option<ReconnectConfig>,
    /// Notifications buffered per observation before it reports a lag (default 1024).
    pub observation_buffer: Option<f64>,
    /// Largest MQTT packet accepted, in bytes (default 16 MiB).
    pub max_packet_size: Option<f64>,
}

/// The options object converted field by field (JS numbers and units) and merged by the core
/// (`ConnectSettings::resolve`, which owns every rule of the merge).
fn connect_options(o: ClientOptions) -> Result<ConnectOptions, Error> {
    let mut s = ConnectSettings::default();
    s.url = o.url;
    s.host = o.host;
    s.port = o.port.map(|p| whole("port", p)).transpose()?;
    s.client_id = o.client_id;
    s.request_timeout = millis("timeoutMs", o.timeout_ms)?;
    s.connect_timeout = millis("connectTimeoutMs", o.connect_timeout_ms)?;
    if let Some(secs) = o.keep_alive_seconds {
        s.keep_alive = Some(Duration::from_secs(whole("keepAliveSeconds", secs)?));
    }
    if let Some(secs) = o.session_expiry_seconds {
        s.session_expiry = Some(Duration::from_secs(whole("sessionExpirySeconds", secs)?));
    }
    s.username = o.username;
    s.password = o.password;
    s.password_file = o.password_file.map(Into::into);
    s.sat_file = o.sat_file.map(Into::into);
    match o.tls {
        None => {}
        Some(Either::A(on)) => s.tls = Some(on),
        Some(Either::B(t)) => {
            s.tls = Some(true);
            s.ca_file = t.ca_file.map(Into::into);
            s.cert_file = t.cert_file.map(Into::into);
            s.key_file = t.key_file.map(Into::into);
            s.server_name = t.server_name;
        }
    }
    if let Some(r) = o.reconnect {
        s.reconnect_initial_delay = millis("reconnect.initialDelayMs", r.initial_delay_ms)?;
        s.reconnect_max_delay = millis("reconnect.maxDelayMs", r.max_delay_ms)?;
    }
    if let Some(n) = o.observation_buffer {
        s.observation_buffer = Some(whole("observationBuffer", n)?);
    }
    if let Some(n) = o.max_packet_size {
        s.max_packet_size = Some(whole("maxPacketSize", n)?);
    }
    s.resolve()
}

/// A value and its version.
#[napi(object, object_from_js = false)]
pub struct Versioned<'a> {
    /// The value's bytes.
    pub value: BufferSlice<'a>,
    /// Its version.
    pub version: Hlc,
}

impl std::fmt::Debug for Versioned<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Versioned")
            .field("value", &&*self.value)
            .field("version", &self.version)
            .finish()
    }
}

/// The outcome of a `set`.
#[napi(object, object_from_js = false)]
#[derive(Debug)]
pub struct SetOutcome {
    /// False when the `nx` / `nex` condition failed (nothing was written).
    pub applied: bool,
    /// The key's new version when applied (for a lock, the fencing token).
    pub version: Hlc,
}

/// A state store client: one MQTT connection, any number of concurrent calls.
#[napi]
#[derive(Debug)]
pub struct NativeClient {
    pub(crate) client: Client,
}

impl NativeClient {
    fn with_timeout(&self, timeout_ms: Option<f64>) -> Result<Client, Error> {
        Ok(match millis("timeoutMs", timeout_ms)? {
            Some(t) => self.client.with_timeout(t),
            None => self.client.clone(),
        })
    }
}

fn fencing(token: Option<Hlc>) -> Option<mqstate::Hlc> {
    token.map(|t| t.inner)
}

#[napi]
impl NativeClient {
    /// Connects; resolves once the broker acknowledged the client's subscriptions.
    #[napi]
    pub fn connect(
        env: &Env,
        options: ClientOptions,
    ) -> napi::Result<PromiseRaw<'_, NativeClient>> {
        match connect_options(options) {
            Ok(options) => spawn(env, None, Client::connect(options), |_, client| {
                Ok(NativeClient { client })
            }),
            Err(e) => rejected(env, e),
        }
    }

    /// Connects with the Azure IoT Operations variables (`AIO_BROKER_HOSTNAME`, ...) read
    /// from `env` (the wrapper passes `process.env`).
    #[napi]
    pub fn from_env<'env>(
        env: &'env Env,
        variables: HashMap<String, String>,
    ) -> napi::Result<PromiseRaw<'env, NativeClient>> {
        match ConnectOptions::from_env_with(|name| variables.get(name).map(OsString::from)) {
            Ok(options) => spawn(env, None, Client::connect(options), |_, client| {
                Ok(NativeClient { client })
            }),
            Err(e) => rejected(env, e),
        }
    }

    /// The MQTT client id.
    #[napi(getter)]
    pub fn client_id(&self) -> String {
        self.client.client_id().to_owned()
    }

    /// `connecting`, `connected`, `reconnecting` or `closed`.
    #[napi(getter)]
    pub fn state(&self) -> &'static str {
        self.client.state().as_str()
    }

    /// Requests waiting for a response (diagnostics).
    #[napi(getter)]
    pub fn requests_in_flight(&self) -> u32 {
        u32::try_from(self.client.requests_in_flight()).unwrap_or(u32::MAX)
    }

    /// Keys registered for notifications (diagnostics).
    #[napi(getter)]
    pub fn observed_keys(&self) -> u32 {
        u32::try_from(self.client.observed_keys()).unwrap_or(u32::MAX)
    }

    /// `GET key`: the value and its version, or null.
    #[napi(ts_return_type = "Promise<Versioned | null>")]
    pub fn get<'env>(
        &self,
        env: &'env Env,
        key: Either<String, Uint8ArraySlice<'_>>,
        timeout_ms: Option<f64>,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, Option<Versioned<'env>>>> {
        let client = match self.with_timeout(timeout_ms) {
            Ok(c) => c,
            Err(e) => return rejected(env, e),
        };
        let key = bytes(key);
        spawn(
            env,
            receiver(cancel),
            async move { client.get(&key).await },
            |env, got| {
                got.map(|v| {
                    Ok(Versioned {
                        value: BufferSlice::copy_from(env, &v.value)?,
                        version: v.version.into(),
                    })
                })
                .transpose()
            },
        )
    }

    /// `SET key value [NX|NEX] [PX expiryMs]` (with `__ft` when a fencing token is given, and
    /// `aio-persistence: true` with `persist`).
    #[allow(clippy::too_many_arguments)]
    #[napi]
    pub fn set<'env>(
        &self,
        env: &'env Env,
        key: Either<String, Uint8ArraySlice<'_>>,
        value: Either<String, Uint8ArraySlice<'_>>,
        nx: Option<bool>,
        nex: Option<bool>,
        expiry_ms: Option<f64>,
        fencing_token: Option<Hlc>,
        timeout_ms: Option<f64>,
        cancel: Option<&CancelToken>,
        persist: Option<bool>,
    ) -> napi::Result<PromiseRaw<'env, SetOutcome>> {
        let prepared = (|| {
            let client = self.with_timeout(timeout_ms)?;
            let mut options = SetOptions::default();
            if persist.unwrap_or(false) {
                options = options.persist();
            }
            options.condition =
                SetCondition::from_flags(nx.unwrap_or(false), nex.unwrap_or(false))?;
            if let Some(expiry) = millis("expiryMs", expiry_ms)? {
                options = options.expiry(expiry);
            }
            if let Some(token) = fencing(fencing_token) {
                options = options.fencing_token(token);
            }
            Ok((client, options))
        })();
        let (client, options) = match prepared {
            Ok(p) => p,
            Err(e) => return rejected(env, e),
        };
        let (key, value) = (bytes(key), bytes(value));
        spawn(
            env,
            receiver(cancel),
            async move { client.set(&key, &value, options).await },
            |_, outcome| {
                Ok(SetOutcome {
                    applied: outcome.applied,
                    version: outcome.version.into(),
                })
            },
        )
    }

    /// `DEL key`: the number of keys deleted (0 or 1).
    #[napi]
    pub fn del<'env>(
        &self,
        env: &'env Env,
        key: Either<String, Uint8ArraySlice<'_>>,
        fencing_token: Option<Hlc>,
        timeout_ms: Option<f64>,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, u32>> {
        let client = match self.with_timeout(timeout_ms) {
            Ok(c) => c,
            Err(e) => return rejected(env, e),
        };
        let (key, token) = (bytes(key), fencing(fencing_token));
        spawn(
            env,
            receiver(cancel),
            async move { client.del(&key, token.as_ref()).await },
            |_, n| Ok(n),
        )
    }

    /// `VDEL key value`: `deleted`, `notFound` or `valueMismatch`.
    #[napi]
    pub fn vdel<'env>(
        &self,
        env: &'env Env,
        key: Either<String, Uint8ArraySlice<'_>>,
        value: Either<String, Uint8ArraySlice<'_>>,
        fencing_token: Option<Hlc>,
        timeout_ms: Option<f64>,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, &'static str>> {
        let client = match self.with_timeout(timeout_ms) {
            Ok(c) => c,
            Err(e) => return rejected(env, e),
        };
        let (key, value, token) = (bytes(key), bytes(value), fencing(fencing_token));
        spawn(
            env,
            receiver(cancel),
            async move { client.vdel(&key, &value, token.as_ref()).await },
            |_, outcome| {
                Ok(match outcome {
                    VdelOutcome::Deleted => "deleted",
                    VdelOutcome::NotFound => "notFound",
                    VdelOutcome::ValueMismatch => "valueMismatch",
                })
            },
        )
    }

    /// Observes a key: resolves once the server registered it (`KEYNOTIFY`).
    #[napi]
    pub fn observe<'env>(
        &self,
        env: &'env Env,
        key: Either<String, Uint8ArraySlice<'_>>,
        timeout_ms: Option<f64>,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, NativeObservation>> {
        let client = match self.with_timeout(timeout_ms) {
            Ok(c) => c,
            Err(e) => return rejected(env, e),
        };
        let key = bytes(key);
        let owner = self.client.clone();
        spawn(
            env,
            receiver(cancel),
            async move { client.observe(&key).await },
            move |_, observation| Ok(NativeObservation::new(observation, &owner)),
        )
    }

    /// Stops observing a key: every observation of it ends (`KEYNOTIFY key STOP`).
    #[napi]
    pub fn unobserve<'env>(
        &self,
        env: &'env Env,
        key: Either<String, Uint8ArraySlice<'_>>,
        timeout_ms: Option<f64>,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let client = match self.with_timeout(timeout_ms) {
            Ok(c) => c,
            Err(e) => return rejected(env, e),
        };
        let key = bytes(key);
        spawn(
            env,
            receiver(cancel),
            async move { client.unobserve(&key).await },
            |_, ()| Ok(()),
        )
    }

    /// Lists the keys that match a glob pattern (`SCAN`), a page per `nextPage()`; each page
    /// is one request with this timeout (default: the client's). Sends nothing; throws
    /// `ERR_INVALID_ARGUMENT` for an empty pattern.
    #[napi]
    pub fn scan(
        &self,
        env: &Env,
        pattern: Either<String, Uint8ArraySlice<'_>>,
        timeout_ms: Option<f64>,
    ) -> napi::Result<NativeScan> {
        self.with_timeout(timeout_ms)
            .and_then(|client| client.scan(bytes(pattern)))
            .map(NativeScan::new)
            .map_err(|e| js_error(env, &e, &[]))
    }

    /// Closes the connection (DISCONNECT) and waits for it; idempotent.
    #[napi]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let client = self.client.clone();
        spawn(
            env,
            None,
            async move {
                client.close().await;
                Ok(())
            },
            |_, ()| Ok(()),
        )
    }
}
