//! The C ABI of the IoT Hub device client, called as C would call it, against the in-process
//! local IoT Hub.

use std::ffi::{CStr, CString, c_char};
use std::ptr;
use std::time::Duration;

use super::*;
use crate::boundary::mqstate_status;
use crate::errors::mqstate_error_message;
use crate::iothub_options::*;
use mqstate_server::iothub::{
    Ack, C2dMessage, DeviceSpec, FeedbackStatus, IotHub, IotHubConfig, IotHubServer, MessageState,
};

fn cstr<'a>(p: *const c_char) -> &'a str {
    assert!(!p.is_null());
    unsafe { CStr::from_ptr(p) }.to_str().unwrap()
}

fn receive(dev: *const mqstate_iothub_device) -> *mut mqstate_c2d_message {
    let mut m = ptr::null_mut();
    let s = unsafe { mqstate_iothub_device_receive(dev, 30_000, &mut m) };
    assert_eq!(s, MQSTATE_OK);
    m
}

#[test]
fn c_abi_receives_completes_in_order_and_sends_telemetry() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = rt
        .block_on(IotHubServer::start(IotHubConfig {
            admin_port: None,
            ..IotHubConfig::default()
        }))
        .unwrap();
    let hub = server.hub();
    hub.add_device(&DeviceSpec::parse("cdev").unwrap()).unwrap();
    let port = hub.endpoints().device_endpoint.unwrap().port();
    for i in 0..3 {
        hub.send(
            "cdev",
            C2dMessage::new(format!("body{i}"))
                .message_id(format!("m{i}"))
                .content_type("text/plain")
                .property("k", Some("a b&c"))
                .property("null", None)
                .property("empty", Some("")),
        )
        .unwrap();
    }

    let cs = CString::new(hub.connection_string("cdev").unwrap()).unwrap();
    let host = CString::new("127.0.0.1").unwrap();
    let mut dev = ptr::null_mut();
    let s = unsafe {
        mqstate_iothub_device_new(
            cs.as_ptr(),
            host.as_ptr(),
            port,
            false,
            ptr::null(),
            0,
            &mut dev,
        )
    };
    assert_eq!(s, MQSTATE_OK);

    let msgs: Vec<_> = (0..3).map(|_| receive(dev)).collect();
    let m0 = msgs[0];
    let (mut data, mut len) = (ptr::null(), 0usize);
    assert_eq!(
        unsafe { mqstate_c2d_message_payload(m0, &mut data, &mut len) },
        MQSTATE_OK
    );
    assert_eq!(unsafe { std::slice::from_raw_parts(data, len) }, b"body0");
    let mut v = ptr::null();
    let name = CString::new("message_id").unwrap();
    assert_eq!(
        unsafe { mqstate_c2d_message_system_property(m0, name.as_ptr(), &mut v) },
        MQSTATE_OK
    );
    assert_eq!(cstr(v), "m0");
    let name = CString::new("correlation_id").unwrap();
    assert_eq!(
        unsafe { mqstate_c2d_message_system_property(m0, name.as_ptr(), &mut v) },
        MQSTATE_NOT_FOUND
    );
    let name = CString::new("colour").unwrap();
    assert_eq!(
        unsafe { mqstate_c2d_message_system_property(m0, name.as_ptr(), &mut v) },
        MQSTATE_INVALID_ARGUMENT
    );
    let mut count = 0;
    assert_eq!(
        unsafe { mqstate_c2d_message_property_count(m0, &mut count) },
        MQSTATE_OK
    );
    assert_eq!(count, 3);
    let mut got = Vec::new();
    for i in 0..count {
        let (mut n, mut val) = (ptr::null(), ptr::null());
        assert_eq!(
            unsafe { mqstate_c2d_message_property(m0, i, &mut n, &mut val) },
            MQSTATE_OK
        );
        got.push((
            cstr(n).to_owned(),
            (!val.is_null()).then(|| cstr(val).to_owned()),
        ));
    }
    assert_eq!(
        got,
        vec![
            ("k".to_owned(), Some("a b&c".to_owned())),
            ("null".to_owned(), None),
            ("empty".to_owned(), Some(String::new())),
        ]
    );
    assert_eq!(unsafe { mqstate_c2d_reject(m0) }, MQSTATE_NOT_SUPPORTED);
    assert!(last_message().contains("not supported over MQTT"));
    assert_eq!(unsafe { mqstate_c2d_abandon(m0) }, MQSTATE_NOT_SUPPORTED);
    // MQTT does not carry a delivery count.
    let mut delivery_count = 7u32;
    assert_eq!(
        unsafe { mqstate_c2d_message_delivery_count(m0, &mut delivery_count) },
        MQSTATE_NOT_FOUND
    );
    assert_eq!(delivery_count, 7, "no output on a status other than OK");

    // Completed in reverse order: nothing is acknowledged until m0 is.
    assert_eq!(unsafe { mqstate_c2d_complete(msgs[2]) }, MQSTATE_OK);
    assert_eq!(unsafe { mqstate_c2d_complete(msgs[1]) }, MQSTATE_OK);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(hub.queue("cdev").unwrap().depth, 3);
    assert_eq!(unsafe { mqstate_c2d_complete(m0) }, MQSTATE_OK);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let q = hub.queue("cdev").unwrap();
        if q.depth == 0 {
            assert_eq!(
                q.finished
                    .iter()
                    .filter(|m| m.state == MessageState::Completed)
                    .count(),
                3
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{q:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    for m in msgs {
        unsafe { mqstate_c2d_message_free(m) };
    }

    // Nothing more: the receive times out.
    let mut m = ptr::null_mut();
    assert_eq!(
        unsafe { mqstate_iothub_device_receive(dev, 100, &mut m) },
        MQSTATE_TIMEOUT
    );
    assert!(m.is_null());

    // Telemetry.
    let names = [CString::new("p").unwrap(), CString::new("n").unwrap()];
    let value = CString::new("v/1").unwrap();
    let name_ptrs = [names[0].as_ptr(), names[1].as_ptr()];
    let value_ptrs = [value.as_ptr(), ptr::null()];
    let mid = CString::new("t1").unwrap();
    let s = unsafe {
        mqstate_iothub_device_send_event(
            dev,
            b"tele".as_ptr(),
            4,
            name_ptrs.as_ptr(),
            value_ptrs.as_ptr(),
            2,
            mid.as_ptr(),
            ptr::null(),
        )
    };
    assert_eq!(s, MQSTATE_OK);
    let t = hub.telemetry("cdev", 0).unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].body.as_deref(), Some("tele"));
    assert_eq!(t[0].properties.get("p"), Some(&Some("v/1".to_owned())));
    assert_eq!(t[0].properties.get("n"), Some(&None));

    unsafe { mqstate_iothub_device_free(dev) };

    // Wrong key: MQSTATE_AUTHENTICATION_FAILED; NULL arguments: MQSTATE_NULL_PARAMETER.
    let bad =
        CString::new("HostName=localhost;DeviceId=cdev;SharedAccessKey=d3Jvbmcga2V5").unwrap();
    let mut dev = ptr::null_mut();
    let s: mqstate_status = unsafe {
        mqstate_iothub_device_new(
            bad.as_ptr(),
            host.as_ptr(),
            port,
            false,
            ptr::null(),
            0,
            &mut dev,
        )
    };
    assert_eq!(s, MQSTATE_AUTHENTICATION_FAILED);
    assert!(dev.is_null());
    let s = unsafe {
        mqstate_iothub_device_new(ptr::null(), ptr::null(), 0, false, ptr::null(), 0, &mut dev)
    };
    assert_eq!(s, MQSTATE_NULL_PARAMETER);
    rt.block_on(server.shutdown());
}

