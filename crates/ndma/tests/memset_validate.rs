//! memset, copy_descriptors, is_valid_host_mem — on the emulator.

use ndma::validate::{NEURON_DMA_QUEUE_TYPE_RX, NEURON_DMA_QUEUE_TYPE_TX};
use ndma::{Instance, NdmaError, MEMSET_HOST_BUF_SIZE};
use ndma_emu::test_utils::*;
use ndma_emu::{ExecPolicy, Testbed, TestbedConfig};
use udma::{Arch, Barrier, Desc};
use zerocopy::IntoBytes;

#[test]
fn memset_below_at_and_above_64k_leaves_neighbours_untouched() {
    for arch in Arch::ALL {
        let tb = adversarial(arch, ExecPolicy::Inline);
        let (dev, emu) = tb.device(0);
        for (i, size) in [
            0,
            1,
            4095,
            MEMSET_HOST_BUF_SIZE - 1,
            MEMSET_HOST_BUF_SIZE,
            MEMSET_HOST_BUF_SIZE + 1,
            5 * MEMSET_HOST_BUF_SIZE + 123,
            3 << 20,
        ]
        .into_iter()
        .enumerate()
        {
            for host in [false, true] {
                let what = format!("{arch} memset {size} host={host}");
                let total = size + 2 * GUARD;
                let mc = alloc(dev, host, total, 0).unwrap();
                let before = pattern(i as u64, 0, total as usize);
                write_chunk(emu, &mc, 0, &before).unwrap();
                let value = 0x30 + i as u8;
                dev.memset(&mc, GUARD, value, size).unwrap_or_else(|e| panic!("{what}: {e}"));
                let after = read_vec(emu, &mc, 0, total).unwrap();
                let (g, s) = (GUARD as usize, size as usize);
                assert!(after[..g] == before[..g], "{what}: bytes before changed");
                assert!(after[g + s..] == before[g + s..], "{what}: bytes after changed");
                assert!(after[g..g + s].iter().all(|&b| b == value), "{what}: window not filled");
            }
        }
        assert!(emu.faults().is_empty());
    }
}

/// FACTS §6 `ndma_memset`, descriptor-exact: min(size, 64 KiB) comes from the 64 KiB host fill buffer to
/// `pa + off`; the rest is replicated device→device with a *fixed* source `pa + off` (smove = false) and a
/// destination advancing from `pa + off + 64 KiB` (dmove = true). An in-order engine lands the same bytes
/// with an advancing source, so only the descriptors show which one ran.
#[test]
fn memset_replicates_from_a_fixed_source_descriptor_exact() {
    for arch in Arch::ALL {
        let tb = adversarial(arch, ExecPolicy::Inline);
        let (dev, emu) = tb.device(0);
        let k64 = MEMSET_HOST_BUF_SIZE;
        let mc = dev.alloc_device(4 * k64, 0).unwrap();
        let (off, size) = (100, 2 * k64 + 100);
        dev.memset(&mc, off, 0x77, size).unwrap();
        let base = mc.pa() + off;
        let pairs: Vec<(u64, u64, u32)> = dev
            .ring_descriptors(0)
            .unwrap()
            .iter()
            .map(|(tx, rx)| (tx.tx().src, rx.rx().dst, tx.tx().len_ctrl.len_bytes()))
            .collect();
        assert_eq!(pairs.len(), 5, "{arch}: fill pair + marker, two replicate pairs + marker");
        let fill_buf = pairs[0].0;
        assert!(arch.is_host_addr(fill_buf), "{arch}: the fill comes from host memory");
        assert_eq!((pairs[0].1, pairs[0].2), (base, 65536), "{arch}: 64 KiB filled at pa + off");
        assert_eq!(pairs[2], (base, base + k64, 65536), "{arch}: replicate, first descriptor");
        assert_eq!(pairs[3], (base, base + 2 * k64, 100), "{arch}: replicate, same source");
        for m in [1, 4] {
            assert_eq!(pairs[m].2, 4, "{arch}: pair {m} is a marker");
        }
        let back = read_vec(emu, &mc, 0, 4 * k64).unwrap();
        assert!(back[off as usize..(off + size) as usize].iter().all(|&b| b == 0x77), "{arch}: filled");
    }
}

