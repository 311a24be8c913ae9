//! [`LoginThrottle`]: refuses sign-in attempts for an account, or from an address, that failed
//! too often lately, so that passwords cannot be guessed at the server's speed.
//!
//! Each worker keeps its own counts (no server to talk to, nothing to wait for): with `N`
//! workers a guesser spread over all of them gets at most `N` times the limit before every
//! worker refuses. IPv6 addresses count by their /64 (one client usually holds a whole one).
//! The number of accounts and addresses tracked is bounded: past the bound, expired counts go
//! first, then those of a single failure; lockouts stay.
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr};
//! use brisk::http::login_throttle::{LoginThrottle, ThrottleOptions};
//!
//! let throttle = LoginThrottle::new(ThrottleOptions::default());
//! let from = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
//! for _ in 0..5 {
//!     assert!(throttle.check("ada", from).is_ok());
//!     throttle.failed("ada", from); // the password was wrong
//! }
//! let refused = throttle.check("ada", from).unwrap_err();
//! assert!(refused.retry_after.as_secs() > 0);
//! ```

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How many failures within a window lock an account or an address out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Failures that lock out.
    pub failures: u32,
    /// The window, counted from the first failure; the lockout lasts until it ends.
    pub window: Duration,
}

/// The limits of a [`LoginThrottle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleOptions {
    /// Per account name (whatever the address). Default: 5 failures in 15 minutes.
    pub per_account: Limit,
    /// Per client address (whatever the account). Default: 20 failures in 15 minutes.
    pub per_address: Limit,
    /// Accounts and addresses tracked at most (each about 100 bytes). Default 100,000.
    pub max_tracked: usize,
}

impl Default for ThrottleOptions {
    fn default() -> Self {
        let window = Duration::from_secs(15 * 60);
        ThrottleOptions {
            per_account: Limit {
                failures: 5,
                window,
            },
            per_address: Limit {
                failures: 20,
                window,
            },
            max_tracked: 100_000,
        }
    }
}

/// Which count refused an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThrottledBy {
    /// The account's.
    Account,
    /// The client address's.
    Address,
}

/// An attempt refused: answer `429 Too Many Requests` with `Retry-After` (it is a
/// `brisk::http::IntoResponse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many failed sign-ins {}; try again in {} s", match .by { ThrottledBy::Account => "for this account", ThrottledBy::Address => "from this address" }, .retry_after.as_secs().max(1))]
pub struct Throttled {
    /// Which count refused it.
    pub by: ThrottledBy,
    /// When the lockout ends.
    pub retry_after: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Account(String),
    Address(IpAddr),
}

#[derive(Debug, Clone, Copy)]
struct Count {
    failures: u32,
    since: Instant,
}

/// Failed sign-ins per account and per address, in one worker; cheap to clone (clones share
/// the counts), `Send + Sync` so that an axum router's state can hold it (the lock is never
/// contended: a worker runs one thread).
#[derive(Debug, Clone)]
pub struct LoginThrottle {
    options: ThrottleOptions,
    counts: Arc<Mutex<HashMap<Key, Count>>>,
}

impl LoginThrottle {
    /// The counts (a panic while they were held left nothing half-changed that matters).
    fn counts(&self) -> MutexGuard<'_, HashMap<Key, Count>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A throttle with these limits and nothing counted yet.
    pub fn new(options: ThrottleOptions) -> Self {
        LoginThrottle {
            options,
            counts: Arc::default(),
        }
    }

    /// Whether an attempt for `account` from `address` may be checked at all; ask before
    /// checking the password.
    pub fn check(&self, account: &str, address: IpAddr) -> Result<(), Throttled> {
        let now = Instant::now();
        let counts = self.counts();
        let locked = |key: &Key, limit: Limit, by: ThrottledBy| {
            let count = counts.get(key)?;
            let ends = count.since + limit.window;
            (count.failures >= limit.failures && ends > now).then(|| Throttled {
                by,
                retry_after: ends - now,
            })
        };
        let o = &self.options;
        match locked(&account_key(account), o.per_account, ThrottledBy::Account) {
            Some(t) => Err(t),
            None => match locked(&address_key(address), o.per_address, ThrottledBy::Address) {
                Some(t) => Err(t),
                None => Ok(()),
            },
        }
    }

    /// Counts a failed attempt (a wrong password, or an unknown account).
    pub fn failed(&self, account: &str, address: IpAddr) {
        let now = Instant::now();
        let mut counts = self.counts();
        if counts.len() + 2 > self.options.max_tracked {
            self.make_room(&mut counts, now);
        }
        let o = &self.options;
        for (key, limit) in [
            (account_key(account), o.per_account),
            (address_key(address), o.per_address),
        ] {
            let count = counts.entry(key).or_insert(Count {
                failures: 0,
                since: now,
            });
            if count.since + limit.window <= now {
                *count = Count {
                    failures: 0,
                    since: now,
                };
            }
            count.failures = count.failures.saturating_add(1);
        }
    }

