//! A process's user address space (the kernel's `struct mm_struct`): a page table from 4 KiB user pages to
//! frames of host DRAM, built by mapping calls with a placement policy, changed by `munmap`/`mprotect`-like
//! calls, and read and written by the CPU through the page table. Pinning is in `pin.rs`.
//!
//! # Reference counting and exit
//!
//! An `Arc<AddressSpace>` is a reference on the address space (`mmget`): the op layer holds one from
//! submit until it is done with a request. The process can [`AddressSpace::exit`] at any time: its page
//! table is torn down at once, every unpinned frame goes back to host DRAM, pinned frames stay alive until
//! their last unpin (see [`super::frames`]), and every later map, access or pin fails. Dropping the last
//! `Arc` of a live address space tears it down the same way.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::pin::PinCounters;
use super::placement::{take_frames, PAGE};
use super::{MmError, Placement};
use crate::faults::PinFaultPlan;
use crate::lock::lock;
use crate::HostMemory;

/// Where the first mapping of an address space starts (an ordinary x86-64 mmap-area address).
pub const USER_VA_BASE: u64 = 0x7f00_0000_0000;
/// Top of the user half of the address space; mappings never cross it.
const USER_VA_END: u64 = 0x8000_0000_0000;

/// Source of address-space identities (frames remember which address space may unpin them).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What to map: `pages` user pages, their placement, protection and holes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapSpec {
    /// Pages in the mapping, holes included (≥ 1).
    pub pages: usize,
    /// Where the frames of the mapped pages come from. It applies to the mapped pages in order, skipping
    /// holes.
    pub placement: Placement,
    /// Map every page read-only (a write pin or a CPU write fails). [`AddressSpace::protect`] changes it.
    pub read_only: bool,
    /// Indices (0-based, `< pages`) of pages left unmapped: the range is reserved, an access faults.
    pub holes: Vec<usize>,
}

impl MapSpec {
    /// `pages` writable pages placed by `placement`, without holes.
    pub fn new(pages: usize, placement: Placement) -> Self {
        MapSpec { pages, placement, read_only: false, holes: Vec::new() }
    }

    /// Enough pages for `bytes` bytes (at least one).
    pub fn bytes(bytes: u64, placement: Placement) -> Self {
        Self::new(bytes.div_ceil(PAGE).max(1) as usize, placement)
    }

    /// The same mapping, read-only.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// The same mapping with pages `holes` left unmapped.
    pub fn holes(mut self, holes: impl IntoIterator<Item = usize>) -> Self {
        self.holes.extend(holes);
        self
    }
}

/// One mapped page, as the tests see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageInfo {
    /// Physical address of its frame.
    pub pa: u64,
    /// Not read-only.
    pub writable: bool,
    /// Outstanding pins on the frame.
    pub pins: u64,
    /// An unpin marked the frame dirty.
    pub dirty: bool,
}

/// A page-table entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pte {
    pub(crate) pa: u64,
    pub(crate) writable: bool,
}

/// The address space's mutable state, under its lock (the kernel's mmap lock).
#[derive(Debug)]
pub(crate) struct MmState {
    pub(crate) exited: bool,
    /// Virtual page number → entry.
    pub(crate) ptes: BTreeMap<u64, Pte>,
    next_va: u64,
}

/// A user address space. See the module documentation.
pub struct AddressSpace {
    id: u64,
    pid: u32,
    host: Arc<HostMemory>,
    state: Mutex<MmState>,
    pub(crate) faults: PinFaultPlan,
    pub(crate) counters: PinCounters,
}

impl AddressSpace {
    /// An empty address space of process `pid`, whose pages will live in `host`.
    pub fn new(host: &Arc<HostMemory>, pid: u32) -> Arc<Self> {
        Arc::new(AddressSpace {
            // Relaxed: only uniqueness matters.
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            pid,
            host: Arc::clone(host),
            state: Mutex::new(MmState { exited: false, ptes: BTreeMap::new(), next_va: USER_VA_BASE }),
            faults: PinFaultPlan::default(),
            counters: PinCounters::default(),
        })
    }

