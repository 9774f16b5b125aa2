//! `ndma trace`: run a copy (or a pipeline of async copies) on threaded engines and write a Chrome/Perfetto
//! timeline of what happened: the op layer's staging, doorbells, waits and marker observations on the CPU
//! thread, and each engine's doorbells, executed batches and posted-write drains on its own track.

use std::time::Instant;

use ndma::{AsyncPipeline, Transfer};
use ndma_emu::ExecPolicy;

use crate::cli::TraceArgs;
use crate::cli::{testbed, BedOpts};
use crate::error::{CliError, CliResult, OpContext};
use crate::util::timeline::{chrome_trace, installed};
use ndma_emu::test_utils::{Window, GUARD};

/// Runs `ndma trace`.
///
/// # Errors
///
/// Set-up, copy or verification failures, or the output file not being writable.
pub fn run(opts: BedOpts, a: &TraceArgs) -> CliResult {
    if a.async_count == Some(0) {
        return Err(CliError::Usage("--async needs at least one copy".into()));
    }
    let timeline = installed().ok_or_else(|| CliError::Usage("the trace recorder is not installed".into()))?;
    let tb = testbed(opts, ExecPolicy::Threaded)?;
    let (dev, emu) = tb.device(0);
    let w = Window::new(dev, emu, a.dir, a.size, a.nc, 0x7ace)?;
    // One untraced copy first, so the timeline shows the steady state rather than the engine thread's start.
    w.copy(0, a.size.min(4096)).op_ctx(|| "the warm-up copy")?;
    w.reset_dst()?;
    emu.set_trace(true);
    let t0 = Instant::now();
    match a.async_count {
        None => w.copy(0, a.size).op_ctx(|| format!("{} copy of {} bytes", a.dir.name(), a.size))?,
        Some(n) => {
            let mut p = AsyncPipeline::new(dev);
            for i in 0..n {
                p.submit(&Transfer::new(&w.src, &w.dst, a.size).src_offset(GUARD).dst_offset(GUARD))
                    .op_ctx(|| format!("async copy {i} of {n}"))?;
            }
            p.finish().op_ctx(|| "draining the pipeline")?;
        }
    }
    emu.set_trace(false);
    w.verify(&format!("traced {} copy", a.dir.name()), true)?;
    let ops: Vec<_> = timeline.records().into_iter().filter(|r| r.start >= t0).collect();
    let engines = emu.take_trace();
    let json = chrome_trace(t0, &ops, &engines);
    let text = serde_json::to_string_pretty(&json).map_err(|e| CliError::Io(format!("encoding the trace: {e}")))?;
    std::fs::write(&a.out, text).map_err(|e| CliError::Io(format!("writing {}: {e}", a.out.display())))?;
    println!(
        "{} copy of {} bytes ({}) verified; {} op-layer spans/events and {} engine events written to {}",
        a.dir.long_name(),
        a.size,
        a.async_count.map_or("sync".to_string(), |n| format!("{n} async copies")),
        ops.len(),
        engines.len(),
        a.out.display()
    );
    println!("open it with Perfetto or chrome://tracing: one track per CPU thread, one per engine");
    Ok(())
}
