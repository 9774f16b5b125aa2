//! What the zero-copy commands share: the pieces a request is cut into and the descriptors each writes (as
//! the op layer's own `plan_descriptors` plans them, over the frames the user pages map to), the pin activity
//! of a transfer, the leak check that ends every zero-copy command, and taking completions from a ring's
//! completion queue.

use std::time::{Duration, Instant};

use ndma::zerocopy::build::ZcPlan;
use ndma::zerocopy::{
    calc_pin_size, plan_descriptors, CqConsumer, CqEntry, NDMA_CTX_QUEUE_DEFAULT_CAPACITY, NEURON_DMA_H2T_DEFAULT_QID,
};
use ndma::{BatchOp, MemChunk, NdmaError, NeuronDevice, System, PAGE_SIZE};
use ndma_emu::user::PinStats;
use ndma_emu::{AddressSpace, HostMemory};
use serde::Serialize;
use udma::{Arch, Barrier};

use super::output::Out;
use crate::error::{CliError, CliResult, OpContext};

/// How long a command waits for the completion thread (a completion, an empty queue) before it reports the
/// completion as lost. Nothing here injects a stall, so reaching it is a bug, reported rather than waited out.
pub const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// Contexts a ring's queue can hold at once (one slot of the power-of-two ring stays empty).
pub const QUEUE_USABLE: u64 = NDMA_CTX_QUEUE_DEFAULT_CAPACITY as u64 - 1;

/// Turns the `zerocopy_trn1_override` on where the arch needs it (V2: zero-copy is off without it), saying
/// so. Returns whether it was turned on.
pub fn enable_override(dev: &NeuronDevice, out: Out) -> bool {
    if dev.zerocopy_supported() {
        return false;
    }
    dev.set_zerocopy_trn1_override(true);
    out.say(format_args!(
        "{}: zerocopy_trn1_override turned on (zero-copy is off on archs with the reset-window retry unless it is \
         set)",
        dev.dhal().arch()
    ));
    true
}

/// One piece of a request, as the op layer cuts it (FACTS §5.4) and plans its descriptors (§5.5).
#[derive(Debug, Clone)]
pub struct Piece {
    /// User address of its first byte.
    pub va: u64,
    /// Device address of its first byte.
    pub dev: u64,
    /// Bytes.
    pub size: u64,
    /// Frames of the pages it pins, in page order.
    pub frames: Vec<u64>,
    /// The last piece of its request (the one a write fences).
    pub last: bool,
    /// Its descriptors.
    pub plan: ZcPlan,
}

/// The pieces of one request of `ops` (user pages of `mm`, device side from `base`), in order.
///
/// # Errors
///
/// [`CliError::Verify`] when a page of an op is not mapped (a request with a hole has no plan).
pub fn plan_request(
    arch: Arch,
    mm: &AddressSpace,
    ops: &[BatchOp],
    base: u64,
    to_device: bool,
) -> CliResult<Vec<Piece>> {
    let mut pieces = Vec::new();
    let Some(last_op) = ops.iter().rposition(|op| op.size > 0) else { return Ok(pieces) };
    for (k, op) in ops.iter().enumerate().filter(|(_, op)| op.size > 0) {
        let (mut host, mut dev, mut remaining) = (op.buffer, base + op.offset, op.size);
        let mut offset = host % PAGE_SIZE;
        let mut pin_size = calc_pin_size(remaining + offset);
        while remaining > 0 {
            let nr_pages = pin_size.div_ceil(PAGE_SIZE) as usize;
            let size = (pin_size - offset).min(remaining);
            let last = size == remaining && k == last_op;
            let page = host - offset;
            let frames: Vec<u64> = mm
                .frames_of(page, nr_pages)
                .into_iter()
                .enumerate()
                .map(|(i, f)| {
                    f.ok_or_else(|| {
                        CliError::Verify(format!("user page {:#x} is not mapped", page + i as u64 * PAGE_SIZE))
                    })
                })
                .collect::<CliResult<_>>()?;
            let plan = plan_descriptors(arch, &frames, offset, size, dev, to_device, last);
            pieces.push(Piece { va: host, dev, size, frames, last, plan });
            (host, dev, remaining, offset) = (host + size, dev + size, remaining - size, 0);
            pin_size = pin_size.min(remaining);
        }
    }
    Ok(pieces)
}

/// What a list of pieces adds up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PlanTotals {
    /// Pieces (each: its data descriptors, a marker, one doorbell pair).
    pub pieces: u64,
    /// Runs of physically consecutive frames the data was coalesced from.
    pub runs: u64,
    /// Data descriptors.
    pub data_descriptors: u64,
    /// Data descriptors plus one marker per piece.
    pub descriptors: u64,
    /// Pages pinned (one pin per page of every piece).
    pub pages: u64,
}

