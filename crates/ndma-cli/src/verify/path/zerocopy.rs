//! Zero-copy: `zerocopy_submit` of one request between a user buffer and a device chunk, synchronous
//! (sequence number 0: done when the call returns) or async (queued; done when its one completion arrives on
//! the ring's completion queue).
//!
//! The user buffer is a fresh address space entered on the calling thread, mapped as one guard page, the
//! window at a drawn page offset, and guard bytes to the end of its last page (at least [`GUARD`]), with its
//! frames laid out contiguous, scattered or in runs. A source is [`Pattern::Source`] at its own offsets (map
//! offsets for the user buffer), a destination [`Pattern::Poison`]; after the request every mapped byte of both
//! sides is checked.
//!
//! Faults of this path are the pin faults: a hole (an unmapped page) in the window, the `n`th pin call
//! failing on the fast path and then on the slow path it falls back to, or the `n`th fast pin coming back short (which the op layer retries on the slow path). An async
//! request accepted by `zerocopy_submit` must produce exactly one completion — its sequence number, its
//! context, 0 or the errno of its first failure — and nothing else may arrive.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ndma::zerocopy::{calc_pin_size, CqConsumer, NDMA_ZC_PAGES_PER_XFER, NEURON_DMA_H2T_DEFAULT_QID};
use ndma::{BatchOp, NdmaError, PAGE_SIZE};
use ndma_emu::user::EnterGuard;
use ndma_emu::{AddressSpace, MapSpec, PinFault, PinPath, Placement};
use rand::RngExt;

use super::{patterns, Bed, Drawn, Prepared, Ran, SegmentMem};
use crate::error::{CliError, CliResult};
use crate::util::zc::{plan_request, PlanTotals};
use crate::verify::buffers::{with_scratch, Side, BLOCK, GUARD};
use crate::verify::check::{self, Clues, Expect, Region};
use crate::verify::expect::Window;
use crate::verify::fault::{FaultKind, FaultSpec};
use crate::verify::op::{Detail, Draw, OpSpec, Segment, ZcDraw, ZcLayout};
use crate::verify::pattern::Pattern;
use crate::verify::plan::RingWork;
use crate::verify::rng::{derive, OpRng};
use crate::verify::size::BATCH_EDGES;
use ndma_emu::test_utils::Dir;

/// The pid of the campaign's zero-copy processes.
pub const ZC_PID: u32 = 4343;
/// The errno an injected pin failure returns (`-EIO`: neither of a hole's).
pub const PIN_FAIL_ERRNO: i32 = -5;
/// `-ENOMEM`: a partial pin (a hole past the first page of a piece).
pub const ENOMEM: i32 = -12;
/// `-EFAULT`: nothing pinned (a hole at the first page of a piece).
pub const EFAULT: i32 = -14;
/// How long an accepted async request may take to complete before its completion counts as lost. Nothing in
/// the campaign stalls the completion thread, so reaching it is a bug (reported, never retried).
const CQE_LIMIT: Duration = Duration::from_secs(60);
/// Largest zero-copy window drawn: the ordinary sizes, and from the large classes (`--big-rate`) up to the
/// largest batch edge — about 500 pieces, enough for one async request to fill its ring (which a classic copy
/// on the same NC must then make room in).
const MAX_BYTES: u64 = BATCH_EDGES[BATCH_EDGES.len() - 1];

pub(super) fn draw(d: &mut Draw<'_>, nc: u32, is_async: bool) -> Drawn {
    let dir = if d.rng.random_bool(0.5) { Dir::H2d } else { Dir::D2h };
    let size = d.size().clamp(1, MAX_BYTES);
    let page_off = crate::verify::size::draw_offset(&mut d.rng);
    let dev_off = crate::verify::size::draw_offset(&mut d.rng);
    let layout = match d.rng.random_range(0..3u32) {
        0 => ZcLayout::Contiguous,
        1 => ZcLayout::Scattered,
        _ => ZcLayout::Runs(d.rng.random_range(1..=8u32)),
    };
    let segment = Segment { nc, src_nc: nc, dst_nc: nc, size, src_off: page_off, dst_off: dev_off };
    Drawn { dir, segments: vec![segment], detail: Detail::ZeroCopy(ZcDraw { is_async, layout }) }
}

