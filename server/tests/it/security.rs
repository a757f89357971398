//! Security of the local server (issue 18): the embedded broker's TLS listener, password and
//! K8S-SAT authentication, each client confined to its own topics, the refusal of an open
//! non-loopback bind, attach mode over TLS with a password to Mosquitto, and the admission
//! gate of the embedded broker in front of its access control.
//!
//! A CA, a second (wrong) CA, a server certificate and a client certificate are generated
//! in each test with rcgen.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use mqstate::{Client, ConnectOptions, SetOptions, TlsOptions};
use mqstate_server::security::{SecurityConfig, TlsSettings, set_password};
use mqstate_server::{LocalServer, ServerConfig, ServerError};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{
    ConnectReturnCode, Packet, PublishProperties, SubscribeReasonCode,
};
use rumqttc::v5::{AsyncClient, ConnectionError, Event, EventLoop, MqttOptions};

const REQUEST_TOPIC: &str = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";
const PASSWORD: &str = "correct horse";
const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.test-token.signature";
/// Generous: the machine may be very busy.
const WAIT: Duration = Duration::from_secs(30);

/// Generated PEM files in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
        let ca = |name: &str| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, name);
            CertifiedIssuer::self_signed(params, key).unwrap()
        };
        let issuer = ca("mqstate test CA");
        let wrong = ca("another CA");
        write("ca.pem", issuer.pem());
        write("wrong-ca.pem", wrong.pem());

        let server_key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server = params.signed_by(&server_key, &*issuer).unwrap();
        write("server.pem", server.pem());
        write("server.key", server_key.serialize_pem());

        let client_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "a client");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client = params.signed_by(&client_key, &*issuer).unwrap();
        write("client.pem", client.pem());
        write("client.key", client_key.serialize_pem());

        // A password file with alice, and the password as a client reads it (no newline).
        set_password(&dir.path().join("passwd"), "alice", PASSWORD).unwrap();
        write("alice.pw", PASSWORD.to_owned());
        write("tokens", format!("# accepted tokens\n{TOKEN} dashboard\n"));
        write("token.sat", TOKEN.to_owned());
        write("bad.sat", "not-a-token".to_owned());
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn tls(&self, client_ca: bool) -> TlsSettings {
        TlsSettings {
            cert: self.path("server.pem"),
            key: self.path("server.key"),
            client_ca: client_ca.then(|| self.path("ca.pem")),
            port: 0,
        }
    }
}

async fn start(security: SecurityConfig) -> LocalServer {
    let config = ServerConfig {
        security,
        ..ServerConfig::default()
    };
    LocalServer::start_with(config).await.unwrap()
}

/// The core client's options for the server's TLS listener.
fn tls_client(server: &LocalServer, tls: TlsOptions) -> ConnectOptions {
    let mut o = ConnectOptions::default();
    o.host = "localhost".into();
    o.port = server.tls_port().unwrap();
    o.tls = Some(tls);
    o.connect_timeout = Duration::from_secs(10);
    o.request_timeout = WAIT;
    o
}

async fn set_and_get(options: ConnectOptions) -> Result<(), mqstate::Error> {
    let client = Client::connect(options).await?;
    client.set("door", "open", SetOptions::default()).await?;
    let got = client.get("door").await?.map(|v| v.value);
    assert_eq!(got.as_deref(), Some(&b"open"[..]));
    client.close().await;
    Ok(())
}

#[tokio::test]
async fn tls_with_the_right_ca_passes_and_with_a_wrong_ca_fails() {
    let pki = Pki::new();
    let server = start(SecurityConfig {
        tls: Some(pki.tls(false)),
        password_file: Some(pki.path("passwd")),
        ..SecurityConfig::default()
    })
    .await;
    let mut good = tls_client(
        &server,
        TlsOptions::default().with_ca_file(pki.path("ca.pem")),
    );
    good.username = Some("alice".into());
    good.password_file = Some(pki.path("alice.pw"));
    set_and_get(good.clone()).await.unwrap();

    let mut wrong = good.clone();
    wrong.tls = Some(TlsOptions::default().with_ca_file(pki.path("wrong-ca.pem")));
    wrong.connect_timeout = Duration::from_secs(5);
    let Err(err) = Client::connect(wrong).await else {
        panic!("a wrong CA must fail")
    };
    let text = err.to_string();
    assert!(text.to_lowercase().contains("certificate"), "{text}");
    server.shutdown().await;
}

