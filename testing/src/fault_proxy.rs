//! A fault-injection TCP proxy for MQTT tests: put it between clients and a broker (or between
//! the state store and an external broker) and break the connections on demand.
//!
//! It forwards whole MQTT packets (it reads the fixed header of each, so faults can be tied to
//! packet kinds and can cut a packet in the middle). The fault kinds follow the official
//! Azure IoT Operations SDKs' faultable broker (disconnect on PUBLISH, SUBSCRIBE or PUBACK;
//! rejected CONNACK, SUBACK or PUBACK) plus the network's own failures:
//!
//! | call | effect |
//! |---|---|
//! | [`FaultProxy::drop_connections`] | closes every open connection now (new ones are accepted) |
//! | [`FaultProxy::set_refusing`] | closes new connections at once while set |
//! | [`FaultProxy::set_stalled`] | stops forwarding in both directions (connections stay open) |
//! | [`FaultProxy::set_delay`] | delays every forwarded packet |
//! | [`FaultProxy::cut_next_packet`] | forwards half of the next packet, then closes that connection |
//! | [`FaultProxy::disconnect_on`] | closes the connection when a packet of a kind passes (it is not forwarded) |
//! | [`FaultProxy::reject_next`] | rewrites the next CONNACK, SUBACK or PUBACK to a failure code |
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use mqstate_testing::fault_proxy::{Direction, FaultProxy, PacketKind};
//!
//! let proxy = FaultProxy::start("127.0.0.1:1883".parse().unwrap()).await?;
//! // clients connect to 127.0.0.1:proxy.port() ...
//! proxy.disconnect_on(PacketKind::Publish, Direction::ToBroker);
//! proxy.drop_connections();
//! # Ok(()) }
//! ```

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Which way a packet travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the broker.
    ToBroker,
    /// From the broker to the client.
    ToClient,
}

/// MQTT control packet kinds the faults can be tied to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketKind {
    /// CONNECT.
    Connect,
    /// CONNACK.
    ConnAck,
    /// PUBLISH.
    Publish,
    /// PUBACK.
    PubAck,
    /// SUBSCRIBE.
    Subscribe,
    /// SUBACK.
    SubAck,
}

impl PacketKind {
    fn of(first_byte: u8) -> Option<PacketKind> {
        Some(match first_byte >> 4 {
            1 => PacketKind::Connect,
            2 => PacketKind::ConnAck,
            3 => PacketKind::Publish,
            4 => PacketKind::PubAck,
            8 => PacketKind::Subscribe,
            9 => PacketKind::SubAck,
            _ => return None,
        })
    }
}

/// What the pumps read on every packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Flow {
    stalled: bool,
    delay: Duration,
}

#[derive(Debug, Default)]
struct Control {
    refusing: AtomicBool,
    /// Bumped by `drop_connections`: connections opened before the bump close.
    epoch: AtomicU64,
    cut_next: AtomicBool,
    disconnect_on: Mutex<Vec<(PacketKind, Direction)>>,
    reject_next: Mutex<Vec<PacketKind>>,
    connections: AtomicUsize,
    faults_applied: AtomicUsize,
}

impl Control {
    fn take_disconnect(&self, kind: PacketKind, direction: Direction) -> bool {
        let mut armed = self
            .disconnect_on
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match armed.iter().position(|a| *a == (kind, direction)) {
            Some(i) => {
                armed.swap_remove(i);
                true
            }
            None => false,
        }
    }

    fn take_reject(&self, kind: PacketKind) -> bool {
        let mut armed = self
            .reject_next
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match armed.iter().position(|a| *a == kind) {
            Some(i) => {
                armed.swap_remove(i);
                true
            }
            None => false,
        }
    }
}

