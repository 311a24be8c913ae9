//! [`GroupKey`]: which group a name means. Groups share one worker-wide registry, one relay
//! through the master, one Redis channel per group on the cluster bus and one presence hash,
//! but they belong to different owners: the app's own groups (any name it or its client
//! chooses), the keys sockets are tagged with ([`send_to`](super::send_to)), and the groups
//! the channel protocol keeps for its subscribers and users. A key is made by the
//! constructor of its space only, and no name given to one space's constructor yields another
//! space's key: an app that joins whatever group its client names cannot join a channel's
//! subscribers past the channel's permissions, nor tag itself with a channel user's key.
//!
//! On the wire (IPC, the cluster bus's channel names, presence's Redis keys, a handover's
//! records) a key travels as one string. The spaces keep the prefixes earlier builds wrote
//! (`brisk.key:`, `brisk.ch:`, `brisk.chm:`, `brisk.key:brisk.ch.user:`), so that instances and
//! workers of an earlier build still meet this one's groups; a name of the app's that starts
//! with `brisk.` is escaped as `brisk.app:NAME`, so it can never take one of those forms.

use std::borrow::Borrow;
use std::fmt;
use std::rc::Rc;

/// Names and keys the library writes start with this; the app's that do are escaped.
const RESERVED: &str = "brisk.";
/// The escape of an app's name (or key) that starts with [`RESERVED`].
const ESCAPED: &str = "brisk.app:";
/// The prefix of a key's group.
const KEY: &str = "brisk.key:";
/// The prefix of a channel's JSON subscribers' group.
const CHANNEL_JSON: &str = "brisk.ch:";
/// The prefix of a channel's MessagePack subscribers' group.
const CHANNEL_MSGPACK: &str = "brisk.chm:";
/// The prefix of a channel user's key's group (a key of the library's, within [`KEY`]).
const CHANNEL_USER: &str = "brisk.key:brisk.ch.user:";

/// Whose a group is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    /// The app's: [`broadcast`](super::broadcast), [`WsConnection::join`](super::WsConnection::join).
    App,
    /// The app's keys: [`send_to`](super::send_to), [`WsConnection::tag`](super::WsConnection::tag).
    Key,
    /// A channel's subscribers in one of the channel protocol's formats.
    Channel(ChannelFormat),
    /// A channel user's sockets (the channel protocol's `disconnect`).
    ChannelUser,
    /// A form no constructor of this build makes (a later build's): it only meets the same
    /// form from the same build.
    Unknown,
}

/// The formats a channel's subscribers are grouped by (each gets pushes encoded once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChannelFormat {
    Json,
    MsgPack,
}

/// A group: its space and name, kept in the one string it travels as (see the module docs).
/// Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct GroupKey(Rc<str>);

impl GroupKey {
    /// The app's group `name`.
    pub(crate) fn app(name: &str) -> Self {
        GroupKey(escaped("", name).into())
    }

    /// The group of the sockets tagged with the app's key `key`.
    pub(crate) fn key(key: &str) -> Self {
        GroupKey(escaped(KEY, key).into())
    }

    /// The group of `channel`'s subscribers that speak `format`.
    #[cfg_attr(not(feature = "channels"), allow(dead_code))]
    pub(crate) fn channel(format: ChannelFormat, channel: &str) -> Self {
        let prefix = match format {
            ChannelFormat::Json => CHANNEL_JSON,
            ChannelFormat::MsgPack => CHANNEL_MSGPACK,
        };
        GroupKey(format!("{prefix}{channel}").into())
    }

    /// The group of channel user `user`'s sockets and streams.
    #[cfg_attr(not(feature = "channels"), allow(dead_code))]
    pub(crate) fn channel_user(user: &str) -> Self {
        GroupKey(format!("{CHANNEL_USER}{user}").into())
    }

    /// The key of `name` in `space` (a form no constructor makes: `name` as it is).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn of(space: Space, name: &str) -> Self {
        match space {
            Space::App => Self::app(name),
            Space::Key => Self::key(name),
            Space::Channel(format) => Self::channel(format, name),
            Space::ChannelUser => Self::channel_user(name),
            Space::Unknown => Self::from_wire(name),
        }
    }

    /// What the wire form of every key of `space` whose name starts with `prefix` starts
    /// with (more keys may: [`parts`](Self::parts) tells them apart).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn wire_prefix(space: Space, prefix: &str) -> String {
        // A name is escaped when it starts with `brisk.`: so is a prefix that does, and one
        // that does not is a prefix of the escaped form too.
        Self::of(space, prefix).wire().to_owned()
    }

    /// The key whose wire form is `wire` (a topic the master relayed, a handover's record, a
    /// presence key's tail): the form a constructor made in some process of this app.
    pub(crate) fn from_wire(wire: &str) -> Self {
        GroupKey(wire.into())
    }

    /// The string this key travels as.
    pub(crate) fn wire(&self) -> &str {
        &self.0
    }

    /// Its space and the name given to that space's constructor.
    pub(crate) fn parts(&self) -> (Space, &str) {
        let wire = &*self.0;
        let Some(library) = wire.strip_prefix(RESERVED) else {
            return (Space::App, wire);
        };
        let tail = |prefix: &str| wire.strip_prefix(prefix);
        if let Some(name) = library.strip_prefix(&ESCAPED[RESERVED.len()..]) {
            return (Space::App, name);
        }
        if let Some(user) = tail(CHANNEL_USER) {
            return (Space::ChannelUser, user);
        }
        if let Some(key) = tail(KEY) {
            return (Space::Key, key.strip_prefix(ESCAPED).unwrap_or(key));
        }
        if let Some(channel) = tail(CHANNEL_MSGPACK) {
            return (Space::Channel(ChannelFormat::MsgPack), channel);
        }
        if let Some(channel) = tail(CHANNEL_JSON) {
            return (Space::Channel(ChannelFormat::Json), channel);
        }
        (Space::Unknown, wire)
    }
}

