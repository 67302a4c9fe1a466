// permafrost dashboard: plain JavaScript, no build step. Reads /_permafrost/api/v1 with the session cookie of
// the root user's login, follows the event stream, and never asks for anything that wakes a disk. Two views:
// the grid (the page's address without a fragment) and the access keys (#keys). A new key's secret is shown
// once in the page and kept nowhere else: never in the address, storage or the console.
"use strict";

const API = "/_permafrost/api/v1";
const STATES = {
  off: { symbol: "○", word: "off" },
  spinning_up: { symbol: "◐", word: "spinning up" },
  idle: { symbol: "●", word: "idle" },
  active: { symbol: "▶", word: "active" },
  failed: { symbol: "✖", word: "failed" },
};
const ROLE_PREFIX = { data: "D", hp: "hP", vp: "vP" };

const $ = (id) => document.getElementById(id);
let state = null;        // the last GET /state
let source = null;       // the EventSource
let watts = [];          // [time ms, watts] for the chart
let pollTimer = null;
let dialogDisk = null;
let keys = [];           // the last GET /keys
let selectedKey = null;  // the name of the key shown in detail
let audit = new Map();   // its audit events shown, by id
let keysTimer = null;

class Unauthorized extends Error {}

async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (method !== "GET") headers["X-Permafrost-Csrf"] = "1";
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(API + path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) throw new Unauthorized();
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.message || `${method} ${path}: HTTP ${response.status}`);
  return data;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString();
}

function text(el, value) { el.textContent = value; return el; }

function make(tag, cls, content) {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (content !== undefined) el.textContent = content;
  return el;
}

// ---------------------------------------------------------------- login

function showLogin(message) {
  $("main").hidden = true;
  $("login").hidden = false;
  $("keys-view").hidden = true;
  for (const id of ["nav", "logout", "persist-all", "scrub-overdue"]) $(id).hidden = true;
  hideSecret();
  text($("login-error"), message || "");
  if (source) { source.close(); source = null; }
  if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
  setConnection("logged out", "down");
}

async function login(event) {
  event.preventDefault();
  try {
    await api("POST", "/login", { access_key: $("access-key").value, secret_key: $("secret-key").value });
    $("secret-key").value = "";
    await start();
  } catch (e) {
    text($("login-error"), e instanceof Unauthorized ? "wrong access key or secret key" : e.message);
  }
}

async function logout() {
  await api("POST", "/logout").catch(() => {});
  showLogin("logged out");
}

// ---------------------------------------------------------------- state

function setConnection(label, cls) {
  const el = $("connection");
  text(el, label);
  el.className = "badge " + (cls || "");
}

async function refresh() {
  try {
    state = await api("GET", "/state");
    render();
    await refreshCluster();
  } catch (e) {
    if (e instanceof Unauthorized) showLogin("the session ended: log in again");
    else setConnection("error: " + e.message, "down");
  }
}

// ---------------------------------------------------------------- cluster


function duration(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3600000) return `${Math.floor(ms / 60000)} min ${Math.floor((ms % 60000) / 1000)} s`;
  return `${Math.floor(ms / 3600000)} h ${Math.floor((ms % 3600000) / 60000)} min`;
}

// Only on a node of a cluster (the state says so): GET /cluster.
async function refreshCluster() {
  $("cluster-section").hidden = !state.cluster_node;
  if (!state.cluster_node) return;
  try {
    renderCluster(await api("GET", "/cluster"));
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    text($("cluster-text"), e.message);
  }
}

