#include "runtime/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cpu/attention.h"
#include "runtime/cpu/fp8_matmul.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/kv_pool.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/error.h"
#include "runtime/fp8.h"
#include "runtime/sampler.h"
#include "runtime/step_plan_check.h"
#include "runtime/tp/tp_comm.h"
#include "runtime/tp/tp_shard.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The rank's slice of a tensor (the whole tensor at tp_size 1), fp32.
struct Slicer {
  const ModelConfig& cfg;
  const TpShard& shard;
  std::vector<float> operator()(const TensorView& t) const {
    return read_slice_f32(t, tp_slice(cfg, shard, t.name));
  }
  // Rows of several tensors' slices stacked into one [sum rows][cols] matrix (fused
  // projections).
  std::vector<float> stack(std::initializer_list<const TensorView*> parts) const {
    std::vector<float> out;
    for (const auto* p : parts) {
      const auto f = (*this)(*p);
      out.insert(out.end(), f.begin(), f.end());
    }
    return out;
  }
  // A pre-quantized weight's slice: its e4m3 codes as stored and the scales of the rows the
  // slice keeps (a column-parallel kRows slice keeps rows [begin, begin+count) of both; a
  // row-parallel kCols slice keeps every row, so every scale; a per-tensor scale replicates).
  cpu::Fp8Rows fp8(const Fp8Weight& w) const {
    const TpSlice sl = tp_slice(cfg, shard, w.codes->name);
    const auto shape = slice_shape(w.codes->shape, sl);
    cpu::Fp8Rows r;
    r.rows = static_cast<int>(shape.at(0));
    r.cols = static_cast<int>(shape.at(1));
    r.codes.resize(static_cast<std::size_t>(r.rows) * static_cast<std::size_t>(r.cols));
    read_slice(*w.codes, sl, reinterpret_cast<std::byte*>(r.codes.data()));
    r.scale = sl.split == TpSplit::kRows ? w.row_scales(sl.begin, sl.count) : w.row_scales();
    return r;
  }
  // Several pre-quantized slices stacked by rows (each row keeps its own scale, so q/k/v with
  // three different tensor scales stack into one matrix with per-row scales).
  cpu::Fp8Rows stack8(std::initializer_list<const Fp8Weight*> parts) const {
    cpu::Fp8Rows out;
    for (const auto* p : parts) {
      auto r = fp8(*p);
      out.rows += r.rows;
      out.cols = r.cols;
      out.codes.insert(out.codes.end(), r.codes.begin(), r.codes.end());
      out.scale.insert(out.scale.end(), r.scale.begin(), r.scale.end());
    }
    return out;
  }
};

// The static activation scale of a fused projection whose parts each carry one (q/k/v,
// gate/up): their maximum, as vLLM does (the parts see the same input, so calibration gives
// them equal scales unless their observers differed; the largest never clips more).
float max_input_scale(std::initializer_list<const Fp8Weight*> parts) {
  float s = 0.0f;
  for (const auto* p : parts) s = std::max(s, p->static_input_scale());
  return s;
}

// A weight-only checkpoint's codes dequantized to fp32: fl(e4m3(code) · s[row]).
std::vector<float> dequantize(const cpu::Fp8Rows& r) {
  std::vector<float> out(r.codes.size());
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = e4m3_to_float(r.codes[i]) * r.scale[i / static_cast<std::size_t>(r.cols)];
  return out;
}

struct LayerF32 {
  std::vector<float> input_norm;  // [hidden]
  std::vector<float> qkv;         // [q_dim + 2 kv_dim][hidden]: q rows, k rows, v rows
  std::vector<float> o;           // [hidden][q_dim]
  std::vector<float> post_norm;   // [hidden]
  std::vector<float> gate_up;     // [2 intermediate][hidden]: gate rows, then up rows
  std::vector<float> down;        // [hidden][intermediate]
  // W8A8 (quantization fp8, or a pre-quantized checkpoint): the four matrices above in e4m3
  // (those fp32 vectors are then empty).
  cpu::Fp8Rows qkv8, o8, gate_up8, down8;
  // Static per-tensor activation scales of the four GEMM inputs (a pre-quantized checkpoint
  // with input_scale); 0: dynamic per-token scales.
  float qkv_in = 0, o_in = 0, gate_up_in = 0, down_in = 0;
};

