//! WebSocket connections that survive a reload: a stopping worker hands the connections of
//! endpoints that opt in ([`WsEndpoint::survive_reload`]) to its slot's new worker, which
//! serves them on; in an `upgrade`, to the new master's worker of the same slot, through
//! the old master and the new (`master/supervisor/bridge.rs`). Design:
//! `docs/design/ws-handover.md`.
//!
//! Out: [`begin`] flags the worker's connections; each leaves between two messages (see
//! `runtime::connection::handover`) into this worker's outbox; [`next_batch`] packs up to
//! [`BATCH`] of them, their state in a sealed memfd and their sockets, into one message on the
//! worker's handover socket, and the worker tells the master how many it sent. The master
//! passes the message to the new worker's socket and tells it to [`restore`] them.
//!
//! What moves: the socket, the bytes received and not yet decoded, the bytes not yet sent, a
//! fragmented message in progress and the permessage-deflate agreement (the endpoint holds
//! its clients to `client_no_context_takeover`, so there is no compression window to carry),
//! the counters, the groups (keys included) and presence id, with the broadcasts of those
//! groups the connection missed on the way ([`super::replay`]), and its data if the
//! endpoint says how ([`WsEndpoint::carry_data`]). Not carried, so such connections are
//! closed as a stop closes them (counted as skipped): TLS sessions, data of a type the
//! endpoint cannot carry, and in an upgrade group members of an app that spans machines
//! (broadcasts from other instances are numbered by the master that delivers them, and the
//! new master is another instance).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;

use bytes::BytesMut;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::codec::{CodecState, WsCodec, WsFrame};
use super::group::{self, Member};
use super::group_key::GroupKey;
use super::replay::Replay;
use super::Endpoint;
use crate::ipc::clock::monotonic_ns;
use crate::ipc::{fds, memfd};
use crate::limits::Limits;
use crate::protocol::Protocol;
use crate::runtime::conn_view::ConnView;
use crate::runtime::connection::{serve_restored, Carried, Connection, Detached, HandoverHook};
use crate::runtime::context::WorkerCtx;
use crate::runtime::stream::{PeerAddr, Stream};
use crate::stats::Stats;

/// The most connections one handover message carries (with the memfd, within
/// [`fds::MAX_FDS`]).
pub(crate) const BATCH: usize = fds::MAX_FDS - 1;

/// What a handover message's bytes say: the format of what it carries.
const MARK: &[u8] = b"brisk ws handover 1";

/// The largest state memfd accepted: each connection's unsent bytes are bounded by its max
/// send buffer (2 MiB by default), its received bytes by its max message.
const MAX_STATE: u64 = 4 << 30;

/// The close code of a connection that arrives but cannot be served here (its endpoint is
/// not in this build): 1012, service restart: the client may reconnect.
const SERVICE_RESTART: u16 = 1012;

/// Where an endpoint can be found in a new worker, and the limits its connections get there.
#[derive(Clone)]
struct Registered {
    endpoint: Endpoint,
    /// `None`: the worker's defaults (an HTTP route's connections).
    limits: Option<Limits>,
}

/// A worker's handovers, one of its context's parts: the endpoints its connections can be
/// handed to and from, and the state of a handover under way.
#[derive(Default)]
pub(crate) struct Handover {
    /// Endpoints that survive reloads, by key: `listener:<address>` for a `websocket://`
    /// listener's, `route:<name>` for one an HTTP server names.
    endpoints: RefCell<HashMap<String, Registered>>,
    /// Connections that left, waiting to be sent.
    outbox: RefCell<Vec<Leaving>>,
    /// Connections of endpoints that survive reloads, not yet flagged.
    waiting: RefCell<Vec<Rc<dyn ConnView>>>,
    /// Connections flagged, to cancel at the deadline those that have not decided.
    flagged: RefCell<Vec<Rc<dyn ConnView>>>,
    /// Connections flagged that have not yet left or stayed.
    undecided: Cell<usize>,
    /// Whether group members of an app that spans machines stay (an upgrade).
    members_stay: Cell<bool>,
    /// Whether the warning about an endpoint without a name was logged.
    unnamed_warned: Cell<bool>,
    /// Fired when a flagged connection leaves or stays.
    decided: Notify,
}

