//! The op layer against every engine fault the device model can inject (`ndma_emu::PlannedFault`), end to end
//! through the public copy calls, sync and async: a dropped final write (a lost completion marker), a
//! corrupted descriptor, a per-descriptor delay and a bandwidth limit. Each case checks the exact typed error
//! (or the success), the exact bytes before, inside and after both windows, and that the device copies
//! correctly afterwards.
//!
//! Inline engines on the fake clock: the engine runs inside the doorbell, so which descriptors executed is
//! exact, and the poll budget of a timeout is virtual time, so timeouts are exact and instant. The model's
//! delays and throttling are real waits, kept to a few milliseconds; tests assert on the engine's accounted
//! counters (`delayed_us`, `throttled_ns`), never on wall time.

use std::collections::BTreeSet;

use ndma::{CtxHandle, NdmaError, NeuronDevice, Platform, MAX_BATCH_BYTES};
use ndma_emu::test_utils::*;
use ndma_emu::{
    ClockKind, CorruptField, CorruptOutcome, EmuDevice, ExecPolicy, FaultKind, OrderingMode, PlannedFault, Testbed,
};
use udma::{Arch, Direction};

/// Bytes one data descriptor moves at most.
const DESC: u64 = 65536;
/// Four data descriptors (the last one 100 bytes) and the marker.
const SMALL: u64 = 3 * DESC + 100;

fn fake(arch: Arch) -> Testbed {
    testbed(arch, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake)
}

/// NC 0's H2T queue.
fn queue(dev: &NeuronDevice) -> (u32, u32) {
    dev.h2t_queue(0).unwrap()
}

/// The error of a wait on a batch of `count` descriptors whose marker never comes, and the virtual µs the
/// wait takes: the first wait, then one poll per µs until the loop budget is exceeded.
fn timeout(dev: &NeuronDevice, count: u32, is_async: bool, dir: Dir) -> (NdmaError, u64) {
    let is_d2d = !dir.src_host() && !dir.dst_host();
    let (first_wait, loops) = ndma::poll_plan(dev.dhal(), false, count, is_async, is_d2d);
    let (eng, qid) = queue(dev);
    (NdmaError::Timeout { eng, qid, count, polls: loops + 1, state: ndma::RingSnapshot::NONE }, first_wait + loops + 1)
}

/// Source untouched; the destination holds the first `landed` bytes of the source window and `DST_FILL`
/// everywhere else (guards included).
fn verify_prefix(emu: &EmuDevice, w: &Window, landed: u64, what: &str) {
    let (total, src_bytes) = (w.total(), w.source_bytes());
    assert!(read_vec(emu, &w.src, 0, total).unwrap() == src_bytes, "{what}: source changed");
    let dst = read_vec(emu, &w.dst, 0, total).unwrap();
    let (g, l) = (GUARD as usize, landed as usize);
    if let Some(i) = (0..l).find(|&i| dst[g + i] != src_bytes[g + i]) {
        panic!("{what}: byte {i} of the {l} that should have landed is wrong");
    }
    assert!(dst[..g].iter().all(|&b| b == DST_FILL), "{what}: bytes before the destination window changed");
    if let Some(i) = (g + l..dst.len()).find(|&i| dst[i] != DST_FILL) {
        panic!("{what}: byte at window offset {} written, only {l} bytes should have landed", i as i64 - g as i64);
    }
}

/// The ring holds no slot that its contexts do not account for, and the queue is neither halted nor hung.
fn ring_is_clean(dev: &NeuronDevice, emu: &EmuDevice, what: &str) {
    let (used, accounted) = dev.ring_slot_accounting(0).unwrap();
    assert_eq!(used, accounted, "{what}: ring slots in use vs accounted");
    let (eng, qid) = queue(dev);
    assert!(!emu.is_halted(eng, qid) && !emu.is_hung(eng, qid), "{what}: queue left stopped");
}

