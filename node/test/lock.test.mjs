// Leases, locks and leader election (mqstate::lock) through the Node API.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Hlc, LeaderElection, Lease, Lock, LockGuard } from '../index.js';
import { eventually, localServer, sleep, uniqueKey } from './helpers.mjs';

const ctx = localServer();

async function nextEvent(stream, ms = 5000) {
  const timer = setTimeout(() => stream.close(), ms);
  try {
    const r = await stream.next();
    assert.equal(r.done, false, 'the stream ended before an event came');
    return r.value;
  } finally {
    clearTimeout(timer);
  }
}

describe('Lease', () => {
  it('one holder at a time; release lets the other in; tokens fence writes', async () => {
    const [ca, cb] = [await ctx.connect(), await ctx.connect()];
    const name = uniqueKey('lease');
    const a = new Lease(ca, name, 'holder-a');
    const b = new Lease(cb, Buffer.from(name), Buffer.from('holder-b'));
    assert.equal(a.name.toString(), name);
    assert.equal(a.holderValue.toString(), 'holder-a');
    assert.equal(a.currentToken, null);

    const ta = await a.acquire(5000);
    assert.ok(ta instanceof Hlc);
    assert.ok(a.currentToken.equals(ta));
    assert.equal(await b.acquire(5000), null, 'b must not get a held lease');
    assert.equal((await b.holder()).toString(), 'holder-a');

    // A write protected by the lease.
    const k = uniqueKey('protected');
    await ca.set(k, 'by a', { fencingToken: ta });

    // Renewing gives a strictly greater token.
    const renewed = await a.renew();
    assert.equal(ta.compare(renewed), -1);

    assert.equal(await a.release(), true);
    assert.equal(a.currentToken, null);
    assert.equal(await a.release(), false, 'a second release finds nothing');

    const tb = await b.acquire(5000);
    assert.ok(tb instanceof Hlc);
    assert.equal(renewed.compare(tb), -1);
    await cb.set(k, 'by b', { fencingToken: tb });
    // a's old token is now refused on the protected key.
    await assert.rejects(ca.set(k, 'late write by a', { fencingToken: renewed }), (e) =>
      e.code === 'ERR_SERVICE' && e.serviceKind === 'fencing_token_lower_version');
    assert.equal((await ca.get(k)).value.toString(), 'by b');
    await b.release();
  });

  it('sessionId makes holder:session', async () => {
    const c = await ctx.connect();
    const l = new Lease(c, uniqueKey(), 'host', { sessionId: '42' });
    assert.equal(l.holderValue.toString(), 'host:42');
    await l.acquire(2000);
    assert.equal((await l.holder()).toString(), 'host:42');
    await l.release();
  });

  it('acquireWait wakes up when the holder releases', async () => {
    const [ca, cb] = [await ctx.connect(), await ctx.connect()];
    const name = uniqueKey();
    const a = new Lease(ca, name, 'a');
    const b = new Lease(cb, name, 'b');
    await a.acquire(30_000);
    const waiting = b.acquireWait(5000, 10_000);
    await sleep(200);
    const released = Date.now();
    await a.release();
    const tb = await waiting;
    assert.ok(tb instanceof Hlc);
    assert.ok(Date.now() - released < 2000, 'woken by the notification, not by the ttl');
    assert.equal((await a.holder()).toString(), 'b');
    await b.release();
  });

  it('acquireWait gives ERR_TIMEOUT when the lease stays held', async () => {
    const [ca, cb] = [await ctx.connect(), await ctx.connect()];
    const name = uniqueKey();
    await new Lease(ca, name, 'a').acquire(30_000);
    const started = Date.now();
    await assert.rejects(new Lease(cb, name, 'b').acquireWait(5000, 300), (e) =>
      e instanceof Error && e.code === 'ERR_TIMEOUT');
    assert.ok(Date.now() - started < 3000);
  });

  it('aborting acquireWait withdraws it: the waiter does not take the lease later', async () => {
    const [ca, cb] = [await ctx.connect(), await ctx.connect()];
    const name = uniqueKey();
    const a = new Lease(ca, name, 'a');
    const b = new Lease(cb, name, 'b');
    await a.acquire(30_000);
    const ac = new AbortController();
    const waiting = b.acquireWait(5000, 30_000, { signal: ac.signal });
    await sleep(200);
    ac.abort();
    await assert.rejects(waiting, (e) => e.code === 'ABORT_ERR' && e.name === 'AbortError');
    await a.release();
    await sleep(500);
    assert.equal(await a.holder(), null, 'the aborted waiter must not have acquired the lease');
    assert.equal(b.currentToken, null);
  });

  it('events: acquired, renewed (auto), lost when someone deletes the key, then released', async () => {
    const [ca, cb] = [await ctx.connect(), await ctx.connect()];
    const name = uniqueKey();
    const lease = new Lease(ca, name, 'me');
    const events = lease.events();
    const t = await lease.acquire(1000);
    const acquired = await nextEvent(events);
    assert.equal(acquired.type, 'acquired');
    assert.ok(acquired.token.equals(t));
    lease.autoRenew(0.2); // every 200 ms
    const r1 = await nextEvent(events);
    assert.equal(r1.type, 'renewed');
    assert.equal(t.compare(r1.token), -1);
    const r2 = await nextEvent(events);
    assert.equal(r2.type, 'renewed');
    assert.equal(r1.token.compare(r2.token), -1);
    await cb.del(name); // someone breaks the lease
    let e;
    do e = await nextEvent(events);
    while (e.type === 'renewed');
    assert.equal(e.type, 'lost');
    assert.match(e.reason, /\w/);
    assert.equal(lease.currentToken, null);
    // The renewal stopped: the key stays deleted.
    await sleep(500);
    assert.equal(await ca.get(name), null);
    // Released after a new acquire.
    await lease.acquire(1000);
    assert.equal((await nextEvent(events)).type, 'acquired');
    await lease.release();
    assert.deepEqual(await nextEvent(events), { type: 'released' });
    // `return()` (what `break` calls) closes the stream.
    await events.return();
    assert.deepEqual(await events.next(), { done: true, value: undefined });
  });

  it('stopRenewal lets the lease expire', async () => {
    const c = await ctx.connect();
    const name = uniqueKey();
    const lease = new Lease(c, name, 'me');
    await lease.acquire(300);
    lease.autoRenew();
    await sleep(500);
    assert.equal((await lease.holder()).toString(), 'me', 'renewed past its first ttl');
    lease.stopRenewal();
    await sleep(600);
    assert.equal(await lease.holder(), null);
  });

  it('bad arguments are ERR_INVALID_ARGUMENT', async () => {
    const c = await ctx.connect();
    const lease = new Lease(c, uniqueKey(), 'me');
    await assert.rejects(lease.acquire(0), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    await assert.rejects(lease.acquire('5s'), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    await assert.rejects(lease.renew(), (e) => e.code === 'ERR_INVALID_ARGUMENT'); // never acquired
    assert.throws(() => lease.autoRenew(0.5), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    await lease.acquire(1000);
    assert.throws(() => lease.autoRenew(1.5), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    assert.throws(() => new Lease({}, 'n', 'h'), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    assert.throws(() => new Lease(c, 5, 'h'), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    await lease.release();
  });
});

describe('Lock', () => {
  it('mutual exclusion: the second lock() waits for unlock()', async () => {
    const [ca, cb] = [await ctx.connect(), await ctx.connect()];
    const name = uniqueKey('lock');
    const la = new Lock(ca, name, 'a');
    const lb = new Lock(cb, name, 'b');
    const ga = await la.lock(10_000, 1000);
    assert.ok(ga instanceof LockGuard);
    assert.ok(ga.token instanceof Hlc);
    let bHas = false;
    const gbPromise = lb.lock(10_000, 10_000).then((g) => {
      bHas = true;
      return g;
    });
    await sleep(300);
    assert.equal(bHas, false, 'b got the lock while a held it');
    assert.equal((await lb.holder()).toString(), 'a');
    assert.equal(await ga.unlock(), true);
    const gb = await gbPromise;
    assert.equal(ga.token.compare(gb.token), -1);
    assert.equal((await la.holder()).toString(), 'b');
    assert.equal(await ga.unlock(), false, 'a second unlock does nothing');
    assert.equal(await gb.unlock(), true);
    assert.equal(await la.holder(), null);
  });

  it('lock() times out with ERR_TIMEOUT', async () => {
    const [ca, cb] = [await ctx.connect(), await ctx.connect()];
    const name = uniqueKey();
    const g = await new Lock(ca, name, 'a').lock(10_000, 1000);
    await assert.rejects(new Lock(cb, name, 'b').lock(10_000, 200), (e) => e.code === 'ERR_TIMEOUT');
    await g.unlock();
  });

  it('edit: concurrent fenced read-modify-writes do not lose updates', async () => {
    const clients = [await ctx.connect(), await ctx.connect(), await ctx.connect()];
    const name = uniqueKey('counter-lock');
    const counter = uniqueKey('counter');
    const rounds = 5;
    await Promise.all(
      clients.map(async (c, i) => {
        const lock = new Lock(c, name, `worker-${i}`);
        for (let r = 0; r < rounds; r++) {
          await lock.edit(counter, 5000, 20_000, async (old) => {
            const n = old === null ? 0 : Number(old.toString());
            await sleep(5); // widen the race window
            return String(n + 1);
          });
        }
      }),
    );
    assert.equal((await clients[0].get(counter)).value.toString(), String(clients.length * rounds));
  });

  it('edit: a throwing f writes nothing, unlocks, and its error comes back', async () => {
    const c = await ctx.connect();
    const name = uniqueKey();
    const k = uniqueKey();
    await c.set(k, 'kept');
    const lock = new Lock(c, name, 'me', { sessionId: 's1' });
    assert.equal(lock.holderValue.toString(), 'me:s1');
    const boom = new Error('boom');
    await assert.rejects(lock.edit(k, 5000, 1000, async () => { throw boom; }), (e) => e === boom);
    assert.equal((await c.get(k)).value.toString(), 'kept');
    assert.equal(await lock.holder(), null, 'unlocked after the throw');
    assert.equal((await lock.edit(k, 5000, 1000, (old) => `${old}!`)).toString(), 'kept!');
  });

  it('the core refuses empty names and holders, and a renewFraction outside (0, 1)', async () => {
    const c = await ctx.connect();
    const invalid = (f, re) => assert.throws(f, (e) => e.code === 'ERR_INVALID_ARGUMENT' && re.test(e.message));
    invalid(() => new Lease(c, '', 'h'), /lease name is empty/);
    invalid(() => new Lock(c, 'n', ''), /lock holder is empty/);
    invalid(() => new LeaderElection(c, 'e', ''), /election candidate is empty/);
    invalid(() => new LeaderElection(c, 'e', 'c', { renewFraction: 1 }), /renewal fraction/);
  });

  it('edit returning null deletes; withLock unlocks when f throws', async () => {
    const c = await ctx.connect();
    const name = uniqueKey();
    const k = uniqueKey();
    await c.set(k, 'x');
    const lock = new Lock(c, name, 'me');
    assert.equal(await lock.edit(k, 5000, 1000, () => null), null);
    assert.equal(await c.get(k), null);
    await assert.rejects(lock.withLock(5000, 1000, () => { throw new Error('boom'); }), /boom/);
    assert.equal(await lock.holder(), null, 'unlocked after the throw');
    assert.equal(await lock.withLock(5000, 1000, (token) => token instanceof Hlc), true);
  });
});

describe('LeaderElection', () => {
  it('one leader; the other takes over after resign; events tell both', async () => {
    const [c1, c2] = [await ctx.connect(), await ctx.connect()];
    const key = uniqueKey('election');
    const one = new LeaderElection(c1, key, 'one');
    const two = new LeaderElection(c2, key, 'two', { renewFraction: 0.3 });
    const events1 = one.events();
    const events2 = two.events();
    await Promise.all([events1.ready, events2.ready]);

    const t1 = await one.campaign(1000, 2000);
    assert.ok(t1 instanceof Hlc);
    assert.equal(one.isLeader, true);
    assert.ok(one.currentToken.equals(t1));
    const elected = await nextEvent(events1);
    assert.equal(elected.type, 'elected');
    assert.ok(elected.token.equals(t1));
    const seenByTwo = await nextEvent(events2);
    assert.equal(seenByTwo.type, 'newLeader');
    assert.equal(seenByTwo.leader.toString(), 'one');

    assert.equal(await two.tryCampaign(1000), null);
    assert.equal(two.isLeader, false);
    assert.equal((await two.leader()).toString(), 'one');

    // The term (1 s) is renewed automatically: still the leader after 3 terms.
    const campaigning = two.campaign(1000, 10_000);
    await sleep(2500);
    assert.equal(one.isLeader, true);
    assert.equal((await one.leader()).toString(), 'one');
    let e;
    do e = await nextEvent(events1);
    while (e.type !== 'renewed');
    assert.equal(t1.compare(e.token), -1);

    assert.equal(await one.resign(), true);
    assert.equal(one.isLeader, false);
    const t2 = await campaigning;
    assert.equal(two.isLeader, true);
    assert.equal(t1.compare(t2), -1);
    assert.equal((await one.leader()).toString(), 'two');
    // Own events and the key's notifications are two sources: skip renewals and the
    // newLeader reports of the key (deleted, then taken by two) that may come first.
    do e = await nextEvent(events1);
    while (e.type === 'renewed' || e.type === 'newLeader');
    assert.equal(e.type, 'resigned');
    do e = await nextEvent(events2);
    while (e.type !== 'elected');
    assert.ok(e.token.equals(t2));
    events1.close();
    events2.close();
    await two.resign();
  });

  it('a leader whose key is taken loses the leadership', async () => {
    const [c1, c2] = [await ctx.connect(), await ctx.connect()];
    const key = uniqueKey('election');
    const one = new LeaderElection(c1, key, 'one');
    const events = one.events();
    await events.ready;
    await one.campaign(2000, 1000);
    await c2.set(key, 'usurper');
    let e;
    do e = await nextEvent(events);
    while (e.type !== 'lost');
    assert.match(e.reason, /\w/);
    await eventually(() => !one.isLeader, 2000, 'isLeader to turn false');
    events.close();
  });

  it('campaign times out with ERR_TIMEOUT; bad renewFraction throws', async () => {
    const [c1, c2] = [await ctx.connect(), await ctx.connect()];
    const key = uniqueKey();
    const one = new LeaderElection(c1, key, 'one');
    await one.campaign(5000, 1000);
    await assert.rejects(new LeaderElection(c2, key, 'two').campaign(5000, 200), (e) => e.code === 'ERR_TIMEOUT');
    assert.throws(() => new LeaderElection(c1, key, 'x', { renewFraction: 1 }), (e) => e.code === 'ERR_INVALID_ARGUMENT');
    await one.resign();
  });
});
