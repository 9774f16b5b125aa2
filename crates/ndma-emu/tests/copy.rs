//! Copies in every direction through the HAL alone, both arches and both execution policies, with
//! dmatest-style checks of the bytes before, inside and after every destination window.

use ndma_emu::test_utils::pattern;
use ndma_emu::test_utils::rig::{Rig, POLICIES};
use ndma_emu::{HostBuf, OrderingMode, HBM_BASE};
use udma::{Arch, Barrier, DmaMemory};

const GUARD: usize = 4096;
const SRC_FILL: u8 = 0x5a;
const DST_FILL: u8 = 0xc3;

/// Where a window lives.
#[derive(Clone, Copy, Debug)]
enum Side {
    Host,
    Hbm,
}

struct Window {
    side: Side,
    host: Option<HostBuf>,
    /// Physical address of the guard area start.
    pa: u64,
    total: usize,
}

impl Window {
    fn new(rig: &Rig, side: Side, len: usize, fill: u8) -> Window {
        let total = GUARD + len + GUARD;
        match side {
            Side::Host => {
                let b = rig.dev.host().alloc(total, 4096).unwrap();
                b.fill(0, total, fill).unwrap();
                Window { side, pa: b.phys_addr(), host: Some(b), total }
            }
            Side::Hbm => {
                let r = rig.dev.alloc_hbm(total as u64, 4096).unwrap();
                rig.dev.hbm_fill(r.pa, total as u64, fill).unwrap();
                Window { side, pa: r.pa, host: None, total }
            }
        }
    }

    /// Device address of byte `off` of the window proper (after the leading guard).
    fn addr(&self, rig: &Rig, off: u64) -> u64 {
        let pa = self.pa + GUARD as u64 + off;
        match self.side {
            Side::Host => pa | rig.arch.pci_host_base(),
            Side::Hbm => pa,
        }
    }

    fn write(&self, rig: &Rig, off: usize, data: &[u8]) {
        match &self.host {
            Some(b) => b.write_bytes(GUARD + off, data).unwrap(),
            None => rig.dev.hbm_write(self.pa + (GUARD + off) as u64, data).unwrap(),
        }
    }

    fn read_all(&self, rig: &Rig) -> Vec<u8> {
        let mut v = vec![0; self.total];
        match &self.host {
            Some(b) => b.read_bytes(0, &mut v).unwrap(),
            None => rig.dev.hbm_read(self.pa, &mut v).unwrap(),
        }
        v
    }
}

fn check_direction(arch: Arch, exec: ndma_emu::ExecPolicy, ordering: OrderingMode, from: Side, to: Side) {
    // 3 full descriptors plus a ragged tail, at an odd offset on both sides.
    let len = 3 * 65536 + 1234;
    let (soff, doff) = (3usize, 17usize);
    let mut rig = Rig::new(arch, exec, ordering);
    let src = Window::new(&rig, from, len + soff, SRC_FILL);
    let dst = Window::new(&rig, to, len + doff, DST_FILL);
    let data = pattern(7, 0, len);
    src.write(&rig, soff, &data);
    rig.copy(src.addr(&rig, soff as u64), dst.addr(&rig, doff as u64), len as u64, Barrier::WriteBarrier);

    let got = dst.read_all(&rig);
    let start = GUARD + doff;
    let ctx = format!("{arch} {exec:?} {ordering:?} {from:?}->{to:?}");
    assert!(got[..start].iter().all(|&b| b == DST_FILL), "{ctx}: bytes before the window changed");
    assert!(got[start..start + len] == data[..], "{ctx}: window content differs");
    assert!(got[start + len..].iter().all(|&b| b == DST_FILL), "{ctx}: bytes after the window changed");
    // The source is untouched.
    let s = src.read_all(&rig);
    assert!(s[GUARD + soff..GUARD + soff + len] == data[..], "{ctx}: source changed");
    assert!(s[..GUARD + soff].iter().all(|&b| b == SRC_FILL), "{ctx}: source guard changed");
    assert!(rig.dev.faults().is_empty(), "{ctx}: {:?}", rig.dev.faults());
    let st = rig.dev.engine_stats(rig.eng).unwrap();
    assert_eq!(st.descriptors, 5, "{ctx}");
    assert_eq!(st.bytes, len as u64 + 4, "{ctx}");
    assert_eq!(st.doorbells, 2, "{ctx}");
}

