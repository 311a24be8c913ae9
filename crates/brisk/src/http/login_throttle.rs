//! [`LoginThrottle`]: refuses sign-in attempts for an account, or from an address, that failed
//! too often lately, so that passwords cannot be guessed at the server's speed.
//!
//! An attempt is reserved before the password is checked ([`LoginThrottle::attempt`]) and
//! counts against the limits while it is in flight, so a burst of parallel guesses gets no
//! more tries than a sequence of them; an attempt that ends in anything but
//! [`Attempt::succeeded`] — a wrong password, an unknown account, a busy password check, an
//! error, a client that hung up — counts as a failure.
//!
//! Each worker keeps its own counts (no server to talk to, nothing to wait for): with `N`
//! workers a guesser spread over all of them gets at most `N` times the limit before every
//! worker refuses. IPv6 addresses count by their /64 (one client usually holds a whole one).
//! The number of accounts and addresses tracked is bounded: past the bound, expired counts go
//! first, then those of a single failure; lockouts and attempts in flight stay.
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr};
//! use brisk::http::login_throttle::{LoginThrottle, ThrottleOptions};
//!
//! let throttle = LoginThrottle::new(ThrottleOptions::default());
//! let from = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
//! for _ in 0..5 {
//!     let attempt = throttle.attempt("ada", from).unwrap();
//!     // … the password was wrong:
//!     attempt.failed();
//! }
//! let refused = throttle.attempt("ada", from).unwrap_err();
//! assert!(refused.retry_after.as_secs() > 0);
//! ```

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How many failures within a window lock an account or an address out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Failures that lock out (attempts in flight count as failures until they end).
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

/// One account's or address's failures in the current window, and its attempts in flight.
#[derive(Debug, Clone, Copy)]
struct Count {
    failures: u32,
    in_flight: u32,
    since: Instant,
}

impl Count {
    fn new(now: Instant) -> Self {
        Count {
            failures: 0,
            in_flight: 0,
            since: now,
        }
    }

    /// Starts a new window if this one has ended (attempts in flight stay).
    fn renew(&mut self, limit: Limit, now: Instant) {
        if self.since + limit.window <= now {
            self.failures = 0;
            self.since = now;
        }
    }

    /// Nothing counted: the entry can go.
    fn is_empty(&self) -> bool {
        self.failures == 0 && self.in_flight == 0
    }
}

/// Failed sign-ins per account and per address, in one worker; cheap to clone (clones share
/// the counts), `Send + Sync` so that an axum router's state can hold it (the lock is never
/// contended: a worker runs one thread).
#[derive(Debug, Clone)]
pub struct LoginThrottle {
    options: ThrottleOptions,
    counts: Arc<Mutex<HashMap<Key, Count>>>,
}

/// A sign-in attempt admitted by [`LoginThrottle::attempt`], counted against both limits until
/// it ends. End it with [`Attempt::succeeded`] when the password was right; anything else —
/// [`Attempt::failed`], or dropping it (a busy password check, an error, a cancelled request) —
/// counts a failure, so an attacker gains nothing by making attempts end early.
#[derive(Debug)]
#[must_use = "an attempt counts as a failure unless `succeeded` is called"]
pub struct Attempt {
    throttle: LoginThrottle,
    account: Key,
    address: Key,
    ended: bool,
}

impl Attempt {
    /// The password was right: the account's failures are cleared (the address's stay: one
    /// good password does not excuse guesses at other accounts).
    pub fn succeeded(mut self) {
        self.ended = true;
        let mut counts = self.throttle.counts();
        if let Some(c) = counts.get_mut(&self.account) {
            c.in_flight = c.in_flight.saturating_sub(1);
            c.failures = 0;
        }
        if let Some(c) = counts.get_mut(&self.address) {
            c.in_flight = c.in_flight.saturating_sub(1);
        }
        for key in [&self.account, &self.address] {
            if counts.get(key).is_some_and(Count::is_empty) {
                counts.remove(key);
            }
        }
    }

    /// The password was wrong, or the account unknown: one failure for each (as dropping).
    pub fn failed(self) {}

