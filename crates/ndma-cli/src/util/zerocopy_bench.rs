//! `ndma bench`'s zero-copy cases (issue 8 §4): a *user* buffer moved to or from device memory either by
//! zero-copy (its pages pinned and DMAed over directly) or by the classic path, which needs a bounce copy
//! between the user's pages and a host chunk — the CPU copy is part of that path's cost and is timed with it.
//!
//! Ways and modes:
//! - zero-copy `sync`: one synchronous `zerocopy_submit` per transfer (pinning every time);
//! - zero-copy `prepinned`: the same after `System::pin_host_memory` registered the buffer once;
//! - zero-copy `async`: requests of at most [`ASYNC_REQUEST`] bytes, at most [`ASYNC_IN_FLIGHT`] in flight,
//!   each completing through the ring's completion queue;
//! - bounce `sync`: the whole CPU copy, then one synchronous `memcpy_mc` (h2d), or the reverse (d2h);
//! - bounce `async`: [`BOUNCE_CHUNK`] pieces through `AsyncPipeline`, the CPU copy of one piece overlapping
//!   the DMA of the one before.
//!
//! The bounce copy walks the user buffer's physical runs (found once, as the MMU would) and copies each with
//! the model's bulk copy: what `copy_from_user`/`copy_to_user` cost.

use std::sync::Arc;
use std::time::Instant;

use ndma::zerocopy::{BatchOp, CqConsumer, NEURON_DMA_H2T_DEFAULT_QID};
use ndma::{AsyncPipeline, MemChunk, NeuronDevice, Transfer, PAGE_SIZE};
use ndma_emu::user::EnterGuard;
use ndma_emu::{AddressSpace, MapSpec, MemSpace, MmError, Placement, Testbed};

use super::timing::{Baseline, Plan, Samples};
use crate::error::{CliError, CliResult, OpContext};
use ndma_emu::test_utils::{alloc, fill_chunk, fill_pattern, verify_chunk, write_pattern, Expect, DST_FILL};

/// Largest async zero-copy request (64 pieces of 64 pages).
pub const ASYNC_REQUEST: u64 = 16 << 20;
/// Async zero-copy requests in flight at most (8 × 64 pieces: well inside the 1023-context queue).
pub const ASYNC_IN_FLIGHT: usize = 8;
/// Piece of the async bounce path.
pub const BOUNCE_CHUNK: u64 = 4 << 20;
/// Pid of the benchmark's user process.
const PID: u32 = 4100;
/// Seed of the scattered layout's frame choice.
const SCATTER_SEED: u64 = 0x5ca7;

/// How the user buffer's pages lie in host DRAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One physically contiguous run.
    Contiguous,
    /// Every page on a frame of its own (no two pages physically adjacent).
    Scattered,
}

impl Layout {
    /// Both layouts.
    pub const ALL: [Layout; 2] = [Layout::Contiguous, Layout::Scattered];

    /// `contiguous` or `scattered`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Contiguous => "contiguous",
            Layout::Scattered => "scattered",
        }
    }

    fn placement(self) -> Placement {
        match self {
            Layout::Contiguous => Placement::Contiguous,
            Layout::Scattered => Placement::Scattered { seed: SCATTER_SEED },
        }
    }
}

/// Zero-copy or the classic path with its bounce copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// `zerocopy_submit` over the user's pinned pages.
    ZeroCopy,
    /// CPU copy through a host chunk plus a classic copy.
    Bounce,
}

/// How transfers are issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One synchronous transfer at a time.
    Sync,
    /// Requests in flight together.
    Async,
    /// Synchronous zero-copy over a pre-pinned buffer.
    Prepinned,
}

impl Mode {
    /// `sync`, `async` or `prepinned`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::Async => "async",
            Mode::Prepinned => "prepinned",
        }
    }
}

