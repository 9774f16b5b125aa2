//! The op layer's error type. Every variant maps to the errno the C driver returns ([`NdmaError::errno`]).

use udma::{errno, UdmaError};

use crate::RingState;

/// `ENODEV` (not an errno the HAL itself returns).
const ENODEV: i32 = 19;

/// Everything an op-layer call can refuse or fail with. Every variant says what happened and carries what a
/// person needs to see why; [`NdmaError::errno`] gives the (negative) errno the driver returns.
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use ndma::NdmaError;
///
/// let chunk = dev.alloc_device(4096, 0)?;
/// let err = dev.memset(&chunk, 4000, 0, 100).unwrap_err();
/// assert_eq!(err, NdmaError::OutOfRange { what: "memset window", offset: 4000, size: 100, limit: 4096 });
/// assert_eq!(err.to_string(), "memset window: offset 0xfa0 + size 0x64 does not fit in 0x1000 bytes");
/// assert_eq!(err.errno(), -22); // -EINVAL
/// // HAL errors keep their own errno.
/// let hal = NdmaError::from(udma::UdmaError::InvalidLength { len: 0 });
/// assert_eq!(hal.errno(), -1);
/// # Ok::<(), NdmaError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NdmaError {
    /// A HAL call failed (its own errno: `-1`, `-ENOMEM`, `-EINVAL`).
    #[error("UDMA: {0}")]
    Udma(#[from] UdmaError),
    /// An offset/size outside a memory chunk, or address arithmetic that overflows (`-EINVAL`).
    #[error("{what}: offset {offset:#x} + size {size:#x} does not fit in {limit:#x} bytes")]
    OutOfRange {
        /// Which operand.
        what: &'static str,
        /// The offset or address.
        offset: u64,
        /// The byte count.
        size: u64,
        /// The chunk size (or address-space limit).
        limit: u64,
    },
    /// A NeuronCore the device does not have (`-EINVAL`).
    #[error("NeuronCore {nc} does not exist (device has {ncs})")]
    InvalidNc {
        /// The rejected NC.
        nc: u32,
        /// NCs on the device.
        ncs: u32,
    },
    /// The NC exists but its H2T ring was never brought up (`-EINVAL`).
    #[error("NeuronCore {nc} has no H2T ring (not brought up)")]
    NoH2tRing {
        /// The NC.
        nc: u32,
    },
    /// The completion marker did not appear within the DHAL budget (`-ETIMEDOUT`).
    #[error("DMA timed out on engine {eng} queue {qid}: marker not seen after {polls} polls ({count} descriptors)")]
    Timeout {
        /// Engine id.
        eng: u32,
        /// Queue id.
        qid: u32,
        /// Descriptors in the batch, marker included.
        count: u32,
        /// Polls made.
        polls: u64,
        /// The ring as it stood when the budget ran out, before recovery touched it
        /// ([`NdmaError::ring_state`]).
        state: RingSnapshot,
    },
    /// Host or device memory could not be allocated (`-ENOMEM`).
    #[error("out of {what} memory allocating {size} bytes")]
    NoMemory {
        /// Host or device.
        what: &'static str,
        /// Bytes requested.
        size: u64,
    },
    /// An async context handle outside NONE..ASYNC2 (`-EINVAL`).
    #[error("invalid DMA context handle {0}")]
    InvalidHandle(i32),
    /// A handle whose context is not in use (`-EINVAL`).
    #[error("DMA context {0} is not in use")]
    ContextNotInUse(i32),
    /// The transfer was abandoned in flight: its ring was re-initialised before the transfer completed and it
    /// could not be re-staged (or the device went away), so its destination holds undefined bytes (`-EIO`).
    #[error("DMA context {0} was aborted: its ring was re-initialised before the transfer completed")]
    Aborted(i32),
    /// Staging the completion marker failed (the driver's bare `-1`).
    #[error("staging the completion marker failed: {0}")]
    MarkerStaging(UdmaError),
    /// A chunk this device cannot DMA (`-EINVAL`): a device chunk of another device (or of a pool of one's
    /// own), whose PA names HBM of that device, which here is some other memory; or a host chunk of another
    /// system (or of a pool made apart from one), whose PA is an address of another platform.
    #[error("{what}: a chunk of another device's memory pool, or host memory of another system")]
    ForeignChunk {
        /// Which chunk.
        what: &'static str,
    },
    /// A CPU access to a chunk that has no host mapping (a device chunk) (`-EINVAL`).
    #[error("{what}: a device chunk has no host mapping")]
    NotHostMemory {
        /// Which access.
        what: &'static str,
    },
    /// A plain CPU access to a completion queue's memory, which is read and written only atomically: through
    /// [`crate::zerocopy::CqConsumer`] (`-EPERM`).
    #[error("{what}: a completion queue is accessed only through a CqConsumer")]
    CompletionQueueMemory {
        /// Which access.
        what: &'static str,
    },
    /// A consumer asked of a chunk that is not a completion queue (`-EINVAL`).
    #[error("not a completion queue (NeuronDevice::completion_queue returns one)")]
    NotCompletionQueue,
    /// A device whose hardware is of another generation than the system was declared with (`-ENODEV`).
    #[error("device {device} is {found}, the system was declared {declared}")]
    ArchMismatch {
        /// Device index.
        device: u32,
        /// The arch the system was built for.
        declared: udma::Arch,
        /// The arch the hardware reports.
        found: udma::Arch,
    },
    /// A handle whose context still holds an unwaited transfer (`-EBUSY`; the C driver would overwrite it).
    #[error("DMA context {0} still holds a transfer nobody waited for")]
    ContextInUse(i32),
    /// An async request that does not fit one batch of 2031 descriptors (`-EINVAL`).
    #[error("async DMA request of {size} bytes is too large (one batch holds at most {max} bytes)")]
    AsyncTooLarge {
        /// Bytes requested.
        size: u64,
        /// Largest async request.
        max: u64,
    },
    /// `copy_descriptors` with a queue type other than TX (0) or RX (1) (`-1`).
    #[error("invalid DMA queue type {0}")]
    InvalidQueueType(u32),
    /// `copy_descriptors` with a size that is not a whole number of 16-byte descriptors (`-EINVAL`).
    #[error("descriptor buffer of {0} bytes is not a multiple of 16")]
    PartialDescriptor(u64),
    /// A user-authored descriptor points at host memory nobody allocated (`-EINVAL`).
    #[error("descriptor {index} points at invalid host memory {pa:#x}")]
    InvalidDescriptorAddress {
        /// Index of the offending descriptor.
        index: usize,
        /// The address it carries.
        pa: u64,
    },
    /// Pinning user pages failed (the kernel's errno: `-EFAULT`, `-ENOMEM`, `-ESRCH`, …).
    #[error("pinning user pages at {va:#x} failed (errno {errno})")]
    Pin {
        /// The user address of the first page that could not be pinned.
        va: u64,
        /// The negative errno.
        errno: i32,
    },
    /// A zero-copy submit names a queue the NC does not own (`-ENOENT`).
    #[error("NeuronCore {nc} does not own H2T queue {qid}")]
    NotOwner {
        /// The NC.
        nc: u32,
        /// The queue asked for.
        qid: i32,
    },
    /// Zero-copy is off on this arch (V2 without `zerocopy_trn1_override`) (`-EINVAL`).
    #[error("zero-copy DMA is not supported on this device")]
    ZeroCopyUnsupported,
    /// An async zero-copy request on an arch without async zero-copy (V2: no context-queue bit) (`-EINVAL`).
    #[error("async zero-copy DMA is not supported on this device (no completion thread for its rings)")]
    AsyncZeroCopyUnsupported,
    /// The zero-copy context queue is full (`-EBUSY`): an async request never waits.
    #[error("zero-copy context queue of NeuronCore {nc} is full")]
    QueueFull {
        /// The NC.
        nc: u32,
    },
    /// The ring's completion queue is full and [`NDMA_H2D_COMPL_BACKLOG_MAX`](crate::zerocopy::NDMA_H2D_COMPL_BACKLOG_MAX)
    /// completions wait behind it (`-EBUSY`): an async request is refused until consumers make room.
    #[error(
        "completion queue of NeuronCore {nc} is full and {backlog} completions wait behind it: consume some first"
    )]
    CompletionBacklogFull {
        /// The NC.
        nc: u32,
        /// Completions held back.
        backlog: usize,
    },
    /// [`zerocopy_submit_completed`](crate::NeuronDevice::zerocopy_submit_completed) with sequence number 0
    /// (`-EINVAL`): 0 names a synchronous request and marks an empty completion-queue slot, so no consumer
    /// could tell that completion from no completion. The driver posts it.
    #[error("sequence number 0 names a synchronous request: it has no completion to post")]
    ZeroSequence,
    /// The calling task has no user address space to pin pages in (`-EFAULT`).
    #[error("the calling task has no user address space")]
    NoAddressSpace,
    /// A pre-pinned range of address or size 0, or one that overflows (`-EINVAL`).
    #[error("cannot pin {size} bytes at {va:#x}")]
    InvalidPinRange {
        /// Start.
        va: u64,
        /// Bytes.
        size: u64,
    },
    /// A pre-pinned range overlapping one the process already registered (`-EEXIST`).
    #[error("pinned range at {va:#x} overlaps the one registered at {existing:#x}")]
    PinnedRangeExists {
        /// The new range's start.
        va: u64,
        /// The existing range's start.
        existing: u64,
    },
    /// No pre-pinned range starts at that address (`-ENOENT`).
    #[error("no pinned range starts at {va:#x}")]
    NoPinnedRange {
        /// The address asked for.
        va: u64,
    },
    /// A result carried as an errno: a completed dummy's, or a queued piece's that failed earlier.
    #[error("DMA failed (errno {errno})")]
    Failed {
        /// The negative errno.
        errno: i32,
    },
    /// The zero-copy completion thread could not be started (`-ENOMEM`).
    #[error("cannot start the completion thread: {0}")]
    Thread(String),
    /// An async zero-copy request on a device kept past its [`System`](crate::System) (`-ENODEV`): dropping the
    /// system stopped the device's completion thread, which does not start again. The synchronous paths
    /// keep working. Its errno is also the completion of an async request the stopping thread found it could
    /// not move (pieces a pin budget holds back): the request ends with it rather than staying queued.
    #[error("device {device}: its system was dropped, and with it the completion thread async requests need")]
    CompletionThreadStopped {
        /// The device.
        device: u32,
    },
    /// An async zero-copy request on a device whose completion thread panicked (`-EIO`; the driver's kernel
    /// thread cannot die this way, ours can when a [`Platform`](crate::Platform) call panics on it). Nothing
    /// completes async requests any more, so new ones are refused rather than queued unanswered; the
    /// synchronous paths keep working, and the next synchronous zero-copy submit on a ring completes (and
    /// posts) what that ring had queued when the thread died.
    #[error("device {device}: its zero-copy completion thread panicked; async requests are refused")]
    CompletionThreadPanicked {
        /// The device.
        device: u32,
    },
    /// The V2 reset-window retry gave up after the bounded number of replays (`-ETIMEDOUT`).
    #[error("DMA still hung after {replays} reset-window replays")]
    RetryExhausted {
        /// Replays made.
        replays: u32,
        /// The ring after the last replay timed out, before recovery touched it ([`NdmaError::ring_state`]).
        state: RingSnapshot,
    },
}

