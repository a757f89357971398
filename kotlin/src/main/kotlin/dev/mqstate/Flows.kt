// Hand-written next to the generated bindings (mqstate.kt): Kotlin Flows over the pull-based
// streams of the core. Only adapts types; every rule stays in the Rust core.
package dev.mqstate

import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.flow

/**
 * The observation's changes as a Flow. The flow completes when the observation ends (closed,
 * unobserved, client closed); it throws [MqstateException.Lagged] when notifications were
 * dropped. Cancelling the collector, or the flow completing, closes the observation.
 *
 * ```
 * client.observe("door".encodeToByteArray()).asFlow().collect { println(it.operation) }
 * ```
 */
fun Observation.asFlow(): Flow<Notification> = flow {
    try {
        while (true) {
            emit(next() ?: break)
        }
    } finally {
        stop()
    }
}

/** Observes [key] (registered once this returns) and returns its changes as a Flow. */
suspend fun Client.observeFlow(key: ByteArray, timeout: java.time.Duration? = null): Flow<Notification> =
    observe(key, timeout).asFlow()

/** The lease's events as a Flow (ends when the stream is closed or the client closes). */
fun LeaseEvents.asFlow(): Flow<LeaseEvent> = flow {
    try {
        while (true) {
            emit(next() ?: break)
        }
    } finally {
        stop()
    }
}

/** The election's events as a Flow (ends when the stream is closed or the client closes). */
fun LeadershipEvents.asFlow(): Flow<LeadershipEvent> = flow {
    try {
        while (true) {
            emit(next() ?: break)
        }
    } finally {
        stop()
    }
}

/**
 * [Lock.edit] with a Kotlin function: under the lock, [f] gets the key's value (null: absent)
 * and returns the value to write (null: delete the key).
 *
 * ```
 * lock.edit("counter".encodeToByteArray(), ttl, timeout) { old -> ((old?.decodeToString()?.toInt() ?: 0) + 1).toString().encodeToByteArray() }
 * ```
 */
suspend fun Lock.edit(
    key: ByteArray,
    ttl: java.time.Duration,
    timeout: java.time.Duration,
    f: (ByteArray?) -> ByteArray?,
): ByteArray? = edit(key, ttl, timeout, object : Editor {
    override fun edit(old: ByteArray?): ByteArray? = f(old)
})
