//! The zero-copy fault scenarios of `ndma faults`. Each maps a user buffer in a process entered on the
//! command's thread, runs requests the contract says how to end, checks exactly that (the error, the
//! completions in order, the bytes that must be right), and ends with the leak check: no frame pinned, nothing
//! queued, no completion held back.
//!
//! - `zc-hole`: a synchronous request over a buffer with an unmapped page in the middle fails with the partial
//!   pin's `-ENOMEM`; the next request succeeds.
//! - `zc-pin-fail` (V3): over a pin budget of 64 pages an async request's later pieces are deferred; the
//!   completion thread's remote pin of the first of them fails; the request completes with that errno, the
//!   next one with 0.
//! - `zc-hang` (V3): the queue hangs under the first of three async requests: its completion is `-ETIMEDOUT`
//!   and its other pieces are drained; the two behind it complete, and a sync request afterwards succeeds.
//! - `zc-exit` (V3): three async requests wait unpinned (pin budget 0) holding the process's address space;
//!   the process exits; each completes with `-ESRCH`; another process's request succeeds.
//! - `zc-cq-full` (V3): 2048 async requests and nobody consuming: 1024 completions fill the queue, 1024 wait
//!   in the driver's backlog; one more request is refused `-EBUSY` (the backlog is full); then all 2048 are
//!   taken, in order.

use std::time::Instant;

use ndma::zerocopy::{
    CqConsumer, NDMA_CTX_QUEUE_MAX_PINNED_PAGES, NDMA_H2D_COMPL_BACKLOG_MAX, NDMA_H2D_COMPL_QUEUE_CAPACITY,
};
use ndma::{NdmaError, NeuronDevice, PAGE_SIZE};
use ndma_emu::{EmuDevice, PinFault, PinPath, PlannedFault, Testbed};
use serde::Serialize;
use udma::Arch;

use super::{FaultsReport, Step};
use crate::cli::FaultScenario;
use crate::error::{errno_name, CliError, CliResult, OpContext};
use crate::util::output::Out;
use crate::util::report::Counters;
use crate::util::user::{Layout, Process, UserDir, UserWindow};
use crate::util::zc::{context_of, enable_override, expect_cqes, submit_async, take_cqes, wait_status};
pub use crate::util::zc::{Cqe, Leaks, Pins};

/// Pid of the scenarios' user process (a second process, where there is one, is the next).
const PID: u32 = 5150;
/// Pattern and placement seed.
const SEED: u64 = 0x2c;
/// Pages of a full piece.
const PIECE: u64 = ndma::zerocopy::NDMA_ZC_PAGES_PER_XFER;
/// `-ENOMEM`, `-ETIMEDOUT`, `-ESRCH`.
const ENOMEM: i32 = -udma::errno::ENOMEM;
const ETIMEDOUT: i64 = -110;
const ESRCH: i64 = -3;

/// What a full completion queue held (`zc-cq-full`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CqBacklog {
    /// Requests submitted.
    pub requests: u64,
    /// Submits refused `-EBUSY` (context queue full) and repeated.
    pub busy_submits: u64,
    /// Completions in the queue while nobody consumed.
    pub posted: u32,
    /// Completions held back in the driver's backlog meanwhile.
    pub backlog: usize,
    /// The errno of one more async request submitted then: `-EBUSY`, the backlog full.
    pub refused_errno: i32,
}

/// A zero-copy scenario in progress.
struct Zc<'a> {
    tb: &'a Testbed,
    dev: &'a NeuronDevice,
    emu: &'a EmuDevice,
    nc: u32,
    out: Out,
    steps: Vec<Step>,
}

