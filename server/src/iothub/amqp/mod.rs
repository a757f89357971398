//! The hub's AMQP 1.0 service endpoint (port 5671 on IoT Hub): what the official service SDKs
//! (Node `azure-iothub`, Python `azure-iot-hub` with `uamqp`) use to send cloud-to-device
//! messages and receive feedback.
//!
//! Per connection: TLS (10 s to finish the handshake; or a WebSocket on the HTTPS port,
//! `crate::iothub::websocket`, whose byte stream [`serve`] takes), the AMQP header with or
//! without a SASL step ([`cbs::CbsSasl`]; Node sends none), then sessions and links through fe2o3-amqp's
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
//!
//! Every connection is bounded before and after it authenticates ([`crate::iothub::AmqpLimits`],
//! docs/security.md): the frame size; the largest message on each link the hub receives on
//! (an unfinished multi-frame delivery counts, so it cannot be buffered past that size:
//! fe2o3-amqp detaches the link with `amqp:link:message-size-exceeded`); sessions per
//! connection (the Open's channel-max: fe2o3-amqp closes a connection that goes past it);
//! links per session (`amqp:resource-limit-exceeded`); the `$cbs` replies
//! nobody reads; and the time to the first accepted put-token (`amqp:unauthorized-access`).
//! Each limit a peer reaches is logged once, not per frame.

mod cbs;
pub(crate) mod convert;
mod device;
mod devicebound;
mod feedback;
mod receive;
mod twin;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use fe2o3_amqp::acceptor::{
    ConnectionAcceptor, LinkAcceptor, LinkEndpoint, ListenerConnectionHandle,
    ListenerSessionHandle, SessionAcceptor, SupportedReceiverSettleModes,
};
use fe2o3_amqp::types::definitions::ReceiverSettleMode;
use fe2o3_amqp::types::definitions::{self, AmqpError, Role};
use fe2o3_amqp::types::messaging::{Source, Target, TargetArchetype};
use fe2o3_amqp::types::performatives::Attach;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::iothub::IotHub;
use crate::iothub::IotHubError;
use crate::untrusted::cut;
use cbs::Cbs;

// How long a client has for the TLS handshake, then for its AMQP header, then for its open.
use crate::iothub::client_cert::CaTrust;
use crate::iothub::domain::x509::ClientCert;
use crate::iothub::tls::HANDSHAKE_TIMEOUT;

/// Our idle timeout: the SDKs then send heartbeats (uamqp every 120 s anyway), and a silent
/// peer is dropped.
const IDLE_TIMEOUT_MS: u32 = 240_000;

/// The AMQP protocol header (no SASL), answered to a header we do not speak.
const AMQP_HEADER: [u8; 8] = *b"AMQP\x00\x01\x00\x00";

/// The largest put-token request on `$cbs`: a SAS token is a few hundred bytes (a 255-byte
/// host name and a 128-character device id, URL-encoded, stay far below this).
const CBS_MAX_MESSAGE_SIZE: u64 = 16 * 1024;

/// How long a refused link waits for the peer's detach before the session goes on.
const REFUSED_LINK_CLOSE: Duration = Duration::from_secs(2);

/// Room for the properties and annotations around the largest body a link takes.
pub(crate) const MESSAGE_OVERHEAD: u64 = 64 * 1024;

/// Counts the links open at once on a session against a limit:
/// [`Slots::take`] gives a [`Slot`] while one is free, which frees it when dropped (when the
/// task serving the session or link ends).
#[derive(Debug, Clone)]
struct Slots {
    used: Arc<AtomicUsize>,
    max: usize,
}

#[derive(Debug)]
struct Slot(Arc<AtomicUsize>);

