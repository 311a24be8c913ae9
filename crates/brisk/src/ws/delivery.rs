//! [`Delivery`]: a broadcast as one worker delivers it to its members. The message travels
//! between processes as it is ([`Broadcast`]); each worker encodes it here for the members it
//! holds, once per form whatever their number: the WebSocket frame, the frame compressed for
//! members that negotiated permessage-deflate (only if one of them is a member), and the
//! event an event stream gets.

use std::cell::OnceCell;

use bytes::{Bytes, BytesMut};

use super::deflate::MAX_WINDOW_BITS;
use super::frame_write::{cut_close_reason, encode_frame, encode_message};
use super::Message;
use crate::http::sse;
use crate::ipc::{Broadcast, BroadcastKind};

/// What a broadcast is to event streams.
pub(crate) enum ForStreams {
    /// A text message: one `data:` event.
    Data(Bytes),
    /// A close: the stream's last event, `event: close` with `{"code":N,"reason":"…"}`, then
    /// its end.
    Close(Bytes),
    /// Nothing at all (a binary message).
    Nothing,
}

/// A broadcast and the forms its members take, each made on first need.
pub(crate) struct Delivery {
    broadcast: Broadcast,
    plain: OnceCell<Bytes>,
    deflated: OnceCell<Bytes>,
    for_streams: OnceCell<ForStreams>,
}

impl Delivery {
    pub(crate) fn new(broadcast: Broadcast) -> Self {
        Delivery {
            broadcast,
            plain: OnceCell::new(),
            deflated: OnceCell::new(),
            for_streams: OnceCell::new(),
        }
    }

    /// The broadcast of a data message.
    pub(crate) fn of_message(msg: Message) -> Self {
        let (kind, payload) = match msg {
            Message::Text(t) => (BroadcastKind::Text, Bytes::from(t)),
            Message::Binary(b) => (BroadcastKind::Binary, b),
        };
        Self::new(Broadcast { kind, payload })
    }

    /// The broadcast that closes its members with `code` and `reason` (at most the 123
    /// bytes a close frame holds).
    pub(crate) fn of_close(code: u16, reason: &str) -> Self {
        let reason = cut_close_reason(reason);
        let mut payload = code.to_be_bytes().to_vec();
        payload.extend_from_slice(reason.as_bytes());
        Self::new(Broadcast {
            kind: BroadcastKind::Close,
            payload: Bytes::from(payload),
        })
    }

    /// The message, as it travels.
    pub(crate) fn broadcast(&self) -> &Broadcast {
        &self.broadcast
    }

    /// Whether it closes its members.
    pub(crate) fn is_close(&self) -> bool {
        self.broadcast.kind == BroadcastKind::Close
    }

    /// The WebSocket frame for a member; compressed (no context takeover, the full window)
    /// for one that negotiated permessage-deflate with that window. A close frame is never
    /// compressed.
    pub(crate) fn frame(&self, deflated: bool) -> &Bytes {
        let payload = &self.broadcast.payload;
        let encode = |bits: Option<u8>| {
            let mut buf = BytesMut::new();
            match self.broadcast.kind {
                BroadcastKind::Text => encode_message(0x1, payload, bits, &mut buf),
                BroadcastKind::Binary => encode_message(0x2, payload, bits, &mut buf),
                BroadcastKind::Close => encode_frame(0x8, payload, &mut buf),
            }
            buf.freeze()
        };
        match deflated && !self.is_close() {
            true => self.deflated.get_or_init(|| encode(Some(MAX_WINDOW_BITS))),
            false => self.plain.get_or_init(|| encode(None)),
        }
    }

    /// What event streams get of it.
    pub(crate) fn for_streams(&self) -> &ForStreams {
        self.for_streams.get_or_init(|| {
            let payload = &self.broadcast.payload;
            match self.broadcast.kind {
                BroadcastKind::Text => {
                    ForStreams::Data(sse::Event::new(String::from_utf8_lossy(payload)).encode())
                }
                BroadcastKind::Close => ForStreams::Close(close_event(payload)),
                BroadcastKind::Binary => ForStreams::Nothing,
            }
        })
    }
}

/// The `event: close` an event stream ends with, from a close's payload (code 1005, "no
/// status", without one).
pub(crate) fn close_event(payload: &[u8]) -> Bytes {
    let (code, reason) = match payload {
        [hi, lo, reason @ ..] => (u16::from_be_bytes([*hi, *lo]), reason),
        _ => (1005, &[][..]),
    };
    let data = serde_json::json!({ "code": code, "reason": String::from_utf8_lossy(reason) });
    sse::Event::new(data.to_string()).event("close").encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_framed_and_told_to_streams_as_it_says() {
        let text = Delivery::of_message(Message::text("hi"));
        assert_eq!(&text.frame(false)[..], b"\x81\x02hi");
        assert_eq!(text.frame(true)[0] & 0xF0, 0xC0, "compressed: FIN and RSV1");
        assert!(matches!(text.for_streams(), ForStreams::Data(e) if &e[..] == b"data: hi\n\n"));

        let binary = Delivery::of_message(Message::binary(vec![0u8, 1]));
        assert_eq!(&binary.frame(false)[..], b"\x82\x02\x00\x01");
        assert!(matches!(binary.for_streams(), ForStreams::Nothing));

        let close = Delivery::of_close(4003, "revoked");
        assert!(close.is_close());
        assert_eq!(
            &close.frame(true)[..],
            b"\x88\x09\x0f\xa3revoked",
            "never compressed"
        );
        let ForStreams::Close(event) = close.for_streams() else {
            panic!("a close ends a stream");
        };
        assert_eq!(
            &event[..],
            &b"event: close\ndata: {\"code\":4003,\"reason\":\"revoked\"}\n\n"[..]
        );
    }
}
