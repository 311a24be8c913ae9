//! POSTs alert events as JSON through Brisk's HTTP client, from the master. Nothing waits on
//! it: each call runs as its own task with a 5 s timeout, at most [`MAX_IN_FLIGHT`] at once
//! (more are dropped and counted), and failures are counted and logged at most once a minute.
//!
//! The client's connection pool is made on the first call, long after the master has started
//! its workers (which it starts by running the program again, not by forking a copy of
//! itself), so no worker inherits it.

use std::cell::Cell;
use std::rc::Rc;

use crate::alerts::AlertEvent;
use crate::error::{Error, Result};
use crate::redact::origin_only;

/// Calls that may run at once; past it a call is dropped (and counted as failed).
const MAX_IN_FLIGHT: usize = 8;
/// How long a call may take.
#[cfg(feature = "client")]
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// At most one failure is logged per this long.
#[cfg(feature = "client")]
const LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// A webhook and what became of its calls.
pub(crate) struct Webhook {
    #[cfg(feature = "client")]
    url: String,
    #[cfg(feature = "client")]
    client: crate::http::client::HttpClient,
    state: Rc<State>,
}

#[derive(Default)]
struct State {
    in_flight: Cell<usize>,
    failures: Cell<u64>,
    #[cfg(feature = "client")]
    last_logged: Cell<Option<std::time::Instant>>,
}

impl Webhook {
    /// A webhook at `url` (`http://` or `https://`).
    pub(crate) fn new(url: &str) -> Result<Self> {
        if !(url.starts_with("http://") || url.starts_with("https://"))
            || url.parse::<http::Uri>().is_err()
        {
            return Err(Error::Config(format!(
                "alert webhook {:?}: write it http://host:port/path or https://…",
                origin_only(url)
            )));
        }
        #[cfg(feature = "client")]
        {
            use crate::http::client::{ClientOptions, HttpClient};
            Ok(Webhook {
                url: url.to_string(),
                client: HttpClient::new(ClientOptions::default()),
                state: Rc::default(),
            })
        }
        #[cfg(not(feature = "client"))]
        Err(Error::Config(format!(
            "alert webhook {}: Brisk was built without its HTTP client (feature `client`)",
            origin_only(url)
        )))
    }

    /// Sends `event` in the background.
    pub(crate) fn post(&self, event: AlertEvent) {
        let state = self.state.clone();
        if state.in_flight.get() >= MAX_IN_FLIGHT {
            state.failures.set(state.failures.get() + 1);
            return;
        }
        #[cfg(feature = "client")]
        {
            state.in_flight.set(state.in_flight.get() + 1);
            let call = self
                .client
                .post(&self.url)
                .json(&event)
                .timeout(TIMEOUT)
                .send();
            let url = origin_only(&self.url).into_owned();
            tokio::task::spawn_local(async move {
                let why = match call.await {
                    Ok(r) if r.status().is_success() => None,
                    Ok(r) => Some(format!("it answered {}", r.status())),
                    Err(e) => Some(e.to_string()),
                };
                state.in_flight.set(state.in_flight.get() - 1);
                if let Some(why) = why {
                    state.failures.set(state.failures.get() + 1);
                    let due = state
                        .last_logged
                        .get()
                        .is_none_or(|t| t.elapsed() >= LOG_EVERY);
                    if due {
                        state.last_logged.set(Some(std::time::Instant::now()));
                        tracing::warn!(
                            failures = state.failures.get(),
                            "alert webhook {url}: {why} (failures are logged at most once a \
                             minute)"
                        );
                    }
                }
            });
        }
        #[cfg(not(feature = "client"))]
        drop(event);
    }

    /// Calls that failed or were dropped.
    pub(crate) fn failures(&self) -> u64 {
        self.state.failures.get()
    }
}
