#!/usr/bin/env node
// Micro-benchmark: Node `get` ops/s with 64 requests in flight, next to the Rust client's
// figure measured in the same run, against the same local server (in a child process), and
// their ratio (issue 19 asks >= 0.9). Build the addon in release mode first:
//
//   npm run build:release && node bench/bench.mjs [--n 20000] [--depth 64] [--rounds 5]
//
// Each round measures both, back to back (alternating which goes first); the best of each
// and the median of the per-round ratios are reported. On Linux it also prints the CPU time
// each run used per request: Node's JS thread, this process's other threads (the addon's
// runtime workers, libuv and V8), and the server's process.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, readdirSync } from 'node:fs';
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
  return { url, pid: child.pid, stop: () => { child.stdin.end(); return once(child, 'exit'); } };
}

// User + system CPU seconds from a /proc stat file (fields 14 and 15, after the command name).
const TICKS_PER_SEC = 100; // USER_HZ, 100 on Linux
function statSeconds(path) {
  const fields = readFileSync(path, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SEC;
}

// CPU seconds used so far: [JS thread, this process's other threads, the server process],
// or null where /proc is missing (not Linux).
function cpuNow(serverPid) {
  try {
    let js = 0;
    let others = 0;
    for (const tid of readdirSync('/proc/self/task')) {
      let used;
      try {
        used = statSeconds(`/proc/self/task/${tid}/stat`);
      } catch {
        continue; // the thread ended meanwhile
      }
      if (Number(tid) === process.pid) js += used;
      else others += used;
    }
    return [js, others, statSeconds(`/proc/${serverPid}/stat`)];
  } catch {
    return null;
  }
}

// Runs `run` (n requests) and returns [ops/s, CPU µs per request per part or null].
async function measured(serverPid, n, run) {
  const before = cpuNow(serverPid);
  const rate = await run();
  const after = cpuNow(serverPid);
  const cpu = before && after ? after.map((a, i) => ((a - before[i]) * 1e6) / n) : null;
  return [rate, cpu];
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
    const rustRun = () => measured(server.pid, N, () => benchRustGet(server.url, N, DEPTH));
    const nodeRun = () => measured(server.pid, N, () => nodeGets(client, key, N, DEPTH));
    let r;
    let j;
    let rCpu;
    let jCpu;
    if (round % 2 === 1) {
      [r, rCpu] = await rustRun();
      [j, jCpu] = await nodeRun();
    } else {
      [j, jCpu] = await nodeRun();
      [r, rCpu] = await rustRun();
    }
    rounds.push({ r, j, rCpu, jCpu });
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
  console.log(`  ratio ${(node / rust).toFixed(2)} best/best, ${median(rounds.map((x) => x.j / x.r)).toFixed(2)} median of the rounds (node / rust; issue 19 asks >= 0.9)`);
  if (rounds.every((x) => x.rCpu && x.jCpu)) {
    const row = (name, pick) => {
      const parts = [0, 1, 2].map((i) => median(rounds.map((x) => pick(x)[i])));
      const total = parts.reduce((a, b) => a + b, 0);
      const cells = parts.map((v) => v.toFixed(1).padStart(7)).join(' +');
      console.log(`  ${name}${cells} = ${total.toFixed(1).padStart(6)}`);
    };
    console.log('CPU µs per request, medians: JS thread + other threads + server process');
    row('rust', (x) => x.rCpu);
    row('node', (x) => x.jCpu);
  }
} finally {
  await server.stop();
}
