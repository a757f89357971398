//! MQTT5 request/response for the state store (docs/protocol.md section 1): correlation map,
//! per-call timeouts, any number of requests in flight.
//!
//! Every request gets 16 bytes of correlation data and a oneshot channel, registered in one
//! map; the connection task routes each response on our response topic to its channel by the
//! correlation data (unknown ones are ignored: a late answer to a request that timed out, a
//! second answer to a request that was sent twice, or an answer meant for another client
//! sharing a hex-encoded response topic). Responses are decoded on the caller's task, so the
//! connection task only moves bytes.
//!
//! # Re-sent after a reconnection
//!
//! A broker may acknowledge a request (PUBACK) and then lose it: Mosquitto killed and
//! restarted from its last snapshot restores the sessions but not what arrived after the
//! snapshot, and a broker that lost the session loses everything queued. So when a
//! connection is re-established, every request still waiting for its answer is published
//! again, with its original correlation data, topic, payload and properties (a fresh `__ts`,
//! which only feeds the clocks, and a message expiry of what is left of its timeout). A store
//! that already answered it answers again from its duplicate cache, keyed by client id and
//! correlation data, without applying it twice; one that never saw it applies it once; the
//! first answer wins, a second is dropped. A request fails only when its own timeout passes.
//!
//! Nothing is published twice on purpose: requests published after the connection was lost
//! are still in the transport's queue and are not re-sent, and the unacknowledged ones that
//! the MQTT session obliges the transport to retransmit itself are left to it
//! ([`crate::client::transport::EventSource::keep_retransmissions`]). A request handed to the
//! transport at the very moment the connection drops may go twice; the duplicate cache makes
//! that harmless. What is kept to re-send is the request's parts, not a copy: the payload is
//! a shared [`Bytes`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::client::registry::Registry;
use crate::client::transport::{IncomingMessage, OutgoingRequest, Publisher, expiry_secs};
use crate::client::values::{ConnectionState, SetOptions, SetOutcome, VdelOutcome, Versioned};
use crate::protocol::errors::Error;
use crate::protocol::hlc::{Hlc, HlcClock, HlcError};
use crate::protocol::properties;
use crate::protocol::resp3::{self, KeyNotifyReply, SetReply};
use crate::protocol::topics;

/// The protocol version every request and response carries in `__protVer`.
pub(crate) use crate::protocol::properties::PROTOCOL_VERSION;

/// Correlation data: 16 bytes, shaped as a version-4 UUID.
pub(crate) type Correlation = [u8; 16];

/// A response, as routed by the connection task (not yet decoded).
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) payload: Bytes,
    pub(crate) stat: Option<String>,
    pub(crate) status_message: Option<String>,
    /// `__ts`, parsed on the connection task (so a binding's thread, which finishes the
    /// request, does not) and checked by [`Shared::check_response`] after `__stat`.
    ts: Option<Result<Hlc, HlcError>>,
}

impl Response {
    /// Takes the properties it needs out of the message (first occurrence wins; unknown
    /// ones, such as a broker's `x-mqtt-client-id`, are ignored).
    fn from_message(m: IncomingMessage) -> Self {
        let (mut stat, mut status_message, mut ts) = (None, None, None);
        for (name, value) in m.user_properties {
            let slot = match name.as_str() {
                properties::STATUS => &mut stat,
                properties::STATUS_MESSAGE => &mut status_message,
                properties::TIMESTAMP => &mut ts,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(value);
            }
        }
        Response {
            payload: m.payload,
            stat,
            status_message,
            ts: ts.map(|ts: String| ts.parse()),
        }
    }
}

type Reply = Result<Response, Error>;

/// Everything the client's handles, the connection task and the observation manager share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) client_id: String,
    pub(crate) response_topic: String,
    /// The notification topic filter without its final `+`.
    pub(crate) notify_prefix: String,
    pub(crate) notify_filter: String,
    pub(crate) clock: HlcClock,
    pub(crate) publisher: Arc<dyn Publisher>,
    pub(crate) state: watch::Sender<ConnectionState>,
    pub(crate) registry: Registry,
    /// The last store instance id seen (the store-instance extension, [`crate::protocol::instance`]).
    pub(crate) instance: crate::protocol::instance::InstanceTracker,
    /// The broker's maximum packet size (from the last CONNACK; `u32::MAX` when unlimited).
    pub(crate) max_packet_size: std::sync::atomic::AtomicU32,
    pending: Mutex<HashMap<Correlation, Pending>>,
    correlation_seed: u64,
    correlation_counter: AtomicU64,
    /// Connections lost so far: a request handed to the transport before the last loss may
    /// have been lost with the connection (or by the broker), one handed over after it is
    /// still in the transport's queue.
    losses: AtomicU64,
    /// Requests re-sent after reconnections (diagnostics).
    resent: AtomicU64,
}

