//! `ndma bench`'s scale case: one submitting thread per NC, each moving `size`-byte host→device copies
//! synchronously on its own H2T ring, all at once; the aggregate throughput beside the same number of
//! threads each doing single-thread memcpys of the same bytes, samples interleaved. Run at a growing number
//! of rings, it shows whether adding rings collapses the aggregate on a machine with fewer cores than rings.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use ndma::{MemChunk, NeuronDevice};
use ndma_emu::{EmuDevice, Testbed};

use super::timing::{Baseline, Samples};
use crate::error::{CliResult, OpContext};
use ndma_emu::test_utils::{alloc, fill_chunk, verify_chunk, write_pattern, Expect, DST_FILL};

/// One NC's share: its device, a host source chunk and a device destination chunk on its ring, and its
/// own memcpy buffers.
pub struct Lane {
    dev: Arc<NeuronDevice>,
    emu: Arc<EmuDevice>,
    nc: u32,
    src: Arc<MemChunk>,
    dst: Arc<MemChunk>,
    seed: u64,
    baseline: Baseline,
}

/// A lane for every NC of every device of `tb`, device by device, with `size`-byte chunks (the source
/// holding a pattern, the destination [`DST_FILL`]) and memcpy buffers of `size` bytes.
///
/// # Errors
///
/// Allocation and back-door write failures.
pub fn lanes(tb: &Testbed, size: u64) -> CliResult<Vec<Lane>> {
    let mut v = Vec::new();
    for (d, dev) in tb.system.devices().iter().enumerate() {
        let emu = tb.emu.device(d);
        for nc in 0..dev.dhal().ncs_per_device() {
            let seed = 0x5ca1e ^ ((d as u64) << 8) ^ u64::from(nc);
            let src = alloc(dev, true, size, nc)?;
            let dst = alloc(dev, false, size, nc)?;
            write_pattern(emu, &src, 0, size, seed)?;
            fill_chunk(emu, &dst, 0, size, DST_FILL)?;
            let mut baseline = Baseline::new();
            baseline.prepare(size);
            v.push(Lane { dev: Arc::clone(dev), emu: Arc::clone(emu), nc, src, dst, seed, baseline });
        }
    }
    Ok(v)
}

/// Aggregate figures of one ring count.
#[derive(Debug, Clone)]
pub struct Scaled {
    /// Wall time of each DMA sample (every lane's copies).
    pub dma: Samples,
    /// Wall time of each memcpy sample (as many threads, the same copies).
    pub memcpy: Samples,
}

/// `samples` samples, interleaved: every lane of `lanes` does `copies` synchronous copies of `size` bytes on
/// its own thread, all started together (wall time until the last finishes); then as many threads each do
/// `copies` memcpys of `size` bytes. One untimed copy per lane first; each destination verified after.
///
/// # Errors
///
/// Copy and verification failures (the first lane's).
pub fn measure(lanes: &mut [Lane], size: u64, copies: u32, samples: u32) -> CliResult<Scaled> {
    for l in lanes.iter() {
        l.dev.memcpy_mc(&l.src, &l.dst, 0, 0, size).op_ctx(|| format!("scale: NC {} warm-up", l.nc))?;
        fill_chunk(&l.emu, &l.dst, 0, size, DST_FILL)?;
    }
    let (mut dma, mut memcpy) = (Samples::new(), Samples::new());
    for _ in 0..samples.max(1) {
        dma.push(together(lanes, |l| {
            (0..copies)
                .try_for_each(|_| l.dev.memcpy_mc(&l.src, &l.dst, 0, 0, size))
                .op_ctx(|| format!("scale: device {} NC {} copy of {size} bytes", l.emu.index(), l.nc))
        })?);
        memcpy.push(together(lanes, |l| {
            (0..copies).for_each(|_| l.baseline.copy_once(size));
            Ok(())
        })?);
    }
    for l in lanes.iter() {
        let what = format!("scale: device {} NC {} destination", l.emu.index(), l.nc);
        verify_chunk(&l.emu, &l.dst, 0, size, Expect::Pattern(l.seed), &what)?;
    }
    Ok(Scaled { dma, memcpy })
}

/// Runs `work` on one thread per lane, released together; the wall time from the first thread's start to the
/// last one's end. Each thread reads the clock itself: with more threads than cores, the releasing thread may
/// not run again until most of the work is done.
fn together(lanes: &mut [Lane], work: impl Fn(&mut Lane) -> CliResult + Sync) -> CliResult<Duration> {
    let start = Barrier::new(lanes.len());
    let (start, work) = (&start, &work);
    let spans: Vec<CliResult<(Instant, Instant)>> = thread::scope(|s| {
        let handles: Vec<_> = lanes
            .iter_mut()
            .map(|l| {
                s.spawn(move || {
                    start.wait();
                    let t0 = Instant::now();
                    work(l).map(|()| (t0, Instant::now()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let spans = spans.into_iter().collect::<CliResult<Vec<_>>>()?;
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    Ok(first.zip(last).map_or(Duration::ZERO, |(a, b)| b.saturating_duration_since(a)))
}
