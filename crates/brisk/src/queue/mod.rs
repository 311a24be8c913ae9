//! [`Queue`]: a job queue on Redis (feature `redis`), in the manner of webman's redis-queue.
//! Any handler or process pushes jobs ([`Queue::push`], [`Queue::push_delayed`]); consumers,
//! usually in a custom process, run them with a concurrency limit ([`Queue::consume`]).
//!
//! **Delivery is at least once.** A job taken by a consumer is held for the visibility
//! timeout; if the consumer does not finish it in that time (it was killed, or hung), the job
//! goes back to the queue and runs again. Make jobs idempotent (a second run of a job that
//! already took effect must change nothing), or record their results under the job's id.
//!
//! **Failures.** A job whose handler fails or panics runs again after a backoff (doubling from
//! [`QueueOptions::backoff`] up to [`QueueOptions::max_backoff`]); after
//! [`QueueOptions::max_attempts`] attempts it goes to the dead-letter list with its payload and
//! its last error. A payload the handler cannot read ([`Job::json`] fails with [`Malformed`])
//! goes there at once: retrying it cannot help.
//!
//! **Sealed.** In an app with a secret (`App::cluster_secret`), each job carries an HMAC over
//! its queue's name and payload; a job whose seal does not match (pushed by anyone else who
//! can write to Redis, or moved from another queue) never runs: it goes to the dead-letter
//! list at once and is counted (`redis_refused` in `status --json`). A copy of a genuine job
//! pushed again runs again, as a job may under at-least-once delivery anyway.
//!
//! **Redis down.** `push` fails at once with [`RedisError::Unavailable`]; consumers log it (at
//! most every 10 s), wait and resume, and lose nothing that Redis kept. What Redis keeps across
//! its own restart depends on its persistence: with `appendonly yes` every queued, delayed and
//! running job survives; with snapshots only (Redis's default `save` settings), the jobs
//! pushed since the last snapshot are lost; with neither, the whole queue is.

mod scripts;

use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::FutureExt;

use crate::redis::{cmd, Redis, RedisError};
use crate::redis_seal::Sealed;
use crate::runtime::handler::{panic_message, BoxError};

/// How a job failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    /// It is not sealed with the app's secret: it never runs.
    #[error(
        "refused: not sealed with the app's secret (forged, damaged, or pushed by an app with \
         another secret or none)"
    )]
    Unsealed,
    /// Its handler returned an error ([`Malformed`]: it is not retried).
    #[error("{0}")]
    Handler(BoxError),
    /// Its handler panicked.
    #[error("panicked: {0}")]
    Panicked(String),
}

impl Failure {
    /// Whether the job is tried again (after its backoff, up to its attempts).
    fn retried(&self) -> bool {
        match self {
            Failure::Unsealed => false,
            Failure::Handler(e) => e.downcast_ref::<Malformed>().is_none(),
            Failure::Panicked(_) => true,
        }
    }
}

/// How long a consumer waits to take jobs again after Redis failed it.
const TAKE_RETRY: Duration = Duration::from_millis(500);

/// The longest an idle consumer subscribed to its queue's wake-ups goes without looking.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// What the idle loops of one consumer share: whoever holds it is the one that waits and
/// looks, with the subscription to the queue's wake-up channel (`None` until subscribed, or
/// after the subscription's connection dropped).
type Idle = tokio::sync::Mutex<Option<::redis::aio::PubSubStream>>;

/// What a take found.
enum Taken {
    Job(Job),
    /// Nothing ready; when (ms since the epoch) the next delayed job falls due or a running
    /// job's time runs out, if any.
    Nothing(Option<u64>),
}

/// Waits for a message on `wake` (forever without a subscription) and takes any others
/// already there; false when the subscription's connection dropped.
async fn woken(wake: &mut Option<::redis::aio::PubSubStream>) -> bool {
    use futures_util::StreamExt;
    let Some(stream) = wake else {
        return std::future::pending().await;
    };
    if stream.next().await.is_none() {
        return false;
    }
    loop {
        match stream.next().now_or_never() {
            Some(Some(_)) => continue,
            Some(None) => return false,
            None => return true,
        }
    }
}

