// Hand-written next to the generated bindings (mqstate.kt): Kotlin Flows over the pull-based
// streams of the core and its key listings. Only adapts types; every rule stays in the Rust core.
package dev.mqstate

import java.util.concurrent.atomic.AtomicReference
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.emitAll
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

/**
 * The keys of the scan's remaining pages as a Flow: each page is asked for with [Scan.nextPage]
 * when the collector has taken every key of the one before, and the flow completes after the
 * last page. A failed page throws its [MqstateException] to the collector (the scan stays
 * where it was: collecting again asks for the same page).
 *
 * ```
 * val scan = Scan(client, "line3?a".encodeToByteArray())
 * scan.asFlow().collect { println(it.decodeToString()) }
 * ```
 */
fun Scan.asFlow(): Flow<ByteArray> = flow {
    while (true) {
        val keys = nextPage() ?: break
        for (key in keys) emit(key)
    }
}

/**
 * Lists the keys matching the glob [pattern] (`SCAN`; Redis `MATCH` globs over bytes: `*`,
 * `?`, `[...]`, `\` escapes) as a Flow, asking for each page as the collector consumes the
 * keys; each page is one request with [timeout] (default: the client's). Nothing is sent until
 * the flow is collected; an empty pattern throws [MqstateException.InvalidArgument] here, at
 * the call. A malformed pattern is the server's [MqstateException.Service], thrown to the
 * collector. Every collection lists again from the first page. For page access, use [Scan].
 *
 * ```
 * client.scan("sensor/?/temperature".encodeToByteArray()).collect { key -> println(key.decodeToString()) }
 * val keys = client.scan("config*".encodeToByteArray()).toList()
 * ```
 */
fun Client.scan(pattern: ByteArray, timeout: java.time.Duration? = null): Flow<ByteArray> {
    // Created now so that the core refuses an empty pattern at the call; the first collection
    // reads it, and each later one creates its own.
    val first = AtomicReference(Scan(this, pattern, timeout))
    return flow {
        val scan = first.getAndSet(null) ?: Scan(this@scan, pattern, timeout)
        scan.use { emitAll(it.asFlow()) }
    }
}

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
