//! Leak accounting: with nothing running on a device, everything the op layer and the model hold for it must
//! be back where it was before the campaign — every ring empty with its slots accounted for and no context
//! held, the pool holding only what it held at bring-up, no zero-copy context, pin or backlog, every queue
//! of the H2T engines idle (nothing pending, not halted, not hung, no posted write). At the end of a run the
//! host DRAM allocator must also be back to its free bytes.

use ndma::PoolUsage;
use ndma_emu::Testbed;
use udma::Direction;

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::exec::panic_message;
use super::path::Bed;

/// What the instance held when the campaign started.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// Per device.
    pub pools: Vec<PoolUsage>,
    /// Free bytes of host DRAM.
    pub host_free: u64,
}

impl Baseline {
    /// Takes the baseline of `tb` (nothing may be running).
    pub fn take(tb: &Testbed) -> Baseline {
        Baseline {
            pools: tb.system.devices().iter().map(|d| d.pool_usage()).collect(),
            host_free: tb.emu.host().free_bytes(),
        }
    }
}

/// The leaks of device `index`, one line each (empty: none). Nothing may be running on it. A panic inside
/// the op layer while it is asked (its own slot-accounting assertion fires on unlock) is a leak line too.
pub fn device(bed: Bed<'_>, index: usize, base: &Baseline) -> Vec<String> {
    catch_unwind(AssertUnwindSafe(|| device_unguarded(bed, index, base))).unwrap_or_else(|p| {
        vec![format!("device {index}: the op layer panicked while accounted for: {}", panic_message(&*p))]
    })
}

fn device_unguarded(bed: Bed<'_>, index: usize, base: &Baseline) -> Vec<String> {
    let mut leaks = Vec::new();
    let (dev, emu) = (bed.dev, bed.emu);
    let at = |what: String| format!("device {index}: {what}");
    for nc in 0..dev.dhal().ncs_per_device() {
        match dev.ring_usage(nc) {
            Ok(u) if !u.is_idle() => leaks.push(at(format!(
                "NC {nc} ring: {} slots in use, {} accounted for, {} contexts in use",
                u.slots_in_use, u.slots_accounted, u.contexts_in_use
            ))),
            Ok(_) => {}
            Err(e) => leaks.push(at(format!("NC {nc} ring: cannot read its usage: {e}"))),
        }
        match dev.zerocopy_status(nc) {
            // Every operation takes its own completion: one still posted is one nobody asked for.
            Ok(z) if !z.is_idle() || z.posted > 0 => leaks.push(at(format!(
                "NC {nc} zero-copy: {} contexts, {} pinned pages, {} completions in the backlog, {} posted and \
                 never taken",
                z.contexts, z.pinned_pages, z.backlog, z.posted
            ))),
            Ok(_) => {}
            Err(e) => leaks.push(at(format!("NC {nc} zero-copy: cannot read its status: {e}"))),
        }
        if let Ok((eng, qid)) = dev.h2t_queue(nc) {
            let (tx, rx) = (emu.pending(eng, qid, Direction::Tx), emu.pending(eng, qid, Direction::Rx));
            if tx + rx > 0 || emu.is_halted(eng, qid) || emu.is_hung(eng, qid) {
                leaks.push(at(format!(
                    "engine {eng} queue {qid}: {tx} TX and {rx} RX descriptors pending, halted {}, hung {}",
                    emu.is_halted(eng, qid),
                    emu.is_hung(eng, qid)
                )));
            }
            let posted = emu.posted_writes(eng);
            if posted > 0 {
                leaks.push(at(format!("engine {eng}: {posted} posted writes never landed")));
            }
        }
    }
    let pool = dev.pool_usage();
    let want = base.pools.get(index).copied().unwrap_or_default();
    if pool != want {
        leaks.push(at(format!(
            "pool holds {} host chunks ({} B) and {} device chunks ({} B); at the start {} ({} B) and {} ({} B)",
            pool.host_chunks,
            pool.host_bytes,
            pool.device_chunks,
            pool.device_bytes,
            want.host_chunks,
            want.host_bytes,
            want.device_chunks,
            want.device_bytes
        )));
    }
    leaks
}

/// The leaks of the whole instance (nothing may be running on it).
pub fn instance(tb: &Testbed, base: &Baseline) -> Vec<String> {
    let mut leaks: Vec<String> = (0..tb.system.devices().len())
        .flat_map(|i| {
            let (dev, emu) = tb.device(i as u32);
            device(Bed { dev, emu }, i, base)
        })
        .collect();
    let frames = tb.emu.host().frames().leak_check();
    if !frames.is_clean() {
        leaks.push(format!("user frames: {frames:?} (pins left behind)"));
    }
    let ranges = tb.system.pinned_ranges();
    if ranges > 0 {
        leaks.push(format!("{ranges} pre-pinned ranges still registered"));
    }
    let free = tb.emu.host().free_bytes();
    if free != base.host_free {
        leaks.push(format!(
            "host DRAM: {} bytes free, {} at the start ({} bytes not returned)",
            free,
            base.host_free,
            base.host_free as i128 - free as i128
        ));
    }
    leaks
}
