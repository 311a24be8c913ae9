//! Framing of the control channels, on tokio-util's [`LengthDelimitedCodec`]: each packet is a
//! 4-byte big-endian length, then that many bytes. A packet is a JSON message, or a broadcast
//! (first byte 0, which no JSON text starts with) carrying its [`Stamp`] and frame bytes as
//! they are.
//!
//! Reading goes through a [`FramedRead`], which keeps a half-read packet in its own buffer:
//! the worker's control loop may race a read against other events in a `select!` without
//! losing bytes when another branch wins (two bare `read_exact` calls could not).

use std::io;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use super::wire::{BroadcastFrames, Packet, Stamp};

/// Largest packet accepted on a control channel (a `connections` listing of 100,000 rows fits).
const MAX_PACKET: usize = 256 << 20;

/// First byte of a broadcast packet (a JSON message never starts with it).
const BROADCAST: u8 = 0;

/// The reading half of a control channel.
pub(crate) type ChannelReader<R> = FramedRead<R, LengthDelimitedCodec>;
/// The writing half of a control channel.
pub(crate) type ChannelWriter<W> = FramedWrite<W, LengthDelimitedCodec>;

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(MAX_PACKET)
        .new_codec()
}

/// Frames the reading half of a channel.
pub(crate) fn reader<R: AsyncRead>(r: R) -> ChannelReader<R> {
    FramedRead::new(r, codec())
}

/// Frames the writing half of a channel.
pub(crate) fn writer<W: AsyncWrite>(w: W) -> ChannelWriter<W> {
    FramedWrite::new(w, codec())
}

/// Writes one JSON message.
pub(crate) async fn write_msg<W, T>(w: &mut ChannelWriter<W>, msg: &T) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    w.send(Bytes::from(body)).await
}

/// Writes a broadcast packet: its stamp (origin, then number), the group name, the plain
/// frame's length, the plain frame, then the compressed frame if there is one.
pub(crate) async fn write_broadcast<W: AsyncWrite + Unpin>(
    w: &mut ChannelWriter<W>,
    group: &str,
    stamp: Stamp,
    frames: &BroadcastFrames,
) -> io::Result<()> {
    w.send(encode_broadcast(group, stamp, frames)?).await
}

/// Bytes of a broadcast packet before its group name: the tag, the stamp, the name's length.
const BROADCAST_HEAD: usize = 1 + 4 + 8 + 2;

fn encode_broadcast(group: &str, stamp: Stamp, frames: &BroadcastFrames) -> io::Result<Bytes> {
    let group_len = u16::try_from(group.len())
        .map_err(|_| io::Error::other(format!("group name of {} bytes", group.len())))?;
    let deflated = frames.deflated.as_deref().unwrap_or_default();
    let mut out = BytesMut::with_capacity(
        BROADCAST_HEAD + group.len() + 4 + frames.plain.len() + deflated.len(),
    );
    out.put_u8(BROADCAST);
    out.put_u32(stamp.origin);
    out.put_u64(stamp.seq);
    out.put_u16(group_len);
    out.extend_from_slice(group.as_bytes());
    out.put_u32(frames.plain.len() as u32);
    out.extend_from_slice(&frames.plain);
    out.extend_from_slice(deflated);
    Ok(out.freeze())
}

/// Reads one packet; `Ok(None)` when the other side closed the channel cleanly. Cancel-safe:
/// a packet half read when the future is dropped is finished by the next call.
pub(crate) async fn read_packet<R, T>(r: &mut ChannelReader<R>) -> io::Result<Option<Packet<T>>>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    match r.next().await {
        None => Ok(None),
        Some(Err(e)) => Err(e),
        Some(Ok(body)) => decode_packet(body.freeze()).map(Some),
    }
}

/// Reads one JSON message; `Ok(None)` when the other side closed the channel cleanly.
pub(crate) async fn read_msg<R, T>(r: &mut ChannelReader<R>) -> io::Result<Option<T>>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    match read_packet(r).await? {
        None => Ok(None),
        Some(Packet::Msg(m)) => Ok(Some(m)),
        Some(Packet::Broadcast { .. }) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "unexpected broadcast packet",
        )),
    }
}