/// A running proxy; dropping it closes the listener and every connection.
#[derive(Debug)]
pub struct FaultProxy {
    port: u16,
    control: Arc<Control>,
    flow: watch::Sender<Flow>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        FaultProxy::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), upstream).await
    }

    /// Listens on `bind` and forwards every connection to `upstream`.
    pub async fn start_on(bind: SocketAddr, upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind(bind).await?;
        let port = listener.local_addr()?.port();
        let control = Arc::new(Control::default());
        let (flow, flow_rx) = watch::channel(Flow::default());
        let accept = {
            let control = control.clone();
            tokio::spawn(async move {
                let mut connections = tokio::task::JoinSet::new();
                loop {
                    let accepted = tokio::select! {
                        accepted = listener.accept() => accepted,
                        Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                    };
                    let Ok((inbound, _)) = accepted else { break };
                    if control.refusing.load(Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let control = control.clone();
                    let flow = flow_rx.clone();
                    connections.spawn(async move {
                        if let Ok(outbound) = TcpStream::connect(upstream).await {
                            control.connections.fetch_add(1, Ordering::SeqCst);
                            connection(inbound, outbound, control, flow).await;
                        }
                    });
                }
            })
        };
        Ok(FaultProxy {
            port,
            control,
            flow,
            accept,
        })
    }

    /// The port clients connect to (on the bind address, 127.0.0.1 by default).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes every open connection now; new connections are accepted (unless refusing).
    pub fn drop_connections(&self) {
        self.control.epoch.fetch_add(1, Ordering::SeqCst);
        // Wake the pumps so that idle connections notice at once.
        self.flow.send_modify(|_| {});
    }

    /// While set, new connections are closed as soon as they are accepted.
    pub fn set_refusing(&self, refusing: bool) {
        self.control.refusing.store(refusing, Ordering::SeqCst);
    }

    /// While set, nothing is forwarded in either direction (the connections stay open; what
    /// arrives meanwhile is forwarded when the stall ends).
    pub fn set_stalled(&self, stalled: bool) {
        self.flow.send_modify(|f| f.stalled = stalled);
    }

    /// Delays every packet by `delay` before forwarding it (zero: no delay).
    pub fn set_delay(&self, delay: Duration) {
        self.flow.send_modify(|f| f.delay = delay);
    }

    /// The next packet, in either direction, is forwarded only in part (the first half of
    /// its bytes), then its connection is closed.
    pub fn cut_next_packet(&self) {
        self.control.cut_next.store(true, Ordering::SeqCst);
    }

    /// The next packet of `kind` travelling in `direction` is not forwarded: its connection
    /// is closed instead (once; arm again for more).
    pub fn disconnect_on(&self, kind: PacketKind, direction: Direction) {
        self.control
            .disconnect_on
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((kind, direction));
    }

    /// The next CONNACK, SUBACK or PUBACK from the broker is rewritten to a failure (CONNACK
    /// 0x88 server unavailable; every SUBACK code and the PUBACK reason 0x87 not authorized).
    /// Other kinds are ignored.
    pub fn reject_next(&self, kind: PacketKind) {
        if matches!(
            kind,
            PacketKind::ConnAck | PacketKind::SubAck | PacketKind::PubAck
        ) {
            self.control
                .reject_next
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(kind);
        }
    }

    /// How many connections were forwarded so far.
    pub fn connections(&self) -> usize {
        self.control.connections.load(Ordering::SeqCst)
    }

    /// How many one-shot faults (cut, disconnect on, reject) took effect so far.
    pub fn faults_applied(&self) -> usize {
        self.control.faults_applied.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts every connection.
        self.accept.abort();
    }
}

async fn connection(
    inbound: TcpStream,
    outbound: TcpStream,
    control: Arc<Control>,
    flow: watch::Receiver<Flow>,
) {
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let epoch = control.epoch.load(Ordering::SeqCst);
    let (client_read, client_write) = inbound.into_split();
    let (broker_read, broker_write) = outbound.into_split();
    let up = pump(
        client_read,
        broker_write,
        Direction::ToBroker,
        control.clone(),
        flow.clone(),
        epoch,
    );
    let down = pump(
        broker_read,
        client_write,
        Direction::ToClient,
        control,
        flow,
        epoch,
    );
    // Either side ending (EOF, error or fault) ends both: the halves drop, the sockets close.
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// Length of a complete packet at the start of `buf` (fixed header included), if complete;
/// `Err` if the remaining-length field is malformed.
fn packet_len(buf: &[u8]) -> Result<Option<usize>, ()> {
    let mut remaining: usize = 0;
    let mut shift = 0;
    for i in 1..5 {
        let Some(&byte) = buf.get(i) else {
            return Ok(None);
        };
        remaining |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            let total = 1 + i + remaining;
            return Ok((buf.len() >= total).then_some(total));
        }
        shift += 7;
    }
    Err(())
}

