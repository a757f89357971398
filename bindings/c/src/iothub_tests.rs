//! The C ABI of the IoT Hub device client, called as C would call it, against the in-process
//! local IoT Hub.

use std::ffi::{CStr, CString, c_char};
use std::ptr;
use std::time::Duration;

use super::*;
use crate::boundary::mqstate_status;
use mqstate_server::iothub::{C2dMessage, DeviceSpec, IotHubConfig, IotHubServer, MessageState};

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
    assert_eq!(unsafe { mqstate_c2d_abandon(m0) }, MQSTATE_NOT_SUPPORTED);

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
