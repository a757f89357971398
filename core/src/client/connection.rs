//! The MQTT5 session: one task polls the transport's event loop and does nothing else but
//! route what arrives (responses to their callers, notifications to their streams), react to
//! connection events, and wait out the reconnect backoff.
//!
//! The session's life:
//! 1. Connect (clean start off, session expiry set). On the first CONNACK, and on any later
//!    CONNACK that says the broker has no session for us, SUBSCRIBE to the response topic
//!    and the notification filter, ahead of anything else queued, and wait for the SUBACK.
//!    Then the state is [`ConnectionState::Connected`] and requests may be sent.
//! 2. When the connection drops: [`ConnectionState::Reconnecting`]; wait a backoff delay
//!    (exponential, with jitter), re-read the credentials (the SAT token rotates), reconnect.
//!    Then every request still waiting for its answer is published again with its
//!    correlation data (see [`crate::client::rpc`], "Re-sent after a reconnection"), session
//!    or not: a broker that kept the session may still have lost what it acknowledged (one
//!    restarted from a snapshot), and one that lost it lost everything. The broker delivers
//!    the responses it queued; the store answers a request it already answered from its
//!    duplicate cache. A request fails only when its own timeout passes.
//!
//!    Either way the server forgot the KEYNOTIFY registrations, which the observation
//!    manager restores (with a catch-up GET per key).
//! 3. [`crate::Client::close`]: DISCONNECT, then [`ConnectionState::Closed`]; every request
//!    still waiting fails and every observation stream ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::client::observe::Command;
use crate::client::options::{Backoff, ConnectOptions};
use crate::client::rpc::Shared;
use crate::client::transport::{EventSource, TransportEvent};
use crate::client::values::ConnectionState;
use crate::protocol::errors::{ConnectionFailure, Error};

/// How long a graceful close waits for the DISCONNECT to leave.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Where the connection is; watch it with [`crate::Client::state_changes`].
pub(crate) struct Session<E> {
    pub(crate) events: E,
    pub(crate) shared: Arc<Shared>,
    pub(crate) options: ConnectOptions,
    pub(crate) commands: mpsc::UnboundedSender<Command>,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Told the outcome of the first connection (then `None`).
    pub(crate) ready: Option<oneshot::Sender<Result<(), Error>>>,
}

impl<E: EventSource> Session<E> {
    fn filters(&self) -> Vec<String> {
        vec![
            self.shared.response_topic.clone(),
            self.shared.notify_filter.clone(),
            // Optional (its refusal is not fatal): see `crate::protocol::instance`.
            crate::protocol::instance::INSTANCE_TOPIC.to_owned(),
        ]
    }

    /// The store-instance extension: a response, notification or announcement from a store
    /// instance other than the last one seen means the store restarted and forgot our
    /// KEYNOTIFY registrations; restore them (re-register and catch up) as after a reconnect.
    fn check_instance(&self, message: &crate::client::transport::IncomingMessage) {
        let id = if message.topic == crate::protocol::instance::INSTANCE_TOPIC.as_bytes() {
            std::str::from_utf8(&message.payload).ok()
        } else {
            message.property(crate::protocol::instance::INSTANCE_PROPERTY)
        };
        if let Some(id) = id
            && self.shared.instance.observe(id)
        {
            tracing::info!(
                instance = id,
                "the state store restarted: restoring the observations"
            );
            let _ = self.commands.send(Command::Restore);
        }
    }

    fn set_state(&self, state: ConnectionState) {
        self.shared.state.send_if_modified(|s| {
            let changed = *s != state;
            *s = state;
            changed
        });
    }

    /// The connection is usable.
    fn became_ready(&mut self) {
        self.set_state(ConnectionState::Connected);
        match self.ready.take() {
            Some(ready) => {
                let _ = ready.send(Ok(()));
            }
            None => {
                // This restore registers with whichever store instance listens now: the first
                // instance id seen from here on is the new baseline, not a restart to react
                // to a second time.
                self.shared.instance.reset();
                let _ = self.commands.send(Command::Restore);
            }
        }
    }