/// The case names of `way` in direction `to_device`.
pub fn case_name(way: Way, to_device: bool) -> &'static str {
    match (way, to_device) {
        (Way::ZeroCopy, true) => "h2d_zc",
        (Way::ZeroCopy, false) => "d2h_zc",
        (Way::Bounce, true) => "h2d_bounce",
        (Way::Bounce, false) => "d2h_bounce",
    }
}

/// The (way, mode) pairs measured.
pub const WAYS: [(Way, Mode); 5] = [
    (Way::ZeroCopy, Mode::Sync),
    (Way::ZeroCopy, Mode::Async),
    (Way::ZeroCopy, Mode::Prepinned),
    (Way::Bounce, Mode::Sync),
    (Way::Bounce, Mode::Async),
];

/// One measured figure: per-transfer times of each sample, and memcpy of the same bytes.
#[derive(Debug, Clone)]
pub struct ZcFigure {
    /// Per transfer.
    pub op: Samples,
    /// Single-thread memcpy of the same bytes, samples interleaved.
    pub memcpy: Samples,
}

/// `plan.samples` samples of `run` (which does `plan.iters` operations of `size` bytes), each followed by
/// `plan.iters` memcpys of the same bytes: per-operation times of both.
fn sampled(plan: Plan, baseline: &mut Baseline, size: u64, mut run: impl FnMut() -> CliResult) -> CliResult<ZcFigure> {
    baseline.prepare(size);
    let (mut op, mut memcpy) = (Samples::new(), Samples::new());
    for _ in 0..plan.samples {
        let t0 = Instant::now();
        run()?;
        op.push(t0.elapsed() / plan.iters as u32);
        let t0 = Instant::now();
        for _ in 0..plan.iters {
            baseline.copy_once(size);
        }
        memcpy.push(t0.elapsed() / plan.iters as u32);
    }
    Ok(ZcFigure { op, memcpy })
}

fn mm_err(what: &str, e: &MmError) -> CliError {
    CliError::Emu { what: what.to_string(), msg: e.to_string(), errno: e.errno() }
}

/// A user process on a zero-copy-capable device: its address space, entered on the calling thread.
pub struct ZcBed<'t> {
    tb: &'t Testbed,
    mm: Arc<AddressSpace>,
    _enter: EnterGuard,
    cq: CqConsumer,
    /// Next async sequence number.
    seq: u64,
}

impl<'t> ZcBed<'t> {
    /// A process on device 0 of `tb` (V3, or V2 with the zero-copy override set by the caller).
    ///
    /// # Errors
    ///
    /// The completion queue's.
    pub fn new(tb: &'t Testbed) -> CliResult<Self> {
        let mm = AddressSpace::new(tb.emu.host(), PID);
        let enter = mm.enter();
        let dev = &tb.system.devices()[0];
        let cq = dev.completion_queue(0).and_then(|c| CqConsumer::new(&c)).op_ctx(|| "mapping the completion queue")?;
        Ok(ZcBed { tb, mm, _enter: enter, cq, seq: 0 })
    }

    fn dev(&self) -> &Arc<NeuronDevice> {
        &self.tb.system.devices()[0]
    }

    /// A user buffer of `size` bytes laid out by `layout`, its device chunk and its bounce chunk.
    ///
    /// # Errors
    ///
    /// Mapping and allocation failures.
    pub fn buffer(&self, size: u64, layout: Layout) -> CliResult<UserBuffer> {
        let va = self
            .mm
            .map(&MapSpec::bytes(size, layout.placement()))
            .map_err(|e| mm_err("mapping the user buffer", &e))?;
        let pages = size.div_ceil(PAGE_SIZE) as usize;
        let mut runs: Vec<Run> = Vec::new();
        for (i, f) in self.mm.frames_of(va, pages).into_iter().enumerate() {
            let pa = f.ok_or_else(|| CliError::Verify(format!("user page {i} of the buffer is not mapped")))?;
            let off = i as u64 * PAGE_SIZE;
            let len = PAGE_SIZE.min(size - off);
            match runs.last_mut() {
                Some(r) if r.pa + r.len == pa => r.len += len,
                _ => runs.push(Run { off, pa, len }),
            }
        }
        let dev = self.dev();
        let mc = alloc(dev, false, size, 0)?;
        let bounce = alloc(dev, true, size, 0)?;
        let bounce_pa = bounce
            .host_buf()
            .map(|b| b.phys_addr())
            .ok_or_else(|| CliError::Verify("bounce chunk has no host mapping".into()))?;
        Ok(UserBuffer { va, size, layout, runs, mc, bounce, bounce_pa })
    }

