//! The async [`Client`]: get, set, del, vdel, scan, observe, unobserve, close.
//!
//! ```no_run
//! use std::time::Duration;
//! use mqstate::{Client, ConnectOptions, SetOptions};
//!
//! # async fn demo() -> Result<(), mqstate::Error> {
//! let client = Client::connect(ConnectOptions::from_url("mqtt://127.0.0.1:1883")?).await?;
//! let outcome = client.set("greeting", "hello", SetOptions::default()).await?;
//! assert!(outcome.applied);
//! let got = client.get("greeting").await?.expect("just set");
//! assert_eq!(got.value, "hello");
//! assert_eq!(got.version, outcome.version);
//! // A lease-style conditional write that expires on its own.
//! let lock = SetOptions::default().nex().expiry(Duration::from_secs(10));
//! client.set("lock", "holder-1", lock).await?;
//! client.close().await;
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

pub(crate) mod connection;
pub(crate) mod observe;
pub mod options;
pub(crate) mod registry;
pub(crate) mod rpc;
pub(crate) mod scan;
mod tls;
pub(crate) mod transport;
pub(crate) mod values;

pub use observe::KeyObservation;
pub use registry::KeyNotification;
pub use scan::{Scan, ScanKeys};
pub use values::{ConnectionState, SetOptions, SetOutcome, VdelOutcome, Versioned};

use connection::Session;
use observe::Command;
use options::ConnectOptions;
use rpc::Shared;

use crate::protocol::errors::Error;
use crate::protocol::hlc::Hlc;

/// Owns the background tasks; dropped with the last [`Client`] (or [`KeyObservation`]),
/// which closes the connection.
struct Inner {
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    commands: mpsc::UnboundedSender<Command>,
    task: Mutex<Option<JoinHandle<()>>>,
    request_timeout: Duration,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The session sends DISCONNECT and ends; nothing here blocks or needs a runtime.
        self.shutdown.send_replace(true);
    }
}

