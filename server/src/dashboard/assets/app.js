// The mqstate dashboard: plain DOM code, no framework. Reads /dashboard/api/* (and the IoT
// Hub admin API on the same server), follows the store's changes over server-sent events.
"use strict";

const $ = (sel) => document.querySelector(sel);
let editable = false;
let hubRunning = false;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c ?? ""));
  return node;
}

async function getJson(url, init) {
  const res = await fetch(url, init);
  // The session ended (the server asks for credentials): back to the login page.
  if (res.status === 401) location.href = "/login";
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.message || `${res.status} ${res.statusText}`);
  return body;
}

function duration(ms) {
  if (ms === undefined || ms === null) return "never";
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 120) return `${s.toFixed(1)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

function encoded(text, encoding, cls) {
  return el("td", { class: `${cls || ""} ${encoding === "hex" ? "hex" : ""}`.trim() }, text);
}

// ----- tabs (WAI-ARIA tabs pattern: arrows move between tabs) -----
const tabs = [...document.querySelectorAll('[role="tab"]')];
function select(tab) {
  for (const t of tabs) {
    const on = t === tab;
    t.setAttribute("aria-selected", String(on));
    t.tabIndex = on ? 0 : -1;
    document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
  }
  history.replaceState(null, "", `#${tab.id.slice(4)}`);
  refreshVisible();
}
tabs.forEach((t, i) => {
  t.addEventListener("click", () => select(t));
  t.addEventListener("keydown", (e) => {
    const step = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
    if (!step) return;
    const next = tabs[(i + step + tabs.length) % tabs.length];
    next.focus();
    select(next);
  });
});

// ----- keys -----
// The table shows one page of the store's keys, read with the same scan as SCAN; `pageToken`
// is where the shown page starts (null: the first), so a reload after a change stays on it.
let pageToken = null;
let nextToken = null;

function keysUrl(token) {
  const filter = $("#prefix").value;
  const field = $("#filter-mode").value === "glob" ? "pattern" : "prefix";
  const params = new URLSearchParams();
  // An empty prefix is every key; an empty glob too.
  params.set(field, field === "pattern" ? (filter || "*") : filter);
  if (token) params.set("token", token);
  return `/dashboard/api/keys?${params}`;
}

async function loadKeys() {
  let data;
  try {
    data = await getJson(keysUrl(pageToken));
  } catch (e) {
    $("#key-count").textContent = e.message;
    throw e;
  }
  const rows = data.keys.map((k) => {
    const tr = el("tr", { "data-key": k.key },
      encoded(k.key, k.keyEncoding, "mono"),
      encoded(k.value, k.valueEncoding, "value"),
      el("td", {}, `${k.size} B`),
      el("td", { class: "mono" }, k.version),
      el("td", { class: "mono" }, k.fencingToken || "—"),
      el("td", {}, duration(k.ttlMs)));
    if (editable) {
      const del = el("button", { type: "button", "aria-label": `Delete key ${k.key}` }, "Delete");
      del.addEventListener("click", () => deleteKey(k.key));
      tr.append(el("td", {}, del));
    }
    return tr;
  });
  $("#keys tbody").replaceChildren(...rows);
  nextToken = data.next;
  $("#keys-next").hidden = !nextToken;
  $("#keys-first").hidden = !pageToken;
  $("#key-count").textContent = `${data.keys.length} shown` +
    (nextToken ? ", more on the next page" : "") +
    ` · ${data.count} key${data.count === 1 ? "" : "s"} in the store`;
}

function reloadKeys(token) {
  pageToken = token;
  loadKeys().catch(report);
}

async function deleteKey(key) {
  try {
    await getJson(`/dashboard/api/keys?key=${encodeURIComponent(key)}`, { method: "DELETE" });
  } catch (e) { setStatus(`delete failed: ${e.message}`); }
}

