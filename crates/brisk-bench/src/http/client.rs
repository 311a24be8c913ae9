//! The HTTP load generator: connection loops driven by shard runtimes,
//! optional constant-rate pacing with coordinated-omission correction.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep_until, timeout_at};

use crate::error::BenchError;
use crate::http::request::RequestSpec;
use crate::http::response::{ResponseInfo, ResponseParser};
use crate::http::stats::{ErrorKind, HttpStats};
use crate::report::HttpReport;
use crate::runtime::run_sharded;
use crate::target::Target;

/// Pause between reconnect attempts of one connection after a failure.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);
/// Initial read buffer capacity per connection.
const READ_BUFFER: usize = 16 * 1024;
/// Run length when neither a duration nor a request count is given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// Parameters of one HTTP load run.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// The target.
    pub target: Target,
    /// Concurrent connections.
    pub connections: usize,
    /// Threads (shards); each owns about `connections / threads` connections.
    pub threads: usize,
    /// Run length. With `requests` set too, whichever ends first wins.
    pub duration: Option<Duration>,
    /// Total request attempts (each attempt is a response or an error).
    pub requests: Option<u64>,
    /// Constant total request rate per second (wrk2-style pacing).
    pub rate: Option<f64>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// The request to send.
    pub request: RequestSpec,
}

impl HttpConfig {
    /// A configuration with wrk-like defaults for `target`.
    pub fn new(target: Target) -> Self {
        Self {
            target,
            connections: 10,
            threads: 1,
            duration: None,
            requests: None,
            rate: None,
            timeout: Duration::from_secs(5),
            request: RequestSpec::default(),
        }
    }
}

/// State shared read-only (apart from the request budget) by all connections.
struct Shared {
    addr: SocketAddr,
    request: Bytes,
    head_request: bool,
    keep_alive: bool,
    timeout: Duration,
    start: Instant,
    deadline: Option<Instant>,
    budget: Option<u64>,
    issued: AtomicU64,
    interval: Option<Duration>,
    connections: usize,
}

impl Shared {
    /// Claims one request attempt; false once the request budget is spent.
    #[inline]
    fn take_slot(&self) -> bool {
        match self.budget {
            None => true,
            Some(n) => self.issued.fetch_add(1, Ordering::Relaxed) < n,
        }
    }

    #[inline]
    fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }
}

/// Runs the load described by `config` and returns its report.
///
/// Blocks the calling thread; call it from `spawn_blocking` inside async code.
pub fn run_http(config: &HttpConfig) -> Result<HttpReport, BenchError> {
    if config.connections == 0 {
        return Err(BenchError::InvalidArgument(
            "the connection count must be at least 1".into(),
        ));
    }
    if let Some(rate) = config.rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(BenchError::InvalidArgument(
                "the rate must be a positive number".into(),
            ));
        }
    }
    let addr = config.target.resolve()?;
    let request = config.request.encode(&config.target)?;
    let duration = match (config.duration, config.requests) {
        (None, None) => Some(DEFAULT_DURATION),
        (d, _) => d,
    };
    let threads = config.threads.clamp(1, config.connections);
    let start = Instant::now();
    let shared = Arc::new(Shared {
        addr,
        request,
        head_request: config.request.is_head(),
        keep_alive: config.request.keep_alive,
        timeout: config.timeout,
        start,
        deadline: duration.map(|d| start + d),
        budget: config.requests,
        issued: AtomicU64::new(0),
        interval: config
            .rate
            .map(|r| Duration::from_secs_f64(config.connections as f64 / r)),
        connections: config.connections,
    });
    let connections = config.connections;
    let per_shard = run_sharded(threads, move |shard| {
        let shared = Arc::clone(&shared);
        async move {
            let stats = Rc::new(RefCell::new(HttpStats::default()));
            let mut tasks = Vec::new();
            for index in (shard..connections).step_by(threads) {
                let shared = Arc::clone(&shared);
                let stats = Rc::clone(&stats);
                tasks.push(tokio::task::spawn_local(connection_loop(
                    shared, index, stats,
                )));
            }
            for task in tasks {
                let _ = task.await;
            }
            let stats = stats.borrow().clone();
            stats
        }
    })?;
    let elapsed = start.elapsed();
    let mut total = HttpStats::default();
    for s in &per_shard {
        total.merge(s);
    }
    Ok(HttpReport::new(config, threads, elapsed, &total))
}