/// The device still copies correctly: a fresh sync copy in `dir`, byte-exact, seen on the first poll.
fn copies_after(dev: &NeuronDevice, emu: &EmuDevice, dir: Dir, what: &str) {
    let polls = dev.ring_stats(0).unwrap().polls;
    let w = Window::new(dev, emu, dir, 2 * DESC + 3, 0, 0xAF7E).unwrap();
    w.copy_all().unwrap_or_else(|e| panic!("{what}: copy after the fault: {e}"));
    w.verify(&format!("{what}: copy after the fault"), true).unwrap();
    assert_eq!(dev.ring_stats(0).unwrap().polls - polls, 1, "{what}: the marker of the next copy is seen at once");
}

// ---------------------------------------------------------------------------------------------------------
// DropFinalWrite: the marker's write is lost, the queue keeps running.
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_lost_marker_times_out_with_every_data_byte_landed_and_the_ring_recovers() {
    for arch in Arch::ALL {
        let tb = fake(arch);
        let (dev, emu) = tb.device(0);
        let (eng, qid) = queue(dev);
        for (i, dir) in Dir::ALL.into_iter().enumerate() {
            let what = format!("{arch} {dir:?}");
            let w = Window::new(dev, emu, dir, SMALL, 0, i as u64).unwrap();
            let before = dev.ring_stats(0).unwrap();
            emu.fault_plan().add(PlannedFault::DropFinalWrite { engine: eng, qid });
            let t0 = tb.platform.now_us();
            let err = w.copy_all().unwrap_err();
            let (expected, waited) = timeout(dev, 5, false, dir);
            assert_eq!(err, expected, "{what}");
            assert_eq!(err.errno(), -110);
            assert_eq!(tb.platform.now_us() - t0, waited, "{what}: virtual time of the wait");
            // The marker is the batch's final write: every data descriptor before it landed.
            w.verify(&what, true).unwrap();
            assert!(emu.fault_plan().entries().is_empty(), "{what}: the drop fired");
            assert!(emu.faults().is_empty(), "{what}: a lost write is not an engine fault");
            let d = dev.ring_stats(0).unwrap().since(&before);
            assert_eq!((d.timeouts, d.ring_resets, d.transfers, d.bytes), (1, 1, 0, 0), "{what}: {d:?}");
            ring_is_clean(dev, emu, &what);
            copies_after(dev, emu, dir, &what);
        }
    }
}

#[test]
fn a_lost_marker_in_a_multi_batch_copy_fails_its_batch_and_stages_no_more() {
    // V2: the smaller budget for a full batch (80 M virtual polls against V3's 162 M).
    let tb = fake(Arch::V2);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = queue(dev);
    let w = Window::new(dev, emu, Dir::H2d, MAX_BATCH_BYTES + DESC + 1, 0, 1).unwrap();
    emu.fault_plan().add(PlannedFault::DropFinalWrite { engine: eng, qid });
    let err = w.copy_all().unwrap_err();
    // The first batch (2031 data descriptors + marker) lost its marker; the second was never staged.
    assert_eq!(err, timeout(dev, ndma::SYNC_THRESHOLD + 1, false, Dir::H2d).0);
    verify_prefix(emu, &w, MAX_BATCH_BYTES, "first batch landed, second never staged");
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.batches, s.bytes, s.transfers, s.timeouts), (1, 0, 0, 1), "{s:?}");
    ring_is_clean(dev, emu, "after the multi-batch timeout");
    w.copy_all().unwrap();
    w.verify("the same multi-batch copy again", true).unwrap();
}

