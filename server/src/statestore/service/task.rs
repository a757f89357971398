//! The *store* task: it owns the [`Handler`] and the [`DedupCache`], takes the requests the
//! event loop forwards, applies the broker's connection events, answers the observer's
//! queries, wakes exactly at the next expiry deadline to send DELETE notifications of
//! expired keys, and batches what waits for a group commit of the data dir.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use rumqttc::v5::AsyncClient;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Publish;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::poll::Input;
use super::reply::{Publisher, Reply};
use super::request::{Admission, RequestKind};
use crate::broker::{BrokerEvent, ImplicitNotify};
use crate::persist::{MAX_BATCH, Persistence};
use crate::statestore::dedup::{CachedAnswer, DedupCache};
use crate::statestore::handler::{Answer, Handler, Notification, RequestContext};
use crate::statestore::mosquitto_log;
use crate::statestore::observer::KeyQuery;

pub(super) struct StoreTask {
    pub(super) handler: Handler,
    pub(super) dedup: DedupCache<CachedAnswer>,
    /// The node id of the server's versions, shared by the cached answers.
    pub(super) node_id: Arc<str>,
    /// For acknowledging requests.
    pub(super) client: AsyncClient,
    /// The checks every request passes first.
    pub(super) admission: Admission,
    /// Sends responses and notifications.
    pub(super) publisher: Publisher,
    /// The data dir, if any.
    pub(super) persistence: Option<Persistence>,
    /// What waits for the group commit in progress (see [`persist`]), in order.
    pub(super) outbox: Vec<Deferred>,
    /// Notifications without a subscription (the embedded broker, unless turned off).
    pub(super) implicit: Option<Implicit>,
}

/// The implicit notification subscriptions of the embedded broker (docs/protocol.md section
/// 6.1), and the clients that may hold one, so that a request of a client that observes
/// nothing costs nothing.
pub(super) struct Implicit {
    broker: ImplicitNotify,
    attached: HashSet<String>,
}

impl Implicit {
    pub(super) fn new(broker: ImplicitNotify) -> Implicit {
        Implicit {
            broker,
            attached: HashSet::new(),
        }
    }

    /// After a request of `client_id`: it gets a subscription while it observes a key, and
    /// loses it when it observes none. Checked after every request of an observing client,
    /// not only after a KEYNOTIFY: a reconnect drops the subscription (it is not in the
    /// client's session) while the registrations of a session takeover survive.
    async fn sync(&mut self, client_id: &str, observes: bool) {
        if observes {
            self.broker.attach(client_id).await;
            if !self.attached.contains(client_id) {
                self.attached.insert(client_id.to_owned());
            }
        } else if self.attached.remove(client_id) {
            self.broker.detach(client_id).await;
        }
    }
}

/// What waits in the outbox.
pub(super) enum Deferred {
    Reply(Box<Reply>),
    Notifications(Vec<Notification>),
    Ack(Publish),
}

