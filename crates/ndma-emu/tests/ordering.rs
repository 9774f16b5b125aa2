//! The fabric ordering model: a missing barrier is deterministically visible in Adversarial mode, and the
//! barriers the op layer uses make the marker imply the data.

use ndma_emu::test_utils::pattern;
use ndma_emu::test_utils::rig::Rig;
use ndma_emu::{ExecPolicy, HbmRange, HostBuf, OrderingMode};
use udma::{Arch, Barrier, DmaMemory};

const LEN: usize = 3 * 65536 + 100;
const OLD: u8 = 0xee;

struct Setup {
    rig: Rig,
    src: HostBuf,
    dst: HbmRange,
    data: Vec<u8>,
}

fn setup(arch: Arch, exec: ExecPolicy, ordering: OrderingMode) -> Setup {
    let rig = Rig::new(arch, exec, ordering);
    let src = rig.dev.host().alloc(LEN, 4096).unwrap();
    let data = pattern(42, 0, LEN);
    src.write_bytes(0, &data).unwrap();
    let dst = rig.dev.alloc_hbm(LEN as u64, 4096).unwrap();
    rig.dev.hbm_fill(dst.pa, LEN as u64, OLD).unwrap();
    Setup { rig, src, dst, data }
}

impl Setup {
    /// Stages the data (last pair with `last`), the marker with `marker_barrier`, rings both doorbells.
    fn run(&mut self, last: Barrier, marker_barrier: Barrier) -> u32 {
        let s = self.rig.host_addr(&self.src, 0);
        let n = self.rig.stage(s, self.dst.pa, LEN as u64, last) + 1;
        self.rig.marker.store_u32(0, ndma_emu::test_utils::rig::MARKER, std::sync::atomic::Ordering::Relaxed).unwrap();
        self.rig.marker.store_u32(4, 0, std::sync::atomic::Ordering::Relaxed).unwrap();
        let m = self.rig.host_addr(&self.rig.marker, 0);
        self.rig.q.copy_prepare_one(m, m + 4, 4, marker_barrier, false).unwrap();
        self.rig.q.copy_start(&*self.rig.dev, n, n).unwrap();
        n
    }

    fn hbm(&self) -> Vec<u8> {
        let mut v = vec![0; LEN];
        self.rig.dev.hbm_read(self.dst.pa, &mut v).unwrap();
        v
    }
}

#[test]
fn missing_barrier_lets_the_marker_overtake_the_data() {
    for arch in Arch::ALL {
        let mut s = setup(arch, ExecPolicy::Inline, OrderingMode::Adversarial);
        s.run(Barrier::None, Barrier::None);
        assert!(s.rig.marker_landed(), "{arch}: the host write lands immediately");
        assert!(s.hbm().iter().all(|&b| b == OLD), "{arch}: HBM must still hold the old bytes");
        assert!(s.rig.dev.posted_writes(s.rig.eng) > 0);
        s.rig.dev.flush_posted_writes();
        assert!(s.hbm() == s.data, "{arch}: the flush lands the data");
        assert_eq!(s.rig.dev.posted_writes(s.rig.eng), 0);
    }
}

#[test]
fn write_barrier_on_the_last_data_descriptor_orders_the_marker() {
    for arch in Arch::ALL {
        let mut s = setup(arch, ExecPolicy::Inline, OrderingMode::Adversarial);
        s.run(Barrier::WriteBarrier, Barrier::None);
        assert!(s.rig.marker_landed());
        assert!(s.hbm() == s.data, "{arch}: WRITE_BARRIER drains before the marker");
        assert_eq!(s.rig.dev.posted_writes(s.rig.eng), 0);
    }
}

#[test]
fn dmb_or_sow_on_the_marker_drains_before_it() {
    for (arch, b) in [(Arch::V2, Barrier::Dmb), (Arch::V3, Barrier::Dmb), (Arch::V3, Barrier::Sow)] {
        let mut s = setup(arch, ExecPolicy::Inline, OrderingMode::Adversarial);
        s.run(Barrier::None, b);
        assert!(s.rig.marker_landed());
        assert!(s.hbm() == s.data, "{arch} {b:?}");
    }
}

/// SOW is a V3 bit (FACTS §1.2): V2 has no strong-ordered write, so SOW on the marker orders nothing there —
/// an op layer that fenced V2's zero-copy marker the V3 way would leave the data behind the marker.
#[test]
fn sow_on_v2_orders_nothing() {
    let mut s = setup(Arch::V2, ExecPolicy::Inline, OrderingMode::Adversarial);
    s.run(Barrier::None, Barrier::Sow);
    assert!(s.rig.marker_landed());
    assert!(s.hbm().iter().all(|&b| b == OLD), "V2: SOW is no barrier, the data is still posted");
    s.rig.dev.flush_posted_writes();
    assert!(s.hbm() == s.data);
}

