//! Claims-based security, as IoT Hub does it: the SASL step lets anyone in (the SDKs send no
//! credentials there), then the client puts a SAS token on the `$cbs` node and the links it
//! opens afterwards are authorized by that token, until it expires.
//!
//! - SASL: Node (`rhea` without user name) sends no SASL header at all; Python (`uamqp`)
//!   negotiates `MSSBCBS` (Microsoft's CBS mechanism, an empty init). [`CbsSasl`] offers
//!   `MSSBCBS` and `ANONYMOUS` and accepts both.
//! - `put-token`: a message on the client's sender link to `$cbs`, application properties
//!   `operation` = `put-token`, `type` = `servicebus.windows.net:sastoken`, `name` = the
//!   audience, body the token (an amqp-value string). The reply goes on the client's receiver
//!   link from `$cbs`: correlation id = the request's message id (same AMQP type: uamqp matches
//!   a ulong), application properties `status-code` (an AMQP int: uamqp reads an int, Node
//!   wants 200 exactly) and `status-description`.
//! - Device tokens (`sr={host}/devices/{id}`, signed with the device's key, as the device SDKs
//!   put them: Node `putToken(sr, token)` in azure-iot-device-amqp `amqp.js`, state
//!   `authenticating`) are claims for that device's links only, checked as an MQTT CONNECT's
//!   password is (`sas::validate` against the primary and secondary key); a token of a policy
//!   with DeviceConnect (`skn`) scoped to the device counts too. Each device's claims expire on
//!   their own ([`Cbs::device_expiry`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use crate::iothub::domain::x509::ClientCert;

use fe2o3_amqp::acceptor::SaslAcceptor;
use fe2o3_amqp::acceptor::sasl_acceptor::SaslServerFrame;
use fe2o3_amqp::link::{Receiver, Sender};
use fe2o3_amqp::types::definitions::AmqpError;
use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, Body, Message, Properties};
use fe2o3_amqp::types::primitives::{Array, SimpleValue, Symbol, Value};
use fe2o3_amqp::types::sasl::{SaslCode, SaslInit, SaslOutcome, SaslResponse};
use tokio::sync::{mpsc, watch};

use super::convert;
use super::receive::{self, Ended};
use crate::iothub::IotHub;
use crate::iothub::IotHubError;
use crate::iothub::domain::policies::{Right, ServiceGrant};
use crate::iothub::domain::sas::SasToken;
use crate::untrusted::cut;

/// The token types the hub accepts (the SDKs send the first; the second is IoT Hub's own).
const SAS_TOKEN_TYPES: [&str; 2] = [
    "servicebus.windows.net:sastoken",
    "azure-devices.net:sastoken",
];

/// The SASL step: offers `MSSBCBS` (uamqp's choice) and `ANONYMOUS`, accepts either. The
/// credentials come later, with `put-token`.
#[derive(Debug, Clone, Default)]
pub(super) struct CbsSasl;

impl SaslAcceptor for CbsSasl {
    fn mechanisms(&self) -> Array<Symbol> {
        Array::from(vec![Symbol::from("MSSBCBS"), Symbol::from("ANONYMOUS")])
    }

    fn on_init(&mut self, init: SaslInit) -> SaslServerFrame {
        let code = match init.mechanism.0.as_str() {
            "MSSBCBS" | "ANONYMOUS" => SaslCode::Ok,
            other => {
                tracing::debug!(mechanism = other, "iothub amqp: SASL mechanism refused");
                SaslCode::Auth
            }
        };
        SaslServerFrame::Outcome(SaslOutcome {
            code,
            additional_data: None,
        })
    }

    fn on_response(&mut self, _response: SaslResponse) -> SaslServerFrame {
        // Neither mechanism has a challenge, so a response is a protocol error.
        SaslServerFrame::Outcome(SaslOutcome {
            code: SaslCode::Sys,
            additional_data: None,
        })
    }
}

/// The reply to a put-token, queued until the client's `$cbs` receiver link takes it.
pub(super) type Reply = Message<AmqpValue<Value>>;

/// The replies not yet taken by a `$cbs` receiver link: at most
/// [`crate::iothub::AmqpLimits::max_pending_cbs_replies`], so that a peer sending put-tokens
/// without ever attaching a reply link cannot make the hub keep its replies without bound.
struct Replies {
    tx: mpsc::Sender<Reply>,
    rx: Option<mpsc::Receiver<Reply>>,
}