/// `prefix` and `name`, with `name` escaped if it starts with [`RESERVED`].
fn escaped(prefix: &str, name: &str) -> String {
    match name.starts_with(RESERVED) {
        true => format!("{prefix}{ESCAPED}{name}"),
        false => format!("{prefix}{name}"),
    }
}

/// Maps keyed by `GroupKey` are looked up by a wire form the master relayed, without making
/// a key of it. `Hash` and `Eq` are the wire string's, as `Borrow` requires.
impl Borrow<str> for GroupKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (space, name) = self.parts();
        write!(f, "{space:?}({name:?})")
    }
}

/// For logs: the space and the name.
impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.parts() {
            (Space::App, name) => f.write_str(name),
            (Space::Key, key) => write!(f, "key {key}"),
            (Space::Channel(_), channel) => write!(f, "channel {channel}"),
            (Space::ChannelUser, user) => write!(f, "channel user {user}"),
            (Space::Unknown, wire) => write!(f, "{wire:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_name_of_the_app_meets_a_library_group() {
        let library = [
            GroupKey::channel(ChannelFormat::Json, "news"),
            GroupKey::channel(ChannelFormat::MsgPack, "news"),
            GroupKey::channel_user("ada"),
            GroupKey::key("user:ada"),
        ];
        // Every name that would have met one of them when groups were one string space.
        let names = [
            "brisk.ch:news",
            "brisk.chm:news",
            "brisk.key:brisk.ch.user:ada",
            "brisk.ch.user:ada",
            "brisk.key:user:ada",
            "brisk.app:brisk.ch:news",
        ];
        for name in names {
            for key in [GroupKey::app(name), GroupKey::key(name)] {
                assert!(!library.contains(&key), "{name:?} made {key:?}");
            }
        }
    }

    #[test]
    fn each_key_says_its_space_and_name() {
        let cases = [
            (GroupKey::app("lobby"), Space::App, "lobby"),
            (GroupKey::app("brisk.ch:news"), Space::App, "brisk.ch:news"),
            (GroupKey::key("user:ada"), Space::Key, "user:ada"),
            (
                GroupKey::key("brisk.ch.user:ada"),
                Space::Key,
                "brisk.ch.user:ada",
            ),
            (
                GroupKey::channel(ChannelFormat::MsgPack, "news"),
                Space::Channel(ChannelFormat::MsgPack),
                "news",
            ),
            (
                GroupKey::channel(ChannelFormat::Json, "a:b"),
                Space::Channel(ChannelFormat::Json),
                "a:b",
            ),
            (GroupKey::channel_user("ada"), Space::ChannelUser, "ada"),
            (
                GroupKey::from_wire("brisk.later:x"),
                Space::Unknown,
                "brisk.later:x",
            ),
        ];
        for (key, space, name) in cases {
            assert_eq!(key.parts(), (space, name), "{}", key.wire());
            assert_eq!(GroupKey::from_wire(key.wire()), key);
        }
    }

    #[test]
    fn a_wire_prefix_leads_every_key_of_its_space_and_prefix() {
        let names = ["brisk.ch:news", "brisk.x", "bright", "lobby", "b", ""];
        for space in [Space::App, Space::Key, Space::ChannelUser] {
            for prefix in ["", "b", "bri", "brisk.", "brisk.c", "lob"] {
                let wire = GroupKey::wire_prefix(space, prefix);
                for name in names.iter().filter(|n| n.starts_with(prefix)) {
                    let key = GroupKey::of(space, name);
                    assert!(key.wire().starts_with(&wire), "{key:?} under {wire:?}");
                }
            }
        }
    }

    #[test]
    fn the_wire_forms_of_earlier_builds_are_kept() {
        assert_eq!(GroupKey::app("lobby").wire(), "lobby");
        assert_eq!(GroupKey::key("user:ada").wire(), "brisk.key:user:ada");
        assert_eq!(
            GroupKey::channel(ChannelFormat::Json, "news").wire(),
            "brisk.ch:news"
        );
        assert_eq!(
            GroupKey::channel(ChannelFormat::MsgPack, "news").wire(),
            "brisk.chm:news"
        );
        assert_eq!(
            GroupKey::channel_user("ada").wire(),
            "brisk.key:brisk.ch.user:ada"
        );
    }
}
