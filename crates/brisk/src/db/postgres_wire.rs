//! One PostgreSQL connection spoken by hand on `postgres-protocol`: the hot path under the
//! [`Postgres`](super::Postgres) pool.
//!
//! - **Start-up** ([`postgres_startup`](super::postgres_startup)): authentication and the
//!   session check; a host that fails any of it gives way to the next host of the URL. TLS,
//!   when asked for, starts before it ([`postgres_tls`](super::postgres_tls)).
//! - **Limits**: a message or an answer over `PostgresOptions::max_result_bytes` is not
//!   buffered ([`postgres_message`](super::postgres_message)): a message announcing more
//!   ends the connection, an answer growing past it is read to its end without being kept and
//!   fails with [`DbError::Refused`], the connection staying in step.
//! - **The pipeline**: a request is a run of frontend messages ending in one `Sync` (or one
//!   simple `Query`), and its answer is every message up to the `ReadyForQuery` that ends it,
//!   with the transaction status that `ReadyForQuery` gives. The [`Driver`] writes every
//!   request queued since its last write in one write and hands the answers back in order;
//!   while the server has many requests to answer, new ones wait to go together
//!   ([`postgres_write_batch`](super::postgres_write_batch)). A request may hold many
//!   `Bind`/`Execute` pairs before its one `Sync`, so a batch of queries costs the server one
//!   implicit transaction and one flush.
//! - **Wake-ups** ([`postgres_lowat`](super::postgres_lowat)): the kernel wakes the driver
//!   only once the fewest bytes the oldest answer must still hold have come (and, with many
//!   requests in flight, the next few answers' too, for at most a millisecond or two).
//! - **Timeouts** are the server's: the session's `statement_timeout` ends a statement that
//!   runs too long (a cancel request would stop whichever query runs at that moment, maybe
//!   another caller's). An answer that does not come at all (a server that stopped, a
//!   request queued behind a statement the server is still ending) fails a grace after it
//!   ([`Connection::request_within`]): the driver keeps the deadlines, with one timer for the
//!   oldest, so a query costs no timer of its own.
//! - **A shared connection keeps no transaction** ([`Mode::Shared`]): statements that would
//!   open one are refused before they are sent ([`statement`](super::statement)); if one gets
//!   through anyway (dynamic SQL in a function), the driver answers it with an error, fails
//!   every request that was already sent behind it (they ran inside that transaction) and
//!   rolls the transaction back before anything written later, so no caller is told a write
//!   succeeded that was rolled back. `COPY FROM STDIN` drops the connection.
//!   A setting the server reports (`DateStyle`, `TimeZone`, `application_name`, the role…)
//!   changed mid-session ends the shared connection the same way: the pool opens a new one.
//! - **A transaction's connection** ([`Mode::Exclusive`]) has one user at a time, who reads
//!   the transaction status from each answer.

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{ErrorResponseBody, Message};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_postgres::config::Host;
use tokio_postgres::Config;

use super::error::{postgres_kind, DbError, ServerError};
use super::postgres_connect_error::{ConnectError, HostFailure, NoHost};
use super::postgres_lowat::Wakeups;
use super::postgres_message::{error_text, next_message};
use super::postgres_startup::start_session;
use super::postgres_tls::{Opened, PgTls, Socket};
use super::postgres_write_batch as write_batch;

/// What the server answered one request: its messages up to (not including) the
/// `ReadyForQuery` that ended it, and the transaction status that gave (`I` idle, `T` in a
/// transaction, `E` in a failed one). A request of several runs, each ending in its own
/// `Sync` ([`Connection::request_runs`]), gets one answer for all of them: `ends` says where
/// each run but the last ends in `messages` (the `ReadyForQuery` between them left out).
pub(super) struct Answer {
    pub(super) messages: Vec<Message>,
    pub(super) status: u8,
    pub(super) ends: Vec<usize>,
}

impl Answer {
    /// Each run's messages, in order: one slice for a request of one `Sync`.
    pub(super) fn runs(&self) -> impl Iterator<Item = &[Message]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        let ends = self.ends.iter().copied().chain([self.messages.len()]);
        starts.zip(ends).map(|(from, to)| &self.messages[from..to])
    }
}

type Reply = oneshot::Sender<Result<Answer, DbError>>;

/// An answer on its way: [`Connection::send`]'s receipt.
pub(super) type Pending = oneshot::Receiver<Result<Answer, DbError>>;

/// Requests waiting to be written past this many bytes wait in the queue instead.
const MAX_OUTPUT: usize = 1 << 20;

