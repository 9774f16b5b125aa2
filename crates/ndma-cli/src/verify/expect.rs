//! The outcome an operation must have, given its inputs and its fault, and what each destination window must
//! hold given the outcome it had.

use ndma::NdmaError;

use super::fault::{Expectation, Observed};
use super::op::OpSpec;

/// The outcome an operation must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Success.
    Ok,
    /// This exact error from the call of segment `at`, before anything was staged for it.
    Refused {
        /// The segment.
        at: usize,
        /// The error.
        err: NdmaError,
    },
    /// Success, or [`NdmaError::RetryExhausted`] after [`ndma::MAX_RESET_WINDOW_REPLAYS`]: an injected reset
    /// window outlasted the operation's bounded replays.
    OkOrRetryExhausted,
    /// A pin failure with this errno: `Pin` from the call, or (async) the completion's `Failed`.
    PinFailed {
        /// The negative errno.
        errno: i32,
    },
    /// `-ETIMEDOUT` on queue `qid` of engine `eng` (an injected hang, lost marker or caught corruption).
    Timeout {
        /// The ring's engine.
        eng: u32,
        /// Its queue.
        qid: u32,
    },
}

impl Expected {
    /// What `spec` must do: a refusal its inputs call for comes first; then its fault's expectation (a
    /// corruption the model reports benign means success).
    pub fn of(spec: &OpSpec, refusal: Option<(usize, NdmaError)>, fault: Option<&Observed>, ring: (u32, u32)) -> Self {
        if let Some((at, err)) = refusal {
            return Expected::Refused { at, err };
        }
        match (spec.fault, fault) {
            (Some(f), Some(o)) if f.expectation() == Expectation::Timeout && o.benign().is_none() => {
                Expected::Timeout { eng: ring.0, qid: ring.1 }
            }
            (Some(_), Some(o)) if o.hung_ahead => Expected::Timeout { eng: ring.0, qid: ring.1 },
            (Some(_), Some(o)) if o.reset_outlasted_op => Expected::OkOrRetryExhausted,
            (Some(f), Some(_)) if f.expectation() == Expectation::PinError => {
                super::path::zerocopy_pin_errno(spec).map_or(Expected::Ok, |errno| Expected::PinFailed { errno })
            }
            _ => Expected::Ok,
        }
    }

    /// Does `actual` match?
    pub fn matches(&self, actual: &Result<(), NdmaError>, fail_at: usize) -> bool {
        match (self, actual) {
            (Expected::Ok | Expected::OkOrRetryExhausted, Ok(())) => true,
            (Expected::OkOrRetryExhausted, Err(NdmaError::RetryExhausted { replays, .. })) => {
                *replays == ndma::MAX_RESET_WINDOW_REPLAYS
            }
            (Expected::Refused { at, err }, Err(e)) => e == err && *at == fail_at,
            (Expected::Timeout { eng, qid }, Err(NdmaError::Timeout { eng: e, qid: q, .. })) => e == eng && q == qid,
            (Expected::PinFailed { errno }, Err(NdmaError::Pin { errno: e, .. } | NdmaError::Failed { errno: e })) => {
                e == errno
            }
            _ => false,
        }
    }
}

/// Is `e` a refusal the op layer makes before staging anything (so the destination is untouched)?
pub fn is_refusal(e: &NdmaError) -> bool {
    matches!(
        e,
        NdmaError::OutOfRange { .. }
            | NdmaError::InvalidNc { .. }
            | NdmaError::NoH2tRing { .. }
            | NdmaError::InvalidHandle(_)
            | NdmaError::ContextNotInUse(_)
            | NdmaError::ContextInUse(_)
            | NdmaError::AsyncTooLarge { .. }
            | NdmaError::InvalidQueueType(_)
            | NdmaError::PartialDescriptor(_)
            | NdmaError::InvalidDescriptorAddress { .. }
            | NdmaError::NotHostMemory { .. }
            | NdmaError::AsyncZeroCopyUnsupported
    )
}

