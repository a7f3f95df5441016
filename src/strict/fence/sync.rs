//! What the fence is made of, as one seam: production runs on tokio's semaphore and std's
//! mutex and atomics ([`TokioSync`]); the model checks (`model_tests.rs`) run the very same
//! fence code on shuttle's primitives, where every lock, permit and atomic operation is a
//! point at which shuttle's scheduler may switch tasks.
//!
//! Why a seam and not `cfg(loom)`: the fence waits on an async semaphore, which loom cannot
//! model, and a `--cfg` flag would rebuild every dependency into a second target dir.
//! Shuttle models async tasks and has a closable, strictly fair semaphore; with the
//! primitives behind this trait its checks are ordinary tests of the real fence.
//!
//! Only what the fence needs: a mutex whose lock never fails (a poisoned fence state is
//! still the truth), a closable first-come-first-served semaphore whose permits are
//! released by dropping them, and a sequentially consistent `u8` cell.

use std::future::Future;
use std::ops::DerefMut;
use std::sync::atomic::AtomicU8;
use std::sync::{Arc, PoisonError};

/// The primitives a [`Fence`](super::Fence) is built from.
pub trait FenceSync: Send + Sync + 'static {
    type Mutex<T: Send>: Send + Sync;
    type Guard<'a, T: Send + 'a>: DerefMut<Target = T>;
    type Semaphore: Send + Sync;
    /// Holding it holds a permit; dropping it releases the permit.
    type Permit: Send + Sync;
    type Cell: Send + Sync;

    fn mutex<T: Send>(value: T) -> Self::Mutex<T>;
    /// Never fails: a poisoned value is returned as it is.
    fn lock<T: Send>(mutex: &Self::Mutex<T>) -> Self::Guard<'_, T>;

    fn semaphore(permits: usize) -> Arc<Self::Semaphore>;
    /// Waits for one permit, first come first served; `None` once the semaphore is closed.
    ///
    /// # Cancel safety
    /// Dropping the future before it resolves takes no permit.
    fn acquire(semaphore: Arc<Self::Semaphore>) -> impl Future<Output = Option<Self::Permit>> + Send;
    /// Refuses every waiter and every later acquire.
    fn close(semaphore: &Self::Semaphore);

    fn cell(value: u8) -> Self::Cell;
    fn load(cell: &Self::Cell) -> u8;
    fn store(cell: &Self::Cell, value: u8);
    /// Sets `new` if the cell holds `current`.
    fn compare_exchange(cell: &Self::Cell, current: u8, new: u8);
}

/// Production: tokio's fair semaphore, std's mutex, `SeqCst` atomics.
/// The wire-state cell's four methods of [`FenceSync`], over an `AtomicU8` type with
/// std's API (std's, or the model checker's), every access `SeqCst`.
macro_rules! atomic_u8_cell {
    ($atomic:ty) => {
        fn cell(value: u8) -> Self::Cell {
            <$atomic>::new(value)
        }

        fn load(cell: &Self::Cell) -> u8 {
            cell.load(std::sync::atomic::Ordering::SeqCst)
        }

        fn store(cell: &Self::Cell, value: u8) {
            cell.store(value, std::sync::atomic::Ordering::SeqCst);
        }

        fn compare_exchange(cell: &Self::Cell, current: u8, new: u8) {
            use std::sync::atomic::Ordering::SeqCst;
            let _ = cell.compare_exchange(current, new, SeqCst, SeqCst);
        }
    };
}
#[cfg(test)]
pub(super) use atomic_u8_cell;

#[derive(Debug)]
pub enum TokioSync {}

impl FenceSync for TokioSync {
    type Mutex<T: Send> = std::sync::Mutex<T>;
    type Guard<'a, T: Send + 'a> = std::sync::MutexGuard<'a, T>;
    type Semaphore = tokio::sync::Semaphore;
    type Permit = tokio::sync::OwnedSemaphorePermit;
    type Cell = AtomicU8;

    fn mutex<T: Send>(value: T) -> Self::Mutex<T> {
        std::sync::Mutex::new(value)
    }

    fn lock<T: Send>(mutex: &Self::Mutex<T>) -> Self::Guard<'_, T> {
        mutex.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn semaphore(permits: usize) -> Arc<Self::Semaphore> {
        Arc::new(tokio::sync::Semaphore::new(permits))
    }

    async fn acquire(semaphore: Arc<Self::Semaphore>) -> Option<Self::Permit> {
        semaphore.acquire_owned().await.ok()
    }

    fn close(semaphore: &Self::Semaphore) {
        semaphore.close();
    }

    atomic_u8_cell!(AtomicU8);
}
