'use strict';
// Devices over AMQP (issue 40): the official device SDK with its AMQP transport
// (azure-iot-device + azure-iot-device-amqp, AMQP 1.0 over TLS, port 5671) against the local hub:
// put-token of the device's SAS token, the C2D receiver link /devices/{id}/messages/devicebound
// (every property; complete, reject, abandon as the SDK settles them: accepted, rejected,
// released), the telemetry sender link /devices/{id}/messages/events, and one connection per
// device id across MQTT and AMQP, and the twin and method links (accepted: twin requests
// answered 403, no method request ever sent; the connection stays). C2D messages are sent with the service SDK's Client.send,
// feedback read with its feedback receiver.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { Client: ServiceClient } = require('azure-iothub');
const { Client: DeviceClient } = require('azure-iot-device');
const { Amqp } = require('azure-iot-device-amqp');
const { Message, NoRetry } = require('azure-iot-common');
const { startHub, within, ADMIN_URL } = require('./hub');
const { assertNodeTrust, connectDevice, feedbackCollector, errorName } = require('./common');

let hub;
let service;
let feedback;
before(async () => {
    hub = await startHub({
        name: 'node-device-amqp',
        devices: ['amqp-props', 'amqp-complete', 'amqp-reject', 'amqp-abandon', 'amqp-exceed', 'amqp-telemetry', 'amqp-takeover', 'amqp-twin', 'amqp-methods'],
        args: ['--iothub-feedback-interval', '1s', '--iothub-max-delivery-count', '2'],
    });
    assertNodeTrust(hub);
    service = ServiceClient.fromConnectionString(hub.serviceConnectionString);
    await within(20000, service.open(), 'service open');
    feedback = await feedbackCollector(service);
});
after(async () => {
    if (service) await within(10000, service.close(), 'service close').catch(() => {});
    if (hub) await hub.stop();
});

/** The device SDK over AMQP, opened, its C2D link attached, collecting messages unsettled. */
async function connectAmqpDevice(deviceId) {
    const client = DeviceClient.fromConnectionString(hub.deviceConnectionString(deviceId), Amqp);
    client.setRetryPolicy(new NoRetry());
    const received = [];
    const waiters = [];
    const errors = [];
    client.on('error', (e) => errors.push(e));
    await within(20000, client.open(), 'device SDK open (AMQP)');
    // The first 'message' listener makes the SDK attach its C2D receiver link.
    client.on('message', (msg) => {
        received.push(msg);
        const waiter = waiters.shift();
        if (waiter) waiter();
    });
    let taken = 0;
    return {
        client,
        errors,
        next(timeoutMs = 15000) {
            if (received.length > taken) return Promise.resolve(received[taken++]);
            return within(timeoutMs, new Promise((resolve) => waiters.push(() => resolve(received[taken++]))), 'a C2D message over AMQP');
        },
        async close() {
            await within(10000, client.close(), 'device SDK close').catch(() => {});
        },
    };
}

async function send(deviceId, messageId, configure) {
    const msg = new Message(`body of ${messageId}`);
    msg.messageId = messageId;
    msg.ack = 'full';
    if (configure) configure(msg);
    await within(15000, service.send(deviceId, msg), 'Client.send');
}

async function admin(path) {
    const res = await fetch(`${ADMIN_URL}${path}`);
    assert.equal(res.status, 200, `${path}: ${res.status}`);
    return res.json();
}

function propertiesOf(msg) {
    return Object.fromEntries(Array.from({ length: msg.properties.count() }, (_, i) => {
        const p = msg.properties.getItem(i);
        return [p.key, p.value];
    }));
}

/** The AMQP header's delivery count (prior deliveries), as the SDK keeps the AMQP message. */
function deliveryCount(msg) {
    return msg.transportObj.delivery_count || 0;
}

const CORRELATION_ID = '6f1c2d4e-8a9b-4c3d-9e8f-0a1b2c3d4e5f';

test('a message sent with Client.send reaches the AMQP device with every property', { timeout: 60000 }, async () => {
    const expiry = Date.now() + 600000;
    await send('amqp-props', 'props-1', (msg) => {
        msg.data = JSON.stringify({ setpoint: 21.5 });
        msg.correlationId = CORRELATION_ID;
        msg.contentType = 'application/json';
        msg.contentEncoding = 'utf-8';
        msg.expiryTimeUtc = expiry;
        msg.properties.add('unit', 'celsius');
        msg.properties.add('place', 'kitchen & hall/2 = 50%');
        msg.properties.add('empty', '');
    });
    const device = await connectAmqpDevice('amqp-props');
    try {
        const msg = await device.next();
        assert.equal(msg.data.toString(), '{"setpoint":21.5}');
        assert.equal(msg.messageId, 'props-1');
        assert.equal(msg.correlationId, CORRELATION_ID);
        assert.equal(msg.contentType, 'application/json');
        assert.equal(msg.contentEncoding, 'utf-8');
        assert.equal(msg.to, '/devices/amqp-props/messages/devicebound');
        // Over AMQP the SDK takes iothub-ack out of the properties into `ack`.
        assert.equal(msg.ack, 'full');
        assert.deepEqual(propertiesOf(msg), { unit: 'celsius', place: 'kitchen & hall/2 = 50%', empty: '' });
        assert.equal(new Date(msg.expiryTimeUtc).getTime(), expiry);
        assert.equal(deliveryCount(msg), 0);
        await within(10000, device.client.complete(msg), 'complete');
        const r = await feedback.waitFor((r) => r.originalMessageId === 'props-1', 15000, 'props-1');
        assert.equal(r.statusCode, 'Success');
    } finally {
        await device.close();
    }
});

