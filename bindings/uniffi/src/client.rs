//! `Client`: the async state store client; every call is a `suspend` function in Kotlin.

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use mqstate::SetOptions;

use crate::errors::MqstateError;
use crate::observe::Observation;
use crate::options::ConnectOptions;
use crate::runtime::{call, run};
use crate::types::{Hlc, to_core};

/// A value and its version.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Versioned {
    /// The value's bytes.
    pub value: Vec<u8>,
    /// Its version.
    pub version: Hlc,
}

/// The outcome of a `set`.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct SetOutcome {
    /// False when the `nx` / `nex` condition failed (nothing was written).
    pub applied: bool,
    /// The key's new version when applied (for a lock, the fencing token).
    pub version: Hlc,
}

/// The outcome of a `vdel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum VdelOutcome {
    /// The key held the value and was deleted.
    Deleted,
    /// The key did not exist.
    NotFound,
    /// The key held another value; nothing was deleted.
    ValueMismatch,
}

/// A state store client: one MQTT connection, any number of concurrent calls.
#[derive(Debug, uniffi::Object)]
pub struct Client {
    pub(crate) inner: mqstate::Client,
}

impl Client {
    pub(crate) fn with_timeout(&self, timeout: Option<Duration>) -> mqstate::Client {
        match timeout {
            Some(t) => self.inner.with_timeout(t),
            None => self.inner.clone(),
        }
    }
}

#[uniffi::export]
impl Client {
    /// Connects; returns once the broker acknowledged the client's subscriptions.
    #[uniffi::constructor]
    pub async fn connect(options: ConnectOptions) -> Result<Arc<Client>, MqstateError> {
        let options = options.to_core()?;
        let inner = run(mqstate::Client::connect(options)).await?;
        Ok(Arc::new(Client { inner }))
    }

    /// Connects with the Azure IoT Operations variables (`AIO_BROKER_HOSTNAME`, ...) read from
    /// `variables` (pass `System.getenv()`).
    #[uniffi::constructor]
    pub async fn from_env(variables: HashMap<String, String>) -> Result<Arc<Client>, MqstateError> {
        let options =
            mqstate::ConnectOptions::from_env_with(|name| variables.get(name).map(OsString::from))?;
        let inner = run(mqstate::Client::connect(options)).await?;
        Ok(Arc::new(Client { inner }))
    }

    /// The MQTT client id.
    pub fn client_id(&self) -> String {
        self.inner.client_id().to_owned()
    }

    /// `connecting`, `connected`, `reconnecting` or `closed`.
    pub fn state(&self) -> String {
        self.inner.state().as_str().to_owned()
    }

    /// Requests waiting for a response (diagnostics).
    pub fn requests_in_flight(&self) -> u64 {
        u64::try_from(self.inner.requests_in_flight()).unwrap_or(u64::MAX)
    }

    /// `GET key`: the value and its version, or null, with the client's timeout.
    ///
    /// The hot call's shape is chosen for the JNA-based Kotlin binding, where every argument
    /// and optional costs native calls and allocations: the key and nothing else (no optional
    /// timeout; `get_with_timeout` takes one), one buffer for the result. The Kotlin
    /// `Client.get(key, timeout)` picks between the two (kotlin/README.md, "Benchmark").
    pub async fn get(&self, key: Vec<u8>) -> Result<Option<Versioned>, MqstateError> {
        let client = self.inner.clone();
        get_versioned(client, key).await
    }

    /// `GET key` with its own timeout instead of the client's.
    pub async fn get_with_timeout(
        &self,
        key: Vec<u8>,
        timeout: Duration,
    ) -> Result<Option<Versioned>, MqstateError> {
        let client = self.inner.with_timeout(timeout);
        get_versioned(client, key).await
    }

