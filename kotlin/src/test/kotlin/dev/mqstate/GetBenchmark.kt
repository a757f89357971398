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
 * server, rounds interleaved. Runs only with `-Dmqstate.bench=true` (scripts/bench-kotlin);
 * prints figures and asserts nothing about speed.
 */
class GetBenchmark {
    @Test
    fun `kotlin get with 64 in flight vs rust`() = runBlocking<Unit> {
        assumeTrue(System.getProperty("mqstate.bench") == "true", "benchmark: run scripts/bench-kotlin")
        val n = System.getProperty("mqstate.bench.n")?.toInt() ?: 20_000
        val depth = 64
        val rounds = System.getProperty("mqstate.bench.rounds")?.toInt() ?: 5
        LocalServer.start().use { server ->
            val client = Client.connect(ConnectOptions(url = server.url))
            val key = "mqstate-bench-kotlin".b
            client.set(key, ByteArray(32) { 0x5a })
            suspend fun kotlinRound(): Double {
                val started = System.nanoTime()
                (0 until depth).map { w ->
                    async(Dispatchers.Default) {
                        repeat(n / depth + if (w < n % depth) 1 else 0) { client.get(key) }
                    }
                }.awaitAll()
                return n / ((System.nanoTime() - started) / 1e9)
            }
            kotlinRound() // warm-up (JIT, connection)
            benchRustGet(server.url, (n / 4).toUInt(), depth.toUInt())
            val kt = mutableListOf<Double>()
            val rs = mutableListOf<Double>()
            repeat(rounds) {
                kt += kotlinRound()
                rs += benchRustGet(server.url, n.toUInt(), depth.toUInt())
            }
            client.disconnect()
            val ktMedian = kt.sorted()[rounds / 2]
            val rsMedian = rs.sorted()[rounds / 2]
            println("kotlin get, $depth in flight, $n calls x $rounds rounds (median):")
            println("  kotlin: %.0f ops/s  (rounds: %s)".format(ktMedian, kt.joinToString { "%.0f".format(it) }))
            println("  rust:   %.0f ops/s  (rounds: %s)".format(rsMedian, rs.joinToString { "%.0f".format(it) }))
            println("  ratio kotlin/rust: %.2f (target >= 0.8)".format(ktMedian / rsMedian))
        }
    }
}
