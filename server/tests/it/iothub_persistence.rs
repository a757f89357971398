//! The local IoT Hub's data dir file (`iothub.redb`) in-process: a damaged, foreign,
//! newer-format or locked file is a clear data dir error, as the store's are, and is left as
//! it was; a graceful restart keeps the registry, the queues and the feedback; without a data
//! dir nothing is written.

use std::time::Duration;

use mqstate_server::iothub::{
    Ack, C2dMessage, DeviceSpec, HUB_FILE, IotHubConfig, IotHubError, IotHubServer,
};
use mqstate_server::persist::PersistMode;
use mqstate_server::{LocalServer, ServerConfig};

use crate::common::data_dir_error;

fn hub_config(dir: &std::path::Path) -> IotHubConfig {
    IotHubConfig {
        admin_port: None,
        data_dir: Some(dir.to_owned()),
        feedback_batch_size: 1,
        ..IotHubConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_hub_file_is_a_data_dir_error_and_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join(HUB_FILE);
    let config = ServerConfig::default()
        .with_data_dir(tmp.path(), PersistMode::All)
        .with_iothub(IotHubConfig::default());

    // Damaged (not a redb file at all).
    let garbage: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&file, &garbage).unwrap();
    let text = data_dir_error(LocalServer::start_with(config.clone()).await);
    assert!(text.contains(HUB_FILE), "{text}");
    assert!(text.contains("nothing was changed"), "{text}");
    assert_eq!(std::fs::read(&file).unwrap(), garbage);

    // From a newer format.
    std::fs::remove_file(&file).unwrap();
    {
        let db = redb::Database::create(&file).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let meta: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
            txn.open_table(meta)
                .unwrap()
                .insert("iothub_format", 99)
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let text = data_dir_error(LocalServer::start_with(config.clone()).await);
    assert!(text.contains(HUB_FILE), "{text}");
    assert!(
        text.contains("format 99") && text.contains("format 1"),
        "{text}"
    );

    // Another program's file.
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
    let text = data_dir_error(LocalServer::start_with(config.clone()).await);
    assert!(text.contains("not an mqstate data file"), "{text}");
    std::fs::remove_file(&file).unwrap();

    // Locked by a running hub.
    let first = IotHubServer::start(hub_config(tmp.path())).await.unwrap();
    match IotHubServer::start(hub_config(tmp.path())).await {
        Err(IotHubError::DataDir(e)) => {
            let text = e.to_string();
            assert!(text.contains(HUB_FILE) && text.contains("locked"), "{text}");
        }
        other => panic!("expected a data dir error, got {other:?}"),
    }
    first.shutdown().await;
    // And the whole server starts on it now.
    LocalServer::start_with(config)
        .await
        .unwrap()
        .shutdown()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_restart_keeps_registry_queues_and_feedback() {
    let tmp = tempfile::tempdir().unwrap();
    let server = IotHubServer::start(hub_config(tmp.path())).await.unwrap();
    let hub = server.hub();
    let device = hub.add_device(&DeviceSpec::parse("d").unwrap()).unwrap();
    hub.send(
        "d",
        C2dMessage::new("a").message_id("m1").ack(Ack::Negative),
    )
    .unwrap();
    hub.send("d", C2dMessage::new("b").message_id("m2").ack(Ack::Full))
        .unwrap();
    assert_eq!(hub.purge("d").unwrap(), 2);
    hub.send("d", C2dMessage::new("c").message_id("m3"))
        .unwrap();
    hub.persisted().await.unwrap();
    let queue = hub.queue("d").unwrap();
    server.shutdown().await;

    // Configured devices that were restored keep their keys and generation id.
    let config = IotHubConfig {
        devices: vec![
            DeviceSpec::parse("d").unwrap(),
            DeviceSpec::parse("new").unwrap(),
        ],
        ..hub_config(tmp.path())
    };
    let server = IotHubServer::start(config).await.unwrap();
    let hub = server.hub();
    assert_eq!(hub.device("d").unwrap(), device);
    assert!(hub.device("new").is_ok());
    assert_eq!(hub.queue("d").unwrap(), queue);
    let mut statuses = Vec::new();
    for _ in 0..2 {
        let batch = hub.receive_feedback(Duration::from_secs(10)).await.unwrap();
        statuses.extend(batch.records.iter().map(|r| r.original_message_id.clone()));
        hub.complete_feedback(&batch.lock_token).unwrap();
    }
    statuses.sort();
    assert_eq!(statuses, [Some("m1".to_owned()), Some("m2".to_owned())]);
    // A later message gets a sequence number above every earlier one.
    let receipt = hub
        .send("d", C2dMessage::new("d").message_id("m4"))
        .unwrap();
    assert!(receipt.sequence_number > queue.messages[0].sequence_number);
    drop(hub);
    server.shutdown().await;

    // A key given in the configuration replaces the stored one; the generation id stays.
    let key = "AAECAwQFBgcICQoLDA0ODw==";
    let config = IotHubConfig {
        devices: vec![DeviceSpec::parse(&format!("d:{key}")).unwrap()],
        ..hub_config(tmp.path())
    };
    let server = IotHubServer::start(config).await.unwrap();
    let restored = server.hub().device("d").unwrap();
    assert_eq!(restored.primary_key, key);
    assert_eq!(restored.generation_id, device.generation_id);
    assert_eq!(server.hub().queue("d").unwrap().depth, 2, "m3 and m4");
    server.shutdown().await;
}

#[tokio::test]
async fn without_a_data_dir_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let server = IotHubServer::start(IotHubConfig {
        admin_port: None,
        ..IotHubConfig::default()
    })
    .await
    .unwrap();
    server
        .hub()
        .add_device(&DeviceSpec::parse("d").unwrap())
        .unwrap();
    server.hub().persisted().await.unwrap();
    server.shutdown().await;
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

/// The data dir is private to the server's user whatever the umask (the test runs under the
/// one it inherits, 022 usually): created 0700, with the store's and the hub's files and the
/// policies file 0600 and the broker's session directory 0700. Files and the broker's
/// directory an older version left readable by others are made private at the next start;
/// a data dir that already existed keeps its mode (it is warned about).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_dir_is_private_and_loose_files_of_older_versions_are_tightened() {
    use std::os::unix::fs::PermissionsExt;

    use mqstate::{Client, ConnectOptions, SetOptions};
    use mqstate_server::iothub::policies::POLICIES_FILE;
    use mqstate_server::persist::{BROKER_DIR, STORE_FILE};

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let config = ServerConfig::default()
        .with_data_dir(&dir, PersistMode::All)
        .with_iothub(IotHubConfig {
            admin_port: None,
            ..IotHubConfig::default()
        });
    // In octal, as `ls -l` and chmod show it.
    let mode = |p: &std::path::Path| {
        format!(
            "{:03o}",
            std::fs::metadata(p).unwrap().permissions().mode() & 0o777
        )
    };
    let set_mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    let ours = [STORE_FILE, HUB_FILE, POLICIES_FILE];
    for (round, device) in [("new", "d1"), ("left loose by an older version", "d2")] {
        let server = LocalServer::start_with(config.clone()).await.unwrap();
        let client = Client::connect(ConnectOptions::new(server.host(), server.port()))
            .await
            .unwrap()
            .with_timeout(Duration::from_secs(30));
        client.set("k", "v", SetOptions::default()).await.unwrap();
        client.close().await;
        let hub = server.iothub().unwrap();
        hub.add_device(&DeviceSpec::parse(device).unwrap()).unwrap();
        hub.persisted().await.unwrap();
        drop(hub);
        for name in ours {
            assert_eq!(mode(&dir.join(name)), "600", "{round}: {name}");
        }
        assert_eq!(mode(&dir.join(BROKER_DIR)), "700", "{round}: {BROKER_DIR}");
        server.shutdown().await;
        if round == "new" {
            assert_eq!(mode(&dir), "700", "{round}: the data dir");
            set_mode(&dir, 0o755);
            set_mode(&dir.join(BROKER_DIR), 0o755);
            for name in ours {
                set_mode(&dir.join(name), 0o644);
            }
        } else {
            assert_eq!(mode(&dir), "755", "an existing data dir keeps its mode");
        }
    }
}
