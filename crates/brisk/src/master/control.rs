//! The control socket: the CLI's way into a running master.

use std::os::unix::fs::PermissionsExt;
use std::rc::Rc;

use tokio::net::UnixListener;
use tokio::sync::oneshot;

use super::supervisor::{Event, Supervisor};
use crate::error::{Error, Result};
use crate::ipc::{read_msg, write_msg, ControlReply, ControlRequest};

/// Listens on the plan's control socket until the returned handle is dropped.
pub(crate) fn serve(sup: Rc<Supervisor>) -> Result<tokio::task::JoinHandle<()>> {
    let path = sup.plan.control_socket.clone();
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)
        .map_err(|e| Error::io(format!("cannot open control socket {}", path.display()), e))?;
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
    Ok(tokio::task::spawn_local(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let sup = sup.clone();
            tokio::task::spawn_local(async move {
                let Ok(Some(req)) = read_msg::<_, ControlRequest>(&mut stream).await else {
                    return;
                };
                let reply = handle(&sup, req).await;
                let _ = write_msg(&mut stream, &reply).await;
            });
        }
    }))
}

async fn handle(sup: &Rc<Supervisor>, req: ControlRequest) -> ControlReply {
    match req {
        ControlRequest::Status => ControlReply::Status(sup.status().await),
        ControlRequest::Connections => ControlReply::Connections(sup.connections().await),
        ControlRequest::Stop { graceful } => {
            let _ = sup.events.send(Event::Stop { graceful });
            ControlReply::Done("stopping".into())
        }
        ControlRequest::Reload { graceful } => {
            let (tx, rx) = oneshot::channel();
            let _ = sup.events.send(Event::Reload {
                graceful,
                done: Some(tx),
            });
            match rx.await {
                Ok(Ok(msg)) => ControlReply::Done(msg),
                Ok(Err(msg)) => ControlReply::Error(msg),
                Err(_) => ControlReply::Error("the master stopped during the reload".into()),
            }
        }
    }
}
