#include "api/admin_page.h"

namespace strata::api {

// The page's charts are SVG drawn from the live stats stream (docs/api.md "Admin console"):
// the history lives in the page (since it was opened, at most an hour), the time window
// selector picks how much of it the charts show.
const char* const kAdminPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Strata admin</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
*{box-sizing:border-box}
body{font:14px system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d232b}
header{background:#1d232b;color:#fff;padding:10px 16px;display:flex;flex-wrap:wrap;gap:6px 18px;align-items:baseline}
header h1{font-size:18px;margin:0} header span{opacity:.75;overflow-wrap:anywhere}
header label{margin-left:auto;display:flex;gap:6px;align-items:center;opacity:1}
main{display:grid;grid-template-columns:minmax(0,1fr) minmax(260px,340px);gap:16px;padding:16px}
main>*{min-width:0}
@media (max-width:900px){main{grid-template-columns:minmax(0,1fr);padding:10px;gap:12px}}
h2{font-size:15px;margin:18px 0 8px} h2:first-child{margin-top:0}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,140px),1fr));gap:10px;margin-bottom:12px}
.card,.panel,form{background:#fff;border-radius:6px;padding:10px;box-shadow:0 1px 2px #0002;min-width:0}
.card b{display:block;font-size:20px;overflow-wrap:anywhere} .card small{opacity:.7}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,330px),1fr));gap:10px}
.panel h3{margin:0 0 4px;font-size:13px} .panel .note{font-size:12px;opacity:.7;margin:4px 0 0}
.panel.wide{grid-column:1/-1}
svg.chart{display:block;width:100%;height:170px;overflow:visible}
svg.chart.tall{height:auto}
svg text{font:10px system-ui,sans-serif;fill:#4a5360}
svg .axis-title{font-size:10px;fill:#1d232b}
svg .grid{stroke:#e3e6ea} svg .axis{stroke:#8a939e}
.legend{display:flex;flex-wrap:wrap;gap:4px 12px;font-size:12px;margin-top:4px}
.legend .key{display:inline-flex;align-items:center;gap:5px}
.legend i{display:inline-block;width:12px;height:10px;border-radius:2px}
.legend .ramp{width:90px;height:10px;background:linear-gradient(90deg,#eef3fb,#2f6fde,#0b2a66)}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;width:100%;font-size:12px;font-variant-numeric:tabular-nums}
th,td{padding:4px 6px;text-align:right;border-bottom:1px solid #eceff2;white-space:nowrap}
th:nth-child(2),td:nth-child(2){text-align:left}
td svg{display:block}
form h3{margin-top:0}
label.f{display:grid;grid-template-columns:minmax(84px,120px) minmax(0,1fr);align-items:center;margin:6px 0;gap:8px}
label.f input:not([type=checkbox]),label.f select{width:100%;min-width:0}
input,select{font:inherit;padding:3px 5px} button{font:inherit;padding:6px 14px;margin-top:8px}
#msg{margin-top:10px;white-space:pre-wrap;overflow-wrap:anywhere} .err{color:#b00020} .ok{color:#0a7d32}
#quality .alert{color:#b00020;font-weight:600}
</style></head><body>
<header><h1>Strata</h1><span id="model">…</span><span id="conn">connecting…</span>
<label>time window <select id="timewin"><option value="60">1 min</option><option value="300" selected>5 min</option><option value="900">15 min</option><option value="0">all</option></select></label></header>
<main><section id="content">
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
<div class="charts" id="charts">
<div class="panel"><h3>Throughput</h3><svg class="chart" id="c-tps"></svg><div class="legend" id="l-tps"></div></div>
<div class="panel"><h3>Requests</h3><svg class="chart" id="c-batch"></svg><div class="legend" id="l-batch"></div></div>
<div class="panel"><h3>Time to first token</h3><svg class="chart" id="c-ttft"></svg><div class="legend" id="l-ttft"></div></div>
<div class="panel"><h3>KV pages by layer group</h3><svg class="chart" id="c-pages"></svg><div class="legend" id="l-pages"></div></div>
<div class="panel"><h3>Compression ratio</h3><svg class="chart" id="c-ratio"></svg><div class="legend" id="l-ratio"></div></div>
</div>
<h2>Layers</h2>
<div class="charts" id="layer-charts">
<div class="panel wide"><h3>KV held per layer over time</h3><svg class="chart tall" id="heatmap"></svg><div class="legend" id="l-heatmap"></div></div>
<div class="panel"><h3>Slots held per layer (over running sequences)</h3><svg class="chart" id="c-slots"></svg><div class="legend" id="l-slots"></div></div>
<div class="panel"><h3>Kept-slot positions (sparse layers)</h3><svg class="chart tall" id="c-kept"></svg><div class="legend" id="l-kept"></div><p class="note" id="kept-note"></p></div>
<div class="panel"><h3>Kept-slot positions along the sequence (sparse layers)</h3><svg class="chart" id="c-bins"></svg><div class="legend" id="l-bins"></div></div>
<div class="panel wide"><h3>Per layer</h3><div class="scroll"><table id="layers"><thead><tr>
<th>layer</th><th>policy</th><th>capacity (slots)</th><th>sequences</th><th>slots held, mean</th><th>min / p50 / max</th><th>distribution</th><th>KV bytes held</th><th>KV pages</th>
</tr></thead><tbody></tbody></table></div></div>
<div class="panel wide" id="quality"><h3>Quality guardrail</h3><div id="quality-body">not reported by this server: no <code>/admin/api/quality</code> (issue 22 item 1, the live quality guardrail, fills this place)</div></div>
</div></section>
<section><form id="profile" autocomplete="off">
<h3>KV sparsity profile</h3>
<label class="f">enabled <input type="checkbox" name="enabled"></label>
<label class="f">full_layers <input name="full_layers" title="count of leading layers, or a comma list"></label>
<label class="f">policy <select name="policy"><option>scored</option><option>snapkv</option><option>window</option></select></label>
<label class="f">capacity <input name="capacity" type="number"></label>
<label class="f">schedule <input name="schedule" title="uniform, pyramid, or a comma list of capacities"></label>
<label class="f">pyramid_beta <input name="pyramid_beta" type="number"></label>
<label class="f">window <input name="window" type="number"></label>
<label class="f">sinks <input name="sinks" type="number"></label>
<label class="f">pool <select name="pool"><option>max</option><option>avg</option></select></label>
<label class="f">pool_kernel <input name="pool_kernel" type="number"></label>
<button type="submit" id="apply">Apply</button> <button type="button" id="reload">Reload</button>
<div id="msg"></div></form></section></main>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token") || "";
const auth = {"Authorization": "Bearer " + token};
const $ = (id) => document.getElementById(id);
const NS = "http://www.w3.org/2000/svg";
const MAX_SAMPLES = 7200;   // 1 h at the stream's 500 ms
const MAX_COLUMNS = 120;    // heatmap columns at most (samples are averaged into them)
const COLORS = ["#2f6fde", "#e0862f", "#3a9e5c", "#9b59b6"];
const KEPT = [["sinks", "#7d4cc2"], ["middle", "#2f6fde"], ["recent", "#e0862f"]];
const history = [];         // {t (s, server clock), s (the stats object)}
let last = null;

function svgEl(parent, tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  parent.appendChild(e);
  return e;
}
function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }
function legend(id, items) {
  const l = $(id); clear(l);
  for (const [name, color, cls] of items) {
    const k = document.createElement("span"); k.className = "key";
    const i = document.createElement("i"); if (cls) i.className = cls; else i.style.background = color;
    k.appendChild(i); k.appendChild(document.createTextNode(name)); l.appendChild(k);
  }
}
// Axis ticks: about n "nice" values covering [0, max].
function ticks(max, n) {
  if (!(max > 0)) max = 1;
  const raw = max / n, p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
  const step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
  const out = []; for (let v = 0; v <= max * 1.0001 + step * 0.999; v += step) { out.push(v); if (v >= max) break; }
  return out;
}
function num(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toPrecision(3) + "G";
  if (a >= 1e6) return (v / 1e6).toPrecision(3) + "M";
  if (a >= 1e4) return (v / 1e3).toPrecision(3) + "k";
  return Number.isInteger(v) ? String(v) : v.toPrecision(3).replace(/\.?0+$/, "");
}
function bytes(v) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; ++i; }
  return (i ? v.toFixed(v < 10 ? 2 : 1) : String(Math.round(v))) + " " + u[i];
}
function windowSeconds() { return Number($("timewin").value); }
function visible() {
  const w = windowSeconds();
  if (!history.length || w === 0) return history;
  const t1 = history[history.length - 1].t;
  let i = history.length; while (i > 0 && history[i - 1].t >= t1 - w) --i;
  return history.slice(i);
}
// The x range shown: the window (or all history) ending at the newest sample.
function xRange(h) {
  const t1 = h.length ? h[h.length - 1].t : 0, w = windowSeconds();
  const t0 = w ? t1 - w : (h.length ? h[0].t : t1 - 1);
  return [t0, Math.max(t1, t0 + 1)];
}
const TIME_STEPS = [1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600];  // s
function timeLabel(dt) {
  const a = Math.round(-dt);
  return a === 0 ? "now" : a >= 60 && a % 60 === 0 ? "−" + a / 60 + " min" : "−" + a + " s";
}

// A plot frame: the svg sized to its box, margins for the axes, returns the mapping.
function frame(svg, height, left) {
  clear(svg);
  const W = Math.max(200, svg.clientWidth || svg.parentNode.clientWidth || 300), H = height;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.style.height = H + "px";
  return {W, H, L: left, R: 10, T: 8, B: 34};
}
function yAxis(svg, f, max, unit) {
  const ts = ticks(max, 4), top = ts[ts.length - 1];
  const y = (v) => f.H - f.B - (v / top) * (f.H - f.B - f.T);
  for (const v of ts) {
    svgEl(svg, "line", {class: "grid", x1: f.L, x2: f.W - f.R, y1: y(v), y2: y(v)});
    svgEl(svg, "text", {class: "axis-label y", x: f.L - 4, y: y(v) + 3, "text-anchor": "end"}, num(v));
  }
  svgEl(svg, "line", {class: "axis", x1: f.L, x2: f.L, y1: f.T, y2: f.H - f.B});
  svgEl(svg, "text", {class: "axis-title y", x: 0, y: 0, transform: "translate(10," + ((f.H - f.B + f.T) / 2) + ") rotate(-90)", "text-anchor": "middle"}, unit);
  return y;
}
function timeAxis(svg, f, t0, t1) {
  const x = (t) => f.L + (t - t0) / (t1 - t0) * (f.W - f.L - f.R);
  const span = t1 - t0, n = Math.max(2, Math.min(6, Math.floor((f.W - f.L) / 70)));
  const step = TIME_STEPS.find(d => span / d <= n) || span;
  svgEl(svg, "line", {class: "axis", x1: f.L, x2: f.W - f.R, y1: f.H - f.B, y2: f.H - f.B});
  for (let dt = 0; dt <= span + 1e-9; dt += step) {
    const xx = x(t1 - dt);
    svgEl(svg, "line", {class: "axis", x1: xx, x2: xx, y1: f.H - f.B, y2: f.H - f.B + 3});
    svgEl(svg, "text", {class: "axis-label x", x: xx, y: f.H - f.B + 13, "text-anchor": dt === 0 ? "end" : "middle"}, timeLabel(-dt));
  }
  svgEl(svg, "text", {class: "axis-title x", x: (f.L + f.W - f.R) / 2, y: f.H - 3, "text-anchor": "middle"}, "time before now");
  return x;
}
// Line chart of history fields: series [[name, fn(stats)]], unit of the y axis.
function lineChart(id, series, unit) {
  const svg = $("c-" + id), h = visible(), f = frame(svg, 170, 46);
  const [t0, t1] = xRange(h);
  let max = 0; for (const p of h) for (const [, fn] of series) max = Math.max(max, fn(p.s) || 0);
  const y = yAxis(svg, f, max, unit), x = timeAxis(svg, f, t0, t1);
  series.forEach(([name, fn], k) => {
    if (!h.length) return;
    const pts = h.map(p => x(p.t).toFixed(1) + "," + y(fn(p.s) || 0).toFixed(1)).join(" ");
    svgEl(svg, "polyline", {class: "series", "data-series": name, points: pts, fill: "none", stroke: COLORS[k], "stroke-width": 1.8});
  });
  legend("l-" + id, series.map(([name], k) => [name, COLORS[k]]));
}
function heatColor(v) {  // 0 … 1 -> light to dark blue
  const stops = [[238, 243, 251], [47, 111, 222], [11, 42, 102]];
  const t = Math.max(0, Math.min(1, v)) * 2, i = Math.min(1, Math.floor(t)), u = t - i;
  const c = stops[i].map((a, j) => Math.round(a + (stops[i + 1][j] - a) * u));
  return "rgb(" + c.join(",") + ")";
}
function layerBytes(s) {
  return (s.pages_per_layer || []).map(p => p * (s.page_bytes || 0));
}
function heatmap() {
  const svg = $("heatmap"), h = visible();
  const layers = last ? (last.pages_per_layer || []).length : 0;
  const rowH = Math.max(6, Math.min(18, Math.floor(240 / Math.max(1, layers))));
  const f = frame(svg, 8 + layers * rowH + 34, 46);
  const [t0, t1] = xRange(h);
  // Columns: one per sample, or samples averaged into MAX_COLUMNS buckets of equal time.
  const cols = [];
  if (h.length <= MAX_COLUMNS) {
    h.forEach((p, i) => cols.push({t0: i ? (h[i - 1].t + p.t) / 2 : p.t - 0.25, t1: i + 1 < h.length ? (p.t + h[i + 1].t) / 2 : p.t, v: layerBytes(p.s)}));
  } else {
    const span = (h[h.length - 1].t - h[0].t) / MAX_COLUMNS;
    for (let c = 0; c < MAX_COLUMNS; ++c) cols.push({t0: h[0].t + c * span, t1: h[0].t + (c + 1) * span, v: new Array(layers).fill(0), n: 0});
    for (const p of h) {
      const c = Math.min(MAX_COLUMNS - 1, Math.floor((p.t - h[0].t) / span)), v = layerBytes(p.s);
      cols[c].n++; v.forEach((b, l) => { cols[c].v[l] += b; });
    }
    for (const c of cols) if (c.n) c.v = c.v.map(b => b / c.n);
  }
  let max = 0; for (const c of cols) for (const b of c.v) max = Math.max(max, b);
  const x = timeAxis(svg, f, t0, t1);
  const g = svgEl(svg, "g", {class: "cells"});
  for (const c of cols) {
    const x0 = Math.max(f.L, x(c.t0)), w = Math.max(1, x(c.t1) - x0);
    for (let l = 0; l < layers; ++l) {
      const b = c.v[l] || 0;
      const r = svgEl(g, "rect", {class: "cell", x: x0.toFixed(1), y: f.T + l * rowH, width: (w + 0.3).toFixed(1), height: rowH - 1, fill: heatColor(max ? b / max : 0), "data-layer": l});
      svgEl(r, "title", {}, "layer " + l + ": " + bytes(b));
    }
  }
  const every = Math.ceil(10 / rowH);
  for (let l = 0; l < layers; l += every)
    svgEl(svg, "text", {class: "axis-label y", x: f.L - 4, y: f.T + l * rowH + rowH / 2 + 3, "text-anchor": "end"}, String(l));
  svgEl(svg, "text", {class: "axis-title y", x: 0, y: 0, transform: "translate(10," + (f.T + layers * rowH / 2) + ") rotate(-90)", "text-anchor": "middle"}, "layer");
  svg.dataset.layers = layers; svg.dataset.samples = cols.length;
  const lg = $("l-heatmap"); clear(lg);
  const k = document.createElement("span"); k.className = "key";
  const ramp = document.createElement("i"); ramp.className = "ramp";
  k.append("0 B ", ramp, " " + bytes(max)); lg.appendChild(k);
  const u = document.createElement("span"); u.className = "key";
  u.textContent = "KV bytes held per layer (pages × page bytes)"; lg.appendChild(u);
}
// Box plots of slots held per layer, with each layer's capacity.
function slotsChart() {
  const svg = $("c-slots"), f = frame(svg, 170, 46), L = last ? last.layers || [] : [];
  let max = 0; for (const l of L) max = Math.max(max, l.slots.max, l.capacity || 0);
  const y = yAxis(svg, f, max, "slots");
  const n = Math.max(1, L.length), bw = (f.W - f.L - f.R) / n, xc = (i) => f.L + (i + 0.5) * bw;
  svgEl(svg, "line", {class: "axis", x1: f.L, x2: f.W - f.R, y1: f.H - f.B, y2: f.H - f.B});
  const every = Math.ceil(14 / bw);
  L.forEach((l, i) => {
    const s = l.slots, x = xc(i), w = Math.max(2, Math.min(18, bw * 0.6));
    const g = svgEl(svg, "g", {class: "box", "data-layer": i});
    if (s.sequences > 0) {
      svgEl(g, "line", {x1: x, x2: x, y1: y(s.min), y2: y(s.max), stroke: COLORS[0]});
      svgEl(g, "rect", {x: x - w / 2, y: y(s.p75), width: w, height: Math.max(1, y(s.p25) - y(s.p75)), fill: "#cfdcf6", stroke: COLORS[0]});
      svgEl(g, "line", {x1: x - w / 2, x2: x + w / 2, y1: y(s.p50), y2: y(s.p50), stroke: "#0b2a66", "stroke-width": 2});
      svgEl(g, "circle", {cx: x, cy: y(s.mean), r: 2.5, fill: COLORS[1]});
    }
    if (l.capacity > 0) svgEl(g, "line", {x1: x - bw / 2 + 1, x2: x + bw / 2 - 1, y1: y(l.capacity), y2: y(l.capacity), stroke: "#b00020", "stroke-dasharray": "3 2"});
    if (i % every === 0) svgEl(svg, "text", {class: "axis-label x", x, y: f.H - f.B + 13, "text-anchor": "middle"}, String(i));
  });
  svgEl(svg, "text", {class: "axis-title x", x: (f.L + f.W - f.R) / 2, y: f.H - 3, "text-anchor": "middle"}, "layer");
  legend("l-slots", [["p25–p75, median", "#cfdcf6"], ["min–max", COLORS[0]], ["mean", COLORS[1]], ["capacity", "#b00020"]]);
}
// Stacked bars: share of kept slots by original position class, per sparse layer.
function keptChart() {
  const svg = $("c-kept"), L = (last ? last.layers || [] : []).filter(l => l.policy !== "full");
  const rowH = Math.max(8, Math.min(18, Math.floor(220 / Math.max(1, L.length))));
  const f = frame(svg, 8 + Math.max(1, L.length) * rowH + 34, 46);
  const x = (p) => f.L + p / 100 * (f.W - f.L - f.R);
  for (const p of [0, 25, 50, 75, 100]) {
    svgEl(svg, "line", {class: "grid", x1: x(p), x2: x(p), y1: f.T, y2: f.H - f.B});
    svgEl(svg, "text", {class: "axis-label x", x: x(p), y: f.H - f.B + 13, "text-anchor": p === 100 ? "end" : "middle"}, p + " %");
  }
  svgEl(svg, "text", {class: "axis-title x", x: (f.L + f.W - f.R) / 2, y: f.H - 3, "text-anchor": "middle"}, "share of kept slots (slots × KV heads)");
  svgEl(svg, "text", {class: "axis-title y", x: 0, y: 0, transform: "translate(10," + (f.T + L.length * rowH / 2) + ") rotate(-90)", "text-anchor": "middle"}, "layer");
  let reported = 0;
  const every = Math.ceil(10 / rowH);
  L.forEach((l, i) => {
    const k = l.kept, tot = k.sinks + k.middle + k.recent, yy = f.T + i * rowH;
    if (i % every === 0) svgEl(svg, "text", {class: "axis-label y", x: f.L - 4, y: yy + rowH / 2 + 3, "text-anchor": "end"}, String(l.layer));
    if (!tot) return;
    ++reported;
    let acc = 0;
    for (const [cls, color] of KEPT) {
      const p = 100 * k[cls] / tot;
      const r = svgEl(svg, "rect", {class: "kept " + cls, x: x(acc), y: yy, width: Math.max(0, x(acc + p) - x(acc)), height: rowH - 1, fill: color});
      svgEl(r, "title", {}, "layer " + l.layer + " " + cls + ": " + p.toFixed(1) + " % (" + k[cls] + ")");
      acc += p;
    }
  });
  legend("l-kept", KEPT.map(([c, color]) => [c === "sinks" ? "sinks (first tokens)" : c === "recent" ? "recent (last α tokens)" : "middle (selected by score)", color]));
  $("kept-note").textContent = !L.length ? "no sparse layers in the published profile" :
    reported ? "census of " + Math.max(...L.map(l => l.kept.sequences)) + " running sequence(s), taken every 250 ms" :
    "no census yet (no running sequence, or the backend records no slot positions)";
}
// Deciles of the kept positions (share of kept slots per tenth of the sequence), sparse layers.
function binsChart() {
  const svg = $("c-bins"), f = frame(svg, 170, 46), L = (last ? last.layers || [] : []).filter(l => l.policy !== "full");
  const bins = new Array(10).fill(0);
  for (const l of L) (l.kept.bins || []).forEach((b, i) => { bins[i] += b; });
  const tot = bins.reduce((a, b) => a + b, 0), pct = bins.map(b => tot ? 100 * b / tot : 0);
  const y = yAxis(svg, f, Math.max(10, ...pct), "% of kept slots");
  const bw = (f.W - f.L - f.R) / 10;
  svgEl(svg, "line", {class: "axis", x1: f.L, x2: f.W - f.R, y1: f.H - f.B, y2: f.H - f.B});
  pct.forEach((p, i) => {
    const r = svgEl(svg, "rect", {class: "bin", x: f.L + i * bw + 1, y: y(p), width: bw - 2, height: Math.max(0, f.H - f.B - y(p)), fill: COLORS[0]});
    svgEl(r, "title", {}, (i * 10) + "–" + (i * 10 + 10) + " %: " + p.toFixed(1) + " %");
  });
  const every = bw < 36 ? 2 : 1;
  for (let i = 0; i <= 10; i += every) svgEl(svg, "text", {class: "axis-label x", x: f.L + i * bw, y: f.H - f.B + 13, "text-anchor": i === 10 ? "end" : i === 0 ? "start" : "middle"}, (i * 10) + "%");
  svgEl(svg, "text", {class: "axis-title x", x: (f.L + f.W - f.R) / 2, y: f.H - 3, "text-anchor": "middle"}, "original position / sequence length");
  legend("l-bins", [["kept slots, all sparse layers", COLORS[0]]]);
}
function boxCell(s, max) {
  const svg = document.createElementNS(NS, "svg"), W = 90, H = 14;
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("class", "dist");
  if (s.sequences > 0 && max > 0) {
    const x = (v) => 2 + v / max * (W - 4);
    svgEl(svg, "line", {x1: x(s.min), x2: x(s.max), y1: H / 2, y2: H / 2, stroke: COLORS[0]});
    svgEl(svg, "rect", {x: x(s.p25), y: 2, width: Math.max(1, x(s.p75) - x(s.p25)), height: H - 4, fill: "#cfdcf6", stroke: COLORS[0]});
    svgEl(svg, "line", {x1: x(s.p50), x2: x(s.p50), y1: 1, y2: H - 1, stroke: "#0b2a66", "stroke-width": 2});
  }
  return svg;
}
function table() {
  const tb = $("layers").tBodies[0], L = last ? last.layers || [] : [];
  let max = 0; for (const l of L) max = Math.max(max, l.slots.max, l.capacity);
  clear(tb);
  for (const l of L) {
    const tr = tb.insertRow(), s = l.slots;
    const cells = [l.layer, l.policy, l.capacity > 0 ? l.capacity : "∞ (full)", s.sequences, s.sequences ? s.mean.toFixed(1) : "–",
                   s.sequences ? s.min + " / " + s.p50 + " / " + s.max : "–", null, bytes(l.bytes), l.pages];
    cells.forEach((c, i) => { const td = tr.insertCell(); if (c === null) td.appendChild(boxCell(s, max)); else td.textContent = c; });
  }
}
// The guardrail's report (GET /admin/api/quality; or a `quality` field of the stats): one row
// per profile version with its agreement and Δ log-likelihood and their intervals.
function pct(v) { return typeof v === "number" ? (100 * v).toFixed(1) + " %" : "–"; }
function interval(a, f) { return Array.isArray(a) && a.length === 2 ? f(a[0]) + " … " + f(a[1]) : "–"; }
function quality(q) {
  const body = $("quality-body");
  if (!q || typeof q !== "object") return;
  clear(body);
  const p = document.createElement("p"); p.className = "note"; body.appendChild(p);
  if (q.enabled === false) { p.textContent = "off (quality_monitor.sample_rate is 0)"; return; }
  const r = q.replays || {};
  p.textContent = "sample rate " + (q.sample_rate !== undefined ? pct(q.sample_rate) : "–") +
    " · replays sampled " + (r.sampled ?? "–") + ", finished " + (r.finished ?? "–") + ", dropped " + (r.dropped ?? "–") +
    (q.alert_below ? " · alert below " + pct(q.alert_below) : "") + (q.interval ? " · " + q.interval : "");
  const rows = Array.isArray(q.versions) ? q.versions : [];
  const t = document.createElement("table");
  const hr = t.createTHead().insertRow();
  for (const h of ["profile version", "samples", "positions", "argmax agreement", "95 % interval", "Δ log-lik / token", "95 % interval", ""]) {
    const th = document.createElement("th"); th.textContent = h; hr.appendChild(th);
  }
  const tb = t.createTBody();
  for (const v of rows) {
    const tr = tb.insertRow(); tr.className = v.alert ? "version alert" : "version";
    const f3 = (x) => typeof x === "number" ? x.toFixed(3) : "–";
    const cells = [String(v.profile_version) + (v.published ? " (published)" : ""), v.samples ?? "–", v.positions ?? "–",
                   pct(v.argmax_agreement), interval(v.argmax_agreement_interval, pct), f3(v.delta_loglik),
                   interval(v.delta_loglik_interval, f3), v.alert ? "ALERT: agreement below the threshold" : ""];
    for (const c of cells) tr.insertCell().textContent = c;
  }
  if (!rows.length) { const tr = tb.insertRow(), td = tr.insertCell(); td.colSpan = 8; td.textContent = "no replay finished yet"; }
  const w = document.createElement("div"); w.className = "scroll"; w.appendChild(t); body.appendChild(w);
}
async function pollQuality() {
  try {
    const r = await fetch("/admin/api/quality", {headers: auth});
    if (r.ok) quality(await r.json());
  } catch (e) { /* the placeholder stays */ }
}
function drawAll() {
  lineChart("tps", [["generated tokens/s", s => s.tokens_per_s]], "tokens/s");
  lineChart("batch", [["running", s => s.running], ["waiting", s => s.waiting]], "requests");
  lineChart("ttft", [["TTFT, mean of the last 32", s => s.ttft_ms_recent]], "ms");
  lineChart("pages", [["full layers", s => s.pages_by_group.full], ["sparse layers", s => s.pages_by_group.sparse]], "pages");
  lineChart("ratio", [["full-cache bytes / bytes held", s => s.compression_ratio]], "ratio (×)");
  heatmap(); slotsChart(); keptChart(); binsChart(); table();
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
  // The history keeps what the time charts read (not the per-layer census: only `last`'s).
  const keep = {tokens_per_s: s.tokens_per_s, running: s.running, waiting: s.waiting,
                ttft_ms_recent: s.ttft_ms_recent, pages_by_group: s.pages_by_group,
                compression_ratio: s.compression_ratio, pages_per_layer: s.pages_per_layer,
                page_bytes: s.page_bytes};
  history.push({t: s.t, s: keep}); if (history.length > MAX_SAMPLES) history.shift();
  last = s;
  if (s.quality) quality(s.quality);
  drawAll();
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
function numv(v) { const t = v.trim(); return /^-?\d+$/.test(t) ? Number(t) : t; }
function list(v) { return v.includes(",") ? v.split(",").map(numv) : numv(v); }
function collect() {
  const f = $("profile");
  return {enabled: f.enabled.checked, full_layers: list(f.full_layers.value), policy: f.policy.value,
          capacity: numv(f.capacity.value), schedule: list(f.schedule.value),
          pyramid_beta: numv(f.pyramid_beta.value), window: numv(f.window.value),
          sinks: numv(f.sinks.value), pool: f.pool.value, pool_kernel: numv(f.pool_kernel.value)};
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
$("timewin").addEventListener("change", () => { if (last) drawAll(); });
let resizeTimer = 0;
addEventListener("resize", () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(() => { if (last) drawAll(); }, 100); });
const es = new EventSource("/admin/api/stream?token=" + encodeURIComponent(token));
es.onopen = () => { $("conn").textContent = "live"; };
es.onerror = () => { $("conn").textContent = "reconnecting…"; };
es.onmessage = (e) => show(JSON.parse(e.data));
load();
pollQuality();
setInterval(pollQuality, 2000);
</script></body></html>
)HTML";

}  // namespace strata::api
