//! The local hub's AMQP 1.0 service endpoint over TLS, with fe2o3-amqp as the client, doing
//! what the Node (`azure-iothub`) and Python (`azure-iot-hub`/`uamqp`) service SDKs do:
//! put-token on `$cbs`, C2D messages on `/messages/devicebound` with every property, the
//! rejections the SDKs turn into their errors, refused attaches, expiring tokens, and feedback
//! on `/messages/serviceBound/feedback` (completed, or released and received again).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Data, Message, MessageId, Outcome, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use mqstate_server::iothub::policies::service_token;
use mqstate_server::iothub::{Ack, DeviceSpec, FeedbackStatus, IotHub, IotHubConfig, IotHubServer};

use crate::common::hub::{amqp_tls, put_token_request};

async fn start(config: IotHubConfig) -> (IotHubServer, IotHub) {
    let server = IotHubServer::start(config).await.unwrap();
    let hub = server.hub();
    hub.add_device(&DeviceSpec::parse("dev1").unwrap()).unwrap();
    let spec = DeviceSpec {
        id: "dev:2".into(),
        primary_key: None,
        secondary_key: None,
    };
    hub.add_device(&spec).unwrap();
    (server, hub)
}

fn quick_config() -> IotHubConfig {
    IotHubConfig {
        max_queue_depth: 3,
        max_message_size: 1024,
        feedback_batch_interval: Duration::from_millis(200),
        ..IotHubConfig::default()
    }
}

/// A service token of `policy`, valid for `ttl`.
fn token(hub: &IotHub, policy: &str, ttl: Duration) -> String {
    let host = hub.config().hostname.clone();
    service_token(&host, &hub.policy(policy).unwrap(), SystemTime::now() + ttl).unwrap()
}

struct Client {
    connection: ConnectionHandle<()>,
    session: SessionHandle<()>,
}

impl Client {
    /// Connects over TLS (trusting the hub's certificate), with a SASL step (as uamqp) or
    /// without (as Node's rhea).
    async fn connect(hub: &IotHub, sasl: bool) -> Client {
        let tls = amqp_tls(hub).await;
        let builder = Connection::builder()
            .container_id("test-service")
            .hostname("localhost");
        let mut connection = if sasl {
            builder
                .sasl_profile(SaslProfile::Anonymous)
                .open_with_stream(tls)
                .await
                .unwrap()
        } else {
            builder.open_with_stream(tls).await.unwrap()
        };
        let session = Session::begin(&mut connection).await.unwrap();
        Client {
            connection,
            session,
        }
    }

    /// Puts `token` on `$cbs` as the SDKs do; returns the reply's status code and description.
    async fn put_token(&mut self, token: &str) -> (i32, String) {
        let mut requests = Sender::attach(&mut self.session, "cbs-sender", "$cbs")
            .await
            .unwrap();
        let mut replies = Receiver::attach(&mut self.session, "cbs-receiver", "$cbs")
            .await
            .unwrap();
        let request = put_token_request(token, MessageId::Ulong(42), "https://localhost");
        let outcome = requests.send(request).await.unwrap();
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
        let reply = tokio::time::timeout(Duration::from_secs(5), replies.recv::<Body<Value>>())
            .await
            .expect("a put-token reply")
            .unwrap();
        replies.accept(&reply).await.unwrap();
        let message = reply.message();
        let properties = message.properties.as_ref().unwrap();
        assert_eq!(properties.correlation_id, Some(MessageId::Ulong(42)));
        let app = &message.application_properties.as_ref().unwrap().0;
        let Some(SimpleValue::Int(status)) = app.get("status-code") else {
            panic!("status-code must be an int: {app:?}");
        };
        let Some(SimpleValue::String(description)) = app.get("status-description") else {
            panic!("no status-description: {app:?}");
        };
        let _ = requests.close().await;
        let _ = replies.close().await;
        (*status, description.clone())
    }

    async fn c2d_link(&mut self) -> Sender {
        Sender::attach(&mut self.session, "c2d", "/messages/devicebound")
            .await
            .unwrap()
    }

    async fn close(mut self) {
        let _ = self.session.end().await;
        let _ = self.connection.close().await;
    }
}

