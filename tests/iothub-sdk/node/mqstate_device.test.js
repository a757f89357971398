'use strict';
// The official service SDK (azure-iothub Client.send, ack full, message ids) as the sender, and
// mqstate's own AMQP device client as the device, through `mqstate iothub receive --transport
// amqp` (a process per test, one JSON line per message on its stdout): a rejected message gives
// the SDK's feedback receiver `Rejected`; an abandoned message is delivered again (delivery count
// 1) and, completed then, gives `Success`. The device trusts the hub's certificate through
// --ca-file (the run's CA, which signs what the hub serves on AMQPS 5671).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const { Client: ServiceClient } = require('azure-iothub');
const { Message } = require('azure-iot-common');
const { startHub, within, BIN } = require('./hub');
const { assertNodeTrust, feedbackCollector } = require('./common');

let hub;
let service;
let feedback;
const children = new Set();
before(async () => {
    hub = await startHub({
        name: 'node-mqstate-device',
        devices: ['md-reject', 'md-abandon'],
        args: ['--iothub-feedback-interval', '1s'],
    });
    assertNodeTrust(hub);
    service = ServiceClient.fromConnectionString(hub.serviceConnectionString);
    await within(20000, service.open(), 'service open');
    feedback = await feedbackCollector(service);
});
after(async () => {
    // The receive processes this file started, by pid (each one normally ended by itself).
    for (const child of children) {
        if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, 'SIGKILL');
    }
    if (service) await within(10000, service.close(), 'service close').catch(() => {});
    if (hub) await hub.stop();
});

function command(messageId, body) {
    const msg = new Message(body);
    msg.messageId = messageId;
    msg.ack = 'full';
    return msg;
}

/**
 * `mqstate iothub receive --transport amqp ...` for a device, until it exits by itself: resolves
 * with its exit code, its JSON lines and its stderr.
 */
function receive(deviceId, args) {
    const child = spawn(BIN, [
        'iothub', 'receive', '--transport', 'amqp', '--ca-file', hub.caFile, '--wait', '20s', ...args,
    ], {
        env: { ...process.env, MQSTATE_DEVICE_CONNECTION_STRING: hub.deviceConnectionString(deviceId) },
        stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const lines = () => stdout.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
    const exited = new Promise((resolve) => {
        child.on('exit', (code, signal) => resolve({ code, signal, lines: lines(), stderr }));
    });
    return { child, exited, stdout: () => stdout };
}

test('reject over AMQP: the service SDK gets Rejected feedback', { timeout: 90000 }, async () => {
    const device = receive('md-reject', ['--settle', 'reject', '--count', '1']);
    await within(15000, service.send('md-reject', command('md-rejected-1', 'refuse me')), 'Client.send');
    const { code, lines, stderr } = await within(30000, device.exited, 'mqstate iothub receive');
    assert.equal(code, 0, stderr);
    assert.equal(lines.length, 1, JSON.stringify(lines));
    assert.equal(lines[0].messageId, 'md-rejected-1');
    assert.equal(lines[0].payload, 'refuse me');
    assert.equal(lines[0].ack, 'full');
    assert.equal(lines[0].deliveryCount, 0);
    assert.equal(lines[0].settled, 'reject');
    const record = await feedback.waitFor((r) => r.originalMessageId === 'md-rejected-1', 20000, 'Rejected');
    assert.equal(record.statusCode, 'Rejected');
    assert.equal(record.deviceId, 'md-reject');
    assert.equal(record.description, 'Message rejected');
});

test('abandon over AMQP: delivered again with delivery count 1, completed then: Success', { timeout: 90000 }, async () => {
    // (Sent while the device may still be connecting: the message waits in its queue.)
    // Abandons each first delivery and completes each redelivery: one message, two lines.
    const device = receive('md-abandon', ['--settle', 'abandon', '--settle-redelivered', 'complete', '--count', '2']);
    await within(15000, service.send('md-abandon', command('md-abandoned-1', 'later')), 'Client.send');
    const { code, lines, stderr } = await within(30000, device.exited, 'mqstate iothub receive');
    assert.equal(code, 0, stderr);
    assert.deepEqual(lines.map((l) => [l.messageId, l.deliveryCount, l.redelivered, l.settled]), [
        ['md-abandoned-1', 0, false, 'abandon'],
        ['md-abandoned-1', 1, true, 'complete'],
    ]);
    const record = await feedback.waitFor((r) => r.originalMessageId === 'md-abandoned-1', 20000, 'Success');
    assert.equal(record.statusCode, 'Success');
    assert.equal(record.deviceId, 'md-abandon');
    assert.equal(feedback.records.filter((r) => r.originalMessageId === 'md-abandoned-1').length, 1,
        'one record: the abandon gave none');
});
