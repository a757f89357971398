//! Rust-side checks of the C contract (the C test programs in `tests/c/` check it from C).

use std::ffi::{CStr, c_char, c_int};
use std::path::Path;
use std::ptr;

use crate::boundary::mqstate_status::*;
use crate::errors::*;
use crate::hex::*;
use crate::version::*;

/// The names of the functions defined with `extern "C" fn NAME(` in `source`, each with the
/// text of its body (from its opening brace to the matching closing one).
fn exported_functions(source: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("extern \"C\" fn ") {
        let after = &rest[at + "extern \"C\" fn ".len()..];
        rest = after;
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // `extern "C" fn(` is a function pointer type, not a definition.
        if name.is_empty() {
            continue;
        }
        let open = after.find('{').expect("a function body");
        let mut depth = 0usize;
        let mut end = None;
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(open + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let body = &after[open + 1..end.expect("a closed body")];
        found.push((name, body.to_owned()));
    }
    found
}

#[test]
fn every_export_runs_in_the_boundary() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs")
            || path.file_name().and_then(|n| n.to_str()) == Some("tests.rs")
        {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        for (name, body) in exported_functions(&source) {
            count += 1;
            let body = body.trim();
            assert!(
                body.starts_with("ffi_boundary!"),
                "{}: extern \"C\" fn {name} does not start with ffi_boundary!",
                path.display()
            );
            // The macro call is the whole body: nothing runs outside the boundary.
            let close = body.chars().last().unwrap();
            let open = body["ffi_boundary!".len()..]
                .trim_start()
                .chars()
                .next()
                .unwrap();
            let matching = match open {
                '{' => '}',
                '(' => ')',
                _ => panic!("{name}: ffi_boundary! followed by {open:?}"),
            };
            assert_eq!(close, matching, "{name}: code after the ffi_boundary! call");
            assert_eq!(
                source.matches(&format!("fn {name}(")).count(),
                1,
                "{name} is defined once"
            );
            assert!(
                source.contains(&format!(
                    "#[unsafe(no_mangle)]\npub unsafe extern \"C\" fn {name}("
                )) || source.contains(&format!(
                    "#[unsafe(no_mangle)]\npub extern \"C\" fn {name}("
                )),
                "{name} is #[unsafe(no_mangle)] pub"
            );
        }
    }
    assert!(count >= 70, "found only {count} exported functions");
}

#[test]
fn the_scanner_sees_through_fn_pointer_types() {
    let source = "pub type cb = Option<unsafe extern \"C\" fn(u: *mut c_void)>;\n\
                  #[unsafe(no_mangle)]\npub extern \"C\" fn f() -> u32 { ffi_boundary! { g({}) } }";
    let found = exported_functions(source);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, "f");
    assert_eq!(found[0].1.trim(), "ffi_boundary! { g({}) }");
}

fn last_message() -> String {
    let mut buf = [0 as c_char; 512];
    let mut written = 0usize;
    let status = unsafe { mqstate_error_message(buf.as_mut_ptr(), buf.len(), &mut written) };
    assert_eq!(status, MQSTATE_OK);
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(s.len(), written);
    s
}

#[test]
fn a_panic_becomes_a_status_and_a_message() {
    assert_eq!(mqstate_test_panic(), MQSTATE_PANIC);
    assert!(last_message().contains("mqstate_test_panic was called"));
}

#[test]
fn null_parameters_are_named_and_outputs_untouched() {
    let sentinel = 0x5a5a as *mut mqstate_version;
    let mut out = sentinel;
    let status = unsafe { mqstate_version_parse(ptr::null(), &mut out) };
    assert_eq!(status, MQSTATE_NULL_PARAMETER);
    assert_eq!(out, sentinel);
    assert_eq!(last_message(), "null parameter: text is NULL");
    let status = unsafe { mqstate_version_parse(c"1:2:n".as_ptr(), ptr::null_mut()) };
    assert_eq!(status, MQSTATE_NULL_PARAMETER);
    assert!(last_message().contains("version_out"));
}

