// Listing keys (SCAN) against the local server: the async iterator and the page API, binary
// keys and glob metacharacters, errors (empty pattern before anything is sent, a malformed
// pattern from the server), `break` and abort.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Scan } from '../index.js';
import { eventually, localServer, silentBroker, uniqueKey } from './helpers.mjs';

const ctx = localServer();

/** Sets `keys` to 'v', 100 at a time. */
async function fill(client, keys) {
  for (let i = 0; i < keys.length; i += 100) {
    const rs = await Promise.all(keys.slice(i, i + 100).map((k) => client.set(k, 'v')));
    assert.ok(rs.every((r) => r.applied));
  }
}

/** Every key of a scan through `for await`. */
async function collect(scan) {
  const keys = [];
  for await (const key of scan) keys.push(key);
  return keys;
}

const sorted = (keys) => [...keys].sort(Buffer.compare);
const hex = (keys) => sorted(keys).map((k) => k.toString('hex'));

describe('scan', () => {
  it('lists 3,000 keys exactly once, with for await and with nextPage()', async () => {
    const client = await ctx.connect();
    const prefix = `${uniqueKey('scan3000')}/`;
    const want = Array.from({ length: 3000 }, (_, i) => `${prefix}${String(i).padStart(4, '0')}`);
    await fill(client, want);
    await client.set(`${prefix.slice(0, -1)}-outside`, 'v'); // shares the prefix minus '/'

    // The iterator.
    const scan = client.scan(`${prefix}*`);
    assert.ok(scan instanceof Scan);
    const listed = await collect(scan);
    assert.ok(listed.every((k) => Buffer.isBuffer(k)));
    assert.equal(listed.length, 3000);
    assert.equal(new Set(listed.map((k) => k.toString())).size, 3000, 'no key listed twice');
    assert.deepEqual(sorted(listed).map(String), want);
    assert.equal(scan.done, true);
    assert.equal(await scan.nextPage(), null, 'a finished scan has no more pages');

    // The pages: several (at most 500 keys each), until null; `done` only after the last.
    const paged = client.scan(`${prefix}*`);
    assert.equal(paged.done, false);
    assert.deepEqual(paged.pattern, Buffer.from(`${prefix}*`));
    const pages = [];
    for (;;) {
      const doneBefore = paged.done;
      const page = await paged.nextPage();
      if (page === null) {
        assert.equal(doneBefore, true, 'null comes only after the last page');
        break;
      }
      assert.ok(Array.isArray(page));
      assert.ok(page.length <= 500, `a page of ${page.length} keys`);
      pages.push(page);
    }
    assert.ok(pages.length >= 6, `${pages.length} pages`);
    assert.equal(paged.done, true);
    assert.equal(await paged.nextPage(), null);
    const all = pages.flat();
    assert.equal(all.length, 3000);
    assert.deepEqual(sorted(all).map(String), want);
  });

  it('binary keys, glob metacharacters, ? and prefix patterns, no match', async () => {
    const client = await ctx.connect();
    const p = `${uniqueKey('scanbin')}/`;
    const k = (...parts) => Buffer.concat([Buffer.from(p), ...parts.map((x) => Buffer.from(x))]);
    const keys = {
      bin: k([0xff, 0x00, 0x2a, 0x80]), // not UTF-8, with a '*' byte
      star: k('star*'),
      starX: k('starX'),
      brackets: k('br[x]'),
      brx: k('brx'),
      backslash: k('back\\slash'),
      question: k('q?'),
      qa: k('qa'),
      a: k('a'),
      fe: k([0xfe]),
    };
    await fill(client, Object.values(keys));

    assert.deepEqual(hex(await collect(client.scan(`${p}*`))), hex(Object.values(keys)));
    // A binary pattern: the '\xff' byte then anything.
    assert.deepEqual(hex(await collect(client.scan(k([0xff], '*')))), hex([keys.bin]));
    // '?' is one byte (not one character): '\xfe' and 'a', not 'qa' or 'q?'.
    assert.deepEqual(hex(await collect(client.scan(`${p}?`))), hex([keys.a, keys.fe]));
    assert.deepEqual(hex(await collect(client.scan(`${p}q?`))), hex([keys.question, keys.qa]));
    // Escaped metacharacters match themselves only.
    assert.deepEqual(hex(await collect(client.scan(`${p}star\\*`))), hex([keys.star]));
    assert.deepEqual(hex(await collect(client.scan(`${p}q\\?`))), hex([keys.question]));
    assert.deepEqual(hex(await collect(client.scan(`${p}br\\[x\\]`))), hex([keys.brackets]));
    assert.deepEqual(hex(await collect(client.scan(`${p}br[x]`))), hex([keys.brx]), 'a class');
    assert.deepEqual(hex(await collect(client.scan(`${p}back\\\\slash`))), hex([keys.backslash]));
    // A prefix.
    assert.deepEqual(hex(await collect(client.scan(`${p}star*`))), hex([keys.star, keys.starX]));
    // No match: an empty listing, and pages that end.
    assert.deepEqual(await collect(client.scan(`${p}nothing*`)), []);
    const none = client.scan(`${p}nothing*`);
    const pages = [];
    for (let page = await none.nextPage(); page !== null; page = await none.nextPage()) pages.push(page);
    assert.deepEqual(pages.flat(), []);
    assert.equal(none.done, true);
  });

  it('an empty pattern throws ERR_INVALID_ARGUMENT before anything is sent', async () => {
    const client = await ctx.connect();
    for (const pattern of ['', Buffer.alloc(0), new Uint8Array(0)]) {
      assert.throws(
        () => client.scan(pattern),
        (e) => e.code === 'ERR_INVALID_ARGUMENT' && /pattern/.test(e.message),
      );
    }
    assert.equal(client.requestsInFlight, 0);
    assert.throws(() => client.scan(42), { code: 'ERR_INVALID_ARGUMENT' });
    // Checked before sending: a closed client says the same.
    const closed = await ctx.connect();
    await closed.close();
    assert.throws(() => closed.scan(''), { code: 'ERR_INVALID_ARGUMENT' });
  });

  it('creating a scan sends nothing; each page is one request with the timeout given', async () => {
    const broker = await silentBroker();
    const client = await Client.connect({ url: broker.url, timeoutMs: 10_000 });
    try {
      const scan = client.scan('*', { timeoutMs: 300 });
      assert.equal(client.requestsInFlight, 0, 'nothing sent by scan()');
      const page = scan.nextPage();
      assert.equal(client.requestsInFlight, 1, 'nextPage() sends the request');
      await assert.rejects(page, { code: 'ERR_TIMEOUT' });
      assert.equal(scan.done, false);
      // The same page can be asked again.
      await assert.rejects(scan.nextPage(), { code: 'ERR_TIMEOUT' });
      // A page cancelled while under way: an AbortError, and its request withdrawn.
      const controller = new AbortController();
      const cancelled = client.scan('*', { signal: controller.signal });
      const pending = cancelled.nextPage();
      assert.equal(client.requestsInFlight, 1);
      controller.abort();
      await assert.rejects(pending, { code: 'ABORT_ERR' });
      await eventually(() => client.requestsInFlight === 0, 5000, 'the request to be withdrawn');
      assert.equal(cancelled.done, false);
    } finally {
      await client.close();
      await broker.close();
    }
  });

  it('a malformed pattern rejects with the server error; the iterator ends, the page can be asked again', async () => {
    const client = await ctx.connect();
    const scan = client.scan('k[');
    await assert.rejects(scan.nextPage(), (e) => {
      assert.equal(e.code, 'ERR_SERVICE');
      assert.ok(e.message.includes("no closing ']'"), e.message);
      assert.ok(e.serviceText.includes("no closing ']'"), e.serviceText);
      return true;
    });
    assert.equal(scan.done, false);
    // Asked again: the same request, the same answer.
    await assert.rejects(scan.nextPage(), { code: 'ERR_SERVICE' });

    const iterated = client.scan('k[');
    const seen = [];
    await assert.rejects(
      (async () => {
        for await (const key of iterated) seen.push(key);
      })(),
      (e) => e.code === 'ERR_SERVICE' && e.message.includes("no closing ']'"),
    );
    assert.deepEqual(seen, []);
    // The iterator that threw is finished.
    const it = iterated[Symbol.asyncIterator]();
    await assert.rejects(it.next(), { code: 'ERR_SERVICE' }, 'a new iteration asks the page again');
  });

  it('break out of for await early; the scan goes on from the next unread key', async () => {
    const client = await ctx.connect();
    const prefix = `${uniqueKey('scanbreak')}/`;
    const want = Array.from({ length: 1200 }, (_, i) => `${prefix}${String(i).padStart(4, '0')}`);
    await fill(client, want);

    const scan = client.scan(`${prefix}*`);
    const first = [];
    for await (const key of scan) {
      first.push(key);
      if (first.length === 3) break;
    }
    assert.equal(first.length, 3);
    assert.equal(scan.done, false);
    // The rest of the page the loop stopped in, then the other pages.
    const rest = [];
    for (let page = await scan.nextPage(); page !== null; page = await scan.nextPage()) rest.push(...page);
    const all = [...first, ...rest];
    assert.equal(all.length, 1200);
    assert.deepEqual(sorted(all).map(String), want);

    // Iterating again after a break also goes on where it stopped.
    const again = client.scan(`${prefix}*`);
    const keys = [];
    for await (const key of again) {
      keys.push(key);
      if (keys.length === 700) break;
    }
    for await (const key of again) keys.push(key);
    assert.equal(keys.length, 1200);
    assert.deepEqual(sorted(keys).map(String), want);

    // A scan dropped after a break is simply forgotten: the client goes on.
    for await (const key of client.scan(`${prefix}*`)) {
      void key;
      break;
    }
    assert.equal((await client.get(want[0]))?.value.toString(), 'v');
  });

  it('an aborted signal rejects the pages with an AbortError', async () => {
    const client = await ctx.connect();
    const controller = new AbortController();
    const scan = client.scan('*', { signal: controller.signal });
    controller.abort(new Error('stop'));
    await assert.rejects(scan.nextPage(), { name: 'AbortError', code: 'ABORT_ERR' });
    await assert.rejects(collect(scan), { code: 'ABORT_ERR' });
  });
});
