//! The IoT Hub device client: `mqstate_iothub_device_*` and `mqstate_c2d_*`, over the core's
//! `mqstate::iothub::blocking::DeviceClient`. Receiving waits with a timeout; completion,
//! ordering and every validation are the core's.

use std::ffi::{CString, c_char, c_void};
use std::path::PathBuf;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use mqstate::iothub::blocking::DeviceClient;
use mqstate::iothub::{C2dMessage, DeviceOptions, DeviceSettings, Telemetry};

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::boundary::{
    FfiError, Out, arg_bytes, arg_opt_str, arg_ref, arg_str, free_handle, into_handle,
    mqstate_status, mqstate_status::*, set_last_error,
};

/// An IoT Hub device connection (MQTT 3.1.1 or AMQP 1.0). Thread-safe: receive, send and
/// settle may be called from several threads.
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_iothub_device {
    client: DeviceClient,
    /// The thread of `mqstate_iothub_device_on_message`, if one was started.
    dispatcher: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for mqstate_iothub_device {
    fn drop(&mut self) {
        // Closing ends the dispatcher's receive; it then calls `destroy` and ends. A free from
        // the callback itself cannot wait for its own thread: that thread ends by itself once
        // the callback returns (it holds its own clone of the client).
        self.client.close();
        let thread = self
            .dispatcher
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(thread) = thread
            && thread.thread().id() != std::thread::current().id()
        {
            // A panic there was contained on that thread; nothing to report.
            let _ = thread.join();
        }
    }
}

/// Called with each cloud-to-device message, on the device's dispatcher thread (one thread per
/// device: calls never overlap and come in arrival order), with no lock of the library held.
/// `status` is `MQSTATE_OK` and `message` a message that now belongs to the callee (complete
/// it, now or later, from any thread, then free it with `mqstate_c2d_message_free`); or
/// `MQSTATE_UNEXPECTED_PAYLOAD` and `message` NULL for a message whose property bag is
/// malformed (it was acknowledged; `mqstate_error_message` on this thread says what was
/// wrong). It may call any function of this library, including `mqstate_iothub_device_free`
/// of this device; it must return (later messages wait for it) and must not unwind (no C++
/// exception, no longjmp).
#[allow(non_camel_case_types, reason = "C type name")]
pub type mqstate_c2d_message_callback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        status: mqstate_status,
        message: *mut mqstate_c2d_message,
    ),
>;

/// Called exactly once when the device's message callback ends (after its last call, on the
/// dispatcher thread), to release `user_data`.
#[allow(non_camel_case_types, reason = "C type name")]
pub type mqstate_c2d_destroy_callback = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// The caller's context pointer, handed to the dispatcher thread.
struct UserData(*mut c_void);

// SAFETY: the C contract (mqstate_iothub_device_on_message) says `user_data` is used from the
// library's dispatcher thread; the library never dereferences it.
unsafe impl Send for UserData {}

/// A received cloud-to-device message. Its strings are owned by it: valid until
/// `mqstate_c2d_message_free`.
#[allow(non_camel_case_types, reason = "C type name")]
#[derive(Debug)]
pub struct mqstate_c2d_message {
    message: C2dMessage,
    /// NUL-terminated copies of the system properties, by name.
    system: Vec<(&'static str, CString)>,
    /// NUL-terminated (name, value) copies; value `None` for a null property.
    properties: Vec<(CString, Option<CString>)>,
}

fn cstring(s: &str) -> CString {
    // Properties are URL-decoded text: a NUL is possible; it is shown escaped.
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

impl mqstate_c2d_message {
    fn new(message: C2dMessage) -> Self {
        let mut system = Vec::new();
        for (name, value) in [
            ("message_id", &message.message_id),
            ("correlation_id", &message.correlation_id),
            ("user_id", &message.user_id),
            ("to", &message.to),
            ("expiry_time", &message.expiry_time),
            ("content_type", &message.content_type),
            ("content_encoding", &message.content_encoding),
            ("ack", &message.ack),
        ] {
            if let Some(v) = value {
                system.push((name, cstring(v)));
            }
        }
        let properties = message
            .properties
            .iter()
            .map(|(k, v)| (cstring(k), v.as_deref().map(cstring)))
            .collect();
        mqstate_c2d_message {
            message,
            system,
            properties,
        }
    }
}

/// Connects `options` and wraps the client in a handle.
pub(crate) fn new_device(options: DeviceOptions) -> Result<*mut mqstate_iothub_device, FfiError> {
    let client = DeviceClient::connect(options)?;
    Ok(into_handle(mqstate_iothub_device {
        client,
        dispatcher: Mutex::new(None),
    }))
}

/// Connects a device over MQTT: the short form of `mqstate_iothub_options_new`, `_set_*` and
/// `mqstate_iothub_device_connect`, which also choose the transport (AMQP), a client
/// certificate and timeouts. `connection_string`: `HostName=...;DeviceId=...;SharedAccessKey=...`.
/// `host` (optional) and `port` (0: 8883) say where to connect; `tls` false is plain TCP
/// (a local hub; then `ca_file` must be NULL); `ca_file` (optional) is the PEM file of the CA
/// to trust. `token_lifetime_secs` (0: one hour) is the lifetime of the generated SAS tokens.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_device_new(
    connection_string: *const c_char,
    host: *const c_char,
    port: u16,
    tls: bool,
    ca_file: *const c_char,
    token_lifetime_secs: u32,
    device_out: *mut *mut mqstate_iothub_device,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY (all args): the C contract (NULL or valid).
        let cs = unsafe { arg_str(connection_string, "connection_string") }?;
        let host = unsafe { arg_opt_str(host, "host") }?;
        let ca_file = unsafe { arg_opt_str(ca_file, "ca_file") }?;
        let out = unsafe { Out::new(device_out, "device_out") }?;
        // 0 is "not given" in this short form; every rule is the core's (DeviceSettings).
        let mut settings = DeviceSettings::new(cs);
        settings.host = host.map(str::to_owned);
        settings.port = (port != 0).then_some(port);
        settings.tls = Some(tls);
        settings.ca_file = ca_file.map(PathBuf::from);
        settings.token_lifetime = (token_lifetime_secs != 0)
            .then(|| Duration::from_secs(u64::from(token_lifetime_secs)));
        out.write(new_device(settings.resolve()?)?);
        Ok(())
    }
}

