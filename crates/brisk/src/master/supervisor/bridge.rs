//! The bridge between two masters during an `upgrade`, from the new master's start until the
//! old one's workers have all exited. Each master relays its workers' broadcasts to the
//! other, so a group's members get its messages whichever side they are on; and the old
//! master passes the WebSocket connections its stopping workers hand over
//! ([`WsEndpoint::survive_reload`](crate::ws::WsEndpoint::survive_reload)) to the new one,
//! which gives each batch to its worker of the same listener and index, as a reload does
//! ([`super::conn_handover`]). When the old workers are gone it says so, and the new workers
//! stop keeping broadcasts for connections that might still come.
//!
//! Two sockets: the bridge, a stream pair framed as the master-worker channels are
//! (broadcasts and [`Notice`]s), and the upgrade's `SOCK_SEQPACKET` link for the
//! connections' descriptors. A batch goes onto the link before its notice onto the bridge, so
//! the new master finds it there when it reads the notice; and the notice follows every
//! broadcast the batch's connections had been sent, since those went onto the bridge before
//! the old worker said it had detached them. So the new worker has each of them before it
//! restores the connections, and replays to them only what they missed, as in a reload.
//!
//! With a cluster bus the two masters are two instances of the app on it, which already
//! carries their broadcasts to each other: the bridge then carries connections only.

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use super::conn_handover::{pass_on, Forward};
use super::*;
use crate::ipc::codec::{reader, write_broadcast_as_frames, writer};
use crate::ipc::fds::recv_fds_now;
use crate::master::upgrade::Link;

/// A master's side of the bridge.
#[derive(Default)]
pub(super) struct Bridging {
    /// This master's end of the bridge to the other during an upgrade.
    pub(super) bridge: RefCell<Option<Rc<Bridge>>>,
    /// Started by an `upgrade` whose old master may still pass connections on: the workers
    /// keep broadcasts for them until it has ended.
    pub(super) awaiting_predecessor: Cell<bool>,
}

/// How long the old master waits, as it exits, for what it put on the bridge to be sent.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// What a master says to the other on the bridge, besides broadcasts.
#[derive(Debug, Serialize, Deserialize)]
enum Notice {
    /// The next message on the link carries `count` connections of worker `index` of the
    /// listener `service`.
    Connections {
        service: String,
        index: usize,
        count: usize,
    },
    /// The old master's workers have all exited: nothing more comes.
    Done,
}

/// What goes onto the bridge, in order.
enum Out {
    Broadcast {
        topic: String,
        stamp: Stamp,
        broadcast: Broadcast,
    },
    Notice(Notice),
}

/// A batch of connections from one of the old master's workers, to pass on.
struct Batch {
    service: String,
    index: usize,
    bytes: Vec<u8>,
    fds: Vec<OwnedFd>,
    count: usize,
}

/// The old master's queue of batches to pass on (`None`: the last, then `Done`), and the
/// task that sends them.
type Passing = (mpsc::UnboundedSender<Option<Batch>>, JoinHandle<()>);

/// This master's end of the bridge.
pub(super) struct Bridge {
    out: mpsc::UnboundedSender<Out>,
    /// Bytes of broadcasts queued on the bridge and not yet written.
    queued: Rc<Cell<usize>>,
    /// The new master's end: the link connections come in on, once it serves.
    link: RefCell<Option<Link>>,
    /// The old master's end: batches to pass on, in order, once the new master serves.
    batches: RefCell<Option<Passing>>,
    writer: RefCell<Option<JoinHandle<()>>>,
}

