//! [`Schedule`]: a job run at fixed intervals or on a cron expression (feature `schedules`),
//! in exactly one process of the app however many workers it has.
//!
//! The master keeps the clock: at each due time it tells one worker, that of the app's
//! `schedules` process (made for the app's schedules, one worker), to run the job, and hears
//! when it is done. So a run never happens twice, even while a reload replaces that worker, and
//! a job does not overlap itself unless [`overlap`](Schedule::overlap) allows it: a due time
//! that finds the previous run still going is skipped and counted. A run that fails, panics or
//! loses its worker is logged and counted, and the job runs again at its next time. `status`
//! shows each schedule's next run and its counts.

use std::time::{Duration, SystemTime};

use crate::runtime::context::{WorkerCallback, WorkerInfo};
use crate::runtime::handler::{boxed, HandlerOutput};

/// When a schedule is due.
#[derive(Clone)]
pub(crate) enum When {
    /// Every this long, counted from the master's start.
    Every(Duration),
    /// On a cron expression, in UTC.
    #[cfg(feature = "schedules")]
    Cron(Box<croner::Cron>),
    /// A cron expression that does not parse: the start fails with this message.
    #[cfg_attr(not(feature = "schedules"), allow(dead_code))]
    Invalid(String),
}

/// A job and when to run it.
///
/// ```no_run
/// use std::time::Duration;
/// use brisk::schedule::Schedule;
///
/// let heartbeat = Schedule::every("heartbeat", Duration::from_secs(10), |_| async {
///     tracing::info!("still here");
/// });
/// # #[cfg(feature = "schedules")]
/// let nightly = Schedule::cron("nightly", "0 30 3 * * *", |_| async {
///     tracing::info!("03:30:00 UTC");
/// });
/// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
/// brisk::App::new("app").server(server).schedule(heartbeat).run();
/// ```
#[derive(Clone)]
pub struct Schedule {
    pub(crate) name: String,
    pub(crate) spec: String,
    pub(crate) when: When,
    pub(crate) overlap: bool,
    pub(crate) job: WorkerCallback,
}

impl Schedule {
    /// Runs `job` every `interval` (at least 1 ms), first one interval after the start.
    pub fn every<F, Fut>(name: impl Into<String>, interval: Duration, job: F) -> Self
    where
        F: Fn(WorkerInfo) -> Fut + 'static,
        Fut: std::future::Future + 'static,
        Fut::Output: HandlerOutput,
    {
        let interval = interval.max(Duration::from_millis(1));
        Schedule {
            name: name.into(),
            spec: format!("every {interval:?}"),
            when: When::Every(interval),
            overlap: false,
            job: std::rc::Rc::new(move |w| boxed(job(w))),
        }
    }

    /// Runs `job` on the cron expression `expression`, in UTC: five fields (minute, hour, day
    /// of month, month, day of week), or six with seconds first. An expression that does not
    /// parse fails the app's start with the expression and the reason.
    #[cfg(feature = "schedules")]
    pub fn cron<F, Fut>(name: impl Into<String>, expression: &str, job: F) -> Self
    where
        F: Fn(WorkerInfo) -> Fut + 'static,
        Fut: std::future::Future + 'static,
        Fut::Output: HandlerOutput,
    {
        use croner::parser::{CronParser, Seconds};
        let name = name.into();
        let parsed = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expression);
        let when = match parsed {
            Ok(cron) => When::Cron(Box::new(cron)),
            Err(e) => When::Invalid(format!(
                "schedule {name}: cron expression {expression:?}: {e}"
            )),
        };
        Schedule {
            name,
            spec: format!("cron {expression}"),
            when,
            overlap: false,
            job: std::rc::Rc::new(move |w| boxed(job(w))),
        }
    }

    /// Whether a run may start while the previous one is still going (default `false`:
    /// that due time is skipped and counted).
    pub fn overlap(mut self, allow: bool) -> Self {
        self.overlap = allow;
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Why the schedule cannot run (a cron expression that does not parse), if so.
    pub(crate) fn problem(&self) -> Option<&str> {
        match &self.when {
            When::Invalid(why) => Some(why),
            _ => None,
        }
    }

    /// The first due time after `now`; `started` is when the master started (intervals count
    /// from it).
    pub(crate) fn next_after(&self, now: SystemTime, started: SystemTime) -> Option<SystemTime> {
        match &self.when {
            When::Every(interval) => {
                let since = now.duration_since(started).unwrap_or_default();
                let n = since.as_nanos() / interval.as_nanos().max(1) + 1;
                let offset = interval.checked_mul(u32::try_from(n).ok()?)?;
                started.checked_add(offset)
            }
            #[cfg(feature = "schedules")]
            When::Cron(cron) => {
                let now: chrono::DateTime<chrono::Utc> = now.into();
                cron.find_next_occurrence(&now, false).ok().map(Into::into)
            }
            When::Invalid(_) => None,
        }
    }
}

/// The name of the process the app's schedules run in.
pub(crate) const PROCESS_NAME: &str = "schedules";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_count_from_the_start() {
        let s = Schedule::every("t", Duration::from_secs(10), |_| async {});
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let at = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(s.next_after(t0, t0), Some(at(10)));
        assert_eq!(s.next_after(at(9), t0), Some(at(10)));
        assert_eq!(s.next_after(at(10), t0), Some(at(20)));
        assert_eq!(s.next_after(at(25), t0), Some(at(30)));
    }

    #[cfg(feature = "schedules")]
    #[test]
    fn cron_expressions_with_and_without_seconds() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000); // 22:13:20 UTC
        let s = Schedule::cron("a", "*/15 * * * * *", |_| async {});
        assert_eq!(s.problem(), None);
        assert_eq!(s.next_after(t0, t0), Some(t0 + Duration::from_secs(10)));
        let m = Schedule::cron("b", "15 * * * *", |_| async {});
        assert_eq!(m.next_after(t0, t0), Some(t0 + Duration::from_secs(100)));
        let bad = Schedule::cron("c", "61 * * * *", |_| async {});
        let why = bad.problem().unwrap();
        assert!(
            why.starts_with("schedule c: cron expression \"61 * * * *\": "),
            "{why}"
        );
        assert_eq!(bad.next_after(t0, t0), None);
    }
}