/// Issue 37: a TCP connection to the TLS port that never sends a ClientHello used to stop
/// every other TLS client from connecting (the broker ran each handshake inside its accept
/// loop). Now each handshake runs on its own, and the silent one is dropped after 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_socket_on_the_tls_port_does_not_stall_other_tls_clients() {
    let pki = Pki::new();
    let server = start(SecurityConfig {
        tls: Some(pki.tls(false)),
        ..SecurityConfig::default()
    })
    .await;
    let port = server.tls_port().unwrap();
    let mut idle = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut connects = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let mut options = tls_client(
            &server,
            TlsOptions::default().with_ca_file(pki.path("ca.pem")),
        );
        options.connect_timeout = Duration::from_secs(5);
        connects.spawn(async move {
            let client = Client::connect(options).await?;
            let elapsed = started.elapsed();
            client.close().await;
            Ok::<_, mqstate::Error>(elapsed)
        });
    }
    let mut slowest = Duration::ZERO;
    while let Some(done) = connects.join_next().await {
        slowest = slowest.max(done.unwrap().expect("a TLS client failed to connect"));
    }
    println!("20 TLS clients connected within {slowest:?} beside an idle socket");
    assert!(
        slowest < Duration::from_secs(1),
        "20 TLS clients took {slowest:?} to connect beside an idle socket"
    );
    // The silent peer is dropped once the handshake timeout passes.
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::io::AsyncReadExt::read(&mut idle, &mut buf),
    )
    .await
    .expect("the idle TLS socket was not closed within 20 s");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_required_client_certificate_that_is_missing_fails() {
    let pki = Pki::new();
    let server = start(SecurityConfig {
        tls: Some(pki.tls(true)),
        password_file: Some(pki.path("passwd")),
        ..SecurityConfig::default()
    })
    .await;
    let mut with_cert = tls_client(
        &server,
        TlsOptions::default()
            .with_ca_file(pki.path("ca.pem"))
            .with_client_cert(pki.path("client.pem"), pki.path("client.key")),
    );
    with_cert.username = Some("alice".into());
    with_cert.password_file = Some(pki.path("alice.pw"));
    set_and_get(with_cert.clone()).await.unwrap();

    let mut without = with_cert.clone();
    without.tls = Some(TlsOptions::default().with_ca_file(pki.path("ca.pem")));
    without.connect_timeout = Duration::from_secs(5);
    assert!(
        Client::connect(without).await.is_err(),
        "no client certificate must fail"
    );
    server.shutdown().await;
}

/// A raw MQTT5 connection to the plain loopback listener; the CONNACK's refusal, if any.
async fn connect_raw(
    server: &LocalServer,
    client_id: &str,
    setup: impl FnOnce(&mut MqttOptions),
) -> Result<(AsyncClient, EventLoop), ConnectReturnCode> {
    connect_port(server.port(), client_id, setup).await
}

/// [`connect_raw`] to a plain listener on `127.0.0.1:port`.
async fn connect_port(
    port: u16,
    client_id: &str,
    setup: impl FnOnce(&mut MqttOptions),
) -> Result<(AsyncClient, EventLoop), ConnectReturnCode> {
    let mut options = MqttOptions::new(client_id, "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(30));
    setup(&mut options);
    let (client, mut events) = AsyncClient::new(options, 100);
    let outcome = tokio::time::timeout(WAIT, async {
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(ack))) => return Ok(ack.code),
                Ok(_) => {}
                Err(ConnectionError::ConnectionRefused(code)) => return Err(code),
                Err(e) => panic!("{client_id}: connection error {e}"),
            }
        }
    })
    .await
    .expect("no CONNACK");
    match outcome {
        Ok(ConnectReturnCode::Success) => Ok((client, events)),
        Ok(code) | Err(code) => Err(code),
    }
}

#[tokio::test]
async fn wrong_password_unknown_user_and_no_credentials_are_refused() {
    let pki = Pki::new();
    let server = start(SecurityConfig {
        password_file: Some(pki.path("passwd")),
        ..SecurityConfig::default()
    })
    .await;
    let ok = connect_raw(&server, "good", |o| {
        o.set_credentials("alice", PASSWORD);
    })
    .await;
    assert!(ok.is_ok(), "alice with her password: {:?}", ok.err());
    for (id, user, password) in [("wrong", "alice", "nope"), ("unknown", "mallory", PASSWORD)] {
        let refused = connect_raw(&server, id, |o| {
            o.set_credentials(user, password);
        })
        .await
        .err();
        assert_eq!(
            refused,
            Some(ConnectReturnCode::BadUserNamePassword),
            "{id}"
        );
    }
    let refused = connect_raw(&server, "anonymous", |_| {}).await.err();
    assert_eq!(refused, Some(ConnectReturnCode::BadUserNamePassword));
    server.shutdown().await;
}

#[tokio::test]
async fn k8s_sat_tokens_are_checked_against_the_file() {
    let pki = Pki::new();
    let server = start(SecurityConfig {
        sat_file: Some(pki.path("tokens")),
        ..SecurityConfig::default()
    })
    .await;
    let sat = |token: Option<&'static str>| {
        move |o: &mut MqttOptions| {
            o.set_authentication_method(Some("K8S-SAT".to_owned()));
            o.set_authentication_data(token.map(|t| Bytes::from_static(t.as_bytes())));
        }
    };
    assert!(
        connect_raw(&server, "sat-good", sat(Some(TOKEN)))
            .await
            .is_ok()
    );
    assert_eq!(
        connect_raw(&server, "sat-bad", sat(Some("forged")))
            .await
            .err(),
        Some(ConnectReturnCode::NotAuthorized)
    );
    assert_eq!(
        connect_raw(&server, "sat-missing", sat(None)).await.err(),
        Some(ConnectReturnCode::NotAuthorized)
    );
    assert_eq!(
        connect_raw(&server, "no-auth", |_| {}).await.err(),
        Some(ConnectReturnCode::NotAuthorized)
    );
    assert_eq!(
        connect_raw(&server, "other-method", |o| {
            o.set_authentication_method(Some("SCRAM-SHA-1".to_owned()));
        })
        .await
        .err(),
        Some(ConnectReturnCode::BadAuthenticationMethod)
    );

    // The core client's SAT file works end to end.
    let mut o = ConnectOptions::default();
    o.host = "127.0.0.1".into();
    o.port = server.port();
    o.sat_file = Some(pki.path("token.sat"));
    set_and_get(o).await.unwrap();
    server.shutdown().await;
}

