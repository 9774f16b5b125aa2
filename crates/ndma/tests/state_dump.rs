//! State dumps (issue 11 §1): a timeout in every path carries the ring's snapshot taken before recovery —
//! software cursors, the engine's BAR0 view, the descriptors around the cursors, and the fault the model
//! recorded. Fields are matched, not printed.

use std::sync::Arc;

use ndma::zerocopy::{CqConsumer, CqEntry};
use ndma::{BatchOp, CtxHandle, NdmaError, RingState, SlotRole, Transfer, PAGE_SIZE};
use ndma_emu::{AddressSpace, ClockKind, ExecPolicy, MapSpec, OrderingMode, Placement, PlannedFault, Testbed};
use udma::{Arch, Barrier, UdmaState};

/// The harness's test bed on a fake clock: timeouts take no wall time.
fn bed(arch: Arch, exec: ExecPolicy) -> Testbed {
    ndma_emu::test_utils::testbed(arch, exec, OrderingMode::Adversarial, ClockKind::Fake)
}

/// The slot `slot` of the snapshot's descriptor window.
fn slot(s: &RingState, slot: u32) -> &ndma::SlotState {
    s.descriptors.iter().find(|d| d.slot == slot).unwrap_or_else(|| panic!("slot {slot} not in {:?}", s.descriptors))
}

/// What a hung batch of `count` pairs staged on a fresh ring looks like: both queues' cursors, the engine's
/// head at 0 and its tail at `count`, the window ending at the producer.
fn assert_hung_at_start(s: &RingState, count: u32, what: &str) {
    for q in [&s.tx, &s.rx] {
        assert_eq!((q.next_desc_idx, q.next_cdesc_idx, q.ring_id), (count, 0, 1), "{what}: {:?} software", q.dir);
        assert_eq!(q.available, q.size - 16 - count, "{what}: free slots");
        let r = &q.regs;
        assert_eq!((r.head.slot, r.head.ring_id, r.tail.slot, r.tail.ring_id), (0, 1, count, 1), "{what}: BAR0");
        assert_eq!((r.enabled, r.status, r.engine_state), (true, 0, Some(UdmaState::Normal)), "{what}: BAR0");
        assert_eq!(r.ring_len, q.size, "{what}");
    }
    let slots: Vec<u32> = s.descriptors.iter().map(|d| d.slot).collect();
    let size = s.tx.size;
    let want: Vec<u32> = (0..8).map(|i| (size + count + i - 8) % size).collect();
    assert_eq!(slots, want, "{what}: the window ends at the producer");
    assert_eq!(slot(s, 0).role, SlotRole::Head, "{what}");
    for i in 1..count {
        assert_eq!(slot(s, i).role, SlotRole::Pending, "{what}: slot {i}");
    }
    assert_eq!(slot(s, size - 1).role, SlotRole::Free, "{what}");
    let marker = slot(s, count - 1);
    assert_eq!(marker.tx.tx().len_ctrl.len_bytes(), 4, "{what}: the marker ends the batch");
    assert_eq!(marker.rx.rx().dst, marker.tx.tx().src + 4, "{what}: marker self-copy");
}

fn diagnostics(s: &RingState) -> &str {
    s.device_diagnostics.as_deref().expect("the model recorded why the queue stopped")
}

