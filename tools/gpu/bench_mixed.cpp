// gpu_bench mixed (issue 19 item 3; docs/benchmarks.md "Mixed steps"): on random:llama3-8b with
// a random (not zero) KV pool, under the full cache and the default sparse profile
// (configs/bench/llama3-8b-sparse.yaml's: 3 full layers, 29 `scored` layers of C = 512, as
// `gpu_bench sparse` sets it up), each case through CudaBackend::step, the call the engine makes.
// The backend picks graphs where the server would: full-cache decode-only steps replay a graph,
// sparse decode-only steps run eager (backend.sparse_graphs is off by default), steps carrying a
// prefill chunk always run eager.
//   (a) 64 decodes at context 4096 (4096 slots attended on full layers, 512 on sparse ones);
//   (b) one 4000-token prefill chunk, no prior context (the whole prompt: sparse layers select
//       from the backend's scratch);
//   (c) (a) and (b) in one step;
//   (d) a 2048-token chunk after 2048 prior tokens (the final chunk of a 4096-token prompt:
//       sparse layers select from temp pages), alone and beside the 64 decodes.
// Median StepStats::device_ms (upload + forward + sampling) of kRuns steps after kWarm, and
// c / (a + b). Then the forward profiler's per-class split (cuda/backend/forward_profile.h;
// eager forwards only, so (a) is profiled with graphs off) of (c) against (a) + (b): GEMMs,
// prefill attention, decode attention, the rest.
#include "tools/gpu/bench_mixed.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/testing/backend_probe.h"
#include "runtime/config.h"
#include "runtime/kv_layout.h"
#include "runtime/sparsity_profile.h"
#include "runtime/step_plan.h"

