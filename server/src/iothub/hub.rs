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

use super::config::IotHubConfig;
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
use crate::untrusted::{RefusalLog, cut};

/// What the hub tells a connection task.
#[derive(Debug)]
pub(crate) enum ToConnection {
    /// Publish this C2D message with this packet id, at QoS 1 (QoS 0 when `at_most_once`),
    /// once the hub's commit `after` is on disk (0: at once), so that a delivery is counted
    /// on disk before the device can see it.
    Deliver {
        topic: String,
        payload: Bytes,
        packet_id: u16,
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
                return Err(IotHubError::DataDir(e.to_string()));
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

    /// Registers a device; its keys are generated when the spec has none.
    pub fn add_device(&self, spec: &DeviceSpec) -> Result<Device, IotHubError> {
        self.register(Device::create(spec)?)
    }

    /// Registers a device as IoT Hub's REST registry API creates one (`PUT /devices/{id}`
    /// without `If-Match`): keys generated when absent, status and capabilities as given.
    pub fn create_device(&self, id: &str, update: &DeviceUpdate) -> Result<Device, IotHubError> {
        self.register(Device::create_with(id, update)?)
    }

    /// Replaces what a back end sets on a device (keys not given are kept) if `if_match` is
    /// absent, `*` or its current ETag (else [`IotHubError::PreconditionFailed`]); it gets a
    /// new ETag. Disabling a device closes its connection, as on IoT Hub.
    pub fn update_device(
        &self,
        id: &str,
        update: &DeviceUpdate,
        if_match: Option<&str>,
    ) -> Result<Device, IotHubError> {
        let mut state = self.state();
        let track = state.track;
        let d = state
            .devices
            .get_mut(id)
            .ok_or_else(|| IotHubError::DeviceNotFound(id.to_owned()))?;
        if !d.device.etag_matches(if_match) {
            return Err(IotHubError::PreconditionFailed(id.to_owned()));
        }
        let device = d.device.updated(update)?;
        d.device = device.clone();
        if device.status == DeviceStatus::Disabled
            && let Some(c) = &d.connection
        {
            let _ =
                c.tx.send(ToConnection::Close("the device was disabled".into()));
        }
        if track {
            state.journal.push(Key::Device(id.to_owned()));
        }
        drop(state);
        self.changed();
        tracing::info!(device = %id, status = device.status.as_str(), "iothub: device updated");
        Ok(device)
    }

    /// A device with its connection state, activity times and queue depth.
    pub(crate) fn identity(&self, id: &str) -> Result<Identity, IotHubError> {
        self.state()
            .devices
            .get(id)
            .map(DeviceState::identity)
            .ok_or_else(|| IotHubError::DeviceNotFound(id.to_owned()))
    }

    /// The first `top` devices (by id), as [`IotHub::identity`].
    pub(crate) fn identities(&self, top: usize) -> Vec<Identity> {
        self.state()
            .devices
            .values()
            .take(top)
            .map(DeviceState::identity)
            .collect()
    }

    /// Inserts a new device; refused if its id is taken.
    fn register(&self, device: Device) -> Result<Device, IotHubError> {
        let mut state = self.state();
        if state.devices.contains_key(&device.device_id) {
            return Err(IotHubError::DeviceAlreadyExists(device.device_id));
        }
        let track = state.track;
        state.devices.insert(
            device.device_id.clone(),
            DeviceState {
                device: device.clone(),
                queue: DeviceQueue::new(track),
                session: None,
                connection: None,
                telemetry: VecDeque::new(),
                connection_changed: None,
                last_activity: None,
            },
        );
        if track {
            state.journal.push(Key::Device(device.device_id.clone()));
        }
        drop(state);
        self.changed();
        tracing::info!(device = %device.device_id, "iothub: device registered");
        Ok(device)
    }

    /// Deletes a device: its queue, its telemetry and its pending feedback go with it, and its
    /// connection is closed.
    pub fn remove_device(&self, id: &str) -> Result<(), IotHubError> {
        self.delete_device(id, None)
    }

    /// [`IotHub::remove_device`] if `if_match` is absent, `*` or the device's current ETag
    /// (else [`IotHubError::PreconditionFailed`], nothing deleted).
    pub fn delete_device(&self, id: &str, if_match: Option<&str>) -> Result<(), IotHubError> {
        let mut state = self.state();
        if let Some(d) = state.devices.get(id)
            && !d.device.etag_matches(if_match)
        {
            return Err(IotHubError::PreconditionFailed(id.to_owned()));
        }
        let removed = state
            .devices
            .remove(id)
            .ok_or_else(|| IotHubError::DeviceNotFound(id.to_owned()))?;
        state.feedback.drop_device(id);
        if state.track {
            state.journal.push(Key::Removed(id.to_owned()));
        }
        drop(state);
        if let Some(c) = removed.connection {
            let _ =
                c.tx.send(ToConnection::Close("the device was deleted".into()));
        }
        tracing::info!(device = %id, "iothub: device deleted");
        self.changed();
        Ok(())
    }

    /// One device, with its keys.
    pub fn device(&self, id: &str) -> Result<Device, IotHubError> {
        self.state()
            .devices
            .get(id)
            .map(|d| d.device.clone())
            .ok_or_else(|| IotHubError::DeviceNotFound(id.to_owned()))
    }

    /// Every device, by id.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.state()
            .devices
            .values()
            .map(|d| DeviceInfo {
                device_id: d.device.device_id.clone(),
                generation_id: d.device.generation_id.clone(),
                connection_state: if d.connection.is_some() {
                    "Connected"
                } else {
                    "Disconnected"
                }
                .to_owned(),
                queue_depth: d.queue.depth(),
            })
            .collect()
    }

