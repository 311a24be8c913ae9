//! The master process: checks its environment, opens or probes the listeners, writes the pid
//! file, starts and supervises the workers, and answers the control CLI. It never serves
//! traffic.

mod alerting;
#[cfg(feature = "redis")]
mod cluster_bus;
#[cfg(not(feature = "redis"))]
#[path = "no_cluster_bus.rs"]
mod cluster_bus;
#[cfg(feature = "redis")]
mod cluster_link;
#[cfg(feature = "redis")]
mod cluster_message;
mod control;
pub(crate) mod daemon;
mod failure;
mod kpi_history;
mod metrics;
mod metrics_listener;
pub(crate) mod pidfile;
mod program_trust;
mod scheduler;
mod sd_notify;
mod socket_activation;
mod socket_file;
mod status_page;
mod supervisor;
mod upgrade;
mod webhook;

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::address::Endpoint;
use crate::error::{Error, Result};
use crate::listen::ListenConfig;
use crate::run_paths::RunPaths;
use crate::runtime::listener::Listener;

/// What the app asks the master to run: the listeners of its servers, in order, and how to
/// run their workers.
pub(crate) struct MasterConfig {
    /// Where the pid file and control socket go.
    pub paths: RunPaths,
    /// One per server or custom process, in the order the app added them (a worker's spec
    /// names the index).
    pub services: Vec<ServiceConfig>,
    /// Run workers as this user (when the master runs as root).
    pub user: Option<String>,
    /// Run workers with this group (when the master runs as root).
    pub group: Option<String>,
    /// How long a graceful stop or reload lets in-flight work run.
    pub graceful_timeout: Duration,
    /// Where the metrics listener listens, if the app has one.
    pub metrics: Option<std::net::SocketAddr>,
    /// The bearer token the metrics listener asks for, if any.
    pub metrics_token: Option<String>,
    /// The app's alert thresholds, if any.
    pub alerts: Option<crate::alerts::Alerts>,
    /// The app's schedules, run by the last service (the `schedules` process) if any.
    pub schedules: Vec<crate::schedule::Schedule>,
    /// How the app spans machines (the cluster bus), if it does.
    pub cluster: crate::cluster_setting::ClusterConfig,
    /// The app has start-up hooks, run in a process of their own before the workers.
    pub startup: bool,
}

/// One server or custom process, as the master sees it.
pub(crate) struct ServiceConfig {
    /// Its listener's address, or the process's name.
    pub name: String,
    /// How many workers (`None`: one per CPU).
    pub workers: Option<usize>,
    /// Its listener; `None` for a custom process.
    pub listen: Option<ListenConfig>,
}

/// What the supervisor needs to start one server's (or custom process's) workers.
pub(crate) struct ServicePlan {
    /// Its listener's address, or the process's name.
    pub name: String,
    pub workers: usize,
    /// The sockets the master bound for this server: one that every worker shares, or
    /// (SO_REUSEPORT) one per worker index. A worker that replaces another inherits the
    /// same socket, so a reload or a respawn never closes a listening socket, and no
    /// connection queued on one is lost. Empty for a custom process.
    pub listen_fds: Vec<RawFd>,
    /// When its workers are replaced by fresh ones.
    pub recycle: crate::recycle::Recycle,
}

impl ServicePlan {
    /// The socket of worker `index`; `None` for a custom process.
    pub(crate) fn listen_fd(&self, index: usize) -> Option<RawFd> {
        if self.listen_fds.is_empty() {
            return None;
        }
        Some(self.listen_fds[index % self.listen_fds.len()])
    }
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
    /// Owns the sockets of [`ServicePlan::listen_fds`]; emptied when a stop begins, so that
    /// the last worker to stop accepting closes each.
    pub listeners: std::cell::RefCell<Vec<Listener>>,
    /// The files of the Unix-socket listeners, removed when a stop begins.
    pub socket_files: Vec<std::rc::Rc<socket_file::SocketFile>>,
    /// The listeners' sockets systemd passed: they outlive this master (the next one gets
    /// them), so a stop never makes them refuse connections; those that come meanwhile wait
    /// in the queue.
    pub systemd_sockets: Vec<RawFd>,
    /// The metrics listener, bound before the workers start.
    pub metrics: Option<std::net::TcpListener>,
    /// The bearer token it asks for, if any.
    pub metrics_token: Option<String>,
    /// The alert rules, checked before the workers start.
    pub alerting: Option<alerting::Alerting>,
    /// The app's schedules; their jobs run in worker 0 of the last service.
    pub schedules: Vec<crate::schedule::Schedule>,
    /// The cluster bus, if the app spans machines.
    pub cluster: Option<std::rc::Rc<cluster_bus::ClusterBus>>,
    /// A handle on the locked pid file: handed over by an `upgrade`, written by the new
    /// master when it takes over.
    pub pid_file: std::fs::File,
    /// The control socket's listener the master this one replaces handed over, if it did.
    pub control: Option<std::os::unix::net::UnixListener>,
    /// The links to the master this one replaces, and its pid, until its workers are gone.
    pub predecessor: Option<upgrade::Inherited>,
    /// Whether another master holds the listeners, the control socket and the pid file too:
    /// the one this replaces, until this one takes over; the one that replaces this, once it
    /// has. A stop then leaves them all as they are.
    pub shared: std::rc::Rc<std::cell::Cell<bool>>,
}

