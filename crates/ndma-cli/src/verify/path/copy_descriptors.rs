//! `copy_descriptors`: a user buffer of 16-byte descriptors is validated — every host address must lie in a
//! host chunk of an attached process — and only then copied into a host chunk (by the CPU) or a device chunk
//! (by DMA through a bounce buffer). The buffer holds the source pattern with each descriptor's address word
//! replaced: a device address (which passes), or a range inside a host chunk of this device (which passes),
//! or — at most once, at a drawn index — a range that crosses the end of that chunk by one byte (refused,
//! and nothing copied). Sizes that are not whole descriptors and invalid queue types are refused too.

use rand::RngExt;

use super::{patterns, Bed, Drawn, Prepared, Ran, SegmentMem};
use crate::error::CliResult;
use crate::verify::buffers::Side;
use crate::verify::op::{DescriptorDraw, Detail, Draw, OpSpec, Segment};
use crate::verify::rng::op_rng;
use crate::verify::size::draw_offset;
use ndma_emu::test_utils::Dir;

/// Largest descriptor buffer drawn (validation walks every descriptor).
const MAX_BYTES: u64 = 4 << 20;
/// The host chunk valid host descriptors point into.
const HOST_TARGET: u64 = 128 << 10;
/// Bytes of one descriptor.
const DESC_BYTES: u64 = 16;

pub(super) fn draw(d: &mut Draw<'_>, nc: u32) -> Drawn {
    // A faulted operation must reach the engine: a device destination, whole descriptors, a valid type.
    let dir = if d.faulted || d.rng.random_bool(0.5) { Dir::H2d } else { Dir::H2h };
    let raw = d.size().min(MAX_BYTES);
    let size = if d.faulted {
        raw.next_multiple_of(DESC_BYTES)
    } else if d.rng.random_bool(0.9) {
        raw / DESC_BYTES * DESC_BYTES
    } else {
        raw
    };
    let queue_type = if d.faulted || d.rng.random_bool(0.97) {
        d.rng.random_range(0..=1u32)
    } else {
        [2, 7, u32::MAX][d.rng.random_range(0..3usize)]
    };
    let host_permille = if d.rng.random_bool(0.7) { d.rng.random_range(1..=300) } else { 0 };
    let descs = size / DESC_BYTES;
    let invalid_at = (!d.faulted && size % DESC_BYTES == 0 && descs > 0 && d.rng.random_bool(0.05))
        .then(|| d.rng.random_range(0..descs));
    let (src_off, dst_off) = (draw_offset(&mut d.rng), draw_offset(&mut d.rng));
    let segment = Segment { nc, src_nc: nc, dst_nc: nc, size, src_off, dst_off };
    Drawn {
        dir,
        segments: vec![segment],
        detail: Detail::CopyDescriptors(DescriptorDraw { queue_type, host_permille, invalid_at }),
    }
}

pub(super) fn prepare(bed: Bed<'_>, spec: &OpSpec) -> CliResult<Prepared> {
    let Detail::CopyDescriptors(draw) = spec.detail else {
        unreachable!("a copy_descriptors operation has its details")
    };
    let s = spec.segments[0];
    let (src_pattern, poison) = patterns(spec, 0);
    let dst = Side::alloc(bed.dev, spec.dir.dst_host(), s.dst_nc, s.dst_off, s.size)?;
    dst.fill(bed.emu, poison)?;
    let mut buf = vec![0u8; (s.src_off + s.size + DESC_BYTES) as usize];
    src_pattern.fill(0, &mut buf);
    let needs_target = draw.host_permille > 0 || draw.invalid_at.is_some();
    let host_target = if needs_target { Some(Side::alloc(bed.dev, true, s.nc, 0, HOST_TARGET)?) } else { None };
    let mut refusal = None;
    if s.size % DESC_BYTES == 0 {
        let mut rng = op_rng(spec.seed, 0xde5c);
        let host_mask = bed.dev.dhal().arch().host_addr_mask();
        for j in 0..s.size / DESC_BYTES {
            let at = (s.src_off + j * DESC_BYTES) as usize;
            let len_ctrl = u32::from_le_bytes(<[u8; 4]>::try_from(&buf[at..at + 4]).unwrap_or_default());
            let len = u64::from(udma::LenCtrl::from_bits(len_ctrl).len_bytes());
            let word = u64::from_le_bytes(<[u8; 8]>::try_from(&buf[at + 8..at + 16]).unwrap_or_default());
            let addr = match &host_target {
                Some(t) if draw.invalid_at == Some(j) => {
                    // One byte past the end of the chunk.
                    let pa = t.chunk.pa() + t.chunk.size() - len + 1;
                    refusal = refusal.or(Some(ndma::NdmaError::InvalidDescriptorAddress { index: j as usize, pa }));
                    pa
                }
                Some(t) if rng.random_range(0..1000) < draw.host_permille => {
                    t.chunk.pa() + rng.random_range(0..=t.chunk.size() - len)
                }
                // Not a host address on this arch: validation passes it without a lookup.
                _ => word & !host_mask,
            };
            buf[at + 8..at + 16].copy_from_slice(&addr.to_le_bytes());
        }
    }
    let refusal = if draw.queue_type > 1 {
        Some(ndma::NdmaError::InvalidQueueType(draw.queue_type))
    } else if s.size % DESC_BYTES != 0 {
        Some(ndma::NdmaError::PartialDescriptor(s.size))
    } else {
        refusal
    };
    Ok(Prepared {
        segments: vec![SegmentMem { src: None, dst, src_pattern, poison }],
        descriptors: buf,
        host_target,
        refusal,
        user: None,
    })
}

pub(super) fn run(bed: Bed<'_>, spec: &OpSpec, p: &Prepared) -> Ran {
    let Detail::CopyDescriptors(draw) = spec.detail else {
        unreachable!("a copy_descriptors operation has its details")
    };
    let s = spec.segments[0];
    let dst = &p.segments[0].dst;
    let result = bed.dev.copy_descriptors(&p.descriptors, s.src_off, &dst.chunk, dst.lead, s.size, draw.queue_type);
    Ran { result, fail_at: 0, cqe_findings: Vec::new() }
}
