//! The descriptors one zero-copy piece writes (`ndma_build_n_issue_zc_descs`, FACTS §5.5): physically
//! consecutive pages merge into runs (the first run starts at the piece's page offset), runs split into
//! descriptors of at most 64 KiB, host addresses carry `pci_host_base`, and the barrier that keeps the
//! completion from overtaking the data sits where the arch needs it (`write_fence`: the op layer's one
//! explicit arch branch, DESIGN §1, which the fence closing a failed request shares).

use udma::{Arch, Barrier, MAX_DMA_DESC_SIZE};

use crate::PAGE_SIZE;

/// One data descriptor pair of a piece (see [`plan_descriptors`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZcDesc {
    /// Source device address.
    pub src: u64,
    /// Destination device address.
    pub dst: u64,
    /// Bytes (1..=65536).
    pub len: u32,
    /// The descriptor's barrier.
    pub barrier: Barrier,
}

/// Everything a piece stages: its data descriptors, then the completion marker with `marker_barrier` (see
/// [`plan_descriptors`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZcPlan {
    /// Data descriptors, in order.
    pub data: Vec<ZcDesc>,
    /// Runs of physically consecutive pages the data was coalesced from.
    pub runs: u32,
    /// Barrier of the marker descriptor.
    pub marker_barrier: Barrier,
}

/// Where the barrier that keeps a completion from overtaking earlier writes sits: `(on the last data
/// descriptor, on the marker)` — V2: WRITE_BARRIER on the data (it has no SOW); V3: SOW on the marker. The op
/// layer's one explicit arch branch (DESIGN §1), shared by [`plan_descriptors`] and the fence that closes a
/// failed request.
pub(crate) fn write_fence(arch: Arch) -> (Barrier, Barrier) {
    if arch == Arch::V2 {
        (Barrier::WriteBarrier, Barrier::None)
    } else {
        (Barrier::None, Barrier::Sow)
    }
}

