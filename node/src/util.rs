//! Argument conversion and the future → Promise bridge shared by every call.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mqstate::Error;
use mqstate_drive::{Cancelled, Host, Output, Task};
use napi::Env;
use napi::bindgen_prelude::{
    Either, PromiseRaw, ToNapiValue, Uint8ArraySlice, within_runtime_if_available,
};
use tokio::sync::watch;

use crate::error::{abort_error, js_error};

/// Takes the bytes of a key or value from JavaScript: a string (its UTF-8 bytes, without
/// copying) or any `Uint8Array` (a `Buffer` is one). (Written out as `Either<...>` in every
/// `#[napi]` signature, because the typings generator does not resolve type aliases.)
pub(crate) fn bytes(arg: Either<String, Uint8ArraySlice<'_>>) -> Bytes {
    match arg {
        Either::A(s) => Bytes::from(s.into_bytes()),
        Either::B(b) => Bytes::copy_from_slice(&b),
    }
}

/// A duration in milliseconds from JavaScript: a finite, non-negative number (fractions of a
/// millisecond are kept). `None` (undefined) stays `None`.
pub(crate) fn millis(name: &str, value: Option<f64>) -> Result<Option<Duration>, Error> {
    match value {
        None => Ok(None),
        Some(ms) if ms.is_finite() && ms >= 0.0 => Duration::try_from_secs_f64(ms / 1000.0)
            .map(Some)
            .map_err(|_| Error::InvalidArgument(format!("{name} is out of range: {ms} ms"))),
        Some(ms) => Err(Error::InvalidArgument(format!(
            "{name} must be a finite, non-negative number of milliseconds, got {ms}"
        ))),
    }
}

/// A whole number from JavaScript that must fit `T` (a port, a count of seconds...).
pub(crate) fn whole<T: TryFrom<u64>>(name: &str, value: f64) -> Result<T, Error> {
    let bad = || {
        Error::InvalidArgument(format!(
            "{name} must be a whole number in range, got {value}"
        ))
    };
    if !(value.is_finite()
        && value >= 0.0
        && value.fract() == 0.0
        && value <= 9_007_199_254_740_991.0)
    {
        return Err(bad());
    }
    // Exact: a non-negative integer up to 2^53 - 1.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let n = value as u64;
    T::try_from(n).map_err(|_| bad())
}