function renderCluster(c) {
  text($("cluster-text"), `${c.cluster} · ${c.nodes_up} up, ${c.nodes_down} down, ${c.nodes_lost} lost · ` +
    `down after ${duration(c.timeout_ms)}, lost after ${duration(c.lost_after_ms)} without a heartbeat · database ${c.database}`);
  $("cluster-nodes").replaceChildren(...c.nodes.map((n) => {
    const li = make("li", "node-" + n.state);
    li.dataset.node = n.name;
    li.dataset.state = n.state;
    const since = n.state_for_ms === null ? "" : ` for ${duration(n.state_for_ms)}`;
    li.textContent = `${n.name} (${n.address}): ${n.state}${since} · heartbeat ${duration(n.heartbeat_age_ms)} ago · ` +
      `${n.objects_held} objects, ${bytes(n.bytes_held)}`;
    return li;
  }));
  const u = c.under_replicated, r = c.recovery;
  let line = u.objects === 0 ? "every object has its copies" :
    `${u.objects} object(s) under-replicated (${bytes(u.bytes)}, ${u.missing_copies} copies missing)`;
  if (r.in_progress) {
    line += r.eta_ms === null ? ` · no object healed in the last ${duration(r.window_ms)}` :
      ` · recovering ${r.objects_per_minute.toFixed(1)} objects/min (${bytes(r.bytes_per_second)}/s), finish in about ${duration(r.eta_ms)}`;
  }
  text($("cluster-short-text"), line);
  $("cluster-short").replaceChildren(...u.buckets.map((b) => {
    const li = make("li", null, `${b.bucket}: ${b.objects} object(s), ${bytes(b.bytes)}, ${b.missing_copies} copies missing`);
    li.dataset.bucket = b.bucket;
    return li;
  }));
}

function render() {
  text($("grid-name"), `${state.geometry || state.layout} · ${bytes(state.capacity_bytes || 0)} in ${state.buckets} buckets · grid ${state.grid_id.slice(0, 8)} · ${state.spinning_now} of at most ${state.spinning_max} spinning · ` +
    `${state.scheduler} scheduler` + (state.spin_ups_per_day_max ? ` · at most ${state.spin_ups_per_day_max} spin-ups per disk a day` : ""));
  renderGrid();
  renderCache();
  renderEnergy();
  renderReads();
  renderTasks(state.tasks);
}

function renderGrid() {
  const grid = $("grid");
  grid.style.gridTemplateColumns = `repeat(${state.columns}, minmax(96px, 1fr))`;
  if (grid.children.length !== state.disks.length) {
    grid.replaceChildren(...state.disks.map(() => make("button", "disk")));
  }
  // Disks are numbered row by row: the grid's cells are in the same order.
  state.disks.forEach((d, i) => fillDisk(grid.children[i], d));
}

function roleLabel(d) {
  const label = `${ROLE_PREFIX[d.role]}${d.role_index}`;
  return d.vhp ? `${label}·vhP` : label;
}

// An alert of a `smart` event in words (the API's disk view has them in words already).
function smartAlertText(a) {
  if (a.alert === "rose") return `attribute ${a.id} rose from ${a.from} to ${a.to}`;
  if (a.alert === "near_rating") return `attribute ${a.id} is ${a.count} of a rating of ${a.rating}`;
  return "health assessment failed";
}

function fillDisk(el, d) {
  el.type = "button";
  el.dataset.disk = d.disk;
  el.dataset.role = d.role;
  el.dataset.state = d.shown_state;
  el.setAttribute("role", "gridcell");
  // Placed by position: a disk added to a grown grid sits below its column.
  el.style.gridColumnStart = d.column + 1;
  el.style.gridRowStart = d.row + 1;
  const s = STATES[d.shown_state] || { symbol: "?", word: d.shown_state };
  el.setAttribute("aria-label", `disk ${d.disk}, ${roleLabel(d)}, ${s.word}`);
  el.replaceChildren();
  const top = make("div", "top");
  top.append(make("span", "num", `#${d.disk}`), make("span", "role", roleLabel(d)));
  el.append(top);
  el.append(make("div", "state", `${s.symbol} ${s.word}`));
  const fill = make("div", "bar fill");
  const fillInner = make("div");
  fillInner.style.width = `${Math.min(100, d.fill * 100).toFixed(1)}%`;
  fill.title = `${bytes(d.written_bytes)} of ${bytes(d.capacity_bytes)} written`;
  fill.append(fillInner);
  el.append(fill);
  if (d.defect_bytes > 0) {
    el.append(make("div", "why", `⚠ ${bytes(d.defect_bytes)} to rebuild`));
    const bar = make("div", "bar rebuild");
    const inner = make("div");
    const total = Math.max(d.defect_bytes, d.rebuild_total || d.defect_bytes);
    d.rebuild_total = total;
    inner.style.width = `${(100 * (1 - d.defect_bytes / total)).toFixed(1)}%`;
    bar.append(inner);
    el.append(bar);
  }
  // SMART's mark: the last reading (taken only at a spin-up made for other work) needs attention.
  if (d.smart && d.smart.warning) {
    el.dataset.smart = "warning";
    const said = (d.smart.last_alerts || []).join("; ") || "a watched count is above 0";
    el.append(make("div", "smart", `⚠ SMART: ${said}`));
  } else delete el.dataset.smart;
  const why = d.last_wake ? `woke: ${d.last_wake.reason}` : "no spin-up yet";
  el.append(make("div", "why", why));
  if (d.datasets && d.datasets.length) el.append(make("div", "why", `▤ ${d.datasets.join(", ")}`));
  el.title = `${why}\nspin-ups: ${d.spin_ups}, ${d.spin_ups_last_day} in the last 24 hours\n${d.energy.watts.toFixed(1)} W now`;
}