/// The most messages an answer's vector is made ready for before they come: it gets room
/// for as many as the answer before it had, up to this; beyond it, it grows as they come.
const ANSWER_ROOM: usize = 64;

/// A request: its messages, ending in `Sync` or a simple `Query` (`syncs` of them: one
/// `ReadyForQuery` each), where its answer goes, and the query timeout it runs under, if any.
struct Request {
    messages: BytesMut,
    syncs: u32,
    reply: Reply,
    limit: Option<Duration>,
}

/// How long past its query timeout a request's answer is waited for before it fails: the
/// server ends the statement at the timeout; this covers an answer that does not come at all.
pub(super) fn grace(limit: Duration) -> Duration {
    limit.min(Duration::from_secs(1))
}

/// Who uses a connection, which decides what its driver does about transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Many callers pipeline on it: no transaction may outlive the request that opened it.
    Shared,
    /// One transaction at a time holds it.
    Exclusive,
}

/// The callers' side of one connection; its [`Driver`] does the reading and writing.
pub(super) struct Connection {
    requests: mpsc::UnboundedSender<Request>,
    /// Set by the driver when the server reports a setting changed mid-session: the
    /// connection is not as a new one would be, and must not serve another transaction.
    tainted: Arc<AtomicBool>,
}

impl Connection {
    /// Sends `messages` (ending in one `Sync`) and waits for their answer.
    pub(super) async fn request(&self, messages: BytesMut) -> Result<Answer, DbError> {
        self.request_within(messages, None).await
    }

    /// [`request`](Self::request) under the query timeout `limit`, if given: the server ends
    /// a statement past it (the session's `statement_timeout`); an answer that has not come
    /// a grace later (up to 1 s more) fails with [`DbError::Timeout`].
    pub(super) async fn request_within(
        &self,
        messages: BytesMut,
        limit: Option<Duration>,
    ) -> Result<Answer, DbError> {
        self.request_runs(messages, 1, limit).await
    }

    /// [`request_within`](Self::request_within) for `messages` that hold `syncs` runs, each
    /// ending in its own `Sync` (so in its own implicit transaction: the server skips only
    /// the rest of a failing run): one answer for all, which [`Answer::runs`] splits.
    pub(super) async fn request_runs(
        &self,
        messages: BytesMut,
        syncs: usize,
        limit: Option<Duration>,
    ) -> Result<Answer, DbError> {
        let (reply, pending) = oneshot::channel();
        self.requests
            .send(Request {
                messages,
                syncs: u32::try_from(syncs.max(1)).map_err(|_| too_many_runs())?,
                reply,
                limit,
            })
            .map_err(|_| gone())?;
        answer(pending).await
    }

    /// Queues `messages` without waiting: requests queued one after another are written and
    /// answered in that order.
    pub(super) fn send(&self, messages: BytesMut) -> Result<Pending, DbError> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Request {
                messages,
                syncs: 1,
                reply,
                limit: None,
            })
            .map_err(|_| gone())?;
        Ok(answer)
    }

    /// Whether the driver has stopped (the connection is gone).
    pub(super) fn is_closed(&self) -> bool {
        self.requests.is_closed()
    }

    /// Whether the server reported a setting changed since the connection opened.
    pub(super) fn is_tainted(&self) -> bool {
        self.tainted.load(Ordering::Relaxed)
    }
}

/// The answer of a request queued with [`Connection::send`].
pub(super) async fn answer(pending: Pending) -> Result<Answer, DbError> {
    pending.await.map_err(|_| gone())?
}

fn too_many_runs() -> DbError {
    DbError::Refused(format!("a request holds at most {} runs", u32::MAX))
}

fn gone() -> DbError {
    DbError::Unavailable("the connection to PostgreSQL closed".into())
}

