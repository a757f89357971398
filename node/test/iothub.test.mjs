// The IoT Hub device client against the in-process local IoT Hub: every behaviour of
// docs/iothub-device.md that the Rust and Python suites check, from Node.
//
// Every wait is bounded (`receive(WAIT)` resolves null when nothing came): a missing message
// fails the test instead of hanging the suite.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeviceClient, FaultProxy, LocalIotHub } from '../index.js';

/** Generous: the machine running the tests may be very busy. */
const WAIT = 30_000;

let hub;
/** A hub with a 2 s lock, for the redelivery test only (the others must not see redeliveries). */
let shortLockHub;
/** A message dead-lettered at its second delivery, for the AMQP settlements. */
let amqpHub;
/** TLS on the MQTT device endpoint too, for X.509 devices. */
let tlsHub;
/** Scratch files: the hubs' CA certificates, the devices' certificates and keys. */
let dir;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mqstate-iothub-'));
  hub = await LocalIotHub.start(60_000);
  shortLockHub = await LocalIotHub.start(2_000);
  amqpHub = await LocalIotHub.start(60_000, { maxDeliveryCount: 2 });
  tlsHub = await LocalIotHub.start(60_000, { deviceTls: true });
});
after(async () => {
  await hub?.stop();
  await shortLockHub?.stop();
  await amqpHub?.stop();
  await tlsHub?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
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

// --- AMQP: complete, reject, abandon ---------------------------------------------------------

/** The hub's CA certificate in a file, for `caFile`. */
function caFile(h, name) {
  const pem = h.caPem;
  assert.ok(pem, 'the hub made a certificate for its TLS endpoints');
  const file = join(dir, `${name}-ca.pem`);
  writeFileSync(file, pem);
  return file;
}

/** Options for the hub's AMQP endpoint (TLS, trusting its certificate). */
function amqpOptions(h, name) {
  return { transport: 'amqp', port: h.amqpPort, caFile: caFile(h, name) };
}

test('AMQP over WebSockets (amqp-ws, the HTTPS port): reject and abandon, with feedback', async () => {
  const cs = amqpHub.addDevice('a-ws');
  const options = { ...amqpOptions(amqpHub, 'a-ws'), transport: 'amqp-ws', port: amqpHub.httpsPort };
  const device = await DeviceClient.connect(cs, options);
  amqpHub.send('a-ws', 'no', 'ws-bad', [], { ack: 'full' });
  amqpHub.send('a-ws', 'later', 'ws-later', [], { ack: 'full' });
  const counts = [];
  while (counts.length < 3) {
    const msg = await next(device);
    counts.push(msg.deliveryCount);
    if (msg.messageId === 'ws-bad') await msg.reject();
    else if (msg.deliveryCount === 0) await msg.abandon();
    else await msg.complete();
  }
  assert.deepEqual(counts.sort(), [0, 0, 1]);
  await eventually(() => amqpHub.feedback('ws-bad') === 'Rejected', 'rejected over amqp-ws');
  await eventually(() => amqpHub.feedback('ws-later') === 'Success', 'completed over amqp-ws');
  await device.close();
});

test('AMQP: complete, reject and abandon each settle their own message, with feedback', async () => {
  const cs = amqpHub.addDevice('a-settle');
  const device = await DeviceClient.connect(cs, amqpOptions(amqpHub, 'a-settle'));
  for (const mid of ['ok', 'bad', 'later']) amqpHub.send('a-settle', mid, mid, [], { ack: 'full' });
  const seen = [];
  let settled = 0;
  while (settled < 3) {
    const msg = await next(device);
    seen.push([msg.messageId, msg.deliveryCount]);
    if (msg.messageId === 'bad') {
      await msg.reject();
      // Settled once: a second settlement is a mistake.
      await assert.rejects(msg.complete(), { code: 'ERR_INVALID_ARGUMENT' });
    } else if (msg.messageId === 'later' && msg.deliveryCount === 0) {
      await msg.abandon();
      continue;
    } else {
      await msg.complete();
    }
    settled++;
  }
  // The abandoned message came again, its delivery count one more.
  assert.deepEqual(
    seen.filter(([mid]) => mid === 'later'),
    [
      ['later', 0],
      ['later', 1],
    ],
  );
  assert.equal(seen[seen.length - 1][0], 'later', 'the abandoned message came back after the others');
  await eventually(() => amqpHub.feedback('later') === 'Success', 'later completed');
  assert.equal(amqpHub.feedback('ok'), 'Success');
  await eventually(() => amqpHub.feedback('bad') === 'Rejected', 'bad rejected');
  assert.equal(amqpHub.deadLettered('a-settle'), 1, 'the rejected message was dead-lettered');
  assert.equal(amqpHub.completed('a-settle'), 2);
  const { acknowledged, rejected, abandoned } = device.stats;
  assert.deepEqual({ acknowledged, rejected, abandoned }, { acknowledged: 2, rejected: 1, abandoned: 1 });
  await device.close();
});

test('AMQP: abandoned past the max delivery count, a message is dead-lettered', async () => {
  const cs = amqpHub.addDevice('a-dead');
  const device = await DeviceClient.connect(cs, amqpOptions(amqpHub, 'a-dead'));
  amqpHub.send('a-dead', 'x', 'dead1', [], { ack: 'negative' });
  for (const count of [0, 1]) {
    const msg = await next(device, `delivery ${count}`);
    assert.equal(msg.messageId, 'dead1');
    assert.equal(msg.deliveryCount, count);
    await msg.abandon();
  }
  await eventually(() => amqpHub.feedback('dead1') === 'DeliveryCountExceeded', 'dead-lettered');
  assert.equal(amqpHub.deadLettered('a-dead'), 1);
  assert.equal(await device.receive(300), null, 'not delivered a third time');
  await device.close();
});

test('AMQP: settling a message of a lost connection rejects with ERR_LOCK_LOST', async () => {
  // The default max delivery count: the second connection may take a delivery too.
  const cs = hub.addDevice('a-lost');
  const options = amqpOptions(hub, 'a-lost');
  const device = await DeviceClient.connect(cs, options);
  hub.send('a-lost', 'k', 'kept');
  const before = await next(device);
  assert.equal(before.deliveryCount, 0);
  // A second connection of the device makes the hub drop the first, which reconnects.
  await (await DeviceClient.connect(cs, options)).close();
  const again = await next(device, 'the redelivery on the new connection');
  assert.equal(again.messageId, 'kept');
  assert.equal(again.isRedelivery, true);
  assert.ok(again.deliveryCount >= 1, `deliveryCount ${again.deliveryCount}`);
  for (const settle of ['complete', 'reject', 'abandon']) {
    await assert.rejects(before[settle](), { code: 'ERR_LOCK_LOST', message: /has closed/ }, settle);
  }
  assert.equal(device.stats.staleCompletions, 3, JSON.stringify(device.stats));
  await again.complete();
  await eventually(() => hub.completed('a-lost') === 1, 'completed once');
  await device.close();
});

test('MQTT: deliveryCount is null', async () => {
  const device = await connect(hub, 'n-count');
  hub.send('n-count', 'x', 'c1');
  const msg = await next(device);
  assert.equal(msg.deliveryCount, null);
  await msg.complete();
  await device.close();
});

// --- X.509 devices ---------------------------------------------------------------------------

/** A self-signed certificate for `cn` (openssl), as files; with its SHA-256 thumbprint. */
function certificate(name, cn) {
  const certFile = join(dir, `${name}.pem`);
  const keyFile = join(dir, `${name}.key`);
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
      .concat(['-keyout', keyFile, '-out', certFile, '-days', '2', '-subj', `/CN=${cn}`]),
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  // `sha256 Fingerprint=AB:CD:...`: the SHA-256 of the DER, the hub's thumbprint.
  const printed = execFileSync('openssl', ['x509', '-in', certFile, '-noout', '-fingerprint', '-sha256'], {
    encoding: 'utf8',
  });
  const thumbprint = printed.trim().split('=')[1];
  assert.equal(thumbprint, new X509Certificate(readFileSync(certFile)).fingerprint256);
  return { certFile, keyFile, thumbprint };
}

test('X.509: a device with its certificate receives over MQTT with TLS; another certificate is refused', async () => {
  const { certFile, keyFile, thumbprint } = certificate('x1', 'x1');
  const cs = tlsHub.addX509Device('x1', thumbprint);
  assert.equal(cs, 'HostName=localhost;DeviceId=x1;x509=true;GatewayHostName=127.0.0.1');
  const ca = caFile(tlsHub, 'tls');
  const options = { port: tlsHub.port, caFile: ca };
  const device = await DeviceClient.connect('HostName=localhost;DeviceId=x1;x509=true', {
    ...options,
    certFile,
    keyFile,
  });
  assert.equal(device.state, 'connected');
  tlsHub.send('x1', 'by certificate', 'x509-1');
  const msg = await next(device);
  assert.equal(msg.payload.toString(), 'by certificate');
  await msg.complete();
  await eventually(() => tlsHub.completed('x1') === 1, 'completed');
  await device.close();

  // Same subject, another key: not the registered thumbprint (through the connection string
  // addX509Device returned, to 127.0.0.1).
  const other = certificate('other', 'x1');
  await assert.rejects(
    DeviceClient.connect(cs, { ...options, certFile: other.certFile, keyFile: other.keyFile }),
    { code: 'ERR_AUTHENTICATION', message: /NotAuthorized/ },
  );
});

test('X.509 over AMQP: the certificate authorizes the links (no SASL, no $cbs); the device rejects; another certificate is refused', async () => {
  const { certFile, keyFile, thumbprint } = certificate('xa', 'xa');
  const cs = tlsHub.addX509Device('xa', thumbprint);
  const options = { transport: 'amqp', port: tlsHub.amqpPort, caFile: caFile(tlsHub, 'tls') };
  const device = await DeviceClient.connect(cs, { ...options, certFile, keyFile });
  tlsHub.send('xa', 'no thanks', 'x509-amqp-1', [], { ack: 'full' });
  const msg = await next(device);
  assert.equal(msg.deliveryCount, 0);
  await msg.reject();
  await eventually(() => tlsHub.feedback('x509-amqp-1') === 'Rejected', 'rejected');
  await device.close();

  const other = certificate('other-a', 'xa');
  await assert.rejects(
    DeviceClient.connect(cs, { ...options, certFile: other.certFile, keyFile: other.keyFile }),
    { code: 'ERR_AUTHENTICATION', message: /matches neither thumbprint/ },
  );
});

// --- Options -----------------------------------------------------------------------------------

test('option mistakes reject with ERR_INVALID_ARGUMENT and the core message, before connecting', async () => {
  const x509 = 'HostName=localhost;DeviceId=x1;x509=true';
  const sas = hub.addDevice('n-options');
  const cases = [
    [x509, { certFile: join(dir, 'x1.pem') }, /needs both cert_file and key_file/],
    [x509, { keyFile: join(dir, 'x1.key') }, /needs both cert_file and key_file/],
    [x509, { port: hub.port }, /x509=true: give the device's certificate and key/],
    [sas, { certFile: 'd.pem', keyFile: 'd.key' }, /for X\.509 devices/],
    [sas, { tls: false, caFile: 'ca.pem' }, /TLS is turned off/],
    [sas, { transport: 'http' }, /unknown transport "http"/],
    [sas, { keepAliveMs: 2_000_000 }, /keep-alive .* is outside/],
    [sas, { port: 70_000 }, /port 70000 is out of range/],
    [sas, { connectTimeoutMs: -1 }, /connectTimeoutMs must be a finite, non-negative number/],
    [sas, { operationTimeoutMs: Number.NaN }, /operationTimeoutMs must be a finite/],
  ];
  for (const [cs, options, message] of cases) {
    await assert.rejects(DeviceClient.connect(cs, options), { code: 'ERR_INVALID_ARGUMENT', message }, JSON.stringify(options));
  }
  // The transport's name in any case, as the core parses it.
  const amqp = await DeviceClient.connect(sas, { ...amqpOptions(hub, 'n-options'), transport: 'AMQP' });
  hub.send('n-options', 'x', 'o1');
  const msg = await next(amqp);
  assert.equal(msg.deliveryCount, 0, 'received over AMQP');
  await msg.complete();
  await amqp.close();
});

test('connectTimeoutMs and operationTimeoutMs bound the waits on a stalled hub', async () => {
  const cs = hub.addDevice('n-timeouts');
  const proxy = await FaultProxy.start(hub.port);
  try {
    proxy.setStalled(true);
    let started = Date.now();
    await assert.rejects(
      DeviceClient.connect(cs, { port: proxy.port, tls: false, connectTimeoutMs: 1000 }),
      { code: 'ERR_TIMEOUT' },
    );
    assert.ok(Date.now() - started < 10_000, `gave up after ${Date.now() - started} ms, not about 1 s`);

    proxy.setStalled(false);
    const device = await DeviceClient.connect(cs, { port: proxy.port, tls: false, operationTimeoutMs: 1000 });
    proxy.setStalled(true);
    started = Date.now();
    await assert.rejects(device.sendEvent('lost'), { code: 'ERR_TIMEOUT' });
    assert.ok(Date.now() - started < 10_000, `gave up after ${Date.now() - started} ms, not about 1 s`);
    await device.close();
  } finally {
    proxy.stop();
  }
});
