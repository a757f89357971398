package dev.mqstate

import java.io.File
import java.net.ServerSocket
import java.security.MessageDigest
import java.security.cert.CertificateFactory
import java.time.Duration
import java.util.Base64
import java.util.concurrent.TimeUnit
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/** The IoT Hub device client against the local IoT Hub of `mqstate serve`. */
class DeviceClientTest {
    private val key = Base64.getEncoder().encodeToString("0123456789abcdef0123456789abcdef".b)
    private val cs = "HostName=localhost;DeviceId=dev1;SharedAccessKey=$key"

    /** Feedback comes in batches; a short interval makes a batch of what is pending at once. */
    private val quickFeedback = arrayOf("--iothub-feedback-interval", "200ms")

    /** Options for the hub's AMQP endpoint (always TLS, with the certificate the hub generated). */
    private fun amqp(server: LocalServer, ca: File) =
        DeviceOptions(host = "127.0.0.1", port = server.hubAmqpPort!!.toUShort(), caFile = ca.path, transport = "amqp")

    private fun send(server: LocalServer, device: String, body: String, id: String, ack: String = "full") {
        server.cli("iothub", "send", "--url", server.hubAdmin!!, device, body, "--message-id", id, "--ack", ack)
    }

    @Test
    fun `cloud-to-device messages, completion and telemetry`() = runBlocking<Unit> {
        LocalServer.start("--iothub-device", "dev1:$key", iothub = true).use { server ->
            val device = DeviceClient.connect(cs, DeviceOptions(host = "127.0.0.1", port = server.hubPort!!.toUShort(), tls = false))
            try {
                assertEquals("dev1", device.deviceId())
                assertEquals("connected", device.state())
                server.cli(
                    "iothub", "send", "--url", server.hubAdmin!!, "dev1", "hello",
                    "--message-id", "m1", "-P", "colour=dark blue", "-P", "nothing", "-P", "empty=",
                )
                val msg = withTimeout(30_000) { device.receive() }
                assertArrayEquals("hello".b, msg.payload())
                assertEquals("m1", msg.messageId())
                assertNull(msg.correlationId())
                // The admin API takes the properties as a JSON object: their order is the hub's.
                assertEquals(
                    setOf(Property("colour", "dark blue"), Property("nothing", null), Property("empty", "")),
                    msg.properties().toSet(),
                )
                assertFalse(msg.isRedelivery())
                msg.complete()
                assertThrows<MqstateException.InvalidArgument> { msg.complete() }

                device.sendEvent(Telemetry(payload = "t=21".b, messageId = "e1", properties = listOf(Property("unit", "C"))))
                val stats = device.stats()
                assertEquals(1uL, stats.received)
                assertTrue(stats.connections >= 1uL)
            } finally {
                device.disconnect()
            }
            assertEquals("closed", device.state())
            val bad = assertThrows<MqstateException> { runBlocking { DeviceClient.connect("HostName=x", null) } }
            assertEquals("invalid_argument", bad.kind(), bad.describe())
        }
    }

    @Test
    fun `over MQTT reject and abandon are not supported and the message can still be completed`() = runBlocking<Unit> {
        LocalServer.start("--iothub-device", "dev1:$key", *quickFeedback, iothub = true).use { server ->
            val device = DeviceClient.connect(cs, DeviceOptions(host = "127.0.0.1", port = server.hubPort!!.toUShort(), tls = false, transport = "mqtt"))
            try {
                send(server, "dev1", "x", "m1")
                val msg = withTimeout(30_000) { device.receive() }
                assertNull(msg.deliveryCount(), "MQTT carries no delivery count")
                val reject = assertThrows<MqstateException.NotSupported> { msg.reject() }
                assertEquals("not_supported", reject.kind())
                assertTrue("reject is not supported over MQTT" in reject.describe(), reject.describe())
                val abandon = assertThrows<MqstateException.NotSupported> { msg.abandon() }
                assertTrue("abandon is not supported over MQTT" in abandon.describe(), abandon.describe())
                // Untouched by either: completing it is the hub's Success.
                msg.complete()
                assertEquals(mapOf("m1" to "Success"), server.hubFeedback("m1"))
                val stats = device.stats()
                assertEquals(Triple(1uL, 0uL, 0uL), Triple(stats.acknowledged, stats.rejected, stats.abandoned))
            } finally {
                device.disconnect()
            }
        }
    }

