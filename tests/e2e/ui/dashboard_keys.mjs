// The dashboard's keys page in Debian's headless Chromium, driven by playwright-core. Run by
// tests/e2e/test_dashboard_keys.py, which starts the server, makes a bucket with an object and passes here:
//   ENDPOINT, ACCESS_KEY, SECRET_KEY (root, to log in), TOKEN (admin API bearer token), BUCKET, KEY_NAME (the key
//   to create), HANDOFF (a file to write the new key's id and secret to), ARTIFACTS (screenshots), CHROMIUM.
// Halfway, once the key may read BUCKET, it writes HANDOFF, prints "handoff" and waits for a line on stdin:
// "go" (the test has used the key with boto3) or anything else (stop). Prints one line per check and exits 1 at
// the first failure.
import { chromium } from "playwright-core";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";

const env = process.env;
const endpoint = env.ENDPOINT;
const bucket = env.BUCKET;
const name = env.KEY_NAME;
const artifacts = env.ARTIFACTS;
const call = (method, p, body) =>
  fetch(`${endpoint}/_permafrost/api/v1${p}`, {
    method,
    headers: { Authorization: `Bearer ${env.TOKEN}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
const api = (method, p, body) =>
  call(method, p, body).then(async (r) => {
    if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${await r.text()}`);
    return r.json();
  });

function check(ok, what) {
  console.log(`${ok ? "ok" : "FAILED"}: ${what}`);
  if (!ok) throw new Error(what);
}

const stdin = readline.createInterface({ input: process.stdin });
const lines = stdin[Symbol.asyncIterator]();