#[test]
fn memset_outside_the_chunk_is_refused() {
    let tb = adversarial(Arch::V2, ExecPolicy::Inline);
    let (dev, _) = tb.device(0);
    let mc = dev.alloc_device(4096, 0).unwrap();
    let err = dev.memset(&mc, 4000, 1, 97).unwrap_err();
    assert_eq!(err, NdmaError::OutOfRange { what: "memset window", offset: 4000, size: 97, limit: 4096 });
    assert_eq!(dev.stats().batches, 0);
}

fn tx_ring(addrs: &[u64]) -> Vec<u8> {
    addrs.iter().flat_map(|&a| Desc::m2m_tx(a, 4096, 1, Barrier::None).unwrap().as_bytes().to_vec()).collect()
}

fn rx_ring(addrs: &[u64]) -> Vec<u8> {
    addrs.iter().flat_map(|&a| Desc::m2m_rx(a, 4096, 1, Barrier::None, false).unwrap().as_bytes().to_vec()).collect()
}

#[test]
fn copy_descriptors_validates_every_pa_before_copying_anything() {
    for arch in Arch::ALL {
        let tb = adversarial(arch, ExecPolicy::Inline);
        let (dev, emu) = tb.device(0);
        dev.attach_process(100);
        let host = dev.alloc_host(1 << 20, 0).unwrap();
        let good_host = dev.mc_to_pa(&host) + 8192;
        let device_pa = 0x10_0000_1000;
        let bogus_host = arch.pci_host_base() | 0x7_0000_0000;
        let n = 64;
        for (qtype, build) in
            [(NEURON_DMA_QUEUE_TYPE_TX, tx_ring as fn(&[u64]) -> Vec<u8>), (NEURON_DMA_QUEUE_TYPE_RX, rx_ring)]
        {
            let good: Vec<u64> = (0..n).map(|i| if i % 2 == 0 { good_host } else { device_pa }).collect();
            for bad_at in [0usize, 31, n - 1] {
                let mut addrs = good.clone();
                addrs[bad_at] = bogus_host;
                let ring = build(&addrs);
                for dst_host in [true, false] {
                    let dst = alloc(dev, dst_host, ring.len() as u64, 0).unwrap();
                    write_chunk(emu, &dst, 0, &vec![0xEE; ring.len()]).unwrap();
                    let err = dev.copy_descriptors(&ring, 0, &dst, 0, ring.len() as u64, qtype).unwrap_err();
                    assert_eq!(
                        err,
                        NdmaError::InvalidDescriptorAddress { index: bad_at, pa: bogus_host },
                        "{arch} q{qtype}"
                    );
                    assert_eq!(err.errno(), -22);
                    assert!(
                        read_vec(emu, &dst, 0, ring.len() as u64).unwrap().iter().all(|&b| b == 0xEE),
                        "nothing copied"
                    );
                }
            }
            let ring = build(&good);
            for dst_host in [true, false] {
                let dst = alloc(dev, dst_host, ring.len() as u64 + 32, 0).unwrap();
                dev.copy_descriptors(&ring, 0, &dst, 16, ring.len() as u64, qtype).unwrap();
                assert_eq!(
                    read_vec(emu, &dst, 16, ring.len() as u64).unwrap(),
                    ring,
                    "{arch} q{qtype} host={dst_host}"
                );
            }
        }
        // Malformed requests. The queue types are the ioctl's numbers (`NEURON_DMA_QUEUE_TYPE_*`, FACTS §3.1).
        assert_eq!((NEURON_DMA_QUEUE_TYPE_TX, NEURON_DMA_QUEUE_TYPE_RX), (0, 1));
        let ring = tx_ring(&[device_pa]);
        let dst = dev.alloc_host(64, 0).unwrap();
        assert_eq!(dev.copy_descriptors(&ring, 0, &dst, 0, 16, 2), Err(NdmaError::InvalidQueueType(2)));
        assert_eq!(NdmaError::InvalidQueueType(2).errno(), -1);
        assert_eq!(dev.copy_descriptors(&ring, 0, &dst, 0, 15, 0), Err(NdmaError::PartialDescriptor(15)));
        assert!(matches!(dev.copy_descriptors(&ring, 8, &dst, 0, 16, 0), Err(NdmaError::OutOfRange { .. })));
        // A device destination the bounce copy could not reach is refused before anything is validated.
        let pool = ndma::memory::MemPool::new(1 << 40, 1 << 20, arch.pci_host_base()).unwrap();
        let foreign = pool.alloc_device(64, 0).unwrap();
        assert_eq!(
            dev.copy_descriptors(&tx_ring(&[bogus_host]), 0, &foreign, 0, 16, 0),
            Err(NdmaError::ForeignChunk { what: "descriptor destination" })
        );
        // A host buffer stops being valid once no process is attached.
        dev.detach_process(100);
        let ring = tx_ring(&[good_host]);
        assert_eq!(
            dev.copy_descriptors(&ring, 0, &dst, 0, 16, 0),
            Err(NdmaError::InvalidDescriptorAddress { index: 0, pa: good_host })
        );
    }
}

