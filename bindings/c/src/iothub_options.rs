//! IoT Hub device options: `mqstate_iothub_options_*` and `mqstate_iothub_device_connect`.
//!
//! The handle holds the core's [`DeviceSettings`] (a connection string and the settings given
//! one by one over it); the setters only fill its fields, and `DeviceSettings::resolve`, at
//! connect (or `mqstate_iothub_options_check`), applies every rule and every check, so a
//! mistake gives the core's message, the same as in the other languages.

use std::ffi::c_char;
use std::path::PathBuf;
use std::time::Duration;

use mqstate::iothub::{DeviceOptions, DeviceSettings, Transport};

use crate::boundary::{
    FfiError, Out, arg_opt_str, arg_ref, arg_str, free_handle, into_handle, mqstate_status,
};
use crate::iothub::{mqstate_iothub_device, new_device};

/// An IoT Hub device's connection settings: its connection string and the settings given
/// one by one over it (transport, endpoint, TLS, client certificate, timeouts). Built with
/// `mqstate_iothub_options_new`, adjusted with the `mqstate_iothub_options_set_*` functions,
/// used by `mqstate_iothub_device_connect` (which copies them, so they may be freed right
/// after) and freed with `mqstate_iothub_options_free`. A setter stores its value; the rules
/// that tie values together (a certificate needs its key and `x509=true`, TLS off refuses TLS
/// files) and the limits of each value are checked by `mqstate_iothub_options_check` and by
/// `mqstate_iothub_device_connect`, before any connection is tried
/// (`MQSTATE_INVALID_ARGUMENT`, the message naming the setting). Not thread-safe: do not
/// change one handle from two threads at once.
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug, Clone)]
pub struct mqstate_iothub_options {
    settings: DeviceSettings,
}

impl mqstate_iothub_options {
    /// The device options these settings resolve to (the core's rules and checks).
    pub(crate) fn resolve(&self) -> Result<DeviceOptions, FfiError> {
        Ok(self.settings.clone().resolve()?)
    }
}

/// Options of the device `connection_string` (`HostName=...;DeviceId=...;SharedAccessKey=...`,
/// or `SharedAccessSignature=...`, or `x509=true` with `mqstate_iothub_options_set_client_cert`).
/// With nothing else set: MQTT over TLS to the connection string's host on 8883, the system's
/// trusted roots, SAS tokens valid one hour. A connection string that cannot be parsed is
/// `MQSTATE_INVALID_ARGUMENT` here already (the message never shows the key).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_new(
    connection_string: *const c_char,
    options_out: *mut *mut mqstate_iothub_options,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY (all blocks of this file): the C contract: pointers are NULL or valid.
        let cs = unsafe { arg_str(connection_string, "connection_string") }?;
        let out = unsafe { Out::new(options_out, "options_out") }?;
        // The core's parser, so that a malformed string is reported where it is given.
        DeviceOptions::from_connection_string(cs)?;
        out.write(into_handle(mqstate_iothub_options {
            settings: DeviceSettings::new(cs),
        }));
        Ok(())
    }
}

/// A new, independent copy of the options.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_clone(
    options: *const mqstate_iothub_options,
    options_out: *mut *mut mqstate_iothub_options,
) -> mqstate_status {
    ffi_boundary! {
        let options = unsafe { arg_ref(options, "options") }?;
        let out = unsafe { Out::new(options_out, "options_out") }?;
        out.write(into_handle(options.clone()));
        Ok(())
    }
}

/// Changes the settings behind a non-NULL handle.
///
/// # Safety
/// `options` is NULL or a live handle that no other thread uses during the call.
unsafe fn update(
    options: *mut mqstate_iothub_options,
    change: impl FnOnce(&mut DeviceSettings),
) -> Result<(), FfiError> {
    // SAFETY: the caller's contract.
    let options = unsafe { options.as_mut() }.ok_or_else(|| FfiError::null("options"))?;
    change(&mut options.settings);
    Ok(())
}

/// Sets the transport by name: `"mqtt"` (the default), `"amqp"` (also reject and abandon) or
/// `"amqp-ws"` (AMQP over WebSockets, port 443); the port follows the transport (8883, 5671,
/// 443) unless set; NULL goes back to the default.
/// A name the library does not know is `MQSTATE_INVALID_ARGUMENT` and changes nothing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_set_transport(
    options: *mut mqstate_iothub_options,
    transport: *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let transport = unsafe { arg_opt_str(transport, "transport") }?
            .map(str::parse::<Transport>)
            .transpose()?;
        unsafe { update(options, |s| s.transport = transport) }
    }
}

/// Sets the host to connect to, when it is not the connection string's (a local hub, a
/// gateway); the SAS tokens still name the connection string's host. NULL: the connection
/// string's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_set_host(
    options: *mut mqstate_iothub_options,
    host: *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let host = unsafe { arg_opt_str(host, "host") }?.map(str::to_owned);
        unsafe { update(options, |s| s.host = host) }
    }
}