#[test]
fn a_lost_marker_fails_the_async_wait_that_needs_it() {
    for arch in Arch::ALL {
        let tb = fake(arch);
        let (dev, emu) = tb.device(0);
        let (eng, qid) = queue(dev);

        // Alone: the submit returns at once; `memcpy_mc_wait` waits for its own context, so with the sync
        // budget (the driver's `_ndma_memcpy_wait_for_completion(ctx, ctx)`: async only for a previous context).
        let a = Window::new(dev, emu, Dir::H2d, SMALL, 0, 1).unwrap();
        emu.fault_plan().add(PlannedFault::DropFinalWrite { engine: eng, qid });
        let h = dev.memcpy_mc_async(&a.src, &a.dst, GUARD, GUARD, a.len, 0, CtxHandle::None).unwrap();
        assert_eq!(h, CtxHandle::Async1);
        assert_eq!(dev.memcpy_mc_wait(&a.src, &a.dst, h), Err(timeout(dev, 5, false, Dir::H2d).0), "{arch}");
        a.verify("async copy whose marker was lost", true).unwrap();
        assert_eq!(dev.memcpy_mc_wait(&a.src, &a.dst, h), Err(NdmaError::ContextNotInUse(1)), "released");
        ring_is_clean(dev, emu, "after the async timeout");

        // Second in a chain: the drop is armed by the second copy's doorbell, so the first completes (its
        // wait inside the second submit succeeds) and the second's wait times out (sync budget, and a
        // device-to-device copy gets the driver's d2d shortcut there).
        let b = Window::new(dev, emu, Dir::D2h, DESC + 1, 0, 2).unwrap();
        let c = Window::new(dev, emu, Dir::D2d, 10, 0, 3).unwrap();
        let h1 = dev.memcpy_mc_async(&b.src, &b.dst, GUARD, GUARD, b.len, 0, CtxHandle::None).unwrap();
        emu.fault_plan().add(PlannedFault::DropFinalWrite { engine: eng, qid });
        let h2 = dev.memcpy_mc_async(&c.src, &c.dst, GUARD, GUARD, c.len, 0, h1).unwrap();
        b.verify("first of the chain", true).unwrap();
        assert_eq!(dev.memcpy_mc_wait(&c.src, &c.dst, h2), Err(timeout(dev, 2, false, Dir::D2d).0), "{arch}");
        c.verify("second of the chain: data landed, marker lost", true).unwrap();
        let s = dev.ring_stats(0).unwrap();
        assert_eq!((s.submitted, s.transfers, s.timeouts, s.aborts), (3, 1, 2, 0), "{arch}: {s:?}");
        ring_is_clean(dev, emu, "after the chain");
        copies_after(dev, emu, Dir::H2h, &format!("{arch} async"));
    }
}

// ---------------------------------------------------------------------------------------------------------
// Corrupt: one fetched descriptor has a bit flipped; the engine halts the queue on it.
// ---------------------------------------------------------------------------------------------------------

/// Which descriptor of a pair a fetch reads first.
fn desc_of(pair: (udma::Desc, udma::Desc), dir: Direction) -> udma::Desc {
    match dir {
        Direction::Tx => pair.0,
        Direction::Rx => pair.1,
    }
}

/// The engine fault a corruption of `field`/`bit` in `dir`'s descriptor of `pair` must raise.
fn expected_fault(pair: (udma::Desc, udma::Desc), dir: Direction, field: CorruptField, bit: u32) -> FaultKind {
    let d = desc_of(pair, dir);
    let len = d.len_ctrl().len_bytes();
    match field {
        CorruptField::RingId => {
            let phase = d.len_ctrl().ring_id();
            FaultKind::PhaseMismatch { dir, expected: phase, found: phase ^ (1 << (bit - 24)) }
        }
        CorruptField::Length => {
            let flipped = udma::Desc::from_words(d.len_ctrl().into_bits() ^ (1 << bit), d.word1(), d.buf_ptr());
            let bad = flipped.len_ctrl().len_bytes();
            match dir {
                Direction::Tx => FaultKind::LengthMismatch { tx: bad, rx: len },
                Direction::Rx => FaultKind::LengthMismatch { tx: len, rx: bad },
            }
        }
        CorruptField::Address => {
            let addr = d.buf_ptr() ^ (1 << bit);
            FaultKind::BadAddress { addr, len }
        }
    }
}

