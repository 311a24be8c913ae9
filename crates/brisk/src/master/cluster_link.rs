//! The cluster bus's connections to Redis: plain pub/sub on one Redis server (`SUBSCRIBE`,
//! `PUBLISH`), or sharded pub/sub on a Redis Cluster (`SSUBSCRIBE`, `SPUBLISH`: each group's
//! channel lives on the node that owns its slot, so the cluster's pub/sub traffic spreads over
//! its nodes instead of every message going to every node).

use std::cell::RefCell;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, TlsCertificates, Value};
use tokio::sync::mpsc;

use crate::redact::redacted_each;
use crate::redis::{pipe, tls_certificates, Redis, RedisOptions};

/// How long connecting, or one command, may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Where the bus publishes and subscribes.
pub(crate) enum Link {
    /// One Redis server.
    Plain {
        client: redis::Client,
        publisher: Redis,
    },
    /// A Redis Cluster (found from one of its nodes).
    Sharded {
        /// Nodes of the cluster to find the others from.
        seeds: Vec<String>,
        /// The CAs to trust for `rediss://` nodes, when not the system's.
        certs: Option<TlsCertificates>,
        client: Box<ClusterClient>,
        /// The publishing connection, made on first use and again after a failure.
        publisher: RefCell<Option<ClusterConnection>>,
    },
}

/// The half of a subscription that sends commands.
pub(crate) enum Sink {
    Plain(PubSubSink),
    Sharded(ClusterConnection),
}

/// The half of a subscription that receives messages.
pub(crate) enum Stream {
    Plain(PubSubStream),
    Sharded(mpsc::UnboundedReceiver<PushInfo>),
}

impl Link {
    /// A link to the Redis server at `url`, or (`sharded`) to the Redis Cluster that the nodes
    /// at `url` (one, or several separated by commas) belong to; `rediss://` URLs trust the
    /// CAs of the PEM file `tls_ca` when given. Connects nothing yet.
    pub(crate) fn new(url: &str, sharded: bool, tls_ca: Option<&Path>) -> Result<Self, LinkError> {
        if sharded {
            let seeds: Vec<String> = url.split(',').map(|u| u.trim().to_owned()).collect();
            let mut certs = None;
            for seed in &seeds {
                certs = tls_certificates(seed, tls_ca).map_err(LinkError::Client)?;
            }
            let client = cluster_client(&seeds, None, certs.clone())
                .map_err(|e| LinkError::Config(format!("cluster {}: {e}", redacted_each(url))))?;
            return Ok(Link::Sharded {
                seeds,
                certs,
                client: Box::new(client),
                publisher: RefCell::new(None),
            });
        }
        let client = crate::redis::client(url, tls_ca).map_err(LinkError::Client)?;
        let options = RedisOptions {
            tls_ca: tls_ca.map(Path::to_owned),
            ..RedisOptions::default()
        };
        let publisher = Redis::new(url, options).map_err(LinkError::Client)?;
        Ok(Link::Plain { client, publisher })
    }

    /// Publishes `(channel, message)` pairs, in one round trip where it can.
    pub(crate) async fn publish(&self, batch: &[(String, Bytes)]) -> Result<(), LinkError> {
        match self {
            Link::Plain { publisher, .. } => {
                let mut commands = pipe();
                for (channel, message) in batch {
                    commands
                        .cmd("PUBLISH")
                        .arg(channel)
                        .arg(&message[..])
                        .ignore();
                }
                publisher
                    .run_pipeline::<()>(&commands)
                    .await
                    .map_err(LinkError::Command)
            }
            Link::Sharded {
                client, publisher, ..
            } => {
                let conn = publisher.borrow().clone();
                let conn = match conn {
                    Some(c) => c,
                    None => {
                        let c = within(client.get_async_connection()).await?;
                        *publisher.borrow_mut() = Some(c.clone());
                        c
                    }
                };
                // Each channel may live on another node: one command each, all in flight at
                // once on the nodes' multiplexed connections.
                let sends = batch.iter().map(|(channel, message)| {
                    let mut conn = conn.clone();
                    async move {
                        redis::cmd("SPUBLISH")
                            .arg(channel)
                            .arg(&message[..])
                            .query_async::<()>(&mut conn)
                            .await
                    }
                });
                let sent =
                    within(async { futures_util::future::try_join_all(sends).await.map(|_| ()) })
                        .await;
                if sent.is_err() {
                    publisher.borrow_mut().take();
                }
                sent
            }
        }
    }

    /// Drops the publishing connection, so that the next publish opens a new one (the
    /// subscription found Redis gone and back: the old connection is broken, though no
    /// publish has found it yet).
    pub(crate) fn renew_publisher(&self) {
        match self {
            Link::Plain { publisher, .. } => publisher.reconnect_on_next_call(),
            Link::Sharded { publisher, .. } => {
                publisher.borrow_mut().take();
            }
        }
    }