function renderCache() {
  const c = state.cache;
  const used = c.capacity_bytes ? (100 * c.used_bytes) / c.capacity_bytes : 0;
  const dirty = c.capacity_bytes ? (100 * c.dirty_bytes) / c.capacity_bytes : 0;
  $("cache-used").style.width = `${used.toFixed(1)}%`;
  $("cache-dirty").style.width = `${dirty.toFixed(1)}%`;
  $("cache-gauge").setAttribute("aria-valuenow", used.toFixed(0));
  const oldest = c.oldest_unpersisted_age_seconds === null ? "nothing waits"
    : `oldest waiting ${Math.round(c.oldest_unpersisted_age_seconds)} s`;
  const waiting = c.waiting_bytes_per_grid_bucket.map((g) => `disk ${g.disk}: ${bytes(g.bytes)}`).join(", ");
  text($("cache-text"), `${bytes(c.used_bytes)} of ${bytes(c.capacity_bytes)} used, ${bytes(c.dirty_bytes)} not yet persisted (${oldest})` +
    (waiting ? `. Waiting per disk: ${waiting}` : ""));
}

// Time to first byte of the reads since the server started: all of them, and those that woke a disk.
function renderReads() {
  const f = state.first_byte;
  const seconds = (s) => (s < 10 ? s.toFixed(2) : s.toFixed(0)) + " s";
  const line = (q, what) => q.count === 0 ? `no ${what}` :
    `${what}: ${q.count}, first byte p50 ${seconds(q.p50_seconds)}, p99 ${seconds(q.p99_seconds)}`;
  text($("reads-text"), `${line(f.reads, "reads")} · ${line(f.reads_that_woke_a_disk, "reads that woke a disk")}`);
  const c = state.cache_reads;
  if (c) {
    const served = c.from_cache + c.from_grid;
    const hits = served === 0 ? "no object reads yet" :
      `${(c.hit_ratio * 100).toFixed(1)} % of ${served} object reads from the cache`;
    $("reads-text").append(make("br"), document.createTextNode(
      `${hits} · prefetched ${c.prefetched_contents} (${bytes(c.prefetched_bytes)}), ${c.prefetch_hits} read since`));
  }
}

function renderEnergy() {
  const e = state.energy;
  text($("energy-text"), `${e.watts.toFixed(1)} W now · ${e.kwh.toFixed(4)} kWh since the grid was made`);
  watts.push([state.at_unix_ms, e.watts]);
  const cutoff = state.at_unix_ms - 12 * 3600 * 1000;
  watts = watts.filter(([t]) => t >= cutoff);
  drawChart();
}

