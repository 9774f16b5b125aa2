//! Measured cases shared by `demo` and `bench`: a warmed, verified copy (or memset) timed beside the
//! single-thread memcpy baseline of the same bytes, samples interleaved so both see the same machine load.
//!
//! Every error fails the case, `-ETIMEDOUT` included: nothing here injects faults, so a timeout is a bug.

use std::time::{Duration, Instant};

use ndma::{AsyncPipeline, NeuronDevice, StatsSnapshot, Transfer};
use ndma_emu::EmuDevice;

use super::timing::{Baseline, Plan, Samples};
use crate::error::{CliResult, OpContext};
use ndma_emu::test_utils::{alloc, fill_chunk, verify_chunk, Dir, Expect, Window, GUARD};

/// Timings of one case.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Best time of one operation.
    pub op: Duration,
    /// Best time of memcpy of the same bytes.
    pub memcpy: Duration,
    /// Median sample's time of one operation.
    pub op_median: Duration,
    /// Median sample's time of memcpy of the same bytes.
    pub memcpy_median: Duration,
    /// Ring counters over the timed operations.
    pub stats: StatsSnapshot,
    /// Timed operations.
    pub ops: u64,
}

impl Measured {
    /// Best and median of the samples of an operation and of its memcpy baseline.
    pub fn new(op: &Samples, memcpy: &Samples, stats: StatsSnapshot, ops: u64) -> Measured {
        Measured {
            op: op.best(),
            memcpy: memcpy.best(),
            op_median: op.median(),
            memcpy_median: memcpy.median(),
            stats,
            ops,
        }
    }
}

/// Per-stream best (and median) times of a [`Rig::stream`].
#[derive(Debug, Clone, Copy)]
pub struct Stream {
    /// Through `AsyncPipeline`.
    pub async_t: Duration,
    /// As synchronous `memcpy_mc` calls.
    pub sync_t: Duration,
    /// As single-thread memcpy.
    pub memcpy_t: Duration,
    /// Median stream time through `AsyncPipeline`.
    pub async_median: Duration,
    /// Median stream time as single-thread memcpy.
    pub memcpy_median: Duration,
    /// Ring counters of the timed async samples.
    pub async_stats: StatsSnapshot,
    /// Ring counters of the timed sync samples.
    pub sync_stats: StatsSnapshot,
}

/// What every measurement needs: the device, its model, the NC, the sample count and the memcpy baseline.
pub struct Rig<'a> {
    /// Op-layer device.
    pub dev: &'a NeuronDevice,
    /// Its model.
    pub emu: &'a EmuDevice,
    /// NC whose ring is measured.
    pub nc: u32,
    /// Timed samples per case (the best counts).
    pub samples: u32,
    /// Single-thread memcpy baseline.
    pub baseline: Baseline,
}

impl<'a> Rig<'a> {
    /// A rig on NC `nc`; the memcpy baseline is prepared (allocated and touched) for `max_bytes`.
    ///
    /// # Errors
    ///
    /// Allocation failures.
    pub fn new(dev: &'a NeuronDevice, emu: &'a EmuDevice, nc: u32, samples: u32, max_bytes: u64) -> CliResult<Self> {
        let mut baseline = Baseline::new();
        baseline.prepare(max_bytes);
        Ok(Rig { dev, emu, nc, samples: samples.max(1), baseline })
    }

    fn stats(&self) -> CliResult<StatsSnapshot> {
        self.dev.ring_stats(self.nc).op_ctx(|| "reading ring counters")
    }

    /// `plan.samples` samples of `op` and of `base`, per operation, interleaved (op…, base…, op…, …), with the
    /// ring counters of the `op` samples only.
    ///
    /// # Errors
    ///
    /// The first failure of `op`, or of reading the ring counters.
    pub fn interleaved(
        &mut self,
        plan: Plan,
        what: &str,
        mut op: impl FnMut() -> ndma::Result<()>,
        mut base: impl FnMut(&mut Baseline),
    ) -> CliResult<(Samples, Samples, StatsSnapshot)> {
        let (mut ops, mut bases, mut stats) = (Samples::new(), Samples::new(), StatsSnapshot::default());
        for _ in 0..plan.samples {
            let before = self.stats()?;
            let t0 = Instant::now();
            for _ in 0..plan.iters {
                op().op_ctx(|| what.to_string())?;
            }
            ops.push(t0.elapsed() / plan.iters as u32);
            stats = stats.merged(&self.stats()?.since(&before));
            let t0 = Instant::now();
            for _ in 0..plan.iters {
                base(&mut self.baseline);
            }
            bases.push(t0.elapsed() / plan.iters as u32);
        }
        Ok((ops, bases, stats))
    }

