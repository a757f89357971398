//! Test support: a [`Mosquitto`] broker started from the system's `mosquitto` binary on a free
//! loopback port, [`free_port`], and [`TestStore`], a local state store behind either broker
//! ([`Backend`]) for suites that run each scenario on both.
//!
//! Tests that need Mosquitto call [`mosquitto_or_skip`]: when the binary is missing it prints
//! a line and returns `None` (the test then returns early), unless the environment variable
//! `MQSTATE_REQUIRE_MOSQUITTO=1` is set, in which case a missing Mosquitto fails the test
//! (the full test command sets it).
//!
//! ```no_run
//! # async fn demo() {
//! use mqstate_testing as testing;
//! use mqstate_server::{LocalServer, ServerConfig};
//!
//! let Some(mosquitto) = testing::mosquitto_or_skip("my_test") else { return };
//! let server = LocalServer::start_with(ServerConfig::external(&mosquitto.url()).unwrap())
//!     .await
//!     .unwrap();
//! // ... clients connect to mosquitto.port() ...
//! server.shutdown().await;
//! drop(mosquitto); // kills the process
//! # }
//! ```

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mqstate_server::{LocalServer, ServerConfig};

/// The variable that turns a missing Mosquitto from a skip into a failure.
pub const REQUIRE_MOSQUITTO_ENV: &str = "MQSTATE_REQUIRE_MOSQUITTO";

/// The maximum packet size of the test Mosquitto: 64 MiB (values of 10 MiB and more).
pub const MOSQUITTO_MAX_PACKET_SIZE: u32 = 64 * 1024 * 1024;

/// Why a test Mosquitto could not be used: not installed, did not start, or its setup failed
/// (a port, a file). The test support owns these errors; the server's errors have none of
/// Mosquitto's.
#[derive(Debug)]
#[non_exhaustive]
pub enum MosquittoError {
    /// The `mosquitto` binary is not installed.
    NotInstalled {
        /// Where it was looked for.
        looked_for: String,
    },
    /// Mosquitto started but did not accept connections.
    Failed(String),
    /// Preparing it failed (a directory, a file, a port, a certificate).
    Setup {
        /// What was being done.
        context: String,
        /// The error that stopped it.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl std::fmt::Display for MosquittoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MosquittoError::NotInstalled { looked_for } => write!(
                f,
                "the mosquitto binary was not found (looked for {looked_for}); install it with `apt-get install mosquitto`"
            ),
            MosquittoError::Failed(why) => write!(f, "mosquitto did not start: {why}"),
            MosquittoError::Setup { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for MosquittoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MosquittoError::Setup { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl MosquittoError {
    fn setup(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        MosquittoError::Setup {
            context: context.into(),
            source: source.into(),
        }
    }
}

/// A free TCP port on 127.0.0.1 (free when this returns; another process could take it
/// before it is used, so callers that bind it should retry on failure).
pub fn free_port() -> std::io::Result<u16> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()
        .map(|a| a.port())
}

/// Where the `mosquitto` binary is: `$MOSQUITTO` if set, else the first of `$PATH`,
/// `/usr/sbin`, `/usr/local/sbin` that has it.
pub fn find_mosquitto() -> Result<PathBuf, MosquittoError> {
    if let Some(path) = std::env::var_os("MOSQUITTO") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(MosquittoError::NotInstalled {
                looked_for: format!("$MOSQUITTO = {}", path.display()),
            })
        };
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push("/usr/sbin".into());
    dirs.push("/usr/local/sbin".into());
    dirs.iter()
        .map(|d| d.join("mosquitto"))
        .find(|p| p.is_file())
        .ok_or_else(|| MosquittoError::NotInstalled {
            looked_for: "$PATH, /usr/sbin, /usr/local/sbin".into(),
        })
}

/// A Mosquitto process on a free loopback port with a generated configuration; killed (and
/// its temporary directory removed) on drop.
///
/// The configuration: `listener PORT 127.0.0.1`, `allow_anonymous true`,
/// `set_tcp_nodelay true`, `max_packet_size` [`MOSQUITTO_MAX_PACKET_SIZE`], `persistence false`
/// (sessions still live in memory for as long as the process runs, so clean start off gets
/// "session present"), `max_queued_messages 10000`, the default receive maximum (20 in-flight
/// QoS 1 messages per client), and `log_dest topic` (its log on `$SYS/broker/log/#`, from which
/// the state store learns of disconnects) besides the log kept for [`Mosquitto::log`].
#[derive(Debug)]
pub struct Mosquitto {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    binary: PathBuf,
}

impl Mosquitto {
    /// Starts Mosquitto and waits (up to 10 s) until it accepts connections. Retries with
    /// another port if the chosen one was taken in the meantime.
    pub fn start() -> Result<Mosquitto, MosquittoError> {
        Mosquitto::start_with_extra_config(|_| String::new())
    }

