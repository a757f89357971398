//! TLS against Mosquitto with a TLS listener and a CA generated in the test (rcgen): the
//! client verifies the broker with the CA file, fails clearly with the wrong CA or the wrong
//! name, and verifies against a configured server name when the host is not in the
//! certificate.
//!
//! Skipped (with a printed line) when Mosquitto is not installed, unless
//! `MQSTATE_REQUIRE_MOSQUITTO=1`.

use crate::common::{TlsMosquitto, bounded, key, make_tls_files, next};
use mqstate::{Client, ConnectOptions, ErrorKind, SetOptions, TlsOptions};
use mqstate_server::{LocalServer, ServerConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_generated_ca() {
    bounded("tls_with_a_generated_ca", async {
        // The certificate names 127.0.0.1 (as an IP address) and broker.test.
        let files = make_tls_files(&["127.0.0.1", "broker.test"]);
        let Some(mosquitto) = TlsMosquitto::start(&files, "tls_with_a_generated_ca") else {
            return;
        };
        let server = LocalServer::start_with(
            ServerConfig::external(&format!("mqtt://127.0.0.1:{}", mosquitto.plain_port)).unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("store: {e}; {}", mosquitto.log()));

        let url = format!(
            "mqtts://127.0.0.1:{}?ca_file={}",
            mosquitto.tls_port,
            files.ca.display()
        );
        let client = Client::connect(ConnectOptions::from_url(&url).unwrap())
            .await
            .unwrap_or_else(|e| panic!("TLS connect: {e}; {}", mosquitto.log()));
        let k = key("tls");
        let mut obs = client.observe(&k).await.unwrap();
        let set = client
            .set(&k, b"over \r\n TLS", SetOptions::default())
            .await
            .unwrap();
        assert_eq!(
            client.get(&k).await.unwrap().unwrap().value,
            &b"over \r\n TLS"[..]
        );
        assert_eq!(next(&mut obs).await.version, Some(set.version));
        client.close().await;

        // The wrong CA: a clear connection error, no hang.
        let wrong = ConnectOptions::new("127.0.0.1", mosquitto.tls_port)
            .with_tls(TlsOptions::default().with_ca_file(&files.other_ca));
        let err = Client::connect(wrong).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Connection);
        assert!(
            err.to_string().to_lowercase().contains("certificate"),
            "{err}"
        );

        // Plain MQTT to the TLS port fails too.
        let plain = ConnectOptions::new("127.0.0.1", mosquitto.tls_port);
        assert!(Client::connect(plain).await.is_err());

        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_server_name_override() {
    bounded("tls_server_name_override", async {
        // The certificate names only broker.test, not the address connected to.
        let files = make_tls_files(&["broker.test"]);
        let Some(mosquitto) = TlsMosquitto::start(&files, "tls_server_name_override") else {
            return;
        };
        let server = LocalServer::start_with(
            ServerConfig::external(&format!("mqtt://127.0.0.1:{}", mosquitto.plain_port)).unwrap(),
        )
        .await
        .unwrap();
        let tls = TlsOptions::default().with_ca_file(&files.ca);
        let err = Client::connect(
            ConnectOptions::new("127.0.0.1", mosquitto.tls_port).with_tls(tls.clone()),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Connection, "{err}");

        let client = Client::connect(
            ConnectOptions::new("127.0.0.1", mosquitto.tls_port)
                .with_tls(tls.with_server_name("broker.test")),
        )
        .await
        .unwrap_or_else(|e| panic!("TLS connect with server name: {e}; {}", mosquitto.log()));
        assert!(
            client
                .set("tls-name", "ok", SetOptions::default())
                .await
                .unwrap()
                .applied
        );
        client.close().await;
        server.shutdown().await;
    })
    .await;
}
