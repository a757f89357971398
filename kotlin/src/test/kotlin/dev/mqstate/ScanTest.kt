package dev.mqstate

import java.time.Duration
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.flow.first
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.runBlocking
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

/** Listing keys (`SCAN`): the Flow `client.scan` and the page API `Scan`, against a real `mqstate serve`. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ScanTest {
    private lateinit var server: LocalServer
    private lateinit var client: Client

    @BeforeAll
    fun start() = runBlocking {
        server = LocalServer.start()
        client = Client.connect(ConnectOptions(url = server.url))
    }

    @AfterAll
    fun stop() = runBlocking {
        client.disconnect()
        server.close()
    }

    /** Keys compared by content (a ByteArray's equals is identity). */
    private fun List<ByteArray>.text(): List<String> = map { k -> k.joinToString("") { "%02x".format(it) } }

    /** Sets every key to "v", 64 at a time. */
    private suspend fun fill(keys: List<ByteArray>) = kotlinx.coroutines.coroutineScope {
        for (chunk in keys.chunked(64)) {
            chunk.map { k -> async { check(client.set(k, "v".b).applied) } }.awaitAll()
        }
    }

    @Test
    fun `3000 keys are listed exactly once by the flow and by the pages`() = runBlocking<Unit> {
        val prefix = uniqueKey("scan3000") + "/"
        val keys = (0 until 3000).map { "$prefix%04d".format(java.util.Locale.ROOT, it).b }
        fill(keys)
        val expected = keys.text().sorted()

        val flowed = client.scan("$prefix*".b).toList()
        assertEquals(3000, flowed.size, "every key once")
        assertEquals(expected, flowed.text().sorted(), "exactly the keys set")

        val scan = Scan(client, "$prefix*".b)
        assertArrayEquals("$prefix*".b, scan.pattern())
        val paged = mutableListOf<ByteArray>()
        var pages = 0
        while (!scan.isDone()) {
            paged += scan.nextPage() ?: error("null before the last page")
            pages += 1
        }
        assertTrue(pages >= 6, "pages of at most 500 keys: $pages pages")
        assertEquals(expected, paged.text().sorted(), "the pages list every key once")
        assertNull(scan.nextPage(), "null after the last page")
        assertNull(scan.nextPage(), "and still null")
        scan.close()
    }

    @Test
    fun `pages until null, and the flow asks for pages as keys are consumed`() = runBlocking<Unit> {
        val prefix = uniqueKey("pages") + "/"
        fill((0 until 1200).map { "$prefix%04d".format(java.util.Locale.ROOT, it).b })
        Scan(client, "$prefix*".b).use { scan ->
            val first = scan.nextPage() ?: error("a first page")
            assertTrue(first.size in 1..500, "a page of at most 500 keys: ${first.size}")
            assertFalse(scan.isDone(), "1,200 keys do not fit in one page")
            var total = first.size
            while (true) total += (scan.nextPage() ?: break).size
            assertEquals(1200, total)
            assertTrue(scan.isDone())
            assertNull(scan.nextPage())
        }
        // Taking one key reads one page only, and cancelling the collection is clean.
        val one = client.scan("$prefix*".b).first()
        assertTrue(one.decodeToString().startsWith(prefix))
        // A flow is cold: each collection lists again.
        val flow = client.scan("$prefix*".b)
        assertEquals(1200, flow.toList().size)
        assertEquals(1200, flow.toList().size)
    }

    @Test
    fun `prefix and question mark patterns, binary keys, no match`() = runBlocking<Unit> {
        val p = uniqueKey("glob") + "/"
        for (k in listOf("line3/a", "line3/b", "line3/sub/c", "line4/a", "line44/a")) client.set("$p$k".b, "1".b)
        fun names(keys: List<ByteArray>) = keys.map { it.decodeToString().removePrefix(p) }.sorted()

        assertEquals(listOf("line3/a", "line3/b", "line3/sub/c"), names(client.scan("${p}line3/*".b).toList()))
        assertEquals(listOf("line3/a", "line4/a"), names(client.scan("${p}line?/a".b).toList()), "? is one byte")
        assertEquals(listOf("line3/b", "line3/sub/c"), names(client.scan("${p}line[34]/[^a]*".b).toList()))

        val binary = p.b + byteArrayOf(0, -1, 0x2a, 10)
        val other = p.b + byteArrayOf(0, -2)
        client.set(binary, "1".b)
        client.set(other, "1".b)
        val found = client.scan(p.b + byteArrayOf(0, -1) + "*".b).toList()
        assertEquals(1, found.size, "only the key with the 00 ff prefix")
        assertArrayEquals(binary, found[0], "a binary key comes back byte for byte")
        assertEquals(2, client.scan(p.b + byteArrayOf(0) + "?*".b).toList().size)

        assertEquals(emptyList<ByteArray>(), client.scan("${p}nothing-here*".b).toList())
        Scan(client, "${p}nothing-here*".b).use { scan ->
            var total = 0
            while (true) total += (scan.nextPage() ?: break).size
            assertEquals(0, total)
            assertTrue(scan.isDone())
        }
    }

    @Test
    fun `an empty pattern is refused before anything is sent`() = runBlocking<Unit> {
        val e = assertThrows<MqstateException.InvalidArgument> { client.scan(ByteArray(0)) }
        assertEquals("invalid_argument", e.kind())
        assertTrue(e.describe().contains("pattern"), e.describe())
        assertThrows<MqstateException.InvalidArgument> { Scan(client, ByteArray(0)) }

        // A closed client shows that creating a scan sends nothing: the empty pattern is still
        // an invalid argument (not a lost connection), a good one is accepted, and only asking
        // for a page fails.
        val closed = Client.connect(ConnectOptions(url = server.url))
        closed.disconnect()
        assertThrows<MqstateException.InvalidArgument> { closed.scan(ByteArray(0)) }
        val flow = closed.scan("k*".b)
        Scan(closed, "k*".b).use { scan ->
            assertThrows<MqstateException.Disconnected> { runBlocking { scan.nextPage() } }
            assertFalse(scan.isDone())
        }
        assertThrows<MqstateException.Disconnected> { runBlocking { flow.toList() } }
        closed.close()
    }

    @Test
    fun `a malformed pattern is the server's error`() = runBlocking<Unit> {
        val e = assertThrows<MqstateException.Service> { runBlocking { client.scan("k[".b).toList() } }
        assertEquals("service", e.kind())
        assertTrue(e.describe().contains("no closing ']'"), e.describe())
        assertTrue(e.serviceText.contains("no closing ']'"), e.serviceText)

        Scan(client, "k[".b, timeout = Duration.ofSeconds(10)).use { scan ->
            val first = assertThrows<MqstateException.Service> { runBlocking { scan.nextPage() } }
            assertTrue(first.describe().contains("no closing ']'"), first.describe())
            assertFalse(scan.isDone(), "after an error the scan is where it was")
            assertThrows<MqstateException.Service> { runBlocking { scan.nextPage() } }
        }
    }
}
