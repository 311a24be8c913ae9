//! The cluster bus's messages on the wire, sealed with an HMAC of the cluster's secret.
//!
//! Anyone who can `PUBLISH` on the app's Redis (another app, anyone on the network path:
//! Redis traffic is plain text) can put bytes on a group's channel. So every message is
//! authenticated before anything of it is used:
//!
//! ```text
//! "BKC2" | instance (16) | sequence (u64) | sent at, unix ms (u64) | kind (1) | payload | HMAC-SHA256 (32)
//! ```
//!
//! The kind is the [`BroadcastKind`]: 1 text, 2 binary, 8 a close (the codes WebSocket's
//! opcodes have, which instances of earlier builds sent). The HMAC covers the channel's name
//! too (a message cannot be moved to another group) and everything before it. A receiver
//! checks the HMAC, that the message is recent (replays of old ones are refused), that the
//! kind is known and that text is UTF-8, then hands the broadcast to its workers as it is.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::ipc::{Broadcast, BroadcastKind};
use crate::secret_key::ShortSecret;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What a message starts with.
const TAG: &[u8; 4] = b"BKC2";
/// Bytes before the payload.
const HEADER: usize = 4 + 16 + 8 + 8 + 1;
/// Bytes of the HMAC at the end.
const MAC: usize = 32;

/// A broadcast between instances, as sent and as received once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BusMessage {
    /// The sending instance (random per master start).
    pub instance: [u8; 16],
    /// The group's sequence number on that instance.
    pub seq: u64,
    /// When it was sent (the sender's clock, unix milliseconds).
    pub sent_ms: u64,
    /// What the members get.
    pub broadcast: Broadcast,
}

/// Why a received message was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Too short, or not in this format.
    Malformed,
    /// The HMAC does not match: forged, damaged, or sealed with another secret.
    BadMac,
    /// Neither text, binary nor a close.
    BadKind,
    /// Text that is not UTF-8.
    BadText,
}

/// The cluster's secret, ready to seal and check messages.
#[derive(Clone)]
pub(crate) struct BusKey(Hmac<Sha256>);

/// Never shows the key.
impl std::fmt::Debug for BusKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BusKey(..)")
    }
}

impl BusKey {
    /// The key of `secret`, which must be long enough
    /// ([`MIN_SECRET`](crate::secret_key::MIN_SECRET) bytes).
    pub(crate) fn new(secret: &[u8]) -> Result<Self, ShortSecret> {
        crate::secret_key::hmac_key(secret).map(BusKey)
    }

    fn mac(&self, channel: &str, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = self.0.clone();
        mac.update(&(channel.len() as u16).to_be_bytes());
        mac.update(channel.as_bytes());
        mac.update(body);
        mac
    }

    /// `msg` for `channel`, sealed.
    pub(crate) fn seal(&self, channel: &str, msg: &BusMessage) -> Bytes {
        let payload = &msg.broadcast.payload;
        let mut out = BytesMut::with_capacity(HEADER + payload.len() + MAC);
        out.put_slice(TAG);
        out.put_slice(&msg.instance);
        out.put_u64(msg.seq);
        out.put_u64(msg.sent_ms);
        out.put_u8(match msg.broadcast.kind {
            BroadcastKind::Text => 1,
            BroadcastKind::Binary => 2,
            BroadcastKind::Close => 8,
        });
        out.put_slice(payload);
        let tag = self.mac(channel, &out).finalize().into_bytes();
        out.put_slice(&tag);
        out.freeze()
    }

