//! Namespaces: the options a family of channels shares. A channel's namespace is the part of
//! its name before the first `:` (`chat:lobby` is in `chat`); a name without `:` is in the
//! default namespace (`""`).

use std::time::Duration;

use tokio::time::Instant;

use crate::ws::History;

/// The largest publication a client may make in a namespace unless it says otherwise
/// ([`Namespace::max_publication`]): a chat line or a small event, not a file. Each subscriber
/// takes a copy, so this bounds what one publication costs a channel.
pub const DEFAULT_MAX_PUBLICATION: usize = 16 << 10;

/// How fast one connection may publish in one namespace unless it says otherwise
/// ([`Namespace::publish_rate`]).
pub const DEFAULT_PUBLISH_RATE: PublishRate = PublishRate {
    per_second: 20,
    burst: 50,
};

/// Who may subscribe to a namespace's channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Any connected user.
    Connected,
    /// Users whose connect token lists the channel in its `channels` claim, or who give a
    /// subscription token for it (claims `sub`: the user, `channel`: the channel, `exp`).
    /// The default.
    Token,
    /// Users the app's check allows ([`Channels::check_subscribe`](super::Channels::check_subscribe)),
    /// or who are allowed as with [`Access::Token`].
    Check,
}

/// Who may publish to a namespace's channels through the protocol (the server API and app
/// code always may).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publishers {
    /// Nobody: publications come from the server (the default).
    Server,
    /// The channel's subscribers.
    Subscribers,
}

/// How fast one connection may publish to a namespace's channels: `per_second` on average,
/// and up to `burst` at once after a pause (a token bucket). A publication beyond it is
/// refused with [`ErrorCode::LimitExceeded`](super::ErrorCode::LimitExceeded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishRate {
    /// Publications per second, sustained (at least 1).
    pub per_second: u32,
    /// Publications allowed at once after a pause (at least 1).
    pub burst: u32,
}

/// One connection's publications in one namespace, against its [`PublishRate`].
#[derive(Debug)]
pub(crate) struct PublishBucket {
    tokens: f64,
    at: Instant,
}

impl PublishBucket {
    /// A full bucket.
    pub(crate) fn new(rate: PublishRate) -> Self {
        PublishBucket {
            tokens: f64::from(rate.burst.max(1)),
            at: Instant::now(),
        }
    }

    /// Takes one publication's token; false if there is none left at `rate`.
    pub(crate) fn take(&mut self, rate: PublishRate) -> bool {
        let now = Instant::now();
        let refill = now.saturating_duration_since(self.at).as_secs_f64();
        let burst = f64::from(rate.burst.max(1));
        self.tokens = (self.tokens + refill * f64::from(rate.per_second.max(1))).min(burst);
        self.at = now;
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }

    /// How long until the next token, at `rate`.
    pub(crate) fn wait(&self, rate: PublishRate) -> Duration {
        let missing = (1.0 - self.tokens).max(0.0);
        Duration::from_secs_f64(missing / f64::from(rate.per_second.max(1)))
    }
}

/// The options of a namespace's channels.
///
/// ```no_run
/// use brisk::channels::{Access, Namespace, Publishers};
/// use brisk::redis::{Redis, RedisOptions};
/// use brisk::ws::{History, HistoryOptions};
/// # fn f() -> Result<(), brisk::redis::RedisError> {
/// let redis = Redis::new("redis://127.0.0.1:6379", RedisOptions::default())?;
/// let chat = Namespace::new()
///     .subscribe(Access::Connected)
///     .publishers(Publishers::Subscribers)
///     .presence(true)
///     .join_leave(true)
///     .history(History::new(redis, HistoryOptions { keep_last: 50, ..Default::default() }));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Namespace {
    pub(crate) access: Access,
    pub(crate) publishers: Publishers,
    pub(crate) presence: bool,
    pub(crate) join_leave: bool,
    pub(crate) history: Option<History>,
    pub(crate) max_publication: usize,
    pub(crate) publish_rate: PublishRate,
}