/// The pieces a request of `size` bytes starting at page offset `off` is cut into (FACTS §5.4): for each, its
/// first window page and its pages.
pub fn pieces(off: u64, size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    // `host`: offset from the start of the window's first page.
    let (mut host, mut remaining, mut offset) = (off % PAGE_SIZE, size, off % PAGE_SIZE);
    let mut pin_size = calc_pin_size(remaining + offset);
    while remaining > 0 {
        let n = (pin_size - offset).min(remaining);
        out.push(((host - offset) / PAGE_SIZE, pin_size.div_ceil(PAGE_SIZE)));
        host += n;
        remaining -= n;
        offset = 0;
        pin_size = pin_size.min(remaining);
    }
    out
}

/// A pin fault for the operation `spec` (its size may grow so a short pin has pages to cut).
pub fn draw_fault(rng: &mut OpRng, kind: FaultKind, spec: &mut OpSpec) -> FaultSpec {
    let is_async = matches!(spec.detail, Detail::ZeroCopy(ZcDraw { is_async: true, .. }));
    let s = &mut spec.segments[0];
    if kind == FaultKind::ShortPin && s.size + s.src_off < 2 * PAGE_SIZE + 1 {
        s.size = 2 * PAGE_SIZE + 1;
    }
    // Half the async hole and pin failures get several pieces, so the fault may fall in a piece the
    // completion thread pins (see `run`) and come back as the completion's errno.
    if is_async && kind != FaultKind::ShortPin && rng.random_bool(0.5) {
        s.size = 3 * NDMA_ZC_PAGES_PER_XFER * PAGE_SIZE + rng.random_range(1..=PAGE_SIZE);
    }
    let p = pieces(s.src_off, s.size);
    let pages = (s.src_off + s.size).div_ceil(PAGE_SIZE);
    let param = match kind {
        FaultKind::Hole => rng.random_range(0..pages),
        FaultKind::PinFail => rng.random_range(0..p.len() as u64),
        // A piece of at least two pages, so one page is short.
        _ => {
            let multi: Vec<u64> = (0..p.len() as u64).filter(|&i| p[i as usize].1 >= 2).collect();
            multi[rng.random_range(0..multi.len())]
        }
    };
    FaultSpec { kind, param, all_engines: false }
}

/// The errno a request of `spec` must fail with under its pin fault, if it must fail: a hole at the first
/// page of its piece pins nothing there (`-EFAULT`, the page's own error), a hole further in is a partial pin
/// (`-ENOMEM`); an injected pin failure returns its errno.
pub fn pin_errno(spec: &OpSpec) -> Option<i32> {
    let f = spec.fault?;
    let s = spec.segments[0];
    match f.kind {
        FaultKind::Hole if pieces(s.src_off, s.size).iter().any(|&(first, _)| first == f.param) => Some(EFAULT),
        FaultKind::Hole => Some(ENOMEM),
        FaultKind::PinFail => Some(PIN_FAIL_ERRNO),
        _ => None,
    }
}

/// The piece `spec`'s pin fault falls in (a hole: the piece holding its page; a pin failure: its piece).
fn fault_piece(spec: &OpSpec) -> Option<usize> {
    let f = spec.fault?;
    let s = spec.segments[0];
    let p = pieces(s.src_off, s.size);
    match f.kind {
        FaultKind::Hole => p.iter().rposition(|&(first, _)| first <= f.param),
        FaultKind::PinFail => Some(f.param as usize),
        _ => None,
    }
}

/// Restores the device's pin budget when dropped.
struct BudgetGuard<'a> {
    dev: &'a ndma::NeuronDevice,
    was: u64,
}

impl Drop for BudgetGuard<'_> {
    fn drop(&mut self) {
        self.dev.set_zerocopy_pin_budget(self.was);
    }
}

