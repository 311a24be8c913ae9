//! The job-queue lab's Brisk side (`bench/queue.sh`, against BullMQ in
//! `bench/peers/node/queue.js`): one job is `{"n": N}`, whose consumer computes 1² + … + N².
//!
//! ```text
//! LAB_REDIS=redis://127.0.0.1:6390 LAB_HTTP=http://127.0.0.1:8090 queue_lab start
//!     GET / answers "Hello World"; GET /enqueue pushes a job first (1 worker)
//! LAB_REDIS=… LAB_CONSUMERS=4 queue_lab start
//!     a custom process `consumer` runs the jobs, 4 at a time
//! LAB_REDIS=… queue_lab push JOBS IN_FLIGHT
//!     pushes JOBS jobs, IN_FLIGHT at a time, waits until none is left queued or running, and
//!     prints {"jobs", "seconds", "cpu_seconds"} (its own CPU time) as JSON
//! LAB_REDIS=… queue_lab fill JOBS IN_FLIGHT
//!     the same without the wait: fills the queue for a consumer started after
//! LAB_REDIS=… queue_lab drain
//!     waits until a consumer has taken the first job, then until none is left queued or
//!     running, and prints {"jobs", "seconds"}: the jobs and the time from that first take
//! ```
//!
//! The queue is `lab`, with the library's default options. `LAB_RUN_DIR` sets the run directory
//! (pid file, control socket).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use brisk::http::{Body, HttpServer};
use brisk::queue::{Queue, QueueOptions};
use brisk::redis::{Redis, RedisOptions};
use brisk::{App, Process};

const PAYLOAD: &[u8] = br#"{"n":1000}"#;

fn queue() -> Queue {
    let url = std::env::var("LAB_REDIS").expect("LAB_REDIS=redis://host:port");
    let redis = Redis::new(&url, RedisOptions::default()).expect("a Redis URL");
    Queue::new(redis, "lab", QueueOptions::default())
}

/// The job: 1² + … + n².
fn sum_of_squares(job: &brisk::queue::Job) -> Result<u128, brisk::BoxError> {
    let v: serde_json::Value = job.json()?;
    let n = u128::from(v["n"].as_u64().unwrap_or(0));
    Ok(n * (n + 1) * (2 * n + 1) / 6)
}

/// This process's user and system CPU time, in seconds.
fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Jobs queued, delayed or running.
async fn left(queue: &Queue) -> u64 {
    let d = queue.depths().await.expect("depths");
    d.ready + d.delayed + d.running
}

/// Pushes `jobs` jobs, `in_flight` at a time, then (if `wait`) waits until the queue is empty.
async fn push(jobs: usize, in_flight: usize, wait: bool) {
    let queue = queue();
    let start = Instant::now();
    let next = std::cell::Cell::new(0);
    let pushers = (0..in_flight).map(|_| async {
        while next.get() < jobs {
            next.set(next.get() + 1);
            queue.push(PAYLOAD).await.expect("push");
        }
    });
    futures_util::future::join_all(pushers).await;
    while wait && left(&queue).await > 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({ "jobs": jobs, "seconds": seconds, "cpu_seconds": cpu_seconds() })
    );
}

/// Waits for the first take from a full queue, then until it is empty.
async fn drain() {
    let queue = queue();
    let full = left(&queue).await;
    while left(&queue).await == full {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let start = Instant::now();
    while left(&queue).await > 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({ "jobs": full, "seconds": seconds })
    );
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or_default();
    if matches!(mode, "push" | "fill" | "drain") {
        let number = |i: usize| args.get(i).and_then(|v| v.parse().ok());
        let (jobs, in_flight) = (number(2).unwrap_or(10_000), number(3).unwrap_or(50));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        match mode {
            "drain" => runtime.block_on(drain()),
            _ => runtime.block_on(push(jobs, in_flight, mode == "push")),
        }
        return ExitCode::SUCCESS;
    }
    let mut app = App::new("queue-lab");
    if let Ok(dir) = std::env::var("LAB_RUN_DIR") {
        app = app.run_dir(dir);
    }
    if let Ok(addr) = std::env::var("LAB_HTTP") {
        let http = HttpServer::new(&addr)
            .expect("LAB_HTTP=http://host:port")
            .workers(1)
            .handler(|req| async move {
                if req.uri().path() == "/enqueue" {
                    thread_local!(static QUEUE: Queue = queue());
                    let q = QUEUE.with(Queue::clone);
                    if let Err(e) = q.push(PAYLOAD).await {
                        return http::Response::builder()
                            .status(e.http_status())
                            .body(Body::from(e.to_string()))
                            .expect("a response");
                    }
                }
                http::Response::new(Body::from("Hello World"))
            });
        app = app.server(http);
    }
    if let Some(n) = std::env::var("LAB_CONSUMERS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        let consumer = Process::new("consumer").run(move |_| async move {
            queue()
                .consume(n, |job| async move {
                    std::hint::black_box(sum_of_squares(&job)?);
                    Ok(())
                })
                .await
        });
        app = app.process(consumer);
    }
    app.run()
}