/// The claims of one connection: the grants of its valid put-tokens, and when the last one
/// that allows ServiceConnect expires (watched by the links it authorized).
pub(super) struct Cbs {
    hub: IotHub,
    grants: Mutex<Vec<ServiceGrant>>,
    expiry: watch::Sender<Option<SystemTime>>,
    /// Per device id: when its latest valid device token expires (links of that device
    /// watch it and detach when it passes).
    devices: Mutex<HashMap<String, watch::Sender<Option<SystemTime>>>>,
    replies: Mutex<Replies>,
    /// Whether a put-token was accepted on this connection (a new connection has
    /// [`crate::iothub::AmqpLimits::auth_timeout`] to put one).
    authenticated: watch::Sender<bool>,
    /// Who is connected, for the log.
    peer: SocketAddr,
    /// The TLS client certificate of the connection: an X.509 device's links need no token.
    client_cert: std::sync::OnceLock<ClientCert>,
}

/// The replies queue is full: nobody reads them, so the request link is closed.
pub(super) struct RepliesFull;

impl std::fmt::Debug for Cbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cbs").finish_non_exhaustive()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data behind these locks is replaced whole; a poisoned one is still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Cbs {
    /// The claims of a new connection: none.
    pub(super) fn new(hub: IotHub, peer: SocketAddr) -> Arc<Cbs> {
        let (tx, rx) = mpsc::channel(hub.config().amqp_limits.max_pending_cbs_replies);
        Arc::new(Cbs {
            hub,
            grants: Mutex::new(Vec::new()),
            expiry: watch::Sender::new(None),
            devices: Mutex::new(HashMap::new()),
            replies: Mutex::new(Replies { tx, rx: Some(rx) }),
            authenticated: watch::Sender::new(false),
            peer,
            client_cert: std::sync::OnceLock::new(),
        })
    }

    /// The connection's TLS client certificate, if it presented one.
    pub(super) fn set_client_cert(&self, cert: Option<ClientCert>) {
        if let Some(cert) = cert {
            let _ = self.client_cert.set(cert);
        }
    }

    /// Turns true once a put-token is accepted on this connection.
    pub(super) fn authenticated(&self) -> watch::Receiver<bool> {
        self.authenticated.subscribe()
    }

    /// Logs a refused put-token (summarised per peer address: untrusted text is cut short).
    fn log_refusal(&self, what: &str, audience: &str, error: &IotHubError) {
        if let Some(left_out) = self.hub.refusals().admit(self.peer.ip()) {
            tracing::info!(peer = %self.peer, audience = ?cut(audience), error = %error,
                left_out, "iothub amqp: {what} refused");
        }
    }

    /// Whether a valid put-token allows service links (C2D send, feedback): the error says why
    /// not (no token yet, expired, policy without ServiceConnect).
    pub(super) fn authorize(&self) -> Result<(), IotHubError> {
        let now = SystemTime::now();
        let mut grants = relock(&self.grants);
        grants.retain(|g| g.expires_at > now);
        let mut refusal = None;
        for grant in grants.iter() {
            match grant.require(Right::ServiceConnect) {
                Ok(()) => return Ok(()),
                Err(e) => refusal = Some(e),
            }
        }
        Err(refusal.unwrap_or_else(|| {
            IotHubError::Unauthorized(
                "no valid SAS token was put on $cbs for this connection (or it expired)".into(),
            )
        }))
    }

    /// Whether a valid device token for `device_id` was put on this connection: the device's
    /// links (C2D receive, telemetry send) need one; the error says why not.
    pub(super) fn authorize_device(&self, device_id: &str) -> Result<(), IotHubError> {
        let now = SystemTime::now();
        let valid = relock(&self.devices)
            .get(device_id)
            .and_then(|w| *w.borrow())
            .is_some_and(|at| at > now);
        if valid {
            Ok(())
        } else if let Some(cert) = self.client_cert.get() {
            // The refusal says why the certificate is not the device's.
            self.hub.authenticate_device_cert(cert, device_id)?;
            // The certificate is the device's for as long as the connection lasts (its own
            // end was checked when it connected): a grant that does not expire meanwhile.
            let lasting = now + std::time::Duration::from_secs(100 * 365 * 24 * 3600);
            self.add_device_grant(device_id.to_owned(), lasting);
            self.authenticated.send_replace(true);
            Ok(())
        } else {
            Err(IotHubError::Unauthorized(format!(
                "no valid SAS token for device {:?} was put on $cbs for this \
                 connection (or it expired)",
                cut(device_id)
            )))
        }
    }

    /// Follows when the claims for `device_id` expire (a renewal moves the deadline).
    pub(super) fn device_expiry(&self, device_id: &str) -> watch::Receiver<Option<SystemTime>> {
        relock(&self.devices)
            .entry(device_id.to_owned())
            .or_insert_with(|| watch::Sender::new(None))
            .subscribe()
    }

    fn add_device_grant(&self, device_id: String, expires_at: SystemTime) {
        let now = SystemTime::now();
        let mut devices = relock(&self.devices);
        let slot = devices
            .entry(device_id)
            .or_insert_with(|| watch::Sender::new(None));
        slot.send_if_modified(|at| {
            // The latest valid token wins: a renewal with an earlier expiry does not shorten
            // the claims a still-valid one gave.
            let latest = match *at {
                Some(current) if current > now && current >= expires_at => current,
                _ => expires_at,
            };
            let changed = *at != Some(latest);
            *at = Some(latest);
            changed
        });
    }

    /// Follows when the connection's ServiceConnect claims expire.
    pub(super) fn expiry(&self) -> watch::Receiver<Option<SystemTime>> {
        self.expiry.subscribe()
    }

    fn add_grant(&self, grant: ServiceGrant) {
        let now = SystemTime::now();
        let mut grants = relock(&self.grants);
        grants.retain(|g| g.expires_at > now);
        grants.push(grant);
        let latest = grants
            .iter()
            .filter(|g| g.require(Right::ServiceConnect).is_ok())
            .map(|g| g.expires_at)
            .max();
        drop(grants);
        self.expiry.send_if_modified(|e| {
            let changed = *e != latest;
            *e = latest;
            changed
        });
    }

    /// Handles a request on `$cbs` and returns its reply.
    fn handle(&self, request: Message<Body<Value>>) -> Reply {
        let properties = request.properties.unwrap_or_default();
        let app = request.application_properties.unwrap_or_default();
        let text = |name: &str| match app.0.get(name) {
            Some(SimpleValue::String(s)) => Some(s.clone()),
            Some(SimpleValue::Symbol(s)) => Some(s.0.clone()),
            _ => None,
        };
        let operation = text("operation").unwrap_or_default();
        let token_type = text("type").unwrap_or_default();
        let audience = text("name").unwrap_or_default();
        let token = match request.body {
            Body::Value(AmqpValue(Value::String(s))) => Some(s),
            Body::Value(AmqpValue(Value::Binary(b))) => String::from_utf8(b.into_vec()).ok(),
            Body::Data(sections) => {
                String::from_utf8(sections.iter().flat_map(|d| d.0.iter().copied()).collect()).ok()
            }
            _ => None,
        };
        let (status, description) = if operation != "put-token" {
            (
                400,
                format!(
                    "operation {:?} is not supported on $cbs (only put-token)",
                    cut(&operation)
                ),
            )
        } else if !SAS_TOKEN_TYPES.contains(&token_type.as_str()) {
            (
                401,
                format!(
                    "token type {:?} is not supported by the local hub (use a SAS \
                     token: servicebus.windows.net:sastoken)",
                    cut(&token_type)
                ),
            )
        } else if let Some(token) = token.as_deref().filter(|t| is_device_token(t)) {
            match authenticate_device(&self.hub, token) {
                Ok((device, expires_at)) => {
                    tracing::debug!(%device, audience = ?cut(&audience),
                        "iothub amqp: device put-token accepted");
                    self.add_device_grant(device, expires_at);
                    self.authenticated.send_replace(true);
                    (200, "OK".to_owned())
                }
                Err(e) => {
                    self.log_refusal("device put-token", &audience, &e);
                    (401, e.to_string())
                }
            }
        } else if let Some(token) = token {
            match self.hub.authenticate_service(&token) {
                Ok(grant) => {
                    tracing::debug!(policy = %grant.policy, audience = ?cut(&audience),
                        "iothub amqp: put-token accepted");
                    self.add_grant(grant);
                    self.authenticated.send_replace(true);
                    (200, "OK".to_owned())
                }
                Err(e) => {
                    self.log_refusal("put-token", &audience, &e);
                    (401, e.to_string())
                }
            }
        } else {
            (
                400,
                "the put-token body must be the token as a string".to_owned(),
            )
        };
        let mut reply = Properties::builder().build();
        reply.correlation_id = properties.message_id;
        reply.to = properties.reply_to;
        Message::builder()
            .properties(reply)
            .application_properties(
                ApplicationProperties::builder()
                    .insert("status-code", SimpleValue::Int(status))
                    .insert("status-description", SimpleValue::String(description))
                    .build(),
            )
            .value(Value::Null)
            .build()
    }

    /// Queues a reply for the `$cbs` receiver link; refused when
    /// [`crate::iothub::AmqpLimits::max_pending_cbs_replies`] are already waiting for one. (A
    /// reply link that went away leaves the queue without a reader: it then fills the same
    /// way.)
    fn reply(&self, reply: Reply) -> Result<(), RepliesFull> {
        match relock(&self.replies).tx.try_send(reply) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => Err(RepliesFull),
            // The reply link took the queue and ended: nobody will read this one either.
            Err(mpsc::error::TrySendError::Closed(_)) => Err(RepliesFull),
        }
    }

    /// The replies for a new `$cbs` receiver link: the pending ones, or a fresh queue when
    /// another link took them (the newest link gets the replies from now on).
    fn take_replies(&self) -> mpsc::Receiver<Reply> {
        let mut replies = relock(&self.replies);
        if let Some(rx) = replies.rx.take() {
            return rx;
        }
        let (tx, rx) = mpsc::channel(self.hub.config().amqp_limits.max_pending_cbs_replies);
        replies.tx = tx;
        rx
    }
}