/// Sets the port (default: the transport's, 8883 for MQTT, 5671 for AMQP; 0 is refused at
/// check and connect).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_set_port(
    options: *mut mqstate_iothub_options,
    port: u16,
) -> mqstate_status {
    ffi_boundary! {
        unsafe { update(options, |s| s.port = Some(port)) }
    }
}

/// TLS on (`true`, the default) or off (`false`: plain TCP, for a local hub only; refused
/// together with a CA file or a client certificate).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_set_tls(
    options: *mut mqstate_iothub_options,
    tls: bool,
) -> mqstate_status {
    ffi_boundary! {
        unsafe { update(options, |s| s.tls = Some(tls)) }
    }
}

/// Sets the PEM file of the CAs to trust instead of the system's (NULL: the system's). Read
/// at connect; errors name the file.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_set_ca_file(
    options: *mut mqstate_iothub_options,
    ca_file: *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let ca = unsafe { arg_opt_str(ca_file, "ca_file") }?.map(PathBuf::from);
        unsafe { update(options, |s| s.ca_file = ca) }
    }
}

/// Sets the device's X.509 certificate chain and its private key (PEM files, read at
/// connect), for a device whose connection string says `x509=true`. Both are needed (NULL and
/// NULL removes the certificate).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_set_client_cert(
    options: *mut mqstate_iothub_options,
    cert_file: *const c_char,
    key_file: *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        let cert = unsafe { arg_opt_str(cert_file, "cert_file") }?.map(PathBuf::from);
        let key = unsafe { arg_opt_str(key_file, "key_file") }?.map(PathBuf::from);
        unsafe {
            update(options, |s| {
                s.cert_file = cert;
                s.key_file = key;
            })
        }
    }
}

/// Sets the lifetime of each generated SAS token, in milliseconds (default one hour, at
/// least 10 s). The client renews the token before it expires.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_set_token_lifetime_ms(
    options: *mut mqstate_iothub_options,
    lifetime_ms: u64,
) -> mqstate_status {
    ffi_boundary! {
        unsafe { update(options, |s| s.token_lifetime = Some(Duration::from_millis(lifetime_ms))) }
    }
}

/// Sets the MQTT keep-alive, or the AMQP idle timeout, in milliseconds (default 60000).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_set_keep_alive_ms(
    options: *mut mqstate_iothub_options,
    keep_alive_ms: u64,
) -> mqstate_status {
    ffi_boundary! {
        unsafe { update(options, |s| s.keep_alive = Some(Duration::from_millis(keep_alive_ms))) }
    }
}

/// Sets how long a connection attempt may take, in milliseconds (default 30000).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_set_connect_timeout_ms(
    options: *mut mqstate_iothub_options,
    timeout_ms: u64,
) -> mqstate_status {
    ffi_boundary! {
        unsafe { update(options, |s| s.connect_timeout = Some(Duration::from_millis(timeout_ms))) }
    }
}

/// Sets how long sending an event waits for the hub, in milliseconds (default 30000).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_set_operation_timeout_ms(
    options: *mut mqstate_iothub_options,
    timeout_ms: u64,
) -> mqstate_status {
    ffi_boundary! {
        unsafe { update(options, |s| s.operation_timeout = Some(Duration::from_millis(timeout_ms))) }
    }
}

/// Sets how many received messages may be waiting to be settled before the client stops
/// reading (default 64; over AMQP the link's credit).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_set_receive_buffer(
    options: *mut mqstate_iothub_options,
    messages: usize,
) -> mqstate_status {
    ffi_boundary! {
        unsafe { update(options, |s| s.receive_buffer = Some(messages)) }
    }
}

/// Checks the options as `mqstate_iothub_device_connect` does, without connecting:
/// `MQSTATE_OK`, or `MQSTATE_INVALID_ARGUMENT` (or `MQSTATE_NOT_SUPPORTED`) with the message
/// naming the setting. Files are not read yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_check(
    options: *const mqstate_iothub_options,
) -> mqstate_status {
    ffi_boundary! {
        let options = unsafe { arg_ref(options, "options") }?;
        options.resolve().map(drop)
    }
}

/// Frees options. NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_options_free(options: *mut mqstate_iothub_options) {
    ffi_boundary!(raw () => {
        // SAFETY: NULL or a handle from this library, freed once (the C contract).
        unsafe { free_handle(options) }
    })
}

/// Connects a device with `options` (copied: they may be freed right after). The options are
/// checked first (as `mqstate_iothub_options_check`); then `MQSTATE_AUTHENTICATION_FAILED` for
/// a refused key, token or certificate, `MQSTATE_CONNECTION_ERROR` for a hub that cannot be
/// reached or a TLS file that cannot be read, `MQSTATE_TIMEOUT` past the connect timeout.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_device_connect(
    options: *const mqstate_iothub_options,
    device_out: *mut *mut mqstate_iothub_device,
) -> mqstate_status {
    ffi_boundary! {
        let options = unsafe { arg_ref(options, "options") }?;
        let out = unsafe { Out::new(device_out, "device_out") }?;
        out.write(new_device(options.resolve()?)?);
        Ok(())
    }
}
