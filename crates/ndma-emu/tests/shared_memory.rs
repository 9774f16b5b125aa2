//! Host DRAM is shareable with another process: a child process (this test binary, re-executed to run only
//! `peer`) maps a host buffer by memfd + offset, checks what the parent wrote, and writes a reply the parent
//! reads back — the way a runtime maps the driver's completion queue.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ndma_emu::{HostMemory, SharedMapping};
use udma::DmaMemory;

/// Tells the re-executed binary where the buffer is: "fd offset len pa".
const PEER_ENV: &str = "NDMA_EMU_SHARED_PEER";
const LEN: usize = 64 << 10;
/// The window the child writes, deliberately unaligned.
const REPLY_AT: usize = 4096 + 100;
const REPLY_LEN: usize = 5000;
/// A word the child stores with `Release` (the parent reads it after `wait`, which also orders it).
const FLAG_AT: usize = 32 << 10;

fn parent_pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(13) ^ (i >> 8) as u8
}

fn reply_pattern(i: usize) -> u8 {
    !(i as u8).wrapping_mul(7)
}

#[test]
fn a_child_process_maps_a_host_buffer_by_fd_and_offset() {
    let host = Arc::new(HostMemory::new(64 << 20).expect("host DRAM"));
    let _before = host.alloc(12_288 + 256, 256).expect("pad");
    let buf = host.alloc(LEN, 256).expect("buffer");
    let after = host.alloc(4096, 256).expect("neighbour");
    after.fill(0, 4096, 0xC3).unwrap();
    let data: Vec<u8> = (0..LEN).map(parent_pattern).collect();
    buf.write_bytes(0, &data).unwrap();
    buf.store_u32(FLAG_AT, 0, Ordering::Relaxed).unwrap();

    let range = buf.share().expect("shareable");
    assert_eq!(range.offset, buf.phys_addr() - ndma_emu::HOST_DRAM_BASE);
    let fd = range.fd.as_raw_fd();
    let mut child = Command::new(std::env::current_exe().expect("test binary"));
    child
        .args(["--exact", "peer", "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(PEER_ENV, format!("{fd} {} {} {}", range.offset, range.len, range.pa));
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl (async-signal-safe) to
    // let the memfd survive the exec; the parent's descriptor keeps its close-on-exec flag.
    unsafe {
        child.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = child.output().expect("spawn the peer");
    assert!(
        out.status.success(),
        "peer failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"), "the peer test did not run");

    let mut back = vec![0u8; LEN];
    buf.read_bytes(0, &mut back).unwrap();
    for (i, &b) in back.iter().enumerate() {
        let want = if i == FLAG_AT {
            0x11 // low byte of the flag
        } else if (FLAG_AT + 1..FLAG_AT + 4).contains(&i) {
            0x00
        } else if (REPLY_AT..REPLY_AT + REPLY_LEN).contains(&i) {
            reply_pattern(i - REPLY_AT)
        } else {
            parent_pattern(i)
        };
        assert_eq!(b, want, "byte {i}");
    }
    assert_eq!(buf.load_u32(FLAG_AT, Ordering::Acquire).unwrap(), 0x11);
    let mut neighbour = vec![0u8; 4096];
    after.read_bytes(0, &mut neighbour).unwrap();
    assert!(neighbour.iter().all(|&b| b == 0xC3), "the child wrote outside the buffer");
}

/// The child's side; run only by the test above, with the buffer described in `PEER_ENV`.
#[test]
#[ignore = "runs in the child process spawned by a_child_process_maps_a_host_buffer_by_fd_and_offset"]
fn peer() {
    let spec = std::env::var(PEER_ENV).expect("peer runs only as a child of the sharing test");
    let v: Vec<u64> = spec.split(' ').map(|x| x.parse().expect("number")).collect();
    let [fd, offset, len, pa] = v[..] else { panic!("bad {PEER_ENV}: {spec}") };
    // SAFETY: the parent passed this descriptor across exec and it stays open for the life of the process.
    let fd = unsafe { BorrowedFd::borrow_raw(fd as i32) };
    let view = SharedMapping::map(fd, offset, len as usize, pa).expect("map the shared range");
    assert_eq!((view.len(), view.phys_addr()), (LEN, pa));
    let mut got = vec![0u8; LEN];
    view.read_bytes(0, &mut got).unwrap();
    for (i, &b) in got.iter().enumerate().filter(|&(i, _)| !(FLAG_AT..FLAG_AT + 4).contains(&i)) {
        assert_eq!(b, parent_pattern(i), "byte {i} as the parent wrote it");
    }
    let reply: Vec<u8> = (0..REPLY_LEN).map(reply_pattern).collect();
    view.write_bytes(REPLY_AT, &reply).unwrap();
    view.store_u32(FLAG_AT, 0x11, Ordering::Release).unwrap();
    assert!(view.write_bytes(LEN - 1, &[0, 0]).is_err(), "the view ends where the buffer ends");
}

/// Host DRAM's memfd is handed to other code and processes, so it is sealed at its size: shrinking it (which
/// turned every access past the new end into SIGBUS, through safe accessors) is refused, and the memory stays
/// readable through the owner and through a shared view.
#[test]
fn host_drams_memfd_cannot_be_shrunk_under_its_mappings() {
    let host = Arc::new(HostMemory::new(1 << 20).unwrap());
    let buf = host.alloc(4096, 4096).unwrap();
    buf.fill(0, 4096, 0x5a).unwrap();
    let view = SharedMapping::of(&buf.share().unwrap()).unwrap();
    let fd = host.space().shared_fd().unwrap().try_clone_to_owned().unwrap();
    let file = std::fs::File::from(fd);
    let err = file.set_len(0).expect_err("sealed against shrinking");
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    assert_eq!(file.set_len(2 << 20).expect_err("and growing").raw_os_error(), Some(libc::EPERM));
    let mut b = [0u8; 4];
    view.read_bytes(0, &mut b).unwrap();
    assert_eq!(b, [0x5a; 4]);
    buf.read_bytes(4092, &mut b).unwrap();
    assert_eq!(b, [0x5a; 4]);
}

/// A file that may shrink is not mapped: it could fault any later access.
#[test]
fn a_file_not_sealed_against_shrinking_is_refused() {
    let path = std::env::temp_dir().join(format!("ndma-unsealed-{}", std::process::id()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    file.set_len(8192).unwrap();
    // SAFETY: `file` outlives the borrow.
    let fd = unsafe { BorrowedFd::borrow_raw(file.as_raw_fd()) };
    let err = SharedMapping::map(fd, 0, 8192, 0).expect_err("unsealed");
    assert_eq!(
        err.to_string(),
        ndma_emu::EmuError::InvalidConfig("a shared range's file must be sealed against shrinking").to_string()
    );
}
