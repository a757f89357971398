// Runs the behaviour scenarios shared by every language (tests/scenarios/*.json, format in
// tests/scenarios/README.md) against a real local state store. A step type or field this
// runner does not know fails it; the counts are printed at the end.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { Client, Hlc, LeaderElection, Lease, LocalServer, Lock, isMqstateError } from '../index.js';

const DIR = new URL('../../tests/scenarios/', import.meta.url);
const FILES = readdirSync(DIR)
  .filter((f) => f.endsWith('.json'))
  .sort();
const WAIT_MS = 20_000; // anything that must happen may take this long on a busy machine

/** The fields each step type takes (besides `op`, `client` and `expect`). */
const STEPS = {
  connect: ['url', 'host', 'tls', 'connect_timeout_ms'],
  close: [],
  set: ['key', 'value', 'nx', 'nex', 'expiry_ms', 'fencing_token', 'save_version'],
  get: ['key'],
  del: ['key', 'fencing_token'],
  vdel: ['key', 'value', 'fencing_token'],
  observe: ['key', 'observer'],
  expect_notification: ['observer', 'operation', 'value'],
  flood: ['key', 'count'],
  expect_lagged: ['observer', 'total'],
  hlc: ['ms', 'counter', 'node_id'],
  lease_acquire: ['lease', 'name', 'holder', 'ttl_ms', 'save_token'],
  lease_auto_renew: ['lease', 'fraction'],
  expect_lease_event: ['lease', 'event', 'skip'],
  lease_release: ['lease'],
  lock: ['lock', 'name', 'holder', 'session', 'ttl_ms', 'timeout_ms'],
  lock_edit: ['lock', 'name', 'holder', 'key', 'ttl_ms', 'timeout_ms', 'new_value'],
  unlock: ['lock'],
  try_campaign: ['election', 'name', 'candidate', 'term_ms'],
  leader: ['election'],
  resign: ['election'],
  fill: ['prefix', 'count', 'start', 'delete'],
  scan: ['pattern'],
  scan_open: ['scan', 'pattern'],
  scan_page: ['scan'],
  scan_rest: ['scan', 'must_include'],
};
const BYTE_FIELDS = new Set(['value', 'leader', 'old']);
const VDEL_NAMES = { deleted: 'deleted', notFound: 'not_found', valueMismatch: 'value_mismatch' };

/** A scenario value as bytes: a string is its UTF-8, `{hex}` is binary. */
function bytesOf(v) {
  if (typeof v === 'string') return Buffer.from(v, 'utf8');
  if (v !== null && typeof v === 'object' && Object.keys(v).length === 1 && 'hex' in v) {
    return Buffer.from(v.hex, 'hex');
  }
  throw new Error(`not a value: ${JSON.stringify(v)}`);
}

/** Bytes as the scenarios compare them: a string if valid UTF-8, else `{hex}`. */
function canonical(b) {
  if (b === null || b === undefined) return null;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(b);
  } catch {
    return { hex: Buffer.from(b).toString('hex') };
  }
}

function validate(file, index, step) {
  assert.ok(step && typeof step === 'object', `${file} step ${index}: not an object`);
  const fields = STEPS[step.op];
  if (fields === undefined) throw new Error(`${file} step ${index}: unknown step type ${JSON.stringify(step.op)}`);
  for (const f of Object.keys(step)) {
    if (!['op', 'client', 'expect'].includes(f) && !fields.includes(f)) {
      throw new Error(`${file} step ${index}: step ${step.op} takes no field ${f}`);
    }
  }
}

