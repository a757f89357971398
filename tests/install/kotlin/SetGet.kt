// Install test (scripts/test-install): compiled by Maven in an empty project that depends on
// the Kotlin jar from dist/ (by its path, see pom.xml here), and run with `java` on the
// resolved class path. Sets a key and reads it back.
//
//     java -cp ... SetGetKt mqtt://127.0.0.1:PORT KEY VERSION

import dev.mqstate.Client
import dev.mqstate.ConnectOptions
import dev.mqstate.version
import kotlin.system.exitProcess
import kotlinx.coroutines.runBlocking

fun main(args: Array<String>) {
    val (url, key, expectedVersion) = args
    if (version() != expectedVersion) {
        System.err.println("Kotlin: the library is mqstate ${version()}, expected $expectedVersion")
        exitProcess(1)
    }
    val expected = "set from Kotlin"
    val got = runBlocking {
        val client = Client.connect(ConnectOptions(url = url))
        try {
            client.set(key.toByteArray(), expected.toByteArray())
            client.get(key.toByteArray())
        } finally {
            client.disconnect()
        }
    }
    val value = got?.value?.toString(Charsets.UTF_8)
    println("Kotlin: mqstate ${version()}: set $key, got \"$value\" (version ${got?.version})")
    if (value != expected) {
        System.err.println("Kotlin: expected \"$expected\"")
        exitProcess(1)
    }
}