/// A request waiting for its answer, with what publishing it again needs (the payload is
/// shared, not copied).
#[derive(Debug)]
struct Pending {
    tx: oneshot::Sender<Reply>,
    payload: Bytes,
    fencing_token: Option<Hlc>,
    persist: bool,
    deadline: Instant,
    /// [`Shared::losses`] when it was last handed to the transport.
    sent_after: u64,
}

impl std::fmt::Debug for dyn Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Publisher")
    }
}

/// Removes a request's entry from the map when its call ends in any way (response, timeout,
/// or the caller dropping the future), so the map never grows with abandoned requests.
struct PendingGuard<'a> {
    shared: &'a Shared,
    correlation: Correlation,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.shared.pending().remove(&self.correlation);
    }
}

impl Shared {
    pub(crate) fn new(
        client_id: String,
        publisher: Arc<dyn Publisher>,
        observation_buffer: usize,
    ) -> Self {
        let notify_filter = topics::notification_filter(&client_id);
        let notify_prefix = notify_filter
            .strip_suffix('+')
            .unwrap_or(&notify_filter)
            .to_owned();
        // A node id holds no ':' (it separates the HLC's parts).
        let node_id = client_id.replace(':', "_");
        Shared {
            response_topic: topics::response_topic(&client_id),
            notify_prefix,
            notify_filter,
            clock: HlcClock::new(node_id),
            publisher,
            state: watch::Sender::new(ConnectionState::Connecting),
            registry: Registry::new(observation_buffer),
            instance: crate::protocol::instance::InstanceTracker::default(),
            max_packet_size: std::sync::atomic::AtomicU32::new(u32::MAX),
            pending: Mutex::new(HashMap::new()),
            correlation_seed: fastrand::u64(..),
            correlation_counter: AtomicU64::new(0),
            losses: AtomicU64::new(0),
            resent: AtomicU64::new(0),
            client_id,
        }
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<Correlation, Pending>> {
        // Only map operations happen under the lock: a poisoned map is still consistent.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Unique per client (a random seed and a counter), random across clients; version-4
    /// UUID bits set, as the official clients send UUIDs.
    fn next_correlation(&self) -> Correlation {
        let n = self.correlation_counter.fetch_add(1, Ordering::Relaxed);
        let mut c = [0u8; 16];
        let (high, low) = c.split_at_mut(8);
        high.copy_from_slice(&self.correlation_seed.to_be_bytes());
        low.copy_from_slice(&n.to_be_bytes());
        c[6] = (c[6] & 0x0f) | 0x40;
        c[8] = (c[8] & 0x3f) | 0x80;
        c
    }

    /// Number of requests waiting for a response (for tests and diagnostics).
    pub(crate) fn in_flight(&self) -> usize {
        self.pending().len()
    }

    /// Routes a message received on the response topic. Called by the connection task: never
    /// blocks, never fails (a bad message is dropped with a debug line).
    pub(crate) fn route_response(&self, message: IncomingMessage) {
        let Some(correlation) = message
            .correlation
            .as_deref()
            .and_then(|c| Correlation::try_from(c).ok())
        else {
            tracing::debug!("response without 16-byte correlation data dropped");
            return;
        };
        let Some(pending) = self.pending().remove(&correlation) else {
            tracing::debug!(
                "response for an unknown correlation id dropped (late, a duplicate, or not ours)"
            );
            return;
        };
        // The caller may have given up just now; nothing to do then.
        let _ = pending.tx.send(Ok(Response::from_message(message)));
    }

    /// Fails every request waiting for a response (the client closed).
    pub(crate) fn fail_all(&self, error: &Error) {
        let drained: Vec<_> = self.pending().drain().collect();
        for (_, pending) in drained {
            let _ = pending.tx.send(Err(error.clone()));
        }
    }

    /// The connection was lost (called by the connection task before it reconnects).
    pub(crate) fn connection_lost(&self) {
        self.losses.fetch_add(1, Ordering::AcqRel);
    }

    /// How many requests were re-sent after reconnections (diagnostics).
    pub(crate) fn resent(&self) -> u64 {
        self.resent.load(Ordering::Relaxed)
    }

    /// After a reconnection: the requests to publish again, in the order they were first
    /// sent (see the module documentation). Those handed to the transport since the last
    /// loss, those the transport retransmits itself (`retransmitted`, by correlation data)
    /// and those whose timeout has passed are left out.
    pub(crate) fn requests_to_resend(&self, retransmitted: &[Bytes]) -> Vec<OutgoingRequest> {
        let losses = self.losses.load(Ordering::Acquire);
        let now = Instant::now();
        let mut due = Vec::new();
        {
            let mut pending = self.pending();
            for (correlation, p) in pending.iter_mut() {
                if p.sent_after >= losses {
                    continue;
                }
                p.sent_after = losses;
                let remaining = p.deadline.saturating_duration_since(now);
                if remaining.is_zero() || retransmitted.iter().any(|c| c[..] == correlation[..]) {
                    continue;
                }
                due.push((
                    *correlation,
                    p.payload.clone(),
                    p.fencing_token.clone(),
                    p.persist,
                    remaining,
                ));
            }
        }
        // The correlation data grows with each request of this client: its order is theirs.
        due.sort_unstable_by_key(|a| a.0);
        let mut requests = Vec::with_capacity(due.len());
        for (correlation, payload, token, persist, remaining) in due {
            let built = self
                .build_request(&correlation, payload, token.as_ref(), persist, remaining)
                .and_then(|request| self.check_size(request));
            match built {
                Ok(request) => requests.push(request),
                Err(e) => {
                    if let Some(p) = self.pending().remove(&correlation) {
                        let _ = p.tx.send(Err(e));
                    }
                }
            }
        }
        self.resent
            .fetch_add(requests.len() as u64, Ordering::Relaxed);
        requests
    }

    /// Waits until the connection is up; `Err` if the client is closed.
    async fn wait_connected(&self) -> Result<(), Error> {
        let mut rx = self.state.subscribe();
        let state = rx
            .wait_for(|s| matches!(s, ConnectionState::Connected | ConnectionState::Closed))
            .await
            .map_err(|_| Error::Disconnected("the client is closed".into()))?;
        if *state == ConnectionState::Closed {
            return Err(Error::Disconnected("the client is closed".into()));
        }
        Ok(())
    }

    /// Sends one request and waits for its response, all within `timeout`.
    pub(crate) fn request<'a>(
        &'a self,
        payload: Bytes,
        fencing_token: Option<&'a Hlc>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Response, Error>> + Send + 'a {
        // Not an `async fn`: one level of future less, so a smaller one.
        self.request_with(payload, fencing_token, false, timeout)
    }

    /// [`Shared::request`], with `aio-persistence: true` when `persist` (a SET to persist).
    pub(crate) async fn request_with(
        &self,
        payload: Bytes,
        fencing_token: Option<&Hlc>,
        persist: bool,
        timeout: Duration,
    ) -> Result<Response, Error> {
        // One timer for the whole call; `connected` tells what the deadline interrupted.
        let connected = std::sync::atomic::AtomicBool::new(false);
        let call = self.send_and_wait(payload, fencing_token, persist, timeout, &connected);
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result,
            Err(_) if connected.load(Ordering::Relaxed) => Err(Error::Timeout(timeout)),
            Err(_) => Err(Error::Disconnected(format!(
                "not connected to the broker for the whole timeout of {timeout:?}; the request was not sent"
            ))),
        }
    }

    async fn send_and_wait(
        &self,
        payload: Bytes,
        fencing_token: Option<&Hlc>,
        persist: bool,
        timeout: Duration,
        connected: &std::sync::atomic::AtomicBool,
    ) -> Result<Response, Error> {
        // While the connection is down, requests wait here rather than pile up in rumqttc's
        // queue, where a lost session would drop them without a word.
        if *self.state.borrow() != ConnectionState::Connected {
            // Boxed: the rare path should not make every request's future larger (a binding
            // allocates that future once per call).
            Box::pin(self.wait_connected()).await?;
        }
        connected.store(true, Ordering::Relaxed);
        let correlation = self.next_correlation();
        let request = self.build_request(
            &correlation,
            payload.clone(),
            fencing_token,
            persist,
            timeout,
        )?;
        let request = self.check_size(request)?;
        let (tx, rx) = oneshot::channel();
        let pending = Pending {
            tx,
            payload,
            fencing_token: fencing_token.cloned(),
            persist,
            deadline: Instant::now() + timeout,
            sent_after: self.losses.load(Ordering::Acquire),
        };
        self.pending().insert(correlation, pending);
        let _guard = PendingGuard {
            shared: self,
            correlation,
        };
        if self.publisher.publish(request).await.is_err() {
            return Err(Error::Disconnected("the connection is closed".into()));
        }
        let response = match rx.await {
            Ok(reply) => reply?,
            Err(_) => return Err(Error::Disconnected("the connection is closed".into())),
        };
        self.check_response(response)
    }

    /// Refuses a request the broker's maximum packet size (from the last CONNACK: a broker
    /// reconnected to may have a lower one) would not let through.
    fn check_size(&self, request: OutgoingRequest) -> Result<OutgoingRequest, Error> {
        let limit = self.max_packet_size.load(Ordering::Relaxed);
        let size = request.packet_size_bound();
        if u32::try_from(size).map_or(true, |size| size > limit) {
            return Err(Error::InvalidArgument(format!(
                "the request would be a packet of up to {size} bytes, more than the broker's maximum packet size of {limit} bytes"
            )));
        }
        Ok(request)
    }

    /// The PUBLISH of a request: the protocol's properties around `payload`, a fresh `__ts`,
    /// and a message expiry of `timeout` (whole seconds, rounded up).
    fn build_request(
        &self,
        correlation: &Correlation,
        payload: Bytes,
        fencing_token: Option<&Hlc>,
        persist: bool,
        timeout: Duration,
    ) -> Result<OutgoingRequest, Error> {
        let ts = self.clock.send_update_text()?;
        let mut user_properties = Vec::with_capacity(7);
        user_properties.push((properties::SOURCE_ID.to_owned(), self.client_id.clone()));
        user_properties.push((
            properties::PROTOCOL_VERSION_PROPERTY.to_owned(),
            PROTOCOL_VERSION.to_owned(),
        ));
        user_properties.push((properties::TIMESTAMP.to_owned(), ts));
        if let Some(token) = fencing_token {
            user_properties.push((properties::FENCING_TOKEN.to_owned(), token.to_string()));
        }
        if persist {
            // Spelled as the official SDKs send it (Rust, Go, .NET): `aio-persistence: true`.
            user_properties.push((properties::PERSISTENCE.to_owned(), "true".to_owned()));
        }
        user_properties.push((properties::PARTITION.to_owned(), self.client_id.clone()));
        user_properties.push((properties::HIGH_PRIORITY.to_owned(), String::new()));
        Ok(OutgoingRequest {
            topic: topics::REQUEST_TOPIC,
            payload,
            response_topic: self.response_topic.clone(),
            correlation: Bytes::copy_from_slice(correlation),
            message_expiry_secs: expiry_secs(timeout),
            user_properties,
        })
    }

    /// `__stat` must be 200; `__ts`, when present, must parse and is merged into the clock.
    fn check_response(&self, response: Response) -> Result<Response, Error> {
        match response.stat.as_deref() {
            Some("200") => {}
            Some(other) => {
                return Err(Error::UnexpectedResponse(format!(
                    "{} {other:?}{}",
                    properties::STATUS,
                    response
                        .status_message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                )));
            }
            None => {
                return Err(Error::UnexpectedResponse(
                    "the response has no __stat user property".into(),
                ));
            }
        }
        match &response.ts {
            Some(Ok(hlc)) => self.clock.merge_only(hlc)?,
            Some(Err(e)) => return Err(e.clone().into()),
            None => {}
        }
        Ok(response)
    }

    /// The version of a checked response.
    fn version(response: Response, what: &str) -> Result<Hlc, Error> {
        match response.ts {
            Some(ts) => Ok(ts?),
            None => Err(Error::UnexpectedResponse(format!(
                "the {what} response has no __ts (version)"
            ))),
        }
    }

    pub(crate) async fn get(
        &self,
        key: &[u8],
        timeout: Duration,
    ) -> Result<Option<Versioned<Bytes>>, Error> {
        check_key(key)?;
        let mut buf = BytesMut::new();
        resp3::encode_get(&mut buf, key);
        let response = self.request(buf.freeze(), None, timeout).await?;
        match resp3::decode_get_reply(&response.payload)? {
            None => Ok(None),
            Some(value) => Ok(Some(Versioned {
                value,
                version: Self::version(response, "GET")?,
            })),
        }
    }

    pub(crate) async fn set(
        &self,
        key: &[u8],
        value: &[u8],
        options: &SetOptions,
        timeout: Duration,
    ) -> Result<SetOutcome, Error> {
        check_key(key)?;
        let expiry_ms = match options.expiry {
            None => None,
            Some(d) if d.is_zero() => {
                return Err(Error::InvalidArgument(
                    "a SET expiry must be longer than zero".into(),
                ));
            }
            // Rounded up to whole milliseconds: a sub-millisecond expiry still expires.
            Some(d) => Some(u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)),
        };
        let mut buf = BytesMut::new();
        resp3::encode_set(&mut buf, key, value, options.condition, expiry_ms);
        let response = self
            .request_with(
                buf.freeze(),
                options.fencing_token.as_ref(),
                options.persist,
                timeout,
            )
            .await?;
        let applied = resp3::decode_set_reply(&response.payload)? == SetReply::Applied;
        Ok(SetOutcome {
            applied,
            version: Self::version(response, "SET")?,
        })
    }

