//! Memory handed to the engine belongs to the transfer until it completes or is recovered, and every
//! descriptor slot belongs to exactly one context: the soundness properties of the classic path.

use std::sync::Arc;

use ndma::{AsyncPipeline, CtxHandle, NdmaError, Transfer};
use ndma_emu::test_utils::*;
use ndma_emu::{ClockKind, EmuDevice, ExecPolicy, OrderingMode, PlannedFault};
use udma::{regs, Arch, Direction, Mmio};

/// Pauses (clears the enable bits of) or resumes both rings of NC `nc`'s H2T queue, as a register write the
/// device model honours: a paused queue keeps what its doorbells handed over pending.
fn set_enabled(dev: &ndma::NeuronDevice, emu: &EmuDevice, nc: u32, on: bool) {
    let (eng, qid) = dev.h2t_queue(nc).unwrap();
    let base = dev.dhal().engine_base(eng).unwrap();
    let cfg = if on { regs::Q_CFG_ENABLED } else { regs::Q_CFG_RESET_VALUE };
    for dir in [Direction::Tx, Direction::Rx] {
        emu.write32(regs::queue_base(base, dir, qid) + regs::q::CFG, cfg);
    }
}

fn pending(dev: &ndma::NeuronDevice, emu: &EmuDevice, nc: u32) -> u32 {
    let (eng, qid) = dev.h2t_queue(nc).unwrap();
    emu.pending(eng, qid, Direction::Rx)
}

#[test]
fn dropping_the_chunks_of_an_async_copy_in_flight_frees_nothing_the_engine_still_uses() {
    for arch in Arch::ALL {
        let tb = adversarial(arch, ExecPolicy::Inline);
        let (dev, emu) = tb.device(0);
        let size = 3 * 65536 + 123;
        let src = alloc(dev, true, size, 0).unwrap();
        let dst = alloc(dev, false, size, 0).unwrap();
        let data = pattern(7, 0, size as usize);
        write_chunk(emu, &src, 0, &data).unwrap();
        let (src_pa, dst_pa) = (src.pa(), dst.pa());
        // Hold the copy in flight: the queue is paused, its doorbells stay pending.
        set_enabled(dev, emu, 0, false);
        let h = dev.memcpy_mc_async(&src, &dst, 0, 0, size, 0, CtxHandle::None).unwrap();
        assert_eq!(pending(dev, emu, 0), 5, "{arch}: 4 data pairs + the marker handed over, none executed");
        let dst_weak = Arc::downgrade(&dst);
        drop(src);
        drop(dst);
        // New chunks of the same sizes, written by their new owner. Were the old ranges freed, first fit would
        // hand them out again and the engine would read the new owner's bytes and write over them.
        let src2 = alloc(dev, true, size, 0).unwrap();
        let dst2 = alloc(dev, false, size, 0).unwrap();
        assert_ne!(src2.pa(), src_pa, "{arch}: the source is still the copy's");
        assert_ne!(dst2.pa(), dst_pa, "{arch}: the destination is still the copy's");
        write_chunk(emu, &src2, 0, &vec![0x33; size as usize]).unwrap();
        write_chunk(emu, &dst2, 0, &vec![0x44; size as usize]).unwrap();
        set_enabled(dev, emu, 0, true);
        dev.wait_handle(0, h).unwrap();
        assert!(
            read_vec(emu, &dst2, 0, size).unwrap().iter().all(|&b| b == 0x44),
            "{arch}: the new allocation is untouched"
        );
        assert!(read_vec(emu, &src2, 0, size).unwrap().iter().all(|&b| b == 0x33), "{arch}");
        // The copy moved the original bytes into the original destination, then let go of it.
        let mut landed = vec![0u8; size as usize];
        emu.hbm_read(dst_pa, &mut landed).unwrap();
        assert!(landed == data, "{arch}: the in-flight copy completed with its own source");
        assert!(dst_weak.upgrade().is_none(), "{arch}: the wait released the chunk");
        assert_eq!(dev.alloc_device(size, 0).unwrap().pa(), dst_pa, "{arch}: and its range is free again");
    }
}

