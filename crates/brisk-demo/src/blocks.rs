//! Report R2.3: a page assembled from data blocks kept in a cache and merged into one JSON
//! document (`/blocks?n=5` and `/blocks?n=45`).
//!
//! Each block is a small JSON document (a title, a date and five linked items, ~500 bytes)
//! stored ready-made. With `--redis` the blocks are fetched with one `MGET` of
//! `brisk:block:1…n`; a request that finds one missing writes all 45 (over any that exist) and reads again; without, they come
//! from this worker's memory. Either way they are merged as text, never parsed again.

use std::fmt::Write;
use std::rc::Rc;

use brisk::http::Body;
use brisk::redis::{Redis, RedisError};
use http::{header, HeaderValue, Response, StatusCode};

/// The most blocks one page may ask for (R2.3 measures 5 and 45).
pub(crate) const MAX_BLOCKS: usize = 45;

/// The blocks of one worker; cheap to clone.
#[derive(Clone)]
pub(crate) struct Blocks {
    /// Every block, in order: the in-worker cache, and what Redis is filled with.
    local: Rc<[String]>,
    /// Their Redis keys, `brisk:block:1…45`, made once.
    keys: Rc<[String]>,
    redis: Option<Redis>,
}

impl Blocks {
    /// The blocks, served from `redis` when given, else from memory.
    pub(crate) fn new(redis: Option<Redis>) -> Self {
        Blocks {
            local: (1..=MAX_BLOCKS).map(block).collect(),
            keys: (1..=MAX_BLOCKS)
                .map(|i| format!("brisk:block:{i}"))
                .collect(),
            redis,
        }
    }

    /// `GET /blocks?n=N`: `{"n":N,"blocks":[…]}`; 400 for an `n` outside 1…45, 503 when Redis
    /// is down.
    pub(crate) async fn page(&self, query: Option<&str>) -> Response<Body> {
        let n = match count(query) {
            Ok(n) => n,
            Err(message) => return json_error(StatusCode::BAD_REQUEST, &message),
        };
        let Some(redis) = &self.redis else {
            return merged(n, &self.local[..n]);
        };
        match self.read_redis(redis, n).await {
            Ok(blocks) => merged(n, &blocks),
            Err(e) => {
                tracing::warn!("/blocks: {e}");
                let status = StatusCode::from_u16(e.http_status())
                    .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
                json_error(status, e.client_message())
            }
        }
    }

    /// Blocks 1…n from Redis in one MGET; if any is missing (first use, or after a flush or
    /// restart), writes all of them and reads again.
    async fn read_redis(&self, redis: &Redis, n: usize) -> Result<Vec<String>, RedisError> {
        let keys = &self.keys[..n];
        let held: Vec<Option<String>> = redis.mget(keys).await?;
        if let Some(all) = held.into_iter().collect::<Option<Vec<_>>>() {
            return Ok(all);
        }
        let mut mset = brisk::redis::cmd("MSET");
        for (k, b) in self.keys.iter().zip(self.local.iter()) {
            mset.arg(k).arg(b);
        }
        redis.run::<()>(&mset).await?;
        let held: Vec<Option<String>> = redis.mget(keys).await?;
        held.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| {
            RedisError::Unavailable("blocks vanished from Redis as they were written".into())
        })
    }
}

/// `{"n":N,"blocks":[…]}` with the blocks written in as they are, not parsed again.
fn merged(n: usize, blocks: &[String]) -> Response<Body> {
    let mut body = String::with_capacity(16 + blocks.iter().map(|b| b.len() + 1).sum::<usize>());
    let _ = write!(body, r#"{{"n":{n},"blocks":["#);
    for (i, b) in blocks.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(b);
    }
    body.push_str("]}");
    let mut r = Response::new(Body::from(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Block `i`: a titled list of five links, as a news site's side boxes are.
fn block(i: usize) -> String {
    let items: Vec<String> = (1..=5)
        .map(|j| {
            format!(
                r#"{{"title":"Story {j} of block {i}","href":"/blocks/{i}/stories/{j}","summary":"A short summary of story {j}, the kind a side box shows."}}"#
            )
        })
        .collect();
    format!(
        r#"{{"id":{i},"title":"Block {i}","updated":"2026-11-23T12:00:00Z","items":[{}]}}"#,
        items.join(",")
    )
}

/// `n` from the query: 5 when absent, else a number from 1 to [`MAX_BLOCKS`].
fn count(query: Option<&str>) -> Result<usize, String> {
    let raw = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("n="));
    match raw {
        None => Ok(5),
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if (1..=MAX_BLOCKS).contains(&n) => Ok(n),
            _ => Err(format!(
                "n={raw:?}: a number of blocks from 1 to {MAX_BLOCKS}"
            )),
        },
    }
}

fn json_error(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_checked() {
        assert_eq!(count(None), Ok(5));
        assert_eq!(count(Some("n=45")), Ok(45));
        assert_eq!(count(Some("x=1&n=1")), Ok(1));
        for bad in ["n=0", "n=46", "n=abc", "n=", "n=-1"] {
            assert!(count(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_block_is_json() {
        for i in 1..=MAX_BLOCKS {
            let v: serde_json::Value = serde_json::from_str(&block(i)).unwrap();
            assert_eq!(v["id"], i);
            assert_eq!(v["items"].as_array().unwrap().len(), 5);
        }
    }
}
