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
//! **Messages are authenticated** ([`cluster_message`](super::cluster_message)): each carries
//! the broadcast (its kind and payload), the sending instance's id, the group's sequence
//! number on that instance and the time it was sent, sealed with an HMAC of the cluster's
//! secret (`App::cluster_secret`). A receiving master delivers nothing of a message whose
//! HMAC does not match (forged, or another app's), that is older than [`MAX_AGE`] or repeats
//! a sequence number it saw (replayed), or that is not text in UTF-8, binary or a close:
//! those are counted as `rejected`. It hands the broadcast to its workers as it is (their
//! protocols encode it for their members), and skips its own messages, which its workers
//! already delivered.
//!
//! **Failures are counted, never silent.** While Redis is unreachable, local broadcast goes on;
//! a publish that fails is counted (`publish_failed`: those messages reached no other
//! instance). The subscription reconnects with a backoff (100 ms doubling to 5 s) and
//! subscribes again to every group it needs, and then renews the publishing connection too
//! (Redis restarted: the old one is broken though no publish found it yet); a publish that
//! fails is tried once more on a new connection before it counts. A gap in another instance's
//! sequence numbers for
//! a group, from messages published while this one was cut off (or that instance could not
//! publish), is counted as `lost`. At most [`MAX_QUEUED`] broadcasts, and
//! [`MAX_QUEUED_BYTES`] of them, wait to be published; past that (Redis far too slow) they are
//! counted as `publish_failed` too.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::cluster_link::{Event, Link, LinkError};
use super::cluster_message::{BusKey, BusMessage, Refused};
use crate::ipc::Broadcast;
use crate::redact::{redacted, redacted_each};
use crate::secret_key::ShortSecret;
use crate::stats::ClusterStatus;

/// Why the bus could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BusError {
    /// The secret that authenticates its messages is too short.
    #[error(transparent)]
    Secret(#[from] ShortSecret),
    /// Its link to Redis could not be set up.
    #[error(transparent)]
    Link(#[from] LinkError),
}

/// Channel names: this prefix, then the group.
const PREFIX: &str = "brisk:cluster:";
/// The most broadcasts waiting to be published.
const MAX_QUEUED: usize = 10_000;
/// The most bytes of sealed broadcasts waiting to be published (a few large ones would
/// otherwise hold the master's memory while Redis is slow).
const MAX_QUEUED_BYTES: usize = 64 << 20;
/// Groups whose sequence numbers an instance keeps before it starts them all again (under a
/// new instance id, so that receivers do not take the new numbers for replays).
const MAX_SEQUENCES: usize = 65_536;
/// The oldest message delivered (by the sender's clock against ours): an older one is a
/// replay. Instances' clocks must agree within it.
const MAX_AGE: Duration = Duration::from_secs(300);
/// Senders' sequence numbers kept, per (instance, group), before those not seen for
/// [`SENDER_EXPIRY`] are forgotten.
const MAX_SENDERS: usize = 65_536;
/// A sender not heard from for this long is forgotten (longer than [`MAX_AGE`], so its old
/// messages are refused as too old by then).
const SENDER_EXPIRY: Duration = Duration::from_secs(600);
/// How far a sender's clock may be behind this one's for its first message to a group this
/// instance just subscribed to (see [`ClusterBus::receive`]).
const FIRST_CONTACT_SKEW: Duration = Duration::from_secs(10);
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
    /// Seals and checks messages.
    key: BusKey,
    /// Identifies this instance's messages (random per master start, new when the sequence
    /// numbers start again).
    instance: Cell<[u8; 16]>,
    /// This instance's earlier ids, whose messages may still be on their way back.
    former_ids: RefCell<Vec<[u8; 16]>>,
    /// The next sequence number of each group this instance published to.
    next_seq: RefCell<HashMap<String, u64>>,
    /// Broadcasts waiting in `outgoing`, and their bytes.
    queued: Cell<usize>,
    queued_bytes: Cell<usize>,
    /// The workers holding members of each group.
    groups: RefCell<HashMap<String, HashSet<i32>>>,
    changes: mpsc::UnboundedSender<Change>,
    changes_rx: RefCell<Option<mpsc::UnboundedReceiver<Change>>>,
    outgoing: mpsc::UnboundedSender<(String, Bytes)>,
    outgoing_rx: RefCell<Option<mpsc::UnboundedReceiver<(String, Bytes)>>>,
    /// What was last seen from each other instance, by group.
    senders: RefCell<HashMap<([u8; 16], String), Sender>>,
    /// When (unix ms, this clock) this instance subscribed to each group it holds.
    subscribed_ms: RefCell<HashMap<String, u64>>,
    /// When a rejected message was last logged.
    rejected_logged: Cell<Option<Instant>>,
    status: RefCell<ClusterStatus>,
}

