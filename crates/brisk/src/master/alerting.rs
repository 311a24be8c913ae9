//! The master's side of [`Alerts`]: judges each second's [`KpiSample`], logs each firing and
//! resolution once, and hands them to the webhook.

use crate::alerts::{AlertEvent, Alerts, Kpi, Rule, Transition};

use super::kpi_history::KpiSample;
use super::webhook::Webhook;

/// The alert rules of a running app and where they report.
pub(crate) struct Alerting {
    app: String,
    rules: Vec<Rule>,
    hold: u64,
    webhook: Option<Webhook>,
}

impl Alerting {
    /// The rules of `alerts` for app `app`, none firing. Fails if the webhook cannot be used
    /// (a bad URL, or Brisk built without its HTTP client).
    pub(crate) fn new(app: &str, alerts: &Alerts) -> crate::error::Result<Self> {
        let webhook = match &alerts.webhook {
            Some(url) => Some(Webhook::new(url)?),
            None => None,
        };
        Ok(Alerting {
            app: app.to_string(),
            rules: alerts.rules(),
            hold: alerts.hold_seconds(),
            webhook,
        })
    }

    /// Judges one second's figures.
    pub(crate) fn observe(&mut self, sample: &KpiSample) {
        for rule in &mut self.rules {
            let value = match rule.kpi {
                Kpi::Throughput => Some(sample.throughput),
                Kpi::P99 => sample.p99_ms,
                Kpi::Memory => Some(sample.rss_bytes as f64),
                Kpi::ErrorRate => sample.error_rate,
            };
            let Some(state) = rule.observe(value, self.hold) else {
                continue;
            };
            let name = rule.kpi.alert_name();
            let shown = |v: f64| match rule.kpi {
                Kpi::Memory => format!("{:.1} MiB", v / (1 << 20) as f64),
                Kpi::ErrorRate => format!("{:.2} %", v * 100.0),
                Kpi::P99 => format!("{v:.1} ms"),
                Kpi::Throughput => format!("{v:.1}/s"),
            };
            let now = value.map_or("none".to_string(), shown);
            let message = match state {
                Transition::Firing => format!(
                    "alert {name} firing: {now} (threshold {}) for {} s",
                    shown(rule.threshold),
                    self.hold
                ),
                Transition::Resolved => format!(
                    "alert {name} resolved: {now} (threshold {})",
                    shown(rule.threshold)
                ),
            };
            match state {
                Transition::Firing => tracing::warn!("{message}"),
                Transition::Resolved => tracing::info!("{message}"),
            }
            if let Some(w) = &self.webhook {
                w.post(AlertEvent {
                    app: self.app.clone(),
                    alert: name,
                    state,
                    value,
                    threshold: rule.threshold,
                    unit: rule.kpi.unit(),
                    at: sample.at_unix_s,
                    message,
                });
            }
        }
    }

    /// Each rule's name and whether it is firing.
    pub(crate) fn states(&self) -> Vec<(&'static str, bool)> {
        self.rules
            .iter()
            .map(|r| (r.kpi.alert_name(), r.is_firing()))
            .collect()
    }

    /// Webhook calls that failed (refused, timed out, not 2xx, or dropped while too many
    /// were in flight).
    pub(crate) fn webhook_failures(&self) -> u64 {
        self.webhook.as_ref().map_or(0, Webhook::failures)
    }
}
