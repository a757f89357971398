'use strict';
// MQTT and AMQP over WebSockets (issue 52): the official SDKs' WebSocket transports against the
// local hub's HTTPS port (wss://localhost:443/$iothub/websocket, subprotocols `mqtt` and
// `AMQPWSB10`). The service Client over AmqpWs sends every C2D message and reads feedback over
// the same WebSocket; devices receive with MqttWs (the PUBACK completes; the SDK refuses reject
// and abandon over MQTT itself, as IoT Hub's MQTT has neither) and with AmqpWs (complete,
// reject, abandon). The device connections are the TCP transports' handlers behind a WebSocket,
// so the same lifecycle holds: checked here through the hub's admin API and feedback.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { Client: ServiceClient, AmqpWs: ServiceAmqpWs } = require('azure-iothub');
const { Client: DeviceClient } = require('azure-iot-device');
const { MqttWs } = require('azure-iot-device-mqtt');
const { AmqpWs } = require('azure-iot-device-amqp');
const { Message, NoRetry } = require('azure-iot-common');
const { startHub, within, ADMIN_URL } = require('./hub');
const { assertNodeTrust, feedbackCollector, errorName } = require('./common');

let hub;
let service;
let feedback;
before(async () => {
    hub = await startHub({
        name: 'node-websockets',
        devices: ['ws-mqtt', 'ws-amqp-complete', 'ws-amqp-reject', 'ws-amqp-abandon'],
        args: ['--iothub-feedback-interval', '1s'],
    });
    assertNodeTrust(hub);
    // The service side over AMQP/WS: sends and feedback share its one WebSocket.
    service = ServiceClient.fromConnectionString(hub.serviceConnectionString, ServiceAmqpWs);
    await within(20000, service.open(), 'service open (AmqpWs)');
    feedback = await feedbackCollector(service);
});
after(async () => {
    if (service) await within(10000, service.close(), 'service close').catch(() => {});
    if (hub) await hub.stop();
});

/** A device client over `transport`, opened, collecting C2D messages unsettled. */
async function connect(deviceId, transport) {
    const client = DeviceClient.fromConnectionString(hub.deviceConnectionString(deviceId), transport);
    client.setRetryPolicy(new NoRetry());
    const received = [];
    const waiters = [];
    client.on('error', () => {});
    await within(20000, client.open(), `device open (${transport.name})`);
    client.on('message', (msg) => {
        received.push(msg);
        const waiter = waiters.shift();
        if (waiter) waiter();
    });
    let taken = 0;
    return {
        client,
        next(timeoutMs = 15000) {
            if (received.length > taken) return Promise.resolve(received[taken++]);
            return within(timeoutMs, new Promise((resolve) => waiters.push(() => resolve(received[taken++]))), `a C2D message over ${transport.name}`);
        },
        async close() {
            await within(10000, client.close(), 'device close').catch(() => {});
        },
    };
}

async function send(deviceId, messageId) {
    const msg = new Message(`body of ${messageId}`);
    msg.messageId = messageId;
    msg.ack = 'full';
    msg.properties.add('via', 'websocket');
    await within(15000, service.send(deviceId, msg), 'Client.send (AmqpWs)');
}

async function depth(deviceId) {
    const res = await fetch(`${ADMIN_URL}/devices/${deviceId}/messages/devicebound`);
    assert.equal(res.status, 200);
    return (await res.json()).depth;
}

test('MqttWs: receives, the PUBACK completes; reject and abandon are refused by the SDK', { timeout: 60000 }, async () => {
    const device = await connect('ws-mqtt', MqttWs);
    try {
        await send('ws-mqtt', 'mqtt-ws-1');
        const msg = await device.next();
        assert.equal(msg.data.toString(), 'body of mqtt-ws-1');
        assert.equal(msg.messageId, 'mqtt-ws-1');
        // IoT Hub's MQTT has no reject or abandon: the SDK says so instead of sending anything.
        assert.throws(() => device.client.reject(msg, () => {}), (e) => errorName(e) === 'NotImplementedError');
        assert.throws(() => device.client.abandon(msg, () => {}), (e) => errorName(e) === 'NotImplementedError');
        await within(10000, device.client.complete(msg), 'complete');
        const r = await feedback.waitFor((r) => r.originalMessageId === 'mqtt-ws-1', 15000, 'mqtt-ws-1');
        assert.equal(r.statusCode, 'Success');
        assert.equal(r.deviceId, 'ws-mqtt');
        assert.equal(await depth('ws-mqtt'), 0);
    } finally {
        await device.close();
    }
});

test('AmqpWs: complete gives Success feedback', { timeout: 60000 }, async () => {
    const device = await connect('ws-amqp-complete', AmqpWs);
    try {
        await send('ws-amqp-complete', 'amqp-ws-complete');
        const msg = await device.next();
        assert.equal(msg.data.toString(), 'body of amqp-ws-complete');
        const { result } = { result: await within(10000, device.client.complete(msg), 'complete') };
        assert.equal(errorName(result), 'MessageCompleted');
        const r = await feedback.waitFor((r) => r.originalMessageId === 'amqp-ws-complete', 15000, 'amqp-ws-complete');
        assert.equal(r.statusCode, 'Success');
        assert.equal(await depth('ws-amqp-complete'), 0);
    } finally {
        await device.close();
    }
});

test('AmqpWs: reject gives Rejected feedback', { timeout: 60000 }, async () => {
    const device = await connect('ws-amqp-reject', AmqpWs);
    try {
        await send('ws-amqp-reject', 'amqp-ws-reject');
        await within(10000, device.client.reject(await device.next()), 'reject');
        const r = await feedback.waitFor((r) => r.originalMessageId === 'amqp-ws-reject', 15000, 'amqp-ws-reject');
        assert.equal(r.statusCode, 'Rejected');
        assert.equal(await depth('ws-amqp-reject'), 0);
    } finally {
        await device.close();
    }
});

test('AmqpWs: abandon delivers it again, then complete', { timeout: 60000 }, async () => {
    const device = await connect('ws-amqp-abandon', AmqpWs);
    try {
        await send('ws-amqp-abandon', 'amqp-ws-abandon');
        const first = await device.next();
        await within(10000, device.client.abandon(first), 'abandon');
        const again = await device.next();
        assert.equal(again.messageId, 'amqp-ws-abandon');
        assert.equal(again.transportObj.delivery_count || 0, 1);
        await within(10000, device.client.complete(again), 'complete');
        const r = await feedback.waitFor((r) => r.originalMessageId === 'amqp-ws-abandon', 15000, 'amqp-ws-abandon');
        assert.equal(r.statusCode, 'Success');
    } finally {
        await device.close();
    }
});