    /// A SAS token for the device, signed with its primary key, valid for `ttl`: the MQTT
    /// password of the device.
    pub fn device_token(&self, id: &str, ttl: Duration) -> Result<String, IotHubError> {
        if ttl.is_zero() {
            return Err(IotHubError::invalid("the token TTL must be positive"));
        }
        let device = self.device(id)?;
        sas::generate(
            &sas::device_resource(&self.inner.config.hostname, id),
            &device.primary_key,
            SystemTime::now() + ttl,
        )
    }

    /// The MQTT user name of a device: `{hostname}/{deviceId}/?api-version=2021-04-12`.
    pub fn device_username(&self, id: &str) -> String {
        format!(
            "{}/{id}/?api-version=2021-04-12",
            self.inner.config.hostname
        )
    }

    /// The device's connection string (`HostName=...;DeviceId=...;SharedAccessKey=...`).
    pub fn connection_string(&self, id: &str) -> Result<String, IotHubError> {
        let device = self.device(id)?;
        Ok(format!(
            "HostName={};DeviceId={id};SharedAccessKey={}",
            self.inner.config.hostname, device.primary_key
        ))
    }

    // ----- cloud-to-device -----

    /// Sends a cloud-to-device message: checked, then Enqueued (and delivered at once if the
    /// device is connected and subscribed). Refused, with nothing changed, for an unknown
    /// device, a full queue, a body over the limit, a bad TTL or property name.
    pub fn send(&self, device_id: &str, message: C2dMessage) -> Result<SendReceipt, IotHubError> {
        message.check(self.inner.config.max_message_size)?;
        let now = Now::current();
        let mut state = self.state();
        let sequence_number = state.next_sequence;
        let stored = queue::store(
            device_id,
            message,
            sequence_number,
            now,
            self.inner.config.default_ttl,
        )?;
        let device = state
            .devices
            .get_mut(device_id)
            .ok_or_else(|| IotHubError::DeviceNotFound(device_id.to_owned()))?;
        let stored = device
            .queue
            .enqueue(stored, device_id, self.inner.config.max_queue_depth)?;
        let receipt = SendReceipt {
            device_id: device_id.to_owned(),
            message_id: stored.message.message_id.clone(),
            sequence_number,
            enqueued_time_utc: format_time(stored.enqueued_utc),
            expiry_time_utc: format_time(stored.expiry_utc),
            queue_depth: device.queue.depth(),
        };
        if stored.message.message_id.is_none() {
            tracing::warn!(device = %device_id, sequence_number,
                "iothub: message sent without a message id: its feedback cannot be correlated");
        }
        state.next_sequence += 1;
        self.pump(&mut state, device_id, now);
        drop(state);
        self.changed();
        Ok(receipt)
    }

    /// The device's queue: depth, messages and their states, recently finished messages.
    pub fn queue(&self, device_id: &str) -> Result<QueueInfo, IotHubError> {
        let state = self.state();
        let device = state
            .devices
            .get(device_id)
            .ok_or_else(|| IotHubError::DeviceNotFound(device_id.to_owned()))?;
        Ok(device
            .queue
            .info(device_id, self.inner.config.max_queue_depth))
    }

    /// Purges the device's queue (every message dead-lettered with `Purged` feedback); returns
    /// how many messages were purged.
    pub fn purge(&self, device_id: &str) -> Result<usize, IotHubError> {
        let now = Now::current();
        let mut state = self.state();
        let device = state
            .devices
            .get_mut(device_id)
            .ok_or_else(|| IotHubError::DeviceNotFound(device_id.to_owned()))?;
        let outcomes = device.queue.purge(now);
        let generation = device.device.generation_id.clone();
        let count = outcomes.len();
        self.record_outcomes(&mut state, device_id, &generation, outcomes, now);
        drop(state);
        self.changed();
        tracing::info!(device = %device_id, count, "iothub: queue purged");
        Ok(count)
    }