    /// The message in `bytes`, received on `channel`, if it is sealed with this key and says
    /// something a member may be sent.
    pub(crate) fn open(&self, channel: &str, bytes: &Bytes) -> Result<BusMessage, Refused> {
        if bytes.len() < HEADER + MAC || &bytes[..4] != TAG {
            return Err(Refused::Malformed);
        }
        let (body, tag) = bytes.split_at(bytes.len() - MAC);
        self.mac(channel, body)
            .verify_slice(tag)
            .map_err(|_| Refused::BadMac)?;
        let mut header = &body[4..HEADER];
        let mut instance = [0u8; 16];
        header.copy_to_slice(&mut instance);
        let seq = header.get_u64();
        let sent_ms = header.get_u64();
        let kind = header.get_u8();
        let payload = bytes.slice(HEADER..bytes.len() - MAC);
        let kind = match kind {
            1 if std::str::from_utf8(&payload).is_err() => return Err(Refused::BadText),
            1 => BroadcastKind::Text,
            2 => BroadcastKind::Binary,
            // A close (`ws::close_where`): a code, then a reason in UTF-8.
            8 if payload.len() < 2 || std::str::from_utf8(&payload[2..]).is_err() => {
                return Err(Refused::BadText)
            }
            8 => BroadcastKind::Close,
            _ => return Err(Refused::BadKind),
        };
        Ok(BusMessage {
            instance,
            seq,
            sent_ms,
            broadcast: Broadcast { kind, payload },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(secret: &str) -> BusKey {
        BusKey::new(secret.as_bytes()).unwrap()
    }

    fn message(kind: BroadcastKind, payload: &'static [u8]) -> BusMessage {
        BusMessage {
            instance: [7; 16],
            seq: 42,
            sent_ms: 1_700_000_000_000,
            broadcast: Broadcast {
                kind,
                payload: Bytes::from_static(payload),
            },
        }
    }

    #[test]
    fn a_sealed_message_opens_on_its_channel_with_its_key_only() {
        let k = key("0123456789abcdef-secret");
        let m = message(BroadcastKind::Text, "héllo".as_bytes());
        let sealed = k.seal("brisk:cluster:room", &m);
        assert_eq!(k.open("brisk:cluster:room", &sealed), Ok(m));
        assert_eq!(k.open("brisk:cluster:other", &sealed), Err(Refused::BadMac));
        let other = key("another-secret-of-16+");
        assert_eq!(
            other.open("brisk:cluster:room", &sealed),
            Err(Refused::BadMac)
        );
        let mut flipped = sealed.to_vec();
        flipped[HEADER] ^= 1;
        assert_eq!(
            k.open("brisk:cluster:room", &Bytes::from(flipped)),
            Err(Refused::BadMac)
        );
        assert_eq!(
            k.open("brisk:cluster:room", &Bytes::from_static(b"BKC2short")),
            Err(Refused::Malformed)
        );
    }

    #[test]
    fn only_text_in_utf8_binary_and_closes_are_delivered() {
        use BroadcastKind::{Binary, Close, Text};
        let k = key("0123456789abcdef");
        let open = |m: BusMessage| k.open("c", &k.seal("c", &m));
        assert!(open(message(Binary, b"\xff\xfe")).is_ok());
        assert_eq!(open(message(Text, b"\xff\xfe")), Err(Refused::BadText));
        assert!(open(message(Close, b"\x0f\xa1revoked")).is_ok());
        assert_eq!(open(message(Close, b"\x0f")), Err(Refused::BadText));
        assert_eq!(open(message(Close, b"\x0f\xa1\xff")), Err(Refused::BadText));
        // Kinds no build sends (WebSocket's other opcodes among them).
        let sealed = k.seal("c", &message(Text, b"x"));
        for kind in [0x0, 0x9, 0xA, 0x41] {
            let mut body = sealed[..sealed.len() - MAC].to_vec();
            body[HEADER - 1] = kind;
            let tag = k.mac("c", &body).finalize().into_bytes();
            body.extend_from_slice(&tag);
            let got = k.open("c", &Bytes::from(body));
            assert_eq!(got, Err(Refused::BadKind), "{kind:#x}");
        }
    }

    #[test]
    fn short_secrets_are_refused() {
        assert_eq!(BusKey::new(b"short").unwrap_err(), ShortSecret(5));
    }
}