/// The [`RingState`] a timeout carries. Errors compare by what failed, not by the moment's snapshot: any two
/// `RingSnapshot`s are equal, so a test can match an error against [`RingSnapshot::NONE`] and read the
/// snapshot through [`NdmaError::ring_state`].
///
/// ```
/// use ndma::{NdmaError, RingSnapshot};
///
/// let err = NdmaError::Timeout { eng: 32, qid: 0, count: 2, polls: 201, state: RingSnapshot::NONE };
/// assert_eq!(err.errno(), -110);
/// assert!(err.ring_state().is_none(), "built by hand: no snapshot");
/// ```
#[derive(Clone, Default)]
pub struct RingSnapshot(pub Option<Box<RingState>>);

impl RingSnapshot {
    /// No snapshot.
    pub const NONE: RingSnapshot = RingSnapshot(None);
}

impl PartialEq for RingSnapshot {
    fn eq(&self, _: &RingSnapshot) -> bool {
        true
    }
}

impl Eq for RingSnapshot {}

impl std::fmt::Debug for RingSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(s) => write!(f, "RingSnapshot(device {} NC {} engine {} queue {})", s.device, s.nc, s.engine, s.qid),
            None => f.write_str("RingSnapshot(None)"),
        }
    }
}

impl NdmaError {
    /// The ring snapshot this error carries: a timeout's ([`NdmaError::Timeout`], [`NdmaError::RetryExhausted`])
    /// taken before recovery re-initialised the ring. `None` for other errors.
    pub fn ring_state(&self) -> Option<&RingState> {
        match self {
            NdmaError::Timeout { state, .. } | NdmaError::RetryExhausted { state, .. } => state.0.as_deref(),
            _ => None,
        }
    }

