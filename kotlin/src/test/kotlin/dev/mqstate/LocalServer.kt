package dev.mqstate

import java.io.File
import java.net.ServerSocket
import java.nio.file.Files
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.contentOrNull
import kotlinx.serialization.json.jsonArray
import kotlinx.serialization.json.jsonObject
import kotlinx.serialization.json.jsonPrimitive

/**
 * A real `mqstate serve` (target/debug/mqstate, or the `mqstate.bin` system property) on a free
 * loopback port, started by a test and stopped by it (by its own process handle).
 */
class LocalServer private constructor(
    val process: Process,
    val url: String,
    val port: Int,
    /** With the hub: the port of its MQTT device endpoint, and the admin API's base URL. */
    val hubPort: Int? = null,
    val hubAdmin: String? = null,
    /** With the hub: the port of its AMQP endpoint (devices and service, always TLS). */
    val hubAmqpPort: Int? = null,
    /** With the hub: its HTTPS port (REST registry, and MQTT and AMQP over WebSockets). */
    val hubHttpsPort: Int? = null,
) : AutoCloseable {
    companion object {
        val repo: File = File(System.getProperty("mqstate.repo") ?: "..").canonicalFile
        val binary: String =
            System.getProperty("mqstate.bin")?.takeIf { it.isNotBlank() } ?: File(repo, "target/debug/mqstate").path

        /**
         * Starts a server; `port` 0 lets the server choose (the chosen one is read from its log).
         * With `hubCaOut`, the hub writes its generated TLS certificate (AMQP, HTTPS, and the
         * MQTT device endpoint with `--iothub-tls`) there, and this returns once it is written.
         */
        fun start(vararg extra: String, port: Int = 0, iothub: Boolean = false, hubCaOut: File? = null): LocalServer {
            val args = mutableListOf(binary, "serve", "--port", port.toString(), "--log", "info")
            if (!iothub) args += "--no-iothub"
            else args += listOf("--iothub-port", "0", "--iothub-admin-port", "0", "--iothub-https-port", "0", "--iothub-amqp-port", "0")
            if (hubCaOut != null) args += listOf("--iothub-ca-out", hubCaOut.path)
            args += "--no-dashboard"
            args += extra
            val process = ProcessBuilder(args).redirectErrorStream(true).start()
            val lines = LinkedBlockingQueue<String>()
            // Drains the log for the whole life of the process (a full pipe would stall it).
            Thread {
                process.inputStream.bufferedReader().forEachLine { lines.put(it) }
            }.apply { isDaemon = true }.start()
            val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60)
            val seen = StringBuilder()
            while (System.nanoTime() < deadline) {
                val line = lines.poll(200, TimeUnit.MILLISECONDS)
                if (line == null) {
                    if (!process.isAlive) break
                    continue
                }
                seen.appendLine(line)
                val m = Regex("ready url=(mqtt://127\\.0\\.0\\.1:(\\d+))").find(line)
                if (m != null) {
                    val hub = Regex("IoT Hub ready devices=127\\.0\\.0\\.1:(\\d+) .*admin=(127\\.0\\.0\\.1:\\d+)").find(seen)
                    val amqp = Regex("IoT Hub ready .*amqp=127\\.0\\.0\\.1:(\\d+)").find(seen)
                    val https = Regex("IoT Hub ready .*https=127\\.0\\.0\\.1:(\\d+)").find(seen)
                    if (iothub && (hub == null || amqp == null || https == null)) {
                        process.destroyForcibly()
                        error("mqstate serve did not report its IoT Hub ports:\n$seen")
                    }
                    // The certificate is written after the ready line.
                    while (hubCaOut != null && !(hubCaOut.isFile && hubCaOut.readText().contains("END CERTIFICATE"))) {
                        if (System.nanoTime() > deadline || !process.isAlive) {
                            process.destroyForcibly()
                            error("mqstate serve did not write $hubCaOut:\n$seen")
                        }
                        Thread.sleep(20)
                    }
                    return LocalServer(
                        process, m.groupValues[1], m.groupValues[2].toInt(),
                        hub?.groupValues?.get(1)?.toInt(), hub?.groupValues?.get(2)?.let { "http://$it" },
                        amqp?.groupValues?.get(1)?.toInt(), https?.groupValues?.get(1)?.toInt(),
                    )
                }
            }
            process.destroyForcibly()
            error("mqstate serve did not become ready: ${args.joinToString(" ")}\n$seen")
        }

        /** A port free right now on 127.0.0.1. */
        fun freePort(): Int = ServerSocket(0).use { it.localPort }

        fun tempDir(): File = Files.createTempDirectory("mqstate-kotlin").toFile()
    }

    /** Runs `mqstate <args>` (the CLI, e.g. `iothub send`) and returns its output; fails on a non-zero exit. */
    fun cli(vararg args: String): String {
        val p = ProcessBuilder(listOf(binary) + args).redirectErrorStream(true).start()
        val out = p.inputStream.bufferedReader().readText()
        check(p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0) { "mqstate ${args.joinToString(" ")} failed: $out" }
        return out
    }

    /**
     * The hub's feedback status (`Success`, `Rejected`, ...) of each message id in `ids`, from
     * `mqstate iothub feedback --once` (one batch a call, completed by the CLI) until every id
     * has one (start the server with a short `--iothub-feedback-interval`).
     */
    fun hubFeedback(vararg ids: String): Map<String, String> {
        val seen = mutableMapOf<String, String>()
        val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30)
        while (!seen.keys.containsAll(ids.toList())) {
            check(System.nanoTime() < deadline) { "no feedback for every one of ${ids.toList()}: $seen" }
            val out = cli("iothub", "feedback", "--url", hubAdmin!!, "--once", "--wait", "10s")
            for (line in out.lines().filter { it.startsWith("{") }) {
                for (r in Json.parseToJsonElement(line).jsonObject["records"]!!.jsonArray) {
                    val id = r.jsonObject["originalMessageId"]?.jsonPrimitive?.contentOrNull ?: continue
                    seen[id] = r.jsonObject["statusCode"]!!.jsonPrimitive.content
                }
            }
        }
        return seen
    }

    /** Stops the server (SIGTERM, then SIGKILL after 10 s) and waits for it. */
    override fun close() {
        process.destroy()
        if (!process.waitFor(10, TimeUnit.SECONDS)) {
            process.destroyForcibly()
            process.waitFor(10, TimeUnit.SECONDS)
        }
    }
}

/** Bytes of a string (UTF-8). */
val String.b: ByteArray get() = encodeToByteArray()

private var counter = 0

/** A key unique to this process and call. */
@Synchronized
fun uniqueKey(prefix: String = "k"): String = "kotlin/$prefix-${ProcessHandle.current().pid()}-${++counter}-${System.nanoTime()}"