/// Closes the connection and frees the device. NULL is a no-op. Messages not completed stay
/// in the hub's queue. With a message callback, returns after its last call and `destroy`
/// (except when called from that callback: `destroy` then runs when the callback returns).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_device_free(device: *mut mqstate_iothub_device) {
    ffi_boundary!(raw () => {
        // SAFETY: a handle from `mqstate_iothub_device_new` or `_connect`, freed once.
        unsafe { free_handle(device) }
    })
}

/// Waits up to `timeout_ms` for the next cloud-to-device message. `MQSTATE_TIMEOUT` when none
/// came; `MQSTATE_UNEXPECTED_PAYLOAD` for a message whose property bag is malformed (it was
/// acknowledged; the next call goes on); `MQSTATE_DISCONNECTED` once the device is closed.
/// The message belongs to the caller: complete it, then free it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_device_receive(
    device: *const mqstate_iothub_device,
    timeout_ms: u32,
    message_out: *mut *mut mqstate_c2d_message,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract.
        let device = unsafe { arg_ref(device, "device") }?;
        let out = unsafe { Out::new(message_out, "message_out") }?;
        match device
            .client
            .receive_timeout(Duration::from_millis(u64::from(timeout_ms)))
            .map_err(FfiError::from)?
        {
            Some(m) => {
                out.write(into_handle(mqstate_c2d_message::new(m)));
                Ok(())
            }
            None => Err(FfiError::new(
                MQSTATE_TIMEOUT,
                format!("no message within {timeout_ms} ms"),
            )),
        }
    }
}

/// The dispatcher thread: hands each message to the callback until the device is closed,
/// then calls `destroy` once.
fn dispatch(
    client: DeviceClient,
    callback: unsafe extern "C" fn(*mut c_void, mqstate_status, *mut mqstate_c2d_message),
    destroy: mqstate_c2d_destroy_callback,
    user_data: UserData,
) {
    loop {
        let (status, message) = match client.receive() {
            Ok(m) => {
                // Rust code on this thread is contained: a panic loses this message's handle
                // only (it was not completed, so the hub delivers it again).
                match catch_unwind(AssertUnwindSafe(|| mqstate_c2d_message::new(m))) {
                    Ok(m) => (MQSTATE_OK, into_handle(m)),
                    Err(_) => continue,
                }
            }
            Err(e @ mqstate::Error::MalformedMessage(_)) => {
                let e = FfiError::from(e);
                let status = e.status;
                set_last_error(e);
                (status, std::ptr::null_mut())
            }
            // Closed (or stopped for good, e.g. credentials refused on reconnection).
            Err(_) => break,
        };
        // SAFETY: the caller of mqstate_iothub_device_on_message gave a valid callback for
        // this user_data. No lock is held here.
        unsafe { callback(user_data.0, status, message) };
    }
    drop(client);
    if let Some(destroy) = destroy {
        // SAFETY: as above; called once, after the last callback.
        unsafe { destroy(user_data.0) };
    }
}