/// A state store client: cheap to clone (`Arc` inside), `Send + Sync`, usable from any
/// number of tasks at once; requests are pipelined on one MQTT connection.
///
/// Dropping the last clone (and the last [`KeyObservation`]) closes the connection;
/// [`close`](Client::close) does it explicitly and waits for it.
///
/// ```no_run
/// # async fn demo() -> Result<(), mqstate::Error> {
/// let client = mqstate::Client::connect(mqstate::ConnectOptions::default()).await?;
/// let c2 = client.clone();
/// let (a, b) = tokio::join!(client.get("a"), c2.get("b"));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    timeout: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("client_id", &self.inner.shared.client_id)
            .field("state", &self.state())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Client {
    /// Connects, subscribes to the client's response and notification topics, and returns
    /// once the broker acknowledged the subscription. A failure of this first connection is
    /// returned ([`Error::Connection`]); later drops are reconnected in the background.
    ///
    /// Must be called within a tokio runtime (multi-thread or current-thread); the client's
    /// background tasks run on it. Use [`crate::blocking::Client`] outside of one.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), mqstate::Error> {
    /// let client = mqstate::Client::connect(mqstate::ConnectOptions::new("127.0.0.1", 1883)).await?;
    /// println!("connected as {}", client.client_id());
    /// # Ok(()) }
    /// ```
    pub async fn connect(options: ConnectOptions) -> Result<Client, Error> {
        // Polled by some other executor, `tokio::spawn` would panic: say so instead.
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::InvalidArgument(
                "Client::connect must run inside a tokio runtime (use mqstate::blocking::Client otherwise)".into(),
            ));
        }
        options.validate()?;
        let client_id = match &options.client_id {
            Some(id) => id.clone(),
            None => generated_client_id()?,
        };
        let (publisher, events) = transport::rumqttc_transport(&options, &client_id)?;
        let shared = Arc::new(Shared::new(
            client_id,
            publisher,
            options.observation_buffer,
        ));
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (ready_tx, ready_rx) = oneshot::channel();
        let request_timeout = options.request_timeout;
        tokio::spawn(observe::manager(
            shared.clone(),
            request_timeout,
            commands.clone(),
            commands_rx,
        ));
        let session = Session {
            events,
            shared: shared.clone(),
            options,
            commands: commands.clone(),
            shutdown: shutdown_rx,
            ready: Some(ready_tx),
        };
        let task = tokio::spawn(session.run());
        let inner = Arc::new(Inner {
            shared,
            shutdown,
            commands,
            task: Mutex::new(Some(task)),
            request_timeout,
        });
        match ready_rx.await {
            Ok(Ok(())) => Ok(Client {
                inner,
                timeout: request_timeout,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::connection(
                "the connection task ended before connecting",
            )),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    pub(crate) fn send_command(&self, command: Command) {
        let _ = self.inner.commands.send(command);
    }
}

/// What an observation needs of its client (see [`observe::Host`]).
impl observe::Host for Client {
    fn shared(&self) -> &Arc<Shared> {
        Client::shared(self)
    }

    fn timeout(&self) -> Duration {
        Client::timeout(self)
    }

    fn send_command(&self, command: Command) {
        Client::send_command(self, command);
    }

    fn boxed(&self) -> Box<dyn observe::Host> {
        Box::new(self.clone())
    }
}

impl Client {
    /// The MQTT client id (generated when the options had none).
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) {
    /// assert!(!client.client_id().is_empty());
    /// # }
    /// ```
    pub fn client_id(&self) -> &str {
        &self.inner.shared.client_id
    }

    /// The request timeout of this handle.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) {
    /// # use std::time::Duration;
    /// assert_eq!(client.with_timeout(Duration::from_secs(1)).timeout(), Duration::from_secs(1));
    /// # }
    /// ```
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A handle on the same connection whose requests use `timeout` (sub-second timeouts
    /// work; the MQTT message expiry is the timeout rounded up to whole seconds). A zero
    /// timeout is replaced by the connection's default.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// use std::time::Duration;
    /// let fast = client.with_timeout(Duration::from_millis(250));
    /// let value = fast.get("sensor/temperature").await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        Client {
            inner: self.inner.clone(),
            timeout: if timeout.is_zero() {
                self.inner.request_timeout
            } else {
                timeout
            },
        }
    }

    /// The connection's state now.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) {
    /// assert_eq!(client.state(), mqstate::ConnectionState::Connected);
    /// # }
    /// ```
    pub fn state(&self) -> ConnectionState {
        *self.inner.shared.state.borrow()
    }

    /// A watch of the connection's state (connected / reconnecting / closed). The receiver
    /// works from any runtime or thread.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) {
    /// let mut states = client.state_changes();
    /// while states.changed().await.is_ok() {
    ///     println!("connection is {}", *states.borrow());
    /// }
    /// # }
    /// ```
    pub fn state_changes(&self) -> watch::Receiver<ConnectionState> {
        self.inner.shared.state.subscribe()
    }

    /// `GET key`: the value and its version, or `None` if there is no such key.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// match client.get(b"\x00binary key").await? {
    ///     Some(v) => println!("{:?} (version {})", v.value, v.version),
    ///     None => println!("not set"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Versioned<Bytes>>, Error> {
        self.inner.shared.get(key.as_ref(), self.timeout).await
    }

    /// `SET key value [NX|NEX] [PX ms]`, with `__ft` when a fencing token is given.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// use mqstate::SetOptions;
    /// let first = client.set("config", b"v1\r\n", SetOptions::default().nx()).await?;
    /// println!("applied: {}, version {}", first.applied, first.version);
    /// # Ok(()) }
    /// ```
    pub async fn set(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        options: SetOptions,
    ) -> Result<SetOutcome, Error> {
        self.inner
            .shared
            .set(key.as_ref(), value.as_ref(), &options, self.timeout)
            .await
    }

    /// `DEL key`: the number of keys deleted (0 or 1).
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// let deleted = client.del("config", None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn del(
        &self,
        key: impl AsRef<[u8]>,
        fencing_token: Option<&Hlc>,
    ) -> Result<u32, Error> {
        self.inner
            .shared
            .del(key.as_ref(), fencing_token, self.timeout)
            .await
    }

    /// `VDEL key value`: delete only if the key holds `value`.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// use mqstate::VdelOutcome;
    /// if client.vdel("lock", "holder-1", None).await? == VdelOutcome::ValueMismatch {
    ///     println!("someone else holds the lock");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn vdel(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        fencing_token: Option<&Hlc>,
    ) -> Result<VdelOutcome, Error> {
        self.inner
            .shared
            .vdel(key.as_ref(), value.as_ref(), fencing_token, self.timeout)
            .await
    }

    /// Lists the keys that match a glob pattern (`SCAN`): a [`Scan`] that asks for one page
    /// per request ([`Scan::next_page`]), or a stream of keys ([`Scan::into_keys`]). Nothing
    /// is sent until the first page is asked for; each page uses this handle's timeout.
    ///
    /// The pattern is a glob over bytes: `*` any run of bytes, `?` one byte, `[a-z]` /
    /// `[^a-z]` classes, `\` to make the next byte literal (docs/protocol.md, "Listing keys:
    /// SCAN"). An empty pattern is an [`Error::InvalidArgument`], before anything is sent;
    /// the server answers a malformed one with a service error.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// let mut scan = client.scan("line3/*")?;
    /// while let Some(keys) = scan.next_page().await? {
    ///     println!("{} keys", keys.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn scan(&self, pattern: impl AsRef<[u8]>) -> Result<Scan, Error> {
        Scan::new(self.clone(), pattern.as_ref())
    }

    /// Observes a key: a stream of its changes from now on (see [`KeyObservation`]). Any
    /// number of streams may observe the same key; the server is asked once.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// let mut changes = client.observe("door").await?;
    /// while let Some(change) = changes.recv().await {
    ///     let change = change?;
    ///     println!("{:?} -> {:?}", change.key, change.operation);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn observe(&self, key: impl AsRef<[u8]>) -> Result<KeyObservation, Error> {
        observe::observe(self, Bytes::copy_from_slice(key.as_ref())).await
    }

    /// Stops observing a key: every stream of it ends, and the server is told (`KEYNOTIFY
    /// key STOP`). Not an error if the key was not observed.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// client.unobserve("door").await?;
    /// # Ok(()) }
    /// ```
    pub async fn unobserve(&self, key: impl AsRef<[u8]>) -> Result<(), Error> {
        observe::unobserve(self, key.as_ref()).await
    }

    /// Closes the connection gracefully and waits for it: requests still waiting fail with
    /// [`Error::Disconnected`], observation streams end, later calls fail. Idempotent, and
    /// closes it for every clone.
    ///
    /// The client unsubscribes from its topics before the DISCONNECT, so that the session the
    /// broker keeps for it (clean start off, [`crate::ConnectOptions::session_expiry`]) collects
    /// nothing and costs the broker nothing until it expires.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) {
    /// client.close().await;
    /// assert_eq!(client.state(), mqstate::ConnectionState::Closed);
    /// # }
    /// ```
    pub async fn close(&self) {
        self.inner.shutdown.send_replace(true);
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match task {
            Some(mut task) => {
                if tokio::time::timeout(Duration::from_secs(5), &mut task)
                    .await
                    .is_err()
                {
                    task.abort();
                    self.inner
                        .shared
                        .state
                        .send_replace(ConnectionState::Closed);
                }
            }
            None => {
                let mut states = self.state_changes();
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    states.wait_for(|s| *s == ConnectionState::Closed),
                )
                .await;
            }
        }
    }

    /// How many requests are waiting for a response (diagnostics).
    #[doc(hidden)]
    pub fn requests_in_flight(&self) -> usize {
        self.inner.shared.in_flight()
    }

    /// How many requests were published again after reconnections, since the client
    /// connected (diagnostics; see docs/protocol.md, "Requests re-sent after a reconnection").
    #[doc(hidden)]
    pub fn requests_resent(&self) -> u64 {
        self.inner.shared.resent()
    }

    /// How many keys are registered for notifications (diagnostics).
    #[doc(hidden)]
    pub fn observed_keys(&self) -> usize {
        self.inner.shared.registry.observed_keys()
    }
}

