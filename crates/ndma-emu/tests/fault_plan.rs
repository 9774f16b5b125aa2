//! Injected faults: hang, delay, bandwidth, descriptor corruption, a batch's final write dropped.

use ndma_emu::test_utils::rig::{config, poll, Rig, POLICIES};
use ndma_emu::{CorruptField, CorruptOutcome, ExecPolicy, FaultKind, HostBuf, OrderingMode, PlannedFault};
use udma::{regs, Arch, Barrier, Direction, DmaMemory, Mmio};

/// A host source filled with 0x3c and an HBM destination; returns the source buffer (keep it alive) and
/// both device addresses.
fn small_copy(rig: &mut Rig, len: u64) -> (HostBuf, u64, u64) {
    let src = rig.dev.host().alloc(len as usize, 4096).unwrap();
    src.fill(0, len as usize, 0x3c).unwrap();
    let s = rig.host_addr(&src, 0);
    let dst = rig.dev.alloc_hbm(len, 4096).unwrap().pa;
    (src, s, dst)
}

#[test]
fn hang_stops_the_queue_until_reset() {
    for exec in POLICIES {
        for persistent in [false, true] {
            let mut rig = Rig::new(Arch::V2, exec, OrderingMode::Relaxed);
            let (_src, s, d) = small_copy(&mut rig, 8192);
            rig.dev.fault_plan().add(PlannedFault::Hang { engine: rig.eng, qid: 0, persistent });
            let n = rig.stage(s, d, 8192, Barrier::WriteBarrier) + 1;
            rig.stage_marker();
            rig.q.copy_start(&*rig.dev, n, n).unwrap();
            assert!(poll(|| rig.dev.is_hung(rig.eng, 0)));
            assert!(!rig.marker_landed(), "a hung queue never lands the marker");
            assert_eq!(rig.dev.pending(rig.eng, 0, Direction::Tx), n);
            assert!(rig.dev.faults().is_empty(), "a hang is silent");
            // Re-init (RST_Q) clears the hang.
            rig.q.reinit(&*rig.dev);
            assert!(!rig.dev.is_hung(rig.eng, 0));
            if persistent {
                let n = rig.stage(s, d, 8192, Barrier::WriteBarrier) + 1;
                rig.stage_marker();
                rig.q.copy_start(&*rig.dev, n, n).unwrap();
                assert!(poll(|| rig.dev.is_hung(rig.eng, 0)), "a persistent hang comes back");
                rig.dev.fault_plan().clear();
                rig.q.reinit(&*rig.dev);
            } else {
                assert!(rig.dev.fault_plan().entries().is_empty(), "one-shot entry consumed");
            }
            rig.copy(s, d, 8192, Barrier::WriteBarrier);
        }
    }
}

#[test]
fn delay_slows_every_descriptor() {
    for exec in POLICIES {
        let mut rig = Rig::new(Arch::V3, exec, OrderingMode::Relaxed);
        let (_src, s, d) = small_copy(&mut rig, 4 * 4096);
        rig.dev.fault_plan().add(PlannedFault::Delay { engine: Some(rig.eng), per_desc_us: 2000 });
        // 4 × 4 KiB (≤ 64 KiB each would be 1 pair; stage 4 pairs explicitly) + marker = 5 delays.
        for i in 0..4 {
            rig.q.copy_prepare_one(s + i * 4096, d + i * 4096, 4096, Barrier::None, false).unwrap();
        }
        rig.stage_marker();
        rig.q.copy_start(&*rig.dev, 5, 5).unwrap();
        assert!(rig.poll_marker());
        // Five delayed descriptor pairs (4 data + marker), 2 ms each, as the engine accounted them.
        assert_eq!(rig.dev.engine_stats(rig.eng).unwrap().delayed_us, 5 * 2000, "{exec:?}");
        rig.q.ack(5);
        // Another engine is not delayed by an engine-specific entry.
        assert_eq!(rig.dev.fault_plan().entries().len(), 1);
    }
}

