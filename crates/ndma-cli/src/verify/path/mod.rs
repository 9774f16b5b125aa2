//! The paths a campaign drives, one file each: what it draws, the memory it prepares, how it runs on the op
//! layer, and what its destination must hold when it succeeds. Adding a path (zero-copy sync and async come
//! next) is a variant here and a file beside these.

mod async_chain;
mod classic;
mod copy_descriptors;
mod memset;
mod zerocopy;

pub use zerocopy::{pieces as zerocopy_pieces, pin_errno as zerocopy_pin_errno, UserMem, ZC_PID};

use ndma::{NdmaError, NeuronDevice};
use ndma_emu::EmuDevice;
use serde::Serialize;

use super::buffers::Side;
use super::check::Expect;
use super::op::{Detail, Draw, OpSpec, Segment};
use super::pattern::Pattern;
use super::rng::derive;
use crate::error::CliResult;
use ndma_emu::test_utils::Dir;

/// A path through the op layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PathKind {
    /// `memcpy_mc` (or `copy(&Transfer)`): the synchronous classic copy, any size, every direction.
    ClassicSync,
    /// `AsyncPipeline::submit` chains of one to three copies (the double buffer), each at most one batch.
    Async,
    /// `memset` of a host or device chunk.
    Memset,
    /// `copy_descriptors`: user descriptors validated, then copied into a host or device chunk.
    CopyDescriptors,
    /// `zerocopy_submit` with sequence number 0: a user buffer to or from device memory, done on return.
    ZeroCopySync,
    /// `zerocopy_submit` of an async request: done when its one completion arrives (V2: refused).
    ZeroCopyAsync,
}

impl PathKind {
    /// Every path, in registry order.
    pub const ALL: [PathKind; 6] = [
        PathKind::ClassicSync,
        PathKind::Async,
        PathKind::Memset,
        PathKind::CopyDescriptors,
        PathKind::ZeroCopySync,
        PathKind::ZeroCopyAsync,
    ];

    /// The name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            PathKind::ClassicSync => "classic-sync",
            PathKind::Async => "async",
            PathKind::Memset => "memset",
            PathKind::CopyDescriptors => "copy-descriptors",
            PathKind::ZeroCopySync => "zero-copy-sync",
            PathKind::ZeroCopyAsync => "zero-copy-async",
        }
    }

    /// The directions it can take.
    pub fn dirs(self) -> &'static [Dir] {
        match self {
            PathKind::ClassicSync | PathKind::Async => &Dir::ALL,
            // By the chunk written: memset fills it from a host buffer, copy_descriptors from user memory.
            PathKind::Memset | PathKind::CopyDescriptors => &[Dir::H2d, Dir::H2h],
            // The user buffer is the host side.
            PathKind::ZeroCopySync | PathKind::ZeroCopyAsync => &[Dir::H2d, Dir::D2h],
        }
    }

    /// A zero-copy path?
    pub fn is_zerocopy(self) -> bool {
        matches!(self, PathKind::ZeroCopySync | PathKind::ZeroCopyAsync)
    }
}

/// What a path drew for an operation.
#[derive(Debug, Clone)]
pub struct Drawn {
    /// The direction.
    pub dir: Dir,
    /// The transfers.
    pub segments: Vec<Segment>,
    /// The path's own draws.
    pub detail: Detail,
}

/// Draws `path`'s part of an operation whose first ring is NC `nc`'s.
pub fn draw(path: PathKind, d: &mut Draw<'_>, nc: u32) -> Drawn {
    match path {
        PathKind::ClassicSync => classic::draw(d, nc),
        PathKind::Async => async_chain::draw(d, nc),
        PathKind::Memset => memset::draw(d, nc),
        PathKind::CopyDescriptors => copy_descriptors::draw(d, nc),
        PathKind::ZeroCopySync => zerocopy::draw(d, nc, false),
        PathKind::ZeroCopyAsync => zerocopy::draw(d, nc, true),
    }
}

/// A pin fault of `kind` for the zero-copy operation `spec` (which it may enlarge).
pub fn zerocopy_fault(
    rng: &mut super::rng::OpRng,
    kind: super::fault::FaultKind,
    spec: &mut OpSpec,
) -> super::fault::FaultSpec {
    zerocopy::draw_fault(rng, kind, spec)
}

/// Checks a zero-copy operation's bytes (see `zerocopy::check`).
///
/// # Errors
///
/// Read failures.
pub fn zerocopy_check(bed: Bed<'_>, spec: &OpSpec, p: &Prepared, w: super::expect::Window) -> CliResult<Vec<String>> {
    zerocopy::check(bed, spec, p, w)
}

/// The ring counters a zero-copy operation moves (see `zerocopy::ring_work`).
pub fn zerocopy_ring_work(
    bed: Bed<'_>,
    spec: &OpSpec,
    p: &Prepared,
    refused: bool,
) -> std::collections::BTreeMap<u32, super::plan::RingWork> {
    zerocopy::ring_work(bed, spec, p, refused)
}

/// User frames a zero-copy operation left pinned.
pub fn zerocopy_pinned(bed: Bed<'_>, p: &Prepared) -> Vec<String> {
    zerocopy::pinned_frames(bed, p)
}

/// Does NC `nc`'s ring take async zero-copy requests?
pub fn zerocopy_async_supported(bed: Bed<'_>, nc: u32) -> bool {
    zerocopy::async_supported(bed, nc)
}

