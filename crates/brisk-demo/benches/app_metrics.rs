//! What an app metric's update costs a handler (`brisk::metrics`): a counter's `inc`, a
//! gauge's `add`, a histogram's `observe` over 8 bounds, and, for scale, a `Cell<u64>` add
//! (what Brisk's own per-worker counters cost) and a `prometheus` crate counter's `inc`.
//!
//! ```text
//! cargo bench -p brisk-demo --bench app_metrics
//! ```

use std::cell::Cell;
use std::hint::black_box;

use brisk::metrics::{Counter, Gauge, Histogram};
use criterion::{criterion_group, criterion_main, Criterion};

static POSTED: Counter = Counter::new("bench_posted_total", "Posts.");
static OPEN: Gauge = Gauge::new("bench_open", "Open.");
static SIZES: Histogram<8> = Histogram::new(
    "bench_sizes",
    "Sizes.",
    [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0],
);

fn updates(c: &mut Criterion) {
    let mut g = c.benchmark_group("metric update");
    g.bench_function("brisk Counter::inc", |b| {
        b.iter(|| black_box(&POSTED).inc())
    });
    g.bench_function("brisk Gauge::add", |b| b.iter(|| black_box(&OPEN).add(1.0)));
    g.bench_function("brisk Histogram<8>::observe (5th bucket)", |b| {
        b.iter(|| black_box(&SIZES).observe(black_box(12.0)))
    });
    let cell = Cell::new(0u64);
    g.bench_function("Cell<u64> add", |b| {
        b.iter(|| {
            let c = black_box(&cell);
            c.set(c.get().wrapping_add(1))
        })
    });
    let prom = prometheus::IntCounter::new("bench_prom_total", "Posts.").unwrap();
    g.bench_function("prometheus IntCounter::inc", |b| {
        b.iter(|| black_box(&prom).inc())
    });
    g.finish();
}

criterion_group!(benches, updates);
criterion_main!(benches);