impl StoreTask {
    pub(super) async fn run(
        mut self,
        mut input: mpsc::Receiver<Input>,
        broker_events: Option<mpsc::UnboundedReceiver<BrokerEvent>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut broker_events = broker_events;
        let mut queries = self.handler.take_queries();
        loop {
            let deadline = self.handler.next_deadline().map(Instant::from_std);
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                event = recv_event(&mut broker_events) => match event {
                    Some(event) => self.on_broker_event(event).await,
                    None => broker_events = None,
                },
                query = recv_query(&mut queries) => match query {
                    Some(query) => self.handler.answer_query(query, std::time::Instant::now()),
                    None => queries = None,
                },
                _ = sleep_until(deadline) => {
                    let notifications = self.handler.expire(std::time::Instant::now());
                    if self.batch_open() {
                        self.outbox.push(Deferred::Notifications(notifications));
                    } else {
                        self.publisher.publish_notifications(notifications).await;
                    }
                }
                request = input.recv() => match request {
                    Some(input) => self.on_input(input).await,
                    None => break,
                },
            }
            if !self.outbox.is_empty() {
                self.group_commit(&mut input).await;
            }
        }
    }

    pub(super) async fn on_input(&mut self, input: Input) {
        match input {
            Input::Request(publish) => {
                let ack = ack_of(&publish);
                self.on_request(publish).await;
                self.ack(ack).await;
            }
            Input::Log(publish) => {
                let line = String::from_utf8_lossy(&publish.payload);
                if let Some(event) = mosquitto_log::parse_line(&line) {
                    self.on_broker_event(event).await;
                }
                self.ack(ack_of(&publish)).await;
            }
        }
    }

    /// Whether what was just handled must wait for a commit: something already waits, or
    /// the store's journal touches a key on disk. Otherwise the journal (memory-only
    /// changes) is dropped and the answer goes out at once.
    pub(super) fn batch_open(&mut self) -> bool {
        let Some(p) = &self.persistence else {
            return false;
        };
        if !self.outbox.is_empty() || p.needs_disk(self.handler.store()) {
            return true;
        }
        self.handler.store_mut().take_journal();
        false
    }

    /// Handles every request already queued (up to [`MAX_BATCH`]) into the open batch,
    /// commits the batch in one transaction, then sends what waited (see [`persist`]).
    pub(super) async fn group_commit(&mut self, input: &mut mpsc::Receiver<Input>) {
        for _ in 0..MAX_BATCH {
            match input.try_recv() {
                Ok(item) => self.on_input(item).await,
                Err(_) => break,
            }
        }
        let Some(p) = self.persistence.clone() else {
            return;
        };
        let clock_ms = self.handler.clock().current().ms;
        let result = p.commit(self.handler.store_mut(), clock_ms).await;
        let failed = match &result {
            Ok(_) => false,
            Err(e) => {
                tracing::error!(error = %e, "commit failed: the batch's writes are undone and answered with an error");
                true
            }
        };
        for deferred in std::mem::take(&mut self.outbox) {
            match deferred {
                Deferred::Reply(mut reply) if failed => {
                    match &reply.kind {
                        RequestKind::Read(key) => {
                            reply.answer = self.handler.answer_get(key, std::time::Instant::now());
                        }
                        RequestKind::Write => {
                            reply.answer = Answer::error(&mqstate::ServiceError::PersistenceFailed);
                        }
                        RequestKind::Other => {}
                    }
                    reply.notifications.clear();
                    self.send_reply(*reply).await;
                }
                Deferred::Reply(reply) => self.send_reply(*reply).await,
                Deferred::Notifications(_) if failed => {}
                Deferred::Notifications(n) => self.publisher.publish_notifications(n).await,
                Deferred::Ack(publish) => self.send_ack(publish).await,
            }
        }
    }

    /// Acknowledges a received QoS 1 message (nothing to do for QoS 0), after what waits
    /// for a commit if anything does.
    pub(super) async fn ack(&mut self, ack: Option<Publish>) {
        let Some(publish) = ack else {
            return;
        };
        if self.outbox.is_empty() {
            self.send_ack(publish).await;
        } else {
            self.outbox.push(Deferred::Ack(publish));
        }
    }

    pub(super) async fn send_ack(&self, publish: Publish) {
        if let Err(e) = self.client.ack(&publish).await {
            tracing::error!(error = %e, "cannot acknowledge a request");
        }
    }

    pub(super) async fn on_broker_event(&mut self, event: BrokerEvent) {
        tracing::trace!(?event, "broker connection event");
        match event {
            BrokerEvent::Connected(id) => self.handler.client_connected(&id),
            BrokerEvent::Disconnected(id) => {
                self.handler.client_disconnected(&id);
                // The registrations are gone with the last connection: so is the implicit
                // subscription (a takeover keeps both).
                let observes = self.handler.registrations().observes_any(&id);
                if let Some(implicit) = &mut self.implicit {
                    implicit.sync(&id, observes).await;
                }
            }
        }
    }

    /// Executes a request that passes the checks of [`Admission`](super::request::Admission),
    /// unless it is a duplicate (answered from the cache), and sends or batches its reply.
    async fn on_request(&mut self, publish: Publish) {
        let Some(request) = self.admission.admit(publish) else {
            return;
        };
        let client_id = request.client_id();
        let response_topic = request.response_topic.as_str();
        let props = &request.props;
        let correlation = request.correlation.clone();
        // Duplicates are recognised by (client id, correlation data); without a client id the
        // response topic stands in for it.
        let dedup_id = client_id.unwrap_or(response_topic).to_owned();
        let now = std::time::Instant::now();
        if let Some(answer) = self.dedup.get(&dedup_id, &correlation, now) {
            tracing::debug!(client_id = %dedup_id, "duplicate request answered from the cache");
            let answer = answer.answer();
            self.publisher
                .respond(response_topic, &correlation, props.message_expiry, &answer)
                .await;
            return;
        }
        let persist = self
            .persistence
            .as_ref()
            .is_some_and(|p| p.persists(props.persist));
        let ctx = RequestContext {
            client_id,
            timestamp: props.timestamp.as_deref(),
            fencing_token: props.fencing_token.as_deref(),
            persist,
        };
        let outcome = self.handler.handle(&ctx, &request.payload, now);
        // Before the answer goes out: a notification of a change made after the client read
        // its `+OK` must find the subscription in place.
        if let (Some(implicit), Some(id)) = (&mut self.implicit, client_id) {
            let observes = self.handler.registrations().observes_any(id);
            implicit.sync(id, observes).await;
        }
        let reply = Reply {
            response_topic: response_topic.to_owned(),
            correlation,
            message_expiry: props.message_expiry,
            answer: outcome.answer,
            notifications: outcome.notifications,
            dedup_id,
            kind: if self.persistence.is_some() {
                RequestKind::of(&request.payload)
            } else {
                RequestKind::Other
            },
        };
        if self.batch_open() {
            self.outbox.push(Deferred::Reply(Box::new(reply)));
        } else {
            self.send_reply(reply).await;
        }
    }

    /// Sends an answer and its notifications, and caches it for duplicates.
    async fn send_reply(&mut self, reply: Reply) {
        let Reply {
            response_topic,
            correlation,
            message_expiry,
            answer,
            notifications,
            dedup_id,
            kind: _,
        } = reply;
        self.publisher
            .respond(&response_topic, &correlation, message_expiry, &answer)
            .await;
        self.publisher.publish_notifications(notifications).await;
        let size = DedupCache::<CachedAnswer>::entry_size(&correlation, answer.payload.len());
        let cached = CachedAnswer::of(answer, &self.node_id);
        self.dedup.insert(
            &dedup_id,
            correlation,
            cached,
            size,
            std::time::Instant::now(),
        );
    }
}

/// What `AsyncClient::ack` needs of a received message (its QoS and packet id), without the
/// payload and properties, which the request handling consumes.
fn ack_of(publish: &Publish) -> Option<Publish> {
    if publish.qos == QoS::AtMostOnce {
        return None;
    }
    let mut ack = Publish::new("", publish.qos, Bytes::new(), None);
    ack.pkid = publish.pkid;
    Some(ack)
}

async fn recv_event(
    events: &mut Option<mpsc::UnboundedReceiver<BrokerEvent>>,
) -> Option<BrokerEvent> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The next query of the store's observer; never, without one that asks.
async fn recv_query(queries: &mut Option<mpsc::Receiver<KeyQuery>>) -> Option<KeyQuery> {
    match queries {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