/// Plans the descriptors of a piece of `size` bytes starting `first_offset` bytes into `pages` (frame
/// addresses, 4 KiB each; an offset past the first page starts in a later one), to or from device address
/// `dev_addr`. Bytes past the last page are not planned. Addresses are plain 64-bit descriptor fields: a
/// frame at the top of the address space does not run on into frame 0, and a device address past 2^64 wraps
/// (no caller in the op layer comes near either; the planner is total so a tool may feed it anything).
///
/// The barrier: reads (device → host) need none, because the in-order S2M completion write follows the data.
/// Writes (host → device) put HBM data and the host completion on different fabric routes, so the last piece
/// of a request needs one — V2: WRITE_BARRIER on its last data descriptor; V3: SOW on its marker.
///
/// ```
/// use ndma::zerocopy::{plan_descriptors, ZcDesc};
/// use udma::{Arch, Barrier};
///
/// // 20,000 bytes from 100 bytes into the first of five user pages: frames 0x1000..0x4000 are consecutive,
/// // 0x9000 is not. Host → device, the last piece of its request, on V3.
/// let frames = [0x1000, 0x2000, 0x3000, 0x4000, 0x9000];
/// let plan = plan_descriptors(Arch::V3, &frames, 100, 20_000, 0x8000_0000, true, true);
/// let host = Arch::V3.pci_host_base();
/// assert_eq!(plan.runs, 2);
/// assert_eq!(plan.data, [
///     ZcDesc { src: host | 0x1064, dst: 0x8000_0000, len: 4 * 4096 - 100, barrier: Barrier::None },
///     ZcDesc { src: host | 0x9000, dst: 0x8000_0000 + 16_284, len: 20_000 - 16_284, barrier: Barrier::None },
/// ]);
/// assert_eq!(plan.marker_barrier, Barrier::Sow, "V3 fences the completion with a strong-ordered write");
/// // On V2 the barrier sits on the last data descriptor instead.
/// let v2 = plan_descriptors(Arch::V2, &frames, 100, 20_000, 0x8000_0000, true, true);
/// assert_eq!((v2.data[1].barrier, v2.marker_barrier), (Barrier::WriteBarrier, Barrier::None));
/// ```
pub fn plan_descriptors(
    arch: Arch,
    pages: &[u64],
    first_offset: u64,
    size: u64,
    dev_addr: u64,
    to_device: bool,
    last: bool,
) -> ZcPlan {
    let host = arch.pci_host_base();
    let fenced = to_device && last;
    let (data_fence, marker_fence) = write_fence(arch);
    // An offset past the first page starts in a later one (the internal caller's is always inside the first).
    let skip = usize::try_from(first_offset / PAGE_SIZE).unwrap_or(usize::MAX).min(pages.len());
    let (pages, first_offset) = (&pages[skip..], first_offset % PAGE_SIZE);
    // A run of k pages needs at most k descriptors (≤ 64 KiB each), so one allocation holds them all.
    let mut data = Vec::with_capacity(pages.len());
    let mut runs = 0;
    let (mut dev, mut remaining, mut offset) = (dev_addr, size, first_offset);
    let mut i = 0;
    while i < pages.len() && remaining > 0 {
        let start = pages[i];
        let mut run = PAGE_SIZE - offset;
        i += 1;
        while i < pages.len() && pages[i - 1].checked_add(PAGE_SIZE) == Some(pages[i]) {
            run += PAGE_SIZE;
            i += 1;
        }
        runs += 1;
        let mut at = start.wrapping_add(offset) | host;
        offset = 0;
        while run > 0 && remaining > 0 {
            let len = remaining.min(run).min(u64::from(MAX_DMA_DESC_SIZE));
            let (src, dst) = if to_device { (at, dev) } else { (dev, at) };
            remaining -= len;
            let barrier = if fenced && remaining == 0 { data_fence } else { Barrier::None };
            data.push(ZcDesc { src, dst, len: len as u32, barrier });
            at = at.wrapping_add(len);
            dev = dev.wrapping_add(len);
            run -= len;
        }
    }
    let marker_barrier = if fenced { marker_fence } else { Barrier::None };
    ZcPlan { data, runs, marker_barrier }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST_V3: u64 = udma::arch::V3_PCI_HOST_BASE;

    #[test]
    fn an_offset_past_the_first_page_starts_in_a_later_one() {
        let frames = [0x1000, 0x9000, 0xa000];
        let plan = plan_descriptors(Arch::V3, &frames, 5000, 100, 0x10, true, false);
        let want = ZcDesc { src: HOST_V3 | (0x9000 + 904), dst: 0x10, len: 100, barrier: Barrier::None };
        assert_eq!((plan.data, plan.runs), (vec![want], 1));
        let past = plan_descriptors(Arch::V3, &frames, 3 * PAGE_SIZE, 100, 0x10, true, false);
        assert_eq!((past.data, past.runs), (vec![], 0), "past every page: nothing to plan");
        let far = plan_descriptors(Arch::V3, &frames, u64::MAX, 100, 0x10, true, false);
        assert!(far.data.is_empty());
    }

    #[test]
    fn pages_past_the_size_are_neither_planned_nor_counted_as_runs() {
        // Three scattered frames, but 100 bytes end inside the first: one run, one descriptor.
        let frames = [0x1000, 0x5000, 0x9000];
        let plan = plan_descriptors(Arch::V3, &frames, 0, 100, 0x10, true, false);
        let want = ZcDesc { src: HOST_V3 | 0x1000, dst: 0x10, len: 100, barrier: Barrier::None };
        assert_eq!((plan.data, plan.runs), (vec![want], 1));
        // Ending exactly at the second page's end: two runs, the third frame untouched.
        let plan = plan_descriptors(Arch::V3, &frames, 0, 2 * PAGE_SIZE, 0x10, true, false);
        let want = [
            ZcDesc { src: HOST_V3 | 0x1000, dst: 0x10, len: 4096, barrier: Barrier::None },
            ZcDesc { src: HOST_V3 | 0x5000, dst: 0x10 + 4096, len: 4096, barrier: Barrier::None },
        ];
        assert_eq!((plan.data.as_slice(), plan.runs), (&want[..], 2));
    }

    #[test]
    fn addresses_at_the_top_of_the_address_space_neither_panic_nor_merge_across_it() {
        let top = u64::MAX - (PAGE_SIZE - 1);
        let plan = plan_descriptors(Arch::V3, &[top, 0], 0, 2 * PAGE_SIZE, u64::MAX - 100, false, false);
        let want = [
            ZcDesc { src: u64::MAX - 100, dst: top | HOST_V3, len: 4096, barrier: Barrier::None },
            ZcDesc { src: 4096 - 101, dst: HOST_V3, len: 4096, barrier: Barrier::None },
        ];
        assert_eq!((plan.data.as_slice(), plan.runs), (&want[..], 2), "the top frame does not run on into 0");
    }

    #[test]
    fn consecutive_frames_merge_and_runs_split_at_64k() {
        // 20 consecutive frames, then 2 scattered ones; the piece starts 100 bytes into the first page.
        let mut pages: Vec<u64> = (0..20).map(|i| 0x100_0000 + i * PAGE_SIZE).collect();
        pages.extend([0x900_0000, 0x500_0000]);
        let size = 22 * PAGE_SIZE - 100 - 50;
        let p = plan_descriptors(Arch::V3, &pages, 100, size, 0x10_0000_0000, true, true);
        assert_eq!(p.runs, 3);
        let lens: Vec<u32> = p.data.iter().map(|d| d.len).collect();
        assert_eq!(lens, [65536, 20 * 4096 - 100 - 65536, 4096, 4096 - 50]);
        assert_eq!(p.data[0].src, (0x100_0000 + 100) | HOST_V3);
        assert_eq!(p.data[0].dst, 0x10_0000_0000);
        assert_eq!(p.data[1].src, (0x100_0000 + 100 + 65536) | HOST_V3);
        assert_eq!(
            p.data[2],
            ZcDesc {
                src: 0x900_0000 | HOST_V3,
                dst: 0x10_0000_0000 + 20 * 4096 - 100,
                len: 4096,
                barrier: Barrier::None
            }
        );
        assert_eq!(p.data[3].src, 0x500_0000 | HOST_V3);
        assert!(p.data.iter().all(|d| d.barrier == Barrier::None), "V3: no barrier on data");
        assert_eq!(p.marker_barrier, Barrier::Sow, "V3 write, last piece: SOW on the marker");
    }

    #[test]
    fn the_barrier_is_per_arch_and_only_for_the_last_piece_of_a_write() {
        let pages: Vec<u64> = (0..3).map(|i| 0x200_0000 + 2 * i * PAGE_SIZE).collect();
        for (arch, to_device, last) in [
            (Arch::V2, true, true),
            (Arch::V2, true, false),
            (Arch::V2, false, true),
            (Arch::V3, true, false),
            (Arch::V3, false, true),
        ] {
            let p = plan_descriptors(arch, &pages, 0, 3 * PAGE_SIZE, 0x10_0000_0000, to_device, last);
            let barriers: Vec<Barrier> = p.data.iter().map(|d| d.barrier).collect();
            let v2_fenced = arch == Arch::V2 && to_device && last;
            let mut expect = vec![Barrier::None; 3];
            if v2_fenced {
                expect[2] = Barrier::WriteBarrier;
            }
            assert_eq!(barriers, expect, "{arch} write {to_device} last {last}");
            assert_eq!(p.marker_barrier, Barrier::None, "{arch} write {to_device} last {last}");
            if !to_device {
                assert_eq!((p.data[0].src, p.data[0].dst), (0x10_0000_0000, 0x200_0000 | arch.pci_host_base()));
            }
        }
    }
}
