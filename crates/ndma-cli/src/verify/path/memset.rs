//! `memset` of a window of a host or device chunk: the first 64 KiB from the device's host buffer, the rest
//! replicated device-to-device from that first window, both on the chunk's NC.

use rand::RngExt;

use super::{patterns, Bed, Drawn, Prepared, Ran, SegmentMem};
use crate::error::CliResult;
use crate::verify::buffers::Side;
use crate::verify::op::{Detail, Draw, OpSpec, Segment};
use ndma_emu::test_utils::Dir;

pub(super) fn draw(d: &mut Draw<'_>, nc: u32) -> Drawn {
    let dir = if d.rng.random_bool(0.5) { Dir::H2d } else { Dir::H2h };
    let size = d.size();
    let dst_off = crate::verify::size::draw_offset(&mut d.rng);
    // Bit 7 set, like every source byte: a byte memset did not write still holds poison (bit 7 clear).
    let value = 0x80 | d.rng.random_range(0..0x80u8);
    let segment = Segment { nc, src_nc: nc, dst_nc: nc, size, src_off: 0, dst_off };
    Drawn { dir, segments: vec![segment], detail: Detail::Memset { value } }
}

pub(super) fn prepare(bed: Bed<'_>, spec: &OpSpec) -> CliResult<Prepared> {
    let s = &spec.segments[0];
    let dst = Side::alloc(bed.dev, spec.dir.dst_host(), s.dst_nc, s.dst_off, s.size)?;
    let (src_pattern, poison) = patterns(spec, 0);
    dst.fill(bed.emu, poison)?;
    Ok(Prepared { segments: vec![SegmentMem { src: None, dst, src_pattern, poison }], ..Prepared::default() })
}

pub(super) fn run(bed: Bed<'_>, spec: &OpSpec, p: &Prepared) -> Ran {
    let Detail::Memset { value } = spec.detail else { unreachable!("a memset operation has memset details") };
    let dst = &p.segments[0].dst;
    Ran { result: bed.dev.memset(&dst.chunk, dst.lead, value, dst.len), fail_at: 0, cqe_findings: Vec::new() }
}