    /// A new subscription connection, subscribed to nothing yet.
    pub(crate) async fn subscription(&self) -> Result<(Sink, Stream), LinkError> {
        match self {
            Link::Plain { client, .. } => {
                let pubsub = within(client.get_async_pubsub()).await?;
                let (sink, stream) = pubsub.split();
                Ok((Sink::Plain(sink), Stream::Plain(stream)))
            }
            Link::Sharded { seeds, certs, .. } => {
                let (pushes, received) = mpsc::unbounded_channel();
                let subscriber = cluster_client(seeds, Some(pushes), certs.clone())?;
                let conn = within(subscriber.get_async_connection()).await?;
                Ok((Sink::Sharded(conn), Stream::Sharded(received)))
            }
        }
    }
}

impl Sink {
    /// Subscribes to `channel`.
    pub(crate) async fn subscribe(&mut self, channel: String) -> Result<(), LinkError> {
        match self {
            Sink::Plain(s) => within(s.subscribe(channel)).await,
            Sink::Sharded(c) => within(c.ssubscribe(channel)).await,
        }
    }

    /// Unsubscribes from `channel`.
    pub(crate) async fn unsubscribe(&mut self, channel: String) -> Result<(), LinkError> {
        match self {
            Sink::Plain(s) => within(s.unsubscribe(channel)).await,
            Sink::Sharded(c) => within(c.sunsubscribe(channel)).await,
        }
    }

    /// Checks that the connection answers.
    pub(crate) async fn ping(&mut self) -> Result<(), LinkError> {
        match self {
            Sink::Plain(s) => within(s.ping::<Value>()).await.map(|_| ()),
            Sink::Sharded(c) => within(redis::cmd("PING").query_async::<Value>(c))
                .await
                .map(|_| ()),
        }
    }
}

/// What a subscription receives.
pub(crate) enum Event {
    /// A message: its channel and payload.
    Message(String, Bytes),
    /// The channel is no longer subscribed: our own unsubscribe, or (sharded) Redis moved its
    /// slot to another node, where the caller subscribes again if it still wants it.
    Unsubscribed(String),
}

impl Stream {
    /// The next event; `None` when the connection is lost.
    pub(crate) async fn next(&mut self) -> Option<Event> {
        match self {
            Stream::Plain(s) => {
                let msg = s.next().await?;
                let channel = msg.get_channel_name().to_owned();
                let payload = Bytes::copy_from_slice(msg.get_payload_bytes());
                Some(Event::Message(channel, payload))
            }
            Stream::Sharded(pushes) => loop {
                let push = pushes.recv().await?;
                let channel = match push.data.first() {
                    Some(Value::BulkString(c)) => String::from_utf8_lossy(c).into_owned(),
                    _ => String::new(),
                };
                match (push.kind, push.data.get(1)) {
                    // A node's connection dropped: the caller connects again and resubscribes.
                    (PushKind::Disconnection, _) => return None,
                    (PushKind::SMessage, Some(Value::BulkString(payload))) => {
                        return Some(Event::Message(channel, Bytes::copy_from_slice(payload)));
                    }
                    (PushKind::SUnsubscribe, _) => return Some(Event::Unsubscribed(channel)),
                    // Confirmations of subscriptions.
                    _ => {}
                }
            },
        }
    }
}

/// A client of the Redis Cluster that `seeds` belong to, handing pushes to `pushes` if given.
fn cluster_client(
    seeds: &[String],
    pushes: Option<mpsc::UnboundedSender<PushInfo>>,
    certs: Option<TlsCertificates>,
) -> redis::RedisResult<ClusterClient> {
    let mut builder = ClusterClientBuilder::new(seeds.to_vec())
        .use_protocol(redis::ProtocolVersion::RESP3)
        .connection_timeout(TIMEOUT)
        .response_timeout(TIMEOUT);
    if let Some(pushes) = pushes {
        builder = builder.push_sender(pushes);
    }
    if let Some(certs) = certs {
        builder = builder.certs(certs);
    }
    builder.build()
}

/// Why the cluster's Redis did not do what was asked; each says it (the bus shows it as its
/// `last_error`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    /// The link could not be set up: its URL, its CA, the cluster's client.
    #[error("cluster: {0}")]
    Config(String),
    /// Brisk's Redis client could not be set up (its URL, its CA).
    #[error("cluster: {0}")]
    Client(crate::redis::RedisError),
    /// A command of Brisk's Redis client failed (its connection, the server's answer).
    #[error(transparent)]
    Command(crate::redis::RedisError),
    /// The connection or the server's answer failed.
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// No answer within [`TIMEOUT`].
    #[error("no answer within {} s", TIMEOUT.as_secs())]
    Timeout,
}

/// `command`'s result within [`TIMEOUT`].
async fn within<T>(
    command: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, LinkError> {
    match tokio::time::timeout(TIMEOUT, command).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(LinkError::Timeout),
    }
}
