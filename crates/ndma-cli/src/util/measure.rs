//! Measured cases shared by `demo` and `bench`: a warmed, verified copy (or memset) timed beside the
//! single-thread memcpy baseline of the same bytes, samples interleaved so both see the same machine load.

use std::time::{Duration, Instant};

use ndma::{AsyncPipeline, NeuronDevice, StatsSnapshot};
use ndma_emu::EmuDevice;

use super::bed::{alloc, Dir, Window, GUARD};
use super::pattern::{fill_chunk, verify_chunk, Expect};
use super::timing::{Baseline, Plan};
use crate::error::{CliResult, OpContext};

/// Timings of one case.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Best time of one operation.
    pub op: Duration,
    /// Best time of memcpy of the same bytes.
    pub memcpy: Duration,
    /// Ring counters over the timed operations.
    pub stats: StatsSnapshot,
    /// Timed operations.
    pub ops: u64,
}

/// Best-of `plan.samples` of `a` and `b`, per operation, samples interleaved (a, b, a, b, …).
fn interleaved<E>(
    plan: Plan,
    mut a: impl FnMut() -> Result<(), E>,
    mut b: impl FnMut(),
) -> Result<(Duration, Duration), E> {
    let (mut best_a, mut best_b) = (Duration::MAX, Duration::MAX);
    for _ in 0..plan.samples {
        let t0 = Instant::now();
        for _ in 0..plan.iters {
            a()?;
        }
        best_a = best_a.min(t0.elapsed() / plan.iters as u32);
        let t0 = Instant::now();
        for _ in 0..plan.iters {
            b();
        }
        best_b = best_b.min(t0.elapsed() / plan.iters as u32);
    }
    Ok((best_a, best_b))
}

fn stats(dev: &NeuronDevice, nc: u32) -> CliResult<StatsSnapshot> {
    dev.ring_stats(nc).op_ctx(|| "reading ring counters")
}

/// A synchronous `memcpy_mc` of `size` bytes in direction `dir` on NC `nc`: one untimed warm-up copy, the
/// destination reset, `samples` timed samples (each `Plan::for_size` copies) interleaved with memcpy samples,
/// then every byte of the destination, its guards and the source verified.
///
/// # Errors
///
/// Copy and verification failures.
pub fn sync_copy(
    dev: &NeuronDevice,
    emu: &EmuDevice,
    baseline: &mut Baseline,
    dir: Dir,
    size: u64,
    nc: u32,
    samples: u32,
) -> CliResult<Measured> {
    let what = format!("{} copy of {size} bytes", dir.name());
    let w = Window::new(dev, emu, dir, size, nc, size ^ 0x5eed)?;
    w.copy(0, size).op_ctx(|| format!("{what} (warm-up)"))?;
    w.reset_dst()?;
    let plan = Plan::for_size(size, samples);
    baseline.prepare(size);
    let before = stats(dev, nc)?;
    let (op, memcpy) = interleaved(plan, || w.copy(0, size), || baseline.copy_once(size)).op_ctx(|| what.clone())?;
    let stats = stats(dev, nc)?.since(&before);
    w.verify(&what, true)?;
    Ok(Measured { op, memcpy, stats, ops: u64::from(plan.samples) * plan.iters })
}

/// Memset of `size` bytes of a device chunk on NC `nc`, guarded: one untimed warm-up memset, then timed ones
/// with a different value, then the window and the guards verified.
///
/// # Errors
///
/// Memset and verification failures.
pub fn memset(
    dev: &NeuronDevice,
    emu: &EmuDevice,
    baseline: &mut Baseline,
    size: u64,
    nc: u32,
    samples: u32,
) -> CliResult<Measured> {
    let what = format!("memset of {size} bytes");
    let (guard, warm, value) = (0xEEu8, 0x11u8, 0x5Au8);
    let mc = alloc(dev, false, size + 2 * GUARD, nc)?;
    fill_chunk(emu, &mc, 0, size + 2 * GUARD, guard)?;
    dev.memset(&mc, GUARD, warm, size).op_ctx(|| format!("{what} (warm-up)"))?;
    let plan = Plan::for_size(size, samples);
    baseline.prepare(size);
    let before = stats(dev, nc)?;
    let (op, memcpy) = interleaved(plan, || dev.memset(&mc, GUARD, value, size), || baseline.copy_once(size))
        .op_ctx(|| what.clone())?;
    let stats = stats(dev, nc)?.since(&before);
    verify_chunk(emu, &mc, 0, GUARD, Expect::Byte(guard), &format!("{what}: guard before"))?;
    verify_chunk(emu, &mc, GUARD, size, Expect::Byte(value), &what)?;
    verify_chunk(emu, &mc, GUARD + size, GUARD, Expect::Byte(guard), &format!("{what}: guard after"))?;
    Ok(Measured { op, memcpy, stats, ops: u64::from(plan.samples) * plan.iters })
}

/// A stream of `count` copies of `size` bytes (successive offsets) done three ways, samples interleaved:
/// through [`AsyncPipeline`], as synchronous copies, and as memcpy. Returns per-stream best times
/// `(async, sync, memcpy)`.
#[derive(Debug, Clone, Copy)]
pub struct Stream {
    /// Through `AsyncPipeline`.
    pub async_t: Duration,
    /// As synchronous `memcpy_mc` calls.
    pub sync_t: Duration,
    /// As single-thread memcpy.
    pub memcpy_t: Duration,
}

/// Measures a [`Stream`] (one warm-up of the async stream first; the destination is verified after the
/// async samples).
///
/// # Errors
///
/// Copy and verification failures.
#[allow(clippy::too_many_arguments)]
pub fn stream(
    dev: &NeuronDevice,
    emu: &EmuDevice,
    baseline: &mut Baseline,
    dir: Dir,
    size: u64,
    count: u64,
    nc: u32,
    samples: u32,
) -> CliResult<Stream> {
    let what = format!("stream of {count} {} copies of {size} bytes", dir.name());
    let w = Window::new(dev, emu, dir, size * count, nc, size ^ 0xa5c)?;
    let run_async = || -> ndma::Result<()> {
        let mut pipe = AsyncPipeline::new(dev);
        for i in 0..count {
            let off = GUARD + i * size;
            pipe.copy(&w.src, &w.dst, off, off, size)?;
        }
        pipe.finish()
    };
    let run_sync = || -> ndma::Result<()> { (0..count).try_for_each(|i| w.copy(i * size, size)) };
    run_async().op_ctx(|| format!("async {what} (warm-up)"))?;
    w.reset_dst()?;
    baseline.prepare(size * count);
    let one = Plan { samples: 1, iters: 1 };
    let (mut a, mut s, mut m) = (Duration::MAX, Duration::MAX, Duration::MAX);
    for i in 0..samples.max(1) {
        let (ta, tm) =
            interleaved(one, &run_async, || baseline.stream_once(size, count)).op_ctx(|| format!("async {what}"))?;
        if i == 0 {
            w.verify(&format!("async {what}"), false)?;
        }
        let t0 = Instant::now();
        run_sync().op_ctx(|| format!("sync {what}"))?;
        s = s.min(t0.elapsed());
        a = a.min(ta);
        m = m.min(tm);
    }
    // The async samples already left the right bytes: prove the sync path writes them too.
    w.reset_dst()?;
    run_sync().op_ctx(|| format!("sync {what}"))?;
    w.verify(&format!("sync {what}"), true)?;
    Ok(Stream { async_t: a, sync_t: s, memcpy_t: m })
}
