// The IoT Hub device client against the in-process local IoT Hub: every behaviour of
// docs/iothub-device.md that the Rust and Python suites check, from Node.
//
// Every wait is bounded (`receive(WAIT)` resolves null when nothing came): a missing message
// fails the test instead of hanging the suite.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceClient, LocalIotHub } from '../index.js';

/** Generous: the machine running the tests may be very busy. */
const WAIT = 30_000;

let hub;
/** A hub with a 2 s lock, for the redelivery test only (the others must not see redeliveries). */
let shortLockHub;
before(async () => {
  hub = await LocalIotHub.start(60_000);
  shortLockHub = await LocalIotHub.start(2_000);
});
after(async () => {
  await hub?.stop();
  await shortLockHub?.stop();
});

async function eventually(check, what) {
  const deadline = Date.now() + WAIT;
  while (!check()) {
    assert.ok(Date.now() < deadline, `timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The next message, failing (not hanging) when none comes within WAIT. */
async function next(device, what = 'a message') {
  const msg = await device.receive(WAIT);
  assert.ok(msg !== null, `no message within ${WAIT} ms: expected ${what}`);
  return msg;
}

function connect(h, id, options = {}) {
  const cs = h.addDevice(id);
  return DeviceClient.connect(cs, { port: h.port, tls: false, ...options });
}

test('every system property, URL-encoded values, a null and an empty property', async () => {
  const device = await connect(hub, 'n1');
  assert.equal(device.state, 'connected');
  hub.send(
    'n1',
    Buffer.from([0, 1, 2, 0xff]),
    'id 1/é',
    [
      { name: 'colour', value: 'dark blue/&x=y' },
      { name: 'nothing', value: null },
      { name: 'empty', value: '' },
      { name: 'per%cent', value: '%20 é+1' },
    ],
    {
      correlationId: 'c&1',
      userId: 'u=1',
      contentType: 'application/json',
      contentEncoding: 'utf-8',
      ack: 'full',
    },
  );
  const msg = await next(device);
  assert.deepEqual(msg.payload, Buffer.from([0, 1, 2, 0xff]));
  assert.equal(msg.messageId, 'id 1/é');
  assert.equal(msg.correlationId, 'c&1');
  assert.equal(msg.userId, 'u=1');
  assert.equal(msg.to, '/devices/n1/messages/devicebound');
  assert.match(msg.expiryTime ?? '', /Z$/, 'an expiry time in UTC');
  assert.equal(msg.contentType, 'application/json');
  assert.equal(msg.contentEncoding, 'utf-8');
  assert.equal(msg.ack, 'full');
  assert.deepEqual(msg.properties, [
    { name: 'colour', value: 'dark blue/&x=y' },
    { name: 'nothing', value: null },
    { name: 'empty', value: '' },
    { name: 'per%cent', value: '%20 é+1' },
  ]);
  assert.equal(msg.isRedelivery, false);
  // Nothing is acknowledged before the application completes the message.
  assert.equal(hub.queueDepth('n1'), 1);
  await msg.complete();
  await eventually(() => hub.completed('n1') === 1 && hub.queueDepth('n1') === 0, 'completed');
  await assert.rejects(msg.complete(), { code: 'ERR_INVALID_ARGUMENT', message: /already completed/ });
  await device.close();
});

test('reject and abandon: ERR_NOT_SUPPORTED, the message stays open', async () => {
  const device = await connect(hub, 'n-reject');
  hub.send('n-reject', 'x', 'r1');
  const msg = await next(device);
  await assert.rejects(msg.reject(), { code: 'ERR_NOT_SUPPORTED', message: /reject is not supported over MQTT/ });
  await assert.rejects(msg.abandon(), { code: 'ERR_NOT_SUPPORTED', message: /abandon is not supported over MQTT/ });
  assert.equal(hub.queueDepth('n-reject'), 1, 'neither completed nor dropped the message');
  await msg.complete();
  await eventually(() => hub.completed('n-reject') === 1, 'completed after the refused reject');
  await device.close();
});

test('a message not completed is redelivered after the lock timeout; completing the new copy completes it', async () => {
  const device = await connect(shortLockHub, 'n-lock');
  shortLockHub.send('n-lock', 'again', 'm-redeliver');
  const first = await next(device);
  assert.equal(first.isRedelivery, false);
  // Left uncompleted: after the 2 s lock the hub takes it back and delivers it again.
  const second = await next(device, 'the redelivery');
  assert.equal(second.messageId, 'm-redeliver');
  assert.equal(second.isRedelivery, true);
  assert.ok(device.stats.redelivered >= 1);
  await second.complete();
  await eventually(
    () => shortLockHub.completed('n-lock') === 1 && shortLockHub.queueDepth('n-lock') === 0,
    'the redelivered copy completed the message',
  );
  // The first copy was given up by the hub: completing it says so.
  await assert.rejects(first.complete(), { code: 'ERR_LOCK_LOST', message: /delivered again/ });
  await device.close();
});

test('completions out of order are acknowledged in order and nothing is lost', async () => {
  const device = await connect(hub, 'n2');
  for (let i = 0; i < 5; i++) hub.send('n2', `m${i}`, `m${i}`);
  const got = [];
  for await (const msg of device) {
    got.push(msg);
    if (got.length === 5) break;
  }
  assert.deepEqual(got.map((m) => m.messageId), ['m0', 'm1', 'm2', 'm3', 'm4']);
  for (const m of got.slice(1).reverse()) await m.complete();
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(hub.queueDepth('n2'), 5, 'every completion held behind m0');
  assert.equal(device.stats.acknowledged, 0);
  await got[0].complete();
  await eventually(() => hub.completed('n2') === 5 && hub.queueDepth('n2') === 0, 'all five completed');
  // Counted once the PUBACKs' write is flushed, which can come after the hub read them.
  await eventually(() => device.stats.acknowledged === 5, 'all five acknowledged');
  assert.equal(device.stats.redelivered, 0);
  await device.close();
  // The iterator ends once the client is closed.
  const rest = [];
  for await (const m of device) rest.push(m);
  assert.equal(rest.length, 0);
});

test('messages sent while the device was disconnected arrive after it reconnects', async () => {
  const cs = hub.addDevice('n-offline');
  const first = await DeviceClient.connect(cs, { port: hub.port, tls: false });
  await first.close();
  assert.equal(first.state, 'closed');
  for (let i = 0; i < 3; i++) hub.send('n-offline', 'offline', `o${i}`);
  const device = await DeviceClient.connect(cs, { port: hub.port, tls: false });
  const seen = [];
  for (let i = 0; i < 3; i++) {
    const msg = await next(device, `offline message o${i}`);
    seen.push(msg.messageId);
    await msg.complete();
  }
  assert.deepEqual(seen, ['o0', 'o1', 'o2']);
  await eventually(() => hub.completed('n-offline') === 3, 'all three completed');
  await device.close();
});

test('token renewal across a short token lifetime keeps the device connected without losing a message', async () => {
  // 10 s tokens (the shortest allowed): renewed at about 8 s; messages flow for 14 s.
  const device = await connect(hub, 'n-token', { tokenLifetimeMs: 10_000 });
  const fresh = new Set();
  for (let i = 0; i < 14; i++) {
    hub.send('n-token', 't', `t${i}`);
    const msg = await next(device, `t${i}`);
    if (!msg.isRedelivery) fresh.add(msg.messageId);
    await msg.complete().catch((e) => {
      // A completion racing the renewal's reconnection: the message comes again.
      assert.equal(e.code, 'ERR_DISCONNECTED');
    });
    await new Promise((r) => setTimeout(r, 1000));
  }
  // Redeliveries of completions lost in a renewal are drained and completed.
  while (hub.queueDepth('n-token') > 0) {
    const msg = await device.receive(1000);
    if (msg) await msg.complete().catch(() => {});
  }
  assert.equal(fresh.size, 14, 'every message received');
  await eventually(() => hub.completed('n-token') === 14, 'all fourteen completed');
  assert.ok(device.stats.tokenRenewals >= 1, JSON.stringify(device.stats));
  assert.equal(device.state, 'connected');
  await device.close();
});

test('telemetry with properties arrives at the hub byte-exact', async () => {
  const device = await connect(hub, 'n-tele');
  const body = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  await device.sendEvent(body, {
    messageId: 'tm 1',
    contentType: 'application/octet-stream',
    properties: [
      { name: 'place', value: 'a/b&c=d é' },
      { name: 'flag', value: null },
      { name: 'empty', value: '' },
    ],
  });
  const [got, ...more] = hub.telemetry('n-tele');
  assert.equal(more.length, 0);
  assert.deepEqual(got.body, body);
  assert.deepEqual(
    got.systemProperties.filter((p) => p.name === '$.mid' || p.name === '$.ct'),
    [
      { name: '$.ct', value: 'application/octet-stream' },
      { name: '$.mid', value: 'tm 1' },
    ],
  );
  assert.deepEqual(got.properties, [
    { name: 'empty', value: '' },
    { name: 'flag', value: null },
    { name: 'place', value: 'a/b&c=d é' },
  ]);
  await assert.rejects(device.sendEvent('x', { properties: [{ name: '$.mid', value: 'no' }] }), {
    code: 'ERR_INVALID_ARGUMENT',
  });
  await device.close();
});

test('receive with a timeout resolves null and loses nothing', async () => {
  const device = await connect(hub, 'n-timeout');
  assert.equal(await device.receive(50), null);
  hub.send('n-timeout', 'late', 'late');
  const msg = await next(device);
  assert.equal(msg.messageId, 'late');
  await msg.complete();
  await eventually(() => hub.completed('n-timeout') === 1, 'completed');
  await device.close();
});

test('wrong key: ERR_AUTHENTICATION', async () => {
  hub.addDevice('n-auth');
  await assert.rejects(
    DeviceClient.connect('HostName=localhost;DeviceId=n-auth;SharedAccessKey=d3Jvbmcga2V5;GatewayHostName=127.0.0.1', {
      port: hub.port,
      tls: false,
    }),
    { code: 'ERR_AUTHENTICATION' },
  );
});
