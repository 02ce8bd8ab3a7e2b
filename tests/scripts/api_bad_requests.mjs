// A battery of bad requests against `strata serve`: each gets its status and message; the
// server keeps serving and every KV page is free afterwards.
import net from "node:net";
import { startServer, check, waitPagesFree } from "./api_server.mjs";

const [bin, model] = process.argv.slice(2);
const s = await startServer(bin, model, ["--set", "model.max_model_len=256", "--set", "server.max_body_bytes=65536",
                                         "--set", "server.header_timeout_s=1"]);
const post = (path, body, headers = {}) => fetch(s.base + path, {
  method: "POST", headers: { "Content-Type": "application/json", ...headers },
  body: typeof body === "string" ? body : JSON.stringify(body) });

async function expectError(what, res, status, needle, param) {
  const j = await res.json();
  check(res.status === status && j.error && j.error.message.includes(needle) &&
        (param === undefined || j.error.param === param),
        `${what}: ${status} "${needle}" (got ${res.status} ${JSON.stringify(j.error)})`);
}

// Raw TCP exchange: send, collect until close or timeout.
function raw(payload, { trickle = false, waitMs = 4000 } = {}) {
  const url = new URL(s.base);
  return new Promise((resolve) => {
    const sock = net.connect(Number(url.port), url.hostname);
    let data = "";
    sock.on("data", (d) => (data += d));
    sock.on("close", () => resolve(data));
    sock.on("error", () => resolve(data));
    setTimeout(() => { sock.destroy(); resolve(data); }, waitMs);
    if (trickle) { sock.write(payload.slice(0, 10)); }  // slow-loris: never finishes the header
    else sock.write(payload);
  });
}

try {
  const chat = (extra) => ({ messages: [{ role: "user", content: "hi" }], ...extra });
  await expectError("invalid JSON", await post("/v1/chat/completions", "{\"messages\": [}"), 400, "invalid JSON");
  await expectError("wrong type", await post("/v1/chat/completions", chat({ temperature: "hot" })), 400, "must be a number", "temperature");
  await expectError("negative max_tokens", await post("/v1/completions", { prompt: "x", max_tokens: -5 }), 400, "got -5", "max_tokens");
  await expectError("huge max_tokens", await post("/v1/completions", { prompt: "x", max_tokens: 1e9 }), 400, "context is 256 tokens", "max_tokens");
  await expectError("out-of-vocabulary ids", await post("/v1/completions", { prompt: [1, 2, 99999999] }), 400, "out of the vocabulary", "prompt");
  await expectError("prompt too long (ids)", await post("/v1/completions", { prompt: Array(300).fill(5), max_tokens: 4 }), 400,
                    "maximum context length is 256 tokens", "prompt");
  await expectError("prompt too long (text)", await post("/v1/completions", { prompt: "word ".repeat(2000), max_tokens: 4 }), 400, "256");
  await expectError("unknown model", await post("/v1/completions", { model: "gpt-9", prompt: "x" }), 404, "does not exist", "model");
  await expectError("bad kv_sparsity", await post("/v1/completions", { prompt: "x", kv_sparsity: { capacity: 5 } }), 400, "kv_sparsity");
  await expectError("unknown route", await fetch(s.base + "/v2/nothing"), 404, "no route");
  await expectError("oversized body", await post("/v1/completions", JSON.stringify({ prompt: "x".repeat(100000) })), 413, "over the limit");
  await expectError("admin without token", await fetch(s.base + "/admin/api/stats"), 401, "admin token");
  await expectError("admin bad profile", await fetch(s.base + "/admin/api/profile", { method: "PUT",
    headers: { Authorization: `Bearer ${s.token}`, "Content-Type": "application/json" }, body: JSON.stringify({ window: 100 }) }), 400, "sparsity");
  // Callers a browser page could be: a CORS-simple body, a foreign origin, a rebound DNS name.
  await expectError("text/plain body", await fetch(s.base + "/v1/completions", { method: "POST", body: JSON.stringify({ prompt: "x" }) }),
                    415, "application/json");
  await expectError("foreign origin", await post("/v1/completions", { prompt: "x" }, { Origin: "https://evil.example" }), 403, "origin");
  const rebound = await raw(`GET /health HTTP/1.1\r\nHost: attacker.example:${new URL(s.base).port}\r\n\r\n`);
  check(/^HTTP\/1\.1 421/.test(rebound), "Host naming another server (DNS rebinding): 421");

  const loris = await raw("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n", { trickle: true });
  check(loris.startsWith("HTTP/1.1 408") && loris.includes("timed out"), "slow-loris: 408 after the header timeout, then closed");
  const garbage = await raw("GARBAGE\r\n\r\n");
  check(/^HTTP\/1\.1 400/.test(garbage), "garbage request line: 400");

  // WebSocket garbage: error events, the socket stays usable.
  const ws = new WebSocket(s.base.replace("http", "ws") + "/v1/ws");
  const events = [];
  await new Promise((r, j) => { ws.onopen = r; ws.onerror = j; });
  ws.onmessage = (m) => events.push(JSON.parse(m.data));
  ws.send("not json");
  ws.send(JSON.stringify({ type: "response.explode" }));
  ws.send(JSON.stringify({ type: "response.create", response: { prompt: "x", max_tokens: -1 } }));
  ws.send(JSON.stringify({ type: "response.create", response: { prompt: "hello", max_tokens: 3, ignore_eos: true } }));
  const until = Date.now() + 10000;
  while (!events.some((e) => e.type === "response.done") && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
  const errs = events.filter((e) => e.type === "error");
  check(errs.length === 3 && errs[0].error.message.includes("invalid JSON") && errs[1].error.message.includes("unknown event type") &&
        errs[2].error.param === "max_tokens", "WebSocket garbage: three error events");
  const done = events.find((e) => e.type === "response.done");
  check(done && done.response.status === "incomplete" && done.response.usage.output_tokens === 3, "WebSocket still serves after garbage");
  ws.close();

  // Disconnect mid-stream: the request is aborted and its pages freed.
  const ac = new AbortController();
  const res = await post("/v1/completions", { prompt: "stream me", max_tokens: 200, ignore_eos: true, stream: true });
  const reader = res.body.getReader();
  await reader.read();
  await reader.cancel();
  check(await waitPagesFree(s) === 0, "disconnect mid-stream: every page free");
  void ac;

  // Still serving.
  const ok = await post("/v1/completions", { prompt: "fine", max_tokens: 2 });
  check(ok.status === 200 && (await ok.json()).usage.completion_tokens >= 1, "server still serves after the battery");
  check(await waitPagesFree(s) === 0, "every KV page is free at the end");
} finally {
  await s.stop();
}
console.log("api_bad_requests: all passed");
