//! Engine copy bandwidth: 256 MiB host→HBM in 64 KiB descriptor pairs on the threaded engine (Strict and
//! Relaxed ordering), beside a single-thread `ptr::copy_nonoverlapping` of the same 256 MiB between two warmed
//! host buffers measured in the same run. Prints the ratio engine / memcpy (goal ≥ 0.95).
//!
//! Then the cost of a scattered layout alone: 30 MiB host→HBM in 4 KiB descriptor pairs (Relaxed), once from
//! consecutive host pages and once from pages spread over 1 GiB of host memory — the same descriptors, bytes
//! and barrier, only the source pages differ (what a scattered zero-copy user buffer gives the engine).
//! And the same HBM→host, the pages being the destinations (a scattered d2h buffer: immediate writes, where
//! host→HBM ones are posted). Prints scattered / contiguous for each. The same again for 1 MiB (256 pairs,
//! inside the caches), executed on the doorbell write: a zero-copy piece's size range, the engine's work alone.
//!
//! `cargo bench -p ndma-emu --bench engine -- --warm-up-time 1 --measurement-time 5`

use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ndma_emu::{EmuConfig, EmuDevice, EmuSystem, ExecPolicy, HostBuf, OrderingMode};
use udma::{Arch, Barrier, DmaMemory, M2mQueue, Ring, Udma};

const TOTAL: usize = 256 << 20;
const DESC: usize = 64 << 10;
const PAIRS: u32 = (TOTAL / DESC) as u32;
const RING: u32 = 8192;
const MARKER: u32 = 0xabcd_ef01;
/// Page-sized pairs of the layout comparison (30 MiB, one batch inside the ring).
const PAGE_PAIRS: u32 = 7680;
const PAGE: usize = 4096;
/// Host memory the scattered pages are spread over.
const SCATTER_AREA: usize = 1 << 30;

struct Bench {
    _sys: EmuSystem,
    dev: Arc<EmuDevice>,
    q: M2mQueue<HostBuf>,
    src: HostBuf,
    dst: u64,
    marker: HostBuf,
    phb: u64,
}

fn ring(dev: &EmuDevice) -> Ring<HostBuf> {
    let mem = dev.host().alloc(RING as usize * 16, 4096).expect("ring");
    let dma_addr = mem.phys_addr() | dev.arch().pci_host_base();
    Ring { mem, dma_addr }
}

impl Bench {
    fn new(ordering: OrderingMode, exec: ExecPolicy) -> Bench {
        let arch = Arch::V2;
        let cfg =
            EmuConfig { hbm_size: Some(1 << 30), host_dram_size: 2 << 30, exec, ordering, ..EmuConfig::new(arch) };
        let sys = EmuSystem::new(cfg).expect("system");
        let dev = Arc::clone(sys.device(0));
        let engine = Udma::init(&*dev, arch, 33).expect("engine");
        let q = engine.init_queue(&*dev, 0, ring(&dev), ring(&dev), RING).expect("queue");
        let src = dev.host().alloc(TOTAL, 1 << 21).expect("src");
        src.fill(0, TOTAL, 0x5a).expect("warm src");
        let dst = dev.alloc_hbm(TOTAL as u64, 1 << 21).expect("dst").pa;
        dev.hbm_fill(dst, TOTAL as u64, 0).expect("warm dst");
        let marker = dev.host().alloc(256, 256).expect("marker");
        let phb = arch.pci_host_base();
        Bench { _sys: sys, dev, q, src, dst, marker, phb }
    }

    /// Stages 4096 × 64 KiB to consecutive HBM + the marker (untimed), then times doorbell → marker observed.
    fn run_once(&mut self) -> Duration {
        let (s, d) = (self.src.phys_addr() | self.phb, self.dst);
        let copies: Vec<_> =
            (0..u64::from(PAIRS)).map(|i| (s + i * DESC as u64, d + i * DESC as u64, DESC as u32)).collect();
        self.run_copies(&copies)
    }

