//! Several threads copying through one NC's ring (serialised by the ring lock) and through different NCs
//! (each on its own ring and engine).

use std::thread;

use ndma_emu::test_utils::*;
use ndma_emu::ExecPolicy;
use udma::Arch;

fn hammer(arch: Arch, ncs: &[u32], threads_per_nc: usize) {
    let tb = adversarial(arch, ExecPolicy::Threaded);
    let (dev, emu) = tb.device(0);
    thread::scope(|s| {
        for &nc in ncs {
            for t in 0..threads_per_nc {
                s.spawn(move || {
                    for round in 0..6u64 {
                        let dir = Dir::ALL[(t + round as usize) % 4];
                        let size = [1u64, 4097, 65536 * 3 + 5, 1 << 20][(round as usize + t) % 4];
                        let seed = (u64::from(nc) << 32) | ((t as u64) << 16) | round;
                        let w = Window::new(dev, emu, dir, size, nc, seed).unwrap();
                        w.copy_all().unwrap_or_else(|e| panic!("nc {nc} thread {t} round {round}: {e}"));
                        w.verify(&format!("{arch} nc {nc} thread {t} round {round} {dir:?} {size}"), true).unwrap();
                    }
                });
            }
        }
    });
    for &nc in ncs {
        let s = dev.ring_stats(nc).unwrap();
        assert_eq!(s.transfers, 6 * threads_per_nc as u64, "nc {nc}");
        assert_eq!(s.timeouts, 0);
    }
    assert!(emu.faults().is_empty());
}

#[test]
fn threads_share_one_ring() {
    hammer(Arch::V2, &[0], 4);
}

#[test]
fn threads_on_different_ncs_use_different_rings() {
    hammer(Arch::V2, &[0, 1], 2);
    // V3: NCs 0 and 1 share engine 128 (queues 0 and 1); NC 2 is on engine 129.
    hammer(Arch::V3, &[0, 1, 2], 1);
}

/// `NeuronDevice::start`: a ring carries one chain at a time, and starting a second chain while one is in
/// flight is refused with `ContextInUse`. Once the first chain had moved on to ASYNC2 (one `then`), another
/// thread's `start` was given ASYNC1 — and the first chain's next `then`, which needs ASYNC1, was the call
/// that failed: the error landed on the user who followed the rules, and cut its chain.
#[test]
fn a_second_chain_is_refused_while_the_first_runs_on_async2() {
    use ndma::{CtxHandle, NdmaError};
    let tb = adversarial(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let ws: Vec<Window> = (0..4).map(|i| Window::new(dev, emu, Dir::H2d, 8192, 0, 900 + i).unwrap()).collect();
    // User A: a chain of copies on NC 0's ring.
    let a = dev.start(&ws[0].transfer()).unwrap();
    let a = a.then(&ws[1].transfer()).unwrap();
    assert_eq!(a.handle(), CtxHandle::Async2, "A's chain is in flight on ASYNC2");
    // User B, on another thread, starts a chain on the same ring while A's is in flight.
    let b = thread::scope(|s| s.spawn(|| dev.start(&ws[2].transfer())).join().unwrap());
    // A's chain goes on while B's copy (if B was let in) is in flight.
    let a_next = a.then(&ws[3].transfer()).and_then(|c| c.wait());
    let b = b.map(|copy| {
        let h = copy.handle();
        copy.wait().unwrap();
        h
    });
    assert_eq!(
        (b, a_next),
        (Err(NdmaError::ContextInUse(2)), Ok(())),
        "B's start must be refused while A's chain is in flight (and A's chain must go on)"
    );
}
