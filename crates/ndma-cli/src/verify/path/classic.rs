//! The synchronous classic copy: `memcpy_mc`, or the idiomatic `NeuronDevice::copy(&Transfer)` that lands in
//! it. Any size (several batches included), every direction.

use ndma::Transfer;
use rand::RngExt;

use super::{Bed, Drawn, Prepared, Ran};
use crate::error::CliResult;
use crate::verify::op::{Detail, Draw, OpSpec};
use ndma_emu::test_utils::Dir;

pub(super) fn draw(d: &mut Draw<'_>, nc: u32) -> Drawn {
    let dir = Dir::ALL[d.rng.random_range(0..Dir::ALL.len())];
    let size = d.size();
    let segment = d.segment(dir, nc, size);
    Drawn { dir, segments: vec![segment], detail: Detail::Classic { idiomatic: d.rng.random_bool(0.5) } }
}

pub(super) fn prepare(bed: Bed<'_>, spec: &OpSpec) -> CliResult<Prepared> {
    Ok(Prepared { segments: vec![Prepared::copy_segment(bed, spec, 0, spec.dir)?], ..Prepared::default() })
}

pub(super) fn run(bed: Bed<'_>, spec: &OpSpec, p: &Prepared) -> Ran {
    let m = &p.segments[0];
    let (Some(src), dst) = (&m.src, &m.dst) else { unreachable!("a classic segment always has a source chunk") };
    let len = spec.segments[0].size;
    let result = match spec.detail {
        Detail::Classic { idiomatic: true } => {
            bed.dev.copy(&Transfer::new(&src.chunk, &dst.chunk, len).src_offset(src.lead).dst_offset(dst.lead))
        }
        _ => bed.dev.memcpy_mc(&src.chunk, &dst.chunk, src.lead, dst.lead, len),
    };
    Ran { result, fail_at: 0, cqe_findings: Vec::new() }
}
