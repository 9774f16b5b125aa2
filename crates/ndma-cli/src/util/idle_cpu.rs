//! What an idle process costs: the CPU time (user + system, every thread) the process uses while its
//! threads wait for nothing, as a percentage of one core.

use std::time::{Duration, Instant};

/// User + system CPU time of the whole process so far.
fn process_cpu() -> Duration {
    // SAFETY: `getrusage` writes one `rusage` into the zeroed value we own; it has no other memory effects.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return Duration::ZERO;
        }
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Sleeps `settle`, then measures the process's CPU use over `window` of sleeping: percent of one core.
pub fn idle_cpu_percent(settle: Duration, window: Duration) -> f64 {
    std::thread::sleep(settle);
    let (t0, c0) = (Instant::now(), process_cpu());
    std::thread::sleep(window);
    let used = process_cpu().saturating_sub(c0);
    100.0 * used.as_secs_f64() / t0.elapsed().as_secs_f64()
}
