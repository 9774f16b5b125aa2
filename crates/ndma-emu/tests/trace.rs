//! The optional engine timeline.

use ndma_emu::test_utils::rig::Rig;
use ndma_emu::{EngineEventKind, ExecPolicy, FaultKind, OrderingMode};
use udma::{regs, Arch, Barrier, Direction, Mmio};

#[test]
fn timeline_records_doorbells_batches_drains_and_faults() {
    let mut rig = Rig::new(Arch::V3, ExecPolicy::Inline, OrderingMode::Adversarial);
    let src = rig.dev.host().alloc(3 * 65536, 4096).unwrap();
    let dst = rig.dev.alloc_hbm(3 * 65536, 4096).unwrap();
    let s = rig.host_addr(&src, 0);
    rig.copy(s, dst.pa, 3 * 65536, Barrier::WriteBarrier);
    assert!(rig.dev.take_trace().is_empty(), "off by default");

    rig.dev.set_trace(true);
    rig.copy(s, dst.pa, 3 * 65536, Barrier::WriteBarrier);
    let ev = rig.dev.take_trace();
    let kinds: Vec<_> = ev.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            EngineEventKind::Doorbell { dir: Direction::Rx, count: 4 },
            EngineEventKind::Doorbell { dir: Direction::Tx, count: 4 },
            EngineEventKind::Drain,
            EngineEventKind::Batch { descriptors: 4, bytes: 3 * 65536 + 4 },
        ]
    );
    assert!(ev.iter().all(|e| e.engine == rig.eng && e.start <= e.end));
    // Recorded when they end; the drain happened inside the batch.
    assert!(ev.windows(2).all(|w| w[0].end <= w[1].end));
    assert!(ev[3].start <= ev[2].start);

    rig.dev.write32(regs::queue_base(rig.base, Direction::Tx, 0) + regs::q::DRTP_INC, 0);
    assert!(matches!(
        rig.dev.take_trace()[..],
        [_, ndma_emu::EngineEvent { kind: EngineEventKind::Fault(FaultKind::BadDoorbell { .. }), .. }]
    ));
    rig.dev.set_trace(false);
}
