//! A blocking facade over the async [`crate::Client`], for non-async Rust and for the C
//! binding.
//!
//! [`Client`] owns a small multi-thread tokio runtime that runs the connection; every method
//! hands its work to that runtime and waits on a plain channel, so it may be called from any
//! number of threads at once, and even from inside another async runtime's thread (where it
//! blocks that thread, as any blocking call does, but never panics).
//!
//! ```no_run
//! use std::time::Duration;
//! use mqstate::blocking::Client;
//! use mqstate::{ConnectOptions, SetOptions};
//!
//! let client = Client::connect(ConnectOptions::from_url("mqtt://127.0.0.1:1883")?)?;
//! client.set("greeting", "hello", SetOptions::default())?;
//! let changes = client.observe("greeting")?;
//! client.set("greeting", "bonjour", SetOptions::default())?;
//! let change = changes.recv_timeout(Duration::from_secs(5)).expect("stream ended")?;
//! assert_eq!(change.value().unwrap(), "bonjour");
//! client.close();
//! # Ok::<(), mqstate::Error>(())
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::runtime::{Handle, Runtime};

use crate::client::observe::KeyObservation as AsyncObservation;
use crate::client::options::ConnectOptions;
use crate::client::registry::KeyNotification;
use crate::client::values::{ConnectionState, SetOptions, SetOutcome, VdelOutcome, Versioned};
use crate::protocol::errors::Error;
use crate::protocol::hlc::Hlc;

/// Worker threads of the owned runtime: the connection task and the callers' requests are
/// light; two workers keep one free while the other decodes.
const WORKER_THREADS: usize = 2;

/// How long dropping the last handle waits for a graceful DISCONNECT.
const DROP_CLOSE_WAIT: Duration = Duration::from_secs(3);

/// The runtime and the client it runs; shut down when the last handle and observation drop.
struct Owner {
    runtime: Option<Runtime>,
    client: crate::Client,
}

impl Owner {
    fn handle(&self) -> Option<&Handle> {
        self.runtime.as_ref().map(Runtime::handle)
    }

    /// Runs `future` on the owned runtime and waits for it on a std channel (no `block_on`,
    /// so no panic when the caller is itself inside a runtime).
    fn run<T, F>(&self, future: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let handle = self
            .handle()
            .ok_or_else(|| Error::Disconnected("the client's runtime is shut down".into()))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        handle.spawn(async move {
            let _ = tx.send(future.await);
        });
        rx.recv()
            .map_err(|_| Error::Disconnected("the client's runtime is shut down".into()))?
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        if self.client.state() != ConnectionState::Closed {
            let client = self.client.clone();
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            runtime.spawn(async move {
                client.close().await;
                let _ = tx.send(());
            });
            let _ = rx.recv_timeout(DROP_CLOSE_WAIT);
        }
        // Never blocks, so it is also safe when the last handle drops inside an async context.
        runtime.shutdown_background();
    }
}

/// A blocking state store client. Cheap to clone; safe to use from many threads at once.
///
/// ```no_run
/// let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
/// std::thread::scope(|s| {
///     for i in 0..8 {
///         let client = client.clone();
///         s.spawn(move || client.set(format!("k{i}"), "v", Default::default()));
///     }
/// });
/// # Ok::<(), mqstate::Error>(())
/// ```
#[derive(Clone)]
pub struct Client {
    owner: Arc<Owner>,
    client: crate::Client,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Client")
            .field("client", &self.client)
            .finish()
    }
}

