//! The observation threads a client keeps, and waiting for them to end.
//!
//! A leaf: the client handle (`client.rs`) holds the list and joins it when it closes; the
//! observe / unobserve exports (`observe.rs`) add to it and take from it. Neither needs the
//! other for this, so the list lives here rather than in one of them.

use std::thread::JoinHandle;

use bytes::Bytes;

/// One observation's thread, as the client keeps it.
#[derive(Debug)]
pub(crate) struct Observer {
    key: Bytes,
    thread: JoinHandle<()>,
}

impl Observer {
    /// The thread delivering the notifications of `key`.
    pub(crate) fn new(key: Bytes, thread: JoinHandle<()>) -> Self {
        Observer { key, thread }
    }
}

/// Takes out of `observers` those of `key` (they ended with an unobserve of it).
pub(crate) fn take_key(observers: &mut Vec<Observer>, key: &[u8]) -> Vec<Observer> {
    let (ended, kept) = std::mem::take(observers)
        .into_iter()
        .partition(|o| o.key == key);
    *observers = kept;
    ended
}

/// Waits for the threads of ended observations (so that their last callback and `destroy`
/// have run), except the calling thread's own (a callback that called unobserve / close:
/// its thread ends by itself when the callback returns).
pub(crate) fn join_observers(observers: Vec<Observer>) {
    let me = std::thread::current().id();
    for observer in observers {
        if observer.thread.thread().id() != me {
            // A panic on that thread was already contained there; nothing to report.
            let _ = observer.thread.join();
        }
    }
}