impl Handover {
    /// One flagged connection has left or stays.
    fn decided(&self) {
        self.undecided.set(self.undecided.get().saturating_sub(1));
        self.decided.notify_one();
    }

    /// Flags connections from the waiting list until a wave's worth have not yet decided.
    fn top_up(&self) {
        while self.undecided.get() < BATCH {
            let Some(next) = self.waiting.borrow_mut().pop() else {
                return;
            };
            if next.hand_over() {
                self.undecided.set(self.undecided.get() + 1);
                self.flagged.borrow_mut().push(next);
            }
        }
    }
}

/// Makes `endpoint` findable under `key` in worker `w` (every worker builds the same app, so
/// the new worker finds it under the same key), if it survives reloads.
pub(crate) fn register(w: &WorkerCtx, key: String, endpoint: &Endpoint, limits: Option<Limits>) {
    if !endpoint.survives_reload() {
        return;
    }
    endpoint.set_handover_key(&key);
    let endpoint = endpoint.clone();
    let registered = Registered { endpoint, limits };
    w.part::<Handover>()
        .endpoints
        .borrow_mut()
        .insert(key, registered);
}

/// A connection that left, with its state in the form it travels in.
struct Leaving {
    record: Record,
    /// Its received bytes, unsent bytes and fragmented message, one after the other.
    bytes: Vec<BytesMut>,
    socket: OwnedFd,
}

/// One connection in a handover message's index.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    /// Its endpoint's key.
    endpoint: String,
    codec: CodecState,
    /// Lengths of its received bytes, unsent bytes and fragmented message, which follow one
    /// another in the memfd after the index, connection after connection.
    received: usize,
    unsent: usize,
    fragment: usize,
    paused: bool,
    handled: bool,
    bytes_in: u64,
    bytes_out: u64,
    /// Its id in the worker it left.
    previous_id: u64,
    /// Its groups (keys included), in their wire form ([`GroupKey::wire`]), and presence id.
    groups: Vec<String>,
    presence: Option<String>,
    /// The last broadcast of each origin it has had ([`Replay::watermark`]).
    watermark: Vec<(u32, u64)>,
    /// Its data, in JSON ([`WsEndpoint::carry_data`]).
    data: Option<String>,
    /// When it left its worker ([`monotonic_ns`]; the clock is the machine's, one for every
    /// process): the new worker logs how long its connections were paused.
    #[serde(default)]
    left_ns: u64,
}

/// How an endpoint's connection data goes to another worker: as JSON, for one type.
#[derive(Clone, Copy)]
pub(crate) struct DataCarrier {
    /// The data in JSON; `None` if it is not of the endpoint's type.
    to_json: fn(&dyn std::any::Any) -> Option<serde_json::Result<String>>,
    from_json: fn(&str) -> serde_json::Result<Box<dyn std::any::Any>>,
}

impl DataCarrier {
    /// The carrier of data of type `T`.
    pub(crate) fn of<T: Serialize + serde::de::DeserializeOwned + 'static>() -> Self {
        DataCarrier {
            to_json: |data| data.downcast_ref::<T>().map(serde_json::to_string),
            from_json: |json| {
                serde_json::from_str::<T>(json).map(|v| Box::new(v) as Box<dyn std::any::Any>)
            },
        }
    }
}

