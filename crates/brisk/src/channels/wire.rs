//! The channel protocol's messages, version 1: what a client sends (a [`Command`]), what the
//! server answers (a reply with the command's `id`) and what it pushes (no `id`). One JSON
//! object per WebSocket text message; the guide's "Channels" chapter describes each field.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The protocol version this server speaks, sent in the reply to `connect`.
pub const PROTOCOL_VERSION: u32 = 1;

/// Why a command failed: the `code` of an `error` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The server could not do it now (Redis down or slow): try again later.
    Unavailable = 100,
    /// A command other than `connect` came before `connect` succeeded.
    NotConnected = 101,
    /// The channel's name is not valid, or no namespace holds it.
    UnknownChannel = 102,
    /// The user may not do this on this channel.
    PermissionDenied = 103,
    /// The command is not one of the protocol's, or a field is missing or wrong.
    BadRequest = 104,
    /// The channel is already subscribed on this connection.
    AlreadySubscribed = 105,
    /// The connection has as many subscriptions as it may have.
    LimitExceeded = 106,
    /// The channel is not subscribed on this connection.
    NotSubscribed = 107,
    /// The channel's namespace keeps no history, or no presence.
    NotAvailable = 108,
    /// The subscription token has expired.
    TokenExpired = 109,
    /// `connect` came twice.
    AlreadyConnected = 110,
}

/// A command of the client's: `{"id": N, "<name>": {…}}` with exactly one name.
#[derive(Debug)]
pub(crate) enum Command {
    Connect {
        token: Option<String>,
    },
    Subscribe(Subscribe),
    Unsubscribe {
        channel: String,
    },
    Publish {
        channel: String,
        data: Box<RawValue>,
    },
    Presence {
        channel: String,
    },
    History {
        channel: String,
        limit: Option<usize>,
        since: Option<String>,
    },
    /// A new connect token, or with `channel` a new subscription token for that channel.
    Refresh {
        token: String,
        channel: Option<String>,
    },
    Ping,
}

