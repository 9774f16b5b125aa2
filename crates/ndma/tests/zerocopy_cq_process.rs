//! The completion queue consumed from a second process, as the runtime does: a child (this test binary,
//! re-executed to run only `cq_peer`) maps the queue's host memory by memfd + offset and takes every
//! completion of async requests the parent submits while it runs. And a child that exits holding the
//! consumers' lock (`cq_dier`) does not stop the parent from taking what is left.

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

/// A V3 testbed with threaded engines and the completion queue of device 0's NC 0.
fn queue_bed() -> (ndma_emu::Testbed, Arc<ndma::MemChunk>) {
    let tb =
        ndma_emu::test_utils::testbed(Arch::V3, ExecPolicy::Threaded, OrderingMode::Relaxed, ndma_emu::ClockKind::Real);
    let chunk = tb.system.devices()[0].completion_queue(0).unwrap();
    (tb, chunk)
}

/// Re-executes this test binary to run only the ignored test `name`, with the queue of `chunk` passed in
/// `PEER_ENV` (its memfd inherited across the exec).
fn spawn_peer(tb: &ndma_emu::Testbed, chunk: &ndma::MemChunk, name: &str) -> std::process::Child {
    // The queue's host PA (its chunk's PA without pci_host_base): the memory another process maps.
    let host_pa = chunk.pa() & !Arch::V3.pci_host_base();
    let range = tb.emu.host().share(host_pa, NDMA_H2D_COMPL_QUEUE_SIZE as u64).expect("shareable");
    let fd = range.fd.as_raw_fd();
    let mut child = Command::new(std::env::current_exe().expect("test binary"));
    child
        .args(["--exact", name, "--include-ignored", "--nocapture", "--test-threads=1"])
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
    child.spawn().expect("spawn the peer")
}

/// The queue as the parent passed it (`spawn_peer`), mapped into this process.
fn map_from_parent() -> Option<SharedMapping> {
    let spec = std::env::var(PEER_ENV).ok()?;
    let f: Vec<u64> = spec.split_whitespace().map(|x| x.parse().expect("number")).collect();
    // SAFETY: the parent passed a descriptor it keeps open (inherited across exec) for this process.
    let fd = unsafe { BorrowedFd::borrow_raw(f[0] as i32) };
    Some(SharedMapping::map(fd, f[1], f[2] as usize, f[3]).expect("map the queue"))
}

#[test]
fn a_second_process_takes_every_completion_in_order() {
    let (tb, chunk) = queue_bed();
    let dev = &tb.system.devices()[0];
    let peer = spawn_peer(&tb, &chunk, "cq_peer");

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
    let Some(map) = map_from_parent() else { return };
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

/// A consumer process killed in the middle of taking a completion — lock held, the entry's sequence number
/// already cleared — does not hang the consumers that remain: the parent's next take asks the kernel, finds
/// the holder gone, takes the lock over, skips the half-taken entry and returns the next one.
#[test]
fn a_process_that_exits_holding_the_consumers_lock_does_not_hang_the_others() {
    let (tb, chunk) = queue_bed();
    let dev = &tb.system.devices()[0];
    let cq = CqConsumer::new(&chunk).unwrap();
    dev.zerocopy_submit_completed(0, -1, 1, 0, 10).unwrap();
    dev.zerocopy_submit_completed(0, -1, 2, -5, 20).unwrap();
    let mut tries = 0u64;
    while cq.len() < 2 {
        tries += 1;
        assert!(tries < 200_000_000, "the completion thread never posted them");
        std::thread::yield_now();
    }
    let out = spawn_peer(&tb, &chunk, "cq_dier").wait_with_output().expect("the peer");
    let stdout = String::from_utf8_lossy(&out.stdout);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "peer:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // The harness prints "test cq_dier ... " before the test runs, on the same line.
    let pid =
        stdout.split("holding the lock as ").nth(1).and_then(|r| r.lines().next()).expect("the peer took the lock");
    assert_eq!(cq.header().consumer_lock.to_string(), pid, "the dead process's id is still in the lock word");

    // A hang guard only (no timing is asserted): a take that never returns fails the test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let taker = CqConsumer::new(&chunk).unwrap();
    std::thread::spawn(move || tx.send((taker.pop(), taker.pop())).unwrap());
    let got = rx.recv_timeout(std::time::Duration::from_secs(600)).expect("the lock was never taken over");
    let e2 = ndma::zerocopy::CqEntry { sequence_num: 2, compl_ret: -5, context: 20 };
    assert_eq!(got, (Some(e2), None), "completion 1 left with the dead consumer; 2 is whole");
    let h = cq.header();
    assert_eq!((h.head, h.tail, h.consumer_lock), (2, 2, 0));
}

/// The dying consumer's side; runs only when re-executed by the test above. It follows the consumers'
/// protocol (`ndma::zerocopy::cq`) by hand up to the middle of a take, then exits without unlocking.
#[test]
#[ignore = "run by a_process_that_exits_holding_the_consumers_lock_does_not_hang_the_others in a child process"]
fn cq_dier() {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    let Some(map) = map_from_parent() else { return };
    let base = map.as_ptr();
    // SAFETY: the mapping holds the whole queue and is 8-byte aligned; the lock word is at +12, the first
    // entry's sequence number at +16, and every user of the queue accesses them atomically.
    let (lock, seq) = unsafe { (&*(base.add(12) as *const AtomicU32), &*(base.add(16) as *const AtomicU64)) };
    let me = std::process::id();
    lock.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed).expect("the lock is free");
    assert_eq!(seq.load(Ordering::Relaxed), 1, "completion 1 at the head");
    seq.store(0, Ordering::Relaxed); // the first store of clearing it
    println!("holding the lock as {me}");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    // Killed here, lock held: no unwinding, no destructor, nothing else runs.
    // SAFETY: sends this process SIGKILL, which cannot be caught; nothing runs after it.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    unreachable!("SIGKILL returned");
}