    /// `SET key value [NX|NEX] [PX expiry]`, with `__ft` when a fencing token is given and
    /// `aio-persistence: true` with `persist`.
    #[allow(clippy::too_many_arguments)]
    #[uniffi::method(default(
        nx = false,
        nex = false,
        expiry = None,
        fencing_token = None,
        persist = false,
        timeout = None
    ))]
    pub async fn set(
        &self,
        key: Vec<u8>,
        value: Vec<u8>,
        nx: bool,
        nex: bool,
        expiry: Option<Duration>,
        fencing_token: Option<Hlc>,
        persist: bool,
        timeout: Option<Duration>,
    ) -> Result<SetOutcome, MqstateError> {
        let client = self.with_timeout(timeout);
        let mut options = SetOptions::default();
        if persist {
            options = options.persist();
        }
        // Both flags at once is the core's refusal, with its one message in every language.
        options.condition = mqstate::SetCondition::from_flags(nx, nex)?;
        if let Some(expiry) = expiry {
            options = options.expiry(expiry);
        }
        if let Some(token) = to_core(fencing_token)? {
            options = options.fencing_token(token);
        }
        let outcome = call(async move { client.set(&key, &value, options).await }).await?;
        Ok(SetOutcome {
            applied: outcome.applied,
            version: outcome.version.into(),
        })
    }

    /// `DEL key`: the number of keys deleted (0 or 1).
    #[uniffi::method(default(fencing_token = None, timeout = None))]
    pub async fn del(
        &self,
        key: Vec<u8>,
        fencing_token: Option<Hlc>,
        timeout: Option<Duration>,
    ) -> Result<u32, MqstateError> {
        let client = self.with_timeout(timeout);
        let token = to_core(fencing_token)?;
        call(async move { client.del(&key, token.as_ref()).await }).await
    }

    /// `VDEL key value`: deletes the key only if it holds `value`.
    #[uniffi::method(default(fencing_token = None, timeout = None))]
    pub async fn vdel(
        &self,
        key: Vec<u8>,
        value: Vec<u8>,
        fencing_token: Option<Hlc>,
        timeout: Option<Duration>,
    ) -> Result<VdelOutcome, MqstateError> {
        let client = self.with_timeout(timeout);
        let token = to_core(fencing_token)?;
        let outcome = call(async move { client.vdel(&key, &value, token.as_ref()).await }).await?;
        Ok(match outcome {
            mqstate::VdelOutcome::Deleted => VdelOutcome::Deleted,
            mqstate::VdelOutcome::NotFound => VdelOutcome::NotFound,
            mqstate::VdelOutcome::ValueMismatch => VdelOutcome::ValueMismatch,
        })
    }

    /// Observes a key: returns once the server registered it (`KEYNOTIFY`). Read it with
    /// `next()`, or as a Flow with `observeFlow` (kotlin/README.md).
    #[uniffi::method(default(timeout = None))]
    pub async fn observe(
        &self,
        key: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Arc<Observation>, MqstateError> {
        let client = self.with_timeout(timeout);
        let owner = self.inner.clone();
        let observation = run(async move { client.observe(&key).await }).await?;
        Ok(Arc::new(Observation::new(observation, &owner)))
    }

    /// Stops observing a key: every observation of it ends (`KEYNOTIFY key STOP`).
    #[uniffi::method(default(timeout = None))]
    pub async fn unobserve(
        &self,
        key: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<(), MqstateError> {
        let client = self.with_timeout(timeout);
        run(async move { client.unobserve(&key).await }).await
    }

    /// Closes the connection (DISCONNECT) and waits for it; idempotent.
    pub async fn close(&self) -> Result<(), MqstateError> {
        let client = self.inner.clone();
        run(async move {
            client.close().await;
            Ok::<_, mqstate::Error>(())
        })
        .await
    }
}

/// The one `GET` of both exported shapes: polled in the runtime's context (`runtime::call`).
async fn get_versioned(
    client: mqstate::Client,
    key: Vec<u8>,
) -> Result<Option<Versioned>, MqstateError> {
    let got = call(async move { client.get(&key).await }).await?;
    Ok(got.map(|v| Versioned {
        value: v.value.to_vec(),
        version: v.version.into(),
    }))
}
