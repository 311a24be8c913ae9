//! The application protocols load connections speak over WebSocket, so that broadcast runs
//! can compare servers whose clients do more than send frames: plain frames (Brisk, `ws`),
//! Socket.IO (Engine.IO 4), Centrifuge's JSON protocol and Brisk's channel protocol.
//!
//! Plain connections carry the load payload as a binary frame. The others carry it as text,
//! `SEQ:SENT_NS:` padded with `x` to the payload size, inside their own envelope.

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::ws::connection::Ws;
use crate::ws::payload;
use crate::ws::stats::WsFailureKind;

/// The room Socket.IO connections join, and the channel Centrifuge connections subscribe to
/// by default.
pub const CHANNEL: &str = "chat";

/// The channel Brisk channel connections subscribe to by default (a `chat` namespace, as
/// the demo's, where subscribers publish).
pub const BRISK_CHANNEL: &str = "chat:bench";

/// What load connections speak once the WebSocket is open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WsProtocol {
    /// Load messages are binary frames; nothing else is exchanged.
    #[default]
    Plain,
    /// Socket.IO 4: connect to the main namespace, events `m` (the server emits them to the
    /// room), pings answered.
    SocketIo,
    /// Centrifuge's JSON protocol (Centrifuge, Centrifugo): connect (with `token` if given),
    /// subscribe to `channel` ([`CHANNEL`] by default), publish to it, pings answered.
    Centrifuge {
        /// The connect token every connection gives (Centrifugo's JWT), if any.
        token: Option<&'static str>,
        /// The channel.
        channel: &'static str,
    },
    /// Brisk's channel protocol (`brisk::channels`, v1): connect with `token`, subscribe to
    /// `channel` ([`BRISK_CHANNEL`] by default), publish to it.
    Brisk {
        /// The connect token every connection gives.
        token: &'static str,
        /// The channel.
        channel: &'static str,
    },
}

/// What a received frame holds for the load connection.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Incoming {
    /// Load payloads (decoded as [`payload::encode`] made them).
    pub payloads: Vec<Vec<u8>>,
    /// A frame the protocol requires in answer (a pong).
    pub answer: Option<Message>,
}

impl Incoming {
    fn payload(p: Vec<u8>) -> Self {
        Incoming {
            payloads: vec![p],
            answer: None,
        }
    }

    fn answer(m: Message) -> Self {
        Incoming {
            payloads: Vec::new(),
            answer: Some(m),
        }
    }
}