// Moves an fp32 [out][in] matrix into per-output-channel e4m3.
cpu::Fp8Rows to_e4m3(std::vector<float>& w, int in) {
  const int out = static_cast<int>(w.size() / static_cast<std::size_t>(in));
  auto q = cpu::quantize_rows_e4m3(w.data(), out, in);
  std::vector<float>().swap(w);
  return q;
}

class CpuBackend final : public Backend {
 public:
  // `comm` is null at tp_size 1.
  CpuBackend(std::shared_ptr<const ModelWeights> w, const CpuBackendOptions& opts,
             const TpShard& shard, std::shared_ptr<cpu::Collectives> comm)
      : cfg_(w->config()), opts_(opts), shard_(shard), comm_(std::move(comm)) {
    const auto& c = cfg_;
    const Slicer to_f32{c, shard_};
    embed_ = w->embed().to_float();                 // replicated: the lookup needs every row
    if (!c.tie_word_embeddings || shard_.size > 1)  // a tied head's vocabulary slice is cut
      lm_head_ = read_slice_f32(w->lm_head(), tp_slice(c, shard_, "lm_head.weight"));
    final_norm_ = to_f32(w->final_norm());
    // A pre-quantized checkpoint runs as it says, whatever opts.quantization is
    // (docs/cpu-backend.md "FP8"): W8A8 with its codes and scales, or weight-only.
    const auto& cq = w->quantization();
    const bool weight_only = cq.prequantized && cq.activations == ActivationScales::kNone;
    fp8_ = cq.prequantized ? !weight_only : opts.quantization == Quantization::kFp8;
    layers_.resize(static_cast<std::size_t>(c.num_hidden_layers));
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const auto& s = w->layer(l);
      auto& d = layers_[static_cast<std::size_t>(l)];
      d.input_norm = to_f32(*s.input_norm);
      d.post_norm = to_f32(*s.post_norm);
      if (cq.prequantized) {
        const auto& f = s.fp8;
        d.qkv8 = to_f32.stack8({&f.q, &f.k, &f.v});
        d.o8 = to_f32.fp8(f.o);
        d.gate_up8 = to_f32.stack8({&f.gate, &f.up});
        d.down8 = to_f32.fp8(f.down);
        if (cq.activations == ActivationScales::kStaticTensor) {
          d.qkv_in = max_input_scale({&f.q, &f.k, &f.v});
          d.o_in = f.o.static_input_scale();
          d.gate_up_in = max_input_scale({&f.gate, &f.up});
          d.down_in = f.down.static_input_scale();
        }
        if (weight_only) {
          for (auto [w8, f32] :
               {std::pair{&d.qkv8, &d.qkv}, std::pair{&d.o8, &d.o},
                std::pair{&d.gate_up8, &d.gate_up}, std::pair{&d.down8, &d.down}}) {
            *f32 = dequantize(*w8);
            *w8 = cpu::Fp8Rows{};
          }
        }
        continue;
      }
      d.qkv = to_f32.stack({s.q, s.k, s.v});
      d.o = to_f32(*s.o);
      d.gate_up = to_f32.stack({s.gate, s.up});
      d.down = to_f32(*s.down);
      if (fp8_) {
        d.qkv8 = to_e4m3(d.qkv, c.hidden_size);
        d.o8 = to_e4m3(d.o, shard_.q_heads * c.head_dim);
        d.gate_up8 = to_e4m3(d.gate_up, c.hidden_size);
        d.down8 = to_e4m3(d.down, shard_.inter);
      }
    }
    inv_freq_ = c.rope_inv_freq();
    const bool kv8 = opts.kv_dtype == KvDtype::kFp8;
    KvLayout layout{shard_.kv_heads, c.head_dim, kv8 ? 1 : 4};
    codecs_.resize(static_cast<std::size_t>(c.num_hidden_layers) * shard_.kv_heads);
    if (kv8) {
      STRATA_CHECK(!opts.kv_scales.empty(), "an fp8 KV cache needs its scales resolved first");
      opts.kv_scales.check(c.num_hidden_layers, c.num_key_value_heads);
      for (int l = 0; l < c.num_hidden_layers; ++l)
        for (int g = 0; g < shard_.kv_heads; ++g)
          codecs_[static_cast<std::size_t>(l) * shard_.kv_heads + g] =
              cpu::KvCodec{true, opts.kv_scales.k_at(l, shard_.kv_begin + g),
                           opts.kv_scales.v_at(l, shard_.kv_begin + g)};
    }
    // kv_bytes is the pool over all ranks: each rank holds 1/size of every page.
    const auto pages =
        opts.kv_bytes / (layout.page_bytes() * static_cast<std::uint64_t>(shard_.size));
    if (pages < 1)
      throw ConfigError("cache.cpu_kv_bytes",
                        "holds no KV page (" + std::to_string(layout.page_bytes() * shard_.size) +
                            " bytes each), got " + std::to_string(opts.kv_bytes));
    if (pages > static_cast<std::uint64_t>(INT32_MAX))
      throw ConfigError("cache.cpu_kv_bytes", "too many pages for int32 page ids");
    kv_ = std::make_unique<cpu::KvPool>(layout, static_cast<int>(pages));
    checker_ = std::make_unique<StepPlanChecker>(
        StepPlanLimits{c.num_hidden_layers, c.vocab_size, static_cast<int>(pages)});
    pool_ = std::make_unique<cpu::ThreadPool>(opts.threads);

