//! The calling thread's current address space (`current->mm`): set for a scope by
//! [`AddressSpace::enter`], read by [`crate::EmuPlatform`]'s `current_mm`.
//!
//! A thread that entered no address space is a kernel thread: it has no `mm` (the completion thread pins
//! through a captured one). Guards nest; each restores what was current before it.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

use ndma::UserMm;

use super::AddressSpace;
use crate::HostMemory;

thread_local! {
    static CURRENT: RefCell<Option<Arc<AddressSpace>>> = const { RefCell::new(None) };
}

/// While alive, the thread runs "in" an address space; dropping it restores the previous one. Bound to the
/// thread that created it.
#[must_use = "the address space is current only while the guard lives"]
#[derive(Debug)]
pub struct EnterGuard {
    prev: Option<Arc<AddressSpace>>,
    _thread_bound: PhantomData<*const ()>,
}

impl AddressSpace {
    /// Makes this address space the calling thread's current one until the guard drops (the thread acts as
    /// a task of this process).
    pub fn enter(self: &Arc<Self>) -> EnterGuard {
        let prev = CURRENT.with(|c| c.replace(Some(Arc::clone(self))));
        EnterGuard { prev, _thread_bound: PhantomData }
    }
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let prev = self.prev.take();
        // The replaced value drops after the borrow ends: dropping an address space must not find the cell
        // borrowed.
        let left = CURRENT.with(|c| c.replace(prev));
        drop(left);
    }
}

/// The address space the calling thread entered, if any.
pub fn current() -> Option<Arc<AddressSpace>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// `current->mm` for a platform on `host`: none for a thread that entered no address space, one whose
/// process exited (the kernel clears `current->mm` at exit), or one whose frames live in another host DRAM
/// (a different emulated machine).
pub(crate) fn current_mm_on(host: &Arc<HostMemory>) -> Option<Arc<dyn UserMm>> {
    let mm = current().filter(|mm| Arc::ptr_eq(mm.host(), host) && !mm.has_exited())?;
    Some(mm)
}

/// Whether `mm` is the calling thread's current address space.
pub(crate) fn is_current(mm: &AddressSpace) -> bool {
    CURRENT.with(|c| c.borrow().as_deref().is_some_and(|cur| std::ptr::eq(cur, mm)))
}
