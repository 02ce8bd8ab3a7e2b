// Chaos / soak test of `strata serve`: for a fixed time ~16 virtual clients mix valid
// completions and chats (streamed or not, random sampling parameters, n, stop strings,
// logprobs, seeds, per-request kv_sparsity, text and token-id prompts, some near the context
// limit), clients that disconnect mid-stream, read slowly or send a body and vanish,
// WebSocket sessions that cancel or close mid-response, invalid requests (each must get a 4xx
// error object) and live admin profile changes. Afterwards the server must be alive, every
// KV page free, nothing running or waiting, the request counters consistent with what the
// clients saw, and greedy output for a fixed prompt identical to the one before the chaos.
//
// Replay: STRATA_CHAOS_SEED=<seed> (printed at the start and in every failure);
// STRATA_CHAOS_SECONDS sets the chaos time (default 20), STRATA_CHAOS_CLIENTS the clients (16).
import net from "node:net";
import { startServer, check } from "./api_server.mjs";

const [bin, model] = process.argv.slice(2);
const seed = Number(process.env.STRATA_CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31)) >>> 0;
const seconds = Number(process.env.STRATA_CHAOS_SECONDS ?? 20);
const clients = Number(process.env.STRATA_CHAOS_CLIENTS ?? 16);
const kMaxLen = 256;
console.log(`api_chaos: seed ${seed} (replay: STRATA_CHAOS_SEED=${seed}), ${clients} clients, ${seconds} s`);

// mulberry32: one deterministic stream per client (timing still varies between runs).
function rng(s) {
  let a = s >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const r = {
    f: next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),  // inclusive
    pick: (xs) => xs[Math.floor(next() * xs.length)],
    chance: (p) => next() < p,
  };
  return r;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const s = await startServer(bin, model, ["--set", `model.max_model_len=${kMaxLen}`, "--set", "server.max_body_bytes=65536",
                                         "--set", "server.header_timeout_s=2",
                                         // any per-request profile, not only ones below the server's
                                         "--set", "sparsity.request_override=any"]);
const failures = [];
let serverExit = null;
s.proc.on("exit", (code, sig) => { serverExit = `server process exited (code ${code}, signal ${sig})`; });
const fail = (what) => { if (failures.length < 50) failures.push(what); };
const admin = { Authorization: `Bearer ${s.token}` };
const counts = {};
const count = (k) => (counts[k] = (counts[k] ?? 0) + 1);
let chaosEnd = Infinity;
let acceptedSeen = 0;     // requests the server confirmed (HTTP 200 or response.created)
let acceptedUnknown = 0;  // requests that may or may not have reached the engine

const post = (path, body, extra = {}) => fetch(s.base + path, {
  method: "POST", headers: { "Content-Type": "application/json" },
  body: typeof body === "string" ? body : JSON.stringify(body), ...extra });
const stats = async () => (await fetch(`${s.base}/admin/api/stats`, { headers: admin })).json();

// Reads an SSE body to the end: the data payloads (JSON-parsed, "[DONE]" kept as a string).
async function readSse(res, { slowMs = 0, stopAfter = Infinity, signal } = {}) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  const events = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!line.startsWith("data: ")) continue;
      const d = line.slice(6);
      events.push(d === "[DONE]" ? d : JSON.parse(d));
    }
    if (events.length >= stopAfter) {
      if (signal) signal.abort(); else await reader.cancel();
      return { events, cut: true };
    }
    if (slowMs) await sleep(slowMs);
  }
  return { events, cut: false };
}

async function start() {
  // Learn the model: layers (for profiles), token ids (for id prompts), the reference output.
  const prof = await (await fetch(`${s.base}/admin/api/profile`, { headers: admin })).json();
  const tok = await (await post("/tokenize", { prompt: "The quick brown fox jumps over the lazy dog; 0123456789 ÄÖÜ ßéç 漢字 🙂 {}[]<>?!",
                                               add_special_tokens: false })).json();
  return { layers: prof.num_layers, profile: prof.profile, ids: [...new Set(tok.tokens)] };
}
const info = await start();
check(info.layers > 0 && info.ids.length > 5, `model: ${info.layers} layers, ${info.ids.length} distinct token ids known`);

