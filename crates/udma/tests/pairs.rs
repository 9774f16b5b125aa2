//! M2M pair operations: `copy_prepare_one`, `copy_start`, `available`, ack and the phase wrap
//! (FACTS §1.5, §2.2).
// These build queues with real atomics; under `--cfg loom` only `loom_ack.rs` runs.
#![cfg(not(loom))]

mod common;

use common::{d2h_engine, ring, RecordingMmio, VecRing};
use udma::{Barrier, Desc, Direction, DmaMemory, M2mQueue, UdmaError};

const ENGINE: u64 = 0x3060_0000;
const QID: u32 = 3;
const TXQ: u64 = 0x3060_4000;
const RXQ: u64 = 0x3062_4000;
/// `drtp_inc`, the doorbell.
const DRTP_INC: u64 = 0x38;

fn pair(mmio: &RecordingMmio, size: u32) -> M2mQueue<VecRing> {
    let q = d2h_engine(mmio).init_queue(mmio, QID, ring(size, 0x10_0000), ring(size, 0x20_0000), size).unwrap();
    mmio.take_writes();
    q
}

/// The raw 16 bytes of slot `idx` of a ring, read straight from its memory.
fn slot_bytes(mem: &VecRing, idx: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    mem.read_bytes(idx as usize * 16, &mut b).unwrap();
    b
}

fn words(b: [u8; 16]) -> (u32, u32, u64) {
    (
        u32::from_le_bytes(b[0..4].try_into().unwrap()),
        u32::from_le_bytes(b[4..8].try_into().unwrap()),
        u64::from_le_bytes(b[8..16].try_into().unwrap()),
    )
}

#[test]
fn first_64k_pair_after_init_lands_in_slot_0() {
    let mmio = RecordingMmio::new();
    let mut q = pair(&mmio, 8192);
    let src = 0x0000_1000_0000_4000;
    let dst = 0x0000_0000_0002_0000;
    q.copy_prepare_one(src, dst, 65536, Barrier::None, false).unwrap();

    assert_eq!(words(slot_bytes(q.tx().ring(), 0)), (0x0D00_0000, 0x0108_0003, src));
    assert_eq!(words(slot_bytes(q.rx().ring(), 0)), (0x0100_0000, 0, dst));
    assert_eq!(q.tx().read_desc(0), Desc::from_words(0x0D00_0000, 0x0108_0003, src));
    assert_eq!(q.rx().read_desc(0), Desc::from_words(0x0100_0000, 0, dst));
    // Nothing else in either ring was touched.
    for side in [q.tx(), q.rx()] {
        for idx in 1..8192 {
            assert_eq!(slot_bytes(side.ring(), idx), [0; 16], "{:?} slot {idx}", side.direction());
        }
        assert_eq!(side.next_desc_idx(), 1);
        assert_eq!(side.next_cdesc_idx(), 0);
        assert_eq!(side.ring_id(), 1);
    }
    assert_eq!(mmio.writes(), vec![], "prepare never rings a doorbell");
}

#[test]
fn pairs_use_the_same_index_on_both_rings_with_their_flags() {
    let mmio = RecordingMmio::new();
    let mut q = pair(&mmio, 64);
    let cases = [
        (1u32, Barrier::None, false, 0x0D00_0001u32, 0x0108_0003u32, 0x0100_0001u32),
        (4096, Barrier::Dmb, false, 0x4D00_1000, 0x0108_0003, 0x0100_1000),
        (65535, Barrier::WriteBarrier, true, 0x0D00_FFFF, 0x0508_0003, 0x1100_FFFF),
        (65536, Barrier::Sow, true, 0x0D00_0000, 0x0108_0003, 0x3100_0000),
    ];
    for (i, &(len, barrier, set_int, ..)) in cases.iter().enumerate() {
        let i = i as u64;
        q.copy_prepare_one(0xA000_0000 + i, 0xB000_0000 + i, len, barrier, set_int).unwrap();
    }
    for (i, &(_, _, _, tx_len, tx_meta, rx_len)) in cases.iter().enumerate() {
        let idx = i as u32;
        assert_eq!(words(slot_bytes(q.tx().ring(), idx)), (tx_len, tx_meta, 0xA000_0000 + i as u64));
        assert_eq!(words(slot_bytes(q.rx().ring(), idx)), (rx_len, 0, 0xB000_0000 + i as u64));
    }
    assert_eq!(q.tx().next_desc_idx(), 4);
    assert_eq!(q.rx().next_desc_idx(), 4);
}