/// WRITE_BARRIER orders its descriptor's write and the earlier ones before the *later* descriptors: misplaced
/// on the marker itself, it orders nothing before the marker, and the marker is seen with the data still
/// posted. The next descriptor the engine executes drains them.
#[test]
fn write_barrier_on_the_marker_orders_nothing_before_it() {
    for arch in Arch::ALL {
        let mut s = setup(arch, ExecPolicy::Inline, OrderingMode::Adversarial);
        s.run(Barrier::None, Barrier::WriteBarrier);
        assert!(s.rig.marker_landed());
        assert!(s.hbm().iter().all(|&b| b == OLD), "{arch}: the barrier follows the marker");
        assert!(s.rig.dev.posted_writes(s.rig.eng) > 0);
        // Any later descriptor of the engine executes after the barrier: another marker copy drains first.
        let m = s.rig.host_addr(&s.rig.marker, 0);
        s.rig.q.copy_prepare_one(m + 8, m + 12, 4, Barrier::None, false).unwrap();
        s.rig.q.copy_start(&*s.rig.dev, 1, 1).unwrap();
        assert!(s.hbm() == s.data, "{arch}: drained before the next descriptor");
        assert_eq!(s.rig.dev.posted_writes(s.rig.eng), 0);
    }
}

#[test]
fn relaxed_drains_when_idle_and_strict_never_posts() {
    for ordering in [OrderingMode::Relaxed, OrderingMode::Strict] {
        let mut s = setup(Arch::V2, ExecPolicy::Inline, ordering);
        s.run(Barrier::None, Barrier::None);
        assert!(s.rig.marker_landed());
        assert!(s.hbm() == s.data, "{ordering:?}: inline doorbell returns after the engine went idle");
        assert_eq!(s.rig.dev.posted_writes(s.rig.eng), 0);
    }
    let s = setup(Arch::V2, ExecPolicy::Inline, OrderingMode::Strict);
    assert_eq!(s.rig.dev.engine_stats(s.rig.eng).unwrap().drains, 0);
}

#[test]
fn reading_back_a_posted_destination_sees_the_new_data() {
    // host → HBM (posted, no barrier) then HBM → host of the same bytes in the same batch.
    let mut s = setup(Arch::V3, ExecPolicy::Inline, OrderingMode::Adversarial);
    let back = s.rig.dev.host().alloc(LEN, 4096).unwrap();
    let src = s.rig.host_addr(&s.src, 0);
    let b = s.rig.host_addr(&back, 0);
    let n1 = s.rig.stage(src, s.dst.pa, LEN as u64, Barrier::None);
    let n2 = s.rig.stage(s.dst.pa, b, LEN as u64, Barrier::None);
    s.rig.q.copy_start(&*s.rig.dev, n1 + n2, n1 + n2).unwrap();
    let mut got = vec![0; LEN];
    back.read_bytes(0, &mut got).unwrap();
    assert!(got == s.data, "a host write reading a posted HBM destination must see it landed");
}

#[test]
fn overwriting_a_posted_source_drains_first() {
    // host S → HBM (posted), then host → host overwriting S: the HBM copy must carry the old S.
    let mut s = setup(Arch::V2, ExecPolicy::Inline, OrderingMode::Adversarial);
    let other = s.rig.dev.host().alloc(LEN, 4096).unwrap();
    other.fill(0, LEN, 0x01).unwrap();
    let src = s.rig.host_addr(&s.src, 0);
    let o = s.rig.host_addr(&other, 0);
    let n1 = s.rig.stage(src, s.dst.pa, LEN as u64, Barrier::None);
    let n2 = s.rig.stage(o, src, LEN as u64, Barrier::None);
    s.rig.q.copy_start(&*s.rig.dev, n1 + n2, n1 + n2).unwrap();
    s.rig.dev.flush_posted_writes();
    assert!(s.hbm() == s.data, "the posted write must not pick up the later overwrite");
}

