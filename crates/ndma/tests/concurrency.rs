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