    fn record_outcomes(
        &self,
        state: &mut State,
        device_id: &str,
        generation: &str,
        outcomes: Vec<Outcome>,
        now: Now,
    ) {
        let mut made = false;
        for o in outcomes {
            tracing::debug!(device = %device_id, seq = o.stored.sequence_number, status = ?o.status, "iothub: message finished");
            if o.stored.message.ack.wants(o.status) {
                let record = FeedbackRecord {
                    original_message_id: o.stored.message.message_id.clone(),
                    enqueued_time_utc: format_time(o.at),
                    status_code: o.status,
                    description: o.status.description().to_owned(),
                    device_id: device_id.to_owned(),
                    device_generation_id: generation.to_owned(),
                };
                if state.recent_feedback.len() == RECENT_FEEDBACK {
                    state.recent_feedback.pop_front();
                }
                state.recent_feedback.push_back(record.clone());
                made |= state.feedback.add(record, now);
            }
        }
        if made {
            self.inner.feedback_ready.notify_waiters();
        }
    }

    /// Locks and sends every Enqueued message of the device if it is connected and subscribed
    /// (and, with a QoS 0 subscription, completes it at once: there will be no PUBACK).
    fn pump(&self, state: &mut State, device_id: &str, now: Now) {
        // Called wherever a message may have become Enqueued (send, lock end, abandon): the
        // lock-token receivers (AMQP links, HTTPS long polls) look too.
        self.inner.devicebound_ready.notify_waiters();
        // The deliveries wait for the commit that holds their locks and counts.
        let after = if self.inner.durable.is_some() {
            state.taken + 1
        } else {
            0
        };
        let Some(device) = state.devices.get_mut(device_id) else {
            return;
        };
        let Some(connection) = device.connection.as_ref().filter(|c| !c.by_lock_token) else {
            return;
        };
        let at_most_once = match device.session {
            Some(Subscription::AtLeastOnce) => false,
            Some(Subscription::AtMostOnce) => true,
            Some(Subscription::None) | None => return,
        };
        let connection_id = connection.id;
        let deliveries = device
            .queue
            .deliver(connection_id, now, self.inner.config.lock_timeout);
        if !deliveries.is_empty()
            && let Some(d) = &self.inner.durable
        {
            d.wake.notify_one();
        }
        let mut outcomes = Vec::new();
        for d in deliveries {
            let _ = connection.tx.send(ToConnection::Deliver {
                topic: d.stored.topic.clone(),
                payload: d.stored.payload(),
                packet_id: d.packet_id,
                at_most_once,
                after,
            });
            if at_most_once {
                outcomes.extend(device.queue.complete(connection_id, d.packet_id, now));
            }
        }
        if !outcomes.is_empty() {
            let generation = device.device.generation_id.clone();
            self.record_outcomes(state, device_id, &generation, outcomes, now);
        }
    }

    // ----- cloud-to-device by lock token (AMQP, HTTPS devices) -----

