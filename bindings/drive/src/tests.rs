//! The task's state machine, with a host whose "thread" is the test draining its queue, and
//! futures woken from other threads.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::{Cancelled, Host, Output, Task};

/// Counts the tasks it was handed, and keeps them for `drain`.
#[derive(Default)]
struct Queue {
    queued: Mutex<Vec<Arc<Task<Queue>>>>,
    scheduled: AtomicUsize,
}

impl Host for Queue {
    type Context = &'static str;

    fn schedule(&self, task: Arc<Task<Self>>) {
        self.scheduled.fetch_add(1, Ordering::SeqCst);
        self.queued.lock().unwrap().push(task);
    }
}

impl Queue {
    /// Polls every queued task, as the host's thread does when it is woken.
    fn drain(&self) -> usize {
        let queued = std::mem::take(&mut *self.queued.lock().unwrap());
        let n = queued.len();
        for task in queued {
            task.poll("host");
        }
        n
    }
}

/// What the settling function was given, and where.
type Settled<T> = Arc<Mutex<Vec<(&'static str, Output<T>)>>>;

fn start<F>(
    host: &Arc<Queue>,
    future: F,
    cancelled: Option<Cancelled>,
) -> (Arc<Task<Queue>>, Settled<F::Output>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let settled: Settled<F::Output> = Arc::default();
    let sink = settled.clone();
    let task = Task::new(host.clone(), future, cancelled, move |cx, output| {
        sink.lock().unwrap().push((cx, output));
    });
    (task, settled)
}

/// Sets its flag when dropped: shows whether a future was dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_ready_future_settles_on_its_first_poll_with_the_hosts_context() {
    let host = Arc::new(Queue::default());
    let (task, settled) = start(&host, async { 5 }, None);
    task.poll("first");
    let settled = settled.lock().unwrap();
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].0, "first");
    assert_eq!(*settled[0].1.as_ref().unwrap(), Some(5));
    assert_eq!(host.scheduled.load(Ordering::SeqCst), 0);
}

#[test]
fn a_wake_from_another_thread_queues_the_task_once_and_the_host_poll_settles_it() {
    let host = Arc::new(Queue::default());
    let (tx, rx) = oneshot::channel::<u32>();
    let (task, settled) = start(&host, rx, None);
    task.poll("first");
    assert!(settled.lock().unwrap().is_empty());

    std::thread::spawn(move || tx.send(9).unwrap())
        .join()
        .unwrap();
    assert_eq!(host.scheduled.load(Ordering::SeqCst), 1);
    assert_eq!(host.drain(), 1);

    let settled = settled.lock().unwrap();
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].0, "host");
    assert_eq!(*settled[0].1.as_ref().unwrap(), Some(Ok(9)));
}

/// Pending until woken `n` times; each poll records the waker, and the test wakes it.
struct Counted {
    polls: Arc<AtomicUsize>,
    waker: Arc<Mutex<Option<std::task::Waker>>>,
    until: usize,
}

