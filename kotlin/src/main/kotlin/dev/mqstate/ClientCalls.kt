// Hand-written next to the generated bindings (mqstate.kt): the public `get` with an optional
// timeout over the two exported shapes of the call. Only dispatches; every rule stays in Rust.
package dev.mqstate

/**
 * `GET key`: the value and its version, or null; [timeout] replaces the client's for this call.
 *
 * `client.get(key)` calls the generated member directly (the fast shape: the key is its only
 * argument, see kotlin/README.md, "Benchmark"); this overload serves `get(key, timeout)`,
 * with a null timeout meaning the client's, as before.
 *
 * @throws MqstateException as the generated calls do.
 */
suspend fun Client.get(key: ByteArray, timeout: java.time.Duration?): Versioned? =
    if (timeout == null) get(key) else getWithTimeout(key, timeout)
