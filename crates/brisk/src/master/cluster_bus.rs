//! The cluster bus: broadcasts that reach the members of a group on every instance of an app
//! (`App::cluster("redis://…")`), through Redis pub/sub.
//!
//! **The master holds the Redis connections**, one subscription and one connection for
//! publishing per instance, however many workers it has. Within an instance, broadcasts
//! already go from worker to worker through the master; the master is the one process that
//! sees them all, and knows (from its workers' reports) which groups have members here. A
//! subscription per worker would multiply Redis's fan-out by the workers and deliver each
//! message to every worker of the instance through Redis as well as through the master.
//!
//! **One channel per group** (`brisk:cluster:GROUP`), subscribed only while a worker of this
//! instance holds members of the group, so an instance receives no traffic for groups it has
//! no members of.
//!
//! **Each message is encoded once, by the worker that broadcast it**: the channel carries the
//! WebSocket frame as that worker encoded it (uncompressed), after a header with the sending
//! instance's id and the group's sequence number on that instance. The receiving master hands the frame to its workers
//! as it is (members that negotiated permessage-deflate take it uncompressed, which RFC 7692
//! allows), and skips its own messages, which its workers already delivered.
//!
//! **Failures are counted, never silent.** While Redis is unreachable, local broadcast goes on;
//! a publish that fails is counted (`publish_failed`: those messages reached no other
//! instance). The subscription reconnects with a backoff (100 ms doubling to 5 s) and
//! subscribes again to every group it needs; a gap in another instance's sequence numbers for
//! a group, from messages published while this one was cut off (or that instance could not
//! publish), is counted as `lost`. At most [`MAX_QUEUED`] broadcasts wait to be published;
//! past that (Redis far too slow) they are counted as `publish_failed` too.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::mpsc;

use super::cluster_link::{Event, Link};
use crate::ipc::BroadcastFrames;
use crate::redact::{redacted, redacted_each};
use crate::stats::ClusterStatus;

/// What a message on a channel starts with: a tag, the instance id, the sequence number.
const TAG: &[u8; 4] = b"BKC1";
const HEADER: usize = 4 + 16 + 8;
/// Channel names: this prefix, then the group.
const PREFIX: &str = "brisk:cluster:";
/// The most broadcasts waiting to be published.
const MAX_QUEUED: usize = 10_000;
/// Groups whose sequence numbers an instance keeps before it starts them all again.
const MAX_SEQUENCES: usize = 65_536;
/// How often an idle subscription is checked with a ping.
const PING_INTERVAL: Duration = Duration::from_secs(10);
/// The most broadcasts published in one round trip.
const MAX_BATCH: usize = 256;
/// The longest wait between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A change to the subscriptions.
enum Change {
    Subscribe(String),
    Unsubscribe(String),
}

/// The master's side of the cluster: its subscriptions, its publishing, its counters.
pub(crate) struct ClusterBus {
    /// The Redis URL without passwords, for logs and `status`.
    shown_url: String,
    link: Link,
    /// Identifies this instance's messages (random per master start).
    instance: [u8; 16],
    /// The next sequence number of each group this instance published to.
    next_seq: RefCell<HashMap<String, u64>>,
    /// Broadcasts waiting in `outgoing`.
    queued: Cell<usize>,
    /// The workers holding members of each group.
    groups: RefCell<HashMap<String, HashSet<i32>>>,
    changes: mpsc::UnboundedSender<Change>,
    changes_rx: RefCell<Option<mpsc::UnboundedReceiver<Change>>>,
    outgoing: mpsc::UnboundedSender<(String, Bytes)>,
    outgoing_rx: RefCell<Option<mpsc::UnboundedReceiver<(String, Bytes)>>>,
    /// The last sequence number seen from each other instance, by group.
    last_seq: RefCell<HashMap<([u8; 16], String), u64>>,
    status: RefCell<ClusterStatus>,
}

/// `url` without passwords: each seed of a sharded bus's list, or the one URL.
fn shown(url: &str, sharded: bool) -> String {
    match sharded {
        true => redacted_each(url),
        false => redacted(url).into_owned(),
    }
}