/// Delivers the device's messages to `callback(user_data, status, message)` on a library
/// thread (see `mqstate_c2d_message_callback`) until the device is freed; then calls
/// `destroy(user_data)` (if not NULL) exactly once, after the last callback.
/// `mqstate_iothub_device_free` waits for that (unless called from the callback, whose
/// thread then ends when the callback returns). One callback per device
/// (`MQSTATE_INVALID_ARGUMENT` for a second one); do not also call
/// `mqstate_iothub_device_receive` on it (each message goes to one of them). On a status other
/// than `MQSTATE_OK`, neither callback is ever called and `user_data` stays the caller's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_device_on_message(
    device: *const mqstate_iothub_device,
    callback: mqstate_c2d_message_callback,
    destroy: mqstate_c2d_destroy_callback,
    user_data: *mut c_void,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract.
        let device = unsafe { arg_ref(device, "device") }?;
        let callback = callback.ok_or_else(|| FfiError::null("callback"))?;
        let mut dispatcher = device.dispatcher.lock().unwrap_or_else(|p| p.into_inner());
        if dispatcher.is_some() {
            return Err(FfiError::invalid("the device already has a message callback"));
        }
        let client = device.client.clone();
        let user_data = UserData(user_data);
        let thread = std::thread::Builder::new()
            .name("mqstate-c2d".into())
            .spawn(move || dispatch(client, callback, destroy, user_data))
            .map_err(|e| {
                FfiError::new(
                    MQSTATE_UNKNOWN_ERROR,
                    format!("could not start the device's callback thread: {e}"),
                )
            })?;
        *dispatcher = Some(thread);
        Ok(())
    }
}

/// Sends telemetry and waits for the hub's PUBACK. `names`/`values` are `count` application
/// properties (a NULL value is a null property; `names`/`values` may be NULL when `count` is
/// 0); `message_id` and `content_type` are optional.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_iothub_device_send_event(
    device: *const mqstate_iothub_device,
    payload: *const u8,
    payload_len: usize,
    names: *const *const c_char,
    values: *const *const c_char,
    count: usize,
    message_id: *const c_char,
    content_type: *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract (arrays of `count` pointers when count > 0).
        let device = unsafe { arg_ref(device, "device") }?;
        let payload = unsafe { arg_bytes(payload, payload_len, "payload", true) }?;
        let mut event = Telemetry::new(payload.to_vec());
        event.message_id = unsafe { arg_opt_str(message_id, "message_id") }?.map(str::to_owned);
        event.content_type =
            unsafe { arg_opt_str(content_type, "content_type") }?.map(str::to_owned);
        if count > 0 {
            if names.is_null() {
                return Err(FfiError::null("names"));
            }
            if values.is_null() {
                return Err(FfiError::null("values"));
            }
            for i in 0..count {
                // SAFETY: `names` and `values` hold `count` pointers.
                let (n, v) = unsafe { (*names.add(i), *values.add(i)) };
                let name = unsafe { arg_str(n, "names[i]") }?.to_owned();
                let value = unsafe { arg_opt_str(v, "values[i]") }?.map(str::to_owned);
                event.properties.push((name, value));
            }
        }
        device.client.send_event(event).map_err(FfiError::from)
    }
}

/// Completes the message. Over MQTT its PUBACK is sent in arrival order (held until every
/// earlier message is completed); over AMQP each message is settled on its own, in any order.
/// Returns at once. `MQSTATE_LOCK_LOST` when the connection or link it arrived on is gone, or
/// the hub delivered it again after its lock timed out (the hub delivers it again: settle
/// that copy); `MQSTATE_INVALID_ARGUMENT` when it was already settled; `MQSTATE_DISCONNECTED`
/// when the device was freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_c2d_complete(
    message: *const mqstate_c2d_message,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract.
        let message = unsafe { arg_ref(message, "message") }?;
        message.message.complete().map_err(FfiError::from)
    }
}

/// Rejects the message (AMQP): the hub dead-letters it (`Rejected` feedback when the sender
/// asked for negative feedback). Returns at once, with the errors of `mqstate_c2d_complete`.
/// Over MQTT always `MQSTATE_NOT_SUPPORTED` (IoT Hub does not let MQTT devices reject), and
/// the message is untouched (complete it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_c2d_reject(message: *const mqstate_c2d_message) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract.
        let message = unsafe { arg_ref(message, "message") }?;
        message.message.reject().map_err(FfiError::from)
    }
}

/// Abandons the message (AMQP): the hub enqueues it again and delivers it again with a
/// delivery count one higher, until its max delivery count dead-letters it
/// (`DeliveryCountExceeded` feedback). Returns at once, with the errors of
/// `mqstate_c2d_complete`. Over MQTT always `MQSTATE_NOT_SUPPORTED`, and the message is
/// untouched (left uncompleted, the hub delivers it again after its lock timeout).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_c2d_abandon(
    message: *const mqstate_c2d_message,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract.
        let message = unsafe { arg_ref(message, "message") }?;
        message.message.abandon().map_err(FfiError::from)
    }
}