    std::size_t wbytes = embed_.size() + lm_head_.size() + final_norm_.size();
    std::size_t fp8_bytes = 0;  // e4m3 codes (1 byte) and fp32 scales
    for (const auto& d : layers_) {
      wbytes += d.input_norm.size() + d.qkv.size() + d.o.size() + d.post_norm.size() +
                d.gate_up.size() + d.down.size();
      for (const auto* q : {&d.qkv8, &d.o8, &d.gate_up8, &d.down8})
        fp8_bytes += q->codes.size() + q->scale.size() * sizeof(float);
    }
    info_.name = shard_.size == 1 ? "cpu" : "cpu-tp" + std::to_string(shard_.size);
    if (fp8_) info_.name += "-fp8";
    if (weight_only) info_.name += "-fp8-weight-only";
    if (kv8) info_.name += "-kv-fp8";
    info_.layout = layout;
    info_.num_pages = static_cast<int>(pages);
    info_.tp_size = shard_.size;
    info_.weight_bytes = wbytes * sizeof(float) + fp8_bytes;
  }

  const BackendInfo& info() const override { return info_; }
  const ModelConfig& model() const override { return cfg_; }
  StepResult step(const StepPlan& plan) override;

 private:
  void forward(const StepPlan& plan, std::vector<float>& x);
  // y[rows][out] = x[rows][in] · wᵀ: fp32 (`w`) or, in W8A8 (fp8_), e4m3 (`w8`) with x
  // quantized here per row (x_scale 0) or with the static per-tensor scale x_scale.
  void linear(const std::vector<float>& x, int rows, const std::vector<float>& w,
              const cpu::Fp8Rows& w8, float x_scale, int in, int out, std::vector<float>& y) {
    if (fp8_) {
      const auto xq = x_scale > 0.0f
                          ? cpu::quantize_rows_e4m3_static(x.data(), rows, in, x_scale, pool_.get())
                          : cpu::quantize_rows_e4m3(x.data(), rows, in, pool_.get());
      cpu::matmul_e4m3(*pool_, xq, w8, y.data());
    } else {
      cpu::matmul(*pool_, x.data(), rows, w.data(), in, out, y.data());
    }
  }
  // Sums the ranks' partial outputs (no-op at tp_size 1).
  void all_reduce(std::vector<float>& v) {
    if (comm_) comm_->all_reduce_sum(shard_.rank, v.data(), v.size());
  }

  ModelConfig cfg_;
  CpuBackendOptions opts_;
  bool fp8_ = false;  // W8A8 linears (quantization fp8 or a pre-quantized W8A8 checkpoint)
  TpShard shard_;
  std::shared_ptr<cpu::Collectives> comm_;
  BackendInfo info_;
  // lm_head_: the rank's vocabulary slice; empty when tied at tp_size 1 (embed_ is the head).
  std::vector<float> embed_, lm_head_, final_norm_;
  std::vector<LayerF32> layers_;
  std::vector<double> inv_freq_;
  std::unique_ptr<cpu::KvPool> kv_;
  std::vector<cpu::KvCodec> codecs_;  // [layer][local KV head]: fp32, or e4m3 with its scales
  std::unique_ptr<cpu::ThreadPool> pool_;
  std::unique_ptr<StepPlanChecker> checker_;  // the StepPlan contract (runtime/step_plan_check.h)
  std::vector<std::int32_t> row_pos_;         // [T] position of each row of the step
  std::vector<std::size_t> seq_row_;          // [seqs + 1] first row of each sequence
};