/// Waits for the SUBACK of a subscription and returns its reason code.
async fn suback(events: &mut EventLoop) -> SubscribeReasonCode {
    tokio::time::timeout(WAIT, async {
        loop {
            if let Event::Incoming(Packet::SubAck(ack)) = events.poll().await.unwrap() {
                return ack.return_codes[0];
            }
        }
    })
    .await
    .expect("no SUBACK")
}

/// Polls for `time`; returns the topics of the messages received, or the connection error.
async fn drain(events: &mut EventLoop, time: Duration) -> Result<Vec<String>, String> {
    let mut topics = Vec::new();
    let end = tokio::time::Instant::now() + time;
    loop {
        match tokio::time::timeout_at(end, events.poll()).await {
            Err(_) => return Ok(topics),
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) => {
                topics.push(String::from_utf8_lossy(&p.topic).into_owned());
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.to_string()),
        }
    }
}

fn alice(o: &mut MqttOptions) {
    o.set_credentials("alice", PASSWORD);
}

#[tokio::test]
async fn a_client_cannot_subscribe_to_another_clients_response_topic() {
    let pki = Pki::new();
    let server = start(SecurityConfig {
        password_file: Some(pki.path("passwd")),
        ..SecurityConfig::default()
    })
    .await;
    let (spy, mut spy_events) = connect_raw(&server, "spy", alice).await.unwrap();
    spy.subscribe("clients/victim/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    assert_eq!(
        suback(&mut spy_events).await,
        SubscribeReasonCode::NotAuthorized
    );
    spy.subscribe("clients/#", QoS::AtLeastOnce).await.unwrap();
    assert_eq!(
        suback(&mut spy_events).await,
        SubscribeReasonCode::NotAuthorized
    );
    // Its own topics are fine.
    spy.subscribe("clients/spy/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    assert!(matches!(
        suback(&mut spy_events).await,
        SubscribeReasonCode::Success(_)
    ));

    // The victim works with the state store; the spy sees none of it.
    let mut victim = ConnectOptions::default();
    victim.host = "127.0.0.1".into();
    victim.port = server.port();
    victim.client_id = Some("victim".into());
    victim.username = Some("alice".into());
    victim.password_file = Some(pki.path("alice.pw"));
    let client = Client::connect(victim).await.unwrap();
    client
        .set("secret", "42", SetOptions::default())
        .await
        .unwrap();
    assert!(client.get("secret").await.unwrap().is_some());
    let seen = drain(&mut spy_events, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(seen.is_empty(), "the spy saw {seen:?}");
    client.close().await;
    server.shutdown().await;
}

