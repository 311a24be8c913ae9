//! Alerts on the app's KPIs ([`Alerts`], given to `App::alerts`): throughput under a floor,
//! HTTP p99 over a ceiling, workers' memory over a ceiling, error rate over a ceiling. The
//! master looks at the figures once a second; an alert fires when its condition has held for
//! the hold time, and resolves when the figure has been back past the threshold by a margin
//! ([`RESOLVE_MARGIN`]) for the hold time too. Both edges are needed so that a figure hovering
//! at the threshold neither flaps nor sends a stream of messages: each firing and each
//! resolution is logged once, and POSTed once to the webhook if there is one.

use std::time::Duration;

use serde::Serialize;

/// How far past its threshold (as a fraction of it) a figure must be back before its alert
/// resolves: 10 %.
pub const RESOLVE_MARGIN: f64 = 0.1;

/// The thresholds the master watches, and where it reports.
///
/// ```
/// use std::time::Duration;
/// use brisk::alerts::Alerts;
///
/// let alerts = Alerts::new()
///     .throughput_below(100.0)
///     .p99_above(Duration::from_millis(250))
///     .memory_above(512 << 20)
///     .error_rate_above(0.01)
///     .hold(Duration::from_secs(30))
///     .webhook("http://127.0.0.1:9000/alerts");
/// assert_eq!(alerts.rules().len(), 4);
/// ```
#[derive(Clone)]
pub struct Alerts {
    pub(crate) throughput_below: Option<f64>,
    pub(crate) p99_above: Option<Duration>,
    pub(crate) memory_above: Option<u64>,
    pub(crate) error_rate_above: Option<f64>,
    pub(crate) hold: Duration,
    pub(crate) webhook: Option<String>,
}

/// Shows the webhook by its scheme and host only: its path and query often hold a token.
impl std::fmt::Debug for Alerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerts")
            .field("throughput_below", &self.throughput_below)
            .field("p99_above", &self.p99_above)
            .field("memory_above", &self.memory_above)
            .field("error_rate_above", &self.error_rate_above)
            .field("hold", &self.hold)
            .field(
                "webhook",
                &self.webhook.as_deref().map(crate::redact::origin_only),
            )
            .finish()
    }
}

impl Default for Alerts {
    fn default() -> Self {
        Alerts::new()
    }
}

impl Alerts {
    /// No thresholds yet; a hold time of 10 s.
    pub fn new() -> Self {
        Alerts {
            throughput_below: None,
            p99_above: None,
            memory_above: None,
            error_rate_above: None,
            hold: Duration::from_secs(10),
            webhook: None,
        }
    }

    /// Fires when the app answers fewer than `per_second` messages a second (every protocol:
    /// Workerman's `total_request`).
    pub fn throughput_below(mut self, per_second: f64) -> Self {
        self.throughput_below = Some(per_second);
        self
    }

    /// Fires when the HTTP p99 over the last 10 s (to the response head) is above `latency`.
    pub fn p99_above(mut self, latency: Duration) -> Self {
        self.p99_above = Some(latency);
        self
    }

    /// Fires when the workers' resident memory, added up, is above `bytes`.
    pub fn memory_above(mut self, bytes: u64) -> Self {
        self.memory_above = Some(bytes);
        self
    }

    /// Fires when handler errors per message over the last 10 s are above `fraction`
    /// (0.01: one in a hundred).
    pub fn error_rate_above(mut self, fraction: f64) -> Self {
        self.error_rate_above = Some(fraction);
        self
    }

    /// How long a condition must hold before its alert fires, and be clear before it
    /// resolves (default 10 s; at least 1 s).
    pub fn hold(mut self, hold: Duration) -> Self {
        self.hold = hold.max(Duration::from_secs(1));
        self
    }

    /// POSTs each firing and resolution as JSON ([`AlertEvent`]) to `url`, through Brisk's
    /// HTTP client (the `client` feature). A webhook that is down or slow delays nothing:
    /// calls time out after 5 s, and failures are counted and logged at most once a minute.
    pub fn webhook(mut self, url: impl Into<String>) -> Self {
        self.webhook = Some(url.into());
        self
    }