    @Test
    fun `over AMQP complete, reject with Rejected feedback, abandon redelivers with the delivery count one higher`() = runBlocking<Unit> {
        val ca = File(LocalServer.tempDir(), "hub.pem")
        LocalServer.start("--iothub-device", "dev1:$key", *quickFeedback, iothub = true, hubCaOut = ca).use { server ->
            val device = DeviceClient.connect(cs, amqp(server, ca))
            try {
                assertEquals("connected", device.state())
                for (id in listOf("ok", "bad", "later")) send(server, "dev1", id, id)
                val seen = mutableListOf<Pair<String?, UInt?>>()
                var settled = 0
                while (settled < 3) {
                    val msg = withTimeout(30_000) { device.receive() }
                    seen += msg.messageId() to msg.deliveryCount()
                    when {
                        msg.messageId() == "bad" -> {
                            msg.reject()
                            // Settled once: rejected, it cannot be completed too.
                            assertThrows<MqstateException.InvalidArgument> { msg.complete() }
                        }
                        msg.messageId() == "later" && msg.deliveryCount() == 0u -> {
                            msg.abandon()
                            continue
                        }
                        else -> msg.complete()
                    }
                    settled++
                }
                assertEquals(
                    listOf("ok" to 0u, "bad" to 0u, "later" to 0u, "later" to 1u),
                    seen.sortedBy { listOf("ok", "bad", "later").indexOf(it.first) * 10 + (it.second?.toInt() ?: 9) },
                    "every message once, and the abandoned one again with delivery count 1: $seen",
                )
                assertEquals(mapOf("ok" to "Success", "bad" to "Rejected", "later" to "Success"), server.hubFeedback("ok", "bad", "later"))
                val stats = device.stats()
                assertEquals(Triple(2uL, 1uL, 1uL), Triple(stats.acknowledged, stats.rejected, stats.abandoned))
            } finally {
                device.disconnect()
            }
        }
    }

    @Test
    fun `over AMQP abandoning past the hub's max delivery count dead-letters the message`() = runBlocking<Unit> {
        val ca = File(LocalServer.tempDir(), "hub.pem")
        LocalServer.start(
            "--iothub-device", "dev1:$key", *quickFeedback, "--iothub-max-delivery-count", "2",
            iothub = true, hubCaOut = ca,
        ).use { server ->
            val device = DeviceClient.connect(cs, amqp(server, ca))
            try {
                send(server, "dev1", "x", "x1", ack = "negative")
                for (count in listOf(0u, 1u)) {
                    val msg = withTimeout(30_000) { device.receive() }
                    assertEquals("x1" to count, msg.messageId() to msg.deliveryCount())
                    msg.abandon()
                }
                // Abandoned a second time with max delivery count 2: dead-lettered, with negative feedback.
                assertEquals(mapOf("x1" to "DeliveryCountExceeded"), server.hubFeedback("x1"))
                Thread.sleep(300)
                assertNull(device.tryReceive(), "a dead-lettered message is not delivered again")
                assertEquals(2uL, device.stats().abandoned)
            } finally {
                device.disconnect()
            }
        }
    }

