// GET /metrics after some traffic passes `promtool check metrics` with no finding except its
// lint about colons in the vLLM-compatible names (vllm:...).
import { spawnSync } from "node:child_process";
import { startServer, check } from "./api_server.mjs";

const [bin, model, promtool] = process.argv.slice(2);
const s = await startServer(bin, model);
try {
  const r = await fetch(`${s.base}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "metrics", max_tokens: 4 }) });
  check(r.status === 200, "a request ran");
  const text = await (await fetch(`${s.base}/metrics`)).text();
  for (const name of ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                      "vllm:time_to_first_token_seconds_bucket", "vllm:time_per_output_token_seconds_count",
                      "vllm:e2e_request_latency_seconds_sum", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                      "vllm:num_preemptions_total", "strata_kv_group_pages", "strata_kv_compression_ratio",
                      "strata_sparsity_profile_version"]) {
    check(text.includes(name), `metrics has ${name}`);
  }
  check(/vllm:e2e_request_latency_seconds_count\{[^}]*\} 1\n/.test(text), "one request observed in the e2e histogram");
  const p = spawnSync(promtool, ["check", "metrics"], { input: text, encoding: "utf8" });
  const findings = (p.stdout + p.stderr).split("\n").filter((l) => l.trim() && !/^vllm:\S+ metric names should not contain ':'$/.test(l.trim()));
  console.log(p.stdout + p.stderr);
  check(!p.error && (p.status === 0 || p.status === 3), `promtool ran (status ${p.status})`);
  check(findings.length === 0, "promtool: no finding but the colon lint (" + findings.join(" | ") + ")");
} finally {
  await s.stop();
}
console.log("api_metrics_promtool: all passed");
