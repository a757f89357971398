'use strict';
// Devices over HTTPS (port 443) with the official device SDK's HTTP transport
// (azure-iot-device + azure-iot-device-http): it polls GET /devices/{id}/messages/devicebound,
// settles by the lock token it reads from the ETag (DELETE for complete, DELETE ...&reject,
// POST .../abandon) and posts telemetry to /devices/{id}/messages/events with its properties as
// iothub-app-* headers. Messages are sent with the official service SDK (Client.send, AMQP), and
// the outcomes are read from its feedback receiver and from the hub's admin API.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { Client: ServiceClient, Registry } = require('azure-iothub');
const { Client: DeviceClient } = require('azure-iot-device');
const { Http } = require('azure-iot-device-http');
const { Message } = require('azure-iot-common');
const { startHub, within, sleep } = require('./hub');
const { assertNodeTrust, feedbackCollector } = require('./common');

const MAX_DELIVERY_COUNT = 3;
const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let hub;
let service;
let feedback;
before(async () => {
    hub = await startHub({
        name: 'node-device-http',
        devices: ['http-props', 'http-complete', 'http-reject', 'http-abandon', 'http-exceeded', 'http-events'],
        args: ['--iothub-feedback-interval', '1s', '--iothub-max-delivery-count', String(MAX_DELIVERY_COUNT)],
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

/**
 * A device SDK client over HTTPS, polling for C2D messages every second (the receive policy's
 * `interval`, in seconds); the messages it receives are queued, not settled.
 */
async function openHttpDevice(id) {
    const client = DeviceClient.fromConnectionString(hub.deviceConnectionString(id), Http);
    const received = [];
    const waiters = [];
    client.on('error', () => {});
    await within(10000, client.setOptions({ http: { receivePolicy: { interval: 1 } } }), 'setOptions');
    await within(10000, client.open(), 'device SDK open (HTTP)');
    client.on('message', (msg) => {
        received.push(msg);
        const waiter = waiters.shift();
        if (waiter) waiter();
    });
    let taken = 0;
    return {
        client,
        received,
        next(timeoutMs = 10000) {
            if (received.length > taken) return Promise.resolve(received[taken++]);
            return within(timeoutMs, new Promise((resolve) => waiters.push(() => resolve(received[taken++]))), `HTTP receive on ${id}`);
        },
        async close() {
            await within(10000, client.close(), 'device SDK close').catch(() => {});
        },
    };
}

/** The admin API (JSON over HTTP, as `mqstate iothub` uses it). */
async function admin(path) {
    const res = await fetch(`${hub.adminUrl}${path}`);
    const text = await res.text();
    assert.ok(res.ok, `GET ${path}: ${res.status} ${text}`);
    return JSON.parse(text);
}

function command(messageId, ack = 'full') {
    const msg = new Message(`body of ${messageId}`);
    msg.messageId = messageId;
    msg.ack = ack;
    return msg;
}

function propertiesOf(msg) {
    return Object.fromEntries(Array.from({ length: msg.properties.count() }, (_, i) => {
        const p = msg.properties.getItem(i);
        return [p.key, p.value];
    }));
}

const CORRELATION_ID = '6f1c2d4e-8a9b-4c3d-9e8f-0a1b2c3d4e5f';

test('a message sent with Client.send reaches the HTTP device SDK with every property it reads', { timeout: 60000 }, async () => {
    const device = await openHttpDevice('http-props');
    try {
        const msg = new Message(JSON.stringify({ setpoint: 21.5 }));
        msg.messageId = 'http-props-1';
        msg.correlationId = CORRELATION_ID;
        msg.contentType = 'application/json';
        msg.contentEncoding = 'utf-8';
        msg.ack = 'full';
        msg.properties.add('unit', 'celsius');
        msg.properties.add('place', 'kitchen & hall/2 = 50%');
        msg.properties.add('empty', '');
        await within(15000, service.send('http-props', msg), 'Client.send');
        const got = await device.next();
        assert.equal(got.data.toString(), '{"setpoint":21.5}');
        assert.equal(got.messageId, 'http-props-1');
        assert.equal(got.correlationId, CORRELATION_ID);
        assert.equal(got.to, '/devices/http-props/messages/devicebound');
        assert.ok(!Number.isNaN(Date.parse(got.expiryTimeUtc)), `expiry ${got.expiryTimeUtc}`);
        // The lock token is the ETag without its quotes (the SDK strips them).
        assert.match(got.lockToken, GUID);
        // The HTTP transport keeps the header names of application properties, prefix included
        // (its toMessage adds each iothub-app-* header as it comes), as against IoT Hub.
        assert.deepEqual(propertiesOf(got), {
            'iothub-app-unit': 'celsius',
            'iothub-app-place': 'kitchen & hall/2 = 50%',
            'iothub-app-empty': '',
        });
        await within(10000, device.client.complete(got), 'complete');
    } finally {
        await device.close();
    }
});

test('complete: Success feedback, the queue is empty; completing again is 412 DeviceMessageLockLost', { timeout: 60000 }, async () => {
    const device = await openHttpDevice('http-complete');
    try {
        await within(15000, service.send('http-complete', command('http-complete-1')), 'Client.send');
        const got = await device.next();
        assert.equal(got.messageId, 'http-complete-1');
        const completed = await within(10000, device.client.complete(got), 'complete');
        assert.equal(completed.constructor.name, 'MessageCompleted');
        assert.equal(completed.transportObj.statusCode, 204);
        const record = await feedback.waitFor((r) => r.originalMessageId === 'http-complete-1', 15000, 'Success');
        assert.equal(record.statusCode, 'Success');
        assert.equal(record.deviceId, 'http-complete');
        assert.equal((await admin('/devices/http-complete/messages/devicebound')).depth, 0);
        const err = await device.client.complete(got).then(() => null, (e) => e);
        assert.ok(err, 'a second complete of the same lock token fails');
        assert.equal(err.response.statusCode, 412);
        assert.match(err.responseBody, /ErrorCode:DeviceMessageLockLost;/);
    } finally {
        await device.close();
    }
});

test('reject: Rejected feedback, the message is not delivered again', { timeout: 60000 }, async () => {
    const device = await openHttpDevice('http-reject');
    try {
        await within(15000, service.send('http-reject', command('http-reject-1')), 'Client.send');
        const got = await device.next();
        assert.equal(got.messageId, 'http-reject-1');
        const result = await within(10000, device.client.reject(got), 'reject');
        assert.equal(result.constructor.name, 'MessageRejected');
        const record = await feedback.waitFor((r) => r.originalMessageId === 'http-reject-1', 15000, 'Rejected');
        assert.equal(record.statusCode, 'Rejected');
        assert.equal(record.description, 'Message rejected');
        const queue = await admin('/devices/http-reject/messages/devicebound');
        assert.equal(queue.depth, 0);
        assert.equal(queue.finished.find((m) => m.messageId === 'http-reject-1').statusCode, 'Rejected');
        const registry = Registry.fromConnectionString(hub.ownerConnectionString);
        const { responseBody } = await within(15000, registry.get('http-reject'), 'Registry.get');
        assert.equal(responseBody.cloudToDeviceMessageCount, 0);
        await sleep(2500); // two more polls
        assert.equal(device.received.length, 1, 'a rejected message is never delivered again');
    } finally {
        await device.close();
    }
});

test('abandon: received again with the delivery count one higher', { timeout: 60000 }, async () => {
    const device = await openHttpDevice('http-abandon');
    try {
        await within(15000, service.send('http-abandon', command('http-abandon-1')), 'Client.send');
        const first = await device.next();
        assert.equal(first.messageId, 'http-abandon-1');
        let queue = await admin('/devices/http-abandon/messages/devicebound');
        assert.equal(queue.messages[0].deliveryCount, 1);
        const result = await within(10000, device.client.abandon(first), 'abandon');
        assert.equal(result.constructor.name, 'MessageAbandoned');
        const second = await device.next();
        assert.equal(second.messageId, 'http-abandon-1');
        assert.notEqual(second.lockToken, first.lockToken, 'a new lock has a new token');
        queue = await admin('/devices/http-abandon/messages/devicebound');
        assert.equal(queue.messages[0].deliveryCount, 2);
        assert.equal(queue.messages[0].state, 'Invisible');
        await within(10000, device.client.complete(second), 'complete');
        const record = await feedback.waitFor((r) => r.originalMessageId === 'http-abandon-1', 15000, 'Success');
        assert.equal(record.statusCode, 'Success');
    } finally {
        await device.close();
    }
});

test('abandoning the last allowed delivery: DeliveryCountExceeded', { timeout: 60000 }, async () => {
    const device = await openHttpDevice('http-exceeded');
    try {
        await within(15000, service.send('http-exceeded', command('http-exceeded-1')), 'Client.send');
        for (let delivery = 1; delivery <= MAX_DELIVERY_COUNT; delivery++) {
            const got = await device.next();
            assert.equal(got.messageId, 'http-exceeded-1', `delivery ${delivery}`);
            await within(10000, device.client.abandon(got), `abandon ${delivery}`);
        }
        const record = await feedback.waitFor((r) => r.originalMessageId === 'http-exceeded-1', 15000, 'DeliveryCountExceeded');
        assert.equal(record.statusCode, 'DeliveryCountExceeded');
        const queue = await admin('/devices/http-exceeded/messages/devicebound');
        assert.equal(queue.depth, 0);
        await sleep(2500);
        assert.equal(device.received.length, MAX_DELIVERY_COUNT);
    } finally {
        await device.close();
    }
});

test('sendEvent and sendEventBatch: telemetry with its properties', { timeout: 60000 }, async () => {
    const device = await openHttpDevice('http-events');
    try {
        const msg = new Message(JSON.stringify({ temperature: 21.5 }));
        msg.messageId = 'http-event-1';
        msg.correlationId = 'corr-1';
        msg.contentType = 'application/json';
        msg.contentEncoding = 'utf-8';
        msg.properties.add('alert', 'high');
        msg.properties.add('place', 'kitchen & hall');
        const result = await within(10000, device.client.sendEvent(msg), 'sendEvent');
        assert.equal(result.constructor.name, 'MessageEnqueued');
        const batch = ['one', 'two'].map((body, i) => {
            const m = new Message(body);
            m.properties.add('n', String(i + 1));
            return m;
        });
        await within(10000, device.client.sendEventBatch(batch), 'sendEventBatch');

        const events = await admin('/devices/http-events/messages/events');
        assert.equal(events.length, 3, JSON.stringify(events));
        const [single, b1, b2] = events;
        assert.equal(single.deviceId, 'http-events');
        assert.equal(single.body, '{"temperature":21.5}');
        assert.deepEqual(single.properties, { alert: 'high', place: 'kitchen & hall' });
        assert.deepEqual(single.systemProperties, {
            '$.mid': 'http-event-1',
            '$.cid': 'corr-1',
            '$.ct': 'application/json',
            '$.ce': 'utf-8',
        });
        assert.deepEqual([b1.body, b2.body], ['one', 'two']);
        assert.deepEqual([b1.properties, b2.properties], [{ n: '1' }, { n: '2' }]);
    } finally {
        await device.close();
    }
});

test('a wrong device key is refused: UnauthorizedError', { timeout: 60000 }, async () => {
    const cs = hub.deviceConnectionString('http-events', Buffer.alloc(32, 7).toString('base64'));
    const client = DeviceClient.fromConnectionString(cs, Http);
    client.on('error', () => {});
    const err = await within(15000, client.sendEvent(new Message('x')).then(() => null, (e) => e), 'sendEvent with a wrong key');
    assert.ok(err, 'sendEvent fails');
    assert.equal(err.name || err.constructor.name, 'UnauthorizedError');
    assert.equal(err.response.statusCode, 401);
    await client.close().catch(() => {});
});
