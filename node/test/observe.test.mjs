// Observations as async iterators: another client writes, `break` unobserves, abort.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Hlc, LocalServer, Observation } from '../index.js';
import { eventually, localServer, sleep, uniqueKey } from './helpers.mjs';

const ctx = localServer();

describe('observe', () => {
  it('a lagging observer gets ERR_LAGGED with the count, and the observation goes on', async () => {
    const watcher = await ctx.connect({ observationBuffer: 2 });
    const writer = await ctx.connect();
    const k = uniqueKey('lagging');
    const observation = watcher.observe(k);
    await observation.ready;
    for (let i = 0; i < 10; i++) await writer.set(k, `v${i}`);
    await sleep(300); // let the notifications arrive (and overflow the buffer of 2)
    let lagged;
    for (let i = 0; i < 12 && lagged === undefined; i++) {
      try {
        await observation.next();
      } catch (e) {
        lagged = e;
      }
    }
    assert.equal(lagged?.code, 'ERR_LAGGED', String(lagged));
    assert.match(lagged.message, /\d+ notifications dropped/);
    // Not ended: later changes still come through.
    await writer.set(k, 'after');
    let value;
    for (let i = 0; i < 12 && value !== 'after'; i++) {
      const r = await observation.next();
      assert.equal(r.done, false);
      value = r.value.value?.toString();
    }
    assert.equal(value, 'after');
    observation.close();
  });

  it('for await sees the writes of another client, in order, then break unobserves', async () => {
    const watcher = await ctx.connect();
    const writer = await ctx.connect();
    const k = uniqueKey('watched');
    const observation = watcher.observe(k);
    assert.ok(observation instanceof Observation);
    await observation.ready;
    assert.equal(watcher.observedKeys, 1);

    const writes = (async () => {
      await writer.set(k, Buffer.from([0, 1, 2, 0xff]));
      await writer.set(k, 'second');
      await writer.del(k);
      await writer.set(k, 'third');
    })();
    const seen = [];
    for await (const n of observation) {
      seen.push(n);
      if (seen.length === 4) break;
    }
    await writes;
    assert.deepEqual(
      seen.map((n) => n.operation),
      ['set', 'set', 'delete', 'set'],
    );
    assert.ok(Buffer.isBuffer(seen[0].key));
    assert.equal(seen[0].key.toString(), k);
    assert.deepEqual(seen[0].value, Buffer.from([0, 1, 2, 0xff]));
    assert.equal(seen[1].value.toString(), 'second');
    assert.equal(seen[2].value, undefined);
    assert.equal(seen[3].value.toString(), 'third');
    for (const n of seen) {
      assert.ok(n.version instanceof Hlc);
      assert.equal(n.synthesized, false);
    }
    for (let i = 1; i < seen.length; i++) assert.equal(seen[i - 1].version.compare(seen[i].version), -1);

    // `break` unobserved the key: the client no longer has it registered.
    await eventually(() => watcher.observedKeys === 0, 5000, 'the key to be unobserved');
    // The iterator is done for good.
    assert.deepEqual(await observation.next(), { done: true, value: undefined });
  });

  it('after break, writes are no longer delivered (a new observation sees only new ones)', async () => {
    const watcher = await ctx.connect();
    const writer = await ctx.connect();
    const k = uniqueKey();
    const first = watcher.observe(k);
    await first.ready;
    await writer.set(k, 'a');
    for await (const n of first) {
      assert.equal(n.value.toString(), 'a');
      break;
    }
    await eventually(() => watcher.observedKeys === 0, 5000, 'unobserve');
    await writer.set(k, 'not seen');
    const second = watcher.observe(k);
    await second.ready;
    await writer.set(k, 'b');
    const { value } = await second.next();
    assert.equal(value.value.toString(), 'b');
    second.close();
    assert.deepEqual(await second.next(), { done: true, value: undefined });
  });

  it('two observations of one key both see a change; closing one keeps the other', async () => {
    const watcher = await ctx.connect();
    const writer = await ctx.connect();
    const k = uniqueKey();
    const a = watcher.observe(k);
    const b = watcher.observe(Buffer.from(k));
    await Promise.all([a.ready, b.ready]);
    await writer.set(k, '1');
    assert.equal((await a.next()).value.value.toString(), '1');
    assert.equal((await b.next()).value.value.toString(), '1');
    await a.return();
    await writer.set(k, '2');
    assert.equal((await b.next()).value.value.toString(), '2');
    b.close();
  });

  it('expiry is a delete notification', async () => {
    const c = await ctx.connect();
    const k = uniqueKey();
    const o = c.observe(k);
    await o.ready;
    await c.set(k, 'v', { expiryMs: 100 });
    const ops = [];
    for await (const n of o) {
      ops.push(n.operation);
      if (n.operation === 'delete') break;
    }
    assert.deepEqual(ops, ['set', 'delete']);
  });

  it('a pending next() ends when the observation is closed', async () => {
    const c = await ctx.connect();
    const o = c.observe(uniqueKey());
    await o.ready;
    const pending = o.next();
    await sleep(50);
    o.close();
    assert.deepEqual(await pending, { done: true, value: undefined });
  });

  it('a pending next() ends when the client is closed', async () => {
    const c = await Client.connect(ctx.server.url);
    const o = c.observe(uniqueKey());
    await o.ready;
    const pending = o.next();
    await sleep(50);
    await c.close();
    assert.deepEqual(await pending, { done: true, value: undefined });
  });

  it('unobserve(key) ends the observations of the key', async () => {
    const c = await ctx.connect();
    const k = uniqueKey();
    const o = c.observe(k);
    await o.ready;
    const pending = o.next();
    await c.unobserve(k);
    assert.deepEqual(await pending, { done: true, value: undefined });
    assert.equal(c.observedKeys, 0);
  });

  it('an AbortSignal ends the iteration with an AbortError', async () => {
    const c = await ctx.connect();
    const ac = new AbortController();
    const o = c.observe(uniqueKey(), { signal: ac.signal });
    await o.ready;
    setTimeout(() => ac.abort(), 50);
    await assert.rejects(
      (async () => {
        for await (const n of o) assert.fail(`unexpected ${n.operation}`);
      })(),
      (e) => e instanceof Error && e.code === 'ABORT_ERR' && e.name === 'AbortError',
    );
    await eventually(() => c.observedKeys === 0, 5000, 'unobserve');
  });

  it('a bad key fails the iteration with ERR_INVALID_ARGUMENT', async () => {
    const c = await ctx.connect();
    const o = c.observe(123);
    await assert.rejects(o.ready, (e) => e.code === 'ERR_INVALID_ARGUMENT');
    await assert.rejects(o.next(), (e) => e.code === 'ERR_INVALID_ARGUMENT');
  });

  it('observing on a closed client fails with ERR_DISCONNECTED', async () => {
    const c = await Client.connect(ctx.server.url);
    await c.close();
    await assert.rejects(c.observe('k').ready, (e) => e.code === 'ERR_DISCONNECTED');
  });

  it('many keys observed at once, each sees its own writes', async () => {
    const watcher = await ctx.connect();
    const writer = await ctx.connect();
    const keys = Array.from({ length: 50 }, () => uniqueKey('multi'));
    const observations = keys.map((k) => watcher.observe(k));
    await Promise.all(observations.map((o) => o.ready));
    await Promise.all(keys.map((k, i) => writer.set(k, String(i))));
    const firsts = await Promise.all(observations.map((o) => o.next()));
    firsts.forEach((r, i) => {
      assert.equal(r.value.key.toString(), keys[i]);
      assert.equal(r.value.value.toString(), String(i));
    });
    observations.forEach((o) => o.close());
    await eventually(() => watcher.observedKeys === 0, 5000, 'unobserve all');
  });
});

describe('LocalServer', () => {
  it('starts on a free port of 127.0.0.1 and shuts down idempotently', async () => {
    const s = await LocalServer.start();
    assert.equal(s.host, '127.0.0.1');
    assert.ok(s.port > 0);
    assert.equal(s.url, `mqtt://127.0.0.1:${s.port}`);
    const c = await Client.connect(s.url);
    await c.set('k', 'v');
    await c.close();
    await s.shutdown();
    await s.shutdown();
  });

  it('rejects bad options with ERR_INVALID_ARGUMENT', async () => {
    await assert.rejects(LocalServer.start({ host: 'not an ip' }), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    await assert.rejects(LocalServer.start({ port: -1 }), (e) => e.code === 'ERR_INVALID_ARGUMENT');
  });
});
