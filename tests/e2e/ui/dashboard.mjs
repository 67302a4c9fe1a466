// The dashboard in Debian's headless Chromium, driven by playwright-core. Run by tests/e2e/test_dashboard.py,
// which starts the server, stores a persisted object and passes everything here in the environment:
//   ENDPOINT, ACCESS_KEY, SECRET_KEY, TOKEN (admin API bearer token), GET_URL (a presigned GET of the object),
//   OBJECT (bucket/key), OBJECT_DISK (its data disk), ARTIFACTS (directory for screenshots), CHROMIUM.
// Prints one line per check and exits 1 at the first failure.
import { chromium } from "playwright-core";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const env = process.env;
const endpoint = env.ENDPOINT;
const disk = Number(env.OBJECT_DISK);
const artifacts = env.ARTIFACTS;
const api = (method, p) =>
  fetch(`${endpoint}/_permafrost/api/v1${p}`, { method, headers: { Authorization: `Bearer ${env.TOKEN}` } })
    .then(async (r) => { if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${await r.text()}`); return r.json(); });

function check(ok, what) {
  console.log(`${ok ? "ok" : "FAILED"}: ${what}`);
  if (!ok) throw new Error(what);
}

const profile = fs.mkdtempSync(path.join(os.tmpdir(), "permafrost-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1366, height: 900 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const problems = [];
let failed = false;
try {
  const page = context.pages()[0] || (await context.newPage());
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("response", (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()} for ${r.request().method()} ${r.url()}`); });
  const shot = (name) => page.screenshot({ path: path.join(artifacts, name), fullPage: true });

  await page.goto(`${endpoint}/_permafrost/ui/`);
  await page.waitForSelector("#login-form", { state: "visible", timeout: 10000 });
  await shot("01-login.png");
  await page.fill("#access-key", env.ACCESS_KEY);
  await page.fill("#secret-key", env.SECRET_KEY);
  await page.click("#login-form button[type=submit]");
  const state = await api("GET", "/state");
  await page.waitForFunction((n) => document.querySelectorAll("#grid .disk").length === n, state.disks.length,
    { timeout: 10000 });
  await page.waitForFunction(() => document.getElementById("connection").textContent === "live", null, { timeout: 10000 });
  // Every disk with its role, in its place.
  const cells = await page.$$eval("#grid .disk", (els) => els.map((e) => ({
    disk: Number(e.dataset.disk), role: e.dataset.role, state: e.dataset.state, text: e.textContent,
    x: e.getBoundingClientRect().x, y: e.getBoundingClientRect().y,
  })));
  check(cells.length === state.disks.length, `the grid shows all ${state.disks.length} disks`);
  check(cells.every((c, i) => c.disk === i && c.role === state.disks[i].role),
    "every disk shows its role from the API");
  const columns = state.columns;
  check(cells.every((c, i) => i % columns === 0 || c.y === cells[i - 1].y && c.x > cells[i - 1].x),
    `disks are drawn in ${columns} columns, row by row`);
  check(cells.every((c) => /[○◐●▶✖] (off|spinning up|idle|active|failed)/.test(c.text)),
    "each state has a symbol and a word, not only a colour");
  await shot("02-grid.png");

  // Record every state the object's disk shows, and the task list's texts, as the page changes.
  await page.evaluate((d) => {
    window.__states = [];
    window.__tasks = [];
    const note = () => {
      const cell = document.querySelector(`#grid .disk[data-disk="${d}"]`);
      const s = cell && cell.dataset.state;
      if (s && window.__states[window.__states.length - 1] !== s) window.__states.push(s);
      for (const li of document.querySelectorAll("#tasks li")) window.__tasks.push(li.textContent);
      if (cell && cell.querySelector(".bar.rebuild")) window.__rebuildBar = true;
    };
    new MutationObserver(note).observe(document.getElementById("main"), { subtree: true, childList: true, attributes: true });
    note();
  }, disk);

  // Read the object: its disk goes active on the page within a few seconds, naming the read.
  const started = Date.now();
  const body = await fetch(env.GET_URL);
  check(body.ok, `GET of ${env.OBJECT}: ${body.status}`);
  await body.arrayBuffer();
  await page.waitForFunction(() => window.__states.includes("active"), null, { timeout: 5000 });
  check(Date.now() - started < 5000, `disk ${disk} showed active ${Date.now() - started} ms after the read began`);
  await page.waitForFunction((d) => document.querySelector(`#grid .disk[data-disk="${d}"]`).textContent.includes("read of"),
    disk, { timeout: 5000 });
  const cellText = await page.textContent(`#grid .disk[data-disk="${disk}"]`);
  check(cellText.includes(`read of ${env.OBJECT}`), `the disk names the read that woke it: ${cellText}`);
  await shot("03-read.png");
  const states = await page.evaluate(() => window.__states);
  check(states.includes("active"), `states shown: ${states.join(" → ")}`);
  // The read woke its disk: the Reads section shows its time to first byte among the reads that woke a disk,
  // and the grid's title the wear budget.
  await page.waitForFunction(() => /reads that woke a disk: 1, first byte p50 [0-9.]+ s, p99 [0-9.]+ s/
    .test(document.querySelector("#reads-text").textContent), null, { timeout: 5000 });
  check(true, `reads shown: ${await page.textContent("#reads-text")}`);
  const title = await page.textContent("#grid-name");
  check(/deadline scheduler · at most \d+ spin-ups per disk a day/.test(title), `grid title: ${title}`);
  // A server that is no node of a cluster shows no Cluster section (and never asks GET /cluster).
  check(await page.isHidden("#cluster-section"), "no Cluster section on a server outside a cluster");

  // Fail the disk through the API: it turns failed on the page.
  await api("POST", `/disks/${disk}/fail`);
  await page.waitForSelector(`#grid .disk[data-disk="${disk}"][data-state="failed"]`, { timeout: 5000 });
  check(true, `disk ${disk} turned failed on the page`);
  await shot("04-failed.png");

  // Replace and rebuild: the rebuild shows on the page (task progress or the disk's rebuild bar), then ends.
  const replaced = await api("POST", `/disks/${disk}/replace`);
  const task = replaced.rebuild_task.id;
  await page.waitForFunction(() => window.__tasks.some((t) => t.startsWith("rebuild of disk")), null, { timeout: 10000 });
  for (let i = 0; i < 600; i++) {
    const t = await api("GET", `/tasks/${task}`);
    if (t.state === "done" || t.state === "failed") { check(t.state === "done", `rebuild task ${t.state} ${t.error || ""}`); break; }
    await new Promise((r) => setTimeout(r, 100));
  }
  await page.waitForFunction((d) => document.querySelector(`#grid .disk[data-disk="${d}"]`).dataset.state !== "failed",
    disk, { timeout: 10000 });
  const tasks = await page.evaluate(() => window.__tasks);
  const progress = tasks.filter((t) => t.startsWith("rebuild of disk"));
  const bar = await page.evaluate(() => window.__rebuildBar === true);
  check(progress.length > 0, `the rebuild showed on the page: ${[...new Set(progress)].join(" | ")}${bar ? " (and its bar)" : ""}`);
  await shot("05-rebuilt.png");

  // A control behind its confirmation: cancelling does nothing.
  await page.click(`#grid .disk[data-disk="${disk}"]`);
  await page.click('#disk-dialog [data-action="scrub"]');
  await page.waitForSelector("#confirm-dialog[open]");
  await shot("06-confirm.png");
  await page.click('#confirm-dialog button[value="cancel"]');
  const after = await api("GET", "/tasks");
  check(!after.tasks.some((t) => t.kind === "scrub"), "cancelling the confirmation starts no scrub");
  check(problems.length === 0, `no console errors${problems.length ? ": " + problems.join("; ") : ""}`);
} catch (e) {
  failed = true;
  console.log(`FAILED: ${e.message}`);
  if (problems.length) console.log(problems.join("\n"));
  try { await context.pages()[0].screenshot({ path: path.join(artifacts, "99-failure.png"), fullPage: true }); } catch {}
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