    pub(crate) async fn del(
        &self,
        key: &[u8],
        fencing_token: Option<&Hlc>,
        timeout: Duration,
    ) -> Result<u32, Error> {
        check_key(key)?;
        let mut buf = BytesMut::new();
        resp3::encode_del(&mut buf, key);
        let response = self.request(buf.freeze(), fencing_token, timeout).await?;
        match resp3::decode_del_reply(&response.payload)? {
            n @ (0 | 1) => Ok(u32::from(n == 1)),
            n => Err(Error::UnexpectedResponse(format!(
                "DEL answered :{n} (expected :0 or :1)"
            ))),
        }
    }

    pub(crate) async fn vdel(
        &self,
        key: &[u8],
        value: &[u8],
        fencing_token: Option<&Hlc>,
        timeout: Duration,
    ) -> Result<VdelOutcome, Error> {
        check_key(key)?;
        let mut buf = BytesMut::new();
        resp3::encode_vdel(&mut buf, key, value);
        let response = self.request(buf.freeze(), fencing_token, timeout).await?;
        match resp3::decode_del_reply(&response.payload)? {
            1 => Ok(VdelOutcome::Deleted),
            0 => Ok(VdelOutcome::NotFound),
            -1 => Ok(VdelOutcome::ValueMismatch),
            n => Err(Error::UnexpectedResponse(format!(
                "VDEL answered :{n} (expected :1, :0 or :-1)"
            ))),
        }
    }

