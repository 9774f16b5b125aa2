//! A zero-copy context (`struct ndma_h2t_zcdma_context`, FACTS §5.2): one piece of a request — at most
//! [`super::NDMA_ZC_PAGES_PER_XFER`] pages of one user buffer — moving through five states (§5.1).

use std::sync::Arc;

use super::pin::Pinned;
use crate::memory::MemChunk;
use crate::{NdmaError, UserMm};

/// `enum ndma_zcdma_state`: where a context is in its life, and so which region of the queue it may sit in.
///
/// The states are ordered as a context goes through them:
///
/// ```
/// use ndma::zerocopy::ZcState;
///
/// assert_eq!(ZcState::default(), ZcState::Invalid);
/// assert!(ZcState::Unpinned < ZcState::PinnedUnsubmitted && ZcState::PinnedUnsubmitted < ZcState::Submitted);
/// assert_eq!(ZcState::Completed as u32, 4, "the driver's value");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ZcState {
    /// An empty slot, or a tombstone left by a drained sequence; skipped when cursors advance.
    #[default]
    Invalid = 0,
    /// Created, pages not pinned yet (an async piece over the pin budget, holding its captured `mm`).
    Unpinned = 1,
    /// Pages pinned, descriptors not built.
    PinnedUnsubmitted = 2,
    /// Descriptors built and doorbell rung: waiting for its marker.
    Submitted = 3,
    /// Already over, queued only to keep completion order (`compl_ret` holds its result): a dummy from
    /// `submit_completed`, or a piece that failed before it reached the head.
    Completed = 4,
}

/// One piece of a zero-copy request.
#[derive(Default)]
pub(crate) struct ZcContext {
    pub state: ZcState,
    /// User address of the piece's first byte.
    pub host_addr: u64,
    /// Device address of the piece's first byte.
    pub dev_addr: u64,
    /// Bytes in the piece.
    pub size: u64,
    /// True: host → device (the device reads the pages); false: device → host.
    pub to_device: bool,
    /// The last piece of its request: its completion is the request's.
    pub last: bool,
    /// Pages the piece spans (the pin count, and the worst-case descriptor count).
    pub nr_pages: u32,
    /// Data descriptors issued (marker not counted).
    pub nr_desc: u32,
    /// The pinned pages, once pinned.
    pub pinned: Option<Pinned>,
    /// Submitter's process id.
    pub pid: u32,
    /// 0 for a synchronous request.
    pub sequence_num: u64,
    /// The request the piece belongs to: a number the queue gives each submit
    /// ([`CtxQueue::new_request`](super::queue::CtxQueue::new_request)). Sequence numbers are the submitter's
    /// and need not be unique, so a failure drains the pieces of its own request by this, never those of
    /// another request that carries the same sequence number.
    pub request: u64,
    /// Opaque value echoed in the completion entry.
    pub context: u64,
    /// The captured address space of an unpinned async piece (`mmget`), dropped once pinned.
    pub mm: Option<Arc<dyn UserMm>>,
    /// Result of a `Completed` context (0 or a negative errno).
    pub compl_ret: i64,
    /// The typed error behind a non-zero `compl_ret` of a piece that failed in place (what a sync submit
    /// returns; an async request's completion carries only the errno).
    pub failure: Option<NdmaError>,
    /// The memory chunk the device side lies in, kept alive while the piece is queued (never read: holding it
    /// is the point).
    #[allow(dead_code)]
    pub held: Option<Arc<MemChunk>>,
}

impl ZcContext {
    /// `ndma_zc_release_ctx`: unpin (or drop the pre-pinned reference), drop the address space, and turn the
    /// slot into a tombstone. Returns the pages it had counted against the pin budget.
    pub(crate) fn release(&mut self) -> u64 {
        // Dropping the pin unpins (dirty after a device→host transfer) or drops the pre-pinned reference. Pages
        // count against the budget exactly while a piece holds its pin.
        let pages = if self.pinned.take().is_some() { u64::from(self.nr_pages) } else { 0 };
        *self = ZcContext::default();
        pages
    }
}

impl std::fmt::Debug for ZcContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZcContext")
            .field("state", &self.state)
            .field("host_addr", &format_args!("{:#x}", self.host_addr))
            .field("dev_addr", &format_args!("{:#x}", self.dev_addr))
            .field("size", &self.size)
            .field("to_device", &self.to_device)
            .field("last", &self.last)
            .field("nr_pages", &self.nr_pages)
            .field("nr_desc", &self.nr_desc)
            .field("pid", &self.pid)
            .field("sequence_num", &self.sequence_num)
            .field("request", &self.request)
            .field("compl_ret", &self.compl_ret)
            .finish()
    }
}
