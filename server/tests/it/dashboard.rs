//! The dashboard's HTTP side against a real `LocalServer` (embedded broker, store, hub):
//! the embedded page, the JSON views fed by the store hook, the server-sent events, and the
//! read-only default. (The page itself is tested in Chromium: `scripts/test-dashboard`.)

// Helpers outside #[test] functions panic on purpose too: that is a test failure.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use mqstate::{Client, ConnectOptions, SetOptions};
use mqstate_server::dashboard::DashboardConfig;
use mqstate_server::iothub::{DeviceSpec, IotHubConfig};
use mqstate_server::{LocalServer, ServerConfig};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

async fn start(edit: bool) -> (LocalServer, SocketAddr, Client) {
    let mut config = ServerConfig::default().with_iothub(IotHubConfig {
        devices: vec![DeviceSpec::parse("dev1").unwrap()],
        ..IotHubConfig::default()
    });
    config.dashboard = Some(DashboardConfig {
        edit,
        ..DashboardConfig::default()
    });
    let server = LocalServer::start_with(config).await.unwrap();
    let admin = server.iothub().unwrap().endpoints().admin_endpoint.unwrap();
    let client = Client::connect(ConnectOptions::new(server.host(), server.port()))
        .await
        .unwrap();
    (server, admin, client)
}

/// Sends one request; returns the response with its body still streaming.
async fn send(
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: &str,
) -> hyper::Response<hyper::body::Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, addr.to_string())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    sender.send_request(request).await.unwrap()
}