/// The body (valid until the message is freed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_c2d_message_payload(
    message: *const mqstate_c2d_message,
    data_out: *mut *const u8,
    len_out: *mut usize,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract.
        let message = unsafe { arg_ref(message, "message") }?;
        let data = unsafe { Out::new(data_out, "data_out") }?;
        let len = unsafe { Out::new(len_out, "len_out") }?;
        data.write(message.message.payload.as_ptr());
        len.write(message.message.payload.len());
        Ok(())
    }
}

/// A system property by name: `message_id`, `correlation_id`, `user_id`, `to`,
/// `expiry_time`, `content_type`, `content_encoding`, `ack`. `MQSTATE_NOT_FOUND` when the
/// message does not carry it; `MQSTATE_INVALID_ARGUMENT` for another name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_c2d_message_system_property(
    message: *const mqstate_c2d_message,
    name: *const c_char,
    value_out: *mut *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract.
        let message = unsafe { arg_ref(message, "message") }?;
        let name = unsafe { arg_str(name, "name") }?;
        let out = unsafe { Out::new(value_out, "value_out") }?;
        const NAMES: [&str; 8] = ["message_id", "correlation_id", "user_id", "to", "expiry_time", "content_type", "content_encoding", "ack"];
        if !NAMES.contains(&name) {
            return Err(FfiError::invalid(format!("unknown system property {name:?} (one of {})", NAMES.join(", "))));
        }
        match message.system.iter().find(|(n, _)| *n == name) {
            Some((_, v)) => {
                out.write(v.as_ptr());
                Ok(())
            }
            None => Err(FfiError::new(MQSTATE_NOT_FOUND, format!("the message has no {name}"))),
        }
    }
}

/// How many application properties the message has.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_c2d_message_property_count(
    message: *const mqstate_c2d_message,
    count_out: *mut usize,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract.
        let message = unsafe { arg_ref(message, "message") }?;
        let out = unsafe { Out::new(count_out, "count_out") }?;
        out.write(message.properties.len());
        Ok(())
    }
}

/// The application property at `index` (arrival order): its name and value; `*value_out` is
/// NULL for a null property (`key` on the wire) and "" for an empty one (`key=`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_c2d_message_property(
    message: *const mqstate_c2d_message,
    index: usize,
    name_out: *mut *const c_char,
    value_out: *mut *const c_char,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract.
        let message = unsafe { arg_ref(message, "message") }?;
        let name = unsafe { Out::new(name_out, "name_out") }?;
        let value = unsafe { Out::new(value_out, "value_out") }?;
        let (n, v) = message.properties.get(index).ok_or_else(|| {
            FfiError::invalid(format!("property index {index} is out of range (count {})", message.properties.len()))
        })?;
        name.write(n.as_ptr());
        value.write(v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr()));
        Ok(())
    }
}

/// Whether the message was delivered before (at-least-once delivery).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_c2d_message_is_redelivery(
    message: *const mqstate_c2d_message,
    redelivery_out: *mut bool,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract.
        let message = unsafe { arg_ref(message, "message") }?;
        let out = unsafe { Out::new(redelivery_out, "redelivery_out") }?;
        out.write(message.message.is_redelivery());
        Ok(())
    }
}

/// How many times the hub delivered the message before (0 the first time; one more after
/// each abandon or lock timeout). Over AMQP only: MQTT does not carry it, and there it is
/// `MQSTATE_NOT_FOUND` (`mqstate_c2d_message_is_redelivery` still tells a redelivery).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_c2d_message_delivery_count(
    message: *const mqstate_c2d_message,
    count_out: *mut u32,
) -> mqstate_status {
    ffi_boundary! {
        // SAFETY: the C contract.
        let message = unsafe { arg_ref(message, "message") }?;
        let out = unsafe { Out::new(count_out, "count_out") }?;
        let count = message.message.delivery_count().ok_or_else(|| {
            FfiError::new(
                MQSTATE_NOT_FOUND,
                "the message has no delivery count (MQTT does not carry it; AMQP does)",
            )
        })?;
        out.write(count);
        Ok(())
    }
}

/// Frees a message (without completing it). NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstate_c2d_message_free(message: *mut mqstate_c2d_message) {
    ffi_boundary!(raw () => {
        // SAFETY: a handle from `mqstate_iothub_device_receive`, freed once.
        unsafe { free_handle(message) }
    })
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
#[path = "iothub_tests.rs"]
mod tests;