    /// Measures `way`/`mode` in direction `to_device` over `b`: one untimed warm-up transfer, the destination
    /// reset, `plan` samples interleaved with memcpy of the same bytes, then the destination verified.
    ///
    /// # Errors
    ///
    /// Transfer and verification failures.
    pub fn measure(
        &mut self,
        b: &UserBuffer,
        way: Way,
        mode: Mode,
        to_device: bool,
        plan: Plan,
        baseline: &mut Baseline,
    ) -> CliResult<ZcFigure> {
        let seed = b.size ^ u64::from(to_device) ^ 0x2c0;
        let what = format!("{} {} {} of {} bytes", case_name(way, to_device), mode.name(), b.layout.name(), b.size);
        let emu = self.tb.emu.device(0);
        // Sources hold the pattern, destinations the fill.
        if to_device {
            self.write_user_pattern(b, seed)?;
        } else {
            write_pattern(emu, &b.mc, 0, b.size, seed)?;
        }
        let prepinned = mode == Mode::Prepinned;
        if prepinned {
            self.tb.system.pin_host_memory(b.va, b.size).op_ctx(|| format!("{what}: pre-pinning"))?;
        }
        let r = self.timed(b, way, mode, to_device, plan, baseline, &what, seed);
        if prepinned {
            self.tb.system.unpin_host_memory(b.va).op_ctx(|| format!("{what}: unpinning"))?;
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn timed(
        &mut self,
        b: &UserBuffer,
        way: Way,
        mode: Mode,
        to_device: bool,
        plan: Plan,
        baseline: &mut Baseline,
        what: &str,
        seed: u64,
    ) -> CliResult<ZcFigure> {
        let emu = self.tb.emu.device(0);
        self.transfer(b, way, mode, to_device, 1, &format!("{what} (warm-up)"))?;
        if to_device {
            fill_chunk(emu, &b.mc, 0, b.size, DST_FILL)?;
        } else {
            self.mm.fill(b.va, b.size, DST_FILL).map_err(|e| mm_err(what, &e))?;
        }
        let figure = sampled(plan, baseline, b.size, || self.transfer(b, way, mode, to_device, plan.iters, what))?;
        if to_device {
            verify_chunk(emu, &b.mc, 0, b.size, Expect::Pattern(seed), what)?;
        } else {
            self.verify_user(b, seed, what)?;
        }
        Ok(figure)
    }

    /// Two synchronous zero-copy ways of moving the same bytes (`a` and `b`: a buffer and `Sync` or
    /// `Prepinned`), `plan.samples` samples of each taken alternately — a, b, then b, a, and so on — so that
    /// both see the same machine: a noisy moment or a drifting clock hits the two alike, which separate blocks
    /// of samples (the table's rows) cannot promise. A prepinned side registers its buffer before each of its
    /// samples and unregisters it after (untimed), so the other side pins every time even over the same
    /// buffer. One untimed warm-up transfer each; the destinations are verified afterwards.
    ///
    /// # Errors
    ///
    /// Transfer, registration and verification failures.
    pub fn measure_pair(
        &mut self,
        a: (&UserBuffer, Mode),
        b: (&UserBuffer, Mode),
        to_device: bool,
        plan: Plan,
    ) -> CliResult<(Samples, Samples)> {
        let sides = [a, b];
        if sides.iter().any(|&(_, m)| m == Mode::Async) {
            return Err(CliError::Verify("a paired measurement takes synchronous modes only".into()));
        }
        let emu = self.tb.emu.device(0);
        let seed = |buf: &UserBuffer| buf.size ^ u64::from(to_device) ^ 0x9a1;
        let what = |buf: &UserBuffer, m: Mode| {
            format!(
                "{} {} {} of {} bytes (paired)",
                case_name(Way::ZeroCopy, to_device),
                m.name(),
                buf.layout.name(),
                buf.size
            )
        };
        for &(buf, m) in &sides {
            if to_device {
                self.write_user_pattern(buf, seed(buf))?;
            } else {
                write_pattern(emu, &buf.mc, 0, buf.size, seed(buf))?;
            }
            self.paired_sample(buf, m, to_device, 1, &format!("{} (warm-up)", what(buf, m)))?;
        }
        for &(buf, _) in &sides {
            if to_device {
                fill_chunk(emu, &buf.mc, 0, buf.size, DST_FILL)?;
            } else {
                self.mm.fill(buf.va, buf.size, DST_FILL).map_err(|e| mm_err("filling the user buffer", &e))?;
            }
        }
        let mut times = [Samples::new(), Samples::new()];
        for s in 0..plan.samples {
            let order = if s % 2 == 0 { [0, 1] } else { [1, 0] };
            for k in order {
                let (buf, m) = sides[k];
                let t = self.paired_sample(buf, m, to_device, plan.iters, &what(buf, m))?;
                times[k].push(t / plan.iters as u32);
            }
        }
        for &(buf, m) in &sides {
            if to_device {
                verify_chunk(emu, &buf.mc, 0, buf.size, Expect::Pattern(seed(buf)), &what(buf, m))?;
            } else {
                self.verify_user(buf, seed(buf), &what(buf, m))?;
            }
        }
        let [ta, tb] = times;
        Ok((ta, tb))
    }

    /// One timed sample of [`ZcBed::measure_pair`]: `reps` synchronous transfers of `buf`, registered around
    /// them (untimed) when `mode` is `Prepinned`. Returns the time of the transfers.
    fn paired_sample(
        &mut self,
        buf: &UserBuffer,
        mode: Mode,
        to_device: bool,
        reps: u64,
        what: &str,
    ) -> CliResult<std::time::Duration> {
        let prepinned = mode == Mode::Prepinned;
        if prepinned {
            self.tb.system.pin_host_memory(buf.va, buf.size).op_ctx(|| format!("{what}: pre-pinning"))?;
        }
        let t0 = Instant::now();
        let r = self.transfer(buf, Way::ZeroCopy, mode, to_device, reps, what);
        let t = t0.elapsed();
        if prepinned {
            self.tb.system.unpin_host_memory(buf.va).op_ctx(|| format!("{what}: unpinning"))?;
        }
        r.map(|()| t)
    }

    /// The CPU copying the user buffer's pages into a contiguous buffer (the bounce chunk), run by run, `plan`
    /// samples interleaved with memcpy of the same bytes: what the CPU itself pays for the buffer's layout,
    /// the ceiling of any engine the CPU emulates. The copy is verified.
    ///
    /// # Errors
    ///
    /// Copy and verification failures.
    pub fn measure_cpu_copy(&mut self, b: &UserBuffer, plan: Plan, baseline: &mut Baseline) -> CliResult<ZcFigure> {
        let seed = b.size ^ 0xc0b1;
        let what = format!("user_copy of {} {} bytes", b.layout.name(), b.size);
        self.write_user_pattern(b, seed)?;
        self.bounce_copy(b, 0, b.size, true)?;
        let figure =
            sampled(plan, baseline, b.size, || (0..plan.iters).try_for_each(|_| self.bounce_copy(b, 0, b.size, true)))?;
        verify_chunk(self.tb.emu.device(0), &b.bounce, 0, b.size, Expect::Pattern(seed), &what)?;
        Ok(figure)
    }

    /// `reps` transfers of the whole buffer (`what` names them in errors).
    fn transfer(&mut self, b: &UserBuffer, way: Way, mode: Mode, to_device: bool, reps: u64, what: &str) -> CliResult {
        match (way, mode) {
            (Way::ZeroCopy, Mode::Sync | Mode::Prepinned) => {
                let op = [BatchOp { offset: 0, size: b.size, buffer: b.va }];
                for _ in 0..reps {
                    self.dev()
                        .zerocopy_submit(0, &op, &b.mc, 0, NEURON_DMA_H2T_DEFAULT_QID, to_device, 0, 0)
                        .op_ctx(|| what)?;
                }
                Ok(())
            }
            (Way::ZeroCopy, Mode::Async) => self.zc_async(b, to_device, reps, what),
            (Way::Bounce, Mode::Sync) => (0..reps).try_for_each(|_| self.bounce_sync(b, to_device, what)),
            (Way::Bounce, _) => (0..reps).try_for_each(|_| self.bounce_async(b, to_device, what)),
        }
    }

    /// `reps` transfers of the buffer as async requests of at most [`ASYNC_REQUEST`] bytes, at most
    /// [`ASYNC_IN_FLIGHT`] in flight; every completion must carry its sequence number, in order, and 0.
    fn zc_async(&mut self, b: &UserBuffer, to_device: bool, reps: u64, what: &str) -> CliResult {
        let req = b.size.min(ASYNC_REQUEST);
        let per_rep = b.size.div_ceil(req);
        let total = per_rep * reps;
        let first = self.seq + 1;
        let (mut submitted, mut completed) = (0u64, 0u64);
        while completed < total {
            while submitted < total && submitted - completed < ASYNC_IN_FLIGHT as u64 {
                let off = (submitted % per_rep) * req;
                let op = [BatchOp { offset: off, size: req.min(b.size - off), buffer: b.va + off }];
                let seq = first + submitted;
                self.dev()
                    .zerocopy_submit(0, &op, &b.mc, 0, NEURON_DMA_H2T_DEFAULT_QID, to_device, seq, seq)
                    .op_ctx(|| format!("{what}: request {seq}"))?;
                submitted += 1;
            }
            match self.cq.pop() {
                Some(e) => {
                    let want = first + completed;
                    if e.sequence_num != want || e.compl_ret != 0 || e.context != want {
                        return Err(CliError::Verify(format!(
                            "{what}: completion {e:?}, expected sequence {want} with result 0 and context {want}"
                        )));
                    }
                    completed += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
        self.seq = first + total - 1;
        Ok(())
    }

    /// The whole bounce copy, then one synchronous classic copy (h2d); or the reverse (d2h).
    fn bounce_sync(&self, b: &UserBuffer, to_device: bool, what: &str) -> CliResult {
        let dev = self.dev();
        if to_device {
            self.bounce_copy(b, 0, b.size, true)?;
            dev.memcpy_mc(&b.bounce, &b.mc, 0, 0, b.size).op_ctx(|| what)
        } else {
            dev.memcpy_mc(&b.mc, &b.bounce, 0, 0, b.size).op_ctx(|| what)?;
            self.bounce_copy(b, 0, b.size, false)
        }
    }

    /// [`BOUNCE_CHUNK`] pieces through `AsyncPipeline`: the CPU copy of a piece overlaps the DMA of the
    /// piece before it.
    fn bounce_async(&self, b: &UserBuffer, to_device: bool, what: &str) -> CliResult {
        let dev = self.dev();
        let chunk = b.size.min(BOUNCE_CHUNK);
        let mut pipe = AsyncPipeline::new(dev);
        let mut off = 0;
        let mut behind: Option<(u64, u64)> = None;
        while off < b.size {
            let n = chunk.min(b.size - off);
            if to_device {
                self.bounce_copy(b, off, n, true)?;
                let t = Transfer::new(&b.bounce, &b.mc, n).src_offset(off).dst_offset(off);
                pipe.submit(&t).op_ctx(|| what)?;
            } else {
                let t = Transfer::new(&b.mc, &b.bounce, n).src_offset(off).dst_offset(off);
                // Stages this piece and waits for the one before, whose bytes then leave the bounce chunk.
                pipe.submit(&t).op_ctx(|| what)?;
                if let Some((o, len)) = behind.replace((off, n)) {
                    self.bounce_copy(b, o, len, false)?;
                }
            }
            off += n;
        }
        pipe.finish().op_ctx(|| what)?;
        if let Some((o, len)) = behind {
            self.bounce_copy(b, o, len, false)?;
        }
        Ok(())
    }

    /// CPU copy of buffer bytes `[off, off + len)` between the user's pages and the bounce chunk.
    fn bounce_copy(&self, b: &UserBuffer, off: u64, len: u64, to_bounce: bool) -> CliResult {
        let space: &MemSpace = self.tb.emu.host().space();
        let end = off + len;
        let first = b.runs.partition_point(|r| r.off + r.len <= off);
        for r in b.runs[first..].iter().take_while(|r| r.off < end) {
            let (s, e) = (r.off.max(off), (r.off + r.len).min(end));
            let (user, bounce) = (r.pa + (s - r.off), b.bounce_pa + s);
            let (src, dst) = if to_bounce { (user, bounce) } else { (bounce, user) };
            MemSpace::copy(space, src, space, dst, e - s).map_err(|e| CliError::emu("bounce copy", &e))?;
        }
        Ok(())
    }

    fn write_user_pattern(&self, b: &UserBuffer, seed: u64) -> CliResult {
        let mut block = vec![0u8; (1 << 20).min(b.size as usize)];
        let mut off = 0;
        while off < b.size {
            let n = (b.size - off).min(block.len() as u64) as usize;
            fill_pattern(seed, off, &mut block[..n]);
            self.mm.write(b.va + off, &block[..n]).map_err(|e| mm_err("writing the user buffer", &e))?;
            off += n as u64;
        }
        Ok(())
    }

    fn verify_user(&self, b: &UserBuffer, seed: u64, what: &str) -> CliResult {
        let n0 = (1 << 20).min(b.size as usize);
        let (mut got, mut want) = (vec![0u8; n0], vec![0u8; n0]);
        let mut off = 0;
        while off < b.size {
            let n = (b.size - off).min(n0 as u64) as usize;
            self.mm.read(b.va + off, &mut got[..n]).map_err(|e| mm_err(what, &e))?;
            fill_pattern(seed, off, &mut want[..n]);
            if let Some(i) = (0..n).find(|&i| got[i] != want[i]) {
                return Err(CliError::Verify(format!(
                    "{what}: user byte at offset {} is {:#04x}, expected {:#04x}",
                    off + i as u64,
                    got[i],
                    want[i]
                )));
            }
            off += n as u64;
        }
        Ok(())
    }

    /// Unmaps `b` (its chunks free when it drops).
    ///
    /// # Errors
    ///
    /// The address space's refusal.
    pub fn release(&self, b: UserBuffer) -> CliResult {
        self.mm.unmap(b.va, b.size.div_ceil(PAGE_SIZE) * PAGE_SIZE).map_err(|e| mm_err("unmapping the user buffer", &e))
    }

    /// Frames still pinned (0 after every case).
    pub fn pinned_frames(&self) -> usize {
        self.tb.emu.host().frames().leak_check().pinned_frames
    }
}

/// A physically contiguous run of the user buffer.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// Offset in the buffer.
    off: u64,
    /// Host physical address.
    pa: u64,
    len: u64,
}

/// A user buffer, the device chunk it moves to or from, and the bounce chunk of the classic path.
pub struct UserBuffer {
    va: u64,
    size: u64,
    layout: Layout,
    runs: Vec<Run>,
    mc: Arc<MemChunk>,
    bounce: Arc<MemChunk>,
    bounce_pa: u64,
}

impl UserBuffer {
    /// Physically contiguous runs of the buffer.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }
}
