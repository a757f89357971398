// Fault scenarios through the Rust fault-injection proxy (`FaultProxy`, the one the Rust and
// Python suites use): a connection dropped in the middle of a request, a stalled broker, a
// store and broker restarted under an observer that stayed connected. Every request ends with
// an answer or a typed error, and the client (and its observation) work again afterwards.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, FaultProxy, LocalServer } from '../index.js';
import { sleep, uniqueKey } from './helpers.mjs';

/** Generous: the machine running the tests may be very busy. */
const WAIT = 30_000;
/** The typed errors a request may end with when its connection fails. */
const TYPED = new Set(['ERR_TIMEOUT', 'ERR_DISCONNECTED', 'ERR_CONNECTION']);

function assertTyped(e) {
  assert.ok(TYPED.has(e?.code), `not a typed connection error: ${e?.code} ${e}`);
}

/** Retries `get` until it is answered (the client reconnected), for at most WAIT. */
async function untilAnswered(client, key) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    try {
      return await client.get(key);
    } catch (e) {
      assertTyped(e);
      assert.ok(Date.now() < deadline, 'the client did not recover');
      await sleep(50);
    }
  }
}

/** Reads notifications until one has `value` (a Buffer's text) or is a delete if null. */
async function nextValue(observation, value) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    const left = deadline - Date.now();
    assert.ok(left > 0, `no notification ${value}`);
    let r;
    try {
      r = await Promise.race([
        observation.next(),
        sleep(left).then(() => ({ timeout: true })),
      ]);
    } catch (e) {
      assertTyped(e); // an error item (a retry notice) is informative only
      continue;
    }
    assert.ok(!r.timeout, `no notification ${value} within ${WAIT} ms`);
    assert.equal(r.done, false, 'the observation ended');
    const n = r.value;
    if (value === null ? n.operation === 'delete' : n.value?.toString() === value) return n;
  }
}

describe('faults through the fault proxy', () => {
  let server;
  let proxy;
  const clients = [];
  before(async () => {
    server = await LocalServer.start();
    proxy = await FaultProxy.start(server.port);
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    proxy?.stop();
    await server?.shutdown();
  });
  async function connect(url, opts = {}) {
    const c = await Client.connect({ url, ...opts });
    clients.push(c);
    return c;
  }

  it('a connection dropped in the middle of a request: answered or a typed error, then it works again', async () => {
    const client = await connect(proxy.url, { timeoutMs: 5000 });
    const writer = await connect(server.url);
    const k = uniqueKey('drop');
    await client.set(k, 'start');
    const observation = client.observe(k);
    await observation.ready;
    // The next request's PUBLISH closes the connection instead of reaching the broker.
    proxy.disconnectOn('publish', 'to_broker');
    const before = proxy.faultsApplied;
    try {
      await client.set(k, 'during');
    } catch (e) {
      assertTyped(e);
    }
    assert.ok(proxy.faultsApplied > before, 'the fault took effect');
    await untilAnswered(client, k);
    // The observation survived the reconnection.
    await writer.set(k, 'healed');
    await nextValue(observation, 'healed');
    observation.close();
  });

  it('a stalled broker: the request ends with ERR_TIMEOUT, and the client recovers', async () => {
    const client = await connect(proxy.url, { timeoutMs: 5000 });
    const k = uniqueKey('stall');
    await client.set(k, 'start');
    proxy.setStalled(true);
    try {
      // The wait is the test's subject here: a short timeout, not a generous one.
      await assert.rejects(client.set(k, 'stalled', { timeoutMs: 300 }), { code: 'ERR_TIMEOUT' });
    } finally {
      proxy.setStalled(false);
    }
    const got = await untilAnswered(client, k);
    // The timed-out SET may or may not have been applied once the stall ended.
    assert.ok(['start', 'stalled'].includes(got?.value?.toString()), String(got?.value));
    await client.set(k, 'after');
    assert.equal((await client.get(k)).value.toString(), 'after');
  });

  it('a connection cut in the middle of a packet: typed error or answer, then it works again', async () => {
    const client = await connect(proxy.url, { timeoutMs: 5000 });
    const k = uniqueKey('cut');
    await client.set(k, 'start');
    proxy.cutNextPacket();
    try {
      await client.set(k, 'x'.repeat(1000));
    } catch (e) {
      assertTyped(e);
    }
    await untilAnswered(client, k);
    await client.set(k, 'after');
    assert.equal((await client.get(k)).value.toString(), 'after');
  });

  it('bad fault arguments are ERR_INVALID_ARGUMENT', () => {
    assert.throws(() => proxy.rejectNext('pingreq'), { code: 'ERR_INVALID_ARGUMENT', message: /unknown packet kind/ });
    assert.throws(() => proxy.disconnectOn('publish', 'sideways'), {
      code: 'ERR_INVALID_ARGUMENT',
      message: /unknown direction/,
    });
  });
});

describe('broker restart', () => {
  it('an observer that stayed connected catches up after the server restarts', async () => {
    // Through the proxy, so that the observer's address stays the same while the server
    // behind it stops and starts again on the same port.
    let server = await LocalServer.start();
    const port = server.port;
    const proxy = await FaultProxy.start(port);
    const observer = await Client.connect({ url: proxy.url, timeoutMs: 5000 });
    try {
      const k = uniqueKey('restart');
      const writer = await Client.connect({ url: server.url });
      await writer.set(k, 'before');
      await writer.close();
      const observation = observer.observe(k);
      await observation.ready;

      await server.shutdown();
      server = await LocalServer.start({ port });
      // The new store started empty (no data dir): the key the observer knew is gone, which
      // it learns as a synthesized delete once it has reconnected and re-registered.
      const gone = await nextValue(observation, null);
      assert.equal(gone.synthesized, true);
      // And it is told about the next change, like any live observer.
      const writer2 = await Client.connect({ url: server.url });
      await writer2.set(k, 'after');
      await writer2.close();
      const n = await nextValue(observation, 'after');
      assert.equal(n.operation, 'set');
      observation.close();
    } finally {
      await observer.close();
      proxy.stop();
      await server.shutdown();
    }
  });
});