impl WsProtocol {
    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            WsProtocol::Plain => "plain",
            WsProtocol::SocketIo => "socketio",
            WsProtocol::Centrifuge { .. } => "centrifuge",
            WsProtocol::Brisk { .. } => "brisk",
        }
    }

    /// What a just-opened connection must do before load messages flow: Socket.IO's
    /// namespace connect, Centrifuge's connect and subscribe. Returns when the server has
    /// confirmed.
    pub async fn join(self, ws: &mut Ws) -> Result<(), WsFailureKind> {
        match self {
            WsProtocol::Plain => Ok(()),
            WsProtocol::SocketIo => {
                // The server speaks first: `0{"sid":…}` (Engine.IO open).
                wait_for(ws, |t| t.starts_with('0')).await?;
                send(ws, "40").await?;
                wait_for(ws, |t| t.starts_with("40")).await.map(|_| ())
            }
            WsProtocol::Centrifuge { token, channel } => {
                let connect = match token {
                    Some(t) => format!(r#"{{"id":1,"connect":{{"token":"{t}"}}}}"#),
                    None => r#"{"id":1,"connect":{}}"#.to_string(),
                };
                send(ws, &connect).await?;
                refused(&wait_for(ws, |t| t.contains(r#""id":1"#)).await?)?;
                let subscribe = format!(r#"{{"id":2,"subscribe":{{"channel":"{channel}"}}}}"#);
                send(ws, &subscribe).await?;
                refused(&wait_for(ws, |t| t.contains(r#""id":2"#)).await?)
            }
            WsProtocol::Brisk { token, channel } => {
                send(
                    ws,
                    &format!(r#"{{"id":1,"connect":{{"token":"{token}"}}}}"#),
                )
                .await?;
                refused(&wait_for(ws, |t| t.contains(r#""id":1"#)).await?)?;
                let subscribe = format!(r#"{{"id":2,"subscribe":{{"channel":"{channel}"}}}}"#);
                send(ws, &subscribe).await?;
                refused(&wait_for(ws, |t| t.contains(r#""id":2"#)).await?)
            }
        }
    }

    /// A load payload as this protocol sends it.
    pub fn wrap(self, data: &[u8]) -> Message {
        match self {
            WsProtocol::Plain => Message::Binary(data.to_vec().into()),
            WsProtocol::SocketIo => Message::text(format!(r#"42["m","{}"]"#, as_text(data))),
            WsProtocol::Centrifuge { channel, .. } | WsProtocol::Brisk { channel, .. } => {
                Message::text(format!(
                    r#"{{"id":3,"publish":{{"channel":"{channel}","data":"{}"}}}}"#,
                    as_text(data)
                ))
            }
        }
    }

    /// What `msg` holds.
    pub fn unwrap(self, msg: &Message) -> Incoming {
        match (self, msg) {
            (WsProtocol::Plain, Message::Binary(data)) => Incoming::payload(data.to_vec()),
            (WsProtocol::SocketIo, Message::Text(t)) => {
                let t = t.as_str();
                if t == "2" {
                    return Incoming::answer(Message::text("3"));
                }
                let text = t
                    .strip_prefix(r#"42["m",""#)
                    .and_then(|r| r.strip_suffix(r#""]"#));
                text.and_then(from_text)
                    .map_or_else(Incoming::default, Incoming::payload)
            }
            (WsProtocol::Centrifuge { .. }, Message::Text(t)) => {
                // Several replies may share a frame, one per line, a ping among them.
                let mut incoming = Incoming::default();
                for line in t.as_str().lines() {
                    if line == "{}" {
                        incoming.answer = Some(Message::text("{}"));
                    } else if let Some(p) = centrifuge_publication(line) {
                        incoming.payloads.push(p);
                    }
                }
                incoming
            }
            (WsProtocol::Brisk { .. }, Message::Text(t)) => {
                // A push `{"channel":…,"pub":{…"data":"…"}}`; replies carry an id.
                let t = t.as_str();
                if !t.starts_with(r#"{"channel""#) || !t.contains(r#""pub":"#) {
                    return Incoming::default();
                }
                quoted_data(t).map_or_else(Incoming::default, Incoming::payload)
            }
            _ => Incoming::default(),
        }
    }
}

/// The payload in the `"data":"…"` of a push.
fn quoted_data(line: &str) -> Option<Vec<u8>> {
    let data = line.split_once(r#""data":""#)?.1;
    from_text(&data[..data.find('"')?])
}

/// The payload of a Centrifuge push `{"push":{"channel":…,"pub":{"data":"…"…}}}`.
fn centrifuge_publication(line: &str) -> Option<Vec<u8>> {
    if !line.starts_with(r#"{"push""#) {
        return None;
    }
    quoted_data(line)
}

/// `SEQ:SENT_NS:` padded with `x` to the payload's size.
fn as_text(data: &[u8]) -> String {
    let (seq, sent) = payload::decode(data).unwrap_or((0, 0));
    let mut text = format!("{seq}:{sent}:");
    while text.len() < data.len() {
        text.push('x');
    }
    text
}

/// The payload [`as_text`] wrote.
fn from_text(text: &str) -> Option<Vec<u8>> {
    let mut parts = text.splitn(3, ':');
    let seq = parts.next()?.parse().ok()?;
    let sent = parts.next()?.parse().ok()?;
    Some(payload::encode(seq, sent, payload::MIN_SIZE))
}

async fn send(ws: &mut Ws, text: &str) -> Result<(), WsFailureKind> {
    ws.send(Message::text(text))
        .await
        .map_err(|_| WsFailureKind::Handshake)
}

/// Reads until a line of a text frame satisfies `done`, and answers that line.
async fn wait_for(ws: &mut Ws, done: impl Fn(&str) -> bool) -> Result<String, WsFailureKind> {
    while let Some(msg) = ws.next().await {
        match msg {
            Ok(Message::Text(t)) => {
                if let Some(line) = t.as_str().lines().find(|l| done(l)) {
                    return Ok(line.to_owned());
                }
            }
            Ok(_) => {}
            Err(_) => return Err(WsFailureKind::Handshake),
        }
    }
    Err(WsFailureKind::Handshake)
}

/// A Centrifuge reply that is an error fails the join.
fn refused(reply: &str) -> Result<(), WsFailureKind> {
    if reply.contains(r#""error":"#) {
        return Err(WsFailureKind::Handshake);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_through_each_protocol() {
        let data = payload::encode(42, 123_456_789, 64);
        let want = payload::encode(42, 123_456_789, payload::MIN_SIZE);
        let echoed = |p: WsProtocol, m: Message| p.unwrap(&m).payloads;
        assert_eq!(
            echoed(WsProtocol::Plain, WsProtocol::Plain.wrap(&data)),
            std::slice::from_ref(&data)
        );
        // Socket.IO: the server emits the event the client sent.
        let sent = WsProtocol::SocketIo.wrap(&data);
        assert_eq!(sent.len(), 64 + r#"42["m",""]"#.len());
        assert_eq!(
            echoed(WsProtocol::SocketIo, sent),
            std::slice::from_ref(&want)
        );
        // Centrifuge: a push of the publication, after a reply on the same frame.
        let push = format!(
            "{{\"id\":3,\"publish\":{{}}}}\n{{\"push\":{{\"channel\":\"chat\",\"pub\":{{\"data\":\"{}\",\"offset\":1}}}}}}",
            as_text(&data)
        );
        assert_eq!(
            echoed(
                WsProtocol::Centrifuge {
                    token: None,
                    channel: CHANNEL
                },
                Message::text(push)
            ),
            std::slice::from_ref(&want)
        );
        // Brisk: a publication push; replies (with an id) carry no payload.
        let brisk = WsProtocol::Brisk {
            token: "t",
            channel: BRISK_CHANNEL,
        };
        let push = format!(
            r#"{{"channel":"chat:bench","pub":{{"offset":"1:2","data":"{}"}}}}"#,
            as_text(&data)
        );
        assert_eq!(echoed(brisk, Message::text(push)), [want]);
        assert!(echoed(brisk, Message::text(r#"{"id":3,"result":{"offset":null}}"#)).is_empty());
    }

    #[test]
    fn pings_are_answered() {
        assert_eq!(
            WsProtocol::SocketIo.unwrap(&Message::text("2")),
            Incoming::answer(Message::text("3"))
        );
        assert_eq!(
            WsProtocol::Centrifuge {
                token: None,
                channel: CHANNEL
            }
            .unwrap(&Message::text("{}")),
            Incoming::answer(Message::text("{}"))
        );
        assert_eq!(
            WsProtocol::SocketIo.unwrap(&Message::text(r#"42["other","x"]"#)),
            Incoming::default()
        );
        // A ping that shares a frame with a push: both count.
        let data = payload::encode(1, 2, 64);
        let frame = format!(
            "{{}}\n{{\"push\":{{\"channel\":\"chat\",\"pub\":{{\"data\":\"{}\"}}}}}}",
            as_text(&data)
        );
        let got = WsProtocol::Centrifuge {
            token: None,
            channel: CHANNEL,
        }
        .unwrap(&Message::text(frame));
        assert_eq!(got.answer, Some(Message::text("{}")));
        assert_eq!(got.payloads.len(), 1);
    }
}
