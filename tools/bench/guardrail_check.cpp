#include "tools/bench/guardrail_check.h"

#include <boost/json.hpp>
#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "runtime/error.h"
#include "runtime/teacher_forcing.h"
#include "tools/bench/load_gen.h"

namespace strata::bench {

namespace json = boost::json;

void write_prompts_json(const std::string& path,
                        const std::vector<std::vector<std::int32_t>>& prompts,
                        const std::string& note) {
  std::ofstream out(path);
  if (!out) throw ConfigError("--write-prompts", "cannot write '" + path + "'");
  out << json::serialize(json::object{{"note", note}, {"prompts", json::value_from(prompts)}})
      << "\n";
}

std::vector<std::vector<std::int32_t>> read_prompts_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("--prompts", "cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    auto p =
        json::value_to<std::vector<std::vector<std::int32_t>>>(json::parse(ss.str()).at("prompts"));
    if (p.empty()) throw std::runtime_error("no prompts");
    for (const auto& x : p)
      if (x.empty()) throw std::runtime_error("an empty prompt");
    return p;
  } catch (const std::exception& e) {
    throw ConfigError("--prompts", "'" + path + "' is not a prompt file: " + e.what());
  }
}

SamplingParams guardrail_params(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.min_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

QualityCell offline_guardrail_agreement(Backend& backend,
                                        const std::vector<std::vector<std::int32_t>>& prompts,
                                        const SparsityProfile& profile, int max_tokens) {
  if (max_tokens < 1) throw ConfigError("--max-tokens", "at least 1");
  const ModelConfig& mc = backend.model();
  const int V = mc.vocab_size;
  const SamplingParams params = guardrail_params(max_tokens);
  QualityCell cell;
  cell.bucket = "all";
  for (const auto& prompt : prompts) {
    // The sparse run: the teacher-forcing schedule of prompt + N - 1 placeholders (the state
    // rule does not depend on token values), each decode step fed the token sampled before.
    const int P = static_cast<int>(prompt.size());
    std::vector<std::int32_t> ids(prompt);
    ids.resize(static_cast<std::size_t>(P + max_tokens - 1), 0);
    auto plans = teacher_forcing_plans(mc, ids, profile, P);
    ReplayRecord rec;
    rec.prompt = prompt;
    rec.params = params;  // ignore_eos: no eos ban (ReplayRecord::eos_ids empty)
    for (StepPlan& plan : plans) {
      SeqStep& s = plan.seqs.at(0);
      if (!s.prefill) s.tokens = {rec.output.back()};
      s.return_logits = false;
      s.sample = true;
      s.params = &params;
      s.prompt = &rec.prompt;
      s.output = &rec.output;
      const StepResult r = backend.step(plan);
      const SeqResult& o = r.seqs.at(0);
      if (o.token < 0 || o.token >= V)
        throw InternalError("guardrail offline: step " + std::to_string(plan.step_id) +
                            " sampled no token");
      rec.output.push_back(o.token);
      rec.argmax.push_back(o.argmax);
      rec.logprob.push_back(o.logprob);
    }
    // The replay: the full cache over prompt + output[0, N-1), scored as the guardrail does.
    const std::vector<std::int32_t> replay = rec.replay_tokens();
    std::vector<float> logits = teacher_forced_logits(backend, replay, SparsityProfile{});
    ReplayScore score;
    score_replay_rows(rec, 0, logits, V, score);
    if (!score.done(rec)) throw InternalError("guardrail offline: a position was not scored");
    cell.add(score);
  }
  return cell;
}

LiveGuardrail live_guardrail_agreement(const std::string& host, int port,
                                       const std::vector<std::vector<std::int32_t>>& prompts,
                                       int max_tokens, double timeout_s,
                                       const std::string& admin_token) {
  LoadOptions o;
  o.host = host;
  o.port = port;
  o.output_tokens = max_tokens;
  o.concurrency = 1;
  o.num_prompts = static_cast<int>(prompts.size());
  for (const auto& p : prompts) o.prompts.emplace_back(p.begin(), p.end());
  o.timeout_s = timeout_s;
  double duration = 0;
  for (const RequestRecord& r : run_load(o, &duration))
    if (!r.ok) throw std::runtime_error("guardrail live: a request failed: " + r.error);
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t n = prompts.size();
  for (;;) {
    std::string err;
    const auto [status, body] = http_get(host, port, "/admin/api/quality", 10, admin_token, &err);
    if (status != 200)
      throw std::runtime_error("guardrail live: GET /admin/api/quality: " +
                               (status ? "HTTP " + std::to_string(status) + ": " + body : err));
    const json::object q = json::parse(body).as_object();
    if (!q.at("enabled").as_bool())
      throw std::runtime_error(
          "guardrail live: the guardrail is off (quality_monitor.sample_rate)");
    LiveGuardrail g;
    g.dropped = json::value_to<std::uint64_t>(q.at("replays").at("dropped"));
    if (g.dropped > 0)
      throw std::runtime_error("guardrail live: " + std::to_string(g.dropped) +
                               " replays dropped (quality_monitor.max_pending)");
    const auto& versions = q.at("versions").as_array();
    if (versions.size() > 1)
      throw std::runtime_error("guardrail live: " + std::to_string(versions.size()) +
                               " profile versions scored; one expected");
    if (!versions.empty()) {
      const auto& v = versions[0].as_object();
      g.version = json::value_to<std::uint64_t>(v.at("profile_version"));
      g.samples = json::value_to<std::uint64_t>(v.at("samples"));
      g.positions = json::value_to<std::uint64_t>(v.at("positions"));
      g.agreement = json::value_to<double>(v.at("argmax_agreement"));
      const auto& ci = v.at("argmax_agreement_interval").as_array();
      g.interval = {json::value_to<double>(ci[0]), json::value_to<double>(ci[1])};
      g.delta_loglik = json::value_to<double>(v.at("delta_loglik"));
      if (g.samples >= n) return g;
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s)
      throw std::runtime_error("guardrail live: " + std::to_string(g.samples) + " of " +
                               std::to_string(n) + " samples scored after " +
                               std::to_string(static_cast<int>(timeout_s)) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace strata::bench
