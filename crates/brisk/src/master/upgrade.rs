//! `upgrade`: the running master starts the program's file on disk as a new master and hands
//! it, over a Unix socket (`SCM_RIGHTS`), what must outlive the old build: the listening
//! sockets, the metrics listener, the control socket and the locked pid file. The new master
//! starts its workers on them and says `ready`; the old one stops answering on the control
//! socket and says `go`; the new one writes its pid, answers on the control socket and the
//! metrics listener, and says `serving`, while the old one lets its workers finish and exits
//! without touching the sockets. A new master that exits or is not ready in time is killed,
//! and the old one goes on serving.
//!
//! The two speak over a `SOCK_SEQPACKET` pair: one message from the old master, a JSON
//! [`Header`] naming each descriptor it carries, then the three words above. Among the
//! descriptors is one end of a stream pair, the bridge, on which the two relay broadcasts
//! to each other until the old master's workers have exited; after `serving`, the old master
//! passes the WebSocket connections its workers hand over on the `SOCK_SEQPACKET` pair, each
//! batch announced on the bridge (`supervisor/bridge.rs`).

use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::socket::{recv, send, MsgFlags};
use serde::{Deserialize, Serialize};
use tokio::io::unix::AsyncFd;

use crate::env::ENV_UPGRADE_FD;
use crate::error::{Error, Result};
use crate::ipc::fds::{recv_fds, send_fds, seqpacket_pair};

/// The version of the inheritance message (what the old master hands the new one); a new master refuses one of another version but
/// [`FRAMES_BRIDGE_VERSION`] and [`BRIDGELESS_VERSION`].
const INHERITANCE_VERSION: u32 = 3;
/// The version whose bridge carries broadcasts as WebSocket frames (`ipc/legacy_frames.rs`):
/// such an old master is bridged in its own form, the rest is the same.
const FRAMES_BRIDGE_VERSION: u32 = 2;
/// The version before the bridge: such an old master's WebSocket connections close as they
/// did, the rest is the same.
const BRIDGELESS_VERSION: u32 = 1;
/// The largest header a new master reads.
const MAX_HEADER: usize = 1 << 20;
/// How long a new master waits for the old one's message.
const INHERITANCE_TIMEOUT: Duration = Duration::from_secs(10);

/// What one handed-over descriptor is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Held {
    /// The pid file, open and locked (`flock` belongs to the open file, which both share).
    PidFile,
    /// The control socket's listener.
    Control,
    /// A listener's socket: the listener's address as configured, and whether systemd
    /// passed it (a stop then leaves it as it is, for the next master systemd starts).
    Listener { address: String, systemd: bool },
    /// The metrics listener's socket.
    Metrics,
    /// The new master's end of the bridge.
    Bridge,
}

/// The old master's message: who it is and what each descriptor it carries is, in order.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    version: u32,
    old_pid: u32,
    held: Vec<Held>,
}

/// What the old master hands over (its descriptors stay its own: they are duplicated into
/// the new master by the kernel).
pub(crate) struct Inheritance {
    pub pid_file: RawFd,
    pub control: RawFd,
    pub metrics: Option<RawFd>,
    /// (address as configured, passed by systemd, socket) of every listening socket.
    pub listeners: Vec<(String, bool, RawFd)>,
    /// The new master's end of the bridge.
    pub bridge: RawFd,
}

/// What the two masters say on the link, in this order: the new one's workers are `Ready`,
/// the old one says `Go`, the new one answers it is `Serving`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Word {
    Ready,
    Go,
    Serving,
}

impl Word {
    /// The word on the wire (masters of earlier builds say the same).
    fn as_str(self) -> &'static str {
        match self {
            Word::Ready => "ready",
            Word::Go => "go",
            Word::Serving => "serving",
        }
    }
}

/// What an upgrade's old master heard that was not what it waited for, or why it could not
/// go on; each says it in the words the CLI prints.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpgradeError {
    #[error("cannot {doing}: {error}")]
    Io {
        doing: &'static str,
        error: std::io::Error,
    },
    #[error("{0}; the upgrade is refused")]
    Untrusted(#[from] super::program_trust::Untrusted),
    #[error("cannot start {exe}: {error}")]
    Start {
        exe: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("the new master (pid {pid}) exited before it was ready ({status}); its log says why")]
    ExitedEarly { pid: u32, status: String },
    #[error("the new master said {heard:?} instead of {}", expected.as_str())]
    SaidInstead { heard: String, expected: Word },
    #[error("the new master (pid {pid}) was not ready within {secs} s")]
    NotReady { pid: u32, secs: u64 },
    #[error("the new master (pid {pid}) did not take over")]
    DidNotTakeOver { pid: u32 },
    #[error("the new master (pid {pid}) did not take over within {secs} s")]
    TakeOverTimeout { pid: u32, secs: u64 },
}

