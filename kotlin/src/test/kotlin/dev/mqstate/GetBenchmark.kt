package dev.mqstate

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assumptions.assumeTrue
import org.junit.jupiter.api.Test

/**
 * `get` throughput from Kotlin with 64 calls in flight, as a ratio to the core's own Rust
 * client (`benchRustGet`, the same loop in Rust) measured in the same process against the same
 * server. One run is a series of short slices that alternate the baseline (Rust) and the subject
 * (Kotlin), the order swapped in every other pair (Rust-Kotlin, Kotlin-Rust, ...), so that load
 * from other processes falls on both alike; each pair gives one ratio, and the run reports the
 * median of those ratios and their range. Runs only with `-Dmqstate.bench=true`
 * (scripts/bench-kotlin, which runs it several times, each in its own JVM); prints figures and
 * asserts nothing about speed.
 *
 * Properties: `mqstate.bench.n` (calls per slice, default 4,000), `mqstate.bench.pairs`
 * (default 11).
 */
class GetBenchmark {
    @Test
    fun `kotlin get with 64 in flight vs rust`() = runBlocking<Unit> {
        assumeTrue(System.getProperty("mqstate.bench") == "true", "benchmark: run scripts/bench-kotlin")
        val n = System.getProperty("mqstate.bench.n")?.toInt() ?: 4_000
        val pairs = System.getProperty("mqstate.bench.pairs")?.toInt() ?: 11
        val depth = 64
        LocalServer.start().use { server ->
            val client = Client.connect(ConnectOptions(url = server.url))
            val key = "mqstate-bench-kotlin".b
            client.set(key, ByteArray(32) { 0x5a })
            suspend fun kotlinSlice(): Double {
                val started = System.nanoTime()
                (0 until depth).map { w ->
                    async(Dispatchers.Default) {
                        repeat(n / depth + if (w < n % depth) 1 else 0) { client.get(key) }
                    }
                }.awaitAll()
                return n / ((System.nanoTime() - started) / 1e9)
            }
            suspend fun rustSlice(): Double = benchRustGet(server.url, n.toUInt(), depth.toUInt())
            // Warm-up, not counted (JIT, connections).
            repeat(2) { kotlinSlice() }
            rustSlice()
            val kt = mutableListOf<Double>()
            val rs = mutableListOf<Double>()
            val ratios = mutableListOf<Double>()
            repeat(pairs) { i ->
                val k: Double
                val r: Double
                if (i % 2 == 0) {
                    r = rustSlice(); k = kotlinSlice()
                } else {
                    k = kotlinSlice(); r = rustSlice()
                }
                kt += k; rs += r; ratios += k / r
            }
            client.disconnect()
            fun median(xs: List<Double>) = xs.sorted().let { s ->
                if (s.size % 2 == 1) s[s.size / 2] else (s[s.size / 2 - 1] + s[s.size / 2]) / 2
            }
            println("kotlin get, $depth in flight, $pairs alternating slice pairs of $n calls:")
            println("  kotlin: median %.0f ops/s  (slices: %s)".format(median(kt), kt.joinToString { "%.0f".format(it) }))
            println("  rust:   median %.0f ops/s  (slices: %s)".format(median(rs), rs.joinToString { "%.0f".format(it) }))
            println("  pair ratios: %s".format(ratios.joinToString { "%.2f".format(it) }))
            println(
                "BENCH ratio kotlin/rust: median %.2f, range %.2f-%.2f (%d pairs)".format(
                    median(ratios), ratios.min(), ratios.max(), pairs,
                ),
            )
        }
    }
}