#[test]
fn invalid_lengths_are_refused_with_eperm_and_nothing_staged() {
    let mmio = RecordingMmio::new();
    let mut q = pair(&mmio, 64);
    q.copy_prepare_one(0x1000, 0x2000, 8, Barrier::None, false).unwrap();
    for len in [0, 65537, u32::MAX] {
        let err = q.copy_prepare_one(0x3000, 0x4000, len, Barrier::None, false).unwrap_err();
        assert_eq!(err, UdmaError::InvalidLength { len });
        assert_eq!(err.errno(), -1);
        for side in [q.tx(), q.rx()] {
            assert_eq!(side.next_desc_idx(), 1);
            assert_eq!(side.ring_id(), 1);
            assert_eq!(slot_bytes(side.ring(), 1), [0; 16]);
        }
        assert_eq!(q.available(), 64 - 16 - 1);
    }
    assert_eq!(mmio.writes(), vec![]);
}

#[test]
fn full_ring_is_enomem_and_nothing_is_written() {
    let mmio = RecordingMmio::new();
    let mut q = pair(&mmio, 32);
    for i in 0..16u64 {
        q.copy_prepare_one(0x1000 * (i + 1), 0x2000 * (i + 1), 512, Barrier::None, false).unwrap();
    }
    assert_eq!(q.available(), 0);
    let err = q.copy_prepare_one(0xDEAD_0000, 0xBEEF_0000, 512, Barrier::None, false).unwrap_err();
    assert_eq!(err, UdmaError::RingFull { qid: QID, dir: Direction::Tx });
    assert_eq!(err.errno(), -12);
    for side in [q.tx(), q.rx()] {
        assert_eq!(side.next_desc_idx(), 16);
        assert_eq!(side.ring_id(), 1);
        for idx in 16..32 {
            assert_eq!(slot_bytes(side.ring(), idx), [0; 16]);
        }
    }
    assert_eq!(mmio.writes(), vec![]);
    // One ack frees exactly one slot.
    q.ack(1);
    assert_eq!(q.available(), 1);
    q.copy_prepare_one(0xDEAD_0000, 0xBEEF_0000, 512, Barrier::None, false).unwrap();
    assert_eq!(words(slot_bytes(q.tx().ring(), 16)), (0x0D00_0200, 0x0108_0003, 0xDEAD_0000));
    assert_eq!(words(slot_bytes(q.rx().ring(), 16)), (0x0100_0200, 0, 0xBEEF_0000));
    assert_eq!(
        q.copy_prepare_one(1, 2, 3, Barrier::None, false),
        Err(UdmaError::RingFull { qid: QID, dir: Direction::Tx })
    );
}

#[test]
fn pairs_of_one_engine_use_their_own_rings_and_doorbells() {
    let mmio = RecordingMmio::new();
    let engine = d2h_engine(&mmio);
    let mut a = engine.init_queue(&mmio, QID, ring(64, 0x10_0000), ring(64, 0x20_0000), 64).unwrap();
    let mut b = engine.init_queue(&mmio, 5, ring(64, 0x30_0000), ring(64, 0x40_0000), 64).unwrap();
    mmio.take_writes();
    a.copy_prepare_one(0x1000, 0x2000, 64, Barrier::None, false).unwrap();
    b.copy_prepare_one(0x3000, 0x4000, 128, Barrier::None, false).unwrap();
    b.copy_prepare_one(0x5000, 0x6000, 256, Barrier::None, false).unwrap();
    a.copy_start(&mmio, 1, 1).unwrap();
    b.copy_start(&mmio, 2, 2).unwrap();
    // Queue 5's blocks: M2S at engine + 0x1000 + 5·0x1000, S2M at engine + 0x21000 + 5·0x1000.
    let (txq5, rxq5) = (ENGINE + 0x6000, ENGINE + 0x2_6000);
    assert_eq!(
        mmio.take_writes(),
        vec![(RXQ + DRTP_INC, 1), (TXQ + DRTP_INC, 1), (rxq5 + DRTP_INC, 2), (txq5 + DRTP_INC, 2)]
    );
    assert_eq!(a.tx().read_desc(0), Desc::from_words(0x0D00_0040, 0x0108_0003, 0x1000));
    assert_eq!(b.tx().read_desc(1), Desc::from_words(0x0D00_0100, 0x0108_0003, 0x5000));
    assert_eq!(b.rx().read_desc(0), Desc::from_words(0x0100_0080, 0, 0x4000));
    a.ack(1);
    assert_eq!((a.available(), a.rx().next_cdesc_idx()), (48, 1));
    assert_eq!((b.available(), b.rx().next_cdesc_idx()), (46, 0), "an ack on one pair frees nothing on another");
}