impl Plan {
    /// (service, index) of each worker slot, in order.
    pub(crate) fn slots(&self) -> Vec<(usize, usize)> {
        self.services
            .iter()
            .enumerate()
            .flat_map(|(s, p)| (0..p.workers).map(move |i| (s, i)))
            .collect()
    }
}

/// Runs the master in this process until it is told to stop.
pub(crate) fn run(config: MasterConfig) -> Result<()> {
    let paths = &config.paths;
    paths.prepare()?;
    if let Some(why) = crate::open_files::raise() {
        tracing::warn!("{why}");
    }
    let pid_file = paths.pid_file();
    // Started by `upgrade`: the old master's sockets and pid file.
    let mut predecessor = upgrade::Predecessor::from_env()?;
    let adopted = match predecessor.as_mut() {
        Some(p) => Some(pidfile::PidLock::adopt(p.take_pid_file()?, &pid_file)),
        None => None,
    };
    let mut pid_lock = lock_pid_file(adopted, &pid_file, &paths.name)?;
    if config.services.is_empty() {
        return Err(Error::Config(format!(
            "{} defines no servers and no processes",
            paths.name
        )));
    }
    let mut activated = socket_activation::Activated::from_env()?;
    let Bound {
        services,
        listeners,
        socket_files,
        systemd_sockets,
    } = bind_services(&config.services, predecessor.as_mut(), &mut activated)?;
    let handed_metrics = predecessor.as_mut().and_then(|p| p.take_metrics());
    let metrics = match config.metrics {
        Some(addr) => match handed_metrics.or_else(|| activated.take_tcp(addr)) {
            Some(listener) => Some(listener),
            None => Some(
                std::net::TcpListener::bind(addr).map_err(|source| Error::Listen {
                    address: format!("metrics listener http://{addr}"),
                    source,
                })?,
            ),
        },
        None => None,
    };
    activated.all_taken()?;
    let alerting = match &config.alerts {
        Some(a) => Some(alerting::Alerting::new(&paths.name, a)?),
        None => None,
    };
    let cluster = cluster_bus_of(&config.cluster)?;
    let (uid, gid) = resolve_identity(config.user.as_deref(), config.group.as_deref())?;
    // With the listeners bound (a busy port fails first) and no worker yet to accept.
    if config.startup {
        crate::startup::run_process(uid, gid)?;
    }
    let control = predecessor.as_mut().and_then(|p| p.take_control());
    let shared = std::rc::Rc::new(std::cell::Cell::new(predecessor.is_some()));
    let predecessor = predecessor.map(upgrade::Predecessor::finish);
    let plan = Plan {
        name: paths.name.clone(),
        exe: program_path()?,
        args: std::env::args_os().skip(1).collect(),
        services,
        uid,
        gid,
        graceful_timeout: config.graceful_timeout,
        control_socket: paths.control_socket(),
        listeners: std::cell::RefCell::new(listeners),
        socket_files: socket_files.clone(),
        systemd_sockets,
        metrics,
        metrics_token: config.metrics_token,
        alerting,
        schedules: config.schedules,
        cluster,
        pid_file: pid_lock
            .share()
            .map_err(|e| Error::io(format!("cannot use pid file {}", pid_file.display()), e))?,
        control,
        predecessor,
        shared: shared.clone(),
    };
    if !shared.get() {
        // (A new master writes its pid when it takes over.)
        pid_lock
            .write_pid()
            .map_err(|e| Error::io(format!("cannot write pid file {}", pid_file.display()), e))?;
    }
    let result = supervisor::run(plan);
    if shared.get() {
        // The other master's now (or still).
        pid_lock.keep_file();
        return result;
    }
    pid_lock.own_file();
    // Files first: once the pid file is gone and unlocked, another start may bind the same
    // paths.
    for f in &socket_files {
        f.remove_if_ours();
    }
    drop(pid_lock);
    result
}