/// One end of the pair the two masters finish the upgrade on.
pub(crate) struct Link(AsyncFd<OwnedFd>);

impl Link {
    /// Wraps a non-blocking end (inside the runtime).
    fn new(fd: OwnedFd) -> std::io::Result<Link> {
        socket2::SockRef::from(&fd).set_nonblocking(true)?;
        // SAFETY: the AsyncFd owns the OwnedFd, which stays open (and the same descriptor)
        // until the AsyncFd is dropped.
        let registered = unsafe { AsyncFd::register(fd) };
        registered
            .map(Link)
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    /// The socket, for the connections passed on it once the new master serves.
    pub(crate) fn fd(&self) -> &OwnedFd {
        self.0.get_ref()
    }

    /// Sends one word.
    async fn say(&self, word: Word) -> std::io::Result<()> {
        let word = word.as_str();
        loop {
            let mut ready = self.0.writable().await?;
            match ready.try_io(|fd| {
                send(fd.as_raw_fd(), word.as_bytes(), MsgFlags::MSG_NOSIGNAL)
                    .map_err(std::io::Error::from)
            }) {
                Ok(sent) => return sent.map(drop),
                Err(_would_block) => continue,
            }
        }
    }

    /// The next word; `None` once the other end is closed.
    async fn hear(&self) -> std::io::Result<Option<String>> {
        let mut buf = [0u8; 64];
        loop {
            let mut ready = self.0.readable().await?;
            match ready.try_io(|fd| {
                recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(std::io::Error::from)
            }) {
                Ok(Ok(0)) => return Ok(None),
                // It closed its end with our message unread.
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(None),
                Ok(Ok(n)) => return Ok(Some(String::from_utf8_lossy(&buf[..n]).into_owned())),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }
}

/// The new master as the old one sees it, from its start until it takes over.
pub(crate) struct Successor {
    child: std::process::Child,
    link: Link,
}

impl Successor {
    /// Starts `exe args` as a new master (in this one's environment and session, its output
    /// where this one's goes, in a process group of its own that its workers join) and sends
    /// it `inheritance`.
    pub(crate) fn start(
        exe: &Path,
        args: &[OsString],
        inheritance: &Inheritance,
    ) -> std::result::Result<Successor, UpgradeError> {
        super::program_trust::check(exe).map_err(UpgradeError::Untrusted)?;
        let io = |doing| move |error| UpgradeError::Io { doing, error };
        let (ours, theirs) = seqpacket_pair().map_err(io("make a socket"))?;
        let theirs_hi = super::dup_high(theirs.as_raw_fd()).map_err(io("pass a socket"))?;
        drop(theirs);
        let mut cmd = std::process::Command::new(exe);
        // The new master becomes systemd's main process: its watchdog is the new one's.
        cmd.args(args)
            .env(ENV_UPGRADE_FD, "3")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null());
        let raw = theirs_hi.as_raw_fd();
        // SAFETY: only setpgid and dup2 (async-signal-safe) run between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Its own group: abandoned, it is killed with everything it started.
                libc::setpgid(0, 0);
                if libc::dup2(raw, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|error| UpgradeError::Start {
            exe: exe.to_path_buf(),
            error,
        })?;
        drop(theirs_hi);
        let mut successor = Successor {
            child,
            link: Link::new(ours).map_err(io("use a socket"))?,
        };
        match send_inheritance(successor.link.0.get_ref(), inheritance) {
            Ok(()) => Ok(successor),
            // It has exited already (a build that fails at once): `wait_ready` finds the
            // link closed and says how it exited.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(successor),
            Err(error) => {
                successor.abandon();
                Err(UpgradeError::Io {
                    doing: "hand the sockets over",
                    error,
                })
            }
        }
    }

    /// The new master's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the new master's workers are ready; why not, if it exited first or
    /// `timeout` passed (it is then still running: [`abandon`](Self::abandon) it).
    pub(crate) async fn wait_ready(
        &mut self,
        timeout: Duration,
    ) -> std::result::Result<(), UpgradeError> {
        match tokio::time::timeout(timeout, self.link.hear()).await {
            Ok(Ok(Some(word))) if word == Word::Ready.as_str() => Ok(()),
            Ok(Ok(Some(heard))) => Err(UpgradeError::SaidInstead {
                heard,
                expected: Word::Ready,
            }),
            Ok(Ok(None)) => {
                // It closed its end: it is exiting (or has).
                let status = tokio::time::timeout(Duration::from_secs(5), async {
                    loop {
                        if let Ok(Some(status)) = self.child.try_wait() {
                            return status.to_string();
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                })
                .await
                .unwrap_or_else(|_| "it closed the inheritance socket".into());
                Err(UpgradeError::ExitedEarly {
                    pid: self.pid(),
                    status,
                })
            }
            Ok(Err(error)) => Err(UpgradeError::Io {
                doing: "hear from the new master",
                error,
            }),
            Err(_) => Err(UpgradeError::NotReady {
                pid: self.pid(),
                secs: timeout.as_secs(),
            }),
        }
    }

    /// Tells the new master to take over, and waits until it answers on the control socket
    /// (up to `timeout`); its pid, and the link to pass it connections on.
    pub(crate) async fn go(
        mut self,
        timeout: Duration,
    ) -> std::result::Result<(u32, Link), UpgradeError> {
        let pid = self.pid();
        let exchange = async {
            self.link.say(Word::Go).await?;
            self.link.hear().await
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(Some(word))) if word == Word::Serving.as_str() => {
                // Reaped by whoever adopts it when it exits after this one.
                std::mem::forget(self.child);
                Ok((pid, self.link))
            }
            Ok(Ok(_)) | Ok(Err(_)) => {
                self.abandon();
                Err(UpgradeError::DidNotTakeOver { pid })
            }
            Err(_) => {
                self.abandon();
                Err(UpgradeError::TakeOverTimeout {
                    pid,
                    secs: timeout.as_secs(),
                })
            }
        }
    }

    /// Kills the new master and everything it started (its process group), and reaps it.
    pub(crate) fn abandon(&mut self) {
        // SAFETY: kill(2) on the group the new master leads (set up before its exec).
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The old master as the new one sees it: what it handed over, until each is taken.
pub(crate) struct Predecessor {
    /// The old master's pid.
    pub old_pid: u32,
    link: OwnedFd,
    pid_file: Option<OwnedFd>,
    control: Option<OwnedFd>,
    metrics: Option<OwnedFd>,
    listeners: Vec<(String, bool, OwnedFd)>,
    bridge: Option<OwnedFd>,
    /// The old master writes and reads broadcasts as frames on the bridge.
    bridge_speaks_frames: bool,
}

/// What the new master keeps of the old one once it has taken its sockets.
pub(crate) struct Inherited {
    /// The `SOCK_SEQPACKET` link: the last words, then the connections passed on.
    pub link: OwnedFd,
    /// The bridge (`None` from an old master of [`BRIDGELESS_VERSION`]).
    pub bridge: Option<OwnedFd>,
    /// The old master is of [`FRAMES_BRIDGE_VERSION`]: its bridge carries broadcasts as
    /// frames.
    pub bridge_speaks_frames: bool,
    /// The old master's pid.
    pub old_pid: u32,
}

impl Predecessor {
    /// What the old master handed this process, if it started it to take over
    /// (`BRISK_UPGRADE_FD` names the socket); the variable is removed, so no worker sees it.
    pub(crate) fn from_env() -> Result<Option<Predecessor>> {
        let Some(fd) = crate::env::fd(ENV_UPGRADE_FD) else {
            return Ok(None);
        };
        std::env::remove_var(ENV_UPGRADE_FD);
        let bad = |what: String| Error::Config(format!("upgrade: {what}"));
        // SAFETY: the old master put the inheritance socket at this number for this process,
        // and nothing else in it uses that descriptor.
        let link = unsafe { OwnedFd::from_raw_fd(fd) };
        let sock = socket2::SockRef::from(&link);
        sock.set_cloexec(true)
            .and_then(|()| sock.set_read_timeout(Some(INHERITANCE_TIMEOUT)))
            .map_err(|e| bad(format!("descriptor {fd}: {e}")))?;
        let (header, fds) = receive_inheritance(&link).map_err(|e| bad(e.to_string()))?;
        let header: Header = serde_json::from_slice(&header)
            .map_err(|e| bad(format!("the old master's message: {e}")))?;
        let known = [
            INHERITANCE_VERSION,
            FRAMES_BRIDGE_VERSION,
            BRIDGELESS_VERSION,
        ];
        if !known.contains(&header.version) {
            return Err(bad(format!(
                "the old master speaks inheritance version {}, this build {INHERITANCE_VERSION}: \
                 restart instead",
                header.version
            )));
        }
        if fds.len() != header.held.len() {
            return Err(bad(format!(
                "{} descriptors came for {} named",
                fds.len(),
                header.held.len()
            )));
        }
        let mut p = Predecessor {
            old_pid: header.old_pid,
            link,
            pid_file: None,
            control: None,
            metrics: None,
            listeners: Vec::new(),
            bridge: None,
            bridge_speaks_frames: header.version == FRAMES_BRIDGE_VERSION,
        };
        for (held, fd) in header.held.into_iter().zip(fds) {
            match held {
                Held::PidFile => p.pid_file = Some(fd),
                Held::Control => p.control = Some(fd),
                Held::Metrics => p.metrics = Some(fd),
                Held::Bridge => p.bridge = Some(fd),
                Held::Listener { address, systemd } => p.listeners.push((address, systemd, fd)),
            }
        }
        Ok(Some(p))
    }

    /// The pid file, open and locked.
    pub(crate) fn take_pid_file(&mut self) -> Result<std::fs::File> {
        self.pid_file
            .take()
            .map(Into::into)
            .ok_or_else(|| Error::Config("upgrade: the old master sent no pid file".into()))
    }

    /// The control socket's listener.
    pub(crate) fn take_control(&mut self) -> Option<std::os::unix::net::UnixListener> {
        self.control.take().map(Into::into)
    }

    /// The metrics listener's socket, if the old master had one.
    pub(crate) fn take_metrics(&mut self) -> Option<std::net::TcpListener> {
        self.metrics.take().map(Into::into)
    }

    /// Every socket of the listener at `address` (one, or one per worker with
    /// `SO_REUSEPORT`), each with whether systemd passed it.
    pub(crate) fn take_listeners(&mut self, address: &str) -> Vec<(OwnedFd, bool)> {
        let (taken, kept) = std::mem::take(&mut self.listeners)
            .into_iter()
            .partition(|(a, _, _)| a == address);
        self.listeners = kept;
        taken.into_iter().map(|(_, s, fd)| (fd, s)).collect()
    }

    /// The link to finish the upgrade on and the bridge, once every socket this master
    /// wants is taken: the old master's listeners this one has not (the new build dropped
    /// them) close here, and for good once the old workers stop.
    pub(crate) fn finish(self) -> Inherited {
        for (address, _, _) in &self.listeners {
            tracing::warn!(
                "upgrade: the old master listened on {address}, this build does not: it \
                 closes when the old workers stop"
            );
        }
        if self.bridge.is_none() {
            tracing::warn!(
                "upgrade: the old master (pid {}) is of an earlier build: its WebSocket \
                 connections close instead of moving here",
                self.old_pid
            );
        }
        Inherited {
            link: self.link,
            bridge: self.bridge,
            bridge_speaks_frames: self.bridge_speaks_frames,
            old_pid: self.old_pid,
        }
    }
}

/// As the new master, once its workers are ready: says `ready`, waits for `go`. If the old
/// master died meanwhile, this one takes over all the same; if it abandoned the upgrade
/// (closed the link while alive), fails.
pub(crate) async fn wait_for_go(link: OwnedFd, old_pid: u32) -> Result<Link> {
    let link = Link::new(link).map_err(|e| Error::io("upgrade: the inheritance socket", e))?;
    let fail = |why: String| Error::Config(format!("upgrade: {why}"));
    link.say(Word::Ready)
        .await
        .map_err(|e| fail(format!("cannot tell the old master: {e}")))?;
    match link.hear().await {
        Ok(Some(word)) if word == Word::Go.as_str() => Ok(link),
        Ok(Some(word)) => Err(fail(format!("the old master said {word:?} instead of go"))),
        Ok(None) | Err(_) if !super::pidfile::alive(old_pid as i32) => {
            tracing::warn!("the old master (pid {old_pid}) died during the upgrade; taking over");
            Ok(link)
        }
        Ok(None) => Err(fail("the old master abandoned it".into())),
        Err(e) => Err(fail(format!("cannot hear from the old master: {e}"))),
    }
}

/// As the new master, once it answers on the control socket: says `serving`.
pub(crate) async fn say_serving(link: &Link) {
    // The old master may be gone (it died): then nobody needs to hear it.
    let _ = link.say(Word::Serving).await;
}

/// Sends the header and every descriptor in one message.
fn send_inheritance(link: &OwnedFd, h: &Inheritance) -> std::io::Result<()> {
    let mut held = vec![Held::PidFile, Held::Control];
    let mut fds = vec![h.pid_file, h.control];
    if let Some(m) = h.metrics {
        held.push(Held::Metrics);
        fds.push(m);
    }
    for (address, systemd, fd) in &h.listeners {
        held.push(Held::Listener {
            address: address.clone(),
            systemd: *systemd,
        });
        fds.push(*fd);
    }
    held.push(Held::Bridge);
    fds.push(h.bridge);
    let header = Header {
        version: INHERITANCE_VERSION,
        old_pid: std::process::id(),
        held,
    };
    let bytes = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
    send_fds(link, &bytes, &fds)
}

/// Receives the header and the descriptors (close-on-exec) of the old master's message.
fn receive_inheritance(link: &OwnedFd) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    recv_fds(link, MAX_HEADER).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => std::io::Error::other(format!(
            "no message from the old master within {} s",
            INHERITANCE_TIMEOUT.as_secs()
        )),
        std::io::ErrorKind::UnexpectedEof => {
            std::io::Error::other("the old master closed the socket before its message")
        }
        _ => e,
    })
}