/// The condition a rejected send carried.
fn rejected(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Rejected(r) => {
            let e = r.error.as_ref().expect("an error on the rejection");
            format!(
                "{:?}|{}",
                e.condition,
                e.description.clone().unwrap_or_default()
            )
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

fn c2d(to: &str, body: &[u8]) -> Message<Data> {
    Message::builder()
        .properties(Properties::builder().to(to).build())
        .data(Data(Binary::from(body.to_vec())))
        .build()
}

/// The next feedback batch on `feedback`.
async fn receive(feedback: &mut Receiver) -> fe2o3_amqp::link::delivery::Delivery<Body<Value>> {
    tokio::time::timeout(Duration::from_secs(10), feedback.recv::<Body<Value>>())
        .await
        .expect("a feedback batch")
        .unwrap()
}

/// Waits for the hub to detach `sender` with an error; returns the error's debug form.
async fn detach_error(sender: &mut Sender) -> String {
    let e = tokio::time::timeout(Duration::from_secs(10), sender.on_detach())
        .await
        .expect("the hub detaches the link");
    format!("{e:?}")
}

#[tokio::test]
async fn c2d_message_with_every_property() {
    let (server, hub) = start(quick_config()).await;
    for sasl in [true, false] {
        hub.purge("dev1").unwrap();
        let mut client = Client::connect(&hub, sasl).await;
        let (status, description) = client
            .put_token(&token(&hub, "service", Duration::from_secs(3600)))
            .await;
        assert_eq!((status, description.as_str()), (200, "OK"));
        let mut link = client.c2d_link().await;
        let expiry = SystemTime::now() + Duration::from_secs(600);
        let expiry_ms = expiry.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
        let message = Message::builder()
            .properties(
                Properties::builder()
                    .to("/devices/dev1/messages/devicebound")
                    .message_id(String::from("m-1"))
                    .correlation_id(String::from("c-1"))
                    .user_id(Binary::from(b"svc".to_vec()))
                    .content_type(Symbol::from("application/json"))
                    .content_encoding(Symbol::from("utf-8"))
                    .absolute_expiry_time(Timestamp::from_milliseconds(expiry_ms))
                    .build(),
            )
            .application_properties(
                ApplicationProperties::builder()
                    .insert("iothub-ack", SimpleValue::String("full".into()))
                    .insert("color", SimpleValue::String("red".into()))
                    .build(),
            )
            .data(Data(Binary::from(b"{\"on\":true}".to_vec())))
            .build();
        let outcome = link.send(message).await.unwrap();
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
        let queue = hub.queue("dev1").unwrap();
        assert_eq!(queue.depth, 1);
        let m = &queue.messages[0];
        assert_eq!(m.message_id.as_deref(), Some("m-1"));
        assert_eq!(m.correlation_id.as_deref(), Some("c-1"));
        assert_eq!(m.ack, Ack::Full);
        let expected =
            humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(expiry_ms as u64))
                .to_string();
        assert_eq!(m.expiry_time_utc, expected);
        // A URL-encoded id (Node) names the device `dev:2`.
        let outcome = link
            .send(c2d("/devices/dev%3A2/messages/devicebound", b"x"))
            .await
            .unwrap();
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
        assert_eq!(hub.queue("dev:2").unwrap().depth, if sasl { 1 } else { 2 });
        let _ = link.close().await;
        client.close().await;
    }
    server.shutdown().await;
}

#[tokio::test]
async fn refused_sends_carry_iot_hub_conditions() {
    let (server, hub) = start(quick_config()).await;
    let mut client = Client::connect(&hub, true).await;
    assert_eq!(
        client
            .put_token(&token(&hub, "iothubowner", Duration::from_secs(3600)))
            .await
            .0,
        200
    );
    let mut link = client.c2d_link().await;
    let outcome = link
        .send(c2d("/devices/nobody/messages/devicebound", b"x"))
        .await
        .unwrap();
    assert!(
        rejected(&outcome).starts_with("AmqpError(NotFound)"),
        "{outcome:?}"
    );
    for _ in 0..3 {
        let outcome = link
            .send(c2d("/devices/dev1/messages/devicebound", b"x"))
            .await
            .unwrap();
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    }
    let outcome = link
        .send(c2d("/devices/dev1/messages/devicebound", b"x"))
        .await
        .unwrap();
    assert!(
        rejected(&outcome).starts_with("AmqpError(ResourceLimitExceeded)"),
        "{outcome:?}"
    );
    let outcome = link
        .send(c2d("/devices/dev:2/messages/devicebound", &[0u8; 2048]))
        .await
        .unwrap();
    assert!(
        rejected(&outcome).starts_with("LinkError(MessageSizeExceeded)"),
        "{outcome:?}"
    );
    let outcome = link.send(c2d("/elsewhere", b"x")).await.unwrap();
    assert!(rejected(&outcome).contains("argument-error"), "{outcome:?}");
    assert_eq!(hub.queue("dev1").unwrap().depth, 3);
    // An unknown node is refused with not-found.
    let mut unknown = Sender::attach(&mut client.session, "other", "/messages/events")
        .await
        .unwrap();
    assert!(detach_error(&mut unknown).await.contains("NotFound"));
    client.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn bad_tokens_and_rights_are_refused() {
    let (server, hub) = start(quick_config()).await;
    let mut client = Client::connect(&hub, true).await;
    // No put-token yet.
    let mut link = client.c2d_link().await;
    assert!(detach_error(&mut link).await.contains("UnauthorizedAccess"));
    // A wrong key.
    let mut forged = hub.policy("service").unwrap();
    forged.primary_key = mqstate_server::iothub::registry::generate_key().unwrap();
    let bad = service_token(
        "localhost",
        &forged,
        SystemTime::now() + Duration::from_secs(60),
    )
    .unwrap();
    let (status, description) = client.put_token(&bad).await;
    assert_eq!(status, 401, "{description}");
    assert!(description.contains("signature"), "{description}");
    // An expired token.
    let old = service_token(
        "localhost",
        &hub.policy("service").unwrap(),
        SystemTime::now() - Duration::from_secs(10),
    )
    .unwrap();
    let (status, description) = client.put_token(&old).await;
    assert_eq!(status, 401);
    assert!(description.contains("expired"), "{description}");
    // A policy without ServiceConnect.
    let (status, _) = client
        .put_token(&token(&hub, "registryRead", Duration::from_secs(60)))
        .await;
    assert_eq!(status, 200);
    let mut link = client.c2d_link().await;
    let refusal = detach_error(&mut link).await;
    assert!(
        refusal.contains("UnauthorizedAccess") && refusal.contains("ServiceConnect"),
        "{refusal}"
    );
    let mut feedback = Receiver::attach(
        &mut client.session,
        "feedback",
        "/messages/serviceBound/feedback",
    )
    .await
    .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), feedback.recv::<Body<Value>>())
        .await
        .expect("the hub detaches the feedback link")
        .unwrap_err();
    assert!(format!("{e:?}").contains("UnauthorizedAccess"), "{e:?}");
    client.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn links_close_when_the_token_expires_unless_renewed() {
    let (server, hub) = start(quick_config()).await;
    let mut client = Client::connect(&hub, false).await;
    assert_eq!(
        client
            .put_token(&token(&hub, "service", Duration::from_secs(3)))
            .await
            .0,
        200
    );
    let mut link = client.c2d_link().await;
    let outcome = link
        .send(c2d("/devices/dev1/messages/devicebound", b"x"))
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)));
    let refusal = detach_error(&mut link).await;
    assert!(
        refusal.contains("UnauthorizedAccess") && refusal.contains("expired"),
        "{refusal}"
    );
    // A renewal keeps the link.
    assert_eq!(
        client
            .put_token(&token(&hub, "service", Duration::from_secs(3)))
            .await
            .0,
        200
    );
    let mut link = Sender::attach(&mut client.session, "c2d-2", "/messages/devicebound")
        .await
        .unwrap();
    assert_eq!(
        client
            .put_token(&token(&hub, "service", Duration::from_secs(3600)))
            .await
            .0,
        200
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let outcome = link
        .send(c2d("/devices/dev1/messages/devicebound", b"y"))
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    client.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn feedback_is_received_completed_and_released() {
    let (server, hub) = start(quick_config()).await;
    let mut client = Client::connect(&hub, false).await;
    assert_eq!(
        client
            .put_token(&token(&hub, "service", Duration::from_secs(3600)))
            .await
            .0,
        200
    );
    let mut c2d_link = client.c2d_link().await;
    let mut message = c2d("/devices/dev1/messages/devicebound", b"x");
    message.properties.as_mut().unwrap().message_id = Some(MessageId::String("fb-1".into()));
    message.application_properties = Some(
        ApplicationProperties::builder()
            .insert("iothub-ack", SimpleValue::String("full".into()))
            .build(),
    );
    let outcome = c2d_link.send(message).await.unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)));
    assert_eq!(hub.purge("dev1").unwrap(), 1);

    let mut feedback = Receiver::attach(
        &mut client.session,
        "feedback",
        "/messages/serviceBound/feedback",
    )
    .await
    .unwrap();
    // Released: received again.
    let first = receive(&mut feedback).await;
    feedback.release(&first).await.unwrap();
    let again = receive(&mut feedback).await;
    let message = again.message();
    let properties = message.properties.as_ref().unwrap();
    assert_eq!(
        properties.content_type.as_ref().map(|s| s.0.as_str()),
        Some("application/vnd.microsoft.iothub.feedback.json")
    );
    assert_eq!(
        properties.user_id.as_ref().map(|b| b.to_vec()),
        Some(hub.hub_name().as_bytes().to_vec())
    );
    let Body::Data(sections) = &message.body else {
        panic!("the body is a data section: {:?}", message.body);
    };
    let json: Vec<u8> = sections.iter().flat_map(|d| d.0.iter().copied()).collect();
    let records: Vec<serde_json::Value> = serde_json::from_slice(&json).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["originalMessageId"], "fb-1");
    assert_eq!(records[0]["deviceId"], "dev1");
    assert_eq!(
        records[0]["statusCode"],
        serde_json::to_value(FeedbackStatus::Purged).unwrap()
    );
    // Accepted: completed, nothing more to receive (over AMQP or the admin API).
    feedback.accept(&again).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        hub.receive_feedback(Duration::from_millis(500))
            .await
            .is_none()
    );
    let nothing =
        tokio::time::timeout(Duration::from_millis(800), feedback.recv::<Body<Value>>()).await;
    assert!(nothing.is_err(), "no more feedback: {nothing:?}");
    let _ = feedback.close().await;
    let _ = c2d_link.close().await;
    client.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn garbage_closes_the_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (server, hub) = start(quick_config()).await;
    for bytes in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &b"AMQP\x00\x01\x00\x00\xff\xff\xff\xff\x02\x00\x00\x00garbage"[..],
        // An incomplete SASL frame: the handshake limit closes it.
        &b"AMQP\x03\x01\x00\x00\x00\x00\x00\x10\x02\x01\x00\x00\x00\x53\x41\x00"[..],
    ] {
        let began = std::time::Instant::now();
        let mut tls = amqp_tls(&hub).await;
        tls.write_all(bytes).await.unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(15), tls.read_to_end(&mut answer))
            .await
            .expect("the hub closes the connection");
        // Closed (a TLS close_notify or not), within the 10 s handshake limit for a stalled
        // SASL exchange.
        let _ = read;
        assert!(began.elapsed() < Duration::from_secs(12));
        assert!(answer.starts_with(b"AMQP"), "{answer:?}");
    }
    // The hub still serves.
    let mut client = Client::connect(&hub, true).await;
    let (status, _) = client
        .put_token(&token(&hub, "service", Duration::from_secs(60)))
        .await;
    assert_eq!(status, 200);
    client.close().await;
    server.shutdown().await;
}