/// `subscribe`'s fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Subscribe {
    pub channel: String,
    /// A subscription token, for channels whose namespace asks for one.
    pub token: Option<String>,
    /// The position (`epoch:offset`) of the last publication the client got: recover from it.
    pub since: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Frame {
    id: u64,
    connect: Option<ConnectFields>,
    subscribe: Option<Subscribe>,
    unsubscribe: Option<ChannelFields>,
    publish: Option<PublishFields>,
    presence: Option<ChannelFields>,
    history: Option<HistoryFields>,
    refresh: Option<RefreshFields>,
    ping: Option<Empty>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConnectFields {
    token: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelFields {
    channel: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishFields {
    channel: String,
    data: Box<RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryFields {
    channel: String,
    limit: Option<usize>,
    since: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RefreshFields {
    token: String,
    channel: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

/// A command that could not be read: its id if it had one, and what was wrong.
#[derive(Debug)]
pub(crate) struct Unreadable {
    pub id: Option<u64>,
    pub why: String,
}

/// Reads one command.
pub(crate) fn parse(text: &str) -> Result<(u64, Command), Unreadable> {
    let frame: Frame = serde_json::from_str(text).map_err(|e| Unreadable {
        id: id_of(text),
        why: format!("not a command: {e}"),
    })?;
    let id = frame.id;
    let mut found = Vec::with_capacity(1);
    if let Some(c) = frame.connect {
        found.push(Command::Connect { token: c.token });
    }
    if let Some(s) = frame.subscribe {
        found.push(Command::Subscribe(s));
    }
    if let Some(c) = frame.unsubscribe {
        found.push(Command::Unsubscribe { channel: c.channel });
    }
    if let Some(p) = frame.publish {
        found.push(Command::Publish {
            channel: p.channel,
            data: p.data,
        });
    }
    if let Some(c) = frame.presence {
        found.push(Command::Presence { channel: c.channel });
    }
    if let Some(h) = frame.history {
        found.push(Command::History {
            channel: h.channel,
            limit: h.limit,
            since: h.since,
        });
    }
    if let Some(r) = frame.refresh {
        found.push(Command::Refresh {
            token: r.token,
            channel: r.channel,
        });
    }
    if frame.ping.is_some() {
        found.push(Command::Ping);
    }
    match found.len() {
        1 => Ok((id, found.pop().expect("one command"))),
        0 => Err(Unreadable {
            id: Some(id),
            why: "no command: one of connect, subscribe, unsubscribe, publish, presence, \
                  history, refresh, ping"
                .into(),
        }),
        _ => Err(Unreadable {
            id: Some(id),
            why: "one command per message".into(),
        }),
    }
}

/// The `id` of a message that is JSON but not a valid command, to answer it.
fn id_of(text: &str) -> Option<u64> {
    #[derive(Deserialize)]
    struct Id {
        id: u64,
    }
    serde_json::from_str::<Id>(text).ok().map(|i| i.id)
}

/// A successful reply: `{"id":N,"result":…}`.
pub(crate) fn result(id: u64, result: &impl Serialize) -> String {
    #[derive(Serialize)]
    struct Reply<'a, T> {
        id: u64,
        result: &'a T,
    }
    serde_json::to_string(&Reply { id, result }).expect("replies serialize")
}

/// An error reply: `{"id":N,"error":{"code":C,"message":"…"}}`.
pub(crate) fn error(id: u64, code: ErrorCode, message: &str) -> String {
    serde_json::json!({ "id": id, "error": { "code": code as u16, "message": message } })
        .to_string()
}

/// A publication as clients get it, pushed or recovered.
#[derive(Serialize)]
pub(crate) struct Publication<'a> {
    /// Its position in the channel's history, when the namespace keeps one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
    pub data: &'a RawValue,
}

/// The push of a publication: `{"channel":C,"pub":{"offset":"E:O","data":…}}`.
pub(crate) fn publication_push(channel: &str, publication: &Publication<'_>) -> String {
    #[derive(Serialize)]
    struct Push<'a> {
        channel: &'a str,
        #[serde(rename = "pub")]
        publication: &'a Publication<'a>,
    }
    serde_json::to_string(&Push {
        channel,
        publication,
    })
    .expect("pushes serialize")
}

/// The push that ends a subscription the server ended:
/// `{"channel":C,"unsubscribe":{"code":N,"reason":"…"}}` (the connection stays open).
pub(crate) fn unsubscribe_push(channel: &str, code: ErrorCode, reason: &str) -> String {
    serde_json::json!({ "channel": channel, "unsubscribe": { "code": code as u16, "reason": reason } })
        .to_string()
}

/// The push of a member joining or leaving: `{"channel":C,"join":{"user":U,"client":ID}}`.
pub(crate) fn presence_push(channel: &str, joined: bool, user: &str, client: &str) -> String {
    let what = if joined { "join" } else { "leave" };
    serde_json::json!({ "channel": channel, what: { "user": user, "client": client } }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_command_and_refuses_what_is_not_one() {
        let (id, c) = parse(r#"{"id":7,"subscribe":{"channel":"news","since":"1:2"}}"#).unwrap();
        assert_eq!(id, 7);
        assert!(
            matches!(c, Command::Subscribe(s) if s.channel == "news" && s.since.as_deref() == Some("1:2"))
        );
        let (_, c) = parse(r#"{"id":1,"publish":{"channel":"a","data":{"x":[1,2]}}}"#).unwrap();
        assert!(matches!(c, Command::Publish { data, .. } if data.get() == r#"{"x":[1,2]}"#));
        assert!(matches!(
            parse(r#"{"id":2,"ping":{}}"#).unwrap().1,
            Command::Ping
        ));
        let two = parse(r#"{"id":3,"ping":{},"presence":{"channel":"a"}}"#).unwrap_err();
        assert_eq!(
            (two.id, two.why.as_str()),
            (Some(3), "one command per message")
        );
        let none = parse(r#"{"id":4}"#).unwrap_err();
        assert!(none.why.starts_with("no command"), "{}", none.why);
        let unknown = parse(r#"{"id":5,"shout":{}}"#).unwrap_err();
        assert_eq!(unknown.id, Some(5));
        assert!(unknown.why.contains("shout"), "{}", unknown.why);
        assert_eq!(parse("hello").unwrap_err().id, None);
    }

    #[test]
    fn pushes_carry_the_data_as_it_was_sent() {
        let data = RawValue::from_string(r#"{"text":"hi \"you\""}"#.into()).unwrap();
        let p = Publication {
            offset: Some("17:3".into()),
            data: &data,
        };
        assert_eq!(
            publication_push("chat:lobby", &p),
            r#"{"channel":"chat:lobby","pub":{"offset":"17:3","data":{"text":"hi \"you\""}}}"#
        );
        assert_eq!(
            error(9, ErrorCode::PermissionDenied, "no"),
            r#"{"error":{"code":103,"message":"no"},"id":9}"#
        );
    }
}
