//! Lazily committed memory: a trn1.32xlarge and a trn2 (16 devices each) build on a small machine.

use ndma_emu::{EmuConfig, EmuSystem, ExecPolicy, HBM_BASE};
use udma::{Arch, DmaMemory};

#[test]
fn sixteen_devices_of_each_arch_construct_and_touch() {
    for (arch, hbm) in [(Arch::V2, 32u64 << 30), (Arch::V3, 96u64 << 30)] {
        let sys = EmuSystem::new(EmuConfig { devices: 16, exec: ExecPolicy::Threaded, ..EmuConfig::new(arch) })
            .expect("16 devices must map lazily");
        assert_eq!(sys.devices().len(), 16);
        for (i, d) in sys.devices().iter().enumerate() {
            assert_eq!(d.hbm().size(), hbm);
            for pa in [HBM_BASE, HBM_BASE + hbm / 2, HBM_BASE + hbm - 1] {
                d.hbm_write(pa, &[i as u8 + 1]).unwrap();
                let mut b = [0u8];
                d.hbm_read(pa, &mut b).unwrap();
                assert_eq!(b[0], i as u8 + 1);
            }
            assert!(d.hbm_write(HBM_BASE + hbm, &[0]).is_err());
            assert!(d.hbm_write(HBM_BASE - 1, &[0]).is_err());
        }
        let host = sys.host();
        let big = host.alloc(1 << 30, 1 << 21).unwrap();
        big.fill((1 << 30) - 4096, 4096, 9).unwrap();
        assert_eq!(host.space().size(), 64 << 30);
    }
}

/// `virt_to_phys` of the model: a host buffer's CPU range translates to its own PA; a range that leaves the
/// DRAM mapping, or memory of another model, does not translate.
#[test]
fn host_cpu_addresses_translate_to_their_pa_only_inside_this_dram() {
    let cfg = EmuConfig { host_dram_size: 1 << 24, ..EmuConfig::new(Arch::V3) };
    let (a, b) = (EmuSystem::new(cfg.clone()).unwrap(), EmuSystem::new(cfg).unwrap());
    let buf = a.host().alloc(8192, 4096).unwrap();
    assert_eq!(a.host().pa_of(buf.as_ptr(), 8192), Some(buf.phys_addr()));
    assert_eq!(a.host().pa_of(buf.as_ptr().wrapping_add(100), 16), Some(buf.phys_addr() + 100));
    let space = a.host().space();
    let last = space.base() + space.size() - 16;
    let at_end = buf.as_ptr().wrapping_add((last - buf.phys_addr()) as usize);
    assert_eq!(a.host().pa_of(at_end, 16), Some(last), "the last bytes of the DRAM");
    assert_eq!(a.host().pa_of(at_end, 17), None, "one byte past the mapping");
    let before_start = buf.as_ptr().wrapping_sub((buf.phys_addr() - space.base()) as usize + 1);
    assert_eq!(a.host().pa_of(before_start, 1), None, "one byte before the mapping");
    let theirs = b.host().alloc(8192, 4096).unwrap();
    assert_eq!(theirs.phys_addr(), buf.phys_addr(), "the same PA in both models");
    assert_eq!(a.host().pa_of(theirs.as_ptr(), 8192), None, "another model's memory");
}
