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