/// Whether `token` is for a device (`sr={host}/devices/...`) rather than the hub (service
/// tokens have `sr={host}`). An unparsable token goes the service way, which says why.
fn is_device_token(token: &str) -> bool {
    SasToken::parse(token).is_ok_and(|t| t.resource.to_ascii_lowercase().contains("/devices/"))
}

/// Checks a device token: the device is the one its `sr` names (`{host}/devices/{id}`, the id
/// URL-encoded or not), then [`IotHub::authenticate_device`]. Returns the device id and the
/// token's expiry; every refusal is [`IotHubError::Unauthorized`] with the reason (the
/// put-token reply's 401).
fn authenticate_device(hub: &IotHub, token: &str) -> Result<(String, SystemTime), IotHubError> {
    let unauthorized = |why: String| IotHubError::Unauthorized(why);
    let parsed = SasToken::parse(token).map_err(|e| unauthorized(e.to_string()))?;
    let host = &hub.config().hostname;
    let resource = parsed
        .resource
        .trim_start_matches("https://")
        .trim_end_matches('/');
    let raw = convert::strip_prefix_ci(resource, &format!("{host}/devices/")).ok_or_else(|| {
        unauthorized(format!(
            "the SAS token is for {:?}, not a device of the hub {host:?}",
            cut(&parsed.resource)
        ))
    })?;
    if raw.is_empty() || raw.contains('/') {
        return Err(unauthorized(format!(
            "the SAS token is for {:?}: the local hub serves devices \
             ({host}/devices/{{id}}), not modules",
            cut(&parsed.resource)
        )));
    }
    let device = convert::device_candidates(raw)
        .iter()
        .find_map(|id| hub.device(id).ok())
        .ok_or_else(|| unauthorized(format!("device {:?} is not registered", cut(raw))))?;
    let expires = hub.authenticate_device(token, &device.device_id)?;
    Ok((device.device_id, expires))
}