/// A packet from its body (what follows the length).
fn decode_packet<T: DeserializeOwned>(body: Bytes) -> io::Result<Packet<T>> {
    if body.first() == Some(&BROADCAST) {
        return decode_broadcast(body);
    }
    serde_json::from_slice(&body)
        .map(Packet::Msg)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The group and frames of a broadcast packet's body (see [`encode_broadcast`]); the frames
/// are slices of the body, not copies.
fn decode_broadcast<T>(body: Bytes) -> io::Result<Packet<T>> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("broadcast: {why}"));
    let head = body
        .get(..BROADCAST_HEAD)
        .ok_or_else(|| bad("short header"))?;
    let stamp = Stamp {
        origin: u32::from_be_bytes(head[1..5].try_into().expect("4 bytes")),
        seq: u64::from_be_bytes(head[5..13].try_into().expect("8 bytes")),
    };
    let group_len = u16::from_be_bytes([head[13], head[14]]) as usize;
    let group = body
        .get(BROADCAST_HEAD..BROADCAST_HEAD + group_len)
        .ok_or_else(|| bad("short group"))?;
    let group = std::str::from_utf8(group)
        .map_err(|_| bad("group is not UTF-8"))?
        .to_string();
    let at = BROADCAST_HEAD + group_len;
    let plain_len = body.get(at..at + 4).ok_or_else(|| bad("short length"))?;
    let plain_len = u32::from_be_bytes(plain_len.try_into().expect("4 bytes")) as usize;
    let plain_end = at + 4 + plain_len;
    if plain_end > body.len() {
        return Err(bad("short frame"));
    }
    let frames = BroadcastFrames {
        plain: body.slice(at + 4..plain_end),
        deflated: (plain_end < body.len()).then(|| body.slice(plain_end..)),
    };
    Ok(Packet::Broadcast {
        group,
        stamp,
        frames,
    })
}

#[cfg(test)]
mod tests {
    use super::super::wire::ToWorker;
    use super::*;

    #[tokio::test]
    async fn round_trips_and_reports_clean_eof() {
        let (a, b) = tokio::io::duplex(1024);
        let (mut a, mut b) = (writer(a), reader(b));
        let stop = ToWorker::Stop {
            drain_ms: 1500,
            hand_over: true,
            to_another_master: false,
        };
        write_msg(&mut a, &stop).await.unwrap();
        drop(a);
        let got: Option<ToWorker> = read_msg(&mut b).await.unwrap();
        assert!(matches!(
            got,
            Some(ToWorker::Stop {
                drain_ms: 1500,
                hand_over: true,
                to_another_master: false,
            })
        ));
        let eof: Option<ToWorker> = read_msg(&mut b).await.unwrap();
        assert!(eof.is_none());
    }

    #[tokio::test]
    async fn broadcast_packets_carry_group_and_frame_bytes() {
        let (a, b) = tokio::io::duplex(1024);
        let (mut a, mut b) = (writer(a), reader(b));
        let plain_only = BroadcastFrames {
            plain: Bytes::from_static(&[0x81, 2, b'h', b'i']),
            deflated: None,
        };
        let both = BroadcastFrames {
            deflated: Some(Bytes::from_static(&[0xc1, 1, 0])),
            ..plain_only.clone()
        };
        let stamp = Stamp {
            origin: 4_000_000,
            seq: u64::MAX - 1,
        };
        for frames in [&plain_only, &both] {
            write_broadcast(&mut a, "lobby", stamp, frames)
                .await
                .unwrap();
        }
        write_msg(&mut a, &ToWorker::ReopenLogs).await.unwrap();
        for sent in [plain_only, both] {
            match read_packet::<_, ToWorker>(&mut b).await.unwrap() {
                Some(Packet::Broadcast {
                    group,
                    stamp: got,
                    frames,
                }) => {
                    assert_eq!(group, "lobby");
                    assert_eq!(got, stamp);
                    assert_eq!(frames, sent);
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            read_packet::<_, ToWorker>(&mut b).await.unwrap(),
            Some(Packet::Msg(ToWorker::ReopenLogs))
        ));
    }

    /// A read raced against another event and dropped half-way through a large packet loses
    /// nothing: the next read finishes that packet (the bug two `read_exact` calls had).
    #[tokio::test]
    async fn a_read_cancelled_half_way_loses_no_bytes() {
        let (a, b) = tokio::io::duplex(4096);
        let (mut a, mut b) = (writer(a), reader(b));
        let big = BroadcastFrames {
            plain: Bytes::from((0..1 << 20).map(|i| i as u8).collect::<Vec<u8>>()),
            deflated: None,
        };
        let sent = big.clone();
        let write = tokio::spawn(async move {
            for _ in 0..3 {
                write_broadcast(&mut a, "big", Stamp::NONE, &sent)
                    .await
                    .unwrap();
                write_msg(&mut a, &ToWorker::ReopenLogs).await.unwrap();
            }
        });
        let mut packets = Vec::new();
        let mut cancelled = 0;
        while packets.len() < 6 {
            // Give the read one scheduler turn, then drop it (as a select! would).
            let read = read_packet::<_, ToWorker>(&mut b);
            tokio::select! {
                biased;
                p = read => packets.push(p.unwrap().expect("a packet")),
                _ = tokio::task::yield_now() => cancelled += 1,
            }
        }
        write.await.unwrap();
        assert!(
            cancelled > 0,
            "no read was ever cancelled: the test checked nothing"
        );
        for pair in packets.chunks(2) {
            match &pair[0] {
                Packet::Broadcast { group, frames, .. } => {
                    assert_eq!(group, "big");
                    assert_eq!(frames, &big);
                }
                other => panic!("{other:?}"),
            }
            assert!(matches!(pair[1], Packet::Msg(ToWorker::ReopenLogs)));
        }
    }
}
