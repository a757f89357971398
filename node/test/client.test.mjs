// Every client operation against a local server: values, versions, conditions, expiry,
// fencing, binary data, not-found / not-applied outcomes, typed errors.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { inspect } from 'node:util';
import { createRequire } from 'node:module';
import { Client, Hlc, LocalServer, isMqstateError } from '../index.js';
import { eventually, localServer, silentBroker, sleep, uniqueKey } from './helpers.mjs';

const ctx = localServer();

describe('connect timeout', () => {
  it('a connect that times out is ERR_TIMEOUT naming host, port and the limit', async () => {
    // Accepts TCP connections and never answers the MQTT CONNECT.
    const held = [];
    const server = net.createServer((socket) => held.push(socket));
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address();
    try {
      const e = await rejectsWith(
        Client.connect({ host: '127.0.0.1', port, connectTimeoutMs: 1000 }),
        'ERR_TIMEOUT',
      );
      assert.match(e.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
      assert.match(e.message, /1s/);
    } finally {
      for (const socket of held) socket.destroy();
      server.close();
    }
  });
});

/** Asserts that `p` rejects with an `Error` whose `code` is `code`; returns the error. */
async function rejectsWith(p, code) {
  let error;
  await assert.rejects(p, (e) => {
    error = e;
    return true;
  });
  assert.ok(error instanceof Error, `not an Error: ${String(error)}`);
  assert.equal(error.code, code, `${error.code}: ${error.message}`);
  assert.ok(isMqstateError(error) || code === 'ABORT_ERR');
  return error;
}

describe('get / set / del / vdel', () => {
  it('round-trips a string value, with its version', async () => {
    const c = await ctx.connect();
    const k = uniqueKey();
    const r = await c.set(k, 'hello');
    assert.equal(r.applied, true);
    assert.ok(r.version instanceof Hlc);
    const got = await c.get(k);
    assert.ok(Buffer.isBuffer(got.value));
    assert.equal(got.value.toString(), 'hello');
    assert.ok(got.version.equals(r.version));
    assert.equal(got.version.compare(r.version), 0);
  });

  it('keys and values accept string, Buffer and Uint8Array; values come back as Buffers', async () => {
    const c = await ctx.connect();
    const binary = Buffer.from([0x00, 0xff, 0x0d, 0x0a, 0x24, 0x2a, 0x80, 0x00]);
    const keyBytes = new Uint8Array([0x6b, 0x00, 0xfe, 0x2f, 0x2b, 0x23]); // NUL, '/', '+', '#'
    await c.set(keyBytes, binary);
    const got = await c.get(Buffer.from(keyBytes));
    assert.ok(Buffer.isBuffer(got.value));
    assert.deepEqual(got.value, binary);
    // A Uint8Array view into a bigger buffer: only the view's bytes are sent.
    const big = new Uint8Array([9, 9, 1, 2, 3, 9]);
    await c.set('view', big.subarray(2, 5));
    assert.deepEqual((await c.get('view')).value, Buffer.from([1, 2, 3]));
    // Empty value and a 1 MiB value.
    await c.set('empty', '');
    assert.equal((await c.get('empty')).value.length, 0);
    const large = Buffer.alloc(1 << 20);
    for (let i = 0; i < large.length; i++) large[i] = (i * 7) & 0xff;
    await c.set('large', large);
    assert.ok((await c.get('large')).value.equals(large));
    // UTF-8 strings.
    await c.set('ключ', 'значение ✓');
    assert.equal((await c.get(Buffer.from('ключ'))).value.toString('utf8'), 'значение ✓');
  });

  it('not found: get is null, del is 0, vdel is notFound', async () => {
    const c = await ctx.connect();
    const k = uniqueKey('missing');
    assert.equal(await c.get(k), null);
    assert.equal(await c.del(k), 0);
    assert.equal(await c.vdel(k, 'x'), 'notFound');
  });

  it('del deletes', async () => {
    const c = await ctx.connect();
    const k = uniqueKey();
    await c.set(k, 'v');
    assert.equal(await c.del(k), 1);
    assert.equal(await c.get(k), null);
  });

  it('vdel deletes only on a matching value', async () => {
    const c = await ctx.connect();
    const k = uniqueKey();
    await c.set(k, Buffer.from([1, 2, 3]));
    assert.equal(await c.vdel(k, Buffer.from([1, 2, 4])), 'valueMismatch');
    assert.notEqual(await c.get(k), null);
    assert.equal(await c.vdel(k, new Uint8Array([1, 2, 3])), 'deleted');
    assert.equal(await c.get(k), null);
  });

  it('nx: not applied when the key exists', async () => {
    const c = await ctx.connect();
    const k = uniqueKey();
    assert.equal((await c.set(k, 'a', { nx: true })).applied, true);
    const second = await c.set(k, 'b', { nx: true });
    assert.equal(second.applied, false);
    assert.equal((await c.get(k)).value.toString(), 'a');
  });

  it('nex: applied when absent or equal, not applied otherwise', async () => {
    const c = await ctx.connect();
    const k = uniqueKey();
    assert.equal((await c.set(k, 'a', { nex: true })).applied, true);
    assert.equal((await c.set(k, 'a', { nex: true })).applied, true);
    assert.equal((await c.set(k, 'b', { nex: true })).applied, false);
    assert.equal((await c.get(k)).value.toString(), 'a');
  });

  it('versions increase with every write', async () => {
    const c = await ctx.connect();
    const k = uniqueKey();
    const v1 = (await c.set(k, '1')).version;
    const v2 = (await c.set(k, '2')).version;
    assert.equal(v1.compare(v2), -1);
    assert.equal(v2.compare(v1), 1);
    assert.equal(Hlc.compare(v1, v2), -1);
    const sorted = [v2, v1].sort(Hlc.compare);
    assert.ok(sorted[0] === v1 && sorted[1] === v2);
    assert.equal(JSON.stringify({ v: v1 }), JSON.stringify({ v: v1.toString() }));
    assert.ok(Hlc.parse(v2.toString()).equals(v2));
  });

  it('expiryMs makes the key expire', async () => {
    const c = await ctx.connect();
    const k = uniqueKey();
    await c.set(k, 'v', { expiryMs: 150 });
    assert.notEqual(await c.get(k), null);
    await sleep(400);
    assert.equal(await c.get(k), null);
  });

  it('fencing tokens: a write with an older token is refused', async () => {
    const c = await ctx.connect();
    const k = uniqueKey('fenced');
    const older = (await c.set(uniqueKey('lease'), 'h')).version;
    const newer = (await c.set(uniqueKey('lease'), 'h')).version;
    assert.equal((await c.set(k, 'v1', { fencingToken: newer })).applied, true);
    const e = await rejectsWith(c.set(k, 'v2', { fencingToken: older }), 'ERR_SERVICE');
    assert.equal(e.serviceKind, 'fencing_token_lower_version');
    assert.equal(typeof e.serviceText, 'string');
    // Its string form is accepted too; del and vdel take tokens as well.
    await rejectsWith(c.del(k, { fencingToken: older.toString() }), 'ERR_SERVICE');
    await rejectsWith(c.vdel(k, 'v1', { fencingToken: older }), 'ERR_SERVICE');
    assert.equal((await c.get(k)).value.toString(), 'v1');
    assert.equal(await c.vdel(k, 'v1', { fencingToken: newer }), 'deleted');
  });

  it('clientId, state, requestsInFlight', async () => {
    const c = await Client.connect({ url: ctx.server.url, clientId: 'node-test-client-id' });
    assert.equal(c.clientId, 'node-test-client-id');
    assert.equal(c.state, 'connected');
    assert.equal(c.requestsInFlight, 0);
    await c.close();
    assert.equal(c.state, 'closed');
    await c.close(); // idempotent
  });

  it('1,000 concurrent Promises on one client', async () => {
    const c = await ctx.connect();
    const prefix = uniqueKey('many');
    const keys = Array.from({ length: 1000 }, (_, i) => `${prefix}-${i}`);
    const sets = await Promise.all(keys.map((k, i) => c.set(k, `value-${i}`)));
    assert.ok(sets.every((r) => r.applied));
    const gets = await Promise.all(keys.map((k) => c.get(k)));
    gets.forEach((g, i) => assert.equal(g.value.toString(), `value-${i}`));
    const dels = await Promise.all(keys.map((k) => c.del(k)));
    assert.equal(dels.reduce((a, b) => a + b, 0), 1000);
    assert.equal(c.requestsInFlight, 0);
  });
});

describe('connecting', () => {
  it('connect takes a URL string, or options', async () => {
    const a = await Client.connect(ctx.server.url);
    const b = await Client.connect({ host: ctx.server.host, port: ctx.server.port, timeoutMs: 5000 });
    const k = uniqueKey();
    await a.set(k, 'x');
    assert.equal((await b.get(k)).value.toString(), 'x');
    await Promise.all([a.close(), b.close()]);
  });

  it('fromEnv reads the AIO_* variables', async () => {
    const c = await Client.fromEnv({
      AIO_BROKER_HOSTNAME: ctx.server.host,
      AIO_BROKER_TCP_PORT: String(ctx.server.port),
      AIO_MQTT_USE_TLS: 'false',
      AIO_MQTT_CLIENT_ID: 'node-from-env',
      UNRELATED: 'ignored',
    });
    assert.equal(c.clientId, 'node-from-env');
    const k = uniqueKey();
    await c.set(k, 'env');
    assert.equal((await c.get(k)).value.toString(), 'env');
    await c.close();
  });

  it('fromEnv without a host is ERR_INVALID_ARGUMENT', async () => {
    await rejectsWith(Client.fromEnv({}), 'ERR_INVALID_ARGUMENT');
  });

  it('nothing listening: ERR_CONNECTION or ERR_TIMEOUT, as an Error', async () => {
    const s = await LocalServer.start();
    const port = s.port;
    await s.shutdown();
    let error;
    await assert.rejects(Client.connect({ host: '127.0.0.1', port, connectTimeoutMs: 1000 }), (e) => {
      error = e;
      return true;
    });
    assert.ok(error instanceof Error);
    assert.ok(['ERR_CONNECTION', 'ERR_TIMEOUT'].includes(error.code), `${error.code}: ${error.message}`);
  });
});

describe('errors', () => {
  it('a panic in a call rejects its Promise with an internal error, and Node goes on', async () => {
    // The test helper's future panics in a later poll, made on this thread by the bridge's
    // callback: the panic must not unwind into Node.
    const native = createRequire(import.meta.url)('../binding.js');
    await assert.rejects(native.panickingCall('boom'), /internal error \(a Rust panic, a bug: please report it\): boom/);
    const c = await ctx.connect();
    const k = uniqueKey();
    await c.set(k, 'after');
    assert.equal((await c.get(k)).value.toString(), 'after');
  });

  it('bad arguments reject with ERR_INVALID_ARGUMENT (never a plain string)', async () => {
    const c = await ctx.connect();
    await rejectsWith(c.get(42), 'ERR_INVALID_ARGUMENT');
    await rejectsWith(c.get(null), 'ERR_INVALID_ARGUMENT');
    await rejectsWith(c.set('k', { a: 1 }), 'ERR_INVALID_ARGUMENT');
    await rejectsWith(c.set('k', 'v', { nx: true, nex: true }), 'ERR_INVALID_ARGUMENT');
    await rejectsWith(c.set('k', 'v', { expiryMs: -1 }), 'ERR_INVALID_ARGUMENT');
    await rejectsWith(c.set('k', 'v', { expiryMs: Number.NaN }), 'ERR_INVALID_ARGUMENT');
    // Zero is refused (the protocol's PX must be > 0), and the NaN message does not claim
    // that 0 would do; no expiry is the option left out.
    await rejectsWith(c.set('k', 'v', { expiryMs: 0 }), 'ERR_INVALID_ARGUMENT');
    await assert.rejects(c.set('k', 'v', { expiryMs: Number.NaN }), (e) => !e.message.includes('>= 0'));
    await rejectsWith(c.set('k', 'v', { fencingToken: 'not-an-hlc' }), 'ERR_INVALID_ARGUMENT');
    await rejectsWith(c.set('k', 'v', { fencingToken: 5 }), 'ERR_INVALID_ARGUMENT');
    await rejectsWith(c.get('k', { timeoutMs: -5 }), 'ERR_INVALID_ARGUMENT');
    await rejectsWith(c.del([1, 2]), 'ERR_INVALID_ARGUMENT');
    await rejectsWith(Client.connect('http://example.com'), 'ERR_INVALID_ARGUMENT');
    await rejectsWith(Client.connect({ url: ctx.server.url, port: 70000 }), 'ERR_INVALID_ARGUMENT');
    await rejectsWith(Client.connect(7), 'ERR_INVALID_ARGUMENT');
  });

  it('a service error has ERR_SERVICE and the service kind', async () => {
    const s = await LocalServer.start({ maxKeys: 1 });
    try {
      const c = await Client.connect(s.url);
      await c.set('first', '1');
      const e = await rejectsWith(c.set('second', '2'), 'ERR_SERVICE');
      assert.equal(e.serviceKind, 'quota_exceeded');
      assert.match(e.message, /quota/i);
      await c.close();
    } finally {
      await s.shutdown();
    }
  });

  it('a call that gets no answer in time is ERR_TIMEOUT (sub-second)', async () => {
    // A broker with no state store behind it: the requests go out and nothing answers.
    const broker = await silentBroker();
    try {
      const c = await Client.connect({ url: broker.url });
      try {
        const started = Date.now();
        const results = await Promise.allSettled(
          Array.from({ length: 20 }, () => c.get('k', { timeoutMs: 150 })),
        );
        for (const r of results) {
          assert.equal(r.status, 'rejected');
          assert.ok(r.reason instanceof Error);
          assert.equal(r.reason.code, 'ERR_TIMEOUT', r.reason.message);
        }
        // Bounded (no hang): well under the default 10 s timeout.
        assert.ok(Date.now() - started < 5000);
      } finally {
        await c.close();
      }
    } finally {
      await broker.close();
    }
    // A client of the real server is unaffected.
    const ok = await ctx.connect();
    assert.equal(await ok.get(uniqueKey()), null);
  });

  it('no broker for the whole timeout is ERR_DISCONNECTED (the request was not sent)', async () => {
    const s = await LocalServer.start();
    const c = await Client.connect({ url: s.url, reconnect: { initialDelayMs: 50, maxDelayMs: 100 } });
    await s.shutdown();
    // Once the client saw the connection drop (otherwise the request may still be sent on the
    // dead connection, and then it is an ERR_TIMEOUT).
    await eventually(() => c.state === 'reconnecting', 5000, 'the client to notice the disconnection');
    const started = Date.now();
    const e = await rejectsWith(c.get('k', { timeoutMs: 300 }), 'ERR_DISCONNECTED');
    assert.match(e.message, /not sent/);
    assert.ok(Date.now() - started < 5000);
    await c.close();
  });

  it('calls after close are ERR_DISCONNECTED', async () => {
    const c = await ctx.connect();
    await c.close();
    await rejectsWith(c.get('k'), 'ERR_DISCONNECTED');
    await rejectsWith(c.set('k', 'v'), 'ERR_DISCONNECTED');
  });

  it('Hlc errors are thrown synchronously with a reason', () => {
    assert.throws(() => Hlc.parse('1:2'), (e) => e instanceof Error && e.code === 'ERR_INVALID_ARGUMENT' && e.reason === 'too_few_parts');
    assert.throws(() => new Hlc(1, 2, 'a:b'), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    assert.throws(() => new Hlc(-1, 0, 'n'), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    assert.throws(() => new Hlc(2n ** 64n, 0, 'n'), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    const h = new Hlc(2n ** 64n - 1n, 5, 'n');
    assert.equal(h.ms, 2n ** 64n - 1n);
    assert.equal(h.counter, 5n);
    assert.equal(h.nodeId, 'n');
  });

  it('Hlc is immutable, and only an Hlc is taken where one is expected', async () => {
    const h = new Hlc(1n, 2n, 'n');
    assert.throws(() => {
      h.ms = 5n;
    }, TypeError);
    assert.equal(h.ms, 1n);
    assert.equal(JSON.stringify({ v: h }), '{"v":"000000000000001:00002:n"}');
    assert.equal(inspect(h), 'Hlc(000000000000001:00002:n)');
    const lookalike = { ms: 1n, counter: 2n, nodeId: 'n' };
    assert.throws(() => h.compare(lookalike), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    assert.throws(() => h.equals(undefined), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    assert.throws(() => Hlc.compare(lookalike, h), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    const c = await ctx.connect();
    await assert.rejects(c.del('k', { fencingToken: lookalike }), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    await c.close();
  });
});

describe('AbortSignal', () => {
  it('an aborted pending call rejects with an AbortError at once', async () => {
    const c = await ctx.connect();
    const ac = new AbortController();
    const p = c.get(uniqueKey(), { signal: ac.signal });
    ac.abort(new Error('stop'));
    const e = await rejectsWith(p, 'ABORT_ERR');
    assert.equal(e.name, 'AbortError');
    assert.equal(e.cause.message, 'stop');
  });

  it('an already aborted signal rejects without sending anything', async () => {
    const c = await ctx.connect();
    const k = uniqueKey();
    await rejectsWith(c.set(k, 'v', { signal: AbortSignal.abort() }), 'ABORT_ERR');
    assert.equal(await c.get(k), null);
  });

  it('a call that is not aborted resolves normally', async () => {
    const c = await ctx.connect();
    const ac = new AbortController();
    const k = uniqueKey();
    assert.equal((await c.set(k, 'v', { signal: ac.signal })).applied, true);
    assert.equal((await c.get(k, { signal: ac.signal })).value.toString(), 'v');
    ac.abort(); // after the fact: nothing happens
  });

  it('aborting a call that waits for the broker rejects at once', async () => {
    const s = await LocalServer.start();
    const c = await Client.connect({ url: s.url, reconnect: { initialDelayMs: 50, maxDelayMs: 100 } });
    await s.shutdown();
    const ac = new AbortController();
    const p = c.get('k', { signal: ac.signal, timeoutMs: 60_000 });
    await sleep(100);
    const started = Date.now();
    ac.abort();
    await rejectsWith(p, 'ABORT_ERR');
    assert.ok(Date.now() - started < 1000);
    await c.close();
  });
});