#[test]
fn bandwidth_limit_throttles_copies() {
    for exec in POLICIES {
        let mut rig = Rig::new(Arch::V2, exec, OrderingMode::Strict);
        let len = 4 << 20;
        let (_src, s, d) = small_copy(&mut rig, len);
        let rate = 100_000_000; // 100 MB/s: 4 MiB takes ≥ 41 ms
        rig.dev.fault_plan().add(PlannedFault::Bandwidth { engine: None, bytes_per_sec: rate });
        let before = rig.dev.engine_stats(rig.eng).unwrap().throttled_ns;
        rig.copy(s, d, len, Barrier::WriteBarrier);
        // Every byte — the 4 MiB of data and the 4-byte marker — was charged 1/rate s (10 ns at 100 MB/s).
        let charged = rig.dev.engine_stats(rig.eng).unwrap().throttled_ns - before;
        assert_eq!(charged, (len + 4) * 10, "{exec:?}");
        let mut got = vec![0; len as usize];
        rig.dev.hbm_read(d, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == 0x3c));
    }
}

/// A batch's marker can land before the engine retires the batch (here a bandwidth limit holds the engine
/// 200 ms after each write, the marker's included): a caller that saw the marker and asks what is pending —
/// a leak check — must not find that batch still pending, nor its work missing from the engine's counters
/// (a fault check compares them). Both wait for a batch in progress to retire.
#[test]
fn a_batch_whose_marker_landed_is_neither_pending_nor_uncounted() {
    let mut rig = Rig::new(Arch::V3, ExecPolicy::Threaded, OrderingMode::Relaxed);
    let (_src, s, d) = small_copy(&mut rig, 4);
    // 4 bytes at 20 B/s: 200 ms per copy, charged after it lands.
    rig.dev.fault_plan().add(PlannedFault::Bandwidth { engine: Some(rig.eng), bytes_per_sec: 20 });
    let n = rig.stage(s, d, 4, Barrier::WriteBarrier) + 1;
    rig.stage_marker();
    rig.q.copy_start(&*rig.dev, n, n).unwrap();
    assert!(poll(|| rig.marker_landed()));
    // Each read alone waits for the batch: the counters first, then (after a second batch) the pending count.
    let st = rig.dev.engine_stats(rig.eng).unwrap();
    assert_eq!((st.descriptors, st.bytes, st.copies), (u64::from(n), 8, 2), "the marker's batch is counted");
    rig.q.ack(n);
    let n = rig.stage(s, d, 4, Barrier::WriteBarrier) + 1;
    rig.stage_marker();
    rig.q.copy_start(&*rig.dev, n, n).unwrap();
    assert!(poll(|| rig.marker_landed()));
    let pending = (rig.dev.pending(rig.eng, 0, Direction::Tx), rig.dev.pending(rig.eng, 0, Direction::Rx));
    assert_eq!(pending, (0, 0), "the marker's batch is over once its marker is seen");
    rig.q.ack(n);
    let mut got = [0u8; 4];
    rig.dev.hbm_read(d, &mut got).unwrap();
    assert_eq!(got, [0x3c; 4]);
}

fn corrupt_run(seed: u64, exec: ExecPolicy) -> (Vec<ndma_emu::CorruptionReport>, Vec<ndma_emu::DmaFault>) {
    let cfg = ndma_emu::EmuConfig { seed, ..config(Arch::V3, exec, OrderingMode::Relaxed) };
    let mut rig = Rig::with(cfg, 129, 1, 64);
    let (_src, s, d) = small_copy(&mut rig, 5 * 4096);
    rig.dev.fault_plan().add(PlannedFault::Corrupt { engine: 129, qid: 1, nth: 2 });
    for i in 0..5 {
        rig.q.copy_prepare_one(s + i * 4096, d + i * 4096, 4096, Barrier::None, false).unwrap();
    }
    rig.stage_marker();
    rig.q.copy_start(&*rig.dev, 6, 6).unwrap();
    assert!(poll(|| !rig.dev.corruptions().is_empty()));
    assert!(poll(|| !rig.dev.faults().is_empty() || rig.marker_landed()));
    (rig.dev.corruptions(), rig.dev.faults())
}