#[test]
fn a_corrupted_descriptor_halts_the_queue_and_the_copy_times_out_with_the_prefix_landed() {
    let mut fields = BTreeSet::new();
    for arch in Arch::ALL {
        let tb = fake(arch);
        let (dev, emu) = tb.device(0);
        let (eng, qid) = queue(dev);
        for k in 0..12u64 {
            let dir = Dir::ALL[k as usize % 4];
            // Pairs 0..=3 are data, pair 4 the marker.
            let nth = k % 5;
            let what = format!("{arch} {dir:?} corrupt pair {nth}");
            let w = Window::new(dev, emu, dir, SMALL, 0, k).unwrap();
            let first_slot = dev.ring_descriptors(0).unwrap().len() as u32;
            emu.clear_faults();
            emu.fault_plan().add(PlannedFault::Corrupt { engine: eng, qid, nth });
            let err = w.copy_all().unwrap_err();
            assert_eq!(err, timeout(dev, 5, false, dir).0, "{what}");

            let reports = emu.corruptions();
            let r = *reports.last().unwrap();
            assert_eq!(reports.len() as u64, k + 1, "{what}: one corruption per entry");
            assert_eq!((r.engine, r.qid, r.slot), (eng, qid, first_slot + nth as u32), "{what}: {r:?}");
            fields.insert(format!("{:?}", r.field));
            let CorruptOutcome::Fault(kind) = r.outcome else {
                panic!("{what}: the flip went unnoticed: {r:?}");
            };
            let faults = emu.faults();
            assert_eq!(faults.len(), 1, "{what}: {faults:?}");
            let f = faults[0];
            assert_eq!((f.engine, f.qid, f.kind), (eng, qid, kind), "{what}");
            assert_eq!((f.m2s_head, f.s2m_head), (r.slot, r.slot), "{what}: halted on the corrupted pair");

            // Every pair before the corrupted one executed; nothing after it.
            verify_prefix(emu, &w, (nth * DESC).min(SMALL), &what);
            ring_is_clean(dev, emu, &what);

            // The same copy again succeeds. The re-initialised ring stages it from slot 0 with phase 1, as the
            // failed copy was staged (the ring never wraps here), so its pair `nth` is the pair the engine
            // fetched before the flip: the fault must be exactly what that flip makes of it.
            w.copy_all().unwrap();
            w.verify(&format!("{what}: the same copy again"), true).unwrap();
            let pair = dev.ring_descriptors(0).unwrap()[nth as usize];
            assert_eq!(kind, expected_fault(pair, r.dir, r.field, r.bit), "{what}: {r:?}");
            copies_after(dev, emu, dir, &what);
        }
    }
    assert_eq!(fields.len(), 3, "every corruptible field was hit: {fields:?}");
}

