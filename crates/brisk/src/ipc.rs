//! Messages between the master and its workers, and between the CLI and the master.
//!
//! Both channels carry length-prefixed JSON: a 4-byte big-endian length, then that many bytes.
//! Messages are small and rare (status, stop, reload), so readability wins over compactness.

use std::io;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::stats::{ConnectionInfo, WorkerStatus};

/// Largest message accepted on a control channel (a `connections` listing of 100,000 rows fits).
const MAX_MESSAGE: usize = 256 << 20;

/// Master to worker.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToWorker {
    /// A WebSocket frame for the members of a group (sent as a binary packet, not JSON).
    #[serde(skip)]
    Broadcast { group: String, frame: bytes::Bytes },
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

/// What arrives on a master-worker channel: a JSON message, or a broadcast frame.
#[derive(Debug)]
pub(crate) enum Packet<T> {
    Msg(T),
    Broadcast { group: String, frame: bytes::Bytes },
}

/// First byte of a broadcast packet (a JSON message never starts with it).
const BROADCAST: u8 = 0;

/// Writes a broadcast packet: the group name and the encoded frame, as bytes.
pub(crate) async fn write_broadcast<W: AsyncWrite + Unpin>(
    w: &mut W,
    group: &str,
    frame: &[u8],
) -> io::Result<()> {
    let body_len = 1 + 2 + group.len() + frame.len();
    let mut out = Vec::with_capacity(4 + body_len);
    out.extend_from_slice(&(body_len as u32).to_be_bytes());
    out.push(BROADCAST);
    out.extend_from_slice(&(group.len() as u16).to_be_bytes());
    out.extend_from_slice(group.as_bytes());
    out.extend_from_slice(frame);
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
    if body.first() == Some(&BROADCAST) && body.len() >= 3 {
        let glen = u16::from_be_bytes([body[1], body[2]]) as usize;
        let group = std::str::from_utf8(body.get(3..3 + glen).unwrap_or(&[]))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
            .to_string();
        let frame = bytes::Bytes::from(body).slice(3 + glen..);
        return Ok(Some(Packet::Broadcast { group, frame }));
    }
    serde_json::from_slice(&body)
        .map(|m| Some(Packet::Msg(m)))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
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
        write_broadcast(&mut a, "lobby", &[0x81, 2, b'h', b'i'])
            .await
            .unwrap();
        write_msg(&mut a, &ToWorker::Status).await.unwrap();
        match read_packet::<_, ToWorker>(&mut b).await.unwrap() {
            Some(Packet::Broadcast { group, frame }) => {
                assert_eq!(group, "lobby");
                assert_eq!(&frame[..], &[0x81, 2, b'h', b'i']);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_packet::<_, ToWorker>(&mut b).await.unwrap(),
            Some(Packet::Msg(ToWorker::Status))
        ));
    }
}