// ----- a hostile peer: limits before and after authentication -----

#[tokio::test]
async fn a_put_token_whose_expiry_overflows_is_refused_and_the_next_one_answered() {
    let (server, hub) = start(quick_config()).await;
    let mut client = Client::connect(&hub, true).await;
    // This once killed the connection's $cbs task (an overflow adding the expiry to a time),
    // so that a valid put-token afterwards got no reply. No key is needed to send it.
    let forged =
        "SharedAccessSignature sr=localhost&sig=AAAA&se=9223372036854775808&skn=iothubowner";
    let (status, description) = client.put_token(forged).await;
    assert_eq!(status, 401, "{description}");
    assert!(description.contains("after the year 9999"), "{description}");
    let device =
        "SharedAccessSignature sr=localhost%2Fdevices%2Fdev1&sig=AAAA&se=18446744073709551615";
    let (status, description) = client.put_token(device).await;
    assert_eq!(status, 401, "{description}");
    let (status, description) = client
        .put_token(&token(&hub, "service", Duration::from_secs(60)))
        .await;
    assert_eq!(status, 200, "{description}");
    client.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn put_token_replies_nobody_reads_are_bounded() {
    let (server, hub) = start(quick_config()).await;
    let limit = hub.config().amqp_limits.max_pending_cbs_replies;
    let mut client = Client::connect(&hub, true).await;
    let mut requests = Sender::attach(&mut client.session, "cbs-sender", "$cbs")
        .await
        .unwrap();
    // 400 refused put-tokens of 15 KiB, and no receiver link for their replies: the hub keeps
    // `limit` replies, then closes the request link instead of keeping more.
    let bad = format!(
        "SharedAccessSignature sr={}&sig=AAAA&se=1",
        "x".repeat(15 * 1024)
    );
    let mut sent = 0;
    let mut failed = None;
    for _ in 0..400 {
        match requests
            .send(put_token_request(
                &bad,
                MessageId::Ulong(7),
                "https://localhost",
            ))
            .await
        {
            Ok(_) => sent += 1,
            Err(e) => {
                failed = Some(format!("{e:?}"));
                break;
            }
        }
    }
    // The hub's detach reaches either the send that failed or, if every send went out before
    // it came, the link.
    let refusal = match failed {
        Some(e) if e.contains("ResourceLimitExceeded") => e,
        _ => detach_error(&mut requests).await,
    };
    assert!(refusal.contains("ResourceLimitExceeded"), "{refusal}");
    assert!(
        sent <= limit + 1,
        "{sent} put-tokens were taken with nobody reading the replies"
    );
    // A reply link attached now gets the replies kept, and no more.
    let mut replies = Receiver::attach(&mut client.session, "late-replies", "$cbs")
        .await
        .unwrap();
    let mut kept = 0;
    while let Ok(Ok(reply)) =
        tokio::time::timeout(Duration::from_millis(500), replies.recv::<Body<Value>>()).await
    {
        replies.accept(&reply).await.unwrap();
        kept += 1;
    }
    assert_eq!(kept, limit);
    let _ = replies.close().await;
    // And the connection goes on: a new request link is answered.
    let (status, description) = client
        .put_token(&token(&hub, "service", Duration::from_secs(60)))
        .await;
    assert_eq!(status, 200, "{description}");
    client.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn links_past_the_limit_are_refused_while_another_client_works() {
    let (server, hub) = start(quick_config()).await;
    let max = hub.config().amqp_limits.max_links_per_session;
    let mut flood = Client::connect(&hub, true).await;
    // Authenticated, so that the flood is not cut short by the time a connection has to put
    // its first token.
    let (status, _) = flood
        .put_token(&token(&hub, "service", Duration::from_secs(3600)))
        .await;
    assert_eq!(status, 200);
    // MQSTATE_AMQP_LINK_FLOOD=20000 for the full attack; 2,000 keep the suite quick.
    let attempts: usize = std::env::var("MQSTATE_AMQP_LINK_FLOOD")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let (mut kept, mut refused) = (Vec::new(), 0usize);
    for n in 0..attempts {
        let attached = Sender::attach(&mut flood.session, format!("flood-{n}"), "$cbs").await;
        match attached {
            Ok(mut link) => {
                // A refused link is attached, then detached with the reason; one the hub
                // keeps is not (a short wait is enough to tell, until the limit is reached).
                let wait = if kept.len() < max { 100 } else { 10_000 };
                let detached =
                    tokio::time::timeout(Duration::from_millis(wait), link.on_detach()).await;
                match detached {
                    Err(_) => kept.push(link),
                    Ok(e) => {
                        let e = format!("{e:?}");
                        assert!(e.contains("ResourceLimitExceeded"), "{e}");
                        // Answers the hub's detach, as a client does.
                        let _ = link.close().await;
                        refused += 1;
                    }
                }
            }
            Err(e) => {
                assert!(format!("{e:?}").contains("ResourceLimitExceeded"), "{e:?}");
                refused += 1;
            }
        }
    }
    assert_eq!(kept.len(), max, "links kept on one session");
    assert_eq!(refused, attempts - max);
    // Another client is served all along.
    let mut other = Client::connect(&hub, false).await;
    let (status, _) = other
        .put_token(&token(&hub, "service", Duration::from_secs(60)))
        .await;
    assert_eq!(status, 200);
    let mut link = other.c2d_link().await;
    let outcome = link
        .send(c2d("/devices/dev1/messages/devicebound", b"hi"))
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    // A link freed on the flooded session makes room for one more.
    let link = kept.pop().unwrap();
    link.close().await.unwrap();
    let mut again = Sender::attach(&mut flood.session, "after", "$cbs")
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), again.on_detach())
            .await
            .is_err()
    );
    other.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn sessions_past_the_limit_close_the_connection() {
    use tokio::io::AsyncWriteExt;
    let mut config = quick_config();
    config.amqp_limits.max_sessions = 3;
    let (server, hub) = start(config).await;
    // fe2o3-amqp's client keeps to the channel-max the hub's Open gives (max_sessions - 1); a
    // hostile peer does not: it begins sessions on channels 0, 1, 2... each after the hub
    // answered the last.
    let mut stream = raw::open(amqp_tls(&hub).await).await;
    let mut seen = Vec::new();
    let mut refused = false;
    let begins = |s: &[u8]| s.windows(3).filter(|w| w == &[0x00, 0x53, 0x11]).count();
    for channel in 0..6u16 {
        stream
            .write_all(&raw::frame(channel, &raw::begin(), &[]))
            .await
            .unwrap();
        raw::read_until(&mut stream, &mut seen, Duration::from_secs(10), |s| {
            begins(s) > usize::from(channel) || raw::contains(s, b"amqp:")
        })
        .await;
        // The Close performative (descriptor 0x18) with its error.
        if raw::contains(&seen, &[0x00, 0x53, 0x18]) {
            refused = true;
            break;
        }
    }
    assert!(refused, "{:?}", String::from_utf8_lossy(&seen));
    // Three Begins answered, the fourth refused by closing the connection (fe2o3-amqp takes no
    // Begin past the channel-max the hub's Open gave, and says `amqp:not-implemented`).
    assert_eq!(begins(&seen), 3, "sessions begun before the refusal");
    server.shutdown().await;
}

