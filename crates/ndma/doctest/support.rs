// Set-up shared by the examples in `ndma`'s documentation. Each example includes it in a hidden line:
//
//     # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
//
// The op layer needs a back end; the examples run it over the device model (`ndma-emu`, a dev-dependency).
// Its engines execute on the thread that rings the doorbell (`ExecPolicy::Inline`): deterministic, and no
// worker thread for a loaded machine to deschedule while the doctests run in parallel. This file is the only
// place the examples depend on the model's API. (`examples/custom_backend.rs` shows a back end of your own.)

use std::sync::Arc;

use ndma::{Instance, NeuronDevice, Platform};
use ndma_emu::user::EnterGuard;
use ndma_emu::{AddressSpace, EmuConfig, EmuSystem, ExecPolicy, MapSpec, Placement, Testbed, TestbedConfig};
use udma::Arch;

/// Sizes small enough for many testbeds at once (both are committed lazily anyway).
const HBM_SIZE: u64 = 1 << 30;
const HOST_DRAM_SIZE: u64 = 1 << 30;

/// A one-device instance of `arch` with the op layer brought up on it.
pub fn testbed(arch: Arch) -> Testbed {
    let mut cfg = TestbedConfig::new(Instance { name: "doctest", arch, devices: 1 });
    cfg.exec = ExecPolicy::Inline;
    cfg.hbm_size = Some(HBM_SIZE);
    cfg.host_dram_size = HOST_DRAM_SIZE;
    Testbed::new(cfg).expect("testbed")
}

/// Device 0 of a one-device V2 (trn1) testbed. Keep the testbed alive while the device is used.
pub fn device() -> (Testbed, Arc<NeuronDevice>) {
    device_of(Arch::V2)
}

/// Device 0 of a one-device testbed of `arch`.
pub fn device_of(arch: Arch) -> (Testbed, Arc<NeuronDevice>) {
    let bed = testbed(arch);
    let dev = Arc::clone(&bed.system.devices()[0]);
    (bed, dev)
}

/// A device model of `devices` devices of `arch` and the platform the op layer runs on over it, with no op
/// layer yet: for examples that bring a `System` up themselves.
pub fn model(arch: Arch, devices: usize) -> (EmuSystem, Arc<dyn Platform>) {
    let mut cfg = EmuConfig::new(arch);
    cfg.devices = devices;
    cfg.exec = ExecPolicy::Inline;
    cfg.hbm_size = Some(HBM_SIZE);
    cfg.host_dram_size = HOST_DRAM_SIZE;
    let emu = EmuSystem::new(cfg).expect("device model");
    let platform = Arc::new(ndma_emu::EmuPlatform::new(Arc::clone(emu.host()), ndma_emu::ClockKind::Real));
    (emu, platform)
}

/// A user process (pid 4242) of the model's host, entered on this thread so that zero-copy pins its pages,
/// with `pages` pages mapped (scattered over host DRAM) at `va`.
pub struct User {
    pub mm: Arc<AddressSpace>,
    pub va: u64,
    _enter: EnterGuard,
}

pub fn user(bed: &Testbed, pages: usize) -> User {
    let mm = AddressSpace::new(bed.emu.host(), 4242);
    let va = mm.map(&MapSpec::new(pages, Placement::Scattered { seed: 1 })).expect("map");
    let _enter = mm.enter();
    User { mm, va, _enter }
}

/// As [`testbed`], on a fake clock: the op layer's delays advance virtual time, so a wait that times out
/// returns at once.
pub fn testbed_fake_clock(arch: Arch) -> Testbed {
    let mut cfg = TestbedConfig::new(Instance { name: "doctest", arch, devices: 1 });
    cfg.exec = ExecPolicy::Inline;
    cfg.clock = ndma_emu::ClockKind::Fake;
    cfg.hbm_size = Some(HBM_SIZE);
    cfg.host_dram_size = HOST_DRAM_SIZE;
    Testbed::new(cfg).expect("testbed")
}

impl User {
    /// The process writes `data` into its own memory at `va + off`.
    pub fn write(&self, off: u64, data: &[u8]) {
        self.mm.write(self.va + off, data).expect("user write");
    }

    /// The process reads `len` bytes of its own memory at `va + off`.
    pub fn read(&self, off: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        self.mm.read(self.va + off, &mut out).expect("user read");
        out
    }
}