impl Zc<'_> {
    /// Runs `f` as step `name`: prints its outcome and the ring counters it moved, and records it.
    fn step<T>(&mut self, name: &'static str, f: impl FnOnce(&Self) -> ndma::Result<T>) -> CliResult<ndma::Result<T>> {
        let before = self.dev.ring_stats(self.nc).op_ctx(|| "reading ring counters")?;
        let t0 = Instant::now();
        let r = f(self);
        let elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
        let s = self.dev.ring_stats(self.nc).op_ctx(|| "reading ring counters")?.since(&before);
        let outcome = match &r {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("{e} (errno {} {})", e.errno(), errno_name(e.errno())),
        };
        self.out.say(format_args!("{name}: {outcome} after {elapsed_ms:.3} ms"));
        self.out.say(format_args!(
            "  ring: pieces {}, descriptors {}, polls {}, timeouts {}, ring re-inits {}, completions {}",
            s.zc_pieces, s.descriptors, s.polls, s.timeouts, s.ring_resets, s.cqes
        ));
        self.steps.push(Step::new(self.out, name, &r, elapsed_ms, Counters::from(&s)));
        Ok(r)
    }

    /// Marks the last step verified.
    fn verified(&mut self) {
        if let Some(s) = self.steps.last_mut() {
            s.verified = true;
        }
    }

    /// A sync request of window bytes `range` of `w`.
    fn sync(&self, w: &UserWindow, range: std::ops::Range<u64>) -> ndma::Result<()> {
        self.dev.zerocopy_submit(self.nc, &[w.op(range)], &w.mc, 0, -1, w.to_device, 0, 0)
    }

    /// An async request `seq` of window bytes `range` of `w`, its `pieces` known.
    fn submit(&self, w: &UserWindow, range: std::ops::Range<u64>, seq: u64, pieces: u64) -> ndma::Result<()> {
        submit_async(self.dev, self.nc, &[w.op(range)], &w.mc, w.to_device, seq, pieces).map(|_| ())
    }

    /// Takes `want.len()` completions and checks they are exactly `want`, printing them.
    fn completions(&mut self, cq: &CqConsumer, want: &[Cqe]) -> CliResult<Vec<Cqe>> {
        let got = take_cqes(cq, want.len())?;
        expect_cqes(cq, &got, want)?;
        let list: Vec<String> = got.iter().take(4).map(ToString::to_string).collect();
        let more = if got.len() > 4 { format!(" … and {} more, in order", got.len() - 4) } else { String::new() };
        self.out.say(format_args!("  completions: {}{more}", list.join(" ")));
        Ok(got)
    }

    /// The leak check, printed; it must be clean.
    fn leaks(&self, what: &str) -> CliResult<Leaks> {
        let l = Leaks::check(&self.tb.system, self.dev, self.tb.emu.host())?;
        self.out.say(format_args!("  {}", l.line()));
        l.ensure_clean(what)?;
        Ok(l)
    }
}

/// What a scenario adds to the report.
#[derive(Default)]
struct Outcome {
    cqes: Option<Vec<Cqe>>,
    pins: Pins,
    cq_backlog: Option<CqBacklog>,
    leaks: Leaks,
    window_bytes: u64,
}

/// Runs zero-copy `scenario` on `tb`'s first device (inline engines, silicon budgets) and fills `report`.
///
/// # Errors
///
/// [`CliError::Usage`] for an async scenario on V2; set-up failures; [`CliError::Verify`] when the outcome is
/// not the expected one.
pub fn run(tb: &Testbed, scenario: FaultScenario, nc: u32, out: Out, report: &mut FaultsReport) -> CliResult {
    let (dev, emu) = tb.device(0);
    let arch = dev.dhal().arch();
    if scenario != FaultScenario::ZcHole && arch == Arch::V2 {
        return Err(CliError::Usage(format!(
            "{} needs async zero-copy, which V2 does not have (its rings have no completion-thread bit); run it \
             with --instance trn2.48xlarge",
            scenario.name()
        )));
    }
    let override_on = enable_override(dev, out);
    let mut z = Zc { tb, dev, emu, nc, out, steps: Vec::new() };
    let o = match scenario {
        FaultScenario::ZcHole => hole(&mut z)?,
        FaultScenario::ZcPinFail => pin_fail(&mut z)?,
        FaultScenario::ZcHang => hang(&mut z)?,
        FaultScenario::ZcExit => exit(&mut z)?,
        FaultScenario::ZcCqFull => cq_full(&mut z)?,
        FaultScenario::ResetWindow | FaultScenario::Hang => {
            return Err(CliError::Usage(format!("{} is not a zero-copy scenario", scenario.name())))
        }
    };
    report.copy_bytes = o.window_bytes;
    report.steps = z.steps;
    report.override_on = Some(override_on);
    report.cqes = o.cqes;
    report.pins = Some(o.pins);
    report.cq_backlog = o.cq_backlog;
    report.leak_check = Some(o.leaks);
    Ok(())
}

