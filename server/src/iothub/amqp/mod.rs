//! The hub's AMQP 1.0 service endpoint (port 5671 on IoT Hub): what the official service SDKs
//! (Node `azure-iothub`, Python `azure-iot-hub` with `uamqp`) use to send cloud-to-device
//! messages and receive feedback.
//!
//! Per connection: TLS (10 s to finish the handshake), the AMQP header with or without a SASL
//! step ([`cbs::CbsSasl`]; Node sends none), then sessions and links through fe2o3-amqp's
//! acceptor. Links by address (an `amqps://host` prefix, as uamqp sends it, is ignored;
//! compared case-insensitively):
//!
//! - `$cbs`: put-token requests and their replies ([`cbs`]);
//! - `/messages/devicebound` ([`devicebound`]) and `/messages/serviceBound/feedback`
//!   ([`feedback`]): need a put-token with ServiceConnect first, else they are refused with
//!   `amqp:unauthorized-access`;
//! - a device's `/devices/{id}/messages/devicebound` (it receives) and
//!   `/devices/{id}/messages/events` (it sends telemetry) ([`device`]): need a put-token of
//!   that device first, else they are refused with `amqp:unauthorized-access`;
//! - a device's twin (`/devices/{id}/twin`) and direct method (`/devices/{id}/methods/devicebound`)
//!   links ([`twin`]): need a put-token of that device first like its other links, then are
//!   accepted (the local hub has neither twins nor methods): each twin request is answered with
//!   status 403 (IoT Hub's error 403010), no method request is ever sent. Refusing them would
//!   make the Node device SDK drop the whole connection: its AMQP base layer treats a link
//!   detached with an error as a connection error (azure-iot-amqp-base `sender_link.js`:
//!   `error-indicated` in state `attached`, since rhea reports our attach reply as
//!   `sender_open` first);
//! - anything else is refused with `amqp:not-found`.

mod cbs;
mod convert;
mod device;
mod devicebound;
mod feedback;
mod twin;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use fe2o3_amqp::acceptor::{
    ConnectionAcceptor, LinkAcceptor, LinkEndpoint, ListenerConnectionHandle,
    ListenerSessionHandle, SessionAcceptor, SupportedReceiverSettleModes,
};
use fe2o3_amqp::types::definitions::ReceiverSettleMode;
use fe2o3_amqp::types::definitions::{self, AmqpError, Role};
use fe2o3_amqp::types::messaging::TargetArchetype;
use fe2o3_amqp::types::performatives::Attach;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::IotHub;
use super::error::IotHubError;
use cbs::Cbs;

// How long a client has for the TLS handshake, then for its AMQP header, then for its open.
use super::tls::HANDSHAKE_TIMEOUT;

/// Our idle timeout: the SDKs then send heartbeats (uamqp every 120 s anyway), and a silent
/// peer is dropped.
const IDLE_TIMEOUT_MS: u32 = 240_000;

/// The AMQP protocol header (no SASL), answered to a header we do not speak.
const AMQP_HEADER: [u8; 8] = *b"AMQP\x00\x01\x00\x00";

/// Serves AMQP 1.0 over TLS on `listener` until `stop` turns true.
pub(crate) async fn run(
    hub: IotHub,
    listener: TcpListener,
    tls: TlsAcceptor,
    mut stop: watch::Receiver<bool>,
) {
    if *stop.borrow() {
        return;
    }
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    let hub = hub.clone();
                    let tls = tls.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        connection(hub, tcp, peer, tls, stop).await;
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: do not spin.
                    tracing::warn!(error = %e, "iothub amqp: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = stop.changed() => return,
        }
    }
}

