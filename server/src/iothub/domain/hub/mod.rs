//! [`IotHub`]: the hub's state (registry, queues, sessions, feedback, telemetry) behind one
//! mutex, the service-side API in Rust, and the calls the device endpoint makes. No lock is
//! held across an await; deliveries are handed to connection tasks through channels.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc, watch};

use super::durable::{self, HubFile, Key, Write};
use super::error::IotHubError;
use super::feedback::{Feedback, FeedbackLimits, PENDING};
use super::message::{
    C2dMessage, FeedbackBatch, FeedbackRecord, QueueInfo, SendReceipt, TelemetryMessage,
    format_time,
};
use super::policies::{self, Policies, Right, ServiceGrant, SharedAccessPolicy};
use super::properties::Property;
use super::queue::{self, DeviceQueue, LockedMessage, Now, Outcome, Settlement};
use super::registry::{Device, DeviceSpec, DeviceStatus, DeviceUpdate, Identity, new_etag};
use super::sas;
use super::x509::ClientCert;
use crate::iothub::config::IotHubConfig;
use crate::untrusted::{RefusalLog, cut};

/// What the hub tells a connection task.
#[derive(Debug)]
pub(crate) enum ToConnection {
    /// Deliver this C2D message, locked under `lock`, at QoS 1 (QoS 0 when `at_most_once`: it
    /// is complete already), once the hub's commit `after` is on disk (0: at once), so that a
    /// delivery is counted on disk before the device can see it. Its acknowledgement
    /// completes it with [`IotHub::puback`] and the same `lock`.
    Deliver {
        stored: Arc<queue::Stored>,
        lock: u128,
        at_most_once: bool,
        after: u64,
    },
    /// Close the connection (another one took over, the device was deleted...).
    Close(String),
}

#[derive(Debug)]
struct Connection {
    id: u64,
    tx: mpsc::UnboundedSender<ToConnection>,
    clean_session: bool,
    /// An AMQP connection: its links take messages by lock token ([`IotHub::receive_locked`]),
    /// so [`IotHub::pump`] pushes nothing to it (a kept MQTT session is left for a later MQTT
    /// connection).
    by_lock_token: bool,
}

/// The device's subscription to its device-bound topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subscription {
    /// Not subscribed: messages wait in the queue.
    None,
    /// Granted QoS 0: a message is completed when it is sent (at most once).
    AtMostOnce,
    /// Granted QoS 1: a message is completed by the device's PUBACK.
    AtLeastOnce,
}

#[derive(Debug)]
struct DeviceState {
    device: Device,
    queue: DeviceQueue,
    /// The MQTT session: present while connected, and kept after a disconnect when the
    /// device connected with clean session 0.
    session: Option<Subscription>,
    connection: Option<Connection>,
    telemetry: VecDeque<TelemetryMessage>,
    /// When it last connected or disconnected, and last connected or sent something (IoT
    /// Hub's `connectionStateUpdatedTime` and `lastActivityTime`; not kept across restarts).
    connection_changed: Option<SystemTime>,
    last_activity: Option<SystemTime>,
}

impl DeviceState {
    fn identity(&self) -> Identity {
        Identity {
            device: self.device.clone(),
            connected: self.connection.is_some(),
            connection_state_updated: self.connection_changed,
            last_activity: self.last_activity,
            queue_depth: self.queue.depth(),
        }
    }
}

#[derive(Debug)]
struct State {
    devices: BTreeMap<String, DeviceState>,
    feedback: Feedback,
    next_sequence: u64,
    next_connection: u64,
    /// The last feedback records made, for the dashboard (receiving batches takes them away).
    recent_feedback: VecDeque<FeedbackRecord>,
    /// With a data dir: changes are recorded (queues and feedback record their own).
    track: bool,
    /// Registry changes, and the changes of a failed commit to write again.
    journal: Vec<Key>,
    /// Batches of changes the committer has taken (the number of the last one).
    taken: u64,
}

impl State {
    /// The registered device `device_id`, or [`IotHubError::DeviceNotFound`].
    fn device(&self, device_id: &str) -> Result<&DeviceState, IotHubError> {
        self.devices
            .get(device_id)
            .ok_or_else(|| IotHubError::DeviceNotFound(device_id.to_owned()))
    }