void CpuBackend::forward(const StepPlan& plan, std::vector<float>& x) {
  const auto& c = cfg_;
  // Local sizes: the rank's query/KV heads and intermediate rows (the whole model at tp 1).
  const int hd = c.head_dim, H = c.hidden_size;
  const int nh = shard_.q_heads, nkv = shard_.kv_heads, I = shard_.inter;
  const int qd = nh * hd, kvd = nkv * hd;
  const int qkvd = qd + 2 * kvd;
  const auto T = static_cast<int>(row_pos_.size());
  const auto tn = static_cast<std::size_t>(T);
  std::vector<float> xn(tn * H), qkv(tn * qkvd), attn(tn * qd), tmp(tn * H), gu(tn * 2 * I),
      act(tn * I);
  std::vector<double> lse(tn * nh);

  // Scratch for sparse layers whose whole long prompt is in this step without temp pages, in
  // the pool's element type (fp8: the codes the selection copies into the pages).
  const std::size_t eb = static_cast<std::size_t>(kv_->layout().elem_bytes);
  std::vector<std::vector<std::byte>> scratch(plan.seqs.size());
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    const auto& s = plan.seqs[i];
    for (const auto& ls : s.layers)
      if (s.prefill && !ls.direct_prefill(s.prompt_len) && ls.temp_pages.empty()) {
        scratch[i].resize(2ull * nkv * s.prompt_len * hd * eb);
        break;
      }
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const auto nseq = static_cast<std::int64_t>(plan.seqs.size());

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const auto& w = layers_[static_cast<std::size_t>(l)];
    pool_->parallel_for(T, 16, [&](std::int64_t b, std::int64_t e) {
      for (auto t = b; t < e; ++t)
        cpu::rms_norm(&x[t * H], w.input_norm.data(), H, c.rms_norm_eps, &xn[t * H]);
    });
    linear(xn, T, w.qkv, w.qkv8, w.qkv_in, H, qkvd, qkv);
    pool_->parallel_for(T, 16, [&](std::int64_t b, std::int64_t e) {
      for (auto t = b; t < e; ++t) {
        float* row = &qkv[t * qkvd];
        cpu::rope(row, nh, hd, inv_freq_.data(), row_pos_[t]);
        cpu::rope(row + qd, nkv, hd, inv_freq_.data(), row_pos_[t]);
      }
    });
    if (opts_.kv_amax)  // calibration: the K/V rows as they are about to be stored
      for (int t = 0; t < T; ++t)
        for (int g = 0; g < nkv; ++g) {
          const float* row = &qkv[static_cast<std::size_t>(t) * qkvd];
          opts_.kv_amax->observe(l, shard_.kv_begin + g, row + qd + g * hd, row + qd + kvd + g * hd,
                                 hd);
        }
    pool_->parallel_for(nseq * nkv, 1, [&](std::int64_t b, std::int64_t e) {
      for (auto task = b; task < e; ++task) {
        const auto i = static_cast<std::size_t>(task / nkv);
        const int g = static_cast<int>(task % nkv);
        const auto& s = plan.seqs[i];
        const std::size_t r0 = seq_row_[i];
        cpu::AttnArgs a;
        a.slots = &s.layers[static_cast<std::size_t>(l)];
        a.start = s.start;
        a.n = static_cast<std::int32_t>(s.tokens.size());
        a.prompt_len = s.prompt_len;
        a.prefill = s.prefill;
        a.head_dim = hd;
        a.group = nh / nkv;
        a.scale = scale;
        a.q = &qkv[r0 * qkvd + static_cast<std::size_t>(g) * a.group * hd];
        a.k = &qkv[r0 * qkvd + qd + static_cast<std::size_t>(g) * hd];
        a.v = &qkv[r0 * qkvd + qd + kvd + static_cast<std::size_t>(g) * hd];
        a.q_stride = a.kv_stride = static_cast<std::size_t>(qkvd);
        a.out = &attn[r0 * qd + static_cast<std::size_t>(g) * a.group * hd];
        a.out_stride = static_cast<std::size_t>(qd);
        a.lse = &lse[r0 * nh + static_cast<std::size_t>(g) * a.group];
        a.lse_stride = static_cast<std::size_t>(nh);
        if (!scratch[i].empty()) {
          const std::size_t head_bytes = static_cast<std::size_t>(s.prompt_len) * hd * eb;
          a.scratch_k = &scratch[i][static_cast<std::size_t>(g) * head_bytes];
          a.scratch_v = &scratch[i][(static_cast<std::size_t>(nkv) + g) * head_bytes];
        }
        a.codec = codecs_[static_cast<std::size_t>(l) * nkv + g];
        a.fp64_scores = opts_.fp64_scores;
        cpu::attend(*kv_, g, a);
      }
    });
    linear(attn, T, w.o, w.o8, w.o_in, qd, H, tmp);
    all_reduce(tmp);
    for (std::size_t j = 0; j < x.size(); ++j) x[j] += tmp[j];
    pool_->parallel_for(T, 16, [&](std::int64_t b, std::int64_t e) {
      for (auto t = b; t < e; ++t)
        cpu::rms_norm(&x[t * H], w.post_norm.data(), H, c.rms_norm_eps, &xn[t * H]);
    });
    linear(xn, T, w.gate_up, w.gate_up8, w.gate_up_in, H, 2 * I, gu);
    pool_->parallel_for(T, 16, [&](std::int64_t b, std::int64_t e) {
      for (auto t = b; t < e; ++t)
        cpu::silu_mul(&gu[t * 2 * I], &gu[t * 2 * I + I], I, &act[t * I]);
    });
    linear(act, T, w.down, w.down8, w.down_in, I, H, tmp);
    all_reduce(tmp);
    for (std::size_t j = 0; j < x.size(); ++j) x[j] += tmp[j];
  }
}