    pub(crate) async fn keynotify(
        &self,
        key: &[u8],
        stop: bool,
        timeout: Duration,
    ) -> Result<KeyNotifyReply, Error> {
        check_key(key)?;
        let mut buf = BytesMut::new();
        resp3::encode_keynotify(&mut buf, key, stop);
        let response = self.request(buf.freeze(), None, timeout).await?;
        resp3::decode_keynotify_reply(&response.payload, stop)
    }

    /// One `SCAN` page: the pattern's keys after `token` (from the start without one).
    pub(crate) async fn scan(
        &self,
        pattern: &[u8],
        token: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<resp3::ScanPage, Error> {
        check_pattern(pattern)?;
        let mut buf = BytesMut::new();
        resp3::encode_scan(&mut buf, pattern, token);
        let response = self.request(buf.freeze(), None, timeout).await?;
        resp3::decode_scan_reply(&response.payload)
    }
}

/// An empty SCAN pattern is refused before anything is sent, as the official SDK does. The
/// rest of the pattern is the server's to judge: the real service's glob dialect may accept
/// what the local server's refuses.
pub(crate) fn check_pattern(pattern: &[u8]) -> Result<(), Error> {
    if pattern.is_empty() {
        return Err(Error::InvalidArgument("the scan pattern is empty".into()));
    }
    Ok(())
}

/// An empty key is refused before anything is sent (the server would answer
/// `the key length is zero`).
pub(crate) fn check_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("the key is empty".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::future::Future;
    use std::pin::Pin;

    /// A publisher that records requests and never fails.
    #[derive(Debug, Default)]
    struct Recorder {
        sent: Mutex<Vec<OutgoingRequest>>,
    }

    impl Publisher for Recorder {
        fn publish(
            &self,
            request: OutgoingRequest,
        ) -> Pin<Box<dyn Future<Output = Result<(), ()>> + Send + '_>> {
            self.sent.lock().unwrap().push(request);
            Box::pin(async { Ok(()) })
        }
        fn disconnect(&self, _filters: &[String]) -> bool {
            true
        }
    }