    /// Takes the device's oldest Enqueued message for a transport that settles by lock token
    /// (AMQP receiver links, HTTPS `GET .../messages/deviceBound`): locks it for the lock
    /// timeout under a new lock token and counts the delivery. Waits up to `wait` for one
    /// (`Duration::ZERO`: answer at once, as HTTPS does with 204); `Ok(None)` when none came.
    ///
    /// It returns once the lock and the delivery count are on disk (with a data dir), as an
    /// MQTT delivery waits for them, so a crash can never deliver a message twice uncounted.
    /// Cancel-safe: dropping the future before it returns leaves the queue as it was (a message
    /// taken but not yet handed out is put back uncounted), so an AMQP link may `select!` on
    /// it while it has credit (push) and an HTTPS handler may call it once (pull).
    pub async fn receive_locked(
        &self,
        device_id: &str,
        wait: Duration,
    ) -> Result<Option<LockedMessage>, IotHubError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.inner.devicebound_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let taken = {
                let now = Now::current();
                let mut state = self.state();
                let device = state
                    .devices
                    .get_mut(device_id)
                    .ok_or_else(|| IotHubError::DeviceNotFound(device_id.to_owned()))?;
                device.last_activity = Some(now.utc);
                device
                    .queue
                    .deliver_locked(device_id, now, self.inner.config.lock_timeout)
            };
            if let Some(message) = taken {
                self.changed();
                let mut guard = Unhanded {
                    hub: self,
                    device_id,
                    lock_token: Some(message.lock_token.clone()),
                };
                self.persisted().await?;
                guard.lock_token = None;
                return Ok(Some(message));
            }
            // A notification missed between two looks would cost at most a second.
            let cap = tokio::time::Instant::now() + Duration::from_secs(1);
            let until = deadline.min(cap);
            if until <= tokio::time::Instant::now() {
                return Ok(None);
            }
            let _ = tokio::time::timeout_at(until, notified).await;
            if tokio::time::Instant::now() >= deadline {
                // One last look: a message may have come with the deadline.
                if !self.has_enqueued(device_id)? {
                    return Ok(None);
                }
            }
        }
    }

    fn has_enqueued(&self, device_id: &str) -> Result<bool, IotHubError> {
        let state = self.state();
        let device = state
            .devices
            .get(device_id)
            .ok_or_else(|| IotHubError::DeviceNotFound(device_id.to_owned()))?;
        Ok(device.queue.has_enqueued(Now::current()))
    }

    /// Settles a message received with [`IotHub::receive_locked`]: complete, reject
    /// (dead-lettered, `Rejected` feedback when the ack mode asks for negative feedback) or
    /// abandon (Enqueued again at once, its delivery counted toward the max delivery count).
    /// [`IotHubError::MessageLockLost`] (HTTP 412, `DeviceMessageLockLost`) when the token
    /// locks no message of the device: unknown, already settled, or its lock timed out.
    /// The change is in memory when this returns; await [`IotHub::persisted`] before
    /// acknowledging it to the device.
    pub fn settle(
        &self,
        device_id: &str,
        lock_token: &str,
        settlement: Settlement,
    ) -> Result<(), IotHubError> {
        let now = Now::current();
        let mut state = self.state();
        let device = state
            .devices
            .get_mut(device_id)
            .ok_or_else(|| IotHubError::DeviceNotFound(device_id.to_owned()))?;
        device.last_activity = Some(now.utc);
        let outcome = device.queue.settle(
            device_id,
            lock_token,
            settlement,
            now,
            self.inner.config.max_delivery_count,
        )?;
        let generation = device.device.generation_id.clone();
        tracing::debug!(device = %device_id, lock_token, ?settlement, "iothub: message settled");
        self.record_outcomes(
            &mut state,
            device_id,
            &generation,
            outcome.into_iter().collect(),
            now,
        );
        if settlement == Settlement::Abandon {
            // Enqueued again: deliverable at once, over whichever transport asks.
            self.pump(&mut state, device_id, now);
        }
        drop(state);
        self.changed();
        Ok(())
    }

    // ----- feedback -----

    /// The last 100 feedback records made (oldest first), whether or not a back-end has
    /// received them yet: a view for the dashboard, which must not take batches away.
    pub fn recent_feedback(&self) -> Vec<FeedbackRecord> {
        self.state().recent_feedback.iter().cloned().collect()
    }

    /// Receives the next feedback batch, waiting up to `wait` for one; the batch is locked for
    /// the feedback lock duration: complete it with [`IotHub::complete_feedback`], or it is
    /// received again later (up to the feedback max delivery count).
    pub async fn receive_feedback(&self, wait: Duration) -> Option<FeedbackBatch> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.inner.feedback_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let name = self.hub_name().to_owned();
            let received = self.state().feedback.receive(Now::current(), &name);
            if let Some(batch) = received {
                self.changed();
                // Its lock, and the outcomes its records tell of, are on disk first.
                if let Err(e) = self.persisted().await {
                    tracing::warn!(error = %e, "iothub: a feedback batch was not handed out");
                    return None;
                }
                return Some(batch);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Completes a received feedback batch (it is not delivered again).
    pub fn complete_feedback(&self, lock_token: &str) -> Result<(), IotHubError> {
        if self.state().feedback.complete(lock_token) {
            self.changed();
            Ok(())
        } else {
            Err(IotHubError::FeedbackLockLost(lock_token.to_owned()))
        }
    }

    /// Abandons a received feedback batch: it can be received again at once.
    pub fn abandon_feedback(&self, lock_token: &str) -> Result<(), IotHubError> {
        if self.state().feedback.abandon(lock_token) {
            self.changed();
            self.inner.feedback_ready.notify_waiters();
            Ok(())
        } else {
            Err(IotHubError::FeedbackLockLost(lock_token.to_owned()))
        }
    }

    // ----- telemetry -----

    /// Telemetry the device sent, with sequence numbers above `since` (oldest first; at most
    /// the configured capacity per device is kept).
    pub fn telemetry(
        &self,
        device_id: &str,
        since: u64,
    ) -> Result<Vec<TelemetryMessage>, IotHubError> {
        let state = self.state();
        let device = state
            .devices
            .get(device_id)
            .ok_or_else(|| IotHubError::DeviceNotFound(device_id.to_owned()))?;
        Ok(device
            .telemetry
            .iter()
            .filter(|t| t.sequence_number > since)
            .cloned()
            .collect())
    }

    /// Like [`IotHub::telemetry`], waiting up to `wait` for at least one message.
    pub async fn wait_telemetry(
        &self,
        device_id: &str,
        since: u64,
        wait: Duration,
    ) -> Result<Vec<TelemetryMessage>, IotHubError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.inner.telemetry_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let found = self.telemetry(device_id, since)?;
            if !found.is_empty() {
                return Ok(found);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(found);
            }
        }
    }

    // ----- the device endpoint's calls -----

    /// Checks a CONNECT; on success the device's previous connection is closed and this one
    /// registered. Returns (connection id, session present, token expiry, receiver).
    pub(crate) fn connect(
        &self,
        client_id: &str,
        username: Option<&str>,
        password: Option<&str>,
        clean_session: bool,
    ) -> Result<Connected, ConnectRefusal> {
        let now = Now::current();
        let hostname = &self.inner.config.hostname;
        let not_registered = || {
            ConnectRefusal::NotAuthorized(format!("device {:?} is not registered", cut(client_id)))
        };
        // The credentials are the peer's text: they are checked on a copy of the device,
        // with no lock held, so that nothing a peer sends runs under the state lock.
        let device = self.device(client_id).map_err(|_| not_registered())?;
        if device.status == DeviceStatus::Disabled {
            return Err(ConnectRefusal::NotAuthorized(format!(
                "device {client_id:?} is disabled"
            )));
        }
        let username =
            username.ok_or_else(|| ConnectRefusal::NotAuthorized("no user name".into()))?;
        let expected = format!("{hostname}/{client_id}/");
        let query = username
            .strip_prefix(&expected)
            .and_then(|rest| rest.strip_prefix('?'));
        match query {
            Some(q) if q.split('&').any(|p| p.starts_with("api-version=")) => {}
            _ => {
                return Err(ConnectRefusal::BadUsername(format!(
                    "user name {:?} is not \"{expected}?api-version=...\"",
                    cut(username)
                )));
            }
        }
        let password = password
            .ok_or_else(|| ConnectRefusal::NotAuthorized("no password (SAS token)".into()))?;
        let token_expires = self
            .check_device_token(&device, password, now.utc)
            .map_err(|e| ConnectRefusal::NotAuthorized(e.to_string()))?;
        let mut state = self.state();
        let id = state.next_connection;
        state.next_connection += 1;
        let Some(device) = state.devices.get_mut(client_id).filter(|d| {
            // Deleted, re-created, disabled or given new keys since the check: check again.
            d.device.generation_id == device.generation_id && d.device.etag == device.etag
        }) else {
            return Err(ConnectRefusal::NotAuthorized(format!(
                "device {client_id:?} changed while it connected; connect again"
            )));
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let connection = Connection {
            id,
            tx,
            clean_session,
            by_lock_token: false,
        };
        let outcomes = self.take_over(device, connection, now);
        let session_present = !clean_session && device.session.is_some();
        if clean_session || device.session.is_none() {
            device.session = Some(Subscription::None);
        }
        let generation = device.device.generation_id.clone();
        self.record_outcomes(&mut state, client_id, &generation, outcomes, now);
        // With a kept subscription, queued messages flow right after the CONNACK.
        self.pump(&mut state, client_id, now);
        drop(state);
        self.changed();
        Ok(Connected {
            id,
            session_present,
            token_expires,
            rx,
        })
    }

    /// Makes `connection` the device's one connection, whatever the transport (IoT Hub allows
    /// one per device id): the previous one is told to close and the locks of its packet ids
    /// end (their outcomes are returned, to be recorded).
    fn take_over(
        &self,
        device: &mut DeviceState,
        connection: Connection,
        now: Now,
    ) -> Vec<Outcome> {
        let previous = device.connection.replace(connection);
        device.connection_changed = Some(now.utc);
        device.last_activity = Some(now.utc);
        let Some(old) = previous else {
            return Vec::new();
        };
        let _ = old.tx.send(ToConnection::Close(
            "a new connection with the same device id took over".into(),
        ));
        device
            .queue
            .release_connection(old.id, now, self.inner.config.max_delivery_count)
    }

    /// A device opened its first link over AMQP (its token was checked on `$cbs`): registers
    /// the connection as the device's one connection, closing the previous one, MQTT or AMQP,
    /// as IoT Hub allows one connection per device id across transports. The AMQP links take
    /// messages with [`IotHub::receive_locked`]; a kept MQTT session stays for a later MQTT
    /// connection. End it with [`IotHub::disconnected`]; the receiver gets
    /// [`ToConnection::Close`] when another connection takes over.
    pub(crate) fn connect_by_lock_token(
        &self,
        device_id: &str,
    ) -> Result<(u64, mpsc::UnboundedReceiver<ToConnection>), IotHubError> {
        let now = Now::current();
        let mut state = self.state();
        let id = state.next_connection;
        let device = state
            .devices
            .get_mut(device_id)
            .ok_or_else(|| IotHubError::DeviceNotFound(device_id.to_owned()))?;
        if device.device.status == DeviceStatus::Disabled {
            return Err(IotHubError::Unauthorized(format!(
                "device {device_id:?} is disabled"
            )));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let connection = Connection {
            id,
            tx,
            clean_session: false,
            by_lock_token: true,
        };
        let outcomes = self.take_over(device, connection, now);
        let generation = device.device.generation_id.clone();
        state.next_connection += 1;
        self.record_outcomes(&mut state, device_id, &generation, outcomes, now);
        drop(state);
        self.changed();
        Ok((id, rx))
    }

    /// The device subscribed to its device-bound topic, granted `subscription`.
    pub(crate) fn subscribed(&self, device_id: &str, connection: u64, subscription: Subscription) {
        let mut state = self.state();
        if let Some(d) = state.devices.get_mut(device_id)
            && d.connection.as_ref().is_some_and(|c| c.id == connection)
        {
            d.session = Some(subscription);
            self.pump(&mut state, device_id, Now::current());
        }
        drop(state);
        self.changed();
    }

    /// The device unsubscribed from its device-bound topic.
    pub(crate) fn unsubscribed(&self, device_id: &str, connection: u64) {
        let mut state = self.state();
        if let Some(d) = state.devices.get_mut(device_id)
            && d.connection.as_ref().is_some_and(|c| c.id == connection)
        {
            d.session = Some(Subscription::None);
        }
    }

    /// A PUBACK for a C2D delivery.
    pub(crate) fn puback(&self, device_id: &str, connection: u64, packet_id: u16) {
        let now = Now::current();
        let mut state = self.state();
        let Some(device) = state.devices.get_mut(device_id) else {
            return;
        };
        match device.queue.complete(connection, packet_id, now) {
            Some(outcome) => {
                let generation = device.device.generation_id.clone();
                self.record_outcomes(&mut state, device_id, &generation, vec![outcome], now);
            }
            None => tracing::debug!(device = %device_id, packet_id,
                "iothub: PUBACK for no locked message (its lock had timed out)"),
        }
        drop(state);
        self.changed();
    }

    /// The connection ended: its locks end, and a clean session is forgotten.
    pub(crate) fn disconnected(&self, device_id: &str, connection: u64) {
        let now = Now::current();
        let mut state = self.state();
        let Some(device) = state.devices.get_mut(device_id) else {
            return;
        };
        if device
            .connection
            .as_ref()
            .is_none_or(|c| c.id != connection)
        {
            return; // Already replaced by a newer connection.
        }
        let clean = device.connection.take().is_some_and(|c| c.clean_session);
        device.connection_changed = Some(now.utc);
        if clean {
            device.session = None;
        }
        let outcomes =
            device
                .queue
                .release_connection(connection, now, self.inner.config.max_delivery_count);
        let generation = device.device.generation_id.clone();
        self.record_outcomes(&mut state, device_id, &generation, outcomes, now);
        drop(state);
        self.changed();
    }

    /// A device-to-cloud message.
    pub(crate) fn telemetry_received(&self, device_id: &str, bag: Vec<Property>, payload: Bytes) {
        let (system, application): (Vec<Property>, Vec<Property>) =
            bag.into_iter().partition(|(k, _)| k.starts_with("$."));
        let mut state = self.state();
        let sequence_number = state.next_sequence;
        state.next_sequence += 1;
        let capacity = self.inner.config.telemetry_capacity;
        let Some(device) = state.devices.get_mut(device_id) else {
            return;
        };
        device.last_activity = Some(SystemTime::now());
        if device.telemetry.len() >= capacity {
            device.telemetry.pop_front();
        }
        device.telemetry.push_back(TelemetryMessage {
            sequence_number,
            device_id: device_id.to_owned(),
            enqueued_time_utc: format_time(SystemTime::now()),
            system_properties: system.into_iter().collect(),
            properties: application.into_iter().collect(),
            body: std::str::from_utf8(&payload).ok().map(str::to_owned),
            body_base64: STANDARD.encode(&payload),
        });
        drop(state);
        self.inner.telemetry_ready.notify_waiters();
    }

    // ----- time -----

    /// Applies every due expiry, lock timeout and feedback batch; returns the next deadline.
    pub(crate) fn tick(&self) -> Option<Instant> {
        let now = Now::current();
        let mut state = self.state();
        let ids: Vec<String> = state.devices.keys().cloned().collect();
        for id in &ids {
            let Some(device) = state.devices.get_mut(id) else {
                continue;
            };
            let outcomes = device.queue.tick(now, self.inner.config.max_delivery_count);
            let generation = device.device.generation_id.clone();
            self.record_outcomes(&mut state, id, &generation, outcomes, now);
            self.pump(&mut state, id, now);
        }
        if state.feedback.tick(now) {
            self.inner.feedback_ready.notify_waiters();
        }
        state
            .devices
            .values()
            .filter_map(|d| d.queue.next_deadline())
            .chain(state.feedback.next_deadline())
            .min()
    }

    /// Runs [`IotHub::tick`] at every deadline until `stop` fires.
    pub(crate) async fn run_timer(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let next = self.tick();
            // Deadlines move when something happens; wake for that too. A long idle sleep is
            // capped so a missed notification could never stall the hub for long.
            let cap = Instant::now() + Duration::from_secs(1);
            let until = next.map_or(cap, |n| n.min(cap));
            tokio::select! {
                () = tokio::time::sleep_until(until.into()) => {}
                () = self.inner.timer.notified() => {}
                _ = stop.changed() => return,
            }
        }
    }
}

