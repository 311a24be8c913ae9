//! What Brisk keeps in Redis beside the cluster bus — history entries, presence counts, queue
//! jobs — sealed with an HMAC of the app's secret (`App::cluster_secret`), as the bus's
//! messages are.
//!
//! Anyone who can write to the app's Redis (another app on it, anyone on the network path of
//! a plain-text Redis) could otherwise put entries there that clients receive on recovery,
//! counts that presence reports, or jobs that consumers run. A sealed value carries
//! HMAC-SHA256 over what it is (its [`Sealed`] kind), the key it lives under and its bytes, so
//! it can neither be made up nor moved to another group or queue. A value that fails the check
//! is not used: it is counted (`status --json`'s `redis_refused`, the metric
//! `brisk_errors_total{kind="redis_refused"}`) and logged, at most every 10 s.
//!
//! An app with no secret keeps its values unsealed and accepts them so; each process says
//! once in its log that it does. An app that has one refuses every unsealed value, so the
//! values of an older build that did not seal are refused once the app takes a secret.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::secret_key::ShortSecret;

/// How often a refusal is logged at most.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// What a sealed value is: part of what its HMAC covers, so that a value of one kind is never
/// taken for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sealed {
    /// A message in a group's history (`brisk::ws::History`).
    HistoryEntry,
    /// A worker's count, or ids, of a group's members (`brisk::ws::presence`).
    Presence,
    /// A job's payload (`brisk::queue`).
    Job,
}

impl Sealed {
    fn label(self) -> &'static [u8] {
        match self {
            Sealed::HistoryEntry => b"brisk history entry",
            Sealed::Presence => b"brisk presence",
            Sealed::Job => b"brisk job",
        }
    }
}

/// The app's secret, ready to seal values and check them.
pub(crate) struct DataKey(Hmac<Sha256>);

impl DataKey {
    /// The key of `secret`, which must be long enough
    /// ([`MIN_SECRET`](crate::secret_key::MIN_SECRET) bytes).
    pub(crate) fn new(secret: &[u8]) -> Result<Self, ShortSecret> {
        crate::secret_key::hmac_key(secret).map(DataKey)
    }

    fn mac(&self, kind: Sealed, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac = self.0.clone();
        for part in std::iter::once(kind.label()).chain(parts.iter().copied()) {
            mac.update(&(part.len() as u32).to_be_bytes());
            mac.update(part);
        }
        mac
    }

    /// The seal of a value of `kind` made of `parts` (the key it lives under, its bytes…), in
    /// lowercase hex (64 characters).
    pub(crate) fn seal(&self, kind: Sealed, parts: &[&[u8]]) -> String {
        let tag = self.mac(kind, parts).finalize().into_bytes();
        let mut hex = String::with_capacity(64);
        for b in tag {
            hex.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            hex.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        }
        hex
    }

    /// Whether `seal` (as [`seal`](Self::seal) writes it) is the seal of `parts`.
    pub(crate) fn verify(&self, kind: Sealed, parts: &[&[u8]], seal: &[u8]) -> bool {
        let Some(tag) = unhex(seal) else {
            return false;
        };
        self.mac(kind, parts).verify_slice(&tag).is_ok()
    }
}

fn unhex(hex: &[u8]) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// This process's key: `None` until [`set`], and in an app without a secret.
static KEY: OnceLock<Option<DataKey>> = OnceLock::new();

/// Values refused since the process started.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Records the app's secret (a worker or custom process does, as it starts: each builds the
/// same `App` as its master); the first call wins. A secret too short is refused.
pub(crate) fn set(secret: Option<&[u8]>) -> Result<(), ShortSecret> {
    let key = secret.map(DataKey::new).transpose()?;
    let _ = KEY.set(key);
    Ok(())
}

/// The key this process seals with; `None` in an app without a secret (after saying so once
/// in the log for `kind`).
pub(crate) fn key(kind: Sealed) -> Option<&'static DataKey> {
    let key = KEY.get().and_then(Option::as_ref);
    if key.is_none() {
        // One flag per kind: after the first, an append without a secret costs one load.
        static SAID: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];
        if !SAID[kind as usize].swap(true, Relaxed) {
            tracing::warn!(
                "{} are kept in Redis unsealed: anyone who can write to that Redis can forge \
                 them; give the app a secret (App::cluster_secret)",
                match kind {
                    Sealed::HistoryEntry => "history entries",
                    Sealed::Presence => "presence counts",
                    Sealed::Job => "queue jobs",
                }
            );
        }
    }
    key
}

/// Counts a value that failed its check, and logs it (at most every 10 s): `what` says which
/// value, under which key.
pub(crate) fn refuse(what: &str) {
    let n = REFUSED.fetch_add(1, Relaxed) + 1;
    static LOGGED: Mutex<Option<Instant>> = Mutex::new(None);
    let mut logged = LOGGED.lock().unwrap_or_else(|p| p.into_inner());
    if logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
        *logged = Some(Instant::now());
        tracing::warn!(
            refused = n,
            "refused {what} from Redis: it is not sealed with the app's secret (forged, \
             damaged, or written by an app with another secret or none)"
        );
    }
}

/// Values this process refused since it started.
pub(crate) fn refused() -> u64 {
    REFUSED.load(Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_checks_only_for_its_kind_parts_and_key() {
        let key = DataKey::new(b"0123456789abcdef").unwrap();
        let seal = key.seal(Sealed::Job, &[b"mails", b"{}"]);
        assert_eq!(seal.len(), 64);
        assert!(key.verify(Sealed::Job, &[b"mails", b"{}"], seal.as_bytes()));
        assert!(!key.verify(Sealed::HistoryEntry, &[b"mails", b"{}"], seal.as_bytes()));
        assert!(!key.verify(Sealed::Job, &[b"other", b"{}"], seal.as_bytes()));
        // The parts are length-prefixed: moving a byte from one to the next changes the seal.
        assert!(!key.verify(Sealed::Job, &[b"mail", b"s{}"], seal.as_bytes()));
        let other = DataKey::new(b"another secret, 16+").unwrap();
        assert!(!other.verify(Sealed::Job, &[b"mails", b"{}"], seal.as_bytes()));
        assert!(!key.verify(Sealed::Job, &[b"mails", b"{}"], &seal.as_bytes()[1..]));
        assert!(!key.verify(Sealed::Job, &[b"mails", b"{}"], b""));
        assert!(DataKey::new(b"short").is_err());
    }
}
