//! Copy 1 MiB from host memory to device memory, and check that it landed.
//!
//! ```sh
//! cargo run -p ndma --example h2d_copy
//! ```
//!
//! The op layer (`ndma`) drives a Neuron device through a back end. Here the back end is the device model of
//! the `ndma-emu` crate: an emulated trn1.2xlarge whose UDMA engines execute the descriptors the op layer
//! writes. With another back end only the set-up changes (see `custom_backend.rs`).

use ndma::Instance;
use ndma_emu::{Testbed, TestbedConfig};

/// Bytes to copy.
const SIZE: u64 = 1 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The driver's silicon poll budgets (the default): a lost completion fails after the silicon budget (tens
    // of ms per descriptor for copies with host memory at one end), not the ×100000 of an emulation platform.
    // The platform's waits execute pending engine work themselves when the engine's thread is off its CPU.
    let bed = Testbed::new(TestbedConfig::new(Instance::TRN1_2XLARGE))?;
    let dev = &bed.system.devices()[0];

    // A host chunk (DRAM the device reaches across PCIe) and a device chunk (HBM), both owned by NeuronCore 0:
    // its host-to-tensor ring carries the copy.
    let host = dev.alloc_host(SIZE, 0)?;
    let hbm = dev.alloc_device(SIZE, 0)?;
    let data: Vec<u8> = (0..SIZE).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
    host.write(0, &data)?;

    // Synchronous: when it returns, the engine has written every byte (the completion marker says so).
    dev.memcpy_mc(&host, &hbm, 0, 0, SIZE)?;

    // Check the device's memory through the model's back door (on hardware: copy it back and compare).
    let mut landed = vec![0u8; SIZE as usize];
    bed.emu.device(0).hbm_read(hbm.pa(), &mut landed)?;
    if landed != data {
        let at = landed.iter().zip(&data).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!("device memory differs from the source at byte {at}").into());
    }

    let (eng, qid) = dev.h2t_queue(0)?;
    let s = dev.ring_stats(0)?;
    println!(
        "copied {SIZE} bytes host -> device on NC 0 (engine {eng}, queue {qid}): {} descriptors in {} batch, \
         {} marker poll(s); all {SIZE} bytes verified",
        s.descriptors, s.batches, s.polls
    );
    Ok(())
}

/// `cargo test` runs the example.
#[test]
fn runs() {
    main().unwrap();
}
