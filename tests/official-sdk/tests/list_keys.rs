//! The official Azure IoT Operations Rust SDK (`azure_iot_operations_services` 1.5.0-beta1)
//! against mqstate's local server, used as an application uses it: an MQTT `Session` from
//! `azure_iot_operations_mqtt` over loopback without TLS, an `ApplicationContext`, and the SDK's
//! own `state_store::Client`. Its `list_keys` pager (SCAN, docs/protocol.md section 8) must list
//! what our server holds, across pages, and its errors must be the SDK's own kinds.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Duration;

use azure_iot_operations_mqtt::aio::connection_settings::MqttConnectionSettingsBuilder;
use azure_iot_operations_mqtt::session::{
    Session, SessionError, SessionExitHandle, SessionOptionsBuilder,
};
use azure_iot_operations_protocol::application::ApplicationContextBuilder;
use azure_iot_operations_services::state_store::{
    self, ErrorKind, ListKeysPager, ServiceError, SetOptions,
};
use mqstate_server::LocalServer;
use tokio::task::JoinHandle;

/// Each request's timeout (the SDK rounds it up to whole seconds).
const TIMEOUT: Duration = Duration::from_secs(10);

/// How long the session may take to connect to the local server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many pages for one listing: stops a pager that never ends from hanging a test.
const MAX_PAGES: usize = 1_000;

/// The SDK's `log` records on stderr: warnings and errors, or every record at or above the level
/// in `MQSTATE_SDK_LOG` (`debug`, `trace`...). Shown with a failing test's output.
struct SdkLog;

impl log::Log for SdkLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            eprintln!("[{} {}] {}", record.level(), record.target(), record.args());
        }
    }

    fn flush(&self) {}
}

fn init_sdk_log() {
    static LOGGER: SdkLog = SdkLog;
    // Once per test binary; later calls find the logger set.
    if log::set_logger(&LOGGER).is_ok() {
        let level = std::env::var("MQSTATE_SDK_LOG")
            .ok()
            .and_then(|l| l.parse().ok())
            .unwrap_or(log::LevelFilter::Warn);
        log::set_max_level(level);
    }
}

/// The local server, one official-SDK session connected to it, and the SDK's state store client.
struct Sdk {
    server: LocalServer,
    client: state_store::Client,
    exit: SessionExitHandle,
    session: JoinHandle<Result<(), SessionError>>,
}

impl Sdk {
    /// Starts the local server (embedded broker, 127.0.0.1, a free port) and connects the SDK to
    /// it as its examples do, with the connection settings an application gives outside a
    /// cluster: host, port, client id, no TLS.
    async fn start(client_id: &str) -> Sdk {
        init_sdk_log();
        let server = LocalServer::start().await.unwrap();
        let connection_settings = MqttConnectionSettingsBuilder::default()
            .client_id(client_id)
            .hostname(server.host())
            .tcp_port(server.port())
            .keep_alive(Duration::from_secs(5))
            .use_tls(false)
            .build()
            .unwrap();
        let session_options = SessionOptionsBuilder::default()
            .connection_settings(connection_settings)
            .build()
            .unwrap();
        let session = Session::new(session_options).unwrap();
        let exit = session.create_exit_handle();
        let monitor = session.create_session_monitor();
        let client = state_store::Client::new(
            ApplicationContextBuilder::default().build().unwrap(),
            session.create_managed_client(),
            session.create_session_monitor(),
            state_store::ClientOptionsBuilder::default()
                .build()
                .unwrap(),
        )
        .unwrap();
        let session = tokio::spawn(session.run());
        tokio::time::timeout(CONNECT_TIMEOUT, monitor.connected())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the SDK's session did not connect to {} within {CONNECT_TIMEOUT:?}",
                    server.url()
                )
            });
        Sdk {
            server,
            client,
            exit,
            session,
        }
    }

    /// The SDK's `set` with default options; asserts that the key was set.
    async fn set(&self, key: &[u8], value: &[u8]) {
        let response = self
            .client
            .set(
                key.to_vec(),
                value.to_vec(),
                TIMEOUT,
                None,
                SetOptions::default(),
            )
            .await
            .unwrap();
        assert!(response.response, "set {key:?} was not applied");
    }

    /// Every page of `list_keys(pattern)`, asking with `pager.next()` until it gives `None`.
    async fn pages(&self, pattern: &[u8]) -> Vec<Vec<Vec<u8>>> {
        let mut pager = self.client.list_keys(pattern.to_vec(), TIMEOUT).unwrap();
        let pages = all_pages(&mut pager).await;
        // A finished pager stays finished, without asking the server again.
        assert!(pager.next().await.unwrap().is_none());
        pages
    }

    /// The keys of every page of `list_keys(pattern)`, each asserted to be listed once.
    async fn keys(&self, pattern: &[u8]) -> BTreeSet<Vec<u8>> {
        listed_once(self.pages(pattern).await)
    }

    /// Shuts down the SDK's client, ends the session gracefully, then stops the server.
    async fn stop(self) {
        self.client.shutdown().await.unwrap();
        self.exit.try_exit().unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.session)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        self.server.shutdown().await;
    }
}