impl Default for Namespace {
    fn default() -> Self {
        Self::new()
    }
}

impl Namespace {
    /// Channels subscribed with a token ([`Access::Token`]), published to by the server
    /// only, without presence, join/leave pushes or history; where clients publish, each
    /// publication at most [`DEFAULT_MAX_PUBLICATION`] bytes and each connection at most
    /// [`DEFAULT_PUBLISH_RATE`].
    pub fn new() -> Self {
        Namespace {
            access: Access::Token,
            publishers: Publishers::Server,
            presence: false,
            join_leave: false,
            history: None,
            max_publication: DEFAULT_MAX_PUBLICATION,
            publish_rate: DEFAULT_PUBLISH_RATE,
        }
    }

    /// The largest publication a client may make here, in bytes of its data (JSON text, or
    /// the bytes of a MessagePack `bin`); a larger one is refused with
    /// [`ErrorCode::LimitExceeded`](super::ErrorCode::LimitExceeded). The server API and app
    /// code are not limited. The endpoint's own message limit (64 KiB) bounds it too.
    ///
    /// ```
    /// let ns = brisk::channels::Namespace::new().max_publication(4 << 10);
    /// ```
    pub fn max_publication(mut self, bytes: usize) -> Self {
        self.max_publication = bytes;
        self
    }

    /// How fast one connection may publish here (the server API and app code are not
    /// limited).
    ///
    /// ```
    /// use brisk::channels::{Namespace, PublishRate};
    /// let ns = Namespace::new().publish_rate(PublishRate { per_second: 5, burst: 10 });
    /// ```
    pub fn publish_rate(mut self, rate: PublishRate) -> Self {
        self.publish_rate = rate;
        self
    }

    /// Who may subscribe.
    pub fn subscribe(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// Who may publish through the protocol.
    pub fn publishers(mut self, who: Publishers) -> Self {
        self.publishers = who;
        self
    }

    /// Whether subscribers may ask who is subscribed (`presence`).
    pub fn presence(mut self, on: bool) -> Self {
        self.presence = on;
        self
    }

    /// Whether subscribers get a push when a user subscribes or leaves.
    pub fn join_leave(mut self, on: bool) -> Self {
        self.join_leave = on;
        self
    }

    /// Keep each channel's last publications in `history` (its options say how many and how
    /// long): publications then carry a position, and a client that reconnects recovers what
    /// it missed.
    pub fn history(mut self, history: History) -> Self {
        self.history = Some(history);
        self
    }
}

/// The longest channel name.
pub const MAX_CHANNEL_LEN: usize = 255;

/// Whether `channel` is a valid name: 1 to 255 ASCII letters, digits and `-_.:@/=`.
pub(crate) fn valid_name(channel: &str) -> bool {
    !channel.is_empty()
        && channel.len() <= MAX_CHANNEL_LEN
        && channel
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@/=".contains(&b))
}

/// The namespace part of a channel's name.
pub(crate) fn namespace_of(channel: &str) -> &str {
    channel.split_once(':').map_or("", |(ns, _)| ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let rate = PublishRate {
            per_second: 10,
            burst: 3,
        };
        let mut bucket = PublishBucket::new(rate);
        assert!((0..3).all(|_| bucket.take(rate)), "the burst");
        assert!(!bucket.take(rate), "then nothing at once");
        assert!(bucket.wait(rate) <= Duration::from_millis(100));
        // A tenth of a second later, one more.
        bucket.at -= Duration::from_millis(110);
        assert!(bucket.take(rate));
        assert!(!bucket.take(rate));
    }

    #[test]
    fn names_and_namespaces() {
        assert!(valid_name("chat:room-1/a=b@c.d_e"));
        for bad in ["", "a b", "é", "x\n", &"a".repeat(256)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert_eq!(namespace_of("chat:lobby:x"), "chat");
        assert_eq!(namespace_of("news"), "");
    }
}