impl IotHub {
    /// Something changed: deadlines may have moved, and there may be something to write.
    fn changed(&self) {
        self.inner.timer.notify_one();
        if let Some(d) = &self.inner.durable {
            d.wake.notify_one();
        }
    }

    /// Waits until every change made so far (by this caller or any other) is on disk: what
    /// the admin API does before it acknowledges a send, a completion or a registry change.
    /// At once without a data dir. Changes made meanwhile share the same commit (group
    /// commit), so concurrent callers cost one fsync, not one each.
    ///
    /// ```no_run
    /// # async fn demo(hub: mqstate_server::iothub::IotHub) -> Result<(), mqstate_server::iothub::IotHubError> {
    /// use mqstate_server::iothub::C2dMessage;
    /// let receipt = hub.send("dev1", C2dMessage::new("hello").message_id("m1"))?;
    /// hub.persisted().await?; // now it survives a crash
    /// # let _ = receipt; Ok(()) }
    /// ```
    pub async fn persisted(&self) -> Result<(), IotHubError> {
        let Some(d) = &self.inner.durable else {
            return Ok(());
        };
        let ticket = self.state().taken + 1;
        d.wake.notify_one();
        self.wait_durable(ticket).await
    }

    /// Waits until the commit `ticket` is on disk (at once for 0 or without a data dir).
    pub(crate) async fn wait_durable(&self, ticket: u64) -> Result<(), IotHubError> {
        let Some(d) = &self.inner.durable else {
            return Ok(());
        };
        if ticket == 0 {
            return Ok(());
        }
        let mut rx = d.status.subscribe();
        loop {
            {
                let status = rx.borrow_and_update();
                if status.committed >= ticket {
                    return Ok(());
                }
                if let Some((failed, why)) = &status.failed
                    && *failed >= ticket
                {
                    return Err(IotHubError::NotPersisted(why.clone()));
                }
                if status.stopped {
                    return Err(IotHubError::NotPersisted("the hub stopped".into()));
                }
            }
            if rx.changed().await.is_err() {
                return Err(IotHubError::NotPersisted("the hub stopped".into()));
            }
        }
    }

