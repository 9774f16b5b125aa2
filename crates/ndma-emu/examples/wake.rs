//! Measures how fast a completion comes back after the engine has been idle, and what an idle process costs:
//! the 4 KiB host→device sync round trip (submit → acked completion) back to back and after 2 ms and 50 ms
//! of idleness, then the CPU the process uses while idle (utime + stime over one second, after 100 ms).
//!
//! `cargo run --release -p ndma-emu --example wake [driver]` (`driver`: the driver's wait timing).
//! A measurement, not a test: it prints figures and asserts nothing.

use std::time::{Duration, Instant};

use ndma::Instance;
use ndma_emu::{Testbed, TestbedConfig, WaitTiming};

fn percentiles(mut ns: Vec<u64>) -> (u64, u64) {
    ns.sort_unstable();
    let pct = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize];
    (pct(0.5), pct(0.99))
}

/// User + system CPU time of this process, in clock ticks.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which is in parentheses and may contain spaces): utime is field 14,
    // stime 15 (1-based), i.e. 11 and 12 after the ')'.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

fn main() {
    let driver = std::env::args().any(|a| a == "driver");
    let mut cfg = TestbedConfig::new(Instance::TRN1_2XLARGE);
    cfg.hbm_size = Some(1 << 30);
    cfg.host_dram_size = 1 << 30;
    cfg.timing = if driver { WaitTiming::Driver } else { WaitTiming::Marker };
    let tb = Testbed::new(cfg).expect("testbed");
    let (dev, _) = tb.device(0);
    let src = dev.alloc_host(4096, 0).expect("host chunk");
    let dst = dev.alloc_device(4096, 0).expect("device chunk");
    let copy = || dev.memcpy_mc(&src, &dst, 0, 0, 4096).expect("copy");
    for _ in 0..2000 {
        copy();
    }
    println!("timing: {:?}", tb.platform.timing());
    for (idle, n) in [(Duration::ZERO, 20_000), (Duration::from_millis(2), 300), (Duration::from_millis(50), 40)] {
        let mut ns = Vec::with_capacity(n);
        for _ in 0..n {
            if !idle.is_zero() {
                std::thread::sleep(idle);
            }
            let t0 = Instant::now();
            copy();
            ns.push(t0.elapsed().as_nanos() as u64);
        }
        let (med, p99) = percentiles(ns);
        println!("round trip after {:>5} µs idle: median {med:>7} ns, p99 {p99:>8} ns ({n} samples)", idle.as_micros());
    }
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let (t0, c0) = (Instant::now(), cpu_ticks());
    std::thread::sleep(Duration::from_secs(1));
    let used = (cpu_ticks() - c0) as f64 / hz;
    println!("idle process CPU: {:.2} % of a core", 100.0 * used / t0.elapsed().as_secs_f64());
}
