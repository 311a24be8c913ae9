//! The channel protocol's messages, version 1: what a client sends (a [`Command`]), what the
//! server answers (a reply with the command's `id`) and what it pushes (no `id`). One JSON
//! object per WebSocket text message, or in the binary [`Format`] one MessagePack map per
//! binary message with the same fields; the guide's "Channels" chapter describes each field.

use base64::Engine as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::ws::Message;

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
    /// A limit was reached: the connection has as many subscriptions as it may have, or the
    /// publication is larger than its namespace takes, or the connection publishes faster
    /// than its namespace allows (the message says which).
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

/// How a connection's messages are encoded: chosen by the `format` query parameter of the
/// URL the client opens (`?format=msgpack`; JSON without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// One JSON object per WebSocket text message; publications' data is JSON, or `b64` (the
    /// data in base64) for data that is not JSON.
    #[default]
    Json,
    /// One MessagePack map per WebSocket binary message, with the JSON protocol's field
    /// names; publications' data is MessagePack `bin` (the bytes as published: JSON
    /// publications come as their JSON text).
    MsgPack,
}

/// Why a connection's URL names no format the server speaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadFormat {
    /// `format=` more than once.
    #[error("one format per connection")]
    Twice,
    /// A format Brisk does not know (its first 20 characters).
    #[error("unknown format {0:?}: json or msgpack")]
    Unknown(String),
    /// MessagePack, which this server does not speak.
    #[error("this server speaks JSON only (Channels::msgpack is off)")]
    JsonOnly,
}

impl Format {
    /// The format a WebSocket URL's `path?query` asks for, or why it names none this server
    /// could speak.
    pub(crate) fn of_path(path: &str) -> Result<Format, BadFormat> {
        let query = path.split_once('?').map_or("", |(_, q)| q);
        let mut asked = query
            .split('&')
            .filter_map(|pair| pair.strip_prefix("format="));
        match (asked.next(), asked.next()) {
            (None, _) | (Some("json"), None) => Ok(Format::Json),
            (Some("msgpack"), None) => Ok(Format::MsgPack),
            (Some(_), Some(_)) => Err(BadFormat::Twice),
            (Some(other), None) => Err(BadFormat::Unknown(other.chars().take(20).collect())),
        }
    }
}

/// A publication's data as a client sent it: JSON (the JSON protocol, the server API), or
/// bytes (the MessagePack protocol, [`Channels::publish_bytes`](super::Channels::publish_bytes)).
#[derive(Debug)]
pub(crate) enum Payload {
    Json(Box<RawValue>),
    Bytes(Vec<u8>),
}

impl Payload {
    /// Its size: the JSON's text, or the bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Payload::Json(json) => json.get().len(),
            Payload::Bytes(bytes) => bytes.len(),
        }
    }

    /// The data to push: JSON as it is, bytes as JSON if they are JSON text.
    pub(crate) fn data(&self) -> Data<'_> {
        match self {
            Payload::Json(json) => Data::Json(json),
            Payload::Bytes(bytes) => Data::of(bytes),
        }
    }
}

