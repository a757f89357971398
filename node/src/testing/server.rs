//! `LocalServer`: the embedded broker and state store, for users' own tests.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use mqstate::Error;
use mqstate_server::ServerConfig;
use mqstate_server::persist::PersistMode;
use mqstate_testing::SecuredFiles;
use napi::Env;
use napi::bindgen_prelude::PromiseRaw;
use napi_derive::napi;

use crate::util::{rejected, spawn, whole};

/// Settings of a local server.
#[napi(object)]
#[derive(Debug, Default)]
pub struct LocalServerOptions {
    /// Port to listen on (default: a free port chosen by the OS).
    pub port: Option<f64>,
    /// Address to listen on (default 127.0.0.1).
    pub host: Option<String>,
    /// Key quota: SETs of new keys beyond it fail with `quota_exceeded` (default: none).
    pub max_keys: Option<f64>,
    /// Keep keys in this directory so that a server started again on it finds them
    /// (default: in memory only).
    pub data_dir: Option<String>,
    /// With `dataDir`: `"all"` (every key, the default) or `"requested"` (only keys SET with
    /// `persist: true`).
    pub persist: Option<String>,
    /// With `password`: start secured, with a TLS listener (a CA and certificate generated
    /// for the server; see `caFile`, `tlsUrl`) and this one user.
    pub username: Option<String>,
    /// The password of `username`.
    pub password: Option<String>,
}

/// A running local state store: an embedded MQTT5 broker and the store, in this process.
/// Stop it with `shutdown()`; it also stops when garbage collected or when Node exits, and
/// it does not keep Node alive.
#[napi]
#[derive(Debug)]
pub struct LocalServer {
    server: Arc<Mutex<Option<mqstate_server::LocalServer>>>,
    host: String,
    port: u16,
    url: String,
    /// A secured server's TLS port and generated files (the CA must outlive the server).
    secured: Option<(u16, Arc<SecuredFiles>)>,
}

fn config(o: LocalServerOptions) -> Result<(ServerConfig, Option<Arc<SecuredFiles>>), Error> {
    let mut config = ServerConfig::default();
    let files = match (&o.username, &o.password) {
        (Some(user), Some(password)) => Some(Arc::new(
            SecuredFiles::generate(user, password)
                .map_err(|e| Error::InvalidArgument(e.to_string()))?,
        )),
        (None, None) => None,
        _ => {
            return Err(Error::InvalidArgument(
                "username and password go together".into(),
            ));
        }
    };
    if let Some(files) = &files {
        config.security = files.security_config();
    }
    if let Some(port) = o.port {
        config = config.with_port(whole("port", port)?);
    }
    if let Some(host) = o.host {
        config.bind = host.parse::<IpAddr>().map_err(|_| {
            Error::InvalidArgument(format!("host must be an IP address, got {host:?}"))
        })?;
    }
    if let Some(n) = o.max_keys {
        config = config.with_max_keys(Some(whole("maxKeys", n)?));
    }
    let mode = match o.persist.as_deref() {
        None => PersistMode::All,
        Some(text) => text
            .parse::<PersistMode>()
            .map_err(|e| Error::InvalidArgument(format!("persist: {e}")))?,
    };
    match o.data_dir {
        Some(dir) => config = config.with_data_dir(dir, mode),
        None if o.persist.is_some() => {
            return Err(Error::InvalidArgument(
                "persist needs dataDir (keys are in memory without it)".into(),
            ));
        }
        None => {}
    }
    Ok((config, files))
}

#[napi]
impl LocalServer {
    /// Starts a server; resolves once it answers requests.
    #[napi]
    pub fn start(
        env: &Env,
        options: Option<LocalServerOptions>,
    ) -> napi::Result<PromiseRaw<'_, LocalServer>> {
        let (config, files) = match config(options.unwrap_or_default()) {
            Ok(c) => c,
            Err(e) => return rejected(env, e),
        };
        spawn(
            env,
            None,
            async move {
                mqstate_server::LocalServer::start_with(config)
                    .await
                    .map_err(|e| Error::connection(format!("the local server did not start: {e}")))
            },
            |_, server| {
                Ok(LocalServer {
                    host: server.host().to_owned(),
                    port: server.port(),
                    url: server.url(),
                    secured: server.tls_port().zip(files),
                    server: Arc::new(Mutex::new(Some(server))),
                })
            },
        )
    }

    /// The host clients connect to.
    #[napi(getter)]
    pub fn host(&self) -> String {
        self.host.clone()
    }

    /// The port it listens on.
    #[napi(getter)]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mqtt://host:port`, for `Client.connect`.
    #[napi(getter)]
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The TLS listener's port (a secured server; else null).
    #[napi(getter)]
    pub fn tls_port(&self) -> Option<u16> {
        self.secured.as_ref().map(|(port, _)| *port)
    }

    /// `mqtts://localhost:TLS_PORT` (a secured server; else null).
    #[napi(getter)]
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port().map(|p| format!("mqtts://localhost:{p}"))
    }

    /// The generated CA certificate (PEM file) clients must trust (a secured server).
    #[napi(getter)]
    pub fn ca_file(&self) -> Option<String> {
        self.secured
            .as_ref()
            .map(|(_, f)| f.ca_file().display().to_string())
    }

    /// Stops the store and the broker and waits for both (a few seconds at most).
    /// Idempotent.
    #[napi]
    pub fn shutdown<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let server = self
            .server
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        spawn(
            env,
            None,
            async move {
                if let Some(server) = server {
                    server.shutdown().await;
                }
                Ok(())
            },
            |_, ()| Ok(()),
        )
    }
}
