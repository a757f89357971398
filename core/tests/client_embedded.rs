//! The client against the local state store on the embedded broker: every operation, 64 requests
//! in flight, two observers, unobserve, binary and 64 KiB values, a sub-second timeout
//! against a store that does not answer, an outage while observing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::{Backend, Env, bounded};

const BACKEND: Backend = Backend::Embedded;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_operations() {
    bounded("all_operations", async {
        let Some(env) = Env::start(BACKEND, "all_operations").await else {
            return;
        };
        common::all_operations(&env).await;
        env.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_64_requests_from_one_client() {
    bounded("concurrent_64", async {
        let Some(env) = Env::start(BACKEND, "concurrent_64").await else {
            return;
        };
        common::concurrent_64(&env).await;
        env.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_observe_one_key() {
    bounded("two_observers", async {
        let Some(env) = Env::start(BACKEND, "two_observers").await else {
            return;
        };
        common::two_observers(&env).await;
        env.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unobserve_and_drop_stop_notifications() {
    bounded("unobserve", async {
        let Some(env) = Env::start(BACKEND, "unobserve").await else {
            return;
        };
        common::unobserve(&env).await;
        env.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_and_64_kib_values() {
    bounded("binary_values", async {
        let Some(env) = Env::start(BACKEND, "binary_values").await else {
            return;
        };
        common::binary_values(&env).await;
        env.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_second_timeout_when_the_store_does_not_answer() {
    bounded("sub_second_timeout", async {
        let Some(env) = Env::start(BACKEND, "sub_second_timeout").await else {
            return;
        };
        common::sub_second_timeout(env).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_while_observing_and_requesting() {
    bounded("outage_through_proxy", async {
        let Some(env) = Env::start(BACKEND, "outage_through_proxy").await else {
            return;
        };
        common::outage_through_proxy(&env).await;
        env.shutdown().await;
    })
    .await;
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
