//! Zero-copy DMA of a user buffer: the op layer pins the process's own pages and the engine reads or writes
//! them directly, with no staging copy. A synchronous request host -> device, then four async requests
//! device -> host that complete through the ring's completion queue.
//!
//! ```sh
//! cargo run -p ndma --example zerocopy
//! ```
//!
//! Zero-copy pins the pages of the *calling task*, as the driver does through `current->mm`. In the device model
//! a user process is an `AddressSpace` (page tables over the model's host DRAM); entering it makes this thread
//! run as that process. Async zero-copy needs a V3 (trn2) device: on V2 the driver has no completion thread.

use ndma::zerocopy::{CqConsumer, NEURON_DMA_H2T_DEFAULT_QID};
use ndma::{BatchOp, Instance, PAGE_SIZE};
use ndma_emu::{AddressSpace, MapSpec, Placement, Testbed, TestbedConfig};
use udma::Arch;

/// Bytes moved each way.
const SIZE: u64 = 1 << 20;
/// Async requests the way back is cut into.
const REQUESTS: u64 = 4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The driver's silicon poll budgets (the default): a lost completion fails after the silicon budget (tens
    // of ms per descriptor for copies with host memory at one end), not the ×100000 of an emulation platform.
    // The platform's waits execute pending engine work themselves when the engine's thread is off its CPU.
    let bed = Testbed::new(TestbedConfig::new(Instance { name: "trn2, one device", arch: Arch::V3, devices: 1 }))?;
    let dev = &bed.system.devices()[0];

    // A process with two buffers of SIZE bytes, scattered over host DRAM as a real process's pages are.
    let process = AddressSpace::new(bed.emu.host(), 4242);
    let pages = (SIZE / PAGE_SIZE) as usize;
    let out_buf = process.map(&MapSpec::new(pages, Placement::Scattered { seed: 1 }))?;
    let in_buf = process.map(&MapSpec::new(pages, Placement::Scattered { seed: 2 }))?;
    let _running_as_the_process = process.enter();
    let data: Vec<u8> = (0..SIZE).map(|i| (i.wrapping_mul(0x9E37_79B9) >> 11) as u8).collect();
    process.write(out_buf, &data)?;
    process.fill(in_buf, SIZE, 0)?;
    let hbm = dev.alloc_device(SIZE, 0)?;

    // Host -> device, synchronous (sequence number 0): done when the call returns.
    let op = BatchOp { offset: 0, size: SIZE, buffer: out_buf };
    dev.zerocopy_submit(0, &[op], &hbm, 0, NEURON_DMA_H2T_DEFAULT_QID, true, 0, 0)?;
    let mut landed = vec![0u8; SIZE as usize];
    bed.emu.device(0).hbm_read(hbm.pa(), &mut landed)?;
    if landed != data {
        return Err("device memory differs from the user buffer".into());
    }

    // Device -> host, async: each request is queued and the call returns; a completion entry
    // (sequence number, result, context) is posted for each, in order.
    let cq = CqConsumer::new(&dev.completion_queue(0)?)?;
    let part = SIZE / REQUESTS;
    for i in 0..REQUESTS {
        let op = BatchOp { offset: i * part, size: part, buffer: in_buf + i * part };
        dev.zerocopy_submit(0, &[op], &hbm, 0, NEURON_DMA_H2T_DEFAULT_QID, false, 100 + i, i)?;
    }
    let mut completions = Vec::new();
    let mut polls = 0u64;
    while completions.len() < REQUESTS as usize {
        match cq.pop() {
            Some(entry) => completions.push(entry),
            // Bounded, so a lost completion fails instead of hanging (a runtime would sleep or do other work).
            None if polls < 100_000_000 => {
                polls += 1;
                std::thread::yield_now();
            }
            None => return Err(format!("completions lost: got {completions:?}").into()),
        }
    }
    for (i, c) in (0..).zip(&completions) {
        if (c.sequence_num, c.compl_ret, c.context) != (100 + i, 0, i) {
            return Err(format!("completion {i} is {c:?}").into());
        }
    }
    let mut back = vec![0u8; SIZE as usize];
    process.read(in_buf, &mut back)?;
    if back != data {
        return Err("the user buffer differs from device memory after the async requests".into());
    }

    // Every pin was released, nothing is left queued.
    let status = dev.zerocopy_status(0)?;
    if !status.is_idle() || !bed.emu.host().frames().leak_check().is_clean() {
        return Err(format!("zero-copy state left behind: {status:?}").into());
    }
    let pins = process.pin_stats();
    println!(
        "zero-copy: {SIZE} bytes host -> device (sync) and back in {REQUESTS} async requests, completions {:?}; \
         {} pages pinned and unpinned ({} dirty: the device wrote them); all bytes verified",
        completions.iter().map(|c| c.sequence_num).collect::<Vec<_>>(),
        pins.pinned_pages,
        pins.dirty_unpins
    );
    Ok(())
}

/// `cargo test` runs the example.
#[test]
fn runs() {
    main().unwrap();
}