/// The user side of a zero-copy operation.
pub struct UserMem {
    /// The process's address space.
    pub mm: Arc<AddressSpace>,
    _enter: EnterGuard,
    /// First mapped address (the guard page).
    pub map_va: u64,
    /// Bytes mapped, holes included.
    pub map_len: u64,
    /// Map offset of the window's first byte.
    pub win: u64,
    /// Map pages left unmapped.
    pub holes: Vec<u64>,
    /// Its pattern: the source pattern (h2d) or the poison (d2h), at map offsets.
    pub pattern: Pattern,
}

impl std::fmt::Debug for UserMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserMem")
            .field("map_va", &self.map_va)
            .field("map_len", &self.map_len)
            .field("win", &self.win)
            .field("holes", &self.holes)
            .finish_non_exhaustive()
    }
}

impl UserMem {
    /// The mapped parts of map offsets `[off, off + len)`.
    fn mapped(&self, off: u64, len: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let (mut at, end) = (off, off + len);
        while at < end {
            let page = at / PAGE_SIZE;
            let next = ((page + 1) * PAGE_SIZE).min(end);
            if !self.holes.contains(&page) {
                match out.last_mut() {
                    Some((s, l)) if *s + *l == at => *l += next - at,
                    _ => out.push((at, next - at)),
                }
            }
            at = next;
        }
        out
    }

    /// The frames of the window's pages that are mapped.
    pub fn frames(&self) -> Vec<u64> {
        let pages = (self.map_len / PAGE_SIZE) as usize;
        self.mm.frames_of(self.map_va, pages).into_iter().flatten().collect()
    }

    fn fill(&self) -> CliResult {
        for (start, len) in self.mapped(0, self.map_len) {
            with_scratch(|buf| {
                let mut done = 0u64;
                while done < len {
                    let n = (len - done).min(BLOCK as u64) as usize;
                    self.pattern.fill(start + done, &mut buf[..n]);
                    self.mm.write(self.map_va + start + done, &buf[..n]).map_err(|e| mm_err("writing", &e))?;
                    done += n as u64;
                }
                Ok::<(), CliError>(())
            })?;
        }
        Ok(())
    }
}

fn mm_err(what: &str, e: &ndma_emu::MmError) -> CliError {
    crate::util::user::mm_err(format!("{what} the user buffer"), e)
}

pub(super) fn prepare(bed: Bed<'_>, spec: &OpSpec) -> CliResult<Prepared> {
    let Detail::ZeroCopy(zd) = spec.detail else { unreachable!("a zero-copy operation has its details") };
    let s = spec.segments[0];
    let (src_pattern, poison) = patterns(spec, 0);
    let to_device = spec.dir == Dir::H2d;
    let mm = AddressSpace::new(bed.emu.host(), ZC_PID);
    let enter = mm.enter();
    let win = PAGE_SIZE + s.src_off;
    let map_len = (win + s.size + GUARD).next_multiple_of(PAGE_SIZE);
    let holes: Vec<u64> = match spec.fault {
        Some(f) if f.kind == FaultKind::Hole => vec![win / PAGE_SIZE + f.param],
        _ => Vec::new(),
    };
    let seed = derive(spec.seed, 0x2c);
    let placement = match zd.layout {
        ZcLayout::Contiguous => Placement::Contiguous,
        ZcLayout::Scattered => Placement::Scattered { seed },
        ZcLayout::Runs(k) => Placement::Runs { k: k as usize, seed },
    };
    let pages = (map_len / PAGE_SIZE) as usize;
    let map = MapSpec::new(pages, placement).holes(holes.iter().map(|&h| h as usize));
    let map_va = mm.map(&map).map_err(|e| mm_err("mapping", &e))?;
    let user = UserMem {
        mm,
        _enter: enter,
        map_va,
        map_len,
        win,
        holes,
        pattern: if to_device { src_pattern } else { poison },
    };
    user.fill()?;
    let dev_side = Side::alloc(bed.dev, false, s.nc, s.dst_off, s.size)?;
    dev_side.fill(bed.emu, if to_device { poison } else { src_pattern })?;
    let refusal = (zd.is_async && !async_supported(bed, s.nc)).then_some(NdmaError::AsyncZeroCopyUnsupported);
    let (src, dst) = if to_device { (None, dev_side) } else { (Some(dev_side.clone()), dev_side) };
    Ok(Prepared {
        segments: vec![SegmentMem { src, dst, src_pattern, poison }],
        user: Some(user),
        refusal,
        ..Prepared::default()
    })
}