async fn all_pages(pager: &mut ListKeysPager<'_>) -> Vec<Vec<Vec<u8>>> {
    let mut pages = Vec::new();
    while let Some(page) = pager.next().await.unwrap() {
        pages.push(page);
        assert!(pages.len() <= MAX_PAGES, "the pager never ended");
    }
    pages
}

/// The keys of `pages`, asserting that none is listed twice.
fn listed_once(pages: Vec<Vec<Vec<u8>>>) -> BTreeSet<Vec<u8>> {
    let mut keys = BTreeSet::new();
    for key in pages.into_iter().flatten() {
        assert!(keys.insert(key.clone()), "{key:?} was listed twice");
    }
    keys
}

fn key_set<'a>(keys: impl IntoIterator<Item = &'a [u8]>) -> BTreeSet<Vec<u8>> {
    keys.into_iter().map(<[u8]>::to_vec).collect()
}

/// 1,200 matching keys (the server's pages hold at most 500) come over several pages, each
/// exactly once; keys outside the pattern are not listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_keys_pages_through_1200_keys_exactly_once() {
    let sdk = Sdk::start("official-sdk-list-keys-pages").await;
    let expected: BTreeSet<Vec<u8>> = (0..1_200)
        .map(|i| format!("prefix/{i:04}").into_bytes())
        .collect();
    for key in &expected {
        sdk.set(key, b"v").await;
    }
    for key in [&b"prefix"[..], b"prefiks/1", b"other/prefix/1", b"Prefix/1"] {
        sdk.set(key, b"not listed").await;
    }

    let pages = sdk.pages(b"prefix/*").await;
    assert!(
        pages.len() >= 3,
        "1,200 keys in pages of at most 500 take 3 pages or more, got {}",
        pages.len()
    );
    assert!(pages.iter().all(|page| page.len() <= 500));
    assert_eq!(pages.iter().map(Vec::len).sum::<usize>(), 1_200);
    assert_eq!(listed_once(pages), expected);

    sdk.stop().await;
}

/// `?` matches exactly one byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_keys_question_mark_matches_one_byte() {
    let sdk = Sdk::start("official-sdk-list-keys-question-mark").await;
    for key in ["q/a1", "q/b1", "q/1", "q/ab1", "q/a2", "r/a1"] {
        sdk.set(key.as_bytes(), b"v").await;
    }

    assert_eq!(sdk.keys(b"q/?1").await, key_set([&b"q/a1"[..], b"q/b1"]));
    assert_eq!(
        sdk.keys(b"?/a?").await,
        key_set([&b"q/a1"[..], b"q/a2", b"r/a1"])
    );

    sdk.stop().await;
}