#[tokio::test]
async fn a_connection_without_a_put_token_is_closed_after_the_auth_timeout() {
    let mut config = quick_config();
    config.amqp_limits.auth_timeout = Duration::from_secs(1);
    let (server, hub) = start(config).await;
    let mut idle = Client::connect(&hub, true).await;
    let mut authenticated = Client::connect(&hub, false).await;
    let (status, _) = authenticated
        .put_token(&token(&hub, "service", Duration::from_secs(60)))
        .await;
    assert_eq!(status, 200);
    let closed = tokio::time::timeout(Duration::from_secs(5), idle.connection.on_close())
        .await
        .expect("the hub closes the silent connection");
    assert!(
        format!("{closed:?}").contains("UnauthorizedAccess"),
        "{closed:?}"
    );
    // The authenticated one stays open past the deadline.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut link = authenticated.c2d_link().await;
    let outcome = link
        .send(c2d("/devices/dev1/messages/devicebound", b"hi"))
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    authenticated.close().await;
    server.shutdown().await;
}

/// A peer that writes AMQP frames itself, to send what fe2o3-amqp's client never sends.
mod raw {
    use fe2o3_amqp::types::definitions::{ReceiverSettleMode, Role, SenderSettleMode};
    use fe2o3_amqp::types::messaging::{Source, Target, TargetArchetype};
    use fe2o3_amqp::types::performatives::{Attach, Begin, Open, Transfer};
    use fe2o3_amqp::types::primitives::Binary;
    use serde::Serialize;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    pub type Stream = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