/// The device an operation runs on.
#[derive(Clone, Copy)]
pub struct Bed<'a> {
    /// The op layer's device.
    pub dev: &'a NeuronDevice,
    /// Its model (back-door access to HBM).
    pub emu: &'a EmuDevice,
}

/// The memory of one segment.
#[derive(Debug)]
pub struct SegmentMem {
    /// The source chunk (memset and `copy_descriptors` have none: their source is not a chunk).
    pub src: Option<Side>,
    /// The destination chunk.
    pub dst: Side,
    /// The source's pattern.
    pub src_pattern: Pattern,
    /// The destination's poison.
    pub poison: Pattern,
}

/// The memory an operation prepared.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Per segment.
    pub segments: Vec<SegmentMem>,
    /// `copy_descriptors`: the user buffer the descriptors are copied from.
    pub descriptors: Vec<u8>,
    /// `copy_descriptors`: the host chunk valid host descriptors point into.
    pub host_target: Option<Side>,
    /// `copy_descriptors`: the error the validation must return (it depends on where chunks landed); zero-copy
    /// async: the refusal of an arch without it.
    pub refusal: Option<NdmaError>,
    /// Zero-copy: the user buffer (its address space is entered on the thread until this drops).
    pub user: Option<UserMem>,
}

impl Prepared {
    /// Allocates and fills the chunks of an ordinary copy segment: a source with a pattern, a poisoned
    /// destination.
    ///
    /// # Errors
    ///
    /// Allocation and back-door failures.
    pub fn copy_segment(bed: Bed<'_>, spec: &OpSpec, i: usize, dir: Dir) -> CliResult<SegmentMem> {
        let s = &spec.segments[i];
        let src = Side::alloc(bed.dev, dir.src_host(), s.src_nc, s.src_off, s.size)?;
        let dst = Side::alloc(bed.dev, dir.dst_host(), s.dst_nc, s.dst_off, s.size)?;
        let (src_pattern, poison) = patterns(spec, i);
        src.fill(bed.emu, src_pattern)?;
        dst.fill(bed.emu, poison)?;
        Ok(SegmentMem { src: Some(src), dst, src_pattern, poison })
    }
}

/// The source pattern and destination poison of segment `i` of `spec`.
pub fn patterns(spec: &OpSpec, i: usize) -> (Pattern, Pattern) {
    let i = i as u64;
    (Pattern::Source(derive(spec.seed, 2 * i)), Pattern::Poison(derive(spec.seed, 2 * i + 1)))
}

/// Allocates and fills the memory of `spec`.
///
/// # Errors
///
/// Allocation and back-door failures.
pub fn prepare(bed: Bed<'_>, spec: &OpSpec) -> CliResult<Prepared> {
    match spec.path {
        PathKind::ClassicSync => classic::prepare(bed, spec),
        PathKind::Async => async_chain::prepare(bed, spec),
        PathKind::Memset => memset::prepare(bed, spec),
        PathKind::CopyDescriptors => copy_descriptors::prepare(bed, spec),
        PathKind::ZeroCopySync | PathKind::ZeroCopyAsync => zerocopy::prepare(bed, spec),
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The op layer's result (the first error of a chain).
    pub result: Result<(), NdmaError>,
    /// The segment whose call returned the error (the number of segments when the final wait did).
    pub fail_at: usize,
    /// Async zero-copy: completions lost, duplicated or not the request's.
    pub cqe_findings: Vec<String>,
}

/// Runs `spec` on the op layer.
pub fn run(bed: Bed<'_>, spec: &OpSpec, p: &Prepared) -> Ran {
    match spec.path {
        PathKind::ClassicSync => classic::run(bed, spec, p),
        PathKind::Async => async_chain::run(bed, spec, p),
        PathKind::Memset => memset::run(bed, spec, p),
        PathKind::CopyDescriptors => copy_descriptors::run(bed, spec, p),
        PathKind::ZeroCopySync | PathKind::ZeroCopyAsync => zerocopy::run(bed, spec, p),
    }
}

/// What segment `i`'s destination window holds after a successful transfer.
pub fn written<'a>(spec: &OpSpec, p: &'a Prepared, i: usize) -> Expect<'a> {
    match spec.detail {
        Detail::Memset { value } => Expect::Byte(value),
        Detail::CopyDescriptors(_) => {
            let s = &spec.segments[i];
            Expect::Bytes(&p.descriptors[s.src_off as usize..(s.src_off + s.size) as usize])
        }
        Detail::Classic { .. } | Detail::Async | Detail::ZeroCopy(_) => {
            let m = &p.segments[i];
            Expect::Pattern { pattern: m.src_pattern, at: m.src.as_ref().map_or(0, |s| s.lead) }
        }
    }
}

/// The refusal `spec`'s inputs call for, before anything reaches the engine, and the segment it comes at.
pub fn refusal(spec: &OpSpec, p: &Prepared) -> Option<(usize, NdmaError)> {
    match spec.path {
        PathKind::Async => async_chain::refusal(spec),
        PathKind::CopyDescriptors | PathKind::ZeroCopySync | PathKind::ZeroCopyAsync => {
            p.refusal.clone().map(|e| (0, e))
        }
        PathKind::ClassicSync | PathKind::Memset => None,
    }
}
