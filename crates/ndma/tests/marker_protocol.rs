//! The classic protocol's details that change no copy's outcome in the model, pinned exactly (each was a
//! planted bug the rest of the suite let through): the doorbell order of a batch (RX, then TX, each with the
//! batch's descriptor count), the re-arm of the marker words once a batch is seen, and the clearing of a
//! stale marker when a context is staged again.

use ndma_emu::test_utils::*;
use ndma_emu::{ClockKind, EngineEventKind, ExecPolicy, OrderingMode};
use udma::{Arch, Direction};

/// The doorbells the model saw, in the order the CPU wrote them: `(engine, qid, ring, count)`.
fn doorbells(events: &[ndma_emu::EngineEvent]) -> Vec<(u32, u32, Direction, u32)> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EngineEventKind::Doorbell { dir, count } => Some((e.engine, e.qid, dir, count)),
            _ => None,
        })
        .collect()
}

/// FACTS §2.2 `udma_m2m_copy_start`: the RX (S2M) doorbell first, then TX (M2S), both with the batch's count
/// (data descriptors + the marker). The model starts work only once both rings have some, so the order and a
/// lone RX doorbell would otherwise go unseen.
#[test]
fn a_batch_rings_rx_then_tx_with_its_descriptor_count() {
    for arch in [Arch::V2, Arch::V3] {
        let tb = testbed(arch, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
        let (dev, emu) = tb.device(0);
        let (eng, qid) = dev.h2t_queue(0).unwrap();
        let (src, dst) = (dev.alloc_host(3 << 16, 0).unwrap(), dev.alloc_device(3 << 16, 0).unwrap());
        emu.set_trace(true);
        // 100,000 bytes: two data descriptors and the marker, one batch.
        dev.memcpy_mc(&src, &dst, 0, 0, 100_000).unwrap();
        // Two batches: 2031 + 1 data descriptors, each batch closed by its marker.
        let big = ndma::MAX_BATCH_BYTES + 1;
        let (bsrc, bdst) = (dev.alloc_device(big, 0).unwrap(), dev.alloc_device(big, 0).unwrap());
        dev.memcpy_mc(&bsrc, &bdst, 0, 0, big).unwrap();
        emu.set_trace(false);
        let seen = doorbells(&emu.take_trace());
        let want = [
            (eng, qid, Direction::Rx, 3),
            (eng, qid, Direction::Tx, 3),
            (eng, qid, Direction::Rx, 2032),
            (eng, qid, Direction::Tx, 2032),
            (eng, qid, Direction::Rx, 2),
            (eng, qid, Direction::Tx, 2),
        ];
        assert_eq!(seen, want, "{arch}: doorbell writes in order");
    }
}

/// FACTS §2 / `ndma_memcpy_wait_for_completion`: once the marker is seen, both words of its slot are re-armed
/// — the source word holds `DMA_COMPLETION_MARKER` again and the polled word is 0 — before the slots are acked.
/// (Staging seeds the words again, so a missing re-arm changes no copy's outcome: only the bytes show it.)
#[test]
fn a_seen_marker_leaves_its_slot_re_armed_byte_exact() {
    for arch in [Arch::V2, Arch::V3] {
        let tb = testbed(arch, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
        let (dev, emu) = tb.device(0);
        let (src, dst) = (dev.alloc_host(4096, 0).unwrap(), dev.alloc_device(4096, 0).unwrap());
        src.fill(0, 4096, 0x3c).unwrap();
        dev.memcpy_mc(&src, &dst, 0, 0, 4096).unwrap();
        let pairs = dev.ring_descriptors(0).unwrap();
        assert_eq!(pairs.len(), 2, "{arch}: one data pair and the marker");
        let (tx, rx) = (pairs[1].0.tx(), pairs[1].1.rx());
        assert_eq!((tx.len_ctrl.len_bytes(), rx.dst), (4, tx.src + 4), "{arch}: the marker pair");
        let pa = tx.src & !arch.pci_host_base();
        let mut words = [0u8; 8];
        emu.host().space().read(pa, &mut words).unwrap();
        assert_eq!(words, [0x01, 0xef, 0xcd, 0xab, 0, 0, 0, 0], "{arch}: marker source re-seeded, poll word cleared");
        assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0), "{arch}: both slots acked");
    }
}