const greedy = { prompt: "Once upon a time there was", max_tokens: 24, temperature: 0, ignore_eos: true };
const greedyChat = { messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 16, temperature: 0, ignore_eos: true };
async function reference() {
  const a = await (await post("/v1/completions", greedy)).json();
  const b = await (await post("/v1/chat/completions", greedyChat)).json();
  return JSON.stringify([a.choices[0].text, b.choices[0].message.content]);
}
const statsPre = await stats();
const before = await reference();
// The engine counts a request finished just after sending its last event and publishes its
// stats periodically: wait until both reference requests are counted, or stats0 would miss
// them and finished + aborted exceed what the clients saw (seen: 551 for at most 550).
let stats0 = await stats();
for (const until = Date.now() + 5000; stats0.requests_finished - statsPre.requests_finished < 2 && Date.now() < until;) {
  await sleep(20);
  stats0 = await stats();
}

// ---- generators ------------------------------------------------------------------------------

function profileFor(r, valid = true) {
  const window = r.int(1, 16), sinks = r.int(0, 4);
  const p = { enabled: r.chance(0.85), policy: r.pick(["window", "snapkv", "scored"]),
              capacity: r.int(sinks + window + 1, 96), window, sinks, full_layers: r.int(0, info.layers),
              schedule: "uniform", pool: r.pick(["max", "avg"]), pool_kernel: r.pick([1, 3, 5, 7]), pyramid_beta: 20 };
  if (valid) return p;
  const bad = r.int(0, 5);
  if (bad === 0) p.capacity = sinks + window;  // below sinks + window + 1
  if (bad === 1) p.window = 0;
  if (bad === 2) p.pool_kernel = 4;
  if (bad === 3) p.full_layers = info.layers + 3;
  if (bad === 4) p.policy = "nonsense";
  if (bad === 5) p.sinks = -1;
  p.enabled = true;
  return p;
}

function promptFor(r, maxTokens) {
  if (r.chance(0.15)) {  // near the context limit: prompt + max_tokens = 256 - a few
    const len = kMaxLen - maxTokens - r.int(0, 3);
    return Array.from({ length: len }, () => r.pick(info.ids));
  }
  if (r.chance(0.4)) return Array.from({ length: r.int(1, 40) }, () => r.pick(info.ids));
  const words = ["alpha", "the", "river", "quiet", "stone", "light", "over", "and", "7", "ünïcode", "🙂", "\n"];
  return Array.from({ length: r.int(1, 30) }, () => r.pick(words)).join(" ");
}

// A valid completion or chat body with random parameters.
function validBody(r, chat) {
  const maxTokens = r.int(1, 48);
  const b = { max_tokens: maxTokens, n: r.int(1, 4) };
  if (chat) {
    const p = promptFor(r, maxTokens);
    b.messages = [{ role: "user", content: typeof p === "string" ? p : "hello there friend" }];
    if (r.chance(0.3)) b.messages.unshift({ role: "system", content: "be brief" });
  } else {
    b.prompt = promptFor(r, maxTokens);
  }
  if (r.chance(0.3)) b.temperature = 0;
  else if (r.chance(0.7)) b.temperature = Number((r.f() * 1.5).toFixed(2));
  if (r.chance(0.4)) b.top_p = Number((0.05 + r.f() * 0.95).toFixed(2));
  if (r.chance(0.4)) b.top_k = r.pick([-1, 0, 1, 5, 40]);
  if (r.chance(0.3)) b.stop = r.chance(0.5) ? r.pick(["e", "the", "\n", "zz"]) : ["a", "o", "xyz"].slice(0, r.int(1, 3));
  if (r.chance(0.5)) b.seed = r.int(0, 1e6);
  if (r.chance(0.3)) b.ignore_eos = true;
  if (r.chance(0.3)) {
    if (chat) { b.logprobs = true; b.top_logprobs = r.int(0, 5); } else b.logprobs = r.int(0, 5);
  }
  if (r.chance(0.3)) b.kv_sparsity = profileFor(r);
  if (r.chance(0.2)) b.presence_penalty = Number((r.f() * 2 - 1).toFixed(2));
  return b;
}