#[test]
fn a_corrupted_async_copy_fails_its_wait_and_a_failure_behind_it_restages_it() {
    for arch in Arch::ALL {
        let tb = fake(arch);
        let (dev, emu) = tb.device(0);
        let (eng, qid) = queue(dev);

        // The corrupted copy's own wait (sync budget): the second data pair is corrupted, so one descriptor
        // landed.
        let a = Window::new(dev, emu, Dir::H2d, SMALL, 0, 1).unwrap();
        emu.fault_plan().add(PlannedFault::Corrupt { engine: eng, qid, nth: 1 });
        let h = dev.memcpy_mc_async(&a.src, &a.dst, GUARD, GUARD, a.len, 0, CtxHandle::None).unwrap();
        assert_eq!(dev.memcpy_mc_wait(&a.src, &a.dst, h), Err(timeout(dev, 5, false, Dir::H2d).0), "{arch}");
        verify_prefix(emu, &a, DESC, "async copy halted at its second pair");
        ring_is_clean(dev, emu, "after the async wait");

        // The next submit in the chain waits for the corrupted copy (async budget: a previous context): it
        // reports the timeout, and the copy it staged behind the halted one never ran; both contexts are
        // released.
        let b = Window::new(dev, emu, Dir::D2d, SMALL, 0, 2).unwrap();
        let c = Window::new(dev, emu, Dir::D2h, 5000, 0, 3).unwrap();
        emu.fault_plan().add(PlannedFault::Corrupt { engine: eng, qid, nth: 0 });
        let h1 = dev.memcpy_mc_async(&b.src, &b.dst, GUARD, GUARD, b.len, 0, CtxHandle::None).unwrap();
        let err = dev.memcpy_mc_async(&c.src, &c.dst, GUARD, GUARD, c.len, 0, h1).unwrap_err();
        assert_eq!(err, timeout(dev, 5, true, Dir::D2d).0, "{arch}");
        verify_prefix(emu, &b, 0, "halted on its first pair");
        verify_prefix(emu, &c, 0, "staged behind the halted copy");
        assert_eq!(dev.memcpy_mc_wait(&b.src, &b.dst, h1), Err(NdmaError::ContextNotInUse(1)));
        assert_eq!(dev.memcpy_mc_wait(&c.src, &c.dst, CtxHandle::Async2), Err(NdmaError::ContextNotInUse(2)));
        ring_is_clean(dev, emu, "after the failed chain");

        // A sync copy staged behind a halted async copy times out. The ring re-initialisation that recovers
        // from it re-stages the async copy (its corruption was a one-shot fault of the engine's fetch), which
        // then completes byte-exact: a failure loses only the transfer that reports it.
        let d = Window::new(dev, emu, Dir::H2h, SMALL, 0, 4).unwrap();
        let e = Window::new(dev, emu, Dir::H2d, 100, 0, 5).unwrap();
        emu.fault_plan().add(PlannedFault::Corrupt { engine: eng, qid, nth: 2 });
        let h = dev.memcpy_mc_async(&d.src, &d.dst, GUARD, GUARD, d.len, 0, CtxHandle::None).unwrap();
        assert_eq!(e.copy_all(), Err(timeout(dev, 2, false, Dir::H2d).0), "{arch}");
        dev.memcpy_mc_wait(&d.src, &d.dst, h).unwrap();
        d.verify(&format!("{arch}: the async copy re-staged by the recovery"), true).unwrap();
        verify_prefix(emu, &e, 0, "sync copy behind it");
        let s = dev.ring_stats(0).unwrap();
        assert_eq!((s.timeouts, s.aborts, s.transfers, s.replays), (3, 0, 1, 1), "{arch}: {s:?}");
        ring_is_clean(dev, emu, "after the re-staged copy");
        copies_after(dev, emu, Dir::D2d, &format!("{arch} after corrupt async"));
    }
}

// ---------------------------------------------------------------------------------------------------------
// Delay and Bandwidth: the engine is slow; copies succeed, exactly, and the engine accounts what it waited.
// ---------------------------------------------------------------------------------------------------------

/// The H2T engine of another NC than 0: a fault planned there must not slow NC 0's engine.
fn other_engine(dev: &NeuronDevice) -> u32 {
    let eng = queue(dev).0;
    let other = (1..dev.dhal().arch().ncs_per_device())
        .map(|nc| dev.h2t_queue(nc).unwrap().0)
        .find(|&e| e != eng)
        .expect("an NC on another H2T engine");
    assert_ne!(other, eng);
    other
}