/// Does NC `nc`'s ring have a completion-thread bit (async zero-copy; V3)?
pub fn async_supported(bed: Bed<'_>, nc: u32) -> bool {
    bed.dev.h2t_queue(nc).is_ok_and(|(eng, qid)| bed.dev.dhal().ctx_queue_bit(eng, qid).is_some())
}

/// The sequence number of operation `index`'s async request (never 0, which means synchronous).
pub fn sequence(index: u64) -> u64 {
    index + 1
}

/// The context value passed with operation `index`'s request.
pub fn context(index: u64) -> u64 {
    crate::util::zc::context_of(0) ^ (index << 1 | 1)
}

pub(super) fn run(bed: Bed<'_>, spec: &OpSpec, p: &Prepared) -> Ran {
    let Detail::ZeroCopy(zd) = spec.detail else { unreachable!("a zero-copy operation has its details") };
    let Some(user) = &p.user else { unreachable!("a zero-copy operation has a user buffer") };
    let s = spec.segments[0];
    let dev_side = &p.segments[0].dst;
    let ops = [BatchOp { offset: dev_side.lead, size: s.size, buffer: user.map_va + user.win }];
    let to_device = spec.dir == Dir::H2d;
    match spec.fault {
        Some(f) if f.kind == FaultKind::PinFail => {
            // The `n`th piece's fast pin fails, and so does the slow pin the op layer falls back to.
            let plan = user.mm.pin_faults();
            plan.add(PinFault::Fail { path: Some(PinPath::Fast), nth: f.param, errno: PIN_FAIL_ERRNO });
            plan.add(PinFault::Fail { path: Some(PinPath::Slow), nth: 0, errno: PIN_FAIL_ERRNO });
        }
        Some(f) if f.kind == FaultKind::ShortPin => {
            user.mm.pin_faults().add(PinFault::Short { nth: f.param, pages: 1 })
        }
        _ => {}
    }
    let mut ran = Ran { result: Ok(()), fail_at: 0, cqe_findings: Vec::new() };
    // An async request whose pin fault falls past its first piece runs under a pin budget of its first piece
    // (the operation has the device to itself): the later pieces wait unpinned and the completion thread
    // pins them, so the fault surfaces there, as the completion's errno.
    let _budget = (zd.is_async && fault_piece(spec).is_some_and(|k| k >= 1)).then(|| {
        let was = bed.dev.zerocopy_pin_budget();
        let first = pieces(s.src_off, s.size).first().map_or(1, |&(_, n)| n);
        bed.dev.set_zerocopy_pin_budget(first);
        BudgetGuard { dev: bed.dev, was }
    });
    if !zd.is_async {
        ran.result =
            bed.dev.zerocopy_submit(s.nc, &ops, &dev_side.chunk, 0, NEURON_DMA_H2T_DEFAULT_QID, to_device, 0, 0);
        return ran;
    }
    let cq = match bed.dev.completion_queue(s.nc).and_then(|c| CqConsumer::new(&c)) {
        Ok(cq) => Some(cq),
        Err(e) if p.refusal.is_some() => {
            // V2: no completion queue either; the submit must be refused.
            tracing::debug!(%e, "no completion queue where async zero-copy is refused");
            None
        }
        Err(e) => {
            ran.result = Err(e);
            return ran;
        }
    };
    let (seq, ctx) = (sequence(spec.index), context(spec.index));
    let submitted = loop {
        match bed.dev.zerocopy_submit(s.nc, &ops, &dev_side.chunk, 0, NEURON_DMA_H2T_DEFAULT_QID, to_device, seq, ctx) {
            // The context queue is full of other threads' pieces: the async path's back-pressure.
            Err(NdmaError::QueueFull { .. }) => std::thread::yield_now(),
            r => break r,
        }
    };
    if let Err(e) = submitted {
        ran.result = Err(e);
        if let Some(extra) = cq.as_ref().and_then(CqConsumer::pop) {
            ran.cqe_findings.push(format!("a refused request posted a completion: {extra:?}"));
        }
        return ran;
    }
    let Some(cq) = cq else { unreachable!("an accepted async request has a completion queue") };
    let deadline = Instant::now() + CQE_LIMIT;
    let entry = loop {
        match cq.pop() {
            Some(e) => break Some(e),
            None if Instant::now() > deadline => break None,
            None => std::thread::yield_now(),
        }
    };
    match entry {
        None => {
            ran.cqe_findings.push(format!("completion of sequence {seq} lost: none within {} s", CQE_LIMIT.as_secs()));
            ran.result = Err(NdmaError::Failed { errno: -110 });
        }
        Some(e) => {
            if e.sequence_num != seq || e.context != ctx {
                ran.cqe_findings.push(format!(
                    "completion (seq {}, ret {}, context {:#x}) for the request (seq {seq}, context {ctx:#x})",
                    e.sequence_num, e.compl_ret, e.context
                ));
            }
            if e.compl_ret != 0 {
                ran.result = Err(NdmaError::Failed { errno: i32::try_from(e.compl_ret).unwrap_or(i32::MIN) });
            } else {
                // A success promises the bytes now, not once the queue has drained (the check after the
                // operation comes later): a completion posted before its data landed shows here.
                match check(bed, spec, p, Window::Written) {
                    Ok(bad) => ran.cqe_findings.extend(
                        bad.into_iter().take(1).map(|m| format!("bytes not final when the completion arrived: {m}")),
                    ),
                    Err(e) => ran.cqe_findings.push(format!("reading the bytes at the completion: {e}")),
                }
            }
        }
    }
    // The completion thread posts before it releases the request's last piece: wait for the queue to empty,
    // then nothing more may be posted.
    let deadline = Instant::now() + CQE_LIMIT;
    while bed.dev.zerocopy_status(s.nc).is_ok_and(|z| z.contexts > 0 && Instant::now() < deadline) {
        std::thread::yield_now();
    }
    if let Some(extra) = cq.pop() {
        ran.cqe_findings.push(format!(
            "a second completion (seq {}, ret {}, context {:#x}) after the request's own",
            extra.sequence_num, extra.compl_ret, extra.context
        ));
    }
    ran
}