#[test]
fn copy_start_rings_rx_then_tx_once_each() {
    let mmio = RecordingMmio::new();
    let q = pair(&mmio, 8192);
    q.copy_start(&mmio, 3, 3).unwrap();
    assert_eq!(mmio.take_writes(), vec![(RXQ + DRTP_INC, 3), (TXQ + DRTP_INC, 3)]);
    q.copy_start(&mmio, 2031, 2032).unwrap();
    assert_eq!(mmio.take_writes(), vec![(RXQ + DRTP_INC, 2032), (TXQ + DRTP_INC, 2031)]);
    // The full ring size is accepted on both.
    q.copy_start(&mmio, 8192, 8192).unwrap();
    assert_eq!(mmio.take_writes(), vec![(RXQ + DRTP_INC, 8192), (TXQ + DRTP_INC, 8192)]);
}

#[test]
fn copy_start_with_no_tx_rings_only_rx() {
    let mmio = RecordingMmio::new();
    let q = pair(&mmio, 8192);
    q.copy_start(&mmio, 0, 1).unwrap();
    assert_eq!(mmio.take_writes(), vec![(RXQ + DRTP_INC, 1)]);
}

#[test]
fn copy_start_refuses_bad_counts_without_ringing() {
    let mmio = RecordingMmio::new();
    let q = pair(&mmio, 8192);
    let cases = [
        (0, 0, UdmaError::InvalidDoorbellCount { count: 0, size: 8192 }),
        (5, 0, UdmaError::InvalidDoorbellCount { count: 0, size: 8192 }),
        (0, 8193, UdmaError::InvalidDoorbellCount { count: 8193, size: 8192 }),
        (1, u32::MAX, UdmaError::InvalidDoorbellCount { count: u32::MAX, size: 8192 }),
        // A bad TX count must not let the RX doorbell through first.
        (8193, 1, UdmaError::InvalidDoorbellCount { count: 8193, size: 8192 }),
        // A full RX count is a good one: the error names the bad TX count.
        (8193, 8192, UdmaError::InvalidDoorbellCount { count: 8193, size: 8192 }),
    ];
    for (m2s, s2m, want) in cases {
        let err = q.copy_start(&mmio, m2s, s2m).unwrap_err();
        assert_eq!(err, want, "m2s {m2s} s2m {s2m}");
        assert_eq!(err.errno(), -1);
        assert_eq!(mmio.writes(), vec![], "m2s {m2s} s2m {s2m}");
    }
}

#[test]
fn available_tracks_staged_and_acked_pairs() {
    let mmio = RecordingMmio::new();
    let mut q = pair(&mmio, 8192);
    assert_eq!(q.available(), 8176);
    assert_eq!(q.tx().available(), 8176);
    assert_eq!(q.rx().available(), 8176);
    for k in 1..=2031u32 {
        q.copy_prepare_one(u64::from(k) << 16, u64::from(k) << 20, 65536, Barrier::None, false).unwrap();
        assert_eq!(q.available(), 8176 - k);
    }
    assert_eq!(q.tx().available(), 8176 - 2031);
    assert_eq!(q.rx().available(), 8176 - 2031);
    q.ack(2031);
    assert_eq!(q.available(), 8176);
    assert_eq!(q.tx().next_cdesc_idx(), 2031);
    assert_eq!(q.rx().next_cdesc_idx(), 2031);

    // Fill to the guard gap, drain, and wrap the cursors.
    for _ in 0..8176 {
        q.copy_prepare_one(0x1000, 0x2000, 64, Barrier::None, false).unwrap();
    }
    assert_eq!(q.available(), 0);
    assert_eq!(q.tx().next_desc_idx(), (2031 + 8176) % 8192);
    q.ack(8000);
    assert_eq!(q.available(), 8000);
    q.ack(176);
    assert_eq!(q.available(), 8176);
    assert_eq!(q.tx().next_cdesc_idx(), (2031 + 8176) % 8192);
    assert_eq!(q.tx().ring_id(), 2);
    assert_eq!(q.rx().ring_id(), 2);
}

