//! Each worker's tracer: built in the worker (the exporter's connection is the worker's
//! own), kept for its thread, flushed when the worker stops.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;

use super::exporter::LoudExporter;
use super::settings::Tracing;

/// How often a worker sends the spans it has: at most a second old when they leave.
const EXPORT_EVERY: Duration = Duration::from_secs(1);

/// How long a stopping worker waits for its last spans to leave.
const LAST_EXPORT: Duration = Duration::from_secs(2);

/// How long one export may take before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The worker's tracer and what it samples.
pub(super) struct Active {
    provider: SdkTracerProvider,
    pub(super) tracer: SdkTracer,
    /// The share of new traces kept, as a threshold on a random `u64`.
    threshold: u64,
}

// The tracer is the thread's, as a tracing subscriber is: spans are opened where no worker
// context reaches (a database driver's task, the HTTP client), and it is built before the
// worker's runtime exists.
thread_local! {
    /// Whether this thread traces: read first by every request, and without a destructor
    /// (unlike `ACTIVE`'s), so the read is a plain load.
    static ON: Cell<bool> = const { Cell::new(false) };
    static ACTIVE: RefCell<Option<Active>> = const { RefCell::new(None) };
    static DRAW: Cell<u64> = Cell::new(seed());
}

/// Starts tracing in this worker as `settings` say; the spans say they come from `service`
/// (unless `settings` name another) and worker `index`. An exporter that cannot be built is
/// an error (the worker then exits, saying why).
pub(crate) fn start(
    settings: &Tracing,
    service: &str,
    index: usize,
) -> Result<(), opentelemetry_otlp::ExporterBuildError> {
    let exporter = LoudExporter::new(settings.traces_url(), EXPORT_TIMEOUT)?;
    let batches = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(EXPORT_EVERY)
                .build(),
        )
        .build();
    let resource = Resource::builder()
        .with_service_name(settings.service().unwrap_or(service).to_string())
        .with_attributes([
            KeyValue::new(
                "service.instance.id",
                format!("{}-{index}", std::process::id()),
            ),
            KeyValue::new("process.pid", i64::from(std::process::id())),
        ])
        .build();
    // Brisk draws new traces itself (cheaper than building a span to drop it); a span with
    // a parent follows its parent's choice.
    let provider = SdkTracerProvider::builder()
        .with_span_processor(batches)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("brisk");
    let threshold = (settings.ratio() * u64::MAX as f64) as u64;
    ACTIVE.with(|a| {
        *a.borrow_mut() = Some(Active {
            provider,
            tracer,
            threshold,
        })
    });
    ON.with(|on| on.set(true));
    Ok(())
}

/// Sends the spans not yet sent and stops tracing in this worker.
pub(crate) fn stop() {
    ON.with(|on| on.set(false));
    if let Some(active) = ACTIVE.with(|a| a.borrow_mut().take()) {
        if let Err(e) = active.provider.shutdown_with_timeout(LAST_EXPORT) {
            tracing::warn!("the last traces were not all sent: {e}");
        }
    }
}

/// `f` with the worker's tracer, if it traces.
#[inline]
pub(super) fn with_active<T>(f: impl FnOnce(&Active) -> Option<T>) -> Option<T> {
    if !ON.with(Cell::get) {
        return None;
    }
    ACTIVE.with(|a| a.borrow().as_ref().and_then(f))
}

impl Active {
    /// Whether a new trace is kept: a draw under the sampled share.
    pub(super) fn draw(&self) -> bool {
        if self.threshold == u64::MAX {
            return true;
        }
        DRAW.with(|state| {
            // xorshift64*: statistically good enough to pick 1 request in N.
            let mut x = state.get();
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            state.set(x);
            x.wrapping_mul(0x2545_F491_4F6C_DD1D) < self.threshold
        })
    }
}

/// A non-zero seed for this thread's draws, from std's per-process random keys.
fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish() | 1
}
