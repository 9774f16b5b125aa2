//! The lock-free ack (`udma_cdesc_ack`, FACTS §2.2) under real threads: no update is ever lost.
// These build queues with real atomics; under `--cfg loom` only `loom_ack.rs` runs.
#![cfg(not(loom))]

mod common;

use std::sync::Barrier as StartLine;

use common::{d2h_engine, ring, NoopMmio};
use udma::{Barrier, CompletionCounter};

#[test]
fn four_threads_ten_thousand_acks_of_one() {
    let c = CompletionCounter::new(8191);
    let start = StartLine::new(4);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                start.wait();
                for _ in 0..10_000 {
                    c.ack(1);
                }
            });
        }
    });
    assert_eq!(c.get(), 40_000 % 8192);
    assert_eq!(c.get(), 7232);
}

#[test]
fn threads_acking_different_amounts_on_a_small_ring() {
    // Size 64: the counter wraps many times; the sum of all acks modulo 64 must survive.
    let c = CompletionCounter::new(63);
    let start = StartLine::new(4);
    std::thread::scope(|s| {
        for t in 1..=4u32 {
            let (c, start) = (&c, &start);
            s.spawn(move || {
                start.wait();
                for _ in 0..10_000 {
                    c.ack(t);
                }
            });
        }
    });
    assert_eq!(c.get(), (10_000 * (1 + 2 + 3 + 4)) % 64);
    assert_eq!(c.get(), 32);
}

#[test]
fn concurrent_pair_acks_free_every_slot() {
    let mmio = NoopMmio;
    let mut q = d2h_engine(&mmio).init_queue(&mmio, 0, ring(8192, 0x10_0000), ring(8192, 0x20_0000), 8192).unwrap();
    for i in 0..8000u64 {
        q.copy_prepare_one(i << 16, i << 17, 65536, Barrier::None, false).unwrap();
    }
    assert_eq!(q.available(), 176);
    let start = StartLine::new(4);
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (q, start) = (&q, &start);
            s.spawn(move || {
                start.wait();
                for _ in 0..2000 {
                    q.ack(1);
                }
            });
        }
    });
    assert_eq!(q.tx().next_cdesc_idx(), 8000);
    assert_eq!(q.rx().next_cdesc_idx(), 8000);
    assert_eq!(q.available(), 8176);
}
