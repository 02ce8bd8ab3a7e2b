// The official `openai` npm client against `strata serve`: streamed chat + completion with
// include_usage, non-streamed with n > 1, and the expected chunks, usage and finish reasons;
// prompt scoring (echo + logprobs as lm-eval sends it, vLLM's prompt_logprobs); batched prompts.
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

  // Prompt scoring as lm-eval's loglikelihood requests send it (token ids, echo + logprobs,
  // max_tokens 1): the prompt heads the logprobs, its first entry null. A causal model scores a
  // shared prefix alike, so the shorter prompt's entries equal the longer one's leading entries
  // (an independent check of the values), also once the longer prompt is in the prefix cache.
  const ids = [5, 17, 33, 101, 7, 64, 23, 90, 41, 12, 8, 77];
  const score = async (prompt) => (await client.completions.create({
    model: "api-tiny", prompt, echo: true, logprobs: 1, max_tokens: 1, temperature: 0 })).choices[0];
  const longer = await score(ids);
  const L = longer.logprobs;
  check(L.tokens.length === ids.length + 1 && L.token_logprobs[0] === null && L.top_logprobs[0] === null,
        "echo + logprobs: the prompt's entries first, the first one null");
  check(L.token_logprobs.slice(1).every((x) => Number.isFinite(x) && x <= 0), "prompt logprobs are log-probabilities");
  check(L.top_logprobs.slice(1, ids.length).every((t, i) => Object.keys(t).length >= 1 &&
        Object.values(t).some((v) => Math.abs(v - L.token_logprobs[i + 1]) < 1e-6)),
        "each prompt token is among its own alternatives");
  const shorter = await score(ids.slice(0, 8));
  const close = (a, b) => a.every((x, i) => (x === null && b[i] === null) || Math.abs(x - b[i]) < 1e-4);
  check(close(shorter.logprobs.token_logprobs.slice(0, 8), L.token_logprobs.slice(0, 8)),
        "a shared prefix scores alike");
  await client.completions.create({ model: "api-tiny", prompt: ids, max_tokens: 2, temperature: 0 });
  const again = await score(ids);
  check(close(again.logprobs.token_logprobs, L.token_logprobs), "scoring ignores the prefix cache");
  // Streamed: the echo arrives with the prompt's entries.
  const ss = await client.completions.create({
    model: "api-tiny", prompt: ids, echo: true, logprobs: 0, max_tokens: 2, temperature: 0, stream: true });
  const sc = [];
  for await (const c of ss) sc.push(c);
  check(sc[0].choices[0].logprobs.tokens.length === ids.length && sc[0].choices[0].logprobs.token_logprobs[0] === null,
        "streamed echo + logprobs: the first chunk holds the prompt's entries");
  // Batched prompts (lm-eval batches its requests so): one request per prompt, choices numbered
  // prompt-major, each as the prompt alone gives it.
  const ids2 = [9, 8, 7, 6, 5, 4, 3];
  const batch = await client.completions.create({
    model: "api-tiny", prompt: [ids, ids2], echo: true, logprobs: 1, max_tokens: 1, temperature: 0, n: 2 });
  check(batch.choices.length === 4 && batch.choices.map((c) => c.index).join() === "0,1,2,3", "a batch: n choices per prompt, in order");
  check(close(batch.choices[1].logprobs.token_logprobs, L.token_logprobs) &&
        close(batch.choices[2].logprobs.token_logprobs, (await score(ids2)).logprobs.token_logprobs),
        "each prompt of a batch scores as it does alone");
  check(batch.usage.prompt_tokens === ids.length + ids2.length && batch.usage.completion_tokens === 4,
        "a batch's usage sums its prompts'");
  const bs = await client.completions.create({
    model: "api-tiny", prompt: ["Once upon", "a time"], max_tokens: 3, temperature: 0, ignore_eos: true, stream: true });
  const bc = [];
  for await (const c of bs) bc.push(c);
  const bfin = bc.filter((c) => c.choices.length && c.choices[0].finish_reason);
  check(bfin.length === 2 && new Set(bfin.map((c) => c.choices[0].index)).size === 2, "a streamed batch: one finish chunk per prompt");

  // vLLM's prompt_logprobs on chat: on the response, one entry per prompt token.
  const pc = await client.chat.completions.create({
    model: "api-tiny", messages: [{ role: "user", content: "Score me" }], max_tokens: 1, prompt_logprobs: 2 });
  check(Array.isArray(pc.prompt_logprobs) && pc.prompt_logprobs.length === pc.usage.prompt_tokens &&
        pc.prompt_logprobs[0] === null && Object.values(pc.prompt_logprobs[1]).every((e) => e.rank >= 1 &&
        typeof e.decoded_token === "string"), "chat prompt_logprobs: ranks and decoded tokens per prompt token");

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