function drawChart() {
  const canvas = $("watts-chart");
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  if (watts.length < 2) return;
  const t0 = watts[0][0], t1 = watts[watts.length - 1][0];
  const max = Math.max(1, ...watts.map(([, v]) => v)) * 1.1;
  ctx.strokeStyle = "#3b6ea5";
  ctx.lineWidth = 2;
  ctx.beginPath();
  watts.forEach(([t, v], i) => {
    const x = 30 + ((t - t0) / Math.max(1, t1 - t0)) * (w - 36);
    const y = h - 14 - (v / max) * (h - 24);
    if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.stroke();
  ctx.fillStyle = "#5d6b7a";
  ctx.font = "10px system-ui";
  ctx.fillText(`${max.toFixed(0)} W`, 2, 10);
  ctx.fillText("0", 2, h - 14);
  ctx.fillText(`${Math.round((t1 - t0) / 1000)} s`, w - 40, h - 2);
}

function renderTasks(tasks) {
  const list = $("tasks");
  list.replaceChildren(...tasks.slice(0, 20).map((t) => {
    const pct = t.total_bytes ? ` ${(100 * t.done_bytes / t.total_bytes).toFixed(0)}%` : "";
    const li = make("li", "", `${t.kind} of ${t.subject}: ${t.state}${t.state === "running" ? pct : ""}`);
    li.dataset.task = t.id;
    li.dataset.state = t.state;
    if (t.error) li.title = t.error;
    return li;
  }));
  if (!tasks.length) list.append(make("li", "muted", "none"));
}

function addListItem(listId, time, message, max) {
  const list = $(listId);
  const li = make("li");
  li.append(make("span", "time", clock(time)), document.createTextNode(message));
  list.prepend(li);
  while (list.children.length > max) list.lastChild.remove();
}

// ---------------------------------------------------------------- events

function follow() {
  if (source) source.close();
  source = new EventSource(API + "/events");
  source.onopen = () => setConnection("live", "live");
  source.onerror = () => setConnection("reconnecting…", "down");
  source.addEventListener("disk", (m) => {
    const e = JSON.parse(m.data);
    const d = state && state.disks[e.data.disk];
    if (d && e.data.state) {
      d.shown_state = e.data.state;
      d.failed = e.data.state === "failed";
      if (e.data.last_wake) d.last_wake = e.data.last_wake;
      fillDisk($("grid").children[d.disk], d);
    }
    addListItem("events", e.at_unix_ms, e.text, 200);
  });
  source.addEventListener("wake", (m) => {
    const e = JSON.parse(m.data);
    addListItem("wakes", e.at_unix_ms, `disk ${e.data.disk}: ${e.data.reason} (${e.data.spin_up_ms} ms)`, 100);
    const d = state && state.disks[e.data.disk];
    if (d) { d.last_wake = e.data; fillDisk($("grid").children[d.disk], d); }
  });
  source.addEventListener("smart", (m) => {
    const e = JSON.parse(m.data);
    const d = state && state.disks[e.data.disk];
    if (d) {
      d.smart = { ...d.smart, available: true, warning: true, attributes: e.data.attributes,
        last_alerts: e.data.alerts.map(smartAlertText) };
      fillDisk($("grid").children[d.disk], d);
    }
    addListItem("events", e.at_unix_ms, e.text, 200);
  });
  source.addEventListener("rebuild", (m) => {
    const e = JSON.parse(m.data);
    const d = state && state.disks[e.data.disk];
    if (d) {
      d.rebuild_total = Math.max(d.rebuild_total || 0, e.data.previous_bytes, e.data.remaining_bytes);
      d.defect_bytes = e.data.remaining_bytes;
      fillDisk($("grid").children[d.disk], d);
    }
  });
  source.addEventListener("task", (m) => {
    const e = JSON.parse(m.data);
    if (state) {
      const others = state.tasks.filter((t) => t.id !== e.data.id);
      state.tasks = [e.data, ...others].sort((a, b) => order(a) - order(b) || b.id - a.id);
      renderTasks(state.tasks);
    }
    if (!e.text.includes("%")) addListItem("events", e.at_unix_ms, e.text, 200);
  });
  source.addEventListener("key", (m) => {
    const e = JSON.parse(m.data);
    addListItem("events", e.at_unix_ms, e.text, 200);
    keysChanged();
    if (keysShown()) addAudit([e]);
  });
  source.addEventListener("request", (m) => {
    if (keysShown()) addAudit([JSON.parse(m.data)]);
  });
}

function order(t) {
  return { running: 0, queued: 1 }[t.state] ?? 2;
}

// ---------------------------------------------------------------- actions

function confirmThen(message, action, done = refresh,
  failed = (e) => addListItem("events", Date.now(), `failed: ${e.message}`, 200)) {
  text($("confirm-text"), message);
  const dialog = $("confirm-dialog");
  dialog.onclose = async () => {
    if (dialog.returnValue !== "ok") return;
    try {
      await action();
      await done();
    } catch (e) {
      if (e instanceof Unauthorized) showLogin("the session ended: log in again");
      else failed(e);
    }
  };
  dialog.returnValue = "";
  dialog.showModal();
}

async function openDisk(disk) {
  let d = state.disks[disk];
  try {
    d = await api("GET", `/disks/${disk}`); // fresh: the actions offered depend on it
    state.disks[disk] = d;
  } catch (e) {
    if (e instanceof Unauthorized) { showLogin("the session ended: log in again"); return; }
  }
  dialogDisk = disk;
  text($("disk-title"), `Disk ${d.disk} (${roleLabel(d)}) — ${d.name}`);
  const rows = [
    ["position", `column ${d.column}, row ${d.row}`],
    ["state", `${STATES[d.shown_state]?.word || d.shown_state} (power model: ${d.power_state})`],
    ["health", d.health],
    ["written", `${bytes(d.written_bytes)} of ${bytes(d.capacity_bytes)} (${(100 * d.fill).toFixed(1)}%)`],
    ["to rebuild", bytes(d.defect_bytes)],
    ["spin-ups", `${d.spin_ups} since the grid was made; this server: ` +
      (Object.entries(d.spin_ups_by_reason).map(([k, v]) => `${k} ${v}`).join(", ") || "none")],
    ["spin-ups today", `${d.spin_ups_last_day} in the last 24 hours` +
      (state.spin_ups_per_day_max ? ` (wear budget ${state.spin_ups_per_day_max} a day)` : " (no wear budget)")],
    ["idle timeout", `${d.idle_timeout_seconds.toFixed(0)} s now`],
    ["last wake", d.last_wake ? `${clock(d.last_wake.at_unix_ms)}: ${d.last_wake.reason}` : "none"],
    ["energy", `${d.energy.watts.toFixed(1)} W now, ${d.energy.kwh.toFixed(4)} kWh`],
    ["last scrub", d.last_scrub_unix_ms ? new Date(d.last_scrub_unix_ms).toLocaleString() : "never"],
    ["SMART", d.smart.available
      ? `${d.smart.warning ? "⚠ " : ""}read ${clock(d.smart.read_unix_ms)}` +
        (d.smart.overdue ? " (overdue: read at the next spin-up)" : "") + "; " +
        Object.entries(d.smart.attributes).map(([k, v]) => `${k}=${v}`).join(" ") +
        (d.smart.last_alerts.length ? `; alerts: ${d.smart.last_alerts.join("; ")}` : "")
      : d.smart.why],
  ];
  $("disk-details").replaceChildren(...rows.flatMap(([k, v]) => [make("dt", "", k), make("dd", "", v)]));
  const dialog = $("disk-dialog");
  for (const button of dialog.querySelectorAll("[data-action]")) {
    const a = button.dataset.action;
    button.hidden = (a === "replace") !== d.failed || (a === "scrub" && d.failed) || (a === "rebuild" && d.failed);
  }
  dialog.showModal();
}

function diskAction(action) {
  const disk = dialogDisk;
  $("disk-dialog").close();
  const messages = {
    scrub: `Scrub disk ${disk}? It spins up and every written range is read and verified.`,
    fail: `Mark disk ${disk} failed? It is never read or written again until replaced; its data is served from parity.`,
    replace: `Replace disk ${disk} with a fresh disk and rebuild it from parity?`,
    rebuild: `Rebuild disk ${disk}'s damaged ranges from parity now?`,
  };
  const body = action === "replace" ? { rebuild: true } : undefined;
  confirmThen(messages[action], () => api("POST", `/disks/${disk}/${action}`, body));
}

// ---------------------------------------------------------------- views

function keysShown() {
  return location.hash === "#keys";
}

// Show the view the address names (#keys: the access keys; anything else: the grid).
function showView() {
  if ($("nav").hidden) return; // not logged in
  const onKeys = keysShown();
  $("main").hidden = onKeys;
  $("keys-view").hidden = !onKeys;
  for (const [id, current] of [["nav-grid", !onKeys], ["nav-keys", onKeys]]) {
    if (current) $(id).setAttribute("aria-current", "page");
    else $(id).removeAttribute("aria-current");
  }
  if (onKeys) loadKeys();
}

// ---------------------------------------------------------------- access keys

const keyPath = (name) => `/keys/${encodeURIComponent(name)}`;

// Run an action on the keys page; an error is shown in words in `errorId`.
async function keysAction(errorId, action) {
  text($(errorId), "");
  try {
    await action();
    return true;
  } catch (e) {
    if (e instanceof Unauthorized) showLogin("the session ended: log in again");
    else text($(errorId), e.message);
    return false;
  }
}

async function loadKeys() {
  await keysAction("keys-error", async () => {
    keys = await api("GET", "/keys");
    renderKeys();
    renderKeyDetail();
  });
}

// Reload the keys soon (several events in a row cause one reload).
function keysChanged() {
  if (!keysShown() || keysTimer) return;
  keysTimer = setTimeout(() => { keysTimer = null; loadKeys(); }, 200);
}

function grantsText(k) {
  const buckets = Object.entries(k.buckets);
  if (!buckets.length) return "none";
  return buckets.map(([b, ps]) => `${b}: ${ps.join(", ")}`).join("; ");
}

function renderKeys() {
  const rows = keys.map((k) => {
    const tr = make("tr");
    tr.dataset.key = k.name;
    tr.dataset.enabled = k.enabled;
    if (k.name === selectedKey) tr.setAttribute("aria-current", "true");
    const name = make("button", "link", k.name);
    name.type = "button";
    name.dataset.key = k.name;
    name.title = `show ${k.name}: permissions, actions and recent activity`;
    const cells = [
      make("td"), make("td"), make("td", "state", k.enabled ? "● enabled" : "○ disabled"),
      make("td", "", k.create_buckets ? "yes" : "no"), make("td", "grants", grantsText(k)),
    ];
    cells[0].append(name);
    cells[1].append(make("code", "", k.access_key));
    tr.append(...cells);
    return tr;
  });
  if (!keys.length) {
    const td = make("td", "muted", "No access keys yet: create one below. Until then only the root user can sign requests.");
    td.colSpan = 5;
    const tr = make("tr");
    tr.append(td);
    rows.push(tr);
  }
  $("keys-list").replaceChildren(...rows);
  const buckets = new Set(keys.flatMap((k) => Object.keys(k.buckets)));
  $("known-buckets").replaceChildren(...[...buckets].sort().map((b) => { const o = make("option"); o.value = b; return o; }));
}

function renderKeyDetail() {
  const k = keys.find((x) => x.name === selectedKey);
  if (!k) selectedKey = null;
  $("key-none").hidden = !!k;
  $("key-body").hidden = !k;
  if (!k) { text($("key-title"), "No key selected"); return; }
  text($("key-title"), `Key ${k.name}`);
  $("key-detail").dataset.key = k.name;
  const facts = [
    ["access key id", k.access_key],
    ["created", new Date(k.created_ms).toLocaleString()],
    ["state", k.enabled ? "enabled: its signed requests are checked against its permissions"
      : "disabled: every request it signs is refused"],
    ["create buckets", k.create_buckets ? "may create buckets (and owns those it creates)" : "may not create buckets"],
  ];
  $("key-facts").replaceChildren(...facts.flatMap(([a, b]) => [make("dt", "", a), make("dd", "", b)]));
  text($("key-enabled"), k.enabled ? "Disable" : "Enable");
  text($("key-create-buckets"), k.create_buckets ? "Forbid creating buckets" : "Allow creating buckets");
  const rows = [];
  for (const [bucket, ps] of Object.entries(k.buckets)) {
    for (const p of ps) {
      const tr = make("tr");
      tr.dataset.bucket = bucket;
      tr.dataset.permission = p;
      const revoke = make("button", "small", "Revoke");
      revoke.type = "button";
      revoke.dataset.bucket = bucket;
      revoke.dataset.permission = p;
      revoke.setAttribute("aria-label", `revoke ${p} on ${bucket}`);
      const cell = make("td");
      cell.append(revoke);
      tr.append(make("td", "", bucket), make("td", "", p), cell);
      rows.push(tr);
    }
  }
  if (!rows.length) {
    const td = make("td", "muted", "No permissions: every request this key signs is refused. Grant one below.");
    td.colSpan = 3;
    const tr = make("tr");
    tr.append(td);
    rows.push(tr);
  }
  $("key-grants").tBodies[0].replaceChildren(...rows);
}

function selectKey(name) {
  if (name !== selectedKey) {
    selectedKey = name;
    text($("key-error"), "");
    audit = new Map();
    $("key-audit").replaceChildren();
  }
  renderKeys();
  renderKeyDetail();
  loadAudit();
}

function auditItem(e) {
  const li = make("li");
  li.dataset.event = e.id;
  li.dataset.kind = e.kind;
  if (e.kind === "request" && e.data.status >= 400) li.className = "refused";
  li.append(make("span", "time", clock(e.at_unix_ms)), document.createTextNode(e.text));
  return li;
}

// Add the selected key's `events` (from GET /audit or the event stream) to its list: newest first, at most 100.
function addAudit(events) {
  for (const e of events) if (e.data && e.data.key === selectedKey) audit.set(e.id, e);
  const shown = [...audit.values()].sort((a, b) => b.id - a.id).slice(0, 100);
  audit = new Map(shown.map((e) => [e.id, e]));
  const list = $("key-audit");
  list.replaceChildren(...shown.map(auditItem));
  if (!shown.length) list.append(make("li", "muted", "nothing recorded yet"));
}

async function loadAudit() {
  const name = selectedKey;
  if (!name) return;
  await keysAction("key-error", async () => {
    const events = await api("GET", `/audit?key=${encodeURIComponent(name)}`);
    if (name === selectedKey) addAudit(events);
  });
}

async function createKey(event) {
  event.preventDefault();
  const name = $("new-key-name").value.trim();
  const createBuckets = $("new-key-create-buckets").checked;
  await keysAction("new-key-error", async () => {
    const key = await api("POST", "/keys", { name, create_buckets: createBuckets });
    hideSecret();
    // The only time the secret exists outside the server: in this box until it is hidden or the page is left.
    text($("new-secret-name"), key.name);
    text($("new-secret-id"), key.access_key);
    $("new-secret-value").value = key.secret_key;
    $("new-secret").hidden = false;
    $("new-key-form").reset();
    selectedKey = key.name;
    audit = new Map();
    $("key-audit").replaceChildren();
    await loadKeys();
    await loadAudit();
    $("new-secret-value").focus();
    $("new-secret-value").select();
  });
}

function hideSecret() {
  $("new-secret-value").value = "";
  text($("new-secret-id"), "");
  text($("new-secret-name"), "");
  $("new-secret").hidden = true;
}

async function copySecret() {
  const input = $("new-secret-value");
  input.focus();
  input.select();
  try {
    if (navigator.clipboard && window.isSecureContext) await navigator.clipboard.writeText(input.value);
    else if (!document.execCommand("copy")) throw new Error("copy refused");
    text($("new-secret-copy"), "Copied");
  } catch {
    text($("new-secret-copy"), "Select it and copy by hand");
  }
  setTimeout(() => text($("new-secret-copy"), "Copy the secret key"), 2000);
}

// Change the selected key with `request`, then show it as the server answered.
function changeKey(request) {
  const name = selectedKey;
  return keysAction("key-error", async () => {
    const key = await request(name);
    keys = keys.map((k) => (k.name === key.name ? key : k));
    renderKeys();
    renderKeyDetail();
    await loadAudit();
  });
}

function toggleEnabled() {
  const k = keys.find((x) => x.name === selectedKey);
  if (k) changeKey((name) => api("PUT", keyPath(name), { enabled: !k.enabled }));
}

function toggleCreateBuckets() {
  const k = keys.find((x) => x.name === selectedKey);
  if (k) changeKey((name) => api("PUT", keyPath(name), { create_buckets: !k.create_buckets }));
}

async function grant(event) {
  event.preventDefault();
  const bucket = $("grant-bucket").value.trim();
  const permission = $("grant-permission").value;
  if (await changeKey((name) => api("POST", `${keyPath(name)}/allow`, { bucket, permission }))) {
    $("grant-bucket").value = "";
  }
}

async function revoke(bucket, permission) {
  const done = await changeKey((name) => api("POST", `${keyPath(name)}/deny`, { bucket, permission }));
  const k = keys.find((x) => x.name === selectedKey);
  if (!done || !k || !(k.buckets[bucket] || []).includes(permission)) return;
  text($("key-error"), `the server still lists ${permission} on ${bucket} for ${k.name}`);
}

function deleteKey() {
  const k = keys.find((x) => x.name === selectedKey);
  if (!k) return;
  confirmThen(`Delete access key ${k.name} (${k.access_key})? Every request signed with it is refused from now ` +
    "on, the buckets it owns become the root user's, and it cannot be brought back: a new key gets a new secret.",
  () => api("DELETE", keyPath(k.name)),
  async () => { if (selectedKey === k.name) selectedKey = null; await loadKeys(); },
  (e) => text($("key-error"), e.message));
}

// ---------------------------------------------------------------- start

async function start() {
  const session = await api("GET", "/session");
  if (!session.logged_in) { showLogin(); return; }
  await refresh();
  if (!state) return;
  $("login").hidden = true;
  for (const id of ["nav", "logout", "persist-all", "scrub-overdue"]) $(id).hidden = false;
  showView();
  // Watts over the kept history (one sample a minute by default), then every refresh.
  const history = await api("GET", "/history?limit=720");
  watts = history.points.map((p) => [p.at_unix_ms, p.watts]).concat(watts).sort((a, b) => a[0] - b[0]);
  drawChart();
  const wakes = await api("GET", "/wakes");
  for (const w of wakes.wakes) addListItem("wakes", w.at_unix_ms, `disk ${w.disk}: ${w.reason} (${w.spin_up_ms} ms)`, 100);
  follow();
  if (pollTimer) clearInterval(pollTimer);
  pollTimer = setInterval(refresh, 5000);
}

function legend() {
  $("legend").replaceChildren(...Object.values(STATES).map((s) => make("span", "", `${s.symbol} ${s.word}`)),
    make("span", "", "D data · hP horizontal parity · vP vertical parity"));
}

document.addEventListener("DOMContentLoaded", () => {
  legend();
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  $("grid").addEventListener("click", (e) => {
    const cell = e.target.closest(".disk");
    if (cell) openDisk(Number(cell.dataset.disk));
  });
  for (const button of document.querySelectorAll("#disk-dialog [data-action]")) {
    button.addEventListener("click", () => diskAction(button.dataset.action));
  }
  $("persist-all").addEventListener("click", () =>
    confirmThen("Persist everything waiting in the cache now? The disks it goes to spin up.", () => api("POST", "/persist")));
  $("scrub-overdue").addEventListener("click", () =>
    confirmThen("Scrub every range not verified within the grid's scrub interval? Their disks spin up.", () => api("POST", "/scrub")));
  window.addEventListener("hashchange", showView);
  $("new-key-form").addEventListener("submit", createKey);
  $("new-key-name").addEventListener("input", () => text($("new-key-error"), ""));
  $("new-secret-copy").addEventListener("click", copySecret);
  $("new-secret-done").addEventListener("click", hideSecret);
  $("keys-list").addEventListener("click", (e) => {
    const button = e.target.closest("button[data-key]");
    if (button) selectKey(button.dataset.key);
  });
  $("key-enabled").addEventListener("click", toggleEnabled);
  $("key-create-buckets").addEventListener("click", toggleCreateBuckets);
  $("key-delete").addEventListener("click", deleteKey);
  $("grant-form").addEventListener("submit", grant);
  $("key-grants").addEventListener("click", (e) => {
    const button = e.target.closest("button[data-permission]");
    if (button) revoke(button.dataset.bucket, button.dataset.permission);
  });
  $("key-audit-refresh").addEventListener("click", loadAudit);
  start().catch((e) => {
    if (e instanceof Unauthorized) showLogin();
    else setConnection("error: " + e.message, "down");
  });
});