/// Is `e` a timeout (what nobody may see unless it was injected)?
pub fn is_timeout(e: &NdmaError) -> bool {
    matches!(e, NdmaError::Timeout { .. } | NdmaError::RetryExhausted { .. })
}

/// What a destination window must hold after the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// What the transfer writes.
    Written,
    /// Its poison: nothing was written.
    Untouched,
    /// Byte by byte either: the transfer failed part-way.
    Partial,
}

/// The window of segment `i` of an operation of `n` segments whose result was `result`, returned by the call
/// of segment `fail_at` (`n`: the final wait).
///
/// A refusal leaves its segment and the later ones untouched, the earlier ones written (each was waited for
/// by the next call). Any other failure leaves the segment it was waiting for and the one just staged
/// partial, the earlier ones written and the later ones untouched.
pub fn window(result: &Result<(), NdmaError>, fail_at: usize, i: usize) -> Window {
    match result {
        Ok(()) => Window::Written,
        Err(e) if is_refusal(e) => {
            if i < fail_at {
                Window::Written
            } else {
                Window::Untouched
            }
        }
        Err(_) => {
            if i + 1 < fail_at {
                Window::Written
            } else if i <= fail_at {
                Window::Partial
            } else {
                Window::Untouched
            }
        }
    }
}

/// The outcome's name in reports: `ok` or the error's kind (`timeout`, `async_too_large`, …).
pub fn outcome_kind(r: &Result<(), NdmaError>) -> &'static str {
    let Err(e) = r else { return "ok" };
    match e {
        NdmaError::Udma(_) => "udma",
        NdmaError::OutOfRange { .. } => "out_of_range",
        NdmaError::InvalidNc { .. } => "invalid_nc",
        NdmaError::NoH2tRing { .. } => "no_h2t_ring",
        NdmaError::Timeout { .. } => "timeout",
        NdmaError::NoMemory { .. } => "no_memory",
        NdmaError::InvalidHandle(_) => "invalid_handle",
        NdmaError::ContextNotInUse(_) => "context_not_in_use",
        NdmaError::Aborted(_) => "aborted",
        NdmaError::MarkerStaging(_) => "marker_staging",
        NdmaError::NotHostMemory { .. } => "not_host_memory",
        NdmaError::ContextInUse(_) => "context_in_use",
        NdmaError::AsyncTooLarge { .. } => "async_too_large",
        NdmaError::InvalidQueueType(_) => "invalid_queue_type",
        NdmaError::PartialDescriptor(_) => "partial_descriptor",
        NdmaError::InvalidDescriptorAddress { .. } => "invalid_descriptor_address",
        NdmaError::RetryExhausted { .. } => "retry_exhausted",
        NdmaError::Pin { .. } => "pin",
        NdmaError::Failed { .. } => "failed",
        NdmaError::AsyncZeroCopyUnsupported => "async_zerocopy_unsupported",
        NdmaError::QueueFull { .. } => "queue_full",
        NdmaError::CompletionBacklogFull { .. } => "completion_backlog_full",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_after_a_chain_failed() {
        let timeout = Err(NdmaError::Timeout { eng: 1, qid: 0, count: 2, polls: 9, state: ndma::RingSnapshot::NONE });
        // The wait for segment 1 inside segment 2's call timed out: 0 written, 1 and 2 partial, 3 untouched.
        let w: Vec<_> = (0..4).map(|i| window(&timeout, 2, i)).collect();
        assert_eq!(w, [Window::Written, Window::Partial, Window::Partial, Window::Untouched]);
        let refused = Err(NdmaError::AsyncTooLarge { size: 1, max: 0 });
        let w: Vec<_> = (0..3).map(|i| window(&refused, 1, i)).collect();
        assert_eq!(w, [Window::Written, Window::Untouched, Window::Untouched]);
        assert_eq!(window(&Ok(()), 3, 2), Window::Written);
    }
}
