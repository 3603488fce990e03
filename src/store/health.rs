//! Whether writes are committing: `/readyz` must say "not ready" while the
//! database answers reads but cannot write (a full disk, a read-only file,
//! an I/O error on commit), which a read alone cannot tell.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long after a write failed for want of storage the store counts as
/// not ready. A success in between proves little (a small write may fit in
/// a full file's free space while a larger one fails), so only time clears
/// it: under load a store that keeps failing stays not ready; once the
/// cause is gone, it is ready again this long after the last failure.
pub const FAILING_FOR: Duration = Duration::from_secs(5);

/// When a write last failed for want of storage, shared by every
/// connection of one store (in this process; another Writ process keeps
/// its own).
#[derive(Debug, Default)]
pub struct WriteHealth {
    /// Milliseconds since the epoch of the last such failure; 0: none.
    failed_at_ms: AtomicU64,
}

impl WriteHealth {
    /// Notes a statement's or a commit's outcome: only a failure because
    /// the database was unavailable counts (a constraint or a bug says
    /// nothing of the storage).
    pub fn note<T>(&self, outcome: &super::StoreResult<T>) {
        if let Err(e) = outcome
            && e.is_unavailable()
        {
            self.failed_at_ms.store(now_ms().max(1), Ordering::Relaxed)
        }
    }

    /// True when a write failed for want of storage less than
    /// [`FAILING_FOR`] ago.
    pub fn failing(&self) -> bool {
        let at = self.failed_at_ms.load(Ordering::Relaxed);
        at != 0 && now_ms().saturating_sub(at) < FAILING_FOR.as_millis() as u64
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn only_a_failure_for_want_of_storage_counts() {
        let health = WriteHealth::default();
        assert!(!health.failing());
        health.note::<()>(&Err(StoreError::Other("check constraint".into())));
        assert!(!health.failing(), "a constraint says nothing of storage");
        health.note(&Ok(()));
        assert!(!health.failing());
        health.note::<()>(&Err(StoreError::Unavailable("disk full".into())));
        assert!(health.failing());
        health.note(&Ok(()));
        assert!(health.failing(), "a small write that fits proves little");
    }

    #[test]
    fn an_old_failure_no_longer_counts() {
        let health = WriteHealth::default();
        let long_ago = now_ms() - FAILING_FOR.as_millis() as u64 - 1;
        health.failed_at_ms.store(long_ago, Ordering::Relaxed);
        assert!(!health.failing());
    }
}
