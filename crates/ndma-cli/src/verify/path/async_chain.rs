//! Chains through `AsyncPipeline`: one to three copies, each staged while the one before completes (the
//! ASYNC1/ASYNC2 double buffer). A copy may move to another NC's ring (the chain on the old ring is drained
//! first). A copy larger than one batch is refused before anything is staged, after the copy before it was
//! waited for.

use ndma::{AsyncPipeline, NdmaError, Transfer, MAX_BATCH_BYTES};
use rand::RngExt;

use super::{Bed, Drawn, Prepared, Ran};
use crate::error::CliResult;
use crate::verify::op::{Detail, Draw, OpSpec};
use ndma_emu::test_utils::Dir;

pub(super) fn draw(d: &mut Draw<'_>, nc: u32) -> Drawn {
    let dir = Dir::ALL[d.rng.random_range(0..Dir::ALL.len())];
    let n = match d.rng.random_range(0..10u32) {
        0..=3 => 1,
        4..=6 => 2,
        _ => 3,
    };
    let mut segments = Vec::with_capacity(n);
    for i in 0..n {
        // A faulted chain stays on its ring, so the fault's ring is the only one it touches.
        let ring = if i == 0 || d.faulted || d.rng.random_bool(0.85) { nc } else { d.rng.random_range(0..d.ctx.ncs) };
        let size = d.size();
        segments.push(d.segment(dir, ring, size));
    }
    Drawn { dir, segments, detail: Detail::Async }
}

pub(super) fn prepare(bed: Bed<'_>, spec: &OpSpec) -> CliResult<Prepared> {
    let segments =
        (0..spec.segments.len()).map(|i| Prepared::copy_segment(bed, spec, i, spec.dir)).collect::<CliResult<_>>()?;
    Ok(Prepared { segments, ..Prepared::default() })
}

pub(super) fn run(bed: Bed<'_>, spec: &OpSpec, p: &Prepared) -> Ran {
    let mut pipe = AsyncPipeline::new(bed.dev);
    for (i, (s, m)) in spec.segments.iter().zip(&p.segments).enumerate() {
        let Some(src) = &m.src else { unreachable!("an async segment always has a source chunk") };
        let t = Transfer::new(&src.chunk, &m.dst.chunk, s.size).src_offset(src.lead).dst_offset(m.dst.lead);
        if let Err(e) = pipe.submit(&t) {
            // After an error the chain is empty: nothing is left to drain.
            return Ran { result: Err(e), fail_at: i, cqe_findings: Vec::new() };
        }
    }
    Ran { result: pipe.finish(), fail_at: spec.segments.len(), cqe_findings: Vec::new() }
}

/// The first copy too large for one batch is refused.
pub(super) fn refusal(spec: &OpSpec) -> Option<(usize, NdmaError)> {
    spec.segments
        .iter()
        .position(|s| s.size > MAX_BATCH_BYTES)
        .map(|i| (i, NdmaError::AsyncTooLarge { size: spec.segments[i].size, max: MAX_BATCH_BYTES }))
}