    @Test
    fun `over AMQP settling a message of a lost connection throws LockLost`() = runBlocking<Unit> {
        val ca = File(LocalServer.tempDir(), "hub.pem")
        LocalServer.start("--iothub-device", "dev1:$key", *quickFeedback, iothub = true, hubCaOut = ca).use { server ->
            val device = DeviceClient.connect(cs, amqp(server, ca))
            try {
                send(server, "dev1", "k", "kept")
                val before = withTimeout(30_000) { device.receive() }
                assertEquals(0u, before.deliveryCount())
                // A second connection of the device makes the hub drop the first, which reconnects.
                DeviceClient.connect(cs, amqp(server, ca)).use { it.disconnect() }
                val again = withTimeout(30_000) { device.receive() }
                assertEquals("kept", again.messageId())
                assertTrue(again.isRedelivery())
                for ((name, settle) in listOf("complete" to before::complete, "reject" to before::reject, "abandon" to before::abandon)) {
                    val e = assertThrows<MqstateException.LockLost>(name) { settle() }
                    assertEquals("lock_lost", e.kind())
                    assertTrue(e.describe().startsWith("lock lost: "), e.describe())
                }
                again.complete()
                assertEquals(mapOf("kept" to "Success"), server.hubFeedback("kept"))
                assertTrue(device.stats().staleCompletions >= 3uL, "${device.stats()}")
            } finally {
                device.disconnect()
            }
        }
    }

    @Test
    fun `over AMQP on WebSockets (amqp-ws) a message is abandoned then completed`() = runBlocking<Unit> {
        val ca = File(LocalServer.tempDir(), "hub.pem")
        LocalServer.start("--iothub-device", "dev1:$key", *quickFeedback, iothub = true, hubCaOut = ca).use { server ->
            val ws = DeviceOptions(transport = "amqp-ws", host = "127.0.0.1", port = server.hubHttpsPort!!.toUShort(), caFile = ca.path)
            val device = DeviceClient.connect(cs, ws)
            try {
                send(server, "dev1", "over ws", "w1")
                val first = withTimeout(30_000) { device.receive() }
                assertEquals(0u, first.deliveryCount())
                first.abandon()
                val again = withTimeout(30_000) { device.receive() }
                assertEquals("w1" to 1u, again.messageId() to again.deliveryCount())
                again.complete()
                assertEquals(mapOf("w1" to "Success"), server.hubFeedback("w1"))
            } finally {
                device.disconnect()
            }
        }
    }

    /** A self-signed certificate for `cn` made with the openssl CLI: (cert, key, SHA-256 thumbprint hex). */
    private fun selfSigned(dir: File, cn: String): Triple<File, File, String> {
        val cert = File(dir, "$cn.pem")
        val key = File(dir, "$cn.key")
        val p = ProcessBuilder(
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key.path, "-out", cert.path, "-days", "2", "-subj", "/CN=$cn",
        ).redirectErrorStream(true).start()
        val out = p.inputStream.bufferedReader().readText()
        check(p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0) { "openssl failed: $out" }
        val der = cert.inputStream().use { CertificateFactory.getInstance("X.509").generateCertificate(it).encoded }
        val thumbprint = MessageDigest.getInstance("SHA-256").digest(der).joinToString("") { "%02x".format(it) }
        return Triple(cert, key, thumbprint)
    }