/// Where a server listens.
enum Target {
    Tcp(String, u16),
    Unix(PathBuf),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Tcp(host, port) => write!(f, "{host}:{port}"),
            Target::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

impl Target {
    /// A new connection: TCP with TCP_NODELAY, the keepalives `config` asks for (libpq's
    /// `keepalives`, on by default) and the TLS `tls` asks for; or a Unix socket, plain.
    /// With the TCP socket's descriptor, for [`Wakeups`].
    async fn open(
        &self,
        config: &Config,
        tls: &PgTls,
    ) -> Result<(Opened, Option<RawFd>), ConnectError> {
        match self {
            Target::Tcp(host, port) => {
                let stream = tcp(config, host, *port).await?;
                let fd = stream.as_raw_fd();
                match tls.start(stream, host).await? {
                    Some(opened) => Ok((opened, Some(fd))),
                    None => {
                        let stream = tcp(config, host, *port).await?;
                        let fd = stream.as_raw_fd();
                        Ok((Opened::downgraded(stream), Some(fd)))
                    }
                }
            }
            Target::Unix(path) => Ok((
                Opened::plain(tokio::net::UnixStream::connect(path).await?),
                None,
            )),
        }
    }
}

/// A TCP connection to `host:port` with TCP_NODELAY and the keepalives `config` asks for.
async fn tcp(config: &Config, host: &str, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let stream = tokio::net::TcpStream::connect((host, port)).await?;
    stream.set_nodelay(true)?;
    if config.get_keepalives() {
        let mut keepalive = socket2::TcpKeepalive::new().with_time(config.get_keepalives_idle());
        if let Some(interval) = config.get_keepalives_interval() {
            keepalive = keepalive.with_interval(interval);
        }
        if let Some(retries) = config.get_keepalives_retries() {
            keepalive = keepalive.with_retries(retries);
        }
        socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive)?;
    }
    Ok(stream)
}

/// Connects to the first host of `config` that accepts us (and, with
/// `target_session_attrs`, is of the kind asked for), each within `timeout`.
/// `statement_timeout` (zero: none) is set on the session: the server ends a statement that
/// runs longer with error 57014. Answers over `max_result` bytes are refused.
pub(super) async fn connect(
    config: &Config,
    tls: &PgTls,
    timeout: Duration,
    statement_timeout: Duration,
    max_result: usize,
) -> Result<(Connection, Driver), NoHost> {
    let ports = config.get_ports();
    let mut failures = Vec::new();
    for (i, host) in config.get_hosts().iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let target = match host {
            Host::Tcp(name) => Target::Tcp(name.clone(), port),
            Host::Unix(dir) => Target::Unix(dir.join(format!(".s.PGSQL.{port}"))),
        };
        let started = start(config, tls, &target, statement_timeout, max_result);
        match tokio::time::timeout(timeout, started).await {
            Ok(Ok(connected)) => return Ok(connected),
            Ok(Err(why)) => failures.push((target.to_string(), why.into())),
            Err(_) => {
                let timed_out = HostFailure::Timeout(timeout.as_millis());
                failures.push((target.to_string(), timed_out));
            }
        }
    }
    if failures.is_empty() {
        return Err(NoHost::Named);
    }
    Err(NoHost::Failed(failures))
}

/// Start-up and authentication on one host ([`postgres_startup`](super::postgres_startup)),
/// then the connection's driver, which takes answers of up to `max_result` bytes.
async fn start(
    config: &Config,
    tls: &PgTls,
    target: &Target,
    statement_timeout: Duration,
    max_result: usize,
) -> Result<(Connection, Driver), ConnectError> {
    let (opened, tcp_fd) = target.open(config, tls).await?;
    // Over TLS, bytes read from the socket may wait inside the TLS reader (a record not yet
    // whole), which the low-water mark would not see: plain TCP only.
    let tcp_fd = tcp_fd.filter(|_| !opened.encrypted);
    let (socket, input) = start_session(opened, config, statement_timeout).await?;
    let (requests, queue) = mpsc::unbounded_channel();
    let tainted = Arc::new(AtomicBool::new(false));
    let driver = Driver {
        socket,
        wakeups: Wakeups::of(tcp_fd),
        input,
        queue,
        tainted: tainted.clone(),
        max_result,
    };
    Ok((Connection { requests, tainted }, driver))
}

/// The server's error as Brisk's: its SQLSTATE (`C`), message (`M`), constraint (`n`) and
/// their kind.
pub(super) fn server_error(body: &ErrorResponseBody) -> ServerError {
    let (mut code, mut message, mut constraint) = (String::new(), String::new(), None);
    let mut fields = body.fields();
    while let Ok(Some(field)) = fields.next() {
        let value = || String::from_utf8_lossy(field.value_bytes()).into_owned();
        match field.type_() {
            b'C' => code = value(),
            b'M' => message = value(),
            b'n' => constraint = Some(value()),
            _ => {}
        }
    }
    ServerError {
        kind: postgres_kind(&code),
        code,
        message,
        constraint,
    }
}

