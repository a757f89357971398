//! IoT Hub's REST registry API on the local hub, over HTTPS with a real HTTP client, sending
//! what the Node (`azure-iothub` `Registry`) and Python (`azure-iot-hub`
//! `IoTHubRegistryManager`) service SDKs send: create, get, update with the right and a stale
//! ETag, list, delete, purge, statistics, the error bodies the SDKs turn into their errors,
//! service token checks, and durability (old device records still load).

use std::time::{Duration, SystemTime};

use hyper::{HeaderMap, Method, StatusCode};
use mqstate_server::iothub::policies::{SharedAccessPolicy, service_token};
use mqstate_server::iothub::registry::generate_key;
use mqstate_server::iothub::{C2dMessage, HUB_FILE, IotHub, IotHubConfig, IotHubServer};
use serde_json::{Value, json};

use crate::common::hub::{self, API, Https, KEY1, KEY2};
use crate::common::logs;

/// An HTTPS client of the hub's REST API that trusts the hub's generated certificate.
struct Rest {
    https: Https,
    hub: IotHub,
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Reply {
    fn error_code(&self) -> String {
        hub::error_code(&self.body)
    }
}

impl Rest {
    fn new(hub: &IotHub) -> Rest {
        Rest {
            https: Https::new(hub),
            hub: hub.clone(),
        }
    }

    /// A token of the named policy, valid for an hour.
    fn token(&self, policy: &str) -> String {
        sign(
            &self.hub.policy(policy).unwrap(),
            SystemTime::now() + Duration::from_secs(3600),
        )
    }

    /// A call as the service SDKs make it: a `Request-Id`, the token, an ETag to match, and a
    /// JSON body.
    async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        authorization: Option<&str>,
        if_match: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut headers = vec![("Request-Id", "0000")];
        if let Some(auth) = authorization {
            headers.push(("Authorization", auth));
        }
        if let Some(etag) = if_match {
            headers.push(("If-Match", etag));
        }
        let payload = match body {
            Some(b) => {
                headers.push(("Content-Type", "application/json; charset=utf-8"));
                b.to_string()
            }
            None => String::new(),
        };
        let reply = self
            .https
            .call(method, path_and_query, &headers, payload.as_bytes())
            .await;
        let body = if reply.body.is_empty() {
            Value::Null
        } else {
            reply.json()
        };
        Reply {
            status: reply.status,
            headers: reply.headers,
            body,
        }
    }
}

fn sign(policy: &SharedAccessPolicy, expiry: SystemTime) -> String {
    service_token("localhost", policy, expiry).unwrap()
}

fn config() -> IotHubConfig {
    IotHubConfig {
        admin_port: None,
        amqp_port: None,
        ..IotHubConfig::default()
    }
}

