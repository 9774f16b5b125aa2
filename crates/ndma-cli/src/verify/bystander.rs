//! Bystanders (`--bystanders`): an unfaulted async copy in flight on a faulted operation's ring, so the op
//! layer's recovery of the *other* transfers on a failed ring (`RingGuard::recover`: re-initialise the
//! queue, complete what had landed, re-stage the rest, abort what reads what it writes) meets the campaign.
//!
//! A faulted operation of the classic paths (`classic-sync`, `memset`, `copy-descriptors`; an `async` chain
//! needs the ring's two async contexts itself, and a zero-copy operation's faults are pin faults, which never
//! reach the ring) may get one bystander, drawn with it: a copy of at most one batch on the same ring, or —
//! one in four — a copy over its own source (one descriptor, the destination a shift into the source), which
//! must never run twice. The sequence, under the device gate held exclusively:
//!
//! 1. the ring's queue is paused (its enable bits cleared, a register write the model honours) and the
//!    bystander is staged (`memcpy_mc_async` from `NONE`): its descriptors are handed over, none fetched;
//! 2. the fault is armed — after the bystander's doorbells, so a lost marker arms on the faulted operation's
//!    batch, and a corruption planned for its `n`th fetch is planned for the `n + k`th, `k` the bystander's
//!    pairs, which the engine fetches first;
//! 3. the queue is resumed and the faulted operation runs; then the fault is observed and the bystander
//!    waited for.
//!
//! What becomes of the bystander follows from the fault, and is judged strictly:
//!
//! | fault | the bystander |
//! |---|---|
//! | `hang` | hung with the queue (the hang takes the first work claimed: the bystander's): re-staged exactly once by the recovery after the faulted operation's timeout, then `Ok` byte-exact — or, reading what it writes, aborted (`Aborted` from its wait, no replay), its chunk holding for each byte the original or what one run leaves |
//! | `reset_window` (V2, met) | hung in the window with the queue: replayed with each retry (at least once), `Ok` — or aborted as above; when the faulted operation itself started after the window, the op layer does not retry (its gate looks at the waited operation's start): the operation times out and the recovery replays the bystander exactly once |
//! | any other | ran before the faulted operation's batch: completed in place, `Ok` byte-exact, never replayed |
//!
//! Replays are counted by the ring (`replays`): those of the bystander are the ring's replays less the
//! faulted operation's own (one per V2 retry, which replays the batch it waited for). Aborts are counted by
//! the ring too (`aborts`) and must be exactly the bystander's. Its work is part of the faulted operation's
//! measured work (the counters are read before it is staged and after it was waited for).

use ndma::{mc_pair_to_nc, CtxHandle, NdmaError, StatsSnapshot};
use rand::RngExt;
use serde::Serialize;
use udma::{regs, Direction, Mmio};

use super::buffers::Side;
use super::check::{self, Clues, Expect, Region};
use super::expect::{self, Window};
use super::fault::{FaultKind, Observed};
use super::op::{Detail, Draw, OpSpec, Segment};
use super::path::{PathKind, Prepared, SegmentMem};
use super::record::{FindingKind, OpRecord};
use super::rng::derive;
use super::size::{self, DESC};
use crate::error::{CliError, CliResult, OpContext};
use ndma_emu::test_utils::Dir;

/// Sizes of a copy over its own source: one descriptor at most, so what one run leaves is defined (a
/// descriptor reads its source before it writes).
const SELF_COPY_SIZES: [u64; 8] = [1, 2, 3, 4095, 4096, 4097, 65535, 65536];

/// One bystander, as drawn with its faulted operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Bystander {
    /// The direction.
    #[serde(serialize_with = "ser_dir")]
    pub dir: Dir,
    /// The copy (on the faulted operation's ring).
    pub segment: Segment,
    /// A copy over its own source: the destination starts this many bytes into the source window (one
    /// chunk, `segment.src_off` the window's offset).
    pub self_copy: Option<u64>,
}

fn ser_dir<S: serde::Serializer>(d: &Dir, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(d.name())
}

/// Can a faulted operation of `path` with a fault of `kind` have a bystander?
pub fn applies(path: PathKind, kind: FaultKind) -> bool {
    !kind.is_pin_fault() && matches!(path, PathKind::ClassicSync | PathKind::Memset | PathKind::CopyDescriptors)
}

