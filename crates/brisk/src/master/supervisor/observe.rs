//! What the master sees of its workers: their counters (asked every second, for status,
//! metrics, KPIs and alerts), the status page, the open connections, the health and
//! readiness probes, and the schedules' runs.

use super::*;

/// What the master keeps of its workers' counters, and what it makes of them.
pub(super) struct Observation {
    /// The counters of workers that have exited.
    pub(super) retired: RefCell<crate::stats::RetiredTotals>,
    /// The latest counters of each worker whose channel is open, by pid. When the channel
    /// closes they move into `retired` in the same step, so the sum of the two never goes
    /// backwards.
    pub(super) looks: RefCell<HashMap<i32, WorkerStatus>>,
    /// When `looks` were last refreshed for a scrape, and the refresh under way: scrapes
    /// within a second of one another share one round of questions to the workers.
    pub(super) looked_at: Cell<Option<Instant>>,
    pub(super) looking: tokio::sync::Mutex<()>,
    /// The KPIs of the last minutes, a sample a second.
    pub(super) history: RefCell<KpiHistory>,
    /// The alert rules, if the app has any.
    pub(super) alerting: RefCell<Option<Alerting>>,
}

impl Observation {
    /// Nothing seen yet, with the app's alert rules.
    pub(super) fn new(alerting: Option<Alerting>) -> Self {
        Observation {
            retired: RefCell::default(),
            looks: RefCell::default(),
            looked_at: Cell::new(None),
            looking: tokio::sync::Mutex::new(()),
            history: RefCell::default(),
            alerting: RefCell::new(alerting),
        }
    }
}

impl Supervisor {
    /// Asks every worker for its counters each [`COUNTERS_PERIOD`], so that a worker that is
    /// killed leaves its totals as of at most that long ago (one that stops in order reports
    /// its final ones).
    pub(super) async fn watch_counters(self: Rc<Self>) {
        let mut tick = tokio::time::interval(COUNTERS_PERIOD);
        while !self.stopping.get() {
            tick.tick().await;
            let workers = self.current_workers();
            ask_each(&workers, Question::Status, COUNTERS_PERIOD).await;
            self.take_kpi_sample(&workers);
            self.check_recycling(&workers);
        }
    }

    /// Runs schedule `i` for as long as the master does: sleeps until each due time, then tells
    /// the current worker of the schedules slot to run it (unless the scheduler skips it).
    pub(super) async fn keep_schedule(self: Rc<Self>, i: usize) {
        let Some((scheduler, slot)) = self.scheduler.clone() else {
            return;
        };
        while !self.stopping.get() {
            let Some(due) = scheduler.next_due(i) else {
                return;
            };
            let wait = due
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            tokio::time::sleep(wait).await;
            if self.stopping.get() {
                return;
            }
            let worker = self.current.borrow()[slot].clone();
            if let Some(run) = scheduler.begin_run(i, worker.as_ref().map(|w| w.pid)) {
                if let Some(w) = worker {
                    w.tell(ToWorker::RunJob { job: i, run });
                }
            }
        }
    }

    /// Adds a second to the KPI history from the latest looks, and judges it for alerts.
    pub(super) fn take_kpi_sample(&self, current: &[Rc<Worker>]) {
        let looks = self.observed.looks.borrow();
        let now: Vec<WorkerStatus> = current
            .iter()
            .filter_map(|w| looks.get(&w.pid).cloned())
            .collect();
        let all: Vec<WorkerStatus> = looks.values().cloned().collect();
        drop(looks);
        let mut history = self.observed.history.borrow_mut();
        let sample = history.add(&now, &all, &self.observed.retired.borrow());
        if let Some(alerting) = self.observed.alerting.borrow_mut().as_mut() {
            alerting.observe(sample);
        }
    }

    /// Asks every worker for its status.
    pub(super) async fn status(&self) -> MasterStatus {
        let workers = self.current_workers();
        let answers = ask_each(&workers, Question::Status, Duration::from_secs(3)).await;
        let mut rows: Vec<WorkerStatus> = Vec::new();
        let mut unresponsive = Vec::new();
        for (w, a) in workers.iter().zip(answers) {
            match a {
                Some(Answer::Status(s)) => rows.push(*s),
                _ => unresponsive.push(w.pid),
            }
        }
        MasterStatus {
            name: self.plan.name.clone(),
            master_pid: std::process::id() as i32,
            uptime_s: self.started.elapsed().as_secs(),
            restarts: self.restarts.get(),
            recycles: *self.recycles.borrow(),
            dropped_broadcasts: self.relaying.dropped_broadcasts.get()
                + self.observed.retired.borrow().broadcasts_dropped
                + rows.iter().map(|w| w.broadcasts_dropped).sum::<u64>(),
            retired: self.observed.retired.borrow().clone(),
            workers: rows,
            unresponsive,
            load_average: crate::stats::load_average(),
            schedules: self
                .scheduler
                .as_ref()
                .map(|(s, _)| s.status())
                .unwrap_or_default(),
            cluster: self.cluster.as_ref().map(|bus| bus.status()),
        }
    }

    /// The metrics exposition: asks every live worker (those being retired too) for fresh
    /// counters, then adds what the master kept of the workers that have exited. A worker that
    /// does not answer in time counts as of its last answer.
    pub(super) async fn metrics(&self) -> String {
        self.refresh_looks().await;
        let mut rows: Vec<WorkerStatus> = self.observed.looks.borrow().values().cloned().collect();
        rows.sort_by(|a, b| (&a.server, a.worker, a.pid).cmp(&(&b.server, b.worker, b.pid)));
        let retired = self.observed.retired.borrow().clone();
        let alerting = self.observed.alerting.borrow();
        metrics::exposition(&Scrape {
            retired: &retired,
            workers: &rows,
            restarts: self.restarts.get(),
            recycles: *self.recycles.borrow(),
            dropped_broadcasts: self.relaying.dropped_broadcasts.get()
                + retired.broadcasts_dropped
                + rows.iter().map(|w| w.broadcasts_dropped).sum::<u64>(),
            master_pid: std::process::id() as i32,
            alerts: alerting.as_ref().map(Alerting::states).unwrap_or_default(),
            webhook_failures: alerting.as_ref().map_or(0, Alerting::webhook_failures),
        })
    }

