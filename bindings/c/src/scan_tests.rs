//! The scan exports called as C would call them, against an in-process local server (the C
//! test program `tests/c/test_mqstate.c` covers them from C too).

use std::collections::HashSet;
use std::ffi::{CStr, CString, c_char};
use std::ptr;

use super::*;
use crate::client::{
    MQSTATE_SET_ALWAYS, mqstate_client_close, mqstate_client_free, mqstate_client_new,
    mqstate_client_set,
};
use crate::errors::{mqstate_error_message, mqstate_error_service_kind};
use crate::options::{mqstate_connect_options_free, mqstate_connect_options_from_url};
use mqstate_server::LocalServer;

fn last_message() -> String {
    let mut buf = [0 as c_char; 512];
    let mut written = 0usize;
    let status = unsafe { mqstate_error_message(buf.as_mut_ptr(), buf.len(), &mut written) };
    assert_eq!(status, MQSTATE_OK);
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned()
}

fn connect(url: &str) -> *mut mqstate_client {
    let url = CString::new(url).unwrap();
    let mut options = ptr::null_mut();
    let mut client = ptr::null_mut();
    unsafe {
        assert_eq!(
            mqstate_connect_options_from_url(url.as_ptr(), &mut options),
            MQSTATE_OK
        );
        assert_eq!(mqstate_client_new(options, &mut client), MQSTATE_OK);
        mqstate_connect_options_free(options);
    }
    client
}

/// Reads every page left: the keys, and how many pages came.
fn read_all(scan: *const mqstate_scan) -> (Vec<Vec<u8>>, usize) {
    let mut keys = Vec::new();
    let mut pages = 0;
    loop {
        let mut page = ptr::null_mut();
        match unsafe { mqstate_scan_next_page(scan, &mut page) } {
            MQSTATE_OK => {}
            MQSTATE_NOT_FOUND => {
                assert!(page.is_null(), "not written at the end");
                return (keys, pages);
            }
            other => panic!("next_page: {other:?}: {}", last_message()),
        }
        pages += 1;
        let mut n = usize::MAX;
        assert_eq!(unsafe { mqstate_scan_page_count(page, &mut n) }, MQSTATE_OK);
        for i in 0..n {
            let (mut data, mut len) = (ptr::null(), 0usize);
            assert_eq!(
                unsafe { mqstate_scan_page_key(page, i, &mut data, &mut len) },
                MQSTATE_OK
            );
            keys.push(unsafe { std::slice::from_raw_parts(data, len) }.to_vec());
        }
        let (mut data, mut len) = (ptr::null(), 0usize);
        assert_eq!(
            unsafe { mqstate_scan_page_key(page, n, &mut data, &mut len) },
            MQSTATE_INVALID_ARGUMENT
        );
        assert!(last_message().contains("out of range"));
        assert!(data.is_null());
        unsafe { mqstate_scan_page_free(page) };
    }
}

