//! The worker entry: what a process started by the master as a worker does. It takes its spec
//! (which service, which index, the app's defaults), opens or inherits the listener, starts
//! the service on a single-threaded tokio runtime with a `LocalSet`, and answers the master
//! over its socketpair until it is told to stop (or the master is gone). What it does with
//! each of the master's messages is [`control`]'s.

mod control;

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

pub(crate) use self::control::ReadinessCheck;
use self::control::{Control, Next};
use crate::env::{self, ENV_HANDOVER_FD, ENV_IPC_FD, ENV_IPC_VERSION, ENV_LISTEN_FD, ENV_WORKER};
use crate::ipc::codec::{read_packet, write_broadcast, write_msg, ChannelReader, ChannelWriter};
use crate::ipc::{self, Packet, ToMaster, ToWorker};
use crate::limits::Limits;
use crate::runtime::context::{self, Relayed, WorkerInfo};
use crate::runtime::listener::Listener;
use crate::runtime::{Service, WorkerCtx};
use crate::stats::Stats;

/// What one worker process runs, as the app describes it.
pub(crate) struct WorkerSpec {
    /// The service this worker serves.
    pub service: Service,
    /// Its index among that service's workers.
    pub index: usize,
    /// The app's default limits (the service's overrides apply on top).
    pub defaults: Limits,
    /// The app's readiness checks (`App::readiness`), by name.
    pub readiness: Vec<(String, ReadinessCheck)>,
    /// Where to send traces, and the app's name (the default service name).
    #[cfg(feature = "otel")]
    pub tracing: Option<(crate::otel::Tracing, String)>,
}

/// A worker spec in the environment that is not `SERVICE:INDEX`.
#[derive(Debug, thiserror::Error)]
#[error("bad {ENV_WORKER} value {0:?}")]
pub(crate) struct BadWorkerSpec(String);

/// Parses this process's `SERVICE:INDEX` worker spec from the environment.
pub(crate) fn spec_from_env() -> Result<(usize, usize), BadWorkerSpec> {
    let spec = env::worker_spec().unwrap_or_default();
    let parsed = spec
        .split_once(':')
        .and_then(|(s, i)| Some((s.parse().ok()?, i.parse().ok()?)));
    parsed.ok_or(BadWorkerSpec(spec))
}