    /// The rules these thresholds make, in a fixed order.
    pub fn rules(&self) -> Vec<Rule> {
        let mut rules = Vec::new();
        if let Some(v) = self.throughput_below {
            rules.push(Rule::new(Kpi::Throughput, Direction::Below, v));
        }
        if let Some(d) = self.p99_above {
            rules.push(Rule::new(
                Kpi::P99,
                Direction::Above,
                d.as_secs_f64() * 1000.0,
            ));
        }
        if let Some(b) = self.memory_above {
            rules.push(Rule::new(Kpi::Memory, Direction::Above, b as f64));
        }
        if let Some(f) = self.error_rate_above {
            rules.push(Rule::new(Kpi::ErrorRate, Direction::Above, f));
        }
        rules
    }

    /// The hold time in whole seconds (at least 1).
    pub(crate) fn hold_seconds(&self) -> u64 {
        self.hold.as_secs().max(1)
    }
}

/// A figure an alert watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kpi {
    /// Messages answered per second.
    Throughput,
    /// HTTP p99 over the last 10 s, in milliseconds.
    P99,
    /// The workers' resident memory, in bytes.
    Memory,
    /// Handler errors per message over the last 10 s.
    ErrorRate,
}

impl Kpi {
    /// The alert's name in logs and webhooks.
    pub fn alert_name(self) -> &'static str {
        match self {
            Kpi::Throughput => "throughput_below",
            Kpi::P99 => "p99_above",
            Kpi::Memory => "memory_above",
            Kpi::ErrorRate => "error_rate_above",
        }
    }

    /// The unit of its figures.
    pub fn unit(self) -> &'static str {
        match self {
            Kpi::Throughput => "requests/s",
            Kpi::P99 => "ms",
            Kpi::Memory => "bytes",
            Kpi::ErrorRate => "errors/request",
        }
    }
}

/// Which side of its threshold is bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Bad above the threshold.
    Above,
    /// Bad below the threshold.
    Below,
}

/// One alert and its state: firing or not, and how many seconds in a row the figure has
/// pointed the other way.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The figure it watches.
    pub kpi: Kpi,
    /// Which side is bad.
    pub direction: Direction,
    /// The threshold, in the figure's unit.
    pub threshold: f64,
    firing: bool,
    streak: u64,
}

/// What a rule did at one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transition {
    /// The condition held for the hold time.
    Firing,
    /// The figure was back past the threshold by the margin for the hold time.
    Resolved,
}

impl Rule {
    fn new(kpi: Kpi, direction: Direction, threshold: f64) -> Self {
        Rule {
            kpi,
            direction,
            threshold,
            firing: false,
            streak: 0,
        }
    }

    /// Whether the alert is firing.
    pub fn is_firing(&self) -> bool {
        self.firing
    }

    /// Takes one second's figure (`None`: nothing to judge, e.g. no request for a p99,
    /// which counts as clear) and says if the alert changed state. `hold` is in looks
    /// (seconds).
    ///
    /// ```
    /// use brisk::alerts::{Alerts, Transition};
    ///
    /// let mut rule = Alerts::new().error_rate_above(0.1).rules().remove(0);
    /// // Two bad seconds with a hold of 2: firing at the second.
    /// assert_eq!(rule.observe(Some(0.5), 2), None);
    /// assert_eq!(rule.observe(Some(0.5), 2), Some(Transition::Firing));
    /// // 0.095 is under the threshold but not by the 10 % margin: still firing.
    /// assert_eq!(rule.observe(Some(0.095), 2), None);
    /// assert_eq!(rule.observe(Some(0.095), 2), None);
    /// assert_eq!(rule.observe(Some(0.0), 2), None);
    /// assert_eq!(rule.observe(None, 2), Some(Transition::Resolved));
    /// ```
    pub fn observe(&mut self, value: Option<f64>, hold: u64) -> Option<Transition> {
        let margin = self.threshold * RESOLVE_MARGIN;
        let (bad, clear) = match (value, self.direction) {
            (None, _) => (false, true),
            (Some(v), Direction::Above) => (v > self.threshold, v < self.threshold - margin),
            (Some(v), Direction::Below) => (v < self.threshold, v > self.threshold + margin),
        };
        let toward_change = if self.firing { clear } else { bad };
        if !toward_change {
            self.streak = 0;
            return None;
        }
        self.streak += 1;
        if self.streak < hold.max(1) {
            return None;
        }
        self.streak = 0;
        self.firing = !self.firing;
        Some(if self.firing {
            Transition::Firing
        } else {
            Transition::Resolved
        })
    }
}