#[test]
fn c_abi_scans_pages_binary_keys_and_errors() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(LocalServer::start()).unwrap();
    let client = connect(&server.url());

    // 700 keys (more than one page) and a binary one.
    let prefix = b"ffi-scan/".to_vec();
    let mut want = HashSet::new();
    for i in 0..700 {
        let mut key = prefix.clone();
        key.extend_from_slice(format!("k{i:04}").as_bytes());
        want.insert(key);
    }
    let mut binary = prefix.clone();
    binary.extend_from_slice(b"\x00\r\n\xff");
    want.insert(binary);
    for key in &want {
        let status = unsafe {
            mqstate_client_set(
                client,
                key.as_ptr(),
                key.len(),
                b"v".as_ptr(),
                1,
                MQSTATE_SET_ALWAYS,
                ptr::null(),
                ptr::null(),
                ptr::null_mut(),
            )
        };
        assert_eq!(status, MQSTATE_OK);
    }

    let mut pattern = prefix.clone();
    pattern.push(b'*');
    let mut scan = ptr::null_mut();
    assert_eq!(
        unsafe { mqstate_scan_new(client, pattern.as_ptr(), pattern.len(), &mut scan) },
        MQSTATE_OK
    );
    let mut done = true;
    assert_eq!(unsafe { mqstate_scan_is_done(scan, &mut done) }, MQSTATE_OK);
    assert!(!done);
    let (keys, pages) = read_all(scan);
    assert!(pages >= 2, "{pages} page(s)");
    assert_eq!(keys.len(), want.len(), "each key once");
    assert_eq!(keys.into_iter().collect::<HashSet<_>>(), want);
    assert_eq!(unsafe { mqstate_scan_is_done(scan, &mut done) }, MQSTATE_OK);
    assert!(done);
    let mut page = ptr::null_mut();
    assert_eq!(
        unsafe { mqstate_scan_next_page(scan, &mut page) },
        MQSTATE_NOT_FOUND
    );
    assert!(last_message().contains("done"));
    unsafe { mqstate_scan_free(scan) };

    // An empty pattern: refused before sending; NULL arguments: statuses, outputs untouched.
    let sentinel = 0x5a5a as *mut mqstate_scan;
    let mut scan = sentinel;
    unsafe {
        assert_eq!(
            mqstate_scan_new(client, pattern.as_ptr(), 0, &mut scan),
            MQSTATE_INVALID_ARGUMENT
        );
        assert!(last_message().contains("pattern"));
        assert_eq!(
            mqstate_scan_new(client, ptr::null(), 0, &mut scan),
            MQSTATE_NULL_PARAMETER
        );
        assert_eq!(last_message(), "null parameter: pattern is NULL");
        assert_eq!(
            mqstate_scan_new(ptr::null(), pattern.as_ptr(), 1, &mut scan),
            MQSTATE_NULL_PARAMETER
        );
        assert_eq!(
            mqstate_scan_new(client, pattern.as_ptr(), 1, ptr::null_mut()),
            MQSTATE_NULL_PARAMETER
        );
        assert_eq!(scan, sentinel);
        assert_eq!(
            mqstate_scan_next_page(ptr::null(), &mut page),
            MQSTATE_NULL_PARAMETER
        );
        assert_eq!(
            mqstate_scan_is_done(ptr::null(), &mut done),
            MQSTATE_NULL_PARAMETER
        );
        let mut n = 0;
        assert_eq!(
            mqstate_scan_page_count(ptr::null(), &mut n),
            MQSTATE_NULL_PARAMETER
        );
        let (mut data, mut len) = (ptr::null(), 0usize);
        assert_eq!(
            mqstate_scan_page_key(ptr::null(), 0, &mut data, &mut len),
            MQSTATE_NULL_PARAMETER
        );
        mqstate_scan_free(ptr::null_mut());
        mqstate_scan_page_free(ptr::null_mut());
    }

    // A malformed pattern: the server's error on the first page; the scan stays usable.
    let mut scan = ptr::null_mut();
    let bad = b"ffi-scan/k[";
    unsafe {
        assert_eq!(
            mqstate_scan_new(client, bad.as_ptr(), bad.len(), &mut scan),
            MQSTATE_OK
        );
        assert_eq!(
            mqstate_scan_next_page(scan, &mut page),
            MQSTATE_SERVICE_ERROR
        );
        assert!(last_message().contains("no closing ']'"));
        let mut kind = crate::boundary::mqstate_service_error::MQSTATE_SERVICE_ERROR_NONE;
        assert_eq!(mqstate_error_service_kind(&mut kind), MQSTATE_OK);
        assert_ne!(
            kind,
            crate::boundary::mqstate_service_error::MQSTATE_SERVICE_ERROR_NONE
        );
        assert!(page.is_null());
        assert_eq!(mqstate_scan_is_done(scan, &mut done), MQSTATE_OK);
        assert!(!done);
        mqstate_scan_free(scan);
    }

    // A scan made before the client is closed: its pages are DISCONNECTED, not a crash; it
    // may be freed after the client.
    let mut scan = ptr::null_mut();
    unsafe {
        assert_eq!(
            mqstate_scan_new(client, pattern.as_ptr(), pattern.len(), &mut scan),
            MQSTATE_OK
        );
        assert_eq!(mqstate_client_close(client), MQSTATE_OK);
        mqstate_client_free(client);
        assert_eq!(
            mqstate_scan_next_page(scan, &mut page),
            MQSTATE_DISCONNECTED
        );
        assert!(page.is_null());
        mqstate_scan_free(scan);
    }
    rt.block_on(server.shutdown());
}