/// FACTS §3.1: the ring's 24-byte completion buffer gives handle h the 8 bytes [8h, 8h+8) — the marker source
/// at 8h, the poll word at 8h+4 — so SYNC, ASYNC1 and ASYNC2 self-copy from +0, +8 and +16 of one buffer.
#[test]
fn each_handle_s_marker_uses_its_own_eight_bytes_of_the_completion_buffer() {
    use ndma::CtxHandle;
    for arch in [Arch::V2, Arch::V3] {
        let tb = testbed(arch, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
        let (dev, _) = tb.device(0);
        let (src, dst) = (dev.alloc_host(4096, 0).unwrap(), dev.alloc_device(4096, 0).unwrap());
        dev.memcpy_mc(&src, &dst, 0, 0, 64).unwrap();
        let h1 = dev.memcpy_mc_async(&src, &dst, 0, 0, 64, 0, CtxHandle::None).unwrap();
        let h2 = dev.memcpy_mc_async(&src, &dst, 0, 0, 64, 0, h1).unwrap();
        assert_eq!((h1, h2), (CtxHandle::Async1, CtxHandle::Async2));
        dev.memcpy_mc_wait(&src, &dst, h2).unwrap();
        let markers: Vec<(u64, u64)> = dev
            .ring_descriptors(0)
            .unwrap()
            .iter()
            .filter(|(tx, _)| tx.tx().len_ctrl.len_bytes() == 4)
            .map(|(tx, rx)| (tx.tx().src, rx.rx().dst))
            .collect();
        assert_eq!(markers.len(), 3, "{arch}: one marker per copy");
        let base = markers[0].0;
        assert!(arch.is_host_addr(base), "{arch}: the completion buffer is host memory");
        let want = [(base, base + 4), (base + 8, base + 12), (base + 16, base + 20)];
        assert_eq!(markers, want, "{arch}: SYNC, ASYNC1, ASYNC2 slots");
    }
}

/// A batch completed in place by a recovery (its marker had landed when the ring was re-initialised under it)
/// leaves the marker in its poll word: nobody waited, so nobody re-armed it. The next batch staged on that
/// context must clear the poll word before its doorbell, or its wait sees the stale marker and reports a copy
/// that never ran as done.
#[test]
fn a_stale_marker_from_a_batch_completed_in_place_is_cleared_when_the_slot_is_staged_again() {
    use ndma::{CtxHandle, NdmaError};
    use ndma_emu::PlannedFault;
    for arch in [Arch::V2, Arch::V3] {
        let tb = testbed(arch, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
        let (dev, emu) = tb.device(0);
        let (eng, qid) = dev.h2t_queue(0).unwrap();
        let (src, dst) = (dev.alloc_host(3 * 4096, 0).unwrap(), dev.alloc_device(3 * 4096, 0).unwrap());
        src.fill(0, 3 * 4096, 0x11).unwrap();
        // A: async, runs at its doorbell (inline), its marker lands; not waited for yet.
        let a = dev.memcpy_mc_async(&src, &dst, 0, 0, 4096, 0, CtxHandle::None).unwrap();
        // A synchronous copy that hangs: its recovery re-initialises the ring and completes A in place.
        emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        let err = dev.memcpy_mc(&src, &dst, 4096, 4096, 4096).unwrap_err();
        assert!(matches!(err, NdmaError::Timeout { count: 2, .. }), "{arch}: {err}");
        dev.memcpy_mc_wait(&src, &dst, a).unwrap();
        // C on A's context, hung: nothing of it runs, so its wait must time out.
        emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        let c = dev.memcpy_mc_async(&src, &dst, 2 * 4096, 2 * 4096, 4096, 0, CtxHandle::None).unwrap();
        assert_eq!(c, a, "{arch}: the same context again");
        let err = dev.memcpy_mc_wait(&src, &dst, c).unwrap_err();
        assert!(matches!(err, NdmaError::Timeout { count: 2, .. }), "{arch}: a hung copy reported {err}");
    }
}