/// The [`HandoverHook`] hook of an endpoint that survives reloads.
pub(crate) struct Hook {
    /// The endpoint's key; `None` until it is registered (then its connections stay).
    pub(crate) key: Rc<RefCell<Option<Rc<str>>>>,
    /// How its data goes, if it says.
    pub(crate) carrier: Option<DataCarrier>,
    /// The data of the connection `can_detach` said yes to, in JSON, for `detached`.
    pub(crate) staged: RefCell<Option<String>>,
}

impl Hook {
    /// The connection's data in JSON (`Ok(None)`: it has none); `Err` if it cannot go.
    fn data_json(&self, conn: &Connection<WsCodec>) -> Result<Option<String>, ()> {
        let Some(data) = conn.take_data() else {
            return Ok(None);
        };
        let json = self.carrier.and_then(|c| (c.to_json)(&*data));
        conn.set_data_boxed(data);
        match json {
            Some(Ok(json)) => Ok(Some(json)),
            Some(Err(e)) => {
                tracing::warn!(
                    conn = conn.id(),
                    "cannot carry its data to the new worker: {e}"
                );
                Err(())
            }
            None => Err(()),
        }
    }
}

impl HandoverHook<WsCodec> for Hook {
    fn can_detach(&self, conn: &Connection<WsCodec>) -> bool {
        let w = conn.worker();
        let handover = w.part::<Handover>();
        if self.key.borrow().is_none() {
            if !handover.unnamed_warned.replace(true) {
                tracing::warn!(
                    "a WebSocket endpoint that survives reloads is served from an HTTP route \
                     but has no name (HttpServer::ws_endpoint): its connections are closed"
                );
            }
            return false;
        }
        // Broadcasts from other instances are numbered by the master that delivers them:
        // a member moving to another master (an upgrade) could not be told which of them
        // it missed on the way.
        let spans_machines = crate::cluster_setting::get().is_some();
        let members_stay = spans_machines && handover.members_stay.get();
        if !conn.protocol().can_carry() || (members_stay && group::is_member(w, conn.id())) {
            return false;
        }
        match self.data_json(conn) {
            Ok(json) => {
                *self.staged.borrow_mut() = json;
                true
            }
            Err(()) => false,
        }
    }

    fn detached(&self, conn: &Connection<WsCodec>, d: Detached<WsCodec>) {
        let Detached { id, socket, state } = d;
        let Carried {
            received,
            unsent,
            protocol,
            paused,
            handled,
            bytes_in,
            bytes_out,
        } = state;
        let (codec, fragment) = protocol.into_carried();
        let endpoint = self.key.borrow().as_deref().unwrap_or_default().to_string();
        let w = conn.worker();
        let (groups, presence) = group::take_membership(w, id);
        let groups = groups.iter().map(|g| g.wire().to_owned()).collect();
        let record = Record {
            endpoint,
            codec,
            received: received.len(),
            unsent: unsent.len(),
            fragment: fragment.len(),
            paused,
            handled,
            bytes_in,
            bytes_out,
            previous_id: id,
            groups,
            presence,
            watermark: w.part::<Replay>().watermark(),
            data: self.staged.borrow_mut().take(),
            left_ns: monotonic_ns(),
        };
        // Handles the app keeps see it closed: no value of it stays here.
        drop(conn.take_data());
        Stats::add(&conn.worker_stats().ws_handed_over, 1);
        let handover = w.part::<Handover>();
        handover.outbox.borrow_mut().push(Leaving {
            record,
            bytes: vec![received, unsent, fragment],
            socket,
        });
        handover.decided();
    }

    fn declined(&self, conn: &Connection<WsCodec>) {
        Stats::add(&conn.worker_stats().ws_handover_skipped, 1);
        conn.worker().part::<Handover>().decided();
    }
}

/// Whether the stop under way keeps group members of an app that spans machines in worker
/// `w` (to be closed): an upgrade's, whose new master is another instance of the cluster bus.
pub(crate) fn members_stay(w: &WorkerCtx, stay: bool) {
    w.part::<Handover>().members_stay.set(stay);
}