/// Keys are bytes: a key that is not UTF-8 is listed byte for byte, and a pattern may hold such
/// bytes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_keys_lists_binary_keys_byte_for_byte() {
    let sdk = Sdk::start("official-sdk-list-keys-binary").await;
    // Not UTF-8 (0xff, 0xfe), with a NUL, CR LF (RESP3's separator) and a literal `*`.
    let binary: &[u8] = b"bin/\xff\x00\xfe\r\n*";
    sdk.set(binary, b"\x00\x01").await;
    sdk.set(b"bin/text", b"v").await;

    assert_eq!(sdk.keys(b"bin/*").await, key_set([binary, b"bin/text"]));
    assert_eq!(sdk.keys(b"bin/\xff*").await, key_set([binary]));
    assert_eq!(sdk.keys(b"bin/?\x00?\r\n\\*").await, key_set([binary]));

    sdk.stop().await;
}

/// A pattern that matches nothing lists nothing: the pager ends, with no key on any page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_keys_without_a_match_gives_no_keys() {
    let sdk = Sdk::start("official-sdk-list-keys-no-match").await;
    sdk.set(b"present", b"v").await;

    let pages = sdk.pages(b"absent/*").await;
    assert!(!pages.is_empty(), "the first next() gives a page");
    assert!(pages.iter().all(Vec::is_empty), "{pages:?}");

    sdk.stop().await;
}

/// A malformed glob is refused by the server; the SDK reports the server's text as its
/// `ServiceError`, and the pager stays where it was (asking again gives the same error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_keys_malformed_pattern_is_a_service_error() {
    let sdk = Sdk::start("official-sdk-list-keys-malformed").await;
    sdk.set(b"k", b"v").await;

    let mut pager = sdk.client.list_keys(b"k[".to_vec(), TIMEOUT).unwrap();
    for _ in 0..2 {
        let Err(error) = pager.next().await else {
            panic!("a malformed pattern must fail");
        };
        match error.kind() {
            ErrorKind::ServiceError(ServiceError::Unknown(text)) => {
                assert!(text.contains("no closing ']'"), "{text}");
            }
            other => panic!("expected the SDK's ServiceError, got {other:?}"),
        }
    }

    sdk.stop().await;
}

/// The SDK refuses an empty pattern itself, before any request (`list_keys` sends nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_keys_empty_pattern_is_refused_by_the_sdk() {
    let sdk = Sdk::start("official-sdk-list-keys-empty").await;

    let Err(error) = sdk.client.list_keys(Vec::new(), TIMEOUT) else {
        panic!("an empty pattern must be refused");
    };
    assert!(
        matches!(error.kind(), ErrorKind::InvalidArgument(_)),
        "{error:?}"
    );

    sdk.stop().await;
}

/// The SDK's `set`, `get` and `del` against the local server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_get_del_round_trip() {
    let sdk = Sdk::start("official-sdk-set-get-del").await;
    let key = b"round/trip".to_vec();

    assert_eq!(
        sdk.client.get(key.clone(), TIMEOUT).await.unwrap().response,
        None
    );
    let set = sdk
        .client
        .set(
            key.clone(),
            b"value\x00\xff".to_vec(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .unwrap();
    assert!(set.response);
    let got = sdk.client.get(key.clone(), TIMEOUT).await.unwrap();
    assert_eq!(got.response.as_deref(), Some(&b"value\x00\xff"[..]));
    // A GET hit carries the version the SET wrote (docs/protocol.md section 4).
    assert!(set.version.is_some());
    assert_eq!(got.version, set.version);
    assert_eq!(
        sdk.client
            .del(key.clone(), None, TIMEOUT)
            .await
            .unwrap()
            .response,
        1
    );
    assert_eq!(
        sdk.client.get(key.clone(), TIMEOUT).await.unwrap().response,
        None
    );
    assert_eq!(
        sdk.client.del(key, None, TIMEOUT).await.unwrap().response,
        0
    );

    sdk.stop().await;
}