    fn count_failure(&mut self) {
        let now = Instant::now();
        let o = self.throttle.options;
        let mut counts = self.throttle.counts();
        for (key, limit) in [
            (&self.account, o.per_account),
            (&self.address, o.per_address),
        ] {
            // Made room for meanwhile: counted afresh.
            let c = counts.entry(key.clone()).or_insert_with(|| Count::new(now));
            c.in_flight = c.in_flight.saturating_sub(1);
            c.renew(limit, now);
            c.failures = c.failures.saturating_add(1);
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.ended {
            self.ended = true;
            self.count_failure();
        }
    }
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

    /// Admits an attempt for `account` from `address` — ask before checking the password — or
    /// refuses it when the failures and the attempts in flight of either reach their limit.
    pub fn attempt(&self, account: &str, address: IpAddr) -> Result<Attempt, Throttled> {
        let now = Instant::now();
        let o = self.options;
        let (account, address) = (account_key(account), address_key(address));
        let mut counts = self.counts();
        if counts.len() + 2 > o.max_tracked {
            self.make_room(&mut counts, now);
        }
        for (key, limit, by) in [
            (&account, o.per_account, ThrottledBy::Account),
            (&address, o.per_address, ThrottledBy::Address),
        ] {
            let Some(c) = counts.get_mut(key) else {
                continue;
            };
            c.renew(limit, now);
            if c.failures.saturating_add(c.in_flight) >= limit.failures {
                return Err(Throttled {
                    by,
                    retry_after: (c.since + limit.window).saturating_duration_since(now),
                });
            }
        }
        for key in [&account, &address] {
            let c = counts.entry(key.clone()).or_insert_with(|| Count::new(now));
            c.in_flight += 1;
        }
        drop(counts);
        Ok(Attempt {
            throttle: self.clone(),
            account,
            address,
            ended: false,
        })
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
        counts.retain(|_, c| c.in_flight > 0 || c.since + window > now);
        if counts.len() + 2 > self.options.max_tracked {
            counts.retain(|_, c| c.in_flight > 0 || c.failures > 1);
        }
        if counts.len() + 2 > self.options.max_tracked {
            // Every one a repeat offender: forget the oldest half rather than grow.
            let mut ages: Vec<Instant> = counts.values().map(|c| c.since).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            counts.retain(|_, c| c.in_flight > 0 || c.since > cut);
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

    /// An attempt that failed.
    fn fail(t: &LoginThrottle, account: &str, from: &str) {
        t.attempt(account, ip(from)).unwrap().failed();
    }

    #[test]
    fn an_account_locks_after_its_failures_and_unlocks_after_the_window() {
        let t = LoginThrottle::new(ThrottleOptions {
            per_account: quick(3, 200),
            ..ThrottleOptions::default()
        });
        for i in 0..3 {
            fail(&t, "Ada", &format!("10.0.0.{i}"));
        }
        // From any address, in any case.
        let refused = t.attempt("ada", ip("10.9.9.9")).unwrap_err();
        assert_eq!(refused.by, ThrottledBy::Account);
        assert!(refused.retry_after <= Duration::from_millis(200));
        t.attempt("grace", ip("10.9.9.9")).unwrap().succeeded();
        std::thread::sleep(Duration::from_millis(250)); // the window under test
        t.attempt("ada", ip("10.9.9.9")).unwrap().succeeded();
    }

    #[test]
    fn attempts_in_flight_count_and_any_end_but_success_is_a_failure() {
        let t = LoginThrottle::new(ThrottleOptions {
            per_account: quick(3, 60_000),
            ..ThrottleOptions::default()
        });
        // Three at once, none ended yet: the fourth is refused already.
        let flying: Vec<Attempt> = (0..3)
            .map(|_| t.attempt("ada", ip("10.0.0.1")).unwrap())
            .collect();
        assert_eq!(
            t.attempt("ada", ip("10.0.0.1")).unwrap_err().by,
            ThrottledBy::Account
        );
        // One succeeds: its slot and the account's failures are freed.
        let mut flying = flying.into_iter();
        flying.next().unwrap().succeeded();
        let fourth = t.attempt("ada", ip("10.0.0.1")).unwrap();
        // The others dropped (a busy check, a hang-up): failures, so still locked.
        drop(flying);
        drop(fourth);
        assert!(t.attempt("ada", ip("10.0.0.1")).is_err());
    }

    #[test]
    fn an_address_locks_after_failures_on_many_accounts() {
        let t = LoginThrottle::new(ThrottleOptions {
            per_address: quick(4, 60_000),
            ..ThrottleOptions::default()
        });
        for i in 0..4 {
            fail(&t, &format!("user{i}"), "2001:db8::1");
        }
        // The same /64.
        let refused = t.attempt("someone", ip("2001:db8::abcd")).unwrap_err();
        assert_eq!(refused.by, ThrottledBy::Address);
        assert!(
            refused.to_string().contains("from this address"),
            "{refused}"
        );
        t.attempt("someone", ip("2001:db8:0:1::1"))
            .unwrap()
            .succeeded();
    }

    #[test]
    fn success_clears_the_account_not_the_address() {
        let t = LoginThrottle::new(ThrottleOptions {
            per_account: quick(3, 60_000),
            per_address: quick(4, 60_000),
            ..ThrottleOptions::default()
        });
        fail(&t, "ada", "10.0.0.1");
        fail(&t, "ada", "10.0.0.1");
        t.attempt("ada", ip("10.0.0.2")).unwrap().succeeded();
        // Three more would lock the account only if the two before still counted.
        fail(&t, "ada", "10.0.0.2");
        fail(&t, "ada", "10.0.0.2");
        t.attempt("ada", ip("10.0.0.3")).unwrap().succeeded();
        fail(&t, "bob", "10.0.0.1");
        fail(&t, "bob", "10.0.0.1");
        assert_eq!(
            t.attempt("carol", ip("10.0.0.1")).unwrap_err().by,
            ThrottledBy::Address
        );
        assert_eq!(
            t.tracked(),
            3,
            "ada cleared; bob, 10.0.0.1 and 10.0.0.2 kept"
        );
    }

    #[test]
    fn the_tracked_counts_stay_bounded_and_lockouts_survive() {
        let t = LoginThrottle::new(ThrottleOptions {
            per_account: quick(2, 60_000),
            max_tracked: 100,
            ..ThrottleOptions::default()
        });
        fail(&t, "victim", "10.0.0.1");
        fail(&t, "victim", "10.0.0.1");
        for i in 0..10_000u32 {
            let from = IpAddr::from(i.to_be_bytes());
            t.attempt(&format!("spray{i}"), from).unwrap().failed();
        }
        assert!(t.tracked() <= 100, "{}", t.tracked());
        assert!(t.attempt("victim", ip("10.1.1.1")).is_err());
    }
}
