//! The completion queue consumed from a second process, as the runtime does: a child (this test binary,
//! re-executed to run only `cq_peer`) maps the queue's host memory by memfd + offset and takes every
//! completion of async requests the parent submits while it runs.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;

use ndma::zerocopy::{CqConsumer, NDMA_H2D_COMPL_QUEUE_SIZE};
use ndma::{BatchOp, PAGE_SIZE};
use ndma_emu::test_utils::alloc;
use ndma_emu::{AddressSpace, ExecPolicy, MapSpec, OrderingMode, Placement, SharedMapping};
use udma::{Arch, DmaMemory};

/// "fd offset len pa" of the queue, for the re-executed binary.
const PEER_ENV: &str = "NDMA_CQ_PEER";
const REQUESTS: u64 = 300;

#[test]
fn a_second_process_takes_every_completion_in_order() {
    let tb =
        ndma_emu::test_utils::testbed(Arch::V3, ExecPolicy::Threaded, OrderingMode::Relaxed, ndma_emu::ClockKind::Real);
    let dev = &tb.system.devices()[0];
    let chunk = dev.completion_queue(0).unwrap();
    // The queue's host PA (its chunk's PA without pci_host_base): the memory another process maps.
    let host_pa = chunk.pa() & !Arch::V3.pci_host_base();
    let range = tb.emu.host().share(host_pa, NDMA_H2D_COMPL_QUEUE_SIZE as u64).expect("shareable");
    let fd = range.fd.as_raw_fd();
    let mut child = Command::new(std::env::current_exe().expect("test binary"));
    child
        .args(["--exact", "cq_peer", "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(PEER_ENV, format!("{fd} {} {} {}", range.offset, range.len, range.pa))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: runs in the forked child before exec and only calls fcntl (async-signal-safe), so the memfd
    // survives the exec; the parent's descriptor keeps its close-on-exec flag.
    unsafe {
        child.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let peer = child.spawn().expect("spawn the peer");

    let mm = AddressSpace::new(tb.emu.host(), 77);
    let _enter = mm.enter();
    let va = mm.map(&MapSpec::new(8, Placement::Scattered { seed: 1 })).unwrap();
    let mc: Arc<ndma::MemChunk> = alloc(dev, false, 8 * PAGE_SIZE, 0).unwrap();
    for seq in 1..=REQUESTS {
        let op = BatchOp { offset: 0, size: 8 * PAGE_SIZE, buffer: va };
        dev.zerocopy_submit(0, &[op], &mc, 0, -1, seq % 2 == 1, seq, seq * 10).unwrap();
    }
    let out = peer.wait_with_output().expect("the peer");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "peer failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("1 passed"), "the peer test did not run:\n{stdout}");
    assert!(stdout.contains(&format!("took {REQUESTS} completions")), "{stdout}");
    let local = CqConsumer::new(&chunk).unwrap();
    assert_eq!(local.pop(), None, "the child took them all");
    assert_eq!(local.header().head, REQUESTS as u32);
    assert!(tb.emu.host().frames().leak_check().is_clean());
}

/// The child's side; runs only when re-executed by the test above.
#[test]
#[ignore = "run by a_second_process_takes_every_completion_in_order in a child process"]
fn cq_peer() {
    let Ok(spec) = std::env::var(PEER_ENV) else { return };
    let f: Vec<u64> = spec.split_whitespace().map(|x| x.parse().expect("number")).collect();
    // SAFETY: the parent passed a descriptor it keeps open (inherited across exec) for this process.
    let fd = unsafe { BorrowedFd::borrow_raw(f[0] as i32) };
    let map = SharedMapping::map(fd, f[1], f[2] as usize, f[3]).expect("map the queue");
    // SAFETY: the mapping is 8-byte aligned (page aligned plus the chunk's 256-byte alignment), holds the
    // whole queue, lives until the end of this function, and every user of it goes through atomics.
    let cq = unsafe { CqConsumer::from_raw(map.as_ptr()) };
    assert_eq!(cq.header().capacity, 1024);
    let mut next = 1u64;
    let mut spins = 0u64;
    while next <= REQUESTS {
        match cq.pop() {
            Some(e) => {
                assert_eq!((e.sequence_num, e.compl_ret, e.context), (next, 0, next * 10));
                next += 1;
            }
            None => {
                spins += 1;
                assert!(spins < 200_000_000, "completion {next} never came");
                std::thread::yield_now();
            }
        }
    }
    println!("took {REQUESTS} completions");
}
