'use strict';
// Starts `mqstate serve` for the official-SDK tests, in the current process's network namespace.
//
// The official SDKs hard-code their ports (registry HTTPS 443, AMQPS 5671, device MQTT 8883), so
// the hub listens on exactly those: scripts/test-iothub-sdk runs each test file inside a network
// namespace of its own (`unshare -rnm`), where they are free and where nothing else can collide.
// Within one file the tests run one after the other; a file starts one hub (or more, in turn).
//
// TLS: Node reads NODE_EXTRA_CA_CERTS once, when the process starts (a file that appears later is
// ignored), and every `mqstate serve --iothub-tls` generates a new certificate. So for the Node
// SDKs the runner makes a CA and a server certificate per run (openssl): MQSTATE_SDK_TLS_CERT and
// MQSTATE_SDK_TLS_KEY, which the hub serves (--iothub-tls-cert/--iothub-tls-key) on all its TLS
// endpoints (MQTT 8883, HTTPS 443, AMQPS 5671), and the CA in MQSTATE_SDK_TLS_CA and
// NODE_EXTRA_CA_CERTS. Without those variables the hub generates its certificate (--iothub-tls
// --iothub-ca-out): what the Python tests use (their SDKs take a CA per client or per request).
//
// Environment: MQSTATE_BIN (the binary; default target/debug/mqstate of the checkout),
// MQSTATE_SDK_LOG_DIR (where each hub's output is kept; default a temporary directory),
// MQSTATE_SDK_TLS_CERT, MQSTATE_SDK_TLS_KEY, MQSTATE_SDK_TLS_CA (see above),
// MQSTATE_SDK_PID_DIR (an empty file named after each server's pid, while it runs).

const { spawn, execFile } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const BIN = process.env.MQSTATE_BIN || path.join(ROOT, 'target', 'debug', 'mqstate');
const HOST = 'localhost';
const PORTS = { https: 443, amqps: 5671, mqtts: 8883, admin: 8880 };
const ADMIN_URL = `http://127.0.0.1:${PORTS.admin}`;
let hubCount = 0;

/** A random device key (base64 of 32 bytes), as IoT Hub generates them. */
function newKey() {
    return crypto.randomBytes(32).toString('base64');
}

function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Rejects with a clear message when `promise` takes longer than `ms` (a hang fails the test);
 * its own rejection gets `what` in front of its message.
 */
function within(ms, promise, what) {
    let timer;
    const timeout = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    });
    const annotated = Promise.resolve(promise).catch((err) => {
        if (err instanceof Error && !err.message.startsWith(`${what}: `)) err.message = `${what}: ${err.message}`;
        throw err;
    });
    return Promise.race([annotated, timeout]).finally(() => clearTimeout(timer));
}

function canConnect(port) {
    return new Promise((resolve) => {
        const socket = net.connect({ host: '127.0.0.1', port });
        socket.once('connect', () => { socket.destroy(); resolve(true); });
        socket.once('error', () => resolve(false));
    });
}

async function adminReady() {
    try {
        const res = await fetch(`${ADMIN_URL}/hub`);
        await res.arrayBuffer();
        return res.ok;
    } catch {
        return false;
    }
}

function run(file, args, env) {
    return new Promise((resolve, reject) => {
        execFile(file, args, { env: { ...process.env, ...env }, timeout: 15000 }, (err, stdout, stderr) => {
            if (err) {
                reject(new Error(`${path.basename(file)} ${args.join(' ')} failed: ${err.message}\n${stderr}`));
            } else {
                resolve(stdout);
            }
        });
    });
}

function tail(file, lines = 40) {
    try {
        return fs.readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
    } catch {
        return '';
    }
}

/**
 * Starts a hub and waits until its admin API, HTTPS, AMQPS and MQTT endpoints accept connections.
 *
 * options.devices: device ids to register at start (each gets a random key);
 * options.args: more `mqstate serve` flags (e.g. ['--iothub-lock-timeout', '1s']).
 *
 * The hub: hostName, caFile, adminUrl, log (its output file), pid,
 * deviceKey(id), deviceConnectionString(id), connectionString(policy = 'iothubowner'),
 * serviceConnectionString ('service' policy), ownerConnectionString, stop().
 */
