package dev.mqstate

import java.lang.management.ManagementFactory
import javax.management.ObjectName
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assumptions.assumeTrue
import org.junit.jupiter.api.Test

/**
 * Counts what one Kotlin `get` costs in JNA objects: runs `mqstate.crossings.n` gets (64 in
 * flight, as GetBenchmark) and prints, per get, how many JNA native memory blocks
 * (`com.sun.jna.Memory`, one per `Structure` the generated code creates) and `Structure`s of
 * each kind were allocated, from class histograms taken before and after. Meant to run with
 * no garbage collection (`-XX:+UseEpsilonGC`), so that the histograms count every object
 * allocated; the calls into Rust are counted from outside (uprobes, see scripts/bench-kotlin
 * --crossings). Runs only with `-Dmqstate.crossings=true`; asserts nothing.
 */
class GetCrossings {
    @Test
    fun `jna allocations per get`() = runBlocking<Unit> {
        assumeTrue(System.getProperty("mqstate.crossings") == "true", "diagnostic: run scripts/bench-kotlin --crossings")
        val n = System.getProperty("mqstate.crossings.n")?.toInt() ?: 10_000
        val depth = 64
        LocalServer.start().use { server ->
            val client = Client.connect(ConnectOptions(url = server.url))
            val key = "mqstate-crossings".b
            client.set(key, ByteArray(32) { 0x5a })
            suspend fun gets(count: Int) {
                (0 until depth).map { w ->
                    async(Dispatchers.Default) {
                        repeat(count / depth + if (w < count % depth) 1 else 0) { client.get(key) }
                    }
                }.awaitAll()
            }
            gets(1_000) // warm-up
            val before = histogram()
            gets(n)
            val after = histogram()
            client.disconnect()
            println("CROSSINGS gets=$n")
            val names = (before.keys + after.keys).filter {
                it == "com.sun.jna.Memory" || it.startsWith("com.sun.jna.Structure\$AutoAllocated") ||
                    (it.startsWith("dev.mqstate.") && (it.contains("RustBuffer") || it.contains("CallStatus") || it.contains("ForeignBytes")))
            }.sorted()
            for (name in names) {
                val delta = (after[name] ?: 0L) - (before[name] ?: 0L)
                println("CROSSINGS %-60s %8.2f per get".format(name, delta.toDouble() / n))
            }
        }
    }

    /** Instances per class name, from the JVM's class histogram (no GC with -all). */
    private fun histogram(): Map<String, Long> {
        val text = ManagementFactory.getPlatformMBeanServer().invoke(
            ObjectName("com.sun.management:type=DiagnosticCommand"),
            "gcClassHistogram",
            arrayOf<Any>(arrayOf("-all")),
            arrayOf(Array<String>::class.java.name),
        ) as String
        val counts = mutableMapOf<String, Long>()
        val row = Regex("""^\s*\d+:\s+(\d+)\s+\d+\s+(\S+)""")
        for (line in text.lineSequence()) {
            val m = row.find(line) ?: continue
            counts[m.groupValues[2]] = m.groupValues[1].toLong()
        }
        return counts
    }
}
