//! Framing of the control channels, on tokio-util's [`LengthDelimitedCodec`]: each packet is a
//! 4-byte big-endian length, then that many bytes. A packet is a JSON message, or a broadcast
//! (first byte 1, which no JSON text starts with) carrying its [`Stamp`], its topic and its
//! [`Broadcast`] as they are. A master of an earlier build speaks broadcasts of frames on the
//! bridge of an upgrade ([`legacy_frames`](super::legacy_frames), first byte 0): they are read
//! as broadcasts too, and [`write_broadcast_as_frames`] writes them for such a master.
//!
//! Reading goes through a [`FramedRead`], which keeps a half-read packet in its own buffer:
//! the worker's control loop may race a read against other events in a `select!` without
//! losing bytes when another branch wins (two bare `read_exact` calls could not).

use std::io;

use bytes::{BufMut, Bytes};
use futures_util::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use super::legacy_frames;
use super::packet_head::{bad_broadcast, broadcast_head, decode_head};
use super::wire::{Broadcast, BroadcastKind, Packet, Stamp};

/// Largest packet accepted on a control channel (a `connections` listing of 100,000 rows fits).
const MAX_PACKET: usize = 256 << 20;

/// First byte of a broadcast packet (a JSON message never starts with it).
const BROADCAST: u8 = 1;

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

/// Writes a broadcast packet: its stamp (origin, then number), its topic, then the kind of its
/// message and the message.
pub(crate) async fn write_broadcast<W: AsyncWrite + Unpin>(
    w: &mut ChannelWriter<W>,
    topic: &str,
    stamp: Stamp,
    broadcast: &Broadcast,
) -> io::Result<()> {
    w.send(encode_broadcast(topic, stamp, broadcast)?).await
}

/// Writes a broadcast as a master of an earlier build reads it (on the bridge of an upgrade
/// from it): as a frame.
pub(crate) async fn write_broadcast_as_frames<W: AsyncWrite + Unpin>(
    w: &mut ChannelWriter<W>,
    topic: &str,
    stamp: Stamp,
    broadcast: &Broadcast,
) -> io::Result<()> {
    w.send(legacy_frames::encode(topic, stamp, broadcast)?)
        .await
}

/// The kind's byte in a broadcast packet.
fn kind_byte(kind: BroadcastKind) -> u8 {
    match kind {
        BroadcastKind::Text => 1,
        BroadcastKind::Binary => 2,
        BroadcastKind::Close => 8,
    }
}

fn encode_broadcast(topic: &str, stamp: Stamp, broadcast: &Broadcast) -> io::Result<Bytes> {
    let mut out = broadcast_head(BROADCAST, topic, stamp, 1 + broadcast.payload.len())?;
    out.put_u8(kind_byte(broadcast.kind));
    out.extend_from_slice(&broadcast.payload);
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
    match body.first() {
        Some(&BROADCAST) => return decode_broadcast(body),
        Some(&legacy_frames::TAG) => return legacy_frames::decode(body),
        _ => {}
    }
    serde_json::from_slice(&body)
        .map(Packet::Msg)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The topic and message of a broadcast packet's body (see [`encode_broadcast`]); the
/// payload is a slice of the body, not a copy.
fn decode_broadcast<T>(body: Bytes) -> io::Result<Packet<T>> {
    let (stamp, topic, rest) = decode_head(&body)?;
    let kind = match rest.first() {
        Some(1) => BroadcastKind::Text,
        Some(2) => BroadcastKind::Binary,
        Some(8) => BroadcastKind::Close,
        Some(other) => return Err(bad_broadcast(&format!("unknown kind {other}"))),
        None => return Err(bad_broadcast("no kind")),
    };
    let broadcast = Broadcast {
        kind,
        payload: rest.slice(1..),
    };
    Ok(Packet::Broadcast {
        topic,
        stamp,
        broadcast,
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

    fn broadcasts() -> [Broadcast; 4] {
        let of = |kind, payload: &'static [u8]| Broadcast {
            kind,
            payload: Bytes::from_static(payload),
        };
        [
            of(BroadcastKind::Text, b"hi"),
            of(BroadcastKind::Binary, &[0, 1, 2]),
            of(BroadcastKind::Close, b"\x0f\xa3gone"),
            of(BroadcastKind::Text, b""),
        ]
    }

    #[tokio::test]
    async fn broadcast_packets_carry_topic_kind_and_payload() {
        let (a, b) = tokio::io::duplex(1024);
        let (mut a, mut b) = (writer(a), reader(b));
        let stamp = Stamp {
            origin: 4_000_000,
            seq: u64::MAX - 1,
        };
        for broadcast in &broadcasts() {
            write_broadcast(&mut a, "lobby", stamp, broadcast)
                .await
                .unwrap();
        }
        write_msg(&mut a, &ToWorker::ReopenLogs).await.unwrap();
        for sent in broadcasts() {
            match read_packet::<_, ToWorker>(&mut b).await.unwrap() {
                Some(Packet::Broadcast {
                    topic,
                    stamp: got,
                    broadcast,
                }) => {
                    assert_eq!(topic, "lobby");
                    assert_eq!(got, stamp);
                    assert_eq!(broadcast, sent);
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
        let big = Broadcast {
            kind: BroadcastKind::Binary,
            payload: Bytes::from((0..1 << 20).map(|i| i as u8).collect::<Vec<u8>>()),
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
                Packet::Broadcast {
                    topic, broadcast, ..
                } => {
                    assert_eq!(topic, "big");
                    assert_eq!(broadcast, &big);
                }
                other => panic!("{other:?}"),
            }
            assert!(matches!(pair[1], Packet::Msg(ToWorker::ReopenLogs)));
        }
    }
}