    /// Takes every change recorded so far as the next batch: its number, the keys (to record
    /// again if the commit fails), their state now, and the sequence counter.
    fn take_writes(&self) -> (u64, Vec<Key>, Vec<Write>, u64) {
        let now = Now::current();
        let mut state = self.state();
        state.taken += 1;
        let ticket = state.taken;
        let mut keys = std::mem::take(&mut state.journal);
        for (id, d) in &mut state.devices {
            keys.extend(
                d.queue
                    .take_changes()
                    .into_iter()
                    .map(|seq| Key::Message(id.clone(), seq)),
            );
        }
        keys.extend(state.feedback.take_changes().into_iter().map(Key::Feedback));
        // Each key once, at its last place (a device deleted then added again is deleted,
        // then written).
        let mut seen = std::collections::HashSet::new();
        let mut unique: Vec<Key> = keys
            .into_iter()
            .rev()
            .filter(|k| seen.insert(k.clone()))
            .collect();
        unique.reverse();
        let mut writes = Vec::with_capacity(unique.len());
        for key in &unique {
            match key {
                Key::Device(id) => {
                    if let Some(d) = state.devices.get(id) {
                        writes.push(Write::PutDevice(
                            id.clone(),
                            durable::encode_device(&d.device),
                        ));
                    }
                }
                Key::Removed(id) => writes.push(Write::RemoveDevice(id.clone())),
                Key::Message(id, seq) => {
                    match state.devices.get(id).and_then(|d| d.queue.item(*seq)) {
                        Some(item) => writes.push(Write::PutMessage(
                            id.clone(),
                            *seq,
                            durable::encode_message(&item, now),
                        )),
                        None => writes.push(Write::DeleteMessage(id.clone(), *seq)),
                    }
                }
                Key::Feedback(PENDING) => writes.push(Write::PutFeedback(
                    PENDING,
                    durable::encode_pending(state.feedback.pending()),
                )),
                Key::Feedback(id) => match state.feedback.batch(*id) {
                    Some(b) => writes.push(Write::PutFeedback(*id, durable::encode_batch(b, now))),
                    None => writes.push(Write::DeleteFeedback(*id)),
                },
            }
        }
        (ticket, unique, writes, state.next_sequence)
    }