/// Fails with `what` unless `r` is exactly `want`.
fn expect_err(r: &ndma::Result<()>, want: &NdmaError, what: &str) -> CliResult {
    match r {
        Err(e) if e == want => Ok(()),
        other => Err(CliError::Verify(format!("{what}: expected {want} (errno {}), got {other:?}", want.errno()))),
    }
}

fn hole(z: &mut Zc<'_>) -> CliResult<Outcome> {
    const PAGES: u64 = 200;
    const HOLE: u64 = 100;
    let len = PAGES * PAGE_SIZE;
    let proc = Process::enter(z.tb.emu.host(), PID);
    let w = UserWindow::new(z.dev, z.emu, &proc.mm, UserDir::H2d, len, 0, Layout::Runs(4), SEED, &[HOLE], z.nc)?;
    z.out.say(format_args!(
        "user buffer: {PAGES} pages in runs of 4 frames at {:#x}, page {HOLE} unmapped (a hole); one synchronous \
         host→device request over all of it ({} pieces of up to {PIECE} pages)",
        w.va,
        PAGES.div_ceil(PIECE)
    ));
    let pins0 = proc.mm.pin_stats();
    let r = z.step("request over the hole", |z| z.sync(&w, 0..len))?;
    let want = NdmaError::Pin { va: w.va + HOLE * PAGE_SIZE, errno: ENOMEM };
    expect_err(&r, &want, "a request over a hole")?;
    z.out.say(
        "  the piece holding the hole pinned only the pages before it: the short pin was given back and the request \
         failed with -ENOMEM at the hole; the pieces already issued were waited for and released",
    );
    w.verify_parts(z.emu, "after the failed request", None)?;
    z.verified();
    z.out.say("  user buffer unchanged, device guards intact");
    z.leaks("after the failed request")?;
    let before_hole = HOLE * PAGE_SIZE;
    w.reset_dst(z.emu)?;
    let r = z.step("next request (the pages before the hole)", |z| z.sync(&w, 0..before_hole))?;
    r.op_ctx(|| "the request after the failed one")?;
    w.verify_parts(z.emu, "the next request", Some(0..before_hole))?;
    z.verified();
    z.out.say("  data verified byte-exact");
    let pins = Pins::between(&pins0, &proc.mm.pin_stats());
    z.out.say(format_args!("  {}", pins.line()));
    let leaks = z.leaks("at the end")?;
    Ok(Outcome { pins, leaks, window_bytes: len, ..Outcome::default() })
}