const invalid = [
  () => ["/v1/completions", "{\"prompt\": [}"],
  () => ["/v1/chat/completions", "not json at all"],
  () => ["/v1/completions", { prompt: "x", temperature: "hot" }],
  () => ["/v1/completions", { prompt: "x", max_tokens: -3 }],
  () => ["/v1/completions", { prompt: "x", n: 99 }],
  () => ["/v1/completions", { prompt: "x", top_p: 2 }],
  () => ["/v1/completions", { prompt: "x", logprobs: 50 }],
  () => ["/v1/completions", { prompt: Array(kMaxLen + 20).fill(info.ids[0]), max_tokens: 4 }],
  () => ["/v1/completions", { prompt: "word ".repeat(3000), max_tokens: 4 }],
  () => ["/v1/completions", { prompt: [1, 2, 99999999] }],
  () => ["/v1/completions", { prompt: [1, 2], max_tokens: kMaxLen }],
  () => ["/v1/chat/completions", { messages: [{ role: "wizard", content: "x" }] }],
  () => ["/v1/chat/completions", { messages: "hello" }],
  () => ["/v1/completions", { prompt: "x", stop: Array(17).fill("a") }],
  () => ["/v1/completions", { prompt: "x", kv_sparsity: { capacity: 2, window: 8 } }],
  () => ["/v1/completions", { prompt: "x", tools: [{ type: "function" }] }],
  () => ["/v1/completions", { model: "gpt-9", prompt: "x" }],
  () => ["/v1/completions", JSON.stringify({ prompt: "x".repeat(70000) })],
];

function expect4xx(what, status, body) {
  let j = null;
  try { j = JSON.parse(body); } catch { /* checked below */ }
  if (status < 400 || status >= 500 || !j || !j.error || typeof j.error.message !== "string")
    fail(`${what}: expected a 4xx error object, got ${status} ${body.slice(0, 200)}`);
}

function checkStatus(what, res) {
  if (res.status >= 500 && res.status !== 503) fail(`${what}: HTTP ${res.status}`);
  return res.status === 200;
}

// ---- actions ---------------------------------------------------------------------------------

async function normal(r, stream) {
  const chat = r.chance(0.5);
  const body = validBody(r, chat);
  const path = chat ? "/v1/chat/completions" : "/v1/completions";
  count(`${chat ? "chat" : "completion"}_${stream ? "stream" : "whole"}`);
  if (stream) { body.stream = true; if (r.chance(0.5)) body.stream_options = { include_usage: true }; }
  const res = await post(path, body);
  if (!checkStatus(path, res)) {
    if (res.status !== 429) fail(`${path} valid body ${JSON.stringify(body).slice(0, 300)}: HTTP ${res.status} ${await res.text()}`);
    else count("refused_429");
    return;
  }
  acceptedSeen++;
  if (!stream) {
    const j = await res.json();
    if (!j.choices || j.choices.length !== body.n || !j.usage) fail(`${path}: ${body.n} choices expected, got ${JSON.stringify(j).slice(0, 300)}`);
    return;
  }
  const slowMs = r.chance(0.2) ? r.int(20, 120) : 0;
  if (slowMs) count("slow_reader");
  const { events } = await readSse(res, { slowMs });
  const errs = events.filter((e) => e !== "[DONE]" && e.error);
  const fins = events.filter((e) => e !== "[DONE]" && !e.error && e.choices.length && e.choices[0].finish_reason);
  if (errs.length || events[events.length - 1] !== "[DONE]" || fins.length !== body.n)
    fail(`${path} stream: ${fins.length} finish chunks for n=${body.n}, errors ${JSON.stringify(errs)}, last ${JSON.stringify(events.at(-1))}`);
}