StepResult CpuBackend::step(const StepPlan& plan) {
  const auto t_start = Clock::now();
  checker_->check(plan);
  const auto& c = cfg_;
  const int H = c.hidden_size, V = c.vocab_size;

  row_pos_.clear();
  seq_row_.assign(1, 0);
  std::vector<float> x;
  for (const auto& s : plan.seqs) {
    for (std::size_t t = 0; t < s.tokens.size(); ++t) {
      row_pos_.push_back(s.start + static_cast<std::int32_t>(t));
      const float* e = &embed_[static_cast<std::size_t>(s.tokens[t]) * H];
      x.insert(x.end(), e, e + H);
    }
    seq_row_.push_back(row_pos_.size());
  }
  const double host_before = ms_since(t_start);
  const auto t_fwd = Clock::now();
  try {
    forward(plan, x);
  } catch (const std::exception& e) {
    // Never leave the other ranks waiting in a collective.
    if (comm_) comm_->abort("rank " + std::to_string(shard_.rank) + " failed: " + e.what());
    throw;
  }

  // Logits only for the rows somebody reads: the last row of a sampled sequence, every row
  // of a return_logits sequence.
  std::vector<std::size_t> rows;
  std::vector<std::size_t> first_logit_row(plan.seqs.size());
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    const auto& s = plan.seqs[i];
    first_logit_row[i] = rows.size();
    if (s.return_logits) {
      for (auto r = seq_row_[i]; r < seq_row_[i + 1]; ++r) rows.push_back(r);
    } else if (s.sample) {
      rows.push_back(seq_row_[i + 1] - 1);
    }
  }
  const auto R = static_cast<int>(rows.size());
  const int Vl = shard_.vocab;  // the rank's vocabulary slice (V at tp_size 1)
  std::vector<float> xn(static_cast<std::size_t>(R) * H), logits(static_cast<std::size_t>(R) * Vl);
  for (int j = 0; j < R; ++j)
    cpu::rms_norm(&x[rows[j] * H], final_norm_.data(), H, c.rms_norm_eps,
                  &xn[static_cast<std::size_t>(j) * H]);
  const float* head = lm_head_.empty() ? embed_.data() : lm_head_.data();
  cpu::matmul(*pool_, xn.data(), R, head, H, Vl, logits.data());
  if (comm_) {
    // Rank 0 gathers [rank][R][slice] and reorders it to [R][V]; the others are done. Only
    // rank 0 samples: ranks > 0 never read params/prompt/output (a follower process holds
    // placeholders there, runtime/tp/tp_wire.h).
    std::vector<float> parts;
    comm_->gather(shard_.rank, logits.data(), logits.size(), shard_.rank == 0 ? &parts : nullptr);
    if (shard_.rank != 0) {
      StepResult res;
      res.step_id = plan.step_id;
      res.seqs.resize(plan.seqs.size());
      for (std::size_t i = 0; i < plan.seqs.size(); ++i) res.seqs[i].seq_id = plan.seqs[i].seq_id;
      res.stats.device_ms = ms_since(t_fwd);
      res.stats.host_ms = host_before;
      res.stats.tokens = static_cast<std::int64_t>(row_pos_.size());
      return res;
    }
    logits.assign(static_cast<std::size_t>(R) * V, 0.0f);
    std::size_t off = 0;
    for (int r = 0; r < shard_.size; ++r) {
      const auto sr = make_tp_shard(c, r, shard_.size);
      for (int j = 0; j < R; ++j)
        std::copy_n(parts.begin() +
                        static_cast<std::ptrdiff_t>(off + static_cast<std::size_t>(j) * sr.vocab),
                    sr.vocab,
                    logits.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(j) * V +
                                                                 sr.vocab_begin));
      off += static_cast<std::size_t>(R) * sr.vocab;
    }
  }
  const double device_ms = ms_since(t_fwd);

  const auto t_host = Clock::now();
  StepResult res;
  res.step_id = plan.step_id;
  res.seqs.resize(plan.seqs.size());
  std::vector<std::int32_t> no_eos;
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    const auto& s = plan.seqs[i];
    auto& out = res.seqs[i];
    out.seq_id = s.seq_id;
    const std::size_t n = s.tokens.size();
    if (s.report_kept) {
      // The layers' states after this step (the state rule), counted by recorded position.
      const auto tokens = s.start + static_cast<std::int32_t>(n);
      out.kept.resize(s.layers.size());
      for (std::size_t l = 0; l < s.layers.size(); ++l) {
        LayerSlots after = s.layers[l];
        advance_layer(after, layer_step(s, after));
        out.kept[l] = cpu::kept_positions(*kv_, after, tokens);
      }
    }
    if (s.return_logits)
      out.logits.assign(logits.begin() + static_cast<std::ptrdiff_t>(first_logit_row[i] * V),
                        logits.begin() + static_cast<std::ptrdiff_t>((first_logit_row[i] + n) * V));
    if (s.sample) {
      const std::size_t last = first_logit_row[i] + (s.return_logits ? n - 1 : 0);
      std::vector<float> row(logits.begin() + static_cast<std::ptrdiff_t>(last * V),
                             logits.begin() + static_cast<std::ptrdiff_t>((last + 1) * V));
      static const std::vector<std::int32_t> empty;
      const auto so = sample_row(row, *s.params, s.prompt ? *s.prompt : empty, *s.output,
                                 s.params->ignore_eos ? no_eos : c.eos_token_ids);
      out.token = so.token;
      out.logprob = so.logprob;
      out.argmax = so.argmax;
      out.top = so.top;
    }
  }
  res.stats.device_ms = device_ms;
  res.stats.host_ms = host_before + ms_since(t_host);
  res.stats.tokens = static_cast<std::int64_t>(row_pos_.size());
  return res;
}

}  // namespace