    /// Like [`Mosquitto::start`], with configuration lines appended (a second listener with
    /// TLS, a password file...). `extra` gets the directory the configuration lives in (a
    /// temporary directory that lasts as long as the process; it is made readable by the
    /// `mosquitto` user, to whom Mosquitto drops when started as root). Settings in `extra`
    /// override the defaults above them (`allow_anonymous false`...).
    pub fn start_with_extra_config(
        extra: impl Fn(&Path) -> String,
    ) -> Result<Mosquitto, MosquittoError> {
        let binary = find_mosquitto()?;
        let mut last_error = None;
        for _ in 0..3 {
            match Mosquitto::start_once(&binary, false, &extra) {
                Ok(m) => return Ok(m),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| MosquittoError::Failed("no attempt was made".into())))
    }

    /// Like [`Mosquitto::start`], with `persistence true` (in its temporary directory): a
    /// [`Mosquitto::restart`] keeps the clients' sessions, subscriptions and queued messages,
    /// as a production broker stopped with SIGTERM does.
    pub fn start_persistent() -> Result<Mosquitto, MosquittoError> {
        let binary = find_mosquitto()?;
        let mut last_error = None;
        for _ in 0..3 {
            match Mosquitto::start_once(&binary, true, &|_| String::new()) {
                Ok(m) => return Ok(m),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| MosquittoError::Failed("no attempt was made".into())))
    }

    /// Stops Mosquitto with SIGTERM (it saves its sessions when persistent), waits for it to
    /// exit, and starts it again on the same port with the same configuration.
    pub fn restart(&mut self) -> Result<(), MosquittoError> {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.child.id().to_string())
                .status();
        }
        let _ = self.child.wait();
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("mosquitto.log"))
            .map_err(|e| MosquittoError::setup("opening mosquitto.log", e))?;
        let start = Instant::now();
        // The port may take a moment to be released.
        loop {
            self.child = Command::new(&self.binary)
                .arg("-c")
                .arg(self.dir.path().join("mosquitto.conf"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(
                    log.try_clone()
                        .map_err(|e| MosquittoError::setup("opening mosquitto.log", e))?,
                )
                .spawn()
                .map_err(|e| {
                    MosquittoError::setup(format!("starting {}", self.binary.display()), e)
                })?;
            match self.wait_ready(Duration::from_secs(10)) {
                Ok(()) => return Ok(()),
                Err(e) if start.elapsed() > Duration::from_secs(20) => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn start_once(
        binary: &Path,
        persistent: bool,
        extra: &dyn Fn(&Path) -> String,
    ) -> Result<Mosquitto, MosquittoError> {
        let port = free_port().map_err(|e| MosquittoError::setup("finding a free port", e))?;
        let dir = tempfile::Builder::new()
            .prefix("mqstate-mosquitto-")
            .tempdir()
            .map_err(|e| MosquittoError::setup("creating a temporary directory", e))?;
        let config_path = dir.path().join("mosquitto.conf");
        let log_path = dir.path().join("mosquitto.log");
        let persistence = if persistent {
            format!(
                "persistence true\npersistence_location {}/\n",
                dir.path().display()
            )
        } else {
            "persistence false\n".to_owned()
        };
        let config = format!(
            "# Generated by mqstate_testing::Mosquitto\n\
             listener {port} 127.0.0.1\n\
             allow_anonymous true\n\
             set_tcp_nodelay true\n\
             max_packet_size {MOSQUITTO_MAX_PACKET_SIZE}\n\
             {persistence}\
             max_queued_messages 10000\n\
             log_dest stderr\n\
             log_dest topic\n\
             log_type error\n\
             log_type warning\n\
             log_type notice\n{}",
            extra(dir.path())
        );
        {
            use std::os::unix::fs::PermissionsExt as _;
            // Readable by the user Mosquitto drops to (files that `extra` put there too);
            // with persistence, its database there must be writable by that user too.
            let mode = if persistent { 0o777 } else { 0o755 };
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode))
                .map_err(|e| MosquittoError::setup("making the Mosquitto directory readable", e))?;
        }
        std::fs::write(&config_path, config)
            .map_err(|e| MosquittoError::setup("writing mosquitto.conf", e))?;
        let log = std::fs::File::create(&log_path)
            .map_err(|e| MosquittoError::setup("creating mosquitto.log", e))?;
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| MosquittoError::setup(format!("starting {}", binary.display()), e))?;
        let mut mosquitto = Mosquitto {
            child,
            port,
            dir,
            binary: binary.to_owned(),
        };
        mosquitto.wait_ready(Duration::from_secs(10))?;
        Ok(mosquitto)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), MosquittoError> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(MosquittoError::Failed(format!(
                    "exited with {status} on port {}; log: {}",
                    self.port,
                    self.log()
                )));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(MosquittoError::Failed(format!(
            "not accepting connections on port {} after {timeout:?}; log: {}",
            self.port,
            self.log()
        )))
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1`.
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// `mqtt://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// What Mosquitto logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
    }

    /// Stops the process now (also done on drop).
    pub fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether `MQSTATE_REQUIRE_MOSQUITTO=1` is set.
