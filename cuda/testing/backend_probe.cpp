// Test and benchmark hooks of the CUDA backend (see the header).
#include "cuda/testing/backend_probe.h"

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/attention.h"
#include "cuda/backend/backend_impl.h"
#include "runtime/error.h"
#include "runtime/model/make_model.h"

namespace strata::cuda {

CudaBackendProbe::CudaBackendProbe(CudaBackend& be) : b_(*be.impl_) {}

namespace {
// A setting the captured graphs bake in changes: they are dropped (recaptured on next use).
void drop_graphs(CudaBackendImpl& b) {
  CUDA_CHECK(cudaSetDevice(b.device));
  for (auto& [k, g] : b.graphs) CUDA_CHECK(cudaGraphExecDestroy(g));
  b.graphs.clear();
}
// A setting the graphs bake in: a change drops them first.
template <typename T>
void set_baked(CudaBackendImpl& b, T& field, T value) {
  if (field == value) return;
  drop_graphs(b);
  field = value;
}
}  // namespace

std::vector<float> CudaBackendProbe::weight_to_host(const std::string& name) const {
  auto it = b_.by_name.find(name);
  if (it == b_.by_name.end()) throw ModelError("CUDA backend: no weight named " + name);
  CUDA_CHECK(cudaSetDevice(b_.device));
  std::vector<std::uint16_t> raw(it->second.second);
  CUDA_CHECK(cudaMemcpy(raw.data(), it->second.first, raw.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) out[i] = bf16_to_float(raw[i]);
  return out;
}
void CudaBackendProbe::set_cuda_graphs(bool on) {
  b_.use_graphs = on;
}
void CudaBackendProbe::set_sparse_graphs(bool on) {
  b_.sparse_graphs = on;
}
void CudaBackendProbe::set_device_tables(bool on) {
  b_.device_tables = on;  // (the planner forgets the resident tables when it comes back on)
}
std::vector<int> CudaBackendProbe::read_tables() const {
  CUDA_CHECK(cudaSetDevice(b_.device));
  CUDA_CHECK(cudaStreamSynchronize(b_.stream));
  std::vector<int> out(b_.d_tables.size());
  CUDA_CHECK(
      cudaMemcpy(out.data(), b_.d_tables.get(), b_.d_tables.bytes(), cudaMemcpyDeviceToHost));
  return out;
}
void CudaBackendProbe::set_decode_splits(int n) {
  if (n < 0 || n > kMaxDecodeSplits)
    throw InternalError("set_decode_splits: " + std::to_string(n) + " outside 0.." +
                        std::to_string(kMaxDecodeSplits));
  b_.forced_splits = n;
}
void CudaBackendProbe::set_score_update_from_logits(bool on) {
  set_baked(b_, b_.score_from_logits, on);
}
void CudaBackendProbe::set_sparse_side(bool on) {
  set_baked(b_, b_.sparse_side, on);
}
bool CudaBackendProbe::sparse_side() const {
  return b_.sparse_side;
}
void CudaBackendProbe::set_graph_skip(const std::string& pattern) {
  set_baked(b_, b_.graph_skip, pattern);
}
int CudaBackendProbe::graph_skipped() const {
  return b_.graph_skipped;
}
std::map<std::string, int> CudaBackendProbe::graph_kernels() const {
  return b_.graph_kernels;
}
void CudaBackendProbe::set_score_in_attention(bool on) {
  set_baked(b_, b_.score_in_attention, on);
}
bool CudaBackendProbe::score_in_attention() const {
  return b_.score_in_attention;
}
void CudaBackendProbe::set_resolve_in_rope(bool on) {
  set_baked(b_, b_.resolve_in_rope, on);
}
bool CudaBackendProbe::resolve_in_rope() const {
  return b_.resolve_in_rope;
}
void CudaBackendProbe::set_prefill_fusion(bool on) {
  set_baked(b_, b_.vec_kernels, on);
}
bool CudaBackendProbe::prefill_fusion() const {
  return b_.vec_kernels;
}
void CudaBackendProbe::set_residual_epilogue(bool on) {
  b_.resid_epilogue = on;
}
bool CudaBackendProbe::residual_epilogue() const {
  return b_.resid_epilogue;
}
void CudaBackendProbe::set_decode_fusion(int mode) {
  set_baked(b_, b_.decode_fusion, mode);
}
int CudaBackendProbe::decode_fusion() const {
  return b_.decode_fusion;
}
void CudaBackendProbe::set_skinny_gemm(bool on) {
  if (b_.gemm->skinny() == on) return;
  drop_graphs(b_);
  b_.gemm->set_skinny(on);
}
void CudaBackendProbe::set_mixed_overlap(int mode) {
  if (mode < 0 || mode > 3)
    throw InternalError("set_mixed_overlap: " + std::to_string(mode) + " outside 0..3");
  b_.mixed_overlap = mode;
}
int CudaBackendProbe::mixed_overlap() const {
  return b_.mixed_overlap;
}
void CudaBackendProbe::set_forward_profile(bool on) {
  CUDA_CHECK(cudaSetDevice(b_.device));
  b_.prof_on = false;
  if (on)
    b_.profile = std::make_unique<ForwardProfile>();
  else
    b_.profile.reset();
}
CudaBackendProbe::ForwardBreakdown CudaBackendProbe::forward_profile() const {
  ForwardBreakdown r;
  if (!b_.profile) return r;
  for (int i = 0; i < static_cast<int>(KernelClass::kCount); ++i) {
    r.names.emplace_back(kernel_class_name(static_cast<KernelClass>(i)));
    r.ms.push_back(b_.profile->ms[static_cast<std::size_t>(i)]);
  }
  r.forwards = b_.profile->forwards;
  r.step_ms = b_.profile->step_ms;
  return r;
}
void CudaBackendProbe::set_layer_taps(bool on) {
  CudaBackendImpl& b = b_;
  CUDA_CHECK(cudaSetDevice(b.device));
  if (on && b.tap_qkv.size() == 0) {
    const std::size_t L = static_cast<std::size_t>(b.mc.num_hidden_layers);
    b.tap_qkv = DeviceArray<bf16>(L * b.max_tokens * b.qkv_dim);
    b.tap_attn = DeviceArray<bf16>(L * b.max_tokens * b.q_dim);
    b.tap_lse = DeviceArray<float>(L * b.max_seqs * b.mc.num_attention_heads);
  }
  b.taps = on;
}
std::vector<CudaBackendProbe::LayerTap> CudaBackendProbe::layer_taps() const {
  const CudaBackendImpl& b = b_;
  if (!b.taps) throw InternalError("layer_taps: taps are off (set_layer_taps(true) first)");
  CUDA_CHECK(cudaSetDevice(b.device));
  std::vector<LayerTap> out(static_cast<std::size_t>(b.mc.num_hidden_layers));
  for (std::size_t l = 0; l < out.size(); ++l) {
    LayerTap& t = out[l];
    t.rows = b.tap_rows;
    const std::size_t lt = l * b.max_tokens;
    t.qkv.resize(static_cast<std::size_t>(b.tap_rows) * b.qkv_dim);
    t.attn.resize(static_cast<std::size_t>(b.tap_rows) * b.q_dim);
    CUDA_CHECK(cudaMemcpy(t.qkv.data(), b.tap_qkv.get() + lt * b.qkv_dim, t.qkv.size() * 2,
                          cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(t.attn.data(), b.tap_attn.get() + lt * b.q_dim, t.attn.size() * 2,
                          cudaMemcpyDeviceToHost));
    if (b.tap_has_lse) {
      t.dec_lse.resize(static_cast<std::size_t>(b.tap_dec_rows) * b.mc.num_attention_heads);
      CUDA_CHECK(cudaMemcpy(t.dec_lse.data(),
                            b.tap_lse.get() + l * b.max_seqs * b.mc.num_attention_heads,
                            t.dec_lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
    }
  }
  return out;
}
std::vector<std::uint16_t> CudaBackendProbe::read_kv_pages(const std::vector<int>& pages) const {
  const CudaBackendImpl& b = b_;
  CUDA_CHECK(cudaSetDevice(b.device));
  if (b.kv8) throw InternalError("read_kv_pages: the pool holds e4m3 codes (cache.kv_dtype fp8)");
  const std::size_t pe = b.binfo.layout.page_elems();
  std::vector<std::uint16_t> out(pages.size() * pe);
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] < 0 || pages[i] >= b.binfo.num_pages + b.scratch_pages)
      throw InternalError("read_kv_pages: page " + std::to_string(pages[i]) + " outside the pool");
    CUDA_CHECK(cudaMemcpy(out.data() + i * pe, b.kv_pool.get() + pages[i] * pe, pe * 2,
                          cudaMemcpyDeviceToHost));
  }
  return out;
}
std::vector<float> CudaBackendProbe::read_score_pages(const std::vector<int>& pages) const {
  const CudaBackendImpl& b = b_;
  CUDA_CHECK(cudaSetDevice(b.device));
  const std::size_t se = b.binfo.layout.score_elems();
  std::vector<float> out(pages.size() * se);
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] < 0 || pages[i] >= b.binfo.num_pages + b.scratch_pages)
      throw InternalError("read_score_pages: page " + std::to_string(pages[i]) +
                          " outside the pool");
    CUDA_CHECK(cudaMemcpy(out.data() + i * se, b.score_pool.get() + pages[i] * se,
                          se * sizeof(float), cudaMemcpyDeviceToHost));
  }
  return out;
}
void CudaBackendProbe::fill_kv_random(unsigned long long seed, float scale) {
  CudaBackendImpl& b = b_;
  CUDA_CHECK(cudaSetDevice(b.device));
  if (b.kv8) throw InternalError("fill_kv_random: the pool holds e4m3 codes (cache.kv_dtype fp8)");
  launch_random_fill({b.kv_pool.get(), static_cast<long long>(b.kv_pool.size()), seed,
                      0x6b765f706f6f6cull /* "kv_pool" */, scale, 0.0f},
                     b.stream);
  CUDA_CHECK(cudaStreamSynchronize(b.stream));
}
const KvScales& CudaBackendProbe::kv_scales() const {
  return b_.kv_scales;
}
int CudaBackendProbe::graphs_captured() const {
  return static_cast<int>(b_.graphs.size());
}
CudaBackendProbe::AsyncCounts CudaBackendProbe::async_counts() const {
  return {b_.async_device_steps.load(), b_.async_host_steps.load(), b_.async_fed_rows.load(),
          b_.async_overlapped.load()};
}
std::size_t CudaBackendProbe::activation_bytes() const {
  return b_.activation_bytes;
}
std::size_t CudaBackendProbe::kv_pool_bytes() const {
  return b_.kv_bytes;
}

}  // namespace strata::cuda