const profile = fs.mkdtempSync(path.join(os.tmpdir(), "permafrost-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1366, height: 900 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const problems = [];
const consoleText = [];
const urls = [];
// Refusals this script provokes on purpose: [method, path ending, status].
const expected = [["POST", "/keys", 409], ["POST", `/keys/${name}/allow`, 400]];
let failed = false;
let secret = null;
try {
  const page = context.pages()[0] || (await context.newPage());
  page.on("console", (m) => {
    consoleText.push(m.text());
    if (m.type() === "error" && !/status of (400|409)/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("request", (r) => urls.push(r.url()));
  page.on("framenavigated", (f) => urls.push(f.url()));
  page.on("response", (r) => {
    if (r.status() < 400) return;
    const method = r.request().method();
    const { pathname } = new URL(r.url());
    if (!expected.some(([m, p, s]) => m === method && pathname.endsWith(p) && s === r.status())) {
      problems.push(`HTTP ${r.status()} for ${method} ${r.url()}`);
    }
  });
  const shot = (file) => page.screenshot({ path: path.join(artifacts, file), fullPage: true });

  // Log in, then open the keys page from the header.
  await page.goto(`${endpoint}/_permafrost/ui/`);
  await page.waitForSelector("#login-form", { state: "visible", timeout: 10000 });
  await page.fill("#access-key", env.ACCESS_KEY);
  await page.fill("#secret-key", env.SECRET_KEY);
  await page.click("#login-form button[type=submit]");
  await page.waitForSelector("#nav-keys", { state: "visible", timeout: 10000 });
  await page.click("#nav-keys");
  await page.waitForSelector("#keys-view", { state: "visible", timeout: 5000 });
  check(await page.isHidden("#main"), "the keys page replaces the grid");
  check(new URL(page.url()).hash === "#keys", `the keys page has its own address: ${page.url()}`);
  await page.waitForSelector("#keys-list td", { timeout: 5000 });
  check((await page.textContent("#keys-list")).includes("No access keys yet"), "an empty list says so");

  // Create a key through the form: the secret is shown once, with the note.
  await page.fill("#new-key-name", name);
  check(!(await page.isChecked("#new-key-create-buckets")), "a new key may not create buckets unless ticked");
  await page.click("#new-key-form button[type=submit]");
  await page.waitForSelector("#new-secret", { state: "visible", timeout: 5000 });
  const keyId = (await page.textContent("#new-secret-id")).trim();
  secret = await page.inputValue("#new-secret-value");
  const note = await page.textContent("#new-secret");
  check(/^PF[A-Z0-9]{18}$/.test(keyId) && secret.length >= 30, `the page shows key id ${keyId} and a secret`);
  check(note.includes("shown only now") && note.includes("will not be shown again"),
    "the secret comes with the note that it will not be shown again");
  const listed = await api("GET", `/keys/${name}`);
  check(listed.access_key === keyId && !("secret_key" in listed), "the API knows the key, and not its secret");
  await page.waitForSelector(`#keys-list tr[data-key="${name}"]`, { timeout: 5000 });
  const row = await page.textContent(`#keys-list tr[data-key="${name}"]`);
  check(row.includes(keyId) && row.includes("enabled") && row.includes("none"),
    `the list shows the key: ${row.replace(/\s+/g, " ")}`);
  await page.waitForSelector(`#key-detail[data-key="${name}"]`, { timeout: 5000 });
  check((await page.textContent("#key-title")) === `Key ${name}`, "the new key is selected");
  await shot("01-created.png");

  // The secret never leaves the page's box: not in an address, storage, a cookie or the console.
  const stored = await page.evaluate(() => JSON.stringify([{ ...localStorage }, { ...sessionStorage }, document.cookie]));
  check(!stored.includes(secret), "the secret is not in localStorage, sessionStorage or a script-readable cookie");
  check(!urls.some((u) => u.includes(secret)) && !page.url().includes(secret), "the secret is in no URL");
  check(!consoleText.some((t) => t.includes(secret)), "the secret is not in the console");

  // "I have stored it" takes it off the page for good.
  await page.click("#new-secret-done");
  await page.waitForSelector("#new-secret", { state: "hidden", timeout: 5000 });
  const gone = await page.evaluate((s) => !document.documentElement.outerHTML.includes(s) &&
    [...document.querySelectorAll("input")].every((i) => i.value !== s), secret);
  check(gone, "hidden, the secret is nowhere in the page");

  // The API's refusals are shown in words.
  await page.fill("#new-key-name", name);
  await page.click("#new-key-form button[type=submit]");
  await page.waitForFunction(() => document.getElementById("new-key-error").textContent !== "", null, { timeout: 5000 });
  const duplicate = await page.textContent("#new-key-error");
  check(duplicate.includes(`an access key named ${name} already exists`), `a second key of that name: "${duplicate}"`);
  check(await page.isHidden("#new-secret"), "a refused creation shows no secret");
  await page.fill("#new-key-name", "");
  check((await page.textContent("#new-key-error")) === "", "the error goes when the name is changed");
  await page.fill("#grant-bucket", "two/buckets");
  await page.click("#grant-form button[type=submit]");
  await page.waitForFunction(() => document.getElementById("key-error").textContent !== "", null, { timeout: 5000 });
  const badGrant = await page.textContent("#key-error");
  check(badGrant.includes("name one bucket"), `a grant on "two/buckets": "${badGrant}"`);

  // Grant read on the bucket.
  await page.fill("#grant-bucket", bucket);
  await page.selectOption("#grant-permission", "read");
  await page.click("#grant-form button[type=submit]");
  await page.waitForSelector(`#key-grants tr[data-bucket="${bucket}"][data-permission="read"]`, { timeout: 5000 });
  check((await page.textContent("#key-error")) === "", "the error went away with a grant that worked");
  check((await page.textContent(`#keys-list tr[data-key="${name}"] .grants`)) === `${bucket}: read`,
    `the list shows "${bucket}: read"`);
  check(JSON.stringify((await api("GET", `/keys/${name}`)).buckets) === JSON.stringify({ [bucket]: ["read"] }),
    "the API has the grant");

  // The test reads with the key and fails to write with it (boto3).
  fs.writeFileSync(env.HANDOFF, JSON.stringify({ access_key: keyId, secret_key: secret }), { mode: 0o600 });
  console.log("handoff");
  const answer = await lines.next();
  check(!answer.done && answer.value.trim() === "go", "the test used the key with boto3");

  // The refused write shows in the key's recent activity (the event stream brings it).
  await page.waitForSelector("#key-audit li.refused", { timeout: 10000 });
  const activity = await page.textContent("#key-audit");
  check(activity.includes(`${name} PutObject PUT /${bucket}/`) && activity.includes("403 AccessDenied"),
    "recent activity shows the refused PutObject");
  check(activity.includes(`granted read on bucket ${bucket}`) && activity.includes(`access key ${name}`),
    "and the changes to the key");
  await shot("02-granted.png");

  // Disable and enable again.
  await page.click("#key-enabled");
  await page.waitForSelector(`#keys-list tr[data-key="${name}"][data-enabled="false"]`, { timeout: 5000 });
  check((await api("GET", `/keys/${name}`)).enabled === false, "Disable disables the key");
  check((await page.textContent("#key-enabled")) === "Enable", "and offers Enable");
  await page.click("#key-enabled");
  await page.waitForSelector(`#keys-list tr[data-key="${name}"][data-enabled="true"]`, { timeout: 5000 });
  check((await api("GET", `/keys/${name}`)).enabled === true, "Enable enables it again");

  // Revoke a permission, then grant it back.
  await page.click(`#key-grants tr[data-bucket="${bucket}"][data-permission="read"] button`);
  await page.waitForFunction((b) => !document.querySelector(`#key-grants tr[data-bucket="${b}"]`), bucket, { timeout: 5000 });
  check(Object.keys((await api("GET", `/keys/${name}`)).buckets).length === 0, "Revoke takes the permission back");
  await page.fill("#grant-bucket", bucket);
  await page.click("#grant-form button[type=submit]");
  await page.waitForSelector(`#key-grants tr[data-bucket="${bucket}"][data-permission="read"]`, { timeout: 5000 });

  // Delete: behind a confirmation; cancelling keeps the key.
  await page.click("#key-delete");
  await page.waitForSelector("#confirm-dialog[open]", { timeout: 5000 });
  const question = await page.textContent("#confirm-text");
  check(question.includes(`Delete access key ${name}`) && question.includes(keyId), `the confirmation: "${question}"`);
  await shot("03-confirm-delete.png");
  await page.click('#confirm-dialog button[value="cancel"]');
  check((await call("GET", `/keys/${name}`)).status === 200, "cancelling keeps the key");
  await page.click("#key-delete");
  await page.waitForSelector("#confirm-dialog[open]", { timeout: 5000 });
  await page.click("#confirm-ok");
  await page.waitForSelector(`#keys-list tr[data-key="${name}"]`, { state: "detached", timeout: 5000 });
  check((await call("GET", `/keys/${name}`)).status === 404, "after Yes, the API has no such key");
  check(!(await api("GET", "/keys")).some((k) => k.name === name), "and does not list it");
  check((await page.textContent("#key-title")) === "No key selected", "the page selects no key");
  await shot("04-deleted.png");

  // A reload does not bring the secret back.
  await page.reload();
  await page.waitForSelector("#keys-view", { state: "visible", timeout: 10000 });
  await page.waitForSelector("#keys-list td", { timeout: 5000 });
  check(!(await page.content()).includes(secret), "after a reload the secret is nowhere in the page");
  check(!consoleText.some((t) => t.includes(secret)), "and it never was in the console");
  check(problems.length === 0, `no unexpected errors${problems.length ? ": " + problems.join("; ") : ""}`);
} catch (e) {
  failed = true;
  console.log(`FAILED: ${e.message}`);
  if (problems.length) console.log(problems.join("\n"));
  try { await context.pages()[0].screenshot({ path: path.join(artifacts, "99-failure.png"), fullPage: true }); } catch {}
} finally {
  stdin.close();
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