    fn shared() -> (Arc<Shared>, Arc<Recorder>) {
        let rec = Arc::new(Recorder::default());
        let s = Arc::new(Shared::new("client:1".into(), rec.clone(), 8));
        s.state.send_replace(ConnectionState::Connected);
        (s, rec)
    }

    fn response_to(
        req: &OutgoingRequest,
        payload: &'static [u8],
        props: &[(&str, &str)],
    ) -> IncomingMessage {
        IncomingMessage {
            topic: Bytes::from(req.response_topic.clone()),
            payload: Bytes::from_static(payload),
            correlation: Some(req.correlation.clone()),
            user_properties: props
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    /// Waits until the recorder has `n` requests.
    async fn sent(rec: &Recorder, n: usize) {
        for _ in 0..1000 {
            if rec.sent.lock().unwrap().len() >= n {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("request not sent");
    }

    #[test]
    fn correlations_are_unique_uuid_shaped() {
        let (s, _) = shared();
        let mut seen = HashSet::new();
        for _ in 0..10_000 {
            let c = s.next_correlation();
            assert_eq!(c[6] >> 4, 4);
            assert_eq!(c[8] >> 6, 0b10);
            assert!(seen.insert(c));
        }
    }

    #[tokio::test]
    async fn request_carries_the_protocol_properties() {
        let (s, rec) = shared();
        let token = Hlc::new(5, 6, "lock");
        let task = {
            let s = s.clone();
            tokio::spawn(async move {
                let opts = SetOptions::default().fencing_token(token);
                s.set(b"k", b"v", &opts, Duration::from_millis(1500)).await
            })
        };
        sent(&rec, 1).await;
        let req = rec.sent.lock().unwrap().pop().unwrap();
        assert_eq!(req.topic, topics::REQUEST_TOPIC);
        assert_eq!(req.response_topic, topics::response_topic("client:1"));
        assert_eq!(req.correlation.len(), 16);
        assert_eq!(req.message_expiry_secs, 2);
        assert_eq!(
            &req.payload[..],
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
        );
        let names: Vec<&str> = req
            .user_properties
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "__srcId",
                "__protVer",
                "__ts",
                "__ft",
                "$partition",
                "$high_priority"
            ]
        );
        let ts: Hlc = req.user_properties[2].1.parse().unwrap();
        assert_eq!(ts.node_id, "client_1");
        assert_eq!(req.user_properties[3].1, "000000000000005:00006:lock");
        let version = "999999999999:3:StateStore";
        s.route_response(response_to(
            &req,
            b"+OK\r\n",
            &[
                ("x-mqtt-client-id", "broker"),
                ("__stat", "200"),
                ("__ts", version),
                ("__protVer", "1.0"),
            ],
        ));
        let outcome = task.await.unwrap().unwrap();
        assert!(outcome.applied);
        assert_eq!(outcome.version, version.parse().unwrap());
        // The clock merged the response's __ts.
        assert!(s.clock.current() > outcome.version);
        assert_eq!(s.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_persisted_set_carries_aio_persistence_true() {
        let (s, rec) = shared();
        let task = {
            let s = s.clone();
            tokio::spawn(async move {
                let opts = SetOptions::default().persist();
                s.set(b"k", b"v", &opts, Duration::from_millis(1500)).await
            })
        };
        sent(&rec, 1).await;
        let req = rec.sent.lock().unwrap().pop().unwrap();
        let persistence: Vec<&(String, String)> = req
            .user_properties
            .iter()
            .filter(|(k, _)| k == "aio-persistence")
            .collect();
        assert_eq!(
            persistence,
            [&("aio-persistence".to_owned(), "true".to_owned())]
        );
        task.abort();
        // A SET without persist, and every other request, carry no such property.
        let task = {
            let s = s.clone();
            tokio::spawn(async move {
                s.set(
                    b"k",
                    b"v",
                    &SetOptions::default(),
                    Duration::from_millis(1500),
                )
                .await
            })
        };
        sent(&rec, 1).await;
        let req = rec.sent.lock().unwrap().pop().unwrap();
        assert!(
            req.user_properties
                .iter()
                .all(|(k, _)| k != "aio-persistence")
        );
        task.abort();
    }

    #[tokio::test]
    async fn responses_are_matched_by_correlation_out_of_order() {
        let (s, rec) = shared();
        let mut tasks = Vec::new();
        for i in 0..64u32 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                s.get(format!("k{i}").as_bytes(), Duration::from_secs(5))
                    .await
            }));
        }
        sent(&rec, 64).await;
        let reqs: Vec<OutgoingRequest> = rec.sent.lock().unwrap().drain(..).collect();
        for req in reqs.iter().rev() {
            // Echo the key as the value, so each caller can check it got its own answer.
            let key = resp3::decode_request(&req.payload)
                .unwrap()
                .key()
                .unwrap()
                .clone();
            let mut payload = BytesMut::new();
            resp3::Reply::Bulk(key).encode(&mut payload);
            let m = IncomingMessage {
                topic: Bytes::new(),
                payload: payload.freeze(),
                correlation: Some(req.correlation.clone()),
                user_properties: vec![
                    ("__stat".into(), "200".into()),
                    ("__ts".into(), "1:0:S".into()),
                ],
            };
            s.route_response(m);
        }
        for (i, t) in tasks.into_iter().enumerate() {
            let v = t.await.unwrap().unwrap().unwrap();
            assert_eq!(v.value, format!("k{i}").as_bytes());
        }
        assert_eq!(s.in_flight(), 0);
    }

