//! The client against the local state store on the mosquitto broker: every operation, 64 requests
//! in flight, two observers, unobserve, binary and 64 KiB values, a sub-second timeout
//! against a store that does not answer, an outage while observing.
//!
//! Skipped (with a printed line) when Mosquitto is not installed, unless
//! `MQSTATE_REQUIRE_MOSQUITTO=1`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::{Backend, Env, bounded};

const BACKEND: Backend = Backend::Mosquitto;

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