/// Drives `fut` on the JS thread and returns a Promise settled there: with `done(value)` on
/// success, with the library error (see [`crate::error`]) on failure, or with an
/// `AbortError` when `cancel` fires first (the future is dropped, which withdraws the
/// request). The future is polled once right away (which sends the request), then each time
/// it is woken (it is a [`Task`] of `mqstate-drive`), so a call costs no task of its own on
/// the runtime. The settling goes through the thread's one [`bridge`], which keeps Node alive
/// exactly while some call is pending.
pub(crate) fn spawn<'env, T, V, F, R>(
    env: &'env Env,
    cancel: Option<watch::Receiver<bool>>,
    fut: F,
    done: R,
) -> napi::Result<PromiseRaw<'env, V>>
where
    T: Send + 'static,
    V: ToNapiValue,
    F: Future<Output = Result<T, Error>> + Send + 'static,
    R: FnOnce(&'env Env, T) -> napi::Result<V> + Send + 'static,
{
    let sender = bridge::start(env)?;
    let (deferred, promise) = bridge::create_promise(env)?;
    // Kept apart from `fut` (not joined with it in one async block, which would hold room for
    // `fut` twice): the call's future is one allocation per call, cheaper while it is small.
    let cancelled = cancel.map(|mut cancelled| -> Cancelled {
        Box::pin(async move {
            // A token dropped without firing (garbage collected) never cancels.
            if cancelled.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    });
    let settle = move |raw_env: napi::sys::napi_env, output: Output<Result<T, Error>>| {
        let env = Env::from_raw(raw_env);
        // SAFETY: `env` lives for the whole callback, which is all `done` may use it for
        // (what it returns is converted to a JS value right away).
        let env_ref: &'env Env = unsafe { std::mem::transmute::<&Env, &'env Env>(&env) };
        let settled = match output {
            Ok(Some(Ok(value))) => {
                done(env_ref, value).and_then(|v| unsafe { V::to_napi_value(raw_env, v) })
            }
            Ok(Some(Err(e))) => Err(js_error(&env, &e, &[])),
            Ok(None) => Err(abort_error(&env)),
            Err(panic) => Err(napi::Error::from_reason(
                mqstate::protocol::errors::panic_report(&*panic),
            )),
        };
        bridge::settle(raw_env, deferred, settled);
    };
    Task::new(sender, fut, cancelled, settle).poll(env.raw());
    Ok(PromiseRaw::new(env.raw(), promise))
}

/// A call's future is driven on the JS thread as a [`Task`]: polled there inside the
/// runtime's context (so its timers and channels work, and it may spawn), and, when a runtime
/// worker wakes it (a response arrived, a timer fired), queued back through the thread's
/// [`bridge`], whose one wake-up serves every call woken meanwhile. Compared with a runtime
/// task per call, this saves the task, the hand-off to a worker thread and that worker's
/// poll, for every call (see node/README.md, "Benchmark").
impl Host for bridge::Sender {
    type Context = napi::sys::napi_env;

    fn schedule(&self, task: Arc<Task<Self>>) {
        self.send(Box::new(move |env| task.poll(env)));
    }

    fn around_poll<T>(&self, poll: impl FnOnce() -> T) -> T {
        within_runtime_if_available(poll)
    }
}

/// The wake-up path of every call: one threadsafe function per JS thread (rather than
/// one per Promise, as `Env::spawn_future_with_callback` makes), referenced while at least
/// one call is pending and unreferenced otherwise, so that it never keeps Node alive on its
/// own.
///
/// Wake-ups are batched: a runtime worker that wakes a call's future pushes a job (poll it)
/// onto the thread's queue and calls the threadsafe function only when the queue was empty;
/// the JS thread then runs every queued job in one callback, so the Promises settled
/// together have their continuations run in one microtask checkpoint. With many calls in
/// flight this saves a threadsafe-function call (a mutex, a queue node, an event-loop
/// wake-up and a dispatch) for all but one job of each batch (see node/README.md,
/// "Benchmark").
mod bridge {
    use std::cell::{Cell, RefCell};
    use std::ffi::c_void;
    use std::ptr;
    use std::sync::{Arc, Mutex, PoisonError, RwLock};

    use napi::bindgen_prelude::JsError;
    use napi::{Env, check_status, sys};

    /// Work to run on the JS thread.
    pub(super) type Job = Box<dyn FnOnce(sys::napi_env) + Send>;

    /// A `napi_deferred`, moved to a runtime thread and back; only used on the JS thread.
    pub(super) struct Deferred(sys::napi_deferred);
    // SAFETY: the pointer is only dereferenced (resolved / rejected) on the JS thread.
    unsafe impl Send for Deferred {}

    /// What the runtime's tasks and the JS thread share: the queue of completed jobs, and
    /// whether the threadsafe function still exists.
    struct Shared {
        /// False once Node finalized the threadsafe function (the environment is going away).
        alive: RwLock<bool>,
        queue: Mutex<Vec<Job>>,
    }

    /// The sending side, held by the runtime's tasks.
    pub(super) struct Sender {
        tsfn: sys::napi_threadsafe_function,
        shared: Arc<Shared>,
    }
    // SAFETY: napi threadsafe functions are made to be called from any thread; `alive`
    // guards against calls after finalization.
    unsafe impl Send for Sender {}
    unsafe impl Sync for Sender {}

    impl Sender {
        pub(super) fn send(&self, job: Job) {
            let alive = self
                .shared
                .alive
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if !*alive {
                return; // the environment is gone: nobody is waiting any more
            }
            let first = {
                let mut queue = self
                    .shared
                    .queue
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                queue.push(job);
                queue.len() == 1
            };
            if !first {
                return; // a wake-up for this batch is already on its way
            }
            // SAFETY: the function is alive (checked under the lock that finalization
            // takes). The queue is reached through the function's context, not `data`.
            let status = unsafe {
                sys::napi_call_threadsafe_function(
                    self.tsfn,
                    ptr::null_mut(),
                    sys::ThreadsafeFunctionCallMode::nonblocking,
                )
            };
            if status != sys::Status::napi_ok {
                // Not queued (the function is closing): the jobs can never run.
                self.shared
                    .queue
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clear();
            }
        }
    }

    struct Local {
        sender: Arc<Sender>,
        pending: Cell<usize>,
    }

    thread_local! {
        static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
    }

    /// The thread's sender (made on first use), counting one more pending call.
    pub(super) fn start(env: &Env) -> napi::Result<Arc<Sender>> {
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            if local.is_none() {
                *local = Some(Local {
                    sender: Arc::new(create(env)?),
                    pending: Cell::new(0),
                });
            }
            let Some(l) = local.as_ref() else {
                return Err(napi::Error::from_reason("unreachable"));
            };
            if l.pending.get() == 0 {
                // SAFETY: on the JS thread, with a live function.
                check_status!(unsafe {
                    sys::napi_ref_threadsafe_function(env.raw(), l.sender.tsfn)
                })?;
            }
            l.pending.set(l.pending.get() + 1);
            Ok(l.sender.clone())
        })
    }

    fn create(env: &Env) -> napi::Result<Sender> {
        let shared = Arc::new(Shared {
            alive: RwLock::new(true),
            queue: Mutex::new(Vec::new()),
        });
        let mut name = ptr::null_mut();
        let mut tsfn = ptr::null_mut();
        // One reference for Node: the function's context (read by `call_js`) and its
        // finalize data (reclaimed by `finalize`, or below if creation fails).
        let data = Arc::into_raw(shared.clone()).cast_mut().cast::<c_void>();
        // SAFETY: plain N-API calls on the JS thread.
        unsafe {
            check_status!(sys::napi_create_string_utf8(
                env.raw(),
                c"mqstate".as_ptr(),
                7,
                &mut name
            ))?;
            let status = sys::napi_create_threadsafe_function(
                env.raw(),
                ptr::null_mut(),
                ptr::null_mut(),
                name,
                0,
                1,
                data,
                Some(finalize),
                data,
                Some(call_js),
                &mut tsfn,
            );
            if status != sys::Status::napi_ok {
                drop(Arc::from_raw(data.cast::<Shared>()));
                check_status!(status)?;
            }
            check_status!(sys::napi_unref_threadsafe_function(env.raw(), tsfn))?;
        }
        Ok(Sender { tsfn, shared })
    }

    unsafe extern "C" fn finalize(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
        // SAFETY: `data` is the `Arc` leaked in `create`.
        let shared = unsafe { Arc::from_raw(data.cast_const().cast::<Shared>()) };
        *shared.alive.write().unwrap_or_else(PoisonError::into_inner) = false;
        // Jobs still queued can never run: their Promises' environment is gone.
        shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        // Tasks still running will not send; a later call on this thread makes a new function.
        let _ = LOCAL.try_with(|local| {
            if let Ok(mut local) = local.try_borrow_mut() {
                local.take();
            }
        });
    }

    unsafe extern "C" fn call_js(
        env: sys::napi_env,
        _callback: sys::napi_value,
        context: *mut c_void,
        _data: *mut c_void,
    ) {
        if context.is_null() {
            return;
        }
        // SAFETY: the context is the `Shared` of `create`, alive until `finalize`, which
        // Node runs after the last `call_js`.
        let shared = unsafe { &*context.cast_const().cast::<Shared>() };
        let jobs =
            std::mem::take(&mut *shared.queue.lock().unwrap_or_else(PoisonError::into_inner));
        if env.is_null() {
            return; // being torn down: drop the jobs
        }
        for job in jobs {
            // A panic must not unwind into Node. (The promise then stays pending; the call
            // is no longer counted, so it does not keep Node alive.)
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || job(env))).is_err() {
                done_one(env);
            }
        }
    }

    /// A new Promise and its deferred.
    pub(super) fn create_promise(env: &Env) -> napi::Result<(Deferred, sys::napi_value)> {
        let mut deferred = ptr::null_mut();
        let mut promise = ptr::null_mut();
        // SAFETY: on the JS thread.
        let status = unsafe { sys::napi_create_promise(env.raw(), &mut deferred, &mut promise) };
        if status != sys::Status::napi_ok {
            // Undo the pending count taken by `start`.
            done_one(env.raw());
            check_status!(status)?;
        }
        Ok((Deferred(deferred), promise))
    }

    /// Resolves or rejects `deferred` (on the JS thread) and counts the call as settled.
    pub(super) fn settle(
        env: sys::napi_env,
        deferred: Deferred,
        result: napi::Result<sys::napi_value>,
    ) {
        // SAFETY: on the JS thread, `deferred` not settled before.
        unsafe {
            match result {
                Ok(value) => {
                    sys::napi_resolve_deferred(env, deferred.0, value);
                }
                Err(e) => {
                    let value = JsError::from(e).into_value(env);
                    sys::napi_reject_deferred(env, deferred.0, value);
                }
            }
        }
        done_one(env);
    }

    fn done_one(env: sys::napi_env) {
        let _ = LOCAL.try_with(|local| {
            if let Some(l) = local.try_borrow().ok().as_deref().and_then(Option::as_ref) {
                let n = l.pending.get().saturating_sub(1);
                l.pending.set(n);
                if n == 0 {
                    // SAFETY: on the JS thread, with a live function.
                    unsafe { sys::napi_unref_threadsafe_function(env, l.sender.tsfn) };
                }
            }
        });
    }
}

/// A rejected Promise for an error found before anything was started (a bad argument).
pub(crate) fn rejected<'env, V: ToNapiValue>(
    env: &'env Env,
    error: Error,
) -> napi::Result<PromiseRaw<'env, V>> {
    spawn(env, None, async move { Err::<(), _>(error) }, |_, ()| {
        Err(napi::Error::from_reason("unreachable"))
    })
}
