//! Engine and queue bring-up through the HAL's one entry (`Udma::init`, `Udma::init_queue`): the engine's
//! state-machine writes, queue validation (`udma_q_init_validate` + `udma_m2m_init_queue`, FACTS §2.4) and
//! the exact register write sequence of `udma_q_init_internal` for both directions (FACTS §2.3).
// These build queues with real atomics; under `--cfg loom` only `loom_ack.rs` runs.
#![cfg(not(loom))]

mod common;

use common::{d2h_engine, ring, RecordingMmio, VecRing};
use udma::{regs, Arch, Direction, M2mQueue, QueueStatus, Ring, Udma, UdmaError, UdmaState};

/// The V2 D2H engine base.
const ENGINE: u64 = 0x3060_0000;
const QID: u32 = 3;
/// M2S queue 3: engine + 0x1000 + 3·0x1000.
const TXQ: u64 = 0x3060_4000;
/// S2M queue 3: engine + 0x21000 + 3·0x1000.
const RXQ: u64 = 0x3062_4000;
const TX_RING_PA: u64 = 0x0000_1234_5678_9A00;
const RX_RING_PA: u64 = 0x0000_0000_ABCD_EF00;

/// Brings the D2H engine up on `mmio`, forgets the engine's own writes, then brings queue `qid` up.
fn init(
    mmio: &RecordingMmio,
    qid: u32,
    tx: Ring<VecRing>,
    rx: Ring<VecRing>,
    size: u32,
) -> Result<M2mQueue<VecRing>, UdmaError> {
    let engine = d2h_engine(mmio);
    mmio.take_writes();
    engine.init_queue(mmio, qid, tx, rx, size)
}

fn expect_refused(qid: u32, tx: Ring<VecRing>, rx: Ring<VecRing>, size: u32, want: UdmaError) {
    let mmio = RecordingMmio::new();
    let got = init(&mmio, qid, tx, rx, size).err();
    assert_eq!(got, Some(want));
    assert_eq!(got.unwrap().errno(), -22, "{want:?}");
    assert_eq!(mmio.writes(), vec![], "nothing may be written on {want:?}");
}

#[test]
fn queue_base_offsets_for_engine_0x30600000_qid_3() {
    assert_eq!(regs::queue_base(ENGINE, Direction::Tx, QID), TXQ);
    assert_eq!(regs::queue_base(ENGINE, Direction::Rx, QID), RXQ);
}

#[test]
fn engine_init_puts_both_directions_in_normal() {
    let mmio = RecordingMmio::new();
    let engine = Udma::init(&mmio, Arch::V2, 32).unwrap();
    assert_eq!((engine.id(), engine.base(), engine.arch(), engine.num_queues()), (32, ENGINE, Arch::V2, 16));
    assert_eq!(mmio.writes(), vec![(ENGINE + 0x204, 1), (ENGINE + 0x2_0204, 1)]);
    // The state as the device reports it (`udma_state_get`).
    mmio.preset(ENGINE + 0x200, 2);
    mmio.preset(ENGINE + 0x2_0200, 9);
    assert_eq!(engine.state(&mmio, Direction::Tx), Some(UdmaState::Normal));
    assert_eq!(engine.state(&mmio, Direction::Rx), None, "9 names no state");
    // Every engine of both arches, at its own base.
    for arch in Arch::ALL {
        for eng in 0..arch.num_engines() {
            let mmio = RecordingMmio::new();
            let base = Udma::init(&mmio, arch, eng).unwrap().base();
            assert_eq!(Some(base), arch.engine_base(eng));
            assert_eq!(mmio.writes(), vec![(base + 0x204, 1), (base + 0x2_0204, 1)], "{arch} engine {eng}");
        }
    }
}

#[test]
fn an_engine_the_arch_lacks_is_enoent_and_writes_nothing() {
    for (arch, eng) in [(Arch::V2, 34), (Arch::V3, 132), (Arch::V2, u32::MAX)] {
        let mmio = RecordingMmio::new();
        let err = Udma::init(&mmio, arch, eng).unwrap_err();
        assert_eq!(err, UdmaError::NoSuchEngine { engine: eng, num_engines: arch.num_engines() });
        assert_eq!(err.errno(), -2);
        assert_eq!(mmio.writes(), vec![]);
    }
}