/// Lists the connections of `worker` whose endpoints survive reloads, to leave a wave of
/// [`BATCH`] at a time (each waits for its own wave only, not for the whole worker); returns
/// how many. The worker should have stopped accepting.
pub(crate) fn begin(worker: &WorkerCtx) -> usize {
    let candidates = worker.connections_where(|c| c.can_hand_over());
    let n = candidates.len();
    *worker.part::<Handover>().waiting.borrow_mut() = candidates;
    n
}

/// The next handover message: the connections of a wave that have left (at most
/// [`BATCH`]). `None` once every listed connection has left or stayed, or at `deadline`:
/// those still flagged (a handler that did not finish) and those not yet flagged stay, and
/// the stop closes them.
pub(crate) async fn next_batch(
    worker: &WorkerCtx,
    deadline: tokio::time::Instant,
) -> Option<Batch> {
    let h = worker.part::<Handover>();
    loop {
        h.top_up();
        let notified = h.decided.notified();
        if !h.outbox.borrow().is_empty() {
            // The wave's connections were woken together: let them all leave first, for
            // one full message.
            tokio::task::yield_now().await;
            let leaving = {
                let mut o = h.outbox.borrow_mut();
                let n = o.len().min(BATCH);
                o.drain(..n).collect()
            };
            return Some(Batch { leaving });
        }
        if h.undecided.get() == 0 && h.waiting.borrow().is_empty() {
            h.flagged.borrow_mut().clear();
            return None;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            let flagged = std::mem::take(&mut *h.flagged.borrow_mut());
            let cancelled = flagged.iter().filter(|c| c.cancel_hand_over()).count();
            let unflagged = std::mem::take(&mut *h.waiting.borrow_mut()).len();
            h.undecided.set(0);
            let late = cancelled + unflagged;
            Stats::add(&worker.stats.ws_handover_skipped, late as u64);
            tracing::warn!(
                late,
                "WebSocket connections not handed over by the deadline (a handler still \
                 running): the stop closes them"
            );
            // Those that left before it still go.
            if h.outbox.borrow().is_empty() {
                return None;
            }
        }
    }
}

/// Connections that left, packed into one handover message.
pub(crate) struct Batch {
    leaving: Vec<Leaving>,
}

impl Batch {
    /// Sends the batch on the worker's handover socket; returns how many connections it
    /// carries. On failure the connections are lost (their sockets close with this process).
    pub(crate) fn send(self, socket: &OwnedFd) -> std::io::Result<usize> {
        let records: Vec<&Record> = self.leaving.iter().map(|l| &l.record).collect();
        let index = serde_json::to_vec(&records).map_err(std::io::Error::other)?;
        let len = (index.len() as u32).to_le_bytes();
        let mut parts: Vec<&[u8]> = vec![&len, &index];
        for l in &self.leaving {
            parts.extend(l.bytes.iter().map(|b| &b[..]));
        }
        let state = memfd::sealed(c"brisk-ws-handover", &parts)?;
        let mut fds = vec![state.as_raw_fd()];
        fds.extend(self.leaving.iter().map(|l| l.socket.as_raw_fd()));
        fds::send_fds(socket, MARK, &fds)?;
        Ok(self.leaving.len())
    }
}

