//! [`DeviceClient`]: one connection to IoT Hub (MQTT 3.1.1, or AMQP 1.0), as the application
//! holds it: connecting, receiving cloud-to-device messages, sending telemetry, the
//! connection state and counters, closing.
//!
//! The rest of the device client is by concern: the MQTT connection task that owns the socket
//! (`task.rs`), the AMQP transport (`amqp/`), the state they share with the handles
//! (`shared.rs`), a received message and its settlement (`c2d.rs`), and the pure pieces the
//! tasks use: in-order completion (`completion.rs`), per-message settlement (`settle.rs`),
//! redelivery recognition (`redelivery.rs`), SAS token renewal (`renewal.rs`) and what a
//! failed connection is reported as (`connect_error.rs`).

use std::sync::Arc;
use std::time::Duration;

use rumqttc::{AsyncClient, MqttOptions, NetworkOptions, TlsConfiguration, Transport};
use tokio::sync::{mpsc, oneshot, watch};

use super::c2d::C2dMessage;
use super::message::{self, Telemetry};
use super::options::DeviceOptions;
use super::shared::{DeviceStats, Shared};
use super::task::{self, CLOSE_GRACE, Channels, SendRequest};
use crate::client::ConnectionState;
use crate::protocol::errors::Error;

/// Room in rumqttc's request channel: telemetry and the subscription (PUBACKs do not go
/// through it); the outbox bounds what goes in, so `try_*` never finds it full in practice
/// (and when it does, the item waits for the next turn).
const REQUEST_CHANNEL: usize = 4096;
/// Telemetry PUBLISHes in flight at once (rumqttc's inflight window).
const INFLIGHT: u16 = 100;

/// An IoT Hub device client over MQTT 3.1.1 (the default) or AMQP 1.0
/// ([`DeviceOptions::with_transport`]): receives cloud-to-device messages (explicit
/// settlement: complete over both; reject and abandon over AMQP) and sends telemetry. Cheap to
/// clone; [`DeviceClient::close`] ends it.
///
/// ```no_run
/// use mqstate::iothub::{DeviceClient, DeviceOptions, Telemetry};
///
/// # async fn demo() -> Result<(), mqstate::Error> {
/// let options = DeviceOptions::from_connection_string(
///     "HostName=myhub.azure-devices.net;DeviceId=dev1;SharedAccessKey=c2VjcmV0",
/// )?;
/// let client = DeviceClient::connect(options).await?;
/// client.send_event(Telemetry::new("hello").property("kind", "greeting")).await?;
/// while let Ok(msg) = client.receive().await {
///     println!("{:?}: {:?}", msg.message_id, msg.payload);
///     msg.complete()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DeviceClient {
    shared: Arc<Shared>,
    messages: flume::Receiver<Result<C2dMessage, Error>>,
    sends: Sends,
    shutdown: Arc<watch::Sender<bool>>,
    operation_timeout: Duration,
}

/// Where `send_event` hands telemetry, by transport.
#[derive(Debug, Clone)]
enum Sends {
    Mqtt(mpsc::UnboundedSender<SendRequest>),
    #[cfg(feature = "amqp")]
    Amqp(mpsc::UnboundedSender<super::amqp::task::SendRequest>),
}