#[test]
fn qid_out_of_range_is_einval() {
    for qid in [16, 17, u32::MAX] {
        expect_refused(
            qid,
            ring(64, TX_RING_PA),
            ring(64, RX_RING_PA),
            64,
            UdmaError::InvalidQueue { qid, num_queues: 16 },
        );
    }
}

#[test]
fn bad_sizes_are_einval() {
    // 16: below the minimum 32 (and 2^24: above 2^24 − 16); 31: not a multiple of 16; 48: not a power of two.
    for size in [0, 16, 31, 48, 96, (1 << 24) - 16, 1 << 24, 1 << 25] {
        expect_refused(QID, ring(64, TX_RING_PA), ring(64, RX_RING_PA), size, UdmaError::InvalidQueueSize { size });
    }
}

#[test]
fn misaligned_ring_is_einval_on_either_side() {
    for addr in [TX_RING_PA + 0x40, TX_RING_PA + 0x80, TX_RING_PA + 0x10, TX_RING_PA + 1] {
        expect_refused(QID, ring(64, addr), ring(64, RX_RING_PA), 64, UdmaError::MisalignedRing { addr });
        // TX valid, RX bad: still nothing written (both sides are validated before any register write).
        expect_refused(QID, ring(64, TX_RING_PA), ring(64, addr), 64, UdmaError::MisalignedRing { addr });
    }
}

#[test]
fn ring_end_overflowing_the_address_space_is_refused() {
    let addr = u64::MAX - 0xFF; // 256-aligned, but base + 64·16 wraps.
    expect_refused(QID, ring(64, addr), ring(64, RX_RING_PA), 64, UdmaError::MisalignedRing { addr });
}

#[test]
fn too_small_memory_is_einval() {
    // 63 descriptors of memory for a 64-descriptor ring.
    let small = || Ring { mem: VecRing::new(63 * 16, TX_RING_PA), dma_addr: TX_RING_PA };
    expect_refused(QID, small(), ring(64, RX_RING_PA), 64, UdmaError::RingMemoryTooSmall { len: 1008, size: 64 });
    expect_refused(QID, ring(64, RX_RING_PA), small(), 64, UdmaError::RingMemoryTooSmall { len: 1008, size: 64 });
    // Exactly enough is fine.
    let mmio = RecordingMmio::new();
    let q = init(&mmio, QID, ring(64, TX_RING_PA), ring(64, RX_RING_PA), 64).unwrap();
    assert_eq!(q.tx().size(), 64);
}

/// What `udma_q_init_internal` writes for one direction, given the `cfg` value it reads back.
fn expected_sequence(dir: Direction, base: u64, dma_addr: u64, size: u32, cfg_before: u32) -> Vec<(u64, u32)> {
    let (sw_ctrl, comp_cfg) = match dir {
        Direction::Tx => (0xb0, 0xa0),
        Direction::Rx => (0x64, 0x54),
    };
    let mut w = Vec::new();
    if dir == Direction::Tx {
        w.push((base + 0x74, 0b011));
    }
    w.extend([
        (base + 0x20, cfg_before & !0x0003_0000),
        (base + sw_ctrl, 0x100),
        (base + 0x28, dma_addr as u32 & 0xFFFF_FFC0),
        (base + 0x2c, (dma_addr >> 32) as u32),
        (base + 0x30, size),
        (base + comp_cfg, 0),
        (base + 0x20, 0x0303_0000),
    ]);
    w
}