/// The pid file's lock: the old master's (`adopted`, in an upgrade) or a new one on
/// `pid_file`; an app of `name` already running there is refused.
fn lock_pid_file(
    adopted: Option<pidfile::PidLock>,
    pid_file: &Path,
    name: &str,
) -> Result<pidfile::PidLock> {
    match adopted
        .map(Ok)
        .unwrap_or_else(|| pidfile::PidLock::acquire(pid_file))
    {
        Ok(lock) => Ok(lock),
        Err(pidfile::LockError::Held(pid)) => Err(Error::AlreadyRunning {
            name: name.to_owned(),
            pid: pid.unwrap_or(0),
        }),
        Err(pidfile::LockError::Unusable(why)) => Err(Error::Config(format!(
            "cannot use pid file {}: {why}",
            pid_file.display()
        ))),
    }
}

/// What the master bound (or was handed) for its services.
struct Bound {
    services: Vec<ServicePlan>,
    listeners: Vec<Listener>,
    socket_files: Vec<std::rc::Rc<socket_file::SocketFile>>,
    systemd_sockets: Vec<RawFd>,
}

/// Binds the listeners of the `configured` services, or takes those an old master handed
/// over (`predecessor`, in an upgrade) or systemd passed (`activated`).
fn bind_services(
    configured: &[ServiceConfig],
    mut predecessor: Option<&mut upgrade::Predecessor>,
    activated: &mut socket_activation::Activated,
) -> Result<Bound> {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut services = Vec::new();
    let mut listeners = Vec::new();
    let mut socket_files = Vec::new();
    let mut systemd_sockets = Vec::new();
    for service in configured {
        let workers = service.workers.unwrap_or(cpus);
        if workers == 0 {
            return Err(Error::Config(format!(
                "{}: workers must be at least 1",
                service.name
            )));
        }
        let Some(l) = &service.listen else {
            services.push(ServicePlan {
                name: service.name.clone(),
                workers,
                listen_fds: Vec::new(),
                recycle: Default::default(),
            });
            continue;
        };
        l.check_tls()?;
        if l.recycle.max_requests == Some(0) || l.recycle.max_memory == Some(0) {
            return Err(Error::Config(format!(
                "{}: max_requests and max_memory_mib must be at least 1",
                service.name
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
        let mut listen_fds = Vec::new();
        let inherited = activated.take(&l.address);
        let mut from_systemd = inherited.is_some();
        let handed = match predecessor.as_deref_mut() {
            Some(p) => p.take_listeners(&service.name),
            None => Vec::new(),
        };
        if !handed.is_empty() {
            // The old master's sockets (`upgrade`): the same number as it had, unless this
            // build wants more or fewer. systemd's socket is one for every worker.
            let systemd = handed.iter().any(|(_, systemd)| *systemd);
            let needed = if systemd || l.shared_by_master() || port_zero {
                1
            } else {
                workers
            };
            let mut handed = handed;
            for (fd, _) in handed.split_off(needed.min(handed.len())) {
                tracing::warn!(
                    address = %l.address,
                    "this build wants {needed} sockets here, fewer than the old master had: \
                     the others take no new connection and close when its workers stop"
                );
                // SAFETY: a socket of this listener's kind the old master handed over; the
                // listener owns it, and closes it here.
                let surplus = unsafe { Listener::from_fd(l.address.scheme(), fd.into_raw_fd()) };
                if let Err(e) = surplus.refuse_new_connections() {
                    tracing::warn!(error = %e, "cannot stop a surplus socket's handshakes");
                }
            }
            for (fd, systemd) in handed {
                from_systemd |= systemd;
                // SAFETY: the old master handed this socket over as this listener's; the
                // listener is its only owner in this process.
                let listener = unsafe { Listener::from_fd(l.address.scheme(), fd.into_raw_fd()) };
                if systemd {
                    systemd_sockets.push(listener.as_raw_fd());
                }
                listen_fds.push(listener.as_raw_fd());
                listeners.push(listener);
            }
            while listen_fds.len() < needed {
                let listener = Listener::bind(l, true).map_err(listen_err)?;
                listen_fds.push(listener.as_raw_fd());
                listeners.push(listener);
            }
        } else if let Some(listener) = inherited {
            // systemd's socket (it owns a Unix socket's file): one for every worker.
            tracing::info!(address = %l.address, "listening on the socket systemd passed");
            systemd_sockets.push(listener.as_raw_fd());
            listen_fds.push(listener.as_raw_fd());
            listeners.push(listener);
        } else if l.shared_by_master() || port_zero {
            let listener = Listener::bind(l, false).map_err(listen_err)?;
            if port_zero {
                tracing::info!(address = %l.address, port = ?listener.local_port(), "bound an ephemeral port");
            }
            listen_fds.push(listener.as_raw_fd());
            listeners.push(listener);
        } else {
            // Nothing else may hold the address, SO_REUSEPORT or not.
            Listener::probe(l).map_err(listen_err)?;
            for _ in 0..workers {
                let listener = Listener::bind(l, true).map_err(listen_err)?;
                listen_fds.push(listener.as_raw_fd());
                listeners.push(listener);
            }
        }
        if let Endpoint::Unix(p) = l.address.endpoint() {
            // A file systemd bound is systemd's to remove.
            if !from_systemd {
                socket_files.push(std::rc::Rc::new(socket_file::SocketFile::bound(p.clone())));
            }
        }
        services.push(ServicePlan {
            name: service.name.clone(),
            workers,
            listen_fds,
            recycle: l.recycle,
        });
    }
    Ok(Bound {
        services,
        listeners,
        socket_files,
        systemd_sockets,
    })
}

/// The cluster bus of an app that spans machines, if it does.
fn cluster_bus_of(
    cluster: &crate::cluster_setting::ClusterConfig,
) -> Result<Option<std::rc::Rc<cluster_bus::ClusterBus>>> {
    Ok(match &cluster.url {
        #[cfg(feature = "redis")]
        Some(url) => {
            let secret = cluster.secret.as_deref().ok_or_else(|| {
                Error::Config(
                    "App::cluster needs App::cluster_secret: a secret shared by every instance \
                     (at least 16 bytes) that authenticates the bus's messages"
                        .into(),
                )
            })?;
            let tls_ca = cluster.tls_ca.as_deref();
            let bus = cluster_bus::ClusterBus::new(url, cluster.sharded, tls_ca, secret);
            Some(bus.map_err(|e| Error::Config(e.to_string()))?)
        }
        #[cfg(not(feature = "redis"))]
        Some(_) => {
            let sharded = if cluster.sharded { "_sharded" } else { "" };
            return Err(Error::Config(format!(
                "App::cluster{sharded} needs the `redis` feature"
            )));
        }
        None => None,
    })
}

/// Duplicates `fd` to a number of at least 10, close-on-exec.
pub(crate) fn dup_high(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one we then own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// The program's file as it was started: the path it was run by (made absolute, symbolic
/// links kept), so that a deploy that replaces the file or points a link at a new release
/// reaches the workers a reload starts and the master an upgrade starts; the running
/// executable's path when it was found on `PATH`.
pub(crate) fn program_path() -> Result<PathBuf> {
    let found = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .filter(|p| p.components().count() > 1);
    let path = match found {
        Some(p) if p.is_absolute() => p,
        Some(p) => std::env::current_dir()
            .map_err(|e| Error::io("cannot find the working directory", e))?
            .join(p),
        None => std::env::current_exe().map_err(|e| Error::io("cannot find this program", e))?,
    };
    Ok(path)
}

/// Looks up the configured worker user and group; only root can switch.
fn resolve_identity(user: Option<&str>, group: Option<&str>) -> Result<(Option<u32>, Option<u32>)> {
    use nix::unistd::{geteuid, Group, User};
    if user.is_none() && group.is_none() {
        return Ok((None, None));
    }
    if !geteuid().is_root() {
        tracing::warn!("not running as root: workers keep the current user and group");
        return Ok((None, None));
    }
    let lookup_failed = |what: &str, name: &str, e: nix::Error| {
        Error::Config(format!("cannot look up {what} {name:?}: {e}"))
    };
    let mut uid = None;
    let mut gid = None;
    if let Some(name) = user {
        let u = User::from_name(name)
            .map_err(|e| lookup_failed("user", name, e))?
            .ok_or_else(|| Error::Config(format!("no such user {name:?}")))?;
        uid = Some(u.uid.as_raw());
        gid = Some(u.gid.as_raw());
    }
    if let Some(name) = group {
        let g = Group::from_name(name)
            .map_err(|e| lookup_failed("group", name, e))?
            .ok_or_else(|| Error::Config(format!("no such group {name:?}")))?;
        gid = Some(g.gid.as_raw());
    }
    Ok((uid, gid))
}