async function disconnectMidStream(r) {
  count("disconnect_mid_stream");
  const chat = r.chance(0.5);
  const body = { ...validBody(r, chat), stream: true, max_tokens: r.int(20, 80), ignore_eos: true };
  delete body.kv_sparsity;
  if (!chat && Array.isArray(body.prompt) && body.prompt.length + body.max_tokens > kMaxLen) body.prompt = "cut me off";
  if (chat && body.messages.length) body.messages = [{ role: "user", content: "cut me off" }];
  const ac = new AbortController();
  try {
    const res = await post(chat ? "/v1/chat/completions" : "/v1/completions", body, { signal: ac.signal });
    if (!checkStatus("disconnect", res)) return;
    acceptedSeen++;
    await readSse(res, { stopAfter: r.int(1, 10), signal: ac });
  } catch (e) {
    if (e.name !== "AbortError") fail(`disconnect mid-stream: ${e.message}`);
  }
}

async function abortWhole(r) {  // non-streamed request abandoned before its answer
  count("disconnect_whole");
  const ac = new AbortController();
  const body = { prompt: "wait for it", max_tokens: r.int(30, 120), ignore_eos: true, n: r.int(1, 4) };
  setTimeout(() => ac.abort(), r.int(1, 200));
  try {
    const res = await post("/v1/completions", body, { signal: ac.signal });
    checkStatus("abandoned whole", res);
    if (res.status === 200) acceptedSeen++;
    await res.text();
  } catch (e) {
    if (e.name !== "AbortError") fail(`abandoned whole request: ${e.message}`);
    else acceptedUnknown++;
  }
}