$("#key-search").addEventListener("submit", (e) => { e.preventDefault(); reloadKeys(null); });
$("#prefix").addEventListener("input", () => reloadKeys(null));
$("#filter-mode").addEventListener("change", () => reloadKeys(null));
$("#keys-next").addEventListener("click", () => reloadKeys(nextToken));
$("#keys-first").addEventListener("click", () => reloadKeys(null));
$("#key-set").addEventListener("submit", async (e) => {
  e.preventDefault();
  const ttl = $("#set-ttl").value;
  const body = { key: $("#set-key").value, value: $("#set-value").value };
  if (ttl) body.ttlMs = Number(ttl);
  try {
    await getJson("/dashboard/api/keys", {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
    });
  } catch (err) { setStatus(`set failed: ${err.message}`); }
});

// ----- live feed -----
let lastSeq = 0;
let keysTimer = null;
function onChange(c) {
  if (c.seq <= lastSeq) return; // replayed backlog after a reconnect
  lastSeq = c.seq;
  const value = c.kind === "set"
    ? [" = ", el("span", { class: c.valueEncoding === "hex" ? "hex" : "" }, c.value)] : [];
  const li = el("li", { "data-kind": c.kind, "data-key": c.key },
    el("span", { class: `kind kind-${c.kind}` }, c.kind.toUpperCase()), " ",
    el("span", { class: c.keyEncoding === "hex" ? "hex" : "" }, c.key), ...value, " ",
    el("span", { class: "muted" }, `${c.at.slice(11, 23)}${c.version ? ` · ${c.version}` : ""}`));
  const feed = $("#feed");
  feed.prepend(li);
  while (feed.children.length > 200) feed.lastElementChild.remove();
  // The key table follows the feed at once (coalescing bursts).
  clearTimeout(keysTimer);
  keysTimer = setTimeout(() => loadKeys().catch(report), 50);
}

function follow() {
  const source = new EventSource("/dashboard/api/changes");
  source.addEventListener("change", (e) => onChange(JSON.parse(e.data)));
  source.addEventListener("lagged", () => setStatus("the feed fell behind; some changes are not shown"));
  source.addEventListener("open", () => setStatus("live"));
  source.addEventListener("error", () => setStatus("feed disconnected, retrying…"));
}

// ----- locks, clients -----
async function loadLocks() {
  const leases = await getJson("/dashboard/api/leases");
  $("#locks tbody").replaceChildren(...leases.map((l) => el("tr", {},
    el("td", { class: "mono" }, l.key), el("td", {}, l.holder),
    el("td", { class: "mono" }, l.token), el("td", {}, duration(l.ttlMs)))));
  if (!leases.length) $("#locks tbody").append(el("tr", {}, el("td", { colspan: 4, class: "muted" }, "No lease or lock is held.")));
}

async function loadClients() {
  const clients = await getJson("/dashboard/api/clients");
  $("#clients tbody").replaceChildren(...clients.map((c) => el("tr", {},
    el("td", { class: "mono" }, c.clientId), el("td", {}, c.connections),
    el("td", { class: "mono" }, c.keynotify.join(", ") || "—"))));
}

// ----- metrics -----
function chart(svg, values, unit) {
  const w = 600, h = 120, pad = 16;
  const max = Math.max(1, ...values);
  const step = (w - pad) / Math.max(1, values.length - 1);
  const points = values.map((v, i) => `${(pad + i * step).toFixed(1)},${(h - pad - (v / max) * (h - 2 * pad)).toFixed(1)}`).join(" ");
  const title = svg.querySelector("title");
  svg.replaceChildren(title);
  const ns = "http://www.w3.org/2000/svg";
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points);
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", pad); label.setAttribute("y", 11);
  label.textContent = `max ${max} ${unit}`;
  svg.append(line, label);
}

async function loadMetrics() {
  const m = await getJson("/dashboard/api/metrics");
  chart($("#chart-rate"), m.requests, "req/s");
  chart($("#chart-p99"), m.p99Micros, "µs");
  const recent = m.requests.slice(-60).reduce((a, b) => a + b, 0);
  $("#metrics-summary").textContent = `${m.totalRequests} requests since start; ${(recent / 60).toFixed(1)} per second over the last minute.`;
}

