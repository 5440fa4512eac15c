//! One sink's bounded queue: the driver's loop puts a notice in and never waits; the sink's
//! task takes them out in order. Full, the oldest is dropped and counted — a burst must not
//! grow the daemon's memory, and the newest notice says most about now.

use std::collections::VecDeque;
use std::sync::Mutex;
use tokio::sync::Notify;

#[derive(Debug)]
pub struct Queue<T> {
    items: Mutex<VecDeque<T>>,
    cap: usize,
    ready: Notify,
}

impl<T> Queue<T> {
    pub fn new(cap: usize) -> Self {
        Queue {
            items: Mutex::new(VecDeque::new()),
            cap: cap.max(1),
            ready: Notify::new(),
        }
    }

    /// Queues `item`; past the bound the oldest queued one is dropped: whether one was.
    pub fn push(&self, item: T) -> bool {
        let dropped = {
            let mut q = self.items.lock().unwrap_or_else(|p| p.into_inner());
            let full = q.len() >= self.cap;
            if full {
                q.pop_front();
            }
            q.push_back(item);
            full
        };
        self.ready.notify_one();
        dropped
    }

    /// The next item, waiting for one.
    pub async fn pop(&self) -> T {
        loop {
            let next = self
                .items
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            if let Some(item) = next {
                return item;
            }
            self.ready.notified().await;
        }
    }

    pub fn len(&self) -> usize {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_drops_its_oldest_and_says_so() {
        let q = Queue::new(2);
        assert!(!q.push(1));
        assert!(!q.push(2));
        assert!(q.push(3));
        assert_eq!(q.pop().await, 2);
        assert_eq!(q.pop().await, 3);
        assert!(q.is_empty());
    }
}
