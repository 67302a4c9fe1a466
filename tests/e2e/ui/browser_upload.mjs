// A web page of another origin uses the archive from Debian's headless Chromium, driven by playwright-core. Run by
// tests/e2e/test_browser_upload.py, which starts the server, gives a bucket a CORS configuration allowing one
// origin, serves a page from that origin and from a second one, and passes everything here in the environment:
//   ENDPOINT       the S3 endpoint (http://127.0.0.1:PORT)
//   BUCKET         the bucket
//   PAGE_URL       a page of the allowed origin; DENIED_PAGE_URL a page of an origin no rule allows
//   FORM           the form's fields (JSON): key with ${filename}, policy, signature, success_action_status 201
//   FILE_NAME      the name of the file the form uploads; CONTENT_FILE a file with its bytes
//   KEY            the key it must be stored under; GET_URL a presigned GET of that key
//   CHROMIUM       the browser
// Prints one line per check and exits 1 at the first failure.
import { chromium } from "playwright-core";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const env = process.env;
const contentB64 = fs.readFileSync(env.CONTENT_FILE).toString("base64");

function check(ok, what) {
  console.log(`${ok ? "ok" : "FAILED"}: ${what}`);
  if (!ok) throw new Error(what);
}

const profile = fs.mkdtempSync(path.join(os.tmpdir(), "permafrost-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let failed = false;
try {
  const page = context.pages()[0] || (await context.newPage());
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));

  // 1. The allowed origin uploads a file with the POST policy form (fetch + FormData, as upload pages do) and
  //    reads the PostResponse: readable only because the answer carries Access-Control-Allow-Origin.
  await page.goto(env.PAGE_URL);
  check((await page.title()) === "upload page", `the page of ${new URL(env.PAGE_URL).origin} loaded`);
  const posted = await page.evaluate(async ({ endpoint, bucket, form, fileName, contentB64 }) => {
    const bytes = Uint8Array.from(atob(contentB64), (c) => c.charCodeAt(0));
    const data = new FormData();
    for (const [name, value] of Object.entries(form)) data.append(name, value);
    data.append("file", new Blob([bytes], { type: "application/octet-stream" }), fileName);
    try {
      const r = await fetch(`${endpoint}/${bucket}`, { method: "POST", body: data });
      return { status: r.status, text: await r.text(), etag: r.headers.get("ETag") };
    } catch (e) {
      return { error: String(e) };
    }
  }, { endpoint: env.ENDPOINT, bucket: env.BUCKET, form: JSON.parse(env.FORM), fileName: env.FILE_NAME,
    contentB64 });
  console.log(`POST answer: ${JSON.stringify(posted)}`);
  check(posted.status === 201, "the form upload is answered 201 and the page may read the answer");
  const key = await page.evaluate((xml) => new DOMParser().parseFromString(xml, "application/xml")
    .querySelector("Key")?.textContent, posted.text);
  check(key === env.KEY, `the PostResponse names the stored key ${env.KEY} (\${filename} replaced)`);
  check(posted.etag !== null, "the exposed ETag header is readable by the page");

  // 2. It reads the file back through CORS: a simple GET of the presigned URL, then one with a header that is
  //    not CORS-safelisted, which makes the browser send a preflight first.
  const readBack = (extraHeaders) => page.evaluate(async ({ url, extraHeaders }) => {
    try {
      const r = await fetch(url, { headers: extraHeaders });
      const buf = new Uint8Array(await r.arrayBuffer());
      let b = "";
      for (const x of buf) b += String.fromCharCode(x);
      return { status: r.status, b64: btoa(b) };
    } catch (e) {
      return { error: String(e) };
    }
  }, { url: env.GET_URL, extraHeaders });
  let got = await readBack({});
  check(got.status === 200 && got.b64 === contentB64, "a simple GET through CORS returns the uploaded bytes");
  got = await readBack({ "x-app-trace": "1" });
  check(got.status === 200 && got.b64 === contentB64,
    "a GET with a non-safelisted header (preflighted) returns the uploaded bytes");
  // The preflight decides: a header the rule does not allow (x-other; the rule allows x-app-*) fails the fetch,
  // though the GET itself would be answered with the CORS headers.
  got = await readBack({ "x-other": "1" });
  check(got.error !== undefined,
    `a GET with a header no rule allows fails at the preflight (${got.error ?? got.status})`);

  // 3. A page of another origin: the preflight is refused and the fetch fails; a simple GET's answer is withheld.
  await page.goto(env.DENIED_PAGE_URL);
  got = await readBack({ "x-app-trace": "1" });
  check(got.error !== undefined && /Failed to fetch/.test(got.error),
    `from ${new URL(env.DENIED_PAGE_URL).origin} the preflighted fetch fails (${got.error ?? got.status})`);
  got = await readBack({});
  check(got.error !== undefined, `from ${new URL(env.DENIED_PAGE_URL).origin} the simple fetch fails too`);
  check(problems.length === 0, `no page errors ${JSON.stringify(problems)}`);
} catch (e) {
  console.log(`error: ${e.stack || e}`);
  failed = true;
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