/// Checks every byte of a zero-copy operation: the source untouched (user or device), the destination's
/// guards intact and its window as `w` says. Returns the mismatches.
///
/// # Errors
///
/// Read failures.
pub fn check(bed: Bed<'_>, spec: &OpSpec, p: &Prepared, w: Window) -> CliResult<Vec<String>> {
    let Some(user) = &p.user else { return Ok(Vec::new()) };
    let m = &p.segments[0];
    let dev_side = &m.dst;
    let size = spec.segments[0].size;
    let mut out = Vec::new();
    let mut push = |r: Option<check::Mismatch>| {
        if let Some(m) = r {
            out.push(m.to_string());
        }
    };
    let read_user = |off: u64, buf: &mut [u8]| user.mm.read(user.map_va + off, buf).map_err(|e| mm_err("reading", &e));
    let read_dev = |off: u64, buf: &mut [u8]| crate::verify::buffers::read(bed.emu, &dev_side.chunk, off, buf);
    let source = Some((m.src_pattern, user.map_len.max(dev_side.total())));
    if spec.dir == Dir::H2d {
        // The user buffer is the source.
        for (off, len) in user.mapped(0, user.map_len) {
            let r = Region { name: "user buffer (source)", off, len };
            let e = Expect::Pattern { pattern: m.src_pattern, at: off };
            push(check::region_with(read_user, r, e, None, Clues { poison: None, source })?);
        }
        let clues = Clues { poison: Some(m.poison), source };
        let poison_at = |at| Expect::Pattern { pattern: m.poison, at };
        let end = dev_side.lead + size;
        let r = Region { name: "device guard before the window", off: 0, len: dev_side.lead };
        push(check::region_with(read_dev, r, poison_at(0), None, clues)?);
        let r = Region { name: "device guard after the window", off: end, len: dev_side.total() - end };
        push(check::region_with(read_dev, r, poison_at(end), None, clues)?);
        let r = Region { name: "device window", off: dev_side.lead, len: size };
        let written = Expect::Pattern { pattern: m.src_pattern, at: user.win };
        let (e, alt) = window_expect(w, written, poison_at(dev_side.lead), m.poison);
        push(check::region_with(read_dev, r, e, alt, clues)?);
    } else {
        let r = Region { name: "device chunk (source)", off: 0, len: dev_side.total() };
        let e = Expect::Pattern { pattern: m.src_pattern, at: 0 };
        push(check::region_with(read_dev, r, e, None, Clues { poison: None, source })?);
        let clues = Clues { poison: Some(m.poison), source };
        let end = user.win + size;
        for (name, start, len) in
            [("user guard before the window", 0, user.win), ("user guard after the window", end, user.map_len - end)]
        {
            for (off, len) in user.mapped(start, len) {
                let r = Region { name, off, len };
                push(check::region_with(read_user, r, Expect::Pattern { pattern: m.poison, at: off }, None, clues)?);
            }
        }
        for (off, len) in user.mapped(user.win, size) {
            let r = Region { name: "user window", off, len };
            let k = off - user.win;
            let written = Expect::Pattern { pattern: m.src_pattern, at: dev_side.lead + k };
            let (e, alt) = window_expect(w, written, Expect::Pattern { pattern: m.poison, at: off }, m.poison);
            push(check::region_with(read_user, r, e, alt, clues)?);
        }
    }
    Ok(out)
}