function within(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing within ${WAIT_MS} ms`)), WAIT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Checks a scenario's top-level fields; the reason when Node cannot run it. */
function notRunReason(file, doc) {
  for (const k of Object.keys(doc)) {
    if (!['description', 'not_in', 'steps'].includes(k)) throw new Error(`${file}: unknown top-level field ${k}`);
  }
  for (const [lang, reason] of Object.entries(doc.not_in ?? {})) {
    if (!['rust', 'c', 'python', 'node'].includes(lang)) throw new Error(`${file}: unknown language ${lang}`);
    if (typeof reason !== 'string' || reason === '') throw new Error(`${file}: not_in.${lang} must give the reason`);
  }
  return doc.not_in?.node;
}

/** The count of notifications lost of an `ERR_LAGGED` error (its number, not its text). */
function lostOf(e) {
  assert.ok(Number.isInteger(e.missed) && e.missed > 0, `ERR_LAGGED without a count: ${e.message}`);
  return e.missed;
}

class Run {
  constructor(serverUrl, blackholePort, name) {
    const uid = `${process.pid}-${Date.now()}`;
    this.serverUrl = serverUrl;
    this.blackholePort = blackholePort;
    this.uid = `${uid}-${name}`;
    this.prefix = `scenarios/node/${uid}/${name}/`;
    this.clients = new Map();
    this.observers = new Map();
    this.tokens = new Map();
    this.leases = new Map();
    this.leaseEvents = new Map();
    this.guards = new Map();
    this.elections = new Map();
    /** Open scans and the keys their pages listed so far: name -> { scan, listed }. */
    this.scans = new Map();
  }

  subst(s) {
    return s
      .replaceAll('{server}', this.serverUrl)
      .replaceAll('{blackhole}', `mqtt://127.0.0.1:${this.blackholePort}`)
      .replaceAll('{blackhole_port}', String(this.blackholePort))
      .replaceAll('{uid}', this.uid);
  }

  key(step, field) {
    const raw = bytesOf(step[field]);
    return raw.length === 0 ? raw : Buffer.concat([Buffer.from(this.prefix), raw]);
  }

  /** Listed keys as the scan steps give them: without the run's prefix, sorted by bytes. */
  listed(keys) {
    const prefix = Buffer.from(this.prefix);
    return keys
      .map((k) => {
        assert.ok(Buffer.isBuffer(k), `a listed key is not a Buffer: ${k}`);
        assert.ok(k.subarray(0, prefix.length).equals(prefix), `${canonical(k)} lacks the run's prefix`);
        return k.subarray(prefix.length);
      })
      .sort(Buffer.compare)
      .map(canonical);
  }

  scanNamed(step) {
    const s = this.scans.get(step.scan);
    assert.ok(s, `no scan ${step.scan} is open`);
    return s;
  }

  client(step) {
    const name = step.client ?? 'a';
    const c = this.clients.get(name);
    assert.ok(c, `no client ${name} is open`);
    return c;
  }

  token(step) {
    if (step.fencing_token === undefined) return undefined;
    const t = this.tokens.get(step.fencing_token);
    assert.ok(t, `no token saved as ${step.fencing_token}`);
    return t;
  }

  async next(stream, what) {
    const r = await within(stream.next(), what);
    assert.ok(!r.done, `${what}: the stream ended`);
    return r.value;
  }

  async execute(step) {
    const out = {};
    switch (step.op) {
      case 'connect': {
        const options = {};
        if (step.url !== undefined) options.url = this.subst(step.url);
        if (step.host !== undefined) options.host = this.subst(step.host);
        if (step.tls !== undefined) options.tls = step.tls;
        if (step.connect_timeout_ms !== undefined) options.connectTimeoutMs = step.connect_timeout_ms;
        this.clients.set(step.client ?? 'a', await Client.connect(options));
        break;
      }
      case 'close': {
        const name = step.client ?? 'a';
        await this.client(step).close();
        this.clients.delete(name);
        break;
      }
      case 'set': {
        const options = {};
        if (step.nx) options.nx = true;
        if (step.nex) options.nex = true;
        if (step.expiry_ms !== undefined) options.expiryMs = step.expiry_ms;
        if (step.fencing_token !== undefined) options.fencingToken = this.token(step);
        const r = await this.client(step).set(this.key(step, 'key'), bytesOf(step.value), options);
        if (step.save_version !== undefined) this.tokens.set(step.save_version, r.version);
        out.applied = r.applied;
        break;
      }
      case 'get': {
        const got = await this.client(step).get(this.key(step, 'key'));
        out.value = canonical(got?.value ?? null);
        break;
      }
      case 'del':
        out.deleted = await this.client(step).del(this.key(step, 'key'), { fencingToken: this.token(step) });
        break;
      case 'vdel': {
        const r = await this.client(step).vdel(this.key(step, 'key'), bytesOf(step.value), {
          fencingToken: this.token(step),
        });
        out.outcome = VDEL_NAMES[r];
        break;
      }
      case 'observe': {
        const observation = this.client(step).observe(this.key(step, 'key'));
        await observation.ready;
        this.observers.set(step.observer, observation);
        break;
      }
      case 'expect_notification': {
        const n = await this.next(this.observers.get(step.observer), 'notification');
        out.operation = n.operation;
        if (n.operation === 'set') out.value = canonical(n.value);
        break;
      }
      case 'flood': {
        const c = this.client(step);
        const key = this.key(step, 'key');
        for (let i = 0; i < step.count; i++) {
          const r = await c.set(key, String(i));
          assert.ok(r.applied, `flood: SET #${i} not applied`);
        }
        break;
      }
      case 'expect_lagged': {
        const observation = this.observers.get(step.observer);
        let received = 0;
        let lost = 0;
        let lags = 0;
        while (received + lost < step.total) {
          let n;
          try {
            n = await this.next(observation, 'notification');
          } catch (e) {
            if (e.code !== 'ERR_LAGGED') throw e;
            lost += lostOf(e);
            lags += 1;
            continue;
          }
          assert.equal(n.operation, 'set', 'a flood gives set notifications only');
          received += 1;
        }
        assert.equal(received + lost, step.total);
        assert.ok(lags >= 1, `no lagged error after ${step.total} unread notifications`);
        break;
      }
      case 'hlc':
        out.text = new Hlc(step.ms, step.counter, step.node_id).toString();
        break;
      case 'lease_acquire': {
        const lease = new Lease(this.client(step), this.key(step, 'name'), bytesOf(step.holder));
        const token = await lease.acquire(step.ttl_ms);
        if (step.save_token !== undefined && token !== null) this.tokens.set(step.save_token, token);
        out.acquired = token !== null;
        this.leases.set(step.lease, lease);
        break;
      }
      case 'lease_auto_renew': {
        const lease = this.leases.get(step.lease);
        const events = lease.events();
        lease.autoRenew(step.fraction);
        this.leaseEvents.set(step.lease, events);
        break;
      }
      case 'expect_lease_event': {
        const events = this.leaseEvents.get(step.lease);
        for (;;) {
          const event = await this.next(events, 'lease event');
          if (event.type === step.event) break;
          assert.ok((step.skip ?? []).includes(event.type), `lease event ${event.type}, expected ${step.event}`);
        }
        break;
      }
      case 'lease_release':
        out.released = await this.leases.get(step.lease).release();
        break;
      case 'lock': {
        const options = step.session === undefined ? undefined : { sessionId: bytesOf(step.session) };
        const lock = new Lock(this.client(step), this.key(step, 'name'), bytesOf(step.holder), options);
        this.guards.set(step.lock, await lock.lock(step.ttl_ms, step.timeout_ms));
        out.locked = true;
        break;
      }
      case 'lock_edit': {
        const lock = new Lock(this.client(step), this.key(step, 'name'), bytesOf(step.holder));
        const newValue = step.new_value === null ? null : bytesOf(step.new_value);
        const seen = [];
        const written = await lock.edit(this.key(step, 'key'), step.ttl_ms, step.timeout_ms, async (old) => {
          seen.push(old);
          return newValue;
        });
        assert.equal(seen.length, 1, 'the edit function is called once');
        out.old = canonical(seen[0]);
        out.value = canonical(written);
        break;
      }
      case 'unlock': {
        const guard = this.guards.get(step.lock);
        assert.ok(guard, `lock ${step.lock} is not held`);
        this.guards.delete(step.lock);
        out.unlocked = await guard.unlock();
        break;
      }
      case 'try_campaign': {
        const election = new LeaderElection(this.client(step), this.key(step, 'name'), bytesOf(step.candidate));
        out.elected = (await election.tryCampaign(step.term_ms)) !== null;
        this.elections.set(step.election, election);
        break;
      }
      case 'leader':
        out.leader = canonical(await this.elections.get(step.election).leader());
        break;
      case 'resign':
        out.resigned = await this.elections.get(step.election).resign();
        break;
      case 'fill': {
        const c = this.client(step);
        const prefix = this.key(step, 'prefix');
        const start = step.start ?? 0;
        for (let i = start; i < start + step.count; i++) {
          const key = Buffer.concat([prefix, Buffer.from(String(i).padStart(4, '0'))]);
          if (step.delete === true) {
            assert.equal(await c.del(key), 1, `fill: DEL #${i}`);
          } else {
            assert.ok((await c.set(key, 'v')).applied, `fill: SET #${i} not applied`);
          }
        }
        break;
      }
      case 'scan': {
        const listed = [];
        for await (const key of this.client(step).scan(this.key(step, 'pattern'))) listed.push(key);
        out.count = listed.length;
        out.keys = this.listed(listed);
        break;
      }
      case 'scan_open':
        this.scans.set(step.scan, { scan: this.client(step).scan(this.key(step, 'pattern')), listed: [] });
        break;
      case 'scan_page': {
        const s = this.scanNamed(step);
        const page = await s.scan.nextPage();
        if (page !== null) s.listed.push(...page);
        out.done = s.scan.done;
        break;
      }
      case 'scan_rest': {
        const s = this.scanNamed(step);
        this.scans.delete(step.scan);
        for (let page = await s.scan.nextPage(); page !== null; page = await s.scan.nextPage()) {
          s.listed.push(...page);
        }
        const seen = new Set(s.listed.map((k) => k.toString('hex')));
        const prefix = Buffer.from(this.prefix);
        const missing = step.must_include
          .map((k) => Buffer.concat([prefix, bytesOf(k)]))
          .filter((k) => !seen.has(k.toString('hex')));
        out.missing = this.listed(missing);
        out.count = s.listed.length;
        break;
      }
      default:
        throw new Error(`unknown step type ${JSON.stringify(step.op)}`);
    }
    return out;
  }

  check(step, out, error) {
    const expect = step.expect ?? {};
    if (expect.error !== undefined) {
      assert.ok(error, `expected an error of kind ${expect.error}, got ${JSON.stringify(out)}`);
      if (expect.error !== 'any') {
        assert.equal(error.code, `ERR_${expect.error.toUpperCase()}`, `error code of ${error.message}`);
      }
      if (expect.service !== undefined) assert.equal(error.serviceKind, expect.service, 'service kind');
      for (const part of expect.message_contains ?? []) {
        const p = this.subst(part);
        assert.ok(error.message.includes(p), `the message ${JSON.stringify(error.message)} does not contain ${p}`);
      }
      return;
    }
    if (error) throw error;
    for (const [field, want] of Object.entries(expect)) {
      const w = BYTE_FIELDS.has(field) && want !== null ? canonical(bytesOf(want)) : want;
      assert.ok(field in out, `the step gives no ${field} (it gives ${JSON.stringify(out)})`);
      assert.deepEqual(out[field], w, field);
    }
  }

  async closeAll() {
    for (const c of this.clients.values()) await c.close();
    this.clients.clear();
  }
}