namespace strata::bench {

namespace {

using cuda::CudaBackend;
using cuda::CudaBackendProbe;

constexpr int kWarm = 3, kRuns = 11, kProfiled = 5;
// STRATA_MIXED_OVERLAP modes timed: 0 one stream, 1 / 2 side stream at high / default priority,
// 3 a green context's SMs (STRATA_MIXED_OVERLAP_SMS).
constexpr int kModes = 4;
constexpr int kDecodes = 64, kCtx = 4096, kChunk = 4000, kHalf = 2048;

void figure(const std::string& name, double v) {
  std::printf("FIGURE %s %.6g\n", name.c_str(), v);
  std::fflush(stdout);
}

// Median StepStats::device_ms of kRuns steps of `plan` after kWarm untimed ones.
double median_step_ms(CudaBackend& be, const StepPlan& plan) {
  std::vector<double> t;
  for (int i = 0; i < kWarm + kRuns; ++i) {
    const StepResult r = be.step(plan);
    if (i >= kWarm) t.push_back(r.stats.device_ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The 8B-shaped random model with 90 % of free memory as KV pool, room for 64 decodes beside a
// 4000-token chunk in one step (STRATA_BENCH_MODEL: another shape, as gpu_bench's other modes).
Config mixed_config() {
  Config c;
  c.model.path = "random:llama3-8b";
  c.model.seed = 1;
  if (const char* m = std::getenv("STRATA_BENCH_MODEL"); m && *m) c.model.path = m;
  c.model.max_model_len = 8192;
  c.scheduler.max_num_seqs = 72;
  c.scheduler.max_num_batched_tokens = 4096 + 64;
  c.cache.kv_fraction = 0.9;
  return c;
}

// Hands out consecutive page ids; throws past the pool.
struct PageIds {
  int next = 0, limit = 0;
  std::vector<std::int32_t> take(int n) {
    if (next + n > limit)
      throw std::runtime_error("gpu_bench mixed: KV pool too small (" + std::to_string(limit) +
                               " pages)");
    std::vector<std::int32_t> v(static_cast<std::size_t>(n));
    for (auto& p : v) p = next++;
    return v;
  }
};

struct Rows {
  SamplingParams greedy;
  std::vector<std::int32_t> empty;
  Rows() { greedy.temperature = 0; }
};

// One decode row at context kCtx: its token at position kCtx - 1 (kCtx slots attended on full
// layers); sparse layers hold their selection with the ring full (prompt of kChunk tokens).
SeqStep decode_row(std::uint64_t id, const std::vector<LayerRule>& rules, PageIds& pages,
                   const Rows& rows, int vocab) {
  SeqStep s;
  s.seq_id = id;
  s.tokens = {static_cast<std::int32_t>((id * 7919 + 1) % static_cast<std::uint64_t>(vocab))};
  s.start = kCtx - 1;
  s.prompt_len = kChunk;
  s.prefill = false;
  s.sample = true;
  s.params = &rows.greedy;
  s.prompt = &rows.empty;
  s.output = &rows.empty;
  for (const LayerRule& r : rules) {
    LayerSlots ls;
    ls.rule = r;
    if (r.sparse()) {
      ls.valid = r.capacity;
      ls.ring_pos = (s.start - s.prompt_len) % std::max(1, r.ring);
      ls.pages = pages.take(pages_for_slots(r.capacity));
    } else {
      ls.valid = s.start;
      ls.pages = pages.take(pages_for_slots(kCtx));
    }
    s.layers.push_back(std::move(ls));
  }
  return s;
}

// The final prefill chunk of a prompt of prior + n tokens: n tokens at positions [prior,
// prior + n). Full layers hold the prior tokens in place; sparse layers (prompt longer than their
// capacity) select at the end of this step, from temp pages holding the whole prompt when there
// is prior context, else from the backend's scratch.
SeqStep prefill_chunk(std::uint64_t id, int prior, int n, const std::vector<LayerRule>& rules,
                      PageIds& pages, const Rows& rows, int vocab) {
  SeqStep s;
  s.seq_id = id;
  for (int i = 0; i < n; ++i)
    s.tokens.push_back(static_cast<std::int32_t>(
        (static_cast<std::uint64_t>(prior + i) * 7919 + id) % static_cast<std::uint64_t>(vocab)));
  s.start = prior;
  s.prompt_len = prior + n;
  s.prefill = true;
  s.sample = true;
  s.params = &rows.greedy;
  s.prompt = &rows.empty;
  s.output = &rows.empty;
  for (const LayerRule& r : rules) {
    LayerSlots ls;
    ls.rule = r;
    if (ls.direct_prefill(s.prompt_len)) {
      ls.valid = prior;
      ls.pages = pages.take(pages_for_slots(prior + n));
    } else {
      ls.action = LayerAction::kSelect;
      ls.pages = pages.take(pages_for_slots(r.capacity));
      if (prior > 0) ls.temp_pages = pages.take(pages_for_slots(prior + n));
    }
    s.layers.push_back(std::move(ls));
  }
  return s;
}

StepPlan plan_of(std::vector<const std::vector<SeqStep>*> parts) {
  StepPlan p;
  for (const auto* v : parts) p.seqs.insert(p.seqs.end(), v->begin(), v->end());
  return p;
}

// Per-class ms of one profiled step (the mean over kProfiled), grouped: gemm (the four layer
// GEMMs), attn_prefill, attn_decode, attn_mixed (decode + prefill attention side by side:
// STRATA_MIXED_OVERLAP), rest (everything else, the lm_head included), total (the events).
using Split = std::map<std::string, double>;

Split profile_step(CudaBackend& be, CudaBackendProbe& probe, const StepPlan& plan) {
  probe.set_forward_profile(true);
  be.step(plan);  // warm with the events on
  probe.set_forward_profile(true);
  for (int i = 0; i < kProfiled; ++i) be.step(plan);
  const CudaBackendProbe::ForwardBreakdown b = probe.forward_profile();
  probe.set_forward_profile(false);
  Split s;
  const double f = b.forwards > 0 ? b.forwards : 1;
  for (std::size_t i = 0; i < b.names.size(); ++i) {
    const double ms = b.ms[i] / f;
    const std::string& n = b.names[i];
    const std::string g = n.rfind("gemm", 0) == 0                                          ? "gemm"
                          : n == "attn_prefill" || n == "attn_decode" || n == "attn_mixed" ? n
                                                                                           : "rest";
    s[g] += ms;
    s["total"] += ms;
    if (ms > 0) s["class:" + n] += ms;
  }
  s["step"] = b.step_ms / f;
  return s;
}

void print_split(const std::string& tag, const std::string& what, const Split& s) {
  std::printf("  %-34s", what.c_str());
  for (const char* k : {"gemm", "attn_prefill", "attn_decode", "attn_mixed", "rest", "total"}) {
    const auto it = s.find(k);
    const double v = it == s.end() ? 0.0 : it->second;
    std::printf(" %s %.3f", k, v);
    figure(tag + "_" + k + "_ms", v);
  }
  std::printf("\n   ");
  for (const auto& [k, v] : s)
    if (k.rfind("class:", 0) == 0) std::printf(" %s %.3f", k.c_str() + 6, v);
  std::printf("\n");
}

Split sum(const Split& a, const Split& b) {
  Split s = a;
  for (const auto& [k, v] : b) s[k] += v;
  return s;
}

}  // namespace

void bench_mixed() {
  CudaBackend be(mixed_config(), 0);
  CudaBackendProbe probe(be);
  const ModelConfig& mc = be.model();
  const int L = mc.num_hidden_layers, V = mc.vocab_size;
  // Random K/V everywhere: the decodes attend over it; prefill steps overwrite their own pages.
  probe.fill_kv_random(0x6d69786564ull);
  SparsityProfile prof;  // configs/bench/llama3-8b-sparse.yaml (= configs/sparsity-default.yaml)
  prof.enabled = true;
  prof.full_layers = 3;
  prof.policy = Policy::kScored;
  prof.capacity = 512;
  prof.window = 32;
  prof.sinks = 4;
  prof.pool = PoolKind::kMax;
  prof.pool_kernel = 7;
  const Rows rows;
  std::printf(
      "mixed steps 8B (%s): %d decodes at context %d beside a %d-token chunk; %d-token chunk "
      "after %d prior; median of %d steps after %d, StepStats::device_ms\n",
      mixed_config().model.path.c_str(), kDecodes, kCtx, kChunk, kHalf, kHalf, kRuns, kWarm);
  for (const bool sparse : {false, true}) {
    const std::vector<LayerRule> rules =
        sparse ? prof.resolve(L) : std::vector<LayerRule>(static_cast<std::size_t>(L));
    const std::string tag = std::string("bench_mixed_") + (sparse ? "sparse" : "full");
    PageIds pages{0, be.info().num_pages};
    std::vector<SeqStep> dec, chunk, half;
    for (int b = 0; b < kDecodes; ++b)
      dec.push_back(decode_row(static_cast<std::uint64_t>(b), rules, pages, rows, V));
    chunk.push_back(prefill_chunk(1000, 0, kChunk, rules, pages, rows, V));
    half.push_back(prefill_chunk(2000, kHalf, kHalf, rules, pages, rows, V));
    const StepPlan pa = plan_of({&dec}), pb = plan_of({&chunk}), pc = plan_of({&chunk, &dec}),
                   pd_alone = plan_of({&half}), pd_mixed = plan_of({&half, &dec});

    // The mixed steps once per STRATA_MIXED_OVERLAP mode (0: one stream, the figures without
    // a suffix), the parts alone once.
    probe.set_mixed_overlap(0);
    const double a = median_step_ms(be, pa);
    const double b = median_step_ms(be, pb);
    const double d1 = median_step_ms(be, pd_alone);
    double c[kModes] = {}, d2[kModes] = {};
    for (int m = 0; m < kModes; ++m) {
      probe.set_mixed_overlap(m);
      c[m] = median_step_ms(be, pc);
      d2[m] = median_step_ms(be, pd_mixed);
    }
    probe.set_mixed_overlap(0);
    std::printf("%s (pages used %d of %d):\n", sparse ? "default sparse profile" : "full cache",
                pages.next, pages.limit);
    std::printf("  (a) %d decodes, ctx %d (%s): %.3f ms\n", kDecodes, kCtx,
                sparse ? "eager: sparse_graphs off" : "graph", a);
    std::printf("  (b) %d-token chunk alone: %.3f ms\n", kChunk, b);
    figure(tag + "_decode64_ms", a);
    figure(tag + "_chunk4000_ms", b);
    figure(tag + "_chunk2048_prior2048_ms", d1);
    for (int m = 0; m < kModes; ++m) {
      const std::string sfx = m == 0 ? "" : "_overlap" + std::to_string(m);
      std::printf(
          "  STRATA_MIXED_OVERLAP=%d: (c) both in one step %.3f ms, c / (a + b) = %.4f (issue "
          "19: <= 1.05); (d) %d-token chunk after %d prior: alone %.3f ms, beside the decodes "
          "%.3f ms, mixed / (a + alone) = %.4f\n",
          m, c[m], c[m] / (a + b), kHalf, kHalf, d1, d2[m], d2[m] / (a + d1));
      figure(tag + "_mixed4000" + sfx + "_ms", c[m]);
      figure(tag + "_mixed4000" + sfx + "_ratio", c[m] / (a + b));
      figure(tag + "_mixed2048_prior2048" + sfx + "_ms", d2[m]);
      figure(tag + "_mixed2048_prior2048" + sfx + "_ratio", d2[m] / (a + d1));
    }

    // Per class: (a) eager (the profiler sees no graph replay), (b), (c) per mode.
    probe.set_cuda_graphs(false);
    const double a_eager = median_step_ms(be, pa);
    const Split sa = profile_step(be, probe, pa);
    probe.set_cuda_graphs(true);
    const Split sb = profile_step(be, probe, pb);
    const Split ab = sum(sa, sb);
    std::printf("  per class, ms per step (forward profiler; (a) eager: %.3f ms unprofiled):\n",
                a_eager);
    figure(tag + "_decode64_eager_ms", a_eager);
    print_split(tag + "_prof_a", "(a) decodes", sa);
    print_split(tag + "_prof_b", "(b) chunk", sb);
    print_split(tag + "_prof_ab", "(a) + (b)", ab);
    auto get = [](const Split& s, const char* k) {
      const auto it = s.find(k);
      return it == s.end() ? 0.0 : it->second;
    };
    for (int m = 0; m < kModes; ++m) {
      probe.set_mixed_overlap(m);
      const Split sc = profile_step(be, probe, pc);
      const std::string sfx = m == 0 ? "" : "_overlap" + std::to_string(m);
      print_split(tag + "_prof_c" + sfx, "(c) mixed, STRATA_MIXED_OVERLAP=" + std::to_string(m),
                  sc);
      std::printf(
          "    (c) - (a + b) by class: gemm %+.3f (the decodes' weight reads shared with the "
          "chunk's), attention %+.3f, rest %+.3f ms\n",
          get(sc, "gemm") - get(ab, "gemm"),
          get(sc, "attn_prefill") + get(sc, "attn_decode") + get(sc, "attn_mixed") -
              get(ab, "attn_prefill") - get(ab, "attn_decode"),
          get(sc, "rest") - get(ab, "rest"));
    }
    probe.set_mixed_overlap(0);
  }
}

}  // namespace strata::bench