#[test]
fn a_refused_async_call_leaves_every_slot_accounted_for() {
    // async(None), async(h1), async(None), async(ASYNC1): the last one finds ASYNC2 still in use.
    let tb = adversarial(Arch::V2, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let ws: Vec<Window> = (0..3).map(|i| Window::new(dev, emu, Dir::H2d, 60_000 + 10 * i, 0, i).unwrap()).collect();
    let t = |w: &Window, prev| dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, w.len, 0, prev);
    set_enabled(dev, emu, 0, false);
    let h1 = t(&ws[0], CtxHandle::None).unwrap();
    set_enabled(dev, emu, 0, true);
    let h2 = t(&ws[1], h1).unwrap();
    set_enabled(dev, emu, 0, false);
    assert_eq!(h2, CtxHandle::Async2);
    let h3 = t(&ws[2], CtxHandle::None).unwrap();
    assert_eq!(h3, CtxHandle::Async1);
    let (used, accounted) = dev.ring_slot_accounting(0).unwrap();
    assert_eq!((used, accounted), (4, 4), "two 2-pair batches in flight");
    let before = dev.ring_stats(0).unwrap();
    assert_eq!(t(&ws[0], CtxHandle::Async1), Err(NdmaError::ContextInUse(2)));
    assert_eq!(NdmaError::ContextInUse(2).errno(), -16);
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (4, 4), "the refusal neither freed nor leaked a slot");
    assert_eq!(dev.ring_stats(0).unwrap(), before, "nothing staged, nothing waited");
    set_enabled(dev, emu, 0, true);
    // Both copies are still in flight and can be waited for, in any order.
    dev.wait_handle(0, CtxHandle::Async1).unwrap();
    dev.wait_handle(0, CtxHandle::Async2).unwrap();
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
    for (i, w) in ws.iter().enumerate() {
        w.verify(&format!("copy {i}"), true).unwrap();
    }
}

/// A failure re-initialises the ring; the other copies in flight on it are re-staged, not lost: a failure
/// costs only the transfer that reports it.
#[test]
fn a_failure_on_the_ring_restages_the_other_copy_in_flight_and_loses_nothing() {
    let tb = testbed(Arch::V3, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let a = Window::new(dev, emu, Dir::H2d, 10_000, 0, 1).unwrap();
    let b = Window::new(dev, emu, Dir::D2h, 20_000, 0, 2).unwrap();
    // A's copy takes the (one-shot) hang; a synchronous copy staged behind it on the same ring times out.
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let h = dev.start(&a.transfer()).unwrap();
    assert!(!h.is_complete());
    assert!(matches!(b.copy_all(), Err(NdmaError::Timeout { .. })));
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.timeouts, s.ring_resets, s.replays, s.aborts), (1, 1, 1, 0), "{s:?}");
    // The recovery re-staged A on the clean ring, where it ran; B's bytes never moved.
    assert!(h.is_complete());
    h.wait().unwrap();
    a.verify("the copy re-staged by the recovery", true).unwrap();
    let untouched = read_vec(emu, &b.dst, 0, b.total()).unwrap();
    assert!(untouched.iter().all(|&x| x == DST_FILL), "the failed copy landed nothing");
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
    assert_eq!(dev.ring_stats(0).unwrap().transfers, 1);
    // The ring works: the failed copy again.
    b.copy_all().unwrap();
    b.verify("the copy after the recovery", true).unwrap();
}

/// Dropping the handle of a copy that hangs waits it out: the drop returns after the timeout (logged, nobody
/// to return it to), the ring is re-initialised, the context is free and no longer holds the copy's memory,
/// nothing landed, and the ring works.
#[test]
fn dropping_a_hung_copy_in_flight_times_it_out_and_leaves_the_ring_usable() {
    let tb = testbed(Arch::V3, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let a = Window::new(dev, emu, Dir::D2h, 70_000, 0, 4).unwrap();
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let h = dev.start(&a.transfer()).unwrap();
    assert_eq!((Arc::strong_count(&a.src), Arc::strong_count(&a.dst)), (2, 2), "the context holds both chunks");
    drop(h);
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.timeouts, s.ring_resets, s.replays, s.aborts, s.transfers), (1, 1, 0, 0, 0), "{s:?}");
    assert_eq!(dev.wait_handle(0, CtxHandle::Async1), Err(NdmaError::ContextNotInUse(1)), "released");
    assert_eq!((Arc::strong_count(&a.src), Arc::strong_count(&a.dst)), (1, 1), "and let go of the memory");
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
    let untouched = read_vec(emu, &a.dst, 0, a.total()).unwrap();
    assert!(untouched.iter().all(|&x| x == DST_FILL), "the hung copy landed nothing");
    a.copy_all().unwrap();
    a.verify("the same copy after the recovery", true).unwrap();
}

