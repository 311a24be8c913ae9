//! The control socket: the CLI's way into a running master. It knows the master only through
//! [`Controlled`], so the supervisor can be read (and changed) without it.

use std::cell::Cell;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::rc::Rc;

use tokio::net::UnixListener;

use super::failure::{ReloadError, UpgradeRefused};
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
    fn reload(&self, graceful: bool) -> impl Future<Output = Result<String, ReloadError>>;
    /// Tells every worker to open its log files again; returns how many were told.
    fn reopen_logs(&self) -> usize;
    /// Starts the program's file as a new master and hands over to it; resolves once it
    /// has taken over, or to why not (this master then goes on serving).
    /// The new master gets `ready_timeout` to start its workers.
    fn upgrade(
        &self,
        ready_timeout: std::time::Duration,
    ) -> impl Future<Output = Result<String, UpgradeRefused>>;
}

/// Binds the control socket at `path`, usable by its owner only.
pub(crate) fn bind(path: &Path) -> Result<std::os::unix::net::UnixListener> {
    let _ = std::fs::remove_file(path);
    // The mode is set as the file is made, not after: no moment where others may connect.
    // SAFETY: umask only swaps the process's file-creation mask.
    let before = unsafe { libc::umask(0o177) };
    let bound = std::os::unix::net::UnixListener::bind(path);
    // SAFETY: as above; puts the mask back.
    unsafe { libc::umask(before) };
    let listener = bound
        .map_err(|e| Error::io(format!("cannot open control socket {}", path.display()), e))?;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    Ok(listener)
}

/// Control connections being answered, counted by [`serve`] for [`answered`].
#[derive(Default)]
pub(crate) struct InFlight(Cell<usize>);

/// Answers on `listener` (from [`bind`], or handed over by the master an `upgrade`
/// replaces) until the returned handle is aborted or dropped with the runtime, counting in
/// `in_flight` the connections being answered. Each connection's peer must run as this
/// process's user or as root (`SO_PEERCRED`), whatever the file's mode.
pub(crate) fn serve<C: Controlled>(
    master: Rc<C>,
    listener: std::os::unix::net::UnixListener,
    in_flight: Rc<InFlight>,
) -> Result<tokio::task::JoinHandle<()>> {
    let cannot = |e| Error::io("cannot serve the control socket", e);
    listener.set_nonblocking(true).map_err(cannot)?;
    let listener = UnixListener::from_std(listener).map_err(cannot)?;
    let me = nix::unistd::geteuid().as_raw();
    Ok(tokio::task::spawn_local(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let master = master.clone();
            let in_flight = in_flight.clone();
            tokio::task::spawn_local(async move {
                let _counted = Counted::begin(in_flight);
                let peer = stream.peer_cred().map(|c| c.uid());
                let (rd, wr) = stream.into_split();
                let (mut rd, mut wr) = (ipc::reader(rd), ipc::writer(wr));
                if let Some(refused) = refusal(peer, me) {
                    tracing::warn!("control socket: {refused}");
                    let _ = write_msg(&mut wr, &ControlReply::Error(refused)).await;
                    let _ = futures_util::SinkExt::<bytes::Bytes>::close(&mut wr).await;
                    // Closed with its request unread, the socket would reset the peer's, which
                    // could then lose the answer: read (and drop) what it sends until it goes.
                    let (mut rd, mut nowhere) = (rd.into_inner(), tokio::io::sink());
                    let drain = tokio::io::copy(&mut rd, &mut nowhere);
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drain).await;
                    return;
                }
                let Ok(Some(req)) = read_msg::<_, ControlRequest>(&mut rd).await else {
                    return;
                };
                let reply = handle(&*master, req).await;
                let _ = write_msg(&mut wr, &reply).await;
            });
        }
    }))
}

/// Counts one control connection while it lives.
struct Counted(Rc<InFlight>);

impl Counted {
    fn begin(in_flight: Rc<InFlight>) -> Counted {
        in_flight.0.set(in_flight.0.get() + 1);
        Counted(in_flight)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0 .0.set(self.0 .0.get() - 1);
    }
}

/// Waits (up to `limit`) until every control connection counted in `in_flight` has its
/// answer: a master that exits after an upgrade does not cut off a request it took just
/// before.
pub(crate) async fn answered(in_flight: &InFlight, limit: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    while in_flight.0.get() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Why a peer running as `peer` may not control a master running as `me`, if it may not.
fn refusal(peer: std::io::Result<u32>, me: u32) -> Option<String> {
    match peer {
        Ok(uid) if uid == me || uid == 0 => None,
        Ok(uid) => Some(format!(
            "refused a connection from uid {uid}: only uid {me} (the app's user) and root may \
             control this app"
        )),
        Err(e) => Some(format!("refused a connection whose user is unknown: {e}")),
    }
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
            Err(why) => ControlReply::Error(why.to_string()),
        },
        ControlRequest::Upgrade { ready_timeout_s } => match master
            .upgrade(std::time::Duration::from_secs(ready_timeout_s))
            .await
        {
            Ok(msg) => ControlReply::Done(msg),
            Err(why) => ControlReply::Error(why.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::refusal;

    #[test]
    fn only_the_apps_user_and_root_may_control_it() {
        assert_eq!(refusal(Ok(1000), 1000), None);
        assert_eq!(refusal(Ok(0), 1000), None);
        let other = refusal(Ok(65534), 1000).unwrap();
        assert!(
            other.contains("uid 65534") && other.contains("uid 1000"),
            "{other}"
        );
        let unknown = refusal(Err(std::io::Error::other("no credentials")), 1000).unwrap();
        assert!(unknown.contains("no credentials"), "{unknown}");
    }
}