#[test]
fn threaded_marker_never_precedes_the_data_with_the_barrier() {
    for ordering in [OrderingMode::Relaxed, OrderingMode::Adversarial] {
        for arch in Arch::ALL {
            let mut s = setup(arch, ExecPolicy::Threaded, ordering);
            for iter in 0..150u32 {
                let data = pattern(iter as u64, 0, LEN);
                s.src.write_bytes(0, &data).unwrap();
                let n = s.run(Barrier::WriteBarrier, Barrier::None);
                assert!(s.rig.poll_marker(), "{arch} {ordering:?} iter {iter}");
                // Read HBM right after observing the marker: everything must be there.
                assert!(s.hbm() == data, "{arch} {ordering:?} iter {iter}: marker overtook the data");
                s.rig.q.ack(n);
            }
        }
    }
}

/// Once the engine's recent destinations exceed the caches, its immediate page writes (HBM → host pages, a
/// scattered d2h buffer) land in groups — and a group never reorders what the ordering model promises: a
/// page write that reads a posted HBM destination still sees it landed (it is left out of the group and
/// drains first), a write-barrier pair still drains behind it, and every page is byte-exact with the bytes
/// around it untouched. Before the engine has written that much, the same batch lands page by page.
#[test]
fn grouped_page_writes_keep_the_ordering_model() {
    const PAGES: usize = 12;
    let page = 4096u64;
    let mut rig = Rig::new(Arch::V3, ExecPolicy::Inline, OrderingMode::Adversarial);
    // Pages spread over a host area, every other page a guard that must stay untouched.
    let area = rig.dev.host().alloc(2 * PAGES * 4096, 4096).unwrap();
    let posted_src = rig.dev.host().alloc(4096, 4096).unwrap();
    posted_src.write_bytes(0, &pattern(7, 0, 4096)).unwrap();
    let hbm = rig.dev.alloc_hbm(PAGES as u64 * page, 4096).unwrap();
    let hbm_bytes = pattern(9, 0, PAGES * 4096);
    let order: Vec<usize> = (0..PAGES).map(|k| (k * 7) % PAGES).collect();
    let run = |rig: &mut Rig| {
        // HBM page 0 holds other bytes than the posted write brings, so a read that overtook it would show.
        rig.dev.hbm_write(hbm.pa, &hbm_bytes).unwrap();
        area.fill(0, 2 * PAGES * 4096, OLD).unwrap();
        // Pair 0: host → HBM page 0, posted. Pair 1 reads it back into the first host page: it must see it.
        let n0 = rig.stage(rig.host_addr(&posted_src, 0), hbm.pa, page, Barrier::None);
        let mut n = n0;
        for (k, &slot) in order.iter().enumerate() {
            let src = if k == 0 { hbm.pa } else { hbm.pa + k as u64 * page };
            let last = if k + 1 == PAGES { Barrier::WriteBarrier } else { Barrier::None };
            n += rig.stage(src, rig.host_addr(&area, (2 * slot) as u64 * page), page, last);
        }
        rig.stage_marker();
        rig.q.copy_start(&*rig.dev, n + 1, n + 1).unwrap();
        assert!(rig.marker_landed());
        rig.q.ack(n + 1);
    };
    let check = |what: &str| {
        let mut got = vec![0u8; 2 * PAGES * 4096];
        area.read_bytes(0, &mut got).unwrap();
        for (k, &slot) in order.iter().enumerate() {
            let at = 2 * slot * 4096;
            let want: &[u8] = if k == 0 { &pattern(7, 0, 4096) } else { &hbm_bytes[k * 4096..(k + 1) * 4096] };
            assert!(got[at..at + 4096] == *want, "{what}: page {k} (slot {slot})");
            assert!(got[at + 4096..at + 8192].iter().all(|&b| b == OLD), "{what}: guard after slot {slot}");
        }
    };
    let stats = |rig: &Rig| rig.dev.engine_stats(rig.eng).unwrap();

    let before = stats(&rig);
    run(&mut rig);
    check("within the caches");
    assert_eq!(stats(&rig).since(&before).grouped, 0, "a small footprint lands page by page");

    // 12 MiB of distinct destinations: the engine now writes beyond the caches.
    let big = 12 << 20;
    let src = rig.dev.host().alloc(big, 4096).unwrap();
    let dst = rig.dev.alloc_hbm(big as u64, 4096).unwrap();
    rig.copy(rig.host_addr(&src, 0), dst.pa, big as u64, Barrier::WriteBarrier);
    let before = stats(&rig);
    run(&mut rig);
    check("beyond the caches");
    let grouped = stats(&rig).since(&before).grouped;
    // Pages 1..=10 group (page 0 reads the posted write, page 11 carries the barrier): 8 + 2.
    assert_eq!(grouped, (PAGES - 2) as u64, "the independent pages land in groups");
}