impl Client {
    /// Starts the client's runtime and connects (see [`crate::Client::connect`]).
    ///
    /// ```no_run
    /// let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::new("127.0.0.1", 1883))?;
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn connect(options: ConnectOptions) -> Result<Client, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("mqstate")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::connection_caused_by(format!("could not start the client runtime: {e}"), e)
            })?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(crate::Client::connect(options).await);
        });
        let connected = rx
            .recv()
            .map_err(|_| Error::connection("the client runtime stopped while connecting"));
        match connected {
            Ok(Ok(client)) => Ok(Client {
                owner: Arc::new(Owner {
                    runtime: Some(runtime),
                    client: client.clone(),
                }),
                client,
            }),
            Ok(Err(e)) | Err(e) => {
                runtime.shutdown_background();
                Err(e)
            }
        }
    }

    /// Connects with [`ConnectOptions::from_env`].
    ///
    /// ```no_run
    /// let client = mqstate::blocking::Client::from_env()?;
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn from_env() -> Result<Client, Error> {
        Self::connect(ConnectOptions::from_env()?)
    }

    /// The async client this one drives, to mix blocking and async calls on one connection
    /// (its futures must run on [`runtime_handle`](Client::runtime_handle)'s runtime or
    /// another tokio runtime).
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// let async_client = client.as_async().clone();
    /// let handle = client.runtime_handle().unwrap();
    /// let value = handle.spawn(async move { async_client.get("k").await });
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn as_async(&self) -> &crate::Client {
        &self.client
    }

    /// The owned runtime's handle (for bindings that run async calls on it); `None` only
    /// while the client is being dropped.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// assert!(client.runtime_handle().is_some());
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn runtime_handle(&self) -> Option<Handle> {
        self.owner.handle().cloned()
    }

    /// The MQTT client id.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// println!("{}", client.client_id());
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn client_id(&self) -> &str {
        self.client.client_id()
    }

    /// A handle whose requests use `timeout` (see [`crate::Client::with_timeout`]).
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// let v = client.with_timeout(std::time::Duration::from_millis(200)).get("k")?;
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    #[must_use]
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        Client {
            owner: self.owner.clone(),
            client: self.client.with_timeout(timeout),
        }
    }

    /// The connection's state now.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// assert_eq!(client.state(), mqstate::ConnectionState::Connected);
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn state(&self) -> ConnectionState {
        self.client.state()
    }

    /// A watch of the connection's state (see [`crate::Client::state_changes`]).
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// let states = client.state_changes();
    /// println!("{}", *states.borrow());
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn state_changes(&self) -> tokio::sync::watch::Receiver<ConnectionState> {
        self.client.state_changes()
    }

    /// `GET key` (see [`crate::Client::get`]).
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// if let Some(v) = client.get("k")? {
    ///     println!("{:?} @ {}", v.value, v.version);
    /// }
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Versioned<Bytes>>, Error> {
        let client = self.client.clone();
        let key = Bytes::copy_from_slice(key.as_ref());
        self.owner.run(async move { client.get(key).await })
    }

    /// `SET` (see [`crate::Client::set`]).
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// let outcome = client.set("k", b"\x00\r\n", mqstate::SetOptions::default().nx())?;
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn set(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        options: SetOptions,
    ) -> Result<SetOutcome, Error> {
        let client = self.client.clone();
        let key = Bytes::copy_from_slice(key.as_ref());
        let value = Bytes::copy_from_slice(value.as_ref());
        self.owner
            .run(async move { client.set(key, value, options).await })
    }

    /// `DEL` (see [`crate::Client::del`]).
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// let n = client.del("k", None)?;
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn del(&self, key: impl AsRef<[u8]>, fencing_token: Option<&Hlc>) -> Result<u32, Error> {
        let client = self.client.clone();
        let key = Bytes::copy_from_slice(key.as_ref());
        let token = fencing_token.cloned();
        self.owner
            .run(async move { client.del(key, token.as_ref()).await })
    }

    /// `VDEL` (see [`crate::Client::vdel`]).
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// let outcome = client.vdel("lock", "me", None)?;
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn vdel(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        fencing_token: Option<&Hlc>,
    ) -> Result<VdelOutcome, Error> {
        let client = self.client.clone();
        let key = Bytes::copy_from_slice(key.as_ref());
        let value = Bytes::copy_from_slice(value.as_ref());
        let token = fencing_token.cloned();
        self.owner
            .run(async move { client.vdel(key, value, token.as_ref()).await })
    }

    /// Lists the keys that match a glob pattern (see [`crate::Client::scan`]): a [`Scan`],
    /// read a page at a time or as an iterator of keys.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// for key in client.scan("line3/*")? {
    ///     println!("{:?}", key?);
    /// }
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn scan(&self, pattern: impl AsRef<[u8]>) -> Result<Scan, Error> {
        Ok(Scan {
            inner: self.client.scan(pattern)?,
            owner: self.owner.clone(),
            buffered: VecDeque::new(),
            failed: false,
        })
    }

    /// Observes a key (see [`crate::Client::observe`]); read the changes with
    /// [`KeyObservation::recv_timeout`] or as an iterator.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// for change in client.observe("door")? {
    ///     println!("{:?}", change?);
    /// }
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn observe(&self, key: impl AsRef<[u8]>) -> Result<KeyObservation, Error> {
        let client = self.client.clone();
        let key = Bytes::copy_from_slice(key.as_ref());
        let inner = self.owner.run(async move { client.observe(key).await })?;
        Ok(KeyObservation {
            inner,
            _owner: self.owner.clone(),
        })
    }

    /// Stops observing a key (see [`crate::Client::unobserve`]).
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// client.unobserve("door")?;
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn unobserve(&self, key: impl AsRef<[u8]>) -> Result<(), Error> {
        let client = self.client.clone();
        let key = Bytes::copy_from_slice(key.as_ref());
        self.owner.run(async move { client.unobserve(key).await })
    }

    /// Closes the connection gracefully and waits for it (see [`crate::Client::close`]).
    /// The runtime stops when the last handle and observation are dropped.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// client.close();
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn close(&self) {
        let client = self.client.clone();
        let _ = self.owner.run(async move {
            client.close().await;
            Ok(())
        });
    }
}

