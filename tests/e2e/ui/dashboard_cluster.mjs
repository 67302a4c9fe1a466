// The dashboard's Cluster section on a node of a cluster, in Debian's headless Chromium driven by playwright-core.
// Run by tests/e2e/test_cluster_status.py while node b is lost and its objects are under-replicated:
//   ENDPOINT (node a), ACCESS_KEY, SECRET_KEY, LOST (the lost node's name), SHORT (JSON {bucket: objects}),
//   ARTIFACTS (directory for a screenshot), CHROMIUM.
// Prints one line per check and exits 1 at the first failure.
import { chromium } from "playwright-core";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const env = process.env;
const short = JSON.parse(env.SHORT);

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
  await page.goto(`${env.ENDPOINT}/_permafrost/ui/`);
  await page.waitForSelector("#login-form", { state: "visible", timeout: 10000 });
  await page.fill("#access-key", env.ACCESS_KEY);
  await page.fill("#secret-key", env.SECRET_KEY);
  await page.click("#login-form button[type=submit]");
  await page.waitForSelector("#cluster-section", { state: "visible", timeout: 15000 });
  await page.waitForFunction((lost) => !!document.querySelector(`#cluster-nodes li[data-node="${lost}"][data-state="lost"]`),
    env.LOST, { timeout: 15000 });
  const node = await page.textContent(`#cluster-nodes li[data-node="${env.LOST}"]`);
  check(/lost for /.test(node), `the lost node with since-when: ${node}`);
  const summary = await page.textContent("#cluster-text");
  check(/1 up, 0 down, 1 lost/.test(summary) && !/options|search_path/.test(summary), `cluster summary: ${summary}`);
  const total = Object.values(short).reduce((a, b) => a + b, 0);
  const line = await page.textContent("#cluster-short-text");
  check(line.startsWith(`${total} object(s) under-replicated`), `under-replicated: ${line}`);
  for (const [bucket, objects] of Object.entries(short)) {
    const li = await page.textContent(`#cluster-short li[data-bucket="${bucket}"]`);
    check(li.startsWith(`${bucket}: ${objects} object(s)`), `bucket line: ${li}`);
  }
  await page.screenshot({ path: path.join(env.ARTIFACTS, "cluster.png"), fullPage: true });
  check(problems.length === 0, `no console errors${problems.length ? ": " + problems.join("; ") : ""}`);
} catch (e) {
  failed = true;
  console.log(`FAILED: ${e.message}`);
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
