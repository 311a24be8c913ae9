//! The head every broadcast packet starts with, whatever its form (the codec's, or the frames
//! of a master of an earlier build): a tag, the [`Stamp`], the topic.
//!
//! ```text
//! tag (u8) | origin (u32) | seq (u64) | topic length (u16) | topic | the rest of the packet
//! ```

use std::io;

use bytes::{BufMut, Bytes, BytesMut};

use super::wire::Stamp;

/// Bytes of a broadcast packet before its topic: the tag, the stamp, the topic's length.
pub(super) const BROADCAST_HEAD: usize = 1 + 4 + 8 + 2;

/// The head of a broadcast packet with tag `tag`, its topic and room for `more` bytes.
pub(super) fn broadcast_head(
    tag: u8,
    topic: &str,
    stamp: Stamp,
    more: usize,
) -> io::Result<BytesMut> {
    let topic_len = u16::try_from(topic.len())
        .map_err(|_| io::Error::other(format!("a topic of {} bytes", topic.len())))?;
    let mut out = BytesMut::with_capacity(BROADCAST_HEAD + topic.len() + more);
    out.put_u8(tag);
    out.put_u32(stamp.origin);
    out.put_u64(stamp.seq);
    out.put_u16(topic_len);
    out.extend_from_slice(topic.as_bytes());
    Ok(out)
}

/// A broadcast packet's stamp, topic and the rest of its body, after the topic.
pub(super) fn decode_head(body: &Bytes) -> io::Result<(Stamp, String, Bytes)> {
    let head = body
        .get(..BROADCAST_HEAD)
        .ok_or_else(|| bad_broadcast("short header"))?;
    let stamp = Stamp {
        origin: u32::from_be_bytes(head[1..5].try_into().expect("4 bytes")),
        seq: u64::from_be_bytes(head[5..13].try_into().expect("8 bytes")),
    };
    let topic_len = u16::from_be_bytes([head[13], head[14]]) as usize;
    let topic = body
        .get(BROADCAST_HEAD..BROADCAST_HEAD + topic_len)
        .ok_or_else(|| bad_broadcast("short topic"))?;
    let topic = std::str::from_utf8(topic)
        .map_err(|_| bad_broadcast("its topic is not UTF-8"))?
        .to_string();
    Ok((stamp, topic, body.slice(BROADCAST_HEAD + topic_len..)))
}

/// The error for a broadcast packet that cannot be read, saying why.
pub(super) fn bad_broadcast(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("broadcast: {why}"))
}