/// An 8 KiB copy from offset 0 to offset 4096 of one three-page host chunk holding pattern `seed`: a copy
/// over its own source, whose bytes tell whether it ran not at all or exactly once (a second run reads bytes
/// the first overwrote).
struct SelfCopy {
    chunk: Arc<ndma::MemChunk>,
    seed: u64,
}

impl SelfCopy {
    const LEN: u64 = 3 * 4096;

    fn new(dev: &ndma::NeuronDevice, emu: &EmuDevice, seed: u64) -> SelfCopy {
        let chunk = alloc(dev, true, Self::LEN, 0).unwrap();
        write_pattern(emu, &chunk, 0, Self::LEN, seed).unwrap();
        SelfCopy { chunk, seed }
    }

    fn start(&self, dev: &ndma::NeuronDevice) -> CtxHandle {
        dev.memcpy_mc_async(&self.chunk, &self.chunk, 0, 4096, 8192, 0, CtxHandle::None).unwrap()
    }

    /// The chunk holds its pattern untouched (`ran` false) or what exactly one run leaves.
    fn assert_ran(&self, emu: &EmuDevice, ran: bool, what: &str) {
        let orig = pattern(self.seed, 0, Self::LEN as usize);
        let want: Vec<u8> = if ran { orig[..4096].iter().chain(&orig[..8192]).copied().collect() } else { orig };
        assert!(read_vec(emu, &self.chunk, 0, Self::LEN).unwrap() == want, "{what}");
    }
}

/// A copy that reads what it writes cannot run twice: when a failure re-initialises its ring while it is in
/// flight, it is aborted (its wait reports `-EIO` at once) instead of re-staged.
#[test]
fn a_copy_over_its_own_source_in_flight_is_aborted_not_restaged() {
    let tb = testbed(Arch::V3, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let copy = SelfCopy::new(dev, emu, 21);
    let b = Window::new(dev, emu, Dir::D2h, 20_000, 0, 2).unwrap();
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let h = copy.start(dev);
    assert!(matches!(b.copy_all(), Err(NdmaError::Timeout { .. })));
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.timeouts, s.replays), (1, 0), "{s:?}");
    // Its marker never lands, so a poller must be told it is over (its wait then reports the abort).
    assert_eq!(dev.is_complete(0, h), Ok(true), "an aborted copy is over");
    assert_eq!(dev.wait_handle(0, h), Err(NdmaError::Aborted(h.raw())));
    assert_eq!(dev.ring_stats(0).unwrap().aborts, 1);
    copy.assert_ran(emu, false, "the hung copy moved nothing");
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
    b.copy_all().unwrap();
    b.verify("the copy after the recovery", true).unwrap();
}

