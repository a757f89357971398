'use strict';
// The registry (REST over HTTPS, port 443) through the official service SDK (azure-iothub), and a
// device created there connecting with the official device SDK (azure-iot-device, MQTT over TLS).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { Registry, Client: ServiceClient, IoTHubTokenCredentials } = require('azure-iothub');
const { IotHubGatewayServiceAPIs } = require('azure-iothub/dist/pl/iotHubGatewayServiceAPIs');
const { Message } = require('azure-iot-common');
const { startHub, newKey, within } = require('./hub');
const { assertNodeTrust, connectDevice, errorName } = require('./common');

let hub;
before(async () => {
    hub = await startHub({ name: 'node-registry' });
    assertNodeTrust(hub);
});
after(async () => {
    if (hub) await hub.stop();
});

/** The SDK's generated REST client (what its DigitalTwinClient uses): it can send an If-Match. */
function protocolClient(connectionString) {
    const creds = new IoTHubTokenCredentials(connectionString);
    return new IotHubGatewayServiceAPIs(creds, { baseUri: `https://${creds.getHubName()}`, apiVersion: '2021-04-12' });
}

async function expectError(promise, name, what) {
    const err = await within(15000, promise.then(() => null, (e) => e), what);
    assert.ok(err, `${what}: succeeded, expected ${name}`);
    assert.equal(errorName(err), name, `${what}: ${err && err.stack}`);
    return err;
}

test('create, get, update, ETag, list, delete through the Registry', { timeout: 60000 }, async () => {
    const registry = Registry.fromConnectionString(hub.ownerConnectionString);
    const id = 'sdk-registry-1';
    const [k1, k2, k3] = [newKey(), newKey(), newKey()];

    const { responseBody: created, httpResponse } = await within(15000, registry.create({
        deviceId: id,
        status: 'enabled',
        authentication: { symmetricKey: { primaryKey: k1, secondaryKey: k2 } },
    }), 'registry.create');
    assert.equal(httpResponse.statusCode, 200, 'IoT Hub answers a device creation with 200');
    assert.equal(created.deviceId, id);
    assert.equal(created.authentication.symmetricKey.primaryKey, k1);
    assert.equal(created.authentication.symmetricKey.secondaryKey, k2);
    assert.ok(created.etag, `an etag: ${JSON.stringify(created)}`);
    assert.ok(created.generationId, 'a generation id');
    assert.equal(created.status, 'enabled');

    await expectError(registry.create({ deviceId: id }), 'DeviceAlreadyExistsError', 'create of an existing device');

    const { responseBody: got } = await within(15000, registry.get(id), 'registry.get');
    assert.equal(got.deviceId, id);
    assert.equal(got.etag, created.etag);
    assert.equal(got.generationId, created.generationId);
    assert.equal(got.authentication.symmetricKey.primaryKey, k1);

    // Registry.update sends If-Match: "*" (unconditional), as the SDK does.
    const { responseBody: updated } = await within(15000, registry.update({
        deviceId: id,
        status: 'enabled',
        authentication: { symmetricKey: { primaryKey: k3, secondaryKey: k2 } },
    }), 'registry.update');
    assert.equal(updated.authentication.symmetricKey.primaryKey, k3);
    assert.notEqual(updated.etag, created.etag, 'an update changes the etag');
    assert.equal(updated.generationId, created.generationId, 'an update keeps the generation id');

    // Conditional updates: the right ETag succeeds, a stale one fails with 412 (PreconditionFailed).
    const pl = protocolClient(hub.ownerConnectionString);
    const device = { deviceId: id, status: 'enabled', authentication: { type: 'sas', symmetricKey: { primaryKey: k1, secondaryKey: k2 } } };
    const ok = await within(15000, pl.devices.createOrUpdateIdentity(id, { ...device, etag: updated.etag }, { ifMatch: `"${updated.etag}"` }), 'update with the right ETag');
    assert.equal(ok.authentication.symmetricKey.primaryKey, k1);
    assert.notEqual(ok.etag, updated.etag);
    const stale = await within(15000, pl.devices.createOrUpdateIdentity(id, { ...device, etag: updated.etag }, { ifMatch: `"${updated.etag}"` }).then(() => null, (e) => e), 'update with a stale ETag');
    assert.ok(stale, 'an update with a stale ETag succeeded');
    assert.equal(stale.statusCode, 412, `stale ETag: ${stale.stack} ${JSON.stringify(stale.body)}`);
    const staleDelete = await within(15000, pl.devices.deleteIdentity(id, { ifMatch: `"${updated.etag}"` }).then(() => null, (e) => e), 'delete with a stale ETag');
    assert.ok(staleDelete, 'a delete with a stale ETag succeeded');
    assert.equal(staleDelete.statusCode, 412, `stale ETag delete: ${staleDelete.stack}`);

    // A device created without keys gets generated ones.
    const { responseBody: generated } = await within(15000, registry.create({ deviceId: 'sdk-registry-2' }), 'registry.create without keys');
    assert.ok(generated.authentication.symmetricKey.primaryKey, `generated keys: ${JSON.stringify(generated.authentication)}`);
    assert.ok(generated.authentication.symmetricKey.secondaryKey);

    // Listing needs only RegistryRead.
    const reader = Registry.fromConnectionString(await hub.connectionString('registryRead'));
    const { responseBody: list } = await within(15000, reader.list(), 'registry.list');
    assert.deepEqual(list.map((d) => d.deviceId).sort(), [id, 'sdk-registry-2']);
    const listed = list.find((d) => d.deviceId === id);
    assert.equal(listed.etag, ok.etag);

    await within(15000, registry.delete(id), 'registry.delete');
    await expectError(registry.get(id), 'DeviceNotFoundError', 'get of a deleted device');
    await expectError(registry.delete(id), 'DeviceNotFoundError', 'delete of a deleted device');
    await within(15000, registry.delete('sdk-registry-2'), 'registry.delete');
    const { responseBody: empty } = await within(15000, reader.list(), 'registry.list');
    assert.deepEqual(empty, []);
});

test('a device created through the Registry connects with the device SDK (MQTT, TLS, 8883)', { timeout: 60000 }, async () => {
    const registry = Registry.fromConnectionString(await hub.connectionString('registryReadWrite'));
    const id = 'sdk-registry-device';
    const key = newKey();
    await within(15000, registry.create({ deviceId: id, authentication: { symmetricKey: { primaryKey: key, secondaryKey: newKey() } } }), 'registry.create');
    const device = await connectDevice(hub.deviceConnectionString(id, key));
    const service = ServiceClient.fromConnectionString(hub.serviceConnectionString);
    try {
        const { responseBody: connected } = await within(15000, registry.get(id), 'registry.get');
        assert.equal(connected.connectionState, 'Connected', `connectionState: ${JSON.stringify(connected)}`);
        const msg = new Message('hello from the registry test');
        msg.messageId = 'reg-1';
        await within(15000, service.send(id, msg), 'service send');
        const got = await device.next();
        assert.equal(got.data.toString(), 'hello from the registry test');
        assert.equal(got.messageId, 'reg-1');
    } finally {
        await device.close();
        await within(10000, service.close(), 'service close').catch(() => {});
    }
    // Deleting the device closes its connection; it cannot connect again.
    await within(15000, registry.delete(id), 'registry.delete');
    await assert.rejects(within(20000, connectDevice(hub.deviceConnectionString(id, key)), 'device SDK open of a deleted device'),
        (err) => /Unauthorized|Not authorized|not authorized|ConnectionRefused|Connection refused/i.test(`${errorName(err)} ${err.message}`));
});