impl Slots {
    fn new(max: usize) -> Slots {
        Slots {
            used: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    fn take(&self) -> Option<Slot> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self.used.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs a link's task on its own, holding its [`Slot`] until it ends.
fn spawn_holding(slot: Option<Slot>, task: impl Future<Output = ()> + Send + 'static) {
    tokio::spawn(async move {
        task.await;
        drop(slot);
    });
}

/// `amqp:resource-limit-exceeded`, saying which limit.
fn limit_exceeded(what: String) -> definitions::Error {
    convert::error(AmqpError::ResourceLimitExceeded, what)
}

/// Serves AMQP 1.0 over TLS on `listener` until `stop` turns true.
pub(crate) async fn run(
    hub: IotHub,
    listener: TcpListener,
    tls: TlsAcceptor,
    ca_trust: CaTrust,
    mut stop: watch::Receiver<bool>,
) {
    if *stop.borrow() {
        return;
    }
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    // Small frames answer each other (attach, flow, disposition): no Nagle
                    // delay on top of the peer's delayed ACKs.
                    let _ = tcp.set_nodelay(true);
                    let hub = hub.clone();
                    let tls = tls.clone();
                    let ca_trust = ca_trust.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        connection(hub, tcp, peer, (tls, ca_trust), stop).await;
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

/// The AMQP connection over `stream` (TLS already done, or a WebSocket's byte stream), with or
/// without SASL, depending on the client's header.
async fn open<S>(hub: &IotHub, mut stream: S) -> Result<ListenerConnectionHandle, String>
where
    S: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
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
    let limits = &hub.config().amqp_limits;
    let builder = ConnectionAcceptor::builder()
        .container_id(hub.config().hostname.clone())
        .idle_time_out(IDLE_TIMEOUT_MS)
        .max_frame_size(limits.max_frame_size)
        // The Open's channel-max: fe2o3-amqp closes a connection whose Begin goes past it.
        .session_max(u16::try_from(limits.max_sessions).unwrap_or(u16::MAX));
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

/// One client connection over TCP: TLS, then [`serve`].
async fn connection(
    hub: IotHub,
    tcp: TcpStream,
    peer: SocketAddr,
    (tls, ca_trust): (TlsAcceptor, CaTrust),
    stop: watch::Receiver<bool>,
) {
    // TLS, SASL and the first accepted put-token all count against one deadline.
    let deadline = tokio::time::Instant::now() + hub.config().amqp_limits.auth_timeout;
    let stream = tokio::time::timeout_at(
        deadline,
        crate::iothub::tls::handshake(&tls, tcp, HANDSHAKE_TIMEOUT),
    )
    .await;
    match stream {
        Ok(Ok(stream)) => {
            let cert = ca_trust.read(stream.get_ref().1.peer_certificates());
            serve(hub, stream, cert, peer, deadline, stop).await
        }
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "iothub amqp: connection refused"),
        Err(_) => tracing::debug!(%peer, "iothub amqp: TLS not done in time"),
    }
}

/// One client connection over `stream` (a TLS stream, or the byte stream of a WebSocket on
/// the HTTPS port: `crate::iothub::websocket`): its sessions, until it closes, the hub stops,
/// or it goes past a limit ([`crate::iothub::AmqpLimits`]). The header, SASL and the first
/// accepted put-token must all be done by `deadline`. `cert` is the TLS client certificate the
/// peer presented (an X.509 device's credential: docs/iothub.md, "X.509 devices").
pub(crate) async fn serve<S>(
    hub: IotHub,
    stream: S,
    cert: Option<ClientCert>,
    peer: SocketAddr,
    deadline: tokio::time::Instant,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    let limits = hub.config().amqp_limits.clone();
    let opened = tokio::time::timeout_at(deadline, open(&hub, stream)).await;
    let client_cert = cert;
    let mut connection = match opened {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "iothub amqp: connection refused");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "iothub amqp: connection not opened in time");
            return;
        }
    };
    tracing::debug!(%peer, "iothub amqp: connection opened");
    let cbs = Cbs::new(hub.clone(), peer);
    // An X.509 device opens its links with no put-token (the Node SDK skips CBS and SASL):
    // its certificate authorizes them (docs/iothub.md, "X.509 devices").
    cbs.set_client_cert(client_cert);
    let mut authenticated = cbs.authenticated();
    let devices = device::Devices::new(hub.clone());
    let sessions = SessionAcceptor::new();
    let refusal = loop {
        let incoming = tokio::select! {
            s = connection.next_incoming_session() => s,
            () = tokio::time::sleep_until(deadline), if !*authenticated.borrow() => {
                if *authenticated.borrow_and_update() {
                    continue;
                }
                let why = format!(
                    "no SAS token was accepted on $cbs within {} s of connecting",
                    limits.auth_timeout.as_secs()
                );
                if let Some(left_out) = hub.refusals().admit(peer.ip()) {
                    tracing::info!(%peer, left_out, "iothub amqp: connection closed: {why}");
                }
                break Some(convert::error(AmqpError::UnauthorizedAccess, why));
            }
            _ = stop.changed() => None,
        };
        let Some(incoming) = incoming else { break None };
        let session = match sessions
            .accept_incoming_session(incoming, &mut connection)
            .await
        {
            Ok(session) => session,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "iothub amqp: session refused");
                break None;
            }
        };
        let (hub, cbs, stop) = (hub.clone(), cbs.clone(), stop.clone());
        let devices = devices.clone();
        tokio::spawn(serve_session(hub, cbs, devices, session, peer, stop));
    };
    let closed = match refusal {
        Some(error) => connection.close_with_error(error).await,
        None => connection.close().await,
    };
    if let Err(e) = closed {
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
        IotHubError::Unauthorized(format!("no device token for {:?}", cut(raw)))
    })))
}

/// fe2o3-amqp's link acceptor, with no hook for dynamic nodes (the hub has none).
type Links = LinkAcceptor<fn(Source) -> Option<Source>, fn(Target) -> Option<Target>>;

/// A link acceptor whose receivers take messages of at most `max_message_size` bytes.
fn link_acceptor(max_message_size: u64) -> Links {
    // Receiver settle mode first on every link, as IoT Hub answers: uamqp asks for "second"
    // on its C2D sender and, given it, waits for a settled disposition that the second mode
    // only sends after its own (the send never finishes).
    LinkAcceptor::builder()
        .supported_receiver_settle_modes(SupportedReceiverSettleModes::First)
        .fallback_receiver_settle_mode(ReceiverSettleMode::First)
        .max_message_size(max_message_size)
        .build()
}