impl PlanTotals {
    /// The totals of `pieces`.
    pub fn of<'a>(pieces: impl IntoIterator<Item = &'a Piece>) -> PlanTotals {
        let mut t = PlanTotals::default();
        for p in pieces {
            t.pieces += 1;
            t.runs += u64::from(p.plan.runs);
            t.data_descriptors += p.plan.data.len() as u64;
            t.pages += p.frames.len() as u64;
        }
        t.descriptors = t.data_descriptors + t.pieces;
        t
    }
}

/// Pin activity of an address space between two snapshots (the model's [`PinStats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pins {
    /// `pin_user_pages_fast` calls.
    pub fast_calls: u64,
    /// `pin_user_pages` calls (the slow path, local or remote).
    pub slow_calls: u64,
    /// Of the slow calls, those made through a captured address space (the completion thread).
    pub remote_calls: u64,
    /// Calls that pinned some but not all pages.
    pub short_pins: u64,
    /// Calls that pinned nothing.
    pub failed_calls: u64,
    /// Pages pinned.
    pub pinned_pages: u64,
    /// Pages unpinned.
    pub unpinned_pages: u64,
    /// Of those, unpinned dirty (the device wrote them).
    pub dirty_unpins: u64,
}

impl Pins {
    /// `after − before`.
    pub fn between(before: &PinStats, after: &PinStats) -> Pins {
        Pins {
            fast_calls: after.fast_calls - before.fast_calls,
            slow_calls: after.slow_calls - before.slow_calls,
            remote_calls: after.remote_calls - before.remote_calls,
            short_pins: after.short_pins - before.short_pins,
            failed_calls: after.failed_calls - before.failed_calls,
            pinned_pages: after.pinned_pages - before.pinned_pages,
            unpinned_pages: after.unpinned_pages - before.unpinned_pages,
            dirty_unpins: after.dirty_unpins - before.dirty_unpins,
        }
    }

    /// One line for the human report.
    pub fn line(&self) -> String {
        format!(
            "pins: {} fast, {} slow ({} remote), {} short, {} failed; {} pages pinned, {} unpinned ({} dirty)",
            self.fast_calls,
            self.slow_calls,
            self.remote_calls,
            self.short_pins,
            self.failed_calls,
            self.pinned_pages,
            self.unpinned_pages,
            self.dirty_unpins
        )
    }
}

/// The leak check: nothing pinned, nothing queued, no completion held back, every ring slot accounted for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Leaks {
    /// Host frames with at least one pin.
    pub pinned_frames: usize,
    /// Outstanding pins over all frames.
    pub pins: u64,
    /// Unmapped frames kept alive only by pins.
    pub orphaned_frames: usize,
    /// Unpins of frames that were not pinned (each a bug).
    pub bad_unpins: u64,
    /// Pre-pinned ranges still registered.
    pub pinned_ranges: usize,
    /// Live contexts in the device's zero-copy queues.
    pub contexts: u32,
    /// Pages the queues count as pinned.
    pub queue_pinned_pages: u64,
    /// Completions waiting for room in a completion queue.
    pub backlog: usize,
    /// Ring slots between the consumer and producer cursors, over the device's H2T rings.
    pub ring_slots_used: u32,
    /// Ring slots the rings' contexts account for (equal to `ring_slots_used` unless a slot leaked).
    pub ring_slots_accounted: u32,
    /// All of the above is zero.
    pub clean: bool,
}

impl Leaks {
    /// Checks `dev`'s zero-copy queues and rings, then `host`'s frames. The queues are read first: reading
    /// them takes each ring's lock, which the completion thread holds from posting a completion until the
    /// piece's pages are unpinned, so the frames read after are not mid-release.
    ///
    /// # Errors
    ///
    /// Op-layer errors reading the rings.
    pub fn check(system: &System, dev: &NeuronDevice, host: &HostMemory) -> CliResult<Leaks> {
        let mut l = Leaks { pinned_ranges: system.pinned_ranges(), ..Leaks::default() };
        for nc in 0..dev.dhal().ncs_per_device() {
            let s = dev.zerocopy_status(nc).op_ctx(|| format!("reading NC {nc}'s zero-copy state"))?;
            l.contexts += s.contexts;
            l.queue_pinned_pages += s.pinned_pages;
            l.backlog += s.backlog;
            let (used, accounted) = dev.ring_slot_accounting(nc).op_ctx(|| format!("reading NC {nc}'s ring"))?;
            l.ring_slots_used += used;
            l.ring_slots_accounted += accounted;
        }
        let f = host.frames().leak_check();
        (l.pinned_frames, l.pins, l.orphaned_frames, l.bad_unpins) =
            (f.pinned_frames, f.pins, f.orphaned_frames, f.bad_unpins);
        l.clean = f.is_clean()
            && l.orphaned_frames == 0
            && l.pinned_ranges == 0
            && l.contexts == 0
            && l.queue_pinned_pages == 0
            && l.backlog == 0
            && l.ring_slots_used == 0
            && l.ring_slots_accounted == 0;
        Ok(l)
    }