/// The calling thread's last error message.
fn last_message() -> String {
    let mut buf = [0 as c_char; 1024];
    let mut written = 0usize;
    let s = unsafe { mqstate_error_message(buf.as_mut_ptr(), buf.len(), &mut written) };
    assert_eq!(s, MQSTATE_OK);
    cstr(buf.as_ptr()).to_owned()
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// New options for `cs`, which must be accepted.
fn options(cs: &str) -> *mut mqstate_iothub_options {
    let cs = c(cs);
    let mut o = ptr::null_mut();
    assert_eq!(
        unsafe { mqstate_iothub_options_new(cs.as_ptr(), &mut o) },
        MQSTATE_OK
    );
    assert!(!o.is_null());
    o
}

/// Waits for the hub's feedback record of `message_id`.
fn feedback(hub: &IotHub, message_id: &str) -> FeedbackStatus {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(r) = hub
            .recent_feedback()
            .into_iter()
            .find(|r| r.original_message_id.as_deref() == Some(message_id))
        {
            return r.status_code;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no feedback for {message_id}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the AMQP tests start from: a runtime, the in-process hub started with `config` (and
/// `device` registered), the file of its CA (removed by [`AmqpHub::stop`]), and options that
/// reach its AMQP endpoint on 127.0.0.1 trusting that CA (the caller frees them).
struct AmqpHub {
    rt: tokio::runtime::Runtime,
    server: IotHubServer,
    hub: IotHub,
    ca: std::path::PathBuf,
}

impl AmqpHub {
    fn start(config: IotHubConfig, device: &str) -> (AmqpHub, *mut mqstate_iothub_options) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = rt
            .block_on(IotHubServer::start(IotHubConfig {
                admin_port: None,
                https_port: None,
                ..config
            }))
            .unwrap();
        let hub = server.hub();
        hub.add_device(&DeviceSpec::parse(device).unwrap()).unwrap();
        let amqp_port = hub.endpoints().amqp_endpoint.unwrap().port();
        // The hub's AMQP endpoint is TLS with a certificate generated at start: trust it.
        let ca = std::env::temp_dir().join(format!(
            "mqstate-ffi-hub-ca-{device}-{}.pem",
            std::process::id()
        ));
        std::fs::write(&ca, hub.ca_certificate_pem().unwrap()).unwrap();

        let o = options(&hub.connection_string(device).unwrap());
        let (amqp, host, ca_path) = (c("amqp"), c("127.0.0.1"), c(ca.to_str().unwrap()));
        assert_eq!(
            unsafe { mqstate_iothub_options_set_transport(o, amqp.as_ptr()) },
            MQSTATE_OK
        );
        assert_eq!(
            unsafe { mqstate_iothub_options_set_host(o, host.as_ptr()) },
            MQSTATE_OK
        );
        assert_eq!(
            unsafe { mqstate_iothub_options_set_port(o, amqp_port) },
            MQSTATE_OK
        );
        assert_eq!(
            unsafe { mqstate_iothub_options_set_ca_file(o, ca_path.as_ptr()) },
            MQSTATE_OK
        );
        (
            AmqpHub {
                rt,
                server,
                hub,
                ca,
            },
            o,
        )
    }

    fn stop(self) {
        let _ = std::fs::remove_file(&self.ca);
        self.rt.block_on(self.server.shutdown());
    }
}

#[test]
fn c_abi_options_connect_over_amqp_and_reject_and_abandon() {
    let (amqp_hub, o) = AmqpHub::start(IotHubConfig::default(), "adev");
    let hub = &amqp_hub.hub;
    assert_eq!(
        unsafe { mqstate_iothub_options_set_receive_buffer(o, 8) },
        MQSTATE_OK
    );
    assert_eq!(
        unsafe { mqstate_iothub_options_set_token_lifetime_ms(o, 120_000) },
        MQSTATE_OK
    );
    assert_eq!(unsafe { mqstate_iothub_options_check(o) }, MQSTATE_OK);
    let mut dev = ptr::null_mut();
    assert_eq!(
        unsafe { mqstate_iothub_device_connect(o, &mut dev) },
        MQSTATE_OK,
        "{}",
        last_message()
    );
    // The device copied the options.
    unsafe { mqstate_iothub_options_free(o) };

    for id in ["ok", "bad", "later"] {
        hub.send("adev", C2dMessage::new(id).message_id(id).ack(Ack::Full))
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut settled = 0;
    while settled < 3 {
        let m = receive(dev);
        let mut id = ptr::null();
        let name = c("message_id");
        assert_eq!(
            unsafe { mqstate_c2d_message_system_property(m, name.as_ptr(), &mut id) },
            MQSTATE_OK
        );
        let id = cstr(id).to_owned();
        let mut count = u32::MAX;
        assert_eq!(
            unsafe { mqstate_c2d_message_delivery_count(m, &mut count) },
            MQSTATE_OK
        );
        seen.push((id.clone(), count));
        match (id.as_str(), count) {
            ("bad", _) => {
                assert_eq!(unsafe { mqstate_c2d_reject(m) }, MQSTATE_OK);
                // Settled once only.
                assert_eq!(unsafe { mqstate_c2d_complete(m) }, MQSTATE_INVALID_ARGUMENT);
                settled += 1;
            }
            ("later", 0) => {
                assert_eq!(unsafe { mqstate_c2d_abandon(m) }, MQSTATE_OK);
                let mut again = true;
                assert_eq!(
                    unsafe { mqstate_c2d_message_is_redelivery(m, &mut again) },
                    MQSTATE_OK
                );
                assert!(!again);
            }
            _ => {
                assert_eq!(unsafe { mqstate_c2d_complete(m) }, MQSTATE_OK);
                settled += 1;
            }
        }
        unsafe { mqstate_c2d_message_free(m) };
    }
    // Abandoned, "later" came again with its delivery count one higher.
    assert!(seen.contains(&("later".to_owned(), 0)), "{seen:?}");
    assert!(seen.contains(&("later".to_owned(), 1)), "{seen:?}");
    assert_eq!(feedback(hub, "ok"), FeedbackStatus::Success);
    assert_eq!(feedback(hub, "bad"), FeedbackStatus::Rejected);
    assert_eq!(feedback(hub, "later"), FeedbackStatus::Success);
    let q = hub.queue("adev").unwrap();
    assert_eq!(q.depth, 0);
    assert_eq!(
        q.finished
            .iter()
            .filter(|m| m.state == MessageState::DeadLettered)
            .count(),
        1,
        "{q:?}"
    );

    unsafe { mqstate_iothub_device_free(dev) };
    amqp_hub.stop();
}

#[test]
fn c_abi_abandon_past_the_max_delivery_count_dead_letters() {
    let (amqp_hub, o) = AmqpHub::start(
        IotHubConfig {
            max_delivery_count: 2,
            ..IotHubConfig::default()
        },
        "ddev",
    );
    let hub = &amqp_hub.hub;
    let mut dev = ptr::null_mut();
    assert_eq!(
        unsafe { mqstate_iothub_device_connect(o, &mut dev) },
        MQSTATE_OK,
        "{}",
        last_message()
    );
    unsafe { mqstate_iothub_options_free(o) };

    hub.send(
        "ddev",
        C2dMessage::new("x").message_id("x1").ack(Ack::Negative),
    )
    .unwrap();
    // Delivered with count 0, abandoned, delivered with count 1, abandoned: past the hub's max
    // delivery count (2), the second abandon dead-letters it.
    for expected in [0, 1] {
        let m = receive(dev);
        let mut count = u32::MAX;
        assert_eq!(
            unsafe { mqstate_c2d_message_delivery_count(m, &mut count) },
            MQSTATE_OK
        );
        assert_eq!(count, expected);
        assert_eq!(unsafe { mqstate_c2d_abandon(m) }, MQSTATE_OK);
        unsafe { mqstate_c2d_message_free(m) };
    }
    assert_eq!(feedback(hub, "x1"), FeedbackStatus::DeliveryCountExceeded);
    let q = hub.queue("ddev").unwrap();
    assert_eq!(q.depth, 0);
    assert_eq!(
        q.finished
            .iter()
            .filter(|m| m.state == MessageState::DeadLettered)
            .count(),
        1,
        "{q:?}"
    );
    // Not delivered again.
    let mut m = ptr::null_mut();
    assert_eq!(
        unsafe { mqstate_iothub_device_receive(dev, 300, &mut m) },
        MQSTATE_TIMEOUT
    );
    assert!(m.is_null());

    unsafe { mqstate_iothub_device_free(dev) };
    amqp_hub.stop();
}

#[test]
fn c_abi_option_mistakes_are_the_cores_errors() {
    const SAS: &str = "HostName=h.example;DeviceId=d;SharedAccessKey=c2VjcmV0";
    const X509: &str = "HostName=h.example;DeviceId=d;x509=true";

    // NULL arguments, and a connection string the core cannot parse.
    let mut o = ptr::null_mut();
    assert_eq!(
        unsafe { mqstate_iothub_options_new(ptr::null(), &mut o) },
        MQSTATE_NULL_PARAMETER
    );
    let bad = c("HostName=h.example;DeviceId=d;SharedAccessKey=c2VjcmV0;Colour=blue");
    assert_eq!(
        unsafe { mqstate_iothub_options_new(bad.as_ptr(), &mut o) },
        MQSTATE_INVALID_ARGUMENT
    );
    assert!(
        last_message().contains("unknown field \"colour\""),
        "{}",
        last_message()
    );
    assert!(
        !last_message().contains("c2VjcmV0"),
        "the key is never shown"
    );
    assert!(o.is_null());
    assert_eq!(
        unsafe { mqstate_iothub_options_set_tls(ptr::null_mut(), false) },
        MQSTATE_NULL_PARAMETER
    );
    assert!(last_message().contains("options"));
    assert_eq!(
        unsafe { mqstate_iothub_options_check(ptr::null()) },
        MQSTATE_NULL_PARAMETER
    );
    unsafe { mqstate_iothub_options_free(ptr::null_mut()) };

    // A transport the core does not know: refused, nothing changed.
    let o = options(SAS);
    let pigeon = c("pigeon");
    assert_eq!(
        unsafe { mqstate_iothub_options_set_transport(o, pigeon.as_ptr()) },
        MQSTATE_INVALID_ARGUMENT
    );
    assert!(last_message().contains("unknown transport \"pigeon\""));
    assert_eq!(unsafe { mqstate_iothub_options_check(o) }, MQSTATE_OK);

    // TLS off with a CA file: the core's rule, at check and at connect.
    let ca = c("ca.pem");
    assert_eq!(
        unsafe { mqstate_iothub_options_set_tls(o, false) },
        MQSTATE_OK
    );
    assert_eq!(
        unsafe { mqstate_iothub_options_set_ca_file(o, ca.as_ptr()) },
        MQSTATE_OK
    );
    assert_eq!(
        unsafe { mqstate_iothub_options_check(o) },
        MQSTATE_INVALID_ARGUMENT
    );
    assert!(last_message().contains("TLS is turned off"));
    // A clone is independent: fixing the copy leaves the original as it was.
    let mut copy = ptr::null_mut();
    assert_eq!(
        unsafe { mqstate_iothub_options_clone(o, &mut copy) },
        MQSTATE_OK
    );
    assert_eq!(
        unsafe { mqstate_iothub_options_set_ca_file(copy, ptr::null()) },
        MQSTATE_OK
    );
    assert_eq!(unsafe { mqstate_iothub_options_check(copy) }, MQSTATE_OK);
    assert_eq!(
        unsafe { mqstate_iothub_options_check(o) },
        MQSTATE_INVALID_ARGUMENT
    );
    let mut dev = ptr::null_mut();
    assert_eq!(
        unsafe { mqstate_iothub_device_connect(o, &mut dev) },
        MQSTATE_INVALID_ARGUMENT
    );
    assert!(dev.is_null());
    // Values are the core's to judge too.
    assert_eq!(
        unsafe { mqstate_iothub_options_set_port(copy, 0) },
        MQSTATE_OK
    );
    assert_eq!(
        unsafe { mqstate_iothub_options_check(copy) },
        MQSTATE_INVALID_ARGUMENT
    );
    assert!(last_message().contains("port 0"), "{}", last_message());
    unsafe { mqstate_iothub_options_free(copy) };
    // A certificate for a SAS device is refused.
    let (cert, key) = (c("d.pem"), c("d.key"));
    assert_eq!(
        unsafe { mqstate_iothub_options_set_tls(o, true) },
        MQSTATE_OK
    );
    assert_eq!(
        unsafe { mqstate_iothub_options_set_ca_file(o, ptr::null()) },
        MQSTATE_OK
    );
    assert_eq!(
        unsafe { mqstate_iothub_options_set_client_cert(o, cert.as_ptr(), key.as_ptr()) },
        MQSTATE_OK
    );
    assert_eq!(
        unsafe { mqstate_iothub_options_check(o) },
        MQSTATE_INVALID_ARGUMENT
    );
    assert!(
        last_message().contains("x509=true instead"),
        "{}",
        last_message()
    );
    unsafe { mqstate_iothub_options_free(o) };

    // X.509: the certificate needs its key, and x509=true needs the certificate; connect says
    // so before trying any connection (h.example is never resolved).
    let o = options(X509);
    assert_eq!(
        unsafe { mqstate_iothub_options_set_client_cert(o, cert.as_ptr(), ptr::null()) },
        MQSTATE_OK
    );
    assert_eq!(
        unsafe { mqstate_iothub_device_connect(o, &mut dev) },
        MQSTATE_INVALID_ARGUMENT
    );
    assert!(last_message().contains("both cert_file and key_file"));
    assert!(dev.is_null());
    assert_eq!(
        unsafe { mqstate_iothub_options_set_client_cert(o, ptr::null(), ptr::null()) },
        MQSTATE_OK
    );
    assert_eq!(
        unsafe { mqstate_iothub_options_check(o) },
        MQSTATE_INVALID_ARGUMENT
    );
    assert!(last_message().contains("x509=true"));
    assert_eq!(
        unsafe { mqstate_iothub_options_set_client_cert(o, cert.as_ptr(), key.as_ptr()) },
        MQSTATE_OK
    );
    assert_eq!(unsafe { mqstate_iothub_options_check(o) }, MQSTATE_OK);
    unsafe { mqstate_iothub_options_free(o) };

    // The short form goes through the same rules.
    let x509 = c(X509);
    assert_eq!(
        unsafe {
            mqstate_iothub_device_new(
                x509.as_ptr(),
                ptr::null(),
                0,
                true,
                ptr::null(),
                0,
                &mut dev,
            )
        },
        MQSTATE_INVALID_ARGUMENT
    );
    assert!(last_message().contains("x509=true"));
    let sas = c(SAS);
    assert_eq!(
        unsafe {
            mqstate_iothub_device_new(
                sas.as_ptr(),
                ptr::null(),
                0,
                false,
                ca.as_ptr(),
                0,
                &mut dev,
            )
        },
        MQSTATE_INVALID_ARGUMENT
    );
    assert!(last_message().contains("TLS is turned off"));
    assert!(dev.is_null());

    // Outputs: NULL is named.
    let msg: *const mqstate_c2d_message = ptr::null();
    let mut count = 0u32;
    assert_eq!(
        unsafe { mqstate_c2d_message_delivery_count(msg, &mut count) },
        MQSTATE_NULL_PARAMETER
    );
    assert!(last_message().contains("message"));
}

#[test]
fn c_abi_setters_reach_the_cores_settings() {
    use mqstate::iothub::Transport;
    const SAS: &str = "HostName=h.example;DeviceId=d;SharedAccessKey=c2VjcmV0";
    let o = options(SAS);
    let (amqp, host, ca) = (c("AMQP"), c("10.0.0.7"), c("ca.pem"));
    unsafe {
        assert_eq!(
            mqstate_iothub_options_set_transport(o, amqp.as_ptr()),
            MQSTATE_OK
        );
        assert_eq!(
            mqstate_iothub_options_set_host(o, host.as_ptr()),
            MQSTATE_OK
        );
        assert_eq!(
            mqstate_iothub_options_set_ca_file(o, ca.as_ptr()),
            MQSTATE_OK
        );
        assert_eq!(
            mqstate_iothub_options_set_token_lifetime_ms(o, 600_000),
            MQSTATE_OK
        );
        assert_eq!(
            mqstate_iothub_options_set_keep_alive_ms(o, 30_000),
            MQSTATE_OK
        );
        assert_eq!(
            mqstate_iothub_options_set_connect_timeout_ms(o, 5_000),
            MQSTATE_OK
        );
        assert_eq!(
            mqstate_iothub_options_set_operation_timeout_ms(o, 7_000),
            MQSTATE_OK
        );
        assert_eq!(mqstate_iothub_options_set_receive_buffer(o, 3), MQSTATE_OK);
    }
    let resolved = unsafe { &*o }.resolve().unwrap();
    assert_eq!(resolved.transport, Transport::Amqp);
    assert_eq!(resolved.port, 5671, "the port follows the transport");
    assert_eq!(resolved.connect_host.as_deref(), Some("10.0.0.7"));
    assert_eq!(resolved.hostname, "h.example", "the tokens' host stays");
    assert_eq!(
        resolved.tls.as_ref().unwrap().ca_file.as_deref(),
        Some(std::path::Path::new("ca.pem"))
    );
    assert_eq!(resolved.token_lifetime, Duration::from_secs(600));
    assert_eq!(resolved.keep_alive, Duration::from_secs(30));
    assert_eq!(resolved.connect_timeout, Duration::from_secs(5));
    assert_eq!(resolved.operation_timeout, Duration::from_secs(7));
    assert_eq!(resolved.receive_buffer, 3);
    // NULL goes back to the default transport and host.
    unsafe {
        assert_eq!(
            mqstate_iothub_options_set_transport(o, ptr::null()),
            MQSTATE_OK
        );
        assert_eq!(mqstate_iothub_options_set_host(o, ptr::null()), MQSTATE_OK);
        assert_eq!(mqstate_iothub_options_set_port(o, 18883), MQSTATE_OK);
    }
    let resolved = unsafe { &*o }.resolve().unwrap();
    assert_eq!(resolved.transport, Transport::Mqtt);
    assert_eq!(resolved.connect_host, None, "the connection string's host");
    assert_eq!(resolved.port, 18883);

    // Each value's limits are the core's.
    for (set, why) in [
        (
            (|o| unsafe { mqstate_iothub_options_set_token_lifetime_ms(o, 1_000) })
                as fn(*mut mqstate_iothub_options) -> mqstate_status,
            "shorter than 10 s",
        ),
        (
            |o| unsafe { mqstate_iothub_options_set_keep_alive_ms(o, 2_000_000) },
            "keep-alive",
        ),
        (
            |o| unsafe { mqstate_iothub_options_set_receive_buffer(o, 0) },
            "receive buffer",
        ),
    ] {
        let mut copy = ptr::null_mut();
        assert_eq!(
            unsafe { mqstate_iothub_options_clone(o, &mut copy) },
            MQSTATE_OK
        );
        assert_eq!(set(copy), MQSTATE_OK);
        assert_eq!(
            unsafe { mqstate_iothub_options_check(copy) },
            MQSTATE_INVALID_ARGUMENT
        );
        assert!(last_message().contains(why), "{why}: {}", last_message());
        unsafe { mqstate_iothub_options_free(copy) };
    }
    unsafe { mqstate_iothub_options_free(o) };
}