/// Rewrites an acknowledgement to a failure; the header length is `packet.len() - body`.
fn reject(kind: PacketKind, packet: &mut BytesMut) {
    let header = packet
        .iter()
        .skip(1)
        .position(|b| b & 0x80 == 0)
        .map_or(packet.len(), |i| i + 2);
    match kind {
        // Flags byte, then the reason code.
        PacketKind::ConnAck => {
            if let Some(code) = packet.get_mut(header + 1) {
                *code = 0x88;
            }
        }
        // Packet id (2), properties (length varint + bytes), then one code per filter.
        PacketKind::SubAck => {
            let props_at = header + 2;
            let mut props_len = 0usize;
            let mut at = props_at;
            let mut shift = 0;
            while let Some(&b) = packet.get(at) {
                props_len |= usize::from(b & 0x7f) << shift;
                at += 1;
                shift += 7;
                if b & 0x80 == 0 || shift > 21 {
                    break;
                }
            }
            for code in packet.iter_mut().skip(at + props_len) {
                *code = 0x87;
            }
        }
        // Packet id (2), then an optional reason code: add it when absent.
        PacketKind::PubAck => {
            if packet.len() >= header + 3 {
                if let Some(code) = packet.get_mut(header + 2) {
                    *code = 0x87;
                }
            } else if let (Some(&hi), Some(&lo)) = (packet.get(header), packet.get(header + 1)) {
                *packet = BytesMut::from(&[0x40, 3, hi, lo, 0x87][..]);
            }
        }
        _ => {}
    }
}

async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    direction: Direction,
    control: Arc<Control>,
    mut flow: watch::Receiver<Flow>,
    epoch: u64,
) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        // Forward every complete packet in the buffer.
        loop {
            let len = match packet_len(&buf) {
                Ok(Some(len)) => len,
                Ok(None) => break,
                // Not MQTT: nothing sensible to forward.
                Err(()) => return,
            };
            let mut packet = buf.split_to(len);
            let Some(&first) = packet.first() else { break };
            let kind = PacketKind::of(first);
            if let Some(kind) = kind
                && control.take_disconnect(kind, direction)
            {
                control.faults_applied.fetch_add(1, Ordering::SeqCst);
                return;
            }
            if direction == Direction::ToClient
                && let Some(kind) = kind
                && control.take_reject(kind)
            {
                control.faults_applied.fetch_add(1, Ordering::SeqCst);
                reject(kind, &mut packet);
            }
            // Wait out a stall; apply the delay.
            loop {
                let current = *flow.borrow_and_update();
                if control.epoch.load(Ordering::SeqCst) != epoch {
                    return;
                }
                if !current.stalled {
                    if !current.delay.is_zero() {
                        tokio::time::sleep(current.delay).await;
                    }
                    break;
                }
                if flow.changed().await.is_err() {
                    return;
                }
            }
            if control.cut_next.swap(false, Ordering::SeqCst) {
                control.faults_applied.fetch_add(1, Ordering::SeqCst);
                let half = packet.len() / 2;
                let _ = to.write_all(packet.get(..half.max(1)).unwrap_or(&[])).await;
                return;
            }
            if to.write_all(&packet).await.is_err() {
                return;
            }
        }
        if control.epoch.load(Ordering::SeqCst) != epoch {
            return;
        }
        tokio::select! {
            read = from.read_buf(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            changed = flow.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_lengths() {
        assert_eq!(packet_len(&[0x30]), Ok(None));
        assert_eq!(packet_len(&[0x30, 2, 0]), Ok(None));
        assert_eq!(packet_len(&[0x30, 2, 0, 0]), Ok(Some(4)));
        assert_eq!(packet_len(&[0xC0, 0]), Ok(Some(2)));
        // 200 = 0xC8 0x01
        let mut long = vec![0x30, 0xC8, 0x01];
        long.resize(3 + 200, 0);
        assert_eq!(packet_len(&long), Ok(Some(203)));
        assert_eq!(packet_len(&[0x30, 0xff, 0xff, 0xff, 0xff, 0]), Err(()));
    }

    #[test]
    fn rejections() {
        let mut connack = BytesMut::from(&[0x20, 3, 0, 0, 0][..]);
        reject(PacketKind::ConnAck, &mut connack);
        assert_eq!(&connack[..], &[0x20, 3, 0, 0x88, 0]);
        let mut suback = BytesMut::from(&[0x90, 5, 0, 1, 0, 1, 1][..]);
        reject(PacketKind::SubAck, &mut suback);
        assert_eq!(&suback[..], &[0x90, 5, 0, 1, 0, 0x87, 0x87]);
        let mut puback = BytesMut::from(&[0x40, 2, 0, 9][..]);
        reject(PacketKind::PubAck, &mut puback);
        assert_eq!(&puback[..], &[0x40, 3, 0, 9, 0x87]);
        let mut puback = BytesMut::from(&[0x40, 4, 0, 9, 0, 0][..]);
        reject(PacketKind::PubAck, &mut puback);
        assert_eq!(&puback[..], &[0x40, 4, 0, 9, 0x87, 0]);
    }
}