/// The last message seen from one instance for one group.
struct Sender {
    seq: u64,
    seen: Instant,
    /// Whether a gap before the next message counts as lost (not right after this
    /// instance subscribed again, when what came before was not for it).
    count_gaps: bool,
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
    /// at `url` belongs to, `rediss://` trusting the CAs of `tls_ca` when given. Connects
    /// nothing yet.
    pub(crate) fn new(
        url: &str,
        sharded: bool,
        tls_ca: Option<&std::path::Path>,
        secret: &[u8],
    ) -> Result<Rc<Self>, BusError> {
        let key = BusKey::new(secret)?;
        let link = Link::new(url, sharded, tls_ca)?;
        let instance = new_instance_id();
        let (changes, changes_rx) = mpsc::unbounded_channel();
        let (outgoing, outgoing_rx) = mpsc::unbounded_channel();
        let shown_url = shown(url, sharded);
        Ok(Rc::new(ClusterBus {
            shown_url: shown_url.clone(),
            link,
            key,
            instance: Cell::new(instance),
            former_ids: RefCell::default(),
            next_seq: RefCell::default(),
            queued: Cell::new(0),
            queued_bytes: Cell::new(0),
            groups: RefCell::default(),
            subscribed_ms: RefCell::default(),
            changes,
            changes_rx: RefCell::new(Some(changes_rx)),
            outgoing,
            outgoing_rx: RefCell::new(Some(outgoing_rx)),
            senders: RefCell::default(),
            rejected_logged: Cell::new(None),
            status: RefCell::new(ClusterStatus {
                url: shown_url,
                ..Default::default()
            }),
        }))
    }

