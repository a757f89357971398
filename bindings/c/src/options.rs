//! Connect options: where the broker is and how to reach it.

use std::ffi::c_char;
use std::path::PathBuf;
use std::time::Duration;

use mqstate::{ConnectOptions, TlsOptions};

use crate::boundary::{
    FfiError, Out, arg_opt_str, arg_ref, arg_str, free_handle, into_handle, mqstate_status,
};

/// Connect options (host, port, client id, TLS, credentials, timeouts). Built with
/// `mqstate_connect_options_new`, `_from_url` or `_from_env`, adjusted with the
/// `mqstate_connect_options_set_*` functions, used by `mqstate_client_new` (which copies
/// them, so they may be freed right after) and freed with `mqstate_connect_options_free`.
/// Not thread-safe: do not change one handle from two threads at once.
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug, Clone)]
pub struct mqstate_connect_options {
    pub(crate) inner: ConnectOptions,
}

fn new_options(out: Out<*mut mqstate_connect_options>, inner: ConnectOptions) {
    out.write(into_handle(mqstate_connect_options { inner }));
}

/// Options for plain TCP to `host:port`, with the defaults: a generated client id,
/// keep-alive 60 s, session expiry 1 h, request timeout 10 s, connect timeout 10 s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_new(
    host: *const c_char,
    port: u16,
    options_out: *mut *mut mqstate_connect_options,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY (all blocks below): the C contract: pointers are NULL or valid.
        let host = unsafe { arg_str(host, "host") }?;
        let out = unsafe { Out::new(options_out, "options_out") }?;
        let options = ConnectOptions::new(host, port);
        options.validate()?;
        new_options(out, options);
        Ok(())
    }
}

/// Options from a URL, parsed by the core (`ConnectOptions::from_url`, which documents the
/// query parameters; `docs/protocol.md` lists them too): `mqtt://host[:port]` (plain TCP,
/// default port 1883) or `mqtts://host[:port]` (TLS, 8883), with optional
/// `user:password@` and query parameters such as `client_id`, `keep_alive`,
/// `session_expiry`, `request_timeout_ms`, `connect_timeout_ms`, `ca_file`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_from_url(
    url: *const c_char,
    options_out: *mut *mut mqstate_connect_options,
) -> mqstate_status {
    ffi_boundary! {
        let url = unsafe { arg_str(url, "url") }?;
        let out = unsafe { Out::new(options_out, "options_out") }?;
        new_options(out, ConnectOptions::from_url(url)?);
        Ok(())
    }
}

/// Options from the Azure IoT Operations environment variables (`AIO_BROKER_HOSTNAME`,
/// `AIO_BROKER_TCP_PORT`, `AIO_MQTT_USE_TLS`, `AIO_TLS_CA_FILE`, `AIO_TLS_CERT_FILE`,
/// `AIO_TLS_KEY_FILE`, `AIO_SAT_FILE`, `AIO_MQTT_CLIENT_ID`, `AIO_MQTT_USERNAME`,
/// `AIO_MQTT_PASSWORD_FILE`, `AIO_MQTT_KEEP_ALIVE`, `AIO_MQTT_SESSION_EXPIRY`). TLS is on
/// unless `AIO_MQTT_USE_TLS` is false. The message of an error names the variable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_from_env(
    options_out: *mut *mut mqstate_connect_options,
) -> mqstate_status {
    ffi_boundary! {
        let out = unsafe { Out::new(options_out, "options_out") }?;
        new_options(out, ConnectOptions::from_env()?);
        Ok(())
    }
}

/// A new, independent copy of the options.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_clone(
    options: *const mqstate_connect_options,
    options_out: *mut *mut mqstate_connect_options,
) -> mqstate_status {
    ffi_boundary! {
        let options = unsafe { arg_ref(options, "options") }?;
        let out = unsafe { Out::new(options_out, "options_out") }?;
        new_options(out, options.inner.clone());
        Ok(())
    }
}

/// Changes the options behind a non-NULL handle: `change` edits a copy, the core's
/// [`ConnectOptions::validate`] judges it, and only a valid copy replaces the options (so a
/// refused value leaves them as they were).
///
/// # Safety
/// `options` is NULL or a live handle that no other thread uses during the call.
unsafe fn update(
    options: *mut mqstate_connect_options,
    change: impl FnOnce(&mut ConnectOptions) -> Result<(), FfiError>,
) -> Result<(), FfiError> {
    // SAFETY: the caller's contract.
    let options = unsafe { options.as_mut() }.ok_or_else(|| FfiError::null("options"))?;
    let mut changed = options.inner.clone();
    change(&mut changed)?;
    changed.validate()?;
    options.inner = changed;
    Ok(())
}

