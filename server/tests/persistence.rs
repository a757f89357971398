//! The data dir in-process: format checks (a file of another format or program is refused,
//! never wiped), a second server on the same dir is refused, group commit answers every
//! request of a burst, and the server's clock never goes below stored versions when the wall
//! clock went backwards across a restart.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mqstate::protocol::hlc::ManualClock;
use mqstate::protocol::resp3::{SetCondition, encode_set};
use mqstate::{Client, ConnectOptions, SetOptions};
use mqstate_server::persist::{self, PersistMode, Persistence};
use mqstate_server::statestore::handler::{HandlerConfig, RequestContext};
use mqstate_server::{LocalServer, ServerConfig, ServerError};
use redb::ReadableDatabase;

fn data_dir_error(result: Result<LocalServer, ServerError>) -> String {
    match result {
        Err(ServerError::DataDir(e)) => e.to_string(),
        Err(other) => panic!("expected a data dir error, got {other}"),
        Ok(_) => panic!("the server started"),
    }
}

#[tokio::test]
async fn a_file_of_another_format_or_program_is_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("store.redb");

    // An mqstate file from a newer format.
    {
        let db = redb::Database::create(&file).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let meta: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
            txn.open_table(meta).unwrap().insert("format", 99).unwrap();
        }
        txn.commit().unwrap();
    }
    let config = ServerConfig::default().with_data_dir(tmp.path(), PersistMode::All);
    let text = data_dir_error(LocalServer::start_with(config.clone()).await);
    assert!(text.contains("store.redb"), "{text}");
    assert!(
        text.contains("format 99") && text.contains("format 1"),
        "{text}"
    );
    // Its content is untouched (redb itself may update its header on open and close).
    {
        let db = redb::Database::open(&file).unwrap();
        let read = db.begin_read().unwrap();
        let meta: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
        let meta = read.open_table(meta).unwrap();
        assert_eq!(meta.get("format").unwrap().unwrap().value(), 99);
        assert_eq!(read.list_tables().unwrap().count(), 1);
    }

    // A redb file of another program.
    std::fs::remove_file(&file).unwrap();
    {
        let db = redb::Database::create(&file).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let t: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("theirs");
            txn.open_table(t).unwrap().insert(1, 2).unwrap();
        }
        txn.commit().unwrap();
    }
    let text = data_dir_error(LocalServer::start_with(config).await);
    assert!(text.contains("not an mqstate data file"), "{text}");
    let db = redb::Database::open(&file).unwrap();
    let read = db.begin_read().unwrap();
    let t: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("theirs");
    assert_eq!(
        read.open_table(t).unwrap().get(1).unwrap().unwrap().value(),
        2
    );
    assert_eq!(read.list_tables().unwrap().count(), 1);
}

#[tokio::test]
async fn a_second_server_on_the_same_dir_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let config = ServerConfig::default().with_data_dir(tmp.path(), PersistMode::All);
    let first = LocalServer::start_with(config.clone()).await.unwrap();
    let text = data_dir_error(LocalServer::start_with(config.clone()).await);
    assert!(
        text.contains("store.redb") && text.contains("locked"),
        "{text}"
    );
    first.shutdown().await;
    // Free again once the first one stopped.
    LocalServer::start_with(config)
        .await
        .unwrap()
        .shutdown()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_64_persisted_sets_is_answered_and_restored() {
    let tmp = tempfile::tempdir().unwrap();
    let config = ServerConfig::default().with_data_dir(tmp.path(), PersistMode::Requested);
    let server = LocalServer::start_with(config.clone()).await.unwrap();
    let client = Client::connect(ConnectOptions::new(server.host(), server.port()))
        .await
        .unwrap()
        .with_timeout(Duration::from_secs(30));
    let mut tasks = Vec::new();
    for i in 0..64 {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            let o = c
                .set(
                    format!("burst-{i}"),
                    format!("v{i}"),
                    SetOptions::default().persist(),
                )
                .await
                .unwrap();
            (i, o.version)
        }));
    }
    let mut versions = Vec::new();
    for t in tasks {
        versions.push(t.await.unwrap());
    }
    client.close().await;
    server.shutdown().await;

    let server = LocalServer::start_with(config).await.unwrap();
    let client = Client::connect(ConnectOptions::new(server.host(), server.port()))
        .await
        .unwrap();
    for (i, version) in versions {
        let got = client.get(format!("burst-{i}")).await.unwrap().unwrap();
        assert_eq!(got.value, Bytes::from(format!("v{i}")));
        assert_eq!(got.version, version);
    }
    client.close().await;
    server.shutdown().await;
}

fn set_request(key: &str) -> Bytes {
    let mut buf = bytes::BytesMut::new();
    encode_set(&mut buf, key.as_bytes(), b"v", SetCondition::Always, None);
    buf.freeze()
}

/// The stored version of `key` after a SET through a handler on `dir` with wall clock `ms`.
async fn set_at(dir: &std::path::Path, wall_ms: u64, key: &str) -> mqstate::Hlc {
    let p = Persistence::open(dir, PersistMode::All).unwrap();
    let config = HandlerConfig {
        wall_clock: Some(Arc::new(ManualClock::new(wall_ms))),
        ..HandlerConfig::default()
    };
    let mut handler = persist::handler(config, Some(&p)).unwrap();
    // The request's own timestamp is an old one: only the server's clock can lift it.
    let ts = mqstate::Hlc::new(1, 0, "client").to_string();
    let ctx = RequestContext {
        client_id: Some("client"),
        timestamp: Some(&ts),
        fencing_token: None,
        persist: true,
    };
    let outcome = handler.handle(&ctx, &set_request(key), Instant::now());
    assert_eq!(&outcome.answer.payload[..], b"+OK\r\n");
    let clock_ms = handler.clock().current().ms;
    p.commit(handler.store_mut(), clock_ms).await.unwrap();
    handler.store().get(key.as_bytes()).unwrap().version.clone()
}

#[tokio::test]
async fn versions_never_go_below_stored_ones_when_the_wall_clock_went_back() {
    let tmp = tempfile::tempdir().unwrap();
    let t = 1_800_000_000_000;
    let before = set_at(tmp.path(), t, "a").await;
    assert_eq!(before.ms, t);
    // Restarted an hour in the past: the new version is still above the stored one.
    let after = set_at(tmp.path(), t - 3_600_000, "b").await;
    assert!(after > before, "{after} <= {before}");
    // And again, with the clock even further back.
    let again = set_at(tmp.path(), t - 7_200_000, "c").await;
    assert!(again > after, "{again} <= {after}");
}
