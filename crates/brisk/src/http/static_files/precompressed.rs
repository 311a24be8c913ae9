//! Precompressed siblings: for a request of `app.js` from a client that accepts brotli or
//! gzip, `app.js.br` or `app.js.gz` is sent when it exists, with the type of `app.js`,
//! `Content-Encoding` and `Vary: Accept-Encoding`. A sibling found missing is not looked for
//! again until the next check of the cache ([`StaticFiles::revalidate_after`](super::StaticFiles::revalidate_after)).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::HeaderValue;

use crate::http::accept_encoding::{choose, Encoding};

/// The most missing siblings remembered; past it the list starts over.
const MAX_REMEMBERED: usize = 4096;

/// Siblings looked for and not found, by path, with when.
#[derive(Default)]
pub(super) struct Missing(Mutex<HashMap<String, Instant>>);

impl Missing {
    /// Whether `path` was found missing less than `fresh_for` ago.
    pub(super) fn recently(&self, path: &str, fresh_for: Duration) -> bool {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(path).is_some_and(|at| at.elapsed() < fresh_for)
    }

    /// Remembers that `path` is missing.
    pub(super) fn insert(&self, path: String) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= MAX_REMEMBERED {
            map.clear();
        }
        map.insert(path, Instant::now());
    }
}

/// The encodings of a sibling worth trying for a client that sent `accept`, best first.
pub(super) fn candidates(accept: Option<&HeaderValue>) -> Vec<Encoding> {
    let Some(best) = choose(accept, [(true, Encoding::Brotli), (true, Encoding::Gzip)]) else {
        return Vec::new();
    };
    let other = match best {
        Encoding::Brotli => Encoding::Gzip,
        Encoding::Gzip => Encoding::Brotli,
    };
    let mut list = vec![best];
    if choose(accept, [(true, other)]).is_some() {
        list.push(other);
    }
    list
}

/// The file name suffix of a sibling in `encoding`.
pub(super) fn suffix(encoding: Encoding) -> &'static str {
    match encoding {
        Encoding::Brotli => ".br",
        Encoding::Gzip => ".gz",
    }
}
