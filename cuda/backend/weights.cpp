// The CUDA backend's weights: uploaded from an HF checkpoint (bf16 on the host, fused [q;k;v]
// and [gate;up] buffers) or generated on the device for `random:` models, bit-identical to
// `strata make-model` with the model seed; tensor-parallel ranks load their slice.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/backend/backend_impl.h"
#include "cuda/fp8.h"
#include "cuda/kernels.h"
#include "cuda/tp/tp_backends.h"
#include "runtime/error.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"
#include "runtime/model/random_model.h"

namespace strata::cuda {

namespace {

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

}  // namespace

void CudaBackendImpl::random_tensor(bf16* dst, const std::string& name, std::size_t n, float scale,
                                    float offset) {
  launch_random_fill({dst, static_cast<long long>(n), cfg.model.seed, fnv1a(name), scale, offset},
                     stream);
  by_name[name] = {dst, n};
}

void CudaBackendImpl::build_weights(const KvScales& given_kv_scales) {
  const bool random = is_random_model(cfg.model.path);
  std::shared_ptr<const ModelWeights> mw;
  if (random) {
    mc = random_model_config(cfg.model.path);
  } else {
    mw = ModelWeights::load(cfg.model.path);
    mc = mw->config();
  }
  // A pre-quantized checkpoint (docs/checkpoints.md) runs as its quantization_config says,
  // whatever model.quantization is (as on the CPU backend): W8A8 with its own codes and scales,
  // or, weight-only, its weights dequantized (to bf16 here) on the bf16 path.
  const bool preq = mw && mw->quantization().prequantized;
  const bool weight_only = preq && mw->quantization().activations == ActivationScales::kNone;
  if (preq) {
    if (tp.size > 1)
      throw ConfigError("backend.tp_size",
                        "a pre-quantized FP8 checkpoint runs on the CUDA backend at tp_size 1 "
                        "only (not sliced yet); got " +
                            std::to_string(tp.size));
    fp8 = !weight_only;
  }
  full_mc = mc;
  // cache.kv_dtype fp8: the scales before any upload (a CPU calibration reads the host weights).
  resolve_kv_scales(mw, given_kv_scales);
  shard = make_tp_shard(mc, tp.rank, tp.size);  // ConfigError when mc cannot be split
  if (tp.size > 1) {
    mc.num_attention_heads = shard.q_heads;
    mc.num_key_value_heads = shard.kv_heads;
    mc.intermediate_size = shard.inter;
  }
  const std::size_t h = mc.hidden_size, in = mc.intermediate_size, V = mc.vocab_size;
  q_dim = mc.q_dim(), kv_dim = mc.kv_dim(), qkv_dim = q_dim + 2 * kv_dim;
  // Weight upload: tensor by HF name into dst (n elements), converted to bf16 on the host.
  std::vector<std::uint16_t> staging;
  auto upload = [&](bf16* dst, const std::string& name, std::size_t n) {
    const TensorView& t = mw->tensor(name);
    if (static_cast<std::size_t>(t.numel()) != n)
      throw ModelError(t.file + ": tensor " + name + " has " + std::to_string(t.numel()) +
                       " elements, expected " + std::to_string(n));
    if (t.dtype == DType::kF8E4M3)  // codes mean nothing without their scales
      throw InternalError("CUDA backend: " + name + " is e4m3 codes; upload_prequantized reads it");
    const void* src = t.data;
    if (t.dtype != DType::kBF16) {
      const std::vector<float> f = t.to_float();
      staging.resize(n);
      for (std::size_t i = 0; i < n; ++i) staging[i] = float_to_bf16(f[i]);
      src = staging.data();
    }
    CUDA_CHECK(cudaMemcpy(dst, src, n * 2, cudaMemcpyHostToDevice));
    by_name[name] = {dst, n};
  };
  std::function<void(bf16*, const std::string&, std::size_t, float, float)> tensor =
      [&](bf16* dst, const std::string& name, std::size_t n, float scale, float offset) {
        if (random)
          random_tensor(dst, name, n, scale, offset);
        else
          upload(dst, name, n);
      };
  if (tp.size > 1)
    tensor = tp::sliced_weight_loader(
        std::move(tensor),
        tp::SliceContext{full_mc, shard, random, mw.get(), stream,
                         [this](bf16* d, const std::string& nm, std::size_t n, float sc,
                                float off) { random_tensor(d, nm, n, sc, off); },
                         [this](const std::string& nm, const bf16* d, std::size_t n) {
                           by_name[nm] = {d, n};
                         }});
  const float lin = 1.0f / std::sqrt(static_cast<float>(h));
  // fp8: each layer's four matrices are filled in bf16 into one staging buffer (so a model whose
  // bf16 weights would not fit, 70B, still loads), then quantized per output channel; the
  // staging buffer is reused by the next layer once the stream has drained.
  const std::size_t qkv_n = qkv_dim * h, o_n = h * q_dim, gu_n = 2 * in * h, down_n = h * in;
  DeviceArray<bf16> stage(fp8 && !preq ? qkv_n + o_n + gu_n + down_n : 0);
  // Pre-quantized: the parts of one fused matrix (rows stacked) from the checkpoint: codes and
  // per-row scales copied as stored (W8A8), or dequantized to bf16 (weight-only: fl(e4m3 · s),
  // then bf16 rounding; the CPU backend keeps it in fp32).
  const auto upload_prequantized = [&](Fp8Rows dst8, bf16* dst16, std::size_t rows,
                                       std::size_t cols,
                                       std::initializer_list<const Fp8Weight*> parts) {
    std::size_t row = 0;
    for (const Fp8Weight* w : parts) {
      const TensorView& c = *w->codes;
      const auto r = static_cast<std::size_t>(c.shape.at(0));
      if (c.shape.size() != 2 || static_cast<std::size_t>(c.shape[1]) != cols || row + r > rows)
        throw ModelError(c.file + ": tensor " + c.name + " does not fit its fused matrix");
      const std::vector<float> sc = w->row_scales();
      if (dst8.codes) {
        CUDA_CHECK(cudaMemcpy(dst8.codes + row * cols, c.data, r * cols, cudaMemcpyHostToDevice));
        CUDA_CHECK(
            cudaMemcpy(dst8.scale + row, sc.data(), r * sizeof(float), cudaMemcpyHostToDevice));
      } else {
        const std::vector<float> f = c.to_float();  // the unscaled decoded codes
        staging.resize(r * cols);
        for (std::size_t i = 0; i < r * cols; ++i) staging[i] = float_to_bf16(f[i] * sc[i / cols]);
        CUDA_CHECK(
            cudaMemcpy(dst16 + row * cols, staging.data(), r * cols * 2, cudaMemcpyHostToDevice));
      }
      row += r;
    }
    if (row != rows)
      throw ModelError(mw->dir() + ": the parts of a fused matrix have " + std::to_string(row) +
                       " rows, expected " + std::to_string(rows));
  };
  embed = alloc_weight(V * h);
  tensor(embed, "model.embed_tokens.weight", V * h, 1.0f, 0.0f);
  for (int l = 0; l < mc.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerDev d{};
    d.input_norm = alloc_weight(h);
    d.post_norm = alloc_weight(h);
    if (preq) {
      const Fp8LayerWeights& f = mw->layer(l).fp8;
      tensor(d.input_norm, p + "input_layernorm.weight", h, 0.1f, 1.0f);
      tensor(d.post_norm, p + "post_attention_layernorm.weight", h, 0.1f, 1.0f);
      Fp8Rows qkv8{}, o8{}, gu8{}, down8{};
      if (fp8) {
        qkv8 = d.qkv8 = alloc_fp8(qkv_dim, h);
        o8 = d.o8 = alloc_fp8(h, q_dim);
        gu8 = d.gate_up8 = alloc_fp8(2 * in, h);
        down8 = d.down8 = alloc_fp8(h, in);
        if (mw->quantization().activations == ActivationScales::kStaticTensor) {
          d.qkv_in = std::max(
              {f.q.static_input_scale(), f.k.static_input_scale(), f.v.static_input_scale()});
          d.o_in = f.o.static_input_scale();
          d.gate_up_in = std::max(f.gate.static_input_scale(), f.up.static_input_scale());
          d.down_in = f.down.static_input_scale();
        }
      } else {
        d.qkv = alloc_weight(qkv_n);
        d.o = alloc_weight(o_n);
        d.gate_up = alloc_weight(gu_n);
        d.down = alloc_weight(down_n);
      }
      upload_prequantized(qkv8, d.qkv, qkv_dim, h, {&f.q, &f.k, &f.v});
      upload_prequantized(o8, d.o, h, q_dim, {&f.o});
      upload_prequantized(gu8, d.gate_up, 2 * in, h, {&f.gate, &f.up});
      upload_prequantized(down8, d.down, h, in, {&f.down});
      layers.push_back(d);
      continue;
    }
    if (fp8) {
      CUDA_CHECK(cudaStreamSynchronize(stream));  // the previous layer's quantization is done
      d.qkv = stage.get();
      d.o = d.qkv + qkv_n;
      d.gate_up = d.o + o_n;
      d.down = d.gate_up + gu_n;
    } else {
      d.qkv = alloc_weight(qkv_n);
      d.o = alloc_weight(o_n);
      d.gate_up = alloc_weight(gu_n);
      d.down = alloc_weight(down_n);
    }
    tensor(d.input_norm, p + "input_layernorm.weight", h, 0.1f, 1.0f);
    tensor(d.qkv, p + "self_attn.q_proj.weight", q_dim * h, lin, 0.0f);
    tensor(d.qkv + q_dim * h, p + "self_attn.k_proj.weight", kv_dim * h, lin, 0.0f);
    tensor(d.qkv + (q_dim + kv_dim) * h, p + "self_attn.v_proj.weight", kv_dim * h, lin, 0.0f);
    tensor(d.o, p + "self_attn.o_proj.weight", h * q_dim,
           1.0f / std::sqrt(static_cast<float>(full_mc.q_dim())), 0.0f);  // whole-model scale
    tensor(d.post_norm, p + "post_attention_layernorm.weight", h, 0.1f, 1.0f);
    tensor(d.gate_up, p + "mlp.gate_proj.weight", in * h, lin, 0.0f);
    tensor(d.gate_up + in * h, p + "mlp.up_proj.weight", in * h, lin, 0.0f);
    tensor(d.down, p + "mlp.down_proj.weight", h * in,
           1.0f / std::sqrt(static_cast<float>(full_mc.intermediate_size)), 0.0f);
    if (fp8) {
      const auto quantize = [&](const bf16* w, std::size_t rows, std::size_t cols) {
        const Fp8Rows q = alloc_fp8(rows, cols);
        launch_quantize_rows(w, static_cast<long long>(cols), static_cast<int>(rows),
                             static_cast<int>(cols), q, stream);
        return q;
      };
      d.qkv8 = quantize(d.qkv, qkv_dim, h);
      d.o8 = quantize(d.o, h, q_dim);
      d.gate_up8 = quantize(d.gate_up, 2 * in, h);
      d.down8 = quantize(d.down, h, in);
      d.qkv = d.o = d.gate_up = d.down = nullptr;
      for (const char* n : {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                            "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                            "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
        by_name.erase(p + n);  // the staging buffer is not kept
    }
    layers.push_back(d);
  }
  final_norm = alloc_weight(h);
  tensor(final_norm, "model.norm.weight", h, 0.1f, 1.0f);
  if (tp.size > 1) {
    // The rank's vocabulary slice, padded with zero rows to vocab_slice (equal all-gathers).
    const std::size_t vs = shard.vocab_slice, vl = shard.vocab;
    lm_head = alloc_weight(vs * h);
    CUDA_CHECK(cudaMemsetAsync(lm_head, 0, vs * h * 2, stream));
    if (mc.tie_word_embeddings)
      CUDA_CHECK(cudaMemcpyAsync(lm_head, embed + static_cast<std::size_t>(shard.vocab_begin) * h,
                                 vl * h * 2, cudaMemcpyDeviceToDevice, stream));
    else if (vl > 0)
      tensor(lm_head, "lm_head.weight", vl * h, lin, 0.0f);
  } else if (mc.tie_word_embeddings) {
    lm_head = embed;
  } else {
    lm_head = alloc_weight(V * h);
    tensor(lm_head, "lm_head.weight", V * h, lin, 0.0f);
  }
  const std::vector<double> inv = mc.rope_inv_freq();
  inv_freq = DeviceArray<double>(inv.size());
  CUDA_CHECK(
      cudaMemcpy(inv_freq.get(), inv.data(), inv.size() * sizeof(double), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::size_t bytes = 0;
  for (const auto& a : owned) bytes += a.bytes();
  for (const auto& a : owned8) bytes += a.bytes();
  for (const auto& a : owned_f32) bytes += a.bytes();
  binfo.weight_bytes = bytes;
}

}  // namespace strata::cuda