describe('shared behaviour scenarios (tests/scenarios)', () => {
  let server;
  let blackhole;
  let scenarios = 0;
  let steps = 0;
  let notRun = 0;

  before(async () => {
    server = await LocalServer.start();
    // Accepts TCP connections and never answers (not even CONNACK).
    blackhole = createServer(() => {});
    await new Promise((resolve) => blackhole.listen(0, '127.0.0.1', resolve));
  });

  after(async () => {
    blackhole?.close();
    await server?.shutdown();
    console.log(`node: ${scenarios} scenarios, ${steps} steps passed (${notRun} not run)`);
  });

  it('has scenarios', () => assert.ok(FILES.length > 0));

  for (const file of FILES) {
    it(file.replace(/\.json$/, ''), async (t) => {
      const doc = JSON.parse(readFileSync(new URL(file, DIR), 'utf8'));
      const reason = notRunReason(file, doc);
      if (reason !== undefined) {
        notRun += 1;
        t.skip(`not run in Node: ${reason}`);
        return;
      }
      const run = new Run(server.url, blackhole.address().port, file.replace(/\.json$/, ''));
      try {
        for (const [i, step] of doc.steps.entries()) {
          validate(file, i + 1, step);
          let out;
          let error;
          try {
            out = await run.execute(step);
          } catch (e) {
            if (!isMqstateError(e)) {
              e.message = `${file} step ${i + 1}: ${JSON.stringify(step)}\n  ${e.message}`;
              throw e;
            }
            error = e;
          }
          try {
            run.check(step, out, error);
          } catch (e) {
            e.message = `${file} step ${i + 1}: ${JSON.stringify(step)}\n  ${e.message}`;
            throw e;
          }
          steps += 1;
        }
      } finally {
        await run.closeAll();
      }
      scenarios += 1;
    });
  }
});