    /// The registered device `device_id`, to change, or [`IotHubError::DeviceNotFound`].
    fn device_mut(&mut self, device_id: &str) -> Result<&mut DeviceState, IotHubError> {
        self.devices
            .get_mut(device_id)
            .ok_or_else(|| IotHubError::DeviceNotFound(device_id.to_owned()))
    }
}

/// Where the committer is: the last batch on disk, and the last that failed (with why).
#[derive(Debug, Clone, Default)]
struct CommitStatus {
    committed: u64,
    failed: Option<(u64, String)>,
    /// The committer stopped (the hub was shut down): nothing more is written.
    stopped: bool,
}

/// The data dir side of a hub.
struct Durable {
    file: Arc<HubFile>,
    /// Wakes the committer.
    wake: Notify,
    status: watch::Sender<CommitStatus>,
}

/// How many feedback records [`IotHub::recent_feedback`] keeps.
const RECENT_FEEDBACK: usize = 100;

/// Addresses of a running hub's listeners.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HubEndpoints {
    /// The MQTT 3.1.1 device endpoint.
    pub device_endpoint: Option<SocketAddr>,
    /// Whether the device endpoint speaks TLS.
    pub tls: bool,
    /// The HTTP admin API.
    pub admin_endpoint: Option<SocketAddr>,
    /// IoT Hub's REST API over HTTPS (the service SDKs' registry).
    #[serde(default)]
    pub https_endpoint: Option<SocketAddr>,
    /// The AMQP 1.0 service endpoint over TLS (the service SDKs' messaging).
    #[serde(default)]
    pub amqp_endpoint: Option<SocketAddr>,
}

/// A device as listed by [`IotHub::devices`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfo {
    /// The device id.
    pub device_id: String,
    /// Its generation id.
    pub generation_id: String,
    /// `Connected` or `Disconnected`.
    pub connection_state: String,
    /// Messages in its queue.
    pub queue_depth: usize,
    /// How it authenticates: IoT Hub's `authentication.type` (`sas`, `selfSigned`,
    /// `certificateAuthority`); `sas` when an older server does not say.
    #[serde(default = "sas_type")]
    pub authentication: String,
}

fn sas_type() -> String {
    "sas".to_owned()
}

/// The hub's description (`GET /hub`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HubInfo {
    /// Host name devices use in user names and SAS tokens.
    pub hostname: String,
    /// Where it listens.
    #[serde(flatten)]
    pub endpoints: HubEndpoints,
    /// Queue limit per device.
    pub max_queue_depth: usize,
    /// Largest C2D body.
    pub max_message_size: usize,
    /// Lock timeout, seconds.
    pub lock_timeout_secs: f64,
    /// Default TTL, seconds.
    pub default_ttl_secs: f64,
    /// Max delivery count.
    pub max_delivery_count: u32,
    /// Records per feedback batch.
    pub feedback_batch_size: usize,
    /// Feedback batch interval, seconds.
    pub feedback_batch_interval_secs: f64,
}

struct Inner {
    config: IotHubConfig,
    state: Mutex<State>,
    /// Wakes the timer task when deadlines may have moved.
    timer: Notify,
    /// Wakes feedback receivers.
    feedback_ready: Notify,
    /// Wakes telemetry readers.
    telemetry_ready: Notify,
    /// Wakes lock-token receivers ([`IotHub::receive_locked`]): a message may be Enqueued.
    devicebound_ready: Notify,
    endpoints: Mutex<HubEndpoints>,
    ca_pem: Mutex<Option<String>>,
    /// The shared access policies back ends authenticate with.
    policies: Policies,
    /// With a data dir.
    durable: Option<Durable>,
    /// Which refusals (bad tokens, refused links and CONNECTs) every transport logs.
    refusals: RefusalLog,
}