    /// One frame: size, data offset 2, type 0 (AMQP), channel, performative, payload.
    pub fn frame(channel: u16, performative: &impl Serialize, payload: &[u8]) -> Vec<u8> {
        let body = serde_amqp::to_vec(performative).unwrap();
        let size = u32::try_from(8 + body.len() + payload.len()).unwrap();
        let mut out = Vec::with_capacity(size as usize);
        out.extend(size.to_be_bytes());
        out.extend([2, 0]);
        out.extend(channel.to_be_bytes());
        out.extend(body);
        out.extend(payload);
        out
    }

    /// Reads what the hub sends until `done` holds for all of it or `limit` passes.
    pub async fn read_until(
        stream: &mut Stream,
        seen: &mut Vec<u8>,
        limit: std::time::Duration,
        done: impl Fn(&[u8]) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        let mut buf = [0u8; 16 * 1024];
        while !done(seen) {
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buf[..n]),
                _ => return done(seen),
            }
        }
        true
    }

    pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    /// Opens a connection (no SASL) and waits for the hub's Open.
    pub async fn open(mut stream: Stream) -> Stream {
        stream.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
        let open = Open {
            container_id: "hostile".into(),
            hostname: Some("localhost".into()),
            max_frame_size: 65_536.into(),
            channel_max: u16::MAX.into(),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        stream.write_all(&frame(0, &open, &[])).await.unwrap();
        let mut seen = Vec::new();
        // The hub's Open (descriptor 0x10).
        let ok = read_until(
            &mut stream,
            &mut seen,
            std::time::Duration::from_secs(10),
            |s| contains(s, &[0x00, 0x53, 0x10]),
        )
        .await;
        assert!(ok, "no Open from the hub: {seen:?}");
        stream
    }

    pub fn begin() -> Begin {
        Begin {
            remote_channel: None,
            next_outgoing_id: 0,
            incoming_window: 2048,
            outgoing_window: u32::MAX,
            handle_max: 1.into(),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }
    }

    /// Opens a connection (no SASL), begins a session and attaches a sender link to
    /// `address`, then waits for the hub's attach and credit.
    pub async fn sender(stream: Stream, address: &str) -> Stream {
        let mut stream = open(stream).await;
        let attach = Attach {
            name: "hostile".into(),
            handle: 0.into(),
            role: Role::Sender,
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: Some(Box::new(Source::builder().address("hostile").build())),
            target: Some(Box::new(TargetArchetype::Target(
                Target::builder().address(address).build(),
            ))),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: Some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        let mut out = frame(0, &begin(), &[]);
        out.extend(frame(0, &attach, &[]));
        stream.write_all(&out).await.unwrap();
        let mut seen = Vec::new();
        // The hub's flow frame (descriptor 0x13) gives the link its credit.
        let ok = read_until(
            &mut stream,
            &mut seen,
            std::time::Duration::from_secs(10),
            |s| contains(s, &[0x00, 0x53, 0x13]),
        )
        .await;
        assert!(ok, "no credit for the link: {seen:?}");
        stream
    }

    /// A transfer frame of a delivery that is never finished (`more` = true).
    pub fn unfinished(payload: &[u8]) -> Vec<u8> {
        let transfer = Transfer {
            handle: 0.into(),
            delivery_id: Some(0),
            delivery_tag: Some(Binary::from(vec![1u8])),
            message_format: Some(0),
            settled: Some(false),
            more: true,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
        frame(0, &transfer, payload)
    }
}

/// This process's resident memory, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_delivery_is_refused_at_the_links_size() {
    // It measures this process's memory: other tests must not allocate in it meanwhile.
    run_alone!(an_unfinished_delivery_is_refused_at_the_links_size);
    use tokio::io::AsyncWriteExt;
    let (server, hub) = start(quick_config()).await;
    let stream = raw::sender(amqp_tls(&hub).await, "$cbs").await;
    let (mut read, mut write) = tokio::io::split(stream);
    // Before any token: one delivery of 96 MiB on $cbs, in frames with `more` set, never
    // finished. It once was buffered whole (RSS +98 MiB).
    let before = rss();
    let writer = tokio::spawn(async move {
        let chunk = raw::unfinished(&vec![b'x'; 60 * 1024]);
        let mut sent = 0usize;
        while sent < 96 * 1024 * 1024 {
            if write.write_all(&chunk).await.is_err() {
                break;
            }
            sent += 60 * 1024;
        }
        sent
    });
    let mut seen = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let refused = loop {
        use tokio::io::AsyncReadExt;
        match tokio::time::timeout(Duration::from_secs(30), read.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                seen.extend_from_slice(&buf[..n]);
                if raw::contains(&seen, b"amqp:link:message-size-exceeded") {
                    break true;
                }
            }
            _ => break false,
        }
    };
    let grown = rss().saturating_sub(before);
    eprintln!("RSS grew by {grown} bytes while the peer sent its unfinished delivery");
    writer.abort();
    assert!(
        refused,
        "the link was not detached for its size: {:?}",
        String::from_utf8_lossy(&seen)
    );
    // The documented size is in the reason.
    assert!(
        raw::contains(&seen, b"16384"),
        "{:?}",
        String::from_utf8_lossy(&seen)
    );
    // Far below what was sent (a loose bound: the process also holds the hub, its TLS and a
    // client).
    assert!(grown < 16 * 1024 * 1024, "RSS grew by {grown} bytes");
    // Other clients are served.
    let mut client = Client::connect(&hub, true).await;
    let (status, _) = client
        .put_token(&token(&hub, "service", Duration::from_secs(60)))
        .await;
    assert_eq!(status, 200);
    client.close().await;
    server.shutdown().await;
}
