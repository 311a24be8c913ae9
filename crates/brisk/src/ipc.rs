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

/// Reads one message; `Ok(None)` when the other side closed the channel cleanly.
pub(crate) async fn read_msg<R, T>(r: &mut R) -> io::Result<Option<T>>
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
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
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
}
