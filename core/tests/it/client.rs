//! The client against the local state store, on the embedded broker and on Mosquitto: every
//! operation, 64 requests in flight, two observers, unobserve, binary and 64 KiB values, a
//! closed client's subscriptions gone, a sub-second timeout against a store that does not
//! answer, an outage while observing. Each
//! scenario (in `common`) runs once per broker: `<scenario>::embedded` and
//! `<scenario>::mosquitto`.
//!
//! The Mosquitto runs are skipped (with a printed line) when Mosquitto is not installed,
//! unless `MQSTATE_REQUIRE_MOSQUITTO=1`.

use crate::common::bounded;

/// One test module per scenario, with a test per broker. `&` scenarios borrow the
/// environment (shut down afterwards); `owned` ones take it (they stop parts of it).
macro_rules! on_both_brokers {
    ($($test:ident => $kind:tt $scenario:ident;)*) => {$(
        mod $test {
            use crate::common::{self, Backend, Env, bounded};

            async fn run(backend: Backend) {
                let name = stringify!($scenario);
                bounded(name, async {
                    let Some(env) = Env::start(backend, name).await else {
                        return;
                    };
                    on_both_brokers!(@call $kind $scenario env);
                })
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                run(Backend::Embedded).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mosquitto() {
                run(Backend::Mosquitto).await;
            }
        }
    )*};
    (@call & $scenario:ident $env:ident) => {{
        common::$scenario(&$env).await;
        $env.shutdown().await;
    }};
    (@call owned $scenario:ident $env:ident) => {
        common::$scenario($env).await
    };
}

on_both_brokers! {
    all_operations => & all_operations;
    concurrent_64_requests_from_one_client => & concurrent_64;
    two_clients_observe_one_key => & two_observers;
    unobserve_and_drop_stop_notifications => & unobserve;
    binary_and_64_kib_values => & binary_values;
    a_closed_client_leaves_no_subscriptions => & close_leaves_no_subscriptions;
    sub_second_timeout_when_the_store_does_not_answer => owned sub_second_timeout;
    outage_while_observing_and_requesting => & outage_through_proxy;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_broker_limit_is_refused_before_sending() {
    bounded("over_the_broker_limit", async {
        use mqstate::{Client, ConnectOptions, ErrorKind, SetOptions};
        use mqstate_server::{LocalServer, ServerConfig};
        let server =
            LocalServer::start_with(ServerConfig::default().with_max_packet_size(64 * 1024))
                .await
                .unwrap();
        let c = Client::connect(ConnectOptions::new("127.0.0.1", server.port()))
            .await
            .unwrap();
        let err = c
            .set("big", vec![0u8; 100 * 1024], SetOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("maximum packet size"), "{err}");
        // The connection is unharmed.
        assert!(
            c.set("small", vec![0u8; 1024], SetOptions::default())
                .await
                .unwrap()
                .applied
        );
        assert_eq!(c.get("small").await.unwrap().unwrap().value.len(), 1024);
        c.close().await;
        server.shutdown().await;
    })
    .await;
}

/// A broker that accepts TCP connections and never answers: the connect times out, and the
/// error is a `timeout` whose message names host, port and limit (the same in every binding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_that_times_out_is_a_timeout_naming_host_port_and_limit() {
    bounded("connect_timeout", async {
        use mqstate::{Client, ConnectOptions, ErrorKind};
        use std::time::Duration;
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = silent.local_addr().unwrap().port();
        let accept = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = silent.accept().await {
                held.push(socket);
            }
        });
        let options =
            ConnectOptions::new("127.0.0.1", port).with_connect_timeout(Duration::from_secs(1));
        let err = Client::connect(options).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
        let message = err.to_string();
        assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
        assert!(message.contains("1s"), "{message}");
        accept.abort();

        // Under the 1 s minimum is refused before anything is attempted.
        let err = Client::connect(
            ConnectOptions::new("127.0.0.1", port).with_connect_timeout(Duration::from_millis(999)),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("minimum of 1 s"), "{err}");
    })
    .await;
}

#[test]
fn a_client_id_with_a_colon_is_refused_as_it_is_the_clock_node_id() {
    let err = mqstate::ConnectOptions::from_url("mqtt://127.0.0.1?client_id=a%3Ab").unwrap_err();
    assert_eq!(err.kind(), mqstate::ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("cannot contain ':'"), "{err}");
    let o = mqstate::ConnectOptions::from_url("mqtt://h?connect_timeout_ms=2500").unwrap();
    assert_eq!(o.connect_timeout, std::time::Duration::from_millis(2500));
    assert!(mqstate::ConnectOptions::from_url("mqtt://h?connect_timeout_ms=500").is_err());
}

/// Two clients given the same client id take the session from each other: the broker drops
/// the older connection each time the other one connects. Each reconnection succeeds, but the
/// backoff does not start again until a connection has lasted `max_delay`, so the takeovers
/// slow down (0.5-1 × 200, 400, 800, 1,600 ms apart for each client) instead of repeating
/// several times a second. Lower bounds only: a sleep never ends early, however slow the
/// machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_with_one_client_id_take_the_session_over_at_a_slowing_pace() {
    bounded("same_client_id", async {
        use mqstate::{Client, ConnectOptions, ConnectionState, ReconnectPolicy};
        use mqstate_server::LocalServer;
        use std::time::{Duration, Instant};
        let server = LocalServer::start().await.unwrap();
        let options = ConnectOptions::new("127.0.0.1", server.port())
            .with_client_id("same-client-id")
            .with_reconnect(ReconnectPolicy::new(
                Duration::from_millis(200),
                Duration::from_secs(5),
            ));
        let a = Client::connect(options.clone()).await.unwrap();
        let mut states = a.state_changes();
        let b = Client::connect(options).await.unwrap();

        // A's outages: from seeing `reconnecting` to seeing `connected` again.
        let mut outages = Vec::new();
        let mut lost_at = None;
        while outages.len() < 4 {
            states.changed().await.unwrap();
            let state = *states.borrow_and_update();
            match (state, lost_at) {
                (ConnectionState::Reconnecting, None) => lost_at = Some(Instant::now()),
                (ConnectionState::Connected, Some(since)) => {
                    outages.push(since.elapsed());
                    lost_at = None;
                }
                _ => {}
            }
        }
        eprintln!("client A's outages: {outages:?}");
        // The fourth waited at least 0.5 × 1,600 ms (100 ms of slack for noticing the loss
        // late); with the backoff starting again at each reconnection it would be at most
        // 200 ms plus a connect.
        assert!(
            outages[3] >= Duration::from_millis(700),
            "outages did not grow: {outages:?}"
        );
        let total: Duration = outages.iter().sum();
        assert!(
            total >= Duration::from_millis(1_400),
            "outages did not grow: {outages:?}"
        );
        a.close().await;
        b.close().await;
        server.shutdown().await;
    })
    .await;
}
