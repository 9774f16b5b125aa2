//! `ndma memset`: set a window of a device chunk through the op layer's memset (fill the 64 KiB host buffer,
//! copy it in, replicate it device→device), then check every byte inside and the guard bytes around it.

use std::time::Instant;

use ndma_emu::ExecPolicy;

use crate::cli::MemsetArgs;
use crate::error::{CliError, CliResult, OpContext};
use crate::util::bed::{alloc, testbed, BedOpts, GUARD};
use crate::util::pattern::{fill_chunk, verify_chunk, Expect};
use crate::util::report::{counters_table, engine_delta};
use crate::util::size::fmt_size;
use crate::util::table::fmt_gbps;
use crate::util::timing::gbps;

/// The guard byte for a memset of `value`: anything else.
pub fn guard_byte(value: u8) -> u8 {
    if value == 0xEE {
        0x11
    } else {
        0xEE
    }
}

/// Runs `ndma memset`.
///
/// # Errors
///
/// Set-up, memset and verification failures.
pub fn run(opts: BedOpts, a: &MemsetArgs) -> CliResult {
    let total = a
        .size
        .checked_add(2 * GUARD)
        .ok_or_else(|| CliError::Usage(format!("a memset of {} bytes does not fit 64 bits", a.size)))?;
    let tb = testbed(opts, ExecPolicy::Threaded)?;
    let (dev, emu) = tb.device(0);
    let (eng, _) = dev.h2t_queue(a.nc).op_ctx(|| "choosing the H2T ring")?;
    let mc = alloc(dev, false, total, a.nc)?;
    let guard = guard_byte(a.value);
    fill_chunk(emu, &mc, 0, total, guard)?;
    let before = dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?;
    let eng_before = emu.engine_stats(eng).unwrap_or_default();
    let t0 = Instant::now();
    dev.memset(&mc, GUARD, a.value, a.size).op_ctx(|| format!("memset of {} bytes", a.size))?;
    let elapsed = t0.elapsed();
    verify_chunk(emu, &mc, 0, GUARD, Expect::Byte(guard), "guard before the memset window")?;
    verify_chunk(emu, &mc, GUARD, a.size, Expect::Byte(a.value), "memset window")?;
    verify_chunk(emu, &mc, GUARD + a.size, GUARD, Expect::Byte(guard), "guard after the memset window")?;
    let s = dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?.since(&before);
    let e = engine_delta(emu.engine_stats(eng).unwrap_or_default(), eng_before);
    println!(
        "memset of {} bytes ({}) to {:#04x} at offset {GUARD} of a device chunk on {} NC {} — verified: every byte \
         inside is {:#04x}, the {GUARD}-byte guards on both sides still hold {guard:#04x}",
        a.size,
        fmt_size(a.size),
        a.value,
        opts.instance.name,
        a.nc,
        a.value
    );
    print!("{}", counters_table(&s, Some((eng, &e))));
    println!("{} bytes in {:.3} ms: {} GB/s", a.size, elapsed.as_secs_f64() * 1e3, fmt_gbps(gbps(a.size, elapsed)));
    Ok(())
}