#[test]
fn phase_advances_at_each_wrap_of_a_32_descriptor_ring() {
    let mmio = RecordingMmio::new();
    let mut q = pair(&mmio, 32);
    let mut staged: u64 = 0;
    // 16 at a time (all that fits), 50 laps.
    while staged < 50 * 32 {
        let first = staged;
        for _ in 0..16 {
            q.copy_prepare_one(0x1_0000 + staged, 0x2_0000 + staged, 32, Barrier::None, false).unwrap();
            staged += 1;
        }
        for n in first..staged {
            let lap = n / 32;
            let idx = (n % 32) as u32;
            let want = ((1 + lap) % 4) as u8;
            let tx = q.tx().read_desc(idx);
            let rx = q.rx().read_desc(idx);
            assert_eq!(tx.len_ctrl().ring_id(), want, "tx #{n}");
            assert_eq!(rx.len_ctrl().ring_id(), want, "rx #{n}");
            assert_eq!(tx.len_ctrl().into_bits(), 0x0C00_0020 | (u32::from(want) << 24));
            assert_eq!(rx.len_ctrl().into_bits(), 0x0000_0020 | (u32::from(want) << 24));
            assert_eq!(tx.buf_ptr(), 0x1_0000 + n);
            assert_eq!(rx.buf_ptr(), 0x2_0000 + n);
        }
        // The phase the next descriptor carries.
        let next = ((1 + staged / 32) % 4) as u8;
        assert_eq!(q.tx().ring_id(), next);
        assert_eq!(q.rx().ring_id(), next);
        if staged % 32 == 0 {
            // Just wrapped: slot 31 kept the old id, and the next slot 0 will carry id + 1 mod 4.
            let old = ((staged / 32) % 4) as u8;
            assert_eq!(q.tx().read_desc(31).len_ctrl().ring_id(), old);
            assert_eq!(next, (old + 1) % 4);
        }
        q.ack(16);
    }
    assert_eq!(q.tx().ring_id(), 3, "(1 + 50) mod 4");
    assert_eq!(q.available(), 16);
}

#[test]
fn ring_id_sequence_across_a_wrap_is_last_old_then_new() {
    let mmio = RecordingMmio::new();
    let mut q = pair(&mmio, 32);
    let mut ids = Vec::new();
    for lap in 0..6 {
        for _ in 0..2 {
            for _ in 0..16 {
                q.copy_prepare_one(0, 0, 1, Barrier::None, false).unwrap();
            }
            q.ack(16);
        }
        ids.push((lap, q.tx().read_desc(30).len_ctrl().ring_id(), q.tx().read_desc(31).len_ctrl().ring_id()));
        q.copy_prepare_one(0, 0, 1, Barrier::None, false).unwrap();
        ids.push((lap, q.rx().read_desc(31).len_ctrl().ring_id(), q.rx().read_desc(0).len_ctrl().ring_id()));
        // Put the producer back on a lap boundary for the next round.
        for _ in 0..15 {
            q.copy_prepare_one(0, 0, 1, Barrier::None, false).unwrap();
        }
        q.ack(16);
        for _ in 0..16 {
            q.copy_prepare_one(0, 0, 1, Barrier::None, false).unwrap();
        }
        q.ack(16);
    }
    // Laps of 64 descriptors = 2 wraps per round: lap r's slots 30/31 carry 1 + 2r (mod 4), slot 0 of the
    // next lap one more.
    let want: Vec<(i32, u8, u8)> = (0..6)
        .flat_map(|r: i32| {
            let id = ((1 + 2 * r) % 4) as u8;
            [(r, id, id), (r, id, (id + 1) % 4)]
        })
        .collect();
    assert_eq!(ids, want);
}