fn window_expect<'a>(
    w: Window,
    written: Expect<'a>,
    untouched: Expect<'a>,
    poison: Pattern,
) -> (Expect<'a>, Option<Pattern>) {
    match w {
        Window::Written => (written, None),
        Window::Untouched => (untouched, None),
        Window::Partial => (written, Some(poison)),
    }
}

/// Frames of the user buffer still pinned after the operation (each a leak), one line each.
pub fn pinned_frames(bed: Bed<'_>, p: &Prepared) -> Vec<String> {
    let Some(user) = &p.user else { return Vec::new() };
    let frames = bed.emu.host().frames();
    user.frames()
        .into_iter()
        .filter_map(|pa| {
            let n = frames.pin_count(pa);
            (n > 0).then(|| format!("user frame {pa:#x} still pinned {n} time(s) after the operation"))
        })
        .take(4)
        .collect()
}

/// The ring counters a successful (or refused) zero-copy operation moves: per piece its data descriptors and
/// a marker, staged as one batch (FACTS §5.5), planned over the frames the user pages map to.
pub fn ring_work(bed: Bed<'_>, spec: &OpSpec, p: &Prepared, refused: bool) -> BTreeMap<u32, RingWork> {
    let mut out = BTreeMap::new();
    let (Some(user), false) = (&p.user, refused) else { return out };
    let s = spec.segments[0];
    let ops = [BatchOp { offset: 0, size: s.size, buffer: user.map_va + user.win }];
    let arch = bed.dev.dhal().arch();
    if let Ok(pieces) = plan_request(arch, &user.mm, &ops, 0, spec.dir == Dir::H2d) {
        let t = PlanTotals::of(&pieces);
        out.insert(s.nc, RingWork { descriptors: t.descriptors, batches: t.pieces, bytes: 0, transfers: 0 });
    }
    out
}