/// The blocking form of [`crate::KeyObservation`]: the same stream, read by blocking calls
/// (from any thread; no runtime needed). It is an [`Iterator`] that blocks for each item and
/// ends when the observation ends. Dropping it stops the observation.
///
/// ```no_run
/// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
/// use std::time::Duration;
/// let changes = client.observe("door")?;
/// match changes.recv_timeout(Duration::from_millis(500)) {
///     Some(Ok(change)) => println!("{change:?}"),
///     Some(Err(e)) if e.kind() == mqstate::ErrorKind::Timeout => println!("no change yet"),
///     Some(Err(e)) => println!("error: {e}"),
///     None => println!("observation ended"),
/// }
/// # Ok::<(), mqstate::Error>(())
/// ```
#[derive(Debug)]
pub struct KeyObservation {
    inner: AsyncObservation,
    /// Keeps the runtime (and so the connection) alive while the observation lives.
    _owner: Arc<Owner>,
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner").finish_non_exhaustive()
    }
}

impl KeyObservation {
    /// The observed key.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// assert_eq!(client.observe("door")?.key(), "door");
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn key(&self) -> &Bytes {
        self.inner.key()
    }

    /// Waits for the next change; `None` once the observation has ended.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// let changes = client.observe("door")?;
    /// while let Some(change) = changes.recv() {
    ///     println!("{:?}", change?);
    /// }
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn recv(&self) -> Option<Result<KeyNotification, Error>> {
        self.inner.recv_blocking(None)
    }

    /// Waits at most `timeout` for the next change: `Some(Err(Error::Timeout(_)))` if none
    /// came, `None` once the observation has ended.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// let changes = client.observe("door")?;
    /// let next = changes.recv_timeout(std::time::Duration::from_secs(1));
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Result<KeyNotification, Error>> {
        self.inner.recv_blocking(Some(timeout))
    }

    /// The async stream inside, for code that mixes both styles.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// let mut changes = client.observe("door")?;
    /// let stream: &mut mqstate::KeyObservation = changes.as_async_mut();
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn as_async_mut(&mut self) -> &mut AsyncObservation {
        &mut self.inner
    }
}

impl Iterator for KeyObservation {
    type Item = Result<KeyNotification, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.recv()
    }
}

/// A blocking listing of keys ([`Client::scan`]): [`Scan::next_page`] for pages, or an
/// [`Iterator`] of keys that asks for each page when the keys of the one before have been
/// read, and ends after the last page or after yielding the first error.
///
/// ```no_run
/// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
/// let mut scan = client.scan("*")?;
/// while let Some(keys) = scan.next_page()? {
///     println!("{} keys", keys.len());
/// }
/// # Ok::<(), mqstate::Error>(())
/// ```
#[derive(Debug)]
pub struct Scan {
    inner: crate::Scan,
    /// Keeps the runtime (and so the connection) alive while the scan lives.
    owner: Arc<Owner>,
    /// Keys of the current page not yet returned by the iterator.
    buffered: VecDeque<Bytes>,
    /// The iterator has yielded an error: it has ended.
    failed: bool,
}

impl Scan {
    /// The pattern being listed.
    pub fn pattern(&self) -> &Bytes {
        self.inner.pattern()
    }

    /// Whether the last page has been received.
    pub fn is_done(&self) -> bool {
        self.inner.is_done()
    }

    /// The next page's keys, or `None` after the last page (see
    /// [`crate::Scan::next_page`]). After an error, calling again asks for the same page.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// let first = client.scan("k*")?.next_page()?;
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn next_page(&mut self) -> Result<Option<Vec<Bytes>>, Error> {
        let Some((client, pattern, token)) = self.inner.next_request() else {
            return Ok(None);
        };
        let page = self
            .owner
            .run(crate::client::scan::fetch(client, pattern, token))?;
        Ok(Some(self.inner.advance(page)))
    }

    /// Every key of the listing, reading every page.
    ///
    /// ```no_run
    /// # let client = mqstate::blocking::Client::connect(mqstate::ConnectOptions::default())?;
    /// let keys = client.scan("config/*")?.collect_keys()?;
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn collect_keys(mut self) -> Result<Vec<Bytes>, Error> {
        let mut keys: Vec<Bytes> = self.buffered.drain(..).collect();
        while let Some(page) = self.next_page()? {
            keys.extend(page);
        }
        Ok(keys)
    }
}

impl Iterator for Scan {
    type Item = Result<Bytes, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(key) = self.buffered.pop_front() {
                return Some(Ok(key));
            }
            if self.failed {
                return None;
            }
            match self.next_page() {
                Ok(Some(keys)) => self.buffered.extend(keys),
                Ok(None) => return None,
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}