    /// One line for the human report.
    pub fn line(&self) -> String {
        format!(
            "leak check: {} frames pinned ({} pins, {} orphaned, {} bad unpins), {} pre-pinned ranges; queues: {} \
             contexts, {} pages pinned, {} completions backlogged; ring slots {}/{} — {}",
            self.pinned_frames,
            self.pins,
            self.orphaned_frames,
            self.bad_unpins,
            self.pinned_ranges,
            self.contexts,
            self.queue_pinned_pages,
            self.backlog,
            self.ring_slots_used,
            self.ring_slots_accounted,
            if self.clean { "clean" } else { "LEAKED" }
        )
    }

    /// Fails unless clean.
    ///
    /// # Errors
    ///
    /// [`CliError::Verify`] naming what leaked.
    pub fn ensure_clean(&self, what: &str) -> CliResult {
        if self.clean {
            Ok(())
        } else {
            Err(CliError::Verify(format!("{what}: {}", self.line())))
        }
    }
}

/// A completion-queue entry, as the JSON reports carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cqe {
    /// The request's sequence number.
    pub sequence_num: u64,
    /// 0, or the negative errno of the request's first failure.
    pub compl_ret: i64,
    /// The opaque value the submitter passed.
    pub context: u64,
}

impl From<CqEntry> for Cqe {
    fn from(e: CqEntry) -> Self {
        Cqe { sequence_num: e.sequence_num, compl_ret: e.compl_ret, context: e.context }
    }
}

impl std::fmt::Display for Cqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "(seq {}, ", self.sequence_num)?;
        match self.compl_ret {
            0 => f.write_str("ok")?,
            e => write!(f, "errno {e} {}", crate::error::errno_name(e as i32))?,
        }
        write!(f, ", context {:#x})", self.context)
    }
}

/// The context value the commands pass with request `seq` (echoed in its completion).
pub fn context_of(seq: u64) -> u64 {
    0xc0de_0000_0000 | seq
}

/// Takes `n` completions from `cq`, yielding while none is posted.
///
/// # Errors
///
/// [`CliError::Verify`] when fewer than `n` arrive within [`WAIT_LIMIT`] (a lost completion).
pub fn take_cqes(cq: &CqConsumer, n: usize) -> CliResult<Vec<Cqe>> {
    let deadline = Instant::now() + WAIT_LIMIT;
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        match cq.pop() {
            Some(e) => got.push(Cqe::from(e)),
            None if Instant::now() > deadline => {
                return Err(CliError::Verify(format!(
                    "completions lost: {} of {n} arrived within {} s",
                    got.len(),
                    WAIT_LIMIT.as_secs()
                )))
            }
            None => std::thread::yield_now(),
        }
    }
    Ok(got)
}

/// Takes every completion posted so far into `got`, without waiting.
pub fn take_posted(cq: &CqConsumer, got: &mut Vec<Cqe>) {
    while let Some(e) = cq.pop() {
        got.push(Cqe::from(e));
    }
}

/// Waits until NC `nc`'s context queue has room for a request of `pieces` pieces, taking the completions
/// posted meanwhile into `got` — a runtime's loop: it keeps its completion queue drained, and submits a request
/// only when the queue can take all of it. A request refused halfway (`-EBUSY` after some of its pieces were
/// queued) would have those pieces drained and fenced by the op layer, and be repeated: correct, but not the
/// work the command plans and counts. A request larger than the queue returns at once (its submit is refused).
///
/// # Errors
///
/// Op-layer errors; [`CliError::Verify`] when room does not come within [`WAIT_LIMIT`].
pub fn wait_for_room(dev: &NeuronDevice, nc: u32, cq: &CqConsumer, pieces: u64, got: &mut Vec<Cqe>) -> CliResult {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        take_posted(cq, got);
        let s = dev.zerocopy_status(nc).op_ctx(|| "reading the zero-copy state")?;
        let (head, _, _, tail) = s.cursors;
        // Slots from head to tail, tombstones included: what decides whether the queue is full.
        let used = (tail + NDMA_CTX_QUEUE_DEFAULT_CAPACITY - head) % NDMA_CTX_QUEUE_DEFAULT_CAPACITY;
        if pieces > QUEUE_USABLE || u64::from(used) + pieces <= QUEUE_USABLE {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CliError::Verify(format!(
                "no room for {pieces} contexts within {} s: {s:?}",
                WAIT_LIMIT.as_secs()
            )));
        }
        std::thread::yield_now();
    }
}