KvScales cpu_kv_scales(const std::shared_ptr<const ModelWeights>& weights,
                       const CpuBackendOptions& opts) {
  if (!weights) throw InternalError("cpu_kv_scales: no weights");
  const auto& c = weights->config();
  if (!opts.kv_scales.empty()) {
    KvScales s = opts.kv_scales;
    if (s.source.empty()) s.source = "given";
    s.check(c.num_hidden_layers, c.num_key_value_heads);
    return s;
  }
  if (auto s = kv_scales_from_checkpoint(*weights)) return *s;
  // Calibration on the native (fp32) KV path with the same weight arithmetic, one thread
  // budget, a pool of exactly the pages the prompts need.
  KvAmax amax(c.num_hidden_layers, c.num_key_value_heads);
  CpuBackendOptions o = opts;
  o.kv_dtype = KvDtype::kBf16;
  o.kv_scales = KvScales{};
  o.kv_amax = &amax;
  const int max_len = c.max_position_embeddings;
  const KvLayout fp32{c.num_key_value_heads, c.head_dim, 4};
  o.kv_bytes = static_cast<std::uint64_t>(kv_calibration_pages(c, max_len)) * fp32.page_bytes();
  const auto shard = make_tp_shard(c, 0, 1);
  CpuBackend b(weights, o, shard, nullptr);
  return calibrate_kv_scales(b, amax, max_len);
}