    @Test
    fun `an X509 device receives with its certificate over MQTT and AMQP and another certificate is refused`() = runBlocking<Unit> {
        val dir = LocalServer.tempDir()
        val ca = File(dir, "hub.pem")
        LocalServer.start("--iothub-tls", *quickFeedback, iothub = true, hubCaOut = ca).use { server ->
            val (cert, certKey, thumbprint) = selfSigned(dir, "x1")
            server.cli("iothub", "device", "add", "--url", server.hubAdmin!!, "x1", "--x509-thumbprint", thumbprint)
            val x509 = "HostName=localhost;DeviceId=x1;x509=true"
            val options = DeviceOptions(host = "127.0.0.1", port = server.hubPort!!.toUShort(), caFile = ca.path)
            val device = DeviceClient.connect(x509, options.copy(certFile = cert.path, keyFile = certKey.path))
            try {
                assertEquals("x1", device.deviceId())
                send(server, "x1", "by certificate", "c1")
                val msg = withTimeout(30_000) { device.receive() }
                assertArrayEquals("by certificate".b, msg.payload())
                msg.complete()
            } finally {
                device.disconnect()
            }
            // Over AMQP the certificate goes in the TLS handshake too, and the device can reject.
            val amqp = options.copy(transport = "amqp", port = server.hubAmqpPort!!.toUShort(), certFile = cert.path, keyFile = certKey.path)
            val amqpDevice = DeviceClient.connect(x509, amqp)
            try {
                send(server, "x1", "reject me", "c2")
                val msg = withTimeout(30_000) { amqpDevice.receive() }
                assertEquals(0u, msg.deliveryCount())
                msg.reject()
                assertEquals(mapOf("c1" to "Success", "c2" to "Rejected"), server.hubFeedback("c1", "c2"))
            } finally {
                amqpDevice.disconnect()
            }
            // A certificate that is not the device's: refused, as IoT Hub refuses it.
            val (other, otherKey, _) = selfSigned(dir, "other")
            assertThrows<MqstateException.Authentication> {
                runBlocking { DeviceClient.connect(x509, options.copy(certFile = other.path, keyFile = otherKey.path)) }
            }
        }
    }

    /** Asserts that `connect` throws InvalidArgument whose message (the core's) contains `text`. */
    private fun refused(text: String, connectionString: String, options: DeviceOptions) {
        val e = assertThrows<MqstateException.InvalidArgument> { runBlocking { DeviceClient.connect(connectionString, options) } }
        assertEquals("invalid_argument", e.kind())
        assertTrue(text in e.describe(), "expected \"$text\" in: ${e.describe()}")
    }

    @Test
    fun `option mistakes are the core's InvalidArgument, before any connection`() {
        val x509 = "HostName=localhost;DeviceId=x1;x509=true"
        // Port 1: nothing listens; every one of these fails before connecting.
        val here = DeviceOptions(host = "127.0.0.1", port = 1u)
        refused("both cert_file and key_file", x509, here.copy(certFile = "x1.pem"))
        refused("both cert_file and key_file", x509, here.copy(keyFile = "x1.key"))
        refused("x509=true", x509, here)
        refused("for X.509 devices", cs, here.copy(certFile = "x1.pem", keyFile = "x1.key"))
        refused("TLS is turned off", cs, here.copy(tls = false, caFile = "ca.pem"))
        refused("unknown transport \"http\"", cs, here.copy(transport = "http"))
        assertThrows<MqstateException.InvalidArgument>("amqp-ws is TLS only") {
            runBlocking { DeviceClient.connect(cs, here.copy(transport = "amqp-ws", tls = false)) }
        }
        refused("keep-alive", cs, here.copy(keepAlive = Duration.ofSeconds(2)))
        refused("token lifetime", cs, here.copy(tokenLifetime = Duration.ofSeconds(1)))
        refused("receive buffer", cs, here.copy(receiveBuffer = 0u))
        // Transport names are the core's, in any case.
        val e = assertThrows<MqstateException> { runBlocking { DeviceClient.connect(cs, here.copy(transport = "AMQP", tls = false, connectTimeout = Duration.ofSeconds(2))) } }
        assertFalse(e is MqstateException.InvalidArgument, "AMQP is a transport: ${e.describe()}")
    }

    @Test
    fun `connectTimeout bounds a connection attempt to a silent server`() {
        // Accepts TCP connections (the backlog) and never answers.
        ServerSocket(0).use { silent ->
            val started = System.nanoTime()
            val e = assertThrows<MqstateException.Timeout> {
                runBlocking {
                    DeviceClient.connect(cs, DeviceOptions(host = "127.0.0.1", port = silent.localPort.toUShort(), tls = false, connectTimeout = Duration.ofSeconds(1)))
                }
            }
            val seconds = (System.nanoTime() - started) / 1e9
            assertTrue(seconds < 10, "gave up after $seconds s (the default is 30 s): ${e.describe()}")
        }
    }
}