fn pin_fail(z: &mut Zc<'_>) -> CliResult<Outcome> {
    let first = 4 * PIECE * PAGE_SIZE;
    let len = first + PIECE * PAGE_SIZE;
    let proc = Process::enter(z.tb.emu.host(), PID);
    let w = UserWindow::new(z.dev, z.emu, &proc.mm, UserDir::H2d, len, 0, Layout::Scattered, SEED, &[], z.nc)?;
    let cq = CqConsumer::new(&z.dev.completion_queue(z.nc).op_ctx(|| "mapping the completion queue")?)
        .op_ctx(|| "mapping the completion queue")?;
    z.dev.set_zerocopy_pin_budget(PIECE);
    proc.mm.pin_faults().add(PinFault::Fail { path: Some(PinPath::Slow), nth: 0, errno: ENOMEM });
    z.out.say(format_args!(
        "pin budget {PIECE} pages: request 1 ({} pages, 4 pieces) pins its first piece at submit and queues the \
         other 3 unpinned, holding the address space; the next slow-path pin — the completion thread's remote pin \
         of piece 2 — is planned to fail with -ENOMEM",
        4 * PIECE
    ));
    let pins0 = proc.mm.pin_stats();
    let r = z.step("async request 1", |z| z.submit(&w, 0..first, 1, 4))?;
    r.op_ctx(|| "async request 1")?;
    let mut cqes =
        z.completions(&cq, &[Cqe { sequence_num: 1, compl_ret: i64::from(ENOMEM), context: context_of(1) }])?;
    let p = Pins::between(&pins0, &proc.mm.pin_stats());
    if (p.remote_calls, p.failed_calls) != (1, 1) {
        return Err(CliError::Verify(format!("expected exactly one remote pin, the failing one: {}", p.line())));
    }
    z.out.say("  the remote pin failed in the completion thread: the request's completion carries its errno and its other pieces were drained");
    let r = z.step("async request 2", |z| z.submit(&w, first..len, 2, 1))?;
    r.op_ctx(|| "async request 2")?;
    cqes.extend(z.completions(&cq, &[Cqe { sequence_num: 2, compl_ret: 0, context: context_of(2) }])?);
    wait_status(z.dev, z.nc, "the zero-copy queue did not empty", |s| s.contexts == 0)?;
    w.verify_parts(z.emu, "async request 2", Some(first..len))?;
    z.verified();
    z.out.say("  request 2 verified byte-exact; user buffer unchanged, device guards intact");
    z.dev.set_zerocopy_pin_budget(NDMA_CTX_QUEUE_MAX_PINNED_PAGES);
    let pins = Pins::between(&pins0, &proc.mm.pin_stats());
    z.out.say(format_args!("  {}", pins.line()));
    let leaks = z.leaks("at the end")?;
    Ok(Outcome { cqes: Some(cqes), pins, leaks, window_bytes: len, ..Outcome::default() })
}

fn hang(z: &mut Zc<'_>) -> CliResult<Outcome> {
    let page = PAGE_SIZE;
    let parts = [0..3 * PIECE * page, 3 * PIECE * page..4 * PIECE * page, 4 * PIECE * page..5 * PIECE * page];
    let len = parts[2].end;
    let (eng, qid) = z.dev.h2t_queue(z.nc).op_ctx(|| "choosing the H2T ring")?;
    let proc = Process::enter(z.tb.emu.host(), PID);
    let w = UserWindow::new(z.dev, z.emu, &proc.mm, UserDir::H2d, len, 0, Layout::Runs(3), SEED, &[], z.nc)?;
    let cq = CqConsumer::new(&z.dev.completion_queue(z.nc).op_ctx(|| "mapping the completion queue")?)
        .op_ctx(|| "mapping the completion queue")?;
    z.emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    z.out.say(format_args!(
        "fault plan: hang engine {eng} queue {qid} on its next work; then async requests 1 (3 pieces), 2 and 3 (1 \
         piece each)"
    ));
    let pins0 = proc.mm.pin_stats();
    // The completion thread may time out while a later submit waits for the ring lock: count from here.
    let before = z.dev.ring_stats(z.nc).op_ctx(|| "reading ring counters")?;
    for (seq, (name, pieces)) in
        [("async request 1", 3), ("async request 2", 1), ("async request 3", 1)].into_iter().enumerate()
    {
        let range = parts[seq].clone();
        let seq = seq as u64 + 1;
        z.step(name, |z| z.submit(&w, range, seq, pieces))?.op_ctx(|| name)?;
    }
    let want = [
        Cqe { sequence_num: 1, compl_ret: ETIMEDOUT, context: context_of(1) },
        Cqe { sequence_num: 2, compl_ret: 0, context: context_of(2) },
        Cqe { sequence_num: 3, compl_ret: 0, context: context_of(3) },
    ];
    let cqes = z.completions(&cq, &want)?;
    let s = wait_status(z.dev, z.nc, "the hung sequence was not drained", |s| s.contexts == 0)?;
    let moved = z.dev.ring_stats(z.nc).op_ctx(|| "reading ring counters")?.since(&before);
    z.out.say(format_args!(
        "  the hung request timed out in the completion thread (over the sequence: timeouts {}, ring re-inits {}): its \
         completion is -ETIMEDOUT, its other pieces were drained, the pieces in flight behind it were re-issued; \
         queue now {} contexts",
        moved.timeouts, moved.ring_resets, s.contexts
    ));
    if moved.timeouts == 0 || moved.ring_resets == 0 {
        return Err(CliError::Verify("expected the hang to time out and re-initialise the ring".into()));
    }
    w.verify_parts(z.emu, "requests 2 and 3", parts[1..].iter().cloned())?;
    z.verified();
    z.out.say("  requests 2 and 3 verified byte-exact; user buffer unchanged, device guards intact");
    w.reset_dst(z.emu)?;
    let r = z.step("next request (sync, over all of it)", |z| z.sync(&w, 0..len))?;
    r.op_ctx(|| "the request after the hang")?;
    w.verify(z.emu, "the request after the hang")?;
    z.verified();
    z.out.say("  the device is fine: verified byte-exact");
    let pins = Pins::between(&pins0, &proc.mm.pin_stats());
    z.out.say(format_args!("  {}", pins.line()));
    let leaks = z.leaks("at the end")?;
    Ok(Outcome { cqes: Some(cqes), pins, leaks, window_bytes: len, ..Outcome::default() })
}