/// A publication's data on its way to clients: JSON text, or bytes that are not JSON.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Data<'a> {
    Json(&'a RawValue),
    Bytes(&'a [u8]),
}

impl<'a> Data<'a> {
    /// `bytes` as JSON if they are JSON text, else as bytes.
    pub(crate) fn of(bytes: &'a [u8]) -> Data<'a> {
        match serde_json::from_slice::<&RawValue>(bytes) {
            Ok(json) => Data::Json(json),
            Err(_) => Data::Bytes(bytes),
        }
    }

    /// The bytes as published (JSON data: its text).
    pub(crate) fn bytes(&self) -> &'a [u8] {
        match self {
            Data::Json(json) => json.get().as_bytes(),
            Data::Bytes(bytes) => bytes,
        }
    }
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
        data: Payload,
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

/// A command message; `P` is `publish`'s fields, whose data is JSON or bytes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Frame<P> {
    id: u64,
    connect: Option<ConnectFields>,
    subscribe: Option<Subscribe>,
    unsubscribe: Option<ChannelFields>,
    publish: Option<P>,
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

/// `publish`'s fields in MessagePack: the data is `bin` (or `str`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishBytes {
    channel: String,
    data: serde_bytes::ByteBuf,
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

/// Reads one command in `format`: a text message's bytes (JSON) or a binary message's
/// (MessagePack).
pub(crate) fn parse(format: Format, message: &[u8]) -> Result<(u64, Command), Unreadable> {
    match format {
        Format::Json => {
            let frame: Frame<PublishFields> =
                serde_json::from_slice(message).map_err(|e| Unreadable {
                    id: serde_json::from_slice::<Id>(message).ok().map(|i| i.id),
                    why: format!("not a command: {e}"),
                })?;
            command_of(frame, |p| (p.channel, Payload::Json(p.data)))
        }
        Format::MsgPack => {
            let frame: Frame<PublishBytes> =
                rmp_serde::from_slice(message).map_err(|e| Unreadable {
                    id: rmp_serde::from_slice::<Id>(message).ok().map(|i| i.id),
                    why: format!("not a command: {e}"),
                })?;
            command_of(frame, |p| (p.channel, Payload::Bytes(p.data.into_vec())))
        }
    }
}

/// The `id` of a message that is not a valid command, to answer it.
#[derive(Deserialize)]
struct Id {
    id: u64,
}

/// The one command `frame` holds, or why it holds none or several.
fn command_of<P>(
    frame: Frame<P>,
    publish: impl FnOnce(P) -> (String, Payload),
) -> Result<(u64, Command), Unreadable> {
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
        let (channel, data) = publish(p);
        found.push(Command::Publish { channel, data });
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

/// A command's result, encoded in the connection's format (to be sent in a reply).
pub(crate) enum Encoded {
    Json(Box<RawValue>),
    MsgPack(Vec<u8>),
}

/// `value` in `format`.
pub(crate) fn encode(format: Format, value: &impl Serialize) -> Encoded {
    match format {
        Format::Json => {
            Encoded::Json(serde_json::value::to_raw_value(value).expect("results serialize"))
        }
        Format::MsgPack => Encoded::MsgPack(msgpack(value)),
    }
}

/// `value` as a MessagePack map (structs by field name, as in JSON).
fn msgpack(value: &impl Serialize) -> Vec<u8> {
    rmp_serde::to_vec_named(value).expect("messages serialize")
}

/// A message of the protocol: `value` in `format`.
pub(crate) fn message(format: Format, value: &impl Serialize) -> Message {
    match format {
        Format::Json => Message::text(serde_json::to_string(value).expect("messages serialize")),
        Format::MsgPack => Message::binary(msgpack(value)),
    }
}

/// A successful reply: `{"id":N,"result":…}`.
pub(crate) fn result(id: u64, result: &Encoded) -> Message {
    match result {
        Encoded::Json(result) => {
            #[derive(Serialize)]
            struct Reply<'a> {
                id: u64,
                result: &'a RawValue,
            }
            message(Format::Json, &Reply { id, result })
        }
        Encoded::MsgPack(result) => {
            // The result is encoded already: the map around it is written here.
            let mut out = Vec::with_capacity(result.len() + 20);
            let written = rmp::encode::write_map_len(&mut out, 2)
                .and_then(|_| rmp::encode::write_str(&mut out, "id"))
                .and_then(|_| rmp::encode::write_uint(&mut out, id).map(drop))
                .and_then(|_| rmp::encode::write_str(&mut out, "result"));
            written.expect("writing to a Vec cannot fail");
            out.extend_from_slice(result);
            Message::binary(out)
        }
    }
}

/// An error reply: `{"id":N,"error":{"code":C,"message":"…"}}`.
pub(crate) fn error(format: Format, id: u64, code: ErrorCode, message: &str) -> Message {
    self::message(
        format,
        &serde_json::json!({ "id": id, "error": { "code": code as u16, "message": message } }),
    )
}

/// A publication as clients get it, pushed or recovered: `{"offset":"E:O","data":…}`. In
/// JSON, data that is not JSON comes as `"b64":"…"` instead of `data`; in MessagePack the
/// data is always `bin`.
pub(crate) struct Publication<'a> {
    /// Its position in the channel's history, when the namespace keeps one.
    pub offset: Option<String>,
    pub data: Data<'a>,
}

impl Serialize for Publication<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let human = s.is_human_readable();
        let mut map = s.serialize_map(Some(1 + usize::from(self.offset.is_some())))?;
        if let Some(offset) = &self.offset {
            map.serialize_entry("offset", offset)?;
        }
        match (human, self.data) {
            (true, Data::Json(json)) => map.serialize_entry("data", json)?,
            (true, Data::Bytes(bytes)) => map.serialize_entry(
                "b64",
                &base64::engine::general_purpose::STANDARD.encode(bytes),
            )?,
            (false, data) => map.serialize_entry("data", serde_bytes::Bytes::new(data.bytes()))?,
        }
        map.end()
    }
}

