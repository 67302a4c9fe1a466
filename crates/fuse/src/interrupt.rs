//! FUSE interrupts: when a process waiting in a read gets a signal (Ctrl-C), the kernel sends `INTERRUPT`
//! naming the request; the read then answers `EINTR` at once instead of waiting for the disk.
//!
//! The interrupt may be handled before the request it names has registered (both run as tasks), so an
//! interrupt for an unknown request is remembered for a while (bounded) and seen when that request registers.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Interrupts for requests not (yet) registered, kept at most this many …
const EARLY_MAX: usize = 256;
/// … and this long.
const EARLY_TTL: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct Interrupts {
    waiting: Mutex<HashMap<u64, Arc<Notify>>>,
    early: Mutex<VecDeque<(u64, Instant)>>,
}

/// A registered request; dropping it unregisters.
pub struct Registration<'a> {
    interrupts: &'a Interrupts,
    unique: u64,
    notify: Arc<Notify>,
}

impl Registration<'_> {
    /// Completes when the request is interrupted.
    pub async fn interrupted(&self) {
        self.notify.notified().await
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.interrupts.waiting.lock().remove(&self.unique);
    }
}

impl Interrupts {
    /// Register the request `unique` (a slow one: a read that may wait for a disk).
    pub fn register(&self, unique: u64) -> Registration<'_> {
        let notify = Arc::new(Notify::new());
        {
            let mut early = self.early.lock();
            if let Some(at) = early.iter().position(|(u, _)| *u == unique) {
                early.remove(at);
                notify.notify_one(); // a stored permit: `interrupted()` completes at once
            }
        }
        self.waiting.lock().insert(unique, Arc::clone(&notify));
        Registration {
            interrupts: self,
            unique,
            notify,
        }
    }

    /// The kernel interrupts request `unique`.
    pub fn interrupt(&self, unique: u64) {
        if let Some(notify) = self.waiting.lock().get(&unique) {
            notify.notify_one();
            return;
        }
        let mut early = self.early.lock();
        let now = Instant::now();
        while early
            .front()
            .is_some_and(|(_, at)| now.duration_since(*at) > EARLY_TTL)
            || early.len() >= EARLY_MAX
        {
            early.pop_front();
        }
        early.push_back((unique, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_interrupt_before_or_after_registration_is_seen() {
        let interrupts = Interrupts::default();
        interrupts.interrupt(7);
        let early = interrupts.register(7);
        tokio::time::timeout(Duration::from_secs(1), early.interrupted())
            .await
            .expect("the early interrupt was kept");
        let late = interrupts.register(8);
        interrupts.interrupt(8);
        tokio::time::timeout(Duration::from_secs(1), late.interrupted())
            .await
            .expect("the interrupt reached the registered request");
        let other = interrupts.register(9);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), other.interrupted())
                .await
                .is_err(),
            "an uninterrupted request is not woken"
        );
    }
}
