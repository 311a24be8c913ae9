//! What the app asks of tracing: where the collector is, how many requests to trace, and
//! under which service name.

use crate::error::{Error, Result};

/// Where spans go and how many requests are traced; given to
/// [`App::tracing`](crate::App::tracing).
///
/// ```
/// let tracing = brisk::otel::Tracing::otlp("http://127.0.0.1:4318")
///     .unwrap()
///     .sample(0.01)
///     .service_name("chat");
/// assert_eq!(tracing.traces_url(), "http://127.0.0.1:4318/v1/traces");
/// ```
#[derive(Clone, Debug)]
pub struct Tracing {
    traces_url: String,
    ratio: f64,
    service_name: Option<String>,
}

impl Tracing {
    /// Spans to the collector at `collector`, its OTLP/HTTP base (`http://host:4318`; a URL
    /// that already ends in `/v1/traces` is used as it is), every request traced until
    /// [`sample`](Self::sample) says otherwise. A URL that is not `http://` or `https://` with
    /// a host is an [`Error::Config`].
    pub fn otlp(collector: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::Config(format!(
                "OpenTelemetry collector {collector:?}: {why} (write it http://host:4318)"
            ))
        };
        let uri: http::Uri = collector.parse().map_err(|e| bad(&format!("{e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err(bad("not an http:// or https:// URL"));
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(bad("no host"));
        }
        let base = collector.trim_end_matches('/');
        let traces_url = if base.ends_with("/v1/traces") {
            base.to_string()
        } else {
            format!("{base}/v1/traces")
        };
        Ok(Tracing {
            traces_url,
            ratio: 1.0,
            service_name: None,
        })
    }

    /// Tracing as OpenTelemetry's standard variables ask, or `None` when
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, a full URL) is
    /// unset or empty: the sampled share from `OTEL_TRACES_SAMPLER_ARG` (for
    /// `OTEL_TRACES_SAMPLER` `parentbased_traceidratio`, `traceidratio`, `always_on`,
    /// `parentbased_always_on`, `always_off` or `parentbased_always_off`), the name from
    /// `OTEL_SERVICE_NAME`. A value it cannot use is an [`Error::Config`] naming it.
    pub fn from_env() -> Result<Option<Self>> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut tracing = match (
            var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            var("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => {
                let mut t = Self::otlp(&url)?;
                t.traces_url = url;
                t
            }
            (None, Some(base)) => Self::otlp(&base)?,
            (None, None) => return Ok(None),
        };
        let sampler = var("OTEL_TRACES_SAMPLER").unwrap_or_else(|| "parentbased_always_on".into());
        tracing.ratio = match sampler.as_str() {
            "always_on" | "parentbased_always_on" => 1.0,
            "always_off" | "parentbased_always_off" => 0.0,
            "traceidratio" | "parentbased_traceidratio" => {
                let arg = var("OTEL_TRACES_SAMPLER_ARG").unwrap_or_else(|| "1.0".into());
                match arg.trim().parse::<f64>() {
                    Ok(r) if (0.0..=1.0).contains(&r) => r,
                    _ => {
                        return Err(Error::Config(format!(
                            "OTEL_TRACES_SAMPLER_ARG={arg:?}: write a share from 0 to 1"
                        )))
                    }
                }
            }
            other => {
                return Err(Error::Config(format!(
                    "OTEL_TRACES_SAMPLER={other:?}: Brisk knows always_on, always_off, \
                     traceidratio and their parentbased_ forms"
                )))
            }
        };
        tracing.service_name = var("OTEL_SERVICE_NAME");
        Ok(Some(tracing))
    }

    /// Traces this share of the requests, WebSocket messages and jobs that arrive without a
    /// trace (from 0 to 1; default 1): a request that brings a `traceparent` is traced when
    /// its caller's is.
    ///
    /// # Panics
    /// If `ratio` is not a number from 0 to 1.
    pub fn sample(mut self, ratio: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&ratio),
            "Tracing::sample({ratio}): the share of requests traced is a number from 0 to 1"
        );
        self.ratio = ratio;
        self
    }

    /// The `service.name` the spans carry (default: the app's name).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// The URL spans are posted to.
    pub fn traces_url(&self) -> &str {
        &self.traces_url
    }

    /// The share of requests traced.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// The service name set, if any.
    pub(crate) fn service(&self) -> Option<&str> {
        self.service_name.as_deref()
    }
}
