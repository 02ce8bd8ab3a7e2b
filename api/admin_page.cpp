#include "api/admin_page.h"

namespace strata::api {

const char* const kAdminPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Strata admin</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d232b}
header{background:#1d232b;color:#fff;padding:10px 18px;display:flex;gap:18px;align-items:baseline}
header h1{font-size:18px;margin:0} header span{opacity:.75}
main{display:grid;grid-template-columns:minmax(0,2fr) minmax(280px,1fr);gap:16px;padding:16px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(140px,1fr));gap:10px;margin-bottom:12px}
.card{background:#fff;border-radius:6px;padding:10px;box-shadow:0 1px 2px #0002}
.card b{display:block;font-size:20px} .card small{opacity:.7}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(320px,1fr));gap:10px}
.chart{background:#fff;border-radius:6px;padding:8px;box-shadow:0 1px 2px #0002}
.chart h3{margin:0 0 4px;font-size:13px} canvas{width:100%;height:120px}
form{background:#fff;border-radius:6px;padding:12px;box-shadow:0 1px 2px #0002}
label{display:grid;grid-template-columns:130px 1fr;align-items:center;margin:6px 0;gap:8px}
input,select{font:inherit;padding:3px 5px} button{font:inherit;padding:6px 14px;margin-top:8px}
#msg{margin-top:10px;white-space:pre-wrap} .err{color:#b00020} .ok{color:#0a7d32}
</style></head><body>
<header><h1>Strata</h1><span id="model">…</span><span id="conn">connecting…</span></header>
<main><section>
<div class="cards">
<div class="card"><small>tokens/s</small><b id="v-tps">0</b></div>
<div class="card"><small>running</small><b id="v-running">0</b></div>
<div class="card"><small>waiting</small><b id="v-waiting">0</b></div>
<div class="card"><small>TTFT (ms, recent)</small><b id="v-ttft">0</b></div>
<div class="card"><small>generated tokens</small><b id="v-gen">0</b></div>
<div class="card"><small>KV pages used</small><b id="v-pages">0</b></div>
<div class="card"><small>compression ratio</small><b id="v-ratio">1</b></div>
<div class="card"><small>profile version</small><b id="v-version">0</b></div>
</div>
<div class="charts">
<div class="chart"><h3>Throughput (tokens/s)</h3><canvas id="c-tps"></canvas></div>
<div class="chart"><h3>Requests: running / waiting</h3><canvas id="c-batch"></canvas></div>
<div class="chart"><h3>TTFT (ms)</h3><canvas id="c-ttft"></canvas></div>
<div class="chart"><h3>KV pages: full / sparse layers</h3><canvas id="c-pages"></canvas></div>
<div class="chart"><h3>Compression ratio</h3><canvas id="c-ratio"></canvas></div>
</div></section>
<section><form id="profile" autocomplete="off">
<h3 style="margin-top:0">KV sparsity profile</h3>
<label>enabled <input type="checkbox" name="enabled"></label>
<label>full_layers <input name="full_layers" title="count of leading layers, or a comma list"></label>
<label>policy <select name="policy"><option>scored</option><option>snapkv</option><option>window</option></select></label>
<label>capacity <input name="capacity" type="number"></label>
<label>schedule <input name="schedule" title="uniform, pyramid, or a comma list of capacities"></label>
<label>pyramid_beta <input name="pyramid_beta" type="number"></label>
<label>window <input name="window" type="number"></label>
<label>sinks <input name="sinks" type="number"></label>
<label>pool <select name="pool"><option>max</option><option>avg</option></select></label>
<label>pool_kernel <input name="pool_kernel" type="number"></label>
<button type="submit" id="apply">Apply</button> <button type="button" id="reload">Reload</button>
<div id="msg"></div></form></section></main>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token") || "";
const auth = {"Authorization": "Bearer " + token};
const $ = (id) => document.getElementById(id);
const N = 120;
const series = {tps: [[]], batch: [[], []], ttft: [[]], pages: [[], []], ratio: [[]]};
const colors = ["#2f6fde", "#e0862f"];
function push(name, values) {
  series[name].forEach((s, i) => { s.push(values[i]); if (s.length > N) s.shift(); });
  draw(name);
}
function draw(name) {
  const c = $("c-" + name), ctx = c.getContext("2d");
  const w = c.width = c.clientWidth * devicePixelRatio, h = c.height = c.clientHeight * devicePixelRatio;
  ctx.clearRect(0, 0, w, h);
  let max = 1e-9;
  series[name].forEach(s => s.forEach(v => { if (v > max) max = v; }));
  ctx.fillStyle = "#8889"; ctx.font = (10 * devicePixelRatio) + "px sans-serif";
  ctx.fillText(max.toPrecision(3), 2, 10 * devicePixelRatio);
  series[name].forEach((s, k) => {
    ctx.strokeStyle = colors[k]; ctx.lineWidth = 1.5 * devicePixelRatio; ctx.beginPath();
    s.forEach((v, i) => { const x = i * w / (N - 1), y = h - 2 - (v / max) * (h - 14);
      if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y); });
    ctx.stroke();
  });
}
function fmt(v, d) { return typeof v === "number" ? (d ? v.toFixed(d) : String(Math.round(v))) : String(v); }
function show(s) {
  $("v-tps").textContent = fmt(s.tokens_per_s, 1);
  $("v-running").textContent = s.running;
  $("v-waiting").textContent = s.waiting;
  $("v-ttft").textContent = fmt(s.ttft_ms_recent, 1);
  $("v-gen").textContent = s.generation_tokens_total;
  $("v-pages").textContent = s.pages_used + " / " + s.pages_total;
  $("v-ratio").textContent = fmt(s.compression_ratio, 2);
  $("v-version").textContent = s.profile_version;
  push("tps", [s.tokens_per_s]); push("batch", [s.running, s.waiting]);
  push("ttft", [s.ttft_ms_recent]); push("pages", [s.pages_by_group.full, s.pages_by_group.sparse]);
  push("ratio", [s.compression_ratio]);
}
function fill(p) {
  const f = $("profile");
  f.enabled.checked = !!p.enabled;
  f.full_layers.value = Array.isArray(p.full_layers) ? p.full_layers.join(",") : p.full_layers;
  f.policy.value = p.policy; f.capacity.value = p.capacity;
  f.schedule.value = Array.isArray(p.schedule) ? p.schedule.join(",") : p.schedule;
  f.pyramid_beta.value = p.pyramid_beta; f.window.value = p.window; f.sinks.value = p.sinks;
  f.pool.value = p.pool; f.pool_kernel.value = p.pool_kernel;
}
function num(v) { const t = v.trim(); return /^-?\d+$/.test(t) ? Number(t) : t; }
function list(v) { return v.includes(",") ? v.split(",").map(num) : num(v); }
function collect() {
  const f = $("profile");
  return {enabled: f.enabled.checked, full_layers: list(f.full_layers.value), policy: f.policy.value,
          capacity: num(f.capacity.value), schedule: list(f.schedule.value),
          pyramid_beta: num(f.pyramid_beta.value), window: num(f.window.value),
          sinks: num(f.sinks.value), pool: f.pool.value, pool_kernel: num(f.pool_kernel.value)};
}
async function load() {
  const r = await fetch("/admin/api/profile", {headers: auth});
  const j = await r.json();
  if (!r.ok) { msg(j.error ? j.error.message : r.statusText, true); return; }
  fill(j.profile); $("model").textContent = j.model + " · " + j.num_layers + " layers";
}
function msg(text, bad) { const m = $("msg"); m.textContent = text; m.className = bad ? "err" : "ok"; }
$("profile").addEventListener("submit", async (e) => {
  e.preventDefault();
  const r = await fetch("/admin/api/profile", {method: "PUT",
    headers: Object.assign({"Content-Type": "application/json"}, auth), body: JSON.stringify(collect())});
  const j = await r.json();
  if (r.ok) {
    msg(j.published ? "applied: profile version " + j.version
                    : "no change: profile version " + j.version + " stays", false);
    fill(j.profile);
  } else {  // refused: say why, and show again what the server runs
    msg((j.error.param && !j.error.message.startsWith(j.error.param) ? j.error.param + ": " : "") +
        j.error.message, true);
    const cur = await fetch("/admin/api/profile", {headers: auth});
    if (cur.ok) fill((await cur.json()).profile);
  }
});
$("reload").addEventListener("click", load);
const es = new EventSource("/admin/api/stream?token=" + encodeURIComponent(token));
es.onopen = () => { $("conn").textContent = "live"; };
es.onerror = () => { $("conn").textContent = "reconnecting…"; };
es.onmessage = (e) => show(JSON.parse(e.data));
load();
</script></body></html>
)HTML";

}  // namespace strata::api