/// How a queue retries, holds and polls.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    /// Attempts before a failing job goes to the dead-letter list (default 3).
    pub max_attempts: u32,
    /// The wait before the first retry, doubling each time (default 1 s).
    pub backoff: Duration,
    /// The longest wait between retries (default 60 s).
    pub max_backoff: Duration,
    /// How long a consumer may take on a job before it goes back to the queue (default 30 s).
    pub visibility_timeout: Duration,
    /// How often an idle consumer looks for jobs while it cannot subscribe to the queue's
    /// wake-up channel (default 20 ms). Subscribed, it looks when a push makes the queue
    /// non-empty, when a delayed job falls due, and at least every second; however many jobs
    /// it runs at a time, one of its loops does the waiting.
    pub poll_interval: Duration,
    /// How long a done job's state stays readable with [`Queue::job`] (default 1 h).
    pub keep_done: Duration,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            max_attempts: 3,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            visibility_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_millis(20),
            keep_done: Duration::from_secs(3600),
        }
    }
}

/// A named queue on a Redis server; cheap to clone.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::redis::RedisError> {
/// use brisk::queue::{Queue, QueueOptions};
/// use brisk::redis::{Redis, RedisOptions};
///
/// let redis = Redis::new("redis://127.0.0.1:6379", RedisOptions::default())?;
/// let mails = Queue::new(redis, "mails", QueueOptions::default());
/// let id = mails.push(br#"{"to":"ann@example.com"}"#.to_vec()).await?;
/// // In a custom process: run them, 4 at a time, until the process stops.
/// mails
///     .consume(4, |job| async move {
///         let to: serde_json::Value = job.json()?;
///         tracing::info!(id = job.id, %to, "sending");
///         Ok(())
///     })
///     .await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Queue {
    redis: Redis,
    name: String,
    prefix: String,
    options: QueueOptions,
}

/// A job as a consumer gets it.
#[derive(Debug, Clone)]
pub struct Job {
    /// Its id, unique in its queue.
    pub id: u64,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// What was pushed.
    pub payload: Bytes,
}

/// A payload a consumer cannot read: the job goes to the dead-letter list at once.
#[derive(Debug, thiserror::Error)]
#[error("malformed payload: {0}")]
pub struct Malformed(pub String);

impl Job {
    /// The payload read as JSON into `T`; a [`Malformed`] error if it is not.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Malformed> {
        serde_json::from_slice(&self.payload).map_err(|e| Malformed(e.to_string()))
    }
}

/// A job's state as [`Queue::job`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobState {
    /// `queued`, `delayed`, `running`, `retrying`, `done` or `dead`.
    pub state: String,
    /// Attempts so far.
    pub attempts: u32,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// The payload.
    pub payload: Bytes,
}

/// How many jobs are where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueDepths {
    /// Waiting to run.
    pub ready: u64,
    /// Waiting for their time (delayed, or a retry's backoff).
    pub delayed: u64,
    /// Taken by a consumer.
    pub running: u64,
    /// In the dead-letter list.
    pub dead: u64,
}

