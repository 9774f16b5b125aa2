//! Property tests of the ring arithmetic against a plain model (FACTS §2.2). Descriptor encode/decode
//! round trips live in `src/desc.rs`.
// These build queues with real atomics; under `--cfg loom` only `loom_ack.rs` runs.
#![cfg(not(loom))]

mod common;

use common::{d2h_engine, ring, NoopMmio, VecRing};
use proptest::prelude::*;
use udma::{Barrier, Desc, M2mQueue};

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Stage up to n pairs (clamped to what is available).
    Stage(u32),
    /// Ack up to n pairs (clamped to what is outstanding).
    Ack(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![(0u32..200).prop_map(Op::Stage), (0u32..200).prop_map(Op::Ack)]
}

fn size() -> impl Strategy<Value = u32> {
    (5u32..=10).prop_map(|log| 1 << log) // 32..=1024
}

fn pair(size: u32) -> M2mQueue<VecRing> {
    d2h_engine(&NoopMmio).init_queue(&NoopMmio, 7, ring(size, 0x10_0000), ring(size, 0x20_0000), size).unwrap()
}

/// What the model says about the ring after `staged` pairs were staged and `acked` acked in total.
struct Model {
    size: u32,
    staged: u64,
    acked: u64,
}

impl Model {
    fn outstanding(&self) -> u32 {
        (self.staged - self.acked) as u32
    }
    fn available(&self) -> u32 {
        self.size - 16 - self.outstanding()
    }
    fn producer(&self) -> u32 {
        (self.staged % u64::from(self.size)) as u32
    }
    fn consumer(&self) -> u32 {
        (self.acked % u64::from(self.size)) as u32
    }
    /// Phase of the descriptor numbered `n` (from 0) since init: 1 + the laps completed before it, mod 4.
    fn phase_of(&self, n: u64) -> u8 {
        ((1 + n / u64::from(self.size)) % 4) as u8
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn available_matches_the_model(size in size(), ops in prop::collection::vec(op(), 1..80)) {
        let mut q = pair(size);
        let mut m = Model { size, staged: 0, acked: 0 };
        prop_assert_eq!(q.available(), size - 16);
        for op in ops {
            match op {
                Op::Stage(n) => {
                    let n = n.min(m.available());
                    for _ in 0..n {
                        q.copy_prepare_one(m.staged << 8, m.staged << 9, 256, Barrier::None, false).unwrap();
                        m.staged += 1;
                    }
                    if m.available() == 0 {
                        prop_assert!(q.copy_prepare_one(0, 0, 1, Barrier::None, false).is_err());
                    }
                }
                Op::Ack(n) => {
                    let n = n.min(m.outstanding());
                    q.ack(n);
                    m.acked += u64::from(n);
                }
            }
            prop_assert_eq!(q.available(), m.available());
            for side in [q.tx(), q.rx()] {
                prop_assert_eq!(side.available(), m.available());
                prop_assert_eq!(side.next_desc_idx(), m.producer());
                prop_assert_eq!(side.next_cdesc_idx(), m.consumer());
                prop_assert_eq!(side.ring_id(), m.phase_of(m.staged));
            }
        }
    }

    #[test]
    fn phase_over_many_laps_matches_the_model(
        log in 5u32..=7,
        laps in 1u64..=24,
        chunks in prop::collection::vec(1u32..=16, 1..16),
    ) {
        let size = 1u32 << log;
        let mut q = pair(size);
        let mut m = Model { size, staged: 0, acked: 0 };
        let target = laps * u64::from(size) + u64::from(chunks[0]) % u64::from(size);
        let mut i = 0;
        while m.staged < target {
            // Stage a chunk (never more than fits or than the target), check every descriptor, ack it all.
            let n = u64::from(chunks[i % chunks.len()].min(m.available())).min(target - m.staged);
            i += 1;
            let first = m.staged;
            for _ in 0..n {
                q.copy_prepare_one(m.staged, !m.staged, 16, Barrier::None, false).unwrap();
                m.staged += 1;
            }
            for k in first..m.staged {
                let idx = (k % u64::from(size)) as u32;
                let want = m.phase_of(k);
                prop_assert_eq!(q.tx().read_desc(idx).len_ctrl().ring_id(), want, "tx #{}", k);
                prop_assert_eq!(q.rx().read_desc(idx).len_ctrl().ring_id(), want, "rx #{}", k);
                prop_assert_eq!(q.tx().read_desc(idx).buf_ptr(), k);
                prop_assert_eq!(q.rx().read_desc(idx).buf_ptr(), !k);
            }
            q.ack(n as u32);
            m.acked += n;
        }
        prop_assert_eq!(q.tx().ring_id(), m.phase_of(m.staged));
        prop_assert_eq!(q.rx().ring_id(), m.phase_of(m.staged));
        prop_assert_eq!(q.tx().next_desc_idx(), m.producer());
        prop_assert_eq!(q.available(), size - 16);
    }

    #[test]
    fn staged_pairs_equal_the_public_builders(
        pairs in prop::collection::vec(
            (any::<u64>(), any::<u64>(), 1u32..=65536, barrier(), any::<bool>()),
            1..40,
        ),
    ) {
        // copy_prepare_one's fast path must store exactly what Desc::m2m_rx / Desc::m2m_tx build.
        let mut q = pair(32);
        for (n, &(src, dst, len, b, int)) in pairs.iter().enumerate() {
            let n = n as u64;
            let id = m_phase(32, n);
            q.copy_prepare_one(src, dst, len, b, int).unwrap();
            let idx = (n % 32) as u32;
            prop_assert_eq!(q.tx().read_desc(idx), Desc::m2m_tx(src, len, id, b).unwrap());
            prop_assert_eq!(q.rx().read_desc(idx), Desc::m2m_rx(dst, len, id, b, int).unwrap());
            q.ack(1);
        }
    }
}

fn barrier() -> impl Strategy<Value = Barrier> {
    prop_oneof![Just(Barrier::None), Just(Barrier::Dmb), Just(Barrier::WriteBarrier), Just(Barrier::Sow)]
}

fn m_phase(size: u32, n: u64) -> u8 {
    Model { size, staged: 0, acked: 0 }.phase_of(n)
}
