package dev.mqstate

import java.time.Duration
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

/** Leases, fencing, locks and leader election against a real `mqstate serve`. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class LockTest {
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

    private suspend fun connect(): Client = Client.connect(ConnectOptions(url = server.url)).also { clients += it }

    private val ttl = Duration.ofSeconds(10)

    @Test
    fun `a lease fences writes and a stale token is rejected`() = runBlocking<Unit> {
        val a = connect()
        val b = connect()
        val name = uniqueKey("lease").b
        val key = uniqueKey("fenced").b
        val leaseA = Lease(a, name, "host-a".b)
        val leaseB = Lease(b, name, "host-b".b)
        val tokenA = leaseA.acquire(ttl) ?: error("the free lease was not acquired")
        assertEquals(tokenA, leaseA.currentToken())
        assertNull(leaseB.acquire(ttl), "a held lease is not acquired by another holder")
        assertArrayEquals("host-a".b, leaseB.holder())
        assertTrue(a.set(key, "v1".b, fencingToken = tokenA).applied)

        val required = assertThrows<MqstateException.Service> { runBlocking { a.set(key, "no token".b) } }
        assertEquals("fencing_token_required", required.serviceKind)
        assertEquals("service", required.kind())

        assertTrue(leaseA.release())
        val tokenB = leaseB.acquireWait(ttl, Duration.ofSeconds(20))
        assertTrue(b.set(key, "v2".b, fencingToken = tokenB).applied)
        val stale = assertThrows<MqstateException.Service> { runBlocking { a.set(key, "late".b, fencingToken = tokenA) } }
        assertEquals("fencing_token_lower_version", stale.serviceKind)
        assertTrue(stale.serviceText.isNotEmpty())
        val staleDel = assertThrows<MqstateException.Service> { runBlocking { a.del(key, fencingToken = tokenA) } }
        assertEquals("fencing_token_lower_version", staleDel.serviceKind)
        assertArrayEquals("v2".b, b.get(key)!!.value, "the stale writes changed nothing")
        assertTrue(leaseB.release())
        assertFalse(leaseB.release(), "releasing twice reports it was not held")
    }

    @Test
    fun `lease events report renewals and the release`() = runBlocking<Unit> {
        val c = connect()
        val lease = Lease(c, uniqueKey("renew").b, "me".b)
        val events = lease.events()
        val first = lease.acquire(Duration.ofSeconds(2)) ?: error("not acquired")
        lease.autoRenew(0.25)
        val seen = mutableListOf<LeaseEvent>()
        withTimeout(30_000) {
            while (seen.none { it is LeaseEvent.Renewed }) seen += events.next() ?: error("events ended")
        }
        val renewed = seen.filterIsInstance<LeaseEvent.Renewed>().first()
        assertTrue(compareValues(first.ms, renewed.token.ms) <= 0)
        assertTrue(renewed.token != first, "a renewal gives a new token")
        assertTrue(lease.release())
        withTimeout(30_000) {
            while (true) {
                val e = events.next() ?: error("events ended before the release")
                if (e is LeaseEvent.Released) break
            }
        }
        events.stop()
        assertNull(events.next())
        val bad = assertThrows<MqstateException.InvalidArgument> { runBlocking { lease.autoRenew(1.5) } }
        assertTrue(bad.reason.isNotEmpty())
        assertThrows<MqstateException.InvalidArgument> { Lease(c, ByteArray(0), "me".b) }
    }

    @Test
    fun `a lock times out while held, unlocks, and edits under its token`() = runBlocking<Unit> {
        val a = connect()
        val b = connect()
        val name = uniqueKey("lock").b
        val guard = Lock(a, name, "a".b).lock(ttl, Duration.ofSeconds(20))
        val e = assertThrows<MqstateException.Timeout> {
            runBlocking { Lock(b, name, "b".b).lock(ttl, Duration.ofMillis(300)) }
        }
        assertEquals("timeout", e.kind())
        assertTrue(guard.unlock())
        assertFalse(guard.unlock(), "a second unlock reports it was not held")

        val counter = uniqueKey("counter").b
        val lock = Lock(b, name, "b".b)
        repeat(3) {
            lock.edit(counter, ttl, Duration.ofSeconds(20)) { old ->
                ((old?.decodeToString()?.toInt() ?: 0) + 1).toString().b
            }
        }
        assertArrayEquals("3".b, b.get(counter)!!.value)
        assertNull(lock.edit(counter, ttl, Duration.ofSeconds(20)) { null })
        assertNull(b.get(counter), "an edit returning null deletes the key")
        val failed = assertThrows<MqstateException.InvalidArgument> {
            runBlocking {
                lock.edit(counter, ttl, Duration.ofSeconds(20), object : Editor {
                    override fun edit(old: ByteArray?): ByteArray? = throw MqstateException.InvalidArgument("not a number")
                })
            }
        }
        assertEquals("not a number", failed.reason)
        assertNull(b.get(counter), "a failed edit writes nothing")
    }

    @Test
    fun `leader election`() = runBlocking<Unit> {
        val a = connect()
        val b = connect()
        val name = uniqueKey("election").b
        val ea = LeaderElection(a, name, "node-a".b)
        val eb = LeaderElection(b, name, "node-b".b, renewFraction = 0.3)
        val events = eb.events()
        assertTrue(ea.tryCampaign(ttl) != null)
        assertTrue(ea.isLeader())
        assertNull(eb.tryCampaign(ttl))
        assertArrayEquals("node-a".b, eb.leader())
        assertTrue(ea.resign())
        val token = eb.campaign(ttl, Duration.ofSeconds(20))
        assertTrue(eb.isLeader())
        val seen = mutableListOf<LeadershipEvent>()
        withTimeout(30_000) {
            while (seen.none { it is LeadershipEvent.Elected }) seen += events.next() ?: error("events ended")
        }
        assertEquals(token, seen.filterIsInstance<LeadershipEvent.Elected>().first().token)
        assertTrue(eb.resign())
        assertNull(eb.leader())
        assertThrows<MqstateException.InvalidArgument> { LeaderElection(a, name, "x".b, renewFraction = 0.0) }
    }
}