impl Bystander {
    /// Draws a bystander on NC `nc`'s ring.
    pub fn draw(d: &mut Draw<'_>, nc: u32) -> Bystander {
        if d.rng.random_bool(0.25) {
            let dir = if d.rng.random_bool(0.5) { Dir::H2h } else { Dir::D2d };
            let size = SELF_COPY_SIZES[d.rng.random_range(0..SELF_COPY_SIZES.len())];
            let shift = d.rng.random_range(0..size);
            let off = size::draw_offset(&mut d.rng);
            let segment = Segment { nc, src_nc: nc, dst_nc: nc, size, src_off: off, dst_off: off };
            return Bystander { dir, segment, self_copy: Some(shift) };
        }
        let dir = Dir::ALL[d.rng.random_range(0..Dir::ALL.len())];
        // Small (at most two descriptors and a bit): the faulted operation's wait budget covers it too.
        let size = size::draw_small(&mut d.rng);
        Bystander { dir, segment: d.segment(dir, nc, size), self_copy: None }
    }

    /// Descriptor pairs it hands the engine: its data pairs and the marker.
    pub fn pairs(&self) -> u64 {
        self.segment.size.div_ceil(DESC) + 1
    }

    /// Can the op layer run it again after a re-initialisation (it does not read what it writes)?
    pub fn replayable(&self) -> bool {
        self.self_copy.is_none()
    }

    /// `h2d 4097 B (src NC 1 +3, dst NC 0 +0)` or `self-copy d2d 4096 B shifted 12 (+0)`.
    pub fn describe(&self) -> String {
        let s = &self.segment;
        match self.self_copy {
            Some(shift) => format!("self-copy {} {} B shifted {shift} (+{})", self.dir.name(), s.size, s.src_off),
            None => format!(
                "{} {} B (src NC {} +{}, dst NC {} +{})",
                self.dir.name(),
                s.size,
                s.src_nc,
                s.src_off,
                s.dst_nc,
                s.dst_off
            ),
        }
    }

    /// The spec of it as an operation of its own (its memory and checks are an ordinary copy segment's).
    fn as_op(&self, of: &OpSpec) -> OpSpec {
        OpSpec {
            index: of.index,
            seed: derive(of.seed, 0xb157_a4de),
            path: PathKind::ClassicSync,
            dir: self.dir,
            device: of.device,
            segments: vec![self.segment],
            detail: Detail::Classic { idiomatic: false },
            fault: None,
            bystander: None,
        }
    }
}

/// What became of a bystander.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// Landed before any recovery: done in place, never run again.
    Completed,
    /// Re-staged by a recovery (or a V2 retry) and completed.
    Replayed,
    /// Abandoned by a recovery: its wait reported `Aborted`.
    Aborted,
}

impl Fate {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fate::Completed => "completed",
            Fate::Replayed => "replayed",
            Fate::Aborted => "aborted",
        }
    }
}

/// A bystander staged on a paused queue.
pub struct Staged {
    by: Bystander,
    spec: OpSpec,
    /// Its one segment's memory (a copy over its own source: `dst` is its one chunk, `src` none).
    prep: Prepared,
    handle: CtxHandle,
    cfg: [(u64, u32); 2],
    resumed: bool,
}

/// The queue of NC `nc`'s H2T ring: both rings' `cfg` register offsets.
fn cfg_regs(bed: super::path::Bed<'_>, nc: u32) -> CliResult<[u64; 2]> {
    let (eng, qid) = bed.dev.h2t_queue(nc).op_ctx(|| format!("the H2T queue of NC {nc}"))?;
    let base = bed.dev.dhal().engine_base(eng).ok_or_else(|| CliError::Usage(format!("engine {eng} has no base")))?;
    Ok([Direction::Tx, Direction::Rx].map(|dir| regs::queue_base(base, dir, qid) + regs::q::CFG))
}

