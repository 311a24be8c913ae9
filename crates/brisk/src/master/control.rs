//! The control socket: the CLI's way into a running master. It knows the master only through
//! [`Controlled`], so the supervisor can be read (and changed) without it.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::rc::Rc;

use tokio::net::UnixListener;

use crate::error::{Error, Result};
use crate::ipc::codec::{read_msg, write_msg};
use crate::ipc::{self, ControlReply, ControlRequest, MasterStatus};
use crate::stats::ConnectionInfo;

/// What the control socket asks of the master.
pub(crate) trait Controlled: 'static {
    /// The whole app's status.
    fn status(&self) -> impl Future<Output = MasterStatus>;
    /// Every open connection of every worker.
    fn connections(&self) -> impl Future<Output = Vec<ConnectionInfo>>;
    /// Begins to stop (the master exits once its workers have).
    fn stop(&self, graceful: bool);
    /// Replaces every worker; resolves to what happened, or why it stopped.
    fn reload(&self, graceful: bool) -> impl Future<Output = Result<String, String>>;
    /// Tells every worker to open its log files again; returns how many were told.
    fn reopen_logs(&self) -> usize;
}

/// Listens on `path` until the returned handle is aborted or dropped with the runtime.
pub(crate) fn serve<C: Controlled>(
    master: Rc<C>,
    path: &Path,
) -> Result<tokio::task::JoinHandle<()>> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)
        .map_err(|e| Error::io(format!("cannot open control socket {}", path.display()), e))?;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    Ok(tokio::task::spawn_local(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let master = master.clone();
            tokio::task::spawn_local(async move {
                let (rd, wr) = stream.into_split();
                let (mut rd, mut wr) = (ipc::reader(rd), ipc::writer(wr));
                let Ok(Some(req)) = read_msg::<_, ControlRequest>(&mut rd).await else {
                    return;
                };
                let reply = handle(&*master, req).await;
                let _ = write_msg(&mut wr, &reply).await;
            });
        }
    }))
}

async fn handle<C: Controlled>(master: &C, req: ControlRequest) -> ControlReply {
    match req {
        ControlRequest::Status => ControlReply::Status(Box::new(master.status().await)),
        ControlRequest::Connections => ControlReply::Connections(master.connections().await),
        ControlRequest::Stop { graceful } => {
            master.stop(graceful);
            ControlReply::Done("stopping".into())
        }
        ControlRequest::ReopenLogs => {
            let n = master.reopen_logs();
            ControlReply::Done(format!("told {n} workers to reopen their log files"))
        }
        ControlRequest::Reload { graceful } => match master.reload(graceful).await {
            Ok(msg) => ControlReply::Done(msg),
            Err(msg) => ControlReply::Error(msg),
        },
    }
}