/// A GET request (RESP3) as the state store protocol sends it.
fn request(response_topic: &str, client_id: &str) -> (Bytes, PublishProperties) {
    let properties = PublishProperties {
        response_topic: Some(response_topic.to_owned()),
        correlation_data: Some(Bytes::from_static(&[7; 16])),
        message_expiry_interval: Some(10),
        user_properties: vec![
            ("__srcId".to_owned(), client_id.to_owned()),
            ("__protVer".to_owned(), "1.0".to_owned()),
        ],
        ..PublishProperties::default()
    };
    (
        Bytes::from_static(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
        properties,
    )
}

#[tokio::test]
async fn a_request_with_another_clients_response_topic_disconnects_its_sender() {
    let pki = Pki::new();
    let server = start(SecurityConfig {
        password_file: Some(pki.path("passwd")),
        ..SecurityConfig::default()
    })
    .await;
    let (victim, mut victim_events) = connect_raw(&server, "victim", alice).await.unwrap();
    victim
        .subscribe("clients/victim/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    assert!(matches!(
        suback(&mut victim_events).await,
        SubscribeReasonCode::Success(_)
    ));
    let (attacker, mut attacker_events) = connect_raw(&server, "attacker", alice).await.unwrap();
    attacker
        .subscribe("clients/attacker/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    assert!(matches!(
        suback(&mut attacker_events).await,
        SubscribeReasonCode::Success(_)
    ));

    // Control: with its own response topic, the attacker's request is answered.
    let (payload, props) = request("clients/attacker/response", "attacker");
    attacker
        .publish_with_properties(REQUEST_TOPIC, QoS::AtLeastOnce, false, payload, props)
        .await
        .unwrap();
    let answered = tokio::time::timeout(WAIT, async {
        loop {
            if let Event::Incoming(Packet::Publish(p)) = attacker_events.poll().await.unwrap() {
                return String::from_utf8_lossy(&p.topic).into_owned();
            }
        }
    })
    .await
    .expect("the control request was not answered");
    assert_eq!(answered, "clients/attacker/response");

    // With the victim's response topic: refused, and the attacker is disconnected.
    let (payload, props) = request("clients/victim/response", "attacker");
    attacker
        .publish_with_properties(REQUEST_TOPIC, QoS::AtLeastOnce, false, payload, props)
        .await
        .unwrap();
    let ended = drain(&mut attacker_events, WAIT).await;
    assert!(ended.is_err(), "the attacker stayed connected: {ended:?}");
    let seen = drain(&mut victim_events, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(seen.is_empty(), "the victim received {seen:?}");

    // Publishing straight to another client's topic is refused by the broker as well.
    let (spoofer, mut spoofer_events) = connect_raw(&server, "spoofer", alice).await.unwrap();
    spoofer
        .publish("clients/victim/response", QoS::AtLeastOnce, false, "fake")
        .await
        .unwrap();
    let _ = drain(&mut spoofer_events, Duration::from_secs(2)).await;
    let seen = drain(&mut victim_events, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(seen.is_empty(), "the victim received {seen:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_non_loopback_bind_without_tls_or_authentication_is_refused() {
    let pki = Pki::new();
    let mut config = ServerConfig {
        bind: "0.0.0.0".parse().unwrap(),
        ..ServerConfig::default()
    };
    let err = LocalServer::start_with(config.clone()).await.unwrap_err();
    assert!(matches!(err, ServerError::Config(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("TLS") && text.contains("authentication"),
        "{text}"
    );
    assert!(text.contains("--insecure"), "{text}");

    // TLS alone is not enough.
    config.security.tls = Some(pki.tls(false));
    let text = LocalServer::start_with(config.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        !text.contains("TLS (") && text.contains("authentication"),
        "{text}"
    );

    // TLS and authentication: it starts; the plain listener stays on loopback.
    config.security.password_file = Some(pki.path("passwd"));
    let server = LocalServer::start_with(config).await.unwrap();
    assert_eq!(server.host(), "127.0.0.1");
    assert!(server.tls_port().is_some());
    server.shutdown().await;
}

/// Mosquitto with a TLS listener (the generated server certificate) and a password file
/// (`mosquitto_passwd`), the store attached with `mqtts://store@localhost:PORT?...`.
#[tokio::test]
async fn attach_mode_over_tls_with_a_password_to_mosquitto() {
    let pki = Pki::new();
    let tls_port = mqstate_testing::free_port().unwrap();
    let files: Vec<(PathBuf, &str)> = ["ca.pem", "server.pem", "server.key"]
        .iter()
        .map(|n| (pki.path(n), *n))
        .collect();
    let setup = |dir: &Path| {
        for (from, name) in &files {
            std::fs::copy(from, dir.join(name)).unwrap();
        }
        let passwd = dir.join("mosquitto.passwd");
        let status = std::process::Command::new("mosquitto_passwd")
            .args(["-c", "-b"])
            .arg(&passwd)
            .args(["store", "store-secret"])
            .status();
        match status {
            Ok(s) if s.success() => {}
            other => panic!("mosquitto_passwd failed: {other:?}"),
        }
        std::process::Command::new("mosquitto_passwd")
            .args(["-b"])
            .arg(&passwd)
            .args(["alice", PASSWORD])
            .status()
            .unwrap();
        format!(
            "allow_anonymous false\npassword_file {}\nlistener {tls_port} 127.0.0.1\n\
             cafile {}\ncertfile {}\nkeyfile {}\n",
            passwd.display(),
            dir.join("ca.pem").display(),
            dir.join("server.pem").display(),
            dir.join("server.key").display(),
        )
    };
    let mosquitto = match mqstate_testing::Mosquitto::start_with_extra_config(setup) {
        Ok(m) => m,
        Err(e @ mqstate_testing::MosquittoError::NotInstalled { .. })
            if !mqstate_testing::mosquitto_required() =>
        {
            println!("SKIPPED attach_mode_over_tls_with_a_password_to_mosquitto: {e}");
            return;
        }
        Err(e) => panic!("cannot start Mosquitto: {e}"),
    };
    std::fs::write(pki.path("store.pw"), "store-secret").unwrap();
    let url = format!(
        "mqtts://store@localhost:{tls_port}?ca_file={}&password_file={}",
        pki.path("ca.pem").display(),
        pki.path("store.pw").display()
    );
    let mut config = ServerConfig::attach(&url).unwrap();
    config.connect_timeout = WAIT;
    let server = LocalServer::start_with(config).await.unwrap();
    assert!(!server.is_embedded());

    // A client over TLS with a password gets answers from the attached store.
    let mut o = ConnectOptions::default();
    o.host = "localhost".into();
    o.port = tls_port;
    o.tls = Some(TlsOptions::default().with_ca_file(pki.path("ca.pem")));
    o.username = Some("alice".into());
    o.password_file = Some(pki.path("alice.pw"));
    o.request_timeout = WAIT;
    set_and_get(o).await.unwrap();

    // A wrong store password: Mosquitto refuses, and the start fails saying so.
    std::fs::write(pki.path("store.pw"), "wrong").unwrap();
    let mut config = ServerConfig::attach(&url).unwrap();
    config.connect_timeout = Duration::from_secs(3);
    let err = LocalServer::start_with(config).await.unwrap_err();
    assert!(matches!(err, ServerError::Client(_)), "{err}");
    server.shutdown().await;
    drop(mosquitto);
}

#[tokio::test]
async fn the_rule_file_grants_more_to_the_users_it_names() {
    let pki = Pki::new();
    set_password(&pki.path("passwd"), "dashboard", PASSWORD).unwrap();
    std::fs::write(
        pki.path("rules"),
        "# a monitoring tool sees every response\nuser:dashboard subscribe clients/#\n\
         user:dashboard subscribe sensors/#\nclient:sensor- publish sensors/#\n",
    )
    .unwrap();
    let server = start(SecurityConfig {
        password_file: Some(pki.path("passwd")),
        rules_file: Some(pki.path("rules")),
        ..SecurityConfig::default()
    })
    .await;
    let (dash, mut dash_events) = connect_raw(&server, "dash-1", |o| {
        o.set_credentials("dashboard", PASSWORD);
    })
    .await
    .unwrap();
    dash.subscribe("clients/#", QoS::AtLeastOnce).await.unwrap();
    assert!(matches!(
        suback(&mut dash_events).await,
        SubscribeReasonCode::Success(_)
    ));
    // alice is not named by the rule.
    let (other, mut other_events) = connect_raw(&server, "other", alice).await.unwrap();
    other
        .subscribe("clients/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    assert_eq!(
        suback(&mut other_events).await,
        SubscribeReasonCode::NotAuthorized
    );
    // The dashboard sees client topics.
    let (sensor, mut sensor_events) = connect_raw(&server, "sensor-1", alice).await.unwrap();
    sensor
        .publish("clients/sensor-1/echo", QoS::AtLeastOnce, false, "hello")
        .await
        .unwrap();
    // (Polling sends it.)
    let _ = drain(&mut sensor_events, Duration::from_secs(1)).await;
    let seen = drain(&mut dash_events, Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(seen, ["clients/sensor-1/echo"]);

    // A client id prefix rule: sensor-1 may publish under sensors/, "other" may not.
    dash.subscribe("sensors/#", QoS::AtLeastOnce).await.unwrap();
    assert!(matches!(
        suback(&mut dash_events).await,
        SubscribeReasonCode::Success(_)
    ));
    sensor
        .publish("sensors/1/t", QoS::AtLeastOnce, false, "21.5")
        .await
        .unwrap();
    other
        .publish("sensors/2/t", QoS::AtLeastOnce, false, "99")
        .await
        .unwrap();
    let _ = drain(&mut sensor_events, Duration::from_secs(1)).await;
    let _ = drain(&mut other_events, Duration::from_secs(1)).await;
    let seen = drain(&mut dash_events, Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(seen, ["sensors/1/t"]);
    server.shutdown().await;

    // A rule file without authentication is a configuration error.
    let mut config = ServerConfig::default();
    config.security.rules_file = Some(pki.path("rules"));
    let err = LocalServer::start_with(config).await.unwrap_err();
    assert!(err.to_string().contains("needs authentication"), "{err}");
}

/// A rule's filter bounds the subscriptions it grants by MQTT wildcard semantics: a rule
/// `subscribe sensors/+` grants `sensors/+` and `sensors/t1`, not `sensors/#` (which would
/// also receive topics two levels deep).
#[tokio::test]
async fn a_single_level_rule_does_not_grant_a_multi_level_subscription() {
    let pki = Pki::new();
    set_password(&pki.path("passwd"), "reader", PASSWORD).unwrap();
    std::fs::write(pki.path("rules"), "user:reader subscribe sensors/+\n").unwrap();
    let server = start(SecurityConfig {
        password_file: Some(pki.path("passwd")),
        rules_file: Some(pki.path("rules")),
        ..SecurityConfig::default()
    })
    .await;
    let (reader, mut events) = connect_raw(&server, "reader-1", |o| {
        o.set_credentials("reader", PASSWORD);
    })
    .await
    .unwrap();
    for (filter, granted) in [
        ("sensors/+", true),
        ("sensors/t1", true),
        ("sensors/#", false),
        ("sensors/t1/x", false),
        ("#", false),
    ] {
        reader.subscribe(filter, QoS::AtLeastOnce).await.unwrap();
        let code = suback(&mut events).await;
        assert_eq!(
            matches!(code, SubscribeReasonCode::Success(_)),
            granted,
            "{filter}: {code:?}"
        );
    }
    server.shutdown().await;
}

/// The admission gate wraps the access control: while the gate is closed, the store's own
/// CONNECT (its client id, its internal user) passes at once, a client with good credentials
/// is held; once the gate opens, the held client is admitted and bad credentials are still
/// refused.
#[tokio::test]
async fn the_admission_gate_holds_clients_then_the_access_control_checks_them() {
    use mqstate_server::broker::{BrokerSecurity, EmbeddedBroker, EmbeddedBrokerConfig};
    use mqstate_server::security::{AccessControl, STORE_USER};
    use std::sync::Arc;

    let pki = Pki::new();
    let security = SecurityConfig {
        password_file: Some(pki.path("passwd")),
        ..SecurityConfig::default()
    };
    let store_password = "the store's own secret";
    let access = AccessControl::load(&security, store_password)
        .await
        .unwrap();
    let broker_security = BrokerSecurity {
        access: Some(Arc::new(access)),
        ..BrokerSecurity::default()
    };
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let config = EmbeddedBrokerConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        max_packet_size: 1 << 20,
    };
    let broker =
        EmbeddedBroker::start_secured(&config, &broker_security, tx, Some("the-store".into()))
            .await
            .unwrap();
    let port = broker.local_addr().port();
    let gate = broker.admission_gate().unwrap().clone();

    let held = tokio::spawn(connect_port(port, "alice-early", |o| {
        o.set_credentials("alice", PASSWORD);
    }));
    let store = connect_port(port, "the-store", |o| {
        o.set_credentials(STORE_USER, store_password);
    })
    .await;
    assert!(store.is_ok(), "the store's CONNECT: {:?}", store.err());
    // The store got its CONNACK while the gate is closed; alice is still waiting for hers.
    assert!(!gate.is_open());
    assert!(
        !held.is_finished(),
        "alice was admitted before the gate opened"
    );

    gate.open();
    let alice = held.await.unwrap();
    assert!(
        alice.is_ok(),
        "alice after the gate opened: {:?}",
        alice.err()
    );
    let refused = connect_port(port, "wrong", |o| {
        o.set_credentials("alice", "nope");
    })
    .await
    .err();
    assert_eq!(refused, Some(ConnectReturnCode::BadUserNamePassword));
    let refused = connect_port(port, "anonymous", |_| {}).await.err();
    assert_eq!(refused, Some(ConnectReturnCode::BadUserNamePassword));
    broker.shutdown().await;
}

/// Logins are bounded: password guesses from one address are slowed after five failures
/// (100 ms, doubling), a wrong user name costs what a wrong password costs (no user
/// enumeration by timing), and the checks run off the broker's async workers. The provider
/// is driven directly, with the real argon2 hashes of a password file, from made-up source
/// addresses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_are_throttled_per_address_and_unknown_users_cost_the_same() {
    use mqstate_server::security::AccessControl;
    use mqtt5::broker::auth::AuthProvider;
    use mqtt5::packet::connect::ConnectPacket;
    use std::net::{IpAddr, SocketAddr};
    use std::time::Instant;

    let pki = Pki::new();
    set_password(&pki.path("passwd"), "alice", PASSWORD).unwrap();
    let security = SecurityConfig {
        password_file: Some(pki.path("passwd")),
        ..SecurityConfig::default()
    };
    let access = AccessControl::load(&security, "store secret")
        .await
        .unwrap();
    let login = |user: &str, password: &str| ConnectPacket {
        protocol_version: 5,
        clean_start: true,
        keep_alive: 30,
        client_id: "c1".to_owned(),
        username: Some(user.to_owned()),
        password: Some(password.as_bytes().to_vec()),
        will: None,
        properties: mqtt5::Properties::default(),
        will_properties: mqtt5::Properties::default(),
    };
    let from = |last: u8| SocketAddr::new(IpAddr::from([10, 9, 8, last]), 40_000);

    // Unknown user vs wrong password, each from its own address (no throttling), measured in
    // back-to-back pairs so that the machine's load swings cancel: the median of the pairs'
    // ratios is within 20 % of 1.
    let mut ratios = Vec::new();
    for i in 0..11u8 {
        let mut took = [0f64; 2];
        for (slot, user, base) in [(0, "nobody", 1u8), (1, "alice", 101)] {
            let started = Instant::now();
            let result = access
                .authenticate(&login(user, "guess"), from(base + i))
                .await
                .unwrap();
            took[slot] = started.elapsed().as_secs_f64();
            assert!(!result.authenticated, "{user}");
        }
        ratios.push(took[0] / took[1]);
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    assert!(
        (median - 1.0).abs() <= 0.2,
        "unknown user / wrong password time, median of 11 pairs: {median:.3} ({ratios:.3?})"
    );

    // Guesses from one address: five free, then 100, 200, 400, 800 ms before each check.
    let guesser = from(200);
    let started = Instant::now();
    for _ in 0..5 {
        let r = access
            .authenticate(&login("alice", "guess"), guesser)
            .await
            .unwrap();
        assert!(!r.authenticated);
    }
    let free = started.elapsed();
    let started = Instant::now();
    for _ in 0..4 {
        let r = access
            .authenticate(&login("alice", "guess"), guesser)
            .await
            .unwrap();
        assert!(!r.authenticated);
    }
    let throttled = started.elapsed();
    // Sleeps never end early: a lower bound holds on any machine.
    assert!(
        throttled >= Duration::from_millis(100 + 200 + 400 + 800),
        "four throttled guesses took {throttled:?} (five free ones {free:?})"
    );
    // Another address is not slowed, and the right password still works from it.
    let r = access
        .authenticate(&login("alice", PASSWORD), from(201))
        .await
        .unwrap();
    assert!(r.authenticated);
}

/// One client cannot grow its subscriptions without bound: past the limit (1,000 by default)
/// each filter is refused with "quota exceeded", and 50,000 attempts do not slow the others
/// (their GET p50 stays within 2x of the baseline measured in this run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_per_client_are_limited_and_a_flood_does_not_slow_the_others() {
    use mqstate_server::security::DEFAULT_MAX_SUBSCRIPTIONS;
    use rumqttc::v5::mqttbytes::v5::Filter;

    let server = start(SecurityConfig::default()).await;
    let client = Client::connect(ConnectOptions::new(server.host(), server.port()))
        .await
        .unwrap();
    client.set("k", "v", Default::default()).await.unwrap();
    async fn get_p50(client: &Client) -> Duration {
        let mut times = Vec::with_capacity(200);
        for _ in 0..200 {
            let started = std::time::Instant::now();
            client.get("k").await.unwrap().unwrap();
            times.push(started.elapsed());
        }
        times.sort();
        times[times.len() / 2]
    }
    let baseline = get_p50(&client).await;

    let (flooder, mut events) = connect_raw(&server, "flooder", |_| {}).await.unwrap();
    let flood = tokio::spawn(async move {
        let (mut granted, mut refused) = (0usize, 0usize);
        for batch in 0..500 {
            let filters: Vec<Filter> = (0..100)
                .map(|i| Filter::new(format!("flood/{batch}/{i}"), QoS::AtMostOnce))
                .collect();
            flooder.subscribe_many(filters).await.unwrap();
            let codes = tokio::time::timeout(WAIT, async {
                loop {
                    if let Event::Incoming(Packet::SubAck(ack)) = events.poll().await.unwrap() {
                        return ack.return_codes;
                    }
                }
            })
            .await
            .expect("a SUBACK");
            for code in codes {
                match code {
                    SubscribeReasonCode::Success(_) => granted += 1,
                    SubscribeReasonCode::QuotaExceeded => refused += 1,
                    other => panic!("unexpected reason code {other:?}"),
                }
            }
        }
        (granted, refused)
    });
    // GETs for as long as the flood lasts.
    let mut during = Vec::new();
    while !flood.is_finished() || during.len() < 50 {
        let started = std::time::Instant::now();
        client.get("k").await.unwrap().unwrap();
        during.push(started.elapsed());
    }
    during.sort();
    let loaded = during[during.len() / 2];
    let (granted, refused) = flood.await.unwrap();
    assert_eq!(granted, DEFAULT_MAX_SUBSCRIPTIONS);
    assert_eq!(refused, 50_000 - DEFAULT_MAX_SUBSCRIPTIONS);
    assert!(
        loaded <= baseline * 2,
        "GET p50 {loaded:?} during the flood ({} GETs), {baseline:?} before",
        during.len()
    );
    client.close().await;
    server.shutdown().await;
}

/// A client id belongs to the identity that first connects with it: another user connecting
/// with alice's id is refused (and alice is neither disconnected nor locked out of her
/// session), the store's own id cannot be claimed by a user, and the id `statestore` (whose
/// topic tree holds every client's notifications) is refused to everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ids_belong_to_the_identity_that_holds_them() {
    let pki = Pki::new();
    set_password(&pki.path("passwd"), "bob", PASSWORD).unwrap();
    let server = LocalServer::start_with(ServerConfig {
        security: SecurityConfig {
            password_file: Some(pki.path("passwd")),
            ..SecurityConfig::default()
        },
        client_id: Some("the-store-id".to_owned()),
        ..ServerConfig::default()
    })
    .await
    .unwrap();
    let persistent = |o: &mut MqttOptions| {
        o.set_clean_start(false);
        o.set_session_expiry_interval(Some(3600));
    };
    // alice holds "shared" with a kept session.
    let (held, mut held_events) = connect_raw(&server, "shared", |o| {
        alice(o);
        persistent(o);
    })
    .await
    .unwrap();
    // bob, with his own good password, cannot take it over.
    let refused = connect_raw(&server, "shared", |o| {
        o.set_credentials("bob", PASSWORD);
        persistent(o);
    })
    .await;
    assert_eq!(refused.err(), Some(ConnectReturnCode::NotAuthorized));
    // alice is still connected, and gets her own notifications (nothing disturbed her).
    held.subscribe("clients/shared/x", QoS::AtLeastOnce)
        .await
        .unwrap();
    assert!(matches!(
        suback(&mut held_events).await,
        SubscribeReasonCode::Success(_)
    ));
    held.disconnect().await.unwrap();
    let _ = drain(&mut held_events, Duration::from_millis(300)).await;
    // She comes back to her session; bob still cannot.
    let back = connect_raw(&server, "shared", |o| {
        alice(o);
        persistent(o);
    })
    .await;
    assert!(back.is_ok(), "alice locked out: {:?}", back.err());
    let refused = connect_raw(&server, "shared", |o| {
        o.set_credentials("bob", PASSWORD);
    })
    .await;
    assert_eq!(refused.err(), Some(ConnectReturnCode::NotAuthorized));

    // The store's own client id is the store's: a user cannot claim it, and the store keeps
    // answering.
    let refused = connect_raw(&server, "the-store-id", |o| {
        alice(o);
        persistent(o);
    })
    .await;
    assert_eq!(refused.err(), Some(ConnectReturnCode::NotAuthorized));
    let client = Client::connect(
        ConnectOptions::new(server.host(), server.port()).with_credentials("bob", PASSWORD),
    )
    .await
    .unwrap();
    client.set("k", "v", SetOptions::default()).await.unwrap();
    assert_eq!(&client.get("k").await.unwrap().unwrap().value[..], b"v");

    // `statestore` is reserved.
    let refused = connect_raw(&server, "statestore", alice).await;
    assert_eq!(
        refused.err(),
        Some(ConnectReturnCode::ClientIdentifierNotValid)
    );
    client.close().await;
    server.shutdown().await;
}

/// docs/security.md, threat model: the hub's TLS listeners (devices with `--iothub-tls`,
/// HTTPS, AMQP) run each handshake on its own task with a timeout, so a silent socket on one
/// of them delays no other client and is dropped.
#[tokio::test]
async fn idle_sockets_on_the_hubs_tls_ports_do_not_stall_other_clients() {
    use mqstate_server::iothub::{DeviceTls, IotHubConfig, IotHubServer};
    use tokio::io::AsyncReadExt as _;
    let hub_server = IotHubServer::start(IotHubConfig {
        tls: DeviceTls::SelfSigned,
        ..IotHubConfig::default()
    })
    .await
    .unwrap();
    let hub = hub_server.hub();
    let endpoints = hub.endpoints();
    let ports = [
        ("devices", endpoints.device_endpoint.unwrap()),
        ("https", endpoints.https_endpoint.unwrap()),
        ("amqp", endpoints.amqp_endpoint.unwrap()),
    ];
    let connector = mqstate_testing::tls::connector(&hub.ca_certificate_pem().unwrap());
    let mut idle = Vec::new();
    for (_, addr) in ports {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let started = std::time::Instant::now();
    let mut handshakes = tokio::task::JoinSet::new();
    for (name, addr) in ports {
        for _ in 0..5 {
            let connector = connector.clone();
            handshakes.spawn(async move {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let localhost = mqstate_testing::tls::localhost();
                tokio::time::timeout(Duration::from_secs(5), connector.connect(localhost, tcp))
                    .await
                    .unwrap_or_else(|_| panic!("a TLS handshake on the {name} port stalled"))
                    .unwrap_or_else(|e| panic!("a TLS handshake on the {name} port failed: {e}"));
                started.elapsed()
            });
        }
    }
    let mut slowest = Duration::ZERO;
    while let Some(done) = handshakes.join_next().await {
        slowest = slowest.max(done.unwrap());
    }
    println!("15 TLS handshakes on the hub's ports within {slowest:?} beside idle sockets");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    for (socket, (name, _)) in idle.iter_mut().zip(ports) {
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(20), socket.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("the idle socket on the {name} port was not closed"));
        assert!(matches!(read, Ok(0) | Err(_)), "{name}: {read:?}");
    }
    hub_server.shutdown().await;
}

/// Each layer's error reaches `LocalServer::start_with` converted once, with its cause kept:
/// an unloadable TLS file (the broker's layer) and a malformed rule file (security's) are
/// configuration errors whose source is the loader's own error; an unreadable SAT file is an
/// I/O error whose source is the `io::Error`.
#[tokio::test]
async fn unusable_security_files_are_typed_errors_that_keep_their_cause() {
    use std::error::Error as _;
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let tls = ServerConfig {
        security: SecurityConfig {
            tls: Some(TlsSettings {
                cert: missing.clone(),
                key: missing.clone(),
                client_ca: None,
                port: 0,
            }),
            ..SecurityConfig::default()
        },
        ..ServerConfig::default()
    };
    let err = LocalServer::start_with(tls).await.unwrap_err();
    assert!(matches!(err, ServerError::Config(_)), "{err}");
    assert!(err.to_string().contains("missing.pem"), "{err}");
    let cause = err.source().and_then(|e| e.source());
    assert!(cause.is_some(), "no cause kept under {err}");

    let rules = dir.path().join("bad.acl");
    std::fs::write(&rules, "this is not a rule\n").unwrap();
    let passwd = dir.path().join("passwd");
    set_password(&passwd, "alice", "s3cret").unwrap();
    let config = ServerConfig {
        security: SecurityConfig {
            rules_file: Some(rules),
            password_file: Some(passwd),
            ..SecurityConfig::default()
        },
        ..ServerConfig::default()
    };
    let err = LocalServer::start_with(config).await.unwrap_err();
    assert!(matches!(err, ServerError::Config(_)), "{err}");
    assert!(err.to_string().contains("bad.acl"), "{err}");
    assert!(err.source().and_then(|e| e.source()).is_some(), "{err}");

    let config = ServerConfig {
        security: SecurityConfig {
            sat_file: Some(dir.path().join("no-such-sat.json")),
            ..SecurityConfig::default()
        },
        ..ServerConfig::default()
    };
    let err = LocalServer::start_with(config).await.unwrap_err();
    let io = err
        .source()
        .and_then(|e| e.downcast_ref::<std::io::Error>())
        .unwrap_or_else(|| panic!("not an I/O error underneath: {err:?}"));
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound, "{err}");
}
