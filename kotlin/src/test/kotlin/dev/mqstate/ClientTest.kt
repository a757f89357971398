package dev.mqstate

import java.time.Duration
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.delay
import kotlinx.coroutines.flow.take
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.assertThrows

/** The client's operations against a real `mqstate serve`. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ClientTest {
    private lateinit var server: LocalServer
    private val clients = mutableListOf<Client>()

    @BeforeAll
    fun start() {
        server = LocalServer.start()
    }

    @AfterAll
    fun stop() = runBlocking {
        clients.forEach { it.disconnect() }
        server.close()
    }

    private suspend fun connect(options: ConnectOptions = ConnectOptions(url = server.url)): Client =
        Client.connect(options).also { clients += it }

    @Test
    fun `set get del vdel round trip`() = runBlocking<Unit> {
        val c = connect()
        val key = uniqueKey("rt").b
        assertNull(c.get(key), "a key never set is absent")
        val set = c.set(key, "open".b)
        assertTrue(set.applied)
        val got = c.get(key) ?: error("the key was just set")
        assertArrayEquals("open".b, got.value)
        assertEquals(set.version, got.version, "get returns the version set returned")
        assertEquals(VdelOutcome.VALUE_MISMATCH, c.vdel(key, "closed".b))
        assertEquals(VdelOutcome.DELETED, c.vdel(key, "open".b))
        assertEquals(VdelOutcome.NOT_FOUND, c.vdel(key, "open".b))
        c.set(key, "again".b)
        assertEquals(1u, c.del(key))
        assertEquals(0u, c.del(key), "deleting an absent key deletes nothing")
        assertEquals("connected", c.state())
        assertTrue(c.clientId().isNotEmpty())
    }

    @Test
    fun `binary and empty values and keys`() = runBlocking<Unit> {
        val c = connect()
        val all = ByteArray(256) { it.toByte() }
        val key = uniqueKey("bin").b + byteArrayOf(0, -1, 10)
        c.set(key, all)
        assertArrayEquals(all, c.get(key)!!.value)
        c.set(key, ByteArray(0))
        assertArrayEquals(ByteArray(0), c.get(key)!!.value, "an empty value is a value, not an absence")
    }

    @Test
    fun `nx and nex not applied are outcomes, not errors`() = runBlocking<Unit> {
        val c = connect()
        val key = uniqueKey("cond").b
        assertTrue(c.set(key, "v1".b, nx = true).applied, "NX on an absent key is applied")
        assertFalse(c.set(key, "v2".b, nx = true).applied, "NX on an existing key is not applied")
        assertArrayEquals("v1".b, c.get(key)!!.value)
        // NEX: applied unless the key exists with a different value.
        assertTrue(c.set(key, "v1".b, nex = true).applied, "NEX with the same value is applied")
        assertFalse(c.set(key, "v3".b, nex = true).applied, "NEX with another value is not applied")
        assertArrayEquals("v1".b, c.get(key)!!.value)
        c.del(key)
        assertTrue(c.set(key, "v3".b, nex = true).applied, "NEX on an absent key is applied")
        val e = assertThrows<MqstateException.InvalidArgument> { runBlocking { c.set(key, "x".b, nx = true, nex = true) } }
        assertEquals("invalid_argument", e.kind())
    }

    @Test
    fun `expiry deletes the key and notifies`() = runBlocking<Unit> {
        val c = connect()
        val key = uniqueKey("px").b
        val observation = c.observe(key)
        c.set(key, "short".b, expiry = Duration.ofMillis(300), timeout = Duration.ofSeconds(20))
        val seen = withTimeout(30_000) { observation.asFlow().take(2).toList() }
        assertEquals(listOf("set", "delete"), seen.map { it.operation })
        assertNull(c.get(key))
        val e = assertThrows<MqstateException.InvalidArgument> { runBlocking { c.set(key, "v".b, expiry = Duration.ZERO) } }
        assertTrue(e.reason.contains("expiry"), e.reason)
    }

    @Test
    fun `persist is accepted and the value is readable`() = runBlocking<Unit> {
        val c = connect()
        val key = uniqueKey("persist").b
        assertTrue(c.set(key, "kept".b, persist = true).applied)
        assertArrayEquals("kept".b, c.get(key)!!.value)
    }

    @Test
    fun `observe sees another client's writes as a flow`() = runBlocking<Unit> {
        val reader = connect()
        val writer = connect()
        val key = uniqueKey("obs").b
        val flow = reader.observeFlow(key)
        val collected = async { withTimeout(30_000) { flow.take(3).toList() } }
        writer.set(key, "one".b)
        writer.set(key, byteArrayOf(0, 1, 2))
        writer.del(key)
        val seen = collected.await()
        assertEquals(listOf("set", "set", "delete"), seen.map { it.operation })
        assertArrayEquals("one".b, seen[0].value)
        assertArrayEquals(byteArrayOf(0, 1, 2), seen[1].value)
        assertNull(seen[2].value)
        assertTrue(seen.all { it.key.contentEquals(key) && it.version != null && !it.synthesized })
    }

    @Test
    fun `closing an observation ends it and unobserve ends all of a key's`() = runBlocking<Unit> {
        val c = connect()
        val key = uniqueKey("unobs").b
        val a = c.observe(key)
        a.stop()
        assertNull(a.next(), "a closed observation returns null")
        val b = c.observe(key)
        c.unobserve(key)
        assertNull(withTimeout(30_000) { b.next() }, "unobserve ends the key's observations")
    }

    @Test
    fun `64 concurrent coroutines on one client`() = runBlocking<Unit> {
        val c = connect()
        val prefix = uniqueKey("conc")
        val results = (0 until 64).map { i ->
            async(Dispatchers.Default) {
                val key = "$prefix/$i".b
                c.set(key, "value-$i".b)
                c.get(key)!!.value.decodeToString()
            }
        }.awaitAll()
        assertEquals((0 until 64).map { "value-$it" }, results)
    }

    @Test
    fun `a call against a stopped server times out`() = runBlocking<Unit> {
        val own = LocalServer.start()
        val c = connect(ConnectOptions(url = own.url, reconnectInitialDelay = Duration.ofMillis(50)))
        c.set(uniqueKey("before").b, "v".b)
        own.close()
        val e = assertThrows<MqstateException> { runBlocking { c.get(uniqueKey("after").b, timeout = Duration.ofMillis(500)) } }
        assertTrue(e is MqstateException.Timeout || e is MqstateException.Disconnected, "got ${e.kind()}: ${e.describe()}")
        assertTrue(e.kind() in setOf("timeout", "disconnected"))
    }

    @Test
    fun `connecting to nothing fails with a typed error`() = runBlocking<Unit> {
        val port = LocalServer.freePort()
        val e = assertThrows<MqstateException> {
            runBlocking { Client.connect(ConnectOptions(url = "mqtt://127.0.0.1:$port", connectTimeout = Duration.ofSeconds(2))) }
        }
        assertTrue(e.kind() in setOf("connection", "timeout"), "got ${e.kind()}: ${e.describe()}")
        assertTrue(e.describe().contains("127.0.0.1"), e.describe())
    }

    @Test
    fun `error kinds`() = runBlocking<Unit> {
        val c = connect()
        val empty = assertThrows<MqstateException.InvalidArgument> { runBlocking { c.get(ByteArray(0)) } }
        assertEquals("invalid_argument", empty.kind())
        assertTrue(empty.describe().isNotEmpty())
        val url = assertThrows<MqstateException> { runBlocking { Client.connect(ConnectOptions(url = "http://nowhere")) } }
        assertTrue(url.kind() in setOf("invalid_argument", "connection"), url.kind())
        val unknown = assertThrows<MqstateException> { runBlocking { Client.connect(ConnectOptions(url = "${server.url}?no_such_option=1")) } }
        assertTrue(unknown.describe().contains("no_such_option"), unknown.describe())
        val hlc = assertThrows<MqstateException> { hlcFormat(Hlc(1u, 2u, "a:b")) }
        assertTrue(hlc.describe().contains("a:b"), hlc.describe())
        val env = assertThrows<MqstateException> { runBlocking { Client.fromEnv(mapOf()) } }
        assertTrue(env.describe().contains("AIO_BROKER_HOSTNAME"), env.describe())
    }

    @Test
    fun `hlc string form`() {
        val h = hlcParse("001696374425000:00001:CLIENT")
        assertEquals(Hlc(1696374425000u, 1u, "CLIENT"), h)
        assertEquals("001696374425000:00001:CLIENT", hlcFormat(h))
    }

    @Test
    fun `per-call timeout and cancellation`() = runBlocking<Unit> {
        val c = connect()
        val key = uniqueKey("to").b
        c.set(key, "v".b, timeout = Duration.ofSeconds(20))
        assertArrayEquals("v".b, c.get(key, timeout = Duration.ofSeconds(20))!!.value)
        // A coroutine cancelled while its observation waits: the wait stops, nothing leaks.
        val o = c.observe(key)
        val waiting = async { o.next() }
        delay(100)
        waiting.cancel()
        o.stop()
        assertNull(o.next())
    }
}