    /// Commits the changes recorded so far (one transaction); a failed commit leaves them
    /// recorded for the next one, and fails the callers waiting for this one.
    async fn commit_once(&self) {
        let Some(d) = &self.inner.durable else {
            return;
        };
        let (ticket, keys, writes, next_sequence) = self.take_writes();
        let result = if writes.is_empty() {
            Ok(())
        } else {
            let file = d.file.clone();
            tokio::task::spawn_blocking(move || file.commit(&writes, next_sequence))
                .await
                .unwrap_or_else(|e| {
                    Err(crate::persist::CommitFailed {
                        file: d.file.path().display().to_string(),
                        reason: format!("the commit task failed: {e}"),
                    })
                })
        };
        match result {
            Ok(()) => d.status.send_modify(|s| s.committed = ticket),
            Err(e) => {
                tracing::error!(error = %e, "iothub: the hub's changes could not be persisted; retrying with the next commit");
                {
                    let mut state = self.state();
                    let mut again = keys;
                    again.append(&mut state.journal);
                    state.journal = again;
                }
                d.status
                    .send_modify(|s| s.failed = Some((ticket, e.to_string())));
            }
        }
    }

    /// Commits the hub's changes in batches until `stop` fires (then once more): while one
    /// commit is on its way to the disk, new changes gather for the next one.
    pub(crate) async fn run_committer(self, mut stop: watch::Receiver<bool>) {
        let Some(d) = &self.inner.durable else {
            return;
        };
        loop {
            tokio::select! {
                () = d.wake.notified() => {}
                // A change whose wake-up was missed is still written soon.
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => {
                    // The last changes (connections closing release their locks), then the
                    // file is released for the next server.
                    self.commit_once().await;
                    d.file.close();
                    d.status.send_modify(|s| s.stopped = true);
                    return;
                }
            }
            self.commit_once().await;
        }
    }
}