namespace {

// opts with the fp8 KV cache's scales resolved (unchanged for a bf16/fp32 cache).
CpuBackendOptions with_kv_scales(const std::shared_ptr<const ModelWeights>& weights,
                                 const CpuBackendOptions& opts) {
  CpuBackendOptions o = opts;
  if (o.kv_dtype == KvDtype::kFp8) o.kv_scales = cpu_kv_scales(weights, opts);
  return o;
}

std::unique_ptr<Backend> make_backend(std::shared_ptr<const ModelWeights> weights,
                                      const CpuBackendOptions& opts) {
  const auto shard = make_tp_shard(weights->config(), 0, 1);
  return std::make_unique<CpuBackend>(std::move(weights), opts, shard, nullptr);
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const ModelWeights> weights,
                                          const CpuBackendOptions& opts) {
  if (!weights) throw InternalError("make_cpu_backend: no weights");
  const CpuBackendOptions o = with_kv_scales(weights, opts);
  return make_backend(std::move(weights), o);
}

CpuBackendOptions cpu_backend_options(const Config& config) {
  CpuBackendOptions o;
  o.threads = config.backend.threads;
  o.kv_bytes = config.cache.cpu_kv_bytes;
  if (config.cache.kv_bytes > 0 && config.cache.kv_bytes < o.kv_bytes)
    o.kv_bytes = config.cache.kv_bytes;
  o.quantization = config.model.quantization;
  o.kv_dtype = config.cache.kv_dtype;
  return o;
}

std::vector<std::unique_ptr<Backend>> make_cpu_tp_backends(
    std::shared_ptr<const ModelWeights> weights, const CpuBackendOptions& opts, int tp_size) {
  if (!weights) throw InternalError("make_cpu_tp_backends: no weights");
  validate_tp(weights->config(), tp_size);
  std::vector<std::unique_ptr<Backend>> out;
  if (tp_size == 1) {
    out.push_back(make_cpu_backend(std::move(weights), opts));
    return out;
  }
  auto comm = std::make_shared<cpu::TpComm>(tp_size);
  CpuBackendOptions o = with_kv_scales(weights, opts);
  if (o.threads <= 0)
    o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.threads = std::max(1, o.threads / tp_size);
  for (int r = 0; r < tp_size; ++r)
    out.push_back(std::make_unique<CpuBackend>(weights, o,
                                               make_tp_shard(weights->config(), r, tp_size), comm));
  return out;
}

std::unique_ptr<Backend> make_cpu_tp_rank_backend(std::shared_ptr<const ModelWeights> weights,
                                                  const CpuBackendOptions& opts, int rank,
                                                  std::shared_ptr<cpu::Collectives> comm) {
  if (!weights || !comm) throw InternalError("make_cpu_tp_rank_backend: no weights or comm");
  const int n = comm->size();
  validate_tp(weights->config(), n);
  if (rank < 0 || rank >= n)
    throw InternalError("make_cpu_tp_rank_backend: rank " + std::to_string(rank) + " of " +
                        std::to_string(n));
  const auto shard = make_tp_shard(weights->config(), rank, n);
  const CpuBackendOptions o = with_kv_scales(weights, opts);
  return std::make_unique<CpuBackend>(std::move(weights), o, shard,
                                      n > 1 ? std::move(comm) : nullptr);
}

}  // namespace strata
