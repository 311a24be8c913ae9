//! Starting and stopping targets: each in its own process group, pinned
//! to its CPUs, probed until it answers, stopped with SIGTERM to the group
//! then SIGKILL. Started groups are registered so that a SIGINT/SIGTERM to
//! the suite stops them too.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::error::BenchError;
use crate::suite::config::ReadyProbe;

/// Process groups currently running, for the interrupt handler.
static GROUPS: [AtomicI32; 16] = [const { AtomicI32::new(0) }; 16];

fn register(pgid: i32) {
    for slot in &GROUPS {
        if slot
            .compare_exchange(0, pgid, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return;
        }
    }
}

fn unregister(pgid: i32) {
    for slot in &GROUPS {
        let _ = slot.compare_exchange(pgid, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

extern "C" fn on_interrupt(sig: libc::c_int) {
    // Only async-signal-safe calls: kill, nanosleep, write, _exit.
    for slot in &GROUPS {
        let pg = slot.load(Ordering::SeqCst);
        if pg > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(-pg, libc::SIGTERM) };
        }
    }
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: 500_000_000,
    };
    // SAFETY: nanosleep, kill, write and _exit are async-signal-safe.
    unsafe {
        libc::nanosleep(&pause, std::ptr::null_mut());
        for slot in &GROUPS {
            let pg = slot.load(Ordering::SeqCst);
            if pg > 0 {
                libc::kill(-pg, libc::SIGKILL);
            }
        }
        let msg = b"\nbrisk-bench: interrupted; started targets stopped\n";
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(128 + sig);
    }
}

/// Installs the SIGINT/SIGTERM handler that stops every started target.
pub fn install_interrupt_handler() {
    // SAFETY: installing a handler that only calls async-signal-safe functions.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}

fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; CPU_SET only writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        set
    }
}

/// Pins the calling thread (and threads it creates later) to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> Result<(), BenchError> {
    let set = cpu_set(cpus);
    // SAFETY: valid set pointer and size.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(BenchError::io(
            format!("cannot pin the load generator to CPUs {cpus:?}"),
            std::io::Error::last_os_error(),
        ))
    }
}

/// What to start.
#[derive(Clone, Debug)]
pub struct StartSpec {
    /// The target's name, for messages.
    pub name: String,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// CPUs the target is pinned to.
    pub cpus: Vec<usize>,
    /// File receiving its stdout and stderr.
    pub log: PathBuf,
}

/// A started target; stopped when dropped.
pub struct Running {
    name: String,
    child: Child,
    pgid: i32,
    log: PathBuf,
    stop_timeout: Duration,
    stopped: bool,
}

impl Running {
    /// Starts the target in its own process group, pinned to its CPUs.
    pub fn start(spec: &StartSpec, stop_timeout: Duration) -> Result<Running, BenchError> {
        let log = std::fs::File::create(&spec.log)
            .map_err(|e| BenchError::io(format!("cannot create {}", spec.log.display()), e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| BenchError::io("cannot duplicate the log file", e))?;
        let set = cpu_set(&spec.cpus);
        let mut cmd = Command::new(&spec.argv[0]);
        cmd.args(&spec.argv[1..])
            .current_dir(&spec.cwd)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // SAFETY: setpgid and sched_setaffinity are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            BenchError::TargetFailed(format!(
                "The target \"{}\" could not be started: `{}` failed: {}.",
                spec.name, spec.argv[0], e
            ))
        })?;
        let pgid = child.id() as i32;
        register(pgid);
        Ok(Running {
            name: spec.name.clone(),
            child,
            pgid,
            log: spec.log.clone(),
            stop_timeout,
            stopped: false,
        })
    }

    /// The pid of the started command (also its process group id).
    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// Waits until the target answers on `addr`, fails if it exits first
    /// or does not answer within `timeout`.
    pub fn wait_ready(
        &mut self,
        addr: SocketAddr,
        probe: ReadyProbe,
        path: &str,
        timeout: Duration,
    ) -> Result<(), BenchError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(BenchError::TargetFailed(format!(
                    "The target \"{}\" exited ({status}) before answering on {addr}; its output is in {}.",
                    self.name,
                    self.log.display()
                )));
            }
            if answers(addr, probe, path) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(BenchError::TargetFailed(format!(
                    "The target \"{}\" did not answer on {addr} within {:.0?}; its output is in {}.",
                    self.name,
                    timeout,
                    self.log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the whole process group: SIGTERM, then SIGKILL after the stop
    /// timeout. Returns true when SIGKILL was needed.
    pub fn stop(&mut self) -> bool {
        if self.stopped {
            return false;
        }
        self.stopped = true;
        // SAFETY: signalling our own child's process group.
        unsafe { libc::kill(-self.pgid, libc::SIGTERM) };
        let deadline = Instant::now() + self.stop_timeout;
        let mut killed = false;
        loop {
            let _ = self.child.try_wait();
            // SAFETY: signal 0 only checks whether the group still exists.
            let alive = unsafe { libc::kill(-self.pgid, 0) } == 0;
            if !alive {
                break;
            }
            if Instant::now() >= deadline {
                // SAFETY: as above.
                unsafe { libc::kill(-self.pgid, libc::SIGKILL) };
                killed = true;
                let _ = self.child.wait();
                std::thread::sleep(Duration::from_millis(50));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.wait();
        unregister(self.pgid);
        killed
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

fn answers(addr: SocketAddr, probe: ReadyProbe, path: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    if probe == ReadyProbe::Tcp {
        return true;
    }
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    let mut got = 0;
    while got < head.len() {
        match stream.read(&mut head[got..]) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got += n,
        }
    }
    let text = String::from_utf8_lossy(&head);
    text.starts_with("HTTP/1.") && text[9..12].parse::<u16>().map(|s| s < 500).unwrap_or(false)
}

/// Runs `argv` and returns the first non-empty line of its output, if any.
pub fn command_line_output(argv: &[String], cwd: &Path) -> Option<String> {
    let out = Command::new(argv.first()?)
        .args(&argv[1..])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}
