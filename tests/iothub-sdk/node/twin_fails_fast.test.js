'use strict';
// Requests the local hub does not serve fail fast with the official Node device SDK
// (azure-iot-device + azure-iot-device-mqtt).
//
// mqstate's hub serves cloud-to-device messages and telemetry, not device twins or direct methods.
// A twin request is answered on `$iothub/twin/res/403/?$rid=...` with IoT Hub's error body
// (errorCode 403010). The SDK ignores the status in the topic and fails the request when the body
// has an `errorCode`, with `new Error(body.message)` (mqtt_twin_client.js, _onResponseMessage); a
// plain Error is not retried (azure-iot-common retry_error_filter.js has no entry for 'Error').
// Before, the hub closed the connection on the request and getTwin never called back.
//
// A direct-method subscription gets the SUBACK failure code 0x80. MQTT.js 4 calls the subscribe
// callback without an error for it (client.js, 'suback'), so onDeviceMethod emits no 'error' and no
// method ever arrives; the connection stays up.
//
// Connections are counted in the hub's log (one "device connected" line each, at --log info).

const fs = require('node:fs');
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startHub, within } = require('./hub');
const { assertNodeTrust, connectDevice } = require('./common');

const DEVICE = 'node-twin';
let hub;
before(async () => {
    hub = await startHub({ name: 'node-twin-fails-fast', devices: [DEVICE] });
    assertNodeTrust(hub);
});
after(async () => {
    if (hub) await hub.stop();
});

function connections(deviceId) {
    const pattern = new RegExp(`\\bdevice=${deviceId}\\b`);
    return fs.readFileSync(hub.log, 'utf8').split('\n')
        .filter((line) => line.includes('device connected') && pattern.test(line)).length;
}

function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
}

test('getTwin calls back with an error at once and the connection stays', { timeout: 60000 }, async () => {
    const device = await connectDevice(hub.deviceConnectionString(DEVICE));
    const errors = [];
    device.client.on('error', (err) => errors.push(err));
    try {
        const before = connections(DEVICE);
        assert.ok(before >= 1, 'the hub logged the connection');

        const started = Date.now();
        const { err, twin } = await within(5000, new Promise((resolve) => {
            device.client.getTwin((e, t) => resolve({ err: e, twin: t }));
        }), 'getTwin');
        assert.ok(err, `getTwin succeeded: ${JSON.stringify(twin && twin.properties)}`);
        assert.ok(Date.now() - started < 5000);
        assert.match(err.message, /twins are not supported/);

        // Asked again on the same connection, it fails as fast (nothing left stuck).
        const again = Date.now();
        const secondErr = await within(5000, new Promise((resolve) => {
            device.client.getTwin((e) => resolve(e));
        }), 'getTwin again');
        assert.ok(secondErr, 'a second getTwin fails too');
        assert.ok(Date.now() - again < 5000);

        await sleep(2000);
        assert.equal(connections(DEVICE), before, 'no reconnection');
        assert.deepEqual(errors.map((e) => e.message), []);
    } finally {
        await device.close();
    }
});

test('onDeviceMethod: the refused subscription raises nothing and the connection stays', { timeout: 60000 }, async () => {
    const device = await connectDevice(hub.deviceConnectionString(DEVICE));
    const errors = [];
    device.client.on('error', (err) => errors.push(err));
    try {
        const before = connections(DEVICE);
        device.client.onDeviceMethod('reboot', (request, response) => {
            response.send(200, 'ok', () => {});
        });
        const refused = () => /subscription refused.*\$iothub\/methods\/POST\/#/.test(fs.readFileSync(hub.log, 'utf8'));
        const deadline = Date.now() + 10000;
        while (!refused()) {
            assert.ok(Date.now() < deadline, 'the hub logged no refused methods subscription');
            await sleep(50);
        }
        await sleep(2000);
        assert.deepEqual(errors.map((e) => e.message), [], 'the SDK reports nothing');
        assert.equal(connections(DEVICE), before, 'no reconnection');
        // The connection still carries telemetry.
        const { Message } = require('azure-iot-common');
        await within(10000, device.client.sendEvent(new Message('still here')), 'sendEvent');
    } finally {
        await device.close();
    }
});