pub fn mosquitto_required() -> bool {
    std::env::var(REQUIRE_MOSQUITTO_ENV).is_ok_and(|v| v == "1")
}

/// Starts Mosquitto for the test `test_name`. If it is not installed, prints a skip line and
/// returns `None`, or panics when `MQSTATE_REQUIRE_MOSQUITTO=1`. Panics if it is installed
/// but does not start (a test failure with the reason).
#[allow(clippy::panic)] // a test helper: a panic is the test failure it reports
pub fn mosquitto_or_skip(test_name: &str) -> Option<Mosquitto> {
    match Mosquitto::start() {
        Ok(m) => Some(m),
        Err(e @ MosquittoError::NotInstalled { .. }) if !mosquitto_required() => {
            println!(
                "SKIPPED {test_name}: {e} (set {REQUIRE_MOSQUITTO_ENV}=1 to make this a failure)"
            );
            None
        }
        Err(e) => panic!("{test_name}: cannot start Mosquitto: {e}"),
    }
}

/// Which broker a test's state store runs behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded broker ([`LocalServer`]'s default).
    Embedded,
    /// A [`Mosquitto`] started for the test, with the store attached as an external client.
    Mosquitto,
}

/// A local state store behind a [`Backend`], for suites that run every scenario on both
/// brokers. Clients connect to [`host`](TestStore::host) and [`port`](TestStore::port) (the
/// broker's).
///
/// ```no_run
/// # async fn demo() {
/// use mqstate_testing::{Backend, TestStore};
///
/// let Some(store) = TestStore::start(Backend::Mosquitto, "my_test").await else { return };
/// // ... clients connect to store.host(), store.port() ...
/// store.shutdown().await;
/// # }
/// ```
#[derive(Debug)]
pub struct TestStore {
    backend: Backend,
    server: Option<LocalServer>,
    mosquitto: Option<Mosquitto>,
    host: String,
    port: u16,
}

impl TestStore {
    /// Starts a store with the default configuration; see [`TestStore::start_with`].
    pub async fn start(backend: Backend, test_name: &str) -> Option<TestStore> {
        TestStore::start_with(backend, test_name, ServerConfig::default()).await
    }