#[test]
fn versions_parse_format_and_compare() {
    unsafe {
        let mut a = ptr::null_mut();
        let mut b = ptr::null_mut();
        assert_eq!(
            mqstate_version_parse(c"1696374425000:0:CLIENT".as_ptr(), &mut a),
            MQSTATE_OK
        );
        assert_eq!(
            mqstate_version_new(1_696_374_425_000, 1, c"A".as_ptr(), &mut b),
            MQSTATE_OK
        );
        let mut text = ptr::null();
        let mut len = 0;
        assert_eq!(mqstate_version_string(a, &mut text, &mut len), MQSTATE_OK);
        assert_eq!(
            CStr::from_ptr(text).to_str().unwrap(),
            "001696374425000:00000:CLIENT"
        );
        assert_eq!(len, 28);
        let mut parts = std::mem::zeroed::<mqstate_hlc>();
        assert_eq!(mqstate_version_parts(a, &mut parts), MQSTATE_OK);
        assert_eq!(
            (parts.ms, parts.counter, parts.node_id_len),
            (1_696_374_425_000, 0, 6)
        );
        assert_eq!(CStr::from_ptr(parts.node_id).to_str().unwrap(), "CLIENT");
        let mut order: c_int = 7;
        assert_eq!(mqstate_version_compare(a, b, &mut order), MQSTATE_OK);
        assert_eq!(order, -1);
        assert_eq!(mqstate_version_compare(b, a, &mut order), MQSTATE_OK);
        assert_eq!(order, 1);
        mqstate_version_free(a);
        mqstate_version_free(b);
        mqstate_version_free(ptr::null_mut());

        let mut c = ptr::null_mut();
        assert_eq!(
            mqstate_version_parse(c"1:+2:n".as_ptr(), &mut c),
            MQSTATE_INVALID_ARGUMENT
        );
        assert!(c.is_null());
        assert!(last_message().contains("counter"));
        assert_eq!(
            mqstate_version_new(1, 2, c"a:b".as_ptr(), &mut c),
            MQSTATE_INVALID_ARGUMENT
        );
    }
}

#[test]
fn error_messages_truncate_at_a_character_boundary() {
    unsafe {
        // The message quotes the bad character, so a multi-byte character lands at the cut.
        let mut out = [0u8; 4];
        let mut n = 0;
        let status = mqstate_hex_decode(c"00\u{e9}".as_ptr(), out.as_mut_ptr(), 4, &mut n);
        assert_eq!(status, MQSTATE_INVALID_ARGUMENT);
        let full = last_message();
        let mut len = 0;
        assert_eq!(mqstate_error_message_len(&mut len), MQSTATE_OK);
        assert_eq!(len, full.len());
        let cut = full.find('\u{e9}').unwrap() + 1; // inside the first é
        let mut buf = vec![0 as c_char; cut + 1];
        let mut written = 99;
        assert_eq!(
            mqstate_error_message(buf.as_mut_ptr(), buf.len(), &mut written),
            MQSTATE_OK
        );
        assert_eq!(written, cut - 1);
        assert_eq!(
            CStr::from_ptr(buf.as_ptr()).to_bytes(),
            &full.as_bytes()[..cut - 1]
        );
        assert_eq!(
            mqstate_error_message(buf.as_mut_ptr(), 0, &mut written),
            MQSTATE_BUFFER_TOO_SMALL
        );
        assert_eq!(
            mqstate_error_message(ptr::null_mut(), 4, &mut written),
            MQSTATE_NULL_PARAMETER
        );
        // The accessors do not replace the error they report.
        assert_eq!(last_message(), full);
    }
}

#[test]
fn status_names_are_the_enumerators() {
    for status in crate::boundary::all_statuses() {
        let name = unsafe { CStr::from_ptr(mqstate_status_name(status as u32)) };
        assert_eq!(name.to_str().unwrap(), format!("{status:?}"));
    }
    let unknown = unsafe { CStr::from_ptr(mqstate_status_name(12_345)) };
    assert_eq!(unknown.to_str().unwrap(), "MQSTATE_UNKNOWN_STATUS");
}

#[test]
fn hex_round_trip_and_small_buffers() {
    unsafe {
        let bytes = [0u8, 0x0d, 0x0a, 0xff];
        let mut buf = [0 as c_char; 9];
        let mut written = 0;
        assert_eq!(
            mqstate_hex_encode(bytes.as_ptr(), 4, buf.as_mut_ptr(), 8, &mut written),
            MQSTATE_BUFFER_TOO_SMALL
        );
        assert_eq!(written, 0);
        assert_eq!(
            mqstate_hex_encode(bytes.as_ptr(), 4, buf.as_mut_ptr(), 9, &mut written),
            MQSTATE_OK
        );
        assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "000D0AFF");
        assert_eq!(written, 8);
        let mut out = [0u8; 4];
        assert_eq!(
            mqstate_hex_decode(c"000d0AfF".as_ptr(), out.as_mut_ptr(), 4, &mut written),
            MQSTATE_OK
        );
        assert_eq!((out, written), (bytes, 4));
        assert_eq!(
            mqstate_hex_decode(c"0G".as_ptr(), out.as_mut_ptr(), 4, &mut written),
            MQSTATE_INVALID_ARGUMENT
        );
        assert_eq!(
            mqstate_hex_decode(c"".as_ptr(), ptr::null_mut(), 0, &mut written),
            MQSTATE_OK
        );
        assert_eq!(written, 0);
        assert_eq!(
            mqstate_hex_encode(ptr::null(), 0, buf.as_mut_ptr(), 1, &mut written),
            MQSTATE_OK
        );
        assert_eq!(buf[0], 0);
    }
}