/// What Python's `create_device_with_sas(id, KEY1, KEY2, "enabled")` sends.
fn python_create(id: &str) -> Value {
    json!({
        "deviceId": id,
        "status": "enabled",
        "authentication": {
            "symmetricKey": { "primaryKey": KEY1, "secondaryKey": KEY2 },
            "type": "sas",
        },
        "capabilities": { "iotEdge": false },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_registry_calls_work_as_on_iot_hub() {
    let server = IotHubServer::start(config()).await.unwrap();
    let hub = server.hub();
    let rest = Rest::new(&hub);
    let owner = rest.token("iothubowner");
    let auth = Some(owner.as_str());
    // An id with characters the SDKs percent-encode (encodeURIComponent).
    let id = "dev:1@site";
    let path = format!("/devices/dev%3A1%40site?{API}");

    // Create (Python: 200 expected, keys given).
    let created = rest
        .call(Method::PUT, &path, auth, None, Some(python_create(id)))
        .await;
    assert_eq!(created.status, StatusCode::OK, "{}", created.body);
    let d = &created.body;
    assert_eq!(d["deviceId"], id);
    assert_eq!(d["status"], "enabled");
    assert_eq!(d["connectionState"], "Disconnected");
    assert_eq!(d["cloudToDeviceMessageCount"], 0);
    assert_eq!(d["authentication"]["type"], "sas");
    assert_eq!(d["authentication"]["symmetricKey"]["primaryKey"], KEY1);
    assert_eq!(d["authentication"]["symmetricKey"]["secondaryKey"], KEY2);
    assert_eq!(d["capabilities"]["iotEdge"], false);
    assert_eq!(d["lastActivityTime"], "0001-01-01T00:00:00Z");
    assert!(d["generationId"].as_str().is_some_and(|g| !g.is_empty()));
    let etag1 = d["etag"].as_str().unwrap().to_owned();
    assert_eq!(
        created.headers[hyper::header::ETAG].to_str().unwrap(),
        format!("\"{etag1}\"")
    );
    assert_eq!(hub.device(id).unwrap().primary_key, KEY1);

    // Again: 409 DeviceAlreadyExists (Node: DeviceAlreadyExistsError).
    let again = rest
        .call(Method::PUT, &path, auth, None, Some(python_create(id)))
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert_eq!(again.error_code(), "DeviceAlreadyExists");
    assert_eq!(again.headers["iothub-errorcode"], "DeviceAlreadyExists");
    assert!(
        again.body["ExceptionMessage"]
            .as_str()
            .unwrap()
            .starts_with("Tracking ID:")
    );

    // Node's `create` without authentication: keys generated.
    let node = rest
        .call(
            Method::PUT,
            &format!("/devices/node1?{API}"),
            auth,
            None,
            Some(
                json!({"deviceId": "node1", "authentication": {"type": "sas",
                "symmetricKey": {"primaryKey": "", "secondaryKey": ""}}}),
            ),
        )
        .await;
    assert_eq!(node.status, StatusCode::OK, "{}", node.body);
    let generated = node.body["authentication"]["symmetricKey"]["primaryKey"]
        .as_str()
        .unwrap();
    assert_eq!(generated, hub.device("node1").unwrap().primary_key);

    // Get.
    let got = rest.call(Method::GET, &path, auth, None, None).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body["etag"], etag1.as_str());

    // Update with the right ETag (Python sends it quoted): a new ETag; keys not given kept.
    let mut disable = python_create(id);
    disable["status"] = json!("disabled");
    disable["statusReason"] = json!("maintenance");
    disable["authentication"]["symmetricKey"] = json!({});
    let quoted1 = format!("\"{etag1}\"");
    let updated = rest
        .call(
            Method::PUT,
            &path,
            auth,
            Some(&quoted1),
            Some(disable.clone()),
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.body);
    assert_eq!(updated.body["status"], "disabled");
    assert_eq!(updated.body["statusReason"], "maintenance");
    assert_ne!(updated.body["statusUpdatedTime"], "0001-01-01T00:00:00Z");
    assert_eq!(
        updated.body["authentication"]["symmetricKey"]["primaryKey"],
        KEY1
    );
    let etag2 = updated.body["etag"].as_str().unwrap().to_owned();
    assert_ne!(etag2, etag1);

    // With the stale ETag: 412 (Node: InvalidEtagError), nothing changed.
    let stale = rest
        .call(
            Method::PUT,
            &path,
            auth,
            Some(&quoted1),
            Some(python_create(id)),
        )
        .await;
    assert_eq!(stale.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(stale.error_code(), "PreconditionFailed");
    assert_eq!(hub.device(id).unwrap().etag, etag2);

    // Node's `update` sends If-Match: "*" (quoted).
    let forced = rest
        .call(
            Method::PUT,
            &path,
            auth,
            Some("\"*\""),
            Some(python_create(id)),
        )
        .await;
    assert_eq!(forced.status, StatusCode::OK);
    assert_eq!(forced.body["status"], "enabled");
    let etag3 = forced.body["etag"].as_str().unwrap().to_owned();

    // Updating a device that does not exist: 404 DeviceNotFound.
    let missing = rest
        .call(
            Method::PUT,
            &format!("/devices/nobody?{API}"),
            auth,
            Some("\"*\""),
            Some(json!({"deviceId": "nobody"})),
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.error_code(), "DeviceNotFound");

    // A body for another device: 400.
    let other = rest
        .call(
            Method::PUT,
            &format!("/devices/x?{API}"),
            auth,
            None,
            Some(python_create("y")),
        )
        .await;
    assert_eq!(other.status, StatusCode::BAD_REQUEST);
    assert_eq!(other.error_code(), "ArgumentInvalid");

    // List, and `top`.
    let all = rest
        .call(Method::GET, &format!("/devices?{API}"), auth, None, None)
        .await;
    assert_eq!(all.status, StatusCode::OK);
    let ids: Vec<&str> = all
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["deviceId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id, "node1"]);
    // Node lists `/devices/` (with the slash).
    let node_list = rest
        .call(Method::GET, &format!("/devices/?{API}"), auth, None, None)
        .await;
    assert_eq!(node_list.body, all.body);
    let top = rest
        .call(
            Method::GET,
            &format!("/devices?top=1&{API}"),
            auth,
            None,
            None,
        )
        .await;
    assert_eq!(top.body.as_array().unwrap().len(), 1);

    // Statistics.
    let stats = rest
        .call(
            Method::GET,
            &format!("/statistics/devices?{API}"),
            auth,
            None,
            None,
        )
        .await;
    assert_eq!(
        stats.body,
        json!({"totalDeviceCount": 2, "enabledDeviceCount": 2, "disabledDeviceCount": 0})
    );
    let service = rest
        .call(
            Method::GET,
            &format!("/statistics/service?{API}"),
            auth,
            None,
            None,
        )
        .await;
    assert_eq!(service.body, json!({"connectedDeviceCount": 0}));

    // Purge (`DELETE /devices/{id}/commands`), seen in the device's message count first.
    for n in 0..2 {
        hub.send(id, C2dMessage::new("x").message_id(format!("m{n}")))
            .unwrap();
    }
    let got = rest.call(Method::GET, &path, auth, None, None).await;
    assert_eq!(got.body["cloudToDeviceMessageCount"], 2);
    let purged = rest
        .call(
            Method::DELETE,
            &format!("/devices/dev%3A1%40site/commands?{API}"),
            auth,
            None,
            None,
        )
        .await;
    assert_eq!(purged.status, StatusCode::OK);
    assert_eq!(purged.body["deviceId"], id);
    assert_eq!(purged.body["totalMessagesPurged"], 2);
    assert_eq!(hub.queue(id).unwrap().depth, 0);
    let purge_missing = rest
        .call(
            Method::DELETE,
            &format!("/devices/nobody/commands?{API}"),
            auth,
            None,
            None,
        )
        .await;
    assert_eq!(purge_missing.status, StatusCode::NOT_FOUND);
    assert_eq!(purge_missing.error_code(), "DeviceNotFound");

    // Delete with a stale ETag: 412; with the current one: 204; then 404 DeviceNotFound.
    let stale = rest
        .call(Method::DELETE, &path, auth, Some(&quoted1), None)
        .await;
    assert_eq!(stale.status, StatusCode::PRECONDITION_FAILED);
    assert!(hub.device(id).is_ok());
    let deleted = rest
        .call(
            Method::DELETE,
            &path,
            auth,
            Some(&format!("\"{etag3}\"")),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert!(hub.device(id).is_err());
    let gone = rest.call(Method::GET, &path, auth, None, None).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(gone.error_code(), "DeviceNotFound");
    let gone = rest
        .call(Method::DELETE, &path, auth, Some("\"*\""), None)
        .await;
    assert_eq!(gone.error_code(), "DeviceNotFound");

    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_get_iot_hubs_401() {
    let server = IotHubServer::start(config()).await.unwrap();
    let hub = server.hub();
    let rest = Rest::new(&hub);
    hub.add_device(&mqstate_server::iothub::DeviceSpec::parse("d").unwrap())
        .unwrap();
    let get = format!("/devices/d?{API}");
    let owner = hub.policy("iothubowner").unwrap();

    let mut wrong_key = owner.clone();
    wrong_key.primary_key = generate_key().unwrap();
    let mut unknown = owner.clone();
    unknown.key_name = "nobody".into();
    let refused: Vec<(&str, Option<String>)> = vec![
        ("no token", None),
        (
            "wrong key",
            Some(sign(
                &wrong_key,
                SystemTime::now() + Duration::from_secs(60),
            )),
        ),
        (
            "expired",
            Some(sign(&owner, SystemTime::now() - Duration::from_secs(60))),
        ),
        (
            "unknown policy",
            Some(sign(&unknown, SystemTime::now() + Duration::from_secs(60))),
        ),
        (
            "service cannot read the registry",
            Some(rest.token("service")),
        ),
    ];
    for (why, token) in refused {
        let reply = rest
            .call(Method::GET, &get, token.as_deref(), None, None)
            .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{why}");
        assert_eq!(
            reply.body["Message"], "ErrorCode:IotHubUnauthorizedAccess;Unauthorized",
            "{why}"
        );
        assert_eq!(
            reply.headers["iothub-errorcode"],
            "IotHubUnauthorizedAccess"
        );
    }

    // Rights: RegistryRead reads but does not write; RegistryWrite does not purge.
    let read = rest.token("registryRead");
    assert_eq!(
        rest.call(Method::GET, &get, Some(&read), None, None)
            .await
            .status,
        StatusCode::OK
    );
    let write = rest
        .call(
            Method::PUT,
            &format!("/devices/e?{API}"),
            Some(&read),
            None,
            Some(python_create("e")),
        )
        .await;
    assert_eq!(write.status, StatusCode::UNAUTHORIZED);
    assert!(hub.device("e").is_err());
    let delete = rest
        .call(Method::DELETE, &get, Some(&read), Some("*"), None)
        .await;
    assert_eq!(delete.status, StatusCode::UNAUTHORIZED);
    let read_write = rest.token("registryReadWrite");
    let purge = rest
        .call(
            Method::DELETE,
            &format!("/devices/d/commands?{API}"),
            Some(&read_write),
            None,
            None,
        )
        .await;
    assert_eq!(purge.status, StatusCode::UNAUTHORIZED);
    let service = rest.token("service");
    let purge = rest
        .call(
            Method::DELETE,
            &format!("/devices/d/commands?{API}"),
            Some(&service),
            None,
            None,
        )
        .await;
    assert_eq!(purge.status, StatusCode::OK);

    // Authenticated but no api-version: 400 InvalidProtocolVersion.
    let owner_token = rest.token("iothubowner");
    let reply = rest
        .call(Method::GET, "/devices/d", Some(&owner_token), None, None)
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error_code(), "InvalidProtocolVersion");

    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_changes_are_durable_and_old_records_load() {
    let tmp = tempfile::tempdir().unwrap();
    let durable = || IotHubConfig {
        data_dir: Some(tmp.path().to_owned()),
        ..config()
    };
    // A hub file, then its device record replaced by one as earlier versions wrote it (no
    // etag, status or capabilities).
    let server = IotHubServer::start(durable()).await.unwrap();
    let hub = server.hub();
    hub.add_device(&mqstate_server::iothub::DeviceSpec::parse("old").unwrap())
        .unwrap();
    hub.persisted().await.unwrap();
    drop(hub);
    server.shutdown().await;
    {
        let db = redb::Database::create(tmp.path().join(HUB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let devices: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("devices");
            let old = json!({"deviceId": "old", "generationId": "638000000000000000",
                "primaryKey": KEY1, "secondaryKey": KEY2})
            .to_string();
            txn.open_table(devices)
                .unwrap()
                .insert("old", old.as_bytes())
                .unwrap();
        }
        txn.commit().unwrap();
    }

    let server = IotHubServer::start(durable()).await.unwrap();
    let hub = server.hub();
    let rest = Rest::new(&hub);
    let owner = rest.token("iothubowner");
    let path = format!("/devices/old?{API}");
    let got = rest
        .call(Method::GET, &path, Some(&owner), None, None)
        .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    assert_eq!(got.body["status"], "enabled");
    assert_eq!(got.body["generationId"], "638000000000000000");
    assert_eq!(
        got.body["authentication"]["symmetricKey"]["primaryKey"],
        KEY1
    );
    let etag = got.body["etag"].as_str().unwrap().to_owned();
    assert!(!etag.is_empty());

    // Changes over REST are on disk when acknowledged: kill-free restart shows them.
    let mut body = python_create("old");
    body["status"] = json!("disabled");
    let updated = rest
        .call(
            Method::PUT,
            &path,
            Some(&owner),
            Some(&format!("\"{etag}\"")),
            Some(body),
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.body);
    let etag2 = updated.body["etag"].as_str().unwrap().to_owned();
    let created = rest
        .call(
            Method::PUT,
            &format!("/devices/new?{API}"),
            Some(&owner),
            None,
            Some(python_create("new")),
        )
        .await;
    assert_eq!(created.status, StatusCode::OK);
    drop((rest, hub));
    server.shutdown().await;

    let server = IotHubServer::start(durable()).await.unwrap();
    let hub = server.hub();
    let old = hub.device("old").unwrap();
    assert_eq!(old.etag, etag2);
    assert_eq!(
        old.status,
        mqstate_server::iothub::registry::DeviceStatus::Disabled
    );
    assert_eq!(hub.device("new").unwrap().primary_key, KEY1);
    let rest = Rest::new(&hub);
    let owner = rest.token("iothubowner");
    let deleted = rest
        .call(
            Method::DELETE,
            &format!("/devices/new?{API}"),
            Some(&owner),
            Some("\"*\""),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    drop((rest, hub));
    server.shutdown().await;
    let server = IotHubServer::start(durable()).await.unwrap();
    assert!(server.hub().device("new").is_err());
    server.shutdown().await;
}

/// An MQTT connection of device `id` (plain TCP device endpoint): the result of its CONNECT,
/// and the event loop to watch for the connection's end.
async fn mqtt_connect(
    hub: &IotHub,
    id: &str,
) -> (
    Result<rumqttc::Event, rumqttc::ConnectionError>,
    rumqttc::EventLoop,
) {
    let addr = hub.endpoints().device_endpoint.unwrap();
    let mut options = rumqttc::MqttOptions::new(id, addr.ip().to_string(), addr.port());
    let token = hub.device_token(id, Duration::from_secs(3600)).unwrap();
    options.set_credentials(hub.device_username(id), token);
    let (_client, mut eventloop) = rumqttc::AsyncClient::new(options, 8);
    let first = tokio::time::timeout(Duration::from_secs(10), eventloop.poll())
        .await
        .expect("no CONNACK");
    (first, eventloop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_state_and_disabling_follow_iot_hub() {
    let server = IotHubServer::start(config()).await.unwrap();
    let hub = server.hub();
    let rest = Rest::new(&hub);
    let owner = rest.token("iothubowner");
    let path = format!("/devices/d?{API}");
    let created = rest
        .call(
            Method::PUT,
            &path,
            Some(&owner),
            None,
            Some(python_create("d")),
        )
        .await;
    assert_eq!(created.status, StatusCode::OK);

    let (first, mut eventloop) = mqtt_connect(&hub, "d").await;
    assert!(
        matches!(
            first,
            Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_)))
        ),
        "{first:?}"
    );
    let got = rest
        .call(Method::GET, &path, Some(&owner), None, None)
        .await;
    assert_eq!(got.body["connectionState"], "Connected");
    assert_ne!(
        got.body["connectionStateUpdatedTime"],
        "0001-01-01T00:00:00Z"
    );
    assert_ne!(got.body["lastActivityTime"], "0001-01-01T00:00:00Z");
    let service = rest
        .call(
            Method::GET,
            &format!("/statistics/service?{API}"),
            Some(&owner),
            None,
            None,
        )
        .await;
    assert_eq!(service.body, json!({"connectedDeviceCount": 1}));

    // Disabling closes the connection, and the device cannot connect again.
    let mut body = python_create("d");
    body["status"] = json!("disabled");
    let disabled = rest
        .call(Method::PUT, &path, Some(&owner), Some("*"), Some(body))
        .await;
    assert_eq!(disabled.status, StatusCode::OK);
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if eventloop.poll().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the connection of a disabled device stays open"
    );
    let (again, _) = mqtt_connect(&hub, "d").await;
    assert!(
        matches!(
            again,
            Err(rumqttc::ConnectionError::ConnectionRefused(
                rumqttc::ConnectReturnCode::NotAuthorized
            ))
        ),
        "{again:?}"
    );
    let stats = rest
        .call(
            Method::GET,
            &format!("/statistics/devices?{API}"),
            Some(&owner),
            None,
            None,
        )
        .await;
    assert_eq!(stats.body["disabledDeviceCount"], 1);
    server.shutdown().await;
}

/// The expiry no token may have: past `SystemTime`'s range, and 2^63 (a signed 64-bit
/// overflow in whoever adds it to a time).
const OVERFLOWING_EXPIRY: &str = "9223372036854775808";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_whose_expiry_overflows_gets_a_401_and_the_hub_goes_on() {
    let server = IotHubServer::start(config()).await.unwrap();
    let hub = server.hub();
    let rest = Rest::new(&hub);
    let get = format!("/devices?{API}");
    // No key needed: the policy names are public. This once panicked the connection's task
    // (an overflow adding the expiry to a time) before the signature was checked.
    for expiry in [OVERFLOWING_EXPIRY, "18446744073709551615", "253402300800"] {
        let forged =
            format!("SharedAccessSignature sr=localhost&sig=AAAA&se={expiry}&skn=iothubowner");
        let reply = rest
            .call(Method::GET, &get, Some(&forged), None, None)
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "se={expiry}: {:?}",
            reply.body
        );
        let why = reply.body["ExceptionMessage"].as_str().unwrap_or_default();
        assert!(why.contains("after the year 9999"), "se={expiry}: {why}");
    }
    // The latest expiry that can be written is a valid one.
    let owner = hub.policy("iothubowner").unwrap();
    let last = SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_799);
    let reply = rest
        .call(Method::GET, &get, Some(&sign(&owner, last)), None, None)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    server.shutdown().await;
}

/// The bytes of the log lines that hold `marker`.
fn logged_with(marker: &str) -> usize {
    logs::lines_with(marker).iter().map(|l| l.len() + 1).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_64_kib_token_adds_under_1_kib_to_the_log_and_repeats_are_summarised() {
    // It reads the log, through a subscriber of its own process.
    run_alone!(a_refused_64_kib_token_adds_under_1_kib_to_the_log_and_repeats_are_summarised);
    // The server's info log, as `mqstate serve` writes it (only the lines quoting this test's
    // token are counted).
    logs::capture();
    let server = IotHubServer::start(config()).await.unwrap();
    let hub = server.hub();
    let rest = Rest::new(&hub);
    let get = format!("/devices?{API}");
    // Each piece of the token names the marker, so any part of it that reaches the log does.
    let marker = "Q7marker";
    let sr = marker.repeat(64 * 1024 / marker.len());
    let token = format!("SharedAccessSignature sr={sr}&sig=AAAA&se=1&skn=iothubowner");
    assert!(token.len() >= 64 * 1024);
    let reply = rest.call(Method::GET, &get, Some(&token), None, None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let once = logged_with(marker);
    assert!(once > 0, "the refusal is logged");
    assert!(
        once < 1024,
        "one refused 64 KiB token added {once} bytes to the log"
    );

    // The same refusal 50 times more from this address: the first few are logged, the rest
    // counted (and said in the next line logged).
    for _ in 0..50 {
        let reply = rest.call(Method::GET, &get, Some(&token), None, None).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    }
    let after = logged_with(marker);
    assert!(
        after < 6 * 1024,
        "51 refusals added {after} bytes to the log"
    );
    server.shutdown().await;
}