/// Prepares `op`'s bystander, pauses its ring's queue and stages it there.
///
/// # Errors
///
/// Allocation, back-door and register failures, and the op layer's refusal to stage it (the queue is
/// resumed then).
pub fn stage(bed: super::path::Bed<'_>, op: &OpSpec, by: Bystander) -> CliResult<Staged> {
    let spec = by.as_op(op);
    let s = by.segment;
    let mem = match by.self_copy {
        Some(_) => {
            let side = Side::alloc(bed.dev, by.dir.src_host(), s.nc, s.src_off, s.size + s.size)?;
            let (pattern, _) = super::path::patterns(&spec, 0);
            side.fill(bed.emu, pattern)?;
            SegmentMem { src: None, dst: side, src_pattern: pattern, poison: pattern }
        }
        None => Prepared::copy_segment(bed, &spec, 0, by.dir)?,
    };
    let prep = Prepared { segments: vec![mem], ..Prepared::default() };
    let offs = cfg_regs(bed, s.nc)?;
    let cfg = offs.map(|o| (o, bed.emu.read32(o)));
    for (o, _) in cfg {
        bed.emu.write32(o, regs::Q_CFG_RESET_VALUE);
    }
    let mut staged = Staged { by, spec, prep, handle: CtxHandle::None, cfg, resumed: false };
    let (src, dst) = staged.chunks();
    let (src_off, dst_off) = staged.offsets();
    match bed.dev.memcpy_mc_async(src, dst, src_off, dst_off, s.size, 0, CtxHandle::None) {
        Ok(h) => {
            staged.handle = h;
            Ok(staged)
        }
        Err(e) => {
            staged.resume(bed);
            Err(CliError::op(format!("staging the bystander {}", by.describe()), e))
        }
    }
}

impl Staged {
    fn mem(&self) -> &SegmentMem {
        &self.prep.segments[0]
    }

    /// Source and destination chunks.
    fn chunks(&self) -> (&std::sync::Arc<ndma::MemChunk>, &std::sync::Arc<ndma::MemChunk>) {
        let dst = &self.mem().dst.chunk;
        (self.mem().src.as_ref().map_or(dst, |s| &s.chunk), dst)
    }

    /// Source and destination window offsets in their chunks.
    fn offsets(&self) -> (u64, u64) {
        match self.by.self_copy {
            Some(shift) => (self.mem().dst.lead, self.mem().dst.lead + shift),
            None => (self.mem().src.as_ref().map_or(0, |s| s.lead), self.mem().dst.lead),
        }
    }

    /// Descriptor pairs the engine fetches for it before the faulted operation's.
    pub fn pairs(&self) -> u64 {
        self.by.pairs()
    }

    /// Resumes the queue (once).
    pub fn resume(&mut self, bed: super::path::Bed<'_>) {
        if !self.resumed {
            for (o, v) in self.cfg {
                bed.emu.write32(o, v);
            }
            self.resumed = true;
        }
    }

    /// After the faulted operation and its fault's observation: waits for the bystander and judges it.
    /// `before`: the ring's counters before it was staged; `op_retries`: the V2 retries of the faulted
    /// operation (each replayed the batch it waited for, besides the bystander).
    pub fn finish(
        mut self,
        bed: super::path::Bed<'_>,
        before: Option<&StatsSnapshot>,
        observed: Option<&Observed>,
        op_retries: u64,
        rec: &mut OpRecord,
    ) {
        self.resume(bed);
        let (src, dst) = self.chunks();
        let nc = mc_pair_to_nc(src, dst);
        let result = bed.dev.wait_handle(nc, self.handle);
        let what = format!("bystander {}", self.by.describe());
        let after = bed.dev.ring_stats(nc).ok();
        let delta = |f: fn(&StatsSnapshot) -> u64| match (after.as_ref(), before) {
            (Some(a), Some(b)) => f(a).saturating_sub(f(b)),
            _ => 0,
        };
        let replays = delta(|s| s.replays).saturating_sub(op_retries);
        let aborts = delta(|s| s.aborts);
        let fate = match &result {
            Ok(()) if replays > 0 => Some(Fate::Replayed),
            Ok(()) => Some(Fate::Completed),
            Err(NdmaError::Aborted(_)) => Some(Fate::Aborted),
            Err(e) if expect::is_timeout(e) => {
                rec.find(
                    FindingKind::UninjectedTimeout,
                    format!("{what}: {e} (errno {}): a timeout nobody injected", e.errno()),
                );
                None
            }
            Err(e) => {
                rec.find(FindingKind::Unexpected, format!("{what}: expected success or Aborted, got {e}"));
                None
            }
        };
        rec.bystander = fate;
        if result.is_err() {
            rec.leak_check_due = true;
        }
        let want_aborts = u64::from(fate == Some(Fate::Aborted));
        if aborts != want_aborts {
            rec.find(
                FindingKind::Accounting,
                format!("{what}: the ring counted {aborts} aborts, the bystander {want_aborts}"),
            );
        }
        if let Some(fate) = fate {
            if let Err(why) = self.judge_fate(fate, replays, observed, bed.dev.dhal().retry_memcpy(), rec) {
                rec.find(FindingKind::Unexpected, format!("{what}: {why}"));
            }
        }
        let window = match fate {
            Some(Fate::Aborted) | None => Window::Partial,
            Some(_) => Window::Written,
        };
        match self.check(bed, window) {
            Ok(ms) => {
                for m in ms {
                    rec.find(FindingKind::Corrupt, format!("{what}: {m}"));
                }
            }
            Err(e) => rec.find(FindingKind::Setup, format!("{what}: reading it back: {e}")),
        }
    }