    /// Attaches `snapshot` to a timeout; other errors are returned as they are.
    pub(crate) fn with_ring_state(mut self, snapshot: Box<RingState>) -> NdmaError {
        if let NdmaError::Timeout { state, .. } | NdmaError::RetryExhausted { state, .. } = &mut self {
            *state = RingSnapshot(Some(snapshot));
        }
        self
    }

    /// The negative errno the driver returns for this failure (example on [`NdmaError`]).
    pub fn errno(&self) -> i32 {
        match self {
            NdmaError::Udma(e) => e.errno(),
            NdmaError::Pin { errno, .. } | NdmaError::Failed { errno } => *errno,
            NdmaError::NotOwner { .. } | NdmaError::NoPinnedRange { .. } => -errno::ENOENT,
            NdmaError::QueueFull { .. } | NdmaError::CompletionBacklogFull { .. } => -errno::EBUSY,
            NdmaError::NoAddressSpace => -errno::EFAULT,
            NdmaError::PinnedRangeExists { .. } => -errno::EEXIST,
            NdmaError::ZeroCopyUnsupported
            | NdmaError::AsyncZeroCopyUnsupported
            | NdmaError::InvalidPinRange { .. }
            | NdmaError::ZeroSequence => -errno::EINVAL,
            NdmaError::Timeout { .. } | NdmaError::RetryExhausted { .. } => -errno::ETIMEDOUT,
            NdmaError::NoMemory { .. } | NdmaError::Thread(_) => -errno::ENOMEM,
            NdmaError::ContextInUse(_) => -errno::EBUSY,
            NdmaError::Aborted(_) | NdmaError::CompletionThreadPanicked { .. } => -errno::EIO,
            NdmaError::MarkerStaging(_) | NdmaError::CompletionQueueMemory { .. } => -errno::EPERM,
            NdmaError::ArchMismatch { .. } | NdmaError::CompletionThreadStopped { .. } => -ENODEV,
            NdmaError::InvalidQueueType(_) => -errno::EPERM,
            NdmaError::OutOfRange { .. }
            | NdmaError::ForeignChunk { .. }
            | NdmaError::NotHostMemory { .. }
            | NdmaError::NotCompletionQueue
            | NdmaError::InvalidNc { .. }
            | NdmaError::NoH2tRing { .. }
            | NdmaError::InvalidHandle(_)
            | NdmaError::ContextNotInUse(_)
            | NdmaError::AsyncTooLarge { .. }
            | NdmaError::PartialDescriptor(_)
            | NdmaError::InvalidDescriptorAddress { .. } => -errno::EINVAL,
        }
    }
}

/// Shorthand for op-layer results: `Result<T>` is `Result<T, NdmaError>`, as every example here returns.
pub type Result<T, E = NdmaError> = std::result::Result<T, E>;
