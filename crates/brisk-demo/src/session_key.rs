//! The secret that signs the demo's session cookies, the same in every worker:
//! `BRISK_SESSION_SECRET` from the environment (checked at start), or a key file (default
//! `RUN_DIR/session.key`) read by each worker on its first session, and created with 32 random
//! bytes (mode 0600) by whichever worker comes first. Nothing is written before the workers
//! run, so commands such as `status` and a start that fails leave no file behind.

use std::cell::OnceCell;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::Context;
use brisk::http::session::Sessions;

/// Where the session secret comes from, and this worker's sessions once it has read it.
#[derive(Clone)]
pub(crate) struct SessionKey {
    source: Source,
    sessions: Rc<OnceCell<Sessions>>,
}

#[derive(Clone)]
enum Source {
    /// From `BRISK_SESSION_SECRET`, already checked.
    Ready(Sessions),
    /// From this file, created if missing.
    File(PathBuf),
}

impl SessionKey {
    /// The secret of `BRISK_SESSION_SECRET` if set (an error now if it is too short), else of
    /// `file`.
    pub(crate) fn new(file: PathBuf) -> anyhow::Result<Self> {
        let source = match brisk::secret_env("BRISK_SESSION_SECRET") {
            Some(secret) => {
                Source::Ready(Sessions::new(secret.as_bytes()).context("BRISK_SESSION_SECRET")?)
            }
            None => Source::File(file),
        };
        Ok(SessionKey {
            source,
            sessions: Rc::default(),
        })
    }

    /// This worker's sessions, or why the key could not be read or made (tried again on the
    /// next call, so a passing failure heals).
    pub(crate) fn sessions(&self) -> Result<&Sessions, String> {
        if let Some(sessions) = self.sessions.get() {
            return Ok(sessions);
        }
        let made = match &self.source {
            Source::Ready(sessions) => sessions.clone(),
            Source::File(path) => read_or_create(path)
                .and_then(|secret| {
                    Sessions::new(&secret)
                        .with_context(|| format!("session key {}", path.display()))
                })
                .map_err(|e| format!("{e:#}"))?,
        };
        Ok(self.sessions.get_or_init(|| made))
    }
}

/// The contents of `path`, which is created with 32 random bytes if it does not exist. It is
/// written under a temporary name and linked into place, so a worker reading it at the same
/// moment sees the whole key or no file.
pub(crate) fn read_or_create(path: &Path) -> anyhow::Result<Vec<u8>> {
    match std::fs::read(path) {
        Ok(secret) => return Ok(secret),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("no random source: {e}"))?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    // A file of that name is a leftover of a crashed worker whose pid this one now has.
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &secret));
    written.with_context(|| format!("cannot write {}", tmp.display()))?;
    // Fails if another worker linked its key first; then that one is the key.
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(secret.to_vec()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
        }
        Err(e) => Err(e).with_context(|| format!("cannot create {}", path.display())),
    }
}
