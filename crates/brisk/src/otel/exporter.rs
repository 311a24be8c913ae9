//! The OTLP exporter, wrapped so that a collector that stops answering is said once in the
//! log (and its return), rather than never or at every batch.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

/// OTLP/HTTP export of span batches that logs when export starts and stops failing.
#[derive(Debug)]
pub(super) struct LoudExporter {
    inner: opentelemetry_otlp::SpanExporter,
    url: String,
    failing: AtomicBool,
}

impl LoudExporter {
    /// An exporter that posts protobuf batches to `url` (a full `/v1/traces` URL), each
    /// within `timeout`.
    pub(super) fn new(
        url: &str,
        timeout: Duration,
    ) -> Result<Self, opentelemetry_otlp::ExporterBuildError> {
        use opentelemetry_otlp::WithExportConfig;
        let inner = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(timeout)
            .build()?;
        Ok(LoudExporter {
            inner,
            url: crate::redact::redacted(url).into_owned(),
            failing: AtomicBool::new(false),
        })
    }
}

impl SpanExporter for LoudExporter {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let n = batch.len();
        async move {
            let result = self.inner.export(batch).await;
            match &result {
                Err(e) if !self.failing.swap(true, Relaxed) => tracing::warn!(
                    "traces cannot reach the OpenTelemetry collector at {}: {e}; {n} spans \
                     dropped, and the next ones until it answers",
                    self.url
                ),
                Ok(()) if self.failing.swap(false, Relaxed) => tracing::warn!(
                    "traces reach the OpenTelemetry collector at {} again",
                    self.url
                ),
                _ => {}
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
