package dev.mqstate

import java.util.Base64
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

    @Test
    fun `cloud-to-device messages, completion and telemetry`() = runBlocking<Unit> {
        LocalServer.start("--iothub-device", "dev1:$key", iothub = true).use { server ->
            val cs = "HostName=localhost;DeviceId=dev1;SharedAccessKey=$key"
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
                val reject = assertThrows<MqstateException.NotSupported> { msg.reject() }
                assertEquals("not_supported", reject.kind())
                assertThrows<MqstateException.NotSupported> { msg.abandon() }
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
}