async function startHub(options = {}) {
    const n = ++hubCount;
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mqstate-sdk-'));
    const logDir = process.env.MQSTATE_SDK_LOG_DIR || dir;
    fs.mkdirSync(logDir, { recursive: true });
    const label = (options.name || path.basename(require.main ? require.main.filename : 'hub', '.js'))
        .replace(/[^A-Za-z0-9_.-]/g, '_');
    const log = path.join(logDir, `${label}-${process.pid}-${n}.log`);
    const ownCert = process.env.MQSTATE_SDK_TLS_CERT;
    const ownKey = process.env.MQSTATE_SDK_TLS_KEY;
    const generated = !(ownCert && ownKey) || options.generatedCertificate;
    const caFile = generated ? path.join(dir, 'ca.pem') : (process.env.MQSTATE_SDK_TLS_CA || ownCert);
    const keys = new Map();
    const args = [
        'serve',
        '--no-dashboard',
        '--iothub-hostname', HOST,
        ...(generated
            ? ['--iothub-tls', '--iothub-ca-out', caFile]
            : ['--iothub-tls-cert', ownCert, '--iothub-tls-key', ownKey]),
        '--iothub-port', String(PORTS.mqtts),
        '--iothub-https-port', String(PORTS.https),
        '--iothub-amqp-port', String(PORTS.amqps),
        '--iothub-admin-port', String(PORTS.admin),
    ];
    for (const id of options.devices || []) {
        const key = newKey();
        keys.set(id, key);
        args.push('--iothub-device', `${id}:${key}`);
    }
    args.push(...(options.args || []));

    const out = fs.openSync(log, 'w');
    fs.writeSync(out, `$ ${BIN} ${args.join(' ')}\n`);
    const child = spawn(BIN, args, { stdio: ['ignore', out, out], env: { ...process.env, RUST_LOG: process.env.RUST_LOG || 'info' } });
    fs.closeSync(out);
    // The runner stops servers left behind by a killed test through these files (by pid).
    const pidFile = process.env.MQSTATE_SDK_PID_DIR ? path.join(process.env.MQSTATE_SDK_PID_DIR, String(child.pid)) : null;
    if (pidFile) fs.writeFileSync(pidFile, '');
    let exited = null;
    child.on('exit', (code, signal) => {
        exited = { code, signal };
        if (pidFile) fs.rmSync(pidFile, { force: true });
    });

    const deadline = Date.now() + 20000;
    const waiting = new Set(['certificate', 'admin API', PORTS.https, PORTS.amqps, PORTS.mqtts]);
    for (;;) {
        if (exited) {
            throw new Error(`mqstate serve exited (${JSON.stringify(exited)}) before it was ready; its output:\n${tail(log)}`);
        }
        if (waiting.has('certificate') && fs.existsSync(caFile)) waiting.delete('certificate');
        if (waiting.has('admin API') && (await adminReady())) waiting.delete('admin API');
        if (!waiting.has('admin API')) {
            // Each endpoint is probed until it accepts once (a probe is a TLS handshake cut short,
            // which the hub logs).
            for (const port of [PORTS.https, PORTS.amqps, PORTS.mqtts]) {
                if (waiting.has(port) && (await canConnect(port))) waiting.delete(port);
            }
        }
        if (waiting.size === 0) break;
        if (Date.now() > deadline) {
            child.kill('SIGKILL');
            throw new Error(`mqstate serve was not ready within 20 s (still waiting for: ${[...waiting].join(', ')}); its output:\n${tail(log)}`);
        }
        await sleep(50);
    }

    const cache = new Map();
    const hub = {
        hostName: HOST,
        caFile,
        generatedCertificate: generated,
        adminUrl: ADMIN_URL,
        log,
        pid: child.pid,
        ports: PORTS,
        deviceKey(id) {
            if (!keys.has(id)) throw new Error(`device ${id} was not registered at start`);
            return keys.get(id);
        },
        deviceConnectionString(id, key = hub.deviceKey(id)) {
            return `HostName=${HOST};DeviceId=${id};SharedAccessKey=${key}`;
        },
        /** `mqstate iothub connection-string --policy NAME`, as a user would get it. */
        async connectionString(policy = 'iothubowner') {
            if (!cache.has(policy)) {
                const stdout = await run(BIN, ['iothub', 'connection-string', '--policy', policy], { MQSTATE_IOTHUB_URL: ADMIN_URL });
                const cs = stdout.trim().split('\n').pop().trim();
                if (!/^HostName=[^;]+;SharedAccessKeyName=[^;]+;SharedAccessKey=[^;]+$/.test(cs)) {
                    throw new Error(`unexpected output of mqstate iothub connection-string --policy ${policy}: ${JSON.stringify(stdout)}`);
                }
                cache.set(policy, cs);
            }
            return cache.get(policy);
        },
        /** The hub's output so far (for failure messages). */
        output(lines = 60) {
            return tail(log, lines);
        },
        async stop() {
            if (exited) return;
            const gone = new Promise((resolve) => child.once('exit', resolve));
            process.kill(child.pid, 'SIGTERM');
            const timer = setTimeout(() => { if (!exited) process.kill(child.pid, 'SIGKILL'); }, 5000);
            await gone;
            clearTimeout(timer);
            fs.rmSync(dir, { recursive: true, force: true });
        },
    };
    hub.ownerConnectionString = await hub.connectionString('iothubowner');
    hub.serviceConnectionString = await hub.connectionString('service');
    return hub;
}

module.exports = { startHub, newKey, sleep, within, BIN, ROOT, HOST, PORTS, ADMIN_URL };
