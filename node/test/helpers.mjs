// Shared by the suites: a local server per suite, clients that are closed after each suite,
// and bounded polling.
import { after, before } from 'node:test';
import { readFileSync } from 'node:fs';
import { Client, LocalServer } from '../index.js';

/** Starts a local server before the suite's tests and stops it (and every client) after. */
export function localServer(options) {
  const ctx = { server: undefined, clients: [] };
  before(async () => {
    ctx.server = await LocalServer.start(options);
  });
  after(async () => {
    await Promise.all(ctx.clients.map((c) => c.close()));
    await ctx.server?.shutdown();
  });
  ctx.connect = async (opts = {}) => {
    const c = await Client.connect({ url: ctx.server.url, ...opts });
    ctx.clients.push(c);
    return c;
  };
  return ctx;
}

/** A key unique to this process and call. */
let n = 0;
export function uniqueKey(prefix = 'k') {
  return `${prefix}-${process.pid}-${++n}-${Date.now()}`;
}

/** Waits until `check()` is truthy, polling, for at most `ms`. */
export async function eventually(check, ms = 5000, what = 'condition') {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** A shared test vector file of tests/vectors/. */
export function vectors(name) {
  return JSON.parse(readFileSync(new URL(`../../tests/vectors/${name}`, import.meta.url), 'utf8'));
}