fn exit(z: &mut Zc<'_>) -> CliResult<Outcome> {
    let part = PIECE * PAGE_SIZE;
    let len = 3 * part;
    let proc = Process::enter(z.tb.emu.host(), PID);
    let w = UserWindow::new(z.dev, z.emu, &proc.mm, UserDir::D2h, len, 0, Layout::Scattered, SEED, &[], z.nc)?;
    let cq = CqConsumer::new(&z.dev.completion_queue(z.nc).op_ctx(|| "mapping the completion queue")?)
        .op_ctx(|| "mapping the completion queue")?;
    z.dev.set_zerocopy_pin_budget(0);
    z.out.say(format_args!(
        "pin budget 0: three async device→host requests of {PIECE} pages each are queued unpinned, each holding \
         process {PID}'s address space"
    ));
    let pins0 = proc.mm.pin_stats();
    for (i, name) in ["async request 1", "async request 2", "async request 3"].into_iter().enumerate() {
        let seq = i as u64 + 1;
        z.step(name, |z| z.submit(&w, i as u64 * part..(i as u64 + 1) * part, seq, 1))?.op_ctx(|| name)?;
    }
    let s = z.dev.zerocopy_status(z.nc).op_ctx(|| "reading the zero-copy state")?;
    if (s.contexts, s.pinned_pages) != (3, 0) {
        return Err(CliError::Verify(format!("expected 3 unpinned requests in the queue: {s:?}")));
    }
    z.out.say("  in flight: 3 contexts, 0 pages pinned");
    proc.mm.exit();
    z.out.say(format_args!("process {PID} exits: its page table is torn down while the requests are in flight"));
    z.dev.set_zerocopy_pin_budget(NDMA_CTX_QUEUE_MAX_PINNED_PAGES);
    let want: Vec<Cqe> =
        (1..=3).map(|seq| Cqe { sequence_num: seq, compl_ret: ESRCH, context: context_of(seq) }).collect();
    let cqes = z.completions(&cq, &want)?;
    wait_status(z.dev, z.nc, "the exited process's requests were not released", |s| s.contexts == 0)?;
    z.out.say("  the budget back, the completion thread's remote pins found the process gone: each request completed with -ESRCH, nothing was used after free");
    w.verify_source(z.emu, "after the exit")?;
    let pins = Pins::between(&pins0, &proc.mm.pin_stats());
    z.out.say(format_args!("  {}", pins.line()));
    z.leaks("after the exit")?;
    let other = Process::enter(z.tb.emu.host(), PID + 1);
    let w2 = UserWindow::new(z.dev, z.emu, &other.mm, UserDir::H2d, part, 0, Layout::Scattered, SEED, &[], z.nc)?;
    let r = z.step("a request of another process (sync)", |z| z.sync(&w2, 0..part))?;
    r.op_ctx(|| "the other process's request")?;
    w2.verify(z.emu, "the other process's request")?;
    z.verified();
    z.out.say(format_args!("  process {} moved its buffer: verified byte-exact", PID + 1));
    let leaks = z.leaks("at the end")?;
    Ok(Outcome { cqes: Some(cqes), pins, leaks, window_bytes: len, ..Outcome::default() })
}

