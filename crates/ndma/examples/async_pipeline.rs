//! Async copies: an `AsyncPipeline` streaming 32 MiB to the device in 1 MiB pieces, then the same chain by hand
//! with `InFlight` handles to bring it back, both checked byte for byte.
//!
//! ```sh
//! cargo run -p ndma --example async_pipeline
//! ```
//!
//! An async copy (at most one batch: 2031 × 64 KiB) is staged on one of a ring's two async contexts; the next
//! one is staged before the previous one is waited for, so staging overlaps completion (the driver's double
//! buffer). `AsyncPipeline` does the bookkeeping; an `InFlight` handle owns one copy until it is waited for.

use ndma::{AsyncPipeline, Instance, Transfer};
use ndma_emu::{Testbed, TestbedConfig};

const MIB: u64 = 1 << 20;
/// Pieces of 1 MiB.
const PIECES: u64 = 32;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The driver's silicon poll budgets (the default): a lost completion fails after the silicon budget (tens
    // of ms per descriptor for copies with host memory at one end), not the ×100000 of an emulation platform.
    // The platform's waits execute pending engine work themselves when the engine's thread is off its CPU.
    let bed = Testbed::new(TestbedConfig::new(Instance::TRN1_2XLARGE))?;
    let dev = &bed.system.devices()[0];

    let src = dev.alloc_host(PIECES * MIB, 0)?;
    let hbm = dev.alloc_device(PIECES * MIB, 0)?;
    let back = dev.alloc_host(PIECES * MIB, 0)?;
    for i in 0..PIECES {
        src.fill(i * MIB, MIB, i as u8 ^ 0xa5)?;
    }
    back.fill(0, PIECES * MIB, 0)?;
    let piece = |from, to, i: u64| Transfer::new(from, to, MIB).src_offset(i * MIB).dst_offset(i * MIB);

    // Host -> device through a pipeline: `submit` stages a copy and waits for the one before it.
    let mut pipeline = AsyncPipeline::new(dev);
    for i in 0..PIECES {
        pipeline.submit(&piece(&src, &hbm, i))?;
    }
    pipeline.finish()?; // waits for the last one (dropping the pipeline would too)

    // Device -> host by hand: `start` begins a chain, `then` stages the next copy and waits for this one.
    let mut in_flight = dev.start(&piece(&hbm, &back, 0))?;
    for i in 1..PIECES {
        in_flight = in_flight.then(&piece(&hbm, &back, i))?;
    }
    // Non-blocking: do other work until the last copy is done, then wait (which acks it and frees its context).
    let mut other_work = 0u64;
    while !in_flight.is_complete() {
        other_work += 1;
        std::thread::yield_now();
    }
    in_flight.wait()?;

    let mut out = vec![0u8; (PIECES * MIB) as usize];
    back.read(0, &mut out)?;
    for (i, chunk) in out.chunks(MIB as usize).enumerate() {
        if let Some(at) = chunk.iter().position(|&b| b != i as u8 ^ 0xa5) {
            return Err(format!("piece {i} differs at byte {at}").into());
        }
    }
    let s = dev.ring_stats(0)?;
    println!(
        "{} async copies of 1 MiB each way on NC 0 ({} batches, {} marker polls); the CPU looked {other_work} \
         time(s) before the last one was done; all {} bytes verified",
        PIECES * 2,
        s.batches,
        s.polls,
        PIECES * MIB
    );
    Ok(())
}

/// `cargo test` runs the example.
#[test]
fn runs() {
    main().unwrap();
}
