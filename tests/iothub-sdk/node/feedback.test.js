'use strict';
// Feedback (AMQP /messages/serviceBound/feedback) through the official service SDK's
// Client.getFeedbackReceiver: one record per outcome, Success, Expired, DeliveryCountExceeded and
// Purged, each carrying the original message id and the status code. Times are shortened with the
// hub's flags (feedback batched after 1 s, lock timeout 1 s, one delivery allowed).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { Client: ServiceClient, IoTHubTokenCredentials } = require('azure-iothub');
const { IotHubGatewayServiceAPIs } = require('azure-iothub/dist/pl/iotHubGatewayServiceAPIs');
const { Message } = require('azure-iot-common');
const { startHub, within } = require('./hub');
const { assertNodeTrust, connectDevice, feedbackCollector } = require('./common');
const { connectSilentDevice } = require('./silent-device');

const FEEDBACK_TYPE = 'application/vnd.microsoft.iothub.feedback.json';
let hub;
let service;
let feedback;
before(async () => {
    hub = await startHub({
        name: 'node-feedback',
        devices: ['fb-ok', 'fb-offline', 'fb-silent', 'fb-purge'],
        args: [
            '--iothub-feedback-interval', '1s',
            '--iothub-lock-timeout', '1s',
            '--iothub-max-delivery-count', '1',
        ],
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

function command(messageId, ack, body = `body of ${messageId}`) {
    const msg = new Message(body);
    msg.messageId = messageId;
    msg.ack = ack;
    return msg;
}

function checkRecord(record, messageId, deviceId, statusCode, description) {
    assert.equal(record.originalMessageId, messageId);
    assert.equal(record.deviceId, deviceId);
    assert.equal(record.statusCode, statusCode);
    assert.equal(record.description, description);
    assert.ok(record.enqueuedTimeUtc && !Number.isNaN(Date.parse(record.enqueuedTimeUtc)), `enqueuedTimeUtc: ${JSON.stringify(record)}`);
    assert.ok(record.deviceGenerationId, `deviceGenerationId: ${JSON.stringify(record)}`);
}

test('Success: the device SDK receives the message (ack full)', { timeout: 60000 }, async () => {
    const device = await connectDevice(hub.deviceConnectionString('fb-ok'));
    try {
        await within(15000, service.send('fb-ok', command('fb-success-1', 'full')), 'Client.send');
        const msg = await device.next();
        assert.equal(msg.messageId, 'fb-success-1');
        const record = await feedback.waitFor((r) => r.originalMessageId === 'fb-success-1', 15000, 'Success');
        checkRecord(record, 'fb-success-1', 'fb-ok', 'Success', 'Success');
        const batch = feedback.batches[0];
        assert.equal(batch.contentType, FEEDBACK_TYPE);
    } finally {
        await device.close();
    }
});

test('positive ack: Success only; negative ack: no record for a success', { timeout: 60000 }, async () => {
    const device = await connectDevice(hub.deviceConnectionString('fb-ok'));
    try {
        await within(15000, service.send('fb-ok', command('fb-negative-ok', 'negative')), 'Client.send');
        await within(15000, service.send('fb-ok', command('fb-positive-ok', 'positive')), 'Client.send');
        assert.equal((await device.next()).messageId, 'fb-negative-ok');
        assert.equal((await device.next()).messageId, 'fb-positive-ok');
        const record = await feedback.waitFor((r) => r.originalMessageId === 'fb-positive-ok', 15000, 'positive Success');
        checkRecord(record, 'fb-positive-ok', 'fb-ok', 'Success', 'Success');
        assert.equal(feedback.records.find((r) => r.originalMessageId === 'fb-negative-ok'), undefined,
            'a message with ack negative that succeeded has no feedback');
    } finally {
        await device.close();
    }
});

test('Expired: expiryTimeUtc passes while the device is offline', { timeout: 60000 }, async () => {
    const msg = command('fb-expired-1', 'full');
    msg.expiryTimeUtc = Date.now() + 1500; // ms since the epoch (the SDK's encoder takes no Date)
    await within(15000, service.send('fb-offline', msg), 'Client.send');
    const record = await feedback.waitFor((r) => r.originalMessageId === 'fb-expired-1', 20000, 'Expired');
    checkRecord(record, 'fb-expired-1', 'fb-offline', 'Expired', 'Message expired');
});

test('DeliveryCountExceeded: a device that never acknowledges (lock timeout 1 s, 1 delivery)', { timeout: 60000 }, async () => {
    const device = await connectSilentDevice(hub, 'fb-silent', hub.deviceKey('fb-silent'));
    try {
        await within(15000, service.send('fb-silent', command('fb-dce-1', 'negative')), 'Client.send');
        const delivered = await device.next();
        assert.match(delivered.topic, /^devices\/fb-silent\/messages\/devicebound\/.*%24\.mid=fb-dce-1/);
        const record = await feedback.waitFor((r) => r.originalMessageId === 'fb-dce-1', 20000, 'DeliveryCountExceeded');
        checkRecord(record, 'fb-dce-1', 'fb-silent', 'DeliveryCountExceeded', 'Message delivery count exceeded');
        assert.equal(device.received.length, 1, 'one delivery only (max delivery count 1)');
    } finally {
        device.close();
    }
});

test('Purged: DELETE /devices/{id}/commands through the SDK', { timeout: 60000 }, async () => {
    await within(15000, service.send('fb-purge', command('fb-purged-1', 'negative')), 'Client.send');
    await within(15000, service.send('fb-purge', command('fb-purged-2', 'full')), 'Client.send');
    await within(15000, service.send('fb-purge', command('fb-purged-none', 'positive')), 'Client.send');
    // The Registry class has no purge; the SDK's generated REST client (the one its
    // DigitalTwinClient uses) has IoT Hub's purge operation.
    const creds = new IoTHubTokenCredentials(hub.serviceConnectionString);
    const pl = new IotHubGatewayServiceAPIs(creds, { baseUri: `https://${creds.getHubName()}`, apiVersion: '2021-04-12' });
    const result = await within(15000, pl.cloudToDeviceMessages.purgeCloudToDeviceMessageQueue('fb-purge'), 'purge');
    assert.equal(result.deviceId, 'fb-purge');
    assert.equal(result.totalMessagesPurged, 3);
    for (const id of ['fb-purged-1', 'fb-purged-2']) {
        const record = await feedback.waitFor((r) => r.originalMessageId === id, 20000, `Purged ${id}`);
        checkRecord(record, id, 'fb-purge', 'Purged', 'Message purged');
    }
    await new Promise((resolve) => setTimeout(resolve, 2500));
    assert.equal(feedback.records.find((r) => r.originalMessageId === 'fb-purged-none'), undefined,
        'a purged message with ack positive has no feedback');
});