fn cq_full(z: &mut Zc<'_>) -> CliResult<Outcome> {
    // Enough to fill the queue and the backlog behind it.
    const REQUESTS: u64 = NDMA_H2D_COMPL_QUEUE_CAPACITY as u64 + NDMA_H2D_COMPL_BACKLOG_MAX as u64;
    const BYTES: u64 = 64;
    let len = REQUESTS * BYTES;
    let proc = Process::enter(z.tb.emu.host(), PID);
    let w = UserWindow::new(z.dev, z.emu, &proc.mm, UserDir::H2d, len, 0, Layout::Scattered, SEED, &[], z.nc)?;
    let cq = CqConsumer::new(&z.dev.completion_queue(z.nc).op_ctx(|| "mapping the completion queue")?)
        .op_ctx(|| "mapping the completion queue")?;
    z.out.say(format_args!(
        "{REQUESTS} async requests of {BYTES} bytes and no consumer: the completion queue holds \
         {NDMA_H2D_COMPL_QUEUE_CAPACITY}"
    ));
    let pins0 = proc.mm.pin_stats();
    let mut busy = 0;
    let r = z.step("2048 async requests, nobody consuming", |z| {
        (1..=REQUESTS).try_for_each(|seq| {
            let at = (seq - 1) * BYTES;
            busy += submit_async(z.dev, z.nc, &[w.op(at..at + BYTES)], &w.mc, true, seq, 1)?;
            Ok(())
        })
    })?;
    r.op_ctx(|| "the async requests")?;
    z.out.say(format_args!(
        "  {busy} submits were refused -EBUSY while the context queue was full (the async path never waits) and \
         repeated"
    ));
    let s = wait_status(z.dev, z.nc, "the completion thread did not retire every request", |s| s.contexts == 0)?;
    let posted = cq.len();
    z.out.say(format_args!(
        "  every request retired: {posted} completions in the queue, {} held back in the driver's backlog (the \
         producer never waits for room)",
        s.backlog
    ));
    let want_backlog = (REQUESTS - u64::from(NDMA_H2D_COMPL_QUEUE_CAPACITY)) as usize;
    if posted != NDMA_H2D_COMPL_QUEUE_CAPACITY || s.backlog != want_backlog {
        return Err(CliError::Verify(format!(
            "expected a full queue ({NDMA_H2D_COMPL_QUEUE_CAPACITY}) and {want_backlog} backlogged: {posted} and {}",
            s.backlog
        )));
    }
    let one_more = REQUESTS + 1;
    let r = z.step("one more async request, the backlog full", |z| {
        z.dev.zerocopy_submit(z.nc, &[w.op(0..BYTES)], &w.mc, 0, -1, true, one_more, context_of(one_more))
    })?;
    let refused_errno = match r {
        Err(e @ NdmaError::CompletionBacklogFull { .. }) => e.errno(),
        other => {
            return Err(CliError::Verify(format!(
                "a request with {NDMA_H2D_COMPL_BACKLOG_MAX} completions held back must be refused -EBUSY: {other:?}"
            )))
        }
    };
    z.out.say("  refused: the driver holds at most a queue's worth of completions behind a full queue");
    let full = CqBacklog { requests: REQUESTS, busy_submits: busy, posted, backlog: s.backlog, refused_errno };
    let want: Vec<Cqe> =
        (1..=REQUESTS).map(|seq| Cqe { sequence_num: seq, compl_ret: 0, context: context_of(seq) }).collect();
    z.out.say("a consumer takes the completions:");
    let cqes = z.completions(&cq, &want)?;
    wait_status(z.dev, z.nc, "the backlog was not posted", |s| s.backlog == 0)?;
    w.verify(z.emu, "the 2048 requests")?;
    z.verified();
    z.out.say("  every completion delivered once, in order; data verified byte-exact");
    let pins = Pins::between(&pins0, &proc.mm.pin_stats());
    z.out.say(format_args!("  {}", pins.line()));
    let leaks = z.leaks("at the end")?;
    Ok(Outcome { cqes: Some(cqes), pins, cq_backlog: Some(full), leaks, window_bytes: len })
}