/// Takes the `count` connections the master put on this worker's handover socket and serves
/// them. One that cannot be served here (its endpoint is not in this build, or its state
/// does not hold together) gets what it had not been sent and a close frame (1012).
pub(crate) fn restore(worker: &Rc<WorkerCtx>, socket: &OwnedFd, count: usize) {
    let stats = &worker.stats;
    let (mark, mut fds) = match fds::recv_fds_now(socket, 64) {
        Ok(m) => m,
        Err(e) => {
            Stats::add(&stats.ws_handover_skipped, count as u64);
            tracing::error!("cannot take {count} handed-over WebSocket connections: {e}");
            return;
        }
    };
    let sockets = if fds.is_empty() {
        vec![]
    } else {
        fds.split_off(1)
    };
    let state = fds.pop();
    let unpacked = match (mark == MARK, state) {
        (true, Some(state)) => unpack(state, sockets.len()),
        _ => Err(UnpackError::Format),
    };
    let records = match unpacked {
        Ok(r) => r,
        Err(e) => {
            Stats::add(&stats.ws_handover_skipped, sockets.len() as u64);
            tracing::error!(
                "cannot take {} handed-over WebSocket connections: {e}",
                sockets.len()
            );
            return;
        }
    };
    let mut paused_us = Vec::with_capacity(records.len());
    let now = monotonic_ns();
    for ((record, bytes), socket) in records.into_iter().zip(sockets) {
        if record.left_ns > 0 {
            paused_us.push(now.saturating_sub(record.left_ns) / 1_000);
        }
        match resume(worker, record, bytes, socket) {
            Ok(()) => Stats::add(&stats.ws_resumed, 1),
            Err(e) => {
                Stats::add(&stats.ws_handover_skipped, 1);
                tracing::warn!("a handed-over WebSocket connection was closed: {e}");
            }
        }
    }
    paused_us.sort_unstable();
    if let (Some(median), Some(max)) = (paused_us.get(paused_us.len() / 2), paused_us.last()) {
        tracing::info!(
            count = paused_us.len(),
            median_ms = *median as f64 / 1e3,
            max_ms = *max as f64 / 1e3,
            "resumed handed-over WebSocket connections, paused from leaving their worker"
        );
    }
}

/// Why a handover message's connections cannot be taken, each saying it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UnpackError {
    #[error("a handover message of another format")]
    Format,
    #[error("its state memfd: {0}")]
    Read(std::io::Error),
    #[error("a state memfd {0}")]
    Short(&'static str),
    #[error("its index: {0}")]
    Index(serde_json::Error),
    #[error("{records} connections in the index, {sockets} sockets")]
    Count { records: usize, sockets: usize },
    #[error("bytes past the last connection's in a state memfd")]
    Extra,
}

/// Why one handed-over connection cannot be served here (it is closed, 1012), each saying
/// it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResumeError {
    #[error("no endpoint {0} in this build")]
    UnknownEndpoint(String),
    #[error("its state: {0}")]
    State(&'static str),
    #[error("its data does not read as this build's type: {0}")]
    Data(serde_json::Error),
    #[error("{0} carries no data in this build")]
    NoCarrier(String),
    #[error("its socket: {0}")]
    Socket(std::io::Error),
    #[error("the broadcasts it missed were not kept: closed with 1012")]
    MissedUnknown,
}

/// The records of a state memfd and each one's bytes (received, unsent, fragment), checked
/// against `sockets`, the number of sockets that came with it.
fn unpack(state: OwnedFd, sockets: usize) -> Result<Vec<(Record, [BytesMut; 3])>, UnpackError> {
    let all = memfd::read_sealed(state, MAX_STATE).map_err(UnpackError::Read)?;
    let mut all = BytesMut::from(&all[..]);
    if all.len() < 4 {
        return Err(UnpackError::Short("too short for its index"));
    }
    let len = u32::from_le_bytes(all[..4].try_into().expect("4 bytes")) as usize;
    let _ = all.split_to(4);
    if all.len() < len {
        return Err(UnpackError::Short("shorter than its index says"));
    }
    let records: Vec<Record> =
        serde_json::from_slice(&all.split_to(len)).map_err(UnpackError::Index)?;
    if records.len() != sockets {
        let records = records.len();
        return Err(UnpackError::Count { records, sockets });
    }
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let total = r.received + r.unsent + r.fragment;
        if all.len() < total {
            return Err(UnpackError::Short("shorter than its connections' bytes"));
        }
        let received = all.split_to(r.received);
        let unsent = all.split_to(r.unsent);
        let fragment = all.split_to(r.fragment);
        out.push((r, [received, unsent, fragment]));
    }
    if !all.is_empty() {
        return Err(UnpackError::Extra);
    }
    Ok(out)
}

