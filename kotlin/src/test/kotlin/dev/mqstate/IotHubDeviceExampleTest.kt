package dev.mqstate

import java.io.File
import java.util.Base64
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Test

/**
 * The example of kotlin/README.md ("IoT Hub devices"): a device over AMQP completes, rejects and
 * abandons cloud-to-device messages. The README quotes the connection and `settle` (the docs
 * check, scripts/check-docs, fails when the quote and this file differ); the test runs them
 * against the local hub of `mqstate serve` and checks the feedback the hub gave the sender.
 */
class IotHubDeviceExampleTest {
    @Test
    fun `the README's AMQP example settles three ways`() = runBlocking<Unit> {
        val key = Base64.getEncoder().encodeToString("0123456789abcdef0123456789abcdef".b)
        val ca = File(LocalServer.tempDir(), "hub.pem")
        val args = arrayOf("--iothub-device", "dev1:$key", "--iothub-feedback-interval", "200ms")
        LocalServer.start(*args, iothub = true, hubCaOut = ca).use { server ->
            for (body in listOf("ok", "bad", "later")) {
                server.cli("iothub", "send", "--url", server.hubAdmin!!, "dev1", body, "--message-id", body, "--ack", "full")
            }
            val connectionString = "HostName=localhost;DeviceId=dev1;SharedAccessKey=$key"
            val amqpPort = server.hubAmqpPort!!.toUShort()
            val hubCa = ca.path
            val device = DeviceClient.connect(
                connectionString,
                DeviceOptions(transport = "amqp", host = "127.0.0.1", port = amqpPort, caFile = hubCa),
            )
            try {
                withTimeout(30_000) { settle(device, 3) }
                assertEquals(mapOf("ok" to "Success", "bad" to "Rejected", "later" to "Success"), server.hubFeedback("ok", "bad", "later"))
            } finally {
                device.disconnect()
            }
        }
    }

    /** Settles `count` messages: "bad" is rejected, "later" abandoned once, the rest completed. */
    private suspend fun settle(device: DeviceClient, count: Int) {
        var settled = 0
        while (settled < count) {
            val msg = device.receive()
            val text = msg.payload().decodeToString()
            try {
                when {
                    text == "bad" -> msg.reject()                         // dead-lettered: Rejected feedback
                    text == "later" && msg.deliveryCount() == 0u -> {
                        msg.abandon()                                     // comes again, deliveryCount 1
                        continue
                    }
                    else -> msg.complete()                                // Success feedback
                }
                settled++
            } catch (e: MqstateException.LockLost) {
                // The connection dropped first: the hub delivers the message again; settle that copy.
                println(e.describe())
            }
        }
    }
}