#[test]
fn init_writes_the_exact_register_sequence() {
    let mmio = RecordingMmio::new();
    // Both cfg registers at their reset value 3 << 24.
    mmio.preset(TXQ + 0x20, 0x0300_0000);
    mmio.preset(RXQ + 0x20, 0x0300_0000);
    let q = init(&mmio, QID, ring(8192, TX_RING_PA), ring(8192, RX_RING_PA), 8192).unwrap();
    let want: Vec<(u64, u32)> = [
        (TXQ + 0x74, 0b011),
        (TXQ + 0x20, 0x0300_0000),
        (TXQ + 0xb0, 0x100),
        (TXQ + 0x28, 0x5678_9A00),
        (TXQ + 0x2c, 0x0000_1234),
        (TXQ + 0x30, 8192),
        (TXQ + 0xa0, 0),
        (TXQ + 0x20, 0x0303_0000),
        (RXQ + 0x20, 0x0300_0000),
        (RXQ + 0x64, 0x100),
        (RXQ + 0x28, 0xABCD_EF00),
        (RXQ + 0x2c, 0),
        (RXQ + 0x30, 8192),
        (RXQ + 0x54, 0),
        (RXQ + 0x20, 0x0303_0000),
    ]
    .to_vec();
    assert_eq!(mmio.writes(), want);
    let mut sequence = expected_sequence(Direction::Tx, TXQ, TX_RING_PA, 8192, 0x0300_0000);
    sequence.extend(expected_sequence(Direction::Rx, RXQ, RX_RING_PA, 8192, 0x0300_0000));
    assert_eq!(sequence, want, "the helper agrees with the literal table");

    for side in [q.tx(), q.rx()] {
        assert_eq!(side.status(), QueueStatus::Enabled);
        assert_eq!(side.next_desc_idx(), 0);
        assert_eq!(side.next_cdesc_idx(), 0);
        assert_eq!(side.ring_id(), 1);
        assert_eq!(side.size(), 8192);
        assert_eq!(side.size_mask(), 8191);
        assert_eq!(side.qid(), QID);
    }
    assert_eq!(q.qid(), QID);
    assert_eq!(q.tx().regs(), TXQ);
    assert_eq!(q.rx().regs(), RXQ);
    assert_eq!(q.tx().direction(), Direction::Tx);
    assert_eq!(q.rx().direction(), Direction::Rx);
    assert_eq!(q.tx().dma_addr(), TX_RING_PA);
    assert_eq!(q.rx().dma_addr(), RX_RING_PA);
}

#[test]
fn pause_clears_only_the_enable_bits_of_the_cfg_it_reads() {
    let mmio = RecordingMmio::new();
    mmio.preset(TXQ + 0x20, 0xFFFF_FFFF);
    mmio.preset(RXQ + 0x20, 0x0303_0001);
    init(&mmio, QID, ring(32, TX_RING_PA), ring(32, RX_RING_PA), 32).unwrap();
    let w = mmio.writes();
    assert_eq!(w[1], (TXQ + 0x20, 0xFFFC_FFFF));
    assert_eq!(w[8], (RXQ + 0x20, 0x0300_0001));
}

#[test]
fn init_queue_then_reinit_repeats_the_sequence_and_resets_cursors() {
    let mmio = RecordingMmio::new();
    let mut q = init(&mmio, QID, ring(64, TX_RING_PA), ring(64, RX_RING_PA), 64).unwrap();
    // Unwritten cfg reads 0.
    let mut first = expected_sequence(Direction::Tx, TXQ, TX_RING_PA, 64, 0);
    first.extend(expected_sequence(Direction::Rx, RXQ, RX_RING_PA, 64, 0));
    assert_eq!(mmio.take_writes(), first);

    // Move every cursor, wrap the phase once.
    for i in 0..40u64 {
        q.copy_prepare_one(0x1000 * i, 0x2000 * i, 64, udma::Barrier::None, false).unwrap();
        q.ack(1);
    }
    assert_eq!(q.tx().next_desc_idx(), 40);
    assert_eq!(q.tx().ring_id(), 1);
    for i in 40..70u64 {
        q.copy_prepare_one(0x1000 * i, 0x2000 * i, 64, udma::Barrier::None, false).unwrap();
        q.ack(1);
    }
    assert_eq!(q.tx().next_desc_idx(), 6);
    assert_eq!(q.rx().next_cdesc_idx(), 6);
    assert_eq!(q.rx().ring_id(), 2);
    assert_eq!(mmio.take_writes(), vec![], "prepare and ack never touch registers");

    q.reinit(&mmio);
    // Now cfg reads back the enabled value, and the pause clears the two enable bits.
    let mut second = expected_sequence(Direction::Tx, TXQ, TX_RING_PA, 64, 0x0303_0000);
    second.extend(expected_sequence(Direction::Rx, RXQ, RX_RING_PA, 64, 0x0303_0000));
    assert_eq!(second[1], (TXQ + 0x20, 0x0300_0000));
    assert_eq!(mmio.take_writes(), second);
    for side in [q.tx(), q.rx()] {
        assert_eq!(side.next_desc_idx(), 0);
        assert_eq!(side.next_cdesc_idx(), 0);
        assert_eq!(side.ring_id(), 1);
        assert_eq!(side.available(), 48);
    }
}