    /// Is `fate` (with `replays` of the bystander counted) what the operation's fault calls for?
    fn judge_fate(
        &self,
        fate: Fate,
        replays: u64,
        observed: Option<&Observed>,
        v2: bool,
        rec: &OpRecord,
    ) -> Result<(), String> {
        let kind = rec.spec.fault.map(|f| f.kind);
        let hung = match kind {
            Some(FaultKind::Hang) => true,
            Some(FaultKind::ResetWindow) => v2 && observed.is_some_and(|o| o.hit),
            _ => false,
        };
        let (want, exact) = match (hung, self.by.replayable()) {
            (false, _) => (Fate::Completed, true),
            (true, false) => (Fate::Aborted, true),
            // A V2 retry replays it once per retry; a hang's recovery once (also the recovery after a timeout
            // the window's hang of the bystander caused, with no retry: `Observed::hung_ahead`).
            (true, true) => (Fate::Replayed, kind == Some(FaultKind::Hang) || observed.is_some_and(|o| o.hung_ahead)),
        };
        let want_replays = u64::from(want == Fate::Replayed);
        if fate != want {
            return Err(format!(
                "it was {} ({replays} replays), the fault ({}) calls for {}",
                fate.name(),
                kind.map_or("none", FaultKind::name),
                want.name()
            ));
        }
        if exact && replays != want_replays || !exact && replays < want_replays {
            return Err(format!("it was replayed {replays} times, {want_replays} expected"));
        }
        Ok(())
    }

    /// Checks its bytes: the window as `w` says, the guards and (a separate source) the source.
    fn check(&self, bed: super::path::Bed<'_>, w: Window) -> CliResult<Vec<String>> {
        let Some(shift) = self.by.self_copy else {
            return super::exec::check_segment(bed, &self.spec, &self.prep, 0, w, None);
        };
        // One chunk holding pattern `p` at its offsets; one run leaves the window's first `size` bytes at
        // `lead + shift`. Each byte is that or (a run that did not happen) the original.
        let side = &self.mem().dst;
        let p = self.mem().src_pattern;
        let size = self.by.segment.size;
        let at = side.lead + shift;
        let clues = Clues { poison: None, source: Some((p, side.total())) };
        let mut out = Vec::new();
        let regions = [
            (
                Region { name: "self-copy: before its destination", off: 0, len: at },
                Expect::Pattern { pattern: p, at: 0 },
                None,
            ),
            (
                Region { name: "self-copy: its destination", off: at, len: size },
                Expect::Pattern { pattern: p, at: side.lead },
                (w != Window::Written).then_some(p),
            ),
            (
                Region { name: "self-copy: after its destination", off: at + size, len: side.total() - at - size },
                Expect::Pattern { pattern: p, at: at + size },
                None,
            ),
        ];
        for (r, e, or) in regions {
            if let Some(m) = check::region(bed.emu, &side.chunk, r, e, or, clues)? {
                out.push(m.to_string());
            }
        }
        Ok(out)
    }
}
