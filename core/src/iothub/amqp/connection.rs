//! One AMQP connection to IoT Hub as a device, made the way the official device SDKs make it
//! (docs/iothub-device.md, "Transports"; /work/shared/IOTHUB.md, "Devices over AMQP"): TCP,
//! TLS (the same rustls configuration as the MQTT transport), the AMQP header with SASL
//! ANONYMOUS (IoT Hub takes the credentials from CBS, not SASL), one session, the `$cbs`
//! request and reply links with a `put-token` of the device's SAS token, then the receiver
//! link on `/devices/{id}/messages/devicebound` and the telemetry sender link on
//! `/devices/{id}/messages/events`.
//!
//! Renewing the token is another `put-token` on the same `$cbs` links ([`Link::put_token`]),
//! as the SDKs renew it: the connection and its links stay up.
//!
//! An X.509 device connects as the official SDKs connect one: its certificate in the TLS
//! handshake, then the plain AMQP header (no SASL) and no `$cbs` links; the hub authorizes the
//! device's links by the connection's certificate, and detaches them with
//! `amqp:unauthorized-access` when it is not the device's.
//!
//! Over WebSockets ([`crate::iothub::Transport::AmqpWs`]) the same AMQP connection runs inside
//! a WebSocket on the TLS stream (`websocket.rs`): only the stream under it differs.

use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::link::{LinkStateError, ReceiverAttachError, RecvError, SenderAttachError};
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Message, MessageId, Properties};
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::websocket;
use crate::iothub::options::{DeviceAuth, DeviceOptions, Transport};
use crate::protocol::errors::Error;

/// The token type IoT Hub's CBS node takes (the SDKs send this one).
const SAS_TOKEN_TYPE: &str = "servicebus.windows.net:sastoken";

/// How long the graceful close of each part of a connection may take.
const CLOSE_STEP: Duration = Duration::from_millis(700);

/// An open device connection: its session, CBS links (none for an X.509 device), and the
/// device's two links.
pub(super) struct Link {
    connection: ConnectionHandle<()>,
    session: SessionHandle<()>,
    cbs: Option<Cbs>,
    /// `/devices/{id}/messages/devicebound`: the hub's C2D deliveries.
    pub(super) c2d: Receiver,
    /// `/devices/{id}/messages/events`: telemetry.
    pub(super) events: Sender,
    /// The receiver link's address, kept as each message's `topic`.
    pub(super) c2d_address: String,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("c2d_address", &self.c2d_address)
            .finish_non_exhaustive()
    }
}

/// The `$cbs` request and reply links of a connection authenticated by SAS tokens.
struct Cbs {
    requests: Sender,
    replies: Receiver,
    /// Put-token requests made on this connection (their message ids).
    put_tokens: u64,
}

impl Cbs {
    async fn attach(session: &mut SessionHandle<()>, id: &str, attempt: u64) -> Result<Cbs, Error> {
        let requests = Sender::attach(session, format!("{id}-cbs-{attempt}"), "$cbs")
            .await
            .map_err(|e| failed("the $cbs request link", e))?;
        let replies = Receiver::attach(session, format!("{id}-cbs-reply-{attempt}"), "$cbs")
            .await
            .map_err(|e| failed("the $cbs reply link", e));
        match replies {
            Ok(replies) => Ok(Cbs {
                requests,
                replies,
                put_tokens: 0,
            }),
            Err(e) => {
                let _ = tokio::time::timeout(CLOSE_STEP, requests.close()).await;
                Err(e)
            }
        }
    }

    async fn put_token(&mut self, options: &DeviceOptions, token: &str) -> Result<(), Error> {
        self.put_tokens = self.put_tokens.wrapping_add(1);
        put_token(
            &mut self.requests,
            &mut self.replies,
            options,
            token,
            self.put_tokens,
        )
        .await
    }

    async fn close(self) {
        let _ = tokio::time::timeout(CLOSE_STEP, self.requests.close()).await;
        let _ = tokio::time::timeout(CLOSE_STEP, self.replies.close()).await;
    }
}

/// A refused link of the device: `refusal` (the hub's description of an
/// `amqp:unauthorized-access`: a certificate that is not the device's, or a token that does
/// not cover the link) makes it an authentication error, final as on MQTT; anything else is a
/// connection error.
fn attach_failed(
    what: &str,
    e: impl std::error::Error + Send + Sync + 'static,
    refusal: Option<String>,
) -> Error {
    match refusal {
        Some(why) => Error::Authentication(format!("the hub refused {what}: {why}")),
        None => failed(what, e),
    }
}

