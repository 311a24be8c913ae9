//! `upgrade` as the supervisor lives it: as the old master, starting the new one from the
//! program's file, handing it the sockets and letting go once its workers are ready; as the
//! new master, taking over. The wire protocol is [`super::super::upgrade`]'s.

use super::*;
use crate::master::upgrade::{self, Inheritance, Link, Successor, UpgradeError};

/// The master's own listeners, which an upgrade hands to the new master (and takes back if
/// it fails).
pub(super) struct Listeners {
    /// The control socket's listener, once it is served.
    pub(super) control_fd: Cell<RawFd>,
    /// Control connections being answered, on whichever listener.
    pub(super) control_in_flight: Rc<control::InFlight>,
    /// The metrics listener's socket, if there is one.
    pub(super) metrics_fd: Cell<Option<RawFd>>,
}

impl Listeners {
    /// The metrics listener `metrics_fd`, if any; the control socket is not served yet.
    pub(super) fn new(metrics_fd: Option<RawFd>) -> Self {
        Listeners {
            control_fd: Cell::new(-1),
            control_in_flight: Rc::default(),
            metrics_fd: Cell::new(metrics_fd),
        }
    }
}

/// How long a ready new master may take to answer on the control socket once told to.
const TAKE_OVER_TIMEOUT: Duration = Duration::from_secs(10);

impl Supervisor {
    /// As the old master: starts the new one with a bridge to it, waits (up to
    /// `ready_timeout`) until its workers are ready, stops answering on the control socket
    /// and the metrics listener (the tasks in `serving`), and lets the new one take over. On
    /// success, [`Plan::shared`] is set, the bridge passes connections on, and the caller
    /// stops this master's workers; on failure, the new master and the bridge are gone and
    /// this one serves on.
    pub(super) async fn upgrade(
        self: &Rc<Self>,
        ready_timeout: Duration,
        serving: (
            &mut tokio::task::JoinHandle<()>,
            &mut Option<tokio::task::JoinHandle<()>>,
        ),
    ) -> std::result::Result<(String, u32), UpgradeError> {
        let (control, metrics) = serving;
        let t0 = Instant::now();
        super::super::sd_notify::reloading();
        let failed = |why: UpgradeError| {
            self.bridging.bridge.borrow_mut().take();
            tracing::error!("upgrade failed: {why}; this master goes on serving");
            super::super::sd_notify::ready();
            Err(why)
        };
        let (ours, theirs) = match std::os::unix::net::UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => {
                return failed(UpgradeError::Io {
                    doing: "make the bridge",
                    error: e,
                })
            }
        };
        if let Err(e) = self.open_bridge(ours.into(), false, false) {
            return failed(UpgradeError::Io {
                doing: "use the bridge",
                error: e,
            });
        }
        let inheritance = self.inheritance(theirs.as_raw_fd());
        let started = Successor::start(&self.plan.exe, &self.plan.args, &inheritance);
        drop(theirs);
        let mut successor = match started {
            Ok(s) => s,
            Err(why) => return failed(why),
        };
        tracing::info!(pid = successor.pid(), "upgrade: started a new master");
        if let Err(why) = successor.wait_ready(ready_timeout).await {
            successor.abandon();
            return failed(why);
        }
        // Copies to serve on again if the new master fails from here.
        let spare_control = match dup_high(self.listeners.control_fd.get()) {
            Ok(fd) => fd,
            Err(e) => {
                successor.abandon();
                return failed(UpgradeError::Io {
                    doing: "keep a copy of the control socket",
                    error: e,
                });
            }
        };
        let spare_metrics = match self.listeners.metrics_fd.get().map(dup_high).transpose() {
            Ok(fd) => fd,
            Err(e) => {
                successor.abandon();
                return failed(UpgradeError::Io {
                    doing: "keep a copy of the metrics listener",
                    error: e,
                });
            }
        };
        // From here a control request waits in the socket's queue for the new master.
        control.abort();
        if let Some(m) = metrics.take() {
            m.abort();
        }
        self.plan.shared.set(true);
        let old = std::process::id();
        match successor.go(TAKE_OVER_TIMEOUT).await {
            Ok((new, link)) => {
                self.pass_connections_on(link);
                let msg = format!(
                    "upgraded in {:.1} s: master pid {new} serves, from the program's file \
                     as it is now; the old master (pid {old}) lets its workers finish their \
                     work, then exits",
                    t0.elapsed().as_secs_f64()
                );
                tracing::info!("{msg}");
                Ok((msg, new))
            }
            Err(why) => {
                self.plan.shared.set(false);
                // The new master may have written its pid before it failed.
                if let Err(e) = super::super::pidfile::write_pid(&self.plan.pid_file) {
                    tracing::error!("cannot write the pid file again: {e}");
                }
                let listener = std::os::unix::net::UnixListener::from(spare_control);
                self.listeners.control_fd.set(listener.as_raw_fd());
                let in_flight = self.listeners.control_in_flight.clone();
                match control::serve(self.clone(), listener, in_flight) {
                    Ok(handle) => *control = handle,
                    Err(e) => tracing::error!("cannot serve the control socket again: {e}"),
                }
                self.listeners.metrics_fd.set(None);
                if let Some(fd) = spare_metrics {
                    let listener = std::net::TcpListener::from(fd);
                    self.listeners.metrics_fd.set(Some(listener.as_raw_fd()));
                    match self.serve_metrics(listener) {
                        Ok(handle) => *metrics = Some(handle),
                        Err(e) => tracing::error!("cannot serve the metrics listener again: {e}"),
                    }
                }
                failed(why)
            }
        }
    }

    /// As the new master, once its workers are ready: waits until the old master lets go,
    /// then writes this one's pid (the control socket's clients find it there).
    pub(super) async fn take_over(&self, link: OwnedFd, old_pid: u32) -> Result<Link> {
        let link = upgrade::wait_for_go(link, old_pid).await?;
        super::super::pidfile::write_pid(&self.plan.pid_file)
            .map_err(|e| Error::io("cannot write the pid file", e))?;
        self.plan.shared.set(false);
        Ok(link)
    }

    /// Serves the metrics listener on `socket`.
    pub(super) fn serve_metrics(
        self: &Rc<Self>,
        socket: std::net::TcpListener,
    ) -> Result<tokio::task::JoinHandle<()>> {
        let token = self.plan.metrics_token.clone();
        metrics_listener::serve(self.clone(), socket, token)
    }

    /// What this master hands a new one, with the new one's end of the bridge.
    fn inheritance(&self, bridge: RawFd) -> Inheritance {
        let listeners = (self.plan.services.iter())
            .flat_map(|s| {
                (s.listen_fds.iter()).map(|fd| {
                    let systemd = self.plan.systemd_sockets.contains(fd);
                    (s.name.clone(), systemd, *fd)
                })
            })
            .collect();
        Inheritance {
            pid_file: self.plan.pid_file.as_raw_fd(),
            control: self.listeners.control_fd.get(),
            metrics: self.listeners.metrics_fd.get(),
            listeners,
            bridge,
        }
    }
}