/// The push of a publication: `{"channel":C,"pub":{"offset":"E:O","data":…}}`.
pub(crate) fn publication_push(
    format: Format,
    channel: &str,
    publication: &Publication<'_>,
) -> Message {
    #[derive(Serialize)]
    struct Push<'a> {
        channel: &'a str,
        #[serde(rename = "pub")]
        publication: &'a Publication<'a>,
    }
    message(
        format,
        &Push {
            channel,
            publication,
        },
    )
}

/// The push that ends a subscription the server ended:
/// `{"channel":C,"unsubscribe":{"code":N,"reason":"…"}}` (the connection stays open).
pub(crate) fn unsubscribe_push(
    format: Format,
    channel: &str,
    code: ErrorCode,
    reason: &str,
) -> Message {
    message(
        format,
        &serde_json::json!({ "channel": channel, "unsubscribe": { "code": code as u16, "reason": reason } }),
    )
}

/// The push of a member joining or leaving: `{"channel":C,"join":{"user":U,"client":ID}}`.
pub(crate) fn presence_push(
    format: Format,
    channel: &str,
    joined: bool,
    user: &str,
    client: &str,
) -> Message {
    let what = if joined { "join" } else { "leave" };
    message(
        format,
        &serde_json::json!({ "channel": channel, what: { "user": user, "client": client } }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Result<(u64, Command), Unreadable> {
        parse(Format::Json, text.as_bytes())
    }

    fn text_of(m: Message) -> String {
        match m {
            Message::Text(t) => t.as_str().to_owned(),
            other => panic!("not text: {other:?}"),
        }
    }

    fn bytes_of(m: Message) -> Vec<u8> {
        match m {
            Message::Binary(b) => b.to_vec(),
            other => panic!("not binary: {other:?}"),
        }
    }

    #[test]
    fn reads_each_command_and_refuses_what_is_not_one() {
        let (id, c) = json(r#"{"id":7,"subscribe":{"channel":"news","since":"1:2"}}"#).unwrap();
        assert_eq!(id, 7);
        assert!(
            matches!(c, Command::Subscribe(s) if s.channel == "news" && s.since.as_deref() == Some("1:2"))
        );
        let (_, c) = json(r#"{"id":1,"publish":{"channel":"a","data":{"x":[1,2]}}}"#).unwrap();
        assert!(
            matches!(c, Command::Publish { data: Payload::Json(data), .. } if data.get() == r#"{"x":[1,2]}"#)
        );
        assert!(matches!(
            json(r#"{"id":2,"ping":{}}"#).unwrap().1,
            Command::Ping
        ));
        let two = json(r#"{"id":3,"ping":{},"presence":{"channel":"a"}}"#).unwrap_err();
        assert_eq!(
            (two.id, two.why.as_str()),
            (Some(3), "one command per message")
        );
        let none = json(r#"{"id":4}"#).unwrap_err();
        assert!(none.why.starts_with("no command"), "{}", none.why);
        let unknown = json(r#"{"id":5,"shout":{}}"#).unwrap_err();
        assert_eq!(unknown.id, Some(5));
        assert!(unknown.why.contains("shout"), "{}", unknown.why);
        assert_eq!(json("hello").unwrap_err().id, None);
    }

    #[test]
    fn reads_messagepack_commands_with_bytes_for_data() {
        #[derive(Serialize)]
        struct Publish<'a> {
            channel: &'a str,
            #[serde(with = "serde_bytes")]
            data: &'a [u8],
        }
        #[derive(Serialize)]
        struct Frame<'a> {
            id: u64,
            publish: Publish<'a>,
        }
        let frame = Frame {
            id: 9,
            publish: Publish {
                channel: "game:1",
                data: &[0, 255, 7],
            },
        };
        let (id, c) = parse(Format::MsgPack, &msgpack(&frame)).unwrap();
        assert_eq!(id, 9);
        assert!(
            matches!(c, Command::Publish { channel, data: Payload::Bytes(b) } if channel == "game:1" && b == [0, 255, 7])
        );
        let subscribe = msgpack(&serde_json::json!({"id": 3, "subscribe": {"channel": "a"}}));
        assert!(matches!(
            parse(Format::MsgPack, &subscribe).unwrap().1,
            Command::Subscribe(s) if s.channel == "a"
        ));
        // A map for data is not bytes: answered (it has an id), with what was wrong.
        let map_data =
            msgpack(&serde_json::json!({"id": 4, "publish": {"channel": "a", "data": {"x": 1}}}));
        let bad = parse(Format::MsgPack, &map_data).unwrap_err();
        assert_eq!(bad.id, Some(4));
        assert!(bad.why.starts_with("not a command"), "{}", bad.why);
        // JSON text in a binary message is not MessagePack.
        assert_eq!(
            parse(Format::MsgPack, br#"{"id":1,"ping":{}}"#)
                .unwrap_err()
                .id,
            None
        );
    }

    #[test]
    fn the_format_comes_from_the_query() {
        assert_eq!(Format::of_path("/connection/websocket"), Ok(Format::Json));
        assert_eq!(Format::of_path("/c?format=json"), Ok(Format::Json));
        assert_eq!(
            Format::of_path("/c?x=1&format=msgpack"),
            Ok(Format::MsgPack)
        );
        assert!(Format::of_path("/c?format=protobuf")
            .unwrap_err()
            .to_string()
            .contains("protobuf"));
        assert!(Format::of_path("/c?format=json&format=msgpack").is_err());
    }

    #[test]
    fn pushes_carry_the_data_as_it_was_sent() {
        let data = RawValue::from_string(r#"{"text":"hi \"you\""}"#.into()).unwrap();
        let p = Publication {
            offset: Some("17:3".into()),
            data: Data::Json(&data),
        };
        assert_eq!(
            text_of(publication_push(Format::Json, "chat:lobby", &p)),
            r#"{"channel":"chat:lobby","pub":{"offset":"17:3","data":{"text":"hi \"you\""}}}"#
        );
        assert_eq!(
            text_of(error(Format::Json, 9, ErrorCode::PermissionDenied, "no")),
            r#"{"error":{"code":103,"message":"no"},"id":9}"#
        );
        // Bytes that are not JSON: base64 for JSON clients.
        let p = Publication {
            offset: None,
            data: Data::of(&[0xff, 0, 1]),
        };
        assert_eq!(
            text_of(publication_push(Format::Json, "g", &p)),
            r#"{"channel":"g","pub":{"b64":"/wAB"}}"#
        );
    }

    #[test]
    fn messagepack_pushes_and_replies_decode_to_the_json_fields() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct Pub {
            offset: Option<String>,
            data: serde_bytes::ByteBuf,
        }
        #[derive(Deserialize, Debug, PartialEq)]
        struct Push {
            channel: String,
            #[serde(rename = "pub")]
            publication: Pub,
        }
        let data = RawValue::from_string(r#"{"a":1}"#.into()).unwrap();
        let p = Publication {
            offset: Some("1:2".into()),
            data: Data::Json(&data),
        };
        let push: Push =
            rmp_serde::from_slice(&bytes_of(publication_push(Format::MsgPack, "c", &p))).unwrap();
        assert_eq!(push.channel, "c");
        assert_eq!(push.publication.offset.as_deref(), Some("1:2"));
        assert_eq!(push.publication.data.as_slice(), br#"{"a":1}"#);

        #[derive(Deserialize, Debug, PartialEq)]
        struct Reply {
            id: u64,
            result: serde_json::Value,
        }
        let encoded = encode(
            Format::MsgPack,
            &serde_json::json!({"expires": null, "n": [1, 2]}),
        );
        let reply: Reply = rmp_serde::from_slice(&bytes_of(result(300, &encoded))).unwrap();
        assert_eq!(reply.id, 300);
        assert_eq!(
            reply.result,
            serde_json::json!({"expires": null, "n": [1, 2]})
        );
        let e: serde_json::Value = rmp_serde::from_slice(&bytes_of(error(
            Format::MsgPack,
            5,
            ErrorCode::NotSubscribed,
            "x",
        )))
        .unwrap();
        assert_eq!(
            e,
            serde_json::json!({"id": 5, "error": {"code": 107, "message": "x"}})
        );
    }
}