/// The description of a hub's error, or its condition when it has none.
pub(super) fn description(e: &fe2o3_amqp::types::definitions::Error) -> String {
    e.description
        .clone()
        .unwrap_or_else(|| format!("{:?}", e.condition))
}

/// Whether the hub's error says the link is not authorized (IoT Hub's refusal of a token or
/// a certificate).
pub(super) fn unauthorized(condition: &ErrorCondition) -> bool {
    matches!(
        condition,
        ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess)
    )
}

/// A connection failure with what was being done.
fn failed(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::connection_caused_by(format!("{what}: {e}"), e)
}

impl Link {
    /// Connects (over TCP, or a WebSocket for [`Transport::AmqpWs`]), authenticates with
    /// `token` (valid for the device's resource URI; `None` for an X.509 device, whose
    /// certificate the TLS handshake carried) and attaches the device's links. Errors:
    /// [`Error::Authentication`] when the hub refuses the token or the certificate,
    /// [`Error::Connection`] for everything else (unreachable, TLS, a refused WebSocket
    /// upgrade, a refused link).
    pub(super) async fn open(
        options: &DeviceOptions,
        token: Option<&str>,
        attempt: u64,
    ) -> Result<Link, Error> {
        let host = options.connect_host();
        let tcp = TcpStream::connect((host, options.port))
            .await
            .map_err(|e| failed(&format!("cannot reach {host}:{}", options.port), e))?;
        // Small frames answer each other (flow, disposition): no Nagle delay.
        let _ = tcp.set_nodelay(true);
        let connection = match &options.tls {
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(tls.client_config()?);
                let name =
                    rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| {
                        Error::InvalidArgument(format!("TLS server name {host:?}: {e}"))
                    })?;
                let stream = connector
                    .connect(name, tcp)
                    .await
                    .map_err(|e| failed(&format!("TLS with {host}:{}", options.port), e))?;
                if options.transport == Transport::AmqpWs {
                    amqp_open(options, websocket::connect(options, stream).await?).await?
                } else {
                    amqp_open(options, stream).await?
                }
            }
            // `DeviceOptions::validate` refuses it first; the hub serves WebSockets over TLS only.
            None if options.transport == Transport::AmqpWs => {
                return Err(Error::InvalidArgument(
                    "AMQP over WebSockets needs TLS".into(),
                ));
            }
            None => amqp_open(options, tcp).await?,
        };
        let link = Link::attach(options, connection, token, attempt).await;
        if let Err(e) = &link {
            tracing::debug!(device = %options.device_id, "AMQP connection refused: {e}");
        }
        link
    }

    async fn attach(
        options: &DeviceOptions,
        mut connection: ConnectionHandle<()>,
        token: Option<&str>,
        attempt: u64,
    ) -> Result<Link, Error> {
        let session = Session::begin(&mut connection).await;
        let mut session = match session {
            Ok(s) => s,
            Err(e) => {
                let _ = connection.close().await;
                return Err(failed("AMQP session", e));
            }
        };
        let id = &options.device_id;
        let cbs = match token {
            Some(token) => {
                let cbs = Cbs::attach(&mut session, id, attempt).await;
                let put = match cbs {
                    Ok(mut cbs) => match cbs.put_token(options, token).await {
                        Ok(()) => Ok(cbs),
                        Err(e) => {
                            cbs.close().await;
                            Err(e)
                        }
                    },
                    Err(e) => Err(e),
                };
                match put {
                    Ok(cbs) => Some(cbs),
                    Err(e) => {
                        let _ = tokio::time::timeout(CLOSE_STEP, session.end()).await;
                        let _ = tokio::time::timeout(CLOSE_STEP, connection.close()).await;
                        return Err(e);
                    }
                }
            }
            None => None,
        };
        let half = HalfOpen {
            connection,
            session,
            cbs,
        };
        let mut half = half;
        let c2d_address = format!("/devices/{id}/messages/devicebound");
        let events_address = format!("/devices/{id}/messages/events");
        // Credit is managed by the connection task: the receive buffer less the messages the
        // application holds, topped up after each turn that settled some (task.rs).
        let credit = u32::try_from(options.receive_buffer).unwrap_or(u32::MAX);
        let c2d = Receiver::builder()
            .name(format!("{id}-c2d-{attempt}"))
            .source(c2d_address.clone())
            .credit_mode(CreditMode::Manual)
            .auto_accept(false)
            .attach(&mut half.session)
            .await
            .map_err(|e| {
                let refusal = match &e {
                    ReceiverAttachError::RemoteClosedWithError(r) if unauthorized(&r.condition) => {
                        Some(description(r))
                    }
                    _ => None,
                };
                attach_failed(&format!("the receiver link on {c2d_address}"), e, refusal)
            });
        let mut c2d = match c2d {
            Ok(l) => l,
            Err(e) => {
                half.close().await;
                return Err(e);
            }
        };
        let events = Sender::builder()
            .name(format!("{id}-events-{attempt}"))
            .target(events_address.clone())
            .attach(&mut half.session)
            .await
            .map_err(|e| {
                let refusal = match &e {
                    SenderAttachError::RemoteClosedWithError(r) if unauthorized(&r.condition) => {
                        Some(description(r))
                    }
                    _ => None,
                };
                attach_failed(&format!("the sender link on {events_address}"), e, refusal)
            });
        let events = match events {
            Ok(l) => l,
            Err(e) => {
                let _ = c2d.close().await;
                half.close().await;
                return Err(e);
            }
        };
        // An X.509 device's links are authorized by its certificate, and the hub refuses a
        // certificate that is not the device's by detaching each link right after attaching it
        // (`amqp:unauthorized-access`). The telemetry link's attach was answered after that
        // detach of the receiver link (one connection keeps the order), and with no credit
        // given yet no message can be waiting on it: one poll of the receiver link sees the
        // refusal if there was one, so that `connect` fails as the official SDKs' open does.
        if token.is_none() {
            let refused = tokio::select! {
                biased;
                r = c2d.recv::<Body<Value>>() => r.err(),
                () = std::future::ready(()) => None,
            };
            if let Some(e) = refused {
                let refusal = match &e {
                    RecvError::LinkStateError(LinkStateError::RemoteClosedWithError(r))
                        if unauthorized(&r.condition) =>
                    {
                        Some(description(r))
                    }
                    _ => None,
                };
                let _ = tokio::time::timeout(CLOSE_STEP, events.close()).await;
                half.close().await;
                return Err(attach_failed(
                    &format!("the receiver link on {c2d_address}"),
                    e,
                    refusal,
                ));
            }
        }
        if let Err(e) = c2d.set_credit(credit).await {
            let _ = tokio::time::timeout(CLOSE_STEP, c2d.close()).await;
            let _ = tokio::time::timeout(CLOSE_STEP, events.close()).await;
            half.close().await;
            return Err(failed("the receiver link's credit", e));
        }
        Ok(Link {
            connection: half.connection,
            session: half.session,
            cbs: half.cbs,
            c2d,
            events,
            c2d_address,
        })
    }

    /// Puts a fresh token on `$cbs` (renewal): the hub extends the links' authorization. An
    /// X.509 connection has no token to renew.
    pub(super) async fn put_token(
        &mut self,
        options: &DeviceOptions,
        token: &str,
    ) -> Result<(), Error> {
        match &mut self.cbs {
            Some(cbs) => cbs.put_token(options, token).await,
            None => Err(Error::InvalidArgument(
                "an X.509 connection has no SAS token to renew".into(),
            )),
        }
    }

    /// Closes the links, the session and the connection, each step bounded: unsettled
    /// deliveries go back to the hub's queue (it abandons them when the link closes).
    pub(super) async fn close(self) {
        let Link {
            mut connection,
            mut session,
            cbs,
            c2d,
            events,
            ..
        } = self;
        let _ = tokio::time::timeout(CLOSE_STEP, c2d.close()).await;
        let _ = tokio::time::timeout(CLOSE_STEP, events.close()).await;
        if let Some(cbs) = cbs {
            cbs.close().await;
        }
        let _ = tokio::time::timeout(CLOSE_STEP, session.end()).await;
        let _ = tokio::time::timeout(CLOSE_STEP, connection.close()).await;
    }
}