/// The op layer's own host chunks — the memset buffer, a completion queue — are not a process's memory: a
/// user-authored descriptor naming them is refused, though they are host chunks of the device's pool (the
/// driver accepts them: a process could rewrite another's memset fill, or forge its completions). Their
/// addresses are easy to learn: the memset buffer is the source of every memset's first descriptor.
#[test]
fn copy_descriptors_refuses_the_op_layers_own_host_chunks() {
    let tb = adversarial(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    dev.attach_process(4242);
    let mc = dev.alloc_device(4096, 0).unwrap();
    dev.memset(&mc, 0, 0x5a, 4096).unwrap();
    let memset_buf = dev.ring_descriptors(0).unwrap()[0].0.tx().src;
    let cq = dev.completion_queue(0).unwrap();
    let own = dev.alloc_host(4096, 0).unwrap();
    let ring_mc = dev.alloc_device(64, 0).unwrap();
    for (what, pa) in [("memset buffer", memset_buf), ("completion queue", cq.pa())] {
        for (qtype, build) in
            [(NEURON_DMA_QUEUE_TYPE_TX, tx_ring as fn(&[u64]) -> Vec<u8>), (NEURON_DMA_QUEUE_TYPE_RX, rx_ring)]
        {
            let ring = build(&[own.pa(), pa]);
            let err = dev.copy_descriptors(&ring, 0, &ring_mc, 0, 32, qtype).unwrap_err();
            assert_eq!(err, NdmaError::InvalidDescriptorAddress { index: 1, pa }, "{what} q{qtype}");
        }
        assert!(!dev.is_valid_host_mem(pa, 16), "{what}");
    }
    assert!(dev.is_valid_host_mem(own.pa(), 4096), "a chunk a process allocated still is");
    assert!(read_vec(emu, &ring_mc, 0, 64).unwrap().iter().all(|&b| b == 0), "nothing copied");
}

#[test]
fn is_valid_host_mem_searches_neighbours_then_every_device() {
    let mut cfg = TestbedConfig::new(Instance::INF2_48XLARGE);
    cfg.exec = ExecPolicy::Inline;
    cfg.hbm_size = Some(1 << 30);
    cfg.host_dram_size = 4 << 30;
    let tb = Testbed::new(cfg).unwrap();
    let devs = tb.system.devices();
    assert_eq!(devs.len(), 12);
    let chunk_on = |i: usize| devs[i].alloc_host(8192, 0).unwrap();
    let on5 = chunk_on(5);
    let on11 = chunk_on(11);
    let pa5 = devs[5].mc_to_pa(&on5);
    let pa11 = devs[11].mc_to_pa(&on11);
    // No attached process anywhere: nothing is valid.
    assert!(!devs[4].is_valid_host_mem(pa5, 16));
    devs[5].attach_process(1);
    devs[11].attach_process(1);
    for asker in [0usize, 4, 5, 6, 11] {
        assert!(devs[asker].is_valid_host_mem(pa5, 16), "device {asker} finds device 5's chunk");
        assert!(devs[asker].is_valid_host_mem(pa11 + 8000, 192), "device {asker} finds device 11's chunk");
    }
    // Ranges that leave the chunk, or addresses nobody allocated, are invalid.
    assert!(!devs[5].is_valid_host_mem(pa5 + 8000, 193));
    assert!(!devs[5].is_valid_host_mem(udma::arch::V2_PCI_HOST_BASE | 0x7_0000_0000, 1));
    drop(on5);
    assert!(!devs[5].is_valid_host_mem(pa5, 16), "a freed chunk is no longer valid");
}

mod props {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, Copy)]
    enum Pa {
        GoodHost(u64),
        BadHost(u64),
        Device(u64),
    }

    fn pa() -> impl Strategy<Value = Pa> {
        prop_oneof![
            (0u64..(1 << 20) - 65536).prop_map(Pa::GoodHost),
            (0u64..1 << 30).prop_map(Pa::BadHost),
            (0u64..1 << 30).prop_map(Pa::Device),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the ring holds, the copy happens iff every address validates, and then byte-exact;
        /// otherwise the first bad descriptor is named and nothing is written.
        #[test]
        fn copy_descriptors_is_all_or_nothing(pas in proptest::collection::vec(pa(), 1..40), rx: bool, to_host: bool) {
            let tb = adversarial(Arch::V2, ExecPolicy::Inline);
            let (dev, emu) = tb.device(0);
            dev.attach_process(7);
            let host = dev.alloc_host(1 << 20, 0).unwrap();
            let base = dev.mc_to_pa(&host);
            let addr = |p: Pa| match p {
                Pa::GoodHost(o) => base + o,
                Pa::BadHost(o) => udma::arch::V2_PCI_HOST_BASE | (0x40_0000_0000 + o),
                Pa::Device(o) => 0x10_0000_0000 + o,
            };
            let ring: Vec<u8> = pas
                .iter()
                .flat_map(|&p| {
                    let d = if rx {
                        Desc::m2m_rx(addr(p), 65536, 1, Barrier::None, false).unwrap()
                    } else {
                        Desc::m2m_tx(addr(p), 65536, 1, Barrier::None).unwrap()
                    };
                    d.as_bytes().to_vec()
                })
                .collect();
            let dst = alloc(dev, to_host, ring.len() as u64, 0).unwrap();
            write_chunk(emu, &dst, 0, &vec![0xEE; ring.len()]).unwrap();
            let qtype = if rx { NEURON_DMA_QUEUE_TYPE_RX } else { NEURON_DMA_QUEUE_TYPE_TX };
            let result = dev.copy_descriptors(&ring, 0, &dst, 0, ring.len() as u64, qtype);
            let after = read_vec(emu, &dst, 0, ring.len() as u64).unwrap();
            match pas.iter().position(|p| matches!(p, Pa::BadHost(_))) {
                Some(index) => {
                    prop_assert_eq!(result, Err(NdmaError::InvalidDescriptorAddress { index, pa: addr(pas[index]) }));
                    prop_assert!(after.iter().all(|&b| b == 0xEE));
                }
                None => {
                    prop_assert_eq!(result, Ok(()));
                    prop_assert_eq!(after, ring);
                }
            }
        }
    }
}
