'use strict';
// Helpers shared by the Node tests: the official device SDK (azure-iot-device + Mqtt) as a queue
// of received messages, and the official service SDK's feedback receiver as a list of records.

const fs = require('node:fs');
const { Client: DeviceClient } = require('azure-iot-device');
const { Mqtt } = require('azure-iot-device-mqtt');
const { within } = require('./hub');

/**
 * The Node SDKs trust the hub's certificate through NODE_EXTRA_CA_CERTS (read at process start);
 * see hub.js. Fails early, with the reason, when the test was started without it.
 */
function assertNodeTrust(hub) {
    const extra = process.env.NODE_EXTRA_CA_CERTS;
    if (!extra || !fs.existsSync(extra) || fs.readFileSync(extra, 'utf8') !== fs.readFileSync(hub.caFile, 'utf8')) {
        throw new Error('the hub certificate is not in NODE_EXTRA_CA_CERTS: run the Node tests through '
            + 'scripts/test-iothub-sdk (or set MQSTATE_SDK_TLS_CERT, MQSTATE_SDK_TLS_KEY, and MQSTATE_SDK_TLS_CA = NODE_EXTRA_CA_CERTS, see hub.js)');
    }
}

/** An official device SDK client (MQTT over TLS, port 8883), opened, collecting C2D messages. */
async function connectDevice(connectionString) {
    const client = DeviceClient.fromConnectionString(connectionString, Mqtt);
    const received = [];
    const waiters = [];
    client.on('message', (msg) => {
        received.push(msg);
        // Over MQTT the message is already acknowledged (PUBACK) when it arrives; complete() is
        // what the SDK's samples call, and a no-op for this transport.
        client.complete(msg, () => {});
        const waiter = waiters.shift();
        if (waiter) waiter();
    });
    client.on('error', () => {});
    await within(20000, client.open(), 'device SDK open');
    let taken = 0;
    return {
        client,
        received,
        next(timeoutMs = 10000) {
            if (received.length > taken) return Promise.resolve(received[taken++]);
            return within(timeoutMs, new Promise((resolve) => waiters.push(() => resolve(received[taken++]))), 'device SDK message');
        },
        async close() {
            await within(10000, client.close(), 'device SDK close').catch(() => {});
        },
    };
}

/** The service SDK's feedback receiver, completing each batch and keeping its records. */
async function feedbackCollector(serviceClient) {
    const { result: receiver } = await within(20000, serviceClient.getFeedbackReceiver(), 'getFeedbackReceiver');
    const batches = [];
    const records = [];
    const waiters = new Set();
    receiver.on('message', (msg) => {
        const body = JSON.parse(msg.getData().toString('utf8'));
        batches.push(msg);
        records.push(...body);
        receiver.complete(msg, () => {});
        for (const w of [...waiters]) w();
    });
    receiver.on('error', () => {});
    return {
        receiver,
        batches,
        records,
        /** Resolves with the first record for which `pred(record)` holds. */
        waitFor(pred, timeoutMs, what) {
            const found = records.find(pred);
            if (found) return Promise.resolve(found);
            let check;
            const p = new Promise((resolve) => {
                check = () => {
                    const r = records.find(pred);
                    if (r) { waiters.delete(check); resolve(r); }
                };
                waiters.add(check);
            });
            return within(timeoutMs, p, `feedback ${what} (records so far: ${JSON.stringify(records)})`)
                .finally(() => waiters.delete(check));
        },
    };
}

/** The name of an SDK error (azure-iothub bundles its own copy of the error classes). */
function errorName(err) {
    return err && (err.name || (err.constructor && err.constructor.name));
}

module.exports = { assertNodeTrust, connectDevice, feedbackCollector, errorName };
