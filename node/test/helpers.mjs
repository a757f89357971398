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

/**
 * A broker that accepts MQTT5 connections and subscriptions and then never answers anything
 * (no state store behind it): requests stay unanswered, to test timeouts deterministically.
 * It speaks just enough MQTT5: CONNACK to CONNECT, SUBACK (granted QoS 1) to SUBSCRIBE.
 * Resolves to `{ url, close() }`.
 */
export async function silentBroker() {
  const { createServer } = await import('node:net');
  const sockets = new Set();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let buf = Buffer.alloc(0);
    socket.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      for (;;) {
        // Fixed header: type byte, then the remaining length as a variable byte integer.
        let len = 0;
        let mult = 1;
        let i = 1;
        for (; i < buf.length && i <= 4; i++) {
          len += (buf[i] & 0x7f) * mult;
          mult *= 128;
          if ((buf[i] & 0x80) === 0) break;
        }
        if (i >= buf.length || buf.length < i + 1 + len) return; // incomplete
        const type = buf[0] >> 4;
        const body = buf.subarray(i + 1, i + 1 + len);
        buf = buf.subarray(i + 1 + len);
        if (type === 1) {
          // CONNACK: no session present, success, no properties.
          socket.write(Buffer.from([0x20, 0x03, 0x00, 0x00, 0x00]));
        } else if (type === 8) {
          // SUBSCRIBE: packet id, properties, then filters (each: length, text, options).
          let p = 2;
          let plen = 0;
          let pm = 1;
          for (;;) {
            const b = body[p++];
            plen += (b & 0x7f) * pm;
            pm *= 128;
            if ((b & 0x80) === 0) break;
          }
          p += plen;
          let filters = 0;
          while (p < body.length) {
            p += 2 + body.readUInt16BE(p) + 1;
            filters++;
          }
          const codes = Array(filters).fill(0x01);
          socket.write(Buffer.from([0x90, 3 + filters, body[0], body[1], 0x00, ...codes]));
        }
        // Anything else (PUBLISH, PINGREQ, DISCONNECT...) gets no answer.
      }
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    url: `mqtt://127.0.0.1:${port}`,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