impl DeviceClient {
    /// Connects and keeps the connection up from then on. Over MQTT it waits for the CONNACK
    /// and the SUBACK of the C2D subscription; over AMQP for the accepted put-token and the
    /// attached receiver and telemetry links. Errors: [`Error::InvalidArgument`] for bad
    /// options, [`Error::Authentication`] when the hub refuses the credentials,
    /// [`Error::Connection`] when it cannot be reached, [`Error::Timeout`] after
    /// `connect_timeout`, [`Error::NotSupported`] for AMQP (over TCP or WebSockets) in a build
    /// without the `amqp` feature.
    pub async fn connect(options: DeviceOptions) -> Result<Self, Error> {
        options.validate()?;
        if options.transport.is_amqp() {
            return Self::connect_amqp(options).await;
        }
        let (password, expiry) = options.password()?;
        let mut mqtt = MqttOptions::new(
            options.device_id.clone(),
            options.connect_host().to_owned(),
            options.port,
        );
        mqtt.set_keep_alive(options.keep_alive);
        // Clean session 0: the subscription and the messages sent while offline survive.
        mqtt.set_clean_session(false);
        mqtt.set_manual_acks(true);
        mqtt.set_inflight(INFLIGHT);
        mqtt.set_request_channel_capacity(REQUEST_CHANNEL);
        // IoT Hub's C2D limit is 64 KB of body plus the topic; telemetry up to 256 KB.
        mqtt.set_max_packet_size(512 * 1024, 512 * 1024);
        mqtt.set_credentials(options.username(), password.unwrap_or_default());
        if let Some(tls) = &options.tls {
            mqtt.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
                tls.client_config()?,
            )));
        }
        let connect_secs = options.connect_timeout.as_secs().max(1);
        let mut net = NetworkOptions::new();
        net.set_tcp_nodelay(true);
        net.set_connection_timeout(connect_secs);
        let (client, mut eventloop) = AsyncClient::new(mqtt, REQUEST_CHANNEL);
        eventloop.set_network_options(net);

        let shared = Arc::new(Shared::new(options.device_id.clone()));
        let (messages_tx, messages) = flume::unbounded();
        let (sends, sends_rx) = mpsc::unbounded_channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (ready_tx, ready_rx) = oneshot::channel();
        let operation_timeout = options.operation_timeout;
        let connect_timeout = options.connect_timeout;
        let channels = Channels {
            messages: messages_tx,
            sends: sends_rx,
            shutdown: shutdown_rx,
            ready: ready_tx,
        };
        task::spawn(shared.clone(), client, eventloop, options, expiry, channels);
        let this = DeviceClient {
            shared,
            messages,
            sends: Sends::Mqtt(sends),
            shutdown: Arc::new(shutdown),
            operation_timeout,
        };
        this.ready(ready_rx, connect_timeout).await
    }

    /// The AMQP transport, over TCP or WebSockets (docs/iothub-device.md, "Transports").
    #[cfg(feature = "amqp")]
    async fn connect_amqp(options: DeviceOptions) -> Result<Self, Error> {
        use super::amqp::task;
        let shared = Arc::new(Shared::new(options.device_id.clone()));
        let (messages_tx, messages) = flume::unbounded();
        let (sends, sends_rx) = mpsc::unbounded_channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (ready_tx, ready_rx) = oneshot::channel();
        let operation_timeout = options.operation_timeout;
        let connect_timeout = options.connect_timeout;
        let channels = task::Channels {
            messages: messages_tx,
            sends: sends_rx,
            shutdown: shutdown_rx,
            ready: ready_tx,
        };
        task::spawn(shared.clone(), options, channels);
        let this = DeviceClient {
            shared,
            messages,
            sends: Sends::Amqp(sends),
            shutdown: Arc::new(shutdown),
            operation_timeout,
        };
        this.ready(ready_rx, connect_timeout).await
    }

    /// A build without the `amqp` feature has no AMQP transport (nor AMQP over WebSockets).
    #[cfg(not(feature = "amqp"))]
    async fn connect_amqp(options: DeviceOptions) -> Result<Self, Error> {
        Err(Error::NotSupported(format!(
            "this build of mqstate has no AMQP transport (transport {:?}: the `amqp` cargo feature is off)",
            options.transport.as_str()
        )))
    }

    /// Waits for the first connection's outcome.
    async fn ready(
        self,
        ready_rx: oneshot::Receiver<Result<(), Error>>,
        connect_timeout: Duration,
    ) -> Result<Self, Error> {
        let this = self;
        match tokio::time::timeout(connect_timeout + Duration::from_secs(1), ready_rx).await {
            Ok(Ok(Ok(()))) => Ok(this),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(Error::Disconnected(
                "the connection task ended while connecting".into(),
            )),
            Err(_) => {
                this.close().await;
                Err(Error::Timeout(connect_timeout))
            }
        }
    }

    /// The device id.
    pub fn device_id(&self) -> &str {
        &self.shared.device_id
    }

    /// The next message, waiting for one. A message whose property bag cannot be decoded is
    /// an `Err(`[`Error::MalformedMessage`]`)` in its place (it is acknowledged, since no
    /// application could process it, and the connection goes on). After [`close`] (or when
    /// the client stopped for good, e.g. its credentials were refused on reconnection), the
    /// buffered messages are still returned, then the reason the client stopped.
    ///
    /// [`close`]: DeviceClient::close
    pub async fn receive(&self) -> Result<C2dMessage, Error> {
        match self.messages.recv_async().await {
            Ok(m) => m,
            Err(_) => Err(self.shared.closed_error()),
        }
    }

    /// The next message if one is buffered (`Ok(None)` otherwise).
    pub fn try_receive(&self) -> Result<Option<C2dMessage>, Error> {
        match self.messages.try_recv() {
            Ok(m) => m.map(Some),
            Err(flume::TryRecvError::Empty) => Ok(None),
            Err(flume::TryRecvError::Disconnected) => Err(self.shared.closed_error()),
        }
    }

    /// Waits up to `timeout` for a message: `Ok(None)` when none came (for blocking callers
    /// and the C binding).
    pub fn receive_blocking(&self, timeout: Duration) -> Result<Option<C2dMessage>, Error> {
        match self.messages.recv_timeout(timeout) {
            Ok(m) => m.map(Some),
            Err(flume::RecvTimeoutError::Timeout) => Ok(None),
            Err(flume::RecvTimeoutError::Disconnected) => Err(self.shared.closed_error()),
        }
    }

    /// Sends telemetry and waits for the hub to take it (up to `operation_timeout`: then
    /// [`Error::Timeout`], and the message may still arrive). Over MQTT it is published on
    /// `devices/{id}/messages/events/{property bag}` at QoS 1 (the hub's PUBACK); over AMQP
    /// sent on the `/devices/{id}/messages/events` link with the same properties (the hub's
    /// accepted disposition). While disconnected it waits for the reconnection. An event sent
    /// but not acknowledged when the connection drops fails with [`Error::Disconnected`] (it
    /// may or may not have arrived): over MQTT when the hub kept no session, over AMQP always.
    pub async fn send_event(&self, event: Telemetry) -> Result<(), Error> {
        let (done, wait) = oneshot::channel();
        match &self.sends {
            Sends::Mqtt(sends) => {
                let bag = message::telemetry_bag(&event)?;
                let topic = message::events_topic(&self.shared.device_id, &bag);
                sends
                    .send(SendRequest {
                        topic,
                        payload: event.payload,
                        done,
                    })
                    .map_err(|_| self.shared.closed_error())?;
            }
            #[cfg(feature = "amqp")]
            Sends::Amqp(sends) => {
                let message = super::amqp::convert::telemetry(event)?;
                sends
                    .send(super::amqp::task::SendRequest { message, done })
                    .map_err(|_| self.shared.closed_error())?;
            }
        }
        self.shared.wake.notify_one();
        match tokio::time::timeout(self.operation_timeout, wait).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.shared.closed_error()),
            Err(_) => Err(Error::Timeout(self.operation_timeout)),
        }
    }

    /// The connection state now.
    pub fn state(&self) -> ConnectionState {
        *self.shared.state.borrow()
    }

    /// A receiver of connection state changes.
    pub fn state_changes(&self) -> watch::Receiver<ConnectionState> {
        self.shared.state.subscribe()
    }

    /// The counters so far.
    pub fn stats(&self) -> DeviceStats {
        self.shared.counters.snapshot()
    }

    /// Disconnects (a graceful DISCONNECT, or the AMQP links and connection closed, when
    /// connected) and waits until the connection task ended. Unsettled messages stay in (or go
    /// back to) the hub's queue. Idempotent.
    pub async fn close(&self) {
        let _ = self.shutdown.send(true);
        let mut changes = self.shared.state.subscribe();
        let _ = tokio::time::timeout(
            CLOSE_GRACE + Duration::from_secs(5),
            changes.wait_for(|s| *s == ConnectionState::Closed),
        )
        .await;
    }

    /// Asks the client to close without waiting (for `Drop` in bindings).
    pub fn close_nowait(&self) {
        let _ = self.shutdown.send(true);
    }
}

#[cfg(all(test, not(feature = "amqp")))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::ErrorKind;
    use crate::iothub::Transport;

    #[tokio::test]
    async fn without_the_amqp_feature_both_amqp_transports_are_not_supported() {
        for transport in [Transport::Amqp, Transport::AmqpWs] {
            let options = DeviceOptions::new("h", "d", "c2VjcmV0").with_transport(transport);
            let e = DeviceClient::connect(options).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NotSupported, "{e}");
            assert!(e.to_string().contains(transport.as_str()), "{e}");
        }
    }
}
