//! What one clock read costs: the precise clocks the standard library reads against the coarse
//! ones the request path reads (`concert::sys::coarse_clock`).

use std::hint::black_box;
use std::time::{Instant, SystemTime};

use concert::sys::coarse_clock;
use criterion::{Criterion, criterion_group, criterion_main};

fn clock_reads(c: &mut Criterion) {
    c.bench_function("clock/precise_wall", |b| {
        b.iter(|| black_box(SystemTime::now()))
    });
    c.bench_function("clock/coarse_wall", |b| {
        b.iter(|| black_box(coarse_clock::since_unix_epoch()))
    });
    c.bench_function("clock/precise_monotonic", |b| {
        b.iter(|| black_box(Instant::now()))
    });
    c.bench_function("clock/coarse_monotonic", |b| {
        b.iter(|| black_box(coarse_clock::instant()))
    });
}

criterion_group!(benches, clock_reads);
criterion_main!(benches);
