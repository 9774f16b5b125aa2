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
