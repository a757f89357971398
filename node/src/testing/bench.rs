//! The benchmark's Rust figure (`benchRustGet`) and the panic test hook (`panickingCall`).

use napi::Env;
use napi::bindgen_prelude::PromiseRaw;
use napi_derive::napi;

use crate::util::spawn;

/// The Rust figure of the benchmark (`mqstate::bench::rust_get`): connects its own client to
/// `url`, writes one 32-byte value, then runs `n` GETs of it with `depth` in flight, from Rust
/// only. Resolves to the GETs per second.
#[napi]
pub fn bench_rust_get(
    env: &Env,
    url: String,
    n: u32,
    depth: u32,
) -> napi::Result<PromiseRaw<'_, f64>> {
    spawn(
        env,
        None,
        async move { mqstate::bench::rust_get(&url, n, depth).await },
        |_, ops| Ok(ops),
    )
}

/// Test helper, not part of the API (the wrapper does not export it): a call whose future
/// panics with `message` in its second poll, made on the JS thread. The panic must reject the
/// Promise with an internal error instead of unwinding into Node.
#[napi]
pub fn panicking_call(env: &Env, message: String) -> napi::Result<PromiseRaw<'_, ()>> {
    spawn(
        env,
        None,
        async move {
            tokio::task::yield_now().await;
            #[allow(clippy::panic)] // the panic is what this helper exists to make
            std::panic::panic_any::<String>(message);
            #[allow(unreachable_code)]
            Ok(())
        },
        |_, ()| Ok(()),
    )
}