/// Serves one handed-over connection in this worker.
fn resume(
    worker: &Rc<WorkerCtx>,
    record: Record,
    [received, unsent, fragment]: [BytesMut; 3],
    socket: OwnedFd,
) -> Result<(), ResumeError> {
    let found = (worker.part::<Handover>().endpoints.borrow())
        .get(&record.endpoint)
        .cloned();
    let Some(Registered { endpoint, limits }) = found else {
        close_unserved(socket, &unsent);
        return Err(ResumeError::UnknownEndpoint(record.endpoint));
    };
    let codec = match WsCodec::resumed(record.codec, fragment, endpoint.max_message()) {
        Ok(c) => c,
        Err(e) => {
            close_unserved(socket, &unsent);
            return Err(ResumeError::State(e));
        }
    };
    let data = match (&record.data, endpoint.data_carrier()) {
        (None, _) => None,
        (Some(json), Some(carrier)) => match (carrier.from_json)(json) {
            Ok(data) => Some(data),
            Err(e) => {
                close_unserved(socket, &unsent);
                return Err(ResumeError::Data(e));
            }
        },
        (Some(_), None) => {
            close_unserved(socket, &unsent);
            return Err(ResumeError::NoCarrier(record.endpoint));
        }
    };
    let agreement = codec.deflate();
    let tcp = std::net::TcpStream::from(socket);
    tcp.set_nonblocking(true).map_err(ResumeError::Socket)?;
    let tcp = tokio::net::TcpStream::from_std(tcp).map_err(ResumeError::Socket)?;
    let remote = tcp
        .peer_addr()
        .map(PeerAddr::Inet)
        .unwrap_or(PeerAddr::Unix(None));
    let limits = limits.unwrap_or_else(|| worker.default_limits());
    let shared = endpoint.shared(worker, limits);
    let state = Carried {
        received,
        unsent,
        protocol: codec,
        paused: record.paused,
        handled: record.handled,
        bytes_in: record.bytes_in,
        bytes_out: record.bytes_out,
    };
    let (conn, serving) = serve_restored(shared, Stream::Tcp(tcp), remote, state);
    let id = conn.id();
    if let Some(data) = data {
        conn.set_data_boxed(data);
    }
    let groups: Vec<GroupKey> = record
        .groups
        .iter()
        .map(|g| GroupKey::from_wire(g))
        .collect();
    for g in &groups {
        group::join(worker, Member::Socket(id), g, agreement);
    }
    if let Some(presence) = &record.presence {
        group::set_presence_id(worker, id, presence);
    }
    let mut outcome = Ok(());
    if !groups.is_empty() {
        match worker.part::<Replay>().missed(&groups, &record.watermark) {
            Some(missed) => {
                for delivery in &missed {
                    group::deliver_to(worker, id, delivery);
                }
            }
            None => {
                // What it missed is not known: a gap would be silent, a close is not.
                let reason = tungstenite::Utf8Bytes::from_static("service restart");
                let _ = conn.send_past_limit(WsFrame::Close(Some((SERVICE_RESTART, reason))));
                conn.close();
                outcome = Err(ResumeError::MissedUnknown);
            }
        }
    }
    tracing::debug!(
        previous = record.previous_id,
        id,
        "WebSocket connection taken over"
    );
    endpoint.serve_resumed(conn, record.previous_id, serving);
    outcome
}