/// Whether an error ends the session (severity FATAL or PANIC) rather than one request.
fn is_fatal(body: &ErrorResponseBody) -> bool {
    // `V` is never translated; `S` (maybe translated) only for servers before 9.6.
    let (mut v, mut s) = (None, None);
    let mut fields = body.fields();
    while let Ok(Some(field)) = fields.next() {
        match field.type_() {
            b'V' => v = Some(field.value_bytes() == b"FATAL" || field.value_bytes() == b"PANIC"),
            b'S' => s = Some(field.value_bytes() == b"FATAL" || field.value_bytes() == b"PANIC"),
            _ => {}
        }
    }
    v.or(s).unwrap_or(false)
}

/// The I/O of one connection: writes queued requests, reads answers, hands them back.
pub(super) struct Driver {
    socket: Box<dyn Socket>,
    /// The TCP socket's receive low-water mark (none on a Unix socket or over TLS).
    wakeups: Wakeups,
    input: BytesMut,
    queue: mpsc::UnboundedReceiver<Request>,
    tainted: Arc<AtomicBool>,
    /// The most bytes one message, and one answer, may take.
    max_result: usize,
}

/// A request written (or about to be) whose answer has not come yet.
struct Waiting {
    /// `None`: a ROLLBACK of the driver's own, or a request that timed out: nobody waits for
    /// the answer.
    reply: Option<Reply>,
    /// It runs inside a transaction an earlier request left open, which is rolled back.
    doomed: bool,
    /// It is the driver's own ROLLBACK of such a transaction.
    rollback: bool,
    /// One of its runs left the shared connection inside a transaction.
    left_open: bool,
    /// `ReadyForQuery`s still to come before its answer is whole.
    syncs: u32,
    /// When its answer stops being waited for, and the query timeout it ran under.
    deadline: Option<(Instant, Duration)>,
}

impl Waiting {
    /// A request of the driver's own (a ROLLBACK) whose answer nobody waits for.
    fn own() -> Waiting {
        Waiting {
            reply: None,
            doomed: false,
            rollback: true,
            left_open: false,
            syncs: 1,
            deadline: None,
        }
    }
}

/// A request taken from the queue but not written yet (the output is full, or the connection
/// is retiring), with its deadline.
type Backlogged = (Request, Option<(Instant, Duration)>);

/// The one timer of a driver: armed at the earliest deadline of the requests waiting (or
/// later: firing early costs a look at the queue, not a wrong answer).
struct Deadlines {
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    armed: bool,
}

impl Deadlines {
    fn new() -> Self {
        Deadlines {
            timer: Box::pin(tokio::time::sleep(Duration::from_secs(3600))),
            armed: false,
        }
    }

    /// A request waits until `deadline`: arms the timer if it is not, or if it is armed for
    /// later.
    fn add(&mut self, deadline: Instant) {
        if !self.armed || deadline < self.timer.deadline() {
            self.timer.as_mut().reset(deadline);
            self.armed = true;
        }
    }

    /// The timer fired: fails every request past its deadline with [`DbError::Timeout`] (a
    /// written one's answer, when it comes, is dropped; one not written yet never is) and
    /// arms the timer for the next one.
    fn expire(&mut self, waiting: &mut VecDeque<Waiting>, backlog: &mut VecDeque<Backlogged>) {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut kept = VecDeque::with_capacity(backlog.len());
        for (request, deadline) in backlog.drain(..) {
            match deadline {
                Some((at, limit)) if at <= now => {
                    // Counted only if someone still waits for the answer.
                    if !request.reply.is_closed() {
                        let _ = request.reply.send(Err(DbError::timed_out(limit)));
                    }
                }
                Some((at, _)) => {
                    next = Some(next.map_or(at, |n| n.min(at)));
                    kept.push_back((request, deadline));
                }
                None => kept.push_back((request, deadline)),
            }
        }
        *backlog = kept;
        for w in waiting.iter_mut() {
            let Some((deadline, limit)) = w.deadline else {
                continue;
            };
            if deadline <= now {
                if let Some(reply) = w.reply.take().filter(|r| !r.is_closed()) {
                    let _ = reply.send(Err(DbError::timed_out(limit)));
                }
                w.deadline = None;
            } else if w.reply.is_some() {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
            }
        }
        self.armed = next.is_some();
        if let Some(next) = next {
            self.timer.as_mut().reset(next);
        }
    }
}

