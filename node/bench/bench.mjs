#!/usr/bin/env node
// Micro-benchmark: Node `get` ops/s with 64 requests in flight, next to the Rust client's
// figure measured in the same run, against the same local server (in a child process), and
// their ratio (target: >= 0.8). Build the addon in release mode first:
//
//   npm run build:release && node bench/bench.mjs [--n 20000] [--depth 64] [--rounds 5]
//
// Each round measures both, back to back (alternating which goes first); the best of each
// and the median of the per-round ratios are reported.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Client, benchRustGet } from '../index.js';

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}
const N = arg('n', 20000);
const DEPTH = arg('depth', 64);
const ROUNDS = arg('rounds', 5);

async function startServer() {
  const child = spawn(process.execPath, [fileURLToPath(new URL('./server.mjs', import.meta.url))], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  const [url] = await once(lines, 'line');
  return { url, stop: () => { child.stdin.end(); return once(child, 'exit'); } };
}

async function nodeGets(client, key, n, depth) {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      next++;
      const got = await client.get(key);
      if (got === null) throw new Error('benchmark key missing');
    }
  };
  const started = process.hrtime.bigint();
  await Promise.all(Array.from({ length: depth }, worker));
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  return n / secs;
}

const server = await startServer();
try {
  const client = await Client.connect(server.url);
  const key = 'mqstate-bench-node';
  await client.set(key, Buffer.alloc(32, 0x5a));
  // Warm-up of both.
  await nodeGets(client, key, Math.min(N, 5000), DEPTH);
  await benchRustGet(server.url, Math.min(N, 5000), DEPTH);
  const rounds = [];
  for (let round = 1; round <= ROUNDS; round++) {
    // Alternate which one goes first, so that neither always runs on a warmer machine.
    let r;
    let j;
    if (round % 2 === 1) {
      r = await benchRustGet(server.url, N, DEPTH);
      j = await nodeGets(client, key, N, DEPTH);
    } else {
      j = await nodeGets(client, key, N, DEPTH);
      r = await benchRustGet(server.url, N, DEPTH);
    }
    rounds.push({ r, j });
    console.log(`round ${round}: rust ${r.toFixed(0)} ops/s, node ${j.toFixed(0)} ops/s, ratio ${(j / r).toFixed(2)}`);
  }
  await client.close();
  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    const m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
  };
  const rust = Math.max(...rounds.map((x) => x.r));
  const node = Math.max(...rounds.map((x) => x.j));
  console.log(`get, ${DEPTH} in flight, ${N} ops per run, ${ROUNDS} rounds:`);
  console.log(`  rust  ${rust.toFixed(0).padStart(8)} ops/s (best)`);
  console.log(`  node  ${node.toFixed(0).padStart(8)} ops/s (best)`);
  console.log(`  ratio ${(node / rust).toFixed(2)} best/best, ${median(rounds.map((x) => x.j / x.r)).toFixed(2)} median of the rounds (node / rust; target >= 0.8)`);
} finally {
  await server.stop();
}
