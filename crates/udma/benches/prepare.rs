//! Cost of `M2mQueue::copy_prepare_one` per descriptor pair on an 8192-descriptor ring (the H2T ring size)
//! with a no-op `Mmio`: each iteration stages one `sync_threshold` batch of 2031 pairs and then acks them, so
//! the ring never fills. Criterion's throughput is in pairs (elements); ns/pair = 1e9 / (elements/s).
//!
//! `cargo bench -p udma --bench prepare -- --warm-up-time 1 --measurement-time 3`

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{d2h_engine, ring, NoopMmio};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use udma::Barrier;

/// `sync_threshold`: data descriptors per batch in `ndma_memcpy_chunks` (FACTS §3.1).
const PAIRS: u32 = 2031;

fn prepare(c: &mut Criterion) {
    let mmio = NoopMmio;
    let mut q = d2h_engine(&mmio)
        .init_queue(&mmio, 0, ring(8192, 0x1000_0010_0000), ring(8192, 0x1000_0020_0000), 8192)
        .unwrap();
    let src = 0x1000_4000_0000u64;
    let dst = 0x0000_8000_0000u64;

    let mut g = c.benchmark_group("copy_prepare_one");
    g.throughput(Throughput::Elements(u64::from(PAIRS)));
    g.bench_function("8192-ring/2031-pairs+ack", |b| {
        b.iter(|| {
            for i in 0..PAIRS {
                let off = u64::from(i) << 16;
                q.copy_prepare_one(black_box(src + off), black_box(dst + off), black_box(65536), Barrier::None, false)
                    .unwrap();
            }
            q.ack(black_box(PAIRS));
        })
    });
    // The same work with the ack outside the timed region (it costs one CAS per batch).
    g.bench_function("8192-ring/2031-pairs", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                for i in 0..PAIRS {
                    let off = u64::from(i) << 16;
                    q.copy_prepare_one(
                        black_box(src + off),
                        black_box(dst + off),
                        black_box(65536),
                        Barrier::None,
                        false,
                    )
                    .unwrap();
                }
                total += start.elapsed();
                q.ack(PAIRS);
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, prepare);
criterion_main!(benches);
