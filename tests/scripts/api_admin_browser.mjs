// Headless Chromium (playwright-core) opens /admin with the token: live numbers change while
// requests run; changing the capacity applies live and the next request's compression ratio
// reflects it; a bad value shows the server's error and changes nothing.
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { startServer, check } from "./api_server.mjs";

const require = createRequire(`${process.env.STRATA_SOURCE_DIR}/tools/npm/package.json`);
const { chromium } = require("playwright-core");
const [bin, model, chromiumPath] = process.argv.slice(2);
const s = await startServer(bin, model);
const userDir = fs.mkdtempSync(path.join(os.tmpdir(), "strata-chromium-"));
const ctx = await chromium.launchPersistentContext(userDir, {
  executablePath: chromiumPath, headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
const complete = async (extra = {}) => {
  const r = await fetch(`${s.base}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "a long enough prompt ".repeat(12), max_tokens: 24, ignore_eos: true, ...extra }) });
  return r.json();
};
try {
  const page = await ctx.newPage();
  await page.goto(`${s.base}/admin?token=${s.token}`);
  await page.waitForFunction(() => document.getElementById("conn").textContent === "live", null, { timeout: 10000 });
  const gen0 = Number(await page.textContent("#v-gen"));
  await Promise.all([complete(), complete(), complete()]);
  await page.waitForFunction((g) => Number(document.getElementById("v-gen").textContent) > g, gen0, { timeout: 10000 });
  check(true, "live generated-token count rises while requests run");

  const before = await complete();
  const ratio0 = before.usage.strata.compression_ratio;
  const v0 = Number(await page.textContent("#v-version"));
  await page.fill("input[name=capacity]", "24");
  await page.click("#apply");
  await page.waitForFunction(() => document.getElementById("msg").className === "ok", null, { timeout: 10000 });
  check((await page.textContent("#msg")).includes("applied"), "capacity change applied: " + (await page.textContent("#msg")));
  const after = await complete();
  const ratio1 = after.usage.strata.compression_ratio;
  check(ratio1 > ratio0, `next request's compression ratio reflects the smaller capacity (${ratio0} -> ${ratio1})`);
  await page.waitForFunction((v) => Number(document.getElementById("v-version").textContent) > v, v0, { timeout: 10000 });
  check(true, "profile version on the page advanced");

  const prof = await (await fetch(`${s.base}/admin/api/profile`, { headers: { Authorization: `Bearer ${s.token}` } })).json();
  await page.fill("input[name=window]", "1000");
  await page.click("#apply");
  await page.waitForFunction(() => document.getElementById("msg").className === "err", null, { timeout: 10000 });
  const err = await page.textContent("#msg");
  check(err.includes("sparsity"), "bad value shows the server's message: " + err);
  const prof2 = await (await fetch(`${s.base}/admin/api/profile`, { headers: { Authorization: `Bearer ${s.token}` } })).json();
  check(prof2.version === prof.version && JSON.stringify(prof2.profile) === JSON.stringify(prof.profile), "the bad value changed nothing");
  await page.waitForFunction((w) => document.querySelector("input[name=window]").value === String(w), prof.profile.window, { timeout: 10000 });
  check((await page.getAttribute("#msg", "class")) === "err", `after the refusal the form shows the running profile again (window ${prof.profile.window}), the error stays`);
  await page.click("#apply");  // the running profile again: nothing to publish
  await page.waitForFunction(() => document.getElementById("msg").textContent.startsWith("no change"), null, { timeout: 10000 });
  const prof3 = await (await fetch(`${s.base}/admin/api/profile`, { headers: { Authorization: `Bearer ${s.token}` } })).json();
  check(prof3.version === prof.version, `an unchanged profile publishes no new version (${prof3.version})`);
} finally {
  await ctx.close();
  fs.rmSync(userDir, { recursive: true, force: true });
  await s.stop();
}
console.log("api_admin_browser: all passed");
