//! Messages between the master and its workers, and between the CLI and the master.
//!
//! Both channels carry length-prefixed JSON: a 4-byte big-endian length, then that many bytes.
//! Messages are small and rare (status, stop, reload), so readability wins over compactness.

use std::io;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::stats::{ConnectionInfo, WorkerStatus};
use crate::ws::BroadcastFrames;

/// Largest message accepted on a control channel (a `connections` listing of 100,000 rows fits).
const MAX_MESSAGE: usize = 256 << 20;

/// Master to worker.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToWorker {
    /// WebSocket frames for the members of a group (sent as a binary packet, not JSON).
    #[serde(skip)]
    Broadcast {
        group: String,
        frames: BroadcastFrames,
    },
    /// Reply with [`ToMaster::Status`].
    Status,
    /// Reply with [`ToMaster::Connections`].
    Connections,
    /// Stop: stop accepting; if graceful, let in-flight work finish first.
    Stop { graceful: bool },
}

/// Worker to master.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToMaster {
    /// Listeners are open and `on_worker_start` has run.
    Ready,
    /// The worker cannot start; the message says why.
    Failed(String),
    /// Answer to [`ToWorker::Status`].
    Status(WorkerStatus),
    /// Answer to [`ToWorker::Connections`].
    Connections(Vec<ConnectionInfo>),
}

/// CLI to master.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ControlRequest {
    Status,
    Connections,
    Stop { graceful: bool },
    Reload { graceful: bool },
}

/// Master to CLI.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ControlReply {
    Status(MasterStatus),
    Connections(Vec<ConnectionInfo>),
    Done(String),
    Error(String),
}

/// The whole app's status as the master sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MasterStatus {
    /// The app's name.
    pub name: String,
    /// The master's pid.
    pub master_pid: i32,
    /// Seconds since the master started.
    pub uptime_s: u64,
    /// Worker restarts after unexpected exits.
    pub restarts: u64,
    /// One row per worker; workers that did not answer in time are missing and counted here.
    pub workers: Vec<WorkerStatus>,
    /// Workers that did not answer the status request in time.
    pub unresponsive: Vec<i32>,
}

/// Writes one message.
pub(crate) async fn write_msg<W, T>(w: &mut W, msg: &T) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame).await?;
    w.flush().await
}

/// What arrives on a master-worker channel: a JSON message, or a broadcast's frames.
#[derive(Debug)]
pub(crate) enum Packet<T> {
    Msg(T),
    Broadcast {
        group: String,
        frames: BroadcastFrames,
    },
}

/// First byte of a broadcast packet (a JSON message never starts with it).
const BROADCAST: u8 = 0;

/// Writes a broadcast packet, as bytes: the group name, the plain frame's length, the plain
/// frame, then the compressed frame if there is one.
pub(crate) async fn write_broadcast<W: AsyncWrite + Unpin>(
    w: &mut W,
    group: &str,
    frames: &BroadcastFrames,
) -> io::Result<()> {
    let deflated = frames.deflated.as_deref().unwrap_or_default();
    let body_len = 1 + 2 + group.len() + 4 + frames.plain.len() + deflated.len();
    let mut out = Vec::with_capacity(4 + body_len);
    out.extend_from_slice(&(body_len as u32).to_be_bytes());
    out.push(BROADCAST);
    out.extend_from_slice(&(group.len() as u16).to_be_bytes());
    out.extend_from_slice(group.as_bytes());
    out.extend_from_slice(&(frames.plain.len() as u32).to_be_bytes());
    out.extend_from_slice(&frames.plain);
    out.extend_from_slice(deflated);
    w.write_all(&out).await?;
    w.flush().await
}

/// Reads one packet; `Ok(None)` when the other side closed the channel cleanly.
pub(crate) async fn read_packet<R, T>(r: &mut R) -> io::Result<Option<Packet<T>>>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("control message of {len} bytes is over the {MAX_MESSAGE}-byte limit"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    if body.first() == Some(&BROADCAST) {
        return read_broadcast(body).map(Some);
    }
    serde_json::from_slice(&body)
        .map(|m| Some(Packet::Msg(m)))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The group and frames of a broadcast packet's body (see [`write_broadcast`]).
fn read_broadcast<T>(body: Vec<u8>) -> io::Result<Packet<T>> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("broadcast: {why}"));
    let glen = u16::from_be_bytes([body[1], body[2]]) as usize;
    let group = body.get(3..3 + glen).ok_or_else(|| bad("short group"))?;
    let group = std::str::from_utf8(group).map_err(|_| bad("group is not UTF-8"))?;
    let group = group.to_string();
    let at = 3 + glen;
    let plain_len = body.get(at..at + 4).ok_or_else(|| bad("short length"))?;
    let plain_end = at + 4 + u32::from_be_bytes(plain_len.try_into().expect("4 bytes")) as usize;
    if plain_end > body.len() {
        return Err(bad("short frame"));
    }
    let body = bytes::Bytes::from(body);
    let frames = BroadcastFrames {
        plain: body.slice(at + 4..plain_end),
        deflated: (plain_end < body.len()).then(|| body.slice(plain_end..)),
    };
    Ok(Packet::Broadcast { group, frames })
}

/// Reads one JSON message; `Ok(None)` when the other side closed the channel cleanly.
pub(crate) async fn read_msg<R, T>(r: &mut R) -> io::Result<Option<T>>
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trips_and_reports_clean_eof() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        write_msg(&mut a, &ToWorker::Stop { graceful: true })
            .await
            .unwrap();
        drop(a);
        let got: Option<ToWorker> = read_msg(&mut b).await.unwrap();
        assert!(matches!(got, Some(ToWorker::Stop { graceful: true })));
        let eof: Option<ToWorker> = read_msg(&mut b).await.unwrap();
        assert!(eof.is_none());
    }

    #[tokio::test]
    async fn broadcast_packets_carry_group_and_frame_bytes() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let plain_only = BroadcastFrames {
            plain: bytes::Bytes::from_static(&[0x81, 2, b'h', b'i']),
            deflated: None,
        };
        let both = BroadcastFrames {
            deflated: Some(bytes::Bytes::from_static(&[0xc1, 1, 0])),
            ..plain_only.clone()
        };
        for frames in [&plain_only, &both] {
            write_broadcast(&mut a, "lobby", frames).await.unwrap();
        }
        write_msg(&mut a, &ToWorker::Status).await.unwrap();
        for sent in [plain_only, both] {
            match read_packet::<_, ToWorker>(&mut b).await.unwrap() {
                Some(Packet::Broadcast { group, frames }) => {
                    assert_eq!(group, "lobby");
                    assert_eq!(frames, sent);
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            read_packet::<_, ToWorker>(&mut b).await.unwrap(),
            Some(Packet::Msg(ToWorker::Status))
        ));
    }
}