    /// Stages `(source, destination, length)` copies, the last with a write barrier, and the marker
    /// (untimed), then times doorbell → marker observed.
    fn run_copies(&mut self, copies: &[(u64, u64, u32)]) -> Duration {
        let n = copies.len() as u32;
        for (i, &(src, dst, len)) in copies.iter().enumerate() {
            let b = if i + 1 == copies.len() { Barrier::WriteBarrier } else { Barrier::None };
            self.q.copy_prepare_one(src, dst, len, b, false).expect("prepare");
        }
        self.marker.store_u32(0, MARKER, Ordering::Relaxed).expect("marker");
        self.marker.store_u32(4, 0, Ordering::Relaxed).expect("marker");
        let m = self.marker.phys_addr() | self.phb;
        self.q.copy_prepare_one(m, m + 4, 4, Barrier::None, false).expect("marker");
        let start = Instant::now();
        self.q.copy_start(&*self.dev, n + 1, n + 1).expect("doorbell");
        // Spin, yielding now and then: on a 2-core machine shared with other work, a pure spin could starve
        // the engine worker it is waiting for.
        let mut polls = 0u32;
        while self.marker.load_u32(4, Ordering::Acquire).expect("poll") != MARKER {
            polls = polls.wrapping_add(1);
            if polls % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let t = start.elapsed();
        self.q.ack(n + 1);
        t
    }
}

/// Sum, count and fastest of the iterations measured so far.
type Acc = Cell<(Duration, u64, Duration)>;

fn acc() -> Acc {
    Cell::new((Duration::ZERO, 0, Duration::MAX))
}

fn timed(total: &Acc, iters: u64, mut f: impl FnMut() -> Duration) -> Duration {
    let (mut t, mut n, mut best) = total.get();
    let mut d = Duration::ZERO;
    for _ in 0..iters {
        let one = f();
        best = best.min(one);
        d += one;
    }
    t += d;
    n += iters;
    total.set((t, n, best));
    d
}

fn mean(c: &Acc) -> f64 {
    let (t, n, _) = c.get();
    t.as_secs_f64() / n.max(1) as f64
}

fn best(c: &Acc) -> f64 {
    c.get().2.as_secs_f64()
}

fn engine(c: &mut Criterion) {
    let mut g = c.benchmark_group("host_to_hbm_256MiB");
    g.throughput(Throughput::Bytes(TOTAL as u64));
    g.sample_size(10);

    // Baseline: one single-thread memcpy of the same 256 MiB between two warmed host buffers.
    let base = acc();
    {
        let host = Arc::new(ndma_emu::HostMemory::new(1 << 30).expect("host"));
        let a = host.alloc(TOTAL, 1 << 21).expect("a");
        let b = host.alloc(TOTAL, 1 << 21).expect("b");
        a.fill(0, TOTAL, 1).expect("warm");
        b.fill(0, TOTAL, 2).expect("warm");
        g.bench_function("memcpy", |bch| {
            bch.iter_custom(|iters| {
                timed(&base, iters, || {
                    let start = Instant::now();
                    // SAFETY: both buffers are distinct live allocations of TOTAL bytes.
                    unsafe { std::ptr::copy_nonoverlapping(black_box(a.as_ptr()), black_box(b.as_ptr()), TOTAL) };
                    start.elapsed()
                })
            })
        });
    }

    let mut ratios = Vec::new();
    for ordering in [OrderingMode::Strict, OrderingMode::Relaxed] {
        let mut bench = Bench::new(ordering, ExecPolicy::Threaded);
        bench.run_once(); // spawn the worker, fault in the ring
        let eng = acc();
        g.bench_function(format!("engine/{ordering:?}"), |bch| {
            bch.iter_custom(|iters| timed(&eng, iters, || bench.run_once()))
        });
        ratios.push((ordering, mean(&base) / mean(&eng), best(&base) / best(&eng)));
        let mut probe = [0u8; 1];
        bench.dev.hbm_read(bench.dst + TOTAL as u64 - 1, &mut probe).expect("probe");
        assert_eq!(probe[0], 0x5a, "the engine did not copy");
    }
    g.finish();
    if base.get().1 == 0 {
        return; // filtered out (`cargo bench ... -- host_to_hbm_30MiB`)
    }
    let gbs = TOTAL as f64 / mean(&base) / 1e9;
    println!("memcpy baseline: {gbs:.2} GB/s (mean)");
    for (o, m, b) in ratios {
        println!(
            "engine/{o:?} bandwidth ratio vs single-thread memcpy: mean {m:.3}, best-of-run {b:.3} (goal >= 0.95)"
        );
    }
}

/// Page-sized pairs from consecutive pages and from pages spread over 1 GiB, same run: 30 MiB on the threaded
/// engine (beyond the caches), and 1 MiB (in them) executed on the doorbell write, so that the figure is the
/// engine's work alone, not a worker's wake-up.
fn layout(c: &mut Criterion) {
    layout_of(c, "30MiB", PAGE_PAIRS, ExecPolicy::Threaded);
    layout_of(c, "1MiB", 256, ExecPolicy::Inline);
}

fn layout_of(c: &mut Criterion, size: &str, pairs: u32, exec: ExecPolicy) {
    let mut bench = Bench::new(OrderingMode::Relaxed, exec);
    let area = bench.dev.host().alloc(SCATTER_AREA, 1 << 21).expect("scatter area");
    area.fill(0, SCATTER_AREA, 0x3c).expect("warm area");
    let base = area.phys_addr() | bench.phb;
    // Distinct pages in a fixed pseudo-random order (xorshift over the area's pages).
    let pages = (SCATTER_AREA / PAGE) as u64;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut seen = std::collections::HashSet::new();
    let mut scattered = Vec::new();
    while scattered.len() < pairs as usize {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if seen.insert(x % pages) {
            scattered.push(base + (x % pages) * PAGE as u64);
        }
    }
    let contiguous: Vec<u64> = (0..u64::from(pairs)).map(|i| base + i * PAGE as u64).collect();
    let hbm_base = bench.dst;
    let hbm = |i: usize| hbm_base + (i * PAGE) as u64;
    for to_hbm in [true, false] {
        let name = if to_hbm { format!("host_to_hbm_{size}_pages") } else { format!("hbm_to_host_{size}_pages") };
        let mut g = c.benchmark_group(&name);
        g.throughput(Throughput::Bytes(u64::from(pairs) * PAGE as u64));
        g.sample_size(10);
        let mut means = Vec::new();
        for (layout, host_pages) in [("contiguous", &contiguous), ("scattered", &scattered)] {
            let copies: Vec<(u64, u64, u32)> = host_pages
                .iter()
                .enumerate()
                .map(|(i, &h)| if to_hbm { (h, hbm(i), PAGE as u32) } else { (hbm(i), h, PAGE as u32) })
                .collect();
            bench.run_copies(&copies);
            let t = acc();
            g.bench_function(layout, |bch| bch.iter_custom(|iters| timed(&t, iters, || bench.run_copies(&copies))));
            means.push((mean(&t), best(&t)));
        }
        g.finish();
        if to_hbm {
            let mut probe = [0u8; 1];
            bench.dev.hbm_read(bench.dst, &mut probe).expect("probe");
            assert_eq!(probe[0], 0x3c, "the engine did not copy");
            // What the HBM→host copies will carry.
            bench.dev.hbm_fill(bench.dst, u64::from(pairs) * PAGE as u64, 0x77).expect("refill");
        } else {
            let word = area.load_u32((scattered[0] - base) as usize, Ordering::Relaxed).expect("probe");
            assert_eq!(word, 0x7777_7777, "the engine did not copy");
        }
        println!(
            "{name}: scattered / contiguous (same descriptors, Relaxed): mean {:.3}, best-of-run {:.3}",
            means[0].0 / means[1].0,
            means[0].1 / means[1].1
        );
    }
}

criterion_group!(benches, engine, layout);
criterion_main!(benches);
