//! `ndma demo`: a verified tour on the emulated instance — host→device, device→host, device→device and
//! host→host copies of 4 KiB … 256 MiB and memsets of 1 MiB and 256 MiB on NC 0, each warmed up, timed
//! beside single-thread memcpy of the same bytes, and checked byte for byte.

use ndma_emu::ExecPolicy;

use crate::error::{CliError, CliResult};
use crate::util::bed::{testbed, BedOpts, Dir};
use crate::util::measure::{Measured, Rig};
use crate::util::size::fmt_size;
use crate::util::table::{fmt_gbps, fmt_ratio, Table};
use crate::util::timing::gbps;

/// Copy sizes of the tour.
pub const COPY_SIZES: [u64; 5] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20];
/// Memset sizes of the tour.
pub const MEMSET_SIZES: [u64; 2] = [1 << 20, 256 << 20];
/// Timed samples per case (best counts).
const SAMPLES: u32 = 3;

fn per_op(total: u64, ops: u64) -> String {
    let ops = ops.max(1);
    if total % ops == 0 {
        (total / ops).to_string()
    } else {
        format!("{:.1}", total as f64 / ops as f64)
    }
}

fn row(t: &mut Table, op: &str, size: u64, m: &Measured) {
    let (g, base) = (gbps(size, m.op), gbps(size, m.memcpy));
    t.row(vec![
        op.to_string(),
        fmt_size(size),
        per_op(m.stats.descriptors, m.ops),
        per_op(m.stats.batches, m.ops),
        per_op(m.stats.polls, m.ops),
        fmt_gbps(g),
        fmt_gbps(base),
        fmt_ratio(g / base),
        m.stats.timeouts.to_string(),
        "ok".into(),
    ]);
}

/// Runs `ndma demo`.
///
/// # Errors
///
/// Set-up and op-layer failures; [`CliError::Verify`] if any case's bytes are wrong (after all cases ran).
pub fn run(opts: BedOpts) -> CliResult {
    let tb = testbed(opts, ExecPolicy::Threaded)?;
    let (dev, emu) = tb.device(0);
    println!(
        "ndma demo on an emulated {} ({} device(s), {}): NC 0, threaded engines, relaxed fabric ordering, real clock, \
         {} poll budgets",
        opts.instance.name,
        opts.instance.devices,
        dev.dhal().arch(),
        if opts.emulation_budgets { "emulation (×100000)" } else { "silicon" }
    );
    println!(
        "each case: one untimed warm-up, then best of {SAMPLES} timed samples interleaved with single-thread memcpy \
         of the same bytes; every byte of the destination, its guards and the source verified; counters are per \
         operation"
    );
    let mut t = Table::new(&[
        "operation",
        ">size",
        ">descriptors",
        ">batches",
        ">polls",
        ">GB/s",
        ">memcpy GB/s",
        ">ratio",
        ">timeouts",
        "verified",
    ]);
    let mut rig = Rig::new(dev, emu, 0, SAMPLES, COPY_SIZES[COPY_SIZES.len() - 1])?;
    let mut failures: Vec<CliError> = Vec::new();
    let mut record = |t: &mut Table, op: String, size: u64, r: CliResult<Measured>| match r {
        Ok(m) => row(t, &op, size, &m),
        Err(e) => {
            let mut cells = vec![op, fmt_size(size)];
            cells.resize(9, String::new());
            cells.push("FAILED".into());
            t.row(cells);
            failures.push(e);
        }
    };
    for dir in Dir::ALL {
        for size in COPY_SIZES {
            let r = rig.sync_copy(dir, size);
            record(&mut t, format!("{} copy", dir.long_name()), size, r);
        }
    }
    for size in MEMSET_SIZES {
        let r = rig.memset(size);
        record(&mut t, "memset (device)".into(), size, r);
    }
    print!("{}", t.render());
    println!(
        "GB/s = 10⁹ bytes/s; ratio = GB/s ÷ memcpy GB/s (memset rows too: memcpy of the same byte count); timeouts = \
         poll budgets that ran out during the timed operations (any that the op layer did not recover fails the case)"
    );
    let cases = Dir::ALL.len() * COPY_SIZES.len() + MEMSET_SIZES.len();
    match failures.len() {
        0 => {
            println!("all {cases} cases verified byte-exact");
            Ok(())
        }
        n => {
            for f in &failures[1..] {
                eprintln!("ndma: error: {f}");
            }
            eprintln!("ndma: {n} of {cases} cases failed");
            Err(failures.swap_remove(0))
        }
    }
}