/// A connection with its CBS links (authenticated), before the device's links are attached.
struct HalfOpen {
    connection: ConnectionHandle<()>,
    session: SessionHandle<()>,
    cbs: Option<Cbs>,
}

impl HalfOpen {
    async fn close(mut self) {
        if let Some(cbs) = self.cbs {
            cbs.close().await;
        }
        let _ = tokio::time::timeout(CLOSE_STEP, self.session.end()).await;
        let _ = tokio::time::timeout(CLOSE_STEP, self.connection.close()).await;
    }
}

/// The AMQP header and Open on an established stream: SASL ANONYMOUS first for a SAS device
/// (its token goes on `$cbs`), none for an X.509 device (as the SDKs open it).
async fn amqp_open<Io>(options: &DeviceOptions, stream: Io) -> Result<ConnectionHandle<()>, Error>
where
    Io: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    // Our idle timeout: the hub sends a frame at least this often (heartbeats when idle), so
    // a silent, dead peer is noticed; fe2o3 sends ours for the hub's own idle timeout.
    let idle_ms = u32::try_from(options.keep_alive.as_millis()).unwrap_or(u32::MAX);
    let builder = Connection::builder()
        .container_id(options.device_id.clone())
        .hostname(options.hostname.as_str())
        .scheme("amqp")
        .idle_time_out(idle_ms);
    let builder = if options.auth == DeviceAuth::X509 {
        builder
    } else {
        builder.sasl_profile(SaslProfile::Anonymous)
    };
    builder
        .open_with_stream(stream)
        .await
        .map_err(|e| failed(&format!("AMQP open with {}", options.connect_host()), e))
}