// ----- IoT Hub -----
async function loadHub() {
  if (!hubRunning) { $("#hub-missing").hidden = false; return; }
  const devices = await getJson("/devices");
  const queues = await Promise.all(devices.map((d) => getJson(`/devices/${encodeURIComponent(d.deviceId)}/messages/devicebound`)));
  const select = $("#c2d-device");
  const chosen = select.value;
  select.replaceChildren(...devices.map((d) => el("option", { value: d.deviceId }, d.deviceId)));
  if (chosen) select.value = chosen;
  $("#devices").replaceChildren(...devices.map((d, i) => {
    const q = queues[i];
    const msgs = [...q.messages, ...q.finished];
    const body = msgs.map((m) => el("tr", { "data-message-id": m.messageId || "" },
      el("td", { class: "mono" }, m.sequenceNumber), el("td", { class: "mono" }, m.messageId || "—"),
      el("td", {}, el("span", { class: `state state-${m.state}` }, m.state)),
      el("td", {}, m.deliveryCount), el("td", {}, m.ack), el("td", { class: "mono" }, m.expiryTimeUtc),
      el("td", {}, m.statusCode || "")));
    const section = el("section", { class: "device", "aria-label": `Device ${d.deviceId}` },
      el("h4", {}, `${d.deviceId} `, el("span", { class: "muted" }, `${d.connectionState} · ${q.depth}/${q.maxDepth} in queue`)));
    if (editable) {
      const purge = el("button", { type: "button" }, `Purge ${d.deviceId}'s queue`);
      purge.addEventListener("click", () => getJson(`/dashboard/api/devices/${encodeURIComponent(d.deviceId)}/messages`, { method: "DELETE" }).then(loadHub).catch(report));
      section.append(purge);
    }
    section.append(el("table", {},
      el("thead", {}, el("tr", {}, ...["Seq", "Message id", "State", "Deliveries", "Ack", "Expires", "Outcome"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, ...body)));
    return section;
  }));
  const feedback = await getJson("/dashboard/api/feedback");
  $("#feedback tbody").replaceChildren(...feedback.slice().reverse().map((f) => el("tr", {},
    el("td", { class: "mono" }, f.originalMessageId || "—"), el("td", {}, f.deviceId),
    el("td", {}, f.statusCode), el("td", { class: "mono" }, f.enqueuedTimeUtc))));
}

$("#c2d").addEventListener("submit", async (e) => {
  e.preventDefault();
  const device = $("#c2d-device").value;
  const body = { payload: $("#c2d-payload").value, ack: $("#c2d-ack").value };
  if ($("#c2d-mid").value) body.messageId = $("#c2d-mid").value;
  if ($("#c2d-ttl").value) body.ttlSecs = Number($("#c2d-ttl").value);
  try {
    const r = await getJson(`/dashboard/api/devices/${encodeURIComponent(device)}/messages`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
    });
    $("#c2d-result").textContent = `sent to ${device} (sequence number ${r.sequenceNumber ?? "?"})`;
    await loadHub();
  } catch (err) { $("#c2d-result").textContent = `not sent: ${err.message}`; }
});

// ----- refresh -----
function setStatus(text) { $("#status").textContent = text; }
function report(e) { setStatus(`error: ${e.message}`); }

function refreshVisible() {
  const tab = tabs.find((t) => t.getAttribute("aria-selected") === "true");
  const load = { "tab-keys": loadKeys, "tab-locks": loadLocks, "tab-clients": loadClients,
    "tab-metrics": loadMetrics, "tab-hub": loadHub }[tab.id];
  if (load) load().catch(report);
}

async function start() {
  const info = await getJson("/dashboard/api/info");
  editable = info.edit;
  hubRunning = info.iothub;
  for (const node of document.querySelectorAll(".edit")) node.hidden = !editable;
  const initial = tabs.find((t) => t.id === `tab-${location.hash.slice(1)}`) || tabs[0];
  select(initial);
  follow();
  setInterval(refreshVisible, 1000); // time to expiry counts down; the hub has no feed
}

start().catch(report);