/// Ignores the signals the master handles: a terminal sends them to the whole process group,
/// and the master tells each worker what to do over the control channel.
fn ignore_master_signals() {
    for sig in [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGHUP,
    ] {
        // SAFETY: setting a signal to SIG_IGN is always sound.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}

/// Runs the worker `spec` describes; the master started this process.
pub(crate) fn run(spec: WorkerSpec) -> ExitCode {
    ignore_master_signals();
    let Some(ipc_fd) = env::fd(ENV_IPC_FD) else {
        eprintln!("{ENV_WORKER} is set but {ENV_IPC_FD} is not: workers are started by the master");
        return ExitCode::FAILURE;
    };
    let theirs = std::env::var(ENV_IPC_VERSION).ok();
    if theirs.as_deref() != Some(ipc::IPC_VERSION.to_string().as_str()) {
        eprintln!(
            "this program's workers speak version {} of the master's messages, and its running \
             master {} (another build): a reload cannot change that; restart the app (stop, \
             then start) to run this build",
            ipc::IPC_VERSION,
            theirs.map_or("an older one".to_string(), |v| format!("version {v}"))
        );
        return ExitCode::FAILURE;
    }
    let info = WorkerInfo {
        server: spec.service.name.clone(),
        id: spec.index,
        pid: std::process::id() as i32,
    };
    let span = tracing::info_span!("worker", id = spec.index, server = %info.server);
    let _entered = span.enter();
    // The master said it once for the app if the limit stays low.
    if let Some(why) = crate::open_files::raise() {
        tracing::debug!("{why}");
    }
    // A few threads for blocking work (file reads): each thread costs a stack and allocator
    // caches, and many concurrent downloads should queue rather than spawn a thread each.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(4)
        .on_thread_unpark(crate::runtime::loop_lag::after_unpark)
        .on_thread_park(crate::runtime::loop_lag::before_park)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot build the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Outside the runtime: the exporter's HTTP client runs one of its own, on its thread.
    #[cfg(feature = "otel")]
    if let Some((settings, app)) = &spec.tracing {
        if let Err(e) = crate::otel::start(settings, app, spec.index) {
            let url = crate::redact::redacted(settings.traces_url());
            tracing::error!("cannot trace to {url}: {e}");
            return ExitCode::FAILURE;
        }
    }
    // Also where database drivers go (runtime::local_tasks), for as long as the worker runs.
    let local = Rc::new(tokio::task::LocalSet::new());
    let task_set = local.clone();
    // The worker's loop is a task of the local set, not the future `block_on` polls: that one
    // is polled again, with every branch of the loop's `select!`, each time any task wakes.
    let exit = local.block_on(&rt, async move {
        match tokio::task::spawn_local(serve(spec, info, ipc_fd, task_set)).await {
            Ok(code) => code,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => ExitCode::FAILURE,
            },
        }
    });
    #[cfg(feature = "otel")]
    {
        crate::otel::stop();
        // What stopping said (spans it could not send).
        crate::log_file::flush_all();
    }
    exit
}

/// The master's channel: its reading and writing halves, framed.
type Channel = (ChannelReader<OwnedReadHalf>, ChannelWriter<OwnedWriteHalf>);

/// The control channel the master passed as descriptor `fd`.
fn channel(fd: RawFd) -> std::io::Result<Channel> {
    // SAFETY: the master passed this descriptor to us and nothing else owns it.
    let std_ipc = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
    std_ipc.set_nonblocking(true)?;
    let (rx, tx) = tokio::net::UnixStream::from_std(std_ipc)?.into_split();
    Ok((ipc::reader(rx), ipc::writer(tx)))
}

/// The worker: starts its service, says it is ready, answers the master until told to stop,
/// then stops (see [`stop`]).
async fn serve(
    spec: WorkerSpec,
    info: WorkerInfo,
    ipc_fd: RawFd,
    task_set: Rc<tokio::task::LocalSet>,
) -> ExitCode {
    let WorkerSpec {
        service,
        defaults,
        readiness,
        ..
    } = spec;
    let Service {
        listen,
        worker_callbacks,
        limits,
        start: start_serving,
        jobs,
        ..
    } = service;
    let (mut rx, mut tx) = match channel(ipc_fd) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot use the control channel: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (relay_tx, mut relay_rx) = mpsc::unbounded_channel();
    // Answers, jobs that ended and group membership, for the master, in order.
    let (to_master, mut outgoing) = mpsc::unbounded_channel::<ToMaster>();
    let worker = Rc::new(WorkerCtx::new(
        info.clone(),
        defaults,
        relay_tx,
        to_master.clone(),
    ));
    worker.set_task_set(task_set);
    context::set_current(Some(worker.clone()));
    #[cfg(feature = "redis")]
    crate::ws::start_presence(&worker);
    let lag = tokio::task::spawn_local(worker.clone().watch_loop_lag());
    if let Err(e) = start(
        &worker,
        listen.as_ref(),
        start_serving,
        limits.apply(defaults),
    ) {
        let msg = format!("cannot listen on {}: {e}", info.server);
        let _ = write_msg(&mut tx, &ToMaster::Failed(msg)).await;
        return ExitCode::FAILURE;
    }
    if let Some(cb) = &worker_callbacks.on_worker_start {
        if let Err(e) = cb(info.clone()).await {
            Stats::add(&worker.stats.throw_exception, 1);
            tracing::error!(error = %e, "on_worker_start failed");
        }
    }
    if write_msg(&mut tx, &ToMaster::Ready).await.is_err() {
        return ExitCode::FAILURE;
    }
    tracing::debug!(pid = info.pid, "worker ready");
    let control = Control {
        worker: worker.clone(),
        readiness: Rc::new(readiness),
        jobs,
        to_master,
        // SAFETY: the master passed this descriptor to us and nothing else owns it.
        handover: env::fd(ENV_HANDOVER_FD).map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let (drain, hand_over) = loop {
        let packet = tokio::select! {
            p = read_packet::<_, ToWorker>(&mut rx) => p,
            Some(relayed) = relay_rx.recv() => {
                relay(&worker, &mut tx, relayed).await;
                continue;
            }
            Some(msg) = outgoing.recv() => {
                let _ = write_msg(&mut tx, &msg).await;
                continue;
            }
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => break (Duration::ZERO, false),
        };
        match packet {
            Ok(Some(Packet::Broadcast {
                topic,
                stamp,
                broadcast,
            })) => crate::ws::deliver_relayed(&worker, &topic, stamp, broadcast),
            Ok(Some(Packet::Msg(msg))) => match control.handle(msg) {
                Next::Serve => {}
                Next::Stop { drain, hand_over } => break (drain, hand_over),
            },
            Ok(None) | Err(_) => {
                tracing::warn!("lost the master; stopping");
                break (Duration::ZERO, false);
            }
        }
    };
    let handing = tokio::time::Instant::now();
    if let (true, Some(socket)) = (hand_over, &control.handover) {
        hand_over_connections(&worker, socket, &mut tx, &mut relay_rx, drain).await;
    }
    // The drain time counts from the stop, the handover included: spent twice (a handler
    // busy until the handover's deadline, then the whole drain again) it outlasted the
    // master's patience, and the worker was killed mid-drain, its counters unsent.
    let drain = drain.saturating_sub(handing.elapsed());
    lag.abort();
    stop(&worker, &worker_callbacks, drain, &mut tx, &mut relay_rx).await;
    ExitCode::SUCCESS
}

/// Starts the service on this worker with `serving`: its listener (from the master, as
/// `listen` says), its `limits` and recycling. A custom process has no listener: nothing to
/// start but its callbacks.
fn start(
    worker: &Rc<WorkerCtx>,
    listen: Option<&crate::listen::ListenConfig>,
    serving: crate::runtime::service::Start,
    limits: Limits,
) -> std::io::Result<()> {
    let Some(listen) = listen else {
        return Ok(());
    };
    worker.set_max_connections(listen.max_connections);
    worker.recycle_after(listen.recycle.draw_limit());
    let Some(fd) = env::fd(ENV_LISTEN_FD) else {
        return Err(std::io::Error::other(format!(
            "{ENV_LISTEN_FD} is not set: the master passes each worker its socket"
        )));
    };
    // SAFETY: the master bound this socket for us and passed it down.
    let l = unsafe { Listener::from_fd(listen.address.scheme(), fd) };
    serving(worker.clone(), l, limits)
}

/// Stops the worker: lets what is in flight finish for up to `drain`, still relaying its
/// broadcasts, sends the master its last counters, runs `on_worker_stop`.
async fn stop(
    worker: &Rc<WorkerCtx>,
    callbacks: &crate::runtime::WorkerCallbacks,
    drain: Duration,
    tx: &mut ChannelWriter<OwnedWriteHalf>,
    relay_rx: &mut mpsc::UnboundedReceiver<Relayed>,
) {
    tracing::debug!(drain_ms = drain.as_millis() as u64, "worker stopping");
    // Broadcasts made while draining (a request in flight, an `on_close`) still go to
    // the other workers, the last of them too: a request answered here was not sent to
    // this worker's members alone.
    let draining = worker.shut_down(drain);
    tokio::pin!(draining);
    loop {
        tokio::select! {
            _ = &mut draining => break,
            Some(relayed) = relay_rx.recv() => relay(worker, tx, relayed).await,
        }
    }
    while let Ok(relayed) = relay_rx.try_recv() {
        relay(worker, tx, relayed).await;
    }
    crate::log_file::flush_all();
    let _ = write_msg(tx, &ToMaster::Final(Box::new(worker.snapshot()))).await;
    worker.timers.del_all();
    // Still this thread's worker: what on_worker_stop calls (a timer, a broadcast to
    // the members it still has) finds it, as every callback does.
    if let Some(cb) = &callbacks.on_worker_stop {
        if let Err(e) = cb(worker.info.clone()).await {
            tracing::error!(error = %e, "on_worker_stop failed");
        }
    }
    context::set_current(None);
    // What the worker's parts hold that holds the worker (endpoints, their per-worker
    // state) goes now.
    worker.drop_parts();
}

/// Before a reload's stop: stops accepting, then hands the connections of WebSocket
/// endpoints that survive reloads to the master, batch after batch, each announced on `tx`
/// after it is on `socket`. Those still busy after `drain` (at least a second) stay, and the
/// stop closes them. Broadcasts made meanwhile still go to the other workers, and all those
/// made before a batch left go before it: a member that moves sees its publisher's
/// messages in order.
async fn hand_over_connections<W>(
    worker: &Rc<WorkerCtx>,
    socket: &OwnedFd,
    tx: &mut ipc::codec::ChannelWriter<W>,
    relay_rx: &mut mpsc::UnboundedReceiver<Relayed>,
    drain: Duration,
) where
    W: tokio::io::AsyncWrite + Unpin,
{
    worker.stop_accepting();
    let listed = crate::ws::handover::begin(worker);
    if listed == 0 {
        return;
    }
    let started = tokio::time::Instant::now();
    let deadline = started + drain.max(Duration::from_secs(1));
    let mut sent = 0;
    loop {
        let batch = tokio::select! {
            batch = crate::ws::handover::next_batch(worker, deadline) => batch,
            Some(relayed) = relay_rx.recv() => {
                relay(worker, tx, relayed).await;
                continue;
            }
        };
        let Some(batch) = batch else {
            break;
        };
        while let Ok(relayed) = relay_rx.try_recv() {
            relay(worker, tx, relayed).await;
        }
        match batch.send(socket) {
            Ok(count) => {
                sent += count;
                if write_msg(tx, &ToMaster::Detached { count }).await.is_err() {
                    break;
                }
            }
            Err(e) => tracing::error!("cannot hand WebSocket connections over: {e}"),
        }
    }
    tracing::info!(
        sent,
        listed,
        ms = started.elapsed().as_millis() as u64,
        "handed WebSocket connections over"
    );
}

/// Writes a broadcast for the other workers to the master.
async fn relay<W: tokio::io::AsyncWrite + Unpin>(
    worker: &WorkerCtx,
    tx: &mut ipc::codec::ChannelWriter<W>,
    (topic, stamp, broadcast): Relayed,
) {
    let _ = write_broadcast(tx, &topic, stamp, &broadcast).await;
    worker.relay_sent(broadcast.len());
}