#[test]
fn every_direction_every_arch_every_policy() {
    for arch in Arch::ALL {
        for exec in POLICIES {
            for (from, to) in
                [(Side::Host, Side::Hbm), (Side::Hbm, Side::Host), (Side::Hbm, Side::Hbm), (Side::Host, Side::Host)]
            {
                check_direction(arch, exec, OrderingMode::Relaxed, from, to);
            }
        }
    }
}

#[test]
fn strict_and_adversarial_orderings_copy_correctly_with_the_barrier() {
    for arch in Arch::ALL {
        for exec in POLICIES {
            for ordering in [OrderingMode::Strict, OrderingMode::Adversarial] {
                check_direction(arch, exec, ordering, Side::Host, Side::Hbm);
                check_direction(arch, exec, ordering, Side::Hbm, Side::Host);
            }
        }
    }
}

#[test]
fn phase_wraps_over_many_laps_of_a_small_ring() {
    for arch in Arch::ALL {
        for exec in POLICIES {
            let cfg = ndma_emu::test_utils::rig::config(arch, exec, OrderingMode::Relaxed);
            let mut rig = Rig::with(cfg, 3, 5, 64);
            let dst = rig.dev.alloc_hbm(1 << 20, 4096).unwrap();
            let src = rig.dev.host().alloc(1 << 20, 4096).unwrap();
            // 7 data pairs + 1 marker per batch, 64-slot ring: 8 laps in 64 batches, with odd batch sizes mixed
            // in so the wrap falls at different places inside a batch.
            let mut total = 0u32;
            for batch in 0..64u32 {
                let pairs = 3 + batch % 9;
                let len = u64::from(pairs) * 1000;
                let data = pattern(batch as u64, 0, len as usize);
                src.write_bytes(0, &data).unwrap();
                let n = {
                    let mut n = 0;
                    for i in 0..u64::from(pairs) {
                        let b = if i + 1 == u64::from(pairs) { Barrier::WriteBarrier } else { Barrier::None };
                        let s = rig.host_addr(&src, i * 1000);
                        rig.q.copy_prepare_one(s, dst.pa + i * 1000, 1000, b, false).unwrap();
                        n += 1;
                    }
                    n + 1
                };
                rig.stage_marker();
                rig.q.copy_start(&*rig.dev, n, n).unwrap();
                assert!(rig.poll_marker(), "{arch} {exec:?} batch {batch}: {:?}", rig.dev.faults());
                rig.q.ack(n);
                total += n;
                let mut got = vec![0; len as usize];
                rig.dev.hbm_read(dst.pa, &mut got).unwrap();
                assert!(got == data, "{arch} {exec:?} batch {batch}");
            }
            assert!(total > 4 * 64, "{total} descriptors should lap a 64-slot ring several times");
            assert!(rig.dev.faults().is_empty(), "{:?}", rig.dev.faults());
            assert_eq!(rig.q.tx().next_desc_idx(), total % 64);
            // The engine's head read back through BAR0 agrees with the HAL's producer cursor and phase.
            use udma::{regs, Direction, Mmio};
            let drhp = rig.dev.read32(regs::queue_base(rig.base, Direction::Tx, 5) + regs::q::DRHP);
            assert_eq!(drhp, regs::ptr_value(total % 64, rig.q.tx().ring_id()));
        }
    }
}

#[test]
fn hbm_addresses_outside_hbm_are_not_host() {
    // An HBM window's device address is its PA; make sure the rig's HBM sits where the model says.
    let rig = Rig::new(Arch::V2, ndma_emu::ExecPolicy::Inline, OrderingMode::Strict);
    let r = rig.dev.alloc_hbm(4096, 4096).unwrap();
    assert!(r.pa >= HBM_BASE);
    rig.dev.free_hbm(r).unwrap();
    assert!(rig.dev.free_hbm(r).is_err());
}
