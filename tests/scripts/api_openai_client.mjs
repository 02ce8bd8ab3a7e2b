// The official `openai` npm client against `strata serve`: streamed chat + completion with
// include_usage, non-streamed with n > 1, and the expected chunks, usage and finish reasons.
import { createRequire } from "node:module";
import { startServer, check, waitPagesFree } from "./api_server.mjs";

const require = createRequire(`${process.env.STRATA_SOURCE_DIR}/tools/npm/package.json`);
const openai = require("openai");
const OpenAI = openai.OpenAI ?? openai.default ?? openai;
const [bin, model] = process.argv.slice(2);
const s = await startServer(bin, model);
try {
  const client = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: "unused" });
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "api-tiny", "models.list names the served model");

  // Streaming chat with usage.
  const chat = await client.chat.completions.create({
    model: "api-tiny", messages: [{ role: "user", content: "Hello there" }], max_tokens: 8,
    temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of chat) chunks.push(c);
  check(chunks[0].choices[0].delta.role === "assistant", "first chat chunk carries the role");
  const finish = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason);
  check(finish.length === 1 && finish[0].choices[0].finish_reason === "length", "one finish chunk: length");
  const usage = chunks[chunks.length - 1];
  check(usage.choices.length === 0 && usage.usage.completion_tokens === 8, "usage chunk: choices [] and 8 tokens");
  check(usage.usage.prompt_tokens > 0 && usage.usage.total_tokens === usage.usage.prompt_tokens + 8, "usage totals add up");
  const text = chunks.map((c) => (c.choices[0] && c.choices[0].delta.content) || "").join("");
  check(chunks.every((c) => c.object === "chat.completion.chunk" && c.id === chunks[0].id), "chunk ids and objects");

  // Same request, not streamed, greedy: same text.
  const whole = await client.chat.completions.create({
    model: "api-tiny", messages: [{ role: "user", content: "Hello there" }], max_tokens: 8, temperature: 0, ignore_eos: true });
  check(whole.choices[0].message.content === text, "non-streamed greedy text equals the streamed text");
  check(whole.usage.completion_tokens === 8, "non-streamed usage");

  // Streaming completion with n = 2 and usage.
  const comp = await client.completions.create({
    model: "api-tiny", prompt: "Once upon a time", max_tokens: 5, n: 2, seed: 7, ignore_eos: true,
    stream: true, stream_options: { include_usage: true } });
  const cc = [];
  for await (const c of comp) cc.push(c);
  const fin = cc.filter((c) => c.choices.length && c.choices[0].finish_reason);
  check(fin.length === 2 && new Set(fin.map((c) => c.choices[0].index)).size === 2, "one finish chunk per choice (n=2)");
  check(fin.every((c) => c.choices[0].finish_reason === "length"), "finish reason length for both choices");
  const last = cc[cc.length - 1];
  check(last.choices.length === 0 && last.usage.completion_tokens === 10, "completion usage: 2 x 5 tokens");

  // Stop string and logprobs, not streamed.
  const lp = await client.completions.create({
    model: "api-tiny", prompt: [1, 2, 3], max_tokens: 4, logprobs: 2, temperature: 0, ignore_eos: true });
  check(lp.choices[0].logprobs.tokens.length === 4 && lp.choices[0].logprobs.top_logprobs[0] &&
        Object.keys(lp.choices[0].logprobs.top_logprobs[0]).length >= 1, "completion logprobs with top alternatives");
  check(lp.usage.prompt_tokens === 3, "token-id prompt counted verbatim");
  check(usage.usage.prompt_tokens_details.cached_tokens === 0, "usage: prompt_tokens_details.cached_tokens");

  // Multi-turn chat over the WebSocket: the second turn resends the conversation and hits the
  // prefix cache (the first turn's prompt blocks) without any client change. The system prompt
  // is longer than the profile's capacity (64), so the sparse layers select and it is cacheable.
  const ws = new WebSocket(s.base.replace("http", "ws") + "/v1/ws");
  await new Promise((res, rej) => { ws.onopen = res; ws.onerror = () => rej(new Error("WebSocket open failed")); });
  const turn = (messages) => new Promise((resolve) => {
    ws.onmessage = (m) => {
      const ev = JSON.parse(m.data);
      if (ev.type === "response.done" || ev.type === "error") resolve(ev);
    };
    ws.send(JSON.stringify({ type: "response.create",
                             response: { messages, max_output_tokens: 6, temperature: 0 } }));
  });
  const conv = [{ role: "system", content: "You answer briefly and kindly. ".repeat(16) },
                { role: "user", content: "Tell me a story." }];
  const t1 = await turn(conv);
  check(t1.type === "response.done" && t1.response.usage.input_token_details.cached_tokens === 0,
        "WebSocket turn 1: nothing cached");
  conv.push({ role: "assistant", content: t1.response.output[0].text }, { role: "user", content: "And then?" });
  const t2 = await turn(conv);
  const cached = t2.type === "response.done" ? t2.response.usage.input_token_details.cached_tokens : -1;
  check(cached >= 64 && cached % 16 === 0 && cached < t2.response.usage.input_tokens,
        `WebSocket turn 2 hits the prefix cache (${cached} of ${t2.response?.usage?.input_tokens} tokens)`);
  ws.close();
  check(await waitPagesFree(s) === 0, "every KV page is free afterwards");
} finally {
  await s.stop();
}
console.log("api_openai_client: all passed");