    /// Starts a store with `config` (its broker choice is replaced by `backend`'s). `None`
    /// when the test must be skipped, as [`mosquitto_or_skip`] decides. Panics if the store
    /// does not start (a test failure with the reason).
    #[allow(clippy::panic)] // a test helper: a panic is the test failure it reports
    pub async fn start_with(
        backend: Backend,
        test_name: &str,
        config: ServerConfig,
    ) -> Option<TestStore> {
        match backend {
            Backend::Embedded => {
                let server = LocalServer::start_with(config)
                    .await
                    .unwrap_or_else(|e| panic!("{test_name}: start the embedded server: {e}"));
                Some(TestStore {
                    backend,
                    host: server.host().to_owned(),
                    port: server.port(),
                    server: Some(server),
                    mosquitto: None,
                })
            }
            Backend::Mosquitto => {
                let mosquitto = mosquitto_or_skip(test_name)?;
                let external = ServerConfig::external(&mosquitto.url())
                    .unwrap_or_else(|e| panic!("{test_name}: {e}"));
                let config = ServerConfig {
                    broker: external.broker,
                    ..config
                };
                let server = LocalServer::start_with(config).await.unwrap_or_else(|e| {
                    panic!(
                        "{test_name}: attach to Mosquitto: {e}; log: {}",
                        mosquitto.log()
                    )
                });
                Some(TestStore {
                    backend,
                    host: mosquitto.host().to_owned(),
                    port: mosquitto.port(),
                    server: Some(server),
                    mosquitto: Some(mosquitto),
                })
            }
        }
    }

    /// The broker it runs behind.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The broker's host.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The broker's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the state store (and the embedded broker with it); Mosquitto stays up.
    pub async fn stop_store(&mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await;
        }
    }

    /// Stops the store and the broker (Mosquitto is killed).
    pub async fn shutdown(mut self) {
        self.stop_store().await;
        drop(self.mosquitto.take());
    }
}

/// Files for a secured local server in tests: a CA, a server certificate for `localhost`
/// and `127.0.0.1` signed by it (rcgen), and a password file with one user. The bindings'
/// test helpers use it to start a server with TLS and a user name and password.
///
/// ```
/// use mqstate_testing::SecuredFiles;
///
/// let files = SecuredFiles::generate("alice", "s3cret").unwrap();
/// let security = files.security_config();
/// assert!(security.tls.is_some() && security.authenticates());
/// assert!(files.ca_file().exists());
/// ```
#[derive(Debug)]
pub struct SecuredFiles {
    dir: tempfile::TempDir,
}

impl SecuredFiles {
    /// Generates the CA, the server certificate and the password file in a temporary
    /// directory (removed on drop).
    pub fn generate(user: &str, password: &str) -> Result<SecuredFiles, MosquittoError> {
        let dir = tempfile::Builder::new()
            .prefix("mqstate-secured-")
            .tempdir()
            .map_err(|e| MosquittoError::setup("creating a temporary directory", e))?;
        let gen_err = |e: rcgen::Error| MosquittoError::setup("generating certificates", e);
        let ca_key = rcgen::KeyPair::generate().map_err(gen_err)?;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "mqstate test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(gen_err)?;
        let key = rcgen::KeyPair::generate().map_err(gen_err)?;
        let cert =
            rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .and_then(|p| p.signed_by(&key, &*ca))
                .map_err(gen_err)?;
        let write = |name: &str, text: String| {
            std::fs::write(dir.path().join(name), text)
                .map_err(|e| MosquittoError::setup(format!("writing {name}"), e))
        };
        write("ca.pem", ca.pem())?;
        write("server.pem", cert.pem())?;
        write("server.key", key.serialize_pem())?;
        mqstate_server::security::set_password(&dir.path().join("passwd"), user, password)
            .map_err(|e| MosquittoError::setup("writing the password file", e))?;
        Ok(SecuredFiles { dir })
    }

    /// The CA certificate (PEM) clients must trust.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// TLS on a free port with the generated certificate, and the password file.
    pub fn security_config(&self) -> mqstate_server::security::SecurityConfig {
        mqstate_server::security::SecurityConfig {
            tls: Some(mqstate_server::security::TlsSettings {
                cert: self.dir.path().join("server.pem"),
                key: self.dir.path().join("server.key"),
                client_ca: None,
                port: 0,
            }),
            password_file: Some(self.dir.path().join("passwd")),
            ..mqstate_server::security::SecurityConfig::default()
        }
    }
}