impl Supervisor {
    /// Serves `socket` as this master's end of the bridge: as the old master (`new_side`
    /// false) from the start of an upgrade, as the new one from its own start. An old master
    /// of an earlier build (`peer_speaks_frames`) reads broadcasts as frames: they are
    /// written so for it.
    pub(super) fn open_bridge(
        self: &Rc<Self>,
        socket: OwnedFd,
        new_side: bool,
        peer_speaks_frames: bool,
    ) -> std::io::Result<()> {
        let stream = std::os::unix::net::UnixStream::from(socket);
        stream.set_nonblocking(true)?;
        let (rd, wr) = tokio::net::UnixStream::from_std(stream)?.into_split();
        let (mut rd, mut wr) = (reader(rd), writer(wr));
        let (out, mut rx) = mpsc::unbounded_channel::<Out>();
        let queued = Rc::new(Cell::new(0usize));
        let written = queued.clone();
        let writer_task = tokio::task::spawn_local(async move {
            while let Some(o) = rx.recv().await {
                let sent = match o {
                    Out::Broadcast {
                        topic,
                        stamp,
                        broadcast,
                    } => {
                        let sent = match peer_speaks_frames {
                            true => {
                                write_broadcast_as_frames(&mut wr, &topic, stamp, &broadcast).await
                            }
                            false => write_broadcast(&mut wr, &topic, stamp, &broadcast).await,
                        };
                        written.set(written.get().saturating_sub(broadcast.len()));
                        sent
                    }
                    Out::Notice(n) => write_msg(&mut wr, &n).await,
                };
                if let Err(e) = sent {
                    tracing::error!("upgrade: the other master's bridge is gone: {e}");
                    return;
                }
            }
        });
        *self.bridging.bridge.borrow_mut() = Some(Rc::new(Bridge {
            out,
            queued,
            link: RefCell::new(None),
            batches: RefCell::new(None),
            writer: RefCell::new(Some(writer_task)),
        }));
        let me = Rc::downgrade(self);
        tokio::task::spawn_local(async move {
            loop {
                let packet = read_packet::<_, Notice>(&mut rd).await;
                let Some(sup) = me.upgrade() else { return };
                match packet {
                    Ok(Some(Packet::Broadcast {
                        topic,
                        stamp,
                        broadcast,
                    })) => {
                        if sup.cluster.is_none() {
                            sup.relay_to(&topic, stamp, &broadcast, |_| true);
                        }
                    }
                    Ok(Some(Packet::Msg(Notice::Connections {
                        service,
                        index,
                        count,
                    }))) if new_side => sup.take_connections(&service, index, count),
                    Ok(Some(Packet::Msg(Notice::Done))) | Ok(None) => {
                        sup.bridge_closed(new_side);
                        return;
                    }
                    Ok(Some(Packet::Msg(n))) => {
                        tracing::warn!("upgrade: unexpected on the bridge: {n:?}");
                    }
                    Err(e) => {
                        tracing::error!("upgrade: cannot read the bridge: {e}");
                        sup.bridge_closed(new_side);
                        return;
                    }
                }
            }
        });
        Ok(())
    }

    /// Puts a broadcast of this master's worker on the bridge, if there is one (and no
    /// cluster bus, which carries it to the other master already);
    /// past [`MAX_QUEUED_BROADCASTS`] queued (the other master is stalled) it is dropped and
    /// counted.
    pub(super) fn bridge_broadcast(&self, topic: &str, stamp: Stamp, broadcast: &Broadcast) {
        let bridge = self.bridging.bridge.borrow();
        let Some(b) = bridge.as_ref().filter(|_| self.cluster.is_none()) else {
            return;
        };
        if b.queued.get() + broadcast.len() > MAX_QUEUED_BROADCASTS {
            let dropped = self.relaying.dropped_broadcasts.get() + 1;
            self.relaying.dropped_broadcasts.set(dropped);
            if dropped.is_power_of_two() {
                tracing::warn!(
                    dropped,
                    "upgrade: the other master is not reading broadcasts"
                );
            }
            return;
        }
        b.queued.set(b.queued.get() + broadcast.len());
        let _ = b.out.send(Out::Broadcast {
            topic: topic.to_string(),
            stamp,
            broadcast: broadcast.clone(),
        });
    }

