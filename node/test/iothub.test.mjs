// The IoT Hub device client against the in-process local IoT Hub.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceClient, LocalIotHub } from '../index.js';

let hub;
before(async () => {
  hub = await LocalIotHub.start(60_000);
});
after(async () => {
  await hub?.stop();
});

async function eventually(check, what) {
  const deadline = Date.now() + 30_000;
  while (!check()) {
    assert.ok(Date.now() < deadline, what);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('properties, null and empty, URL decoding, explicit completion', async () => {
  const cs = hub.addDevice('n1');
  const device = await DeviceClient.connect(cs, { port: hub.port, tls: false });
  assert.equal(device.state, 'connected');
  hub.send('n1', 'hello', 'id 1/é', [
    { name: 'colour', value: 'dark blue/&x=y' },
    { name: 'nothing', value: null },
    { name: 'empty', value: '' },
  ]);
  const msg = await device.receive();
  assert.equal(msg.payload.toString(), 'hello');
  assert.equal(msg.messageId, 'id 1/é');
  assert.equal(msg.to, '/devices/n1/messages/devicebound');
  assert.equal(msg.correlationId, null);
  assert.deepEqual(msg.properties, [
    { name: 'colour', value: 'dark blue/&x=y' },
    { name: 'nothing', value: null },
    { name: 'empty', value: '' },
  ]);
  assert.equal(msg.isRedelivery, false);
  assert.equal(hub.queueDepth('n1'), 1);
  await assert.rejects(msg.reject(), { code: 'ERR_NOT_SUPPORTED', message: /not supported over MQTT/ });
  await assert.rejects(msg.abandon(), { code: 'ERR_NOT_SUPPORTED' });
  await msg.complete();
  await eventually(() => hub.queueDepth('n1') === 0, 'completed');
  await assert.rejects(msg.complete(), { code: 'ERR_INVALID_ARGUMENT' });
  await device.close();
});

test('async iteration, out-of-order completion, telemetry', async () => {
  const cs = hub.addDevice('n2');
  const device = await DeviceClient.connect(cs, { port: hub.port, tls: false });
  for (let i = 0; i < 3; i++) hub.send('n2', `m${i}`, `m${i}`);
  const got = [];
  for await (const msg of device) {
    got.push(msg);
    if (got.length === 3) break;
  }
  assert.deepEqual(got.map((m) => m.messageId), ['m0', 'm1', 'm2']);
  await got[2].complete();
  await got[1].complete();
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(hub.queueDepth('n2'), 3, 'held behind m0');
  await got[0].complete();
  await eventually(() => hub.queueDepth('n2') === 0, 'all three completed once m0 was');
  await device.sendEvent('tele', { messageId: 't1', properties: [{ name: 'p', value: null }] });
  assert.deepEqual(hub.telemetryBodies('n2'), ['tele']);
  await device.close();
  // The iterator ends once the client is closed.
  const rest = [];
  for await (const m of device) rest.push(m);
  assert.equal(rest.length, 0);
});

test('wrong key: ERR_AUTHENTICATION', async () => {
  await assert.rejects(
    DeviceClient.connect('HostName=localhost;DeviceId=n1;SharedAccessKey=d3Jvbmcga2V5;GatewayHostName=127.0.0.1', {
      port: hub.port,
      tls: false,
    }),
    { code: 'ERR_AUTHENTICATION' },
  );
});