impl ClusterBus {
    /// A bus on the Redis server at `url`, or (`sharded`) on the Redis Cluster that the node
    /// at `url` belongs to. Connects nothing yet.
    pub(crate) fn new(url: &str, sharded: bool) -> Result<Rc<Self>, String> {
        let link = Link::new(url, sharded)?;
        let mut instance = [0u8; 16];
        getrandom::fill(&mut instance).expect("the operating system's random source");
        let (changes, changes_rx) = mpsc::unbounded_channel();
        let (outgoing, outgoing_rx) = mpsc::unbounded_channel();
        let shown_url = shown(url, sharded);
        Ok(Rc::new(ClusterBus {
            shown_url: shown_url.clone(),
            link,
            instance,
            next_seq: RefCell::default(),
            queued: Cell::new(0),
            groups: RefCell::default(),
            changes,
            changes_rx: RefCell::new(Some(changes_rx)),
            outgoing,
            outgoing_rx: RefCell::new(Some(outgoing_rx)),
            last_seq: RefCell::default(),
            status: RefCell::new(ClusterStatus {
                url: shown_url,
                ..Default::default()
            }),
        }))
    }

    /// Starts the subscription and the publisher on the master's runtime; `deliver` hands a
    /// broadcast from another instance to this instance's workers.
    pub(crate) fn start(self: &Rc<Self>, deliver: impl Fn(&str, &BroadcastFrames) + 'static) {
        let changes = self.changes_rx.borrow_mut().take().expect("started once");
        let outgoing = self.outgoing_rx.borrow_mut().take().expect("started once");
        tokio::task::spawn_local(self.clone().subscribe_loop(changes, deliver));
        tokio::task::spawn_local(self.clone().publish_loop(outgoing));
    }

    /// The workers that hold members of `group`.
    pub(crate) fn holders(&self, group: &str) -> HashSet<i32> {
        self.groups.borrow().get(group).cloned().unwrap_or_default()
    }

    /// Worker `pid` now holds members of `group`.
    pub(crate) fn joined(&self, pid: i32, group: &str) {
        let mut groups = self.groups.borrow_mut();
        let pids = groups.entry(group.to_owned()).or_default();
        if pids.is_empty() {
            // A new subscription: what was published before it is not missed.
            self.forget_sequences(group);
            let _ = self.changes.send(Change::Subscribe(channel(group)));
        }
        pids.insert(pid);
    }

    /// Worker `pid` holds no members of `group` any more.
    pub(crate) fn left(&self, pid: i32, group: &str) {
        let mut groups = self.groups.borrow_mut();
        if let Some(pids) = groups.get_mut(group) {
            pids.remove(&pid);
            if pids.is_empty() {
                groups.remove(group);
                self.forget_sequences(group);
                let _ = self.changes.send(Change::Unsubscribe(channel(group)));
            }
        }
    }

    /// Worker `pid` exited: it holds no members of anything.
    pub(crate) fn worker_gone(&self, pid: i32) {
        let held: Vec<String> = (self.groups.borrow().iter())
            .filter(|(_, pids)| pids.contains(&pid))
            .map(|(g, _)| g.clone())
            .collect();
        for group in held {
            self.left(pid, &group);
        }
    }

    fn forget_sequences(&self, group: &str) {
        self.last_seq.borrow_mut().retain(|(_, g), _| g != group);
    }

    /// Publishes a broadcast of this instance for the others.
    pub(crate) fn publish(&self, group: &str, frames: &BroadcastFrames) {
        if self.queued.get() >= MAX_QUEUED {
            self.count(|s| s.publish_failed += 1);
            return;
        }
        let seq = {
            let mut next = self.next_seq.borrow_mut();
            if next.len() >= MAX_SEQUENCES && !next.contains_key(group) {
                // Receivers see the numbers start again, and count nothing lost for it.
                next.clear();
            }
            let seq = next.entry(group.to_owned()).or_insert(1);
            *seq += 1;
            *seq - 1
        };
        self.queued.set(self.queued.get() + 1);
        let mut message = BytesMut::with_capacity(HEADER + frames.plain.len());
        message.put_slice(TAG);
        message.put_slice(&self.instance);
        message.put_u64(seq);
        message.put_slice(&frames.plain);
        let _ = self.outgoing.send((channel(group), message.freeze()));
    }

    /// The counters now.
    pub(crate) fn status(&self) -> ClusterStatus {
        let mut s = self.status.borrow().clone();
        s.groups = self.groups.borrow().len();
        s
    }

    fn count(&self, f: impl FnOnce(&mut ClusterStatus)) {
        f(&mut self.status.borrow_mut());
    }

