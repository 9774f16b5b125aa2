//! Printing counters, and the progress bar for long transfers.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use ndma::{NeuronDevice, StatsSnapshot};
use ndma_emu::EngineStats;

use super::table::Table;

/// Transfers at least this long get a progress bar.
pub const PROGRESS_MIN_BYTES: u64 = 64 << 20;

/// The op layer's ring counters (and, if given, the engine model's) as a two-column table.
pub fn counters_table(s: &StatsSnapshot, eng: Option<(u32, &EngineStats)>) -> String {
    let mut t = Table::new(&["counter", ">value"]);
    let rows = [
        ("transfers", s.transfers),
        ("bytes", s.bytes),
        ("descriptors (pairs, markers included)", s.descriptors),
        ("batches", s.batches),
        ("doorbells", s.doorbells),
        ("polls", s.polls),
        ("wait_us", s.wait_us),
        ("timeouts", s.timeouts),
        ("retries", s.retries),
        ("replays", s.replays),
        ("ring_resets", s.ring_resets),
    ];
    for (k, v) in rows {
        t.row(vec![k.into(), v.to_string()]);
    }
    if let Some((id, e)) = eng {
        t.row(vec![format!("engine {id}: descriptors executed"), e.descriptors.to_string()]);
        t.row(vec![format!("engine {id}: copies (after merging)"), e.copies.to_string()]);
        t.row(vec![format!("engine {id}: faults"), e.faults.to_string()]);
    }
    t.render()
}

/// Engine counters `now − before`.
pub fn engine_delta(now: EngineStats, before: EngineStats) -> EngineStats {
    now.since(&before)
}

/// Runs `work` and, when `total` is at least [`PROGRESS_MIN_BYTES`], shows a progress bar on stderr driven
/// by NC `nc`'s ring byte counter (which advances once per completed batch). The work runs on a scoped
/// thread; this thread only samples the counter.
pub fn with_progress<T: Send>(dev: &NeuronDevice, nc: u32, total: u64, work: impl FnOnce() -> T + Send) -> T {
    if total < PROGRESS_MIN_BYTES {
        return work();
    }
    let bytes = || dev.ring_stats(nc).map(|s| s.bytes).unwrap_or(0);
    let base = bytes();
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] [{bar:40}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    std::thread::scope(|s| {
        let handle = s.spawn(work);
        while !handle.is_finished() {
            bar.set_position(bytes().saturating_sub(base).min(total));
            std::thread::sleep(Duration::from_millis(20));
        }
        bar.set_position(bytes().saturating_sub(base).min(total));
        bar.finish_and_clear();
        match handle.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}