#[test]
fn corruption_is_caught_and_deterministic_by_seed() {
    let mut fields = Vec::new();
    for seed in 0..12u64 {
        let (c, f) = corrupt_run(seed, ExecPolicy::Inline);
        assert_eq!(c.len(), 1, "seed {seed}");
        let c = c[0];
        assert_eq!((c.engine, c.qid, c.slot), (129, 1, 2), "seed {seed}: the third fetch");
        // Every field the model flips is caught with the default memory sizes.
        let CorruptOutcome::Fault(kind) = c.outcome else { panic!("seed {seed}: benign {c:?}") };
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, kind);
        assert_eq!((f[0].m2s_head, f[0].s2m_head), (2, 2));
        match c.field {
            CorruptField::RingId => assert!(matches!(kind, FaultKind::PhaseMismatch { dir, .. } if dir == c.dir)),
            CorruptField::Length => assert!(matches!(kind, FaultKind::LengthMismatch { .. })),
            CorruptField::Address => assert!(matches!(kind, FaultKind::BadAddress { .. })),
        }
        // Same seed, same corruption — also under the threaded policy.
        let (again, _) = corrupt_run(seed, ExecPolicy::Threaded);
        assert_eq!(again, vec![c], "seed {seed}");
        fields.push(c.field);
    }
    for f in [CorruptField::RingId, CorruptField::Length, CorruptField::Address] {
        assert!(fields.contains(&f), "12 seeds should exercise {f:?}: {fields:?}");
    }
}

#[test]
fn dropped_marker_never_lands_but_the_queue_moves_on() {
    for exec in POLICIES {
        let mut rig = Rig::new(Arch::V2, exec, OrderingMode::Relaxed);
        let (_src, s, d) = small_copy(&mut rig, 8192);
        rig.dev.fault_plan().add(PlannedFault::DropFinalWrite { engine: rig.eng, qid: 0 });
        let n = rig.stage(s, d, 8192, Barrier::WriteBarrier) + 1;
        rig.stage_marker();
        rig.q.copy_start(&*rig.dev, n, n).unwrap();
        // The engine consumes every slot, data included, but the marker — the batch's final write — is lost.
        assert!(poll(|| rig.dev.pending(rig.eng, 0, Direction::Rx) == 0));
        assert!(poll(|| rig.dev.engine_stats(rig.eng).unwrap().descriptors == u64::from(n)));
        assert!(!rig.marker_landed());
        assert!(rig.dev.faults().is_empty());
        assert!(!rig.dev.is_halted(rig.eng, 0));
        assert!(rig.dev.fault_plan().entries().is_empty());
        let mut got = vec![0; 8192];
        rig.dev.hbm_read(d, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == 0x3c));
        // The op layer's timeout path would ack and go on; the next batch completes.
        rig.q.ack(n);
        rig.copy(s, d, 8192, Barrier::WriteBarrier);
    }
}