    /// Publishes in order: what queued up while a round trip was under way goes in the next
    /// one, as one pipeline (up to [`MAX_BATCH`] messages).
    async fn publish_loop(self: Rc<Self>, mut outgoing: mpsc::UnboundedReceiver<(String, Bytes)>) {
        let mut last_logged: Option<tokio::time::Instant> = None;
        while let Some(first) = outgoing.recv().await {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match outgoing.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            let n = batch.len() as u64;
            self.queued
                .set(self.queued.get().saturating_sub(batch.len()));
            let sent = self.link.publish(&batch).await;
            match sent {
                Ok(()) => self.count(|s| s.published += n),
                Err(e) => {
                    self.count(|s| s.publish_failed += n);
                    if last_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        last_logged = Some(tokio::time::Instant::now());
                        tracing::warn!(
                            failed = self.status.borrow().publish_failed,
                            "cluster: broadcasts reach this instance only: {e}"
                        );
                    }
                }
            }
        }
    }

    async fn subscribe_loop(
        self: Rc<Self>,
        mut changes: mpsc::UnboundedReceiver<Change>,
        deliver: impl Fn(&str, &BroadcastFrames),
    ) {
        let mut backoff = Duration::from_millis(100);
        let mut ever_connected = false;
        loop {
            let (mut sink, mut stream) = match self.link.subscription().await {
                Ok(halves) => halves,
                Err(why) => {
                    tracing::debug!("cluster: cannot subscribe on {}: {why}", self.shown_url);
                    // What to subscribe to is read again from `groups` on the next attempt.
                    tokio::time::sleep(backoff).await;
                    while changes.try_recv().is_ok() {}
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            while changes.try_recv().is_ok() {}
            let wanted: Vec<String> = self.groups.borrow().keys().map(|g| channel(g)).collect();
            let mut ok = true;
            for ch in wanted {
                if let Err(why) = sink.subscribe(ch).await {
                    tracing::debug!("cluster: cannot subscribe on {}: {why}", self.shown_url);
                    ok = false;
                    break;
                }
            }
            if ok {
                backoff = Duration::from_millis(100);
                self.count(|s| {
                    s.connected = true;
                    if ever_connected {
                        s.reconnects += 1;
                    }
                });
                if ever_connected {
                    tracing::info!("cluster: subscribed again on {}", self.shown_url);
                }
                ever_connected = true;
                let mut ping = tokio::time::interval(PING_INTERVAL);
                ping.tick().await;
                loop {
                    tokio::select! {
                        msg = stream.next() => match msg {
                            Some(Event::Message(channel, payload)) => {
                                self.receive(&channel, &payload, &deliver);
                            }
                            Some(Event::Unsubscribed(channel)) => {
                                // Ours (the group left), or Redis moved the channel's slot.
                                let wanted = channel
                                    .strip_prefix(PREFIX)
                                    .is_some_and(|g| self.groups.borrow().contains_key(g));
                                if wanted && sink.subscribe(channel).await.is_err() {
                                    break;
                                }
                            }
                            None => break,
                        },
                        Some(change) = changes.recv() => {
                            let done = match change {
                                Change::Subscribe(ch) => sink.subscribe(ch).await,
                                Change::Unsubscribe(ch) => sink.unsubscribe(ch).await,
                            };
                            if done.is_err() {
                                break;
                            }
                        }
                        // A connection that went silent (a peer gone without a FIN) is found
                        // by a ping that gets no answer.
                        _ = ping.tick() => {
                            if sink.ping().await.is_err() {
                                break;
                            }
                        }
                    }
                }
                self.count(|s| s.connected = false);
                tracing::warn!(
                    "cluster: lost the subscription on {}; local broadcast goes on, reconnecting",
                    self.shown_url
                );
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// A message from the channel of a group.
    fn receive(&self, channel: &str, payload: &[u8], deliver: &impl Fn(&str, &BroadcastFrames)) {
        let Some(group) = channel.strip_prefix(PREFIX) else {
            return;
        };
        if payload.len() < HEADER || &payload[..4] != TAG {
            tracing::debug!(channel, "cluster: not a Brisk broadcast, ignored");
            return;
        }
        let instance: [u8; 16] = payload[4..20].try_into().expect("16 bytes");
        if instance == self.instance {
            return;
        }
        let seq = u64::from_be_bytes(payload[20..28].try_into().expect("8 bytes"));
        let missed = {
            let mut last = self.last_seq.borrow_mut();
            let before = last.insert((instance, group.to_owned()), seq);
            // A number at or below the last one: that instance started its numbers again.
            before.map_or(0, |b| seq.saturating_sub(b + 1))
        };
        self.count(|s| {
            s.received += 1;
            s.lost += missed;
        });
        let frames = BroadcastFrames {
            plain: Bytes::copy_from_slice(&payload[HEADER..]),
            deflated: None,
        };
        deliver(group, &frames);
    }
}

/// The Redis channel of `group`.
fn channel(group: &str) -> String {
    format!("{PREFIX}{group}")
}
