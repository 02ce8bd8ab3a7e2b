// Real checkpoints' chat templates through `strata serve`: for each of several checkpoint
// folders (a tiny random Llama with the real Llama-3 tokenizer, and the chat template of
// Llama 3.1, Llama 3.2, Qwen 2.5, Mistral v0.3, Gemma 3, each loaded a different way), every
// conversation of tests/runtime/text/chat_templates/conversations.json is rendered by Python's
// jinja2 as transformers does (render_reference.py --render) and tokenized by @lenml/tokenizers;
// the server's /tokenize ids for the same messages must equal those ids, and a chat completion
// must report that many prompt tokens. Also: the request fields chat_template,
// chat_template_kwargs, add_generation_prompt, continue_final_message and their 400s.
// Usage: node api_chat_templates.mjs STRATA_BIN MODEL_DIR (MODEL_DIR: make-model --tokenizer
// with the real Llama-3 tokenizer.json).
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServer, check } from "./api_server.mjs";

const src = process.env.STRATA_SOURCE_DIR;
const python = process.env.STRATA_PYTHON3 || "python3";
const tdir = `${src}/tests/runtime/text/chat_templates`;
const require = createRequire(`${src}/tools/npm/package.json`);
const { TokenizerLoader } = require("@lenml/tokenizers");
const [bin, model] = process.argv.slice(2);

const tokConfig = JSON.parse(readFileSync(join(model, "tokenizer_config.json"), "utf8"));
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(join(model, "tokenizer.json"), "utf8")),
  tokenizerConfig: { ...tokConfig, tokenizer_class: "PreTrainedTokenizerFast" } });
const special = { bos_token: tokConfig.bos_token, eos_token: tokConfig.eos_token };
const template = (f) => readFileSync(join(tdir, f), "utf8");
const corpus = JSON.parse(readFileSync(join(tdir, "conversations.json"), "utf8"));
// What the API passes to a template: role and string content only (tools are refused).
const conversations = corpus.conversations.filter(
  (c) => !c.tools && !c.kwargs && c.messages.every((m) => typeof m.content === "string" && Object.keys(m).length === 2));
const kwargs = { date_string: "01 Dec 2026" };  // Llama 3.2 would take today's date otherwise

// The reference: jinja2 renders (as transformers), @lenml/tokenizers encodes (no specials added).
function reference(cases) {
  const out = execFileSync(python, [join(tdir, "render_reference.py"), tdir, "--render"],
                           { input: JSON.stringify(cases), maxBuffer: 64 << 20 });
  return JSON.parse(out).map((r) => (r.out !== undefined ? { ids: tok.encode(r.out, { add_special_tokens: false }), text: r.out } : r));
}