#[test]
fn a_delayed_engine_completes_every_copy_exactly_and_accounts_the_delay() {
    for arch in Arch::ALL {
        let tb = fake(arch);
        let (dev, emu) = tb.device(0);
        let eng = queue(dev).0;
        const PER_DESC_US: u64 = 3;
        emu.fault_plan().add(PlannedFault::Delay { engine: Some(eng), per_desc_us: PER_DESC_US });
        emu.fault_plan().add(PlannedFault::Delay { engine: Some(other_engine(dev)), per_desc_us: 1000 });
        let before = emu.engine_stats(eng).unwrap();
        let ring_before = dev.ring_stats(0).unwrap();

        // Sync, every direction: 4 data descriptors + marker each.
        for (i, dir) in Dir::ALL.into_iter().enumerate() {
            let w = Window::new(dev, emu, dir, SMALL, 0, i as u64).unwrap();
            w.copy_all().unwrap();
            w.verify(&format!("{arch} {dir:?} delayed"), true).unwrap();
        }
        // Async chain: 1 + 2 + 3 data descriptors, a marker each.
        let ws: Vec<Window> =
            (1..=3).map(|n| Window::new(dev, emu, Dir::ALL[n as usize], n * DESC, 0, n).unwrap()).collect();
        let mut prev = CtxHandle::None;
        for w in &ws {
            prev = dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, w.len, 0, prev).unwrap();
        }
        dev.memcpy_mc_wait(&ws[2].src, &ws[2].dst, prev).unwrap();
        for (i, w) in ws.iter().enumerate() {
            w.verify(&format!("{arch} async {i} delayed"), true).unwrap();
        }

        let descs = 4 * 5 + (2 + 3 + 4);
        let e = emu.engine_stats(eng).unwrap().since(&before);
        assert_eq!((e.descriptors, e.delayed_us, e.faults), (descs, descs * PER_DESC_US, 0), "{arch}: {e:?}");
        let r = dev.ring_stats(0).unwrap().since(&ring_before);
        assert_eq!((r.transfers, r.timeouts), (7, 0), "{arch}");

        // The delay ends when the plan is cleared.
        emu.fault_plan().clear();
        copies_after(dev, emu, Dir::H2d, &format!("{arch} delay cleared"));
        let e2 = emu.engine_stats(eng).unwrap().since(&before);
        assert_eq!(e2.delayed_us, descs * PER_DESC_US, "{arch}: no delay once cleared");
        assert!(emu.faults().is_empty());
    }
}

#[test]
fn a_throttled_engine_completes_every_copy_exactly_and_accounts_the_throttle() {
    // 1 GB/s charges exactly 1 ns per byte, however the engine groups descriptors into copies.
    const RATE: u64 = 1_000_000_000;
    for arch in Arch::ALL {
        let tb = fake(arch);
        let (dev, emu) = tb.device(0);
        let eng = queue(dev).0;
        let before = emu.engine_stats(eng).unwrap();

        // This engine only.
        emu.fault_plan().add(PlannedFault::Bandwidth { engine: Some(eng), bytes_per_sec: RATE });
        let sizes = [1u64, 4 * DESC + 7, 1 << 20];
        for (i, &size) in sizes.iter().enumerate() {
            let dir = Dir::ALL[i % 4];
            let w = Window::new(dev, emu, dir, size, 0, i as u64).unwrap();
            w.copy_all().unwrap();
            w.verify(&format!("{arch} {dir:?} {size} throttled"), true).unwrap();
        }
        // Every engine, through an async chain.
        emu.fault_plan().clear();
        emu.fault_plan().add(PlannedFault::Bandwidth { engine: None, bytes_per_sec: RATE });
        let a = Window::new(dev, emu, Dir::D2d, 3 * DESC, 0, 7).unwrap();
        let b = Window::new(dev, emu, Dir::H2h, 12_345, 0, 8).unwrap();
        let h1 = dev.memcpy_mc_async(&a.src, &a.dst, GUARD, GUARD, a.len, 0, CtxHandle::None).unwrap();
        let h2 = dev.memcpy_mc_async(&b.src, &b.dst, GUARD, GUARD, b.len, 0, h1).unwrap();
        dev.memcpy_mc_wait(&b.src, &b.dst, h2).unwrap();
        a.verify("async throttled", true).unwrap();
        b.verify("async throttled", true).unwrap();

        // Data bytes plus a 4-byte marker per batch (5 batches), at 1 ns each.
        let bytes = sizes.iter().sum::<u64>() + a.len + b.len;
        let e = emu.engine_stats(eng).unwrap().since(&before);
        assert_eq!(e.bytes, bytes + 5 * 4, "{arch}");
        assert_eq!(e.throttled_ns, bytes + 5 * 4, "{arch}: {e:?}");
        assert_eq!(dev.ring_stats(0).unwrap().timeouts, 0);

        emu.fault_plan().clear();
        copies_after(dev, emu, Dir::D2h, &format!("{arch} throttle cleared"));
        assert_eq!(emu.engine_stats(eng).unwrap().since(&before).throttled_ns, bytes + 5 * 4, "{arch}");
    }
}