    #[tokio::test]
    async fn bad_responses_are_typed_errors() {
        let (s, rec) = shared();
        type Case = (
            &'static [u8],
            Vec<(&'static str, &'static str)>,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (b"+OK\r\n", vec![], "__stat"),
            (
                b"+OK\r\n",
                vec![("__stat", "500"), ("__stMsg", "boom")],
                "boom",
            ),
            (b"$1\r\nv\r\n", vec![("__stat", "200")], "__ts"),
            (b"+OK\r\n", vec![("__stat", "200")], "unexpected payload"),
            (
                b"$1\r\nv\r\n",
                vec![("__stat", "200"), ("__ts", "nope")],
                "malformed HLC",
            ),
        ];
        for (i, (payload, props, needle)) in cases.into_iter().enumerate() {
            let task = {
                let s = s.clone();
                tokio::spawn(async move { s.get(b"k", Duration::from_secs(5)).await })
            };
            sent(&rec, i + 1).await;
            let req = rec
                .sent
                .lock()
                .unwrap()
                .last()
                .map(|r| (r.response_topic.clone(), r.correlation.clone()))
                .unwrap();
            s.route_response(IncomingMessage {
                topic: Bytes::from(req.0),
                payload: Bytes::from_static(payload),
                correlation: Some(req.1),
                user_properties: props
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect(),
            });
            let err = task.await.unwrap().unwrap_err();
            assert!(err.to_string().contains(needle), "{needle}: {err}");
        }
    }