/// The local IoT Hub's service side, in process: register devices, send cloud-to-device
/// messages, read queues, purge, receive feedback, read telemetry. Cheap to clone; every clone
/// is the same hub. Get it from [`crate::LocalServer::iothub`] or
/// [`crate::iothub::IotHubServer::hub`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use mqstate_server::iothub::{Ack, C2dMessage, DeviceSpec, IotHubConfig, IotHubServer};
///
/// let server = IotHubServer::start(IotHubConfig::default()).await?;
/// let hub = server.hub();
/// let device = hub.add_device(&DeviceSpec::parse("sensor-1")?)?;
/// let token = hub.device_token("sensor-1", Duration::from_secs(3600))?; // MQTT password
/// hub.send("sensor-1", C2dMessage::new("reboot").message_id("m-1").ack(Ack::Full))?;
/// if let Some(batch) = hub.receive_feedback(Duration::from_secs(30)).await {
///     println!("{:?}", batch.records);
///     hub.complete_feedback(&batch.lock_token)?;
/// }
/// # let _ = (device, token);
/// server.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct IotHub {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for IotHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IotHub")
            .field("hostname", &self.inner.config.hostname)
            .finish_non_exhaustive()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the state half-updated in a way that
    // matters more than stopping the hub would, so keep serving.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl IotHub {
    /// A hub with this configuration and its devices registered; nothing listens yet (see
    /// [`crate::iothub::IotHubServer`]).
    pub(crate) fn new(config: IotHubConfig) -> Result<IotHub, IotHubError> {
        config.validate()?;
        let limits = FeedbackLimits {
            batch_size: config.feedback_batch_size,
            batch_interval: config.feedback_batch_interval,
            ttl: config.feedback_ttl,
            lock_duration: config.feedback_lock_duration,
            max_delivery_count: config.feedback_max_delivery_count,
        };
        let mut specs = config.devices.clone();
        for path in &config.device_files {
            let text = std::fs::read_to_string(path)
                .map_err(|e| IotHubError::Config(format!("device file {}: {e}", path.display())))?;
            specs.extend(DeviceSpec::parse_file(&text).map_err(|e| {
                IotHubError::Config(format!("device file {}: {e}", path.display()))
            })?);
        }
        let now = Now::current();
        let mut state = State {
            devices: BTreeMap::new(),
            feedback: Feedback::new(limits, now.instant),
            next_sequence: 1,
            next_connection: 1,
            recent_feedback: VecDeque::new(),
            track: false,
            journal: Vec::new(),
            taken: 0,
        };
        let policies = Policies::load(config.policies_file.as_deref(), config.data_dir.as_deref())?;
        let durable = match &config.data_dir {
            Some(dir) => {
                let (file, loaded) = HubFile::open(dir)?;
                restore(&mut state, loaded, limits, now)?;
                tracing::info!(
                    file = %file.path().display(),
                    devices = state.devices.len(),
                    messages = state.devices.values().map(|d| d.queue.depth()).sum::<usize>(),
                    "iothub: state restored from the data dir"
                );
                Some(Durable {
                    file: Arc::new(file),
                    wake: Notify::new(),
                    status: watch::Sender::new(CommitStatus::default()),
                })
            }
            None => None,
        };
        let hub = IotHub {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                config,
                timer: Notify::new(),
                feedback_ready: Notify::new(),
                telemetry_ready: Notify::new(),
                devicebound_ready: Notify::new(),
                endpoints: Mutex::new(HubEndpoints::default()),
                ca_pem: Mutex::new(None),
                policies,
                durable,
                refusals: RefusalLog::default(),
            }),
        };
        {
            // Locks held when the hub stopped end as a lost connection ends them.
            let mut state = hub.state();
            let ids: Vec<String> = state.devices.keys().cloned().collect();
            let max = hub.inner.config.max_delivery_count;
            for id in ids {
                let Some(device) = state.devices.get_mut(&id) else {
                    continue;
                };
                let outcomes = device.queue.release_restored(now, max);
                let generation = device.device.generation_id.clone();
                hub.record_outcomes(&mut state, &id, &generation, outcomes, now);
            }
        }
        let mut restored: std::collections::HashSet<String> =
            hub.state().devices.keys().cloned().collect();
        for spec in &specs {
            hub.configure_device(spec, &mut restored)
                .map_err(|e| IotHubError::Config(e.to_string()))?;
        }
        // What the restart changed (released locks, configured devices) is on disk before
        // anything is served.
        if let Some(d) = &hub.inner.durable {
            let (ticket, _keys, writes, next_sequence) = hub.take_writes();
            if let Err(e) = d.file.commit(&writes, next_sequence) {
                return Err(IotHubError::DataDir(crate::persist::PersistError::caused(
                    e.to_string(),
                    e,
                )));
            }
            d.status.send_modify(|s| s.committed = ticket);
        }
        Ok(hub)
    }

    /// Registers a device given in the configuration; a device in `restored` (read from the
    /// data dir, not configured yet) keeps its generation id and its keys, unless the
    /// configuration gives keys. A device configured twice is an error, as without a data dir.
    fn configure_device(
        &self,
        spec: &DeviceSpec,
        restored: &mut std::collections::HashSet<String>,
    ) -> Result<(), IotHubError> {
        let mut state = self.state();
        let track = state.track;
        if restored.remove(&spec.id)
            && let Some(d) = state.devices.get_mut(&spec.id)
        {
            let configured = Device::create(spec)?;
            let mut changed = false;
            if spec.primary_key.is_some() && d.device.primary_key != configured.primary_key {
                d.device.primary_key = configured.primary_key;
                changed = true;
            }
            if spec.secondary_key.is_some() && d.device.secondary_key != configured.secondary_key {
                d.device.secondary_key = configured.secondary_key;
                changed = true;
            }
            if changed {
                // A changed identity gets a new ETag, as every registry change does.
                d.device.etag = new_etag();
                if track {
                    state.journal.push(Key::Device(spec.id.clone()));
                }
            }
            return Ok(());
        }
        drop(state);
        self.add_device(spec).map(drop)
    }

    /// Which refusals to log, per peer address: every transport logs its refusals through it.
    pub(crate) fn refusals(&self) -> &RefusalLog {
        &self.inner.refusals
    }

    /// The configuration the hub runs with.
    pub fn config(&self) -> &IotHubConfig {
        &self.inner.config
    }

    pub(crate) fn set_endpoints(&self, endpoints: HubEndpoints, ca_pem: Option<String>) {
        *relock(&self.inner.endpoints) = endpoints;
        *relock(&self.inner.ca_pem) = ca_pem;
    }

    /// Where the hub listens.
    pub fn endpoints(&self) -> HubEndpoints {
        relock(&self.inner.endpoints).clone()
    }

    /// Checks a service token (`SharedAccessSignature sr={host}&sig=...&se=...&skn={policy}`)
    /// against the hub's shared access policies; the grant says what it may do
    /// ([`ServiceGrant::require`]).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::{Duration, SystemTime};
    /// use mqstate_server::iothub::policies::{service_token, Right};
    /// use mqstate_server::iothub::{IotHubConfig, IotHubServer};
    ///
    /// let server = IotHubServer::start(IotHubConfig::default()).await?;
    /// let hub = server.hub();
    /// let service = hub.policy("service")?;
    /// let token = service_token("localhost", &service, SystemTime::now() + Duration::from_secs(60))?;
    /// hub.authenticate_service(&token)?.require(Right::ServiceConnect)?;
    /// # Ok(()) }
    /// ```
    pub fn authenticate_service(&self, token: &str) -> Result<ServiceGrant, IotHubError> {
        self.inner
            .policies
            .authenticate(token, &self.inner.config.hostname, SystemTime::now())
    }

    /// Checks a device's SAS token, whatever the transport (MQTT password, AMQP `put-token`,
    /// HTTPS `Authorization`): for `{host}/devices/{id}`, not expired, signed with the device's
    /// primary or secondary key, or (with `skn`) with the key of a shared access policy that
    /// has DeviceConnect, as IoT Hub allows; the device registered and enabled. Returns when
    /// the token expires. Every refusal is [`IotHubError::Unauthorized`] with the reason.
    pub fn authenticate_device(
        &self,
        token: &str,
        device_id: &str,
    ) -> Result<SystemTime, IotHubError> {
        let unauthorized = |why: String| IotHubError::Unauthorized(why);
        let device = self
            .device(device_id)
            .map_err(|_| unauthorized(format!("device {:?} is not registered", cut(device_id))))?;
        if device.status == DeviceStatus::Disabled {
            return Err(unauthorized(format!("device {device_id:?} is disabled")));
        }
        self.check_device_token(&device, token, SystemTime::now())
    }

    /// Checks that a TLS client certificate authenticates X.509 device `device_id` (its
    /// thumbprint, or its chain to the hub's CAs and its CN); for a device that sends no
    /// token (HTTPS). Registered and enabled as for a token.
    pub(crate) fn authenticate_device_cert(
        &self,
        cert: &ClientCert,
        device_id: &str,
    ) -> Result<(), IotHubError> {
        let unauthorized = |why: String| IotHubError::Unauthorized(why);
        let device = self
            .device(device_id)
            .map_err(|_| unauthorized(format!("device {:?} is not registered", cut(device_id))))?;
        if device.status == DeviceStatus::Disabled {
            return Err(unauthorized(format!("device {device_id:?} is disabled")));
        }
        cert.authenticates(device_id, &device.authentication)
            .map_err(unauthorized)
    }

    /// [`IotHub::authenticate_device`] for a device already looked up (the caller may hold
    /// the state lock: this takes no lock).
    fn check_device_token(
        &self,
        device: &Device,
        token: &str,
        now: SystemTime,
    ) -> Result<SystemTime, IotHubError> {
        let unauthorized = |e: IotHubError| match e {
            IotHubError::Unauthorized(_) => e,
            other => IotHubError::Unauthorized(other.to_string()),
        };
        let resource = sas::device_resource(&self.inner.config.hostname, &device.device_id);
        let parsed = sas::SasToken::parse(token).map_err(unauthorized)?;
        if parsed.key_name.is_none() {
            if device.authentication.is_x509() {
                // IoT Hub keeps no keys for an X.509 device: only its certificate (or a
                // policy token with DeviceConnect) authenticates it.
                return Err(IotHubError::Unauthorized(format!(
                    "device {:?} authenticates with an X.509 certificate, not its own SAS keys",
                    device.device_id
                )));
            }
            return sas::validate(
                token,
                &resource,
                &[&device.primary_key, &device.secondary_key],
                now,
            )
            .map(|t| t.expires_at())
            .map_err(unauthorized);
        }
        let grant = self
            .inner
            .policies
            .authenticate_for(token, &resource, now)?;
        grant.require(Right::DeviceConnect)?;
        Ok(grant.expires_at)
    }

    /// The shared access policy named `name`, with its keys.
    pub fn policy(&self, name: &str) -> Result<SharedAccessPolicy, IotHubError> {
        self.inner.policies.get(name).cloned().ok_or_else(|| {
            let names: Vec<&str> = self
                .inner
                .policies
                .iter()
                .map(|p| p.key_name.as_str())
                .collect();
            IotHubError::invalid(format!(
                "no shared access policy named {name:?}; the hub has {}",
                names.join(", ")
            ))
        })
    }

    /// The shared access policies, with their keys.
    pub fn policies(&self) -> Vec<SharedAccessPolicy> {
        self.inner.policies.iter().cloned().collect()
    }

    /// The service connection string of policy `name`
    /// (`HostName=...;SharedAccessKeyName=...;SharedAccessKey=...`), what back ends and the
    /// official service SDKs connect with.
    pub fn service_connection_string(&self, name: &str) -> Result<String, IotHubError> {
        Ok(policies::connection_string(
            &self.inner.config.hostname,
            &self.policy(name)?,
        ))
    }

    /// The PEM certificate of a self-signed device endpoint (what devices must trust).
    pub fn ca_certificate_pem(&self) -> Option<String> {
        relock(&self.inner.ca_pem).clone()
    }

    /// The hub's description.
    pub fn info(&self) -> HubInfo {
        let c = &self.inner.config;
        HubInfo {
            hostname: c.hostname.clone(),
            endpoints: self.endpoints(),
            max_queue_depth: c.max_queue_depth,
            max_message_size: c.max_message_size,
            lock_timeout_secs: c.lock_timeout.as_secs_f64(),
            default_ttl_secs: c.default_ttl.as_secs_f64(),
            max_delivery_count: c.max_delivery_count,
            feedback_batch_size: c.feedback_batch_size,
            feedback_batch_interval_secs: c.feedback_batch_interval.as_secs_f64(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        relock(&self.inner.state)
    }

    /// The hub's name: the first label of its host name (the `userId` of feedback).
    pub fn hub_name(&self) -> &str {
        let host = &self.inner.config.hostname;
        host.split('.').next().unwrap_or(host)
    }

    // ----- registry -----
}

mod durability;
mod feedback;
mod registry;
mod send;
mod sessions;
mod telemetry;

use durability::restore;
pub(crate) use sessions::ConnectRefusal;
