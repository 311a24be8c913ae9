//! The worker entry: what a process started by the master as a worker does. It takes its spec
//! (which service, which index, the app's defaults), opens or inherits the listener, starts
//! the service on a single-threaded tokio runtime with a `LocalSet`, and answers the master
//! over its socketpair until it is told to stop (or the master is gone).

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::env::{self, ENV_HANDOVER_FD, ENV_IPC_FD, ENV_IPC_VERSION, ENV_LISTEN_FD, ENV_WORKER};
use crate::ipc::codec::{read_packet, write_broadcast, write_msg};
use crate::ipc::{self, Answer, Packet, Question, ToMaster, ToWorker};
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

/// One of the app's readiness checks: `Ok` when what it checks is reachable.
pub(crate) type ReadinessCheck = Rc<dyn Fn() -> crate::runtime::handler::HandlerFuture>;

/// How long each readiness check may take before it counts as failed.
const READINESS_TIMEOUT: Duration = Duration::from_millis(1500);

/// Runs `checks` all at once (the answer takes as long as the slowest, at most
/// [`READINESS_TIMEOUT`]); the ones that failed, and why.
async fn failed_checks(checks: &[(String, ReadinessCheck)]) -> Vec<(String, String)> {
    let runs = checks.iter().map(|(name, check)| async move {
        match tokio::time::timeout(READINESS_TIMEOUT, check()).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some((name.clone(), e.to_string())),
            Err(_) => Some((
                name.clone(),
                format!("no answer within {} ms", READINESS_TIMEOUT.as_millis()),
            )),
        }
    });
    futures_util::future::join_all(runs)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Parses this process's `SERVICE:INDEX` worker spec from the environment.