#[test]
fn a_classic_sync_timeout_carries_the_ring_as_it_hung() {
    for arch in Arch::ALL {
        let tb = bed(arch, ExecPolicy::Inline);
        let (dev, emu) = tb.device(0);
        let (eng, qid) = dev.h2t_queue(0).unwrap();
        let (src, dst) = (dev.alloc_host(4096, 0).unwrap(), dev.alloc_device(4096, 0).unwrap());
        emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        let err = dev.memcpy_mc(&src, &dst, 0, 0, 4096).unwrap_err();
        assert!(matches!(err, NdmaError::Timeout { count: 2, .. }), "{err}");
        let s = err.ring_state().expect("a timeout carries the ring's state");
        let what = format!("{arch}");
        assert_eq!((s.device, s.nc, s.engine, s.qid), (0, 0, eng, qid));
        assert_hung_at_start(s, 2, &what);
        let data = slot(s, 0);
        assert_eq!(data.tx.tx().src, dev.mc_to_pa(&src), "{what}: the data pair at the head");
        assert_eq!(data.rx.rx().dst, dev.mc_to_pa(&dst));
        assert_eq!(data.tx.tx().len_ctrl.len_bytes(), 4096);
        assert_eq!(data.tx.tx().barrier(), dev.dhal().m2m_barrier(true), "{what}");
        let sync = &s.contexts[0];
        assert_eq!((sync.handle, sync.inuse, sync.in_flight, sync.batch_descriptors), (CtxHandle::Sync, true, 2, 2));
        assert_eq!((sync.size, sync.outstanding, sync.done, sync.marker_seen), (4096, 4096, 0, false));
        assert!(!s.contexts[1].inuse && !s.contexts[2].inuse);
        // Before recovery: the timeout is counted, the ring not re-initialised yet.
        assert_eq!((s.counters.timeouts, s.counters.ring_resets, s.counters.submitted), (1, 0, 1), "{what}");
        let d = diagnostics(s);
        assert!(d.starts_with(&format!("engine {eng} queue {qid}: hung by the fault plan; at M2S slot 0, S2M slot 0")));
        assert!(d.contains(&format!("TX[0] src {:#x} len 4096 ring id 1", dev.mc_to_pa(&src))), "{d}");
        assert!(d.contains(&format!("RX[0] dst {:#x} len 4096 ring id 1", dev.mc_to_pa(&dst))), "{d}");
        // The device keeps it; the dump names what a reader needs.
        assert_eq!(dev.last_failure_state().as_ref(), Some(s));
        let text = s.to_string();
        for needle in ["next desc 2, next completion 0", "head 0 (ring id 1), tail 2 (ring id 1)", "HEAD", "hung"] {
            assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
        }
        // After recovery the ring is clean and the model's record is gone with the RST_Q.
        let now = dev.ring_state(0).unwrap();
        assert_eq!((now.tx.next_desc_idx, now.tx.regs.head.slot, now.tx.regs.tail.slot), (0, 0, 0));
        assert_eq!(now.device_diagnostics, None);
        assert_eq!(now.counters.ring_resets, 1);
    }
}

#[test]
fn an_async_wait_timeout_carries_the_contexts_in_flight() {
    let tb = bed(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let (src, dst) = (dev.alloc_device(8192, 0).unwrap(), dev.alloc_host(8192, 0).unwrap());
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let first = dev.start(&Transfer::new(&src, &dst, 4096)).unwrap();
    let second = first.then(&Transfer::new(&src, &dst, 4096).src_offset(4096).dst_offset(4096));
    let err = second.unwrap_err();
    assert!(matches!(err, NdmaError::Timeout { count: 2, .. }), "{err}");
    let s = err.ring_state().expect("snapshot");
    // Both async batches are on the ring (2 pairs each); the engine hung on the first pair of the first.
    for q in [&s.tx, &s.rx] {
        assert_eq!((q.next_desc_idx, q.next_cdesc_idx, q.regs.head.slot, q.regs.tail.slot), (4, 0, 0, 4));
    }
    let (a1, a2) = (&s.contexts[1], &s.contexts[2]);
    assert_eq!((a1.handle, a1.inuse, a1.in_flight, a1.src), (CtxHandle::Async1, true, 2, dev.mc_to_pa(&src)));
    assert_eq!((a2.handle, a2.inuse, a2.in_flight, a2.src), (CtxHandle::Async2, true, 2, dev.mc_to_pa(&src) + 4096));
    assert!(!s.contexts[0].inuse);
    let roles: Vec<(u32, SlotRole)> = s.descriptors.iter().filter(|d| d.slot < 4).map(|d| (d.slot, d.role)).collect();
    assert_eq!(roles, [(0, SlotRole::Head), (1, SlotRole::Pending), (2, SlotRole::Pending), (3, SlotRole::Pending)]);
    assert_eq!(slot(s, 2).tx.tx().src, dev.mc_to_pa(&src) + 4096, "the second batch's data pair");
    assert!(diagnostics(s).contains("hung by the fault plan"));
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0), "recovered after the snapshot");
}

