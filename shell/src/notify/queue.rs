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

    /// Queues `item`; past the bound the oldest queued item `expendable` picks is dropped
    /// (the oldest of all if it picks none): whether one was.
    pub fn push(&self, item: T, expendable: impl Fn(&T) -> bool) -> bool {
        let dropped = {
            let mut q = self.items.lock().unwrap_or_else(|p| p.into_inner());
            let full = q.len() >= self.cap;
            if full {
                match q.iter().position(&expendable) {
                    Some(i) => drop(q.remove(i)),
                    None => drop(q.pop_front()),
                }
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
    async fn a_full_queue_drops_its_oldest_expendable_item_and_says_so() {
        let q = Queue::new(3);
        let odd = |n: &i32| n % 2 == 1;
        for n in [2, 1, 3] {
            assert!(!q.push(n, odd));
        }
        assert!(q.push(4, odd), "full: 1 goes, the oldest odd one");
        assert!(q.push(6, odd), "full: 3 goes");
        assert!(q.push(8, odd), "full, none odd: the oldest, 2, goes");
        for want in [4, 6, 8] {
            assert_eq!(q.pop().await, want);
        }
        assert!(q.is_empty());
    }
}
