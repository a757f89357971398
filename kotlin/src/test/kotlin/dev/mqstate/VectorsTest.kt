package dev.mqstate

import java.io.File
import kotlinx.coroutines.async
import kotlinx.coroutines.flow.take
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.JsonPrimitive
import kotlinx.serialization.json.jsonArray
import kotlinx.serialization.json.jsonObject
import kotlinx.serialization.json.jsonPrimitive
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/**
 * The shared vectors (tests/vectors/) that apply to the Kotlin API: HLC parsing, formatting,
 * ordering and equality; the binary values of the reply and notification vectors round-tripped
 * through a real server (GET and observe). The codec and topic internals are not exposed to
 * Kotlin; the Rust suite runs those vectors on the same code.
 */
class VectorsTest {
    private fun vectors(name: String): JsonObject =
        Json.parseToJsonElement(File(LocalServer.repo, "tests/vectors/$name").readText()).jsonObject

    private val hlc = vectors("hlc.json")

    private fun JsonObject.s(f: String) = this[f]!!.jsonPrimitive.content

    @Test
    fun `hlc valid`() {
        val cases = hlc["valid"]!!.jsonArray.map { it.jsonObject }
        assertTrue(cases.isNotEmpty())
        for (c in cases) {
            val h = hlcParse(c.s("text"))
            assertEquals(c.s("ms").toULong(), h.ms, c.s("text"))
            assertEquals(c.s("counter").toULong(), h.counter, c.s("text"))
            assertEquals(c.s("node_id"), h.nodeId, c.s("text"))
            assertEquals(c.s("display"), hlcFormat(h), c.s("text"))
            assertEquals(h, hlcParse(hlcFormat(h)))
        }
        println("kotlin: hlc.json valid: ${cases.size} cases")
    }

    @Test
    fun `hlc malformed is invalid_argument`() {
        val cases = hlc["malformed"]!!.jsonArray.map { it.jsonObject }
        assertTrue(cases.isNotEmpty())
        for (c in cases) {
            val e = assertThrows<MqstateException.InvalidArgument>("${c.s("text")} should fail") { hlcParse(c.s("text")) }
            assertTrue(e.describe().contains("malformed HLC"), e.describe())
        }
        println("kotlin: hlc.json malformed: ${cases.size} cases")
    }

    @Test
    fun `hlc ordering and equality`() {
        val ordering = hlc["ordering"]!!.jsonArray.map { it.jsonObject }
        assertTrue(ordering.isNotEmpty())
        for (c in ordering) {
            val lower = hlcParse(c.s("lower"))
            val higher = hlcParse(c.s("higher"))
            assertEquals(-1, hlcCompare(lower, higher), c.s("why"))
            assertEquals(1, hlcCompare(higher, lower), c.s("why"))
            assertEquals(listOf(lower, higher), listOf(higher, lower).sortedWith { a, b -> hlcCompare(a, b) })
        }
        val equal = hlc["equal"]!!.jsonArray.map { it.jsonObject }
        assertTrue(equal.isNotEmpty())
        for (c in equal) {
            val a = hlcParse(c.s("a"))
            val b = hlcParse(c.s("b"))
            assertEquals(a, b)
            assertEquals(0, hlcCompare(a, b))
            assertEquals(hlcFormat(a), hlcFormat(b))
        }
    }

    /** A vector's bytes: `<field>_hex`, else the string's code points as bytes (latin-1). */
    private fun bytesOf(o: JsonObject, field: String): ByteArray? {
        o["${field}_hex"]?.let { h -> val s = h.jsonPrimitive.content; return ByteArray(s.length / 2) { s.substring(2 * it, 2 * it + 2).toInt(16).toByte() } }
        val v = o[field] as? JsonPrimitive ?: return null
        if (!v.isString) return null
        return v.content.toByteArray(Charsets.ISO_8859_1)
    }

    @Test
    fun `reply and notification values round-trip through a server`() = runBlocking<Unit> {
        val getValues = vectors("replies.json")["cases"]!!.jsonArray.map { it.jsonObject }
            .filter { it.s("command") == "GET" && it["result"] is JsonObject }
            .mapNotNull { bytesOf(it["result"]!!.jsonObject, "value") }
        val notified = vectors("notifications.json")["cases"]!!.jsonArray.map { it.jsonObject }
            .filter { (it["operation"] as? JsonPrimitive)?.content == "set" && (it["server_encodes_this"] as? JsonPrimitive)?.content == "true" }
            .mapNotNull { bytesOf(it, "value") }
        assertTrue(getValues.size >= 3, "GET values: ${getValues.size}")
        assertTrue(notified.isNotEmpty())
        LocalServer.start().use { server ->
            val c = Client.connect(ConnectOptions(url = server.url))
            try {
                for (value in getValues) {
                    val k = uniqueKey("vec").b
                    c.set(k, value)
                    assertArrayEquals(value, c.get(k)!!.value)
                }
                val k = uniqueKey("vec-notify").b
                val flow = c.observeFlow(k)
                val seen = async { withTimeout(30_000) { flow.take(notified.size).toList() } }
                for (value in notified) c.set(k, value)
                val got = seen.await()
                for ((want, n) in notified.zip(got)) assertArrayEquals(want, n.value)
            } finally {
                c.disconnect()
            }
        }
        println("kotlin: ${getValues.size} GET values and ${notified.size} notified values round-tripped")
    }
}