/// Writes what a connection had not been sent and a close frame (service restart), as far
/// as the socket takes them at once, then closes it.
fn close_unserved(socket: OwnedFd, unsent: &[u8]) {
    let mut tcp = std::net::TcpStream::from(socket);
    let _ = tcp.set_nonblocking(true);
    let mut frame = BytesMut::new();
    let reason = tungstenite::Utf8Bytes::from_static("service restart");
    let close = WsFrame::Close(Some((SERVICE_RESTART, reason)));
    if WsCodec::new(false, 0).encode(close, &mut frame).is_ok() {
        let _ = tcp.write_all(unsent).and_then(|()| tcp.write_all(&frame));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaving(endpoint: &str, sizes: [usize; 3], socket: OwnedFd) -> Leaving {
        let (codec, _) = WsCodec::new(false, 100).into_carried();
        Leaving {
            record: Record {
                endpoint: endpoint.into(),
                codec,
                received: sizes[0],
                unsent: sizes[1],
                fragment: sizes[2],
                paused: true,
                handled: true,
                bytes_in: 7,
                bytes_out: 9,
                previous_id: 42,
                groups: vec!["room".into(), "brisk.key:user:ada".into()],
                presence: Some("ada".into()),
                watermark: vec![(1234, 56)],
                data: Some(r#"["lobby"]"#.into()),
                left_ns: 0,
            },
            bytes: sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| BytesMut::from(&vec![b'a' + i as u8; n][..]))
                .collect(),
            socket,
        }
    }

    #[test]
    fn a_batch_unpacks_to_what_was_packed() {
        let (out, into) = fds::seqpacket_pair().unwrap();
        let sockets: Vec<OwnedFd> = (0..3)
            .map(|_| std::os::unix::net::UnixStream::pair().unwrap().0.into())
            .collect();
        let batch = Batch {
            leaving: sockets
                .into_iter()
                .enumerate()
                .map(|(i, s)| leaving(&format!("route:e{i}"), [i, 2 * i, 3], s))
                .collect(),
        };
        assert_eq!(batch.send(&out).unwrap(), 3);
        let (mark, mut fds) = fds::recv_fds_now(&into, 64).unwrap();
        assert_eq!(mark, MARK);
        assert_eq!(fds.len(), 4);
        let sockets = fds.split_off(1);
        let unpacked = unpack(fds.pop().unwrap(), sockets.len()).unwrap();
        for (i, (record, [received, unsent, fragment])) in unpacked.into_iter().enumerate() {
            assert_eq!(record.endpoint, format!("route:e{i}"));
            assert_eq!(
                (record.bytes_in, record.bytes_out, record.previous_id),
                (7, 9, 42)
            );
            assert!(record.paused && record.handled);
            assert_eq!(record.groups, ["room", "brisk.key:user:ada"]);
            assert_eq!(record.presence.as_deref(), Some("ada"));
            assert_eq!(record.watermark, [(1234, 56)]);
            assert_eq!(record.data.as_deref(), Some(r#"["lobby"]"#));
            assert_eq!(&received[..], &vec![b'a'; i][..]);
            assert_eq!(&unsent[..], &vec![b'b'; 2 * i][..]);
            assert_eq!(&fragment[..], b"ccc");
        }
        // Nothing waits any more: a restore that finds none fails at once, not later.
        let err = fds::recv_fds_now(&into, 64).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    }

    #[test]
    fn a_state_that_does_not_match_its_sockets_is_refused() {
        let state = memfd::sealed(c"t", &[&2u32.to_le_bytes(), b"[]"]).unwrap();
        assert!(unpack(state, 1)
            .unwrap_err()
            .to_string()
            .contains("0 connections"));
        let state = memfd::sealed(c"t", &[&200u32.to_le_bytes(), b"[]"]).unwrap();
        assert!(unpack(state, 0)
            .unwrap_err()
            .to_string()
            .contains("shorter"));
        let state = memfd::sealed(c"t", &[&2u32.to_le_bytes(), b"[]", b"x"]).unwrap();
        assert!(unpack(state, 0)
            .unwrap_err()
            .to_string()
            .contains("past the last"));
    }
}
