// Node exits by itself once the client is closed or its observations dropped: the native
// module leaves no handle that keeps the event loop alive. Each scenario runs in a child
// process that must exit (code 0) within a bound, without calling process.exit().
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { localServer } from './helpers.mjs';

const ctx = localServer();
const INDEX = fileURLToPath(new URL('../index.js', import.meta.url));
const BOUND_MS = 10_000;

/** Runs `body` (an async function body, with `Client`, `Lease`, ... and `url` in scope) in
 * a child Node process; resolves with its stdout once it exited by itself. */
function child(body, bound = BOUND_MS) {
  const script = `
    const { Client, LocalServer, Lease, Lock, LeaderElection } = require(${JSON.stringify(INDEX)});
    const url = process.env.MQSTATE_URL;
    (async () => { ${body} })().then(
      () => console.log('body done'),
      (e) => { console.error(e); process.exitCode = 3; },
    );
  `;
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const p = execFile(
      process.execPath,
      ['-e', script],
      { env: { ...process.env, MQSTATE_URL: ctx.server.url }, timeout: bound, killSignal: 'SIGKILL' },
      (error, stdout, stderr) => {
        const ms = Date.now() - started;
        if (error) {
          reject(new Error(`child did not exit cleanly within ${bound} ms (${ms} ms, ${error.signal ?? error.code}): ${stderr}`));
        } else {
          resolve({ stdout, ms });
        }
      },
    );
    p.stdin?.end();
  });
}

describe('the process exits by itself', () => {
  it('after close(), with an observation that was iterated and one never read', async () => {
    const { stdout } = await child(`
      const c = await Client.connect(url);
      await c.set('exit-k', 'v');
      if ((await c.get('exit-k')).value.toString() !== 'v') throw new Error('bad value');
      const o = c.observe('exit-k');
      await o.ready;
      await c.set('exit-k', 'w');
      for await (const n of o) break;
      const unread = c.observe('exit-other');
      await unread.ready;
      await Promise.all(Array.from({ length: 100 }, () => c.get('exit-k')));
      await c.close();
    `);
    assert.match(stdout, /body done/);
  });

  it('after close(), while a for await loop is waiting (it ends)', async () => {
    const { stdout } = await child(`
      const c = await Client.connect(url);
      const o = c.observe('exit-waiting');
      await o.ready;
      setTimeout(() => c.close(), 100);
      for await (const n of o) throw new Error('unexpected notification');
      console.log('loop ended');
    `);
    assert.match(stdout, /loop ended/);
  });

  it('without close(), once the calls settled and the observations were dropped', async () => {
    const { stdout } = await child(`
      const c = await Client.connect(url);
      await c.set('exit-k2', 'v');
      const o = c.observe('exit-k2');
      await o.ready;
      await c.set('exit-k2', 'x');
      for await (const n of o) break;
      const unread = c.observe('exit-k3'); // registered, never read, never closed
      await unread.ready;
    `);
    assert.match(stdout, /body done/);
  });

  it('without close(), with a scan broken out of early and one never paged', async () => {
    const { stdout } = await child(`
      const c = await Client.connect(url);
      const p = 'exit-scan-' + process.pid + '/';
      await Promise.all(Array.from({ length: 600 }, (_, i) => c.set(p + i, 'v')));
      for await (const key of c.scan(p + '*')) break;
      const unread = c.scan(p + '*'); // made, never paged
      const half = c.scan(p + '*');
      await half.nextPage(); // one page of two, the other never asked
    `);
    assert.match(stdout, /body done/);
  });

  it('with a lease renewed automatically, after close()', async () => {
    const { stdout } = await child(`
      const c = await Client.connect(url);
      const lease = new Lease(c, 'exit-lease-' + process.pid, 'me');
      await lease.acquire(1000);
      lease.autoRenew(0.2);
      const events = lease.events();
      const e = await events.next();
      if (e.value.type !== 'renewed') throw new Error('expected a renewal, got ' + e.value.type);
      const pending = events.next(); // ends when the client closes
      await c.close();
      if (!(await pending).done) throw new Error('events did not end');
    `);
    assert.match(stdout, /body done/);
  });

  it('with its own LocalServer, after shutdown()', async () => {
    const { stdout } = await child(`
      const s = await LocalServer.start();
      const c = await Client.connect(s.url);
      await c.set('k', 'v');
      await c.close();
      await s.shutdown();
    `);
    assert.match(stdout, /body done/);
  });

  it('does NOT exit while a call is pending (control: the bound is meaningful)', async () => {
    await assert.rejects(
      child(`
        const c = await Client.connect(url);
        const lease = new Lease(c, 'exit-held-' + process.pid, 'a');
        await lease.acquire(60_000);
        const other = await Client.connect(url);
        // Waits (up to a minute) for a lease that stays held: Node must stay alive.
        await new Lease(other, 'exit-held-' + process.pid, 'b').acquireWait(60_000, 60_000);
      `, 2000),
      /did not exit cleanly/,
    );
  });
});