    /// A synchronous `memcpy_mc` of `size` bytes in direction `dir`: one untimed warm-up copy, the destination
    /// reset, timed samples (each [`Plan::for_size`] copies) interleaved with memcpy samples, then every byte
    /// of the destination, its guards and the source verified.
    ///
    /// # Errors
    ///
    /// Copy and verification failures.
    pub fn sync_copy(&mut self, dir: Dir, size: u64) -> CliResult<Measured> {
        let what = format!("{} copy of {size} bytes", dir.name());
        let (dev, emu) = (self.dev, self.emu);
        let w = Window::new(dev, emu, dir, size, self.nc, size ^ 0x5eed)?;
        w.copy(0, size).op_ctx(|| format!("{what} (warm-up)"))?;
        w.reset_dst()?;
        let plan = Plan::for_size(size, self.samples);
        self.baseline.prepare(size);
        let (op, memcpy, stats) = self.interleaved(plan, &what, || w.copy(0, size), |b| b.copy_once(size))?;
        w.verify(&what, true)?;
        Ok(Measured::new(&op, &memcpy, stats, u64::from(plan.samples) * plan.iters))
    }

    /// Memset of `size` bytes of a guarded device chunk: one untimed warm-up memset, timed ones with a
    /// different value (interleaved with memcpy of the same byte count), then the window and the guards
    /// verified.
    ///
    /// # Errors
    ///
    /// Memset and verification failures.
    pub fn memset(&mut self, size: u64) -> CliResult<Measured> {
        let what = format!("memset of {size} bytes");
        let (guard, warm, value) = (0xEEu8, 0x11u8, 0x5Au8);
        let (dev, emu) = (self.dev, self.emu);
        let mc = alloc(dev, false, size + 2 * GUARD, self.nc)?;
        fill_chunk(emu, &mc, 0, size + 2 * GUARD, guard)?;
        dev.memset(&mc, GUARD, warm, size).op_ctx(|| format!("{what} (warm-up)"))?;
        let plan = Plan::for_size(size, self.samples);
        self.baseline.prepare(size);
        let (op, memcpy, stats) =
            self.interleaved(plan, &what, || dev.memset(&mc, GUARD, value, size), |b| b.copy_once(size))?;
        verify_chunk(emu, &mc, 0, GUARD, Expect::Byte(guard), &format!("{what}: guard before"))?;
        verify_chunk(emu, &mc, GUARD, size, Expect::Byte(value), &what)?;
        verify_chunk(emu, &mc, GUARD + size, GUARD, Expect::Byte(guard), &format!("{what}: guard after"))?;
        Ok(Measured::new(&op, &memcpy, stats, u64::from(plan.samples) * plan.iters))
    }

    /// A stream of `count` copies of `size` bytes cycling over `slots` successive `size`-byte slots (so the
    /// working set is `size × slots` however long the stream), done three ways with samples
    /// interleaved: through [`AsyncPipeline`], as synchronous copies, and as memcpy. One untimed async warm-up
    /// first; the destination is verified after the first async sample and after a final sync stream.
    ///
    /// # Errors
    ///
    /// Copy and verification failures.
    pub fn stream(&mut self, dir: Dir, size: u64, count: u64, slots: u64) -> CliResult<Stream> {
        let what = format!("stream of {count} {} copies of {size} bytes over {slots} slots", dir.name());
        let (dev, emu) = (self.dev, self.emu);
        let slots = slots.clamp(1, count.max(1));
        let w = Window::new(dev, emu, dir, size * slots, self.nc, size ^ 0xa5c)?;
        let run_async = || -> ndma::Result<()> {
            let mut pipe = AsyncPipeline::new(dev);
            for i in 0..count {
                let off = GUARD + (i % slots) * size;
                pipe.submit(&Transfer::new(&w.src, &w.dst, size).src_offset(off).dst_offset(off))?;
            }
            pipe.finish()
        };
        let run_sync = || -> ndma::Result<()> { (0..count).try_for_each(|i| w.copy((i % slots) * size, size)) };
        run_async().op_ctx(|| format!("async {what} (warm-up)"))?;
        w.reset_dst()?;
        self.baseline.prepare(size * slots);
        let one = Plan { samples: 1, iters: 1 };
        let (mut a, mut s, mut m) = (Samples::new(), Samples::new(), Samples::new());
        let (mut async_stats, mut sync_stats) = (StatsSnapshot::default(), StatsSnapshot::default());
        for i in 0..self.samples {
            let async_what = format!("async {what}");
            let (ta, tm, st) = self.interleaved(one, &async_what, run_async, |b| b.stream_once(size, count, slots))?;
            async_stats = async_stats.merged(&st);
            if i == 0 {
                w.verify(&async_what, false)?;
            }
            let (ts, _, st) = self.interleaved(one, &format!("sync {what}"), run_sync, |_| ())?;
            sync_stats = sync_stats.merged(&st);
            a.push(ta.best());
            s.push(ts.best());
            m.push(tm.best());
        }
        // The async samples already left the right bytes: prove the sync path writes them too.
        w.reset_dst()?;
        run_sync().op_ctx(|| format!("sync {what}"))?;
        w.verify(&format!("sync {what}"), true)?;
        Ok(Stream {
            async_t: a.best(),
            sync_t: s.best(),
            memcpy_t: m.best(),
            async_median: a.median(),
            memcpy_median: m.median(),
            async_stats,
            sync_stats,
        })
    }
}