    /// The first connection failed: report it and stop (a later `connect` starts afresh).
    fn fail_first(&mut self, error: Error) -> bool {
        match self.ready.take() {
            Some(ready) => {
                let _ = ready.send(Err(error));
                true
            }
            None => false,
        }
    }

    fn refresh_credentials(&mut self) {
        let password = self.options.current_password();
        let sat = self.options.current_sat();
        match (password, sat) {
            (Ok(password), Ok(sat)) => {
                self.events
                    .set_credentials(self.options.username.as_deref(), password, sat);
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!("keeping the previous credentials: {e}");
            }
        }
    }

    /// Runs the session until it is closed (or its first connection fails).
    pub(crate) async fn run(mut self) {
        let mut backoff = Backoff::new(self.options.reconnect);
        let mut awaiting_suback = false;
        let mut suback_id: Option<u16> = None;
        let mut closing: Option<tokio::time::Instant> = None;
        loop {
            let event = match closing {
                None => {
                    tokio::select! {
                        biased;
                        changed = self.shutdown.changed() => {
                            if changed.is_err() || *self.shutdown.borrow() {
                                if *self.shared.state.borrow() == ConnectionState::Connected
                                    && self.shared.publisher.disconnect(&self.filters())
                                {
                                    closing = Some(tokio::time::Instant::now() + CLOSE_GRACE);
                                    continue;
                                }
                                break;
                            }
                            continue;
                        }
                        event = self.events.poll() => event,
                    }
                }
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, self.events.poll()).await {
                        Ok(Ok(TransportEvent::DisconnectSent)) | Ok(Err(_)) | Err(_) => break,
                        Ok(Ok(TransportEvent::Message(m))) => {
                            self.route(m);
                            continue;
                        }
                        Ok(Ok(_)) => continue,
                    }
                }
            };
            match event {
                Ok(TransportEvent::Connected {
                    session_present,
                    max_packet_size,
                }) => {
                    backoff.connected(tokio::time::Instant::now());
                    self.shared.max_packet_size.store(
                        max_packet_size.unwrap_or(u32::MAX),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    let first = self.ready.is_some();
                    if first || !session_present {
                        // At the front of the transport's queue: ahead of every request.
                        self.events.subscribe_first(&self.filters());
                        awaiting_suback = true;
                        suback_id = None;
                    }
                    if !first {
                        self.resend_pending(session_present);
                    }
                    if !first && session_present {
                        self.became_ready();
                    }
                }
                Ok(TransportEvent::SubscribeSent(id)) if awaiting_suback => suback_id = Some(id),
                Ok(TransportEvent::SubAck { id, result })
                    if awaiting_suback && suback_id == Some(id) =>
                {
                    awaiting_suback = false;
                    suback_id = None;
                    match result {
                        Ok(()) => self.became_ready(),
                        Err(reason) => {
                            let error = Error::connection(format!(
                                "the broker refused the subscription to the response or notification topic: {reason}"
                            ));
                            if self.fail_first(error) {
                                self.shared.publisher.disconnect(&self.filters());
                                break;
                            }
                            // Requests would only time out; say why, keep the session going.
                            tracing::error!("{reason}: responses cannot be received");
                            self.became_ready();
                        }
                    }
                }
                Ok(TransportEvent::Message(m)) => self.route(m),
                Ok(_) => {}
                Err(e) => {
                    let first_error = if e.timed_out {
                        Error::ConnectTimeout {
                            host: self.options.host.clone(),
                            port: self.options.port,
                            limit: self.options.connect_timeout,
                        }
                    } else {
                        // Name the broker, as the timeout does: "refused" alone does not say
                        // which host and port (a default port, say) were tried.
                        Error::Connection(ConnectionFailure::caused_by_shared(
                            format!(
                                "cannot connect to {}:{}: {}",
                                self.options.host, self.options.port, e.message
                            ),
                            e.cause.clone(),
                        ))
                    };
                    if self.fail_first(first_error) {
                        break;
                    }
                    awaiting_suback = false;
                    self.shared.connection_lost();
                    self.set_state(ConnectionState::Reconnecting);
                    let (delay, attempt) =
                        backoff.next_delay(tokio::time::Instant::now(), fastrand::f64());
                    tracing::info!(
                        "connection lost ({e}); reconnecting in {delay:?} (attempt {attempt})"
                    );
                    tokio::select! {
                        biased;
                        changed = self.shutdown.changed() => {
                            if changed.is_err() || *self.shutdown.borrow() {
                                break;
                            }
                        }
                        () = tokio::time::sleep(delay) => {}
                    }
                    self.refresh_credentials();
                }
            }
        }
        self.finish();
    }

    /// Publishes again every request still waiting for its answer (after a reconnection),
    /// through the transport's flow-controlled queue, behind the SUBSCRIBE when there is one.
    /// A task of its own does the publishing: it may wait for room in the queue, which only
    /// this task's polling makes.
    fn resend_pending(&mut self, session_present: bool) {
        let retransmitted = self.events.keep_retransmissions();
        let requests = self.shared.requests_to_resend(&retransmitted);
        if requests.is_empty() && retransmitted.is_empty() {
            return;
        }
        tracing::info!(
            resent = requests.len(),
            retransmitted = retransmitted.len(),
            session_present,
            "reconnected: re-sending the requests still waiting for an answer"
        );
        if requests.is_empty() {
            return;
        }
        let shared = self.shared.clone();
        tokio::spawn(async move {
            for request in requests {
                if shared.publisher.publish(request).await.is_err() {
                    // The client is closing: its requests fail with it.
                    break;
                }
            }
        });
    }

    fn route(&self, message: crate::client::transport::IncomingMessage) {
        self.check_instance(&message);
        if message.topic == crate::protocol::instance::INSTANCE_TOPIC.as_bytes() {
            return;
        }
        if message.topic == self.shared.response_topic.as_bytes() {
            self.shared.route_response(message);
        } else if message
            .topic
            .starts_with(self.shared.notify_prefix.as_bytes())
        {
            self.shared.registry.route_notification(
                &self.shared.client_id,
                &self.shared.clock,
                message,
            );
        } else {
            tracing::debug!("message on an unexpected topic dropped");
        }
    }

    fn finish(&mut self) {
        self.set_state(ConnectionState::Closed);
        let _ = self.fail_first(Error::Disconnected(
            "the client was closed while connecting".into(),
        ));
        self.shared
            .fail_all(&Error::Disconnected("the client is closed".into()));
        self.shared.registry.close_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::options::ReconnectPolicy;
    use crate::client::transport::{IncomingMessage, OutgoingRequest, PollError, Publisher};
    use bytes::Bytes;
    use std::collections::VecDeque;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Mutex;

    /// Records what is published; never fails.
    #[derive(Debug, Default)]
    struct NullPublisher {
        /// The filters of each `disconnect` call.
        disconnects: Mutex<Vec<Vec<String>>>,
        sent: Mutex<Vec<OutgoingRequest>>,
    }

    impl Publisher for NullPublisher {
        fn publish(
            &self,
            request: OutgoingRequest,
        ) -> Pin<Box<dyn Future<Output = Result<(), ()>> + Send + '_>> {
            self.sent.lock().unwrap().push(request);
            Box::pin(async { Ok(()) })
        }
        fn disconnect(&self, filters: &[String]) -> bool {
            self.disconnects.lock().unwrap().push(filters.to_vec());
            true
        }
    }

    type Feed = mpsc::UnboundedSender<Result<TransportEvent, PollError>>;

    /// A transport that plays a script, then what the test feeds it, then waits forever.
    #[derive(Debug)]
    struct Script {
        events: VecDeque<Result<TransportEvent, PollError>>,
        more: Option<mpsc::UnboundedReceiver<Result<TransportEvent, PollError>>>,
        subscribes: Arc<Mutex<Vec<Vec<String>>>>,
        credentials: Arc<Mutex<u32>>,
        /// What `keep_retransmissions` answers next (then nothing).
        retransmitted: Arc<Mutex<Vec<Bytes>>>,
    }

    impl EventSource for Script {
        async fn poll(&mut self) -> Result<TransportEvent, PollError> {
            if let Some(e) = self.events.pop_front() {
                return e;
            }
            match &mut self.more {
                Some(more) => match more.recv().await {
                    Some(e) => e,
                    None => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        }
        fn subscribe_first(&mut self, filters: &[String]) {
            self.subscribes.lock().unwrap().push(filters.to_vec());
        }
        fn keep_retransmissions(&mut self) -> Vec<Bytes> {
            std::mem::take(&mut *self.retransmitted.lock().unwrap())
        }
        fn set_credentials(&mut self, _u: Option<&str>, _p: Option<String>, _s: Option<Bytes>) {
            *self.credentials.lock().unwrap() += 1;
        }
    }

    struct Harness {
        shared: Arc<Shared>,
        commands: mpsc::UnboundedReceiver<Command>,
        shutdown: watch::Sender<bool>,
        ready: oneshot::Receiver<Result<(), Error>>,
        subscribes: Arc<Mutex<Vec<Vec<String>>>>,
        credentials: Arc<Mutex<u32>>,
        publisher: Arc<NullPublisher>,
        /// More events for the transport, after the script.
        feed: Feed,
        retransmitted: Arc<Mutex<Vec<Bytes>>>,
        task: tokio::task::JoinHandle<()>,
    }

    fn start(events: Vec<Result<TransportEvent, PollError>>) -> Harness {
        let publisher = Arc::new(NullPublisher::default());
        let shared = Arc::new(Shared::new("c1".into(), publisher.clone(), 4));
        let (tx, commands) = mpsc::unbounded_channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (ready_tx, ready) = oneshot::channel();
        let subscribes = Arc::new(Mutex::new(Vec::new()));
        let credentials = Arc::new(Mutex::new(0));
        let retransmitted = Arc::new(Mutex::new(Vec::new()));
        let (feed, more) = mpsc::unbounded_channel();
        let session = Session {
            events: Script {
                events: events.into(),
                more: Some(more),
                subscribes: subscribes.clone(),
                credentials: credentials.clone(),
                retransmitted: retransmitted.clone(),
            },
            shared: shared.clone(),
            options: ConnectOptions::default().with_reconnect(ReconnectPolicy::new(
                Duration::from_millis(1),
                Duration::from_millis(2),
            )),
            commands: tx,
            shutdown: shutdown_rx,
            ready: Some(ready_tx),
        };
        Harness {
            shared,
            commands,
            shutdown,
            ready,
            subscribes,
            credentials,
            publisher,
            feed,
            retransmitted,
            task: tokio::spawn(session.run()),
        }
    }

    async fn wait_state(shared: &Shared, state: ConnectionState) {
        let mut rx = shared.state.subscribe();
        tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|s| *s == state))
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn first_connect_subscribes_and_waits_for_suback() {
        let h = start(vec![
            Ok(TransportEvent::Connected {
                session_present: true,
                max_packet_size: None,
            }),
            Ok(TransportEvent::SubscribeSent(7)),
            Ok(TransportEvent::SubAck {
                id: 6,
                result: Ok(()),
            }), // not ours
            Ok(TransportEvent::SubAck {
                id: 7,
                result: Ok(()),
            }),
        ]);
        h.ready.await.unwrap().unwrap();
        assert_eq!(*h.shared.state.borrow(), ConnectionState::Connected);
        let subs = h.subscribes.lock().unwrap().clone();
        assert_eq!(subs.len(), 1);
        assert_eq!(subs[0][0], h.shared.response_topic);
        assert!(subs[0][1].ends_with("/command/notify/+"));
        h.shutdown.send_replace(true);
        h.task.await.unwrap();
        assert_eq!(*h.shared.state.borrow(), ConnectionState::Closed);
        // Closing on purpose unsubscribes from exactly what was subscribed.
        assert_eq!(*h.publisher.disconnects.lock().unwrap(), subs);
    }

    #[tokio::test]
    async fn refused_subscription_fails_the_first_connect() {
        let h = start(vec![
            Ok(TransportEvent::Connected {
                session_present: false,
                max_packet_size: None,
            }),
            Ok(TransportEvent::SubscribeSent(1)),
            Ok(TransportEvent::SubAck {
                id: 1,
                result: Err("NotAuthorized".into()),
            }),
        ]);
        let err = h.ready.await.unwrap().unwrap_err();
        assert!(err.to_string().contains("NotAuthorized"), "{err}");
        h.task.await.unwrap();
    }

    #[tokio::test]
    async fn failed_first_connect_is_reported_not_retried() {
        let h = start(vec![Err("connection refused".into())]);
        let err = h.ready.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Connection);
        h.task.await.unwrap();
        assert_eq!(*h.credentials.lock().unwrap(), 0);
    }

    #[tokio::test]
    async fn reconnect_with_session_keeps_requests_and_restores_observations() {
        let mut h = start(vec![
            Ok(TransportEvent::Connected {
                session_present: false,
                max_packet_size: None,
            }),
            Ok(TransportEvent::SubscribeSent(1)),
            Ok(TransportEvent::SubAck {
                id: 1,
                result: Ok(()),
            }),
            Err("connection reset".into()),
            Err("connection refused".into()),
            Ok(TransportEvent::Connected {
                session_present: true,
                max_packet_size: None,
            }),
        ]);
        h.ready.await.unwrap().unwrap();
        match tokio::time::timeout(Duration::from_secs(5), h.commands.recv()).await {
            Ok(Some(Command::Restore)) => {}
            other => panic!("expected a restore, got {other:?}"),
        }
        assert_eq!(*h.shared.state.borrow(), ConnectionState::Connected);
        // No resubscription: the broker kept the session.
        assert_eq!(h.subscribes.lock().unwrap().len(), 1);
        assert_eq!(*h.credentials.lock().unwrap(), 2);
        h.shutdown.send_replace(true);
        h.task.await.unwrap();
    }

    /// Waits until the publisher has recorded `n` requests.
    async fn published(publisher: &NullPublisher, n: usize) {
        for _ in 0..5000 {
            if publisher.sent.lock().unwrap().len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!(
            "expected {n} publishes, got {}",
            publisher.sent.lock().unwrap().len()
        );
    }

    fn answer(shared: &Shared, request: &OutgoingRequest, payload: &'static [u8]) {
        shared.route_response(IncomingMessage {
            topic: Bytes::from(request.response_topic.clone()),
            payload: Bytes::from_static(payload),
            correlation: Some(request.correlation.clone()),
            user_properties: vec![
                ("__stat".to_owned(), "200".to_owned()),
                ("__ts".to_owned(), "1:0:StateStore".to_owned()),
            ],
        });
    }

    fn property<'a>(request: &'a OutgoingRequest, name: &str) -> Option<&'a str> {
        request
            .user_properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The request published again is the same request: topic, payload, response topic,
    /// correlation data and every property but `__ts`.
    fn assert_same_request(again: &OutgoingRequest, first: &OutgoingRequest) {
        assert_eq!(again.correlation, first.correlation);
        assert_eq!(again.topic, first.topic);
        assert_eq!(again.payload, first.payload);
        assert_eq!(again.response_topic, first.response_topic);
        assert!(again.message_expiry_secs <= first.message_expiry_secs);
        let without_ts = |r: &OutgoingRequest| -> Vec<(String, String)> {
            r.user_properties
                .iter()
                .filter(|(k, _)| k != "__ts")
                .cloned()
                .collect()
        };
        assert_eq!(without_ts(again), without_ts(first));
        assert!(property(again, "__ts").is_some());
    }

    #[tokio::test]
    async fn a_reconnection_resends_the_requests_waiting_for_an_answer() {
        use crate::client::values::SetOptions;
        let h = start(vec![
            Ok(TransportEvent::Connected {
                session_present: false,
                max_packet_size: None,
            }),
            Ok(TransportEvent::SubscribeSent(1)),
            Ok(TransportEvent::SubAck {
                id: 1,
                result: Ok(()),
            }),
        ]);
        h.ready.await.unwrap().unwrap();
        let shared = h.shared.clone();
        let timeout = Duration::from_secs(30);
        let get = |key: &'static [u8]| {
            let shared = shared.clone();
            tokio::spawn(async move { shared.get(key, timeout).await })
        };
        // Three requests in flight: a GET answered before the drop, a fenced persisted SET,
        // and a GET that the transport will retransmit itself after the first reconnection.
        let answered = get(b"answered");
        published(&h.publisher, 1).await;
        let set = {
            let shared = shared.clone();
            tokio::spawn(async move {
                let options = SetOptions::default()
                    .fencing_token(crate::protocol::hlc::Hlc::new(7, 1, "lock"))
                    .persist();
                shared.set(b"k", b"v", &options, timeout).await
            })
        };
        published(&h.publisher, 2).await;
        let retransmitted = get(b"retransmitted");
        published(&h.publisher, 3).await;
        let first: Vec<OutgoingRequest> = h.publisher.sent.lock().unwrap().drain(..).collect();
        answer(&shared, &first[0], b"$-1\r\n");
        assert!(answered.await.unwrap().unwrap().is_none());
        assert_eq!(shared.in_flight(), 2);

        // The connection drops; the broker kept the session, and the transport retransmits
        // the third request itself: only the SET is published again, the same request.
        h.retransmitted
            .lock()
            .unwrap()
            .push(first[2].correlation.clone());
        h.feed.send(Err("connection reset".into())).unwrap();
        h.feed
            .send(Ok(TransportEvent::Connected {
                session_present: true,
                max_packet_size: None,
            }))
            .unwrap();
        wait_state(&shared, ConnectionState::Connected).await;
        published(&h.publisher, 1).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let again: Vec<OutgoingRequest> = h.publisher.sent.lock().unwrap().drain(..).collect();
        assert_eq!(again.len(), 1, "{again:?}");
        assert_same_request(&again[0], &first[1]);
        assert_eq!(
            property(&again[0], "__ft"),
            Some("000000000000007:00001:lock")
        );
        assert_eq!(property(&again[0], "aio-persistence"), Some("true"));
        assert_eq!(shared.resent(), 1);

        // Lost again, and this time the broker kept no session: both are published again
        // (the transport retransmits nothing), after the SUBSCRIBE.
        h.feed.send(Err("connection reset".into())).unwrap();
        h.feed
            .send(Ok(TransportEvent::Connected {
                session_present: false,
                max_packet_size: None,
            }))
            .unwrap();
        published(&h.publisher, 2).await;
        let mut again: Vec<OutgoingRequest> = h.publisher.sent.lock().unwrap().drain(..).collect();
        assert_eq!(h.subscribes.lock().unwrap().len(), 2);
        again.sort_by(|a, b| a.correlation.cmp(&b.correlation));
        assert_same_request(&again[0], &first[1]);
        assert_same_request(&again[1], &first[2]);
        assert_eq!(shared.resent(), 3);
        // Nothing is answered or failed meanwhile: they wait for their answers.
        assert_eq!(shared.in_flight(), 2);
        h.feed.send(Ok(TransportEvent::SubscribeSent(2))).unwrap();
        h.feed
            .send(Ok(TransportEvent::SubAck {
                id: 2,
                result: Ok(()),
            }))
            .unwrap();
        wait_state(&shared, ConnectionState::Connected).await;

        // The store answers the SET twice (the first copy and the re-sent one): the first
        // answer completes it, the second is dropped.
        answer(&shared, &again[0], b"+OK\r\n");
        answer(&shared, &again[0], b"+OK\r\n");
        let outcome = set.await.unwrap().unwrap();
        assert!(outcome.applied);
        assert_eq!(shared.in_flight(), 1);
        answer(&shared, &again[1], b"$1\r\nv\r\n");
        assert_eq!(retransmitted.await.unwrap().unwrap().unwrap().value, "v");
        assert_eq!(shared.in_flight(), 0);
        // A reconnection with nothing waiting publishes nothing.
        h.feed.send(Err("connection reset".into())).unwrap();
        h.feed
            .send(Ok(TransportEvent::Connected {
                session_present: true,
                max_packet_size: None,
            }))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(h.publisher.sent.lock().unwrap().is_empty());
        assert_eq!(shared.resent(), 3);
        h.shutdown.send_replace(true);
        h.task.await.unwrap();
    }

    fn announcement(id: &str) -> Result<TransportEvent, PollError> {
        Ok(TransportEvent::Message(IncomingMessage {
            topic: Bytes::from_static(crate::protocol::instance::INSTANCE_TOPIC.as_bytes()),
            payload: Bytes::copy_from_slice(id.as_bytes()),
            correlation: None,
            user_properties: vec![],
        }))
    }

    #[tokio::test]
    async fn a_new_store_instance_restores_the_observations() {
        let mut h = start(vec![
            Ok(TransportEvent::Connected {
                session_present: false,
                max_packet_size: None,
            }),
            Ok(TransportEvent::SubscribeSent(1)),
            Ok(TransportEvent::SubAck {
                id: 1,
                result: Ok(()),
            }),
            announcement("first"),
            // A response from the same instance: nothing to do.
            Ok(TransportEvent::Message(IncomingMessage {
                topic: Bytes::from(h_response_topic()),
                payload: Bytes::new(),
                correlation: None,
                user_properties: vec![(
                    crate::protocol::instance::INSTANCE_PROPERTY.to_owned(),
                    "first".to_owned(),
                )],
            })),
            announcement("second"),
        ]);
        h.ready.await.unwrap().unwrap();
        match tokio::time::timeout(Duration::from_secs(5), h.commands.recv()).await {
            Ok(Some(Command::Restore)) => {}
            other => panic!("expected a restore, got {other:?}"),
        }
        assert_eq!(h.shared.instance.current().as_deref(), Some("second"));
        // Exactly one restore.
        assert!(h.commands.try_recv().is_err());
        // The instance topic is subscribed with the others.
        let subs = h.subscribes.lock().unwrap().clone();
        assert_eq!(subs[0].len(), 3);
        assert_eq!(subs[0][2], crate::protocol::instance::INSTANCE_TOPIC);
        h.shutdown.send_replace(true);
        h.task.await.unwrap();
    }

    fn h_response_topic() -> String {
        crate::protocol::topics::response_topic("c1")
    }

    #[tokio::test]
    async fn incoming_messages_are_routed_by_topic() {
        let h = start(vec![
            Ok(TransportEvent::Connected {
                session_present: false,
                max_packet_size: None,
            }),
            Ok(TransportEvent::SubscribeSent(1)),
            Ok(TransportEvent::SubAck {
                id: 1,
                result: Ok(()),
            }),
            Ok(TransportEvent::Message(IncomingMessage {
                topic: Bytes::from_static(b"some/other/topic"),
                payload: Bytes::new(),
                correlation: None,
                user_properties: vec![],
            })),
        ]);
        h.ready.await.unwrap().unwrap();
        h.shutdown.send_replace(true);
        h.task.await.unwrap();
    }
}