/// Chaining a copy onto one a recovery aborted reports the abort and stages nothing: the next copy does not
/// run behind one that did not happen, both contexts are free, and the ring works.
#[test]
fn chaining_onto_an_aborted_copy_reports_the_abort_and_stages_nothing() {
    let tb = testbed(Arch::V3, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let copy = SelfCopy::new(dev, emu, 24);
    let b = Window::new(dev, emu, Dir::D2h, 20_000, 0, 2).unwrap();
    let next = Window::new(dev, emu, Dir::H2d, 30_000, 0, 7).unwrap();
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let h = copy.start(dev);
    assert!(matches!(b.copy_all(), Err(NdmaError::Timeout { .. })));
    let before = dev.ring_stats(0).unwrap();
    let r = dev.memcpy_mc_async(&next.src, &next.dst, GUARD, GUARD, next.len, 0, h);
    assert_eq!(r, Err(NdmaError::Aborted(h.raw())));
    let s = dev.ring_stats(0).unwrap().since(&before);
    assert_eq!((s.aborts, s.descriptors, s.doorbells), (1, 0, 0), "{s:?}");
    for ctx in [CtxHandle::Async1, CtxHandle::Async2] {
        assert_eq!(dev.wait_handle(0, ctx), Err(NdmaError::ContextNotInUse(ctx.raw())));
    }
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
    copy.assert_ran(emu, false, "the aborted copy moved nothing");
    assert!(read_vec(emu, &next.dst, 0, next.total()).unwrap().iter().all(|&x| x == DST_FILL), "nor did the next");
    next.copy_all().unwrap();
    next.verify("the next copy, issued again on its own", true).unwrap();
}

/// A copy whose batch was already over (marker landed, not yet waited for) when a failure re-initialises the
/// ring is done: it is neither run again nor aborted. A copy over its own source shows it ran exactly once.
#[test]
fn a_copy_already_over_when_its_ring_is_reinitialised_is_done_not_run_again() {
    let tb = testbed(Arch::V3, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let copy = SelfCopy::new(dev, emu, 22);
    let b = Window::new(dev, emu, Dir::H2d, 20_000, 0, 3).unwrap();
    // Inline engines: the copy runs at its doorbell; then a synchronous copy hangs and times out.
    let h = copy.start(dev);
    assert!(dev.is_complete(0, h).unwrap());
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    assert!(matches!(b.copy_all(), Err(NdmaError::Timeout { .. })));
    dev.wait_handle(0, h).unwrap();
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.timeouts, s.replays, s.aborts, s.transfers), (1, 0, 0, 1), "{s:?}");
    copy.assert_ran(emu, true, "the copy ran exactly once");
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
}