    #[tokio::test]
    async fn timeout_and_cleanup() {
        let (s, _rec) = shared();
        let err = s.get(b"k", Duration::from_millis(20)).await.unwrap_err();
        assert!(matches!(err, Error::Timeout(_)), "{err}");
        assert_eq!(s.in_flight(), 0);
        // A late response is ignored.
        s.route_response(IncomingMessage {
            topic: Bytes::new(),
            payload: Bytes::new(),
            correlation: Some(Bytes::from_static(&[0; 16])),
            user_properties: vec![],
        });
        s.route_response(IncomingMessage {
            topic: Bytes::new(),
            payload: Bytes::new(),
            correlation: Some(Bytes::from_static(&[0; 3])),
            user_properties: vec![],
        });
    }

    #[tokio::test]
    async fn not_connected_is_a_disconnected_error_and_nothing_is_sent() {
        let (s, rec) = shared();
        s.state.send_replace(ConnectionState::Reconnecting);
        let err = s.get(b"k", Duration::from_millis(20)).await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Disconnected, "{err}");
        assert!(rec.sent.lock().unwrap().is_empty());
        s.state.send_replace(ConnectionState::Closed);
        let err = s.get(b"k", Duration::from_secs(20)).await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Disconnected, "{err}");
    }

    #[tokio::test]
    async fn invalid_arguments_are_refused_before_sending() {
        let (s, rec) = shared();
        let err = s.get(b"", Duration::from_secs(1)).await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
        let opts = SetOptions::default().expiry(Duration::ZERO);
        let err = s
            .set(b"k", b"v", &opts, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
        assert!(rec.sent.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn requests_handed_over_before_a_loss_are_resent_once_with_their_correlation() {
        let (s, rec) = shared();
        let spawn_get = |key: &'static [u8]| {
            let s = s.clone();
            tokio::spawn(async move { s.get(key, Duration::from_secs(30)).await })
        };
        let a = spawn_get(b"a");
        sent(&rec, 1).await;
        let b = spawn_get(b"b");
        sent(&rec, 2).await;
        // Nothing was lost: nothing to re-send.
        assert!(s.requests_to_resend(&[]).is_empty());
        s.connection_lost();
        // Handed over after the loss: still in the transport's queue, not re-sent.
        let c = spawn_get(b"c");
        sent(&rec, 3).await;
        let first: Vec<OutgoingRequest> = rec.sent.lock().unwrap().drain(..).collect();
        // The transport retransmits `b` itself: only `a` is published again.
        let again = s.requests_to_resend(std::slice::from_ref(&first[1].correlation));
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].correlation, first[0].correlation);
        assert_eq!(again[0].payload, first[0].payload);
        assert!(again[0].message_expiry_secs <= first[0].message_expiry_secs);
        // Once per reconnection.
        assert!(s.requests_to_resend(&[]).is_empty());
        // Lost again: all three, oldest first.
        s.connection_lost();
        let again = s.requests_to_resend(&[]);
        let correlations: Vec<&Bytes> = again.iter().map(|r| &r.correlation).collect();
        assert_eq!(
            correlations,
            [
                &first[0].correlation,
                &first[1].correlation,
                &first[2].correlation
            ]
        );
        assert_eq!(s.resent(), 4);
        // Each is answered twice (first copy and re-sent one): the second answer is dropped.
        for (request, value) in first
            .iter()
            .zip([&b"$1\r\na\r\n"[..], b"$-1\r\n", b"$-1\r\n"])
        {
            for _ in 0..2 {
                s.route_response(IncomingMessage {
                    topic: Bytes::new(),
                    payload: Bytes::copy_from_slice(value),
                    correlation: Some(request.correlation.clone()),
                    user_properties: vec![
                        ("__stat".into(), "200".into()),
                        ("__ts".into(), "1:0:S".into()),
                    ],
                });
            }
        }
        assert_eq!(a.await.unwrap().unwrap().unwrap().value, "a");
        assert!(b.await.unwrap().unwrap().is_none());
        assert!(c.await.unwrap().unwrap().is_none());
        assert_eq!(s.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_request_past_its_timeout_is_not_resent() {
        let (s, rec) = shared();
        let t = {
            let s = s.clone();
            tokio::spawn(async move { s.get(b"k", Duration::from_millis(30)).await })
        };
        sent(&rec, 1).await;
        // Its entry stays until its timer fires; past the deadline it is not re-sent.
        tokio::time::sleep(Duration::from_millis(40)).await;
        s.connection_lost();
        assert!(s.requests_to_resend(&[]).is_empty());
        let err = t.await.unwrap().unwrap_err();
        assert!(matches!(err, Error::Timeout(_)), "{err}");
    }

    #[tokio::test]
    async fn fail_all_wakes_every_waiter() {
        let (s, rec) = shared();
        let t = {
            let s = s.clone();
            tokio::spawn(async move { s.del(b"k", None, Duration::from_secs(30)).await })
        };
        sent(&rec, 1).await;
        s.fail_all(&Error::Disconnected("session lost".into()));
        let err = t.await.unwrap().unwrap_err();
        assert!(err.to_string().contains("session lost"));
    }
}
