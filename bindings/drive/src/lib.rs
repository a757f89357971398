//! Futures polled on a host language's own thread, woken from any thread.
//!
//! The Python binding (asyncio) and the Node binding run each call's Rust future on the
//! thread that made the call: Python's event loop thread, Node's JS thread. A [`Task`] is
//! polled there right away (which sends the request), and again each time its waker fires.
//! The waker, called by a runtime worker (a response arrived, a timer fired), hands the task
//! to its [`Host`], which queues it for the host's thread (a completion socket the event loop
//! watches, a threadsafe function), and the host polls it there. A call then costs no runtime
//! task and no hand-off to a worker thread, and the host's objects (Python futures, Node
//! promises) are only touched on their own thread. See docs/architecture.md ("Layers", and
//! "The path of one `set` call" for what each binding does around it).
//!
//! What this crate owns is what the two bindings share: the task's state (queued
//! for a poll or not; running, taken out while polled, or done), catching a panic of the
//! future so that it never unwinds into the host, and an optional cancellation.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use mqstate_drive::{Host, Output, Task};
//!
//! /// A host whose "thread" is whoever drains `queue`.
//! #[derive(Default)]
//! struct Queue(Mutex<Vec<Arc<Task<Queue>>>>);
//!
//! impl Host for Queue {
//!     type Context = ();
//!     fn schedule(&self, task: Arc<Task<Self>>) {
//!         self.0.lock().unwrap().push(task);
//!     }
//! }
//!
//! let host = Arc::new(Queue::default());
//! let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
//! let got = Arc::new(Mutex::new(None));
//! let sink = got.clone();
//! let task = Task::new(host.clone(), rx, None, move |(), output: Output<_>| {
//!     *sink.lock().unwrap() = Some(output.unwrap());
//! });
//! task.poll(()); // pending: nothing sent yet
//! tx.send(7).unwrap(); // wakes the task: the host queues it
//! let queued = std::mem::take(&mut *host.0.lock().unwrap());
//! for task in queued {
//!     task.poll(()); // on the host's thread
//! }
//! assert_eq!(*got.lock().unwrap(), Some(Some(Ok(7))));
//! ```

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// The host side of [`Task`]s: how a woken task gets back to the host's thread.
pub trait Host: Send + Sync + Sized + 'static {
    /// What a poll on the host's thread hands to the settling function (for example Node's
    /// `napi_env`).
    type Context: Copy + 'static;

    /// Queues `task` for a [`Task::poll`] on the host's thread. Called from any thread (mostly
    /// runtime workers), at most once per wake-up that the host has not served yet.
    fn schedule(&self, task: Arc<Task<Self>>);

    /// Runs `poll`, one poll of a task's future, in whatever context the future needs (for
    /// example inside its async runtime). The settling function runs outside it. By default,
    /// as is: the host entered that context before polling.
    fn around_poll<R>(&self, poll: impl FnOnce() -> R) -> R {
        poll()
    }
}

/// A future that completes when the call it belongs to is cancelled.
pub type Cancelled = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What a task's future ended with: its output, `None` if its cancellation completed first
/// (then the future was dropped unfinished), or the panic it raised.
pub type Output<T> = std::thread::Result<Option<T>>;

/// A future and what to do with its output, with their types erased.
trait Step<C>: Send {
    /// Polls the future; `Ready` once its output (or its panic) is kept for `finish`.
    fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// Hands the kept output to the settling function (on the host's thread).
    fn finish(self: Box<Self>, host: C);
}

/// The [`Step`] of [`Task::new`]. (The future is boxed so that `Settle` is `Unpin`.)
struct Settle<F: Future, S> {
    future: Pin<Box<F>>,
    cancelled: Option<Cancelled>,
    output: Option<Output<F::Output>>,
    settle: S,
}

impl<F, S, C> Step<C> for Settle<F, S>
where
    F: Future + Send,
    F::Output: Send,
    S: FnOnce(C, Output<F::Output>) + Send,
{
    fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Self {
            future, cancelled, ..
        } = self;
        // A panic must not unwind into the host: it becomes the output instead.
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
            // The cancellation first: once it fired, the call's result no longer counts.
            if let Some(cancelled) = cancelled
                && cancelled.as_mut().poll(cx).is_ready()
            {
                return Poll::Ready(None);
            }
            future.as_mut().poll(cx).map(Some)
        }));
        self.output = match polled {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(value)) => Some(Ok(value)),
            Err(panic) => Some(Err(panic)),
        };
        Poll::Ready(())
    }

    fn finish(self: Box<Self>, host: C) {
        let Settle { output, settle, .. } = *self;
        if let Some(output) = output {
            settle(host, output);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A future driven on its host's thread: polled by [`Task::poll`], queued back to the host
/// by its waker.
pub struct Task<H: Host> {
    host: Arc<H>,
    /// Handed to the host by a wake-up that the host has not served yet.
    queued: AtomicBool,
    /// Taken out while it is polled, so that no lock is held while the future runs (it may
    /// call into the host); `None` once it finished or was cancelled.
    running: Mutex<Option<Box<dyn Step<H::Context>>>>,
    /// Cancelled while it was being polled: dropped instead of put back.
    cancelled: AtomicBool,
}

impl<H: Host> Task<H> {
    /// A task for `future`, whose output `settle` receives on the host's thread, or `None` if
    /// `cancelled` completes first (then `future` is dropped unfinished). Nothing runs until
    /// the first [`Task::poll`].
    pub fn new<F, S>(host: Arc<H>, future: F, cancelled: Option<Cancelled>, settle: S) -> Arc<Self>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
        S: FnOnce(H::Context, Output<F::Output>) + Send + 'static,
    {
        Arc::new(Task {
            host,
            queued: AtomicBool::new(false),
            running: Mutex::new(Some(Box::new(Settle {
                future: Box::pin(future),
                cancelled,
                output: None,
                settle,
            }))),
            cancelled: AtomicBool::new(false),
        })
    }

    /// Polls the future once, if it is still running, and settles it if it finished. Called
    /// on the host's thread (inside whatever runtime context the future needs).
    pub fn poll(self: &Arc<Self>, host: H::Context) {
        // Cleared first: a wake-up during the poll queues the task again.
        self.queued.store(false, Ordering::Release);
        let Some(mut step) = lock(&self.running).take() else {
            return; // finished or cancelled: a late wake-up
        };
        let waker = Waker::from(self.clone());
        let ready = self
            .host
            .around_poll(|| step.poll_step(&mut Context::from_waker(&waker)));
        if ready.is_pending() {
            if !self.cancelled.load(Ordering::Acquire) {
                *lock(&self.running) = Some(step);
            }
            return;
        }
        step.finish(host);
    }

    /// Drops the future unfinished (which withdraws its request); its settling function is
    /// never called. Later wake-ups and polls do nothing.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        let dropped = lock(&self.running).take();
        // Dropped here, after the lock: dropping the future may run arbitrary code.
        drop(dropped);
    }
}

impl<H: Host> std::fmt::Debug for Task<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("queued", &self.queued)
            .field("cancelled", &self.cancelled)
            .finish_non_exhaustive()
    }
}

impl<H: Host> Wake for Task<H> {
    fn wake(self: Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.host.clone().schedule(self);
        }
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.host.schedule(self.clone());
        }
    }
}

#[cfg(test)]
mod tests;
