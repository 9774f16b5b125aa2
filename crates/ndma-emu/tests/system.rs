//! An `EmuSystem` is a whole machine without the test bed: its platform's clock drives the NeuronCore reset
//! model of every device.

use ndma::Platform;
use ndma_emu::{ClockKind, EmuConfig, EmuSystem, ExecPolicy, HZ};
use udma::Arch;

#[test]
fn the_system_platform_clock_drives_every_device_reset_model() {
    let sys = EmuSystem::new(EmuConfig {
        devices: 2,
        clock: ClockKind::Fake,
        exec: ExecPolicy::Inline,
        hbm_size: Some(64 << 20),
        host_dram_size: 64 << 20,
        ..EmuConfig::new(Arch::V2)
    })
    .unwrap();
    let p = sys.platform();
    assert_eq!(p.clock_kind(), ClockKind::Fake);
    for d in sys.devices() {
        // Bring-up counts as a reset that finished one jiffy ago.
        assert!(!d.nc_reset_in_progress(0));
        assert!(d.reset_nc(0, 5));
        assert!(d.nc_reset_in_progress(0), "device {}: a reset is in progress on the system clock", d.index());
        assert!(!d.nc_reset_in_progress(1));
    }
    let j0 = p.jiffies();
    p.advance_us(4 * 1_000_000 / HZ);
    assert_eq!(p.jiffies() - j0, 4);
    assert!(sys.devices().iter().all(|d| d.nc_reset_in_progress(0)), "4 of 5 jiffies");
    p.advance_us(1_000_000 / HZ);
    assert!(sys.devices().iter().all(|d| !d.nc_reset_in_progress(0)), "the reset ended with the system clock");
}

/// `MAX_NEURON_DEVICE_COUNT` = 64 (FACTS §4): the driver's device indices run 0..=63 (`ndma_is_valid_host_mem`
/// refuses any other), so a machine has at most 64 devices; 0 or 65 is no machine.
#[test]
fn a_machine_has_one_to_sixty_four_devices() {
    assert_eq!(ndma_emu::MAX_DEVICES, 64);
    for devices in [0, 65] {
        let cfg = EmuConfig { devices, hbm_size: Some(1 << 20), host_dram_size: 1 << 20, ..EmuConfig::new(Arch::V2) };
        let Err(err) = EmuSystem::new(cfg) else { panic!("a machine of {devices} devices") };
        assert_eq!(err.to_string(), ndma_emu::EmuError::InvalidConfig("device count must be 1..=64").to_string());
    }
}