test('complete: Success feedback, the queue empty', { timeout: 60000 }, async () => {
    const device = await connectAmqpDevice('amqp-complete');
    try {
        await send('amqp-complete', 'complete-1');
        const msg = await device.next();
        const { result } = { result: await within(10000, device.client.complete(msg), 'complete') };
        assert.equal(errorName(result), 'MessageCompleted');
        const r = await feedback.waitFor((r) => r.originalMessageId === 'complete-1', 15000, 'complete-1');
        assert.equal(r.statusCode, 'Success');
        assert.equal(r.deviceId, 'amqp-complete');
        assert.equal((await admin('/devices/amqp-complete/messages/devicebound')).depth, 0);
    } finally {
        await device.close();
    }
});

test('reject: Rejected feedback, the queue empty', { timeout: 60000 }, async () => {
    const device = await connectAmqpDevice('amqp-reject');
    try {
        await send('amqp-reject', 'reject-1');
        const msg = await device.next();
        await within(10000, device.client.reject(msg), 'reject');
        const r = await feedback.waitFor((r) => r.originalMessageId === 'reject-1', 15000, 'reject-1');
        assert.equal(r.statusCode, 'Rejected');
        assert.equal((await admin('/devices/amqp-reject/messages/devicebound')).depth, 0);
    } finally {
        await device.close();
    }
});

test('abandon: delivered again, its delivery count one more', { timeout: 60000 }, async () => {
    const device = await connectAmqpDevice('amqp-abandon');
    try {
        await send('amqp-abandon', 'abandon-1');
        const first = await device.next();
        assert.equal(deliveryCount(first), 0);
        await within(10000, device.client.abandon(first), 'abandon');
        const again = await device.next();
        assert.equal(again.messageId, 'abandon-1');
        assert.equal(deliveryCount(again), 1);
        const queue = await admin('/devices/amqp-abandon/messages/devicebound');
        assert.equal(queue.messages[0].deliveryCount, 2, JSON.stringify(queue));
        await within(10000, device.client.complete(again), 'complete');
        const r = await feedback.waitFor((r) => r.originalMessageId === 'abandon-1', 15000, 'abandon-1');
        assert.equal(r.statusCode, 'Success');
    } finally {
        await device.close();
    }
});

test('abandon past the max delivery count: DeliveryCountExceeded', { timeout: 60000 }, async () => {
    const device = await connectAmqpDevice('amqp-exceed');
    try {
        await send('amqp-exceed', 'exceed-1');
        await within(10000, device.client.abandon(await device.next()), 'abandon');
        // The second delivery is the last allowed (--iothub-max-delivery-count 2).
        await within(10000, device.client.abandon(await device.next()), 'abandon');
        const r = await feedback.waitFor((r) => r.originalMessageId === 'exceed-1', 15000, 'exceed-1');
        assert.equal(r.statusCode, 'DeliveryCountExceeded');
        assert.equal((await admin('/devices/amqp-exceed/messages/devicebound')).depth, 0);
    } finally {
        await device.close();
    }
});

test('telemetry sent with sendEvent, with its properties', { timeout: 60000 }, async () => {
    const device = await connectAmqpDevice('amqp-telemetry');
    try {
        const msg = new Message(JSON.stringify({ t: 21.5 }));
        msg.messageId = 'tele-1';
        msg.correlationId = 'tele-corr';
        msg.contentType = 'application/json';
        msg.contentEncoding = 'utf-8';
        msg.properties.add('alert', 'high');
        msg.properties.add('room', 'kitchen & hall');
        const { result } = { result: await within(10000, device.client.sendEvent(msg), 'sendEvent') };
        assert.equal(errorName(result), 'MessageEnqueued');
        const events = await admin('/devices/amqp-telemetry/messages/events?waitSecs=5');
        assert.equal(events.length, 1);
        const e = events[0];
        assert.equal(e.body, '{"t":21.5}');
        assert.equal(e.systemProperties['$.mid'], 'tele-1');
        assert.equal(e.systemProperties['$.cid'], 'tele-corr');
        assert.equal(e.systemProperties['$.ct'], 'application/json');
        assert.equal(e.systemProperties['$.ce'], 'utf-8');
        assert.equal(e.systemProperties['$.to'], '/devices/amqp-telemetry/messages/events');
        assert.deepEqual(e.properties, { alert: 'high', room: 'kitchen & hall' });
    } finally {
        await device.close();
    }
});