impl Future for Counted {
    type Output = usize;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        let polls = self.polls.fetch_add(1, Ordering::SeqCst) + 1;
        if polls >= self.until {
            return Poll::Ready(polls);
        }
        *self.waker.lock().unwrap() = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[test]
fn wake_ups_before_the_host_serves_one_queue_the_task_once() {
    let host = Arc::new(Queue::default());
    let polls = Arc::new(AtomicUsize::new(0));
    let waker = Arc::new(Mutex::new(None));
    let future = Counted {
        polls: polls.clone(),
        waker: waker.clone(),
        until: 3,
    };
    let (task, settled) = start(&host, future, None);
    task.poll("first");
    let w = waker.lock().unwrap().clone().unwrap();
    w.wake_by_ref();
    w.wake_by_ref();
    w.wake();
    assert_eq!(
        host.scheduled.load(Ordering::SeqCst),
        1,
        "one queued poll for three wake-ups"
    );
    assert_eq!(host.drain(), 1);
    assert_eq!(polls.load(Ordering::SeqCst), 2);

    // Served: the next wake-up queues it again.
    waker.lock().unwrap().clone().unwrap().wake();
    assert_eq!(host.scheduled.load(Ordering::SeqCst), 2);
    host.drain();
    assert_eq!(*settled.lock().unwrap()[0].1.as_ref().unwrap(), Some(3));
}

/// Wakes itself during its first poll (as a future that yields does), then finishes.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = &'static str;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
        if self.0 {
            return Poll::Ready("done");
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn a_wake_up_during_a_poll_queues_the_task_again() {
    let host = Arc::new(Queue::default());
    let (task, settled) = start(&host, YieldOnce(false), None);
    task.poll("first");
    assert_eq!(host.scheduled.load(Ordering::SeqCst), 1);
    assert_eq!(host.drain(), 1);
    assert_eq!(
        *settled.lock().unwrap()[0].1.as_ref().unwrap(),
        Some("done")
    );
}

#[test]
fn cancel_drops_the_future_and_nothing_settles_even_when_a_late_wake_up_comes() {
    let host = Arc::new(Queue::default());
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(dropped.clone());
    let (tx, rx) = oneshot::channel::<u32>();
    let (task, settled) = start(
        &host,
        async move {
            let _flag = flag;
            rx.await
        },
        None,
    );
    task.poll("first");
    assert!(!dropped.load(Ordering::SeqCst));

    task.cancel();
    assert!(
        dropped.load(Ordering::SeqCst),
        "cancel drops the future at once"
    );
    assert!(tx.send(1).is_err(), "the receiver went with the future");
    task.poll("late");
    host.drain();
    assert!(settled.lock().unwrap().is_empty());
}

#[test]
fn a_cancellation_that_completes_first_settles_with_none_and_drops_the_future() {
    let host = Arc::new(Queue::default());
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(dropped.clone());
    let (cancel_tx, cancel_rx) = oneshot::channel::<()>();
    let cancelled: Cancelled = Box::pin(async move {
        let _ = cancel_rx.await;
    });
    let (task, settled) = start(
        &host,
        async move {
            let _flag = flag;
            std::future::pending::<u32>().await
        },
        Some(cancelled),
    );
    task.poll("first");
    std::thread::spawn(move || cancel_tx.send(()).unwrap())
        .join()
        .unwrap();
    assert_eq!(host.drain(), 1);

    let settled = settled.lock().unwrap();
    assert_eq!(settled.len(), 1);
    assert_eq!(*settled[0].1.as_ref().unwrap(), None);
    drop(settled);
    drop(task);
    assert!(dropped.load(Ordering::SeqCst));
}

#[test]
fn a_panic_while_polling_settles_with_the_panic_and_does_not_unwind() {
    let host = Arc::new(Queue::default());
    let (task, settled) = start(
        &host,
        async {
            #[allow(clippy::panic)] // the panic is what this test is about
            std::panic::panic_any::<String>("boom".to_owned());
            #[allow(unreachable_code)]
            7
        },
        None,
    );
    task.poll("first");
    let settled = settled.lock().unwrap();
    assert_eq!(settled.len(), 1);
    let panic = settled[0].1.as_ref().unwrap_err();
    assert_eq!(
        panic.downcast_ref::<String>().map(String::as_str),
        Some("boom")
    );
}

thread_local! {
    /// Set while a host's `around_poll` runs.
    static IN_CONTEXT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A host that polls inside a context of its own (as Node's enters its runtime).
struct Entering;

impl Host for Entering {
    type Context = ();

    fn schedule(&self, _task: Arc<Task<Self>>) {}

    fn around_poll<R>(&self, poll: impl FnOnce() -> R) -> R {
        IN_CONTEXT.with(|c| c.set(true));
        let polled = poll();
        IN_CONTEXT.with(|c| c.set(false));
        polled
    }
}

#[test]
fn the_future_is_polled_inside_around_poll_and_settled_outside_it() {
    let settled_in_context = Arc::new(Mutex::new(None));
    let sink = settled_in_context.clone();
    let task = Task::new(
        Arc::new(Entering),
        async { IN_CONTEXT.with(std::cell::Cell::get) },
        None,
        move |(), output: Output<bool>| {
            let polled_in_context = output.unwrap().unwrap();
            *sink.lock().unwrap() =
                Some((polled_in_context, IN_CONTEXT.with(std::cell::Cell::get)));
        },
    );
    task.poll(());
    assert_eq!(*settled_in_context.lock().unwrap(), Some((true, false)));
}