/// What the webhook receives (as JSON) when an alert fires or resolves.
#[derive(Debug, Clone, Serialize)]
pub struct AlertEvent {
    /// The app's name.
    pub app: String,
    /// `throughput_below`, `p99_above`, `memory_above` or `error_rate_above`.
    pub alert: &'static str,
    /// `firing` or `resolved`.
    pub state: Transition,
    /// The figure at this look (absent when there was none, e.g. no request for a p99).
    pub value: Option<f64>,
    /// The threshold.
    pub threshold: f64,
    /// The unit of both.
    pub unit: &'static str,
    /// When, in seconds since the Unix epoch.
    pub at: u64,
    /// One line for humans.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_does_not_print_the_webhooks_token() {
        let alerts =
            Alerts::new().webhook("https://user:pw@hooks.example.com/services/T0K3N?key=s3cret");
        let shown = format!("{alerts:?}");
        for secret in ["T0K3N", "s3cret", "pw@", "user"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("https://hooks.example.com/…"), "{shown}");
    }

    fn run(rule: &mut Rule, values: &[f64], hold: u64) -> Vec<(usize, Transition)> {
        values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| rule.observe(Some(*v), hold).map(|t| (i, t)))
            .collect()
    }

    #[test]
    fn a_figure_hovering_at_the_threshold_does_not_flap() {
        let mut rule = Alerts::new().p99_above(Duration::from_millis(100)).rules()[0].clone();
        // Around 100 ms, within the margin, for a minute: one firing, no resolution.
        let hover: Vec<f64> = (0..60)
            .map(|i| if i % 2 == 0 { 105.0 } else { 95.0 })
            .collect();
        let mut values = vec![150.0; 3];
        values.extend(&hover);
        assert_eq!(run(&mut rule, &values, 3), vec![(2, Transition::Firing)]);
        // Well under: resolved after the hold time, once.
        assert_eq!(
            run(&mut rule, &[50.0; 10], 3),
            vec![(2, Transition::Resolved)]
        );
        // Bad seconds that never last the hold time never fire.
        let spikes: Vec<f64> = (0..30)
            .map(|i| if i % 3 == 0 { 500.0 } else { 10.0 })
            .collect();
        assert_eq!(run(&mut rule, &spikes, 2), vec![]);
    }

    #[test]
    fn throughput_fires_below_its_floor_and_resolves_above_it_with_the_margin() {
        let mut rule = Alerts::new().throughput_below(1000.0).rules()[0].clone();
        assert_eq!(rule.kpi.alert_name(), "throughput_below");
        assert_eq!(
            run(&mut rule, &[0.0, 0.0, 1050.0, 1090.0, 1200.0, 1200.0], 2),
            vec![(1, Transition::Firing), (5, Transition::Resolved)]
        );
        assert!(!rule.is_firing());
    }

    #[test]
    fn rules_keep_their_order_and_units() {
        let a = Alerts::new()
            .error_rate_above(0.5)
            .memory_above(10)
            .hold(Duration::ZERO);
        let kpis: Vec<Kpi> = a.rules().iter().map(|r| r.kpi).collect();
        assert_eq!(kpis, vec![Kpi::Memory, Kpi::ErrorRate]);
        assert_eq!(a.hold_seconds(), 1);
    }
}