impl Driver {
    /// Runs the connection until it ends (the server goes, or every [`Connection`] handle is
    /// dropped) and says why. Requests still waiting then fail with `Unavailable`.
    pub(super) async fn run(self, mode: Mode) -> String {
        let Driver {
            socket,
            mut wakeups,
            mut input,
            mut queue,
            tainted,
            max_result,
        } = self;
        // Why the connection takes no more requests and ends once those sent are answered.
        let mut retiring: Option<String> = None;
        let (mut reader, mut writer) = tokio::io::split(socket);
        let mut output = BytesMut::new();
        // How many of the requests at the back of `waiting` may still be in `output` (all
        // those added since it was last empty).
        let mut unwritten = 0usize;
        let mut waiting: VecDeque<Waiting> = VecDeque::new();
        let mut messages: Vec<Message> = Vec::new();
        // Where each run of the answer being read ended so far, for a request of several.
        let mut ends: Vec<usize> = Vec::new();
        let mut deadlines = Deadlines::new();
        // Requests taken from the queue (so their deadlines run) but not written yet.
        let mut backlog: VecDeque<Backlogged> = VecDeque::new();
        // The answer being read: its size so far, and whether it went past `max_result`
        // (then its messages are read and dropped).
        let (mut answer_bytes, mut oversized) = (0usize, false);
        let why = 'run: loop {
            loop {
                let (message, size) = match next_message(&mut input, max_result) {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(e) => break 'run format!("{e} (PostgresOptions::max_result_bytes)"),
                };
                answer_bytes += size;
                wakeups.message();
                if answer_bytes > max_result && !oversized {
                    oversized = true;
                    messages = Vec::new();
                }
                match message {
                    Message::ReadyForQuery(body) => {
                        wakeups.run_ended();
                        let status = body.status();
                        let Some(front) = waiting.front_mut() else {
                            break 'run "an answer nobody asked for".to_string();
                        };
                        let left_open = mode == Mode::Shared && status != b'I';
                        front.left_open |= left_open;
                        if front.syncs > 1 {
                            // One run of several ended; the next runs on (in that transaction,
                            // if this one left it open).
                            front.syncs -= 1;
                            ends.push(messages.len());
                            if left_open && !waiting.iter().any(|w| w.rollback) {
                                for w in waiting.iter_mut().skip(1) {
                                    w.doomed = true;
                                }
                                let _ = frontend::query("ROLLBACK", &mut output);
                                waiting.push_back(Waiting::own());
                                unwritten += 1;
                            }
                            continue;
                        }
                        // The next answer starts with room for as many messages (up to
                        // a bound): answers of a kind come in a row, and a vector grown
                        // message by message takes three allocations (4, 8, 16) and two
                        // copies for fortunes' 14 messages. (`/db`'s 3 fit the first 4.)
                        let room = messages.len().min(ANSWER_ROOM);
                        let messages = std::mem::replace(&mut messages, Vec::with_capacity(room));
                        let run_ends = std::mem::take(&mut ends);
                        let too_large = std::mem::take(&mut oversized);
                        answer_bytes = 0;
                        let Some(done) = waiting.pop_front() else {
                            break 'run "an answer nobody asked for".to_string();
                        };
                        wakeups.answer_ended();
                        let left_open = done.left_open;
                        if let Some(reply) = done.reply {
                            let answer = if done.doomed {
                                Err(DbError::Unavailable(
                                    "the statement ran inside a transaction that another \
                                     statement left open on the shared connection, and was \
                                     rolled back with it"
                                        .into(),
                                ))
                            } else if left_open {
                                Err(DbError::Refused(
                                    "the statement left the shared connection inside a \
                                     transaction, which was rolled back: run transactions with \
                                     db.transaction() or db.begin()"
                                        .into(),
                                ))
                            } else if too_large {
                                Err(DbError::Refused(format!(
                                    "the answer is larger than {max_result} bytes \
                                     (PostgresOptions::max_result_bytes): ask for fewer rows \
                                     or columns"
                                )))
                            } else {
                                Ok(Answer {
                                    messages,
                                    status,
                                    ends: run_ends,
                                })
                            };
                            let _ = reply.send(answer);
                        }
                        // A barrier: whatever was sent behind it ran inside the transaction
                        // and fails; the ROLLBACK goes before anything not yet queued. (If
                        // one of ours is on its way, it ends this transaction already.)
                        if left_open && !waiting.iter().any(|w| w.rollback) {
                            for w in waiting.iter_mut() {
                                w.doomed = true;
                            }
                            let _ = frontend::query("ROLLBACK", &mut output);
                            waiting.push_back(Waiting::own());
                            unwritten += 1;
                        }
                    }
                    // The server would wait for rows that never come, and ignore the Syncs
                    // of the requests behind: only dropping the connection keeps them in step.
                    Message::CopyInResponse(_) => {
                        break 'run "COPY FROM STDIN is not supported".to_string()
                    }
                    // A setting the server reports changed mid-session: something (dynamic
                    // SQL the statement check cannot see, a configuration reload) changed the
                    // session. Only a new connection is sure to be as every caller expects:
                    // what was sent is answered as it ran, nothing more is sent, and the
                    // connection ends (the pool opens another; a transaction's is not given
                    // back).
                    Message::ParameterStatus(body) => {
                        tainted.store(true, Ordering::Relaxed);
                        if mode == Mode::Shared && retiring.is_none() {
                            let name = body.name().unwrap_or("?");
                            tracing::warn!(
                                "the shared PostgreSQL connection's session changed ({name}): \
                                 replacing the connection"
                            );
                            retiring = Some(format!("its session changed ({name})"));
                        }
                    }
                    Message::NoticeResponse(_) | Message::NotificationResponse(_) => {}
                    Message::ErrorResponse(body) if is_fatal(&body) => {
                        break 'run error_text(&body)
                    }
                    Message::CommandComplete(body) => {
                        // (Only a request of several runs has later runs to bound.)
                        let several = waiting.front().is_some_and(|w| w.syncs > 1);
                        if let (true, Ok(tag)) = (several, body.tag()) {
                            wakeups.completion(tag);
                        }
                        if !oversized {
                            messages.push(Message::CommandComplete(body));
                        }
                    }
                    _ if oversized => {}
                    other => messages.push(other),
                }
            }
            // Write what the output has room for; a retiring connection takes no more.
            // (Requests of one run wait while the server is busy: `postgres_write_batch`.)
            let written = waiting.len().saturating_sub(unwritten);
            let first_runs = backlog.front().map_or(0, |(request, _)| request.syncs);
            let holding = write_batch::holds(written, backlog.len(), first_runs);
            while output.len() < MAX_OUTPUT && retiring.is_none() && !holding {
                let Some((
                    Request {
                        messages,
                        syncs,
                        reply,
                        ..
                    },
                    deadline,
                )) = backlog.pop_front()
                else {
                    break;
                };
                output.extend_from_slice(&messages);
                unwritten += 1;
                waiting.push_back(Waiting {
                    reply: Some(reply),
                    doomed: false,
                    rollback: false,
                    left_open: false,
                    syncs,
                    deadline,
                });
            }
            if let Some(why) = &retiring {
                if waiting.is_empty() && output.is_empty() {
                    break why.clone();
                }
            }
            let in_flight = waiting.iter().map(|w| w.syncs);
            wakeups.set_mark(in_flight, &input, unwritten);
            tokio::select! {
                read = reader.read_buf(&mut input) => match read {
                    Ok(0) => break "the server closed the connection".to_string(),
                    Ok(_) => {}
                    Err(e) => break e.to_string(),
                },
                // Always taken, so that every request's deadline runs from about when it was
                // made, written or not.
                request = queue.recv() => match request {
                    Some(first) => {
                        // One clock reading for the requests taken together.
                        let mut now = None;
                        let mut next = Some(first);
                        while let Some(request) = next {
                            // (A timeout too far away to be an instant is none.)
                            let deadline = request.limit.and_then(|limit| {
                                let now = *now.get_or_insert_with(Instant::now);
                                let at = now.checked_add(limit.saturating_add(grace(limit)))?;
                                Some((at, limit))
                            });
                            if let Some((at, _)) = deadline {
                                deadlines.add(at);
                            }
                            backlog.push_back((request, deadline));
                            next = queue.try_recv().ok();
                        }
                    }
                    None => break "the pool closed it".to_string(),
                },
                () = &mut deadlines.timer, if deadlines.armed => {
                    deadlines.expire(&mut waiting, &mut backlog)
                }
                () = wakeups.timer(), if wakeups.timer_armed() => wakeups.timer_fired(),
                written = writer.write(&output), if !output.is_empty() => match written {
                    Ok(0) => break "the server stopped reading".to_string(),
                    Ok(n) => {
                        output.advance(n);
                        if output.is_empty() {
                            unwritten = 0;
                        }
                    }
                    Err(e) => break e.to_string(),
                },
            }
        };
        let unsent = backlog.into_iter().map(|(request, _)| request.reply);
        for reply in waiting.into_iter().filter_map(|w| w.reply).chain(unsent) {
            let _ = reply.send(Err(DbError::Unavailable(why.clone())));
        }
        why
    }
}
