//! Broadcasts as masters of an earlier build write them on the bridge of an upgrade: the
//! WebSocket frame of the message (and its compressed frame) instead of the message. A master
//! of this build takes over from one that speaks them (handover version 2) and still relays
//! its workers' broadcasts to it and from it; nothing else reads or writes them. Remove this
//! with the handover version that no longer accepts version 2.
//!
//! ```text
//! 0 | origin (u32) | seq (u64) | group length (u16) | group | frame length (u32) | frame | compressed frame?
//! ```
//!
//! The frame is a server's final frame: `0x80 | opcode` (1 text, 2 binary, 8 close), then its
//! unmasked length (7 bits, or 126 and 16 bits, or 127 and 64 bits), then the payload. The
//! compressed frame, if any, is ignored: members that negotiated compression may take a
//! message uncompressed (RFC 7692).

use std::io;

use bytes::{BufMut, Bytes, BytesMut};

use super::packet_head::{bad_broadcast, broadcast_head, decode_head};
use super::wire::{Broadcast, BroadcastKind, Packet, Stamp};

/// First byte of such a packet.
pub(super) const TAG: u8 = 0;

/// The broadcast of a packet of frames: the message of its plain frame.
pub(super) fn decode<T>(body: Bytes) -> io::Result<Packet<T>> {
    let (stamp, topic, rest) = decode_head(&body)?;
    let frame_len = rest.get(..4).ok_or_else(|| bad_broadcast("short length"))?;
    let frame_len = u32::from_be_bytes(frame_len.try_into().expect("4 bytes")) as usize;
    let frame = rest
        .get(4..4 + frame_len)
        .ok_or_else(|| bad_broadcast("short frame"))?;
    let (kind, start) = frame_message(frame).ok_or_else(|| bad_broadcast("not a final frame"))?;
    let broadcast = Broadcast {
        kind,
        payload: rest.slice(4 + start..4 + frame_len),
    };
    Ok(Packet::Broadcast {
        topic,
        stamp,
        broadcast,
    })
}

/// A packet of frames for `broadcast` (a plain frame only).
pub(super) fn encode(topic: &str, stamp: Stamp, broadcast: &Broadcast) -> io::Result<Bytes> {
    let payload = &broadcast.payload;
    let opcode = match broadcast.kind {
        BroadcastKind::Text => 0x1,
        BroadcastKind::Binary => 0x2,
        BroadcastKind::Close => 0x8,
    };
    let mut frame = BytesMut::with_capacity(10 + payload.len());
    frame.put_u8(0x80 | opcode);
    match payload.len() {
        n if n < 126 => frame.put_u8(n as u8),
        n if n <= u16::MAX as usize => {
            frame.put_u8(126);
            frame.put_u16(n as u16);
        }
        n => {
            frame.put_u8(127);
            frame.put_u64(n as u64);
        }
    }
    frame.extend_from_slice(payload);
    let mut out = broadcast_head(TAG, topic, stamp, 4 + frame.len())?;
    out.put_u32(frame.len() as u32);
    out.extend_from_slice(&frame);
    Ok(out.freeze())
}

/// The kind of a server's final frame and where its payload starts.
fn frame_message(frame: &[u8]) -> Option<(BroadcastKind, usize)> {
    let (&first, &second) = (frame.first()?, frame.get(1)?);
    let kind = match first {
        0x81 => BroadcastKind::Text,
        0x82 => BroadcastKind::Binary,
        0x88 => BroadcastKind::Close,
        _ => return None,
    };
    let (len, start) = match second {
        126 => (
            u16::from_be_bytes(frame.get(2..4)?.try_into().ok()?) as usize,
            4,
        ),
        127 => (
            u64::from_be_bytes(frame.get(2..10)?.try_into().ok()?) as usize,
            10,
        ),
        n if n < 126 => (n as usize, 2),
        _ => return None,
    };
    (frame.len() == start + len).then_some((kind, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broadcast_of<T: std::fmt::Debug>(packet: Packet<T>) -> (String, Stamp, Broadcast) {
        match packet {
            Packet::Broadcast {
                topic,
                stamp,
                broadcast,
            } => (topic, stamp, broadcast),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_packet_of_frames_as_an_earlier_build_wrote_it_is_its_message() {
        // Tag, stamp (origin 7, seq 9), "lobby", the plain frame of "hi" and a compressed one.
        let mut body = vec![0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9, 0, 5];
        body.extend_from_slice(b"lobby");
        body.extend_from_slice(&[0, 0, 0, 4, 0x81, 2, b'h', b'i', 0xc1, 1, 0]);
        let (topic, stamp, broadcast) = broadcast_of::<()>(decode(Bytes::from(body)).unwrap());
        assert_eq!(
            (topic.as_str(), stamp),
            ("lobby", Stamp { origin: 7, seq: 9 })
        );
        assert_eq!(broadcast.kind, BroadcastKind::Text);
        assert_eq!(&broadcast.payload[..], b"hi");
    }

    #[test]
    fn what_is_written_as_frames_reads_back_whatever_its_length() {
        let stamp = Stamp { origin: 3, seq: 4 };
        for (kind, len) in [
            (BroadcastKind::Text, 0),
            (BroadcastKind::Binary, 125),
            (BroadcastKind::Close, 126),
            (BroadcastKind::Binary, 70_000),
        ] {
            let sent = Broadcast {
                kind,
                payload: Bytes::from(vec![b'x'; len]),
            };
            let packet = encode("room", stamp, &sent).unwrap();
            assert_eq!(packet[0], TAG);
            let got = broadcast_of::<()>(decode(packet).unwrap());
            assert_eq!(got, ("room".to_string(), stamp, sent));
        }
    }

    #[test]
    fn what_is_not_a_final_frame_is_refused() {
        let mut body = vec![0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9, 0, 1, b'g'];
        // A continuation frame, then a frame whose length says more than it holds.
        for frame in [&[0x00u8, 1, b'x'][..], &[0x81, 5, b'x']] {
            let mut b = body.clone();
            b.extend_from_slice(&(frame.len() as u32).to_be_bytes());
            b.extend_from_slice(frame);
            assert!(decode::<()>(Bytes::from(b)).is_err(), "{frame:?}");
        }
        body.truncate(10);
        assert!(decode::<()>(Bytes::from(body)).is_err(), "a short header");
    }
}