async function post(s, path, body) {
  const r = await fetch(`${s.base}${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

const sameIds = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// A checkpoint folder: the model's files linked, tokenizer_config.json (and chat_template.jinja)
// written.
const root = join(tmpdir(), `strata_chat_templates_${process.pid}`);
function checkpoint(name, chatTemplate, jinjaFile) {
  const d = join(root, name);
  mkdirSync(d, { recursive: true });
  for (const f of ["config.json", "model.safetensors", "tokenizer.json"]) symlinkSync(join(model, f), join(d, f));
  const cfg = { ...tokConfig };
  if (chatTemplate === undefined) delete cfg.chat_template; else cfg.chat_template = chatTemplate;
  writeFileSync(join(d, "tokenizer_config.json"), JSON.stringify(cfg));
  if (jinjaFile) writeFileSync(join(d, "chat_template.jinja"), template(jinjaFile));
  return d;
}

const servers = [
  { what: "Llama 3.1 (tokenizer_config.json string)", file: "llama-3.1-8b-instruct.jinja",
    dir: () => checkpoint("llama31", template("llama-3.1-8b-instruct.jinja")) },
  { what: "Llama 3.2 (chat_template.jinja over tokenizer_config's)", file: "llama-3.2-3b-instruct.jinja",
    dir: () => checkpoint("llama32", "{{ 'the tokenizer_config template must not be used' }}", "llama-3.2-3b-instruct.jinja") },
  { what: "Qwen 2.5 (list form, 'default')", file: "qwen2.5-7b-instruct.jinja",
    dir: () => checkpoint("qwen25", [{ name: "tool_use", template: "{{ 'not this one' }}" },
                                     { name: "default", template: template("qwen2.5-7b-instruct.jinja") }]) },
  { what: "Mistral v0.3 (--chat-template FILE over the checkpoint's)", file: "mistral-7b-instruct-v0.3.jinja",
    dir: () => checkpoint("mistral", template("llama-3-8b-instruct.jinja")),
    extra: ["--chat-template", join(tdir, "mistral-7b-instruct-v0.3.jinja")] },
  { what: "Gemma 3 (tokenizer_config.json string)", file: "gemma-3-it.jinja",
    dir: () => checkpoint("gemma3", template("gemma-3-it.jinja")) },
];

let compared = 0;
try {
  for (const sv of servers) {
    const s = await startServer(bin, sv.dir(), sv.extra ?? []);
    try {
      const cases = [];
      for (const c of conversations) {
        const last = c.messages[c.messages.length - 1];
        for (const agp of [true, false]) cases.push({ c, agp, cont: false });
        if (last.role === "assistant") cases.push({ c, agp: false, cont: true });
      }
      const refs = reference(cases.map(({ c, agp, cont }) => ({
        template_file: sv.file, continue_final_message: cont,
        vars: { messages: c.messages, tools: null, documents: null, add_generation_prompt: agp, ...special, ...kwargs } })));
      let equal = 0, refused = 0;
      for (let i = 0; i < cases.length; ++i) {
        const { c, agp, cont } = cases[i];
        const body = { messages: c.messages, add_generation_prompt: agp, continue_final_message: cont, chat_template_kwargs: kwargs };
        const t = await post(s, "/tokenize", body);
        const label = `${sv.file} / ${c.name} / agp=${agp}${cont ? " / continue" : ""}`;
        if (refs[i].ids === undefined) {  // the template refuses the conversation: a 400 naming messages
          check(t.status === 400 && t.body.error.param === "messages" &&
                (!refs[i].raised || t.body.error.message === refs[i].error), `${label}: 400 like jinja2's "${refs[i].error}"`);
          ++refused;
          continue;
        }
        if (t.status !== 200 || !sameIds(t.body.tokens, refs[i].ids))
          throw new Error(`${label}: /tokenize ${t.status} ${JSON.stringify(t.body).slice(0, 300)}\n  reference ${JSON.stringify(refs[i].ids).slice(0, 300)}\n  text ${JSON.stringify(refs[i].text).slice(0, 300)}`);
        const r = await post(s, "/v1/chat/completions", { ...body, max_tokens: 1, temperature: 0 });
        if (r.status !== 200 || r.body.usage.prompt_tokens !== refs[i].ids.length)
          throw new Error(`${label}: chat ${r.status} ${JSON.stringify(r.body).slice(0, 300)} vs ${refs[i].ids.length} reference tokens`);
        ++equal;
      }
      compared += equal;
      check(equal > 0, `${sv.what}: ${equal} chats with the reference's prompt tokens, ${refused} refused as jinja2 refuses`);
      const ids = (await post(s, "/tokenize", { messages: [{ role: "user", content: "hi" }], chat_template_kwargs: kwargs })).body.tokens;
      check(ids.filter((x) => x === 128000).length === (sv.file.startsWith("qwen") ? 0 : 1), `${sv.what}: at most one BOS`);
    } finally {
      await s.stop();
    }
  }

  // Request fields on one server (Llama 3.1).
  const s = await startServer(bin, join(root, "llama31"));
  try {
    const msgs = [{ role: "user", content: "Hi" }, { role: "assistant", content: "The answer is" }];
    const own = template("qwen2-7b-instruct.jinja");
    const [ref] = reference([{ template: own, vars: { messages: msgs, tools: null, documents: null, add_generation_prompt: true, ...special } }]);
    const t = await post(s, "/tokenize", { messages: msgs, chat_template: own });
    check(t.status === 200 && sameIds(t.body.tokens, ref.ids), "a request's chat_template replaces the checkpoint's (Qwen2 text on a Llama 3.1 checkpoint)");
    const r = await post(s, "/v1/chat/completions", { messages: msgs, chat_template: own, max_tokens: 1 });
    check(r.status === 200 && r.body.usage.prompt_tokens === ref.ids.length, "... and chat completions use it");
    const d1 = (await post(s, "/tokenize", { messages: msgs, chat_template_kwargs: { date_string: "02 Jan 2025" } })).body.tokens;
    const d2 = (await post(s, "/tokenize", { messages: msgs, chat_template_kwargs: { date_string: "03 Jan 2025" } })).body.tokens;
    check(tok.decode(d1).includes("Today Date: 02 Jan 2025") && tok.decode(d2).includes("03 Jan 2025"), "chat_template_kwargs reach the template");
    const bad = [
      [{ messages: msgs, continue_final_message: true }, "continue_final_message"],
      [{ messages: msgs, chat_template: "{% for m in messages %}\n{{ m | wordwrap }}{% endfor %}" }, "chat_template"],
      [{ messages: msgs, chat_template: "{% if %}" }, "chat_template"],
      [{ messages: msgs, chat_template: 7 }, "chat_template"],
      [{ messages: msgs, chat_template_kwargs: [1] }, "chat_template_kwargs"],
      [{ messages: msgs, chat_template_kwargs: { messages: [] } }, "chat_template_kwargs"],
      [{ messages: msgs, add_generation_prompt: "yes" }, "add_generation_prompt"],
      [{ messages: msgs, continue_final_message: 1 }, "continue_final_message"],
      [{ messages: msgs, chat_template: "{{ raise_exception('nope: ' ~ messages|length) }}" }, "messages"],
    ];
    for (const [body, param] of bad) {
      for (const path of ["/v1/chat/completions", "/tokenize"]) {
        const b = await post(s, path, { ...body, max_tokens: 1 });
        check(b.status === 400 && b.body.error.param === param, `${path} ${JSON.stringify(body).slice(0, 90)}: 400 naming ${param} (${b.body.error?.message?.slice(0, 80)})`);
      }
    }
    const line = await post(s, "/v1/chat/completions", { messages: msgs, chat_template: "ok\n\n{{ x | wordwrap }}" });
    check(line.body.error.message.includes("line 3: unsupported filter 'wordwrap'"), "the 400 names the construct and its line");
    const cont = await post(s, "/tokenize", { messages: msgs, add_generation_prompt: false, continue_final_message: true });
    check(tok.decode(cont.body.tokens).endsWith("<|start_header_id|>assistant<|end_header_id|>\n\nThe answer is"), "continue_final_message leaves the last turn open");
  } finally {
    await s.stop();
  }

  // A checkpoint whose template uses something unsupported does not load: the server exits.
  const broken = checkpoint("broken", "{% for m in messages %}\n\n{{ m.content | wordwrap(3) }}{% endfor %}");
  const run = spawnSync(bin, ["serve", "--config", `${src}/configs/tiny-cpu.yaml`, "--model", broken, "--port", "0"],
                        { timeout: 60000, encoding: "utf8" });
  const failed = `${run.status} ${run.stderr}`;
  check(run.status !== 0 && failed.includes("line 3: unsupported filter 'wordwrap'"), "a checkpoint with an unsupported template fails to load, naming the construct and line");
  check(compared >= 100, `${compared} chat prompts equal to the reference tokens`);
} finally {
  rmSync(root, { recursive: true, force: true });
}