/// A stream that replays the protocol header read to choose the acceptor, then reads on.
#[derive(Debug)]
struct Replayed<S> {
    head: [u8; 8],
    pos: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Replayed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let rest = this.head.get(this.pos..).unwrap_or(&[]);
        if rest.is_empty() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let n = rest.len().min(buf.remaining());
        buf.put_slice(rest.get(..n).unwrap_or(&[]));
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replayed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// TLS, then the AMQP connection with or without SASL, depending on the client's header.
async fn open(
    hub: &IotHub,
    tcp: TcpStream,
    tls: TlsAcceptor,
) -> Result<ListenerConnectionHandle, String> {
    let mut stream = super::tls::handshake(&tls, tcp, HANDSHAKE_TIMEOUT).await?;
    let mut head = [0u8; 8];
    tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.read_exact(&mut head))
        .await
        .map_err(|_| "no AMQP header in time".to_owned())?
        .map_err(|e| format!("AMQP header: {e}"))?;
    let stream = Replayed {
        head,
        pos: 0,
        inner: stream,
    };
    let builder = ConnectionAcceptor::builder()
        .container_id(hub.config().hostname.clone())
        .idle_time_out(IDLE_TIMEOUT_MS);
    let opened = match head {
        [b'A', b'M', b'Q', b'P', 3, 1, 0, 0] => {
            let acceptor = builder.sasl_acceptor(cbs::CbsSasl).build();
            tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
        }
        [b'A', b'M', b'Q', b'P', 0, 1, 0, 0] => {
            let acceptor = builder.build();
            tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
        }
        _ => {
            // Answer with the header we speak, then close (AMQP 1.0, 2.2).
            let mut stream = stream.inner;
            let _ = stream.write_all(&AMQP_HEADER).await;
            let _ = stream.shutdown().await;
            return Err(format!("unsupported protocol header {head:?}"));
        }
    };
    opened
        .map_err(|_| "AMQP open timed out".to_owned())?
        .map_err(|e| format!("AMQP open: {e}"))
}

/// One client connection: its sessions, until it closes or the hub stops.
async fn connection(
    hub: IotHub,
    tcp: TcpStream,
    peer: SocketAddr,
    tls: TlsAcceptor,
    mut stop: watch::Receiver<bool>,
) {
    let mut connection = match open(&hub, tcp, tls).await {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "iothub amqp: connection refused");
            return;
        }
    };
    tracing::debug!(%peer, "iothub amqp: connection opened");
    let cbs = Cbs::new(hub.clone());
    let devices = device::Devices::new(hub.clone());
    let sessions = SessionAcceptor::new();
    loop {
        let incoming = tokio::select! {
            s = connection.next_incoming_session() => s,
            _ = stop.changed() => None,
        };
        let Some(incoming) = incoming else { break };
        match sessions
            .accept_incoming_session(incoming, &mut connection)
            .await
        {
            Ok(session) => {
                let (hub, cbs, stop) = (hub.clone(), cbs.clone(), stop.clone());
                let devices = devices.clone();
                tokio::spawn(async move { serve_session(hub, cbs, devices, session, stop).await });
            }
            Err(e) => {
                tracing::debug!(%peer, error = %e, "iothub amqp: session refused");
                break;
            }
        }
    }
    if let Err(e) = connection.close().await {
        tracing::debug!(%peer, error = %e, "iothub amqp: connection closed uncleanly");
    } else {
        tracing::debug!(%peer, "iothub amqp: connection closed");
    }
}

/// The node a link attaches to, without an `amqps://host` prefix and trailing `/`.
fn node(attach: &Attach) -> Option<String> {
    let address = match attach.role {
        // The client sends: its target is our node.
        Role::Sender => match attach.target.as_deref() {
            Some(TargetArchetype::Target(t)) => t.address.clone(),
            #[allow(unreachable_patterns)]
            _ => None,
        },
        Role::Receiver => attach.source.as_ref().and_then(|s| s.address.clone()),
    }?;
    let path = match address.split_once("://") {
        Some((_, rest)) => rest.find('/').and_then(|i| rest.get(i..)).unwrap_or(""),
        None => address.as_str(),
    };
    Some(path.trim_end_matches('/').to_owned())
}

/// What a link is for.
enum Node {
    CbsRequests,
    CbsReplies,
    DeviceBound,
    Feedback,
    /// A device receives its messages (the raw id of the address).
    DeviceMessages(String),
    /// A device sends telemetry.
    DeviceEvents(String),
    /// A device's twin link (either way).
    DeviceTwin(String),
    /// A device's direct-method link (either way).
    DeviceMethods(String),
}