/// Serves the client's sender link to `$cbs`: each message is a request, accepted, answered.
pub(super) async fn serve_requests(
    cbs: Arc<Cbs>,
    mut receiver: Receiver,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let no_device = std::future::pending();
        let delivery = match receive::next(&mut receiver, &mut stop, None, no_device).await {
            Ok(d) => d,
            Err(Ended::Failed(e)) => {
                tracing::debug!(error = %e, "iothub amqp: $cbs request link ended");
                let _ = receiver
                    .close_with_error(convert::error(AmqpError::DecodeError, e.to_string()))
                    .await;
                return;
            }
            Err(Ended::Stop | Ended::Expired | Ended::Closed(_)) => {
                let _ = receiver.close().await;
                return;
            }
        };
        let (info, message) = delivery.into_parts();
        let reply = cbs.handle(message);
        if let Err(e) = receiver.accept(info).await {
            tracing::debug!(error = %e, "iothub amqp: $cbs request not settled");
        }
        if cbs.reply(reply).is_err() {
            let limit = cbs.hub.config().amqp_limits.max_pending_cbs_replies;
            tracing::info!(peer = %cbs.peer, limit,
                "iothub amqp: $cbs request link closed: its replies are not being read");
            let error = convert::error(
                AmqpError::ResourceLimitExceeded,
                format!(
                    "{limit} put-token replies are waiting for a receiver link from $cbs: attach \
                     one and read them before putting more tokens"
                ),
            );
            let _ = receiver.close_with_error(error).await;
            return;
        }
    }
}

/// Serves the client's receiver link from `$cbs`: sends the replies, pre-settled when the
/// link allows (the SDKs accept every reply, and nothing waits for their settlement).
pub(super) async fn serve_replies(
    cbs: Arc<Cbs>,
    mut sender: Sender,
    mut stop: watch::Receiver<bool>,
) {
    let mut replies = cbs.take_replies();
    drop(cbs);
    loop {
        let reply = tokio::select! {
            r = replies.recv() => r,
            e = sender.on_detach() => {
                tracing::debug!(error = %e, "iothub amqp: $cbs reply link detached");
                let _ = sender.close().await;
                return;
            }
            _ = stop.changed() => None,
        };
        let Some(reply) = reply else {
            let _ = sender.close().await;
            return;
        };
        match sender.send_batchable(reply).await {
            // The reply's settlement is not waited for: the SDKs accept every reply.
            Ok(settlement) => drop(settlement),
            Err(e) => {
                tracing::debug!(error = %e, "iothub amqp: $cbs reply not sent");
                let _ = sender.close().await;
                return;
            }
        }
    }
}