/// Why one exchange failed.
enum Failure {
    Write,
    Read,
    Parse,
}

/// One connection slot: connects as needed, sends, frames the response,
/// records the outcome; repeats until the deadline or request budget ends.
async fn connection_loop(shared: Arc<Shared>, index: usize, stats: Rc<RefCell<HttpStats>>) {
    let mut stream: Option<TcpStream> = None;
    let mut buf = BytesMut::with_capacity(READ_BUFFER);
    let mut parser = ResponseParser::new(shared.head_request);
    let far_future = shared.start + Duration::from_secs(86_400 * 365);
    let deadline = shared.deadline.unwrap_or(far_future);
    let mut next_send = shared
        .interval
        .map(|interval| shared.start + interval.mul_f64(index as f64 / shared.connections as f64));
    loop {
        // Pacing: wait for the scheduled send time.
        let intended = match (next_send.as_mut(), shared.interval) {
            (Some(next), Some(interval)) => {
                let at = *next;
                *next += interval;
                if at >= deadline {
                    break;
                }
                if at > Instant::now() {
                    // On schedule: count from the real send time, so timer
                    // wake-up lag is not charged to the server.
                    sleep_until(at.into()).await;
                    Instant::now()
                } else {
                    // Behind schedule because the previous response was late:
                    // count from the intended time (coordinated omission).
                    at
                }
            }
            _ => {
                let now = Instant::now();
                if shared.past_deadline(now) {
                    break;
                }
                now
            }
        };
        if !shared.take_slot() {
            break;
        }

        if stream.is_none() {
            let until = deadline.min(Instant::now() + shared.timeout);
            match timeout_at(until.into(), TcpStream::connect(shared.addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    stats.borrow_mut().connections_opened += 1;
                    stream = Some(s);
                }
                Ok(Err(_)) | Err(_) => {
                    if shared.past_deadline(Instant::now()) {
                        break;
                    }
                    stats.borrow_mut().errors.add(ErrorKind::Connect);
                    let resume = (Instant::now() + RECONNECT_BACKOFF).min(deadline);
                    sleep_until(resume.into()).await;
                    continue;
                }
            }
        }
        let Some(conn) = stream.as_mut() else {
            continue;
        };

        let until = deadline.min(Instant::now() + shared.timeout);
        let mut bytes_read = 0u64;
        let outcome = timeout_at(
            until.into(),
            exchange(
                conn,
                &shared.request,
                &mut buf,
                &mut parser,
                &mut bytes_read,
            ),
        )
        .await;
        let done = Instant::now();
        let mut st = stats.borrow_mut();
        st.bytes_read += bytes_read;
        match outcome {
            Ok(Ok(info)) => {
                st.requests += 1;
                st.latency
                    .record(done.saturating_duration_since(intended).as_micros() as u64);
                if info.status >= 400 {
                    st.errors.add(ErrorKind::Status);
                }
                if info.close || !shared.keep_alive {
                    stream = None;
                }
            }
            Ok(Err(failure)) => {
                st.errors.add(match failure {
                    Failure::Write => ErrorKind::Write,
                    Failure::Read => ErrorKind::Read,
                    Failure::Parse => ErrorKind::Parse,
                });
                stream = None;
            }
            Err(_) => {
                // The deadline cut an in-flight request short: not an error.
                if !shared.past_deadline(done) {
                    st.errors.add(ErrorKind::Timeout);
                }
                stream = None;
            }
        }
    }
}

/// Writes the pre-encoded request and reads until one response is framed.
async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    buf: &mut BytesMut,
    parser: &mut ResponseParser,
    bytes_read: &mut u64,
) -> Result<ResponseInfo, Failure> {
    stream
        .write_all(request)
        .await
        .map_err(|_| Failure::Write)?;
    parser.reset();
    buf.clear();
    let mut received = 0usize;
    loop {
        if buf.capacity() - buf.len() < READ_BUFFER / 4 {
            buf.reserve(READ_BUFFER);
        }
        let n = stream.read_buf(buf).await.map_err(|_| Failure::Read)?;
        if n == 0 {
            return match parser.on_eof(received == 0) {
                Ok(Some(info)) => Ok(info),
                Ok(None) | Err(_) => Err(Failure::Read),
            };
        }
        received += n;
        *bytes_read += n as u64;
        if let Some(info) = parser.feed(buf).map_err(|_| Failure::Parse)? {
            return Ok(info);
        }
    }
}
