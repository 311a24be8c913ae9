//! Namespaces: the options a family of channels shares. A channel's namespace is the part of
//! its name before the first `:` (`chat:lobby` is in `chat`); a name without `:` is in the
//! default namespace (`""`).

use crate::ws::History;

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
}

impl Default for Namespace {
    fn default() -> Self {
        Self::new()
    }
}

impl Namespace {
    /// Channels subscribed with a token ([`Access::Token`]), published to by the server
    /// only, without presence, join/leave pushes or history.
    pub fn new() -> Self {
        Namespace {
            access: Access::Token,
            publishers: Publishers::Server,
            presence: false,
            join_leave: false,
            history: None,
        }
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
    fn names_and_namespaces() {
        assert!(valid_name("chat:room-1/a=b@c.d_e"));
        for bad in ["", "a b", "é", "x\n", &"a".repeat(256)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert_eq!(namespace_of("chat:lobby:x"), "chat");
        assert_eq!(namespace_of("news"), "");
    }
}
