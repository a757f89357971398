// The shared vectors (tests/vectors/*.json) that apply to the Node API: HLC parsing,
// formatting, ordering and equality through `Hlc`; the binary values of the reply and
// notification vectors round-tripped through a real server (GET and observe). The codec,
// topic and clock internals are not exposed to JavaScript; the Rust suite runs those
// vectors on the same code.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Hlc } from '../index.js';
import { localServer, uniqueKey, vectors } from './helpers.mjs';

const HLC = vectors('hlc.json');

function bytesOf(obj, field) {
  if (obj[`${field}_hex`] !== undefined) return Buffer.from(obj[`${field}_hex`], 'hex');
  if (obj[field] === undefined || obj[field] === null) return undefined;
  return Buffer.from(obj[field], 'latin1');
}

describe('hlc.json', () => {
  it(`valid (${HLC.valid.length} cases)`, () => {
    assert.ok(HLC.valid.length > 0);
    for (const c of HLC.valid) {
      const h = Hlc.parse(c.text);
      assert.equal(h.ms, BigInt(c.ms), c.text);
      assert.equal(h.counter, BigInt(c.counter), c.text);
      assert.equal(h.nodeId, c.node_id, c.text);
      assert.equal(h.toString(), c.display, c.text);
      assert.equal(`${h}`, c.display);
      assert.ok(Hlc.parse(h.toString()).equals(h));
      assert.ok(new Hlc(BigInt(c.ms), BigInt(c.counter), c.node_id).equals(h));
    }
  });

  it(`malformed (${HLC.malformed.length} cases): ERR_INVALID_ARGUMENT with the reason`, () => {
    assert.ok(HLC.malformed.length > 0);
    for (const c of HLC.malformed) {
      assert.throws(
        () => Hlc.parse(c.text),
        (e) => e instanceof Error && e.code === 'ERR_INVALID_ARGUMENT' && e.reason === c.reason,
        `${JSON.stringify(c.text)} should fail with ${c.reason}`,
      );
    }
  });

  it(`ordering (${HLC.ordering.length} cases)`, () => {
    assert.ok(HLC.ordering.length > 0);
    for (const c of HLC.ordering) {
      const lower = Hlc.parse(c.lower);
      const higher = Hlc.parse(c.higher);
      assert.equal(lower.compare(higher), -1, c.why);
      assert.equal(higher.compare(lower), 1, c.why);
      assert.equal(Hlc.compare(lower, higher), -1, c.why);
      assert.equal(lower.equals(higher), false);
      const sorted = [higher, lower].sort(Hlc.compare);
      assert.ok(sorted[0] === lower, c.why);
    }
  });

  it(`equal (${HLC.equal.length} cases)`, () => {
    assert.ok(HLC.equal.length > 0);
    for (const c of HLC.equal) {
      const a = Hlc.parse(c.a);
      const b = Hlc.parse(c.b);
      assert.ok(a.equals(b));
      assert.equal(a.compare(b), 0);
      assert.equal(a.toString(), b.toString());
    }
  });
});

describe('values of replies.json and notifications.json, through a server', () => {
  const ctx = localServer();
  const getValues = vectors('replies.json')
    .cases.filter((c) => c.command === 'GET' && c.result && typeof c.result === 'object' && 'value' in c.result || c.result?.value_hex)
    .map((c) => bytesOf(c.result, 'value'))
    .filter((v) => v !== undefined);
  const notified = vectors('notifications.json')
    .cases.filter((c) => c.operation === 'set' && c.server_encodes_this)
    .map((c) => bytesOf(c, 'value'));

  it(`GET values (${getValues.length}) come back byte for byte`, async () => {
    assert.ok(getValues.length >= 3);
    const c = await ctx.connect();
    for (const value of getValues) {
      const k = uniqueKey('vec');
      await c.set(k, value);
      const got = await c.get(k);
      assert.ok(got.value.equals(value), `${value.toString('hex')} != ${got.value.toString('hex')}`);
    }
  });

  it(`notified values (${notified.length}) arrive byte for byte`, async () => {
    assert.ok(notified.length >= 2);
    const [watcher, writer] = [await ctx.connect(), await ctx.connect()];
    const k = uniqueKey('vec-notify');
    const o = watcher.observe(k);
    await o.ready;
    for (const value of notified) {
      await writer.set(k, value);
      const { value: n } = await o.next();
      assert.equal(n.operation, 'set');
      assert.ok(n.value.equals(value), value.toString('hex'));
    }
    await writer.del(k);
    assert.equal((await o.next()).value.operation, 'delete');
    o.close();
  });
});
