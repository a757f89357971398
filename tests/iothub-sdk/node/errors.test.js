'use strict';
// Refusals through the official service SDK: each must come back quickly (a hang fails the test)
// as the SDK's own error class, the one real IoT Hub's answer produces.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { Client: ServiceClient, Registry, SharedAccessSignature, ConnectionString } = require('azure-iothub');
const { Message } = require('azure-iot-common');
const { startHub, newKey, within } = require('./hub');
const { assertNodeTrust, errorName } = require('./common');

const QUICK = 10000; // ms: an error must arrive within this
let hub;
before(async () => {
    hub = await startHub({ name: 'node-errors', devices: ['err-full', 'err-dev'], args: ['--iothub-max-queue-depth', '50'] });
    assertNodeTrust(hub);
});
after(async () => {
    if (hub) await hub.stop();
});

// When the service SDK's CBS put-token is refused (status 401), its AMQP layer makes an
// UnauthorizedError, and Client wraps it in a plain Error('AMQP Transport: Could not send message')
// with the UnauthorizedError in `.amqpError` (amqp_common_errors.translateError leaves only
// ServiceUnavailableError and NotConnectedError unwrapped): that is what an application sees from
// IoT Hub too. A refusal on the link itself (amqp:unauthorized-access) is an UnauthorizedError.
function sdkErrorNames(err) {
    return [errorName(err), err && err.amqpError && errorName(err.amqpError)].filter(Boolean);
}

async function expectError(promise, name, what) {
    const err = await within(QUICK, promise.then(() => null, (e) => e), what);
    assert.ok(err, `${what}: succeeded, expected ${name}`);
    const names = sdkErrorNames(err);
    assert.ok(names.includes(name), `${what}: expected ${name}, got ${names.join(' wrapping ')}: ${err.message}`
        + `${err.amqpError ? ` (amqpError ${JSON.stringify(err.amqpError)} ${err.amqpError.message || ''})` : ''}`);
    return err;
}

async function withClient(connectionStringOrSas, fn, fromSas = false) {
    const client = fromSas ? ServiceClient.fromSharedAccessSignature(connectionStringOrSas) : ServiceClient.fromConnectionString(connectionStringOrSas);
    try {
        return await fn(client);
    } finally {
        await within(QUICK, client.close(), 'service close').catch(() => {});
    }
}

function message(id) {
    const msg = new Message(`body ${id}`);
    msg.messageId = id;
    return msg;
}

test('the 51st message to a full queue: DeviceMaximumQueueDepthExceededError', { timeout: 90000 }, async () => {
    await withClient(hub.serviceConnectionString, async (client) => {
        for (let i = 1; i <= 50; i++) await within(QUICK, client.send('err-full', message(`fill-${i}`)), `send ${i}`);
        await expectError(client.send('err-full', message('fill-51')), 'DeviceMaximumQueueDepthExceededError', 'the 51st send');
        // The link stays usable: another device still gets messages.
        await within(QUICK, client.send('err-dev', message('after-full')), 'send to another device after the refusal');
    });
});

test('an unknown device: DeviceNotFoundError', { timeout: 30000 }, async () => {
    await withClient(hub.serviceConnectionString, async (client) => {
        await expectError(client.send('no-such-device', message('lost-1')), 'DeviceNotFoundError', 'send to an unknown device');
        await within(QUICK, client.send('err-dev', message('after-unknown')), 'send to a known device after the refusal');
    });
    const registry = Registry.fromConnectionString(hub.ownerConnectionString);
    await expectError(registry.get('no-such-device'), 'DeviceNotFoundError', 'registry.get of an unknown device');
});

test('a wrong policy key: UnauthorizedError', { timeout: 30000 }, async () => {
    const cs = ConnectionString.parse(hub.serviceConnectionString);
    const wrong = `HostName=${cs.HostName};SharedAccessKeyName=${cs.SharedAccessKeyName};SharedAccessKey=${newKey()}`;
    await withClient(wrong, (client) => expectError(client.send('err-dev', message('wrong-key')), 'UnauthorizedError', 'send with a wrong key'));
    const ownerCs = ConnectionString.parse(hub.ownerConnectionString);
    const wrongOwner = `HostName=${ownerCs.HostName};SharedAccessKeyName=iothubowner;SharedAccessKey=${newKey()}`;
    await expectError(Registry.fromConnectionString(wrongOwner).list(), 'UnauthorizedError', 'registry.list with a wrong key');
    const unknownPolicy = `HostName=${cs.HostName};SharedAccessKeyName=nosuchpolicy;SharedAccessKey=${cs.SharedAccessKey}`;
    await withClient(unknownPolicy, (client) => expectError(client.send('err-dev', message('unknown-policy')), 'UnauthorizedError', 'send with an unknown policy'));
});

test('an expired token: UnauthorizedError', { timeout: 30000 }, async () => {
    const cs = ConnectionString.parse(hub.serviceConnectionString);
    const expired = SharedAccessSignature.create(cs.HostName, cs.SharedAccessKeyName, cs.SharedAccessKey, Math.floor(Date.now() / 1000) - 60).toString();
    await withClient(expired, (client) => expectError(client.send('err-dev', message('expired')), 'UnauthorizedError', 'send with an expired token'), true);
    const owner = ConnectionString.parse(hub.ownerConnectionString);
    const expiredOwner = SharedAccessSignature.create(owner.HostName, owner.SharedAccessKeyName, owner.SharedAccessKey, Math.floor(Date.now() / 1000) - 60).toString();
    await expectError(Registry.fromSharedAccessSignature(expiredOwner).list(), 'UnauthorizedError', 'registry.list with an expired token');
    // The same token, not expired, works (the test above fails for the expiry alone).
    const fresh = SharedAccessSignature.create(cs.HostName, cs.SharedAccessKeyName, cs.SharedAccessKey, Math.floor(Date.now() / 1000) + 600).toString();
    await withClient(fresh, (client) => within(QUICK, client.send('err-dev', message('fresh')), 'send with a fresh token'), true);
});

test('a policy without the right: UnauthorizedError', { timeout: 30000 }, async () => {
    // registryRead has RegistryRead only: no ServiceConnect (C2D), no RegistryWrite.
    const registryRead = await hub.connectionString('registryRead');
    await withClient(registryRead, (client) => expectError(client.send('err-dev', message('no-right')), 'UnauthorizedError', 'send with registryRead'));
    await expectError(Registry.fromConnectionString(registryRead).create({ deviceId: 'not-created' }), 'UnauthorizedError', 'registry.create with registryRead');
    // service has ServiceConnect only: no registry access.
    await expectError(Registry.fromConnectionString(hub.serviceConnectionString).list(), 'UnauthorizedError', 'registry.list with service');
    // device has DeviceConnect only.
    const device = await hub.connectionString('device');
    await withClient(device, (client) => expectError(client.send('err-dev', message('device-policy')), 'UnauthorizedError', 'send with the device policy'));
    await within(QUICK, Registry.fromConnectionString(registryRead).list(), 'registry.list with registryRead');
});