// Raw socket: the body (whole or a part) then gone.
function vanish(r) {
  count("send_and_vanish");
  const url = new URL(s.base);
  const body = JSON.stringify({ prompt: "vanishing", max_tokens: r.int(10, 100), ignore_eos: true, stream: r.chance(0.5) });
  const whole = r.chance(0.6);
  if (whole) acceptedUnknown++;
  const head = `POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
  const waitMs = r.int(0, 150);
  return new Promise((resolve) => {
    const sock = net.connect(Number(url.port), url.hostname, () => {
      sock.write(head + (whole ? body : body.slice(0, r.int(0, body.length - 1))));
      setTimeout(() => { sock.destroy(); resolve(); }, waitMs);
    });
    sock.on("error", () => resolve());
  });
}

async function badRequest(r) {
  count("invalid");
  const [path, body] = r.pick(invalid)();
  const res = await post(path, body);
  expect4xx(`invalid ${path} ${String(typeof body === "string" ? body : JSON.stringify(body)).slice(0, 80)}`, res.status, await res.text());
}

async function adminChange(r) {
  const valid = r.chance(0.6);
  count(valid ? "admin_profile_valid" : "admin_profile_invalid");
  const p = profileFor(r, valid);
  if (valid && r.chance(0.2)) { p.schedule = "pyramid"; p.capacity = 96; }  // may not fit every layer: 200 or 400
  const res = await fetch(`${s.base}/admin/api/profile`, { method: "PUT", headers: { ...admin, "Content-Type": "application/json" }, body: JSON.stringify(p) });
  const text = await res.text();
  if (valid && p.schedule === "uniform" && res.status !== 200) fail(`admin valid profile ${JSON.stringify(p)}: ${res.status} ${text}`);
  if (!valid || p.schedule !== "uniform") {
    if (res.status !== 200) expect4xx(`admin profile ${JSON.stringify(p)}`, res.status, text);
  }
}

async function wsSession(r) {
  count("ws_session");
  const wsStart = Date.now();
  const ws = new WebSocket(s.base.replace("http", "ws") + "/v1/ws");
  await new Promise((res, rej) => { ws.onopen = res; ws.onerror = () => rej(new Error("WebSocket open failed")); });
  const created = [], done = new Map();
  const errors = [];
  ws.onmessage = (m) => {
    const e = JSON.parse(m.data);
    if (e.type === "response.created") { created.push(e.response.id); acceptedSeen++; }
    if (e.type === "response.done") done.set(e.response.id, e.response);
    if (e.type === "error") errors.push(e.error);
  };
  const k = r.int(1, 4);
  for (let i = 0; i < k; ++i) {
    const chat = r.chance(0.5);
    const b = validBody(r, chat);
    if (r.chance(0.5)) { b.max_output_tokens = b.max_tokens; delete b.max_tokens; }
    ws.send(JSON.stringify({ type: "response.create", event_id: `c${i}`, response: b }));
    count("ws_create");
  }
  const mode = r.pick(["finish", "cancel_one", "cancel_all", "close"]);
  // A response may take long on a slow (sanitized) build: it must end within 20 s of the chaos.
  const until = Math.max(Date.now() + 15000, chaosEnd + 20000);
  while (created.length + errors.length < k && Date.now() < until && ws.readyState === WebSocket.OPEN) await sleep(10);
  if (mode === "close") {
    await sleep(r.int(0, 100));
    count("ws_close_mid_response");
    acceptedUnknown += k - created.length;
    ws.close();
    return;
  }
  if (mode === "cancel_one" && created.length) { ws.send(JSON.stringify({ type: "response.cancel", response_id: r.pick(created) })); count("ws_cancel"); }
  if (mode === "cancel_all") { ws.send(JSON.stringify({ type: "response.cancel" })); count("ws_cancel"); }
  while (done.size < created.length && Date.now() < until) await sleep(10);
  if (done.size < created.length)
    fail(`WebSocket (${mode}): ${created.length} responses created, ${done.size} done after ${((Date.now() - wsStart) / 1000).toFixed(1)} s`);
  for (const [id, d] of done) {
    if (d.status === "failed") fail(`WebSocket response ${id} failed: ${JSON.stringify(d.status_details)}`);
  }
  // Only a cancel that lost the race to the end of its response (not in flight) may error.
  for (const e of errors) {
    if (e.code !== "response_not_found" && e.code !== "too_many_responses" && e.type !== "overloaded_error")
      fail(`WebSocket error event for a valid create: ${JSON.stringify(e)}`);
  }
  ws.close();
}

async function probe(r) {
  count("probe");
  const path = r.pick(["/health", "/metrics", "/admin/api/stats", "/v1/models"]);
  const res = await fetch(s.base + path, { headers: path.startsWith("/admin") ? admin : {} });
  await res.text();
  if (res.status !== 200) fail(`${path} during chaos: ${res.status}`);
}

const actions = [
  [20, (r) => normal(r, false)], [25, (r) => normal(r, true)], [8, disconnectMidStream], [5, abortWhole],
  [6, vanish], [12, badRequest], [8, wsSession], [4, adminChange], [3, probe],
];
const total = actions.reduce((a, [w]) => a + w, 0);
async function client(i, until) {
  const r = rng(seed ^ Math.imul(i + 1, 0x9e3779b1));
  while (Date.now() < until && !serverExit) {
    let x = r.f() * total;
    const [, act] = actions.find(([w]) => (x -= w) < 0) ?? actions[0];
    try {
      await act(r);
    } catch (e) {
      fail(`client ${i}: ${e.message}${e.cause ? " (" + e.cause.message + ")" : ""}`);
    }
  }
}

// ---- run -------------------------------------------------------------------------------------

const t0 = Date.now();
chaosEnd = t0 + seconds * 1000;
try {
  await Promise.all(Array.from({ length: clients }, (_, i) => client(i, chaosEnd)));
  const chaosS = (Date.now() - t0) / 1000;
  console.log(`chaos: ${chaosS.toFixed(1)} s, issued ${JSON.stringify(counts)}`);
  check(!serverExit, `server process alive after the chaos${serverExit ? ": " + serverExit : ""}`);
  check(failures.length === 0, `no failure during the chaos${failures.length ? ":\n  " + failures.join("\n  ") : ""}`);
  const h = await fetch(s.base + "/health");
  check(h.status === 200, "/health is 200");

  // Quiescence: nothing running, waiting or preempted, every page free.
  let st;
  const until = Date.now() + 15000;
  do {
    st = await stats();
    const ended = st.requests_finished - stats0.requests_finished + st.requests_aborted - stats0.requests_aborted;
    if (st.running === 0 && st.waiting === 0 && st.preempted === 0 && st.pages_used === 0 && ended >= acceptedSeen) break;
    await sleep(100);
  } while (Date.now() < until);
  check(st.running === 0 && st.waiting === 0 && st.preempted === 0,
        `nothing running or waiting (running ${st.running}, waiting ${st.waiting}, preempted ${st.preempted})`);
  check(st.pages_used === 0, `every KV page free (${st.pages_used} of ${st.pages_total} used)`);

  // Counters: every request that reached the engine ended as finished or aborted.
  const ended = (st.requests_finished - stats0.requests_finished) + (st.requests_aborted - stats0.requests_aborted);
  console.log(`engine: ${st.requests_finished - stats0.requests_finished} finished, ${st.requests_aborted - stats0.requests_aborted} aborted, ` +
              `${st.requests_refused - stats0.requests_refused} refused; clients saw ${acceptedSeen} accepted, ${acceptedUnknown} unknown`);
  check(ended >= acceptedSeen && ended <= acceptedSeen + acceptedUnknown,
        `finished + aborted (${ended}) is within the accepted requests the clients saw [${acceptedSeen}, ${acceptedSeen + acceptedUnknown}]`);
  const metrics = await (await fetch(s.base + "/metrics")).text();
  const gauge = (name) => Number((metrics.match(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, "m")) ?? [])[1]);
  check(gauge("strata_kv_pages_used") === 0 && gauge("vllm:num_requests_running") === 0 && gauge("vllm:num_requests_waiting") === 0,
        "/metrics: pages used, running and waiting are 0");
  check(gauge("strata_requests_aborted_total") === st.requests_aborted && gauge("strata_requests_finished_total") === st.requests_finished,
        `/metrics finished (${gauge("strata_requests_finished_total")}) and aborted (${gauge("strata_requests_aborted_total")}) counters equal the stats`);
  const codes = [...metrics.matchAll(/^strata_http_responses_total\{[^}]*code="(\d+)"\} (\S+)$/gm)].map((m) => [Number(m[1]), Number(m[2])]);
  const bad5xx = codes.filter(([c, n]) => c >= 500 && c !== 503 && n > 0);
  check(bad5xx.length === 0, `/metrics: no 5xx other than 503 answered (${JSON.stringify(codes)})`);

  // The engine state is intact: same greedy output as before, under the starting profile.
  const put = await fetch(`${s.base}/admin/api/profile`, { method: "PUT", headers: { ...admin, "Content-Type": "application/json" }, body: JSON.stringify(info.profile) });
  check(put.status === 200, "starting profile restored");
  const after = await reference();
  check(after === before, `greedy output after the chaos equals the output before (${before} vs ${after})`);
  console.log(`api_chaos: ${((Date.now() - t0) / 1000).toFixed(1)} s from the first client to the end`);
} catch (e) {
  console.error(`api_chaos FAILED with seed ${seed} (replay: STRATA_CHAOS_SEED=${seed}): ${e.message}`);
  if (!serverExit) await s.stop().catch(() => {});
  process.exit(1);
}
await s.stop();
console.log("api_chaos: all passed");