#[test]
fn v2_retry_exhaustion_carries_the_ring_after_the_last_replay() {
    let tb = bed(Arch::V2, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let (src, dst) = (dev.alloc_device(4096, 0).unwrap(), dev.alloc_device(4096, 0).unwrap());
    assert!(emu.reset_nc(0, 1_000_000));
    let err = dev.memcpy_mc(&src, &dst, 0, 0, 4096).unwrap_err();
    assert!(matches!(err, NdmaError::RetryExhausted { replays: 8, .. }), "{err}");
    assert_eq!(err.errno(), -110);
    let s = err.ring_state().expect("snapshot");
    assert_hung_at_start(s, 2, "V2 reset window");
    // Eight replays each re-initialised the ring; the final recovery had not run yet.
    assert_eq!((s.counters.retries, s.counters.replays, s.counters.ring_resets, s.counters.timeouts), (8, 8, 8, 9));
    assert_eq!(slot(s, 0).tx.tx().src, dev.mc_to_pa(&src));
    let d = diagnostics(s);
    assert!(d.contains("hung: doorbell during a NeuronCore reset (V2); at M2S slot 0, S2M slot 0"), "{d}");
}

#[test]
fn a_lost_marker_shows_every_pair_done_and_none_acked() {
    let tb = bed(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let (src, dst) = (dev.alloc_host(200_000, 0).unwrap(), dev.alloc_device(200_000, 0).unwrap());
    emu.fault_plan().add(PlannedFault::DropFinalWrite { engine: eng, qid });
    let err = dev.memcpy_mc(&src, &dst, 0, 0, 200_000).unwrap_err();
    let s = err.ring_state().expect("snapshot");
    // Four data pairs and the marker: the engine executed all five (head = tail = 5), nothing acked.
    assert_eq!((s.tx.next_desc_idx, s.tx.next_cdesc_idx, s.tx.regs.head.slot, s.tx.regs.tail.slot), (5, 0, 5, 5));
    let roles: Vec<SlotRole> = s.descriptors.iter().filter(|d| d.slot < 5).map(|d| d.role).collect();
    assert_eq!(roles, [SlotRole::Done; 5]);
    assert_eq!(slot(s, 3).tx.tx().barrier(), Barrier::WriteBarrier, "the last data pair drains");
    let d = diagnostics(s);
    assert!(d.contains("dropped the write of a pair (lost posted write); at M2S slot 4, S2M slot 4"), "{d}");
    assert!(d.contains("TX[4] src") && d.contains("len 4 ring id 1"), "the marker pair: {d}");
    assert!(!s.contexts[0].marker_seen);
}

#[test]
fn a_halted_queue_shows_its_status_and_the_fault() {
    let tb = bed(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let (src, dst) = (dev.alloc_host(4096, 0).unwrap(), dev.alloc_device(4096, 0).unwrap());
    // A raw copy from an address outside every memory: the engine halts on the pair's source.
    let wild = 0x7_0000_0000_0000u64;
    // SAFETY: the engine refuses the wild source without touching memory; the destination is a chunk held here.
    let err = unsafe { dev.memcpy(0, wild, dev.mc_to_pa(&dst), 64) }.unwrap_err();
    let s = err.ring_state().expect("snapshot");
    assert_ne!(s.tx.regs.status, 0, "the model shows the halt in status");
    assert_eq!((s.tx.regs.head.slot, s.tx.regs.tail.slot), (0, 2));
    let d = diagnostics(s);
    assert!(d.contains(&format!("halted: address {wild:#x} (+0x40) is outside memory")), "{d}");
    assert!(d.contains(&format!("TX[0] src {wild:#x} len 64")), "{d}");
    assert_eq!(emu.faults().len(), 1);
    dev.memcpy_mc(&src, &dst, 0, 0, 4096).unwrap();
}

/// A zero-copy testbed: V3, a user process entered on this thread.
struct Zc {
    tb: Testbed,
    mm: Arc<AddressSpace>,
    _enter: ndma_emu::user::EnterGuard,
}

impl Zc {
    fn new() -> Zc {
        let tb = bed(Arch::V3, ExecPolicy::Inline);
        let mm = AddressSpace::new(tb.emu.host(), 4242);
        let enter = mm.enter();
        Zc { tb, mm, _enter: enter }
    }
}

#[test]
fn a_zero_copy_sync_timeout_carries_the_ring_state() {
    let z = Zc::new();
    let (dev, emu) = z.tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let va = z.mm.map(&MapSpec::new(2, Placement::Scattered { seed: 9 })).unwrap();
    let mc = dev.alloc_device(2 * PAGE_SIZE, 0).unwrap();
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let op = [BatchOp { offset: 0, size: 2 * PAGE_SIZE, buffer: va }];
    let err = dev.zerocopy_submit(0, &op, &mc, 0, -1, true, 0, 0).unwrap_err();
    assert!(matches!(err, NdmaError::Timeout { count: 3, .. }), "{err}");
    let s = err.ring_state().expect("snapshot");
    assert_hung_at_start(s, 3, "zero-copy");
    assert!(s.zero_copy.is_some(), "the ring's zero-copy queue exists");
    assert!(s.contexts.iter().all(|c| !c.inuse), "no classic context is involved");
    // Two scattered pages: one data pair each, into consecutive device pages.
    for (i, d) in [slot(s, 0), slot(s, 1)].into_iter().enumerate() {
        assert_eq!(d.rx.rx().dst, dev.mc_to_pa(&mc) + i as u64 * PAGE_SIZE);
        assert_eq!(d.tx.tx().len_ctrl.len_bytes(), PAGE_SIZE as u32);
        assert!(dev.dhal().arch().is_host_addr(d.tx.tx().src), "the source is a pinned user page");
    }
    assert!(diagnostics(s).contains("hung by the fault plan; at M2S slot 0, S2M slot 0"));
    assert_eq!(dev.last_failure_state().as_ref(), Some(s));
}

#[test]
fn an_async_zero_copy_failure_leaves_its_snapshot_in_the_device() {
    let z = Zc::new();
    let (dev, emu) = z.tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let cq = CqConsumer::new(&dev.completion_queue(0).unwrap()).unwrap();
    let va = z.mm.map(&MapSpec::new(8, Placement::Scattered { seed: 4 })).unwrap();
    let mc = dev.alloc_device(8 * PAGE_SIZE, 0).unwrap();
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    assert!(dev.last_failure_state().is_none());
    let op = BatchOp { offset: 0, size: 8 * PAGE_SIZE, buffer: va };
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 7, 70).unwrap();
    let mut spins = 0u64;
    let entry = loop {
        if let Some(e) = cq.pop() {
            break e;
        }
        spins += 1;
        assert!(spins < 50_000_000, "the completion was lost");
        std::thread::yield_now();
    };
    assert_eq!(entry, CqEntry { sequence_num: 7, compl_ret: -110, context: 70 });
    let s = dev.last_failure_state().expect("the device kept the snapshot of the failure");
    // Eight scattered pages: eight data pairs and the marker, hung at the first.
    assert_eq!((s.tx.next_desc_idx, s.tx.next_cdesc_idx, s.tx.regs.head.slot, s.tx.regs.tail.slot), (9, 0, 0, 9));
    assert_eq!(slot(&s, 0).role, SlotRole::Head);
    assert_eq!(slot(&s, 0).rx.rx().dst, dev.mc_to_pa(&mc));
    assert!(diagnostics(&s).contains("hung by the fault plan"));
}

#[test]
fn a_batch_longer_than_the_window_shows_the_slots_from_the_engines_head() {
    let tb = bed(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let (src, dst) = (dev.alloc_host(1 << 20, 0).unwrap(), dev.alloc_device(1 << 20, 0).unwrap());
    // 1 MiB: 16 data pairs and the marker. Hung at the start, the window is the batch's first 8 slots.
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let s = dev.memcpy_mc(&src, &dst, 0, 0, 1 << 20).unwrap_err().ring_state().cloned().expect("snapshot");
    let roles: Vec<(u32, SlotRole)> = s.descriptors.iter().map(|d| (d.slot, d.role)).collect();
    let mut want = vec![(0, SlotRole::Head)];
    want.extend((1..8).map(|i| (i, SlotRole::Pending)));
    assert_eq!(roles, want);
    assert_eq!(slot(&s, 7).tx.tx().src, dev.mc_to_pa(&src) + 7 * 65536);
    // The same batch with its marker lost: the engine ran all 17 pairs, the window holds the last 8, all done.
    emu.fault_plan().add(PlannedFault::DropFinalWrite { engine: eng, qid });
    let s = dev.memcpy_mc(&src, &dst, 0, 0, 1 << 20).unwrap_err().ring_state().cloned().expect("snapshot");
    assert_eq!((s.tx.next_desc_idx, s.tx.next_cdesc_idx, s.tx.regs.head.slot), (17, 0, 17));
    let roles: Vec<(u32, SlotRole)> = s.descriptors.iter().map(|d| (d.slot, d.role)).collect();
    assert_eq!(roles, (9..17).map(|i| (i, SlotRole::Done)).collect::<Vec<_>>());
    assert_eq!(slot(&s, 16).tx.tx().len_ctrl.len_bytes(), 4, "the marker, executed but its write lost");
}
