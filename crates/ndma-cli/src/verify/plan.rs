//! What an operation stages, worked out from the spec alone (the split rule of spec §2, not the op layer's
//! code): the descriptor pairs each ring fetches, batch by batch, and the ring counters a successful
//! operation moves. Used to map a corrupted fetch to the bytes it covers, and at the end of a run to check
//! every ring's counters against what was asked of it — a split that is off by one shows there even when the
//! bytes land right.

use std::collections::BTreeMap;
use std::ops::AddAssign;

use ndma::SYNC_THRESHOLD;
use serde::Serialize;

use super::op::{Detail, OpSpec};
use super::path::PathKind;
use super::size::DESC;
use ndma::MEMSET_HOST_BUF_SIZE;

/// One descriptor pair as a ring fetches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pair {
    /// A data pair writing `len` bytes at offset `at` of segment `segment`'s destination window.
    Data {
        /// The segment.
        segment: usize,
        /// Window offset of its first byte.
        at: u64,
        /// Bytes.
        len: u64,
    },
    /// The completion marker's self-copy.
    Marker,
}

/// The ring counters an operation moves on one ring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RingWork {
    /// Descriptor pairs staged, markers included.
    pub descriptors: u64,
    /// Batches triggered.
    pub batches: u64,
    /// Bytes of completed batches.
    pub bytes: u64,
    /// Completed copies.
    pub transfers: u64,
}

impl AddAssign for RingWork {
    fn add_assign(&mut self, o: RingWork) {
        self.descriptors += o.descriptors;
        self.batches += o.batches;
        self.bytes += o.bytes;
        self.transfers += o.transfers;
    }
}

impl RingWork {
    /// The counters of a snapshot.
    pub fn of(s: &ndma::StatsSnapshot) -> RingWork {
        RingWork { descriptors: s.descriptors, batches: s.batches, bytes: s.bytes, transfers: s.transfers }
    }
}

/// One copy: `size` bytes into segment `segment`'s window from offset `at`, on NC `nc`'s ring.
#[derive(Debug, Clone, Copy)]
struct Copy {
    nc: u32,
    segment: usize,
    at: u64,
    size: u64,
}

/// The batches of one copy: ≤ 64 KiB data pairs, at most [`SYNC_THRESHOLD`] a batch, each batch closed by
/// the marker.
fn batches_of(c: Copy) -> Vec<Vec<Pair>> {
    let mut out = Vec::new();
    let mut done = 0u64;
    while done < c.size {
        let mut batch = Vec::new();
        while done < c.size && batch.len() < SYNC_THRESHOLD as usize {
            let len = (c.size - done).min(DESC);
            batch.push(Pair::Data { segment: c.segment, at: c.at + done, len });
            done += len;
        }
        batch.push(Pair::Marker);
        out.push(batch);
    }
    out
}

/// The copies a successful `spec` makes, in order; `refused_at`: the segment whose call is refused before
/// staging (it and those after it make none).
fn copies(spec: &OpSpec, refused_at: Option<usize>) -> Vec<Copy> {
    let seg = |i: usize| spec.segments[i];
    match spec.path {
        PathKind::ClassicSync => vec![Copy { nc: seg(0).nc, segment: 0, at: 0, size: seg(0).size }],
        PathKind::Async => (0..refused_at.unwrap_or(spec.segments.len()))
            .map(|i| Copy { nc: seg(i).nc, segment: i, at: 0, size: seg(i).size })
            .collect(),
        PathKind::Memset => {
            // The host buffer's first window, then the rest replicated from it.
            let (nc, size) = (seg(0).nc, seg(0).size);
            let first = size.min(MEMSET_HOST_BUF_SIZE);
            vec![Copy { nc, segment: 0, at: 0, size: first }, Copy { nc, segment: 0, at: first, size: size - first }]
        }
        // Planned over the user buffer's frames (`path::zerocopy_ring_work`).
        PathKind::ZeroCopySync | PathKind::ZeroCopyAsync => Vec::new(),
        PathKind::CopyDescriptors => {
            let by_dma = refused_at.is_none() && !spec.dir.dst_host();
            if by_dma {
                vec![Copy { nc: seg(0).nc, segment: 0, at: 0, size: seg(0).size }]
            } else {
                Vec::new()
            }
        }
    }
}

/// The pairs NC `spec.nc()`'s ring fetches for `spec` (not refused), in order: where a corruption planned
/// for the `n`th fetch lands.
pub fn fetch_order(spec: &OpSpec) -> Vec<Pair> {
    copies(spec, None).into_iter().filter(|c| c.nc == spec.nc()).flat_map(batches_of).flatten().collect()
}

/// The counters a successful (or refused at `refused_at`) `spec` moves, per NC.
pub fn ring_work(spec: &OpSpec, refused_at: Option<usize>) -> BTreeMap<u32, RingWork> {
    let mut out: BTreeMap<u32, RingWork> = BTreeMap::new();
    for c in copies(spec, refused_at) {
        if c.size == 0 {
            continue;
        }
        let batches = batches_of(c);
        let w = out.entry(c.nc).or_default();
        *w += RingWork {
            descriptors: batches.iter().map(|b| b.len() as u64).sum(),
            batches: batches.len() as u64,
            bytes: c.size,
            transfers: 1,
        };
    }
    out
}

/// Does `spec` hand anything to an engine when it is not refused? (A faulted operation must.)
pub fn reaches_engine(spec: &OpSpec) -> bool {
    !fetch_order(spec).is_empty() && !matches!(spec.detail, Detail::CopyDescriptors(d) if d.queue_type > 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::op::Segment;
    use ndma::MAX_BATCH_BYTES;
    use ndma_emu::test_utils::Dir;

    fn classic(size: u64) -> OpSpec {
        OpSpec {
            index: 0,
            seed: 0,
            path: PathKind::ClassicSync,
            dir: Dir::H2d,
            device: 0,
            segments: vec![Segment { nc: 1, src_nc: 0, dst_nc: 1, size, src_off: 0, dst_off: 0 }],
            detail: Detail::Classic { idiomatic: false },
            fault: None,
            bystander: None,
        }
    }

    #[test]
    fn the_batch_boundary() {
        let w = |size| ring_work(&classic(size), None).get(&1).copied().unwrap_or_default();
        assert_eq!(w(0), RingWork::default());
        assert_eq!(w(1), RingWork { descriptors: 2, batches: 1, bytes: 1, transfers: 1 });
        assert_eq!(w(DESC + 1), RingWork { descriptors: 3, batches: 1, bytes: DESC + 1, transfers: 1 });
        assert_eq!(w(MAX_BATCH_BYTES).descriptors, 2032);
        assert_eq!((w(MAX_BATCH_BYTES + 1).descriptors, w(MAX_BATCH_BYTES + 1).batches), (2034, 2));
        let pairs = fetch_order(&classic(DESC + 5));
        assert_eq!(
            pairs,
            [Pair::Data { segment: 0, at: 0, len: DESC }, Pair::Data { segment: 0, at: DESC, len: 5 }, Pair::Marker]
        );
    }

    #[test]
    fn memset_is_two_copies() {
        let mut s = classic(3 * DESC + 7);
        s.path = PathKind::Memset;
        s.detail = Detail::Memset { value: 0x80 };
        let w = ring_work(&s, None)[&1];
        // The first 64 KiB: one data pair and the marker; the rest (2 × 64 KiB + 7): three and the marker.
        assert_eq!(w, RingWork { descriptors: 2 + 4, batches: 2, bytes: 3 * DESC + 7, transfers: 2 });
    }
}