async fn call(addr: SocketAddr, method: Method, path: &str, body: &str) -> (StatusCode, Bytes) {
    let response = send(addr, method, path, body).await;
    let status = response.status();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

async fn json(addr: SocketAddr, path: &str) -> Value {
    let (status, body) = call(addr, Method::GET, path, "").await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn page_views_and_live_feed_read_only() {
    let (server, admin, client) = start(false).await;

    // The page and its assets are served from the binary, on the admin API's port.
    let (status, page) = call(admin, Method::GET, "/dashboard/", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&page).contains("<title>mqstate dashboard</title>"));
    let response = send(admin, Method::GET, "/dashboard/app.js", "").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[hyper::header::CONTENT_TYPE],
        "text/javascript; charset=utf-8"
    );
    // The admin API still answers on the same server.
    assert_eq!(json(admin, "/devices").await[0]["deviceId"], "dev1");

    // The live feed: subscribe first, then change the store.
    let mut feed = send(admin, Method::GET, "/dashboard/api/changes", "").await;
    assert_eq!(
        feed.headers()[hyper::header::CONTENT_TYPE],
        "text/event-stream"
    );
    let lease = client
        .set(
            "locks/printer",
            "holder-1",
            SetOptions::default().nex().expiry(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    client
        .set("app/config", b"\x00\x01", SetOptions::default())
        .await
        .unwrap();
    assert_eq!(client.del("app/config", None).await.unwrap(), 1);
    let mut text = String::new();
    tokio::time::timeout(WAIT, async {
        while text.matches("event: change").count() < 3 {
            let frame = feed.body_mut().frame().await.unwrap().unwrap();
            if let Ok(data) = frame.into_data() {
                text.push_str(&String::from_utf8_lossy(&data));
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("feed so far: {text}"));
    assert!(
        text.contains(r#""kind":"set","key":"locks/printer""#),
        "{text}"
    );
    assert!(
        text.contains(
            r#""key":"app/config","keyEncoding":"text","value":"0001","valueEncoding":"hex""#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#""kind":"delete","key":"app/config""#),
        "{text}"
    );

    // Keys, leases, clients and metrics, from the store hook.
    let keys = json(admin, "/dashboard/api/keys?prefix=locks/").await;
    assert_eq!(keys["keys"].as_array().unwrap().len(), 1, "{keys}");
    assert_eq!(keys["next"], Value::Null);
    assert_eq!(keys["keys"][0]["value"], "holder-1");
    assert_eq!(keys["keys"][0]["lease"], true);
    assert!(keys["keys"][0]["ttlMs"].as_u64().unwrap() <= 60_000);
    assert_eq!(
        json(admin, "/dashboard/api/keys?prefix=app/").await["keys"],
        serde_json::json!([])
    );
    let leases = json(admin, "/dashboard/api/leases").await;
    assert_eq!(leases[0]["holder"], "holder-1");
    assert_eq!(leases[0]["token"], lease.version.to_string());
    let clients = json(admin, "/dashboard/api/clients").await;
    assert!(
        clients
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["clientId"] == client.client_id())
    );
    assert!(
        json(admin, "/dashboard/api/metrics").await["totalRequests"]
            .as_u64()
            .unwrap()
            >= 3
    );

    // Read-only: every edit is refused and changes nothing.
    for (method, path, body) in [
        (
            Method::POST,
            "/dashboard/api/keys",
            r#"{"key":"x","value":"y"}"#,
        ),
        (Method::DELETE, "/dashboard/api/keys?key=locks/printer", ""),
        (
            Method::POST,
            "/dashboard/api/devices/dev1/messages",
            r#"{"payload":"hi"}"#,
        ),
        (Method::DELETE, "/dashboard/api/devices/dev1/messages", ""),
    ] {
        let (status, body) = call(admin, method, path, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert!(String::from_utf8_lossy(&body).contains("ReadOnly"));
    }
    assert_eq!(json(admin, "/dashboard/api/keys").await["count"], 1);
    assert_eq!(
        json(admin, "/devices/dev1/messages/devicebound").await["depth"],
        0
    );

    client.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn edits_with_the_flag() {
    let (server, admin, client) = start(true).await;
    let (status, body) = call(
        admin,
        Method::POST,
        "/dashboard/api/keys",
        r#"{"key":"k","value":"from the page","ttlMs":60000}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    // A real store write: a client reads it.
    let got = client.get("k").await.unwrap().unwrap();
    assert_eq!(&got.value[..], b"from the page");
    let (status, body) = call(admin, Method::DELETE, "/dashboard/api/keys?key=k", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["deleted"],
        1
    );
    assert!(client.get("k").await.unwrap().is_none());

    let (status, _) = call(
        admin,
        Method::POST,
        "/dashboard/api/devices/dev1/messages",
        r#"{"payload":"hi","messageId":"m1"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        json(admin, "/devices/dev1/messages/devicebound").await["depth"],
        1
    );
    // Bad input: a typed error, nothing sent.
    let (status, body) = call(
        admin,
        Method::POST,
        "/dashboard/api/devices/nobody/messages",
        r#"{"payload":"hi"}"#,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (status, body) = call(
        admin,
        Method::DELETE,
        "/dashboard/api/devices/dev1/messages",
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap()["purged"], 1);
    let feedback = json(admin, "/dashboard/api/feedback").await;
    assert_eq!(
        feedback.as_array().unwrap().len(),
        0,
        "ack none: no feedback"
    );

    client.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn own_server_without_the_hub() {
    let config = ServerConfig {
        dashboard: Some(DashboardConfig::default()),
        ..ServerConfig::default()
    };
    let server = LocalServer::start_with(config).await.unwrap();
    assert!(server.iothub().is_none());
    let addr = server.dashboard_addr().unwrap();
    let info = json(addr, "/dashboard/api/info").await;
    assert_eq!(info["iothub"], false);
    assert_eq!(info["edit"], false);
    let (status, body) = call(addr, Method::GET, "/dashboard/api/feedback", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(String::from_utf8_lossy(&body).contains("NoIotHub"));
    let client = Client::connect(ConnectOptions::new(server.host(), server.port()))
        .await
        .unwrap();
    client.set("k", "v", SetOptions::default()).await.unwrap();
    assert_eq!(json(addr, "/dashboard/api/keys").await["count"], 1);
    client.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn keys_restored_from_the_data_dir_are_shown() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        let mut c = ServerConfig::default()
            .with_data_dir(dir.path(), mqstate_server::persist::PersistMode::All);
        c.dashboard = Some(DashboardConfig::default());
        c
    };
    let server = LocalServer::start_with(config()).await.unwrap();
    let client = Client::connect(ConnectOptions::new(server.host(), server.port()))
        .await
        .unwrap();
    client
        .set("restored/k", "v", SetOptions::default())
        .await
        .unwrap();
    client.close().await;
    server.shutdown().await;

    // A new server on the same data dir: the key is on the dashboard although no SET
    // announced it since the start.
    let server = LocalServer::start_with(config()).await.unwrap();
    let addr = server.dashboard_addr().unwrap();
    let keys = json(addr, "/dashboard/api/keys?prefix=restored/").await;
    assert_eq!(keys["keys"].as_array().unwrap().len(), 1, "{keys}");
    assert!(keys.to_string().contains("restored/k"), "{keys}");
    server.shutdown().await;
}

/// The key table reads the store a page at a time with the scan of SCAN: every key once across
/// pages, glob and prefix filters, and clear errors for a malformed pattern or token.
#[tokio::test]
async fn the_key_table_pages_through_the_store() {
    let config = ServerConfig {
        dashboard: Some(DashboardConfig::default()),
        ..ServerConfig::default()
    };
    let server = LocalServer::start_with(config).await.unwrap();
    let addr = server.dashboard_addr().unwrap();
    let client = Client::connect(ConnectOptions::new(server.host(), server.port()))
        .await
        .unwrap();
    for i in 0..250 {
        client
            .set(format!("t/{i:03}"), "v", SetOptions::default())
            .await
            .unwrap();
    }
    client.set("t*x", "v", SetOptions::default()).await.unwrap();
    client
        .set("other", "v", SetOptions::default())
        .await
        .unwrap();

    let mut seen = Vec::new();
    let mut path = "/dashboard/api/keys?prefix=t/".to_owned();
    let mut pages = 0;
    loop {
        let page = json(addr, &path).await;
        pages += 1;
        assert_eq!(page["count"], 252, "{page}");
        for key in page["keys"].as_array().unwrap() {
            seen.push(key["key"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(token) => path = format!("/dashboard/api/keys?prefix=t/&token={token}"),
            None => break,
        }
    }
    assert!(pages >= 3, "100 keys a page: {pages} pages");
    let expected: Vec<String> = (0..250).map(|i| format!("t/{i:03}")).collect();
    assert_eq!(seen, expected, "every key once, in byte order");

    // A prefix with a glob metacharacter is taken literally; a pattern is a glob.
    let star = json(addr, "/dashboard/api/keys?prefix=t*").await;
    assert_eq!(star["keys"].as_array().unwrap().len(), 1, "{star}");
    let glob = json(addr, "/dashboard/api/keys?pattern=t/24%3F").await;
    assert_eq!(glob["keys"].as_array().unwrap().len(), 10, "{glob}");

    for (path, code, text) in [
        (
            "/dashboard/api/keys?pattern=t/%5B",
            "BadQuery",
            "no closing ']'",
        ),
        ("/dashboard/api/keys?prefix=t/&token=zz", "BadToken", "hex"),
        (
            "/dashboard/api/keys?prefix=t/&token=0102",
            "BadQuery",
            "not valid",
        ),
        (
            "/dashboard/api/keys?prefix=a&pattern=b",
            "BadQuery",
            "not both",
        ),
    ] {
        let (status, body) = call(addr, Method::GET, path, "").await;
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(body.contains(code) && body.contains(text), "{path}: {body}");
    }
    client.close().await;
    server.shutdown().await;
}

/// One request with the given headers (none added); the status and the body.
async fn call_with(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The web surfaces trust no browser: a page on another name (DNS rebinding), a cross-site
/// `text/plain` POST and a request from a foreign origin are refused before any route runs,
/// on the admin API and the dashboard alike, and change nothing.
#[tokio::test]
async fn the_web_surfaces_refuse_foreign_hosts_and_cross_site_requests() {
    let (server, admin, client) = start(true).await;
    let own = admin.to_string();
    let json_type = ("content-type", "application/json");
    // DNS rebinding: the right address, another name.
    for path in ["/dashboard/api/keys", "/devices/dev1/messages/devicebound"] {
        let (status, body) = call_with(
            admin,
            Method::GET,
            path,
            &[("host", "attacker.example:8880")],
            "",
        )
        .await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{path}: {body}");
        assert!(body.contains("MisdirectedHost"), "{body}");
    }
    // The server's own names are served: its address, localhost.
    for host in [own.as_str(), "localhost:8880"] {
        let (status, body) = call_with(
            admin,
            Method::GET,
            "/dashboard/api/keys",
            &[("host", host)],
            "",
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{host}: {body}");
    }
    // A cross-site form or text/plain POST (no preflight in a browser): refused.
    let send = r#"{"payload":"from a web page"}"#;
    for path in ["/devices/dev1/messages/devicebound", "/dashboard/api/keys"] {
        let (status, body) = call_with(
            admin,
            Method::POST,
            path,
            &[("host", &own), ("content-type", "text/plain")],
            if path.contains("keys") {
                r#"{"key":"x","value":"y"}"#
            } else {
                send
            },
        )
        .await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{path}: {body}");
    }
    // JSON, but from a foreign origin: refused.
    let (status, body) = call_with(
        admin,
        Method::POST,
        "/devices/dev1/messages/devicebound",
        &[
            ("host", &own),
            json_type,
            ("origin", "http://attacker.example"),
        ],
        send,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("CrossOrigin"), "{body}");
    let (status, _) = call_with(
        admin,
        Method::DELETE,
        "/dashboard/api/keys?key=x",
        &[("host", &own), ("origin", "http://attacker.example")],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Nothing was sent or written.
    assert_eq!(
        json(admin, "/devices/dev1/messages/devicebound").await["depth"],
        0
    );
    assert!(client.get("x").await.unwrap().is_none());
    // The page's own requests (same origin, JSON) still work.
    let (status, body) = call_with(
        admin,
        Method::POST,
        "/devices/dev1/messages/devicebound",
        &[
            ("host", &own),
            json_type,
            ("origin", &format!("http://{own}")),
        ],
        send,
    )
    .await;
    assert!(status.is_success(), "{status}: {body}");
    client.close().await;
    server.shutdown().await;
}

/// One request; the status, the headers and the body.
async fn call_full(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, hyper::HeaderMap, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// Issue 37: with broker authentication on, the dashboard and the admin API used to show
/// every key and value, and device keys, to anyone who could reach them. Now they ask for
/// the access token, a user of the password file, or a login session.
#[tokio::test]
async fn with_authentication_on_the_web_surfaces_ask_for_credentials() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("passwd");
    mqstate_server::security::set_password(&passwd, "alice", "alice's password").unwrap();
    std::fs::write(dir.path().join("alice.pw"), "alice's password").unwrap();
    let mut config = ServerConfig::default().with_iothub(IotHubConfig {
        devices: vec![DeviceSpec::parse("dev1").unwrap()],
        ..IotHubConfig::default()
    });
    config.security.password_file = Some(passwd);
    config.dashboard = Some(DashboardConfig {
        edit: true,
        ..DashboardConfig::default()
    });
    let server = LocalServer::start_with(config).await.unwrap();
    let admin = server.iothub().unwrap().endpoints().admin_endpoint.unwrap();
    let token = server.web_token().expect("a token with authentication on");
    let mut options = ConnectOptions::new(server.host(), server.port());
    options.username = Some("alice".into());
    options.password_file = Some(dir.path().join("alice.pw"));
    let client = Client::connect(options).await.unwrap();
    client
        .set("secret", "the-secret-value", SetOptions::default())
        .await
        .unwrap();

    let json = ("content-type", "application/json");
    // No credentials, or wrong ones: nothing is read or changed.
    let bearer_wrong = "Bearer not-the-token";
    let basic_wrong = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("alice:guess")
    );
    for auth in [None, Some(bearer_wrong), Some(basic_wrong.as_str())] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        for path in [
            "/dashboard/api/keys?prefix=",
            "/dashboard/api/changes",
            "/devices",
            "/devices/dev1/token",
            "/hub",
        ] {
            let (status, _, body) = call_full(admin, Method::GET, path, &headers, "").await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} {auth:?}: {body}");
            assert!(!body.contains("the-secret-value"), "{body}");
        }
        let mut post = headers.clone();
        post.push(json);
        let (status, _, _) = call_full(
            admin,
            Method::POST,
            "/dashboard/api/keys",
            &post,
            r#"{"key":"secret","value":"overwritten"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    // A browser asking for the page is sent to the login page.
    let (status, headers, _) = call_full(
        admin,
        Method::GET,
        "/dashboard/",
        &[("accept", "text/html")],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/login");
    let (status, _, page) = call_full(admin, Method::GET, "/login", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("Access token"), "{page}");

    // The token, or a user of the password file: the keys are there.
    let bearer = format!("Bearer {token}");
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("alice:alice's password")
    );
    for auth in [bearer.as_str(), basic.as_str()] {
        let (status, _, body) = call_full(
            admin,
            Method::GET,
            "/dashboard/api/keys?prefix=",
            &[("authorization", auth)],
            "",
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.contains("secret"), "{body}");
    }
    // The store's internal user is not a web user.
    let store = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("statestore:anything")
    );
    let (status, _, _) =
        call_full(admin, Method::GET, "/hub", &[("authorization", &store)], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // The login page's session: an HttpOnly, SameSite=Strict cookie that logout ends.
    let (status, _, _) = call_full(
        admin,
        Method::POST,
        "/login",
        &[json],
        r#"{"token":"not-the-token"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, headers, body) = call_full(
        admin,
        Method::POST,
        "/login",
        &[json],
        &format!(r#"{{"token":"{token}"}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let cookie = headers["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    let session = cookie.split(';').next().unwrap().to_owned();
    let (status, _, body) = call_full(
        admin,
        Method::GET,
        "/dashboard/api/keys?prefix=",
        &[("cookie", &session)],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // As the page sends it: a browser says the request is from the page's own origin.
    let (status, _, _) = call_full(
        admin,
        Method::POST,
        "/logout",
        &[
            ("cookie", &session),
            json,
            ("sec-fetch-site", "same-origin"),
        ],
        "{}",
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, _) = call_full(
        admin,
        Method::GET,
        "/dashboard/api/keys?prefix=",
        &[("cookie", &session)],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Nothing was overwritten by the refused requests.
    let value = client.get("secret").await.unwrap().unwrap().value;
    assert_eq!(&value[..], b"the-secret-value");
    client.close().await;
    server.shutdown().await;
}

/// Web surfaces beyond loopback (accepted with --insecure) ask for credentials even
/// without broker authentication; on loopback without authentication they stay open.
#[tokio::test]
async fn web_surfaces_beyond_loopback_ask_for_credentials() {
    let mut config = ServerConfig::default().with_iothub(IotHubConfig {
        bind: "0.0.0.0".parse().unwrap(),
        device_port: 0,
        admin_port: Some(0),
        ..IotHubConfig::default()
    });
    config.security.insecure = true;
    config.dashboard = Some(DashboardConfig::default());
    let server = LocalServer::start_with(config).await.unwrap();
    let port = server
        .iothub()
        .unwrap()
        .endpoints()
        .admin_endpoint
        .unwrap()
        .port();
    let admin = SocketAddr::from(([127, 0, 0, 1], port));
    let token = server.web_token().expect("a token beyond loopback");
    let (status, _, _) =
        call_full(admin, Method::GET, "/dashboard/api/keys?prefix=", &[], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let bearer = format!("Bearer {token}");
    let (status, _, body) = call_full(
        admin,
        Method::GET,
        "/dashboard/api/keys?prefix=",
        &[("authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    server.shutdown().await;

    let (open, admin, client) = start(false).await;
    assert!(open.web_token().is_none());
    let (status, _, _) = call_full(admin, Method::GET, "/hub", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    client.close().await;
    open.shutdown().await;
}

/// docs/security.md, "The web surfaces": with credentials required, the admin API also takes
/// a service SAS token of the hub's shared access policies, for the routes its rights cover
/// only; it never opens the dashboard.
#[tokio::test]
async fn the_admin_api_takes_service_tokens_with_the_right_rights() {
    use mqstate_server::iothub::policies::service_token;
    use std::time::SystemTime;
    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("passwd");
    mqstate_server::security::set_password(&passwd, "alice", "alice's password").unwrap();
    let mut config = ServerConfig::default().with_iothub(IotHubConfig {
        devices: vec![DeviceSpec::parse("dev1").unwrap()],
        ..IotHubConfig::default()
    });
    config.security.password_file = Some(passwd);
    let server = LocalServer::start_with(config).await.unwrap();
    let hub = server.iothub().unwrap();
    let admin = hub.endpoints().admin_endpoint.unwrap();
    let in_an_hour = SystemTime::now() + Duration::from_secs(3600);
    let token = |policy: &str| {
        service_token("localhost", &hub.policy(policy).unwrap(), in_an_hour).unwrap()
    };
    let get = |token: String, path: &'static str| async move {
        let (status, _, body) =
            call_full(admin, Method::GET, path, &[("authorization", &token)], "").await;
        (status, body)
    };

    // The service policy (ServiceConnect): messages, not the registry, not the dashboard.
    let (status, body) = get(token("service"), "/devices/dev1/messages/devicebound").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = get(token("service"), "/devices").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("RegistryRead"), "{body}");
    let (status, body) = get(token("iothubowner"), "/dashboard/api/keys?prefix=").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("does not give access"), "{body}");
    // registryRead reads devices, cannot send or read connection strings.
    let (status, body) = get(token("registryRead"), "/devices").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = get(token("registryRead"), "/devices/dev1/messages/devicebound").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = get(token("service"), "/policies/service/connection-string").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = get(token("iothubowner"), "/policies/service/connection-string").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("SharedAccessKeyName=service"), "{body}");
    // A forged or expired token is refused, saying why.
    let mut forged = hub.policy("iothubowner").unwrap();
    forged.primary_key = hub.policy("service").unwrap().primary_key;
    let forged = service_token("localhost", &forged, in_an_hour).unwrap();
    let (status, body) = get(forged, "/devices").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("signature"), "{body}");
    let expired = service_token(
        "localhost",
        &hub.policy("iothubowner").unwrap(),
        SystemTime::now() - Duration::from_secs(1),
    )
    .unwrap();
    let (status, body) = get(expired, "/devices").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("expired"), "{body}");
    server.shutdown().await;
}

/// A server with the hub (feedback in batches of one record) and the dashboard; with
/// `password_file`, the web surfaces ask for credentials.
async fn start_feedback(password_file: Option<std::path::PathBuf>) -> (LocalServer, SocketAddr) {
    let mut config = ServerConfig::default().with_iothub(IotHubConfig {
        devices: vec![DeviceSpec::parse("dev1").unwrap()],
        feedback_batch_size: 1,
        ..IotHubConfig::default()
    });
    config.security.password_file = password_file;
    config.dashboard = Some(DashboardConfig {
        edit: true,
        ..DashboardConfig::default()
    });
    let server = LocalServer::start_with(config).await.unwrap();
    let admin = server.iothub().unwrap().endpoints().admin_endpoint.unwrap();
    (server, admin)
}

/// Puts a feedback batch in the hub's feedback queue: a message that asks for negative
/// feedback, purged.
fn make_feedback_batch(server: &LocalServer, message_id: &str) {
    use mqstate_server::iothub::{Ack, C2dMessage};
    let hub = server.iothub().unwrap();
    hub.send(
        "dev1",
        C2dMessage::new("x")
            .message_id(message_id)
            .ack(Ack::Negative),
    )
    .unwrap();
    assert_eq!(hub.purge("dev1").unwrap(), 1);
}

/// The feedback receive, waiting for a batch: a request that is let through locks it.
const RECEIVE_FEEDBACK: &str = "/messages/servicebound/feedback?waitSecs=3";

/// Receives the next feedback batch as a plain client (curl, `mqstate iothub feedback`):
/// it must hold the record `message_id`; then completes it.
async fn receive_feedback_as_a_client(admin: SocketAddr, auth: &[(&str, &str)], message_id: &str) {
    let (status, _, body) = call_full(
        admin,
        Method::GET,
        "/messages/servicebound/feedback?waitSecs=10",
        auth,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "the batch was locked: {body}");
    let batch: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        batch["records"][0]["originalMessageId"], message_id,
        "{body}"
    );
    let token = batch["lockToken"].as_str().unwrap();
    let (status, _, body) = call_full(
        admin,
        Method::DELETE,
        &format!("/messages/servicebound/feedback/{token}"),
        auth,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

/// Issue: `GET /messages/servicebound/feedback` locks the next feedback batch, and the guard
/// checked browsers on POST, PUT, PATCH and DELETE only: on the open loopback default, an
/// `<img>` on any page the operator opened locked the batch, and the back end's own receive
/// got 204. A GET that changes state is now refused to browsers from elsewhere like a POST.
#[tokio::test]
async fn cross_site_pages_cannot_lock_feedback_on_the_open_default() {
    let (server, admin) = start_feedback(None).await;
    let own = format!("http://{admin}");
    make_feedback_batch(&server, "fb1");
    for headers in [
        // An <img> on attacker.example (Fetch Metadata).
        [("sec-fetch-site", "cross-site")],
        // A page on another port of this host: another origin of the same site.
        [("sec-fetch-site", "same-site")],
        // Browsers without Fetch Metadata (a navigation, a form, a fetch).
        [("origin", "http://attacker.example")],
        [("origin", "http://127.0.0.1:1")],
    ] {
        for method in [Method::GET, Method::HEAD] {
            let (status, _, body) =
                call_full(admin, method.clone(), RECEIVE_FEEDBACK, &headers, "").await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{method} {headers:?}: {body}"
            );
            if method == Method::GET {
                assert!(body.contains("CrossOrigin"), "{body}");
            }
        }
    }
    // The batch was not locked: the back end's receive gets it (no browser headers).
    receive_feedback_as_a_client(admin, &[], "fb1").await;
    // The server's own pages (same origin) and the address bar still may.
    make_feedback_batch(&server, "fb2");
    let (status, _, body) = call_full(
        admin,
        Method::GET,
        RECEIVE_FEEDBACK,
        &[("sec-fetch-site", "same-origin"), ("origin", &own)],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("fb2"), "{body}");
    server.shutdown().await;
}

/// Issue, secured configuration: the session cookie (`SameSite=Strict`) is also sent with
/// requests from pages of the same site, such as another port of the same host, so such a
/// page could lock feedback in the operator's name. A request that changes state with the
/// cookie must now prove it comes from the server's own origin.
#[tokio::test]
async fn cross_site_pages_cannot_lock_feedback_with_the_operators_session() {
    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("passwd");
    mqstate_server::security::set_password(&passwd, "alice", "alice's password").unwrap();
    let (server, admin) = start_feedback(Some(passwd)).await;
    let own = format!("http://{admin}");
    let token = server.web_token().unwrap();
    let (status, headers, body) = call_full(
        admin,
        Method::POST,
        "/login",
        &[("content-type", "application/json")],
        &format!(r#"{{"token":"{token}"}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let cookie = headers["set-cookie"].to_str().unwrap();
    let session = cookie.split(';').next().unwrap().to_owned();
    let with_session = |extra: &[(&'static str, &'static str)]| {
        let mut headers = vec![("cookie", session.clone())];
        headers.extend(extra.iter().map(|(n, v)| (*n, (*v).to_owned())));
        headers
    };
    make_feedback_batch(&server, "fb1");
    for extra in [
        // A page on another port of this host: same site, so the cookie is sent.
        &[("sec-fetch-site", "same-site")][..],
        &[("sec-fetch-site", "cross-site")],
        &[("origin", "http://127.0.0.1:1")],
        &[("origin", "http://attacker.example")],
        // The cookie without proof of origin: an older browser's <img>, or the address bar.
        &[],
        &[("sec-fetch-site", "none")],
    ] {
        let headers = with_session(extra);
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let (status, _, body) = call_full(admin, Method::GET, RECEIVE_FEEDBACK, &headers, "").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{extra:?}: {body}");
        assert!(body.contains("CrossOrigin"), "{body}");
    }
    // The same for the other state-changing requests: the cookie without proof writes nothing.
    let (status, _, body) = call_full(
        admin,
        Method::POST,
        "/devices/dev1/messages/devicebound",
        &[("cookie", &session), ("content-type", "application/json")],
        r#"{"payload":"from a page"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // The batch was not locked: the back end's receive (the access token) gets it.
    let bearer = format!("Bearer {token}");
    receive_feedback_as_a_client(admin, &[("authorization", &bearer)], "fb1").await;
    assert_eq!(
        server.iothub().unwrap().queue("dev1").unwrap().depth,
        0,
        "nothing was sent"
    );
    // The dashboard's own requests carry the proof: Fetch Metadata, or its own origin.
    make_feedback_batch(&server, "fb2");
    let (status, _, body) = call_full(
        admin,
        Method::GET,
        RECEIVE_FEEDBACK,
        &[("cookie", &session), ("sec-fetch-site", "same-origin")],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("fb2"), "{body}");
    let (status, _, body) = call_full(
        admin,
        Method::POST,
        "/devices/dev1/messages/devicebound",
        &[
            ("cookie", &session),
            ("content-type", "application/json"),
            ("origin", &own),
        ],
        r#"{"payload":"from the dashboard"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    server.shutdown().await;
}

/// Issue: sessions were capped at 1,024 for everyone together, the oldest evicted first, so
/// one user logging in 1,024 times ended the operator's session. Now each user (the access
/// token counts as one) has its own cap, and only its own oldest session ends. (The global
/// cap, which refuses rather than evicts, is tested in `server/src/web/auth.rs`.)
#[tokio::test]
async fn logins_beyond_a_users_cap_end_only_that_users_oldest_session() {
    use mqstate_server::web::MAX_SESSIONS_PER_USER;
    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("passwd");
    mqstate_server::security::set_password(&passwd, "alice", "alice's password").unwrap();
    let (server, admin) = start_feedback(Some(passwd)).await;
    let token = server.web_token().unwrap();
    let login = |body: String| async move {
        let (status, headers, text) = call_full(
            admin,
            Method::POST,
            "/login",
            &[("content-type", "application/json")],
            &body,
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{text}");
        let cookie = headers["set-cookie"].to_str().unwrap();
        cookie.split(';').next().unwrap().to_owned()
    };
    let valid = |session: String| async move {
        let (status, _, _) =
            call_full(admin, Method::GET, "/hub", &[("cookie", &session)], "").await;
        status == StatusCode::OK
    };
    let alice = login(r#"{"user":"alice","password":"alice's password"}"#.to_owned()).await;
    // The token's holder logs in one more time than its cap (a password user would be
    // throttled per address; the token is checked at once).
    let mut sessions = Vec::new();
    for _ in 0..=MAX_SESSIONS_PER_USER {
        sessions.push(login(format!(r#"{{"token":"{token}"}}"#)).await);
    }
    assert!(valid(alice).await, "another user's session ended");
    assert!(!valid(sessions[0].clone()).await, "its own oldest ends");
    assert!(valid(sessions[1].clone()).await);
    assert!(valid(sessions[MAX_SESSIONS_PER_USER].clone()).await);
    server.shutdown().await;
}

/// Request bodies, heads and the device token's lifetime are bounded on the web surfaces:
/// a body beyond the admin API's limit (sized from the hub's largest message) or the login
/// page's gets `413` with a JSON error; a head beyond 64 KiB is not served; a `ttlSecs`
/// that overflowed the clock (a panic in the handler) is refused.
#[tokio::test]
async fn the_web_surfaces_bound_bodies_heads_and_token_lifetimes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (server, admin) = start_feedback(None).await;
    let limit = mqstate_server::iothub::admin::body_limit(64 * 1024);
    let json_type = ("content-type", "application/json");
    // The largest legitimate message, every byte escaped in JSON: accepted.
    let escaped = "\\u0001".repeat(64 * 1024);
    let (status, _, body) = call_full(
        admin,
        Method::POST,
        "/devices/dev1/messages/devicebound",
        &[json_type],
        &format!(r#"{{"payload":"{escaped}"}}"#),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "{}",
        &body[..body.len().min(200)]
    );
    // One byte too many (exactly: the server reads the whole body, so the connection ends
    // cleanly after the answer).
    let too_large = format!(r#"{{"payload":"{}"}}"#, "a".repeat(limit + 1 - 14));
    assert_eq!(too_large.len(), limit + 1);
    let (status, _, body) = call_full(
        admin,
        Method::POST,
        "/devices/dev1/messages/devicebound",
        &[json_type],
        &too_large,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(body.contains("RequestTooLarge"), "{body}");
    assert_eq!(server.iothub().unwrap().queue("dev1").unwrap().depth, 1);
    // A device token for ever: refused, and the server still answers.
    let (status, _, body) = call_full(
        admin,
        Method::GET,
        "/devices/dev1/token?ttlSecs=18446744073709551615",
        &[],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _, body) = call_full(admin, Method::GET, "/devices/dev1/token", &[], "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    server.shutdown().await;

    // The login page takes a small body.
    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("passwd");
    mqstate_server::security::set_password(&passwd, "alice", "alice's password").unwrap();
    let (server, admin) = start_feedback(Some(passwd)).await;
    let (status, _, body) = call_full(
        admin,
        Method::POST,
        "/login",
        &[json_type],
        &format!(r#"{{"token":"{}"}}"#, "t".repeat(16 * 1024 + 1 - 12)),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    // A 100 KiB header: `431` and the connection closed (or, if the server closes before
    // reading all of it, only closed), at once.
    let mut stream = tokio::net::TcpStream::connect(admin).await.unwrap();
    let head = format!(
        "GET /hub HTTP/1.1\r\nhost: {admin}\r\nx-big: {}\r\n\r\n",
        "b".repeat(100 * 1024)
    );
    // The server may close before reading the whole head: a failed write is not the point.
    let _ = stream.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the connection was held");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
    server.shutdown().await;
}
