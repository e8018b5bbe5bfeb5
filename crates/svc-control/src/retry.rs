//! Background retries of the writes and removals that must eventually happen (a failed spawn's
//! record and runtime, a destroyed sandbox's record), with backoff, one loop per key at a time,
//! until they succeed or svc shuts down (start-up recovery covers a shutdown in between).

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::ControlPlane;

/// The first wait between attempts; it doubles up to [`MAX_DELAY`].
const FIRST_DELAY: Duration = Duration::from_millis(500);
const MAX_DELAY: Duration = Duration::from_secs(30);

/// Keys with a retry loop running.
#[derive(Default)]
pub(crate) struct Retries {
    running: Mutex<HashSet<String>>,
}

impl ControlPlane {
    /// Runs `attempt` (true = done) after [`FIRST_DELAY`], then with backoff, in a task of its
    /// own. A key that already has a loop running gets no second one.
    pub(crate) fn retry_in_background<F, Fut>(&self, key: String, attempt: F)
    where
        F: Fn(ControlPlane) -> Fut + Send + 'static,
        Fut: Future<Output = bool> + Send,
    {
        let fresh = self
            .inner
            .retries
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone());
        if !fresh {
            return;
        }
        let plane = self.clone();
        tokio::spawn(async move {
            let mut delay = FIRST_DELAY;
            loop {
                tokio::select! {
                    () = plane.shutdown_token().cancelled() => break,
                    () = tokio::time::sleep(delay) => {}
                }
                if attempt(plane.clone()).await {
                    break;
                }
                delay = (delay * 2).min(MAX_DELAY);
            }
            plane
                .inner
                .retries
                .running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key);
        });
    }

    /// Keys with a retry loop running (tests).
    #[cfg(test)]
    pub(crate) fn retries_running(&self) -> usize {
        self.inner
            .retries
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_loop_per_key_until_it_succeeds() {
        let plane = ControlPlane::for_tests().await;
        let attempts = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let attempts = Arc::clone(&attempts);
            plane.retry_in_background("k".into(), move |_| {
                let attempts = Arc::clone(&attempts);
                async move { attempts.fetch_add(1, Ordering::SeqCst) + 1 >= 3 }
            });
        }
        assert_eq!(plane.retries_running(), 1, "one loop for the key");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            3,
            "stops after the success"
        );
        assert_eq!(plane.retries_running(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_loop() {
        let plane = ControlPlane::for_tests().await;
        plane.retry_in_background("never".into(), |_| async { false });
        plane.shutdown_token().cancel();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(plane.retries_running(), 0);
    }
}
