//! The progress bar: operations done (of the count, or against the clock), with running counters. On stderr,
//! only on a terminal, never with `-q`; when stderr is not a terminal (a log file), a status line every
//! [`STATUS_EVERY`] instead.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::config::Bound;
use super::record::{FindingKind, OpRecord};
use crate::util::size::fmt_size;

/// Running counters, shared by the threads. Relaxed: statistics for display, ordering nothing.
#[derive(Debug, Default)]
pub struct Counters {
    bytes: AtomicU64,
    faults: AtomicU64,
    timeouts: AtomicU64,
    failures: AtomicU64,
}

/// The bar and its counters.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    counters: Counters,
    /// Without a terminal: when the last status line was printed (`None`: no status lines).
    status: Option<Mutex<Instant>>,
    started: Instant,
    prefix: String,
}

/// How often a status line is printed when stderr is not a terminal.
pub const STATUS_EVERY: Duration = Duration::from_secs(60);

/// The message is refreshed every this many operations.
const REFRESH_EVERY: u64 = 64;

impl Progress {
    /// A bar for a campaign bounded by `bound` on `instance`; hidden unless `show` and stderr is a terminal.
    pub fn new(bound: Bound, instance: &str, show: bool) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = if show && terminal {
            match bound {
                Bound::Count(n) => ProgressBar::new(n),
                Bound::Duration(_) => ProgressBar::new_spinner(),
            }
        } else {
            ProgressBar::hidden()
        };
        let template = match bound {
            Bound::Count(_) => "{spinner} {prefix} [{elapsed_precise}] [{bar:30}] {pos}/{len} ops ({per_sec}) {msg}",
            Bound::Duration(_) => "{spinner} {prefix} [{elapsed_precise}] {pos} ops ({per_sec}) {msg}",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(instance.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        let now = Instant::now();
        let status = (show && !terminal).then(|| Mutex::new(now));
        Progress { bar, counters: Counters::default(), status, started: now, prefix: instance.to_string() }
    }

    /// Counts one operation.
    pub fn record(&self, rec: &OpRecord) {
        let c = &self.counters;
        c.bytes.fetch_add(rec.moved, Relaxed);
        c.faults.fetch_add(u64::from(rec.fault_hit.is_some()), Relaxed);
        let timeouts = rec.findings.iter().filter(|f| f.kind == FindingKind::UninjectedTimeout).count() as u64;
        c.timeouts.fetch_add(timeouts, Relaxed);
        c.failures.fetch_add(rec.findings.len() as u64 - timeouts, Relaxed);
        self.bar.inc(1);
        if self.bar.position() % REFRESH_EVERY == 0 || !rec.findings.is_empty() {
            self.bar.set_message(self.counters_text());
        }
        if let Some(last) = &self.status {
            let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
            if last.elapsed() >= STATUS_EVERY {
                *last = Instant::now();
                eprintln!(
                    "ndma verify: {} after {:.0} s: {} operations · {}",
                    self.prefix,
                    self.started.elapsed().as_secs_f64(),
                    self.bar.position(),
                    self.counters_text()
                );
            }
        }
    }

    fn counters_text(&self) -> String {
        let c = &self.counters;
        format!(
            "{} · faults {} · uninjected timeouts {} · failures {}",
            fmt_size(c.bytes.load(Relaxed)),
            c.faults.load(Relaxed),
            c.timeouts.load(Relaxed),
            c.failures.load(Relaxed)
        )
    }

    /// Prints `text` on stderr without tearing the bar.
    pub fn eprint(&self, text: &str) {
        self.bar.suspend(|| eprintln!("{text}"));
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