/// Checks that `got` is exactly `want`, in order, and that nothing more is posted.
///
/// # Errors
///
/// [`CliError::Verify`] naming the first difference.
pub fn expect_cqes(cq: &CqConsumer, got: &[Cqe], want: &[Cqe]) -> CliResult {
    if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
        let show = |c: Option<&Cqe>| c.map_or("nothing".to_string(), ToString::to_string);
        return Err(CliError::Verify(format!(
            "completion {i}: got {}, expected {}",
            show(got.get(i)),
            show(want.get(i))
        )));
    }
    if let Some(extra) = cq.pop() {
        return Err(CliError::Verify(format!("an extra completion was posted: {}", Cqe::from(extra))));
    }
    Ok(())
}

/// Polls NC `nc`'s zero-copy state until `done` holds.
///
/// # Errors
///
/// Op-layer errors; [`CliError::Verify`] after [`WAIT_LIMIT`] (`what` says what never happened).
pub fn wait_status(
    dev: &NeuronDevice,
    nc: u32,
    what: &str,
    done: impl Fn(&ndma::zerocopy::ZcStatus) -> bool,
) -> CliResult<ndma::zerocopy::ZcStatus> {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        let s = dev.zerocopy_status(nc).op_ctx(|| "reading the zero-copy state")?;
        if done(&s) {
            return Ok(s);
        }
        if Instant::now() > deadline {
            return Err(CliError::Verify(format!("{what} within {} s: {s:?}", WAIT_LIMIT.as_secs())));
        }
        std::thread::yield_now();
    }
}

/// Submits async request `seq` (context [`context_of`]) on NC `nc`'s default H2T queue. A full context queue
/// (`-EBUSY`) is the async path's back-pressure: the submit is repeated while the completion thread makes
/// room — unless the request alone has more pieces than the queue can hold, which no wait cures. Returns how
/// many submits were refused as busy.
///
/// # Errors
///
/// The op layer's other errors; `-EBUSY` when the request cannot fit or room does not come within
/// [`WAIT_LIMIT`].
pub fn submit_async(
    dev: &NeuronDevice,
    nc: u32,
    ops: &[BatchOp],
    mc: &std::sync::Arc<MemChunk>,
    to_device: bool,
    seq: u64,
    pieces: u64,
) -> ndma::Result<u64> {
    let deadline = Instant::now() + WAIT_LIMIT;
    let mut busy = 0;
    loop {
        match dev.zerocopy_submit(nc, ops, mc, 0, NEURON_DMA_H2T_DEFAULT_QID, to_device, seq, context_of(seq)) {
            Err(NdmaError::QueueFull { .. }) if pieces <= QUEUE_USABLE && Instant::now() < deadline => {
                busy += 1;
                std::thread::yield_now();
            }
            r => return r.map(|()| busy),
        }
    }
}

/// A barrier's name in the reports: `none`, `dmb`, `write_barrier` or `sow`.
pub fn barrier_name(b: Barrier) -> &'static str {
    match b {
        Barrier::None => "none",
        Barrier::Dmb => "dmb",
        Barrier::WriteBarrier => "write_barrier",
        Barrier::Sow => "sow",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_print_their_errno() {
        let ok = Cqe { sequence_num: 3, compl_ret: 0, context: 0x10 };
        let bad = Cqe { sequence_num: 4, compl_ret: -110, context: 0x11 };
        assert_eq!(ok.to_string(), "(seq 3, ok, context 0x10)");
        assert_eq!(bad.to_string(), "(seq 4, errno -110 ETIMEDOUT, context 0x11)");
    }

    #[test]
    fn totals_add_a_marker_per_piece() {
        let plan = |n: usize, runs| ZcPlan {
            data: vec![ndma::zerocopy::ZcDesc { src: 0, dst: 0, len: 1, barrier: Barrier::None }; n],
            runs,
            marker_barrier: Barrier::None,
        };
        let piece =
            |n, runs, pages| Piece { va: 0, dev: 0, size: 1, frames: vec![0; pages], last: false, plan: plan(n, runs) };
        let t = PlanTotals::of(&[piece(3, 2, 64), piece(1, 1, 5)]);
        assert_eq!(t, PlanTotals { pieces: 2, runs: 3, data_descriptors: 4, descriptors: 6, pages: 69 }, "{t:?}");
    }
}