/// Accepts the links of one session, each served by its own task, at most
/// [`crate::iothub::AmqpLimits::max_links_per_session`] at once.
async fn serve_session(
    hub: IotHub,
    cbs: Arc<Cbs>,
    devices: Arc<device::Devices>,
    mut session: ListenerSessionHandle,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let config = hub.config();
    let to_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    // $cbs takes tokens; the others take messages of the hub's largest body, with room for
    // their properties (telemetry and twin or method answers: the device-to-cloud limit).
    let cbs_links = link_acceptor(CBS_MAX_MESSAGE_SIZE);
    let c2d_links = link_acceptor(to_u64(config.max_message_size).saturating_add(MESSAGE_OVERHEAD));
    let d2c_links =
        link_acceptor(to_u64(config.max_telemetry_size).saturating_add(MESSAGE_OVERHEAD));
    let max_links = config.amqp_limits.max_links_per_session;
    let slots = Slots::new(max_links);
    let mut limit_logged = false;
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
        let links = match address.to_ascii_lowercase().as_str() {
            "$cbs" => &cbs_links,
            "/messages/devicebound" => &c2d_links,
            _ => &d2c_links,
        };
        let slot = slots.take();
        let wanted = match (address.to_ascii_lowercase().as_str(), &role, device) {
            _ if slot.is_none() => {
                let why = format!(
                    "a session may have {max_links} links at once (mqstate serve \
                     --iothub-amqp-max-links)"
                );
                if !std::mem::replace(&mut limit_logged, true) {
                    tracing::info!(%peer, "iothub amqp: links refused: {why}");
                }
                Err(limit_exceeded(why))
            }
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
                format!("the hub has no node {:?} for this link", cut(&address)),
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
                spawn_holding(
                    slot,
                    device::serve_devicebound(hub, member, expiry, s, stop),
                );
            }
            (Ok((Node::DeviceEvents(id), Some(member))), LinkEndpoint::Receiver(r)) => {
                tracing::debug!(device = %id, "iothub amqp: device telemetry link attached");
                let expiry = cbs.device_expiry(&id);
                spawn_holding(slot, device::serve_events(hub, member, expiry, r, stop));
            }
            (Ok((Node::DeviceTwin(id), Some(member))), LinkEndpoint::Receiver(r)) => {
                tracing::debug!(device = %id, ?channel, "iothub amqp: device twin request link attached");
                let expiry = cbs.device_expiry(&id);
                spawn_holding(slot, twin::serve_requests(member, expiry, r, channel, stop));
            }
            (Ok((Node::DeviceTwin(id), Some(member))), LinkEndpoint::Sender(s)) => {
                tracing::debug!(device = %id, ?channel, "iothub amqp: device twin answer link attached");
                let expiry = cbs.device_expiry(&id);
                spawn_holding(slot, twin::serve_answers(member, expiry, s, channel, stop));
            }
            (Ok((Node::DeviceMethods(id), Some(member))), LinkEndpoint::Receiver(r)) => {
                let expiry = cbs.device_expiry(&id);
                spawn_holding(slot, twin::serve_method_responses(member, expiry, r, stop));
            }
            (Ok((Node::DeviceMethods(id), Some(member))), LinkEndpoint::Sender(s)) => {
                let expiry = cbs.device_expiry(&id);
                spawn_holding(slot, twin::serve_method_requests(member, expiry, s, stop));
            }
            (Err(refusal), link) => {
                if let Some(left_out) = hub.refusals().admit(peer.ip()) {
                    tracing::info!(%peer, address = ?cut(&address), error = %refusal, left_out,
                        "iothub amqp: link refused");
                }
                // The peer's own detach is waited for a little only: a peer that never
                // answers must not hold this session's next attaches for long.
                let closed = tokio::time::timeout(REFUSED_LINK_CLOSE, async move {
                    match link {
                        LinkEndpoint::Sender(s) => s.close_with_error(refusal).await,
                        LinkEndpoint::Receiver(r) => r.close_with_error(refusal).await,
                    }
                })
                .await;
                match closed {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "iothub amqp: refused link closed uncleanly");
                    }
                    Err(_) => tracing::debug!("iothub amqp: no detach for a refused link"),
                }
            }
            (Ok((Node::CbsRequests, _)), LinkEndpoint::Receiver(r)) => {
                spawn_holding(slot, cbs::serve_requests(cbs, r, stop));
            }
            (Ok((Node::CbsReplies, _)), LinkEndpoint::Sender(s)) => {
                spawn_holding(slot, cbs::serve_replies(cbs, s, stop));
            }
            (Ok((Node::DeviceBound, _)), LinkEndpoint::Receiver(r)) => {
                tracing::debug!("iothub amqp: C2D link attached");
                spawn_holding(slot, devicebound::serve(hub, cbs, r, stop));
            }
            (Ok((Node::Feedback, _)), LinkEndpoint::Sender(s)) => {
                tracing::debug!("iothub amqp: feedback link attached");
                spawn_holding(slot, feedback::serve(hub, cbs, s, stop));
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