/// Fills a new hub's state from its data dir: devices, queues (finished messages in the order
/// they finished), feedback; changes are recorded from now on.
fn restore(
    state: &mut State,
    loaded: durable::Loaded,
    limits: FeedbackLimits,
    now: Now,
) -> Result<(), IotHubError> {
    state.track = true;
    state.next_sequence = loaded.next_sequence.max(1);
    for device in loaded.devices {
        state.devices.insert(
            device.device_id.clone(),
            DeviceState {
                device,
                queue: DeviceQueue::new(true),
                session: None,
                connection: None,
                telemetry: VecDeque::new(),
                connection_changed: None,
                last_activity: None,
            },
        );
    }
    let mut finished: BTreeMap<String, Vec<queue::Finished>> = BTreeMap::new();
    for (id, seq, record) in loaded.messages {
        let Some(device) = state.devices.get_mut(&id) else {
            // A message of a device that is gone (cannot happen: they go in one transaction).
            state.journal.push(Key::Message(id, seq));
            continue;
        };
        match durable::decode_message(&id, seq, record, now)? {
            durable::Restored::Live {
                stored,
                delivery_count,
                was_locked,
            } => device.queue.restore(*stored, delivery_count, was_locked),
            durable::Restored::Finished(f) => finished.entry(id).or_default().push(f),
        }
    }
    for (id, mut list) in finished {
        list.sort_by_key(|f| (f.at, f.stored.sequence_number));
        if let Some(device) = state.devices.get_mut(&id) {
            for f in list {
                device.queue.restore_finished(f);
            }
        }
    }
    let batches = loaded
        .batches
        .into_iter()
        .map(|(id, b)| durable::decode_batch(id, b, now))
        .collect();
    state.feedback = Feedback::restored(limits, now.instant, loaded.pending, batches);
    Ok(())
}

/// Puts a message taken by [`IotHub::receive_locked`] back if the receive ends (cancelled,
/// or its lock not persisted) before handing it out.
struct Unhanded<'a> {
    hub: &'a IotHub,
    device_id: &'a str,
    lock_token: Option<String>,
}

impl Drop for Unhanded<'_> {
    fn drop(&mut self) {
        let Some(token) = self.lock_token.take() else {
            return;
        };
        let mut state = self.hub.state();
        let put_back = state
            .devices
            .get_mut(self.device_id)
            .is_some_and(|d| d.queue.unreceive(&token));
        if put_back {
            let now = Now::current();
            self.hub.pump(&mut state, self.device_id, now);
        }
        drop(state);
        self.hub.changed();
    }
}

/// A connection accepted by [`IotHub::connect`].
#[derive(Debug)]
pub(crate) struct Connected {
    pub id: u64,
    pub session_present: bool,
    pub token_expires: SystemTime,
    pub rx: mpsc::UnboundedReceiver<ToConnection>,
}

/// Why a CONNECT was refused (mapped to CONNACK return codes by the endpoint).
#[derive(Debug, Clone)]
pub(crate) enum ConnectRefusal {
    /// Return code 4.
    BadUsername(String),
    /// Return code 5.
    NotAuthorized(String),
}
