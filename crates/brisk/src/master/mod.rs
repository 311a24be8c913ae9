//! The master process: checks its environment, opens or probes the listeners, writes the pid
//! file, starts and supervises the workers, and answers the control CLI. It never serves
//! traffic.

mod control;
pub(crate) mod daemon;
pub(crate) mod pidfile;
mod supervisor;

use std::ffi::CString;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::Duration;

use crate::address::{Endpoint, Scheme};
use crate::app::App;
use crate::error::{Error, Result};
use crate::worker::listener::Listener;

/// What the supervisor needs to start one server's workers.
pub(crate) struct ServicePlan {
    pub address: String,
    pub workers: usize,
    /// The listener the master bound for all workers to share, if it did.
    pub listen_fd: Option<RawFd>,
}

/// Everything the supervisor needs, worked out before the runtime starts.
pub(crate) struct Plan {
    pub name: String,
    pub exe: PathBuf,
    pub args: Vec<std::ffi::OsString>,
    pub services: Vec<ServicePlan>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub graceful_timeout: Duration,
    pub control_socket: PathBuf,
}

impl Plan {
    /// (service, index) of each worker slot, in order.
    pub fn slots(&self) -> Vec<(usize, usize)> {
        self.services
            .iter()
            .enumerate()
            .flat_map(|(s, p)| (0..p.workers).map(move |i| (s, i)))
            .collect()
    }
}

/// Runs the master in this process until it is told to stop.
pub(crate) fn run(app: App) -> Result<()> {
    app.check_run_dir()?;
    let pid_file = app.pid_file();
    if let Some(pid) = pidfile::running_pid(&pid_file) {
        return Err(Error::AlreadyRunning {
            name: app.name.clone(),
            pid,
        });
    }
    if app.services.is_empty() {
        return Err(Error::Config(format!("{} defines no servers", app.name)));
    }
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut services = Vec::new();
    let mut keep_open = Vec::new();
    let mut unix_paths = Vec::new();
    for svc in &app.services {
        let l = &svc.listen;
        l.check_tls()?;
        let workers = l.workers.unwrap_or(cpus);
        if workers == 0 {
            return Err(Error::Config(format!(
                "{}: workers must be at least 1",
                l.address
            )));
        }
        let listen_err = |source| Error::Listen {
            address: l.address.to_string(),
            source,
        };
        let port_zero = l
            .address
            .socket_addr()
            .map(|a| a.port() == 0)
            .unwrap_or(false);
        let listen_fd = if l.shared_by_master() || port_zero {
            let listener = Listener::bind(l, false).map_err(listen_err)?;
            if port_zero {
                tracing::info!(address = %l.address, port = ?listener.local_port(), "bound an ephemeral port");
            }
            let fd = listener.as_raw_fd();
            keep_open.push(listener);
            Some(fd)
        } else {
            Listener::probe(l).map_err(listen_err)?;
            None
        };
        if let Endpoint::Unix(p) = l.address.endpoint() {
            unix_paths.push(p.clone());
        }
        services.push(ServicePlan {
            address: l.address.to_string(),
            workers,
            listen_fd,
        });
    }
    warn_about_reuse_port_reloads(&app);
    let (uid, gid) = resolve_identity(&app)?;
    let plan = Plan {
        name: app.name.clone(),
        exe: std::env::current_exe().map_err(|e| Error::io("cannot find this program", e))?,
        args: std::env::args_os().skip(1).collect(),
        services,
        uid,
        gid,
        graceful_timeout: app.graceful_timeout,
        control_socket: app.control_socket(),
    };
    pidfile::write(&pid_file)
        .map_err(|e| Error::io(format!("cannot write pid file {}", pid_file.display()), e))?;
    let result = supervisor::run(plan);
    pidfile::remove_if_ours(&pid_file);
    for p in unix_paths {
        let _ = std::fs::remove_file(p);
    }
    drop(keep_open);
    result
}

/// With SO_REUSEPORT each worker has its own accept queue; unless the kernel migrates a closing
/// socket's queue (net.ipv4.tcp_migrate_req = 1), a reload resets connections queued there.
fn warn_about_reuse_port_reloads(app: &App) {
    let reuse = app
        .services
        .iter()
        .any(|s| !s.listen.shared_by_master() && s.listen.address.scheme() != Scheme::Udp);
    if !reuse {
        return;
    }
    let migrate = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_migrate_req")
        .map(|s| s.trim() == "1")
        .unwrap_or(false);
    if !migrate {
        tracing::warn!(
            "net.ipv4.tcp_migrate_req is 0: during a reload, connections queued on a retiring \
             worker's SO_REUSEPORT socket may be reset; set it to 1 or use reuse_port(false)"
        );
    }
}

/// Looks up the configured worker user and group; only root can switch.
fn resolve_identity(app: &App) -> Result<(Option<u32>, Option<u32>)> {
    if app.user.is_none() && app.group.is_none() {
        return Ok((None, None));
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        tracing::warn!("not running as root: workers keep the current user and group");
        return Ok((None, None));
    }
    let mut uid = None;
    let mut gid = None;
    if let Some(user) = &app.user {
        let c = CString::new(user.as_str())
            .map_err(|_| Error::Config(format!("bad user name {user:?}")))?;
        // SAFETY: getpwnam returns a pointer into static storage or null; we copy out at once.
        let pw = unsafe { libc::getpwnam(c.as_ptr()) };
        if pw.is_null() {
            return Err(Error::Config(format!("no such user {user:?}")));
        }
        // SAFETY: non-null result of getpwnam.
        unsafe {
            uid = Some((*pw).pw_uid);
            gid = Some((*pw).pw_gid);
        }
    }
    if let Some(group) = &app.group {
        let c = CString::new(group.as_str())
            .map_err(|_| Error::Config(format!("bad group name {group:?}")))?;
        // SAFETY: as above, for getgrnam.
        let gr = unsafe { libc::getgrnam(c.as_ptr()) };
        if gr.is_null() {
            return Err(Error::Config(format!("no such group {group:?}")));
        }
        // SAFETY: non-null result of getgrnam.
        gid = Some(unsafe { (*gr).gr_gid });
    }
    Ok((uid, gid))
}