/// Milliseconds since the Unix epoch, in a clock every machine sharing the queue agrees on.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Queue {
    /// The queue `name` on `redis`.
    pub fn new(redis: Redis, name: &str, options: QueueOptions) -> Self {
        Queue {
            redis,
            name: name.to_string(),
            prefix: format!("brisk:queue:{name}:"),
            options,
        }
    }

    fn key(&self, what: &str) -> String {
        format!("{}{what}", self.prefix)
    }

    /// The seal of a job of this queue with `payload` (empty in an app without a secret).
    fn seal(&self, payload: &[u8]) -> String {
        match crate::redis_seal::key(Sealed::Job) {
            Some(key) => key.seal(Sealed::Job, &[self.name.as_bytes(), payload]),
            None => String::new(),
        }
    }

    /// Whether a job taken with `payload` and `seal` may run: any, in an app without a
    /// secret; else one sealed for this queue with this payload.
    fn genuine(&self, payload: &[u8], seal: &[u8]) -> bool {
        match crate::redis_seal::key(Sealed::Job) {
            Some(key) => key.verify(Sealed::Job, &[self.name.as_bytes(), payload], seal),
            None => true,
        }
    }

    /// Adds a job to run as soon as a consumer is free; returns its id. Fails at once when
    /// Redis is down.
    pub async fn push(&self, payload: impl Into<Bytes>) -> Result<u64, RedisError> {
        self.push_at(payload.into(), 0).await
    }

    /// Adds a job to run once `delay` has passed; returns its id.
    pub async fn push_delayed(
        &self,
        payload: impl Into<Bytes>,
        delay: Duration,
    ) -> Result<u64, RedisError> {
        let due = now_ms() + delay.as_millis() as u64;
        self.push_at(payload.into(), due.max(1)).await
    }

    async fn push_at(&self, payload: Bytes, due_ms: u64) -> Result<u64, RedisError> {
        let id: u64 = self
            .redis
            .run(
                cmd("EVAL")
                    .arg(scripts::PUSH)
                    .arg(3)
                    .arg(self.key("seq"))
                    .arg(self.key("ready"))
                    .arg(self.key("delayed"))
                    .arg(payload.as_ref())
                    .arg(due_ms)
                    .arg(&self.prefix)
                    .arg(now_ms())
                    .arg(self.seal(&payload)),
            )
            .await?;
        crate::runtime::context::with_stats(|c| c.jobs_pushed.set(c.jobs_pushed.get() + 1));
        Ok(id)
    }

    /// Job `id`'s state, `None` if there is no such job (or it was done longer ago than
    /// [`QueueOptions::keep_done`]).
    pub async fn job(&self, id: u64) -> Result<Option<JobState>, RedisError> {
        let fields: Vec<Option<Vec<u8>>> = self
            .redis
            .run(
                cmd("HMGET")
                    .arg(self.key(&format!("job:{id}")))
                    .arg(&["state", "attempts", "last_error", "payload"][..]),
            )
            .await?;
        let text = |i: usize| {
            fields
                .get(i)
                .cloned()
                .flatten()
                .map(|v| String::from_utf8_lossy(&v).into_owned())
        };
        let Some(state) = text(0) else {
            return Ok(None);
        };
        Ok(Some(JobState {
            state,
            attempts: text(1).and_then(|a| a.parse().ok()).unwrap_or(0),
            last_error: text(2),
            payload: fields
                .get(3)
                .cloned()
                .flatten()
                .map(Bytes::from)
                .unwrap_or_default(),
        }))
    }

    /// How many jobs wait, are delayed, run and are dead.
    pub async fn depths(&self) -> Result<QueueDepths, RedisError> {
        let ready: u64 = self.redis.run(cmd("LLEN").arg(self.key("ready"))).await?;
        let delayed: u64 = self
            .redis
            .run(cmd("ZCARD").arg(self.key("delayed")))
            .await?;
        let running: u64 = self.redis.run(cmd("ZCARD").arg(self.key("active"))).await?;
        let dead: u64 = self.redis.run(cmd("LLEN").arg(self.key("dead"))).await?;
        Ok(QueueDepths {
            ready,
            delayed,
            running,
            dead,
        })
    }

    /// The ids in the dead-letter list, oldest first (their payload and last error are in
    /// [`job`](Self::job)).
    pub async fn dead(&self) -> Result<Vec<u64>, RedisError> {
        self.redis
            .run(cmd("LRANGE").arg(self.key("dead")).arg(0).arg(-1))
            .await
    }

    /// Takes the next job, if one is ready. A job whose seal does not match is not run: it
    /// goes to the dead-letter list at once (counted in `redis_refused`), and the next is
    /// taken.
    async fn take(&self) -> Result<Taken, RedisError> {
        loop {
            let job = match self.take_one().await? {
                Ok(taken) => return Ok(taken),
                Err(refused) => refused,
            };
            crate::redis_seal::refuse(&format!("job {} of queue {:?}", job.id, self.name));
            self.settle(&job, Err(Failure::Unsealed)).await;
        }
    }

    /// Takes the next job, if one is ready, as it is: `Err` holds a job whose seal does not
    /// match.
    async fn take_one(&self) -> Result<Result<Taken, Job>, RedisError> {
        let answer: ::redis::Value = self
            .redis
            .run(
                cmd("EVAL")
                    .arg(scripts::TAKE)
                    .arg(3)
                    .arg(self.key("ready"))
                    .arg(self.key("delayed"))
                    .arg(self.key("active"))
                    .arg(now_ms())
                    .arg(self.options.visibility_timeout.as_millis() as u64)
                    .arg(&self.prefix),
            )
            .await?;
        if let ::redis::Value::Int(due) = answer {
            return Ok(Ok(Taken::Nothing(u64::try_from(due).ok())));
        }
        let (id, payload, attempt, seal): (u64, Vec<u8>, u32, Vec<u8>) =
            ::redis::from_redis_value(answer)
                .map_err(|e| RedisError::Command(format!("a take's answer: {e}")))?;
        let genuine = self.genuine(&payload, &seal);
        let job = Job {
            id,
            attempt,
            payload: Bytes::from(payload),
        };
        Ok(match genuine {
            true => Ok(Taken::Job(job)),
            false => Err(job),
        })
    }

    /// Records how job `job` ended: done, to retry after its backoff, or dead.
    async fn settle(&self, job: &Job, outcome: Result<(), Failure>) {
        let result: Result<(), RedisError> = match outcome {
            Ok(()) => self
                .redis
                .run::<i64>(
                    cmd("EVAL")
                        .arg(scripts::FINISH)
                        .arg(1)
                        .arg(self.key("active"))
                        .arg(job.id)
                        .arg(&self.prefix)
                        .arg(self.options.keep_done.as_secs().max(1)),
                )
                .await
                .map(|_| {
                    crate::runtime::context::with_stats(|c| c.jobs_done.set(c.jobs_done.get() + 1))
                }),
            Err(error) => {
                let retry_at = if error.retried() && job.attempt < self.options.max_attempts {
                    let exp = job.attempt.saturating_sub(1).min(20);
                    let wait = self
                        .options
                        .backoff
                        .saturating_mul(1 << exp)
                        .min(self.options.max_backoff);
                    now_ms() + wait.as_millis() as u64
                } else {
                    0
                };
                tracing::warn!(queue = %self.name, id = job.id, attempt = job.attempt, "job failed: {error}");
                self.redis
                    .run::<String>(
                        cmd("EVAL")
                            .arg(scripts::FAIL)
                            .arg(3)
                            .arg(self.key("active"))
                            .arg(self.key("delayed"))
                            .arg(self.key("dead"))
                            .arg(job.id)
                            .arg(&self.prefix)
                            .arg(error.to_string())
                            .arg(retry_at),
                    )
                    .await
                    .map(|how| {
                        crate::runtime::context::with_stats(|c| {
                            let counter = if how == "dead" {
                                &c.jobs_dead
                            } else {
                                &c.jobs_retried
                            };
                            counter.set(counter.get() + 1)
                        })
                    })
            }
        };
        if let Err(e) = result {
            // The job stays taken: after the visibility timeout it runs again.
            tracing::warn!(queue = %self.name, id = job.id, "cannot record the job's end: {e}");
        }
    }

    /// Runs jobs with `handler`, `concurrency` at a time, until the worker begins to stop
    /// (`brisk::process::stopping`); returns once the jobs in hand have ended. A handler
    /// that fails or panics has its job retried (or dead-lettered); one that fails with
    /// [`Malformed`] has it dead-lettered at once.
    pub async fn consume<F, Fut>(&self, concurrency: usize, handler: F)
    where
        F: Fn(Job) -> Fut + 'static,
        Fut: Future<Output = Result<(), BoxError>> + 'static,
    {
        let handler = Rc::new(handler);
        let idle = Rc::new(tokio::sync::Mutex::new(None));
        let loops =
            (0..concurrency.max(1)).map(|_| self.consume_one(handler.clone(), idle.clone()));
        futures_util::future::join_all(loops).await;
    }

    async fn consume_one<F, Fut>(&self, handler: Rc<F>, idle: Rc<Idle>)
    where
        F: Fn(Job) -> Fut + 'static,
        Fut: Future<Output = Result<(), BoxError>> + 'static,
    {
        let mut last_logged = None;
        while !crate::runtime::context::is_stopping() {
            let job = match self.take().await {
                Ok(Taken::Job(job)) => job,
                Ok(Taken::Nothing(due)) => {
                    match self.wait_for_job(&idle, due, &mut last_logged).await {
                        Some(job) => job,
                        None => return,
                    }
                }
                Err(e) => {
                    self.log_take_error(&e, &mut last_logged);
                    tokio::select! {
                        _ = tokio::time::sleep(TAKE_RETRY) => continue,
                        _ = crate::runtime::context::stopping() => return,
                    }
                }
            };
            self.run(&job, &*handler).await;
        }
    }

    /// After a take found nothing ready: waits for a job together with the consumer's other
    /// idle loops. Only the loop holding `idle` looks, with its subscription to the queue's
    /// wake-up channel: when a push makes the queue non-empty, when a delayed job falls due
    /// (`due`, ms since the epoch), and at least every [`IDLE_LOOK`] (every
    /// [`QueueOptions::poll_interval`] while it cannot subscribe). The loop that gets a job
    /// hands `idle` on and the next one looks at once, so a burst reaches every loop without
    /// waiting. `None` once the worker begins to stop.
    async fn wait_for_job(
        &self,
        idle: &Idle,
        mut due: Option<u64>,
        last_logged: &mut Option<Instant>,
    ) -> Option<Job> {
        let (mut wake, mut look_now) = match idle.try_lock() {
            // Nobody was waiting, and this loop has just looked.
            Ok(guard) => (guard, false),
            // Another loop was waiting and has got a job: look at once.
            Err(_) => tokio::select! {
                guard = idle.lock() => (guard, true),
                _ = crate::runtime::context::stopping() => return None,
            },
        };
        let mut pause_after_error = false;
        let mut subscribe_failed: Option<Instant> = None;
        loop {
            // A push between a look and the subscription would go unheard: look again after
            // subscribing.
            if wake.is_none() && subscribe_failed.is_none_or(|t| t.elapsed() >= TAKE_RETRY) {
                match self.redis.subscribe(&self.key("wake")).await {
                    Ok(stream) => {
                        *wake = Some(stream);
                        subscribe_failed = None;
                        look_now = true;
                    }
                    Err(e) => {
                        subscribe_failed = Some(Instant::now());
                        tracing::debug!(queue = %self.name, "cannot subscribe to wake-ups: {e}");
                    }
                }
            }
            if !look_now {
                let pause = if pause_after_error {
                    TAKE_RETRY
                } else {
                    let most = if wake.is_some() {
                        IDLE_LOOK
                    } else {
                        self.options.poll_interval
                    };
                    due.map_or(most, |at| {
                        most.min(Duration::from_millis(at.saturating_sub(now_ms())))
                    })
                };
                let woken = tokio::select! {
                    alive = woken(&mut wake) => Some(alive),
                    _ = tokio::time::sleep(pause) => None,
                    _ = crate::runtime::context::stopping() => return None,
                };
                if woken == Some(false) {
                    // The subscription's connection dropped: subscribe again, then look.
                    *wake = None;
                    continue;
                }
            }
            look_now = false;
            pause_after_error = false;
            match self.take().await {
                Ok(Taken::Job(job)) => return Some(job),
                Ok(Taken::Nothing(next)) => due = next,
                Err(e) => {
                    self.log_take_error(&e, last_logged);
                    pause_after_error = true;
                }
            }
        }
    }

    /// Logs that jobs cannot be taken, at most every 10 s per loop.
    fn log_take_error(&self, e: &RedisError, last_logged: &mut Option<Instant>) {
        if last_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            *last_logged = Some(Instant::now());
            tracing::warn!(queue = %self.name, "cannot take jobs: {e}; waiting");
        }
    }

    async fn run<F, Fut>(&self, job: &Job, handler: &F)
    where
        F: Fn(Job) -> Fut,
        Fut: Future<Output = Result<(), BoxError>>,
    {
        crate::runtime::context::with_stats(|c| c.jobs_running.set(c.jobs_running.get() + 1));
        let traced = crate::otel::Op::Job {
            queue: &self.name,
            id: job.id,
            attempt: job.attempt,
        };
        let outcome = std::panic::AssertUnwindSafe(crate::otel::root(handler(job.clone()), traced))
            .catch_unwind()
            .await;
        crate::runtime::context::with_stats(|c| {
            c.jobs_running.set(c.jobs_running.get().saturating_sub(1))
        });
        match outcome {
            Ok(Ok(())) => self.settle(job, Ok(())).await,
            Ok(Err(e)) => self.settle(job, Err(Failure::Handler(e))).await,
            Err(panic) => {
                let why = panic_message(&panic);
                self.settle(job, Err(Failure::Panicked(why))).await
            }
        }
    }
}