pub(crate) fn spec_from_env() -> Result<(usize, usize), String> {
    let spec = env::worker_spec().unwrap_or_default();
    spec.split_once(':')
        .and_then(|(s, i)| Some((s.parse().ok()?, i.parse().ok()?)))
        .ok_or_else(|| format!("bad {ENV_WORKER} value {spec:?}"))
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
    let WorkerSpec {
        service: svc,
        index,
        defaults,
        readiness,
        #[cfg(feature = "otel")]
            tracing: traces,
    } = spec;
    // Shared with the tasks that run them (one per question).
    let readiness = Rc::new(readiness);
    let info = WorkerInfo {
        server: svc.name.clone(),
        id: index,
        pid: std::process::id() as i32,
    };
    let span = tracing::info_span!("worker", id = index, server = %info.server);
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
    if let Some((settings, app)) = &traces {
        if let Err(e) = crate::otel::start(settings, app, index) {
            let url = crate::redact::redacted(settings.traces_url());
            tracing::error!("cannot trace to {url}: {e}");
            return ExitCode::FAILURE;
        }
    }
    // Also where database drivers go (runtime::local_tasks), for as long as the worker runs.
    let local = Rc::new(tokio::task::LocalSet::new());
    let task_set = local.clone();
    let worker_loop = async move {
        // SAFETY: the master passed this descriptor to us and nothing else owns it.
        let std_ipc = unsafe { std::os::unix::net::UnixStream::from_raw_fd(ipc_fd) };
        let _ = std_ipc.set_nonblocking(true);
        let ipc = match tokio::net::UnixStream::from_std(std_ipc) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("cannot use the control channel: {e}");
                return ExitCode::FAILURE;
            }
        };
        let (rx, tx) = ipc.into_split();
        let (mut rx, mut tx) = (ipc::reader(rx), ipc::writer(tx));
        let (relay_tx, mut relay_rx) = mpsc::unbounded_channel();
        // Jobs the master asked for report here when they end, and group membership.
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<ToMaster>();
        let worker = Rc::new(WorkerCtx::new(
            info.clone(),
            defaults,
            relay_tx,
            done_tx.clone(),
        ));
        worker.set_task_set(task_set);
        context::set_current(Some(worker.clone()));
        #[cfg(feature = "redis")]
        crate::ws::start_presence(&worker);
        let lag = tokio::task::spawn_local(worker.clone().watch_loop_lag());
        let limits = svc.limits.apply(defaults);
        // A custom process has no listener: nothing to start but its callbacks.
        let started = match &svc.listen {
            None => Ok(()),
            Some(listen) => {
                worker.set_max_connections(listen.max_connections);
                worker.recycle_after(listen.recycle.draw_limit());
                match env::fd(ENV_LISTEN_FD) {
                    Some(fd) => {
                        // SAFETY: the master bound this socket for us and passed it down.
                        let l = unsafe { Listener::from_fd(listen.address.scheme(), fd) };
                        (svc.start)(worker.clone(), l, limits)
                    }
                    None => Err(std::io::Error::other(format!(
                        "{ENV_LISTEN_FD} is not set: the master passes each worker its socket"
                    ))),
                }
            }
        };
        if let Err(e) = started {
            let msg = format!("cannot listen on {}: {e}", info.server);
            let _ = write_msg(&mut tx, &ToMaster::Failed(msg)).await;
            return ExitCode::FAILURE;
        }
        if let Some(cb) = &svc.worker_callbacks.on_worker_start {
            if let Err(e) = cb(info.clone()).await {
                Stats::add(&worker.stats.throw_exception, 1);
                tracing::error!(error = %e, "on_worker_start failed");
            }
        }
        if write_msg(&mut tx, &ToMaster::Ready).await.is_err() {
            return ExitCode::FAILURE;
        }
        tracing::debug!(pid = info.pid, "worker ready");
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        // SAFETY: the master passed this descriptor to us and nothing else owns it.
        let handover = env::fd(ENV_HANDOVER_FD).map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
        let (drain, hand_over) = loop {
            let msg = tokio::select! {
                m = read_packet::<_, ToWorker>(&mut rx) => m,
                Some(relayed) = relay_rx.recv() => {
                    relay(&worker, &mut tx, relayed).await;
                    continue;
                }
                Some(done) = done_rx.recv() => {
                    let _ = write_msg(&mut tx, &done).await;
                    continue;
                }
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => break (Duration::ZERO, false),
            };
            let msg = match msg {
                Ok(Some(Packet::Broadcast {
                    topic,
                    stamp,
                    broadcast,
                })) => {
                    crate::ws::deliver_relayed(&worker, &topic, stamp, broadcast);
                    continue;
                }
                Ok(Some(Packet::Msg(m))) => Ok(Some(m)),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            match msg {
                Ok(Some(ToWorker::Ask {
                    id,
                    question: Question::Status,
                })) => {
                    let answer = Answer::Status(Box::new(worker.snapshot()));
                    let _ = write_msg(&mut tx, &ToMaster::Answer { id, answer }).await;
                }
                Ok(Some(ToWorker::Ask {
                    id,
                    question: Question::Connections,
                })) => {
                    let answer = Answer::Connections(worker.connection_list());
                    let _ = write_msg(&mut tx, &ToMaster::Answer { id, answer }).await;
                }
                Ok(Some(ToWorker::Stop {
                    drain_ms,
                    hand_over,
                    to_another_master,
                })) => {
                    crate::ws::handover::members_stay(&worker, to_another_master);
                    break (Duration::from_millis(drain_ms), hand_over);
                }
                Ok(Some(ToWorker::NoMoreHandovers)) => {
                    worker.part::<crate::ws::replay::Replay>().stop_keeping();
                    // Behind the groups its restored connections joined, on the same queue.
                    let _ = done_tx.send(ToMaster::KeepingStopped);
                }
                Ok(Some(ToWorker::Restore { count })) => match &handover {
                    Some(socket) => crate::ws::handover::restore(&worker, socket, count),
                    None => {
                        tracing::error!("{count} connections handed over, but no handover socket")
                    }
                },
                Ok(Some(ToWorker::ReopenLogs)) => crate::log_file::reopen_all(),
                // Off this loop: slow checks (a database that does not answer) hold up
                // neither the master's other questions nor the broadcasts relayed here.
                Ok(Some(ToWorker::Ask {
                    id,
                    question: Question::Readiness,
                })) => {
                    let (checks, answers) = (readiness.clone(), done_tx.clone());
                    tokio::task::spawn_local(async move {
                        let answer = Answer::Readiness(failed_checks(&checks).await);
                        let _ = answers.send(ToMaster::Answer { id, answer });
                    });
                }
                Ok(Some(ToWorker::RunJob { job, run })) => {
                    run_job(
                        &worker,
                        svc.jobs.get(job).cloned(),
                        job,
                        run,
                        done_tx.clone(),
                    );
                }
                Ok(None) | Err(_) => {
                    tracing::warn!("lost the master; stopping");
                    break (Duration::ZERO, false);
                }
            }
        };
        let handing = tokio::time::Instant::now();
        if let (true, Some(socket)) = (hand_over, &handover) {
            hand_over_connections(&worker, socket, &mut tx, &mut relay_rx, drain).await;
        }
        // The drain time counts from the stop, the handover included: spent twice (a handler
        // busy until the handover's deadline, then the whole drain again) it outlasted the
        // master's patience, and the worker was killed mid-drain, its counters unsent.
        let drain = drain.saturating_sub(handing.elapsed());
        tracing::debug!(drain_ms = drain.as_millis() as u64, "worker stopping");
        lag.abort();
        // Broadcasts made while draining (a request in flight, an `on_close`) still go to
        // the other workers, the last of them too: a request answered here was not sent to
        // this worker's members alone.
        let draining = worker.shut_down(drain);
        tokio::pin!(draining);
        loop {
            tokio::select! {
                _ = &mut draining => break,
                Some(relayed) = relay_rx.recv() => relay(&worker, &mut tx, relayed).await,
            }
        }
        while let Ok(relayed) = relay_rx.try_recv() {
            relay(&worker, &mut tx, relayed).await;
        }
        crate::log_file::flush_all();
        let _ = write_msg(&mut tx, &ToMaster::Final(Box::new(worker.snapshot()))).await;
        worker.timers.del_all();
        // Still this thread's worker: what on_worker_stop calls (a timer, a broadcast to
        // the members it still has) finds it, as every callback does.
        if let Some(cb) = &svc.worker_callbacks.on_worker_stop {
            if let Err(e) = cb(info.clone()).await {
                tracing::error!(error = %e, "on_worker_stop failed");
            }
        }
        context::set_current(None);
        // What the worker's parts hold that holds the worker (endpoints, their per-worker
        // state) goes now.
        worker.drop_parts();
        ExitCode::SUCCESS
    };
    // The worker's loop is a task of the local set, not the future `block_on` polls: that one
    // is polled again, with every branch of the loop's `select!`, each time any task wakes.
    let exit = local.block_on(&rt, async move {
        match tokio::task::spawn_local(worker_loop).await {
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

/// Runs job `job` (one of the service's schedules) as its own task, and reports how it ended
/// on `done`: an error or a panic is logged, counted as `throw_exception`, and reported.
fn run_job(
    worker: &Rc<WorkerCtx>,
    f: Option<crate::runtime::context::WorkerCallback>,
    job: usize,
    run: u64,
    done: mpsc::UnboundedSender<ToMaster>,
) {
    use futures_util::FutureExt;
    let worker = worker.clone();
    tokio::task::spawn_local(async move {
        let error = match f {
            None => Some(format!("this worker has no job {job}")),
            Some(f) => match std::panic::AssertUnwindSafe(f(worker.info.clone()))
                .catch_unwind()
                .await
            {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(panic) => Some(format!(
                    "panicked: {}",
                    crate::runtime::handler::panic_message(&panic)
                )),
            },
        };
        if error.is_some() {
            Stats::add(&worker.stats.throw_exception, 1);
        }
        let _ = done.send(ToMaster::JobDone { job, run, error });
    });
}