    /// Asks every live worker (those being retired too) for fresh counters, which land in
    /// `looks`; one that does not answer within 2 s keeps its last look. Looks less than a
    /// second old are fresh enough, and a scrape that comes while another's refresh is under
    /// way waits for it instead of asking again: however many scrape at once, the workers
    /// answer one round a second.
    pub(super) async fn refresh_looks(&self) {
        let _one_at_a_time = self.observed.looking.lock().await;
        if self
            .observed
            .looked_at
            .get()
            .is_some_and(|t| t.elapsed() < SCRAPE_FRESHNESS)
        {
            return;
        }
        self.ask_for_looks().await;
        self.observed.looked_at.set(Some(Instant::now()));
    }

    pub(super) async fn ask_for_looks(&self) {
        let workers: Vec<_> = self.live.borrow().values().cloned().collect();
        ask_each(&workers, Question::Status, Duration::from_secs(2)).await;
    }

    /// The status page, from fresh looks at the current workers and the KPI history.
    pub(super) async fn status_page(&self) -> String {
        self.refresh_looks().await;
        let looks = self.observed.looks.borrow();
        let mut workers: Vec<WorkerStatus> = self
            .current_workers()
            .iter()
            .filter_map(|w| looks.get(&w.pid).cloned())
            .collect();
        drop(looks);
        workers.sort_by(|a, b| (&a.server, a.worker).cmp(&(&b.server, b.worker)));
        let history = self.observed.history.borrow();
        let alerting = self.observed.alerting.borrow();
        let alerts = alerting.as_ref().map(Alerting::states).unwrap_or_default();
        status_page::render(&StatusView {
            name: &self.plan.name,
            uptime_s: self.started.elapsed().as_secs(),
            workers: &workers,
            history: history.samples().iter().collect(),
            alerts: &alerts,
            load_average: crate::stats::load_average(),
        })
    }

    /// Asks every worker for its connections.
    pub(super) async fn connections(&self) -> Vec<ConnectionInfo> {
        let workers = self.current_workers();
        let answers = ask_each(&workers, Question::Connections, Duration::from_secs(10)).await;
        answers
            .into_iter()
            .flat_map(|a| match a {
                Some(Answer::Connections(list)) => list,
                _ => Vec::new(),
            })
            .collect()
    }
}

impl Observed for Supervisor {
    async fn metrics(&self) -> String {
        Supervisor::metrics(self).await
    }

    async fn status_page(&self) -> String {
        Supervisor::status_page(self).await
    }

    async fn health(&self) -> (bool, String) {
        let workers = self.current_workers();
        let answers = ask_each(&workers, Question::Status, PROBE_TIMEOUT).await;
        let silent: Vec<String> = workers
            .iter()
            .zip(&answers)
            .filter(|(_, a)| !matches!(a, Some(Answer::Status(_))))
            .map(|(w, _)| self.describe_worker(w))
            .collect();
        match silent.is_empty() {
            true => (
                true,
                format!("ok: the master and its {} workers answer\n", workers.len()),
            ),
            false => (
                false,
                format!(
                    "not answering within {} s: {}\n",
                    PROBE_TIMEOUT.as_secs(),
                    silent.join(", ")
                ),
            ),
        }
    }

    fn not_ready(&self) -> Option<String> {
        if self.stopping.get() {
            return Some("stopping\n".into());
        }
        let waiting: Vec<String> = self
            .current
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, w)| {
                w.as_ref()
                    .is_none_or(|w| w.channel.ready.borrow().is_some())
            })
            .map(|(slot, _)| self.describe(slot))
            .collect();
        if !waiting.is_empty() {
            return Some(format!("not ready yet: {}\n", waiting.join(", ")));
        }
        None
    }

    async fn readiness(&self) -> (bool, String) {
        let slots = self.current.borrow().len();
        let workers = self.current_workers();
        let answers = ask_each(&workers, Question::Readiness, PROBE_TIMEOUT).await;
        let mut failing = Vec::new();
        for (w, answer) in workers.iter().zip(answers) {
            let who = self.describe_worker(w);
            match answer {
                Some(Answer::Readiness(failed)) => failing.extend(
                    failed
                        .into_iter()
                        .map(|(name, why)| format!("{name}: {why} ({who})")),
                ),
                _ => failing.push(format!(
                    "no answer within {} s ({who})",
                    PROBE_TIMEOUT.as_secs()
                )),
            }
        }
        match failing.is_empty() {
            true => (true, format!("ready: {slots} workers\n")),
            false => (false, format!("not ready: {}\n", failing.join("; "))),
        }
    }
}

/// Asks each of `workers` `question`, all at once: their answers in order (`None`: none
/// within `timeout`, or the worker is gone).
async fn ask_each(
    workers: &[Rc<Worker>],
    question: Question,
    timeout: Duration,
) -> Vec<Option<Answer>> {
    let asks = workers.iter().map(|w| w.ask(question, timeout));
    futures_util::future::join_all(asks).await
}

/// How long `/healthz` waits for each worker's answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How old a scrape's look at the workers may be (see `Supervisor::refresh_looks`).
const SCRAPE_FRESHNESS: Duration = Duration::from_secs(1);