    /// As the old master, once the new one serves: connections handed over from here on
    /// go to it on `link`.
    pub(super) fn pass_connections_on(&self, link: Link) {
        let Some(bridge) = self.bridging.bridge.borrow().clone() else {
            return;
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<Option<Batch>>();
        let out = bridge.out.clone();
        let task = tokio::task::spawn_local(async move {
            while let Some(next) = rx.recv().await {
                let Some(b) = next else {
                    let _ = out.send(Out::Notice(Notice::Done));
                    return;
                };
                match pass_on(link.fd(), &b.bytes, &b.fds).await {
                    Ok(()) => {
                        let _ = out.send(Out::Notice(Notice::Connections {
                            service: b.service,
                            index: b.index,
                            count: b.count,
                        }));
                    }
                    Err(e) => tracing::error!(
                        "upgrade: cannot pass {} WebSocket connections to the new master: \
                         {e}; closing them",
                        b.count
                    ),
                }
            }
        });
        *bridge.batches.borrow_mut() = Some((tx, task));
    }

    /// Whether this is the old master of an upgrade, whose workers' connections go to the new
    /// one.
    pub(super) fn passes_to_new_master(&self) -> bool {
        let bridge = self.bridging.bridge.borrow();
        bridge
            .as_ref()
            .is_some_and(|b| b.batches.borrow().is_some())
    }

    /// As the old master: passes a batch its worker in `slot` handed over to the new master.
    pub(super) fn pass_to_new_master(
        &self,
        slot: usize,
        bytes: Vec<u8>,
        fds: Vec<OwnedFd>,
        count: usize,
    ) {
        let bridge = self.bridging.bridge.borrow();
        let batches = bridge.as_ref().map(|b| b.batches.borrow());
        let Some(Some((tx, _))) = batches.as_deref() else {
            tracing::error!("upgrade: no new master to take {count} WebSocket connections");
            return;
        };
        let (service, index) = self.slots[slot];
        let batch = Batch {
            service: self.plan.services[service].name.clone(),
            index,
            bytes,
            fds,
            count,
        };
        let _ = tx.send(Some(batch));
    }

    /// As the old master, once its workers have exited: tells the new one, and waits (for up
    /// to [`FLUSH_TIMEOUT`]) until everything is sent.
    pub(super) async fn close_bridge(&self) {
        let Some(bridge) = self.bridging.bridge.borrow_mut().take() else {
            return;
        };
        let batches = bridge.batches.borrow_mut().take();
        let writer = bridge.writer.borrow_mut().take();
        let flushed = async move {
            match batches {
                Some((tx, task)) => {
                    let _ = tx.send(None);
                    drop(tx);
                    let _ = task.await;
                }
                None => {
                    let _ = bridge.out.send(Out::Notice(Notice::Done));
                }
            }
            // The writer ends once every sender is gone and the queue is written.
            drop(bridge);
            if let Some(w) = writer {
                let _ = w.await;
            }
        };
        if tokio::time::timeout(FLUSH_TIMEOUT, flushed).await.is_err() {
            tracing::error!("upgrade: the new master did not take what was left on the bridge");
        }
    }

    /// As the new master, once it serves: connections come in on `link`.
    pub(super) fn take_connections_on(&self, link: Link) {
        if let Some(bridge) = self.bridging.bridge.borrow().as_ref() {
            *bridge.link.borrow_mut() = Some(link);
        }
    }

    /// As the new master: the link's next message is `count` connections of worker `index`
    /// of `service`; gives them to this master's worker of the same listener and index (the
    /// index modulo this build's count of them).
    fn take_connections(&self, service: &str, index: usize, count: usize) {
        let bridge = self.bridging.bridge.borrow().clone();
        let link = bridge.as_ref().map(|b| b.link.borrow());
        let Some(Some(link)) = link.as_deref() else {
            tracing::error!("upgrade: {count} WebSocket connections announced before the link");
            return;
        };
        let (bytes, fds) = match recv_fds_now(link.fd(), 64) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!("upgrade: {count} WebSocket connections were lost: {e}");
                return;
            }
        };
        let same = (self.slots.iter().enumerate())
            .filter(|(_, (s, _))| self.plan.services[*s].name == service)
            .map(|(slot, _)| slot)
            .collect::<Vec<_>>();
        let to = same
            .get(index % same.len().max(1))
            .and_then(|&slot| self.current.borrow()[slot].clone())
            .filter(|w| !w.channel.closed.get());
        match to {
            Some(w) => {
                let _ = w.forwarding.send(Forward::Batch { bytes, fds, count });
            }
            None => tracing::error!(
                "upgrade: no worker of {service} here to take {count} WebSocket connections \
                 of the old master's worker {index}: closing them"
            ),
        }
    }

    /// The bridge ended (the old master said `Done`, or is gone): as the new master, its
    /// workers stop keeping broadcasts for connections that might come.
    fn bridge_closed(&self, new_side: bool) {
        self.bridging.bridge.borrow_mut().take();
        if new_side && self.bridging.awaiting_predecessor.replace(false) {
            for w in self.current_workers() {
                w.no_more_handovers();
            }
        }
    }

    /// Tells a worker ready to serve that no connection will be handed to it any more,
    /// unless an old master may still pass some on.
    pub(super) fn no_more_handovers_to(&self, w: &Worker) {
        if !self.bridging.awaiting_predecessor.get() {
            w.no_more_handovers();
        }
    }
}
