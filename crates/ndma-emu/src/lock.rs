//! Mutex locking that survives poisoning: a panicking test thread must not turn every later register access
//! into a panic. The protected state is always left consistent between statements that can panic.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, ignoring poisoning.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