/// One `put-token` request and its reply: application properties `operation`, `type`, `name`
/// (the audience: the token's resource URI, as the device SDKs send it), the token as an
/// AMQP string value; the reply's `status-code` 200 or 202 accepts it.
async fn put_token(
    requests: &mut Sender,
    replies: &mut Receiver,
    options: &DeviceOptions,
    token: &str,
    number: u64,
) -> Result<(), Error> {
    let message_id = format!("mqstate-put-token-{number}");
    let request = Message::builder()
        .properties(
            Properties::builder()
                .message_id(MessageId::String(message_id.clone()))
                .to("$cbs")
                .reply_to("cbs")
                .build(),
        )
        .application_properties(
            ApplicationProperties::builder()
                .insert("operation", SimpleValue::String("put-token".into()))
                .insert("type", SimpleValue::String(SAS_TOKEN_TYPE.into()))
                .insert("name", SimpleValue::String(options.resource_uri()))
                .build(),
        )
        .value(Value::String(token.to_owned()))
        .build();
    let wait = options.connect_timeout;
    match tokio::time::timeout(wait, requests.send(request)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(failed("put-token on $cbs", e)),
        Err(_) => return Err(Error::Timeout(wait)),
    }
    loop {
        let reply = match tokio::time::timeout(wait, replies.recv::<Body<Value>>()).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => return Err(failed("the put-token reply on $cbs", e)),
            Err(_) => return Err(Error::Timeout(wait)),
        };
        let _ = replies.accept(&reply).await;
        let message: &Message<Body<Value>> = reply.message();
        let correlates = message
            .properties
            .as_ref()
            .and_then(|p| p.correlation_id.as_ref())
            .is_none_or(|c| *c == MessageId::String(message_id.clone()));
        if !correlates {
            continue; // the reply to an earlier request that timed out
        }
        let app = message.application_properties.as_ref();
        let get = |name: &str| app.and_then(|a| a.0.get(name));
        let status = match get("status-code") {
            Some(SimpleValue::Int(n)) => i64::from(*n),
            Some(SimpleValue::Uint(n)) => i64::from(*n),
            Some(SimpleValue::Long(n)) => *n,
            Some(SimpleValue::Short(n)) => i64::from(*n),
            _ => -1,
        };
        let description = match get("status-description") {
            Some(SimpleValue::String(s)) => s.clone(),
            _ => String::new(),
        };
        return match status {
            200 | 202 => Ok(()),
            401 | 403 | 404 => Err(Error::Authentication(format!(
                "the hub refused the device's SAS token on $cbs ({status}): {description}"
            ))),
            _ => Err(Error::connection(format!(
                "put-token on $cbs answered {status}: {description}"
            ))),
        };
    }
}
