// Browser tests of the `mqstate serve` dashboard, in Debian's headless Chromium driven by
// playwright-core. A real server (the debug binary) runs on free loopback ports; a third-party
// MQTT client (MQTT.js) plays the state store client (MQTT5) and the IoT Hub device
// (MQTT 3.1.1). Screenshots of every view go to target/dashboard-screenshots/.
//
// Run: scripts/test-dashboard (installs chromium and the npm packages first).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import mqtt from "mqtt";
import { chromium } from "playwright-core";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const bin = process.env.MQSTATE_BIN || path.join(root, "target/debug/mqstate");
const shots = path.join(root, "target/dashboard-screenshots");
const REQUEST_TOPIC = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";
// Waits are generous: the machine running this may be very busy. How long the feed took is
// printed, not asserted.
const WAIT = 20_000;

let server, serverLog = "", browser, page, client, dashboardUrl, brokerPort, devicePort;
const consoleErrors = [];

function waitForLog(pattern) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not log ${pattern}:\n${serverLog}`)), 60_000);
    const check = () => {
      const m = serverLog.match(pattern);
      if (m) { clearTimeout(timer); resolve(m); return true; }
      return false;
    };
    if (check()) return;
    server.stderr.on("data", () => check());
    server.on("exit", (code) => reject(new Error(`server exited (${code}):\n${serverLog}`)));
  });
}

// ---- a minimal state store client over MQTT5 (PROTOCOL.md: RESP3 requests) ----
const bulk = (s) => `$${Buffer.byteLength(s)}\r\n${s}\r\n`;
const command = (...args) => `*${args.length}\r\n${args.map(bulk).join("")}`;
let counter = 0;
const hlc = () => `${String(Date.now()).padStart(15, "0")}:${String(counter++ % 65536).padStart(5, "0")}:dash-test`;
const pending = new Map();

async function request(payload) {
  const id = Buffer.from(String(++counter));
  const reply = new Promise((resolve) => pending.set(id.toString(), resolve));
  await client.publishAsync(REQUEST_TOPIC, payload, {
    qos: 1,
    properties: {
      responseTopic: "clients/dash-test-client/response",
      correlationData: id,
      userProperties: { __ts: hlc() },
    },
  });
  return reply;
}

before(async () => {
  mkdirSync(shots, { recursive: true });
  server = spawn(bin, ["serve", "--port", "0", "--iothub-port", "0", "--iothub-admin-port", "0",
    "--iothub-https-port", "0", "--iothub-amqp-port", "0",
    "--dashboard-edit", "--iothub-device", "dev1", "--log", "info"], { stdio: ["ignore", "ignore", "pipe"] });
  server.stderr.setEncoding("utf8");
  server.stderr.on("data", (d) => { serverLog += d; });
  dashboardUrl = (await waitForLog(/dashboard ready url=(http:\/\/\S+)/))[1];
  brokerPort = Number(serverLog.match(/broker listening addr=127\.0\.0\.1:(\d+)/)[1]);
  devicePort = Number(serverLog.match(/devices connect to mqtt:\/\/127\.0\.0\.1:(\d+)/)[1]);

  client = await mqtt.connectAsync(`mqtt://127.0.0.1:${brokerPort}`, {
    protocolVersion: 5, clientId: "dash-test-client", reconnectPeriod: 0,
  });
  client.on("message", (_topic, payload, packet) => {
    const id = packet.properties?.correlationData?.toString();
    if (id && pending.has(id)) { pending.get(id)(payload.toString()); pending.delete(id); }
  });
  await client.subscribeAsync("clients/dash-test-client/response", { qos: 1 });

  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
});

after(async () => {
  await browser?.close();
  await client?.endAsync();
  server?.kill("SIGINT");
});

async function view(name) {
  await page.click(`#tab-${name}`);
  await page.waitForSelector(`#view-${name}:not([hidden])`);
}

test("the page loads with no console errors and follows the store", async () => {
  await page.goto(dashboardUrl);
  await page.waitForFunction(() => document.querySelector("#status").textContent === "live", null, { timeout: WAIT });
  assert.deepEqual(consoleErrors, []);
});

