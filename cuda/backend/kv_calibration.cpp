// The FP8 KV cache's scales of a `random:` model, calibrated on the device (docs/kv-fp8.md
// "Scales"): its weights exist only on the GPU, so the CPU calibration that serves checkpoints
// (cpu_kv_scales on the host weights) cannot run. The backend is built with a bf16 pool, runs
// runtime/kv_scales.h's calibration prompts through its own forward (calibrate_kv_scales: one
// prefill step per prompt, every layer full), and reads each layer's K/V rows back from the pool
// pages: amax per (layer, KV head) of the stored (post-RoPE, bf16) values, the scale rule of
// kv_scale_from_amax. Then the bf16 pool goes and the e4m3 pool of the same budget takes its
// place. The same prompts and rule as the CPU calibration: on identical weights (make-model
// writes them bit for bit) the scales agree except where an amax lies within the two backends'
// arithmetic difference of a power-of-two boundary (tests/gpu/kv_fp8_test.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cuda/backend/backend_impl.h"
#include "runtime/backend.h"
#include "runtime/error.h"
#include "runtime/kv_scales.h"
#include "runtime/model/safetensors.h"

namespace strata::cuda {

namespace {

// calibrate_kv_scales' view of the backend: its steps, then the amax of what they stored.
class DeviceCalibration final : public Backend {
 public:
  DeviceCalibration(CudaBackendImpl& impl, KvAmax& amax) : impl_(impl), amax_(amax) {}
  const BackendInfo& info() const override { return impl_.binfo; }
  const ModelConfig& model() const override { return impl_.full_mc; }
  StepResult step(const StepPlan& plan) override {
    StepResult r = impl_.step(plan);
    const KvLayout& lay = impl_.binfo.layout;  // bf16 while calibrating
    const int hd = lay.head_dim;
    std::vector<std::uint16_t> page(lay.page_elems());
    std::vector<float> k(static_cast<std::size_t>(hd)), v(static_cast<std::size_t>(hd));
    for (const SeqStep& s : plan.seqs) {
      const int len = s.start + static_cast<int>(s.tokens.size());
      for (std::size_t l = 0; l < s.layers.size(); ++l) {
        const auto& pages = s.layers[l].pages;
        for (std::size_t p = 0; p < pages.size(); ++p) {
          const int first = static_cast<int>(p) * kBlockSize;
          if (first >= len) break;
          CUDA_CHECK(cudaMemcpyAsync(
              page.data(),
              impl_.kv_pool.get() + static_cast<std::size_t>(pages[p]) * lay.page_elems(),
              lay.page_bytes(), cudaMemcpyDeviceToHost, impl_.stream));
          CUDA_CHECK(cudaStreamSynchronize(impl_.stream));
          for (int slot = 0; slot < kBlockSize && first + slot < len; ++slot)
            for (int g = 0; g < lay.kv_heads; ++g) {
              const std::uint16_t* kp = page.data() + lay.k_offset(g, slot);
              const std::uint16_t* vp = page.data() + lay.v_offset(g, slot);
              for (int d = 0; d < hd; ++d) {
                k[static_cast<std::size_t>(d)] = bf16_to_float(kp[d]);
                v[static_cast<std::size_t>(d)] = bf16_to_float(vp[d]);
              }
              amax_.observe(static_cast<int>(l), g, k.data(), v.data(), hd);
            }
        }
      }
    }
    return r;
  }

 private:
  CudaBackendImpl& impl_;
  KvAmax& amax_;
};

}  // namespace

void CudaBackendImpl::calibrate_kv_on_device() {
  STRATA_CHECK(kv_calibrate_on_device && !kv8 && tp.size == 1,
               "calibrate_kv_on_device: only for a tp_size 1 fp8 backend built with a bf16 pool");
  // The CPU calibration's prompts (cpu_kv_scales: max_len = max_position_embeddings).
  const int model_len = static_cast<int>(full_mc.max_position_embeddings);
  const int len = std::max(1, std::min(kKvCalibrationLen, model_len));
  if (len > max_tokens)
    throw ConfigError("scheduler.max_num_batched_tokens",
                      "the fp8 KV calibration of a random model runs prompts of " +
                          std::to_string(len) + " tokens in one step; the step holds " +
                          std::to_string(max_tokens));
  KvAmax amax(full_mc.num_hidden_layers, full_mc.num_key_value_heads);
  DeviceCalibration run(*this, amax);
  kv_scales = calibrate_kv_scales(run, amax, model_len);  // ConfigError when the pool is small
  kv_scales.source = "calibrated on the device";
  // The e4m3 pool in place of the bf16 one, with the same budget: release first (the plan sizes
  // itself by the free memory), then plan it as the constructor would have.
  CUDA_CHECK(cudaStreamSynchronize(stream));
  kv_pool = DeviceArray<bf16>();
  score_pool = DeviceArray<float>();
  pos_pool = DeviceArray<std::int32_t>();
  kv8 = true;
  kv_calibrate_on_device = false;
  upload_kv_scales();
  plan_kv_pool();
  planner = std::make_unique<StepPlanner>(step_limits());  // num_pages changed
  binfo.layout = KvLayout{mc.num_key_value_heads, mc.head_dim, 1};
}

}  // namespace strata::cuda
