//! The protocol handler: one request (payload + the user properties that matter) in, the
//! reply payload, the response's `__ts` and the notifications to send out.
//!
//! It owns the [`Store`], the KEYNOTIFY `Registrations` and the server's HLC, and applies every rule
//! of docs/protocol.md: the service errors, the timestamp checks (section 4), the fencing algorithm
//! (section 5), and notifications (section 6). It knows nothing of MQTT; the
//! `service` moves its inputs and outputs to and from the broker.
//!
//! The order of checks for a request: the payload (`syntax error`, `unknown command`, `wrong
//! number of arguments`, `the key length is zero`), then `__ts` (`malformed timestamp`,
//! `... request timestamp is too far in the future ...`, `missing timestamp` on a SET without
//! it), then `__ft` (`malformed timestamp`, `... fencing token timestamp is too far in the
//! future ...`), then the key's fencing token, the SET condition and the quota.
//!
//! Which responses carry `__ts` (section 4): SET (applied or not: the version, or the server
//! clock after the merge), GET hits (the stored version), DEL and VDEL (the server clock after
//! the merge, which is also the version in the DELETE notification). GET misses, KEYNOTIFY
//! replies and `-ERR` replies carry none.
//!
//! ```
//! use std::time::Instant;
//! use bytes::Bytes;
//! use mqstate_server::statestore::handler::{Handler, HandlerConfig, RequestContext};
//!
//! let mut handler = Handler::new(HandlerConfig::default());
//! let ctx = RequestContext {
//!     client_id: Some("client-id1"),
//!     timestamp: Some("001696374425000:00000:client-id1"),
//!     fencing_token: None,
//!     persist: false,
//! };
//! let set = Bytes::from_static(b"*3\r\n$3\r\nSET\r\n$7\r\nSETKEY2\r\n$6\r\nVALUE5\r\n");
//! let outcome = handler.handle(&ctx, &set, Instant::now());
//! assert_eq!(&outcome.answer.payload[..], b"+OK\r\n");
//! assert!(outcome.answer.timestamp.is_some());
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use mqstate::protocol::hlc::{DEFAULT_MAX_DRIFT, HlcError, WallClock};
use mqstate::protocol::resp3::{self, Reply, Request};
use mqstate::protocol::topics::{self, MAX_TOPIC_LEN};
use mqstate::{Hlc, HlcClock, ServiceError};

use crate::statestore::observer::{KEY_PAGE_KEYS, KeyPage, KeyQuery, Removal, StoreObserver};
use crate::statestore::registrations::Registrations;
use crate::statestore::store::{ScanLimits, SetArgs, SetOutcome, Store, StoreError};

/// The node id of the versions this server produces (as the real service's).
pub const DEFAULT_NODE_ID: &str = "StateStore";

/// The text of the error answered to a KEYNOTIFY that carries no client id: neither the
/// broker nor the request (`__srcId`) says who is asking, so there is no topic to notify.
pub const NO_CLIENT_ID_TEXT: &str =
    "the request carries no client id (__srcId), so there is no topic to notify";

/// Settings of a [`Handler`].
#[derive(Debug, Clone)]
pub struct HandlerConfig {
    /// The key quota (`None`: unlimited).
    pub max_keys: Option<usize>,
    /// Node id of the server's HLC.
    pub node_id: String,
    /// How far ahead of the server clock `__ts` and `__ft` may be.
    pub max_drift: Duration,
    /// The wall clock (the system clock unless a test supplies a manual one).
    pub wall_clock: Option<Arc<dyn WallClock>>,
    /// The broker reports every connect before any request of that connection, and the
    /// server saw every connection from the start (the embedded broker): a KEYNOTIFY from a
    /// client id with no open connection then comes from a connection that has already ended,
    /// and is not registered (it would never be dropped).
    pub complete_connection_events: bool,
    /// Told of every change, connection and request (the dashboard's monitor; `None`: off).
    pub observer: Option<Arc<dyn StoreObserver>>,
    /// The bounds of one `SCAN` page (`scan::limits_for_packet` of the broker's
    /// maximum packet size).
    pub scan_limits: ScanLimits,
}

impl Default for HandlerConfig {
    fn default() -> Self {
        HandlerConfig {
            max_keys: None,
            node_id: DEFAULT_NODE_ID.to_owned(),
            max_drift: DEFAULT_MAX_DRIFT,
            wall_clock: None,
            complete_connection_events: false,
            observer: None,
            scan_limits: ScanLimits::default(),
        }
    }
}