/// A client id for a client that was given none: `mqstate-` and 16 hex digits from the
/// operating system's random generator.
///
/// The broker drops the older of two connections with the same id (MQTT5 session takeover), so
/// ids of clients started at the same moment, by processes on one machine or by many devices,
/// must not repeat. `fastrand` (still used for jitter) seeds itself from the clock and the
/// thread id, not from the OS: two `mqstate` commands started side by side once drew the same
/// id from it, and the broker dropped the older connection while that command was connecting.
fn generated_client_id() -> Result<String, Error> {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 8];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| {
            Error::connection(
                "cannot make a client id: the operating system's random generator failed \
             (give one with ConnectOptions::with_client_id)",
            )
        })?;
    Ok(format!("mqstate-{:016x}", u64::from_be_bytes(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused first connection reports rumqttc's error as its source (the words stay what
    /// every binding shows).
    #[tokio::test]
    async fn a_refused_connection_keeps_the_transport_error_as_its_source() {
        use std::error::Error as _;
        // A port nothing listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(1);
        let options =
            ConnectOptions::new("127.0.0.1", port).with_connect_timeout(Duration::from_secs(5));
        let Err(err) = Client::connect(options).await else {
            panic!("connected to a closed port");
        };
        assert_eq!(err.kind(), crate::ErrorKind::Connection, "{err}");
        assert!(
            err.to_string().starts_with(&format!(
                "connection error: cannot connect to 127.0.0.1:{port}: "
            )),
            "{err}"
        );
        let source = err
            .source()
            .and_then(|s| s.downcast_ref::<rumqttc::v5::ConnectionError>());
        assert!(
            matches!(source, Some(rumqttc::v5::ConnectionError::Io(_))),
            "{:?}",
            err.source()
        );
    }

    #[test]
    fn generated_client_ids_are_mqstate_and_16_hex_digits_and_do_not_repeat() {
        let ids: std::collections::HashSet<String> =
            (0..1000).map(|_| generated_client_id().unwrap()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            let hex = id.strip_prefix("mqstate-").unwrap();
            assert!(
                hex.len() == 16 && hex.chars().all(|c| c.is_ascii_hexdigit()),
                "{id}"
            );
        }
    }

    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}

    /// The bindings move these across threads and share them (C: one handle, many threads;
    /// Node / Python: streams pulled from another runtime).
    #[test]
    fn handles_are_thread_safe() {
        send_sync::<Client>();
        send_sync::<crate::blocking::Client>();
        send_sync::<crate::blocking::KeyObservation>();
        send::<KeyObservation>();
        send_sync::<Error>();
        send_sync::<ConnectOptions>();
    }

    #[tokio::test]
    async fn connect_validates_options_before_anything() {
        let err = Client::connect(ConnectOptions::new("", 1883))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
        let err = Client::connect(
            ConnectOptions::new("127.0.0.1", 1883).with_keep_alive(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
    }

    #[test]
    fn connect_outside_a_runtime_is_an_error_not_a_panic() {
        let fut = Client::connect(ConnectOptions::default());
        // Polled by a trivial executor that is not tokio.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut fut = std::pin::pin!(fut);
        match fut.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Err(e)) => {
                assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument)
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }
}
