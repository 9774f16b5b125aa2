//! `ndma copy`: one verified copy (or, with `--async N`, a stream of N copies through `AsyncPipeline`), with
//! a progress bar for long transfers, then the ring counters and the throughput.

use std::time::Instant;

use ndma::{AsyncPipeline, Transfer};
use ndma_emu::ExecPolicy;

use crate::cli::CopyArgs;
use crate::error::{CliError, CliResult, OpContext};
use crate::util::bed::{testbed, BedOpts, Dir, Window, GUARD};
use crate::util::report::{counters_table, engine_delta, with_progress};
use crate::util::size::fmt_size;
use crate::util::table::fmt_gbps;
use crate::util::timing::gbps;

/// Runs `ndma copy`.
///
/// # Errors
///
/// Bad arguments, set-up, copy and verification failures.
pub fn run(opts: BedOpts, a: &CopyArgs) -> CliResult {
    let count = match a.async_count {
        Some(0) => return Err(CliError::Usage("--async needs at least one copy".into())),
        Some(n) => n,
        None => 1,
    };
    let total = a
        .size
        .checked_mul(count)
        .filter(|t| t.checked_add(2 * GUARD).is_some())
        .ok_or_else(|| CliError::Usage(format!("{count} copies of {} bytes overflow 64 bits", a.size)))?;
    let tb = testbed(opts, ExecPolicy::Threaded)?;
    let (dev, emu) = tb.device(0);
    let (eng, _) = dev.h2t_queue(a.nc).op_ctx(|| "choosing the H2T ring")?;
    let w = Window::new(dev, emu, a.dir, total, a.nc, 0xc0b1)?;
    // Start the engine's worker thread (spawned on its first doorbell) with a small untimed copy elsewhere.
    // Host→device, whatever the direction: its budget (40 ms on V2) covers the thread start; a small
    // device→device batch's silicon budget (~210 µs) may not.
    Window::new(dev, emu, Dir::H2d, 4096, a.nc, 1)?.copy(0, 4096).op_ctx(|| "warm-up copy")?;
    let before = dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?;
    let eng_before = emu.engine_stats(eng).unwrap_or_default();
    let what = format!("{} copy of {} bytes", a.dir.name(), a.size);
    let t0 = Instant::now();
    let result = with_progress(dev, a.nc, total, || match a.async_count {
        None => w.copy(0, a.size),
        Some(_) => {
            let mut pipe = AsyncPipeline::new(dev);
            for i in 0..count {
                let off = GUARD + i * a.size;
                pipe.submit(&Transfer::new(&w.src, &w.dst, a.size).src_offset(off).dst_offset(off))?;
            }
            pipe.finish()
        }
    });
    let elapsed = t0.elapsed();
    result.op_ctx(|| what.clone())?;
    w.verify(&what, true)?;
    let s = dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?.since(&before);
    let e = engine_delta(emu.engine_stats(eng).unwrap_or_default(), eng_before);
    let mode = match a.async_count {
        None => "1 synchronous copy".to_string(),
        Some(n) => format!("{n} async copies (AsyncPipeline)"),
    };
    println!(
        "{}: {mode} of {} bytes ({}) on {} NC {} — verified byte-exact (guards intact, source unchanged)",
        a.dir.long_name(),
        a.size,
        fmt_size(a.size),
        opts.instance.name,
        a.nc
    );
    print!("{}", counters_table(&s, Some((eng, &e))));
    println!(
        "{} bytes in {:.3} ms: {} GB/s (one run, submit to completion; buffers already touched, engine worker started by an untimed 4 KiB copy)",
        total,
        elapsed.as_secs_f64() * 1e3,
        fmt_gbps(gbps(total, elapsed))
    );
    Ok(())
}
