//! Background jobs through Brisk's Redis queue (with `--redis`): `POST /jobs` with
//! `{"n": N}` enqueues a job that the demo's `jobs` process runs (the sum of the squares of
//! 1…N, kept for an hour), and `GET /jobs/ID` shows its state and result. Without `--redis`
//! both answer 503 naming the flag.

use std::time::Duration;

use brisk::http::{Body, RequestBody};
use brisk::queue::{Job, Queue, QueueOptions};
use brisk::redis::{cmd, Redis, RedisError};
use brisk::Process;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;

/// The queue's name.
const QUEUE: &str = "demo-jobs";
/// Jobs the `jobs` process runs at once.
const CONCURRENCY: usize = 4;
/// The largest `n` a job takes.
const MAX_N: u64 = 100_000_000;

/// The `/jobs` routes of one worker.
#[derive(Clone)]
pub(crate) struct Jobs {
    queue: Option<(Queue, Redis)>,
}

fn queue_of(redis: Redis) -> Queue {
    Queue::new(redis, QUEUE, QueueOptions::default())
}

/// Where a job's result is kept.
fn result_key(id: u64) -> String {
    format!("brisk-demo:job-result:{id}")
}

impl Jobs {
    /// The routes, on `redis` if the demo has one.
    pub(crate) fn new(redis: Option<Redis>) -> Self {
        Jobs {
            queue: redis.map(|r| (queue_of(r.clone()), r)),
        }
    }

    /// `POST /jobs` and `GET /jobs/ID`; `None` for other paths.
    pub(crate) async fn route(
        &self,
        req: http::Request<RequestBody>,
    ) -> Result<Response<Body>, http::Request<RequestBody>> {
        let path = req.uri().path();
        let post = req.method() == http::Method::POST && path == "/jobs";
        let id = path.strip_prefix("/jobs/").map(str::to_string);
        if !post && id.is_none() {
            return Err(req);
        }
        let Some((queue, redis)) = &self.queue else {
            return Ok(json(
                StatusCode::SERVICE_UNAVAILABLE,
                r#"{"error":"jobs need Redis: start the demo with --redis redis://host:port"}"#
                    .to_string(),
            ));
        };
        if post {
            return Ok(push(queue, req).await);
        }
        Ok(show(queue, redis, id.as_deref().unwrap_or("")).await)
    }
}

async fn push(queue: &Queue, req: http::Request<RequestBody>) -> Response<Body> {
    let Ok(body) = req.into_body().collect().await else {
        return error(StatusCode::BAD_REQUEST, "cannot read the request body");
    };
    let n = serde_json::from_slice::<serde_json::Value>(&body.to_bytes())
        .ok()
        .and_then(|v| v["n"].as_u64())
        .filter(|n| *n <= MAX_N);
    let Some(n) = n else {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("send JSON {{\"n\": N}} with N from 0 to {MAX_N}"),
        );
    };
    match queue.push(format!(r#"{{"n":{n}}}"#).into_bytes()).await {
        Ok(id) => json(StatusCode::ACCEPTED, format!(r#"{{"id":{id}}}"#)),
        Err(e) => redis_error(e),
    }
}

async fn show(queue: &Queue, redis: &Redis, id: &str) -> Response<Body> {
    let Ok(id) = id.parse::<u64>() else {
        return error(StatusCode::BAD_REQUEST, "a job id is a number");
    };
    let state = match queue.job(id).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return error(
                StatusCode::NOT_FOUND,
                "no such job (or done over an hour ago)",
            )
        }
        Err(e) => return redis_error(e),
    };
    let result: Option<String> = match redis.get(&result_key(id)).await {
        Ok(r) => r,
        Err(e) => return redis_error(e),
    };
    let body = serde_json::json!({
        "id": id,
        "state": state.state,
        "attempts": state.attempts,
        "last_error": state.last_error,
        "result": result.and_then(|r| r.parse::<u128>().ok()).map(|r| r.to_string()),
    });
    json(StatusCode::OK, body.to_string())
}

/// The `jobs` process: runs the queue's jobs, [`CONCURRENCY`] at a time.
pub(crate) fn consumer(redis: Redis) -> Process {
    Process::new("jobs").run(move |_| {
        let redis = redis.clone();
        async move {
            let queue = queue_of(redis.clone());
            queue
                .consume(CONCURRENCY, move |job| run(job, redis.clone()))
                .await
        }
    })
}

/// One job: the sum of the squares of 1…n, kept under the job's id for an hour (so a second
/// run of the same job writes the same value: the job is idempotent).
async fn run(job: Job, redis: Redis) -> Result<(), brisk::BoxError> {
    #[derive(serde::Deserialize)]
    struct Payload {
        n: u64,
    }
    let Payload { n } = job.json()?;
    let n = u128::from(n.min(MAX_N));
    let sum = n * (n + 1) * (2 * n + 1) / 6;
    redis
        .run::<()>(
            cmd("SET")
                .arg(result_key(job.id))
                .arg(sum.to_string())
                .arg("EX")
                .arg(Duration::from_secs(3600).as_secs()),
        )
        .await?;
    Ok(())
}

fn redis_error(e: RedisError) -> Response<Body> {
    tracing::warn!("/jobs: {e}");
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    error(status, e.client_message())
}

/// A JSON error answer `{"error": message}`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response<Body> {
    json(status, serde_json::json!({ "error": message }).to_string())
}

/// A JSON answer.
pub(crate) fn json(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