    /// Starts the subscription and the publisher on the master's runtime; `deliver` hands a
    /// broadcast from another instance to this instance's workers.
    pub(crate) fn start(self: &Rc<Self>, deliver: impl Fn(&str, &Broadcast) + 'static) {
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
            (self.subscribed_ms.borrow_mut()).insert(group.to_owned(), unix_ms());
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
                self.subscribed_ms.borrow_mut().remove(group);
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

    /// A new subscription to `group`: what was published before it is not missed (the
    /// sequence numbers are kept, to refuse replays).
    fn forget_sequences(&self, group: &str) {
        for ((_, g), sender) in self.senders.borrow_mut().iter_mut() {
            if g == group {
                sender.count_gaps = false;
            }
        }
    }

    /// Publishes a broadcast of this instance for the others.
    pub(crate) fn publish(&self, group: &str, broadcast: &Broadcast) {
        let size = broadcast.len();
        if self.queued.get() >= MAX_QUEUED || self.queued_bytes.get() + size > MAX_QUEUED_BYTES {
            self.count(|s| s.publish_failed += 1);
            return;
        }
        let seq = {
            let mut next = self.next_seq.borrow_mut();
            if next.len() >= MAX_SEQUENCES && !next.contains_key(group) {
                // The numbers start again under a new id: receivers see a new sender.
                next.clear();
                let former = self.instance.replace(new_instance_id());
                let mut ids = self.former_ids.borrow_mut();
                ids.push(former);
                if ids.len() > 4 {
                    ids.remove(0);
                }
            }
            let seq = next.entry(group.to_owned()).or_insert(1);
            *seq += 1;
            *seq - 1
        };
        let channel = channel(group);
        let message = BusMessage {
            instance: self.instance.get(),
            seq,
            sent_ms: unix_ms(),
            broadcast: broadcast.clone(),
        };
        let sealed = self.key.seal(&channel, &message);
        self.queued.set(self.queued.get() + 1);
        self.queued_bytes
            .set(self.queued_bytes.get() + sealed.len());
        let _ = self.outgoing.send((channel, sealed));
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

    /// Records why the subscription cannot be made (`last_error`), and says it in the log
    /// each time the reason changes: a wrong URL or CA is seen at once, a Redis that stays
    /// down is not logged every retry.
    fn cannot_subscribe(&self, why: &str) {
        let new = self.status.borrow().last_error.as_deref() != Some(why);
        self.count(|s| s.last_error = Some(why.to_owned()));
        if new {
            tracing::warn!("cluster: cannot subscribe on {}: {why}", self.shown_url);
        }
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
            let bytes: usize = batch.iter().map(|(_, sealed)| sealed.len()).sum();
            self.queued_bytes
                .set(self.queued_bytes.get().saturating_sub(bytes));
            let mut sent = self.link.publish(&batch).await;
            if sent.is_err() {
                // Often a connection that broke since the last publish (Redis restarted):
                // once more, on a new one.
                self.link.renew_publisher();
                sent = self.link.publish(&batch).await;
                if sent.is_ok() {
                    self.count(|s| s.publish_retried += n);
                }
            }
            match sent {
                Ok(()) => self.count(|s| s.published += n),
                Err(e) => {
                    self.count(|s| {
                        s.publish_failed += n;
                        s.last_error = Some(e.to_string());
                    });
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
        deliver: impl Fn(&str, &Broadcast),
    ) {
        let mut backoff = Duration::from_millis(100);
        let mut ever_connected = false;
        loop {
            let (mut sink, mut stream) = match self.link.subscription().await {
                Ok(halves) => halves,
                Err(why) => {
                    self.cannot_subscribe(&why.to_string());
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
                    self.cannot_subscribe(&why.to_string());
                    ok = false;
                    break;
                }
            }
            if ok {
                backoff = Duration::from_millis(100);
                self.count(|s| {
                    s.connected = true;
                    s.last_error = None;
                    if ever_connected {
                        s.reconnects += 1;
                    }
                });
                if ever_connected {
                    tracing::info!("cluster: subscribed again on {}", self.shown_url);
                    // The publishing connection went the same way, though no publish may
                    // have found out yet.
                    self.link.renew_publisher();
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

    /// A message from the channel of a group: delivered once checked, else counted.
    fn receive(&self, channel: &str, payload: &Bytes, deliver: &impl Fn(&str, &Broadcast)) {
        let Some(group) = channel.strip_prefix(PREFIX) else {
            return;
        };
        let message = match self.key.open(channel, payload) {
            Ok(m) => m,
            Err(why) => return self.reject(group, why_text(why)),
        };
        if message.instance == self.instance.get()
            || self.former_ids.borrow().contains(&message.instance)
        {
            return;
        }
        let age = unix_ms().abs_diff(message.sent_ms);
        if age > MAX_AGE.as_millis() as u64 {
            return self.reject(group, "sent too long ago (a replay, or the clocks differ)");
        }
        let missed = match self.sequence(&message, group) {
            Ok(missed) => missed,
            Err(why) => return self.reject(group, why),
        };
        self.count(|s| {
            s.received += 1;
            s.lost += missed;
        });
        deliver(group, &message.broadcast);
    }

    /// Records `message`'s sequence number: how many of its sender's messages for `group`
    /// were missed before it; or why it is a replay: its number is not past the last one, or
    /// it is the first of its sender's for the group and was sent before this instance
    /// subscribed to it (more than [`FIRST_CONTACT_SKEW`] before: a message captured
    /// earlier, replayed to an instance that just started or just took the group; one sent
    /// while it was subscribed would have been seen).
    fn sequence(&self, message: &BusMessage, group: &str) -> Result<u64, &'static str> {
        let mut senders = self.senders.borrow_mut();
        let now = Instant::now();
        let key = (message.instance, group.to_owned());
        if senders.len() >= MAX_SENDERS && !senders.contains_key(&key) {
            senders.retain(|_, s| now.duration_since(s.seen) < SENDER_EXPIRY);
            if senders.len() >= MAX_SENDERS {
                // All recent: forget them all rather than grow (gaps and replays of the
                // last minutes then go unnoticed until each sender is seen again).
                tracing::warn!("cluster: more than {MAX_SENDERS} senders and groups at once");
                senders.clear();
            }
        }
        match senders.get_mut(&key) {
            Some(sender) if message.seq <= sender.seq => {
                Err("a sequence number seen before (a replay)")
            }
            Some(sender) => {
                let missed = match sender.count_gaps {
                    true => message.seq - sender.seq - 1,
                    false => 0,
                };
                *sender = Sender {
                    seq: message.seq,
                    seen: now,
                    count_gaps: true,
                };
                Ok(missed)
            }
            None => {
                let since = self.subscribed_ms.borrow().get(group).copied().unwrap_or(0);
                let skew = FIRST_CONTACT_SKEW.as_millis() as u64;
                if message.sent_ms.saturating_add(skew) < since {
                    return Err("sent before this instance subscribed to the group (a replay)");
                }
                senders.insert(
                    key,
                    Sender {
                        seq: message.seq,
                        seen: now,
                        count_gaps: true,
                    },
                );
                Ok(0)
            }
        }
    }

    /// Counts a message refused for `why`; logs it, at most every 10 s.
    fn reject(&self, group: &str, why: &str) {
        self.count(|s| s.rejected += 1);
        let quiet = self
            .rejected_logged
            .get()
            .is_some_and(|t| t.elapsed() < Duration::from_secs(10));
        if !quiet {
            self.rejected_logged.set(Some(Instant::now()));
            tracing::warn!(
                group,
                rejected = self.status.borrow().rejected,
                "cluster: a message was refused: {why}"
            );
        }
    }
}

/// What a refusal says in the log.
fn why_text(why: Refused) -> &'static str {
    match why {
        Refused::Malformed => "not a Brisk broadcast",
        Refused::BadMac => "its HMAC does not match (forged, or sealed with another secret)",
        Refused::BadKind => "neither text, binary nor a close",
        Refused::BadText => "text that is not UTF-8",
    }
}

/// A random instance id.
fn new_instance_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).expect("the operating system's random source");
    id
}

/// The wall clock, in milliseconds since 1970.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The Redis channel of `group`.
fn channel(group: &str) -> String {
    format!("{PREFIX}{group}")
}
