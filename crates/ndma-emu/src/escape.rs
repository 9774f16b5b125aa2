//! Access windows: which memory the engines of a device were allowed to touch, and every engine access
//! outside it (an escape). Off by default; when off, an engine pays one relaxed atomic load per descriptor
//! pair.
//!
//! A caller that hands the engine user-authored descriptors (`copy_descriptors`, the security boundary)
//! records what the validation accepted — each descriptor's buffer, as the validation classified it: a host
//! address that had to lie in a pool chunk, or a device address it passed unchecked — with
//! [`EmuDevice::watch_accesses`]. Every pair an engine of the device then executes is checked before it
//! executes: its source read and its destination write must each lie inside one allowed window of the same
//! space. Anything else is recorded as an [`Escape`] and taken with [`EmuDevice::unwatch_accesses`]. The
//! check sits where the engine decodes a pair, so it sees the addresses the engine really uses — after the
//! engine's own host-bit routing, which may differ from the validation's classification.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::addr_map::{AddrMap, Loc, Space};
use crate::copy::Copy;
use crate::device::EmuDevice;
use crate::lock::lock;

/// A window an engine may access: `len` bytes at device address `addr`, which the validation treated as a
/// host address (`host`: it had to be in a pool chunk) or as device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessWindow {
    /// The address as a descriptor carries it.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// The validation classified it as host memory.
    pub host: bool,
}

/// An engine access outside every allowed window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escape {
    /// The engine.
    pub engine: u32,
    /// Its queue.
    pub qid: u32,
    /// A write (the destination) rather than a read (the source).
    pub write: bool,
    /// The space the engine reached.
    pub space: Space,
    /// Byte offset inside that space.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

impl std::fmt::Display for Escape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "engine {} queue {} {} {} bytes of {:?} at offset {:#x}, outside every window the validation accepted",
            self.engine,
            self.qid,
            if self.write { "wrote" } else { "read" },
            self.len,
            self.space,
            self.offset
        )
    }
}

/// A device's access watch.
#[derive(Debug, Default)]
pub(crate) struct EscapeWatch {
    on: AtomicBool,
    state: Mutex<WatchState>,
}

#[derive(Debug, Default)]
struct WatchState {
    /// Allowed `(space, offset, len)`.
    allowed: Vec<(Space, usize, usize)>,
    escapes: Vec<Escape>,
}

impl EscapeWatch {
    /// Checks the pair `copy` that engine `engine` is about to execute on queue `qid`.
    #[inline]
    pub(crate) fn check(&self, engine: u32, qid: usize, copy: &Copy) {
        // Relaxed: the flag only lets an unwatched engine skip the lock; the windows are read under it.
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        self.check_slow(engine, qid, copy);
    }

    #[cold]
    fn check_slow(&self, engine: u32, qid: usize, copy: &Copy) {
        let mut st = lock(&self.state);
        for (loc, write) in [(copy.src, false), (copy.dst, true)] {
            if !st.allows(loc, copy.len) {
                let e = Escape {
                    engine,
                    qid: qid as u32,
                    write,
                    space: loc.space,
                    offset: loc.off as u64,
                    len: copy.len as u64,
                };
                tracing::error!(%e, "descriptor escape");
                st.escapes.push(e);
            }
        }
    }
}

impl WatchState {
    fn allows(&self, loc: Loc, len: usize) -> bool {
        len == 0
            || self
                .allowed
                .iter()
                .any(|&(space, off, l)| space == loc.space && off <= loc.off && loc.off + len <= off + l)
    }
}

impl EmuDevice {
    /// Starts watching this device's engines: from now on every pair they execute must read and write inside
    /// `allowed` (see the [module](crate::escape) documentation). A window that decodes to no memory is
    /// dropped (an access there is a DMA fault, never an access). Replaces an earlier watch; escapes recorded
    /// before are kept.
    pub fn watch_accesses(&self, allowed: &[AccessWindow]) {
        let watch = &self.core().escapes;
        let map: &AddrMap = &self.core().map;
        let mut st = lock(&watch.state);
        st.allowed.clear();
        for w in allowed {
            let space = if w.host { Space::Host } else { Space::Hbm };
            let pa = if w.host { w.addr & !self.arch().pci_host_base() } else { w.addr };
            let s = map.space(space);
            if let Some(off) = s.offset_of(pa, w.len) {
                st.allowed.push((space, off, w.len as usize));
            }
        }
        // Relaxed: the windows are published by the mutex, which every check takes once it sees the flag.
        watch.on.store(true, Ordering::Relaxed);
    }

    /// Stops watching and returns the escapes recorded since the last call.
    pub fn unwatch_accesses(&self) -> Vec<Escape> {
        let watch = &self.core().escapes;
        let mut st = lock(&watch.state);
        // Relaxed: see `watch_accesses`.
        watch.on.store(false, Ordering::Relaxed);
        st.allowed.clear();
        std::mem::take(&mut st.escapes)
    }
}