/// Four data pairs, no marker: the last pair's destination keeps its old bytes, the three before it are
/// copied, every slot is consumed. The engine drops by position in the doorbelled batch, not by the shape of
/// a marker (a 64-byte host→HBM write here).
#[test]
fn the_final_write_of_a_batch_is_dropped_whatever_it_is() {
    for exec in POLICIES {
        for ordering in [OrderingMode::Strict, OrderingMode::Relaxed] {
            let mut rig = Rig::new(Arch::V3, exec, ordering);
            let src = rig.dev.host().alloc(4096, 4096).unwrap();
            src.fill(0, 4096, 0x5e).unwrap();
            let s = rig.host_addr(&src, 0);
            let d = rig.dev.alloc_hbm(4096, 4096).unwrap().pa;
            rig.dev.hbm_fill(d, 4096, 0xee).unwrap();
            // A batch that ran before the entry was added is not touched: the entry waits for a doorbell.
            rig.copy(s, d + 3 * 1024 + 512, 64, Barrier::WriteBarrier);
            rig.dev.fault_plan().add(PlannedFault::DropFinalWrite { engine: rig.eng, qid: 0 });
            assert_eq!(rig.dev.fault_plan().entries().len(), 1);
            for i in 0..4u64 {
                rig.q.copy_prepare_one(s + i * 64, d + i * 1024, 64, Barrier::None, false).unwrap();
            }
            rig.q.copy_start(&*rig.dev, 4, 4).unwrap();
            assert!(poll(|| rig.dev.pending(rig.eng, 0, Direction::Rx) == 0));
            // 2 pairs of the earlier batch (data + marker), then these 4.
            assert!(poll(|| rig.dev.engine_stats(rig.eng).unwrap().descriptors == 6));
            rig.dev.flush_posted_writes();
            let mut got = vec![0; 4096];
            rig.dev.hbm_read(d, &mut got).unwrap();
            for i in 0..4 {
                let window = &got[i * 1024..(i + 1) * 1024];
                let want_copied = if i < 3 { 0x5e } else { 0xee };
                assert!(window[..64].iter().all(|&b| b == want_copied), "{exec:?} {ordering:?}: pair {i}");
                let rest = if i < 3 { &window[64..] } else { &window[64..512] };
                assert!(rest.iter().all(|&b| b == 0xee), "{exec:?} {ordering:?}: past pair {i}");
            }
            assert!(got[3 * 1024 + 512..3 * 1024 + 576].iter().all(|&b| b == 0x5e), "the earlier batch landed");
            assert!(got[3 * 1024 + 576..].iter().all(|&b| b == 0xee));
            assert!(rig.dev.faults().is_empty());
            assert!(rig.dev.fault_plan().entries().is_empty(), "one-shot");
            // Slots consumed; the queue goes on, the next batch's final write lands.
            rig.q.ack(4);
            rig.copy(s, d + 3 * 1024, 64, Barrier::WriteBarrier);
            rig.dev.hbm_read(d + 3 * 1024, &mut got[..64]).unwrap();
            assert!(got[..64].iter().all(|&b| b == 0x5e));
        }
    }
}

/// A batch armed by one RX doorbell, then abandoned by a queue reset before it ran: the entry disarms, and
/// the next batch after re-init is the one whose final write is lost.
#[test]
fn a_reset_disarms_the_drop_until_the_next_doorbell() {
    let mut rig = Rig::new(Arch::V2, ExecPolicy::Inline, OrderingMode::Strict);
    let (_src, s, d) = small_copy(&mut rig, 4096);
    rig.dev.hbm_fill(d, 4096, 0xee).unwrap();
    rig.dev.fault_plan().add(PlannedFault::DropFinalWrite { engine: rig.eng, qid: 0 });
    // Hold the engine in DISABLE so the doorbelled batch waits.
    rig.dev.write32(rig.base + regs::S2M_CHANGE_STATE, regs::CHANGE_STATE_DIS);
    rig.q.copy_prepare_one(s, d, 4096, Barrier::None, false).unwrap();
    rig.q.copy_prepare_one(s, d, 4096, Barrier::None, false).unwrap();
    rig.q.copy_start(&*rig.dev, 2, 2).unwrap();
    assert_eq!(rig.dev.pending(rig.eng, 0, Direction::Rx), 2);
    rig.q.reinit(&*rig.dev);
    rig.dev.write32(rig.base + regs::S2M_CHANGE_STATE, regs::CHANGE_STATE_NORMAL);
    assert_eq!(rig.dev.engine_stats(rig.eng).unwrap().descriptors, 0, "the abandoned batch never ran");
    // After re-init, slot 1 — where the abandoned batch ended — holds the middle pair of a three-pair batch:
    // it must land; the batch's final pair (slot 2) is the one dropped.
    for i in 0..3u64 {
        rig.q.copy_prepare_one(s, d + i * 1024, 512, Barrier::None, false).unwrap();
    }
    rig.q.copy_start(&*rig.dev, 3, 3).unwrap();
    let mut got = vec![0; 4096];
    rig.dev.hbm_read(d, &mut got).unwrap();
    for i in 0..3 {
        let want = if i < 2 { 0x3c } else { 0xee };
        assert!(got[i * 1024..i * 1024 + 512].iter().all(|&b| b == want), "pair {i}");
    }
    assert!(rig.dev.fault_plan().entries().is_empty());
}