test('a device on MQTT, then on AMQP: the MQTT connection is closed', { timeout: 60000 }, async () => {
    const mqtt = await connectDevice(hub.deviceConnectionString('amqp-takeover'));
    // No reconnection: it would take the device back from AMQP.
    mqtt.client.setRetryPolicy(new NoRetry());
    const disconnected = new Promise((resolve) => mqtt.client.on('disconnect', resolve));
    const device = await connectAmqpDevice('amqp-takeover');
    try {
        await within(15000, disconnected, 'the MQTT client disconnected');
        // The AMQP device is the device's connection now.
        await send('amqp-takeover', 'takeover-1');
        const msg = await device.next();
        assert.equal(msg.messageId, 'takeover-1');
        await within(10000, device.client.complete(msg), 'complete');
        const devices = await admin('/devices');
        const d = devices.find((d) => d.deviceId === 'amqp-takeover');
        assert.equal(d.connectionState, 'Connected', JSON.stringify(d));
    } finally {
        await device.close();
        await mqtt.close();
    }
});

// The hub has no device twins: it accepts the twin links and answers each request with status
// 403 and IoT Hub's error body (errorCode 403010), as over MQTT. The SDK's AmqpTwinClient turns
// the 403 into InvalidOperationError (its message the parsed body), which amqp.js handleResult
// translates into an Error "could not get twin. " + the body's message, with the
// InvalidOperationError as amqpError. The connection stays: C2D still arrives, close is prompt.
test('twin over AMQP fails at once (no twin on the local hub), the connection stays', { timeout: 60000 }, async () => {
    const device = await connectAmqpDevice('amqp-twin');
    const disconnects = [];
    device.client.on('disconnect', (d) => disconnects.push(d));
    try {
        const started = Date.now();
        const err = await within(10000, device.client.getTwin().then(() => null, (e) => e), 'getTwin');
        assert.ok(err, 'getTwin fails');
        assert.ok(Date.now() - started < 5000, `getTwin took ${Date.now() - started} ms`);
        assert.equal(errorName(err), 'Error', `${errorName(err)}: ${err.message}`);
        assert.match(err.message, /^could not get twin\. device twins are not supported by this local IoT Hub/);
        assert.match(err.message, /cannot get the twin/);
        const inner = err.amqpError;
        assert.equal(errorName(inner), 'InvalidOperationError');
        assert.equal(inner.message.errorCode, 403010, JSON.stringify(inner.message));
        assert.equal(inner.amqpError.message_annotations.status, 403);
        // The same connection still receives C2D messages.
        await send('amqp-twin', 'after-twin-1');
        const msg = await device.next();
        assert.equal(msg.messageId, 'after-twin-1');
        await within(10000, device.client.complete(msg), 'complete');
        // A second request is answered the same way.
        const again = await within(10000, device.client.getTwin().then(() => null, (e) => e), 'getTwin again');
        assert.equal(errorName(again && again.amqpError), 'InvalidOperationError');
        assert.deepEqual(device.errors, []);
        assert.deepEqual(disconnects, []);
    } finally {
        const closing = Date.now();
        await within(10000, device.client.close(), 'device SDK close');
        assert.ok(Date.now() - closing < 5000, `close took ${Date.now() - closing} ms`);
    }
});

// The hub has no direct methods: it accepts the method links and never sends a request (it
// logs that methods are not supported). onDeviceMethod raises no error, the handler is never
// called, and the connection stays (as over MQTT, where the method subscription is refused
// in the SUBACK, which the SDK does not look at).
test('onDeviceMethod over AMQP: links attached, no method ever comes, the connection stays', { timeout: 60000 }, async () => {
    const device = await connectAmqpDevice('amqp-methods');
    const disconnects = [];
    device.client.on('disconnect', (d) => disconnects.push(d));
    const calls = [];
    try {
        device.client.onDeviceMethod('reboot', (request, response) => {
            calls.push(request);
            response.send(200, {}, () => {});
        });
        // Wait for the method links to attach (the SDK reports nothing when they do).
        const methods = device.client._transport._deviceMethodClient;
        await within(10000, new Promise((resolve) => {
            const check = () => (methods._fsm.state === 'attached' ? resolve() : setTimeout(check, 50));
            check();
        }), 'method links attached');
        await send('amqp-methods', 'after-methods-1');
        const msg = await device.next();
        assert.equal(msg.messageId, 'after-methods-1');
        await within(10000, device.client.complete(msg), 'complete');
        assert.deepEqual(calls, []);
        assert.deepEqual(device.errors, []);
        assert.deepEqual(disconnects, []);
    } finally {
        const closing = Date.now();
        await within(10000, device.client.close(), 'device SDK close');
        assert.ok(Date.now() - closing < 5000, `close took ${Date.now() - closing} ms`);
    }
});
