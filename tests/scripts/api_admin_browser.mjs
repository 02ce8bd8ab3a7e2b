// Headless Chromium (playwright-core) opens /admin with the token: live numbers change while
// requests run; the per-layer console (table, heatmap, slots and kept-position charts) draws
// what the stats API says, with axes, units and legends, and nothing overlaps from 360 to
// 420 px; changing the capacity applies live and the next request's compression ratio
// reflects it; a bad value shows the server's error and changes nothing. Screenshots (desktop
// and phone width) go to the output folder given as the last argument.
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { startServer, check } from "./api_server.mjs";

const require = createRequire(`${process.env.STRATA_SOURCE_DIR}/tools/npm/package.json`);
const { chromium } = require("playwright-core");
const [bin, model, chromiumPath, outDir = path.join(os.tmpdir(), "strata-admin-browser")] = process.argv.slice(2);
fs.mkdirSync(outDir, { recursive: true });
const s = await startServer(bin, model);
const userDir = fs.mkdtempSync(path.join(os.tmpdir(), "strata-chromium-"));
const ctx = await chromium.launchPersistentContext(userDir, {
  executablePath: chromiumPath, headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
const adminGet = async (p) => (await fetch(`${s.base}${p}`, { headers: { Authorization: `Bearer ${s.token}` } })).json();
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
  await consoleChecks(page);

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

// The per-layer console under a steady load of requests that select (prompt > capacity).
async function consoleChecks(page) {
  const prof = await adminGet("/admin/api/profile");
  const layers = prof.num_layers;
  const sparse = prof.layers.map((l, i) => [l, i]).filter(([l]) => l.policy !== "full").map(([, i]) => i);
  check(layers > 1 && sparse.length > 0, `the model has ${layers} layers, ${sparse.length} sparse`);
  let loading = true;
  const load = (async () => {
    while (loading) await Promise.all([0, 1, 2, 3].map(() => complete({ max_tokens: 160 })));
  })();
  try {
    await page.setViewportSize({ width: 1280, height: 900 });
    // A census with kept positions reached the page: every sparse layer's bar is drawn.
    await page.waitForFunction((n) => document.querySelectorAll("#c-kept rect.kept").length === 3 * n &&
      [...document.querySelectorAll("#layers tbody tr")].some((r) => Number(r.cells[3].textContent) > 0),
      sparse.length, { timeout: 15000 });
    const stats = await adminGet("/admin/api/stats");
    check(Array.isArray(stats.layers) && stats.layers.length === layers && stats.page_bytes > 0,
      `stats API: ${stats.layers.length} layer objects, page_bytes ${stats.page_bytes}`);
    check(stats.layers.every((l, i) => l.layer === i && l.policy === prof.layers[i].policy &&
      l.capacity === prof.layers[i].capacity && l.bytes === l.pages * stats.page_bytes),
      "stats API: each layer's policy and capacity are the profile's, bytes = pages x page_bytes");
    const drawn = await page.evaluate(() => {
      const q = (sel) => [...document.querySelectorAll(sel)];
      const text = (e) => e.textContent.trim();
      const charts = ["c-tps", "c-batch", "c-ttft", "c-pages", "c-ratio", "c-slots", "c-bins", "heatmap", "c-kept"];
      const axes = {};
      for (const id of charts) {
        const svg = document.getElementById(id);
        axes[id] = { x: q(`#${id} .axis-title.x`).map(text), y: q(`#${id} .axis-title.y`).map(text),
                     xl: q(`#${id} .axis-label.x`).length, yl: q(`#${id} .axis-label.y`).length };
      }
      const legends = {};
      for (const l of q(".legend")) legends[l.id] = q(`#${l.id} .key`).map(text);
      const hm = document.getElementById("heatmap");
      const kept = {};
      for (const r of q("#c-kept rect.kept")) kept[r.getAttribute("class")] = (kept[r.getAttribute("class")] || 0) + Number(r.getAttribute("width"));
      const rows = q("#layers tbody tr").map((r) => [...r.cells].map(text));
      return { axes, legends, cells: q("#heatmap rect.cell").length, hmLayers: Number(hm.dataset.layers),
               hmSamples: Number(hm.dataset.samples), kept, rows, boxes: q("#c-slots g.box").length,
               dists: q("#layers svg.dist").length, bins: q("#c-bins rect.bin").length,
               quality: text(document.getElementById("quality")), note: text(document.getElementById("kept-note")) };
    });
    for (const [id, a] of Object.entries(drawn.axes))
      check(a.x.length + a.y.length >= 2 || (id === "c-slots" && a.x.length === 1 && a.y.length === 1),
        `${id}: axis titles ${JSON.stringify([...a.x, ...a.y])}`);
    for (const id of ["c-tps", "c-batch", "c-ttft", "c-pages", "c-ratio"])
      check(drawn.axes[id].x[0] === "time before now" && drawn.axes[id].xl >= 2 && drawn.axes[id].yl >= 2,
        `${id}: time axis with ${drawn.axes[id].xl} ticks, y axis '${drawn.axes[id].y[0]}' with ${drawn.axes[id].yl} ticks`);
    check(drawn.axes["c-tps"].y[0] === "tokens/s" && drawn.axes["c-ttft"].y[0] === "ms" &&
      drawn.axes["c-pages"].y[0] === "pages" && drawn.axes["c-slots"].y[0] === "slots" &&
      drawn.axes["heatmap"].y[0] === "layer", "units on the axes: tokens/s, ms, pages, slots, layer");
    check(drawn.legends["l-batch"].join() === "running,waiting", "requests legend: " + drawn.legends["l-batch"]);
    check(drawn.legends["l-pages"].join() === "full layers,sparse layers", "KV pages legend: " + drawn.legends["l-pages"]);
    check(drawn.legends["l-kept"].length === 3 && ["sinks", "middle", "recent"].every((k, i) => drawn.legends["l-kept"][i].startsWith(k)),
      "kept-position legend: " + drawn.legends["l-kept"].join(" | "));
    check(drawn.legends["l-slots"].length === 4, "slots legend: " + drawn.legends["l-slots"].join(" | "));
    check(/B$/.test(drawn.legends["l-heatmap"][0]) && drawn.legends["l-heatmap"][0].startsWith("0 B"),
      "heatmap colour scale in bytes: " + drawn.legends["l-heatmap"].join(" | "));
    check(drawn.hmLayers === layers && drawn.hmSamples >= 2 && drawn.cells === layers * drawn.hmSamples,
      `heatmap: ${drawn.cells} cells = ${layers} layers x ${drawn.hmSamples} samples`);
    check(drawn.boxes === layers && drawn.rows.length === layers && drawn.dists === layers && drawn.bins === 10,
      `one box plot, table row and distribution per layer (${drawn.boxes}, ${drawn.rows.length}, ${drawn.dists}); 10 position bins`);
    check(drawn.rows.every((r, i) => r[0] === String(i) && r[1] === prof.layers[i].policy), "table rows: layer and policy as the profile says");
    const widths = Object.values(drawn.kept);
    check(drawn.kept["kept sinks"] > 0 && drawn.kept["kept middle"] > 0 && drawn.kept["kept recent"] > 0,
      `kept positions: sinks, middle and recent all drawn (${widths.map((w) => w.toFixed(0)).join(", ")} px)`);
    check(drawn.note.startsWith("census of"), "kept-position note: " + drawn.note);
    // The guardrail's place: its report when the server has /admin/api/quality, else the label.
    const getQuality = () => fetch(`${s.base}/admin/api/quality`, { headers: { Authorization: `Bearer ${s.token}` } });
    const qr = await getQuality();
    if (qr.ok) {
      let q = await qr.json();
      await page.waitForFunction(() => document.querySelector("#quality-body .note") !== null, null, { timeout: 5000 });
      const drawnQuality = () => page.evaluate(() => ({ note: document.querySelector("#quality-body .note").textContent,
        rows: document.querySelectorAll("#quality-body tr.version").length }));
      let shown = await drawnQuality();
      // Replays finish in the background and the page polls every 2 s: give it two polls to
      // catch up with the report fetched here.
      for (let i = 0; i < 25 && q.enabled !== false && shown.rows !== (q.versions || []).length; ++i) {
        await new Promise((r) => setTimeout(r, 200));
        q = await (await getQuality()).json();
        shown = await drawnQuality();
      }
      check(q.enabled === false ? shown.note.startsWith("off") : shown.rows === (q.versions || []).length,
        `quality guardrail report drawn: ${shown.rows} version row(s), '${shown.note.slice(0, 60)}'`);
    } else {
      check(qr.status === 404 && /not reported by this server/.test(drawn.quality),
        "quality guardrail: a labelled place (" + drawn.quality.slice(0, 70) + ")");
    }
    // The time window: 1 min shows -60 s at the left of the time axes.
    await page.selectOption("#timewin", "60");
    const win = await page.evaluate(() => [...document.querySelectorAll("#c-tps .axis-label.x")].map((e) => e.textContent));
    check(win.includes("−1 min") && win.includes("now"), "1 min window: time axis " + win.join(" "));
    await page.selectOption("#timewin", "300");
    const win5 = await page.evaluate(() => [...document.querySelectorAll("#c-tps .axis-label.x")].map((e) => e.textContent));
    check(win5.includes("−5 min"), "5 min window: time axis " + win5.join(" "));
    await page.screenshot({ path: path.join(outDir, "admin-desktop.png"), fullPage: true });
    console.log("screenshot:", path.join(outDir, "admin-desktop.png"));

    for (const width of [360, 390, 420]) {
      await page.setViewportSize({ width, height: 800 });
      await page.waitForTimeout(700);  // a redraw at the new width (resize + the next sample)
      const r = await page.evaluate(() => {
        const boxes = [...document.querySelectorAll("header, .card, .panel, form, label.f, #msg")];
        const rect = (e) => e.getBoundingClientRect();
        const hit = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
        const overlaps = [];
        for (let i = 0; i < boxes.length; ++i)
          for (let j = i + 1; j < boxes.length; ++j) {
            const a = boxes[i], b = boxes[j];
            if (a.contains(b) || b.contains(a)) continue;
            if (hit(rect(a), rect(b))) overlaps.push((a.id || a.className || a.tagName) + " x " + (b.id || b.className || b.tagName));
          }
        // Inside the form each field stays in its label, inside the form.
        const form = rect(document.getElementById("profile"));
        for (const f of document.querySelectorAll("#profile input, #profile select, #profile button")) {
          const b = rect(f);
          if (b.left < form.left - 0.5 || b.right > form.right + 0.5) overlaps.push("form field " + (f.name || f.id) + " outside the form");
        }
        // Tick labels of one axis do not collide.
        for (const svg of document.querySelectorAll("svg.chart"))
          for (const cls of ["x", "y"]) {
            const t = [...svg.querySelectorAll(".axis-label." + cls)].map(rect);
            for (let i = 1; i < t.length; ++i)
              if (hit(t[i - 1], t[i])) overlaps.push(svg.id + " " + cls + " tick labels");
          }
        const wide = [...document.querySelectorAll(".panel, form, .card, header")].filter((e) => rect(e).right > innerWidth + 0.5).map((e) => e.id || e.className);
        return { overlaps, wide, scroll: document.documentElement.scrollWidth, inner: innerWidth,
                 formTop: form.top, contentBottom: rect(document.getElementById("content")).bottom };
      });
      check(r.overlaps.length === 0, `${width} px: no overlapping elements${r.overlaps.length ? ": " + r.overlaps.slice(0, 5).join("; ") : ""}`);
      check(r.wide.length === 0 && r.scroll <= r.inner, `${width} px: nothing wider than the viewport (scroll width ${r.scroll})`);
      check(r.formTop >= r.contentBottom - 0.5, `${width} px: the profile form sits below the charts`);
      if (width === 390) {
        await page.screenshot({ path: path.join(outDir, "admin-phone-390.png"), fullPage: true });
        console.log("screenshot:", path.join(outDir, "admin-phone-390.png"));
      }
    }
    await page.setViewportSize({ width: 1280, height: 900 });
  } finally {
    loading = false;
    await load;
  }
}