    /// The owning process (`tgid`).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The identity frames record as their owner (unique per address space, unlike a pid).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The host DRAM its frames come from.
    pub fn host(&self) -> &Arc<HostMemory> {
        &self.host
    }

    /// The pin faults planned for this address space.
    pub fn pin_faults(&self) -> &PinFaultPlan {
        &self.faults
    }

    /// True once the process exited.
    pub fn has_exited(&self) -> bool {
        self.lock().exited
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, MmState> {
        lock(&self.state)
    }

    /// Maps `spec.pages` pages (holes included) at a fresh address, with zero-filled frames placed by
    /// `spec.placement`, and returns the address of the first page. Each mapping is followed by an
    /// unmapped guard page, so two mappings are never adjacent.
    ///
    /// # Errors
    ///
    /// [`MmError::InvalidMapping`] for 0 pages, a run length of 0 or a hole index `>= pages`;
    /// [`MmError::Exited`] after [`AddressSpace::exit`]; [`MmError::InvalidRange`] when the user address
    /// range is used up; [`MmError::Host`] when host DRAM has no room for the frames.
    pub fn map(&self, spec: &MapSpec) -> Result<u64, MmError> {
        if spec.pages == 0 {
            return Err(MmError::InvalidMapping("a mapping needs at least one page"));
        }
        if spec.holes.iter().any(|&h| h >= spec.pages) {
            return Err(MmError::InvalidMapping("a hole lies outside the mapping"));
        }
        let mut hole = vec![false; spec.pages];
        for &h in &spec.holes {
            hole[h] = true;
        }
        let mapped = hole.iter().filter(|&&h| !h).count();
        let frames = if mapped == 0 { Vec::new() } else { take_frames(&self.host, mapped, spec.placement)? };
        let mut st = self.lock();
        let span = (spec.pages as u64 + 1) * PAGE;
        let va = st.next_va;
        let refused = if st.exited {
            Some(MmError::Exited { pid: self.pid })
        } else if va.checked_add(span).is_none_or(|end| end > USER_VA_END) {
            Some(MmError::InvalidRange { va, len: span })
        } else {
            None
        };
        if let Some(e) = refused {
            drop(st);
            self.free_frames(&frames);
            return Err(e);
        }
        st.next_va = va + span;
        for_each_run(&frames, |pa, len| {
            // A user page starts zeroed, as the kernel hands it out.
            let zeroed = self.host.space().fill(pa, len, 0);
            debug_assert!(zeroed.is_ok(), "frame {pa:#x} outside host DRAM");
        });
        let mut table = self.host.frames().lock();
        let mut frames = frames.into_iter();
        for (i, _) in hole.iter().enumerate().filter(|(_, &h)| !h) {
            let Some(pa) = frames.next() else { break };
            table.insert(pa, self.id);
            st.ptes.insert(va / PAGE + i as u64, Pte { pa, writable: !spec.read_only });
        }
        Ok(va)
    }

    /// `munmap`: unmaps every mapped page of `[va, va + len)` (`va` page-aligned, `len` rounded up to
    /// pages; holes in the range are fine). Frames nobody pins go back to host DRAM now, pinned ones when
    /// their last pin is dropped.
    ///
    /// # Errors
    ///
    /// [`MmError::InvalidRange`] for an unaligned `va` or a range that overflows; [`MmError::Exited`].
    pub fn unmap(&self, va: u64, len: u64) -> Result<(), MmError> {
        let (first, last) = page_span(va, len, true)?;
        let mut st = self.lock();
        if st.exited {
            return Err(MmError::Exited { pid: self.pid });
        }
        let vpns: Vec<u64> = st.ptes.range(first..last).map(|(&v, _)| v).collect();
        let ptes: Vec<Pte> = vpns.iter().filter_map(|v| st.ptes.remove(v)).collect();
        drop(st);
        self.release_ptes(ptes);
        Ok(())
    }

    /// `mprotect`: makes every page of `[va, va + len)` read-only (`writable` false) or writable.
    ///
    /// # Errors
    ///
    /// [`MmError::InvalidRange`] for an unaligned `va` or a range that overflows; [`MmError::Unmapped`] if
    /// a page of the range is not mapped (nothing changes then); [`MmError::Exited`].
    pub fn protect(&self, va: u64, len: u64, writable: bool) -> Result<(), MmError> {
        let (first, last) = page_span(va, len, true)?;
        let mut st = self.lock();
        if st.exited {
            return Err(MmError::Exited { pid: self.pid });
        }
        if let Some(v) = (first..last).find(|v| !st.ptes.contains_key(v)) {
            return Err(MmError::Unmapped { va: v * PAGE });
        }
        for (_, pte) in st.ptes.range_mut(first..last) {
            pte.writable = writable;
        }
        Ok(())
    }

    /// The process exits: the page table is torn down (see the module documentation). Idempotent.
    pub fn exit(&self) {
        let mut st = self.lock();
        st.exited = true;
        let ptes = std::mem::take(&mut st.ptes);
        drop(st);
        self.release_ptes(ptes.into_values().collect());
    }

    /// Copies `src` to user address `va` through the page table, as the process writing its memory.
    ///
    /// # Errors
    ///
    /// [`MmError::Unmapped`] / [`MmError::ReadOnly`] at the first page that is a hole or read-only (nothing
    /// is written then); [`MmError::InvalidRange`] if the range overflows; [`MmError::Exited`].
    pub fn write(&self, va: u64, src: &[u8]) -> Result<(), MmError> {
        let st = self.lock();
        let mut done = 0usize;
        for (pa, len) in self.walk(&st, va, src.len() as u64, true)? {
            self.host.space().write(pa, &src[done..done + len])?;
            done += len;
        }
        Ok(())
    }

    /// Copies `dst.len()` bytes at user address `va` into `dst`.
    ///
    /// # Errors
    ///
    /// [`MmError::Unmapped`] at the first hole (nothing is read then); [`MmError::InvalidRange`] if the
    /// range overflows; [`MmError::Exited`].
    pub fn read(&self, va: u64, dst: &mut [u8]) -> Result<(), MmError> {
        let st = self.lock();
        let mut done = 0usize;
        for (pa, len) in self.walk(&st, va, dst.len() as u64, false)? {
            self.host.space().read(pa, &mut dst[done..done + len])?;
            done += len;
        }
        Ok(())
    }

    /// Sets `len` bytes at user address `va` to `byte`.
    ///
    /// # Errors
    ///
    /// As [`AddressSpace::write`].
    pub fn fill(&self, va: u64, len: u64, byte: u8) -> Result<(), MmError> {
        let st = self.lock();
        for (pa, n) in self.walk(&st, va, len, true)? {
            self.host.space().fill(pa, n as u64, byte)?;
        }
        Ok(())
    }

    /// The physical address user address `va` translates to, if its page is mapped.
    pub fn translate(&self, va: u64) -> Option<u64> {
        self.lock().ptes.get(&(va / PAGE)).map(|p| p.pa + va % PAGE)
    }

    /// The page containing `va`, if mapped, with its frame's pin state.
    pub fn page(&self, va: u64) -> Option<PageInfo> {
        let pte = *self.lock().ptes.get(&(va / PAGE))?;
        let f = self.host.frames().info(pte.pa)?;
        Some(PageInfo { pa: pte.pa, writable: pte.writable, pins: f.pins, dirty: f.dirty })
    }

    /// The frames of the `pages` pages from the page containing `va` (`None` for a hole).
    pub fn frames_of(&self, va: u64, pages: usize) -> Vec<Option<u64>> {
        let st = self.lock();
        let first = va / PAGE;
        (first..first.saturating_add(pages as u64)).map(|v| st.ptes.get(&v).map(|p| p.pa)).collect()
    }

    /// Pages currently mapped.
    pub fn mapped_pages(&self) -> usize {
        self.lock().ptes.len()
    }

    /// The physical pieces of `[va, va + len)`, physically contiguous pages merged, after checking that
    /// every page is mapped (and writable when `write`).
    fn walk(&self, st: &MmState, va: u64, len: u64, write: bool) -> Result<Vec<(u64, usize)>, MmError> {
        if st.exited {
            return Err(MmError::Exited { pid: self.pid });
        }
        let end = va.checked_add(len).ok_or(MmError::InvalidRange { va, len })?;
        let mut pieces: Vec<(u64, usize)> = Vec::new();
        let mut at = va;
        while at < end {
            let pte = st.ptes.get(&(at / PAGE)).ok_or(MmError::Unmapped { va: at })?;
            if write && !pte.writable {
                return Err(MmError::ReadOnly { va: at });
            }
            let n = (PAGE - at % PAGE).min(end - at);
            let pa = pte.pa + at % PAGE;
            match pieces.last_mut() {
                Some((p, l)) if *p + *l as u64 == pa => *l += n as usize,
                _ => pieces.push((pa, n as usize)),
            }
            at += n;
        }
        Ok(pieces)
    }

    /// Drops the page table's hold on the frames of `ptes`, freeing those nobody pins.
    fn release_ptes(&self, ptes: Vec<Pte>) {
        let mut free = Vec::new();
        {
            let mut table = self.host.frames().lock();
            free.extend(ptes.iter().filter(|p| table.unmap(p.pa)).map(|p| p.pa));
        }
        self.free_frames(&free);
    }

    fn free_frames(&self, frames: &[u64]) {
        free_frames(&self.host, frames);
    }
}

/// Gives frames back to host DRAM.
pub(crate) fn free_frames(host: &HostMemory, frames: &[u64]) {
    if frames.is_empty() {
        return;
    }
    let mut a = host.allocator();
    for_each_run(frames, |pa, len| {
        let freed = a.free(pa, len);
        debug_assert!(freed, "frame run {pa:#x}+{len:#x} freed twice");
    });
}

impl core::fmt::Debug for AddressSpace {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let st = self.lock();
        write!(
            f,
            "AddressSpace(pid {}, {} pages mapped{})",
            self.pid,
            st.ptes.len(),
            if st.exited { ", exited" } else { "" }
        )
    }
}

impl Drop for AddressSpace {
    fn drop(&mut self) {
        self.exit();
    }
}

/// Calls `f(pa, len)` for each run of physically consecutive frames in `frames`.
fn for_each_run(frames: &[u64], mut f: impl FnMut(u64, u64)) {
    let mut run: Option<(u64, u64)> = None;
    for &pa in frames {
        run = match run {
            Some((start, len)) if start + len == pa => Some((start, len + PAGE)),
            Some((start, len)) => {
                f(start, len);
                Some((pa, PAGE))
            }
            None => Some((pa, PAGE)),
        };
    }
    if let Some((start, len)) = run {
        f(start, len);
    }
}

/// Virtual page numbers `[first, last)` covering `[va, va + len)`; `va` must be page-aligned when
/// `aligned`.
pub(crate) fn page_span(va: u64, len: u64, aligned: bool) -> Result<(u64, u64), MmError> {
    let bad = MmError::InvalidRange { va, len };
    if aligned && va % PAGE != 0 {
        return Err(bad);
    }
    let end = va.checked_add(len).and_then(|e| e.checked_next_multiple_of(PAGE)).ok_or(bad)?;
    Ok((va / PAGE, end / PAGE))
}