/// Sets the MQTT client id (NULL: a random `mqstate-...` id is generated at connect). It is
/// also the node id of the client's versions and names its topics.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_set_client_id(
    options: *mut mqstate_connect_options,
    client_id: *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let client_id = unsafe { arg_opt_str(client_id, "client_id") }?;
        unsafe {
            update(options, |o| {
                o.client_id = client_id.map(str::to_owned);
                Ok(())
            })
        }
    }
}

/// Sets the MQTT user name and password (either may be NULL to unset it; a password needs a
/// user name).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_set_credentials(
    options: *mut mqstate_connect_options,
    username: *const c_char,
    password: *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let username = unsafe { arg_opt_str(username, "username") }?;
        let password = unsafe { arg_opt_str(password, "password") }?;
        unsafe {
            update(options, |o| {
                o.username = username.map(str::to_owned);
                o.password = password.map(str::to_owned);
                Ok(())
            })
        }
    }
}

/// Sets files read again at every (re)connection, because their secrets rotate: the MQTT
/// password file and the Kubernetes service account token (SAT) file, sent as MQTT5
/// enhanced authentication `K8S-SAT`. NULL unsets either.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_set_secret_files(
    options: *mut mqstate_connect_options,
    password_file: *const c_char,
    sat_file: *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let password_file = unsafe { arg_opt_str(password_file, "password_file") }?;
        let sat_file = unsafe { arg_opt_str(sat_file, "sat_file") }?;
        unsafe {
            update(options, |o| {
                o.password_file = password_file.map(PathBuf::from);
                o.sat_file = sat_file.map(PathBuf::from);
                Ok(())
            })
        }
    }
}

/// Turns TLS on. Every argument may be NULL: `ca_file` (PEM; NULL: the platform's trusted
/// roots), `cert_file` and `key_file` (mutual TLS; both or neither), `server_name` (the name
/// the broker's certificate must be valid for, when it is not the host). Files are read at
/// connect time; errors name the file.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_set_tls(
    options: *mut mqstate_connect_options,
    ca_file: *const c_char,
    cert_file: *const c_char,
    key_file: *const c_char,
    server_name: *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let ca = unsafe { arg_opt_str(ca_file, "ca_file") }?;
        let cert = unsafe { arg_opt_str(cert_file, "cert_file") }?;
        let key = unsafe { arg_opt_str(key_file, "key_file") }?;
        let server_name = unsafe { arg_opt_str(server_name, "server_name") }?;
        let mut tls = TlsOptions::default();
        tls.ca_file = ca.map(PathBuf::from);
        tls.client_cert_file = cert.map(PathBuf::from);
        tls.client_key_file = key.map(PathBuf::from);
        tls.server_name = server_name.map(str::to_owned);
        unsafe {
            update(options, |o| {
                o.tls = Some(tls);
                Ok(())
            })
        }
    }
}

/// Turns TLS off (plain TCP).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_clear_tls(
    options: *mut mqstate_connect_options,
) -> mqstate_status {
    ffi_boundary! {
        unsafe {
            update(options, |o| {
                o.tls = None;
                Ok(())
            })
        }
    }
}

/// Sets the default timeout of every request, in milliseconds (> 0; default 10000).
/// `mqstate_client_set_timeout_ms` changes it for one client later.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_set_request_timeout_ms(
    options: *mut mqstate_connect_options,
    timeout_ms: u64,
) -> mqstate_status {
    ffi_boundary! {
        unsafe {
            update(options, |o| {
                o.request_timeout = Duration::from_millis(timeout_ms);
                Ok(())
            })
        }
    }
}

/// Sets how long one connection attempt (TCP, TLS, CONNECT) may take, in milliseconds
/// (at least 1000, the core's minimum; default 10000). A connect that takes longer fails
/// with `MQSTATE_TIMEOUT`, whose message names host, port and the limit.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_set_connect_timeout_ms(
    options: *mut mqstate_connect_options,
    timeout_ms: u64,
) -> mqstate_status {
    ffi_boundary! {
        unsafe {
            update(options, |o| {
                o.connect_timeout = Duration::from_millis(timeout_ms);
                Ok(())
            })
        }
    }
}

/// Sets the MQTT keep-alive in seconds (5 to 65535; default 60) and how long the broker
/// keeps the session after a disconnection, in seconds (default 3600).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_set_session(
    options: *mut mqstate_connect_options,
    keep_alive_s: u32,
    session_expiry_s: u32,
) -> mqstate_status {
    ffi_boundary! {
        unsafe {
            update(options, |o| {
                o.keep_alive = Duration::from_secs(u64::from(keep_alive_s));
                o.session_expiry = Duration::from_secs(u64::from(session_expiry_s));
                Ok(())
            })
        }
    }
}

/// Frees options. NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_connect_options_free(options: *mut mqstate_connect_options) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(options) }
    })
}