/// A device's node: `/devices/{id}/{rest}` as (raw id, rest in lower case); the id is kept as
/// written (the device SDKs do not URL-encode it; [`convert::device_candidates`] tries both).
fn device_node(address: &str) -> Option<(String, String)> {
    let rest = convert::strip_prefix_ci(address, "/devices/")?;
    let (id, what) = rest.split_once('/')?;
    (!id.is_empty()).then(|| (id.to_owned(), what.to_ascii_lowercase()))
}

/// The device a device link is for: the first form of `raw` this connection has a valid
/// device token for (the error says none has).
fn authorized_device(cbs: &Cbs, raw: &str) -> Result<String, definitions::Error> {
    let candidates = convert::device_candidates(raw);
    let mut refusal = None;
    for id in candidates {
        match cbs.authorize_device(&id) {
            Ok(()) => return Ok(id),
            Err(e) => {
                refusal.get_or_insert(e);
            }
        }
    }
    Err(convert::hub_error(&refusal.unwrap_or_else(|| {
        IotHubError::Unauthorized(format!("no device token for {raw:?}"))
    })))
}

/// Accepts the links of one session, each served by its own task.
async fn serve_session(
    hub: IotHub,
    cbs: Arc<Cbs>,
    devices: Arc<device::Devices>,
    mut session: ListenerSessionHandle,
    mut stop: watch::Receiver<bool>,
) {
    // Receiver settle mode first on every link, as IoT Hub answers: uamqp asks for "second"
    // on its C2D sender and, given it, waits for a settled disposition that the second mode
    // only sends after its own (the send never finishes).
    let links = LinkAcceptor::builder()
        .supported_receiver_settle_modes(SupportedReceiverSettleModes::First)
        .fallback_receiver_settle_mode(ReceiverSettleMode::First)
        .build();
    loop {
        let attach = tokio::select! {
            a = session.next_incoming_attach() => a,
            _ = stop.changed() => None,
        };
        let Some(attach) = attach else { break };
        let address = node(&attach).unwrap_or_default();
        let role = attach.role.clone();
        let device = device_node(&address);
        // Pairs a twin request link with its answer link.
        let channel = twin::channel_correlation_id(&attach);
        let wanted = match (address.to_ascii_lowercase().as_str(), &role, device) {
            ("$cbs", Role::Sender, _) => Ok(Node::CbsRequests),
            ("$cbs", Role::Receiver, _) => Ok(Node::CbsReplies),
            ("/messages/devicebound", Role::Sender, _) => Ok(Node::DeviceBound),
            ("/messages/servicebound/feedback", Role::Receiver, _) => Ok(Node::Feedback),
            (_, Role::Receiver, Some((id, what))) if what == "messages/devicebound" => {
                Ok(Node::DeviceMessages(id))
            }
            (_, Role::Sender, Some((id, what))) if what == "messages/events" => {
                Ok(Node::DeviceEvents(id))
            }
            (_, _, Some((id, what))) if what == "twin" => Ok(Node::DeviceTwin(id)),
            (_, _, Some((id, what))) if what == "methods/devicebound" => {
                Ok(Node::DeviceMethods(id))
            }
            _ => Err(convert::error(
                AmqpError::NotFound,
                format!("the hub has no node {address:?} for this link"),
            )),
        };
        let wanted = wanted.and_then(|n| match n {
            Node::DeviceBound | Node::Feedback => cbs
                .authorize()
                .map(|()| n)
                .map_err(|e| convert::hub_error(&e)),
            Node::DeviceMessages(raw) => authorized_device(&cbs, &raw).map(Node::DeviceMessages),
            Node::DeviceEvents(raw) => authorized_device(&cbs, &raw).map(Node::DeviceEvents),
            Node::DeviceTwin(raw) => authorized_device(&cbs, &raw).map(Node::DeviceTwin),
            Node::DeviceMethods(raw) => authorized_device(&cbs, &raw).map(Node::DeviceMethods),
            n => Ok(n),
        });
        // A device's first link makes this the device's one connection (closing its MQTT or
        // other AMQP connection); refused when the device is gone or disabled.
        let wanted = wanted.and_then(|n| match &n {
            Node::DeviceMessages(id)
            | Node::DeviceEvents(id)
            | Node::DeviceTwin(id)
            | Node::DeviceMethods(id) => devices
                .join(id)
                .map(|member| (n, Some(member)))
                .map_err(|e| convert::hub_error(&e)),
            _ => Ok((n, None)),
        });
        let link = match links.accept_incoming_attach(attach, &mut session).await {
            Ok(link) => link,
            Err(e) => {
                tracing::debug!(%address, error = %e, "iothub amqp: link not attached");
                continue;
            }
        };
        let (hub, cbs, stop) = (hub.clone(), cbs.clone(), stop.clone());
        match (wanted, link) {
            (Ok((Node::DeviceMessages(id), Some(member))), LinkEndpoint::Sender(s)) => {
                tracing::debug!(device = %id, "iothub amqp: device C2D link attached");
                let expiry = cbs.device_expiry(&id);
                tokio::spawn(device::serve_devicebound(hub, member, expiry, s, stop));
            }
            (Ok((Node::DeviceEvents(id), Some(member))), LinkEndpoint::Receiver(r)) => {
                tracing::debug!(device = %id, "iothub amqp: device telemetry link attached");
                let expiry = cbs.device_expiry(&id);
                tokio::spawn(device::serve_events(hub, member, expiry, r, stop));
            }
            (Ok((Node::DeviceTwin(id), Some(member))), LinkEndpoint::Receiver(r)) => {
                tracing::debug!(device = %id, ?channel, "iothub amqp: device twin request link attached");
                let expiry = cbs.device_expiry(&id);
                tokio::spawn(twin::serve_requests(member, expiry, r, channel, stop));
            }
            (Ok((Node::DeviceTwin(id), Some(member))), LinkEndpoint::Sender(s)) => {
                tracing::debug!(device = %id, ?channel, "iothub amqp: device twin answer link attached");
                let expiry = cbs.device_expiry(&id);
                tokio::spawn(twin::serve_answers(member, expiry, s, channel, stop));
            }
            (Ok((Node::DeviceMethods(id), Some(member))), LinkEndpoint::Receiver(r)) => {
                let expiry = cbs.device_expiry(&id);
                tokio::spawn(twin::serve_method_responses(member, expiry, r, stop));
            }
            (Ok((Node::DeviceMethods(id), Some(member))), LinkEndpoint::Sender(s)) => {
                let expiry = cbs.device_expiry(&id);
                tokio::spawn(twin::serve_method_requests(member, expiry, s, stop));
            }
            (Err(refusal), link) => {
                tracing::info!(%address, error = %refusal, "iothub amqp: link refused");
                let closed = match link {
                    LinkEndpoint::Sender(s) => s.close_with_error(refusal).await,
                    LinkEndpoint::Receiver(r) => r.close_with_error(refusal).await,
                };
                if let Err(e) = closed {
                    tracing::debug!(error = %e, "iothub amqp: refused link closed uncleanly");
                }
            }
            (Ok((Node::CbsRequests, _)), LinkEndpoint::Receiver(r)) => {
                tokio::spawn(cbs::serve_requests(cbs, r, stop));
            }
            (Ok((Node::CbsReplies, _)), LinkEndpoint::Sender(s)) => {
                tokio::spawn(cbs::serve_replies(cbs, s, stop));
            }
            (Ok((Node::DeviceBound, _)), LinkEndpoint::Receiver(r)) => {
                tracing::debug!("iothub amqp: C2D link attached");
                tokio::spawn(devicebound::serve(hub, cbs, r, stop));
            }
            (Ok((Node::Feedback, _)), LinkEndpoint::Sender(s)) => {
                tracing::debug!("iothub amqp: feedback link attached");
                tokio::spawn(feedback::serve(hub, cbs, s, stop));
            }
            (Ok(_), link) => {
                // The roles were matched above; the acceptor made the other end.
                let e = convert::error(AmqpError::InternalError, "unexpected link role".into());
                let _ = match link {
                    LinkEndpoint::Sender(s) => s.close_with_error(e).await,
                    LinkEndpoint::Receiver(r) => r.close_with_error(e).await,
                };
            }
        }
    }
    if let Err(e) = session.end().await {
        tracing::debug!(error = %e, "iothub amqp: session ended uncleanly");
    }
}
