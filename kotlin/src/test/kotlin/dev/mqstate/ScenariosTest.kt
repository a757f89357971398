package dev.mqstate

import java.io.File
import java.net.ServerSocket
import java.net.Socket
import java.time.Duration
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.JsonArray
import kotlinx.serialization.json.JsonElement
import kotlinx.serialization.json.JsonNull
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.JsonPrimitive
import kotlinx.serialization.json.boolean
import kotlinx.serialization.json.booleanOrNull
import kotlinx.serialization.json.double
import kotlinx.serialization.json.int
import kotlinx.serialization.json.jsonArray
import kotlinx.serialization.json.jsonObject
import kotlinx.serialization.json.jsonPrimitive
import kotlinx.serialization.json.long
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.DynamicTest
import org.junit.jupiter.api.TestFactory
import org.junit.jupiter.api.TestInstance

/**
 * Runs the behaviour scenarios shared by every language (tests/scenarios/ *.json, format in
 * tests/scenarios/README.md) against a real `mqstate serve`. A step type or field this runner
 * does not know fails it; the counts are printed at the end.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ScenariosTest {
    private lateinit var server: LocalServer
    private lateinit var blackhole: ServerSocket
    private val held = mutableListOf<Socket>()
    private var scenarios = 0
    private var steps = 0
    private var notRun = 0

    companion object {
        /** Anything that must happen may take this long on a busy machine. */
        const val WAIT_MS = 20_000L
        val DIR = File(LocalServer.repo, "tests/scenarios")
        val LANGUAGES = setOf("rust", "c", "python", "node", "kotlin")
        val STEPS = mapOf(
            "connect" to listOf("url", "host", "tls", "connect_timeout_ms"),
            "close" to listOf(),
            "set" to listOf("key", "value", "nx", "nex", "expiry_ms", "fencing_token", "save_version"),
            "get" to listOf("key"),
            "del" to listOf("key", "fencing_token"),
            "vdel" to listOf("key", "value", "fencing_token"),
            "observe" to listOf("key", "observer"),
            "expect_notification" to listOf("observer", "operation", "value"),
            "flood" to listOf("key", "count"),
            "expect_lagged" to listOf("observer", "total"),
            "hlc" to listOf("ms", "counter", "node_id"),
            "lease_acquire" to listOf("lease", "name", "holder", "ttl_ms", "save_token"),
            "lease_auto_renew" to listOf("lease", "fraction"),
            "expect_lease_event" to listOf("lease", "event", "skip"),
            "lease_release" to listOf("lease"),
            "lock" to listOf("lock", "name", "holder", "session", "ttl_ms", "timeout_ms"),
            "lock_edit" to listOf("lock", "name", "holder", "key", "ttl_ms", "timeout_ms", "new_value"),
            "unlock" to listOf("lock"),
            "try_campaign" to listOf("election", "name", "candidate", "term_ms"),
            "leader" to listOf("election"),
            "resign" to listOf("election"),
            "fill" to listOf("prefix", "count", "start", "delete"),
            "scan" to listOf("pattern"),
            "scan_open" to listOf("scan", "pattern"),
            "scan_page" to listOf("scan"),
            "scan_rest" to listOf("scan", "must_include"),
        )
        val BYTE_FIELDS = setOf("value", "leader", "old")
        /** Fields whose expected value is a list of keys. */
        val KEY_LIST_FIELDS = setOf("keys", "missing")
    }

    @BeforeAll
    fun start() {
        server = LocalServer.start()
        // Accepts TCP connections and never answers (not even CONNACK).
        blackhole = ServerSocket(0, 50, java.net.InetAddress.getLoopbackAddress())
        Thread {
            while (!blackhole.isClosed) {
                runCatching { blackhole.accept() }.onSuccess { synchronized(held) { held += it } }
            }
        }.apply { isDaemon = true }.start()
    }

    @AfterAll
    fun stop() {
        blackhole.close()
        synchronized(held) { held.forEach { runCatching { it.close() } } }
        server.close()
        println("kotlin: $scenarios scenarios, $steps steps passed ($notRun not run)")
    }

    @TestFactory
    fun scenarios(): List<DynamicTest> {
        val files = DIR.listFiles { f -> f.name.endsWith(".json") }?.sortedBy { it.name } ?: emptyList()
        assertTrue(files.isNotEmpty(), "no scenarios in $DIR")
        return files.map { file -> DynamicTest.dynamicTest(file.nameWithoutExtension) { runScenario(file) } }
    }

    private fun runScenario(file: File) = runBlocking<Unit> {
        val doc = Json.parseToJsonElement(file.readText()).jsonObject
        for (k in doc.keys) require(k in setOf("description", "not_in", "steps")) { "${file.name}: unknown top-level field $k" }
        val notIn = doc["not_in"]?.jsonObject ?: JsonObject(emptyMap())
        for ((lang, reason) in notIn) {
            require(lang in LANGUAGES) { "${file.name}: unknown language $lang" }
            require(reason.jsonPrimitive.content.isNotEmpty()) { "${file.name}: not_in.$lang must give the reason" }
        }
        if ("kotlin" in notIn) {
            notRun += 1
            println("not run in Kotlin: ${file.name}: ${notIn["kotlin"]!!.jsonPrimitive.content}")
            return@runBlocking
        }
        val run = Run(server.url, blackhole.localPort, file.nameWithoutExtension)
        try {
            for ((i, element) in doc["steps"]!!.jsonArray.withIndex()) {
                val step = element.jsonObject
                val where = "${file.name} step ${i + 1}: $step"
                val op = step["op"]?.jsonPrimitive?.content
                val fields = STEPS[op] ?: error("$where: unknown step type $op")
                for (f in step.keys) {
                    require(f in setOf("op", "client", "expect") || f in fields) { "$where: step $op takes no field $f" }
                }
                var out: Map<String, Any?> = emptyMap()
                var failure: MqstateException? = null
                try {
                    out = run.execute(op!!, step)
                } catch (e: MqstateException) {
                    failure = e
                } catch (e: Throwable) {
                    throw AssertionError("$where\n  ${e.message}", e)
                }
                try {
                    run.check(step, out, failure)
                } catch (e: Throwable) {
                    throw AssertionError("$where\n  ${e.message}", e)
                }
                steps += 1
            }
        } finally {
            run.closeAll()
        }
        scenarios += 1
    }

    /** A scenario value as bytes: a string is its UTF-8, `{hex}` is binary. */
    private fun bytesOf(v: JsonElement): ByteArray = when {
        v is JsonPrimitive && v.isString -> v.content.encodeToByteArray()
        v is JsonObject && v.keys == setOf("hex") -> hex(v["hex"]!!.jsonPrimitive.content)
        else -> error("not a value: $v")
    }

    private fun hex(s: String): ByteArray = ByteArray(s.length / 2) { s.substring(2 * it, 2 * it + 2).toInt(16).toByte() }

    /** Bytes as the scenarios compare them: a string if valid UTF-8, else `hex:...`. */
    private fun canonical(b: ByteArray?): Any? {
        if (b == null) return null
        val decoder = Charsets.UTF_8.newDecoder()
        return try {
            decoder.decode(java.nio.ByteBuffer.wrap(b)).toString()
        } catch (_: java.nio.charset.CharacterCodingException) {
            "hex:" + b.joinToString("") { "%02x".format(it) }
        }
    }

    private fun expected(field: String, want: JsonElement): Any? = when {
        want is JsonNull -> null
        field in BYTE_FIELDS -> canonical(bytesOf(want))
        field in KEY_LIST_FIELDS -> want.jsonArray.map { canonical(bytesOf(it)) }
        want is JsonPrimitive && want.isString -> want.content
        want is JsonPrimitive && want.booleanOrNull != null -> want.boolean
        want is JsonPrimitive -> want.long
        else -> want.toString()
    }

    private inner class Run(val serverUrl: String, val blackholePort: Int, name: String) {
        val uid = "${ProcessHandle.current().pid()}-${System.currentTimeMillis()}-$name"
        val prefix = "scenarios/kotlin/$uid/"
        val clients = mutableMapOf<String, Client>()
        val observers = mutableMapOf<String, Observation>()
        val tokens = mutableMapOf<String, Hlc>()
        val leases = mutableMapOf<String, Lease>()
        val leaseEvents = mutableMapOf<String, LeaseEvents>()
        val guards = mutableMapOf<String, LockGuard>()
        val elections = mutableMapOf<String, LeaderElection>()
        /** Open scans and the keys their pages listed so far. */
        val scans = mutableMapOf<String, Pair<Scan, MutableList<ByteArray>>>()

        fun subst(s: String) = s.replace("{server}", serverUrl)
            .replace("{blackhole}", "mqtt://127.0.0.1:$blackholePort")
            .replace("{blackhole_port}", blackholePort.toString())
            .replace("{uid}", uid)

        fun key(step: JsonObject, field: String): ByteArray {
            val raw = bytesOf(step[field]!!)
            return if (raw.isEmpty()) raw else prefix.encodeToByteArray() + raw
        }

        /** Listed keys as the scan steps give them: without the run's prefix, sorted by bytes. */
        fun listed(keys: List<ByteArray>): List<Any?> {
            val p = prefix.encodeToByteArray()
            return keys.map { k ->
                check(k.size >= p.size && k.copyOfRange(0, p.size).contentEquals(p)) { "${canonical(k)} lacks the run's prefix" }
                k.copyOfRange(p.size, k.size)
            }.sortedWith { a, b -> java.util.Arrays.compareUnsigned(a, b) }.map { canonical(it) }
        }

        fun scanOf(step: JsonObject): Pair<Scan, MutableList<ByteArray>> =
            scans[str(step, "scan")] ?: error("no scan ${str(step, "scan")}")

        fun client(step: JsonObject): Client {
            val name = step["client"]?.jsonPrimitive?.content ?: "a"
            return clients[name] ?: error("no client $name is open")
        }

        fun token(step: JsonObject): Hlc? = step["fencing_token"]?.jsonPrimitive?.content?.let {
            tokens[it] ?: error("no token saved as $it")
        }

        fun str(step: JsonObject, f: String) = step[f]!!.jsonPrimitive.content
        fun ms(step: JsonObject, f: String): Duration = Duration.ofMillis(step[f]!!.jsonPrimitive.long)

        suspend fun <T> within(what: String, block: suspend () -> T): T =
            try {
                withTimeout(WAIT_MS) { block() }
            } catch (e: kotlinx.coroutines.TimeoutCancellationException) {
                throw AssertionError("$what: nothing within $WAIT_MS ms", e)
            }

        suspend fun execute(op: String, step: JsonObject): Map<String, Any?> {
            val out = mutableMapOf<String, Any?>()
            when (op) {
                "connect" -> {
                    val timeout = step["connect_timeout_ms"]?.jsonPrimitive?.long?.let { Duration.ofMillis(it) }
                    // A URL, or the settings field by field (merged by the core).
                    val options = if (step["url"] != null) {
                        ConnectOptions(url = subst(str(step, "url")), connectTimeout = timeout)
                    } else {
                        val tls = step["tls"]?.jsonPrimitive?.boolean == true
                        ConnectOptions(host = str(step, "host"), tls = if (tls) TlsConfig() else null, connectTimeout = timeout)
                    }
                    clients[step["client"]?.jsonPrimitive?.content ?: "a"] = Client.connect(options)
                }
                "close" -> {
                    client(step).disconnect()
                    clients.remove(step["client"]?.jsonPrimitive?.content ?: "a")
                }
                "set" -> {
                    val r = client(step).set(
                        key(step, "key"), bytesOf(step["value"]!!),
                        nx = step["nx"]?.jsonPrimitive?.boolean ?: false,
                        nex = step["nex"]?.jsonPrimitive?.boolean ?: false,
                        expiry = step["expiry_ms"]?.let { Duration.ofMillis(it.jsonPrimitive.long) },
                        fencingToken = token(step),
                    )
                    step["save_version"]?.let { tokens[it.jsonPrimitive.content] = r.version }
                    out["applied"] = r.applied
                }
                "get" -> out["value"] = canonical(client(step).get(key(step, "key"))?.value)
                "del" -> out["deleted"] = client(step).del(key(step, "key"), fencingToken = token(step)).toLong()
                "vdel" -> out["outcome"] = when (client(step).vdel(key(step, "key"), bytesOf(step["value"]!!), fencingToken = token(step))) {
                    VdelOutcome.DELETED -> "deleted"
                    VdelOutcome.NOT_FOUND -> "not_found"
                    VdelOutcome.VALUE_MISMATCH -> "value_mismatch"
                }
                "observe" -> observers[str(step, "observer")] = client(step).observe(key(step, "key"))
                "expect_notification" -> {
                    val o = observers[str(step, "observer")] ?: error("no observer ${str(step, "observer")}")
                    val n = within("notification") { o.next() } ?: error("the observation ended")
                    out["operation"] = n.operation
                    if (n.operation == "set") out["value"] = canonical(n.value)
                }
                "flood" -> {
                    val c = client(step)
                    val key = key(step, "key")
                    repeat(step["count"]!!.jsonPrimitive.int) { i ->
                        check(c.set(key, i.toString().encodeToByteArray()).applied) { "flood: SET #$i not applied" }
                    }
                }
                "expect_lagged" -> {
                    val o = observers[str(step, "observer")] ?: error("no observer")
                    val total = step["total"]!!.jsonPrimitive.long
                    var received = 0L
                    var lost = 0L
                    var lags = 0
                    while (received + lost < total) {
                        try {
                            val n = within("notification") { o.next() } ?: error("the observation ended")
                            assertEquals("set", n.operation, "a flood gives set notifications only")
                            received += 1
                        } catch (e: MqstateException.Lagged) {
                            val m = Regex("(\\d+) notifications dropped").find(e.reason) ?: error("lagged without a count: ${e.reason}")
                            lost += m.groupValues[1].toLong()
                            lags += 1
                        }
                    }
                    assertEquals(total, received + lost)
                    assertTrue(lags >= 1, "no lagged error after $total unread notifications")
                }
                "hlc" -> out["text"] = hlcFormat(
                    Hlc(step["ms"]!!.jsonPrimitive.long.toULong(), step["counter"]!!.jsonPrimitive.long.toULong(), str(step, "node_id")),
                )
                "lease_acquire" -> {
                    val lease = Lease(client(step), key(step, "name"), bytesOf(step["holder"]!!))
                    val token = lease.acquire(ms(step, "ttl_ms"))
                    if (token != null) step["save_token"]?.let { tokens[it.jsonPrimitive.content] = token }
                    out["acquired"] = token != null
                    leases[str(step, "lease")] = lease
                }
                "lease_auto_renew" -> {
                    val lease = leases[str(step, "lease")] ?: error("no lease")
                    val events = lease.events()
                    leaseEvents[str(step, "lease")] = events
                    lease.autoRenew(step["fraction"]!!.jsonPrimitive.double)
                }
                "expect_lease_event" -> {
                    val events = leaseEvents[str(step, "lease")] ?: error("no lease events")
                    val skip = step["skip"]?.jsonArray?.map { it.jsonPrimitive.content } ?: emptyList()
                    while (true) {
                        val e = within("lease event") { events.next() } ?: error("the lease events ended")
                        val name = when (e) {
                            is LeaseEvent.Acquired -> "acquired"
                            is LeaseEvent.Renewed -> "renewed"
                            is LeaseEvent.Lost -> "lost"
                            is LeaseEvent.Released -> "released"
                            is LeaseEvent.Other -> e.name
                        }
                        if (name == str(step, "event")) break
                        assertTrue(name in skip, "lease event $name, expected ${str(step, "event")}")
                    }
                }
                "lease_release" -> out["released"] = (leases[str(step, "lease")] ?: error("no lease")).release()
                "lock" -> {
                    val lock = Lock(client(step), key(step, "name"), bytesOf(step["holder"]!!), step["session"]?.let { bytesOf(it) })
                    guards[str(step, "lock")] = lock.lock(ms(step, "ttl_ms"), ms(step, "timeout_ms"))
                    out["locked"] = true
                }
                "lock_edit" -> {
                    val lock = Lock(client(step), key(step, "name"), bytesOf(step["holder"]!!))
                    val newValue = step["new_value"]!!.let { if (it is JsonNull) null else bytesOf(it) }
                    val seen = mutableListOf<ByteArray?>()
                    val written = lock.edit(key(step, "key"), ms(step, "ttl_ms"), ms(step, "timeout_ms")) { old ->
                        seen += old
                        newValue
                    }
                    assertEquals(1, seen.size, "the edit function is called once")
                    out["old"] = canonical(seen[0])
                    out["value"] = canonical(written)
                }
                "unlock" -> {
                    val guard = guards.remove(str(step, "lock")) ?: error("lock ${str(step, "lock")} is not held")
                    out["unlocked"] = guard.unlock()
                }
                "try_campaign" -> {
                    val e = LeaderElection(client(step), key(step, "name"), bytesOf(step["candidate"]!!))
                    out["elected"] = e.tryCampaign(ms(step, "term_ms")) != null
                    elections[str(step, "election")] = e
                }
                "leader" -> out["leader"] = canonical((elections[str(step, "election")] ?: error("no election")).leader())
                "resign" -> out["resigned"] = (elections[str(step, "election")] ?: error("no election")).resign()
                "fill" -> {
                    val c = client(step)
                    val prefix = key(step, "prefix")
                    val start = step["start"]?.jsonPrimitive?.long ?: 0L
                    val delete = step["delete"]?.jsonPrimitive?.boolean ?: false
                    for (i in start until start + step["count"]!!.jsonPrimitive.long) {
                        val key = prefix + "%04d".format(java.util.Locale.ROOT, i).encodeToByteArray()
                        if (delete) {
                            assertEquals(1u, c.del(key), "fill: DEL #$i")
                        } else {
                            check(c.set(key, "v".b).applied) { "fill: SET #$i not applied" }
                        }
                    }
                }
                "scan" -> {
                    // The language's own iteration: the Flow of keys.
                    val keys = client(step).scan(key(step, "pattern")).toList()
                    out["count"] = keys.size.toLong()
                    out["keys"] = listed(keys)
                }
                "scan_open" -> scans[str(step, "scan")] = Scan(client(step), key(step, "pattern")) to mutableListOf()
                "scan_page" -> {
                    val (scan, pages) = scanOf(step)
                    scan.nextPage()?.let { pages += it }
                    out["done"] = scan.isDone()
                }
                "scan_rest" -> {
                    val (scan, pages) = scans.remove(str(step, "scan")) ?: error("no scan ${str(step, "scan")}")
                    scan.use {
                        while (true) pages += it.nextPage() ?: break
                    }
                    val seen = pages.map { it.toList() }.toSet()
                    val missing = step["must_include"]!!.jsonArray
                        .map { prefix.encodeToByteArray() + bytesOf(it) }
                        .filter { it.toList() !in seen }
                    out["missing"] = listed(missing)
                    out["count"] = pages.size.toLong()
                }
                else -> error("unknown step type $op")
            }
            return out
        }

        fun check(step: JsonObject, out: Map<String, Any?>, failure: MqstateException?) {
            val expect = step["expect"]?.jsonObject ?: JsonObject(emptyMap())
            val kind = expect["error"]?.jsonPrimitive?.content
            if (kind != null) {
                if (failure == null) throw AssertionError("expected an error of kind $kind, got $out")
                if (kind != "any") assertEquals(kind, failure.kind(), "error kind of ${failure.describe()}")
                expect["service"]?.let {
                    val service = failure as? MqstateException.Service ?: throw AssertionError("not a service error: ${failure.describe()}")
                    assertEquals(it.jsonPrimitive.content, service.serviceKind, "service kind")
                }
                for (part in expect["message_contains"]?.jsonArray ?: JsonArray(emptyList())) {
                    val p = subst(part.jsonPrimitive.content)
                    assertTrue(failure.describe().contains(p), "the message \"${failure.describe()}\" does not contain $p")
                }
                return
            }
            if (failure != null) throw failure
            for ((field, want) in expect) {
                assertTrue(field in out, "the step gives no $field (it gives $out)")
                assertEquals(expected(field, want), out[field], field)
            }
        }

        suspend fun closeAll() {
            for ((scan, _) in scans.values) scan.close()
            scans.clear()
            for (c in clients.values) c.disconnect()
            clients.clear()
        }
    }
}