test("a key set by a client appears in the live feed and the key table", async () => {
  const t0 = Date.now();
  assert.equal(await request(command("SET", "app/greeting", "hello, dashboard")), "+OK\r\n");
  await page.waitForSelector('#feed li[data-kind="set"][data-key="app/greeting"]', { state: "attached", timeout: WAIT });
  const feedMs = Date.now() - t0;
  await page.waitForSelector('#keys tr[data-key="app/greeting"]', { timeout: WAIT });
  const tableMs = Date.now() - t0;
  console.log(`# SET to feed: ${feedMs} ms, to key table: ${tableMs} ms`);
  const row = await page.textContent('#keys tr[data-key="app/greeting"]');
  assert.match(row, /hello, dashboard/);
  assert.match(row, /16 B/);
  // Binary values show as hex; the prefix search filters.
  const binary = Buffer.concat([Buffer.from("*3\r\n$3\r\nSET\r\n$10\r\nbin/sample\r\n$3\r\n"),
    Buffer.from([0x00, 0x01, 0xff]), Buffer.from("\r\n")]);
  assert.equal(await request(binary), "+OK\r\n");
  await page.waitForSelector('#keys tr[data-key="bin/sample"] td.hex', { timeout: WAIT });
  await page.fill("#prefix", "app/");
  await page.waitForFunction(() => !document.querySelector('#keys tr[data-key="bin/sample"]'), null, { timeout: WAIT });
  await page.fill("#prefix", "");
  await page.waitForSelector('#keys tr[data-key="bin/sample"]', { timeout: WAIT });
});

test("an expiring key disappears", async () => {
  assert.equal(await request(command("SET", "app/ephemeral", "soon gone", "PX", "1500")), "+OK\r\n");
  await page.waitForSelector('#keys tr[data-key="app/ephemeral"]', { timeout: WAIT });
  await page.screenshot({ path: path.join(shots, "keys.png"), fullPage: true });
  await page.waitForSelector('#keys tr[data-key="app/ephemeral"]', { state: "detached", timeout: WAIT });
  await page.waitForSelector('#feed li[data-kind="expire"][data-key="app/ephemeral"]', { state: "attached", timeout: WAIT });
  await view("feed");
  await page.screenshot({ path: path.join(shots, "feed.png"), fullPage: true });
});

test("locks and KEYNOTIFY registrations are shown", async () => {
  assert.equal(await request(command("SET", "locks/printer", "holder-1", "NEX", "PX", "60000")), "+OK\r\n");
  assert.equal(await request(command("KEYNOTIFY", "app/greeting")), "+OK\r\n");
  await view("locks");
  const lock = await page.waitForSelector('#locks tbody tr:has-text("locks/printer")', { timeout: WAIT });
  assert.match(await lock.textContent(), /holder-1.*StateStore/);
  await page.screenshot({ path: path.join(shots, "locks.png"), fullPage: true });
  await view("clients");
  const row = await page.waitForSelector('#clients tbody tr:has-text("dash-test-client")', { timeout: WAIT });
  assert.match(await row.textContent(), /app\/greeting/);
  await page.screenshot({ path: path.join(shots, "clients.png"), fullPage: true });
});

test("the metrics chart shows the requests", async () => {
  await view("metrics");
  await page.waitForFunction(() => /[1-9]\d* requests since start/.test(document.querySelector("#metrics-summary").textContent), null, { timeout: WAIT });
  const points = await page.getAttribute("#chart-rate polyline", "points");
  assert.ok(points.split(" ").length >= 2, points);
  await page.screenshot({ path: path.join(shots, "metrics.png"), fullPage: true });
});

test("a C2D message sent from the form reaches the device and its state changes", async () => {
  await view("hub");
  await page.waitForSelector('#c2d-device option[value="dev1"]', { state: "attached", timeout: WAIT });
  await page.selectOption("#c2d-device", "dev1");
  await page.fill("#c2d-payload", "reboot, please");
  await page.fill("#c2d-mid", "m-dash-1");
  await page.selectOption("#c2d-ack", "full");
  await page.click('#c2d button[type="submit"]');
  await page.waitForSelector('tr[data-message-id="m-dash-1"] .state-Enqueued', { timeout: WAIT });
  await page.screenshot({ path: path.join(shots, "hub-enqueued.png"), fullPage: true });

  // The device: MQTT 3.1.1 with a SAS token from the admin API (same server, same port).
  const creds = await (await fetch(new URL("/devices/dev1/token", dashboardUrl))).json();
  const device = await mqtt.connectAsync(`mqtt://127.0.0.1:${devicePort}`, {
    protocolVersion: 4, clientId: creds.clientId, username: creds.username, password: creds.password,
    reconnectPeriod: 0,
  });
  const received = new Promise((resolve) => device.on("message", (topic, payload) => resolve({ topic, payload })));
  await device.subscribeAsync("devices/dev1/messages/devicebound/#", { qos: 1 });
  const message = await received;
  assert.equal(message.payload.toString(), "reboot, please");
  assert.match(message.topic, /%24\.mid=m-dash-1/);
  await page.waitForSelector('tr[data-message-id="m-dash-1"] .state-Completed', { timeout: WAIT });
  await page.waitForSelector('#feedback tbody tr:has-text("m-dash-1"):has-text("Success")', { timeout: WAIT });
  await page.screenshot({ path: path.join(shots, "hub.png"), fullPage: true });
  await device.endAsync();
  assert.deepEqual(consoleErrors, []);
});