/// The user properties of a request that the handler needs, as received (unparsed).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestContext<'a> {
    /// The MQTT client id of the sender (from the broker if it says, else `__srcId`).
    pub client_id: Option<&'a str>,
    /// `__ts`.
    pub timestamp: Option<&'a str>,
    /// `__ft`.
    pub fencing_token: Option<&'a str>,
    /// Keep a SET's key on disk: the request carried `aio-persistence: true`, or the server
    /// persists every key. Ignored without a data dir.
    pub persist: bool,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The RESP3 reply.
    pub payload: Bytes,
    /// The response's `__ts`, when section 4 gives it one.
    pub timestamp: Option<Hlc>,
}

impl Answer {
    fn new(reply: &Reply, timestamp: Option<Hlc>) -> Self {
        let mut buf = BytesMut::new();
        reply.encode(&mut buf);
        Answer {
            payload: buf.freeze(),
            timestamp,
        }
    }

    /// The `-ERR` answer for `e` (no `__ts`).
    pub fn error(e: &ServiceError) -> Self {
        Answer::new(&Reply::error(e), None)
    }
}

/// One notification to publish (QoS 1, with `__ts` = `version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The observing client.
    pub client_id: String,
    /// The key that changed.
    pub key: Bytes,
    /// The client's notification topic for the key.
    pub topic: String,
    /// `NOTIFY SET VALUE v` or `NOTIFY DELETE`.
    pub payload: Bytes,
    /// The key's new version.
    pub version: Hlc,
}

/// The result of handling a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The response.
    pub answer: Answer,
    /// Notifications caused by the request (and by keys that expired before it ran).
    pub notifications: Vec<Notification>,
}

/// The state store's logic, free of MQTT. See the [module docs](self).
#[derive(Debug)]
pub struct Handler {
    store: Store,
    registrations: Registrations,
    clock: HlcClock,
    complete_connection_events: bool,
    observer: Option<Arc<dyn StoreObserver>>,
    scan_limits: ScanLimits,
}

impl Handler {
    /// A handler with an empty store.
    pub fn new(config: HandlerConfig) -> Self {
        let clock = match config.wall_clock {
            Some(wall) => HlcClock::with_wall_clock(config.node_id, wall),
            None => HlcClock::new(config.node_id),
        }
        .with_max_drift(config.max_drift);
        Handler {
            store: Store::new(config.max_keys),
            registrations: Registrations::default(),
            clock,
            complete_connection_events: config.complete_connection_events,
            observer: config.observer,
            scan_limits: config.scan_limits,
        }
    }

    /// The store (read-only).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store, to restore it from disk and to journal its changes
    /// ([`persist`](crate::persist)).
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// The observer's queries to the store, for the store's task to answer with
    /// [`Handler::answer_query`] (once; `None` without an observer that asks, or after the
    /// first call).
    pub fn take_queries(&self) -> Option<tokio::sync::mpsc::Receiver<KeyQuery>> {
        self.observer.as_ref().and_then(|o| o.take_queries())
    }

    /// Answers an observer's query from the store: a page of keys read with the same scan as
    /// `SCAN` (so the observer keeps no copy of the keys), or the key count.
    pub fn answer_query(&self, query: KeyQuery, now: Instant) {
        match query {
            KeyQuery::Count(reply) => {
                let _ = reply.send(self.store.len());
            }
            KeyQuery::Keys {
                pattern,
                token,
                reply,
            } => {
                let limits = ScanLimits {
                    max_keys: KEY_PAGE_KEYS,
                    ..self.scan_limits
                };
                let page = crate::statestore::scan::page(
                    &self.store,
                    &pattern,
                    token.as_deref(),
                    limits,
                    now,
                )
                .map(|page| KeyPage {
                    keys: page
                        .keys
                        .iter()
                        .filter_map(|key| Some((key.clone(), self.store.get(key)?)))
                        .collect(),
                    next: page.token,
                    count: self.store.len(),
                    read_at: now,
                })
                .map_err(|e| e.text().to_owned());
                let _ = reply.send(page);
            }
        }
    }

    /// The registrations (read-only).
    pub(crate) fn registrations(&self) -> &Registrations {
        &self.registrations
    }

    /// The server's clock.
    pub fn clock(&self) -> &HlcClock {
        &self.clock
    }