#[test]
fn v2_replay_restages_every_batch_in_flight_in_staging_order() {
    let tb = testbed(Arch::V2, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let (dev, emu) = tb.device(0);
    let a = Window::new(dev, emu, Dir::H2d, 70_000, 0, 4).unwrap();
    let s = Window::new(dev, emu, Dir::D2h, 90_000, 0, 5).unwrap();
    // Both doorbells ring inside the reset: the queue hangs; the sync copy's wait times out inside the window
    // and the ring is re-initialised. The async copy staged before it must be replayed too, first.
    assert!(emu.reset_nc(0, 10));
    let h = dev.start(&a.transfer()).unwrap();
    s.copy_all().unwrap();
    let st = dev.ring_stats(0).unwrap();
    assert_eq!((st.retries, st.replays), (1, 2), "{st:?}");
    h.wait().unwrap();
    a.verify("the async copy replayed before the sync one", true).unwrap();
    s.verify("the sync copy", true).unwrap();
    assert_eq!(dev.ring_stats(0).unwrap().transfers, 2);
}

/// The V2 retry replays what was in flight, except a batch of another copy whose marker had landed: that one
/// is done (the driver replays it, and a copy over its own source then reads bytes it already overwrote).
#[test]
fn v2_replay_leaves_a_copy_already_over_as_it_is() {
    let tb = testbed(Arch::V2, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let (dev, emu) = tb.device(0);
    let copy = SelfCopy::new(dev, emu, 23);
    let s = Window::new(dev, emu, Dir::D2h, 90_000, 0, 5).unwrap();
    // The copy over its own source runs at its doorbell (inline engines), before NC 0's reset begins.
    let h = copy.start(dev);
    assert!(dev.is_complete(0, h).unwrap());
    assert!(emu.reset_nc(0, 10));
    s.copy_all().unwrap();
    let st = dev.ring_stats(0).unwrap();
    assert_eq!((st.retries, st.replays), (1, 1), "only the hung copy is replayed: {st:?}");
    dev.wait_handle(0, h).unwrap();
    s.verify("the sync copy replayed inside the reset window", true).unwrap();
    copy.assert_ran(emu, true, "the copy ran exactly once");
    assert_eq!(dev.ring_stats(0).unwrap().transfers, 2);
}

/// A copy over its own source that timed out inside a V2 reset window is not replayed: its data may have
/// landed already (here it did, only its marker write was lost), and a second run would read bytes the first
/// overwrote. It reports the timeout; the bytes are those of one run, not two.
#[test]
fn v2_retry_does_not_replay_a_timed_out_copy_over_its_own_source() {
    let tb = testbed(Arch::V2, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let copy = SelfCopy::new(dev, emu, 31);
    // The copy runs at its doorbell (inline engine); its marker write is lost.
    emu.fault_plan().add(PlannedFault::DropFinalWrite { engine: eng, qid });
    let h = copy.start(dev);
    copy.assert_ran(emu, true, "the data of the first run landed");
    // A reset of NC 0 begins before the copy is waited for: its timeout falls inside the reset window.
    assert!(emu.reset_nc(0, 10));
    assert!(matches!(dev.wait_handle(0, h), Err(NdmaError::Timeout { .. })));
    let st = dev.ring_stats(0).unwrap();
    assert_eq!((st.timeouts, st.retries, st.replays), (1, 0, 0), "{st:?}");
    copy.assert_ran(emu, true, "the copy ran once");
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
    let s = Window::new(dev, emu, Dir::H2d, 20_000, 0, 6).unwrap();
    s.copy_all().unwrap();
    s.verify("a copy after the timeout", true).unwrap();
}

/// Nor is another copy over its own source in flight when a synchronous copy hangs in the window and the
/// ring is replayed: it is aborted, as a failure's re-initialisation aborts it, and runs no second time.
#[test]
fn v2_replay_aborts_another_copy_over_its_own_source_in_flight() {
    let tb = testbed(Arch::V2, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let copy = SelfCopy::new(dev, emu, 32);
    let s = Window::new(dev, emu, Dir::D2h, 90_000, 0, 5).unwrap();
    emu.fault_plan().add(PlannedFault::DropFinalWrite { engine: eng, qid });
    let h = copy.start(dev);
    copy.assert_ran(emu, true, "the data of the first run landed");
    // The sync copy's doorbell rings inside a reset: it hangs, times out in the window, the ring is replayed.
    assert!(emu.reset_nc(0, 10));
    s.copy_all().unwrap();
    s.verify("the sync copy replayed inside the reset window", true).unwrap();
    let st = dev.ring_stats(0).unwrap();
    assert_eq!((st.retries, st.replays), (1, 1), "only the sync copy is replayed: {st:?}");
    assert_eq!(dev.wait_handle(0, h), Err(NdmaError::Aborted(h.raw())));
    copy.assert_ran(emu, true, "the copy over its own source ran once");
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
}

#[test]
fn in_flight_handles_chain_drain_on_drop_and_answer_without_blocking() {
    let tb = adversarial(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let ws: Vec<Window> =
        (0..4).map(|i| Window::new(dev, emu, Dir::H2d, 5000 + i, (i % 2) as u32, i).unwrap()).collect();
    set_enabled(dev, emu, 0, false);
    let h = dev.start(&ws[0].transfer()).unwrap();
    assert_eq!((h.nc(), h.handle()), (0, CtxHandle::Async1));
    assert!(!h.is_complete(), "paused: the marker has not landed");
    set_enabled(dev, emu, 0, true);
    assert!(h.is_complete(), "the inline engine ran on the resume");
    assert_eq!(dev.ring_stats(0).unwrap().transfers, 0, "a query acks nothing");
    // Same ring: staged on ASYNC2, waits ASYNC1. Other ring: drains, then starts there.
    let h = h.then(&ws[2].transfer()).unwrap();
    assert_eq!((h.nc(), h.handle()), (0, CtxHandle::Async2));
    let h = h.then(&ws[1].transfer()).unwrap();
    assert_eq!((h.nc(), h.handle()), (1, CtxHandle::Async1));
    // A refusal before staging waits the copy in flight and reports the refusal.
    let bad = Transfer::new(&ws[3].src, &ws[3].dst, 1 << 40);
    assert!(matches!(h.then(&bad), Err(NdmaError::OutOfRange { what: "source chunk", .. })));
    assert_eq!(dev.ring_slot_accounting(1).unwrap(), (0, 0));
    {
        let _dropped = dev.start(&ws[3].transfer()).unwrap();
    }
    assert_eq!(dev.wait_handle(1, CtxHandle::Async1), Err(NdmaError::ContextNotInUse(1)), "drop waited");
    for (i, w) in ws.iter().enumerate() {
        w.verify(&format!("copy {i}"), true).unwrap();
    }
    // A second chain on a ring whose chain is in flight is refused; the first is untouched.
    let first = dev.start(&ws[0].transfer()).unwrap();
    assert!(matches!(dev.start(&ws[2].transfer()), Err(NdmaError::ContextInUse(1))));
    first.wait().unwrap();
    let mut p = AsyncPipeline::new(dev);
    assert!(p.is_idle());
    set_enabled(dev, emu, 0, false);
    p.submit(&ws[0].transfer()).unwrap();
    assert!(!p.is_idle(), "paused: the pipeline's copy is in flight");
    set_enabled(dev, emu, 0, true);
    assert!(p.is_idle(), "the inline engine ran on the resume");
    p.finish().unwrap();
    ws[0].verify("the pipeline's copy", true).unwrap();
}

#[test]
fn memset_of_a_host_chunk_runs_both_steps_on_the_chunks_nc() {
    let tb = adversarial(Arch::V3, ExecPolicy::Inline);
    let (dev, _) = tb.device(0);
    let mc = dev.alloc_host(300_000, 5).unwrap();
    mc.fill(0, 300_000, 0xEE).unwrap();
    dev.memset(&mc, 100, 0x5a, 200_000).unwrap();
    let mut got = vec![0u8; 300_000];
    mc.read(0, &mut got).unwrap();
    assert!(got[..100].iter().all(|&b| b == 0xEE) && got[200_100..].iter().all(|&b| b == 0xEE));
    assert!(got[100..200_100].iter().all(|&b| b == 0x5a));
    assert_eq!(dev.ring_stats(5).unwrap().transfers, 2, "fill and replicate on NC 5");
    assert_eq!(dev.ring_stats(0).unwrap().transfers, 0, "nothing on NC 0");
}

#[test]
fn the_sync_handle_keeps_its_prefetch() {
    let tb = adversarial(Arch::V2, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let w = Window::new(dev, emu, Dir::D2h, 200_000, 0, 9).unwrap();
    let h = dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, w.len, 0x7f00_0000, CtxHandle::Sync).unwrap();
    assert_eq!(h, CtxHandle::Sync);
    assert_eq!(tb.platform.prefetches(), vec![(0x7f00_0000, 200_000)]);
    w.verify("sync copy through the async entry", true).unwrap();
    dev.copy(&w.transfer().prefetch(0x7f00_1000)).unwrap();
    assert_eq!(tb.platform.prefetches().len(), 2);
}

#[test]
fn dropping_the_device_quiesces_its_rings() {
    let tb = adversarial(Arch::V2, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let w = Window::new(dev, emu, Dir::H2d, 100_000, 0, 3).unwrap();
    set_enabled(dev, emu, 0, false);
    let h = dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, w.len, 0, CtxHandle::None).unwrap();
    assert_eq!(h, CtxHandle::Async1);
    assert_eq!(pending(dev, emu, 0), 3);
    let emu = Arc::clone(emu);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    drop(w);
    let ndma_emu::Testbed { system, platform, emu: sys } = tb;
    drop(system);
    assert_eq!(emu.pending(eng, qid, Direction::Rx), 0, "nothing left for the engine in freed ring memory");
    assert_eq!(emu.pending(eng, qid, Direction::Tx), 0);
    drop((platform, sys));
}

#[test]
fn a_device_of_another_generation_is_refused() {
    let ndma_emu::Testbed { system, platform, emu } = adversarial(Arch::V2, ExecPolicy::Inline);
    drop(system);
    let hw = ndma_emu::device_hw(emu.device(0)).unwrap();
    let err = ndma::System::new(Arch::V3, platform, vec![hw]).unwrap_err();
    assert_eq!(err, NdmaError::ArchMismatch { device: 0, declared: Arch::V3, found: Arch::V2 });
    assert_eq!(err.errno(), -19);
    assert!(!emu.device(0).is_claimed(), "a refused bring-up lets the device go");
}

/// A host chunk's device address means something only on the platform that allocated it: a host chunk of
/// another system (another platform — here another model), or its memory handed over as a buffer, is refused
/// by every entry point with `-EINVAL`, and nothing moves. Its PA is, on this platform, the address of some
/// unrelated chunk.
#[test]
fn a_host_chunk_of_another_system_is_refused_and_nothing_moves() {
    let ours = adversarial(Arch::V3, ExecPolicy::Inline);
    let other = adversarial(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = ours.device(0);
    let size = 4096;
    let foreign = other.system.devices()[0].alloc_host(size, 0).unwrap();
    let victim = dev.alloc_host(size, 0).unwrap();
    assert_eq!(foreign.pa(), victim.pa(), "both platforms handed out the same address");
    foreign.fill(0, size, 0x11).unwrap();
    victim.fill(0, size, 0x22).unwrap();
    let hbm = dev.alloc_device(size, 0).unwrap();
    fill_chunk(emu, &hbm, 0, size, 0x33).unwrap();
    let refused = |what| NdmaError::ForeignChunk { what };
    assert_eq!(dev.memcpy_mc(&hbm, &foreign, 0, 0, size), Err(refused("destination chunk")));
    assert_eq!(dev.memcpy_mc(&foreign, &hbm, 0, 0, size), Err(refused("source chunk")));
    assert_eq!(dev.memcpy_mc(&foreign, &victim, 0, 0, size), Err(refused("source chunk")));
    assert_eq!(dev.memcpy_mc_async(&hbm, &foreign, 0, 0, size, 0, CtxHandle::None), Err(refused("destination chunk")));
    assert_eq!(dev.copy(&Transfer::new(&foreign, &hbm, size)), Err(refused("source chunk")));
    assert_eq!(dev.memset(&foreign, 0, 0x44, size), Err(refused("memset window")));
    // The same memory as a buffer: the platform does not reach it at the buffer's address.
    let buf = foreign.host_buf().unwrap();
    assert_eq!(dev.memcpy_buf_from_mc(&**buf, 0, &hbm, 0, size), Err(refused("destination buffer")));
    assert_eq!(dev.memcpy_buf_to_mc(&**buf, 0, &hbm, 0, size), Err(refused("source buffer")));
    // A pool made apart from the system is a domain of its own too.
    let apart = ndma::memory::MemPool::new(0, 0, Arch::V3.pci_host_base()).unwrap();
    let loose = apart.alloc_host(&**dev.platform(), size, 0).unwrap();
    assert_eq!(dev.memcpy_mc(&hbm, &loose, 0, 0, size), Err(refused("destination chunk")));
    let bytes = |c: &ndma::MemChunk| {
        let mut out = vec![0u8; size as usize];
        c.read(0, &mut out).unwrap();
        out
    };
    assert!(bytes(&victim).iter().all(|&b| b == 0x22), "this system's chunk at the same address untouched");
    assert!(bytes(&foreign).iter().all(|&b| b == 0x11));
    assert!(read_vec(emu, &hbm, 0, size).unwrap().iter().all(|&b| b == 0x33));
    assert_eq!(dev.ring_stats(0).unwrap().submitted, 0, "nothing staged");
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
}

/// A device whose HBM range ends past the 64-bit address space is refused at bring-up with a typed error (the
/// pool's allocator would overflow on the first device allocation), and lets the device go.
#[test]
fn a_device_whose_hbm_range_overflows_is_refused() {
    let ndma_emu::Testbed { system, platform, emu } = adversarial(Arch::V3, ExecPolicy::Inline);
    drop(system);
    let mut hw = ndma_emu::device_hw(emu.device(0)).unwrap();
    (hw.hbm_base, hw.hbm_size) = (u64::MAX - 0xff, 0x1000);
    let err = ndma::System::new(Arch::V3, platform.clone(), vec![hw]).unwrap_err();
    let want = NdmaError::OutOfRange { what: "HBM range", offset: u64::MAX - 0xff, size: 0x1000, limit: u64::MAX };
    assert_eq!((err.clone(), err.errno()), (want, -22));
    assert!(!emu.device(0).is_claimed(), "a refused bring-up lets the device go");
    let system = ndma::System::new(Arch::V3, platform, vec![ndma_emu::device_hw(emu.device(0)).unwrap()]).unwrap();
    let dev = &system.devices()[0];
    let w = Window::new(dev, emu.device(0), Dir::H2d, 5000, 0, 9).unwrap();
    w.copy_all().unwrap();
    w.verify("a copy after the refused bring-up", true).unwrap();
}

/// A device is bound to one op layer at a time, as the PCI core binds it to one driver: a second op layer
/// would program the same queues with rings of its own, and the first one's copies would hang. Once the
/// first op layer is gone the device can be bound again, and works.
#[test]
fn a_device_is_bound_to_one_op_layer_at_a_time() {
    let tb = adversarial(Arch::V2, ExecPolicy::Inline);
    let second = ndma_emu::device_hw(tb.emu.device(0)).err().expect("the testbed's op layer holds device 0");
    assert!(matches!(second, ndma_emu::EmuError::DeviceClaimed { device: 0 }), "{second}");
    assert_eq!(second.errno(), -16);
    let (dev, emu) = tb.device(0);
    let w = Window::new(dev, emu, Dir::H2d, 70_000, 1, 7).unwrap();
    w.copy_all().unwrap();
    w.verify("the first op layer's copy", true).unwrap();
    drop(w);
    let ndma_emu::Testbed { system, platform, emu: model } = tb;
    assert!(model.device(0).is_claimed());
    drop(system);
    assert!(!model.device(0).is_claimed(), "the op layer's teardown unbinds the device");
    let hw = ndma_emu::device_hw(model.device(0)).unwrap();
    let again = ndma::System::new(Arch::V2, platform, vec![hw]).unwrap();
    let w = Window::new(&again.devices()[0], model.device(0), Dir::D2h, 70_000, 1, 8).unwrap();
    w.copy_all().unwrap();
    w.verify("the second op layer's copy", true).unwrap();
}

/// A device chunk belongs to its device: its PA names that device's HBM, so on another device it would name
/// whatever chunk holds the same address there. Every DMA entry point that takes a chunk refuses one from
/// another device's pool (`-EINVAL`) before anything moves; host chunks, the same memory for every device,
/// are accepted from any.
#[test]
fn a_device_chunk_of_another_device_is_refused_and_nothing_moves() {
    let mut cfg = testbed_config(Arch::V2, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Real);
    cfg.instance = ndma::Instance { name: "trn1-2dev", arch: Arch::V2, devices: 2 };
    cfg.hbm_size = Some(1 << 30);
    let tb = bounded(cfg);
    let (d0, e0) = tb.device(0);
    let (d1, e1) = tb.device(1);
    let size = 8192;
    let ours = alloc(d0, false, size, 0).unwrap();
    let theirs = alloc(d1, false, size, 0).unwrap();
    assert_eq!(ours.pa(), theirs.pa(), "the same HBM address on both devices");
    let host0 = alloc(d0, true, size, 0).unwrap();
    let host1 = alloc(d1, true, size, 0).unwrap();
    fill_chunk(e0, &ours, 0, size, 0x11).unwrap();
    fill_chunk(e1, &theirs, 0, size, 0x22).unwrap();
    fill_chunk(e0, &host0, 0, size, 0x33).unwrap();
    let foreign = |what| NdmaError::ForeignChunk { what };
    assert_eq!(d0.memcpy_mc(&host0, &theirs, 0, 0, size), Err(foreign("destination chunk")));
    assert_eq!(d0.memcpy_mc(&theirs, &host0, 0, 0, size), Err(foreign("source chunk")));
    assert_eq!(foreign("x").errno(), -22);
    assert_eq!(d0.memcpy_mc_async(&host0, &theirs, 0, 0, size, 0, CtxHandle::None), Err(foreign("destination chunk")));
    assert_eq!(d0.copy(&Transfer::new(&theirs, &host0, size)), Err(foreign("source chunk")));
    assert_eq!(d0.memset(&theirs, 0, 0x44, size), Err(foreign("memset window")));
    let buf = d0.platform().alloc_coherent(size as usize).unwrap();
    assert_eq!(d0.memcpy_buf_to_mc(&*buf, 0, &theirs, 0, size), Err(foreign("destination chunk")));
    assert_eq!(d0.memcpy_buf_from_mc(&*buf, 0, &theirs, 0, size), Err(foreign("source chunk")));
    assert!(read_vec(e0, &ours, 0, size).unwrap().iter().all(|&b| b == 0x11), "device 0's own chunk untouched");
    assert!(read_vec(e1, &theirs, 0, size).unwrap().iter().all(|&b| b == 0x22), "device 1's chunk untouched");
    assert!(read_vec(e0, &host0, 0, size).unwrap().iter().all(|&b| b == 0x33));
    // A host chunk of device 1 is host memory device 0 reaches as well.
    d0.memcpy_mc(&host1, &ours, 0, 0, size).unwrap();
    d0.memcpy_mc(&ours, &host1, 0, 0, 4).unwrap();
    let (used, accounted) = d0.ring_slot_accounting(0).unwrap();
    assert_eq!((used, accounted), (0, 0));
}