    /// Clears the account's failures after a successful sign-in (the address's stay: one
    /// good password does not excuse guesses at other accounts).
    pub fn succeeded(&self, account: &str) {
        self.counts().remove(&account_key(account));
    }

    /// Accounts and addresses tracked now.
    pub fn tracked(&self) -> usize {
        self.counts().len()
    }

    fn make_room(&self, counts: &mut HashMap<Key, Count>, now: Instant) {
        let window = self
            .options
            .per_account
            .window
            .max(self.options.per_address.window);
        counts.retain(|_, c| c.since + window > now);
        if counts.len() + 2 > self.options.max_tracked {
            counts.retain(|_, c| c.failures > 1);
        }
        if counts.len() + 2 > self.options.max_tracked {
            // Every one a repeat offender: forget the oldest half rather than grow.
            let mut ages: Vec<Instant> = counts.values().map(|c| c.since).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            counts.retain(|_, c| c.since > cut);
        }
    }
}

fn account_key(account: &str) -> Key {
    Key::Account(account.to_lowercase())
}

/// An IPv4 address as it is; an IPv6 address by its /64 (IPv4-mapped ones as IPv4).
fn address_key(address: IpAddr) -> Key {
    Key::Address(match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn quick(failures: u32, window_ms: u64) -> Limit {
        Limit {
            failures,
            window: Duration::from_millis(window_ms),
        }
    }

    #[test]
    fn an_account_locks_after_its_failures_and_unlocks_after_the_window() {
        let t = LoginThrottle::new(ThrottleOptions {
            per_account: quick(3, 200),
            ..ThrottleOptions::default()
        });
        for i in 0..3 {
            assert!(t.check("Ada", ip("10.0.0.1")).is_ok());
            t.failed("Ada", ip(&format!("10.0.0.{i}")));
        }
        // From any address, in any case.
        let refused = t.check("ada", ip("10.9.9.9")).unwrap_err();
        assert_eq!(refused.by, ThrottledBy::Account);
        assert!(refused.retry_after <= Duration::from_millis(200));
        assert!(t.check("grace", ip("10.9.9.9")).is_ok());
        std::thread::sleep(Duration::from_millis(250)); // the window under test
        assert!(t.check("ada", ip("10.9.9.9")).is_ok());
    }

    #[test]
    fn an_address_locks_after_failures_on_many_accounts() {
        let t = LoginThrottle::new(ThrottleOptions {
            per_address: quick(4, 60_000),
            ..ThrottleOptions::default()
        });
        for i in 0..4 {
            t.failed(&format!("user{i}"), ip("2001:db8::1"));
        }
        // The same /64.
        let refused = t.check("someone", ip("2001:db8::abcd")).unwrap_err();
        assert_eq!(refused.by, ThrottledBy::Address);
        assert!(
            refused.to_string().contains("from this address"),
            "{refused}"
        );
        assert!(t.check("someone", ip("2001:db8:0:1::1")).is_ok());
    }

    #[test]
    fn success_clears_the_account_not_the_address() {
        let t = LoginThrottle::new(ThrottleOptions {
            per_account: quick(2, 60_000),
            per_address: quick(3, 60_000),
            ..ThrottleOptions::default()
        });
        t.failed("ada", ip("10.0.0.1"));
        t.failed("ada", ip("10.0.0.1"));
        assert!(t.check("ada", ip("10.0.0.2")).is_err());
        t.succeeded("ada");
        assert!(t.check("ada", ip("10.0.0.2")).is_ok());
        t.failed("bob", ip("10.0.0.1"));
        assert_eq!(
            t.check("carol", ip("10.0.0.1")).unwrap_err().by,
            ThrottledBy::Address
        );
    }

    #[test]
    fn the_tracked_counts_stay_bounded_and_lockouts_survive() {
        let t = LoginThrottle::new(ThrottleOptions {
            per_account: quick(2, 60_000),
            max_tracked: 100,
            ..ThrottleOptions::default()
        });
        t.failed("victim", ip("10.0.0.1"));
        t.failed("victim", ip("10.0.0.1"));
        for i in 0..10_000u32 {
            t.failed(&format!("spray{i}"), IpAddr::from(i.to_be_bytes()));
        }
        assert!(t.tracked() <= 100, "{}", t.tracked());
        assert!(t.check("victim", ip("10.1.1.1")).is_err());
    }
}