    /// When the next key expires: call [`Handler::expire`] then.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.store.next_deadline()
    }

    /// Removes the keys whose deadline has passed and returns their DELETE notifications.
    pub fn expire(&mut self, now: Instant) -> Vec<Notification> {
        let mut notifications = Vec::new();
        for (key, _entry) in self.store.expire_due(now) {
            if let Some(m) = &self.observer {
                m.key_removed(&key, Removal::Expired);
            }
            if self.registrations.observers(&key).next().is_none() {
                continue;
            }
            let version = match self.clock.send_update() {
                Ok(v) => v,
                Err(e) => {
                    tracing::error!(error = %e, "server clock refused to move; expiry notification not sent");
                    continue;
                }
            };
            self.notify(&key, &delete_payload(), &version, &mut notifications);
        }
        notifications
    }

    /// The answer to `GET key` from the store as it is now, without moving the clock or
    /// removing expired keys (a key past its deadline reads as absent). The
    /// `service` answers again the reads of a batch whose commit failed.
    pub fn answer_get(&self, key: &[u8], now: Instant) -> Answer {
        match self
            .store
            .get(key)
            .filter(|e| e.expires_at.is_none_or(|at| at > now))
        {
            Some(entry) => Answer::new(&Reply::Bulk(entry.value), Some(entry.version)),
            None => Answer::new(&Reply::Nil, None),
        }
    }

    /// A connection of `client_id` opened (from the broker's events).
    pub fn client_connected(&mut self, client_id: &str) {
        self.registrations.client_connected(client_id);
        if let Some(m) = &self.observer {
            m.client_connected(client_id);
        }
    }

    /// A connection of `client_id` closed (from the broker's events): when it was the last,
    /// the client's registrations are dropped. Returns how many were.
    pub fn client_disconnected(&mut self, client_id: &str) -> usize {
        let dropped = self.registrations.client_disconnected(client_id);
        if let Some(m) = &self.observer {
            m.client_disconnected(client_id);
        }
        if dropped > 0 {
            tracing::debug!(client_id, dropped, "client gone: registrations dropped");
        }
        dropped
    }

    /// Handles one request. `now` is the monotonic time of execution (the base of `PX`).
    pub fn handle(&mut self, ctx: &RequestContext<'_>, payload: &Bytes, now: Instant) -> Outcome {
        let started = Instant::now();
        let mut notifications = self.expire(now);
        let answer = match self.execute(ctx, payload, now, &mut notifications) {
            Ok(answer) => answer,
            Err(e) => Answer::error(&e),
        };
        if let Some(m) = &self.observer {
            m.request_handled(started.elapsed());
        }
        Outcome {
            answer,
            notifications,
        }
    }

    fn execute(
        &mut self,
        ctx: &RequestContext<'_>,
        payload: &Bytes,
        now: Instant,
        notifications: &mut Vec<Notification>,
    ) -> Result<Answer, ServiceError> {
        let request = resp3::decode_request(payload).map_err(|e| {
            tracing::debug!(error = %e, "refused request");
            e.service_error()
        })?;
        let timestamp = match ctx.timestamp {
            Some(text) => {
                let ts = parse_hlc(text)?;
                self.clock
                    .check_not_too_far_ahead(&ts)
                    .map_err(|_| ServiceError::TimestampSkew)?;
                Some(ts)
            }
            None if matches!(request, Request::Set { .. }) => {
                return Err(ServiceError::MissingTimestamp);
            }
            None => None,
        };
        let fencing_token = match ctx.fencing_token {
            Some(text) => {
                let ft = parse_hlc(text)?;
                self.clock
                    .check_not_too_far_ahead(&ft)
                    .map_err(|_| ServiceError::FencingTokenSkew)?;
                Some(ft)
            }
            None => None,
        };
        // The server clock moves on every request: merged with the request's `__ts` (so
        // the result is greater than it), or ticked when there is none.
        let clock = match &timestamp {
            Some(ts) => self.clock.merge(ts),
            None => self.clock.send_update(),
        }
        .map_err(clock_error)?;

        match request {
            Request::Set {
                key,
                value,
                condition,
                expiry_ms,
            } => {
                // NEX with PX is how leases and locks are taken and renewed.
                let lease =
                    condition == resp3::SetCondition::NotExistsOrEqual && expiry_ms.is_some();
                let args = SetArgs {
                    key: key.clone(),
                    value: value.clone(),
                    condition,
                    expiry: expiry_ms.map(Duration::from_millis),
                    fencing_token,
                    persist: ctx.persist,
                };
                match self
                    .store
                    .set(args, clock.clone(), now)
                    .map_err(store_error)?
                {
                    SetOutcome::Applied => {
                        if let Some(m) = &self.observer
                            && let Some(entry) = self.store.get(&key)
                        {
                            m.key_set(&key, &entry, lease);
                        }
                        let mut buf = BytesMut::new();
                        resp3::encode_notify_set(&mut buf, &value);
                        self.notify(&key, &buf.freeze(), &clock, notifications);
                        Ok(Answer::new(&Reply::OK, Some(clock)))
                    }
                    SetOutcome::NotApplied => Ok(Answer::new(&Reply::Integer(-1), Some(clock))),
                }
            }
            Request::Get { key } => Ok(match self.store.get(&key) {
                Some(entry) => Answer::new(&Reply::Bulk(entry.value), Some(entry.version)),
                None => Answer::new(&Reply::Nil, None),
            }),
            Request::Del { key } => {
                let deleted = self
                    .store
                    .del(&key, fencing_token.as_ref())
                    .map_err(store_error)?;
                if deleted > 0 {
                    if let Some(m) = &self.observer {
                        m.key_removed(&key, Removal::Deleted(&clock));
                    }
                    self.notify(&key, &delete_payload(), &clock, notifications);
                }
                Ok(Answer::new(
                    &Reply::Integer(i64::from(deleted)),
                    Some(clock),
                ))
            }
            Request::Vdel { key, value } => {
                let outcome = self
                    .store
                    .vdel(&key, &value, fencing_token.as_ref())
                    .map_err(store_error)?;
                if outcome == crate::statestore::store::VdelOutcome::Deleted {
                    if let Some(m) = &self.observer {
                        m.key_removed(&key, Removal::Deleted(&clock));
                    }
                    self.notify(&key, &delete_payload(), &clock, notifications);
                }
                Ok(Answer::new(
                    &Reply::Integer(outcome.reply_value()),
                    Some(clock),
                ))
            }
            Request::Scan { pattern, token } => {
                let page = crate::statestore::scan::page(
                    &self.store,
                    &pattern,
                    token.as_deref(),
                    self.scan_limits,
                    now,
                )?;
                let mut buf = BytesMut::with_capacity(page.encoded_len());
                page.encode(&mut buf);
                Ok(Answer {
                    payload: buf.freeze(),
                    timestamp: None,
                })
            }
            Request::KeyNotify { key, stop } => {
                let Some(client_id) = ctx.client_id.filter(|id| !id.is_empty()) else {
                    return Err(ServiceError::Unknown(NO_CLIENT_ID_TEXT.to_owned()));
                };
                if stop {
                    if let Some(m) = &self.observer {
                        m.keynotify(client_id, &key, false);
                    }
                    if self.registrations.unregister(client_id, &key) {
                        Ok(Answer::new(&Reply::OK, None))
                    } else {
                        Ok(Answer::new(&Reply::Integer(0), None))
                    }
                } else {
                    if self.complete_connection_events
                        && self.registrations.connections_of(client_id) == 0
                    {
                        tracing::debug!(
                            client_id,
                            "KEYNOTIFY from a connection that has ended: not registered"
                        );
                    } else {
                        if let Some(m) = &self.observer {
                            m.keynotify(client_id, &key, true);
                        }
                        self.registrations.register(client_id, key);
                    }
                    Ok(Answer::new(&Reply::OK, None))
                }
            }
        }
    }

    /// Queues one notification per observer of `key`.
    fn notify(
        &self,
        key: &Bytes,
        payload: &Bytes,
        version: &Hlc,
        notifications: &mut Vec<Notification>,
    ) {
        for client_id in self.registrations.observers(key) {
            let topic = topics::notification_topic(client_id, key);
            if topic.len() > MAX_TOPIC_LEN {
                tracing::warn!(
                    client_id,
                    key_len = key.len(),
                    "notification topic longer than MQTT allows; notification not sent"
                );
                continue;
            }
            notifications.push(Notification {
                client_id: client_id.to_owned(),
                key: key.clone(),
                topic,
                payload: payload.clone(),
                version: version.clone(),
            });
        }
    }
}

fn delete_payload() -> Bytes {
    let mut buf = BytesMut::new();
    resp3::encode_notify_delete(&mut buf);
    buf.freeze()
}

fn parse_hlc(text: &str) -> Result<Hlc, ServiceError> {
    text.parse::<Hlc>()
        .map_err(|_| ServiceError::MalformedTimestamp)
}

fn store_error(e: StoreError) -> ServiceError {
    e.service_error()
}

/// The server's own clock refused to move (a counter overflow, or the wall clock went far
/// back): not the client's fault, and not something the protocol has a text for.
fn clock_error(e: HlcError) -> ServiceError {
    tracing::error!(error = %e, "server clock refused to move");
    ServiceError::Unknown(format!("internal error: {e}"))
}

#[cfg(test)]
mod tests;
